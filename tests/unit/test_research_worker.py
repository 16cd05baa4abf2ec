"""The worker end to end against the local site: plan, content-addressing, report shape, determinism."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson
import pytest

from bernstein.producers.research import (
    NORMALISATION_VERSION,
    REPORT_FORMAT,
    ClaimDraft,
    FetchedPage,
    ResearchBudget,
    ResearchWorker,
    SpanRef,
    extractive_synthesiser,
    make_fetch,
    parse_report,
)
from bernstein.schemas.canonical import canonical_json, sha256_digest
from bernstein.schemas.records import ActivityKind, TerminalState
from bernstein.substrate.cas import DirBlobStore
from demo.site_server import SITE_DIR, serve


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serve(SITE_DIR) as (url, _stop):
        yield url


def cited(query: str, fetched: Sequence[FetchedPage]) -> list[ClaimDraft]:
    notes, perf = fetched[0].source_ref, fetched[1].source_ref
    return [
        ClaimDraft(
            "quill fmt is deterministic",
            (SpanRef(notes, "The quill fmt formatter is now deterministic across platforms"),),
        ),
        ClaimDraft(
            "Rebuilds got about seven times faster",
            (SpanRef(perf, "from 41 seconds to 6 seconds"), SpanRef(perf, "skips dependants whose inputs did not change")),
            claim_id="rebuild-speed",
        ),
    ]


def test_run_against_the_local_site(tmp_path: Path, site: str) -> None:
    store = DirBlobStore(tmp_path)
    sources = [f"{site}/old-notes", f"{site}/performance.html", f"{site}/old-notes"]
    run = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=4)).run(
        query="what changed in Quill 2.0", sources=sources, fetch_fn=make_fetch(allow_private=True), synthesise=cited
    )
    notes = (SITE_DIR / "notes.html").read_bytes()
    perf = (SITE_DIR / "performance.html").read_bytes()
    assert run.plan == (f"{site}/old-notes", f"{site}/performance.html")  # de-duplicated, order kept

    # every fetched page is in the CAS and observed as a page
    assert [(o.kind, o.ref, o.content_hash) for o in run.observations] == [
        ("page", run.plan[0], sha256_digest(notes)),
        ("page", run.plan[1], sha256_digest(perf)),
    ]
    assert store.get(sha256_digest(notes)) == notes

    # the report is canonical, stored, and is the artifact
    result = run.result
    assert (result.kind, result.terminal_state, result.reason_code) == (ActivityKind.RESEARCH, TerminalState.COMPLETED, "ok")
    assert result.artifact == run.report_bytes
    assert result.artifact_hash == sha256_digest(run.report_bytes) == run.report_hash
    assert store.get(run.report_hash) == run.report_bytes
    document = orjson.loads(run.report_bytes)
    assert canonical_json(document) == run.report_bytes
    assert parse_report(run.report_bytes) == run.report

    assert document["format"] == REPORT_FORMAT
    assert document["quote_normalisation"] == NORMALISATION_VERSION
    assert document["query"] == "what changed in Quill 2.0"
    assert document["plan"] == list(run.plan)
    assert document["sources"][0] == {
        "source_ref": f"{site}/old-notes",
        "final_url": f"{site}/notes.html",
        "status": 200,
        "content_type": "text/html; charset=utf-8",
        "redirects": [{"status": 301, "url": f"{site}/old-notes"}],
        "page_content_hash": sha256_digest(notes),
        "size": len(notes),
    }
    assert [c["claim_id"] for c in document["claims"]] == ["c1", "rebuild-speed"]
    assert document["claims"][1]["citations"] == [
        {
            "claim_id": "rebuild-speed",
            "source_ref": f"{site}/performance.html",
            "page_content_hash": sha256_digest(perf),
            "quote": "from 41 seconds to 6 seconds",
        },
        {
            "claim_id": "rebuild-speed",
            "source_ref": f"{site}/performance.html",
            "page_content_hash": sha256_digest(perf),
            "quote": "skips dependants whose inputs did not change",
        },
    ]


def test_same_inputs_give_byte_identical_reports(tmp_path: Path) -> None:
    """Two operators, two stores, the same fetched bytes: the same report and artifact hash."""
    pages = {
        "https://a.test/": FetchedPage(
            "https://a.test/", (SITE_DIR / "notes.html").read_bytes(), status=200, content_type="text/html"
        ),
        "https://b.test/": FetchedPage(
            "https://b.test/", (SITE_DIR / "index.html").read_bytes(), status=200, content_type="text/html"
        ),
    }
    runs = []
    for name in ("one", "two"):
        worker = ResearchWorker(store=DirBlobStore(tmp_path / name), budget=ResearchBudget(max_fetches=2))
        runs.append(worker.run(query="q", sources=list(pages), fetch_fn=pages.__getitem__, synthesise=extractive_synthesiser))
    first, second = runs
    assert first.report_bytes == second.report_bytes
    assert first.result.artifact_hash == second.result.artifact_hash
    assert first.result.evidence_set_hash == second.result.evidence_set_hash
    assert (tmp_path / "one" / "sha256").exists() and (tmp_path / "two" / "sha256").exists()
    assert sorted(p.name for p in (tmp_path / "one").rglob("*") if p.is_file()) == sorted(
        p.name for p in (tmp_path / "two").rglob("*") if p.is_file()
    )


def test_fetch_returning_bare_bytes(tmp_path: Path) -> None:
    body = b"Plain notes. The compiler now caches module interfaces between builds.\n"
    run = ResearchWorker(store=DirBlobStore(tmp_path), budget=ResearchBudget(max_fetches=1)).run(
        query="q", sources=["doc://notes"], fetch_fn=lambda url: body, synthesise=extractive_synthesiser
    )
    source = run.report.sources[0]
    assert (source.status, source.content_type, source.final_url, source.redirects) == (None, None, "doc://notes", ())
    assert [c.statement for c in run.report.claims] == ["The compiler now caches module interfaces between builds."]


def test_extractive_synthesiser_is_deterministic_and_self_quoting() -> None:
    page = FetchedPage("https://a.test/", (SITE_DIR / "notes.html").read_bytes(), content_type="text/html")
    first = extractive_synthesiser("q", [page])
    assert first == extractive_synthesiser("q", [page])
    assert len(first) == 2
    for draft in first:
        assert draft.spans == (SpanRef("https://a.test/", draft.statement),)
        assert 40 <= len(draft.statement) <= 400
        assert "quillTrack" not in draft.statement  # script text is never page text
