"""The research tools when the agent owns the loop: ``fetch`` one source at a time, ``submit_report`` until accepted.

``ResearchWorker.run`` plans, fetches, synthesises and binds in one call. An
MCP agent does its own planning and synthesis, so ``ResearchDesk`` exposes
the worker's steps as tools, reusing its code and keeping its rules:

* ``fetch(url)``: the budget is checked *before* the fetch
  (``ResearchBudget.check_before_fetch``: fetches, then cost; every attempt
  counts, a failed one too), the remaining byte allowance is handed to the
  fetch, and the exact bytes are stored in the CAS as they land, through the
  worker's own fetch step (the same fetch policy: ``make_fetch``, its
  address rules, redirects, decoding and size caps). A URL already fetched
  is answered from what was fetched, without fetching again. A stop is a
  ``ToolError`` with the budget's or the fetch's code and evidence.
* ``submit_report(query, drafts)``: the claims are bound to the fetched
  pages and checked at the boundary (``worker.assemble_report``: uncited
  claims, unfetched sources, quotes not in their page ...). A refusal is a
  ``ToolError`` with its ``RejectCode`` and evidence, and nothing is stored
  or published: the agent repairs the report and submits again. An accepted
  report is stored and published as the stage's ``research`` result; the
  stage is then closed.
* ``end()``: a stage that never got an accepted report but was stopped by
  its budget (or whose last fetch failed) publishes that stop, the worker's
  abort record (``refused``/``budget_exhausted`` or ``failed``/``fetch_failed``),
  so the stop is journalled. Nothing fetched and nothing refused: nothing is
  published.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from bernstein.producers.activity import ActivityRejected, ActivityResult, require_valid_ids
from bernstein.producers.computer_use.session import ActionPublisher
from bernstein.producers.mcp.errors import ToolCode, ToolError
from bernstein.producers.research.aborted import aborted_result, page_observations
from bernstein.producers.research.budget import ResearchBudget
from bernstein.producers.research.errors import ResearchAborted, ResearchBudgetExceeded, SourceFetchFailed
from bernstein.producers.research.fetch import FetchedPage, FetchFn
from bernstein.producers.research.quotes import normalise_text
from bernstein.producers.research.report import RejectCode
from bernstein.producers.research.synthesis import ClaimDraft
from bernstein.producers.research.worker import ResearchWorker, accepts_max_bytes, assemble_report, plan_sources
from bernstein.schemas.records import ActivityKind
from bernstein.substrate.cas import BlobIntegrityError, BlobStore

MAX_TEXT_SHOWN: Final = 100_000
"""Characters of a page's normalised text a ``fetch`` returns (the whole page is stored and quotable)."""


@dataclass(frozen=True, slots=True)
class Published:
    """A research result that was published."""

    result: ActivityResult
    landed: str
    claims: int = 0


class ResearchDesk:
    """The research stage of one MCP run (see the module docstring)."""

    def __init__(
        self,
        run_id: str,
        stage_id: str,
        *,
        store: BlobStore,
        publisher: ActionPublisher,
        budget: ResearchBudget,
        fetch_fn: FetchFn,
        role: str = "scout",
    ) -> None:
        require_valid_ids(("run_id", run_id), ("stage_id", stage_id), ("role", role))
        self.run_id = run_id
        self.stage_id = stage_id
        self.role = role
        self.store = store
        self.publisher = publisher
        self.budget = budget
        self.fetch_fn = fetch_fn
        self._worker = ResearchWorker(store=store, budget=budget)
        self._pass_allowance = accepts_max_bytes(fetch_fn)
        self.fetched: list[FetchedPage] = []
        self.attempts = 0
        self.spent = 0
        self.fetched_bytes = 0
        self.stop: ResearchAborted | None = None
        """The budget stop, else the last failed fetch: what ``end`` publishes when no report was accepted."""
        self.query = ""
        self.published: Published | None = None

    def fetch(self, url: str) -> FetchedPage:
        """Fetch one source under the budget; its bytes are in the CAS when this returns (raises ``ToolError``)."""
        self._require_open()
        for page in self.fetched:
            if page.source_ref == url:
                return page
        try:
            plan_sources([url])
        except ActivityRejected as exc:
            raise _refusal(exc) from None
        try:
            self.budget.check_before_fetch(index=self.attempts, spent=self.spent, source=url)
            self.attempts += 1
            self.spent += self.budget.cost_per_fetch
            allowance = self.budget.bytes_allowance(self.fetched_bytes)
            # the worker's own fetch step: the fetch policy, a byte overrun as the budget's stop, typed failures
            page = self._worker._fetch_one(self.fetch_fn, url, allowance if self._pass_allowance else None, self.fetched_bytes)
            self.budget.check_bytes(fetched_bytes=self.fetched_bytes, size=page.size, source=url)
        except ResearchBudgetExceeded as exc:
            self.stop = exc
            raise ToolError(exc.code, exc.message, evidence=exc.record()) from None
        except SourceFetchFailed as exc:
            if not isinstance(self.stop, ResearchBudgetExceeded):
                self.stop = exc
            raise ToolError(exc.cause.code, exc.message, evidence={"source": url, **exc.cause.evidence}) from None
        digest = self.store.put(page.content)
        if digest != page.content_hash:
            raise BlobIntegrityError(page.content_hash, digest, self.store.describe())
        self.fetched.append(page)
        self.fetched_bytes += page.size
        return page

    def submit(self, query: str, drafts: tuple[ClaimDraft, ...]) -> Published:
        """Check the report at the boundary; publish it if it passes (raises ``ToolError`` with the refusal's code)."""
        self._require_open()
        self.query = query
        try:
            if not normalise_text(query):
                raise ActivityRejected("a research report needs a non-empty query", code=RejectCode.EMPTY_QUERY)
            plan = plan_sources([page.source_ref for page in self.fetched])
            report = assemble_report(query, plan, self.fetched, drafts)
        except ActivityRejected as exc:
            raise _refusal(exc) from None
        report_bytes = report.to_bytes()
        result = ActivityResult.build(ActivityKind.RESEARCH, report_bytes, page_observations(self.fetched))
        self.store.put(report_bytes)
        landed = self.publisher.publish_result(self.run_id, self.stage_id, self.role, result)
        self.published = Published(result, landed, claims=len(report.claims))
        return self.published

    def end(self) -> Published | None:
        """Publish the stop of a stage that got no report (see the module docstring); idempotent."""
        if self.published is not None or self.stop is None:
            return self.published
        plan = [page.source_ref for page in self.fetched]
        result = aborted_result(self.stop, query=self.query, plan=plan, fetched=self.fetched)
        self.store.put(result.artifact)
        landed = self.publisher.publish_result(self.run_id, self.stage_id, self.role, result)
        self.published = Published(result, landed)
        return self.published

    def _require_open(self) -> None:
        if self.published is not None:
            raise ToolError(
                ToolCode.RESEARCH_ENDED,
                f"research stage {self.stage_id!r} is published ({self.published.result.terminal_state.value}/"
                f"{self.published.result.reason_code}); nothing more can be fetched or submitted for it",
                evidence={"stage_id": self.stage_id, "artifact_hash": self.published.result.artifact_hash},
                journalled=True,
            )


def _refusal(exc: ActivityRejected) -> ToolError:
    return ToolError(exc.code, exc.message, evidence=dict(exc.evidence))


def page_summary(page: FetchedPage) -> dict[str, Any]:
    """What ``fetch`` returns besides the text: where the bytes are pinned."""
    return {
        "source": page.source_ref,
        "final_url": page.final_url,
        "status": page.status,
        "content_type": page.content_type,
        "page_content_hash": page.content_hash,
        "size": page.size,
        "redirects": [{"status": r.status, "url": r.url} for r in page.redirects],
    }
