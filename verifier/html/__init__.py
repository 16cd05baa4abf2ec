"""The self-contained HTML report of one run: the verifier's verdict, and the run as people look at it.

``build_report(run_id, source, cas=..., trusted=..., command=...)`` calls the verifier once
(``bernstein.verifier.verify.verify``) and renders what it returns, never a second opinion: the verdict, its exit
code and every problem at its place come from the ``RunReport``; the views beside it (timeline, research claims
in their pages, the browser filmstrip, data/ops receipts) show the journal's own records and the evidence they
pin, read back from the same content store (``bernstein.verifier.html.contents``), each marked with the
verifier's word on it.

The page (``bernstein.verifier.html.page``) is one static file: inline styles, images as ``data:`` URIs stored
once each, no script and a Content Security Policy that forbids any, and any request; long runs are paged
(``<details>`` of 100 rows or stages). Every data-derived string is HTML-escaped. The output is a pure function
of the report, the records, the blobs, the trusted keys and the command line: the same inputs give the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from bernstein.substrate.cas import BlobStore
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.html.browser import browser_body
from bernstein.verifier.html.contents import Evidence, RunContents, read_contents
from bernstein.verifier.html.page import Images, Locate, document, esc, status_section, verdict_section
from bernstein.verifier.html.research import research_body
from bernstein.verifier.html.views import (
    DATAOPS,
    Shown,
    dataops_body,
    plain_body,
    shown_stages,
    stages_section,
    timeline_section,
)
from bernstein.verifier.render import final_line, render_text
from bernstein.verifier.report import RunReport, StageTally, verdict_name
from bernstein.verifier.sources import RecordSource
from bernstein.verifier.verify import verify

OPEN_ALL_UP_TO = 20
"""Runs of at most this many stages show every stage's block open; larger ones only the failed ones."""


@dataclass(frozen=True)
class Rendered:
    html: str
    exit_code: int
    """The verifier's exit code for the run (docs/verifier.md)."""
    verdict: str
    stages: int
    images: int
    """Distinct images embedded."""


def build_report(
    run_id: str,
    source: RecordSource,
    *,
    cas: BlobStore | None,
    trusted: TrustedKeys,
    command: Sequence[str],
    records_only: bool = False,
) -> Rendered:
    """Verify ``run_id`` once and render the report; ``command`` is the ``activity verify`` line that re-runs it."""
    report = verify(run_id, source, cas=cas, trusted=trusted, records_only=records_only)
    header = report.header
    partition = header.chain.partition if header.chain is not None else None
    contents = read_contents(source, run_id, partition) if header.found else RunContents()
    evidence = Evidence(None if records_only else cas, "--records-only" if records_only else "no content store")
    return render_report(report, contents, evidence, trusted=trusted, command=command)


def render_report(
    report: RunReport, contents: RunContents, evidence: Evidence, *, trusted: TrustedKeys, command: Sequence[str]
) -> Rendered:
    """The page of a verified run (``report``) with its journal ``contents`` and ``evidence``."""
    header, stages = report.header, report.stages
    code = report.exit_code
    verdict = verdict_name(header, code)
    text = io.StringIO()
    render_text(header, iter(stages), text)
    final = final_line(header, StageTally.of(stages), code) if header.found else text.getvalue().splitlines()[-1]
    images = Images()
    shown = shown_stages(report, contents)
    locate = _locator(shown, contents)
    body = [
        f'<header><h1>Run {esc(header.run_id)}</h1><p class="muted">{esc(header.source)}; the verdict below is '
        "the verifier's (<code>bernstein activity verify</code>), reached once for this page; the views after it "
        "show what the journal and the content store hold, each marked with the verifier's word on it.</p>"
        '<nav><a href="#verdict">verdict</a><a href="#timeline">timeline</a><a href="#research">research</a>'
        '<a href="#browser">browser</a><a href="#dataops">data/ops</a><a href="#other">other stages</a>'
        '<a href="#status">chain, seal, audit, keys</a></nav></header>',
        verdict_section(header, stages, verdict, code, final, text.getvalue(), command, locate),
    ]
    if header.found:
        open_all = len(shown) <= OPEN_ALL_UP_TO
        by_kind: dict[str, list[Shown]] = {"research": [], "browser": [], "dataops": [], "other": []}
        for stage in shown:
            kind = stage.kind
            by_kind[kind if kind in ("research", "browser") else ("dataops" if kind in DATAOPS else "other")].append(stage)
        body.append(timeline_section(shown, contents, report))
        body.append(
            stages_section("research", "Research", by_kind["research"], research_body(evidence), contents, open_all=open_all)
        )
        body.append(
            stages_section(
                "browser", "Browser sessions", by_kind["browser"], browser_body(evidence, images), contents, open_all=open_all
            )
        )
        body.append(
            stages_section(
                "dataops", "Data and ops", by_kind["dataops"], dataops_body(evidence, trusted), contents, open_all=open_all
            )
        )
        body.append(stages_section("other", "Other stages", by_kind["other"], plain_body, contents, open_all=open_all))
    body.append(status_section(header, trusted, command))
    title = f"{header.run_id}: {verdict.replace('_', ' ')} (bernstein run report)"
    return Rendered(document(title, "".join(body), images), code, verdict, len(shown), images.count)


def _locator(shown: Sequence[Shown], contents: RunContents) -> Locate:
    """(stream, offset) -> a link to the stage block a journal offset belongs to (its entry, or an action of its
    session), or to the run's final seal; "" for any other place."""
    by_offset = {stage.offset: stage for stage in shown}
    by_session = {stage.stage_id: stage for stage in shown if stage.kind == "browser"}
    seals = {seal.offset: seal for seal in contents.seals}

    def locate(stream: str, offset: int | None) -> str:
        if stream != "journal" or offset is None:
            return ""
        stage = by_offset.get(offset)
        if stage is not None:
            return f'<a href="#{stage.anchor}">stage {esc(stage.stage_id)}</a>'
        action = contents.action_at(offset)
        if action is not None:
            session = by_session.get(action.session_id)
            label = f"action {action.index} of session {action.session_id}"
            return f'<a href="#{session.anchor}">{esc(label)}</a>' if session is not None else esc(label)
        seal = seals.get(offset)
        if seal is not None:
            return esc(f"{'final' if seal.final else 'periodic'} seal over {seal.entry_count} entries")
        return ""

    return locate
