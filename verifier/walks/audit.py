"""Step 3, per run: the run's audit crossings joined with its journal, entry by entry and seal by seal.

Each run's report lists the partition chain's own findings (``bernstein.verifier.walks.partition``) where a walk of
that run alone would have met them, so ``verify`` and ``verify_many`` give the same report.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from bernstein.schemas.canonical import macs_equal
from bernstein.substrate.text import plural
from bernstein.verifier.checkpoints import final_seal_checkpoint_missing
from bernstein.verifier.report import AuditVerdict, Problem, RefusalSeen
from bernstein.verifier.sources import KcatSource, RecordSource
from bernstein.verifier.walks.partition import RESULT, _AuditEvent, _PartitionAudit


@dataclass
class Findings:
    """The first problem of one verdict, and how many further ones (the chain, seal, producer and audit walks)."""

    first: Problem | None = None
    further: int = 0

    def add(self, problem: Problem) -> None:
        if self.first is None:
            self.first = problem
        else:
            self.further += 1


class RefusalRecord(NamedTuple):
    """One refusal record of a run: where it is, the sha256 of its value, and what it says (None: undecodable)."""

    partition: int
    offset: int
    digest: str
    seen: RefusalSeen | None


@dataclass
class _AuditWalk:
    """One run's view of its partition's audit chain: its crossings joined with its journal, in order."""

    part: _PartitionAudit
    run_id: str
    findings: Findings = field(default_factory=Findings)
    pending: _AuditEvent | None = None
    flushed: int = 0
    """How many of the partition's findings this run's report holds already."""
    refusals_not_captured: int = 0
    deadletters_not_captured: int = 0

    # -- pulling records ---------------------------------------------------------

    def _next_run_event(self) -> _AuditEvent | None:
        """The next result or seal audit event of this run (refusals are counted and skipped).

        The chain's own findings up to that record join this run's findings first, in
        chain order, as if this run's walk had read the chain alone.
        """
        pending = self.pending
        if pending is not None:
            self.pending = None
            return pending
        event = self.part.next_event(self.run_id)
        if self.part.found:  # (none found: nothing to flush)
            self._flush(len(self.part.found) if event is None else bisect_right(self.part.found_at, event.position))
        return event

    def _flush(self, upto: int) -> None:
        if upto <= self.flushed:
            return
        found = self.part.found
        if self.findings.first is None:
            self.findings.first = found[self.flushed]
            self.findings.further += upto - self.flushed - 1
        else:
            self.findings.further += upto - self.flushed
        self.flushed = upto

    def _add_all(self, problems: list[Problem]) -> None:
        for problem in problems:
            self.findings.add(problem)

    def unchecked(self) -> Iterator[Problem]:
        """What the walk could not check, as named verdicts (exit 6, never a quiet note)."""
        part = self.part
        if not part.macs_verified:
            yield Problem(
                "AUDIT_MACS_NOT_VERIFIED",
                f"no audit key is pinned: the MACs of the partition's audit records (key {part.missing_key}) were not "
                "verified, so refusals, dead letters and audit payloads are unauthenticated (add the audit key to --trusted-keys)",
            )
        if not part.checkpoints_captured and part.v2_records:
            yield Problem(
                "CHECKPOINTS_NOT_CAPTURED",
                f"the partition's audit chain was written by a scheduler that signs checkpoints, but the capture has no "
                f"checkpoints topic: the {plural(part.expected_seq, 'audit record')} were not checked against a signed "
                "checkpoint, so a truncated tail would not show (add a kcat capture of the checkpoints topic)",
            )
        if part.checkpoints is not None and part.checkpoints.quorum_missing is not None:
            yield Problem("WITNESS_QUORUM_NOT_MET", part.checkpoints.quorum_missing)
        if part.checkpoints is not None and part.checkpoints.log_unchecked is not None:
            yield Problem("MERKLE_LOG_NOT_RECOMPUTED", part.checkpoints.log_unchecked)
        if part.checkpoints is not None and part.checkpoints.tail_too_old is not None:
            yield Problem("WITNESSED_TAIL_TOO_OLD", part.checkpoints.tail_too_old)
        if self.refusals_not_captured:
            yield Problem(
                "REFUSALS_NOT_CAPTURED",
                f"the audit chain mirrors {plural(self.refusals_not_captured, 'refusal')} of this run, but the capture has "
                "no refusals topic: they were not checked (add a kcat capture of the refusals topic)",
            )
        if self.deadletters_not_captured:
            yield Problem(
                "DEADLETTERS_NOT_CAPTURED",
                f"the audit chain mirrors {plural(self.deadletters_not_captured, 'dead letter')} on this partition, but "
                "the capture has no dead-letter topic: they were not checked (add a kcat capture of the dead-letter topic)",
            )

    # -- the join ------------------------------------------------------------------

    def expect_result(self, journal_seq: int, entry_hash: str, offset: int, *, recomputed: str | None = None) -> None:
        """Join journal entry ``journal_seq`` with its audit record.

        ``entry_hash`` is the stored hash; ``recomputed`` the hash of the stored
        payload. They differ only for an entry whose break the chain verdict
        already names; the audit agrees when it recorded either of them.
        """
        recomputed = recomputed or entry_hash
        while True:
            event = self._next_run_event()
            if event is None:
                self._disagree(
                    "AUDIT_MISSING_ENTRY",
                    f"journal entry seq {journal_seq} (offset {offset}) has no audit record: the audit chain ends first",
                    stream="journal",
                    offset=offset,
                    seq=journal_seq,
                )
                return
            if event.event != RESULT or event.journal_seq > journal_seq:
                self.pending = event
                self._disagree(
                    "AUDIT_MISSING_ENTRY",
                    f"journal entry seq {journal_seq} (offset {offset}) has no audit record (inserted into the journal, or its audit record deleted)",
                    stream="journal",
                    offset=offset,
                    seq=journal_seq,
                )
                return
            if event.journal_seq < journal_seq:
                self._journal_lacks(event)
                continue
            if event.record_hash not in (entry_hash, recomputed) and not event.tainted:
                self._disagree(
                    "AUDIT_DISAGREES",
                    f"journal seq {journal_seq} (offset {offset}) hashes to '{recomputed}' but audit seq {event.seq} recorded '{event.record_hash}'",
                    stream="journal",
                    offset=offset,
                    seq=journal_seq,
                    audit_seq=event.seq,
                    expected=event.record_hash,
                    recomputed=recomputed,
                )
            return

    def expect_seal(self, seal: dict[str, Any], value_hash: str, offset: int) -> None:
        while True:
            event = self._next_run_event()
            if event is None:
                self._disagree(
                    "AUDIT_TRUNCATED",
                    f"seal at offset {offset} commits audit seq {seal['audit_seq']} but the audit chain ends at seq {self.part.expected_seq - 1} "
                    "(audit tail truncated)",
                    stream="journal",
                    offset=offset,
                    seq=seal["entry_count"],
                    audit_seq=seal["audit_seq"],
                )
                return
            if event.event == RESULT:
                self._journal_lacks(event)
                continue
            if event.tainted:
                return
            if event.record_hash != value_hash:
                self._disagree(
                    "AUDIT_DISAGREES",
                    f"seal at offset {offset} hashes to '{value_hash}' but audit seq {event.seq} recorded '{event.record_hash}'",
                    stream="journal",
                    offset=offset,
                    seq=seal["entry_count"],
                    audit_seq=event.seq,
                    expected=event.record_hash,
                    recomputed=value_hash,
                )
            elif event.seq != seal["audit_seq"] or not macs_equal(event.prev_mac, seal["audit_head"]):
                self._disagree(
                    "SEAL_AUDIT_HEAD_MISMATCH",
                    f"seal at offset {offset} commits audit seq {seal['audit_seq']} head '{seal['audit_head']}', "
                    f"but its audit record is seq {event.seq} after '{event.prev_mac}'",
                    stream="journal",
                    offset=offset,
                    seq=seal["entry_count"],
                    audit_seq=event.seq,
                    expected=seal["audit_head"],
                    recomputed=event.prev_mac,
                )
            elif seal["final"] and event.version == 2 and self.part.checkpoints is not None and self.part.checkpoints_captured:
                # the step that wrote this final seal ended with a checkpoint over it
                missing = final_seal_checkpoint_missing(self.run_id, event.seq, event.offset, event.checkpoints_seen)
                if missing is not None:
                    self.findings.add(missing)
            return

    def finish_checkpoints(self, *, own_problems: bool) -> None:
        """After ``finish``: checkpoints beyond the chain's end, a missing last one, what none covers yet, and the
        partition's Merkle log. A log finding with ``runs`` (the topic's own signed heads) concerns this run only when
        the run has a leaf in the changed span and its own checks failed (``own_problems``): a record changed there is
        then this run's, and a clean run beside a tampered one keeps its verdict."""
        self._add_all([p for p in self.part.finish_checkpoints() if p.runs is None or (own_problems and self.run_id in p.runs)])

    def finish(self, journal_entries: int) -> bool:
        """Drain the audit chain; crossings of this run left over mean the journal lost its tail (returns whether any)."""
        first: _AuditEvent | None = None
        count = 0
        seen = False
        while (event := self._next_run_event()) is not None:
            seen = True
            if event.tainted:
                continue
            count += 1
            first = first or event
        if first is not None:
            what = f"journal seq {first.journal_seq}" if first.event == RESULT else "a seal"
            self._disagree(
                "JOURNAL_TRUNCATED",
                f"the audit chain mirrors {count} crossing(s) of this run after journal seq {journal_entries - 1}, starting with "
                f"{what} (audit seq {first.seq}): the journal lost its tail",
                stream="audit",
                offset=first.offset,
                seq=first.journal_seq,
                audit_seq=first.seq,
            )
        return seen

    def check_refusals(self, source: RecordSource, records: list[RefusalRecord]) -> None:
        """Every refusal record of the run must be one the audit chain mirrors, and vice versa.

        ``records`` are the run's refusal records, (refusals partition, offset, sha256 of the value),
        in partition and offset order (``_refusal_records``)."""
        refusal_hashes = self.part.run(self.run_id).refusal_hashes
        partitions = source.partitions("refusals")
        if not partitions:
            if not refusal_hashes:
                return
            if isinstance(source, KcatSource):  # a capture lists the topics it was given
                self.refusals_not_captured = len(refusal_hashes)
                return
            seq, offset, digest = refusal_hashes[0]
            self.findings.add(
                Problem(
                    "REFUSALS_STREAM_MISSING",
                    f"the audit chain mirrors {plural(len(refusal_hashes), 'refusal')} of this run (the first at audit "
                    f"seq {seq}, offset {offset}), but {source.describe()} has no refusals stream (deleted)",
                    stream="audit",
                    offset=offset,
                    audit_seq=seq,
                    expected=digest,
                )
            )
            return
        expected: dict[str, list[tuple[int, int]]] = {}
        for seq, offset, digest in refusal_hashes:
            expected.setdefault(digest, []).append((seq, offset))
        for partition, record_offset, digest, _ in records:
            if expected.get(digest):
                expected[digest].pop()
                continue
            self.findings.add(
                Problem(
                    "REFUSAL_NOT_AUDITED",
                    f"refusal record at offset {record_offset} (refusals partition {partition}) hashes to '{digest}', "
                    "which no audit record of this run mirrors (altered or inserted)",
                    stream="refusals",
                    offset=record_offset,
                    recomputed=digest,
                )
            )
        for digest, places in sorted(expected.items()):
            for seq, offset in places:
                self.findings.add(
                    Problem(
                        "REFUSAL_MISSING",
                        f"audit seq {seq} (offset {offset}) mirrors a refusal '{digest}' that the refusals topic lacks (deleted)",
                        stream="audit",
                        offset=offset,
                        audit_seq=seq,
                        expected=digest,
                    )
                )

    def check_deadletters(self, source: RecordSource) -> None:
        """The partition's dead letters against the chain (``_PartitionAudit.check_deadletters``)."""
        self._add_all(self.part.check_deadletters(source))
        self.deadletters_not_captured = self.part.deadletters_not_captured

    def _journal_lacks(self, event: _AuditEvent) -> None:
        """An audit record of a result the journal skipped (met while joining a later entry or a seal)."""
        self._disagree(
            "JOURNAL_MISSING_ENTRY",
            f"audit seq {event.seq} (offset {event.offset}) mirrors journal seq {event.journal_seq}, which the journal lacks",
            # the journal has no record to point at: name the audit record that proves the loss
            stream="audit",
            offset=event.offset,
            seq=event.journal_seq,
            audit_seq=event.seq,
            tainted=event.tainted,
        )

    def _disagree(
        self,
        code: str,
        message: str,
        *,
        stream: str,
        offset: int,
        seq: int,
        audit_seq: int | None = None,
        expected: str = "",
        recomputed: str = "",
        tainted: bool = False,
    ) -> None:
        """A journal/audit disagreement, unless the audit record involved is already reported as tampered."""
        if tainted:
            return
        self.findings.add(
            Problem(
                code,
                message,
                stream=stream,
                offset=offset,
                seq=seq,
                audit_seq=audit_seq,
                expected=expected,
                recomputed=recomputed,
            )
        )

    def verdict(self) -> AuditVerdict:
        part = self.part
        notes: list[str] = []
        if not part.macs_verified:
            notes.insert(0, f"MACs not verified: audit key {part.missing_key} is not pinned (add it to --trusted-keys)")
        note = "; ".join(notes)
        crossings = part.run(self.run_id)
        return AuditVerdict(
            records=part.count,
            run_records=crossings.records,
            macs_verified=part.macs_verified and part.count > 0,
            key_ids=tuple(sorted(part.key_ids)),
            refusals=crossings.refusals,
            checkpoints=part.checkpoints.verified if part.checkpoints is not None else 0,
            uncovered=part.uncovered,
            tree_leaves=part.tree_leaves,
            tree_heads=part.checkpoints.tree.verified if part.checkpoints is not None else 0,
            problem=self.findings.first,
            further_problems=self.findings.further,
            note=note,
        )
