"""The scheduler's entry point into the modality document rules.

``record_violation`` is called by ``consumers/core/rules.py`` after every
generic check of an ActivitySubmission has passed; it returns the first rule
of the submission's modality its own bytes break (artifact + observations), or
None. Pure: the same submission always gives the same answer, and nothing
raises for hostile bytes (a malformed document is itself a violation).

Kinds with rules here: ``research`` (``bernstein.schemas.documents.research``), ``data``
and ``ops`` (``bernstein.schemas.documents.dataops``). ``coding`` artifacts are opaque
and ``browser`` sessions are checked against the scheduler's session state
(``step.py``), which these stateless rules cannot see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from bernstein.schemas.documents import dataops, research
from bernstein.schemas.documents.common import Submission, Violation

RULES: Final[Mapping[str, Callable[[Submission], Violation | None]]] = {
    "research": research.submission_violation,
    "data": dataops.submission_violation,
    "ops": dataops.submission_violation,
}
"""kind -> its document rule."""

DOCUMENT_KINDS: Final = frozenset(RULES)


def submission_violation(
    *,
    run_id: str,
    stage_id: str,
    kind: str,
    terminal_state: str,
    reason_code: str,
    artifact: bytes,
    observations: Sequence[Mapping[str, Any]],
) -> Violation | None:
    """The first document rule this submission breaks, or None (also None for kinds without rules)."""
    rule = RULES.get(kind)
    if rule is None:
        return None
    return rule(Submission(run_id, stage_id, kind, terminal_state, reason_code, artifact, observations))


def record_violation(sub: Mapping[str, Any]) -> Violation | None:
    """``submission_violation`` of a decoded ActivitySubmission record (its fields by name)."""
    return submission_violation(
        run_id=sub["run_id"],
        stage_id=sub["stage_id"],
        kind=sub["kind"],
        terminal_state=sub["terminal_state"],
        reason_code=sub["reason_code"],
        artifact=sub["artifact"],
        observations=sub["observations"],
    )
