"""The research worker: plan, fetch under budget, synthesise, bind, validate, anchor.

    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=8))
    run = worker.run(query="what changed in Quill 2.0", sources=[...],
                     fetch_fn=make_fetch(), synthesise=extractive_synthesiser)
    emitter.publish(run_id="run-42", stage_id="research-0", role="scout", result=run.result)

Order of a run (each step a separate, testable function):

1. Plan: the sources, de-duplicated in first-seen order.
2. For each planned source: check the fetch and cost caps (before the fetch),
   fetch with the remaining byte allowance, check the byte cap, store the
   exact bytes in the CAS at once and record a ``page`` Observation.
3. ``synthesise(query, fetched)`` drafts claims (the only stochastic step).
4. Bind every span to the hash of the page fetched for its source, assemble
   the report and validate it (``report.validate_report``): an uncited claim,
   an empty quote, an unfetched source or a quote absent from its page is
   refused with ``ActivityRejected`` and nothing is stored as a report.
5. Store the report's canonical bytes; its hash is the artifact_hash of a
   ``research`` ActivityResult whose observations are the fetched pages.

Steps 1, 2 (given the fetched bytes), 4 and 5 are a pure function of the
query, the plan and the bytes: the same inputs give a byte-identical report.
A budget overrun or a failed fetch raises ``ResearchBudgetExceeded`` /
``SourceFetchFailed`` carrying ``.result``, a refused / failed ActivityResult
to publish so the stop is journalled too.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bernstein.producers.activity import ActivityRejected, ActivityResult
from bernstein.producers.research.aborted import aborted_result, page_observations
from bernstein.producers.research.budget import CAP_BYTES, ResearchBudget
from bernstein.producers.research.errors import (
    FetchCode,
    FetchRefused,
    ResearchAborted,
    ResearchBudgetExceeded,
    SourceFetchFailed,
)
from bernstein.producers.research.fetch import FetchedPage, FetchFn, default_fetch
from bernstein.producers.research.quotes import normalise_text
from bernstein.producers.research.report import (
    CitationRecord,
    ClaimRecord,
    RejectCode,
    ResearchReport,
    SourceRecord,
    validate_report,
)
from bernstein.producers.research.synthesis import ClaimDraft, SpanRef, Synthesiser, extractive_synthesiser
from bernstein.schemas.records import MAX_REF_LENGTH, ActivityKind, Observation
from bernstein.substrate.cas import BlobIntegrityError, BlobStore


@dataclass(frozen=True)
class ResearchRun:
    """A completed run: the report, its canonical bytes (stored) and the result to publish."""

    query: str
    plan: tuple[str, ...]
    fetched: tuple[FetchedPage, ...]
    report: ResearchReport
    report_bytes: bytes
    result: ActivityResult

    @property
    def report_hash(self) -> str:
        return self.result.artifact_hash

    @property
    def observations(self) -> tuple[Observation, ...]:
        return self.result.observations


def plan_sources(sources: Iterable[str]) -> tuple[str, ...]:
    """The plan: sources de-duplicated, first-seen order kept (raises ActivityRejected)."""
    if isinstance(sources, str):
        raise ActivityRejected("sources must be a list of URLs, not one string", code=RejectCode.INVALID_SOURCE)
    plan: list[str] = []
    for position, source in enumerate(sources):
        if (
            not isinstance(source, str)
            or not source.strip()
            or len(source) > MAX_REF_LENGTH
            or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in source)
        ):
            raise ActivityRejected(
                f"source {position} must be a non-empty string of at most {MAX_REF_LENGTH} characters "
                f"without control characters, got {source!r:.80}",
                code=RejectCode.INVALID_SOURCE,
                evidence={"position": str(position)},
            )
        if source not in plan:
            plan.append(source)
    if not plan:
        raise ActivityRejected("a research run needs at least one source", code=RejectCode.EMPTY_PLAN)
    return tuple(plan)


def accepts_max_bytes(fetch_fn: Callable[..., object]) -> bool:
    """True when ``fetch_fn`` takes a ``max_bytes`` keyword (the byte allowance is then passed)."""
    try:
        parameters = inspect.signature(fetch_fn).parameters.values()
    except (TypeError, ValueError):
        return False
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            return True
        if parameter.name == "max_bytes" and parameter.kind in (
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            return True
    return False


def bind_claims(drafts: object, fetched: Sequence[FetchedPage]) -> tuple[ClaimRecord, ...]:
    """Turn drafts into claim records pinned to the fetched pages' hashes (raises ActivityRejected)."""
    if isinstance(drafts, (str, bytes)) or not isinstance(drafts, Iterable):
        raise ActivityRejected(
            f"synthesise must return a sequence of ClaimDraft, got {type(drafts).__name__}", code=RejectCode.MALFORMED_DRAFT
        )
    by_ref = {page.source_ref: page for page in fetched}
    claims: list[ClaimRecord] = []
    for position, draft in enumerate(drafts, start=1):
        if not isinstance(draft, ClaimDraft):
            raise ActivityRejected(
                f"draft {position} is a {type(draft).__name__}, not a ClaimDraft", code=RejectCode.MALFORMED_DRAFT
            )
        claim_id = draft.claim_id or f"c{position}"
        if not isinstance(draft.statement, str) or not isinstance(claim_id, str):
            raise ActivityRejected(f"draft {position} needs a string statement and claim_id", code=RejectCode.MALFORMED_DRAFT)
        citations: list[CitationRecord] = []
        for index, span in enumerate(draft.spans):
            if not isinstance(span, SpanRef) or not isinstance(span.quote, str):
                raise ActivityRejected(
                    f"claim {claim_id!r} span {index} must be a SpanRef with a string quote",
                    code=RejectCode.MALFORMED_DRAFT,
                )
            page = by_ref.get(span.source_ref)
            if page is None:
                raise ActivityRejected(
                    f"claim {claim_id!r} span {index} cites source {span.source_ref!r} that was not fetched in this run",
                    code=RejectCode.SOURCE_NOT_FETCHED,
                    evidence={"claim_id": claim_id, "source_ref": span.source_ref},
                )
            citations.append(
                CitationRecord(
                    claim_id=claim_id,
                    source_ref=span.source_ref,
                    page_content_hash=page.content_hash,
                    quote=normalise_text(span.quote),
                )
            )
        claims.append(ClaimRecord(claim_id=claim_id, statement=draft.statement, citations=tuple(citations)))
    return tuple(claims)


def assemble_report(query: str, plan: Sequence[str], fetched: Sequence[FetchedPage], drafts: object) -> ResearchReport:
    """Bind the drafts, build the report and validate it against the fetched pages."""
    report = ResearchReport(
        query=query,
        plan=tuple(plan),
        sources=tuple(SourceRecord.from_page(page) for page in fetched),
        claims=bind_claims(drafts, fetched),
    )
    validate_report(report, {page.source_ref: page.text() for page in fetched})
    return report


class ResearchWorker:
    """Runs research activities whose every fetch is content-addressed into ``store``."""

    def __init__(self, *, store: BlobStore, budget: ResearchBudget) -> None:
        self.store = store
        self.budget = budget

    def run(
        self,
        *,
        query: str,
        sources: Iterable[str],
        fetch_fn: FetchFn | None = None,
        synthesise: Synthesiser | None = None,
    ) -> ResearchRun:
        """Plan, fetch, synthesise, validate and store; see the module docstring.

        Raises:
            ActivityRejected: the query, plan, drafts or report may not cross
                the boundary (nothing is stored as a report).
            ResearchBudgetExceeded: a cap would be crossed; ``.result`` is the
                refused ActivityResult to publish.
            SourceFetchFailed: a source could not be fetched; ``.result`` is
                the failed ActivityResult to publish.
            CasError: the store failed.
        """
        if not isinstance(query, str) or not normalise_text(query):
            raise ActivityRejected("a research run needs a non-empty query", code=RejectCode.EMPTY_QUERY)
        plan = plan_sources(sources)
        fetched = self.fetch_all(query, plan, fetch_fn or default_fetch)
        drafts = (synthesise or extractive_synthesiser)(query, fetched)
        report = assemble_report(query, plan, fetched, drafts)
        report_bytes = report.to_bytes()
        result = ActivityResult.build(ActivityKind.RESEARCH, report_bytes, page_observations(fetched))
        self._put(report_bytes, result.artifact_hash)
        return ResearchRun(query=query, plan=plan, fetched=fetched, report=report, report_bytes=report_bytes, result=result)

    def fetch_all(self, query: str, plan: Sequence[str], fetch_fn: FetchFn) -> tuple[FetchedPage, ...]:
        """Step 2 for every planned source; an abort carries the anchorable result."""
        fetched: list[FetchedPage] = []
        spent = 0
        fetched_bytes = 0
        pass_allowance = accepts_max_bytes(fetch_fn)
        try:
            for index, source in enumerate(plan):
                self.budget.check_before_fetch(index=index, spent=spent, source=source)
                allowance = self.budget.bytes_allowance(fetched_bytes)
                page = self._fetch_one(fetch_fn, source, allowance if pass_allowance else None, fetched_bytes)
                self.budget.check_bytes(fetched_bytes=fetched_bytes, size=page.size, source=source)
                self._put(page.content, page.content_hash)
                fetched.append(page)
                spent += self.budget.cost_per_fetch
                fetched_bytes += page.size
        except ResearchAborted as exc:
            exc.fetched = tuple(fetched)
            exc.result = aborted_result(exc, query=query, plan=plan, fetched=fetched)
            self._put(exc.result.artifact, exc.result.artifact_hash)
            raise
        return tuple(fetched)

    def refused_result(self, exc: ResearchAborted) -> ActivityResult:
        """The ActivityResult anchoring an abort raised by ``run`` (refused or failed)."""
        if exc.result is None:
            raise ValueError("this abort was not raised by ResearchWorker.run")
        return exc.result

    # -- internals ------------------------------------------------------------

    def _fetch_one(self, fetch_fn: FetchFn, source: str, allowance: int | None, fetched_bytes: int) -> FetchedPage:
        try:
            raw: object = fetch_fn(source) if allowance is None else fetch_fn(source, max_bytes=allowance)
        except FetchRefused as exc:
            if exc.code == FetchCode.RESPONSE_TOO_LARGE and allowance is not None and exc.limit == allowance:
                received = exc.received if exc.received is not None else allowance + 1
                raise ResearchBudgetExceeded(
                    cap=CAP_BYTES, limit=self.budget.max_bytes or 0, attempted=fetched_bytes + received, source=source
                ) from exc
            raise SourceFetchFailed(exc, source=source) from exc
        if isinstance(raw, (bytes, bytearray, memoryview)):
            return FetchedPage(source_ref=source, content=bytes(raw))
        if isinstance(raw, FetchedPage):
            return raw if raw.source_ref == source else dataclasses.replace(raw, source_ref=source)
        refused = FetchRefused(
            f"fetch_fn returned a {type(raw).__name__}; expected bytes or FetchedPage",
            code=FetchCode.FETCH_FAILED,
            url=source,
        )
        raise SourceFetchFailed(refused, source=source)

    def _put(self, data: bytes, expected: str) -> None:
        digest = self.store.put(data)
        if digest != expected:
            raise BlobIntegrityError(expected, digest, self.store.describe())
