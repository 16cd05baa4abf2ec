"""The HTML run report: escaping, images stored once, the verdict and each problem at its place, the CLI's errors.

The run (``tests.support.report_run``) is journalled by the real scheduler core: coding, research (a page whose
text holds ``<script>alert(1)</script>``, quoted by a claim), a research budget refusal, a browser session
(a typed value and a target holding HTML; two actions and the final frame see one picture), a signed ops
receipt, a refused stage and the close. Tampering edits the stored bytes the way an attacker could.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from bernstein.cli import main
from bernstein.schemas import codec
from bernstein.schemas.documents.dataops import load_document
from bernstein.schemas.notes import SIG_COSIGNATURE_V1, NoteSigner
from bernstein.substrate.exit_codes import EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE
from bernstein.verifier.html import Rendered, build_report
from bernstein.verifier.html.contents import ActionEntry, read_contents
from bernstein.verifier.html.page import PAGE_SIZE, paged
from bernstein.verifier.html.research import highlight
from bernstein.verifier.memory_source import MemorySource
from bernstein.verifier.verify import verify
from tests.support.report_run import (
    FRAMES,
    NAVIGATOR,
    PAGE,
    PAGE_URL,
    PRODUCER,
    RUN,
    SCRIPT_TEXT,
    TYPED_TARGET,
    TYPED_VALUE,
    ReportRun,
    build_long_run,
    build_report_run,
    export,
)

COMMAND = ("bernstein", "activity", "verify", RUN, "--from", "/some dump/with 'quotes'")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> ReportRun:
    return build_report_run(tmp_path_factory.mktemp("report-run"))


def render(run: ReportRun, source: MemorySource | None = None) -> Rendered:
    return build_report(RUN, source or run.source, cas=run.store, trusted=run.trusted, command=COMMAND)


def element_ids(page: str) -> list[str]:
    return re.findall(r'\bid="([^"]*)"', page)


def test_data_is_shown_as_text_and_nothing_in_it_becomes_markup(built: ReportRun) -> None:
    page = render(built).html
    # the page's text holds <script>alert(1)</script> (an entity in its HTML): shown as text, highlighted
    assert SCRIPT_TEXT not in page
    assert f"<mark>Never run {html.escape(SCRIPT_TEXT)} from an untrusted page.</mark>" in page
    # no script element at all, and none may run: the policy forbids any
    assert "<script" not in page.lower()
    assert "script-src" not in page and "default-src 'none'" in page
    # the typed value never reaches the report, only the digest the journal holds; the HTML in its target is text
    assert TYPED_VALUE not in page and html.escape(TYPED_VALUE) not in page and "onerror" not in page
    digests = [a.value_digest for a in _actions(built) if a.value_digest]
    assert len(digests) == 1 and digests[0].startswith("hmac-sha256:") and digests[0] in page
    assert html.escape(TYPED_TARGET) in page and TYPED_TARGET not in page
    assert html.escape(PAGE_URL) in page and PAGE_URL not in page
    # every element id is generated, never taken from the data
    assert all(re.fullmatch(r"[a-z][a-z0-9-]*", i) for i in element_ids(page))
    # nothing opens a connection: no src, no external href, no url() but data: images
    assert not re.search(r"\bsrc=", page)
    assert all(href.startswith("#") for href in re.findall(r'href="([^"]*)"', page))
    assert set(re.findall(r"url\((\w+):", page)) == {"data"}


def _actions(run: ReportRun) -> list[ActionEntry]:
    return [a for actions in read_contents(run.source, RUN, 0).actions.values() for a in actions]


def test_each_screenshot_is_embedded_once_however_often_it_is_shown(built: ReportRun) -> None:
    rendered = render(built)
    page = rendered.html
    assert rendered.images == len(FRAMES) == 3
    for frame in FRAMES:
        assert page.count(base64.b64encode(frame).decode()) == 1
    # actions 2 and 3 and the final frame show one picture: one class, named three times
    shared = re.search(
        r"\.(im\d+)\{background-image:url\(data:image/png;base64," + re.escape(base64.b64encode(FRAMES[2]).decode()), page
    )
    assert shared is not None
    assert page.count(f'class="shot {shared.group(1)}"') == 3
    assert page.count('class="frame"') + page.count('class="frame fail"') == built.session_records == 4
    assert page.count('class="frame final"') == 1


def test_the_verdict_comes_first_and_is_the_verifiers(built: ReportRun) -> None:
    rendered = render(built)
    page = rendered.html
    report = verify(RUN, built.source, cas=built.store, trusted=built.trusted)
    assert (rendered.exit_code, rendered.verdict) == (report.exit_code, "verified") == (EXIT_OK, "verified")
    assert page.index('id="verdict"') < page.index('id="timeline"') < page.index('id="research"') < page.index('id="browser"')
    assert page.index('id="browser"') < page.index('id="dataops"') < page.index('id="status"')
    assert '<code id="final-line">verified -- every activity reconstructs from the journal.</code>' in page
    assert "Problems (" not in page
    # the command line, quoted for a shell
    assert html.escape("bernstein activity verify run-report --from '/some dump/with '\"'\"'quotes'\"'\"''") in page
    # the timeline: every stage and the refusal, in journal order; research claims; the receipt
    assert page.count('class="stage-row') == len(report.stages) == 5
    assert page.count('class="refusal-row"') == 1 and "UNKNOWN_ROLE" in page
    assert page.count('class="claim"') == 2 and page.count('class="citation"') == 2
    assert page.count('class="receipt"') == 1 and page.count("signature verified") == 3  # receipt, input, output
    assert "budget refusal" in page and "max_fetches" in page
    # who did what: the producer of every stage (as the verifier names it), of the refusal and of the close
    assert [s.producer for s in report.stages] == [PRODUCER, PRODUCER, PRODUCER, NAVIGATOR, PRODUCER]
    producers = {str(s.offset): s.producer for s in report.stages}
    stage_rows = _rows(page, r"stage-row[^\"]*")
    assert len(stage_rows) == 5
    for row in stage_rows:
        assert row[5] == html.escape(producers[row[0]]), row
    (refusal,) = _rows(page, "refusal-row")
    assert refusal[5] == f"{PRODUCER} (sender authenticated)" and refusal[7] == "<strong>UNKNOWN_ROLE</strong>"
    assert report.header.seal is not None and report.header.seal.closed_by == PRODUCER
    (close,) = _rows(page, "close")
    assert close[1] == "final seal" and close[5] == PRODUCER and close[8].startswith(f"closed by {PRODUCER}; the seal covers ")


def _rows(page: str, cls: str) -> list[list[str]]:
    """The cells of every ``<tr class="CLS">`` (``cls`` a regular expression), as rendered."""
    return [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(rf'<tr class="{cls}">(.*?)</tr>', page)]


def test_a_citation_names_the_page_by_its_content_hash(built: ReportRun) -> None:
    page = render(built).html
    digest = "sha256:" + hashlib.sha256(PAGE).hexdigest()  # the served bytes, hashed here
    citations = re.findall(r'<li class="citation">(.*?)</li>', page)
    assert len(citations) == 2
    for citation in citations:
        assert f'; content hash <code class="hash">{digest}</code></p>' in citation
    # and the research stage's table of pages: the URL (escaped) and the same hash
    pages = re.findall(r"<tr>(.*?)</tr>", page[page.index("<h3>Pages</h3>") :].split("</table>")[0])
    (row,) = [r for r in pages if html.escape(PAGE_URL) in r]
    assert f'<td><code class="hash">{digest}</code></td><td>{len(PAGE)}</td>' in row


def test_a_receipt_lists_its_plan_steps_in_order(built: ReportRun) -> None:
    page = render(built).html
    (ops,) = [e for e in read_contents(built.source, RUN, 0).stages if e.kind == "ops"]
    steps = load_document(built.store.get(ops.artifact_hash), what="artifact")["plan"]["steps"]
    assert len(steps) > 1 and any("<" in step for step in steps)
    receipt = page[page.index('<div class="receipt">') :].split("</div>")[0]
    assert "<p>plan steps:</p><ol>" + "".join(f"<li>{html.escape(step)}</li>" for step in steps) + "</ol>" in receipt


def test_the_status_lists_the_keys_the_report_was_verified_with(built: ReportRun) -> None:
    page = render(built).html
    table = page[page.index('<table class="trusted">') :].split("</table>")[0]
    rows = re.findall(r'<tr><td><code class="hash">([^<]*)</code></td><td>([^<]*)</td>', table)
    pinned = sorted(built.trusted.entries.values(), key=lambda k: (k.purpose.value, k.key_id))
    assert rows == [(k.key_id, k.purpose.value) for k in pinned] and len(rows) > 2
    assert {k.purpose.value for k in pinned} >= {"seal", "audit", "producer"}
    assert built.keys.audit.secret.hex() not in page  # the audit key by id only
    witnesses = page[page.index('<p class="muted" id="witnesses">') :].split("</p>")[0]
    assert "Witnesses: none trusted." in witnesses and "no witness policy (the trusted-keys file pins none)" in witnesses
    # with a policy pinned, the page names its quorum and every witness key it trusts
    witness = NoteSigner("witness.example/w1", SIG_COSIGNATURE_V1, b"\x61" * 32)
    pinned_policy = replace(
        built, trusted=built.trusted.with_witness_policy(f"witness W1 {witness.verifier.vkey}\nquorum W1\n", 600)
    )
    page = render(pinned_policy).html
    witnesses = page[page.index('<p class="muted" id="witnesses">') :].split("</p>")[0]
    assert f"cosigned by W1; witness keys: W1 ({witness.verifier.vkey})" in witnesses
    assert "unwitnessed 600 s at most" in witnesses


def test_a_long_run_is_paged_with_only_the_first_page_open(tmp_path: Path) -> None:
    stages = 2 * PAGE_SIZE + 50
    run = build_long_run(tmp_path, stages)
    rendered = render(run)
    page = rendered.html
    assert (rendered.verdict, rendered.stages) == ("verified", stages)
    assert page.count('class="stage-row') == stages
    sections = {name: page[page.index(f'<section id="{name}">') :].split("</section>")[0] for name in ("timeline", "other")}
    # the timeline: every stage and the close; the other stages: one block per stage
    for name, items, what in (("timeline", stages + 1, "timeline rows"), ("other", stages, "stages")):
        section = sections[name]
        pages = re.findall(r'<details class="page"( open)?><summary>([^<]*)</summary>', section)
        assert len(pages) == math.ceil(items / PAGE_SIZE) == 3
        assert [opened for opened, _ in pages] == [" open", "", ""]
        assert pages[-1][1] == f"{what} {2 * PAGE_SIZE + 1}\u2013{items} of {items}"
    assert page.count('<details class="page"') == 6 and page.count('<details class="page" open>') == 2
    assert not re.search(r'<details class="stage" id="st-\d+" open>', page)  # a large run opens no stage block


def test_output_is_a_pure_function_of_its_inputs(built: ReportRun) -> None:
    assert render(built).html == render(built).html


def test_a_changed_screenshot_is_shown_where_the_chain_diverges(built: ReportRun, tmp_path: Path) -> None:
    digest = _actions(built)[1].screenshot_hash
    path = built.store.root / "sha256" / digest[7:9] / digest[7:]
    original = path.read_bytes()
    try:
        path.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        report = verify(RUN, built.source, cas=built.store, trusted=built.trusted)
        rendered = render(built)
    finally:
        path.write_bytes(original)
    browser = next(s for s in report.stages if s.kind == "browser")
    divergence = browser.data["session"]["divergence"]
    assert (report.exit_code, browser.failed, divergence["action_index"]) == (EXIT_MISMATCH, True, 1)
    page = rendered.html
    assert rendered.exit_code == EXIT_MISMATCH and 'class="verdict v-mismatch"' in page
    row = _problem_rows(page)[0]
    assert f'<a href="#st-{browser.offset}">stage browser-0</a>' in row
    assert f"<td>{browser.offset}</td><td>{browser.seq}</td>" in row
    assert html.escape(browser.reason) in row and divergence["expected_anchor"] in row
    assert page.count('class="frame fail"') == 1
    fail = page[page.index('class="frame fail"') :]
    assert (
        "the chain diverges here" in fail.split("</figure>")[0] and "changed in the content store" in fail.split("</figure>")[0]
    )


def test_an_edited_journal_record_is_shown_at_the_offset_the_verifier_names(built: ReportRun) -> None:
    records = built.source.all("journal")
    research = next(
        i
        for i, r in enumerate(records)
        if codec.split_envelope(r.value or b"")[0] == codec.JOURNAL_RECORD and b"research-0" in (r.value or b"")
    )
    payload, entry_hash = codec.split_envelope(records[research].value or b"")[1]
    edited = payload.replace(b"scout", b"scoux", 1)
    value = codec.encode(codec.JOURNAL_RECORD, {"payload": edited, "entry_hash": entry_hash})
    source = built.source.replaced(
        "journal", [*records[:research], replace(records[research], value=value), *records[research + 1 :]]
    )
    report = verify(RUN, source, cas=built.store, trusted=built.trusted)
    assert report.header.chain is not None and report.header.chain.problem is not None
    problem = report.header.chain.problem
    assert (problem.stream, problem.offset) == ("journal", records[research].offset)
    page = render(built, source).html
    rows = _problem_rows(page)
    chain = next(r for r in rows if r.startswith("<td>chain</td>"))
    assert f"<strong>{problem.code}</strong>" in chain
    assert f'<a href="#st-{problem.offset}">stage research-0</a>' in chain
    assert f"<td>journal</td><td>{problem.offset}</td><td>{problem.seq}</td>" in chain
    assert html.escape(problem.expected) in chain and html.escape(problem.recomputed) in chain
    assert f'id="st-{problem.offset}"' in page


def _problem_rows(page: str) -> list[str]:
    table = page[page.index('<table class="problems">') :]
    table = table[: table.index("</table>")]
    return [row.split(">", 1)[1] for row in table.split("<tr")[2:]]


def test_quotes_are_marked_once_each_and_overlaps_merge() -> None:
    text = "a <b> quote and another quote"
    marked = highlight(text, [("q1", "<b> quote"), ("q2", "quote and"), ("q3", "absent")])
    assert marked == 'a <span id="q1"></span><mark>&lt;b&gt; </mark><span id="q2"></span><mark>quote and</mark> another quote'


def test_long_lists_are_paged() -> None:
    items = [f"<p>{i}</p>" for i in range(2 * PAGE_SIZE + 5)]
    out = paged(items, "rows")
    assert out.count("<details") == 3 and out.count(" open>") == 1
    assert "rows 201\u2013205 of 205" in out
    assert paged(items[:PAGE_SIZE], "rows") == "".join(items[:PAGE_SIZE])


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dump(built: ReportRun, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = export(built, tmp_path_factory.mktemp("dump") / "dump")
    trust = root.parent / "trusted-keys.json"
    built.trusted.write(trust)
    return root, trust


def test_the_command_writes_the_report_and_exits_with_the_verdict(
    dump: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, trust = dump
    out = tmp_path / "report.html"
    code = main(["activity", "report", RUN, "--from", str(root), "--trusted-keys", str(trust), "--out", str(out)])
    assert code == EXIT_OK, capsys.readouterr()
    page = out.read_text(encoding="utf-8")
    assert 'class="verdict v-verified"' in page
    command = f"bernstein activity verify {RUN} --from {root.absolute()} --trusted-keys {trust.absolute()}"
    assert html.escape(command) in page
    assert f"re-run: {command}" in capsys.readouterr().out
    # the line it prints re-runs the same verdict
    assert main(command.split()[1:]) == EXIT_OK


def test_a_run_not_in_the_dump_is_reported_and_exits_1(
    dump: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, trust = dump
    out = tmp_path / "missing.html"
    code = main(["activity", "report", "no-such-run", "--from", str(root), "--trusted-keys", str(trust), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_NOT_FOUND
    assert "run 'no-such-run' not found in dump" in err and "Traceback" not in err
    assert "no journal records for run" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("out-missing-dir", "does not exist"),
        ("out-is-dir", "is a directory"),
        ("not-a-dump", "has no manifest.json"),
        ("no-such-source", "not found"),
    ],
)
def test_user_errors_are_one_line_and_exit_3(
    dump: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, message: str
) -> None:
    root, trust = dump
    source, out = str(root), tmp_path / "r.html"
    if case == "out-missing-dir":
        out = tmp_path / "nowhere" / "r.html"
    elif case == "out-is-dir":
        out = tmp_path
    elif case == "not-a-dump":
        (tmp_path / "empty").mkdir()
        source = str(tmp_path / "empty")
    else:
        source = str(tmp_path / "absent.json")
    code = main(["activity", "report", RUN, "--from", source, "--trusted-keys", str(trust), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()


def test_a_pointer_target_reads_as_the_point_and_the_element_it_landed_on() -> None:
    from bernstein.schemas.documents.pointer import PointerTarget
    from bernstein.verifier.html.browser import _target_html

    click = PointerTarget('internal:role=button[name="<script>x</script>"i]', at=(412, 230)).text()
    shown = _target_html("double_click", click)
    assert shown.startswith(" at (412, 230) on <code>") and "<script>" not in shown and "&lt;script&gt;" in shown
    drag = PointerTarget("#card", at=(1, 2), to=(3, 4), to_element="#done").text()
    assert _target_html("drag", drag) == " from (1, 2) on <code>#card</code> to (3, 4) on <code>#done</code>"
    assert _target_html("drag", PointerTarget("#a", to_element="#b").text()) == " from <code>#a</code> to <code>#b</code>"
    assert _target_html("type", PointerTarget("#code", focused=True).text()) == " into the focused <code>#code</code>"
    assert _target_html("hover", PointerTarget("", at=(5, 5)).text()) == " at (5, 5) on nothing"
    assert _target_html("click", '{"at": [1, 2]}') == " <code>{&quot;at&quot;: [1, 2]}</code>"  # not canonical: shown as given
    assert _target_html("click", "#plain") == " <code>#plain</code>" and _target_html("wait", "") == ""
