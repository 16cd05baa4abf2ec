"""The verification report: frozen verdicts, one per check, that the CLI only renders.

Checks run, and appear, in this order: the run's journal chain, its seals,
the partition's audit chain (and its agreement with the journal), then one
verdict per ``activity.result`` entry. A problem carries a stable ``code``,
the exact position (journal seq, Kafka offset) and the expected and
recomputed values, so a tamper is named once, where it happened.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from verifier.checks.base import DetailLine

EXIT_VERIFIED = 0
EXIT_NOT_FOUND = 1
EXIT_MISMATCH = 2


STREAMS = ("journal", "audit", "refusals")
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
      docs/verifier.md says which per code.
    """

    code: str
    message: str
    stream: str = ""
    offset: int | None = None
    seq: int | None = None
    audit_seq: int | None = None
    expected: str = ""
    recomputed: str = ""

    def __post_init__(self) -> None:
        if (self.offset is None) != (self.stream == "") or self.stream not in ("", *STREAMS):
            raise ValueError(f"Problem {self.code}: offset {self.offset} needs one of the streams {STREAMS}, got {self.stream!r}")

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}


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


@dataclass(frozen=True)
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
            "details": [{"text": d.text, "ok": d.ok, **dict(d.data)} for d in self.details],
            **({"data": self.data} if self.data else {}),
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
    dump_problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return self.found and not self.dump_problems and all(v is not None and v.ok for v in (self.chain, self.seal, self.audit))


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
        return self.header.ok and all(s.ok for s in self.stages)

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.header, all(s.ok for s in self.stages), len(self.stages))


def exit_code_for(header: RunHeader, stages_ok: bool, stage_count: int) -> int:
    if not header.found:
        return EXIT_NOT_FOUND
    if not (header.ok and stages_ok):
        return EXIT_MISMATCH
    if stage_count == 0:
        return EXIT_NOT_FOUND
    return EXIT_VERIFIED


def problem_json(problem: Problem | None) -> dict[str, Any] | None:
    return None if problem is None else problem.to_json()
