"""Offline check of a research activity: every citation re-resolved from the content store.

For a report (``bernstein.research.report/v1``), claims are checked in report
order and, within a claim, citations in order, stopping at the first failure:

1. the citation is well formed and names its claim, a non-empty quote, a
   well-formed page hash, and a source of the report fetched as that hash;
2. the page hash is one of the stage's journalled observations;
3. the page bytes are reattached from the CAS by that hash and re-hashed
   (``BlobNotFound`` -> unresolved, ``BlobIntegrityError`` -> mismatch);
4. the quote still occurs in those bytes under the report's quote
   normalisation (``bernstein.schemas.documents.quotes``, the function the worker
   used at build time).

One detail line per claim: ``cite OK claim=c1 (1 checked)`` or
``cite FAIL claim=c1 (0 checked) -- <reason>``, where ``checked`` counts the
citations that passed. The verdict's reason is the first failing claim's.
Without a content store nothing can be resolved: the verdict is not ok but
``unchecked`` ("citations not resolved"), which the run reports as not fully
verified, never as a pass. Refused / failed research
records (budget overrun, fetch failure) are shape-checked and must match the
entry's terminal state and reason code. Output is a pure function of the entry and the
stored bytes: no network, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from bernstein.schemas.canonical import sha256_digest
from bernstein.schemas.documents.quotes import page_text, quote_occurs
from bernstein.schemas.documents.research import (
    FAILURE_FORMAT,
    REFUSAL_FORMAT,
    CitationRecord,
    ClaimRecord,
    MalformedResearchArtifact,
    ResearchReport,
    citation_problem,
    is_valid_claim_id,
    load_document,
    parse_abort_document,
    parse_report_document,
)
from bernstein.schemas.records import TerminalState
from bernstein.substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, CasError
from bernstein.substrate.text import plural
from bernstein.verifier.checks import register
from bernstein.verifier.checks.base import CheckContext, DetailLine, ModalityVerdict, observed_hashes

NO_STORE: Final = "citations not resolved"


def check_research(ctx: CheckContext) -> ModalityVerdict:
    """The ``research`` modality check (see the module docstring)."""
    if ctx.cas is None:
        return ModalityVerdict(ok=False, unchecked=NO_STORE)
    if ctx.artifact is None:
        return _fail(ctx.artifact_problem or "research report not reattached from the content store")
    try:
        document = load_document(ctx.artifact)
    except MalformedResearchArtifact as exc:
        return _fail(f"research artifact {exc.message}")
    if document.get("format") in (REFUSAL_FORMAT, FAILURE_FORMAT):
        return _check_abort(ctx, document)
    try:
        report = parse_report_document(document)
    except MalformedResearchArtifact as exc:
        return _fail(f"research report is malformed: {exc.message}")
    state = ctx.entry.get("terminal_state")
    if state is not None and state != TerminalState.COMPLETED.value:
        return _fail(f"research report anchored with terminal state {state!r}; a report is anchored as 'completed'")
    if not report.claims:
        return _fail("research report holds no claims")
    return _ClaimChecker(report, ctx.cas, observed_hashes(ctx.entry)).run()


class _ClaimChecker:
    """Walks the claims once; caches each page's reattach outcome and text by hash."""

    def __init__(self, report: ResearchReport, cas: BlobStore, observed: frozenset[str]) -> None:
        self.report = report
        self.cas = cas
        self.observed = observed
        self._pages: dict[str, tuple[bytes | None, str]] = {}
        self._texts: dict[tuple[str, str | None], str] = {}

    def run(self) -> ModalityVerdict:
        lines: list[DetailLine] = []
        first_reason = ""
        resolved = 0
        seen: set[str] = set()
        for claim in self.report.claims:
            checked, reason = self._claim(claim, seen)
            seen.add(claim.claim_id)
            resolved += checked
            shown = _show_id(claim.claim_id)
            data = {"claim_id": claim.claim_id, "ok": not reason, "citations_checked": checked, "reason": reason}
            if reason:
                first_reason = first_reason or reason
                lines.append(DetailLine(f"cite FAIL claim={shown} ({checked} checked) -- {reason}", False, data=data))
            else:
                lines.append(DetailLine(f"cite OK claim={shown} ({checked} checked)", True, data=data))
        total = self.report.citation_count
        summary = {"claims": len(self.report.claims), "citations": total, "citations_resolved": resolved}
        if first_reason:
            return ModalityVerdict(ok=False, reason=first_reason, details=tuple(lines), data=summary)
        return ModalityVerdict(ok=True, notes=(f"{plural(total, 'citation')} resolved",), details=tuple(lines), data=summary)

    def _claim(self, claim: ClaimRecord, seen: set[str]) -> tuple[int, str]:
        cid = claim.claim_id
        if not is_valid_claim_id(cid):
            return 0, f"claim {cid!r} has an invalid claim id"
        if cid in seen:
            return 0, f"claim {cid!r} appears more than once in the report"
        if not claim.citations:
            return 0, f"claim {cid!r} has no citations"
        checked = 0
        for citation in claim.citations:
            problem = self._citation(cid, citation)
            if problem:
                return checked, problem
            checked += 1
        return checked, ""

    def _citation(self, cid: str, citation: CitationRecord) -> str:
        structural = citation_problem(cid, citation, self.report)
        if structural is not None:
            return f"claim {cid!r} citation failed: {structural[1]}"
        pinned = citation.page_content_hash
        if pinned not in self.observed:
            return f"claim {cid!r} citation failed: cited page '{pinned}' is not among the stage's observations"
        data, problem = self._reattach(pinned)
        if data is None:
            return f"claim {cid!r} {problem}"
        source = self.report.source_for(citation.source_ref)
        content_type = source.content_type if source is not None else None
        key = (pinned, content_type)
        if key not in self._texts:
            self._texts[key] = page_text(data, content_type)
        if not quote_occurs(citation.quote, self._texts[key]):
            return f"claim {cid!r} citation failed: quoted span not found in cited page '{pinned}'"
        return ""

    def _reattach(self, pinned: str) -> tuple[bytes | None, str]:
        if pinned not in self._pages:
            self._pages[pinned] = self._fetch(pinned)
        return self._pages[pinned]

    def _fetch(self, pinned: str) -> tuple[bytes | None, str]:
        try:
            data = self.cas.get(pinned)
        except BlobNotFound:
            return None, f"citation unresolved: page bytes missing from store for '{pinned}'"
        except BlobIntegrityError as exc:
            return None, f"citation failed: cited page content hash mismatch (pinned '{pinned}', recomputed '{exc.actual}')"
        except CasError as exc:
            return None, f"citation unresolved: content store failed for '{pinned}': {exc.message}"
        recomputed = sha256_digest(data)  # do not rely on the adapter having re-hashed
        if recomputed != pinned:
            return None, f"citation failed: cited page content hash mismatch (pinned '{pinned}', recomputed '{recomputed}')"
        return data, ""


def _check_abort(ctx: CheckContext, document: Mapping[str, Any]) -> ModalityVerdict:
    try:
        record = parse_abort_document(document)
    except MalformedResearchArtifact as exc:
        return _fail(f"research abort record is malformed: {exc.message}")
    state = ctx.entry.get("terminal_state")
    if state is not None and state != record.terminal_state:
        return _fail(f"research abort record anchored with terminal state {state!r}, expected {record.terminal_state!r}")
    reason_code = ctx.entry.get("reason_code")
    if reason_code is not None and reason_code != record.reason_code:
        return _fail(f"research abort record anchored with reason code {reason_code!r}, expected {record.reason_code!r}")
    observed = observed_hashes(ctx.entry)
    for source_ref, page_hash in record.fetched:
        if page_hash not in observed:
            return _fail(f"fetched page '{page_hash}' of source {source_ref!r} is not among the stage's observations")
    return ModalityVerdict(
        ok=True,
        notes=(record.describe(),),
        data={"format": record.format, "outcome": dict(record.outcome), "pages": len(record.fetched)},
    )


def _show_id(claim_id: str) -> str:
    """Claim ids are printed bare when valid, quoted otherwise (no control characters reach a terminal)."""
    return claim_id if is_valid_claim_id(claim_id) else ascii(claim_id)


def _fail(reason: str) -> ModalityVerdict:
    return ModalityVerdict(ok=False, reason=reason)


register("research", check_research)
