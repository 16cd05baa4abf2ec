"""Rebuild a partition's scheduler state from the scheduler's own committed outputs.

The journal partition holds every accepted entry (run, seq, hash, stage,
evidence set, submission id) and every seal (sealed count, closed flag); the
last audit record holds the audit chain's sequence number and head; the last
checkpoint holds the checkpoint chain's length and head and the audit length
it covered. Folding them gives exactly the state the scheduler had after its
last committed transaction, so redundancy memory, the submission ids a retry
may repeat, chain heads, each run's evidence total (the declared sizes of its
distinct blobs, from JournalEntry.v2 and ComputerUseEntry.v2), the audit head
and the checkpoint chain survive restarts. The fold is pure: the shell
feeds it the records it read.

The fold re-checks what it reads: entry hashes, chain links, every seal's
Ed25519 signature (by this scheduler's key), the audit MAC (``AuditRecord``
v1 or v2) and the last checkpoint's signature. Outputs that do
not recompute mean someone else wrote to the scheduler's topics, and the
scheduler refuses to extend a chain it cannot vouch for: ``StateCorrupted``
names the exact record (topic, partition and offset when the shell passes
offsets) and what an operator can do (README, "When the scheduler will not
start"). An operator who has inspected such a record can quarantine it
(``bernstein scheduler run --quarantine OFFSET``): the fold then skips the
journal offsets in ``quarantined`` (the verifier still reports them).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from consumers.core.model import SchedulerConfig, SchedulerState, SessionState
from consumers.core.step import charge_evidence, initial_state
from schemas import codec
from schemas.canonical import (
    audit_mac,
    audit_record_mac,
    checkpoint_hash,
    checkpoint_signing_input,
    computer_use_genesis,
    journal_entry_hash,
    macs_equal,
    seal_signing_input,
)
from schemas.errors import BernsteinError
from schemas.records import ENTRY_COMPUTER_USE_ACTION

_JOURNAL_SCHEMAS = frozenset({codec.JOURNAL_RECORD, codec.SEAL_RECORD})
_ENTRY_SCHEMAS = codec.JOURNAL_ENTRIES | codec.COMPUTER_USE_ENTRIES

OPERATOR_HINT = (
    "The scheduler will not extend a chain it cannot vouch for. Inspect the record "
    "(kcat -C -t {topic} -p {partition} -o {offset} -c 1). If the scheduler's signing or audit key "
    "changed, start it with the keys that wrote this partition. If this scheduler did not write the "
    "record, it was forged or edited: keep the topic as it is (`bernstein activity verify` reports the "
    "runs it touches) and quarantine the record so the rebuild skips it: `bernstein scheduler run "
    "--partition {partition} --quarantine {offset}` (README, 'When the scheduler will not start')."
)
"""What StateCorrupted tells an operator; see README, "When the scheduler will not start"."""


class StateCorrupted(BernsteinError):
    """The scheduler's own output topics do not recompute; it will not extend them.

    ``topic``, ``partition`` and ``offset`` name the record (``offset`` is None
    when the caller passed bare values: then ``index`` is its position among them).
    """

    code = "E_STATE_CORRUPTED"

    def __init__(self, problem: str, *, topic: str, partition: int, offset: int | None, index: int | None = None) -> None:
        self.problem = problem
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.index = index
        shown = str(offset) if offset is not None else "<offset>"
        hint = OPERATOR_HINT.format(topic=topic, partition=partition, offset=shown)
        super().__init__(f"{self.where}: {problem}. {hint}")

    @property
    def where(self) -> str:
        """``topic[partition]@offset``; without an offset, the record's index (or "last record")."""
        if self.offset is not None:
            return f"{self.topic}[{self.partition}]@{self.offset}"
        if self.index is not None:
            return f"{self.topic}[{self.partition}] record #{self.index} (offset not given)"
        return f"{self.topic}[{self.partition}] last record (offset not given)"


def rebuild_state(
    config: SchedulerConfig,
    partition: int,
    journal_values: Iterable[bytes | tuple[int, bytes]],
    last_audit_value: bytes | tuple[int, bytes] | None,
    *,
    journal_topic: str = "journal",
    audit_topic: str = "audit",
    quarantined: Collection[int] = (),
    last_checkpoint_value: bytes | tuple[int, bytes] | None = None,
    checkpoints_topic: str = "checkpoints",
) -> SchedulerState:
    """Fold journal record values (in offset order), the last audit record value and the last checkpoint value.

    Each value may come with its offset, as ``(offset, value)``: errors then name it
    exactly. Journal records at an offset in ``quarantined`` are skipped.
    """
    state = initial_state(config, partition)
    c = codec.default_codec()
    for index, item in enumerate(journal_values):
        offset, value = item if isinstance(item, tuple) else (None, item)
        if offset is not None and offset in quarantined:
            continue
        try:
            decoded = c.decode(value, expect=_JOURNAL_SCHEMAS)
            if decoded.schema.name == codec.JOURNAL_RECORD:
                problem = _apply_entry(state, c, decoded.record)
            else:
                problem = _apply_seal(state, config, c, decoded.record)
        except codec.DecodeError as exc:
            problem = f"the journal record does not decode ({exc})"
        if problem is not None:
            raise StateCorrupted(problem, topic=journal_topic, partition=partition, offset=offset, index=index)
    if last_audit_value is not None:
        offset, value = last_audit_value if isinstance(last_audit_value, tuple) else (None, last_audit_value)

        def corrupted(problem: str) -> StateCorrupted:
            return StateCorrupted(problem, topic=audit_topic, partition=partition, offset=offset)

        try:
            decoded = c.decode(value, expect=codec.AUDIT_RECORDS)
            envelope = decoded.record
            entry = c.decode(envelope["payload"], expect=frozenset({codec.AUDIT_ENTRY, codec.AUDIT_ENTRY_V2})).record
        except codec.DecodeError as exc:
            raise corrupted(f"the last audit record does not decode ({exc})") from exc
        if decoded.schema.name == codec.AUDIT_RECORD_V2:
            if envelope["key_id"] != config.audit_key_id:
                raise corrupted(
                    f"the last audit record names audit key {envelope['key_id'][:80]!r}, not this scheduler's {config.audit_key_id!r}"
                )
            recomputed = audit_record_mac(config.audit_key, envelope["key_id"], envelope["payload"])
        else:
            recomputed = audit_mac(config.audit_key, envelope["payload"])
        if not macs_equal(recomputed, envelope["mac"]):
            raise corrupted("the last audit record fails its MAC: the audit key changed or the record was edited")
        state.audit_seq = entry["seq"] + 1
        state.audit_head = envelope["mac"]
    if last_checkpoint_value is not None:
        _apply_checkpoint(state, config, c, last_checkpoint_value, checkpoints_topic)
    return state


def _apply_checkpoint(
    state: SchedulerState, config: SchedulerConfig, c: codec.Codec, item: bytes | tuple[int, bytes], topic: str
) -> None:
    """Restore the checkpoint chain from its last record (signed by this scheduler, within the audit chain)."""
    offset, value = item if isinstance(item, tuple) else (None, item)

    def corrupted(problem: str) -> StateCorrupted:
        return StateCorrupted(problem, topic=topic, partition=state.partition, offset=offset)

    try:
        envelope = c.decode(value, expect=frozenset({codec.CHECKPOINT_RECORD})).record
        checkpoint = c.decode(envelope["payload"], expect=frozenset({codec.PARTITION_CHECKPOINT})).record
    except codec.DecodeError as exc:
        raise corrupted(f"the last checkpoint does not decode ({exc})") from exc
    payload = envelope["payload"]
    if (
        envelope["key_id"] != config.signer.key_id
        or config.signer.sign(checkpoint_signing_input(payload)) != envelope["signature"]
    ):
        raise corrupted(f"the last checkpoint is not signed by this scheduler's key {config.signer.key_id!r}")
    if checkpoint["partition"] != state.partition or checkpoint["audit_seq"] > state.audit_seq:
        raise corrupted(
            f"the last checkpoint (partition {checkpoint['partition']}, audit seq {checkpoint['audit_seq']}) does not belong "
            f"to partition {state.partition}'s audit chain of {state.audit_seq} records"
        )
    if checkpoint["audit_seq"] == state.audit_seq and not macs_equal(checkpoint["audit_head"], state.audit_head):
        raise corrupted(f"the last checkpoint commits audit head {checkpoint['audit_head']!r}, not the last audit record's MAC")
    state.checkpoint_seq = checkpoint["seq"] + 1
    state.checkpoint_head = checkpoint_hash(payload)
    state.checkpoint_audit_seq = checkpoint["audit_seq"]


def _apply_entry(state: SchedulerState, c: codec.Codec, envelope: dict[str, object]) -> str | None:
    payload = envelope["payload"]
    assert isinstance(payload, bytes)
    try:
        entry = c.decode(payload, expect=_ENTRY_SCHEMAS).record
    except codec.DecodeError as exc:
        return f"the journal entry's payload does not decode ({exc})"
    run_id = entry["run_id"]
    run = state.run_for(run_id)
    if entry["seq"] != run.entry_count or entry["prev_hash"] != run.head:
        return f"the journal of run {run_id!r} does not chain at seq {entry['seq']} (expected seq {run.entry_count} after {run.head})"
    entry_hash = journal_entry_hash(payload)
    if entry_hash != envelope["entry_hash"]:
        return f"journal entry seq {entry['seq']} of run {run_id!r} does not recompute its entry_hash"
    run.head = entry_hash
    run.entry_count += 1
    if entry["entry_type"] == ENTRY_COMPUTER_USE_ACTION:
        run.submissions[entry["submission_id"]] = entry["session_id"]
        session = run.sessions.get(entry["session_id"])
        if session is None:
            session = SessionState(0, computer_use_genesis(run_id, entry["session_id"]))
            run.sessions[entry["session_id"]] = session
        session.next_index = entry["action_index"] + 1
        session.last_anchor = entry["anchor"]
        if "screenshot_size" in entry:  # ComputerUseEntry.v2
            charge_evidence(run, [(entry["screenshot_hash"], entry["screenshot_size"]), (entry["dom_digest"], entry["dom_size"])])
        return None
    run.submissions[entry["submission_id"]] = entry["stage_id"]
    run.stages[entry["stage_id"]] = entry["evidence_set_hash"]
    if entry["observations"]:
        run.evidence.setdefault(entry["evidence_set_hash"], entry["stage_id"])
        if "size" in entry["observations"][0]:  # JournalEntry.v2
            charge_evidence(run, [(o["content_hash"], o["size"]) for o in entry["observations"]])
    if entry["kind"] == "browser":
        session = run.sessions.get(entry["stage_id"])
        if session is None:
            run.sessions[entry["stage_id"]] = SessionState(0, computer_use_genesis(run_id, entry["stage_id"]), closed=True)
        else:
            session.closed = True
    return None


def _apply_seal(state: SchedulerState, config: SchedulerConfig, c: codec.Codec, envelope: dict[str, object]) -> str | None:
    payload, key_id, signature = envelope["payload"], envelope["key_id"], envelope["signature"]
    assert isinstance(payload, bytes) and isinstance(key_id, str) and isinstance(signature, bytes)
    if key_id != config.signer.key_id:
        return f"the seal is signed by key {key_id[:80]!r}, not by this scheduler's key {config.signer.key_id!r}"
    # Ed25519 is deterministic (RFC 8032): our key signs these bytes to exactly one signature.
    if config.signer.sign(seal_signing_input(payload)) != signature:
        return f"the seal's signature is not this scheduler's (key {key_id!r}) over its payload"
    try:
        seal = c.decode(payload, expect=frozenset({codec.RUN_SEAL})).record
    except codec.DecodeError as exc:
        return f"the seal's payload does not decode ({exc})"
    run = state.run_for(seal["run_id"])
    run.sealed_count = seal["entry_count"]
    if seal["final"]:
        run.closed = True
    return None
