"""Budget caps refuse BEFORE the crossing fetch, and the refusal is an anchorable result."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest

from bernstein.producers.research import (
    REASON_BUDGET_EXHAUSTED,
    ClaimDraft,
    FetchCode,
    FetchedPage,
    FetchRefused,
    InvalidBudget,
    ResearchBudget,
    ResearchBudgetExceeded,
    ResearchWorker,
    SourceFetchFailed,
    SpanRef,
)
from bernstein.schemas.canonical import canonical_json, is_digest, sha256_digest
from bernstein.schemas.records import ActivityKind, TerminalState
from bernstein.substrate.cas import DirBlobStore

PAGES = {
    "https://a.test/": b"<p>Alpha ships a stable module system.</p>",
    "https://b.test/": b"<p>Beta cuts rebuild times in half.</p>",
    "https://c.test/": b"<p>Gamma removes the legacy import directive.</p>",
}
SOURCES = list(PAGES)


class RecordingFetch:
    """Returns the canned bytes and remembers every call (and the allowance passed)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def __call__(self, url: str, *, max_bytes: int | None = None) -> FetchedPage:
        self.calls.append((url, max_bytes))
        body = PAGES[url]
        if max_bytes is not None and len(body) > max_bytes:
            raise FetchRefused("too big", code=FetchCode.RESPONSE_TOO_LARGE, url=url, limit=max_bytes, received=len(body))
        return FetchedPage(source_ref=url, content=body, status=200, content_type="text/html")


def one_claim(query: str, fetched: Sequence[FetchedPage]) -> list[ClaimDraft]:
    return [ClaimDraft("Alpha is stable", (SpanRef(fetched[0].source_ref, "stable module system"),))]


def stored_digests(root: Path) -> set[str]:
    return {"sha256:" + p.name for p in root.glob("sha256/*/*")}


def assert_refused_result(exc: ResearchBudgetExceeded, store: DirBlobStore, fetched_urls: list[str]) -> dict[str, object]:
    result = exc.refused_result
    assert result is not None
    assert result.kind is ActivityKind.RESEARCH
    assert result.terminal_state is TerminalState.REFUSED
    assert result.reason_code == REASON_BUDGET_EXHAUSTED
    assert is_digest(result.artifact_hash) and result.artifact_hash == sha256_digest(result.artifact)
    assert [(o.kind, o.ref) for o in result.observations] == [("page", u) for u in fetched_urls]
    for observation, url in zip(result.observations, fetched_urls, strict=True):
        assert observation.content_hash == sha256_digest(PAGES[url])
        assert store.get(observation.content_hash) == PAGES[url]
    assert store.get(result.artifact_hash) == result.artifact
    document = orjson.loads(result.artifact)
    assert canonical_json(document) == result.artifact
    assert document["plan"] == SOURCES
    assert document["fetched"] == [{"source_ref": u, "page_content_hash": sha256_digest(PAGES[u])} for u in fetched_urls]
    assert isinstance(document, dict)
    return document


def test_max_fetches_refuses_before_the_crossing_fetch(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    fetch = RecordingFetch()
    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=2))
    with pytest.raises(ResearchBudgetExceeded) as info:
        worker.run(query="q", sources=SOURCES, fetch_fn=fetch, synthesise=one_claim)
    exc = info.value
    assert [url for url, _ in fetch.calls] == SOURCES[:2]  # the third fetch never happened
    assert (exc.code, exc.cap, exc.limit, exc.attempted, exc.source) == ("BUDGET_EXCEEDED", "max_fetches", 2, 3, SOURCES[2])
    document = assert_refused_result(exc, store, SOURCES[:2])
    assert document["refusal"] == {
        "code": "BUDGET_EXCEEDED",
        "cap": "max_fetches",
        "limit": 2,
        "attempted": 3,
        "source": SOURCES[2],
    }
    assert worker.refused_result(exc) is exc.refused_result


def test_max_cost_units_refuses_before_the_crossing_fetch(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    fetch = RecordingFetch()
    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=10, max_cost_units=5, cost_per_fetch=3))
    with pytest.raises(ResearchBudgetExceeded) as info:
        worker.run(query="q", sources=SOURCES, fetch_fn=fetch, synthesise=one_claim)
    exc = info.value
    assert [url for url, _ in fetch.calls] == SOURCES[:1]
    assert (exc.cap, exc.limit, exc.attempted, exc.source) == ("max_cost_units", 5, 6, SOURCES[1])
    assert_refused_result(exc, store, SOURCES[:1])


def test_fetch_cap_is_checked_before_cost_cap(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=0, max_cost_units=0))
    fetch = RecordingFetch()
    with pytest.raises(ResearchBudgetExceeded) as info:
        worker.run(query="q", sources=SOURCES, fetch_fn=fetch, synthesise=one_claim)
    assert info.value.cap == "max_fetches"
    assert fetch.calls == []
    assert_refused_result(info.value, store, [])


def test_max_bytes_passes_the_allowance_and_refuses_the_crossing_page(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    fetch = RecordingFetch()
    first = len(PAGES[SOURCES[0]])
    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=10, max_bytes=first + 10))
    with pytest.raises(ResearchBudgetExceeded) as info:
        worker.run(query="q", sources=SOURCES, fetch_fn=fetch, synthesise=one_claim)
    exc = info.value
    assert fetch.calls == [(SOURCES[0], first + 10), (SOURCES[1], 10)]  # the remaining allowance
    assert (exc.cap, exc.limit, exc.source) == ("max_bytes", first + 10, SOURCES[1])
    assert exc.attempted == first + len(PAGES[SOURCES[1]])
    document = assert_refused_result(exc, store, SOURCES[:1])
    assert sha256_digest(PAGES[SOURCES[1]]) not in stored_digests(tmp_path)  # the crossing page was not kept
    assert document["refusal"]["cap"] == "max_bytes"  # type: ignore[index]


def test_max_bytes_with_a_fetch_that_ignores_the_allowance(tmp_path: Path) -> None:
    """A bare ``(url) -> bytes`` fetch gets no allowance; the cap is enforced on what it returns."""
    calls: list[str] = []

    def bare(url: str) -> bytes:
        calls.append(url)
        return PAGES[url]

    store = DirBlobStore(tmp_path)
    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=10, max_bytes=len(PAGES[SOURCES[0]])))
    with pytest.raises(ResearchBudgetExceeded) as info:
        worker.run(query="q", sources=SOURCES, fetch_fn=bare, synthesise=one_claim)
    assert info.value.cap == "max_bytes"
    assert calls == SOURCES[:2]
    assert sha256_digest(PAGES[SOURCES[1]]) not in stored_digests(tmp_path)
    assert_refused_result(info.value, store, SOURCES[:1])


def test_within_budget_runs_to_completion(tmp_path: Path) -> None:
    total = sum(len(b) for b in PAGES.values())
    budget = ResearchBudget(max_fetches=3, max_cost_units=3, cost_per_fetch=1, max_bytes=total)
    run = ResearchWorker(store=DirBlobStore(tmp_path), budget=budget).run(
        query="q", sources=SOURCES, fetch_fn=RecordingFetch(), synthesise=one_claim
    )
    assert run.result.terminal_state is TerminalState.COMPLETED
    assert len(run.fetched) == 3


def test_fetch_failure_is_an_anchorable_failed_result(tmp_path: Path) -> None:
    def failing(url: str) -> bytes:
        if url == SOURCES[1]:
            raise FetchRefused("GET answered HTTP 404", code=FetchCode.HTTP_ERROR, url=url, status=404)
        return PAGES[url]

    store = DirBlobStore(tmp_path)
    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=5))
    with pytest.raises(SourceFetchFailed) as info:
        worker.run(query="q", sources=SOURCES, fetch_fn=failing, synthesise=one_claim)
    result = info.value.failed_result
    assert result is not None
    assert (result.terminal_state, result.reason_code) == (TerminalState.FAILED, "fetch_failed")
    document = orjson.loads(result.artifact)
    assert document["format"] == "bernstein.research.failure/v1"
    assert document["failure"]["code"] == "HTTP_ERROR"
    assert document["failure"]["status"] == 404
    assert [o.ref for o in result.observations] == SOURCES[:1]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_fetches": -1},
        {"max_fetches": 1.5},
        {"max_fetches": True},
        {"max_fetches": 1, "max_cost_units": 2.0},
        {"max_fetches": 1, "cost_per_fetch": -1},
        {"max_fetches": 1, "max_bytes": "10"},
    ],
)
def test_budget_refuses_non_integer_or_negative_fields(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidBudget):
        ResearchBudget(**kwargs)  # type: ignore[arg-type]
