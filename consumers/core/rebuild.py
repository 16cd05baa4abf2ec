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
operator can do; docs/scheduler.md, "When the scheduler will not start"): an adopted
record that does not recompute (an entry's hash or chain link, a seal's
signature, i.e. a changed key or a leaked audit key) or an adopted entry whose entry_type
its layout does not carry (the step never writes one), an audit record that
mirrors a journal record the journal does not hold, an audit or checkpoints
partition none of whose records verifies although some decode as the
scheduler's records (a changed key; pure garbage alone is skipped), and a checkpoint that
commits more of the audit chain than the partition holds. An operator who has
inspected a journal record can quarantine it (``bernstein scheduler run
--quarantine OFFSET``): the fold then skips the journal offsets in
``quarantined`` (the verifier still reports them).

Each record's bytes are turned into a small tuple of facts (``_journal_fact``,
``_audit_fact``, ``_checkpoint_fact``: decoded fields, the recomputed entry hash, whether
the MAC and signature verify) which the fold then applies to the state. When the native
extension is usable, its ``FoldReader`` (native/src/fold.rs) computes the same tuples for
``_CHUNK`` records a call and hands back (None) every record it does not reproduce
exactly, which the Python function then decides; the Python functions alone are the
reference (``rebuild_state(..., native=False)``), and both paths give the same state, the
same reports and the same errors (tests/unit/differential/test_rebuild_native.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from bernstein.consumers.core import native as _native_core
from bernstein.consumers.core.model import (
    AuditKeyVersion,
    SchedulerConfig,
    SchedulerState,
    SessionState,
    Signer,
    count_open_runs,
)
from bernstein.consumers.core.native import NativeUnavailable, native_status
from bernstein.consumers.core.step import charge_evidence, initial_state
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
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
    tlog_entry_leaf,
    tlog_seal_leaf,
)
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.fact_shapes import KINDS
from bernstein.schemas.merkle import leaf_hash
from bernstein.schemas.records import ENTRY_COMPUTER_USE_ACTION, AuditEvent

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
    "so the rebuild skips it: `bernstein scheduler run --partition {partition} --quarantine {offset}` (docs/scheduler.md, "
    "'When the scheduler will not start').",
    "audit": _KCAT
    + "The scheduler will not extend an audit chain it cannot vouch for. If the scheduler's audit key changed, start it "
    "with the audit key that wrote this partition. If the journal lost a record the audit chain mirrors, restore the "
    "journal; keep the topics as they are (`bernstein activity verify` reports the runs they touch). --quarantine skips "
    "journal offsets only and does not apply to this record (docs/scheduler.md, 'When the scheduler will not start').",
    "checkpoints": _KCAT
    + "The scheduler will not extend a checkpoint chain it cannot vouch for. If the scheduler's signing key changed, "
    "start it with the key that wrote this partition; a checkpoint that commits more audit records than the audit "
    "partition holds means audit records were lost. Keep the topics as they are (`bernstein activity verify` reports "
    "them). --quarantine skips journal offsets only and does not apply to this record (docs/scheduler.md, 'When the scheduler will "
    "not start').",
}
"""What StateCorrupted tells an operator, by the kind of topic; see docs/scheduler.md, "When the scheduler will not start"."""
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
        self.kind = kind
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
        return f"{_where(self.topic, self.partition, self.offset, self.index)}: {self.problem}; not adopted (docs/scheduler.md, 'When the scheduler will not start')"


Value = bytes | tuple[int, bytes]
"""A record value, or ``(offset, value)`` so that messages name the record exactly."""

_CHUNK = 2048
"""Records per call into the native fold reader (the fold streams: at most this many are read ahead)."""


@dataclass(slots=True)
class _Mirror:
    """A MAC-valid, chain-consistent audit record that mirrors one journal record."""

    offset: int | None
    index: int
    run_id: str
    journal_seq: int
    record_hash: str


# The facts of one record: what the fold applies, computed from the record alone (and the
# scheduler's keys) by ``_journal_fact``, ``_audit_fact`` and ``_checkpoint_fact``, or for the
# same record, to the same tuple, by the native ``FoldReader`` (native/src/fold.rs). A ``str``
# is what is wrong with a record that does not decode (or whose MAC fails): it is skipped.
_ENTRY, _ACTION, _ODD_ENTRY, _SEAL = (KINDS["fold"][kind] for kind in ("ENTRY", "ACTION", "ODD_ENTRY", "SEAL"))
"""Journal facts, by their first item (their fields: ``FoldEntry``, ``FoldAction``, ``FoldOddEntry`` and ``FoldSeal`` in
``bernstein.schemas.fact_shapes``, the table the extension is held to). ``charges`` are the (digest, size) pairs a
sized entry declares, as a tuple (None for the layouts without sizes); a seal's ``signed`` is None when its key is
not one of this scheduler's."""
JournalFact = tuple[Any, ...]
AuditFact = tuple[int, int, str, str, str | None, str, str, int, str]
"""(partition, seq, prev_mac, mac, key_id of an AuditRecord.v2 or None for v1, event, run_id, journal_seq, record_hash)
of an audit record whose MAC verifies."""
CheckpointFact = tuple[int, int, str, int, str, str, bool]
"""(partition, seq, prev_hash, audit_seq, audit_head, checkpoint_hash, signed by this scheduler)."""


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
    native: bool | None = None,
) -> SchedulerState:
    """Fold the journal, audit and checkpoint records of one partition (each in offset order).

    ``start``: a verified snapshot's state (``bernstein.consumers.core.snapshot``), taken over and
    extended; the three iterables then hold only the records after the snapshot's offsets.

    The three iterables are read once, the journal and the audit side by side
    (memory does not grow with the audit partition). Journal records at an
    offset in ``quarantined`` are skipped. Records the scheduler's keys do not
    vouch for are handed to ``report`` and not adopted (see the module doc).

    ``native``: None decodes and checks the records in the native extension when it is usable
    (``bernstein.consumers.core.native.native_status``), in chunks of ``_CHUNK`` records, else in Python;
    False always in Python (the reference); True in the extension or ``NativeUnavailable``.
    Both give the same state, the same ``Skipped`` reports and the same ``StateCorrupted``.
    """
    state = start if start is not None else initial_state(config, partition)
    c = codec.default_codec()
    skip = report if report is not None else (lambda _skipped: None)
    reader = _fold_reader(config, native)
    audit = _AuditWalk(state, config, c, audit_values, audit_topic, skip, reader)
    facts = _with_facts(journal_values, None if reader is None else reader.journal)
    for index, (item, native_fact) in enumerate(facts):
        offset, value = item if isinstance(item, tuple) else (None, item)
        if offset is not None and offset in quarantined:
            continue
        fact = native_fact if native_fact is not None else _journal_fact(c, config, value)
        if isinstance(fact, str):
            skip(Skipped(journal_topic, partition, offset, index, fact))
            continue
        kind, run_id, seq, record_hash = fact[0], fact[1], fact[2], fact[3]
        mirror = audit.next_mirror()
        if mirror is None or mirror.run_id != run_id or mirror.journal_seq != seq or mirror.record_hash != record_hash:
            audit.put_back(mirror)
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
        problem = _apply_seal(state, config, fact) if kind == _SEAL else _apply_entry_fact(state, fact)
        if problem is not None:
            raise StateCorrupted(problem, topic=journal_topic, partition=partition, offset=offset, index=index)
        state.tree = state.tree.append(leaf_hash(_leaf(fact)))
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
    _walk_checkpoints(state, config, c, checkpoint_values, checkpoints_topic, skip, reader)
    state.open_runs = count_open_runs(state.runs)
    return state


def _with_facts(items: Iterable[Value], facts_of: Callable[[list[object]], list[Any]] | None) -> Iterator[tuple[Value, Any]]:
    """Each item with its native fact (None: the Python fact function decides), read ahead ``_CHUNK`` at a time."""
    if facts_of is None:
        for item in items:
            yield item, None
        return
    it = iter(items)
    while chunk := list(islice(it, _CHUNK)):
        values: list[Any] = [item[1] if isinstance(item, tuple) and len(item) == 2 else item for item in chunk]
        yield from zip(chunk, facts_of(values), strict=True)


def _fold_reader(config: SchedulerConfig, native: bool | None) -> Any:
    """The native ``FoldReader`` under this scheduler's keys, or None for the Python fold (see ``rebuild_state``)."""
    if native is False:
        return None
    ok, reason = native_status()
    module = _native_core._native
    if not ok or module is None:
        if native:
            raise NativeUnavailable(reason)
        return None
    seal_keys: dict[str, Signer] = {}
    for key in config.seal_keys:  # the order of _seal_signer: the ring, then the current signer
        seal_keys.setdefault(key.signer.key_id, key.signer)
    seal_keys.setdefault(config.signer.key_id, config.signer)
    seeds = []
    probe = b"bernstein/fold-signer-probe"
    for key_id, signer in seal_keys.items():
        try:
            seed = _native_core._ed25519_seed(signer)
        except NativeUnavailable:
            continue  # its seals and checkpoints are checked by the Python fact functions
        if module.ed25519_sign(seed, probe) == signer.sign(probe):
            seeds.append((key_id, seed))
    ring = config.audit_keys or (AuditKeyVersion(config.audit_key, config.audit_key_id),)
    try:
        return module.FoldReader(
            [(s.fingerprint, s.name) for s in codec.default_codec().schemas],
            [(k.key_id, k.secret) for k in ring],
            config.audit_key,
            seeds,
            sorted(_MIRRORS_JOURNAL),
        )
    except (ValueError, TypeError) as exc:
        if native:
            raise NativeUnavailable(f"the native fold reader refused this configuration: {exc}") from exc
        return None


def _journal_fact(c: codec.Codec, config: SchedulerConfig, value: bytes) -> JournalFact | str:
    """The facts of a journal record (an entry or a seal), else what keeps it from decoding."""
    try:
        decoded = c.decode(value, expect=_JOURNAL_SCHEMAS)
        envelope = decoded.record
        payload = envelope["payload"]
        if decoded.schema.name == codec.JOURNAL_RECORD:
            inner = c.decode(payload, expect=_ENTRY_SCHEMAS)
        else:
            seal = c.decode(payload, expect=codec.RUN_SEALS).record
    except codec.DecodeError as exc:
        return f"the journal record does not decode ({exc})"
    if decoded.schema.name != codec.JOURNAL_RECORD:
        key_id = envelope["key_id"]
        signer = _seal_signer(config, key_id)
        # Ed25519 is deterministic (RFC 8032): our key signs these bytes to exactly one signature.
        signed = None if signer is None else signer.sign(seal_signing_input(payload)) == envelope["signature"]
        return (
            _SEAL,
            seal["run_id"],
            seal["entry_count"],
            sha256_digest(value),
            key_id,
            signed,
            seal["final"],
            seal["head_hash"],
            seal["last_input_offset"],
            seal["audit_head"],
        )
    return _entry_fact(inner, payload, envelope["entry_hash"])


def _entry_fact(inner: codec.Decoded, payload: bytes, stored_hash: str) -> JournalFact:
    """The facts of a decoded journal entry (``payload`` its bytes, ``stored_hash`` the entry_hash its record stores)."""
    entry = inner.record
    entry_hash = journal_entry_hash(payload)
    head = (entry["run_id"], entry["seq"], entry_hash, entry["prev_hash"], entry_hash == stored_hash)
    action = entry["entry_type"] == ENTRY_COMPUTER_USE_ACTION
    if action != (inner.schema.name in codec.COMPUTER_USE_ENTRIES):
        return (_ODD_ENTRY, *head, inner.schema.name, entry["entry_type"])
    if action:
        charges = (
            ((entry["screenshot_hash"], entry["screenshot_size"]), (entry["dom_digest"], entry["dom_size"]))
            if "screenshot_size" in entry  # ComputerUseEntry.v2
            else None
        )
        return (
            _ACTION,
            *head,
            entry["submission_id"],
            entry["session_id"],
            entry["action_index"],
            entry["anchor"],
            charges,
            entry["producer_id"],
        )
    observations = entry["observations"]
    sized = bool(observations) and "size" in observations[0]  # JournalEntry.v2 and v3
    return (
        _ENTRY,
        *head,
        entry["submission_id"],
        entry["stage_id"],
        entry["evidence_set_hash"],
        bool(observations),
        tuple((o["content_hash"], o["size"]) for o in observations) if sized else None,
        entry["kind"] == "browser",
        entry["producer_id"],
    )


_UNDECODABLE_AUDIT = "the audit record does not decode"
_UNDECODABLE_CHECKPOINT = "the checkpoint does not decode"


def _audit_fact(c: codec.Codec, config: SchedulerConfig, value: bytes) -> AuditFact | str:
    """The facts of an audit record whose MAC verifies under the key it names, else what is wrong with it."""
    try:
        decoded = c.decode(value, expect=codec.AUDIT_RECORDS)
        envelope = decoded.record
        entry = c.decode(envelope["payload"], expect=_AUDIT_ENTRIES).record
    except codec.DecodeError as exc:
        return f"{_UNDECODABLE_AUDIT} ({exc})"
    key_id: str | None
    if decoded.schema.name == codec.AUDIT_RECORD_V2:
        # any key of the ring (a retired key MACed the records before a rotation)
        key_id = envelope["key_id"]
        secret = config.audit_secret(envelope["key_id"])
        if secret is None:
            return (
                f"the audit record names audit key {envelope['key_id'][:80]!r}, not one of this scheduler's "
                f"({', '.join(_audit_key_ids(config))})"
            )
        recomputed = audit_record_mac(secret, envelope["key_id"], envelope["payload"])
    else:
        key_id = None
        recomputed = audit_mac(config.audit_key, envelope["payload"])
    if not macs_equal(recomputed, envelope["mac"]):
        return "the audit record fails its MAC: the audit key changed or the record was edited or forged"
    return (
        entry["partition"],
        entry["seq"],
        entry["prev_mac"],
        envelope["mac"],
        key_id,
        entry["event"],
        entry["run_id"],
        entry["journal_seq"],
        entry["record_hash"],
    )


class _AuditWalk:
    """The audit partition read once, in step with the journal: adopts the MAC-valid, chain-consistent records.

    In Python (the reference), each record's facts (``_audit_fact``) then the chain check
    (``_extend``), one record at a time. With the native reader, ``_CHUNK`` records at a time:
    ``FoldReader.audit_walk`` checks the MACs and the chain of the chunk and names the records
    that mirror a journal record and those it leaves to the Python functions; the state's
    chain position is set as each is handed out, so it is always where the reference's is.
    """

    def __init__(
        self,
        state: SchedulerState,
        config: SchedulerConfig,
        c: codec.Codec,
        values: Iterable[Value],
        topic: str,
        skip: Callable[[Skipped], None],
        reader: Any = None,
    ) -> None:
        self._state, self._config, self._codec, self._topic, self._skip = state, config, c, topic, skip
        self._reader = reader
        self._items = iter(values)
        self._pending: _Mirror | None = None
        self._bad: Skipped | None = None
        self._seen = 0
        # the native walk: the chunk, its first record's index, its values, the walk's events and where it ends
        self._chunk: list[Value] = []
        self._base = 0
        self._chunk_values: list[Any] = []
        self._events: Iterator[tuple[Any, ...]] = iter(())
        self._end: tuple[int, str] | None = None

    def put_back(self, mirror: _Mirror | None) -> None:
        self._pending = mirror

    def next_mirror(self) -> _Mirror | None:
        """The next adopted audit record that mirrors a journal record (None at the end of the partition)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            return pending
        if self._reader is not None:
            return self._next_native()
        for item in self._items:
            self._seen += 1
            mirror = self._decide(self._seen - 1, item)
            if mirror is not None:
                return mirror
        return None

    def _decide(self, index: int, item: Value) -> _Mirror | None:
        """One record by the Python functions: adopted (its mirror, if it mirrors a journal record), or rejected."""
        offset, value = item if isinstance(item, tuple) else (None, item)
        fact = _audit_fact(self._codec, self._config, value)
        if isinstance(fact, str):
            self._reject(offset, index, fact)
            return None
        problem = self._extend(fact)
        if problem is not None:
            self._reject(offset, index, problem)
            return None
        _, _, _, _, _, event, run_id, journal_seq, record_hash = fact
        return _Mirror(offset, index, run_id, journal_seq, record_hash) if event in _MIRRORS_JOURNAL else None

    def _walk(self, start: int) -> None:
        state = self._state
        events, seq, head = self._reader.audit_walk(self._chunk_values, start, state.partition, state.audit_seq, state.audit_head)
        self._events, self._end = iter(events), (seq, head)

    def _next_native(self) -> _Mirror | None:
        state = self._state
        while True:
            event = next(self._events, None)
            if event is None:
                if self._end is not None:
                    state.audit_seq, state.audit_head = self._end
                    self._end = None
                self._base += len(self._chunk)
                self._chunk = list(islice(self._items, _CHUNK))
                if not self._chunk:
                    return None
                self._seen += len(self._chunk)
                self._chunk_values = [item[1] if isinstance(item, tuple) and len(item) == 2 else item for item in self._chunk]
                self._walk(0)
                continue
            k, adopted = event[0], event[1]
            if adopted:  # and it mirrors a journal record
                _, _, run_id, journal_seq, record_hash, seq, head = event
                state.audit_seq, state.audit_head = seq, head
                item = self._chunk[k]
                return _Mirror(item[0] if isinstance(item, tuple) else None, self._base + k, run_id, journal_seq, record_hash)
            _, _, before, head = event  # left to the Python functions, the chain as it stands before it
            state.audit_seq, state.audit_head = before, head
            mirror = self._decide(self._base + k, self._chunk[k])
            if state.audit_seq != before:  # adopted after all: the walk of the rest assumed otherwise
                self._walk(k + 1)
            if mirror is not None:
                return mirror

    def _reject(self, offset: int | None, index: int, problem: str) -> None:
        skipped = Skipped(self._topic, self._state.partition, offset, index, problem)
        if not problem.startswith(_UNDECODABLE_AUDIT):
            self._bad = self._bad or skipped
        self._skip(skipped)

    def _extend(self, fact: AuditFact) -> str | None:
        """Adopt a record whose MAC verifies when it extends the chain (seq and prev_mac), else say why not."""
        state = self._state
        partition, seq, prev_mac, mac, key_id = fact[:5]
        if state.audit_seq:
            expected_prev = state.audit_head
        else:
            # a partition's first record follows the genesis under its own key (the key chosen for its input)
            secret = self._config.audit_secret(key_id) if key_id is not None else self._config.audit_key
            assert secret is not None, "the fact names a key of the ring"
            expected_prev = audit_genesis(secret, state.partition)
        if (
            partition != state.partition
            or seq != state.audit_seq
            or not (prev_mac == expected_prev or macs_equal(prev_mac, expected_prev))
        ):
            return (
                f"the audit record (partition {partition}, seq {seq}) does not extend partition "
                f"{state.partition}'s audit chain of {state.audit_seq} records (a replayed or misplaced record)"
            )
        state.audit_seq += 1
        state.audit_head = mac
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


def _walk_checkpoints(
    state: SchedulerState,
    config: SchedulerConfig,
    c: codec.Codec,
    values: Iterable[Value],
    topic: str,
    skip: Callable[[Skipped], None],
    reader: Any = None,
) -> None:
    """Restore the checkpoint chain from its records: each signed by this scheduler, chained, within the audit chain."""
    first_bad: Skipped | None = None
    last_head: tuple[int | None, int, str] | None = None  # offset, index and audit_head of the last adopted checkpoint
    seen = 0
    for index, (item, native_fact) in enumerate(_with_facts(values, None if reader is None else reader.checkpoints)):
        seen += 1
        offset, value = item if isinstance(item, tuple) else (None, item)
        fact = native_fact if native_fact is not None else _checkpoint_fact(c, config, value)
        problem = fact if isinstance(fact, str) else _adopt_checkpoint(state, config, fact)
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


def _checkpoint_fact(c: codec.Codec, config: SchedulerConfig, value: bytes) -> CheckpointFact | str:
    """The facts of a checkpoint record, else what keeps it from decoding."""
    try:
        envelope = c.decode(value, expect=frozenset({codec.CHECKPOINT_RECORD})).record
        checkpoint = c.decode(envelope["payload"], expect=codec.PARTITION_CHECKPOINTS).record
    except codec.DecodeError as exc:
        return f"{_UNDECODABLE_CHECKPOINT} ({exc})"
    payload = envelope["payload"]
    signer = _seal_signer(config, envelope["key_id"])
    signed = signer is not None and signer.sign(checkpoint_signing_input(payload)) == envelope["signature"]
    return (
        checkpoint["partition"],
        checkpoint["seq"],
        checkpoint["prev_hash"],
        checkpoint["audit_seq"],
        checkpoint["audit_head"],
        checkpoint_hash(payload),
        signed,
    )


def _adopt_checkpoint(state: SchedulerState, config: SchedulerConfig, fact: CheckpointFact) -> str | tuple[str]:
    """The adopted checkpoint's audit head (as a 1-tuple), else what is wrong with it."""
    partition, seq, prev_hash, audit_seq, audit_head, head, signed = fact
    if not signed:
        return f"the checkpoint is not signed by this scheduler's keys (its seal key ring: {', '.join(_seal_key_ids(config))})"
    if (
        partition != state.partition
        or seq != state.checkpoint_seq
        or prev_hash != state.checkpoint_head
        or audit_seq < state.checkpoint_audit_seq
    ):
        return (
            f"the checkpoint (partition {partition}, seq {seq}) does not extend partition "
            f"{state.partition}'s checkpoint chain of {state.checkpoint_seq} (a replayed or misplaced record)"
        )
    state.checkpoint_seq = seq + 1
    state.checkpoint_head = head
    state.checkpoint_audit_seq = audit_seq
    return (audit_head,)


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


def _apply_entry(state: SchedulerState, c: codec.Codec, envelope: dict[str, Any]) -> str | None:
    """Apply one decoded JournalRecord to the state as the fold does (its problem, or None)."""
    payload = envelope["payload"]
    try:
        inner = c.decode(payload, expect=_ENTRY_SCHEMAS)
    except codec.DecodeError as exc:
        return f"the journal entry's payload does not decode ({exc})"
    return _apply_entry_fact(state, _entry_fact(inner, payload, envelope["entry_hash"]))


def _apply_entry_fact(state: SchedulerState, fact: JournalFact) -> str | None:
    kind, run_id, seq, entry_hash, prev_hash, stored_hash_ok = fact[:6]
    run = state.run_for(run_id)
    if seq == 0 and kind != _ODD_ENTRY:
        run.opened_by = fact[-1]  # the producer whose first entry opened the run (counted in ``open_runs``)
    if seq != run.entry_count or prev_hash != run.head:
        return f"the journal of run {run_id!r} does not chain at seq {seq} (expected seq {run.entry_count} after {run.head})"
    if not stored_hash_ok:
        return f"journal entry seq {seq} of run {run_id!r} does not recompute its entry_hash"
    if kind == _ODD_ENTRY:
        # the step never writes one (an activity entry names a stage, an action entry a session)
        return f"journal entry seq {seq} of run {run_id!r} is a {fact[6]} record with entry_type {fact[7][:80]!r}"
    run.head = entry_hash
    run.entry_count += 1
    if kind == _ACTION:
        submission_id, session_id, action_index, anchor, charges = fact[6:11]
        run.submissions[submission_id] = session_id
        if run.closed:
            # The step journals nothing after a final seal; should an adopted entry follow one, the
            # closed run still keeps only its submission ids (what RunState.close keeps).
            return None
        session = run.sessions.get(session_id)
        if session is None:
            session = SessionState(0, computer_use_genesis(run_id, session_id))
            run.sessions[session_id] = session
        session.next_index = action_index + 1
        session.last_anchor = anchor
        if charges is not None:  # ComputerUseEntry.v2
            charge_evidence(run, charges)
        return None
    submission_id, stage_id, evidence_set_hash, observed, charges, browser = fact[6:12]
    run.submissions[submission_id] = stage_id
    if run.closed:
        return None
    run.stages[stage_id] = evidence_set_hash
    if observed:
        run.evidence.setdefault(evidence_set_hash, stage_id)
        if charges is not None:  # JournalEntry.v2
            charge_evidence(run, charges)
    if browser:
        session = run.sessions.get(stage_id)
        if session is None:
            run.sessions[stage_id] = SessionState(0, computer_use_genesis(run_id, stage_id), closed=True)
        else:
            session.closed = True
    return None


def _leaf(fact: JournalFact) -> bytes:
    """The Merkle log leaf of an adopted journal record: what the step appended when it wrote it."""
    if fact[0] == _SEAL:
        _, run_id, entry_count, _, _, _, final, head_hash, last_input_offset, audit_head = fact
        return tlog_seal_leaf(run_id, entry_count, head_hash, last_input_offset, final, audit_head)
    return tlog_entry_leaf(fact[1], fact[2], fact[3])


def _apply_seal(state: SchedulerState, config: SchedulerConfig, fact: JournalFact) -> str | None:
    _, run_id, entry_count, _, key_id, signed, final = fact[:7]
    if signed is None:
        return f"the seal is signed by key {key_id[:80]!r}, not by this scheduler's keys (its seal key ring: {', '.join(_seal_key_ids(config))})"
    if not signed:
        return f"the seal's signature is not this scheduler's (key {key_id!r}) over its payload"
    run = state.run_for(run_id)
    run.sealed_count = entry_count
    if final:
        run.close()  # reduced as the step reduces it at its final seal
    return None
