"""Research pages as WACZ end to end: a local HTTP server, the real broker, S3, scheduler and CLI.

The research worker and emitter (the SDK) fetch two pages this module serves on loopback (one through the server's
``/old-notes`` 301 redirect) and publish the run, the real scheduler journals it, and ``bernstein topic export
--wacz`` (the console script) writes the dump with the run's archive. The archive is validated by py-wacz's own
validator (its ``wacz validate`` entry point), its records are read back with zipfile and warcio and compared with
the served bytes (hashlib), and ``bernstein activity verify --wacz`` checks it offline against the journal; then
one byte of a page is changed inside it and the same command names that page (in process, to stay lean).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from bernstein.cli import main as bernstein_main
from tests.support import pipeline as pk
from tests.support import tamper as kit

pytestmark = pytest.mark.integration

RUN = "run-wacz"
STAGE = "research-0"
NOTES = b"<!doctype html><html><head><title>Quill notes</title></head><body><p>Quill 2.0 makes the module system stable and resolves imports at compile time.</p></body></html>\n"
FAQ = b"Quill FAQ\n\nIs Quill 2.0 backwards compatible? Code that uses legacy_import no longer compiles.\n"
WARC_MEMBER = "archive/research-pages.warc.gz"


def warc_records(wacz: Path) -> list[tuple[str, dict[str, str], str | None, bytes]]:
    from warcio.archiveiterator import ArchiveIterator

    found = []
    with zipfile.ZipFile(wacz) as archive, archive.open(WARC_MEMBER) as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type in ("response", "resource"):
                status = record.http_headers.statusline if record.http_headers is not None else None
                found.append((record.rec_type, dict(record.rec_headers.headers), status, record.raw_stream.read()))
    return found


def with_one_byte_changed(wacz: Path, page: bytes, out: Path) -> Path:
    """``wacz`` with one byte of ``page`` flipped inside its WARC record, re-gzipped and re-zipped."""
    with zipfile.ZipFile(wacz) as archive:
        files = [(info, archive.read(info.filename)) for info in archive.infolist()]
    with zipfile.ZipFile(out, "w") as archive:
        for info, data in files:
            if info.filename == WARC_MEMBER:
                members = []
                while data:
                    inflater = zlib.decompressobj(wbits=31)
                    member = inflater.decompress(data)
                    data = inflater.unused_data
                    if page in member:
                        at = member.index(page) + 20
                        member = member[:at] + bytes([member[at] ^ 0x20]) + member[at + 1 :]
                    members.append(gzip.compress(member, mtime=0))
                data = b"".join(members)
            archive.writestr(info, data, compress_type=info.compress_type)
    return out


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


def verify(dump: Path, trust: Path, wacz: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["activity", "verify", RUN, "--from", str(dump), "--trusted-keys", str(trust), "--wacz", str(wacz), *extra]
    return kit.bernstein(args, kit.offline_env(), cwd=dump.parent)


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

    with warnings.catch_warnings():  # surt, under py-wacz, has escapes Python warns about; py-wacz leaves files open
        warnings.simplefilter("ignore")
        from wacz.main import main as wacz_main  # py-wacz's own validator (its `wacz validate -f FILE`)

        assert wacz_main(["validate", "-f", str(wacz)]) == 0
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
    notes = records[sources[0]][1]
    assert notes["WARC-Target-URI"] == f"{url}/notes.html"  # where the bytes came from, after the redirect
    assert json.loads(notes["WARC-Bernstein-Redirects"]) == [[301, sources[0]]]

    result = verify(dump, pipe.trust_file, wacz)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert pk.VERIFIED in lines
    assert lines[-1] == "archive verified -- the archive holds exactly the 2 pages the journal pins."

    tampered = with_one_byte_changed(wacz, NOTES, tmp_path / "tampered.wacz")
    args = ["activity", "verify", RUN, "--from", str(dump), "--trusted-keys", str(pipe.trust_file), "--wacz", str(tampered)]
    assert bernstein_main([*args, "--json"]) == 2  # in-process: the same command line
    document = json.loads(capsys.readouterr().out)
    changed = [p for p in document["archive"]["problems"] if p["code"] == "WACZ_PAGE_CHANGED"]
    assert [(p["stage_id"], p["source_ref"], p["url"], p["expected"]) for p in changed] == [
        (STAGE, sources[0], f"{url}/notes.html", pk.sha256_of(NOTES))
    ]
    assert changed[0]["recomputed"] != pk.sha256_of(NOTES)
