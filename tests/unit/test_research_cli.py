"""``bernstein research run`` without Kafka: ``execute`` with a directory store and a recording publisher."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bernstein.cli import build_parser
from bernstein.producers.activity import ActivityResult
from bernstein.producers.research import ClaimDraft, FetchedPage
from bernstein.producers.research.cli import execute
from bernstein.schemas.records import TerminalState
from bernstein.substrate.cas import DirBlobStore
from demo.site_server import SITE_DIR, serve


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serve(SITE_DIR) as (url, _stop):
        yield url


def uncited(query: str, fetched: Sequence[FetchedPage]) -> list[ClaimDraft]:
    """A synthesiser loaded by --synthesiser module:attr in a test below."""
    return [ClaimDraft("Quill is the best language", ())]


class Recorder:
    def __init__(self) -> None:
        self.results: list[ActivityResult] = []

    def __call__(self, result: ActivityResult) -> str:
        self.results.append(result)
        return f"bernstein.activity.submissions[0]@{len(self.results) - 1}"


def invoke(argv: list[str], store: DirBlobStore) -> tuple[int, Recorder, str, str]:
    args = build_parser().parse_args(["research", "run", "--run", "run-42", "--stage", "research-0", *argv])
    publish, out, err = Recorder(), io.StringIO(), io.StringIO()
    code = execute(args, store=store, publish=publish, out=out, err=err)
    return code, publish, out.getvalue(), err.getvalue()


def test_publishes_a_cited_report(tmp_path: Path, site: str) -> None:
    store = DirBlobStore(tmp_path)
    code, publish, out, err = invoke(
        ["--query", "Quill 2.0", "--source", f"{site}/notes.html", "--source", f"{site}/performance.html", "--allow-private"],
        store,
    )
    assert code == 0, err
    (result,) = publish.results
    assert result.terminal_state is TerminalState.COMPLETED
    assert store.get(result.artifact_hash) == result.artifact
    assert "published research report: run=run-42 stage=research-0 [research]" in out
    assert result.artifact_hash in out
    assert "4 claims, 4 citations, 2 sources fetched" in out
    assert "landed at bernstein.activity.submissions[0]@0" in out


def test_json_summary(tmp_path: Path, site: str) -> None:
    code, publish, out, _err = invoke(
        ["--query", "Quill", "--source", f"{site}/index.html", "--allow-private", "--json"], DirBlobStore(tmp_path)
    )
    assert code == 0
    summary = json.loads(out)
    assert summary["artifact_hash"] == publish.results[0].artifact_hash
    assert (summary["claims"], summary["sources"], summary["terminal_state"]) == (2, 1, "completed")


def test_budget_overrun_publishes_the_refusal_and_exits_3(tmp_path: Path, site: str) -> None:
    code, publish, out, err = invoke(
        [
            "--query", "Quill",
            "--source", f"{site}/index.html",
            "--source", f"{site}/notes.html",
            "--max-fetches", "1",
            "--allow-private",
        ],
        DirBlobStore(tmp_path),
    )  # fmt: skip
    assert code == 3
    (result,) = publish.results
    assert (result.terminal_state, result.reason_code) == (TerminalState.REFUSED, "budget_exhausted")
    assert len(result.observations) == 1
    assert "BUDGET_EXCEEDED" in err and "max_fetches=1" in err
    assert "published budget refusal (refused/budget_exhausted)" in out


def test_boundary_refusal_publishes_nothing(tmp_path: Path, site: str) -> None:
    code, publish, out, err = invoke(
        ["--query", "Quill", "--source", f"{site}/index.html", "--allow-private", "--synthesiser", f"{__name__}:uncited"],
        DirBlobStore(tmp_path),
    )
    assert code == 3
    assert publish.results == []
    assert err.startswith("research refused: UNCITED_CLAIM: ")
    assert out == ""


def test_private_source_without_flag_is_a_published_fetch_failure(tmp_path: Path, site: str) -> None:
    code, publish, _out, err = invoke(["--query", "Quill", "--source", f"{site}/index.html"], DirBlobStore(tmp_path))
    assert code == 3
    (result,) = publish.results
    assert (result.terminal_state, result.reason_code) == (TerminalState.FAILED, "fetch_failed")
    assert "PRIVATE_ADDRESS" in err


def test_bad_flags_exit_3() -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(
            ["research", "run", "--query", "q", "--source", "u", "--run", "r", "--stage", "s", "--max-fetches", "-1"]
        )
    assert info.value.code == 3
