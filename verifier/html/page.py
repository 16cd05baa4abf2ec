"""The page around the views: escaping, embedded images, the stylesheet, the verdict and the status sections.

Every string that came from the data (a record, a blob, a key file, the command line) is written through
``esc`` (``html.escape`` with quotes), and nothing from the data ever becomes markup, an attribute name, an
element id, a URL or CSS: ids and class names are generated counters, images are ``data:`` URIs of base64
text under a media type chosen from a fixed list. The page has no script at all, and its Content Security
Policy allows none, nor any request: styles are inline and images ``data:`` only.
"""

from __future__ import annotations

import base64
import html
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.report import (
    HeaderCheckVerdict,
    Problem,
    RunHeader,
    StageVerdict,
)

CSP: Final = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
"""No script, no connection, no font, no frame: the page can only show itself and its own ``data:`` images."""

PAGE_SIZE: Final = 100
"""Rows or stages per page: each page is a ``<details>`` element, the first open (the browser lays out only what is open)."""

MEANINGS: Final = {
    "verified": "every record authenticated with pinned keys (seals signed, audit MACs verified), every evidence blob "
    "reattached and re-hashed, every modality check run and passed",
    "not_found": "the run is not in the source",
    "no_activity": "the run was found, but its journal holds no accepted activity",
    "mismatch": "at least one check failed: something was changed, lost or added",
    "open": "the run has no final seal and nothing says one was written; everything else verified",
    "not_fully_verified": "nothing that was checked failed, but a check could not be run (see \u201cnot checked\u201d)",
}
"""What each verdict means (docs/verifier.md, the table of exit codes)."""

STYLE: Final = """
:root{--ok:#1a7f37;--bad:#b42318;--warn:#9a6700;--muted:#57606a;--line:#d0d7de;--bg:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:1rem 1.5rem;color:#1f2328}
h1{font-size:1.5rem;margin:.2rem 0}h2{font-size:1.2rem;border-bottom:1px solid var(--line);padding-bottom:.2rem;margin-top:2rem}
h3{font-size:1.05rem;margin:.6rem 0 .3rem}
code,pre,.hash{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
.hash{word-break:break-all}
pre{background:var(--bg);border:1px solid var(--line);padding:.6rem;overflow:auto;white-space:pre-wrap;word-break:break-word}
table{border-collapse:collapse;width:100%;margin:.4rem 0}
th,td{border:1px solid var(--line);padding:.25rem .4rem;text-align:left;vertical-align:top}
th{background:var(--bg);font-weight:600}
td{word-break:break-word}
nav a{margin-right:.8rem}
.verdict{border:2px solid var(--line);border-radius:6px;padding:.6rem 1rem;margin:.6rem 0}
.verdict.v-verified{border-color:var(--ok)}.verdict.v-mismatch{border-color:var(--bad);background:#fff5f5}
.verdict.v-open,.verdict.v-not_fully_verified,.verdict.v-not_found,.verdict.v-no_activity{border-color:var(--warn)}
.verdict .name{font-size:1.3rem;font-weight:700}
.ok{color:var(--ok)}.bad{color:var(--bad);font-weight:600}.warn{color:var(--warn)}.muted{color:var(--muted)}
tr.fail td{background:#fff5f5}tr.unchecked td{background:#fff8e5}
details{margin:.3rem 0}summary{cursor:pointer}
details.stage{border:1px solid var(--line);border-radius:6px;padding:.3rem .6rem;margin:.5rem 0}
details.stage.fail{border-color:var(--bad)}
mark{background:#fff3a3;padding:0 1px}
.pagetext{max-height:24rem;overflow:auto}
.film{display:flex;flex-wrap:wrap;gap:.6rem;margin:.4rem 0}
.frame{border:1px solid var(--line);border-radius:6px;padding:.35rem;width:260px;font-size:12.5px;margin:0}
.frame.fail{border:2px solid var(--bad)}.frame.after{opacity:.6}
.shot{width:100%;aspect-ratio:4/3;background-color:var(--bg);background-size:contain;background-repeat:no-repeat;background-position:center;border:1px solid var(--line)}
.shot.large{width:100%;max-width:1280px}
.noshot{display:flex;align-items:center;justify-content:center;text-align:center;color:var(--muted);padding:.3rem}
.tag{display:inline-block;border:1px solid var(--line);border-radius:3px;padding:0 .3rem;margin-right:.2rem;font-size:12px}
"""

_IMAGE_TYPES: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def esc(value: object) -> str:
    """``value`` as HTML text: ``& < > " '`` escaped, so no data can become markup or leave an attribute."""
    return html.escape(str(value), quote=True)


def code(value: object) -> str:
    return f'<code class="hash">{esc(value)}</code>'


def image_type(data: bytes) -> str | None:
    """The media type of a PNG, JPEG, GIF or WebP image, by its first bytes; None for anything else."""
    for magic, media in _IMAGE_TYPES:
        if data.startswith(magic):
            return media
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        if 0 < width <= 100_000 and 0 < height <= 100_000:
            return width, height
    return None


class Images:
    """Each distinct image once, as one CSS rule (``.im<n>{background-image:url(data:...)}``) that every frame
    showing it names by class: a screenshot seen before many actions is stored once."""

    def __init__(self) -> None:
        self._classes: dict[str, str | None] = {}
        self._rules: list[str] = []
        self.bytes_embedded = 0

    def css_class(self, digest: str, data: bytes) -> str | None:
        """The class that shows ``data`` (stored under ``digest``); None when the bytes are not an image."""
        if digest in self._classes:
            return self._classes[digest]
        media = image_type(data)
        name = None if media is None else f"im{len(self._rules)}"
        self._classes[digest] = name
        if media is not None and name is not None:
            encoded = base64.b64encode(data).decode("ascii")  # [A-Za-z0-9+/=] only: nothing in it can leave url()
            size = _png_size(data)
            ratio = f";aspect-ratio:{size[0]}/{size[1]}" if size is not None else ""
            self._rules.append(f".{name}{{background-image:url(data:{media};base64,{encoded}){ratio}}}")
            self.bytes_embedded += len(data)
        return name

    @property
    def count(self) -> int:
        return len(self._rules)

    def stylesheet(self) -> str:
        return "\n".join(self._rules)


def shot(images: Images, digest: str, data: bytes | None, why: str, label: str, *, large: bool = False) -> str:
    """A screenshot box: the image by class, or the reason it is not shown."""
    size = " large" if large else ""
    if data is None:
        return f'<div class="shot noshot{size}">screenshot {esc(why)}</div>'
    name = images.css_class(digest, data)
    if name is None:
        return f'<div class="shot noshot{size}">stored bytes are not a PNG, JPEG, GIF or WebP image ({len(data)} bytes)</div>'
    return f'<div class="shot {name}{size}" role="img" aria-label="{esc(label)}"></div>'


def paged(items: Sequence[str], what: str, wrap: Callable[[Sequence[str]], str] | None = None) -> str:
    """``items`` (rendered HTML) in pages of ``PAGE_SIZE``, each a ``<details>``, the first open; one page: as is."""
    join = wrap or "".join
    if len(items) <= PAGE_SIZE:
        return join(items)
    pages = []
    for start in range(0, len(items), PAGE_SIZE):
        chunk = items[start : start + PAGE_SIZE]
        opened = " open" if start == 0 else ""
        pages.append(
            f'<details class="page"{opened}><summary>{esc(what)} {start + 1}\u2013{start + len(chunk)} '
            f"of {len(items)}</summary>{join(chunk)}</details>"
        )
    return "".join(pages)


def table(head: Iterable[str], rows: Iterable[str], cls: str = "") -> str:
    """A table; ``head`` is plain text (escaped here), ``rows`` already rendered ``<tr>`` elements."""
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{''.join(f'<th>{esc(h)}</th>' for h in head)}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def cells(*values: str, cls: str = "") -> str:
    """One ``<tr>`` of already rendered cells."""
    attr = f' class="{cls}"' if cls else ""
    return f"<tr{attr}>{''.join(f'<td>{v}</td>' for v in values)}</tr>"


def opt(value: object) -> str:
    """A value, or a muted dash when it is absent (None or "")."""
    return '<span class="muted">\u2014</span>' if value is None or value == "" else esc(value)


# ---------------------------------------------------------------------------
# the verdict
# ---------------------------------------------------------------------------

Locate = Callable[[str, int | None], str]
"""(stream, offset) -> a link to the stage or record the offset belongs to ("" when none is shown)."""


def verdict_section(
    header: RunHeader,
    stages: Sequence[StageVerdict],
    verdict: str,
    code_: int,
    final: str,
    text_report: str,
    command: Sequence[str],
    locate: Locate,
) -> str:
    """The verdict as the verifier reached it: its name, exit code and meaning, its last line, every problem at its
    place, the stages that failed or were not checked, the verifier's own text report and its command line."""
    parts = [
        f'<section id="verdict"><h2>Verdict</h2><div class="verdict v-{esc(verdict)}">'
        f'<div class="name">{esc(verdict.replace("_", " "))} <span class="muted">(exit {code_})</span></div>'
        f"<div>{esc(MEANINGS.get(verdict, ''))}</div>"
        f'<p><code id="final-line">{esc(final)}</code></p></div>'
    ]
    if not header.found and header.reason:
        parts.append(f"<p>{esc(header.reason)}</p>")
    rows = list(problem_rows(header, stages, locate))
    if rows:
        head = ("check", "code", "where", "stream", "offset", "seq", "audit seq", "expected", "recomputed", "message")
        parts.append(f"<h3>Problems ({len(rows)})</h3>")
        parts.append(paged(rows, "problems", lambda chunk: table(head, chunk, "problems")))
    unchecked = [*header.unchecked]
    if unchecked or any(s.unchecked and not s.failed for s in stages):
        items = [cells(esc(p.code), esc(p.message), cls="unchecked") for p in unchecked]
        items += [
            cells(
                esc(str(s.data.get("code", ""))),
                f"{locate('journal', s.offset) or esc(s.stage_id)}: {esc(s.unchecked)}",
                cls="unchecked",
            )
            for s in stages
            if s.unchecked and not s.failed
        ]
        parts.append(f"<h3>Not checked ({len(items)})</h3>")
        parts.append(paged(items, "not checked", lambda chunk: table(("code", "why"), chunk)))
    parts.append(f'<h3>Re-run this verification</h3><pre id="command">{esc(shlex.join(command))}</pre>')
    parts.append(
        "<details><summary>The verifier's text report, verbatim</summary>"
        f'<pre id="text-report">{esc(text_report)}</pre></details></section>'
    )
    return "".join(parts)


def problem_rows(header: RunHeader, stages: Sequence[StageVerdict], locate: Locate) -> Iterable[str]:
    """One row per problem the verdict names: dump damage, the first problem of each failed header check (with the
    count of the further ones it does not name), then every failed stage with its named problems."""
    for problem in header.dump_problems:
        yield _problem_row("dump", problem, locate)
    sections: list[tuple[str, HeaderCheckVerdict | None]] = [
        ("chain", header.chain),
        ("seal", header.seal),
        ("audit", header.audit),
        ("producers", header.producers),
    ]
    for name, check in sections:
        if check is not None and check.problem is not None:
            yield _problem_row(name, check.problem, locate, check.further_problems)
    for stage in stages:
        if not stage.failed:
            continue
        where = locate("journal", stage.offset) or esc(stage.stage_id)
        divergence = _divergence(stage)
        expected = recomputed = ""
        if divergence is not None:
            expected, recomputed = str(divergence.get("expected_anchor", "")), str(divergence.get("recomputed_anchor", ""))
        named = {p.message for p in stage.findings}
        if stage.reason not in named:
            yield cells(
                esc(f"stage [{stage.kind}]"),
                opt(""),
                where,
                "journal",
                esc(stage.offset),
                esc(stage.seq),
                opt(""),
                f'<span class="hash">{opt(expected)}</span>',
                f'<span class="hash">{opt(recomputed)}</span>',
                esc(stage.reason),
                cls="fail",
            )
        for problem in stage.findings:
            yield _problem_row(f"stage [{stage.kind}]", problem, locate)


def _divergence(stage: StageVerdict) -> dict[str, object] | None:
    session = stage.data.get("session")
    divergence = session.get("divergence") if isinstance(session, dict) else None
    return divergence if isinstance(divergence, dict) else None


def _problem_row(section: str, problem: Problem, locate: Locate, further: int = 0) -> str:
    more = (
        f' <span class="muted">(+{further} further problem{"" if further == 1 else "s"} of this check)</span>' if further else ""
    )
    return cells(
        esc(section),
        f"<strong>{esc(problem.code)}</strong>",
        locate(problem.stream, problem.offset) or opt(""),
        opt(problem.stream),
        opt(problem.offset),
        opt(problem.seq),
        opt(problem.audit_seq),
        f'<span class="hash">{opt(problem.expected)}</span>',
        f'<span class="hash">{opt(problem.recomputed)}</span>',
        esc(problem.message) + more,
        cls="fail",
    )


# ---------------------------------------------------------------------------
# chain, seal, audit, producers, keys
# ---------------------------------------------------------------------------


def status_section(header: RunHeader, trusted: TrustedKeys, command: Sequence[str]) -> str:
    """Chain, seal, audit and producer verdicts with their facts, the keys that verified records, every key that was
    trusted, and the command line."""
    parts = ['<section id="status"><h2>Chain, seal, audit and keys</h2>']
    rows = []
    if header.chain is not None:
        c = header.chain
        rows.append(_status_row("chain", c, f"{c.entries} entries on partition {c.partition}; head {c.head}"))
    if header.seal is not None:
        s = header.seal
        state = "final seal" if s.final else ("open: no final seal" if header.open else "no valid final seal")
        closed = f"; closed by {s.closed_by} (key {s.closed_by_key})" if s.closed_by else ""
        rows.append(_status_row("seal", s, f"{s.seals} seals, {state}, the last valid one covers {s.covered} entries{closed}"))
    if header.audit is not None:
        a = header.audit
        macs = "MACs verified" if a.macs_verified else "MACs NOT verified (no audit key pinned)"
        note = f"; {a.note}" if a.note else ""
        rows.append(
            _status_row(
                "audit",
                a,
                f"{a.records} records on the partition, {a.run_records} of this run; {macs}; {a.refusals} refusals; "
                f"{a.checkpoints} signed checkpoints, {a.uncovered} records not covered by one yet{note}",
            )
        )
    if header.producers is not None:
        p = header.producers
        rows.append(_status_row("producers", p, f"{p.signed} producer signatures verified; {p.legacy} entries predate them"))
    if rows:
        parts.append(table(("check", "verdict", "facts", "first problem"), rows))
    if header.keys is not None:
        k = header.keys
        used = [
            cells(esc(what), "<br>".join(code(i) for i in ids) or opt(""))
            for what, ids in (("seal", k.seal), ("checkpoint", k.checkpoint), ("audit", k.audit))
        ]
        used.append(
            cells(
                "producer",
                "<br>".join(f"{code(u.key_id)} {esc(u.producer)} ({u.records} records)" for u in k.producer) or opt(""),
            )
        )
        parts.append("<h3>Keys whose signatures or MACs verified</h3>" + table(("purpose", "key ids"), used))
    pinned = [
        cells(
            code(key.key_id),
            esc(key.purpose.value),
            opt(key.producer),
            esc(key.validity.valid_from_ms),
            opt(key.validity.valid_until_ms),
            esc(key.status.value),
        )
        for key in sorted(trusted.entries.values(), key=lambda k: (k.purpose.value, k.key_id))
    ]
    parts.append(
        f"<h3>Trusted (pinned) keys ({len(pinned)})</h3>"
        + table(("key id", "purpose", "producer", "valid from (ms)", "valid until (ms)", "status"), pinned, "trusted")
        + f'<p class="muted" id="witnesses">{_witness_words(trusted)} Audit keys are listed by id; their secrets are '
        "never written into the report.</p>"
    )
    parts.append(f"<h3>Command line</h3><pre>{esc(shlex.join(command))}</pre></section>")
    return "".join(parts)


def _status_row(name: str, verdict: HeaderCheckVerdict, facts: str) -> str:
    if verdict.ok:
        return cells(esc(name), '<span class="ok">OK</span>', esc(facts), opt(""))
    problem = verdict.problem
    assert problem is not None
    further = f" (+{verdict.further_problems} further)" if verdict.further_problems else ""
    return cells(
        esc(name),
        '<span class="bad">MISMATCH</span>',
        esc(facts),
        f"<strong>{esc(problem.code)}</strong>: {esc(problem.message)}{esc(further)}",
        cls="fail",
    )


def document(title: str, body: str, images: Images) -> str:
    """The whole page: head (policy, styles, embedded images) and ``body``."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{esc(title)}</title><style>{STYLE}</style><style>{images.stylesheet()}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def _witness_words(trusted: TrustedKeys) -> str:
    """What the trusted-keys file said about witnesses: the pinned policy's quorum, or that none was pinned."""
    policy = trusted.policy()
    if policy is None:
        return (
            "Witnesses: none trusted. This verification was given no witness policy (the trusted-keys file pins none), so "
            "the checkpoints were verified from the source's own records and any checkpoint handed with --witnessed, "
            "without asking for a witness cosignature."
        )
    names = ", ".join(f"{esc(name)} ({esc(v.vkey)})" for name, v in policy.witnesses.items()) or "none"
    bound = "" if trusted.witness_max_lag_s is None else f" A record may stay unwitnessed {trusted.witness_max_lag_s} s at most."
    return (
        f"Witnesses: the pinned policy asks for each partition's log to be cosigned by {esc(policy.describe())}; "
        f"witness keys: {names}.{bound}"
    )
