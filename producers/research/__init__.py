"""Research activities: sourced reports whose every claim is pinned to fetched bytes.

Public API::

    from bernstein.producers.research import (
        ResearchWorker, ResearchBudget, ResearchBudgetExceeded, ClaimDraft, SpanRef,
        ActivityRejected, FetchedPage, ResearchRun, make_fetch, extractive_synthesiser,
    )

    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=8))
    run = worker.run(query=q, sources=urls, fetch_fn=make_fetch(), synthesise=extractive_synthesiser)
    # run.result is the ActivityResult to publish; run.report_bytes are stored in the CAS.

Modules, one job each: ``budget`` (caps), ``fetch`` (the default httpx fetch),
``quotes`` (the quote normalisation used at build and verify time),
``report`` (report model, canonical bytes, boundary validation, parsing),
``aborted`` (refused / failed records), ``synthesis`` (drafts and the
extractive baseline), ``worker`` (the run), ``cli`` (``bernstein research run``).
The rules are written down in ``docs/research.md``.
"""

from __future__ import annotations

from bernstein.producers.activity import ActivityRejected
from bernstein.producers.research.aborted import REASON_BUDGET_EXHAUSTED, REASON_FETCH_FAILED, AbortRecord
from bernstein.producers.research.budget import ResearchBudget
from bernstein.producers.research.errors import (
    FetchCode,
    FetchRefused,
    InvalidBudget,
    MalformedResearchArtifact,
    ResearchAborted,
    ResearchBudgetExceeded,
    SourceFetchFailed,
)
from bernstein.producers.research.fetch import FetchedPage, FetchFn, Redirect, default_fetch, fetch_page, make_fetch
from bernstein.producers.research.quotes import NORMALISATION_VERSION, normalise_text, page_text, quote_in_page
from bernstein.producers.research.report import (
    REPORT_FORMAT,
    CitationRecord,
    ClaimRecord,
    RejectCode,
    ResearchReport,
    SourceRecord,
    parse_report,
    validate_report,
)
from bernstein.producers.research.synthesis import (
    ClaimDraft,
    SpanRef,
    Synthesiser,
    extractive_synthesiser,
    load_synthesiser,
    make_extractive_synthesiser,
)
from bernstein.producers.research.worker import ResearchRun, ResearchWorker

__all__ = [
    "NORMALISATION_VERSION",
    "REASON_BUDGET_EXHAUSTED",
    "REASON_FETCH_FAILED",
    "REPORT_FORMAT",
    "AbortRecord",
    "ActivityRejected",
    "CitationRecord",
    "ClaimDraft",
    "ClaimRecord",
    "FetchCode",
    "FetchFn",
    "FetchRefused",
    "FetchedPage",
    "InvalidBudget",
    "MalformedResearchArtifact",
    "Redirect",
    "RejectCode",
    "ResearchAborted",
    "ResearchBudget",
    "ResearchBudgetExceeded",
    "ResearchReport",
    "ResearchRun",
    "ResearchWorker",
    "SourceFetchFailed",
    "SourceRecord",
    "SpanRef",
    "Synthesiser",
    "default_fetch",
    "extractive_synthesiser",
    "fetch_page",
    "load_synthesiser",
    "make_extractive_synthesiser",
    "make_fetch",
    "normalise_text",
    "page_text",
    "parse_report",
    "quote_in_page",
    "validate_report",
]
