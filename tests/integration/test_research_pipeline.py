"""The research modality end to end: the real CLI, a real local HTTP server, the real broker, S3 and scheduler.

One module-scoped deployment (fresh topics, its own keys) is built once:

* ``bernstein research run`` over three pages this module serves on loopback
  (one reached through the server's ``/old-notes`` 301 redirect, one
  ``text/plain``), and the same query again into a twin run;
* the same CLI with ``--max-fetches 1`` over two sources (a budget refusal);
* four boundary refusals, each drafted by a custom ``--synthesiser`` written
  into a temporary module (uncited claim, empty quote, unfetched source, a
  quote that is only in the page's ``<script>``);
* the budget refusal's own record republished through the SDK as
  ``refused``/``ok`` (a journal entry contradicting its record);
* the runs are closed, the real scheduler journals them, and
  ``bernstein topic export`` writes a dump that ``bernstein activity verify``
  checks offline (and, once, live from Kafka and S3).

Expected values are computed from the served bytes with ``hashlib`` and the
independent ``rfc8785`` package, never read back from the system under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bernstein.commands.common import without_endpoint_line
from tests.support import pipeline as pk
from tests.support import tamper as kit

pytestmark = pytest.mark.integration

QUERY = "What changed in Quill 2.0?"
STAGE = "research-0"
RUN = "run-research"
TWIN = "run-research-twin"
BUDGET = "run-research-budget"
MISLABELLED = "run-research-mislabelled"
NORMALISATION = "bernstein.quote-normalisation/v1"

HIDDEN = "Quill 2.0 ships a telemetry daemon that reports every build."
"""Present in notes.html's bytes, but only inside <script>: not page text."""

PAGES: dict[str, bytes] = {
    "notes.html": f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Quill 2.0 release notes</title>
  <script>
    var banner = "{HIDDEN}";
  </script>
</head>
<body>
  <h1>Quill 2.0 release notes</h1>
  <p>Quill 2.0 makes the module system stable and resolves imports at compile time.</p>
  <p>The formatter is now <em>deterministic</em> across platforms:
     the same source yields the same bytes.</p>
  <p>Thanks to everyone who tested the betas and reported bugs!</p>
</body>
</html>
""".encode(),
    "perf.html": b"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Quill 2.0 performance</title></head>
<body>
  <h2>Benchmarks</h2>
  <p>Cold start time dropped from 480 ms to 210 ms on the reference machine. Peak memory during a full build fell by a third.</p>
  <p>Incremental builds now reuse the type cache between sessions &amp; machines.</p>
</body>
</html>
""",
    "faq.txt": b"Quill FAQ\n\nIs Quill 2.0 backwards compatible? Code that uses legacy_import no longer compiles.\n\nok.\n",
}
CONTENT_TYPES = {
    "notes.html": "text/html; charset=utf-8",
    "perf.html": "text/html; charset=utf-8",
    "faq.txt": "text/plain; charset=utf-8",
}

SOURCES = ("old-notes", "perf.html", "faq.txt")
"""Paths of the full run's sources, in plan order (/old-notes -> 301 -> /notes.html)."""
SERVED = {"old-notes": "notes.html", "perf.html": "perf.html", "faq.txt": "faq.txt"}

# The deterministic extractive synthesiser takes, per page in plan order, the first two sentences of
# 40-400 characters; the quote is the sentence as a reader sees it (markup and line breaks normalised).
EXPECTED_CLAIMS = [
    ("c1", "old-notes", "Quill 2.0 makes the module system stable and resolves imports at compile time."),
    ("c2", "old-notes", "The formatter is now deterministic across platforms: the same source yields the same bytes."),
    ("c3", "perf.html", "Cold start time dropped from 480 ms to 210 ms on the reference machine."),
    ("c4", "perf.html", "Peak memory during a full build fell by a third."),
    ("c5", "faq.txt", "Code that uses legacy_import no longer compiles."),
]
GOOD_QUOTE = EXPECTED_CLAIMS[0][2]

SYNTHESISERS = """\
from bernstein.producers.research import ClaimDraft, SpanRef

GOOD = {good!r}
HIDDEN = {hidden!r}
ELSEWHERE = {elsewhere!r}


def _good(fetched):
    return ClaimDraft(statement=GOOD, spans=(SpanRef(fetched[0].source_ref, GOOD),))


def uncited(query, fetched):
    return [_good(fetched), ClaimDraft(statement="Quill 2.0 is twice as fast as Quill 1.")]


def empty_quote(query, fetched):
    return [_good(fetched), ClaimDraft(statement="Quill 2.0 is faster.", spans=(SpanRef(fetched[0].source_ref, " \\n\\t "),))]


def unfetched(query, fetched):
    return [_good(fetched), ClaimDraft(statement="Quill 2.0 is faster.", spans=(SpanRef(ELSEWHERE, GOOD),))]


def not_in_page(query, fetched):
    return [_good(fetched), ClaimDraft(statement="Quill 2.0 phones home.", spans=(SpanRef(fetched[0].source_ref, HIDDEN),))]
"""

BOUNDARY = ("uncited", "empty_quote", "unfetched", "not_in_page")


def page_hash(name: str) -> str:
    return pk.sha256_of(PAGES[name])


def boundary_run(name: str) -> str:
    return f"run-refused-{name.replace('_', '-')}"


def boundary_message(name: str, url: str) -> str:
    """The exact stderr line of each boundary refusal (the code, then the message naming the claim)."""
    source = f"{url}/notes.html"
    return {
        "uncited": "UNCITED_CLAIM: claim 'c2' has no citation; every claim must quote a fetched page",
        "empty_quote": "EMPTY_QUOTE: claim 'c2' citation 0: quoted span is empty",
        "unfetched": f"SOURCE_NOT_FETCHED: claim 'c2' span 0 cites source '{url}/perf.html' that was not fetched in this run",
        "not_in_page": f"QUOTE_NOT_IN_PAGE: claim 'c2' citation 0: quoted span {HIDDEN!r} does not occur in the page "
        f"fetched from {source!r} ({page_hash('notes.html')}) under {NORMALISATION}",
    }[name]


# ---------------------------------------------------------------------------
# the deployment, built once
# ---------------------------------------------------------------------------


@dataclass
class World:
    pipe: pk.Pipeline
    url: str
    requests: list[str]
    full: subprocess.CompletedProcess[str]
    twin: subprocess.CompletedProcess[str]
    budget: subprocess.CompletedProcess[str]
    refusals: dict[str, subprocess.CompletedProcess[str]]
    submission_runs: list[str]
    journal_runs: set[str]
    dump: Path

    def source(self, path: str) -> str:
        return f"{self.url}/{path}"

    def summary(self) -> dict[str, Any]:
        return dict(json.loads(self.full.stdout))


def research_args(run_id: str, sources: list[str], *extra: str) -> list[str]:
    args = ["research", "run", "--query", QUERY, "--run", run_id, "--stage", STAGE, "--allow-private"]
    for source in sources:
        args += ["--source", source]
    return [*args, *extra]


@pytest.fixture(scope="module")
def world(services: Any, tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("research-pipeline")
    pipe = pk.Pipeline.create(services, root)
    site = root / "site"
    site.mkdir()
    for name, data in PAGES.items():
        (site / name).write_bytes(data)
    synth_dir = root / "synth"
    synth_dir.mkdir()
    with pk.serve_recording(site) as (url, requests):
        (synth_dir / "boundary_synth.py").write_text(
            SYNTHESISERS.format(good=GOOD_QUOTE, hidden=HIDDEN, elsewhere=f"{url}/perf.html"), encoding="utf-8"
        )
        sources = [f"{url}/{path}" for path in SOURCES]
        full = pipe.cli(research_args(RUN, sources, "--json"))
        assert full.returncode == 0, full.stdout + full.stderr
        twin = pipe.cli(research_args(TWIN, sources, "--json"))
        assert twin.returncode == 0, twin.stdout + twin.stderr
        budget = pipe.cli(research_args(BUDGET, [f"{url}/notes.html?budget", f"{url}/perf.html?budget"], "--max-fetches", "1"))
        python_path = os.pathsep.join(p for p in (str(synth_dir), pipe.env.get("PYTHONPATH", "")) if p)
        refused = pipe.cli_parallel(
            [
                research_args(boundary_run(name), [f"{url}/notes.html"], "--synthesiser", f"boundary_synth:{name}")
                for name in BOUNDARY
            ],
            extra_env={"PYTHONPATH": python_path},
        )
    publish_mislabelled(pipe, url)
    pipe.close_runs(RUN, TWIN, BUDGET, MISLABELLED)
    pipe.schedule()
    dump = pipe.export([RUN, TWIN, BUDGET, MISLABELLED], root / "dump")
    return World(
        pipe=pipe,
        url=url,
        requests=list(requests),
        full=full,
        twin=twin,
        budget=budget,
        refusals=dict(zip(BOUNDARY, refused, strict=True)),
        submission_runs=pipe.submission_runs(),
        journal_runs={(r.key or b"").decode() for r in pipe.records("journal")},
        dump=dump,
    )


def publish_mislabelled(pipe: pk.Pipeline, url: str) -> None:
    """The budget refusal's own record and page, published through the SDK as refused with reason code 'ok' (refused)."""
    from bernstein.producers.activity import ActivityResult
    from bernstein.schemas.records import Observation

    first, second = f"{url}/notes.html?budget", f"{url}/perf.html?budget"
    with pipe.emitter() as emitter:
        result = ActivityResult.build(
            "research",
            pk.canonical(budget_refusal_record(first, second)),
            [Observation(kind="page", ref=first, content_hash=page_hash("notes.html"))],
            terminal_state="refused",
            reason_code="ok",
        )
        emitter.publish(run_id=MISLABELLED, stage_id=STAGE, role="scout", result=result)


def budget_refusal_record(first: str, second: str) -> dict[str, Any]:
    """The budget refusal record, built independently: it names the cap and the one page fetched before it."""
    return {
        "format": "bernstein.research.refusal/v1",
        "query": QUERY,
        "plan": [first, second],
        "refusal": {"code": "BUDGET_EXCEEDED", "cap": "max_fetches", "limit": 1, "attempted": 2, "source": second},
        "fetched": [{"source_ref": first, "page_content_hash": page_hash("notes.html")}],
    }


def expected_ok_report(world: World, run_id: str = RUN, *, live: bool = False) -> list[str]:
    return [
        *pk.expected_header(world.dump, run_id, world.pipe.keys, merkle=world.pipe.live_merkle() if live else None),
        f"  OK {STAGE} [research] (evidence reattached, 5 citations resolved)",
        *[f"    cite OK claim={cid} (1 checked)" for cid, _, _ in EXPECTED_CLAIMS],
        pk.by_line(world.dump, run_id, STAGE),
        pk.VERIFIED,
    ]


# ---------------------------------------------------------------------------
# a full run
# ---------------------------------------------------------------------------


def test_full_run_verifies_from_the_exported_dump(world: World) -> None:
    result = pk.verify_dump(world.dump, RUN, world.pipe.trust_file)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    # The seed's lines, exactly.
    assert lines[0] == f"Activity verify run={RUN}"
    assert lines[5:11] == [
        "  OK research-0 [research] (evidence reattached, 5 citations resolved)",
        "    cite OK claim=c1 (1 checked)",
        "    cite OK claim=c2 (1 checked)",
        "    cite OK claim=c3 (1 checked)",
        "    cite OK claim=c4 (1 checked)",
        "    cite OK claim=c5 (1 checked)",
    ]
    assert lines[11].startswith("    by ")  # who made the stage, after the seed's block
    assert lines[12:] == ["verified -- every activity reconstructs from the journal."]
    assert lines == expected_ok_report(world)
    assert result.stderr == ""


def test_full_run_verifies_live_from_kafka_and_s3(world: World) -> None:
    result = world.pipe.verify_live(RUN)
    assert result.returncode == 0, result.stdout + result.stderr
    # the live topics hold the whole journal partition: the report also names its Merkle log
    assert result.stdout.splitlines() == expected_ok_report(world, live=True)


def test_report_is_bound_to_the_exact_served_bytes(world: World, services: Any) -> None:
    """The published report pins the bytes the server sent, and S3 holds them under those hashes."""
    from bernstein.substrate.cas import S3BlobStore

    summary = world.summary()
    journalled = pk.entry(world.dump, RUN, STAGE).record
    report_bytes = pk.read_blob(world.dump, journalled["artifact_hash"])
    submission_offset = world.submission_runs.index(RUN)
    assert summary == {
        "run_id": RUN,
        "stage_id": STAGE,
        "kind": "research",
        "terminal_state": "completed",
        "reason_code": "ok",
        "artifact_hash": pk.sha256_of(report_bytes),
        "evidence_set_hash": journalled["evidence_set_hash"],
        "claims": 5,
        "citations": 5,
        "sources": 3,
        "landed": f"{world.pipe.prefix}.activity.submissions[0]@{submission_offset}",
    }
    report = json.loads(report_bytes)
    assert pk.canonical(report) == report_bytes, "the report is RFC 8785 canonical JSON"
    assert report == {
        "format": "bernstein.research.report/v1",
        "query": QUERY,
        "plan": [world.source(p) for p in SOURCES],
        "sources": [
            {
                "source_ref": world.source(path),
                "final_url": world.source(SERVED[path]),
                "status": 200,
                "content_type": CONTENT_TYPES[SERVED[path]],
                "redirects": [{"status": 301, "url": world.source(path)}] if path == "old-notes" else [],
                "page_content_hash": page_hash(SERVED[path]),
                "size": len(PAGES[SERVED[path]]),
            }
            for path in SOURCES
        ],
        "claims": [
            {
                "claim_id": cid,
                "statement": quote,
                "citations": [
                    {
                        "claim_id": cid,
                        "source_ref": world.source(path),
                        "page_content_hash": page_hash(SERVED[path]),
                        "quote": quote,
                    }
                ],
            }
            for cid, path, quote in EXPECTED_CLAIMS
        ],
        "quote_normalisation": NORMALISATION,
    }
    assert journalled["kind"] == "research"
    assert journalled["role"] == "scout"
    assert journalled["terminal_state"] == "completed"
    assert [dict(o) for o in journalled["observations"]] == [
        {"kind": "page", "ref": world.source(path), "content_hash": page_hash(SERVED[path]), "size": len(PAGES[SERVED[path]])}
        for path in SOURCES
    ]  # the SDK declares each page's size
    store = S3BlobStore(services.s3)
    assert store.get(journalled["artifact_hash"]) == report_bytes
    for name, data in PAGES.items():
        assert store.get(page_hash(name)) == data
        assert pk.read_blob(world.dump, page_hash(name)) == data
    # The redirect was really followed over HTTP.
    assert "GET /old-notes 301" in world.requests
    assert "GET /notes.html 200" in world.requests


def test_same_query_and_bytes_give_the_same_report_in_a_second_run(world: World) -> None:
    twin = json.loads(world.twin.stdout)
    assert twin["artifact_hash"] == world.summary()["artifact_hash"]
    assert pk.entry(world.dump, TWIN, STAGE).record["artifact_hash"] == world.summary()["artifact_hash"]
    result = pk.verify_dump(world.dump, TWIN, world.pipe.trust_file)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == expected_ok_report(world, TWIN)


# ---------------------------------------------------------------------------
# tampered pages
# ---------------------------------------------------------------------------


def test_altered_page_names_the_claims_and_both_hashes(world: World, tmp_path: Path) -> None:
    dump = kit.copy_dump(world.dump, tmp_path)
    pinned = page_hash("perf.html")
    altered = kit.replace_once(PAGES["perf.html"], b"480 ms", b"980 ms")
    pk.overwrite_blob(dump, pinned, altered)
    recomputed = pk.sha256_of(altered)
    assert recomputed != pinned

    result = pk.verify_dump(dump, RUN, world.pipe.trust_file)
    assert result.returncode == 2, result.stdout + result.stderr

    def failed(cid: str) -> str:
        return f"claim '{cid}' citation failed: cited page content hash mismatch (pinned '{pinned}', recomputed '{recomputed}')"

    assert result.stdout.splitlines() == [
        *pk.expected_header(world.dump, RUN, world.pipe.keys),
        f"  MISMATCH research-0 [research] -- {failed('c3')}",
        "    cite OK claim=c1 (1 checked)",
        "    cite OK claim=c2 (1 checked)",
        f"    cite FAIL claim=c3 (0 checked) -- {failed('c3')}",
        f"    cite FAIL claim=c4 (0 checked) -- {failed('c4')}",
        "    cite OK claim=c5 (1 checked)",
        pk.by_line(world.dump, RUN, "research-0"),
        "mismatch -- 1 check failed; the run does not reconstruct.",
    ]


def test_deleted_page_is_its_own_verdict(world: World, tmp_path: Path) -> None:
    dump = kit.copy_dump(world.dump, tmp_path)
    missing = page_hash("faq.txt")
    kit.blob_path(dump, missing).unlink()

    code, document = pk.verify_dump_json(dump, RUN, world.pipe.trust_file)
    assert code == 2
    reason = f"claim 'c5' citation unresolved: page bytes missing from store for '{missing}'"
    stage = pk.stage_json(document, STAGE)
    assert stage["reason"] == reason
    assert [d["text"] for d in stage["details"]] == [
        "cite OK claim=c1 (1 checked)",
        "cite OK claim=c2 (1 checked)",
        "cite OK claim=c3 (1 checked)",
        "cite OK claim=c4 (1 checked)",
        f"cite FAIL claim=c5 (0 checked) -- {reason}",
    ]
    assert stage["data"] == {"claims": 5, "citations": 5, "citations_resolved": 4}
    assert document["chain"]["ok"] and document["seal"]["ok"] and document["audit"]["ok"]

    text = pk.verify_dump(dump, RUN, world.pipe.trust_file)
    assert text.returncode == 2
    assert f"  MISMATCH research-0 [research] -- {reason}" in text.stdout.splitlines()


# ---------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", BOUNDARY)
def test_boundary_refusal_publishes_nothing(name: str, world: World) -> None:
    result = world.refusals[name]
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout == ""
    assert without_endpoint_line(result.stderr) == f"research refused: {boundary_message(name, world.url)} (nothing published)\n"
    # Nothing reached the broker for that run: not a submission, so not a journal record either.
    assert boundary_run(name) not in world.submission_runs
    assert boundary_run(name) not in world.journal_runs
    # ... while the same topics do hold the runs that were published (the reads are not blind).
    assert {RUN, TWIN, BUDGET, MISLABELLED} <= set(world.submission_runs)
    assert {RUN, TWIN, BUDGET} <= world.journal_runs  # MISLABELLED's stage and close were both refused


def test_not_in_page_quote_is_in_the_raw_bytes_but_not_in_the_page_text() -> None:
    """The QUOTE_NOT_IN_PAGE case is not vacuous: a byte-substring check would have accepted it."""
    assert HIDDEN.encode() in PAGES["notes.html"]


def test_budget_refusal_is_journalled_and_verifies(world: World) -> None:
    first, second = f"{world.url}/notes.html?budget", f"{world.url}/perf.html?budget"
    result = world.budget
    assert result.returncode == 3, result.stdout + result.stderr
    assert (
        without_endpoint_line(result.stderr)
        == f"research stopped: BUDGET_EXCEEDED: research run exceeds max_fetches=1 at source '{second}' (would reach 2)\n"
    )
    refusal_hash = pk.sha256_of(pk.canonical(budget_refusal_record(first, second)))
    assert result.stdout.splitlines() == [
        f"published budget refusal (refused/budget_exhausted): run={BUDGET} stage={STAGE} [research]",
        f"  artifact {refusal_hash}",
        "  0 claims, 1 source fetched",
        f"  landed at {world.pipe.prefix}.activity.submissions[0]@{world.submission_runs.index(BUDGET)}",
    ]
    # The cap is checked before the fetch: the second page was never requested.
    assert "GET /notes.html?budget 200" in world.requests
    assert not [r for r in world.requests if "/perf.html?budget" in r]

    journalled = pk.entry(world.dump, BUDGET, STAGE).record
    assert (journalled["kind"], journalled["terminal_state"], journalled["reason_code"]) == (
        "research",
        "refused",
        "budget_exhausted",
    )
    assert journalled["artifact_hash"] == refusal_hash
    assert [dict(o) for o in journalled["observations"]] == [
        {"kind": "page", "ref": first, "content_hash": page_hash("notes.html"), "size": len(PAGES["notes.html"])}
    ]

    verified = pk.verify_dump(world.dump, BUDGET, world.pipe.trust_file)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.splitlines() == [
        *pk.expected_header(world.dump, BUDGET, world.pipe.keys),
        f"  OK {STAGE} [research] (evidence reattached, budget refusal recorded: max_fetches=1 at source '{second}')",
        pk.by_line(world.dump, BUDGET, STAGE),
        pk.VERIFIED,
    ]


def test_refusal_record_published_under_another_reason_code_is_refused_by_the_scheduler(world: World) -> None:
    """A budget refusal record whose submission says reason code 'ok' is refused by the scheduler, not journalled.

    The rule is decided from the submission's own bytes (docs/modality_rules.md); the verifier's check of
    the same rule remains for a journal edited afterwards.
    """
    refusal, close = pk.refusals(world.dump, MISLABELLED)
    assert close["code"] == "RUN_EMPTY"  # its only stage was refused: its close has nothing to seal
    assert {k: refusal[k] for k in ("code", "stage_id", "kind", "field", "declared", "recomputed", "message")} == {
        "code": "RESEARCH_OUTCOME_MISMATCH",
        "stage_id": STAGE,
        "kind": "research",
        "field": "reason_code",
        "declared": "ok",
        "recomputed": "budget_exhausted",
        "message": "a bernstein.research.refusal/v1 record is anchored with reason_code 'budget_exhausted', not 'ok'",
    }
    assert pk.entries(world.dump, MISLABELLED) == []


# ---------------------------------------------------------------------------
# determinism and the network
# ---------------------------------------------------------------------------


def test_verify_output_is_byte_identical_across_runs(world: World) -> None:
    first = pk.verify_dump(world.dump, RUN, world.pipe.trust_file)
    second = pk.verify_dump(world.dump, RUN, world.pipe.trust_file)
    assert first.returncode == second.returncode == 0
    assert first.stdout.encode() == second.stdout.encode()
    first_json = pk.verify_dump(world.dump, RUN, world.pipe.trust_file, json_output=True)
    second_json = pk.verify_dump(world.dump, RUN, world.pipe.trust_file, json_output=True)
    assert first_json.stdout.encode() == second_json.stdout.encode()
    assert json.loads(first_json.stdout)["ok"] is True
    # The live source prints the same report, byte for byte, but for the Merkle log it can recompute (the whole
    # partition), which a dump of selected runs cannot.
    assert first.stdout.splitlines() == expected_ok_report(world)
    assert (
        world.pipe.verify_live(RUN).stdout.encode()
        == "".join(line + "\n" for line in expected_ok_report(world, live=True)).encode()
    )


def test_verify_with_the_network_disabled(world: World, tmp_path: Path) -> None:
    prefix = pk.netns_prefix()
    if prefix is None:
        pytest.skip("neither `unshare -rn` nor `unshare -n` works here")
    dump = kit.copy_dump(world.dump, tmp_path)
    # The broker is reachable from here and not from inside the namespace: the network really is gone.
    assert pk.can_connect(world.pipe.bootstrap)
    assert not pk.can_connect(world.pipe.bootstrap, prefix)
    assert not [k for k in kit.offline_env() if k.startswith("BERNSTEIN_")]
    result = pk.verify_dump(dump, RUN, world.pipe.trust_file, prefix_cmd=prefix)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == expected_ok_report(world)
    assert result.stderr == ""
    # Without the dump's content store the citations cannot be resolved: the pages really come from it.
    shutil.rmtree(dump / "cas")
    (dump / "cas").mkdir()
    stripped = pk.verify_dump(dump, RUN, world.pipe.trust_file, prefix_cmd=prefix)
    assert stripped.returncode == 2
    report_hash = world.summary()["artifact_hash"]
    assert f"  MISMATCH {STAGE} [research] -- artifact bytes missing from store ({report_hash})" in stripped.stdout.splitlines()
