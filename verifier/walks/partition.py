"""Step 3, once per partition: the audit chain read and checked a chunk at a time, whatever the number of runs.

The MACs, keys, sequence, links, input accounting, checkpoints and dead letters of the chain are the
partition's, not any run's: ``_PartitionAudit`` checks them once and queues each run's crossings for that
run's ``bernstein.verifier.walks.audit._AuditWalk``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from bernstein.schemas import codec
from bernstein.schemas.canonical import macs_equal, sha256_digest
from bernstein.schemas.fact_shapes import AUDIT_RECORD_AT as _AT
from bernstein.schemas.fact_shapes import AuditRecordFact
from bernstein.schemas.records import AuditEvent
from bernstein.substrate.keys import TrustedKeys
from bernstein.substrate.text import plural
from bernstein.verifier import audit_chain as audit_rules
from bernstein.verifier.audit_chain import ChainPosition, Finding, advance, judge
from bernstein.verifier.checkpoints import CheckpointWalk
from bernstein.verifier.facts import A_RECORD, RAISE
from bernstein.verifier.keyuse import KeysInForce, KeyUse
from bernstein.verifier.report import Problem
from bernstein.verifier.sources import KcatSource, RecordSource
from bernstein.verifier.tlog import LeafRecorder

RESULT = AuditEvent.ACTIVITY_RESULT.value
_ENTRY_EVENTS = frozenset({AuditEvent.ACTIVITY_RESULT.value, AuditEvent.COMPUTER_USE_ACTION.value})
"""Audit events that mirror a journal entry (joined with the journal entry by entry)."""
JOIN_EVENTS = _ENTRY_EVENTS | {AuditEvent.RUN_SEALED.value}
_REFUSED = AuditEvent.ACTIVITY_REFUSED.value
_DEADLETTER = AuditEvent.INPUT_DEADLETTER.value
_SEALED = AuditEvent.RUN_SEALED.value

_AUDIT_ENTRY = frozenset({codec.AUDIT_ENTRY, codec.AUDIT_ENTRY_V2})
_DEAD_LETTER = frozenset({codec.DEAD_LETTER, getattr(codec, "DEAD_LETTER_V2", codec.DEAD_LETTER)})
"""Both dead-letter layouts carry what the audit mirrors: the input position and raw_sha256."""


AuditRow = tuple[int, tuple[Any, ...], int, int, bytes | None]
"""(offset, audit fact, envelope version, Kafka timestamp, value) of one audit record."""


class _AuditEvent:
    __slots__ = (
        "seq",
        "offset",
        "event",
        "journal_seq",
        "record_hash",
        "prev_mac",
        "tainted",
        "version",
        "position",
        "checkpoints_seen",
    )

    def __init__(
        self,
        seq: int,
        offset: int,
        event: str,
        journal_seq: int,
        record_hash: str,
        prev_mac: str,
        tainted: bool,
        version: int = 1,
        position: int = 0,
        checkpoints_seen: int = 0,
    ) -> None:
        self.seq = seq
        self.offset = offset
        self.event = event
        self.journal_seq = journal_seq
        self.record_hash = record_hash
        self.prev_mac = prev_mac
        self.tainted = tainted
        self.version = version
        """The AuditRecord envelope version: 2 is written by schedulers that also write checkpoints."""
        self.position = position
        """How many audit records of the partition were read up to and including this one."""
        self.checkpoints_seen = checkpoints_seen
        """``CheckpointWalk.last_seen`` right after this record: the last checkpoint written up to it."""


@dataclass
class _RunCrossings:
    """What the partition's audit chain says about one run, counted as the chain is read."""

    records: int = 0
    refusals: int = 0
    refusal_hashes: list[tuple[int, int, str]] = field(default_factory=list)
    """(audit seq, audit offset, sha256 of the refusal value) of the run's refusals."""
    events: Any = field(default_factory=deque)
    """The run's result and seal crossings read but not yet joined with its journal: a ``deque`` of
    ``_AuditEvent``, or the native ``EventQueue`` that holds them for ``_PartitionAudit.walks``."""


@dataclass
class _PartitionAudit:
    """The audit chain of one partition, read once, however many runs are joined with it.

    Everything that concerns the chain itself (MACs, keys, sequence, links, input accounting,
    checkpoints, dead letters) is checked here once; each run's result and seal crossings are queued
    for that run's ``_AuditWalk``. A finding of the chain is kept with its position (how many records
    had been read), so each run's report lists it where a walk of that run alone would have met it.
    """

    c: codec.Codec
    chunks: Iterator[list[AuditRow]]
    """Every audit record of the partition, in offset order, a chunk at a time."""
    partition: int
    trusted: TrustedKeys
    wanted: frozenset[str] | None = None
    """The runs whose crossings are kept (None: every run)."""
    count: int = 0
    last_mac: str = ""
    expected_seq: int = 0
    key_ids: set[str] = field(default_factory=set)
    macs_verified: bool = True
    missing_key: str = ""
    genesis_checked: bool = False
    """An authentic record moved the chain: ``last_mac`` is a MAC of it (before, the chain starts at its genesis)."""
    stand_ins: int = 0
    """Records reported since the last authentic one (``bernstein.verifier.audit_chain.ChainPosition``)."""
    deadletters: list[tuple[int, int, int, str]] = field(default_factory=list)
    """(audit seq, audit offset, input offset, raw sha256) of the partition's dead letters."""
    deadletter_codes: dict[int, str] = field(default_factory=dict)
    """audit offset -> ``reason_code`` of the audit records that mirror those dead letters."""
    last_input: int | None = None
    """Input offset of the previous audit record (None at the start, and after a record already reported)."""
    last_event: str = ""
    input_start: int = 0
    """The input partition's first offset (its log start): the first audit record must account for it."""
    started: bool = False
    """An audit record was read: the next one is not the chain's first."""
    checkpoints: CheckpointWalk | None = None
    """The partition's checkpoints, merged with the chain as it is read."""
    checkpoints_captured: bool = True
    """False for a kcat capture without the checkpoints topic: missing checkpoints are then not checked."""
    v2_records: int = 0
    """AuditRecord.v2 records read (their scheduler writes checkpoints)."""
    last_version: int = 0
    """Envelope version of the last decodable audit record."""
    uncovered: int = 0
    leaves: LeafRecorder | None = None
    """The journal partition's leaves, recorded as its rows were read for the run walks (None: read it again)."""
    tree_leaves: int | None = None
    """Leaves of the partition's Merkle log the journal holds, once recomputed (None: not recomputed)."""
    exhausted: bool = False
    found: list[Problem] = field(default_factory=list)
    """Findings of the chain itself, in the order met."""
    found_at: list[int] = field(default_factory=list)
    """``count`` when each of ``found`` was met."""
    end_found: list[Problem] | None = None
    """Findings of the checkpoints after the chain's end (``finish_checkpoints``)."""
    deadletter_found: list[Problem] | None = None
    deadletters_not_captured: int = 0
    runs: dict[str, _RunCrossings] = field(default_factory=dict)
    mentions: dict[str, int] = field(default_factory=dict)
    """Records naming each run whose MAC verifies (``is_authenticated``): what JOURNAL_MISSING counts."""
    crossing_runs: set[str] = field(default_factory=set)
    """Runs the chain mirrors a journal crossing of (a result, an action or a seal), authenticated."""

    walks: ModuleType | None = None
    """``Facts.walks``: the native plain path of ``_check`` and the queues it fills, or None."""

    audit_keys: KeysInForce = field(init=False, repr=False)
    """The pinned audit keys in force, looked up once per key id."""
    _plain: Any = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self.audit_keys = KeysInForce(self.trusted, KeyUse.AUDIT)
        if self.walks is not None:
            self._plain = self.walks.AuditPlain(
                self.partition,
                self.audit_keys.windows(),
                RESULT,
                sorted(_ENTRY_EVENTS),
                sorted(JOIN_EVENTS),
                _REFUSED,
                _DEADLETTER,
            )

    def add(self, problem: Problem) -> None:
        self.found.append(problem)
        self.found_at.append(self.count)

    def run(self, run_id: str) -> _RunCrossings:
        crossings = self.runs.get(run_id)
        if crossings is None:
            queue = deque() if self.walks is None else self.walks.EventQueue(_AuditEvent)
            crossings = self.runs[run_id] = _RunCrossings(events=queue)
        return crossings

    def next_event(self, run_id: str) -> _AuditEvent | None:
        """The next result or seal crossing of ``run_id``, reading the chain a chunk at a time, only as far as it
        takes. (How far ahead it has read changes no verdict: each crossing carries its position in the chain,
        and each finding of the chain its own.)"""
        queued = self.run(run_id).events
        while not queued:
            if not self._read_chunk():
                return None
        event: _AuditEvent = queued.popleft()
        return event

    def drain(self) -> None:
        """Read the rest of the chain (every run's crossings are queued)."""
        while self._read_chunk():
            pass

    def _read_chunk(self) -> bool:
        """Check the next chunk of the chain and queue its crossings for their runs; False at the chain's end."""
        chunk = next(self.chunks, None) if not self.exhausted else None
        if chunk is None:
            self.exhausted = True
            return False
        check, plain, checkpoints = self._check, self._plain, self.checkpoints
        if plain is None:
            for offset, fact, version, timestamp, value in chunk:
                check(offset, fact, version, timestamp, value)  # queues the record's crossing for its run
            return True
        at, end = 0, len(chunk)
        while at < end:
            # the plain records natively (what ``_check`` concludes for them), the next one here
            if checkpoints is None:
                at = plain.advance(self, chunk, at, None, 0)
            else:
                at = plain.advance(self, chunk, at, checkpoints.due(), checkpoints.last_seen)
            if at < end:
                check(*chunk[at])
                at += 1
        return True

    def _check(self, offset: int, fact: tuple[Any, ...], version: int, timestamp: int, value: bytes | None) -> None:
        """Check one audit record of the chain and queue its crossing (a result or a seal) for its run."""
        self.count += 1
        if fact[0] != A_RECORD:
            if fact[0] == RAISE:
                raise fact[1]
            self.add(
                Problem(
                    "AUDIT_UNDECODABLE",
                    f"audit record at offset {offset} does not decode: {fact[1]}",
                    stream="audit",
                    offset=offset,
                )
            )
            self.stand_ins += 1  # it stands in for at most one seq (``bernstein.verifier.audit_chain``)
            self.last_input = None  # accounting restarts after a record already reported
            return
        record = AuditRecordFact._make(fact)
        key_id, mac, recomputed, partition, seq = record.key_id, record.mac, record.recomputed, record.partition, record.seq
        prev_mac, event, run_id, record_hash = record.prev_mac, record.event, record.run_id, record.record_hash
        journal_seq, input_partition, input_offset = record.journal_seq, record.input_partition, record.input_offset
        self.last_version = version
        if version == 2:
            self.v2_records += 1
        if self.checkpoints is not None:
            self.checkpoints.on_audit(seq, mac, input_offset)
        if (
            recomputed == mac
            and seq == self.expected_seq
            and prev_mac == self.last_mac
            and self.genesis_checked
            and partition == self.partition == input_partition
            and self.audit_keys.fits(key_id, timestamp)
        ):
            # The plain record (its MAC verifies under a pinned audit key in force, it links to its
            # predecessor, it is on this partition): what ``bernstein.verifier.audit_chain.judge`` concludes, in fewer steps.
            tainted = False
            authenticated = True
            self.key_ids.add(key_id)
            self.stand_ins = 0
            last = self.last_input
            if last is not None and input_offset == last + 1:
                self.last_input = input_offset  # the next input: what ``_account`` concludes
                self.last_event = event
            else:
                self._account(offset, seq, event, input_offset)
            self.expected_seq = seq + 1
            self.last_mac = mac
        else:
            tainted = self._judge(offset, fact, timestamp)
            authenticated = is_authenticated(fact, self.trusted)
            if tainted:
                self.last_input = None  # already reported: accounting restarts after it
            else:
                self._account(offset, seq, event, input_offset)
        self.started = True
        if event == _DEADLETTER and not tainted:
            self.deadletters.append((seq, offset, input_offset, record_hash))
            reason = _deadletter_code(self.c, value)
            if reason is not None:
                self.deadletter_codes[offset] = reason
        if authenticated and event in JOIN_EVENTS:  # a refusal mirrors no journal record: it is no evidence of one
            self.mentions[run_id] = self.mentions.get(run_id, 0) + 1
            self.crossing_runs.add(run_id)
        if self.wanted is not None and run_id not in self.wanted:
            return
        crossings = self.run(run_id)
        crossings.records += 1
        if event == _REFUSED:
            crossings.refusals += 1
            if not tainted:
                crossings.refusal_hashes.append((seq, offset, record_hash))
            return
        if event not in JOIN_EVENTS:
            return
        crossings.events.append(
            _AuditEvent(
                seq,
                offset,
                RESULT if event in _ENTRY_EVENTS else event,
                journal_seq,
                record_hash,
                prev_mac,
                tainted,
                version,
                self.count,
                self.checkpoints.last_seen if self.checkpoints is not None else 0,
            )
        )

    def _judge(self, offset: int, fact: tuple[Any, ...], timestamp: int) -> bool:
        """The record judged as ``audit follow`` judges it (``bernstein.verifier.audit_chain``), each finding added and the
        chain moved: True when the record is tainted (its contents are not vouched for)."""
        key_id, mac, recomputed, seq = fact[_AT.key_id], fact[_AT.mac], fact[_AT.recomputed], fact[_AT.seq]
        position = ChainPosition(self.expected_seq, self.last_mac if self.genesis_checked else None, self.stand_ins)
        where = f"audit seq {seq} at offset {offset}"
        judgement = judge(position, fact, partition=self.partition, timestamp_ms=timestamp, trusted=self.trusted, where=where)
        for finding in judgement.findings:
            self.add(self._problem(offset, fact, finding, position))
        if judgement.unverified:  # no audit key pinned at all
            self.macs_verified = False
            self.missing_key = key_id
        elif recomputed is not None and (recomputed == mac or macs_equal(recomputed, mac)):
            self.key_ids.add(key_id)
        if judgement.moves:
            self.genesis_checked = True
        advance(position, judgement, seq, mac)
        self.expected_seq, self.stand_ins = position.next_seq, position.stand_ins
        if position.head is not None:
            self.last_mac = position.head
        return judgement.tainted

    def _problem(self, offset: int, fact: tuple[Any, ...], finding: Finding, position: ChainPosition) -> Problem:
        """The report's problem for one finding of the judge."""
        code, seq = finding.code, finding.seq
        if finding.key is not None:
            return finding.key.problem(stream="audit", offset=offset, audit_seq=seq)
        if code == audit_rules.KEY_NOT_PINNED:
            message = (
                f"audit seq {seq} at offset {offset} names key {finding.found}, which is not among the pinned audit keys: "
                "its MAC cannot be checked"
            )
        elif code == audit_rules.MAC_MISMATCH:
            message = (
                f"audit seq {seq} at offset {offset}: MAC mismatch (stored '{finding.expected}', recomputed '{finding.found}')"
            )
        elif code == audit_rules.WRONG_PARTITION:
            message = f"audit record at offset {offset} names partition {fact[_AT.partition]} (input partition {fact[_AT.input_partition]})"
            return Problem(code, message, stream="audit", offset=offset, audit_seq=seq)
        elif code == audit_rules.OUT_OF_ORDER:
            message = f"audit seq {seq} at offset {offset} comes after seq {position.next_seq - 1} (reordered or duplicated)"
            return Problem(code, message, stream="audit", offset=offset, audit_seq=seq)
        elif code == audit_rules.GAP:
            message = f"audit seq jumps from {position.next_seq - 1} to {seq} at offset {offset}: records deleted"
            return Problem(code, message, stream="audit", offset=offset, audit_seq=seq)
        elif code == audit_rules.LINK_BROKEN:
            message = (
                f"audit seq {seq} at offset {offset} does not link to its predecessor "
                f"(prev_mac '{finding.found}', expected '{finding.expected}')"
            )
        else:
            raise AssertionError(f"a judge code the verifier does not phrase: {code}")
        return Problem(
            code,
            message,
            stream="audit",
            offset=offset,
            audit_seq=seq,
            expected=finding.expected or "",
            recomputed=finding.found or "",
        )

    def _account(self, offset: int, seq: int, event: str, input_offset: int) -> None:
        """Every input offset is accounted for by exactly one crossing, in input order.

        One input record gives one crossing (a journal entry, a refusal, a dead
        letter, or the final seal of a run close), plus a periodic seal right
        after an entry. Submissions are written without transactions, so their
        offsets have no gaps (docs/verifier.md).
        """
        last = self.last_input
        self.last_input = input_offset
        previous, self.last_event = self.last_event, event
        if last is None and not self.started and input_offset > self.input_start:
            start = self.input_start
            missing = f"offset {start}" if input_offset == start + 1 else f"offsets {start}..{input_offset - 1}"
            message = (
                f"audit seq {seq} at offset {offset}, the chain's first record, accounts for input offset {input_offset}, "
                f"but the input partition starts at offset {start}: input {missing} produced no output (the scheduler "
                "started past them, e.g. from a reset group offset, or their outputs deleted)"
            )
            self.add(
                Problem(
                    "INPUT_OFFSET_GAP",
                    message,
                    stream="audit",
                    offset=offset,
                    audit_seq=seq,
                    expected=str(start),
                    recomputed=str(input_offset),
                )
            )
            return
        if last is None or input_offset == last + 1:
            return
        if input_offset == last and event == _SEALED and previous in _ENTRY_EVENTS:
            return  # the periodic seal the entry triggered
        if input_offset > last:
            missing = f"offset {last + 1}" if input_offset == last + 2 else f"offsets {last + 1}..{input_offset - 1}"
            code = "INPUT_OFFSET_GAP"
            message = (
                f"audit seq {seq} at offset {offset} accounts for input offset {input_offset} after {last}: "
                f"input {missing} produced no output (submissions skipped or their outputs deleted)"
            )
        elif input_offset == last:
            code = "INPUT_OFFSET_REPEATED"
            message = (
                f"audit seq {seq} at offset {offset} accounts for input offset {input_offset} again: "
                "one input gave more than one crossing"
            )
        else:
            code = "INPUT_OFFSET_OUT_OF_ORDER"
            message = f"audit seq {seq} at offset {offset} accounts for input offset {input_offset} after {last}"
        self.add(
            Problem(
                code, message, stream="audit", offset=offset, audit_seq=seq, expected=str(last + 1), recomputed=str(input_offset)
            )
        )

    def finish_checkpoints(self) -> list[Problem]:
        """After the chain's end: checkpoints beyond it, a missing last one, and what none covers yet (once)."""
        if self.end_found is None:
            self.drain()
            self.end_found = []
            walk = self.checkpoints
            if walk is not None:
                if not self.checkpoints_captured:
                    self.uncovered = self.expected_seq
                else:
                    before = len(self.found)
                    self.uncovered = walk.finish(self.expected_seq, self.last_version == 2)
                    self.tree_leaves = walk.check_tree(self.leaves)
                    self.end_found = self.found[before:]
                    del self.found[before:], self.found_at[before:]
        return self.end_found

    def check_deadletters(self, source: RecordSource) -> list[Problem]:
        """When the source holds the partition's dead letters: each is one the audit chain mirrors
        (input offset and sha256 of the raw input), and vice versa (once per partition)."""
        if self.deadletter_found is None:
            self.drain()
            found: list[Problem] = []
            self.deadletter_found = found
            self._deadletters(source, found.append)
        return self.deadletter_found

    def _deadletters(self, source: RecordSource, add: Callable[[Problem], None]) -> None:
        if self.partition not in source.partitions("deadletter"):
            if not self.deadletters:
                return
            if isinstance(source, KcatSource):  # a capture lists the topics it was given
                self.deadletters_not_captured = len(self.deadletters)
                return
            seq, offset, input_offset, digest = self.deadletters[0]
            add(
                Problem(
                    "DEADLETTER_STREAM_MISSING",
                    f"the audit chain mirrors {plural(len(self.deadletters), 'dead letter')} on this partition (the first "
                    f"of input offset {input_offset} at audit seq {seq}, offset {offset}), but {source.describe()} has no "
                    "dead-letter stream for it (deleted)",
                    stream="audit",
                    offset=offset,
                    audit_seq=seq,
                    expected=digest,
                )
            )
            return
        expected: dict[tuple[int, str], list[tuple[int, int]]] = {}
        for seq, offset, input_offset, digest in self.deadletters:
            expected.setdefault((input_offset, digest), []).append((seq, offset))
        codes = self.deadletter_codes
        for record in source.records("deadletter", self.partition, headers=False):
            problem = ""
            try:
                letter = self.c.decode(record.value or b"", expect=_DEAD_LETTER).record
            except codec.DecodeError as exc:
                problem = f"does not decode ({exc})"
                digest = sha256_digest(record.value or b"")
            else:
                digest = letter["raw_sha256"]
                raw = letter["raw"]
                if raw and sha256_digest(raw) != digest:
                    problem = f"holds raw bytes hashing to '{sha256_digest(raw)}', not its raw_sha256 '{digest}'"
                elif expected.get((letter["input"]["offset"], digest)):
                    seq, offset = expected[(letter["input"]["offset"], digest)].pop()
                    audited = codes.get(offset)
                    if audited is not None and audited != letter["code"]:
                        add(
                            Problem(
                                "DEADLETTER_CODE_MISMATCH",
                                f"dead letter at offset {record.offset} (input offset {letter['input']['offset']}) has code "
                                f"{letter['code']!r}, but audit seq {seq} (offset {offset}) records reason "
                                f"{audited!r} (altered)",
                                stream="deadletter",
                                offset=record.offset,
                                audit_seq=seq,
                                expected=audited,
                                recomputed=letter["code"],
                            )
                        )
                    continue
                else:
                    problem = f"(input offset {letter['input']['offset']}, raw '{digest}') is mirrored by no audit record"
            add(
                Problem(
                    "DEADLETTER_NOT_AUDITED",
                    f"dead letter at offset {record.offset} {problem} (altered or inserted)",
                    stream="deadletter",
                    offset=record.offset,
                    recomputed=digest,
                )
            )
        for (input_offset, digest), places in sorted(expected.items()):
            for seq, offset in places:
                add(
                    Problem(
                        "DEADLETTER_MISSING",
                        f"audit seq {seq} (offset {offset}) mirrors a dead letter of input offset {input_offset} "
                        f"('{digest}') that the dead-letter topic lacks (deleted)",
                        stream="audit",
                        offset=offset,
                        audit_seq=seq,
                        expected=digest,
                    )
                )


def _deadletter_code(c: codec.Codec, value: bytes | None) -> str | None:
    """The ``reason_code`` of an audit record that mirrors a dead letter (None when it does not decode)."""
    try:
        payload = codec.split_envelope(value or b"")[1][0]
        return str(c.decode(payload, expect=_AUDIT_ENTRY).record["reason_code"])
    except (codec.DecodeError, IndexError, KeyError):
        return None  # the walk already named an audit record that does not decode


def is_authenticated(fact: tuple[Any, ...], trusted: TrustedKeys) -> bool:
    """Whether a decoded audit record's payload may be believed: its MAC verifies under a pinned audit key,
    or no audit key is pinned at all (the verdict then says MACs were not verified)."""
    mac, recomputed = fact[_AT.mac], fact[_AT.recomputed]
    if recomputed is None:
        return not trusted.hmac  # a key id that is not pinned: not authenticated
    return recomputed == mac or macs_equal(recomputed, mac)
