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

The format and its parser live in ``bernstein.schemas.documents.research`` (shared with
the scheduler and the verifier); this module builds the record from a stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bernstein.producers.activity import ActivityResult
from bernstein.producers.research.errors import ResearchAborted, ResearchBudgetExceeded
from bernstein.producers.research.fetch import FetchedPage
from bernstein.schemas.documents.research import (
    ABORT_SHAPES,
    FAILURE_FORMAT,
    PAGE_OBSERVATION,
    REASON_BUDGET_EXHAUSTED,
    REASON_FETCH_FAILED,
    REFUSAL_FORMAT,
    AbortRecord,
    parse_abort_document,
)
from bernstein.schemas.records import ActivityKind, Observation

__all__ = [
    "FAILURE_FORMAT",
    "PAGE_OBSERVATION",
    "REASON_BUDGET_EXHAUSTED",
    "REASON_FETCH_FAILED",
    "REFUSAL_FORMAT",
    "AbortRecord",
    "abort_document",
    "aborted_result",
    "page_observations",
    "parse_abort_document",
]


def page_observations(fetched: Sequence[FetchedPage]) -> tuple[Observation, ...]:
    return tuple(Observation(kind=PAGE_OBSERVATION, ref=p.source_ref, content_hash=p.content_hash, size=p.size) for p in fetched)


def abort_document(exc: ResearchAborted, *, query: str, plan: Sequence[str], fetched: Sequence[FetchedPage]) -> dict[str, Any]:
    """The canonical abort record for ``exc`` (integers and strings only)."""
    fmt = REFUSAL_FORMAT if isinstance(exc, ResearchBudgetExceeded) else FAILURE_FORMAT
    member = ABORT_SHAPES[fmt][0]
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
    _member, state, reason = ABORT_SHAPES[document["format"]]
    return ActivityResult.build(
        ActivityKind.RESEARCH, document, page_observations(fetched), terminal_state=state, reason_code=reason
    )
