"""Rebuild a partition's scheduler state from the scheduler's own committed outputs.

The journal partition holds every accepted entry (run, seq, hash, stage,
evidence set) and every seal (sealed count, closed flag); the last audit
record holds the audit chain's sequence number and head. Folding them gives
exactly the state the scheduler had after its last committed transaction,
so redundancy memory, chain heads and the audit head survive restarts. The
fold is pure: the shell feeds it the records it read.

The fold re-checks what it reads (entry hashes, chain links, the audit MAC):
outputs that do not recompute mean someone edited the scheduler's topics,
and the scheduler refuses to extend a chain it cannot vouch for.
"""

from __future__ import annotations

from collections.abc import Iterable

from consumers.core.model import SchedulerConfig, SchedulerState, SessionState
from consumers.core.step import initial_state
from schemas import codec
from schemas.canonical import audit_mac, computer_use_genesis, journal_entry_hash, macs_equal
from schemas.errors import BernsteinError
from schemas.records import ENTRY_COMPUTER_USE_ACTION

_JOURNAL_SCHEMAS = frozenset({codec.JOURNAL_RECORD, codec.SEAL_RECORD})
_ENTRY_SCHEMAS = frozenset({codec.JOURNAL_ENTRY, codec.COMPUTER_USE_ENTRY})


class StateCorrupted(BernsteinError):
    """The scheduler's own output topics do not recompute; it will not extend them."""

    code = "E_STATE_CORRUPTED"


def rebuild_state(
    config: SchedulerConfig,
    partition: int,
    journal_values: Iterable[bytes],
    last_audit_value: bytes | None,
) -> SchedulerState:
    """Fold journal record values (in offset order) and the last audit record value."""
    state = initial_state(config, partition)
    c = codec.default_codec()
    for index, value in enumerate(journal_values):
        try:
            decoded = c.decode(value, expect=_JOURNAL_SCHEMAS)
            if decoded.schema.name == codec.JOURNAL_RECORD:
                _apply_entry(state, c, decoded.record)
            else:
                _apply_seal(state, c, decoded.record)
        except codec.DecodeError as exc:
            raise StateCorrupted(f"journal record #{index} of partition {partition} does not decode: {exc}") from exc
    if last_audit_value is not None:
        try:
            envelope = c.decode(last_audit_value, expect=frozenset({codec.AUDIT_RECORD})).record
            entry = c.decode(envelope["payload"], expect=frozenset({codec.AUDIT_ENTRY, codec.AUDIT_ENTRY_V2})).record
        except codec.DecodeError as exc:
            raise StateCorrupted(f"last audit record of partition {partition} does not decode: {exc}") from exc
        if not macs_equal(audit_mac(config.audit_key, envelope["payload"]), envelope["mac"]):
            raise StateCorrupted(
                f"last audit record of partition {partition} fails its MAC: the audit key changed or the record was edited"
            )
        state.audit_seq = entry["seq"] + 1
        state.audit_head = envelope["mac"]
    return state


def _apply_entry(state: SchedulerState, c: codec.Codec, envelope: dict[str, object]) -> None:
    payload = envelope["payload"]
    assert isinstance(payload, bytes)
    entry = c.decode(payload, expect=_ENTRY_SCHEMAS).record
    run_id = entry["run_id"]
    run = state.run_for(run_id)
    if entry["seq"] != run.entry_count or entry["prev_hash"] != run.head:
        raise StateCorrupted(
            f"journal of run {run_id!r} does not chain at seq {entry['seq']} (expected seq {run.entry_count} after {run.head})"
        )
    entry_hash = journal_entry_hash(payload)
    if entry_hash != envelope["entry_hash"]:
        raise StateCorrupted(f"journal entry seq {entry['seq']} of run {run_id!r} does not recompute its entry_hash")
    run.head = entry_hash
    run.entry_count += 1
    if entry["entry_type"] == ENTRY_COMPUTER_USE_ACTION:
        session = run.sessions.get(entry["session_id"])
        if session is None:
            session = SessionState(0, computer_use_genesis(run_id, entry["session_id"]))
            run.sessions[entry["session_id"]] = session
        session.next_index = entry["action_index"] + 1
        session.last_anchor = entry["anchor"]
        return
    run.stages[entry["stage_id"]] = entry["evidence_set_hash"]
    if entry["observations"]:
        run.evidence.setdefault(entry["evidence_set_hash"], entry["stage_id"])
    if entry["kind"] == "browser":
        session = run.sessions.get(entry["stage_id"])
        if session is None:
            run.sessions[entry["stage_id"]] = SessionState(0, computer_use_genesis(run_id, entry["stage_id"]), closed=True)
        else:
            session.closed = True


def _apply_seal(state: SchedulerState, c: codec.Codec, envelope: dict[str, object]) -> None:
    payload = envelope["payload"]
    assert isinstance(payload, bytes)
    seal = c.decode(payload, expect=frozenset({codec.RUN_SEAL})).record
    run_id = seal["run_id"]
    run = state.run_for(run_id)
    run.sealed_count = seal["entry_count"]
    if seal["final"]:
        run.closed = True
