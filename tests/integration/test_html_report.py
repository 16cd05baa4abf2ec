"""The HTML report of the demo run in a real headless Chromium: no console error, no request, and what it shows
counted against the journal; a tampered dump's report shows the mismatch where the verifier names it.

The demo (``bernstein demo``) runs on the real services and exports its run; the report is written by the CLI,
opened from ``file://`` in Debian's Chromium (Playwright with ``executable_path``, never a downloaded browser),
with every request recorded and any but the page itself aborted. The demo's run is also exported again with
``bernstein topic export --wacz``: its research pages as a WACZ that py-wacz validates, whose payloads are the pages
the journal pins, and in which the verifier names a page changed by one byte (``tests.support.wacz_checks``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, sync_playwright

from bernstein.producers.computer_use.playwright_driver import chromium_path
from bernstein.schemas import codec
from bernstein.schemas.documents.dataops import RECEIPT_FORMAT
from bernstein.schemas.documents.research import REPORT_FORMAT
from bernstein.substrate.keys import init_keys
from tests.conftest import bernstein_env
from tests.support import pipeline as pk
from tests.support import tamper as kit
from tests.support.prefixes import fresh_prefix
from tests.support.wacz_checks import (
    archive_problems,
    payload_digest_hex,
    verify_archive,
    wacz_validate,
    warc_records,
    with_one_byte_changed,
)

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Demo:
    run_id: str
    dump: Path
    trust: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def demo(services: Any, tmp_path_factory: pytest.TempPathFactory) -> Demo:
    tmp = tmp_path_factory.mktemp("report-demo")
    env = {**os.environ, **bernstein_env(services, fresh_prefix(), init_keys(tmp / "keys"))}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bernstein",
            "demo",
            "--keys-dir",
            str(tmp / "keys"),
            "--producer-keys",
            str(tmp / "agents"),
            "--out",
            str(tmp / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (manifest_path,) = list((tmp / "out").glob("demo-*/dump/manifest.json"))
    dump = manifest_path.parent
    return Demo(dump.parent.name, dump, dump.parent / "trusted-keys.json", env)


def report(demo: Demo, dump: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bernstein",
            "activity",
            "report",
            demo.run_id,
            "--from",
            str(dump),
            "--trusted-keys",
            str(demo.trust),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=demo.env,
        timeout=120,
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Opened:
    page: Page
    console: list[str]
    requests: list[str]


def open_report(browser: Any, path: Path) -> Opened:
    context = browser.new_context(java_script_enabled=True)
    page = context.new_page()
    console: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    page.on("requestfailed", lambda r: console.append(f"requestfailed: {r.url}"))
    me = path.absolute().as_uri()

    def route(r: Any) -> None:
        requests.append(r.request.url)
        if r.request.url == me:
            r.continue_()
        else:
            r.abort()

    page.route("**/*", route)
    page.on("request", lambda r: None if r.url == me or r.url in requests else requests.append(r.url))
    page.goto(me, wait_until="load")
    # open every <details> so that every image is laid out and decoded
    for handle in page.query_selector_all("details:not([open])"):
        handle.evaluate("d => d.setAttribute('open', '')")
    page.wait_for_timeout(300)
    return Opened(page, console, requests)


def journal(dump: Path, run_id: str) -> list[tuple[int, Any]]:
    """(offset, decoded entry) of the run's journal entries, decoded independently of the report."""
    found = []
    for line in (dump / "topics" / "journal" / "0.jsonl").read_text().splitlines():
        item = json.loads(line)
        if base64.b64decode(item["key"]) != run_id.encode():
            continue
        name, fields = codec.split_envelope(base64.b64decode(item["value"]))
        if name == codec.JOURNAL_RECORD:
            found.append((item["offset"], codec.decode(fields[0]).record))
    return found


def blob(dump: Path, digest: str) -> Any:
    return json.loads((dump / "cas" / "sha256" / digest[7:9] / digest[7:]).read_bytes())


def test_the_demo_report_opens_offline_and_shows_what_the_journal_holds(demo: Demo, browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "demo.html"
    written = report(demo, demo.dump, out)
    assert written.returncode == 0, written.stdout + written.stderr
    opened = open_report(browser, out)
    page = opened.page
    assert opened.console == []
    assert opened.requests == [out.absolute().as_uri()]  # only the page itself: no font, script, style or image request
    entries = journal(demo.dump, demo.run_id)
    results = [(o, e) for o, e in entries if e.get("entry_type") == "activity.result"]
    actions = [e for _, e in entries if "action_index" in e]
    claims = sum(
        len(doc["claims"])
        for _, e in results
        if e["kind"] == "research"
        for doc in [blob(demo.dump, e["artifact_hash"])]
        if doc.get("format") == REPORT_FORMAT
    )
    receipts = sum(
        1
        for _, e in results
        if e["kind"] in ("data", "ops") and blob(demo.dump, e["artifact_hash"]).get("format") == RECEIPT_FORMAT
    )
    assert page.locator("tr.stage-row").count() == len(results) >= 6
    assert page.locator(".claim").count() == claims > 0
    assert page.locator(".frame:not(.final)").count() == len(actions) > 0
    assert page.locator(".receipt").count() == receipts == 2
    assert page.locator("tr.refusal-row").count() >= 1  # coding-1, refused as redundant
    assert page.locator(".verdict .name").inner_text().startswith("verified")
    assert page.locator("#final-line").inner_text() == "verified -- every activity reconstructs from the journal."
    # every screenshot is a real, decoded image, laid out with the size of its bytes
    shot = page.locator(".frame:not(.final) .shot").first
    assert shot.evaluate("e => getComputedStyle(e).backgroundImage").startswith('url("data:image/png;base64,')
    assert shot.bounding_box()["height"] > 50  # type: ignore[index]
    # the typed password of the signup flow is only a digest
    assert "typed value: hmac-sha256:" in page.locator("#browser").inner_text()


def test_a_tampered_dump_shows_the_mismatch_at_the_stage_and_offset_the_verifier_names(
    demo: Demo, browser: Any, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    shutil.copytree(demo.dump, dump)
    path = dump / "topics" / "journal" / "0.jsonl"
    lines = path.read_text().splitlines()
    target = next(
        i
        for i, line in enumerate(lines)
        if (item := json.loads(line))
        and codec.split_envelope(base64.b64decode(item["value"]))[0] == codec.JOURNAL_RECORD
        and b"research-0" in base64.b64decode(item["value"])
    )
    item = json.loads(lines[target])
    payload, entry_hash = codec.split_envelope(base64.b64decode(item["value"]))[1]
    item["value"] = base64.b64encode(
        codec.encode(codec.JOURNAL_RECORD, {"payload": payload.replace(b"scout", b"scoux", 1), "entry_hash": entry_hash})
    ).decode()
    lines[target] = json.dumps(item)
    path.write_text("\n".join(lines) + "\n")
    verified = subprocess.run(
        [
            sys.executable,
            "-m",
            "bernstein",
            "activity",
            "verify",
            demo.run_id,
            "--from",
            str(dump),
            "--trusted-keys",
            str(demo.trust),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=demo.env,
        timeout=120,
    )
    assert verified.returncode == 2, verified.stdout + verified.stderr
    problem = json.loads(verified.stdout)["chain"]["problem"]
    assert (problem["stream"], problem["offset"]) == ("journal", item["offset"])
    out = tmp_path / "tampered.html"
    written = report(demo, dump, out)
    assert written.returncode == 2, written.stdout + written.stderr
    opened = open_report(browser, out)
    page = opened.page
    assert opened.console == [] and opened.requests == [out.absolute().as_uri()]
    assert page.locator(".verdict .name").inner_text().startswith("mismatch")
    row = page.locator("table.problems tbody tr", has_text=problem["code"]).first
    cells = [c.inner_text() for c in row.locator("td").all()]
    assert cells[:6] == ["chain", problem["code"], "stage research-0", "journal", str(problem["offset"]), str(problem["seq"])]
    assert cells[7] == problem["expected"] and cells[8] == problem["recomputed"]
    # the link leads to the stage's block, at that offset
    row.locator("a").click()
    assert page.evaluate("location.hash") == f"#st-{problem['offset']}"
    assert "journal offset " + str(problem["offset"]) in page.locator(f"#st-{problem['offset']} > summary").inner_text()


def test_the_demo_research_pages_export_as_a_wacz_that_validates_and_verifies(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's run, exported again from Kafka and S3 with ``--wacz``: py-wacz validates the archive, every record's
    payload is the page its research stage's journal entry pins (research-0's as fetched, after the demo site's
    redirect), ``activity verify --wacz`` accepts it, and one byte changed in a page of research-0 is named."""
    dump = tmp_path / "dump"
    exported = kit.bernstein(["topic", "export", "--run", demo.run_id, "--out", str(dump), "--wacz"], demo.env, cwd=REPO)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    wacz = dump / "wacz" / f"{demo.run_id}.wacz"
    research = [
        e
        for e in pk.entries(dump, demo.run_id)
        if e.record.get("entry_type") == "activity.result" and e.record.get("kind") == "research"
    ]
    pinned = {
        (e.record["stage_id"], o["ref"]): o["content_hash"]
        for e in research
        for o in e.record["observations"]
        if o["kind"] == "page"
    }
    stage = [(ref, digest) for (stage_id, ref), digest in pinned.items() if stage_id == "research-0"]
    assert len(stage) == 3 and len(pinned) > len(stage)  # research-1, refused for its budget, fetched one page first
    assert f"archived {len(pinned)} research pages of 1 run as WACZ in {dump / 'wacz'}" in exported.stdout

    capsys.readouterr()
    assert wacz_validate(wacz) == 0
    assert "Validation succeeded, the passed WACZ is valid" in capsys.readouterr().out

    records = {(h["WARC-Bernstein-Stage"], h["WARC-Bernstein-Source"]): (k, h, s, b) for k, h, s, b in warc_records(wacz)}
    assert sorted(records) == sorted(pinned)
    site = REPO / "demo" / "site"
    for key, (kind, headers, status, body) in records.items():
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        assert payload_digest_hex(headers) == headers["WARC-Bernstein-Content-Hash"] == digest == pinned[key], key
        assert body == (site / headers["WARC-Target-URI"].rsplit("/", 1)[1]).read_bytes()  # the bytes the site served
        if key[0] == "research-0":
            assert (kind, status) == ("response", "200 OK")
    old_notes = next(ref for ref, _ in stage if ref.endswith("/old-notes"))
    notes = records[("research-0", old_notes)][1]
    assert notes["WARC-Target-URI"] == old_notes.removesuffix("/old-notes") + "/notes.html"
    assert json.loads(notes["WARC-Bernstein-Redirects"]) == [[301, old_notes]]

    result = verify_archive(demo.run_id, dump, demo.trust, wacz)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert pk.VERIFIED in lines
    assert lines[-1] == f"archive verified -- the archive holds exactly the {len(pinned)} pages the journal pins."

    # one byte of a research-0 page no other stage fetched, changed inside the archive
    ref, digest = next((r, d) for r, d in stage if list(pinned.values()).count(d) == 1)
    page = (dump / "cas" / "sha256" / digest[7:9] / digest[7:]).read_bytes()
    url = records[("research-0", ref)][1]["WARC-Target-URI"]
    tampered = with_one_byte_changed(wacz, page, tmp_path / "tampered.wacz")
    code, problems = archive_problems(demo.run_id, dump, demo.trust, tampered, capsys)
    assert code == 2
    changed = [p for p in problems if p["code"] == "WACZ_PAGE_CHANGED"]
    assert [(p["stage_id"], p["source_ref"], p["url"], p["expected"]) for p in changed] == [("research-0", ref, url, digest)]
    assert changed[0]["recomputed"] != digest
