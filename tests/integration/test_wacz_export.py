"""Research pages as WACZ end to end: a local HTTP server, the real broker, S3, scheduler and CLI.

The research worker and emitter (the SDK) fetch two pages this module serves on loopback (one through the server's
``/old-notes`` 301 redirect) and publish the run, the real scheduler journals it, and ``bernstein topic export
--wacz`` (the console script) writes the dump with the run's archive. The archive is validated by py-wacz's own
validator (its ``wacz validate`` entry point), its records are read back with zipfile and warcio and compared with
the served bytes (hashlib), and ``bernstein activity verify --wacz`` checks it offline against the journal; then
one byte of a page is changed inside it and the same command names that page (in process, to stay lean).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import pipeline as pk
from tests.support.wacz_checks import (
    archive_problems,
    payload_digest_hex,
    verify_archive,
    wacz_validate,
    warc_records,
    with_one_byte_changed,
)

pytestmark = pytest.mark.integration

RUN = "run-wacz"
STAGE = "research-0"
NOTES = b"<!doctype html><html><head><title>Quill notes</title></head><body><p>Quill 2.0 makes the module system stable and resolves imports at compile time.</p></body></html>\n"
FAQ = b"Quill FAQ\n\nIs Quill 2.0 backwards compatible? Code that uses legacy_import no longer compiles.\n"


def publish_research(pipe: pk.Pipeline, sources: list[str]) -> None:
    from bernstein.producers.research import ResearchBudget, ResearchWorker, extractive_synthesiser, make_fetch
    from bernstein.substrate.cas import S3BlobStore

    worker = ResearchWorker(store=S3BlobStore(pipe.services.s3), budget=ResearchBudget(max_fetches=4))
    run = worker.run(
        query="What changed?", sources=sources, fetch_fn=make_fetch(allow_private=True), synthesise=extractive_synthesiser
    )
    with pipe.emitter() as emitter:
        emitter.publish(run_id=RUN, stage_id=STAGE, role="scout", result=run.result)
        emitter.close_run(RUN)


def test_research_pages_export_as_a_wacz_that_validates_and_verifies(
    services: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipe = pk.Pipeline.create(services, tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    (site / "notes.html").write_bytes(NOTES)
    (site / "faq.txt").write_bytes(FAQ)
    with pk.serve_recording(site) as (url, _):
        sources = [f"{url}/old-notes", f"{url}/faq.txt"]
        publish_research(pipe, sources)  # the SDK's worker and emitter: real fetches, S3, Kafka
    pipe.schedule()

    dump = tmp_path / "dump"
    exported = pipe.cli(["topic", "export", "--run", RUN, "--out", str(dump), "--wacz"])
    assert exported.returncode == 0, exported.stdout + exported.stderr
    wacz = dump / "wacz" / f"{RUN}.wacz"
    assert f"archived 2 research pages of 1 run as WACZ in {dump / 'wacz'}" in exported.stdout

    assert wacz_validate(wacz) == 0  # py-wacz's own validator (its `wacz validate -f FILE`)
    assert "Validation succeeded, the passed WACZ is valid" in capsys.readouterr().out

    journal = {o["ref"]: o["content_hash"] for o in pk.entry(dump, RUN, STAGE).record["observations"]}
    assert journal == {sources[0]: pk.sha256_of(NOTES), sources[1]: pk.sha256_of(FAQ)}
    records = {
        headers["WARC-Bernstein-Source"]: (kind, headers, status, body) for kind, headers, status, body in warc_records(wacz)
    }
    assert sorted(records) == sorted(sources)
    for source, (kind, headers, status, body) in records.items():
        assert (kind, status) == ("response", "200 OK")
        assert headers["WARC-Bernstein-Content-Hash"] == journal[source] == "sha256:" + hashlib.sha256(body).hexdigest()
        assert payload_digest_hex(headers) == journal[source]
    notes = records[sources[0]][1]
    assert notes["WARC-Target-URI"] == f"{url}/notes.html"  # where the bytes came from, after the redirect
    assert json.loads(notes["WARC-Bernstein-Redirects"]) == [[301, sources[0]]]

    result = verify_archive(RUN, dump, pipe.trust_file, wacz)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert pk.VERIFIED in lines
    assert lines[-1] == "archive verified -- the archive holds exactly the 2 pages the journal pins."

    tampered = with_one_byte_changed(wacz, NOTES, tmp_path / "tampered.wacz")
    code, problems = archive_problems(RUN, dump, pipe.trust_file, tampered, capsys)  # in-process: the same command line
    assert code == 2
    changed = [p for p in problems if p["code"] == "WACZ_PAGE_CHANGED"]
    assert [(p["stage_id"], p["source_ref"], p["url"], p["expected"]) for p in changed] == [
        (STAGE, sources[0], f"{url}/notes.html", pk.sha256_of(NOTES))
    ]
    assert changed[0]["recomputed"] != pk.sha256_of(NOTES)
