"""The verification report: frozen verdicts, one per check, that the CLI only renders.

Checks run, and appear, in this order: the run's journal chain, its seals,
the partition's audit chain (and its agreement with the journal), then one
verdict per ``activity.result`` entry. A problem carries a stable ``code``,
the exact position (journal seq, Kafka offset) and the expected and
recomputed values, so a tamper is named once, where it happened.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

from bernstein.substrate.exit_codes import EXIT_MISMATCH as EXIT_MISMATCH
from bernstein.substrate.exit_codes import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from bernstein.substrate.exit_codes import EXIT_NOT_FULLY_VERIFIED as EXIT_NOT_FULLY_VERIFIED
from bernstein.substrate.exit_codes import EXIT_OK
from bernstein.substrate.exit_codes import EXIT_OPEN as EXIT_OPEN
from bernstein.verifier.checks.base import DetailLine

# The verdicts are exit codes; every exit code and its meaning is in ``bernstein.substrate.exit_codes`` (re-exported here).
EXIT_VERIFIED: Final = EXIT_OK
"""Every record authenticated with pinned keys and every evidence blob reattached and re-hashed."""


STREAMS = ("journal", "audit", "refusals", "deadletter", "checkpoints")
"""The streams a Problem's ``offset`` can point into."""


@dataclass(frozen=True)
class Problem:
    """One failed check, with its evidence (docs/verifier.md lists every code).

    Each field has one meaning, whatever the code, so that a machine reading the
    --json report can go to the record without parsing the message:

    - ``stream`` and ``offset``: the record the problem was found at (set together);
    - ``seq``: a journal sequence number, as the record states it; for a seal, its
      entry count, which is the seq of the entry that would follow it;
    - ``audit_seq``: a sequence number of the partition's audit chain;
    - ``expected`` / ``recomputed``: the value the check expected (mostly what the
      data commits to) and the one recomputed from the stored bytes or found instead;
      docs/verifier.md says which per code;
    - ``leaf_index``: a leaf of the partition's Merkle log (its position among the journal
      partition's entries and seals), where the problem starts.
    """

    code: str
    message: str
    stream: str = ""
    offset: int | None = None
    seq: int | None = None
    audit_seq: int | None = None
    expected: str = ""
    recomputed: str = ""
    leaf_index: int | None = None
    runs: frozenset[str] | None = field(default=None, compare=False, repr=False)
    """For a partition's finding: the runs it concerns (None: every run of the partition). Not in the report."""

    def __post_init__(self) -> None:
        if (self.offset is None) != (self.stream == "") or self.stream not in ("", *STREAMS):
            raise ValueError(f"Problem {self.code}: offset {self.offset} needs one of the streams {STREAMS}, got {self.stream!r}")

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "") and k != "runs"}


@dataclass(frozen=True, kw_only=True)
class HeaderCheckVerdict:
    """What the chain, seal and audit verdicts share: the first problem, a count of the rest.

    Each of these checks names only its first problem and counts the others; it
    is ok when there is none. The fields are keyword-only so that each verdict's
    own facts stay first in its constructor.
    """

    problem: Problem | None = None
    further_problems: int = 0

    @property
    def ok(self) -> bool:
        return self.problem is None

    def to_json(self) -> dict[str, Any]:
        """The verdict's section of the --json report: ``ok`` and every field (tuples as lists)."""
        section: dict[str, Any] = {"ok": self.ok}
        for f in fields(self):
            value = getattr(self, f.name)
            section[f.name] = list(value) if isinstance(value, tuple) else value
        section["problem"] = problem_json(self.problem)
        return section


@dataclass(frozen=True)
class ChainVerdict(HeaderCheckVerdict):
    """The run's journal hash chain."""

    entries: int
    head: str
    partition: int | None


@dataclass(frozen=True)
class SealVerdict(HeaderCheckVerdict):
    """The run's signed seals (periodic and final)."""

    seals: int
    final: bool
    covered: int
    """Entries covered by the last valid seal."""
    key_ids: tuple[str, ...] = ()
    closed_by: str = ""
    """The producer whose signed RunClose closed the run ("" while open, or for a RunClose.v1)."""
    closed_by_key: str = ""
    """The key id that signed that close."""


@dataclass(frozen=True)
class AuditVerdict(HeaderCheckVerdict):
    """The partition's HMAC audit chain and its agreement with the run's journal."""

    records: int
    run_records: int
    """Audit records about this run (results, refusals, seals)."""
    macs_verified: bool
    key_ids: tuple[str, ...] = ()
    refusals: int = 0
    note: str = ""
    checkpoints: int = 0
    """Signed partition checkpoints that verified and agree with the audit chain."""
    uncovered: int = 0
    """Audit records of the partition that no verified checkpoint covers yet (after the last one)."""
    tree_leaves: int | None = None
    """Leaves of the partition's Merkle log recomputed from its journal (None: the source holds only some runs' records)."""
    tree_heads: int = 0
    """Signed tree heads (v2 checkpoints) the recomputed log reproduced."""


@dataclass(frozen=True)
class ProducerKeyUse:
    """A producer key that signed records of the run (verified signatures), with the producer it signed for."""

    key_id: str
    producer: str
    records: int

    def to_json(self) -> dict[str, Any]:
        return {"key_id": self.key_id, "producer": self.producer, "records": self.records}


@dataclass(frozen=True)
class ProducerVerdict(HeaderCheckVerdict):
    """The producers' signatures in the run's journal: every ``JournalEntry.v3`` and every final seal's
    ``closed_by`` (a signed RunClose.v2), checked against pinned producer keys only."""

    signed: int
    """Producer signatures that verified."""
    legacy: int
    """Entries that predate producer signatures (JournalEntry.v1/v2, final seals of a RunClose.v1): not a problem."""
    keys: tuple[ProducerKeyUse, ...] = ()

    def to_json(self) -> dict[str, Any]:
        section = super().to_json()
        section["keys"] = [k.to_json() for k in self.keys]
        return section


@dataclass(frozen=True)
class KeysUsed:
    """Which pinned key ids signed or MACed what in the run (only keys whose signature or MAC verified)."""

    seal: tuple[str, ...] = ()
    checkpoint: tuple[str, ...] = ()
    audit: tuple[str, ...] = ()
    producer: tuple[ProducerKeyUse, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "seal": list(self.seal),
            "checkpoint": list(self.checkpoint),
            "audit": list(self.audit),
            "producer": [k.to_json() for k in self.producer],
        }


@dataclass(frozen=True, init=False)
class StageVerdict:
    """One ``activity.result`` entry, reconstructed."""

    stage_id: str
    kind: str
    seq: int
    offset: int
    ok: bool
    reason: str = ""
    notes: tuple[str, ...] = ()
    details: tuple[DetailLine, ...] = ()
    evidence_reattached: bool = False
    terminal_state: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    unchecked: str = ""
    """Why the stage could not be checked (no content store, ...): never ok then, but not a mismatch either."""
    incomplete: bool = False
    """A computer-use session whose actions were journalled but that never produced an accepted browser
    result (a killed worker, a refused result): its actions are replayed like any others, and it is shown."""
    findings: tuple[Problem, ...] = ()
    """Named problems of this stage (``EVIDENCE_SIZE_MISMATCH``), in the document as ``problems``; the stage fails."""
    producer: str = ""
    """The producer the stage's journal entry names (its submission's ``producer.id``); "" when unknown."""
    key_id: str = ""
    """The producer key that signed the stage's submission (JournalEntry.v3); whether that signature verifies
    under a pinned key is the report's producers verdict, which names the entry when it does not."""

    def __init__(
        self,
        stage_id: str,
        kind: str,
        seq: int,
        offset: int,
        ok: bool,
        reason: str = "",
        notes: tuple[str, ...] = (),
        details: tuple[DetailLine, ...] = (),
        evidence_reattached: bool = False,
        terminal_state: str = "",
        data: dict[str, Any] | None = None,
        unchecked: str = "",
        incomplete: bool = False,
        findings: tuple[Problem, ...] = (),
        producer: str = "",
        key_id: str = "",
    ) -> None:
        # One dict update, not the generated frozen __init__'s object.__setattr__ per field: a pass
        # builds one verdict per stage, and this is 0.7 us against 1.65 us (a sixth of the stage pass).
        self.__dict__.update(
            stage_id=stage_id,
            kind=kind,
            seq=seq,
            offset=offset,
            ok=ok,
            reason=reason,
            notes=notes,
            details=details,
            evidence_reattached=evidence_reattached,
            terminal_state=terminal_state,
            data={} if data is None else data,
            unchecked=unchecked,
            incomplete=incomplete,
            findings=findings,
            producer=producer,
            key_id=key_id,
        )

    def made_by(self, producer: str, key_id: str) -> StageVerdict:
        """This verdict, naming who made the stage (set once by the builder, before the verdict is handed out)."""
        self.__dict__.update(producer=producer, key_id=key_id)
        return self

    @property
    def failed(self) -> bool:
        return not self.ok and not self.unchecked

    def to_json(self) -> dict[str, Any]:
        return {
            "stage_id": self.stage_id,
            "kind": self.kind,
            "seq": self.seq,
            "offset": self.offset,
            "ok": self.ok,
            "reason": self.reason,
            "notes": list(self.notes),
            "evidence_reattached": self.evidence_reattached,
            "terminal_state": self.terminal_state,
            "producer": self.producer,
            "key_id": self.key_id,
            "details": [{"text": d.text, "ok": d.ok, **dict(d.data)} for d in self.details],
            **({"data": self.data} if self.data else {}),
            **({"unchecked": self.unchecked} if self.unchecked else {}),
            **({"incomplete": True} if self.incomplete else {}),
            **({"problems": [p.to_json() for p in self.findings]} if self.findings else {}),
        }


@dataclass(frozen=True)
class RefusalSeen:
    """A refusal record of the run, and who sent what was refused, as the scheduler recorded it.

    The record is the scheduler's: the audit chain mirrors its hash (``REFUSAL_NOT_AUDITED`` otherwise),
    so these names are as trustworthy as the scheduler; a Refusal.v1 predates them."""

    partition: int
    offset: int
    code: str
    stage_id: str
    kind: str
    producer: str
    """The producer.id the refused record named ("" for a Refusal.v1)."""
    key_id: str
    """The key id it said signed it ("" for an unsigned record or a Refusal.v1)."""
    authenticated: bool | None
    """True: refused after that producer's registered key verified its signature (the producer sent it);
    False: refused before or at the signature check (the names are only claimed); None: a Refusal.v1."""

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "code": self.code,
            "stage_id": self.stage_id,
            "kind": self.kind,
            "producer": self.producer,
            "key_id": self.key_id,
            "authenticated": self.authenticated,
        }


@dataclass(frozen=True)
class RunHeader:
    """Everything decided before the per-stage verdicts: found, chain, seal, audit."""

    run_id: str
    source: str
    found: bool
    reason: str = ""
    """Why the run is not found (or a dump problem)."""
    chain: ChainVerdict | None = None
    seal: SealVerdict | None = None
    audit: AuditVerdict | None = None
    producers: ProducerVerdict | None = None
    """Producer signatures (None only where no verdict was reached: the run not found)."""
    keys: KeysUsed | None = None
    dump_problems: tuple[Problem, ...] = ()
    unchecked: tuple[Problem, ...] = ()
    """Checks that could not be run (docs/verifier.md, "not checked"): not tamper, but not a pass either."""
    open: bool = False
    """No final seal, and no record (audit chain, seal) says one was written: the run is still open."""
    records_only: bool = False
    """``--records-only``: the evidence blobs were deliberately not reattached."""
    refusals: tuple[RefusalSeen, ...] = ()
    """The run's refusal records, in partition and offset order."""

    @property
    def ok(self) -> bool:
        """No check failed (records, seals, audit, dump); says nothing about what was not checked."""
        return (
            self.found
            and not self.dump_problems
            and all(v is not None and v.ok for v in (self.chain, self.seal, self.audit))
            and (self.producers is None or self.producers.ok)
        )


@dataclass(frozen=True)
class RunReport:
    """The whole verdict on one run."""

    header: RunHeader
    stages: tuple[StageVerdict, ...]

    @property
    def run_id(self) -> str:
        return self.header.run_id

    @property
    def found(self) -> bool:
        return self.header.found

    @property
    def ok(self) -> bool:
        """Verified (exit 0): what --json calls ``ok``; an open, not fully verified or empty run is not ok."""
        return self.exit_code == EXIT_VERIFIED

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.header, StageTally.of(self.stages))


@dataclass
class StageTally:
    """What the stage verdicts add up to, for the exit code and the final line."""

    activities: int = 0
    """Stages of accepted activity.result entries (incomplete sessions are not activities)."""
    failed: int = 0
    unchecked: int = 0
    incomplete: int = 0

    def add(self, stage: StageVerdict) -> None:
        if stage.incomplete:
            self.incomplete += 1
        else:
            self.activities += 1
        if stage.failed:
            self.failed += 1
        elif stage.unchecked:
            self.unchecked += 1

    @classmethod
    def of(cls, stages: tuple[StageVerdict, ...] | list[StageVerdict]) -> StageTally:
        tally = cls()
        for stage in stages:
            tally.add(stage)
        return tally


def exit_code_for(header: RunHeader, tally: StageTally) -> int:
    """The verdict, by precedence: not found (1), mismatch (2), not fully verified (6), open (5),
    no activity (1), verified (0). A mismatch beats everything; a check that could not be run beats
    "open", whose final line says what did verify."""
    if not header.found:
        return EXIT_NOT_FOUND
    if not header.ok or tally.failed:
        return EXIT_MISMATCH
    if header.unchecked or tally.unchecked:
        return EXIT_NOT_FULLY_VERIFIED
    if header.open:
        return EXIT_OPEN
    if tally.activities == 0:
        return EXIT_NOT_FOUND
    return EXIT_VERIFIED


VERDICTS = {
    EXIT_VERIFIED: "verified",
    EXIT_NOT_FOUND: "not_found",
    EXIT_MISMATCH: "mismatch",
    EXIT_OPEN: "open",
    EXIT_NOT_FULLY_VERIFIED: "not_fully_verified",
}
"""The --json ``verdict`` for each exit code (1 is ``no_activity`` when the run was found)."""


def verdict_name(header: RunHeader, code: int) -> str:
    if code == EXIT_NOT_FOUND and header.found:
        return "no_activity"
    return VERDICTS[code]


def problem_json(problem: Problem | None) -> dict[str, Any] | None:
    return None if problem is None else problem.to_json()
