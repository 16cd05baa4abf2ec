"""Anchorable records of a research run that stopped before its report.

A budget refusal or a failed fetch is a crossing of the activity boundary
like any other, so it is journalled (the public implementation left budget
refusals unanchored). The artifact is a small canonical JSON document::

    {"format": "bernstein.research.refusal/v1",          # or .../failure/v1
     "query": "...", "plan": ["<url>", ...],
     "refusal": {"code": "BUDGET_EXCEEDED", "cap", "limit", "attempted", "source"},
     #  failure: {"code": "<FetchCode>", "source", "message"[, "status"]}
     "fetched": [{"source_ref", "page_content_hash"}, ...]}

and the pages fetched before the stop are its observations (they are in the
CAS already). Terminal state / reason code: ``refused`` / ``budget_exhausted``
for a budget refusal, ``failed`` / ``fetch_failed`` for a fetch failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from producers.activity import ActivityResult
from producers.research.errors import (
    MalformedResearchArtifact,
    ResearchAborted,
    ResearchBudgetExceeded,
)
from producers.research.fetch import FetchedPage
from schemas.canonical import is_digest
from schemas.records import ActivityKind, Observation, TerminalState

REFUSAL_FORMAT: Final = "bernstein.research.refusal/v1"
FAILURE_FORMAT: Final = "bernstein.research.failure/v1"
REASON_BUDGET_EXHAUSTED: Final = "budget_exhausted"
REASON_FETCH_FAILED: Final = "fetch_failed"
PAGE_OBSERVATION: Final = "page"
"""Observation kind of a fetched page; its ref is the planned source URL."""

_SHAPES: Final = {
    REFUSAL_FORMAT: ("refusal", TerminalState.REFUSED, REASON_BUDGET_EXHAUSTED),
    FAILURE_FORMAT: ("failure", TerminalState.FAILED, REASON_FETCH_FAILED),
}


def page_observations(fetched: Sequence[FetchedPage]) -> tuple[Observation, ...]:
    return tuple(Observation(kind=PAGE_OBSERVATION, ref=p.source_ref, content_hash=p.content_hash) for p in fetched)


def abort_document(exc: ResearchAborted, *, query: str, plan: Sequence[str], fetched: Sequence[FetchedPage]) -> dict[str, Any]:
    """The canonical abort record for ``exc`` (integers and strings only)."""
    fmt = REFUSAL_FORMAT if isinstance(exc, ResearchBudgetExceeded) else FAILURE_FORMAT
    member = _SHAPES[fmt][0]
    return {
        "format": fmt,
        "query": query,
        "plan": list(plan),
        member: exc.record(),
        "fetched": [{"source_ref": p.source_ref, "page_content_hash": p.content_hash} for p in fetched],
    }


def aborted_result(exc: ResearchAborted, *, query: str, plan: Sequence[str], fetched: Sequence[FetchedPage]) -> ActivityResult:
    """The ActivityResult that anchors the stop: refused/budget_exhausted or failed/fetch_failed."""
    document = abort_document(exc, query=query, plan=plan, fetched=fetched)
    _member, state, reason = _SHAPES[document["format"]]
    return ActivityResult.build(
        ActivityKind.RESEARCH, document, page_observations(fetched), terminal_state=state, reason_code=reason
    )


@dataclass(frozen=True, slots=True)
class AbortRecord:
    """A parsed abort document (verify side)."""

    format: str
    query: str
    plan: tuple[str, ...]
    outcome: Mapping[str, Any]
    fetched: tuple[tuple[str, str], ...]
    """(source_ref, page_content_hash) in fetch order."""

    @property
    def terminal_state(self) -> str:
        return _SHAPES[self.format][1].value

    @property
    def reason_code(self) -> str:
        return _SHAPES[self.format][2]

    def describe(self) -> str:
        o = self.outcome
        if self.format == REFUSAL_FORMAT:
            return f"budget refusal recorded: {o.get('cap')}={o.get('limit')} at source {o.get('source')!r}"
        return f"fetch failure recorded: {o.get('code')} at source {o.get('source')!r}"


def parse_abort_document(document: Mapping[str, Any]) -> AbortRecord:
    """Shape-check an abort document (raises MalformedResearchArtifact)."""
    fmt = document.get("format")
    if fmt not in _SHAPES:
        raise MalformedResearchArtifact(f"unknown research artifact format {fmt!r}", field="format")
    member = _SHAPES[fmt][0]
    expected = {"format", "query", "plan", member, "fetched"}
    if set(document) != expected:
        raise MalformedResearchArtifact(f"fields must be exactly {', '.join(sorted(expected))}", field=str(fmt))
    query, plan, outcome, fetched = document["query"], document["plan"], document[member], document["fetched"]
    if not isinstance(query, str):
        raise MalformedResearchArtifact("must be a string", field="query")
    if not isinstance(plan, list) or not all(isinstance(p, str) for p in plan):
        raise MalformedResearchArtifact("must be an array of strings", field="plan")
    if not isinstance(outcome, dict) or not isinstance(outcome.get("code"), str) or not isinstance(outcome.get("source"), str):
        raise MalformedResearchArtifact("must be an object with string code and source", field=member)
    pairs: list[tuple[str, str]] = []
    if not isinstance(fetched, list):
        raise MalformedResearchArtifact("must be an array", field="fetched")
    for i, item in enumerate(fetched):
        if (
            not isinstance(item, dict)
            or set(item) != {"source_ref", "page_content_hash"}
            or not isinstance(item["source_ref"], str)
            or not is_digest(item["page_content_hash"])
        ):
            raise MalformedResearchArtifact("must be {source_ref, page_content_hash: sha256:<hex>}", field=f"fetched[{i}]")
        pairs.append((item["source_ref"], item["page_content_hash"]))
    return AbortRecord(format=fmt, query=query, plan=tuple(plan), outcome=dict(outcome), fetched=tuple(pairs))
