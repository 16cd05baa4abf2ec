"""The research report as the worker builds it: the boundary refusal before anything is stored.

The report's format, model, parsing and rules live in
``bernstein.schemas.documents.research`` (one home shared with the scheduler and the
verifier); they are re-exported here so the producers' names keep working.

``validate_report`` is the worker's boundary: it raises ``ActivityRejected``
with a ``RejectCode`` before anything is stored or published. The scheduler
refuses the same byte-decidable rules again (``RefusalCode.RESEARCH_*``), so a
report from another SDK cannot bypass them. ``parse_report`` is the
verifier's loader: it raises ``MalformedResearchArtifact``.
"""

from __future__ import annotations

from collections.abc import Mapping

from bernstein.producers.activity import ActivityRejected
from bernstein.schemas.documents.research import (
    REPORT_FORMAT,
    CitationRecord,
    ClaimRecord,
    RejectCode,
    ResearchReport,
    SourceRecord,
    citation_problem,
    is_valid_claim_id,
    load_document,
    parse_report,
    parse_report_document,
    report_problem,
)

__all__ = [
    "REPORT_FORMAT",
    "CitationRecord",
    "ClaimRecord",
    "RejectCode",
    "ResearchReport",
    "SourceRecord",
    "citation_problem",
    "is_valid_claim_id",
    "load_document",
    "parse_report",
    "parse_report_document",
    "validate_report",
]


def validate_report(report: ResearchReport, page_texts: Mapping[str, str] | None = None) -> None:
    """Refuse a report that may not cross the boundary (raises ActivityRejected).

    ``page_texts`` maps each source_ref to its normalised page text
    (``quotes.page_text``); when given, every quote must occur in its page.
    """
    problem = report_problem(report, page_texts=page_texts)
    if problem is not None:
        raise ActivityRejected(problem.message, code=problem.code, evidence=dict(problem.evidence))
