"""Rebuild a partition's scheduler state from the scheduler's own committed outputs.

The journal partition holds every accepted entry (run, seq, hash, stage,
evidence set, submission id) and every seal (sealed count, closed flag); the
audit partition holds the HMAC chain (its length and head); the checkpoints
partition holds the signed checkpoint chain (its length, head and the audit
length it covered). Folding them gives exactly the state the scheduler had
after its last committed transaction, so redundancy memory, the submission
ids a retry may repeat, chain heads, each run's evidence total (the declared
sizes of its distinct blobs, from JournalEntry.v2 and ComputerUseEntry.v2),
the audit head and the checkpoint chain survive restarts. A run's final seal reduces it as the
step does (``RunState.close``: a closed run keeps its submission ids, head and counts), so the
rebuilt state is the reduced one the scheduler had. The fold is pure:
the shell feeds it the records it read, and the native core loads the
``SchedulerState`` it returns, so both cores start from the same state.

Only what the scheduler's keys vouch for is adopted: any key of its rings, so the
scheduler restarts across a rotation (an AuditRecord.v2 under the audit key its
``key_id`` names, a seal or checkpoint under the seal key its ``key_id`` names;
a partition's first audit record follows the genesis under its own key). An audit record is
adopted when its MAC verifies under the audit key (``AuditRecord`` v1 or v2)
and it extends the chain (seq and prev_mac); a journal record (entry or seal)
only when the next adopted audit record that mirrors a journal record carries
its run, seq and hash (an entry's hash and chain link are not keyed, so anyone
who can write to the journal topic could forge one); a checkpoint when this
scheduler signed it and it extends the checkpoint chain. Anything else next to
those records (garbage, a forgery, a replayed copy) is not adopted and handed
to ``report`` as a ``Skipped`` naming topic[partition]@offset: the scheduler
logs it and goes on, the verifier still reports it. What still stops the
rebuild (``StateCorrupted``, naming the exact record and, by topic, what an
operator can do; README, "When the scheduler will not start"): an adopted
record that does not recompute (an entry's hash or chain link, a seal's
signature, i.e. a changed key or a leaked audit key), an audit record that
mirrors a journal record the journal does not hold, an audit or checkpoints
partition none of whose records verifies although some decode as the
scheduler's records (a changed key; pure garbage alone is skipped), and a checkpoint that
commits more of the audit chain than the partition holds. An operator who has
inspected a journal record can quarantine it (``bernstein scheduler run
--quarantine OFFSET``): the fold then skips the journal offsets in
``quarantined`` (the verifier still reports them).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from consumers.core.model import SchedulerConfig, SchedulerState, SessionState, Signer
from consumers.core.step import charge_evidence, initial_state
from schemas import codec
from schemas.canonical import (
    audit_genesis,
    audit_mac,
    audit_record_mac,
    checkpoint_hash,
    checkpoint_signing_input,
    computer_use_genesis,
    journal_entry_hash,
    macs_equal,
    seal_signing_input,
    sha256_digest,
)
from schemas.errors import BernsteinError
from schemas.records import ENTRY_COMPUTER_USE_ACTION, AuditEvent

_JOURNAL_SCHEMAS = frozenset({codec.JOURNAL_RECORD, codec.SEAL_RECORD})
_ENTRY_SCHEMAS = codec.JOURNAL_ENTRIES | codec.COMPUTER_USE_ENTRIES
_AUDIT_ENTRIES = frozenset({codec.AUDIT_ENTRY, codec.AUDIT_ENTRY_V2})
_MIRRORS_JOURNAL = frozenset(
    {AuditEvent.ACTIVITY_RESULT.value, AuditEvent.COMPUTER_USE_ACTION.value, AuditEvent.RUN_SEALED.value}
)
"""Audit events whose record mirrors one journal record (an entry's entry_hash, a seal's sha256)."""

_KCAT = "Inspect the record (kcat -C -t {topic} -p {partition} -o {offset} -c 1). "
OPERATOR_HINTS = {
    "journal": _KCAT
    + "The scheduler will not extend a chain it cannot vouch for. If the scheduler's signing or audit key changed, start "
    "it with the keys that wrote this partition. If this scheduler did not write the record, it was forged or edited: "
    "keep the topic as it is (`bernstein activity verify` reports the runs it touches) and quarantine the journal record "
    "so the rebuild skips it: `bernstein scheduler run --partition {partition} --quarantine {offset}` (README, "
    "'When the scheduler will not start').",
    "audit": _KCAT
    + "The scheduler will not extend an audit chain it cannot vouch for. If the scheduler's audit key changed, start it "
    "with the audit key that wrote this partition. If the journal lost a record the audit chain mirrors, restore the "
    "journal; keep the topics as they are (`bernstein activity verify` reports the runs they touch). --quarantine skips "
    "journal offsets only and does not apply to this record (README, 'When the scheduler will not start').",
    "checkpoints": _KCAT
    + "The scheduler will not extend a checkpoint chain it cannot vouch for. If the scheduler's signing key changed, "
    "start it with the key that wrote this partition; a checkpoint that commits more audit records than the audit "
    "partition holds means audit records were lost. Keep the topics as they are (`bernstein activity verify` reports "
    "them). --quarantine skips journal offsets only and does not apply to this record (README, 'When the scheduler will "
    "not start').",
}
"""What StateCorrupted tells an operator, by the kind of topic; see README, "When the scheduler will not start"."""
OPERATOR_HINT = OPERATOR_HINTS["journal"]


class StateCorrupted(BernsteinError):
    """The scheduler's own output topics do not recompute; it will not extend them.

    ``topic``, ``partition`` and ``offset`` name the record (``offset`` is None
    when the caller passed bare values: then ``index`` is its position among them).
    ``kind`` (journal, audit or checkpoints) picks the operator hint.
    """

    code = "E_STATE_CORRUPTED"

    def __init__(
        self, problem: str, *, topic: str, partition: int, offset: int | None, index: int | None = None, kind: str = "journal"
    ) -> None:
        self.problem = problem
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.index = index
        shown = str(offset) if offset is not None else "<offset>"
        hint = OPERATOR_HINTS[kind].format(topic=topic, partition=partition, offset=shown)
        super().__init__(f"{self.where}: {problem}. {hint}")

    @property
    def where(self) -> str:
        """``topic[partition]@offset``; without an offset, the record's index (or "last record")."""
        return _where(self.topic, self.partition, self.offset, self.index)


def _where(topic: str, partition: int, offset: int | None, index: int | None) -> str:
    if offset is not None:
        return f"{topic}[{partition}]@{offset}"
    if index is not None:
        return f"{topic}[{partition}] record #{index} (offset not given)"
    return f"{topic}[{partition}] last record (offset not given)"


@dataclass(frozen=True)
class Skipped:
    """A record the rebuild did not adopt: nothing the scheduler's keys vouch for, next to records they do."""

    topic: str
    partition: int
    offset: int | None
    index: int
    problem: str

    def __str__(self) -> str:
        return f"{_where(self.topic, self.partition, self.offset, self.index)}: {self.problem}; not adopted (README, 'When the scheduler will not start')"


Value = bytes | tuple[int, bytes]
"""A record value, or ``(offset, value)`` so that messages name the record exactly."""


@dataclass(frozen=True)
class _Mirror:
    """A MAC-valid, chain-consistent audit record that mirrors one journal record."""

    offset: int | None
    index: int
    run_id: str
    journal_seq: int
    record_hash: str


def rebuild_state(
    config: SchedulerConfig,
    partition: int,
    journal_values: Iterable[Value],
    audit_values: Iterable[Value],
    *,
    journal_topic: str = "journal",
    audit_topic: str = "audit",
    quarantined: Collection[int] = (),
    checkpoint_values: Iterable[Value] = (),
    checkpoints_topic: str = "checkpoints",
    report: Callable[[Skipped], None] | None = None,
    start: SchedulerState | None = None,
) -> SchedulerState:
    """Fold the journal, audit and checkpoint records of one partition (each in offset order).

    ``start``: a verified snapshot's state (``consumers.core.snapshot``), taken over and
    extended; the three iterables then hold only the records after the snapshot's offsets.

    The three iterables are read once, the journal and the audit side by side
    (memory does not grow with the audit partition). Journal records at an
    offset in ``quarantined`` are skipped. Records the scheduler's keys do not
    vouch for are handed to ``report`` and not adopted (see the module doc).
    """
    state = start if start is not None else initial_state(config, partition)
    c = codec.default_codec()
    skip = report if report is not None else (lambda _skipped: None)
    audit = _AuditWalk(state, config, c, audit_values, audit_topic, skip)
    journal_records = 0
    for index, item in enumerate(journal_values):
        offset, value = item if isinstance(item, tuple) else (None, item)
        if offset is not None and offset in quarantined:
            continue
        journal_records += 1

        def corrupted(problem: str, offset: int | None = offset, index: int = index) -> StateCorrupted:
            return StateCorrupted(problem, topic=journal_topic, partition=partition, offset=offset, index=index)

        try:
            decoded = c.decode(value, expect=_JOURNAL_SCHEMAS)
            identity = _journal_identity(c, decoded.schema.name, decoded.record, value)
        except codec.DecodeError as exc:
            skip(Skipped(journal_topic, partition, offset, index, f"the journal record does not decode ({exc})"))
            continue
        mirror = audit.next_mirror()
        if mirror is None or (mirror.run_id, mirror.journal_seq, mirror.record_hash) != identity:
            audit.put_back(mirror)
            run_id, seq, record_hash = identity
            skip(
                Skipped(
                    journal_topic,
                    partition,
                    offset,
                    index,
                    f"no audit record this scheduler wrote mirrors it (run {run_id[:80]!r}, seq {seq}, {record_hash[:80]})",
                )
            )
            continue
        if decoded.schema.name == codec.JOURNAL_RECORD:
            problem = _apply_entry(state, c, decoded.record)
        else:
            problem = _apply_seal(state, config, c, decoded.record)
        if problem is not None:
            raise corrupted(problem)
    dangling = audit.next_mirror()
    if dangling is not None:
        raise StateCorrupted(
            f"the audit record mirrors journal record (run {dangling.run_id[:80]!r}, seq {dangling.journal_seq}, "
            f"{dangling.record_hash}) that the journal does not hold (deleted, or quarantined although genuine)",
            topic=audit_topic,
            partition=partition,
            offset=dangling.offset,
            index=dangling.index,
            kind="audit",
        )
    audit.finish()
    _walk_checkpoints(state, config, c, checkpoint_values, checkpoints_topic, skip)
    return state


def _journal_identity(c: codec.Codec, schema: str, envelope: dict[str, Any], value: bytes) -> tuple[str, int, str]:
    """(run_id, journal_seq, record_hash) the audit record of a journal record carries."""
    if schema == codec.JOURNAL_RECORD:
        payload = envelope["payload"]
        entry = c.decode(payload, expect=_ENTRY_SCHEMAS).record
        return entry["run_id"], entry["seq"], journal_entry_hash(payload)
    seal = c.decode(envelope["payload"], expect=codec.RUN_SEALS).record
    return seal["run_id"], seal["entry_count"], sha256_digest(value)


_UNDECODABLE_AUDIT = "the audit record does not decode"
_UNDECODABLE_CHECKPOINT = "the checkpoint does not decode"


class _AuditWalk:
    """The audit partition read once, in step with the journal: adopts the MAC-valid, chain-consistent records."""

    def __init__(
        self,
        state: SchedulerState,
        config: SchedulerConfig,
        c: codec.Codec,
        values: Iterable[Value],
        topic: str,
        skip: Callable[[Skipped], None],
    ) -> None:
        self._state, self._config, self._codec, self._topic, self._skip = state, config, c, topic, skip
        self._values = enumerate(values)
        self._pending: _Mirror | None = None
        self._bad: Skipped | None = None
        self._seen = 0

    def put_back(self, mirror: _Mirror | None) -> None:
        self._pending = mirror

    def next_mirror(self) -> _Mirror | None:
        """The next adopted audit record that mirrors a journal record (None at the end of the partition)."""
        if self._pending is not None:
            mirror, self._pending = self._pending, None
            return mirror
        for index, item in self._values:
            self._seen += 1
            offset, value = item if isinstance(item, tuple) else (None, item)
            adopted = self._adopt(value)
            if isinstance(adopted, str):
                skipped = Skipped(self._topic, self._state.partition, offset, index, adopted)
                if not adopted.startswith(_UNDECODABLE_AUDIT):
                    self._bad = self._bad or skipped
                self._skip(skipped)
                continue
            event, run_id, journal_seq, record_hash = adopted
            if event in _MIRRORS_JOURNAL:
                return _Mirror(offset, index, run_id, journal_seq, record_hash)
        return None

    def finish(self) -> None:
        """Read the rest of the partition; audit records that decode but none of which verifies (a changed key) stop the rebuild."""
        dangling = self.next_mirror()
        assert dangling is None, "rebuild_state checks dangling mirrors first"
        if self._bad is not None and self._state.audit_seq == 0:
            bad = self._bad
            raise StateCorrupted(
                f"none of the {self._seen} audit records verifies under audit keys "
                f"{', '.join(_audit_key_ids(self._config))} (the first: {bad.problem})",
                topic=bad.topic,
                partition=bad.partition,
                offset=bad.offset,
                index=bad.index,
                kind="audit",
            )

    def _adopt(self, value: bytes) -> tuple[str, str, int, str] | str:
        """(event, run_id, journal_seq, record_hash) of a record that extends the chain, else what is wrong with it."""
        state, config = self._state, self._config
        try:
            decoded = self._codec.decode(value, expect=codec.AUDIT_RECORDS)
            envelope = decoded.record
            entry = self._codec.decode(envelope["payload"], expect=_AUDIT_ENTRIES).record
        except codec.DecodeError as exc:
            return f"{_UNDECODABLE_AUDIT} ({exc})"
        if decoded.schema.name == codec.AUDIT_RECORD_V2:
            # any key of the ring (a retired key MACed the records before a rotation)
            secret = config.audit_secret(envelope["key_id"])
            if secret is None:
                return (
                    f"the audit record names audit key {envelope['key_id'][:80]!r}, not one of this scheduler's "
                    f"({', '.join(_audit_key_ids(config))})"
                )
            recomputed = audit_record_mac(secret, envelope["key_id"], envelope["payload"])
        else:
            secret = config.audit_key
            recomputed = audit_mac(secret, envelope["payload"])
        if not macs_equal(recomputed, envelope["mac"]):
            return "the audit record fails its MAC: the audit key changed or the record was edited or forged"
        # a partition's first record follows the genesis under its own key (the key chosen for its input)
        expected_prev = state.audit_head if state.audit_seq else audit_genesis(secret, state.partition)
        if (
            entry["partition"] != state.partition
            or entry["seq"] != state.audit_seq
            or not macs_equal(entry["prev_mac"], expected_prev)
        ):
            return (
                f"the audit record (partition {entry['partition']}, seq {entry['seq']}) does not extend partition "
                f"{state.partition}'s audit chain of {state.audit_seq} records (a replayed or misplaced record)"
            )
        state.audit_seq += 1
        state.audit_head = envelope["mac"]
        return entry["event"], entry["run_id"], entry["journal_seq"], entry["record_hash"]


def _walk_checkpoints(
    state: SchedulerState,
    config: SchedulerConfig,
    c: codec.Codec,
    values: Iterable[Value],
    topic: str,
    skip: Callable[[Skipped], None],
) -> None:
    """Restore the checkpoint chain from its records: each signed by this scheduler, chained, within the audit chain."""
    first_bad: Skipped | None = None
    last_head: tuple[int | None, int, str] | None = None  # offset, index and audit_head of the last adopted checkpoint
    seen = 0
    for index, item in enumerate(values):
        seen += 1
        offset, value = item if isinstance(item, tuple) else (None, item)
        problem = _adopt_checkpoint(state, config, c, value)
        if isinstance(problem, str):
            skipped = Skipped(topic, state.partition, offset, index, problem)
            if not problem.startswith(_UNDECODABLE_CHECKPOINT):
                first_bad = first_bad or skipped
            skip(skipped)
        else:
            last_head = (offset, index, problem[0])
    if first_bad is not None and state.checkpoint_seq == 0:
        raise StateCorrupted(
            f"none of the {seen} checkpoints verifies under this scheduler's seal keys ({', '.join(_seal_key_ids(config))}) "
            f"(the first: {first_bad.problem})",
            topic=topic,
            partition=state.partition,
            offset=first_bad.offset,
            index=first_bad.index,
            kind="checkpoints",
        )
    if last_head is not None:
        offset, index, audit_head = last_head
        if state.checkpoint_audit_seq > state.audit_seq or (
            state.checkpoint_audit_seq == state.audit_seq and not macs_equal(audit_head, state.audit_head)
        ):
            raise StateCorrupted(
                f"the last checkpoint commits audit head {audit_head[:80]!r} at audit seq {state.checkpoint_audit_seq}, "
                f"which partition {state.partition}'s audit chain of {state.audit_seq} records does not hold",
                topic=topic,
                partition=state.partition,
                offset=offset,
                index=index,
                kind="checkpoints",
            )


def _adopt_checkpoint(state: SchedulerState, config: SchedulerConfig, c: codec.Codec, value: bytes) -> str | tuple[str]:
    """The adopted checkpoint's audit head (as a 1-tuple), else what is wrong with it."""
    try:
        envelope = c.decode(value, expect=frozenset({codec.CHECKPOINT_RECORD})).record
        checkpoint = c.decode(envelope["payload"], expect=frozenset({codec.PARTITION_CHECKPOINT})).record
    except codec.DecodeError as exc:
        return f"the checkpoint does not decode ({exc})"
    payload = envelope["payload"]
    signer = _seal_signer(config, envelope["key_id"])
    if signer is None or signer.sign(checkpoint_signing_input(payload)) != envelope["signature"]:
        return f"the checkpoint is not signed by this scheduler's keys (its seal key ring: {', '.join(_seal_key_ids(config))})"
    if (
        checkpoint["partition"] != state.partition
        or checkpoint["seq"] != state.checkpoint_seq
        or checkpoint["prev_hash"] != state.checkpoint_head
        or checkpoint["audit_seq"] < state.checkpoint_audit_seq
    ):
        return (
            f"the checkpoint (partition {checkpoint['partition']}, seq {checkpoint['seq']}) does not extend partition "
            f"{state.partition}'s checkpoint chain of {state.checkpoint_seq} (a replayed or misplaced record)"
        )
    state.checkpoint_seq = checkpoint["seq"] + 1
    state.checkpoint_head = checkpoint_hash(payload)
    state.checkpoint_audit_seq = checkpoint["audit_seq"]
    return (checkpoint["audit_head"],)


def _seal_signer(config: SchedulerConfig, key_id: str) -> Signer | None:
    """The seal key of the ring named ``key_id`` (retired keys included: they signed the records before a rotation)."""
    for key in config.seal_keys:
        if key.signer.key_id == key_id:
            return key.signer
    return config.signer if config.signer.key_id == key_id else None


def _seal_key_ids(config: SchedulerConfig) -> list[str]:
    return [repr(k.signer.key_id) for k in config.seal_keys] or [repr(config.signer.key_id)]


def _audit_key_ids(config: SchedulerConfig) -> list[str]:
    return [repr(k.key_id) for k in config.audit_keys] or [repr(config.audit_key_id)]


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
    if run.closed:
        # The step journals nothing after a final seal; should an adopted entry follow one, the
        # closed run still keeps only its submission ids (what RunState.close keeps).
        action = entry["entry_type"] == ENTRY_COMPUTER_USE_ACTION
        run.submissions[entry["submission_id"]] = entry["session_id"] if action else entry["stage_id"]
        return None
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
    signer = _seal_signer(config, key_id)
    if signer is None:
        return f"the seal is signed by key {key_id[:80]!r}, not by this scheduler's keys (its seal key ring: {', '.join(_seal_key_ids(config))})"
    # Ed25519 is deterministic (RFC 8032): our key signs these bytes to exactly one signature.
    if signer.sign(seal_signing_input(payload)) != signature:
        return f"the seal's signature is not this scheduler's (key {key_id!r}) over its payload"
    try:
        seal = c.decode(payload, expect=codec.RUN_SEALS).record
    except codec.DecodeError as exc:
        return f"the seal's payload does not decode ({exc})"
    run = state.run_for(seal["run_id"])
    run.sealed_count = seal["entry_count"]
    if seal["final"]:
        run.close()  # reduced as the step reduces it at its final seal
    return None
