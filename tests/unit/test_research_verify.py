"""The offline research check: per-claim verdicts from the content store alone, and named tampers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bernstein.producers.activity import ActivityResult
from bernstein.producers.research import (
    CitationRecord,
    ClaimDraft,
    ClaimRecord,
    FetchedPage,
    ResearchBudget,
    ResearchBudgetExceeded,
    ResearchReport,
    ResearchRun,
    ResearchWorker,
    SourceRecord,
    SpanRef,
)
from bernstein.schemas.canonical import canonical_json, sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.checks import check_for
from bernstein.verifier.checks.base import CheckContext
from bernstein.verifier.checks.research import NO_STORE, check_research

A = "https://quill.test/notes"
B = "https://quill.test/perf"
PAGE_A = b"<html><body><p>The <code>quill fmt</code> formatter is now <b>deterministic</b> across platforms.</p></body></html>"
PAGE_B = b"<html><body><p>Rebuilds fell from 41 seconds to 6 seconds &amp; startup is unchanged.</p></body></html>"
PAGES = {A: PAGE_A, B: PAGE_B}
HASH_A = sha256_digest(PAGE_A)
HASH_B = sha256_digest(PAGE_B)


def fetch(url: str) -> FetchedPage:
    return FetchedPage(url, PAGES[url], status=200, content_type="text/html; charset=utf-8")


def synthesise(query: str, fetched: Sequence[FetchedPage]) -> list[ClaimDraft]:
    return [
        ClaimDraft("quill fmt is deterministic", (SpanRef(A, "quill fmt formatter is now deterministic"),)),
        ClaimDraft("Rebuilds are faster", (SpanRef(B, "from 41 seconds to 6 seconds & startup"),)),
    ]


def research_run(store: DirBlobStore) -> ResearchRun:
    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=2))
    return worker.run(query="what changed", sources=[A, B], fetch_fn=fetch, synthesise=synthesise)


def context(
    result: ActivityResult,
    store: DirBlobStore | None,
    *,
    artifact: bytes | None = None,
    artifact_problem: str = "",
    observations: list[dict[str, Any]] | None = None,
) -> CheckContext:
    entry = {
        "run_id": "run-42",
        "stage_id": "research-0",
        "kind": "research",
        "artifact_hash": result.artifact_hash,
        "evidence_set_hash": result.evidence_set_hash,
        "observations": [o.to_record() for o in result.observations] if observations is None else observations,
        "terminal_state": result.terminal_state.value,
        "reason_code": result.reason_code,
    }
    return CheckContext(
        run_id="run-42",
        stage_id="research-0",
        kind="research",
        entry=entry,
        artifact=result.artifact if artifact is None and store is not None else artifact,
        artifact_problem=artifact_problem,
        cas=store,
        trusted=TrustedKeys(),
    )


def lines(ctx: CheckContext) -> list[str]:
    return [d.text for d in check_research(ctx).details]


def test_registered_for_research() -> None:
    assert check_for("research") is check_research


def test_every_citation_resolves(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    run = research_run(store)
    verdict = check_research(context(run.result, store))
    assert verdict.ok
    assert verdict.notes == ("2 citations resolved",)
    assert verdict.reason == ""
    assert [d.text for d in verdict.details] == ["cite OK claim=c1 (1 checked)", "cite OK claim=c2 (1 checked)"]
    assert all(d.ok for d in verdict.details)
    assert verdict.details[0].data == {"claim_id": "c1", "ok": True, "citations_checked": 1, "reason": ""}


def test_altered_page_names_the_claim_and_both_hashes(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    run = research_run(store)
    tampered = PAGE_A.replace(b"deterministic", b"nondeterministic")
    store.path_of(HASH_A).write_bytes(tampered)
    verdict = check_research(context(run.result, store))
    reason = (
        f"claim 'c1' citation failed: cited page content hash mismatch "
        f"(pinned '{HASH_A}', recomputed '{sha256_digest(tampered)}')"
    )
    assert not verdict.ok
    assert verdict.reason == reason
    assert lines(context(run.result, store)) == [f"cite FAIL claim=c1 (0 checked) -- {reason}", "cite OK claim=c2 (1 checked)"]


def test_deleted_page_is_unresolved(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    run = research_run(store)
    store.path_of(HASH_B).unlink()
    verdict = check_research(context(run.result, store))
    reason = f"claim 'c2' citation unresolved: page bytes missing from store for '{HASH_B}'"
    assert not verdict.ok
    assert verdict.reason == reason
    assert [d.text for d in verdict.details] == ["cite OK claim=c1 (1 checked)", f"cite FAIL claim=c2 (0 checked) -- {reason}"]


def hand_built(claims: tuple[ClaimRecord, ...]) -> ResearchReport:
    sources = tuple(SourceRecord.from_page(fetch(u)) for u in (A, B))
    return ResearchReport(query="q", plan=(A, B), sources=sources, claims=claims)


def stored_result(store: DirBlobStore, report: ResearchReport) -> ActivityResult:
    """Anchor a report the worker would have refused, as a forged producer might."""
    for page in PAGES.values():
        store.put(page)
    data = report.to_bytes()
    store.put(data)
    observations = [fetch(u) for u in (A, B)]
    from bernstein.producers.research.aborted import page_observations

    return ActivityResult.build("research", data, page_observations(observations))


def test_quote_absent_from_page(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    report = hand_built(
        (
            ClaimRecord("c1", "ok", (CitationRecord("c1", A, HASH_A, "formatter is now deterministic"),)),
            ClaimRecord(
                "c2",
                "two citations, the second made up",
                (
                    CitationRecord("c2", B, HASH_B, "41 seconds to 6 seconds"),
                    CitationRecord("c2", B, HASH_B, "startup is ten times faster"),
                ),
            ),
        )
    )
    verdict = check_research(context(stored_result(store, report), store))
    reason = f"claim 'c2' citation failed: quoted span not found in cited page '{HASH_B}'"
    assert not verdict.ok and verdict.reason == reason
    assert [d.text for d in verdict.details] == ["cite OK claim=c1 (1 checked)", f"cite FAIL claim=c2 (1 checked) -- {reason}"]


def test_structural_faults_fail_per_claim(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    other = sha256_digest(b"never fetched")
    report = hand_built(
        (
            ClaimRecord("c1", "uncited", ()),
            ClaimRecord("c2", "wrong pin", (CitationRecord("c2", A, other, "deterministic"),)),
            ClaimRecord("c3", "fine", (CitationRecord("c3", B, HASH_B, "startup is unchanged"),)),
        )
    )
    out = lines(context(stored_result(store, report), store))
    assert out[0] == "cite FAIL claim=c1 (0 checked) -- claim 'c1' has no citations"
    assert out[1].startswith("cite FAIL claim=c2 (0 checked) -- claim 'c2' citation failed: cites page")
    assert out[2] == "cite OK claim=c3 (1 checked)"


def test_cited_page_must_be_an_observation(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    run = research_run(store)
    only_b = [o.to_record() for o in run.result.observations if o.content_hash == HASH_B]
    verdict = check_research(context(run.result, store, observations=only_b))
    assert verdict.reason == f"claim 'c1' citation failed: cited page '{HASH_A}' is not among the stage's observations"


def test_no_content_store_is_not_checked_never_ok(tmp_path: Path) -> None:
    """Strip the content store and the report stops meaning anything (seed 001): not a pass, not a mismatch."""
    run = research_run(DirBlobStore(tmp_path))
    verdict = check_research(context(run.result, None))
    assert not verdict.ok
    assert verdict.unchecked == NO_STORE == "citations not resolved"
    assert (verdict.reason, verdict.notes, verdict.details) == ("", (), ())


def test_missing_report_with_a_store_fails(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    run = research_run(store)
    problem = f"artifact {run.report_hash} missing from the content store"
    verdict = check_research(replace(context(run.result, store), artifact=None, artifact_problem=problem))
    assert not verdict.ok and verdict.reason == problem
    verdict = check_research(replace(context(run.result, store), artifact=None))
    assert not verdict.ok and "not reattached" in verdict.reason


def test_report_without_claims_fails(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    verdict = check_research(context(stored_result(store, hand_built(())), store))
    assert not verdict.ok and verdict.reason == "research report holds no claims"


@pytest.mark.parametrize(
    "artifact",
    [b"not json", b'{"b":1, "a":2}', canonical_json({"format": "something/else"}), b"[]"],
)
def test_unparseable_artifacts_fail(tmp_path: Path, artifact: bytes) -> None:
    store = DirBlobStore(tmp_path)
    run = research_run(store)
    verdict = check_research(context(run.result, store, artifact=artifact))
    assert not verdict.ok and verdict.reason.startswith("research ")


def test_verdicts_are_deterministic(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    run = research_run(store)
    store.path_of(HASH_A).write_bytes(b"changed")
    assert check_research(context(run.result, store)) == check_research(context(run.result, store))


def test_budget_refusal_record_is_checked(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path)
    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=1))
    with pytest.raises(ResearchBudgetExceeded) as info:
        worker.run(query="q", sources=[A, B], fetch_fn=fetch, synthesise=synthesise)
    refused = info.value.refused_result
    assert refused is not None
    verdict = check_research(context(refused, store))
    assert verdict.ok
    assert verdict.notes == (f"budget refusal recorded: max_fetches=1 at source '{B}'",)
    completed_claim = replace(context(refused, store), entry={**context(refused, store).entry, "terminal_state": "completed"})
    assert not check_research(completed_claim).ok
    assert not check_research(context(refused, store, observations=[])).ok
