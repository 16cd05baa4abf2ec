"""Boundary refusals: a report with an unbound or unsupported claim is refused before anything is stored."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from bernstein.producers.research import (
    ActivityRejected,
    CitationRecord,
    ClaimDraft,
    ClaimRecord,
    FetchedPage,
    RejectCode,
    ResearchBudget,
    ResearchReport,
    ResearchWorker,
    SourceRecord,
    SpanRef,
    validate_report,
)
from bernstein.producers.research.quotes import page_text
from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import DirBlobStore

A = "https://a.test/notes"
B = "https://b.test/perf"
PAGE_A = b"<html><body><p>Quill 2.0 ships a <strong>stable</strong> module system.</p></body></html>"
PAGE_B = b"<html><body><p>Rebuilds take 6 seconds instead of 41.</p></body></html>"
PAGES = {A: PAGE_A, B: PAGE_B}

Drafts = Callable[[str, Sequence[FetchedPage]], list[ClaimDraft]]


def fetch(url: str) -> FetchedPage:
    return FetchedPage(source_ref=url, content=PAGES[url], status=200, content_type="text/html; charset=utf-8")


def drafts(*items: ClaimDraft) -> Drafts:
    return lambda query, fetched: list(items)


def stored(root: Path) -> set[str]:
    return {"sha256:" + p.name for p in root.glob("sha256/*/*")}


GOOD = ClaimDraft("Modules are stable", (SpanRef(A, "ships a stable module system"),))


@pytest.mark.parametrize(
    ("synthesise", "code"),
    [
        (drafts(ClaimDraft("An unsupported claim", ())), RejectCode.UNCITED_CLAIM),
        (drafts(ClaimDraft("Blank quote", (SpanRef(A, "  \n "),))), RejectCode.EMPTY_QUOTE),
        (drafts(ClaimDraft("Elsewhere", (SpanRef("https://never.test/", "stable"),))), RejectCode.SOURCE_NOT_FETCHED),
        (drafts(ClaimDraft("Made up", (SpanRef(A, "ships an unstable module system"),))), RejectCode.QUOTE_NOT_IN_PAGE),
        (drafts(ClaimDraft("Wrong page", (SpanRef(B, "stable module system"),))), RejectCode.QUOTE_NOT_IN_PAGE),
        (drafts(GOOD, ClaimDraft("again", (SpanRef(B, "6 seconds"),), claim_id="c1")), RejectCode.DUPLICATE_CLAIM_ID),
        (drafts(ClaimDraft("x", (SpanRef(A, "stable"),), claim_id="c 1")), RejectCode.INVALID_CLAIM_ID),
        (drafts(ClaimDraft("   ", (SpanRef(A, "stable"),))), RejectCode.EMPTY_STATEMENT),
        (drafts(), RejectCode.NO_CLAIMS),
        (lambda query, fetched: ["not a draft"], RejectCode.MALFORMED_DRAFT),
    ],
)
def test_worker_refuses_before_storing_a_report(tmp_path: Path, synthesise: Drafts, code: str) -> None:
    worker = ResearchWorker(store=DirBlobStore(tmp_path), budget=ResearchBudget(max_fetches=5))
    with pytest.raises(ActivityRejected) as info:
        worker.run(query="what changed", sources=[A, B], fetch_fn=fetch, synthesise=synthesise)
    assert info.value.code == code
    # Only the fetched pages are in the CAS: no report (or anything else) was stored.
    assert stored(tmp_path) == {sha256_digest(PAGE_A), sha256_digest(PAGE_B)}


def test_refusal_carries_evidence(tmp_path: Path) -> None:
    worker = ResearchWorker(store=DirBlobStore(tmp_path), budget=ResearchBudget(max_fetches=5))
    with pytest.raises(ActivityRejected) as info:
        worker.run(query="q", sources=[A], fetch_fn=fetch, synthesise=drafts(ClaimDraft("s", (SpanRef(A, "nope"),))))
    assert info.value.evidence["claim_id"] == "c1"
    assert info.value.evidence["source_ref"] == A
    assert info.value.evidence["page_content_hash"] == sha256_digest(PAGE_A)


@pytest.mark.parametrize(
    ("query", "sources", "code"),
    [
        ("", [A], RejectCode.EMPTY_QUERY),
        ("q", [], RejectCode.EMPTY_PLAN),
        ("q", [A, ""], RejectCode.INVALID_SOURCE),
        ("q", [A, "https://x.test/\n"], RejectCode.INVALID_SOURCE),
    ],
)
def test_query_and_plan_are_checked_before_any_fetch(tmp_path: Path, query: str, sources: list[str], code: str) -> None:
    calls: list[str] = []

    def recording(url: str) -> FetchedPage:
        calls.append(url)
        return fetch(url)

    worker = ResearchWorker(store=DirBlobStore(tmp_path), budget=ResearchBudget(max_fetches=5))
    with pytest.raises(ActivityRejected) as info:
        worker.run(query=query, sources=sources, fetch_fn=recording, synthesise=drafts(GOOD))
    assert info.value.code == code
    assert calls == []


# -- validate_report directly: the rules the worker cannot violate by construction ----------


def report_with(citation: CitationRecord, claim_id: str = "c1") -> ResearchReport:
    source = SourceRecord.from_page(fetch(A))
    return ResearchReport(
        query="q",
        plan=(A,),
        sources=(source,),
        claims=(ClaimRecord(claim_id=claim_id, statement="s", citations=(citation,)),),
    )


def test_malformed_page_hash_is_refused() -> None:
    for bad in ("sha256:abc", "md5:" + "0" * 32, "SHA256:" + "a" * 64, "sha256:" + "A" * 64):
        with pytest.raises(ActivityRejected) as info:
            validate_report(report_with(CitationRecord("c1", A, bad, "stable")))
        assert info.value.code == RejectCode.MALFORMED_PAGE_HASH


def test_citation_naming_another_claim_is_refused() -> None:
    with pytest.raises(ActivityRejected) as info:
        validate_report(report_with(CitationRecord("c2", A, sha256_digest(PAGE_A), "stable")))
    assert info.value.code == RejectCode.CITATION_CLAIM_MISMATCH


def test_citation_pinning_other_bytes_than_fetched_is_refused() -> None:
    with pytest.raises(ActivityRejected) as info:
        validate_report(report_with(CitationRecord("c1", A, sha256_digest(b"other bytes"), "stable")))
    assert info.value.code == RejectCode.CITATION_SOURCE_MISMATCH


def test_quote_check_uses_page_texts() -> None:
    report = report_with(CitationRecord("c1", A, sha256_digest(PAGE_A), "a stable module"))
    validate_report(report)  # structural only
    validate_report(report, {A: page_text(PAGE_A, "text/html")})
    with pytest.raises(ActivityRejected) as info:
        validate_report(report, {A: "something else entirely"})
    assert info.value.code == RejectCode.QUOTE_NOT_IN_PAGE
