"""The run's views: the timeline of stages and refusals, one block per stage, and the data/ops receipts.

A stage block shows the verifier's verdict on the stage (its status, reason, notes and detail lines, as the
verifier wrote them) over what the journal holds for it (role, producer, terminal state, reason code, evidence)
and, per kind, what its evidence shows (``bernstein.verifier.html.research``, ``...browser``, and data/ops here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bernstein.schemas.documents.dataops import (
    RECEIPT_FORMAT,
    REFUSAL_FORMAT,
    DataOpsReceipt,
    MalformedReceipt,
    SignedArtifact,
    load_document,
)
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.html.contents import ActionEntry, Evidence, RefusalEntry, RunContents, StageEntry
from bernstein.verifier.html.page import PAGE_SIZE, cells, code, esc, opt, paged, table
from bernstein.verifier.report import RefusalSeen, RunReport, StageVerdict

DATAOPS: Final = frozenset({"data", "ops"})
MAX_OBSERVATIONS_SHOWN: Final = 50


@dataclass(frozen=True)
class Shown:
    """One stage as the report shows it: its journal entry (None for an incomplete session, which has only
    actions) and the verifier's verdict on it (None when the verifier gave none, e.g. an exact duplicate)."""

    anchor: str
    """The element id of its block: ``st-<journal offset>``, generated, never from the data."""
    entry: StageEntry | None
    verdict: StageVerdict | None
    actions: tuple[ActionEntry, ...]

    @property
    def stage_id(self) -> str:
        return self.entry.stage_id if self.entry is not None else (self.verdict.stage_id if self.verdict else "")

    @property
    def kind(self) -> str:
        return self.entry.kind if self.entry is not None else (self.verdict.kind if self.verdict else "")

    @property
    def offset(self) -> int:
        if self.entry is not None:
            return self.entry.offset
        return self.verdict.offset if self.verdict is not None else -1


def shown_stages(report: RunReport, contents: RunContents) -> list[Shown]:
    """Every stage of the journal with its verdict, then every verdict no entry took (incomplete sessions), in
    journal order."""
    verdicts = {s.offset: s for s in report.stages}
    shown: list[Shown] = []
    taken: set[int] = set()
    for entry in contents.stages:
        verdict = verdicts.get(entry.offset)
        if verdict is not None:
            taken.add(entry.offset)
        actions = tuple(contents.actions.get(entry.stage_id, ())) if entry.kind == "browser" else ()
        shown.append(Shown(f"st-{entry.offset}", entry, verdict, actions))
    for verdict in report.stages:
        if verdict.offset not in taken:
            actions = tuple(contents.actions.get(verdict.stage_id, ())) if verdict.incomplete else ()
            shown.append(Shown(f"st-{verdict.offset}", None, verdict, actions))
    shown.sort(key=lambda s: s.offset)
    return shown


def status(verdict: StageVerdict | None) -> str:
    """The verifier's word for a stage, as its text report prints it."""
    if verdict is None:
        return '<span class="muted">no verdict (not a stage the verifier judged; see the chain)</span>'
    if verdict.failed:
        return '<span class="bad">MISMATCH</span>'
    if verdict.unchecked:
        return '<span class="warn">NOT CHECKED</span>'
    if verdict.incomplete:
        return '<span class="warn">INCOMPLETE</span>' if verdict.ok else '<span class="warn">INCOMPLETE, NOT CHECKED</span>'
    return '<span class="ok">OK</span>'


# ---------------------------------------------------------------------------
# timeline
# ---------------------------------------------------------------------------


def timeline_section(shown: Sequence[Shown], contents: RunContents, report: RunReport) -> str:
    """Stages, refusals and the run's close in journal order: the order the scheduler decided them (their input
    offset on the submissions topic, which the journal's and the refusals' records both carry)."""
    seen = {(r.partition, r.offset): r for r in report.header.refusals}
    rows: list[tuple[int, int, str]] = []
    for stage in shown:
        rows.append((_input_offset(stage), 0, _stage_row(stage)))
    for refusal in contents.refusals:
        rows.append((refusal.input_offset, 1, _refusal_row(refusal, seen.get((refusal.partition, refusal.offset)))))
    for seal in contents.seals:
        if seal.final:
            closer = f"closed by {seal.closed_by}" if seal.closed_by else "closed"
            rows.append(
                (
                    seal.input_offset,
                    2,
                    cells(
                        esc(seal.offset),
                        "final seal",
                        opt(""),
                        opt(""),
                        opt(""),
                        esc(seal.closed_by) if seal.closed_by else opt(""),
                        opt(""),
                        opt(""),
                        esc(f"{closer}; the seal covers {seal.entry_count} entries"),
                        cls="close",
                    ),
                )
            )
    rows.sort(key=lambda row: (row[0], row[1]))
    head = ("journal offset", "record", "stage", "kind", "role", "producer", "terminal state", "reason code", "verdict")
    body = paged([row[2] for row in rows], "timeline rows", lambda chunk: table(head, chunk, "timeline"))
    undecodable = (
        f'<p class="muted">{contents.undecodable} records of the run do not decode and are not shown (the verdict '
        "names them).</p>"
        if contents.undecodable
        else ""
    )
    return f'<section id="timeline"><h2>Timeline ({len(shown)} stages, {len(contents.refusals)} refusals)</h2>{undecodable}{body}</section>'


def _input_offset(stage: Shown) -> int:
    if stage.entry is not None:
        return stage.entry.input_offset
    return stage.actions[0].input_offset if stage.actions else 1 << 62


def _stage_row(stage: Shown) -> str:
    entry, verdict = stage.entry, stage.verdict
    link = f'<a href="#{stage.anchor}">{esc(stage.stage_id)}</a>'
    record = "stage" if entry is not None else "session (no result)"
    if stage.actions:
        record += f", {len(stage.actions)} actions"
    why = ""
    if verdict is not None and (verdict.failed or verdict.unchecked):
        why = ": " + esc(verdict.reason or verdict.unchecked)
    cls = "fail" if verdict is not None and verdict.failed else ("unchecked" if verdict is not None and verdict.unchecked else "")
    producer = entry.producer if entry is not None else (verdict.producer if verdict is not None else "")
    return cells(
        esc(stage.offset),
        esc(record),
        link,
        esc(stage.kind),
        opt(entry.role if entry else ""),
        opt(producer),
        opt(entry.terminal_state if entry else ""),
        opt(entry.reason_code if entry else ""),
        status(verdict) + why,
        cls=f"stage-row {cls}".strip(),
    )


def _refusal_row(refusal: RefusalEntry, seen: RefusalSeen | None) -> str:
    if seen is None or seen.authenticated is None:
        sender = ""
    elif seen.authenticated:
        sender = " (sender authenticated)"
    else:
        sender = " (sender only claimed: refused before its signature verified)"
    return cells(
        esc(f"refusals {refusal.partition}/{refusal.offset}"),
        "refusal",
        esc(refusal.stage_id),
        esc(refusal.kind),
        opt(refusal.role),
        opt(refusal.producer) + esc(sender),
        "refused (by the scheduler)",
        f"<strong>{esc(refusal.code)}</strong>",
        esc(refusal.message),
        cls="refusal-row",
    )


# ---------------------------------------------------------------------------
# a stage's block
# ---------------------------------------------------------------------------

StageBody = Callable[[Shown], str]


def stages_section(
    section: str, title: str, shown: Sequence[Shown], body: StageBody, contents: RunContents, *, open_all: bool
) -> str:
    """One ``<details>`` block per stage (open when it failed, or when the run is small), paged."""
    if not shown:
        return ""
    blocks = [stage_block(stage, body, contents, open_all=open_all) for stage in shown]
    return f'<section id="{section}"><h2>{esc(title)} ({len(shown)})</h2>{paged(blocks, "stages")}</section>'


def stage_block(stage: Shown, body: StageBody, contents: RunContents, *, open_all: bool) -> str:
    entry, verdict = stage.entry, stage.verdict
    failed = verdict is not None and verdict.failed
    opened = " open" if failed or open_all else ""
    seq = entry.seq if entry is not None else (verdict.seq if verdict is not None else "")
    summary = (
        f'{status(verdict)} <strong>{esc(stage.stage_id)}</strong> <span class="tag">{esc(stage.kind)}</span>'
        f'<span class="muted">seq {esc(seq)}, journal offset {esc(stage.offset)}</span>'
    )
    facts = []
    if entry is not None:
        facts.append(
            cells(
                "journal entry",
                esc(
                    f"role {entry.role}, producer {entry.producer}, terminal state {entry.terminal_state}, reason code {entry.reason_code}"
                ),
            )
        )
        facts.append(cells("artifact", code(entry.artifact_hash)))
    if verdict is not None:
        if verdict.reason:
            facts.append(cells("verdict", f'<span class="{"bad" if verdict.failed else "warn"}">{esc(verdict.reason)}</span>'))
        if verdict.unchecked and not verdict.failed:
            facts.append(cells("not checked", esc(verdict.unchecked)))
        if verdict.notes:
            facts.append(cells("notes", esc(", ".join(verdict.notes))))
        if verdict.producer:
            key = f" (key {verdict.key_id})" if verdict.key_id else " (unsigned: predates producer signatures)"
            facts.append(cells("by", esc(verdict.producer + key)))
    refusals = [r for r in contents.refusals if r.stage_id == stage.stage_id]
    for refusal in refusals:
        facts.append(cells("refused", f"<strong>{esc(refusal.code)}</strong> {esc(refusal.message)}"))
    parts = [f'<details class="stage{" fail" if failed else ""}" id="{stage.anchor}"{opened}><summary>{summary}</summary>']
    parts.append(f"<table>{''.join(facts)}</table>")
    if verdict is not None and verdict.details:
        lines = [f'<li class="{"ok" if d.ok else "bad"}">{esc(d.text)}</li>' for d in verdict.details[:PAGE_SIZE]]
        more = len(verdict.details) - PAGE_SIZE
        tail = f'<li class="muted">... {more} more lines (in the text report)</li>' if more > 0 else ""
        parts.append(
            f"<details><summary>The verifier's checks ({len(verdict.details)} lines)</summary><ul>{''.join(lines)}{tail}</ul></details>"
        )
    parts.append(body(stage))
    if entry is not None and entry.observations:
        parts.append(observations_table(entry))
    parts.append("</details>")
    return "".join(parts)


def observations_table(entry: StageEntry) -> str:
    rows = [
        cells(esc(o.kind), esc(o.ref), code(o.content_hash), opt(o.size)) for o in entry.observations[:MAX_OBSERVATIONS_SHOWN]
    ]
    more = len(entry.observations) - MAX_OBSERVATIONS_SHOWN
    tail = f'<p class="muted">... and {more} more observations</p>' if more > 0 else ""
    return (
        f"<details><summary>Evidence the journal pins ({len(entry.observations)} observations)</summary>"
        f"{table(('kind', 'ref', 'content hash', 'declared size'), rows)}{tail}</details>"
    )


def plain_body(stage: Shown) -> str:
    """Stages of other kinds (coding, ...): their facts and evidence list only."""
    return ""


# ---------------------------------------------------------------------------
# data / ops
# ---------------------------------------------------------------------------


def dataops_body(evidence: Evidence, trusted: TrustedKeys) -> StageBody:
    def body(stage: Shown) -> str:
        entry, verdict = stage.entry, stage.verdict
        if entry is None:
            return ""
        data, why = evidence.get(entry.artifact_hash)
        if data is None:
            return f'<p class="warn">receipt {esc(why)}</p>'
        try:
            document = load_document(data, what="artifact")
        except MalformedReceipt as exc:
            return f'<p class="bad">the artifact does not parse as a data/ops document: {esc(exc.message)}</p>'
        result: dict[str, Any] = verdict.data if verdict is not None else {}
        if document.get("format") == REFUSAL_FORMAT:
            return _dataops_refusal(document)
        if document.get("format") != RECEIPT_FORMAT:
            return f'<p class="muted">no receipt: the artifact is a {esc(document.get("format"))} document</p>'
        try:
            receipt = DataOpsReceipt.from_document(document)
        except MalformedReceipt as exc:
            return f'<p class="bad">the receipt does not parse: {esc(exc.message)}</p>'
        return _receipt(receipt, result, verdict, trusted)

    return body


def _dataops_refusal(document: dict[str, Any]) -> str:
    inputs = document.get("inputs") if isinstance(document.get("inputs"), list) else []
    rows = [cells(esc(i), code(h)) for i, h in enumerate(inputs or [])]
    return (
        f'<div class="dataops-refusal"><h3>Recorded refusal <strong>{esc(document.get("code", ""))}</strong></h3>'
        f"<p>{esc(document.get('message', ''))}</p><p>plan hash {code(document.get('plan_hash') or 'none (refused before the plan)')}</p>"
        f"{table(('input', 'content hash'), rows)}</div>"
    )


def _receipt(receipt: DataOpsReceipt, result: dict[str, Any], verdict: StageVerdict | None, trusted: TrustedKeys) -> str:
    failures = [f for f in result.get("failures", ()) if isinstance(f, dict)]
    signatures_ok = bool(result.get("signatures_ok"))
    unchecked = verdict is not None and bool(verdict.unchecked) and not verdict.failed
    pinned = trusted.entry(receipt.signer_key_id)
    signer = (
        f"pinned {pinned.purpose.value} key" + (f" of {pinned.producer}" if pinned.producer else "")
        if pinned is not None
        else "NOT a pinned key"
    )

    def signature_verdict(item: SignedArtifact | None) -> str:
        if unchecked or not result:
            return '<span class="warn">not checked</span>'
        if signatures_ok:
            return '<span class="ok">signature verified</span>'
        for failure in failures:
            ev = failure.get("evidence") or {}
            if item is None and str(failure.get("code", "")).startswith("RECEIPT_SIGNATURE"):
                return f'<span class="bad">{esc(failure.get("code"))}: {esc(failure.get("reason"))}</span>'
            if item is not None and ev.get("role") == item.role and ev.get("index") == str(item.index):
                return f'<span class="bad">{esc(failure.get("code"))}: {esc(failure.get("reason"))}</span>'
        return f'<span class="warn">not verified: {esc(result.get("reason", "the receipt did not verify"))}</span>'

    items = [
        cells(
            esc(item.role),
            esc(item.index),
            esc(item.ref),
            code(item.content_hash),
            esc("present" if item.signature else "missing"),
            signature_verdict(item),
        )
        for item in (*receipt.inputs, *receipt.outputs)
    ]
    steps = "".join(f"<li>{esc(step)}</li>" for step in receipt.plan.steps)
    plan_ok = result.get("plan_ok")
    plan_word = (
        '<span class="ok">plan hash recomputes</span>'
        if plan_ok
        else (
            '<span class="warn">not checked</span>'
            if plan_ok is None or unchecked
            else '<span class="bad">plan does not recompute</span>'
        )
    )
    return (
        f'<div class="receipt"><h3>Signed receipt</h3>'
        f"<p>plan {code(receipt.plan.plan_hash)} ({plan_word})</p>"
        f"<p>plan steps:</p><ol>{steps}</ol>"
        f"<p>signer {code(receipt.signer_key_id)} ({esc(signer)}); receipt signature: {signature_verdict(None)}</p>"
        f"{table(('role', 'index', 'ref', 'content hash', 'signature', 'verdict'), items)}</div>"
    )
