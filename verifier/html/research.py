"""The research view: each claim with its quotes highlighted inside the stored page text, the pages, the budget.

The page text is the one the verifier matches quotes against (``bernstein.schemas.documents.quotes.page_text``:
the stored bytes decoded, markup dropped, whitespace normalised), so a highlight is exactly where the quote
occurs for the check. It is shown as text: a page whose source holds ``<script>`` shows those characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from bernstein.schemas.documents.quotes import normalise_text, page_text
from bernstein.schemas.documents.research import (
    FAILURE_FORMAT,
    REFUSAL_FORMAT,
    MalformedResearchArtifact,
    ResearchReport,
    load_document,
    parse_abort_document,
    parse_report_document,
)
from bernstein.verifier.html.contents import Evidence
from bernstein.verifier.html.page import cells, code, esc, opt, table
from bernstein.verifier.html.views import Shown, StageBody

MAX_PAGE_TEXT: Final = 200_000
"""Characters of a page's text shown whole; a longer page is cut there (its quotes still show in context)."""
CONTEXT: Final = 240
"""Characters of page text shown either side of a quote in a claim."""


def research_body(evidence: Evidence) -> StageBody:
    def body(stage: Shown) -> str:
        entry, verdict = stage.entry, stage.verdict
        if entry is None:
            return ""
        data, why = evidence.get(entry.artifact_hash)
        if data is None:
            return f'<p class="warn">research report {esc(why)}</p>'
        try:
            document = load_document(data)
            if document.get("format") in (REFUSAL_FORMAT, FAILURE_FORMAT):
                return _abort(document)
            report = parse_report_document(document)
        except MalformedResearchArtifact as exc:
            return f'<p class="bad">the artifact does not parse as a research document: {esc(exc.message)}</p>'
        claims: dict[str, dict[str, Any]] = {}
        if verdict is not None:
            for line in verdict.details:
                claim_id = line.data.get("claim_id")
                if isinstance(claim_id, str):
                    claims.setdefault(claim_id, dict(line.data))
        unchecked = verdict is None or bool(verdict.unchecked)
        return _report(stage.anchor, report, claims, unchecked, evidence)

    return body


def _abort(document: dict[str, Any]) -> str:
    record = parse_abort_document(document)
    outcome = "".join(cells(esc(k), esc(v)) for k, v in sorted(record.outcome.items()))
    fetched = [cells(esc(ref), code(digest)) for ref, digest in record.fetched]
    word = "budget refusal" if record.format == REFUSAL_FORMAT else "failed fetch"
    return (
        f'<div class="research-abort"><h3>Stopped: {esc(word)}</h3><p>query: {esc(record.query)}; '
        f"{len(record.plan)} sources planned, {len(record.fetched)} fetched before the stop</p>"
        f'<h3>Budget</h3><table class="budget">{outcome}</table>'
        f"{table(('source', 'page content hash'), fetched)}</div>"
    )


def _report(anchor: str, report: ResearchReport, claims: dict[str, dict[str, Any]], unchecked: bool, evidence: Evidence) -> str:
    pages: dict[str, tuple[str | None, str]] = {}  # page hash -> (text, why not)
    page_ids: dict[str, str] = {}
    for source in report.sources:
        digest = source.page_content_hash
        if digest in pages:
            continue
        page_ids[digest] = f"{anchor}-p{len(page_ids)}"
        data, why = evidence.get(digest)
        pages[digest] = (page_text(data, source.content_type), "") if data is not None else (None, why)
    total = sum(s.size for s in report.sources)
    parts = [
        f'<div class="research"><p>query: <strong>{esc(report.query)}</strong></p>',
        f'<h3>Budget</h3><p class="budget">{len(report.sources)} of {len(report.plan)} planned sources fetched, '
        f"{total} bytes in all; the run stayed within its budget (a run that does not is recorded as a refusal)</p>",
    ]
    marks: dict[str, list[tuple[str, str]]] = {}
    claim_blocks = []
    for c_index, claim in enumerate(report.claims):
        found = claims.get(claim.claim_id)
        if unchecked or found is None:
            word = '<span class="warn">not checked</span>'
        elif found.get("ok"):
            word = f'<span class="ok">OK</span> ({esc(found.get("citations_checked"))} citations checked)'
        else:
            word = f'<span class="bad">FAIL</span>: {esc(found.get("reason", ""))}'
        cites = []
        for q_index, citation in enumerate(claim.citations):
            quote_id = f"{anchor}-c{c_index}-q{q_index}"
            text, why = pages.get(citation.page_content_hash, (None, "not among the report's sources"))
            needle = normalise_text(citation.quote)
            cited = report.source_for(citation.source_ref)
            if text is None:
                shown = f'<span class="warn">page {esc(why)}</span>; quoted: <q>{esc(citation.quote)}</q>'
            elif needle and needle in text:
                marks.setdefault(citation.page_content_hash, []).append((quote_id, needle))
                at = text.index(needle)
                before = text[max(0, at - CONTEXT) : at]
                after = text[at + len(needle) : at + len(needle) + CONTEXT]
                lead = "\u2026" if at > CONTEXT else ""
                tail = "\u2026" if at + len(needle) + CONTEXT < len(text) else ""
                link = f' <a href="#{quote_id}">in the page</a>' if citation.page_content_hash in page_ids else ""
                shown = f'<span class="excerpt">{lead}{esc(before)}<mark>{esc(needle)}</mark>{esc(after)}{tail}</span>{link}'
            else:
                shown = f'<span class="bad">the quote does not occur in the stored page text</span>; quoted: <q>{esc(citation.quote)}</q>'
            url = cited.final_url if cited is not None else ""
            cites.append(
                f'<li class="citation"><p>{shown}</p><p class="muted">source {esc(citation.source_ref)}'
                f"{'; page ' + esc(url) if url else ''}; content hash {code(citation.page_content_hash)}</p></li>"
            )
        claim_blocks.append(
            f'<div class="claim"><h3>claim {esc(claim.claim_id)} \u2014 {word}</h3><p>{esc(claim.statement)}</p>'
            f"<ul>{''.join(cites)}</ul></div>"
        )
    parts.append(f"<h3>Claims ({len(report.claims)})</h3>{''.join(claim_blocks)}")
    rows = []
    for source in report.sources:
        redirects = " \u2192 ".join(f"{r.status} {r.url}" for r in source.redirects)
        rows.append(
            cells(
                esc(source.source_ref),
                esc(source.final_url) + (f'<br><span class="muted">via {esc(redirects)}</span>' if redirects else ""),
                opt(source.status),
                opt(source.content_type),
                code(source.page_content_hash),
                esc(source.size),
            )
        )
    parts.append("<h3>Pages</h3>" + table(("source", "page URL", "status", "content type", "content hash", "bytes"), rows))
    for digest, element_id in page_ids.items():
        text, why = pages[digest]
        if text is None:
            parts.append(f'<p id="{element_id}" class="warn">page {code(digest)} {esc(why)}</p>')
            continue
        cut = len(text) > MAX_PAGE_TEXT
        body = highlight(text[:MAX_PAGE_TEXT], marks.get(digest, []))
        note = f'<p class="muted">the first {MAX_PAGE_TEXT} of {len(text)} characters</p>' if cut else ""
        parts.append(
            f'<details id="{element_id}"><summary>Stored text of page {code(digest)} ({len(text)} characters, '
            f'{len(marks.get(digest, []))} quotes)</summary>{note}<pre class="pagetext">{body}</pre></details>'
        )
    parts.append("</div>")
    return "".join(parts)


def highlight(text: str, quotes: Sequence[tuple[str, str]]) -> str:
    """``text`` escaped, each quote's first occurrence in ``<mark>`` (overlapping ones merged) with an empty
    ``<span id>`` where each quote starts. The ids are generated by the caller, never taken from the data."""
    spans: list[tuple[int, int]] = []
    starts: dict[int, list[str]] = {}
    for quote_id, needle in quotes:
        at = text.find(needle) if needle else -1
        if at < 0:
            continue
        spans.append((at, at + len(needle)))
        starts.setdefault(at, []).append(quote_id)
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    cuts = sorted({0, len(text), *starts, *(p for span in merged for p in span)})
    out: list[str] = []
    inside = [False]

    def in_mark(position: int) -> bool:
        return any(start <= position < end for start, end in merged)

    for left, right in zip(cuts, cuts[1:], strict=False):
        for quote_id in starts.get(left, ()):
            if inside[0]:
                out.append("</mark>")
                inside[0] = False
            out.append(f'<span id="{quote_id}"></span>')
        marked = in_mark(left)
        if marked and not inside[0]:
            out.append("<mark>")
            inside[0] = True
        elif not marked and inside[0]:
            out.append("</mark>")
            inside[0] = False
        out.append(esc(text[left:right]))
    if inside[0]:
        out.append("</mark>")
    return "".join(out)
