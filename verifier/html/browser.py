"""The browser view: a filmstrip of the pre-action screenshots, each with its action, its anchor and the verifier's
word on that step, and where the replay diverged.

Frames come from the journal (the session's ``ComputerUseEntry`` records, in journal order); a session journalled
before its actions were (an action log only) is shown from the action log its session document names. A typed
value appears only as the keyed digest the journal holds (``value_digest``): the journal has nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bernstein.schemas.documents.browser import (
    MalformedSessionDocument,
    SessionDocument,
    parse_action_log,
    parse_session_document,
)
from bernstein.schemas.documents.pointer import MalformedPointerTarget, PointerTarget, is_pointer_target, parse_pointer_target
from bernstein.verifier.html.contents import Evidence
from bernstein.verifier.html.page import Images, code, esc, paged, shot
from bernstein.verifier.html.views import Shown, StageBody


@dataclass(frozen=True)
class FrameFacts:
    index: int
    kind: str
    target: str
    value_digest: str
    prev_anchor: str
    anchor: str
    screenshot_hash: str
    where: str


def browser_body(evidence: Evidence, images: Images) -> StageBody:
    def body(stage: Shown) -> str:
        entry, verdict = stage.entry, stage.verdict
        data: dict[str, Any] = verdict.data if verdict is not None else {}
        session = data.get("session") if isinstance(data.get("session"), dict) else None
        parts = []
        document: SessionDocument | None = None
        if entry is not None:
            blob, why = evidence.get(entry.artifact_hash)
            if blob is None:
                parts.append(f'<p class="warn">session document {esc(why)}</p>')
            else:
                try:
                    document = parse_session_document(blob)
                except MalformedSessionDocument as exc:
                    parts.append(f'<p class="bad">the artifact is not a session document: {esc(exc.message)}</p>')
        if document is not None:
            parts.append(_document(document))
        divergence = session.get("divergence") if session is not None else None
        if isinstance(divergence, dict):
            parts.append(
                f'<div class="divergence bad"><p>The chain diverges at action {esc(divergence.get("action_index"))} '
                f"({esc(divergence.get('reason'))}): {esc(divergence.get('message'))}</p>"
                f"<p>expected anchor {code(divergence.get('expected_anchor') or '-')}, recomputed "
                f"{code(divergence.get('recomputed_anchor') or '-')}</p></div>"
            )
        frames = _frames(stage, document, evidence)
        steps: dict[int, dict[str, Any]] = {}
        if session is not None:
            for step in session.get("steps") or ():
                if isinstance(step, dict) and isinstance(step.get("index"), int):
                    steps.setdefault(step["index"], step)
        diverged_at = divergence.get("action_index") if isinstance(divergence, dict) else None
        unchecked = verdict is None or bool(verdict.unchecked)
        rendered = [_frame(f, steps.get(f.index), diverged_at, unchecked, evidence, images) for f in frames]
        if document is not None and document.final_observation is not None:
            final = document.final_observation
            shot_bytes, why = evidence.get(final.screenshot_hash)
            rendered.append(
                f'<figure class="frame final">{shot(images, final.screenshot_hash, shot_bytes, why, "final screenshot")}'
                f"<figcaption><strong>final frame</strong> (what the agent saw when it declared itself done)<br>"
                f"screenshot {code(final.screenshot_hash)}</figcaption></figure>"
            )
        parts.append(f"<h3>Filmstrip ({len(frames)} actions)</h3>")
        parts.append(paged(rendered, "frames", lambda chunk: f'<div class="film">{"".join(chunk)}</div>'))
        return "".join(parts)

    return body


def _document(document: SessionDocument) -> str:
    extra = ""
    for name, value in (("fault", document.fault), ("refusal", document.refusal)):
        if value:
            extra += f"<p>{esc(name)}: " + ", ".join(f"{esc(k)}={esc(v)}" for k, v in sorted(value.items())) + "</p>"
    return (
        f'<div class="session"><p>session ended <strong>{esc(document.terminal_state.value)}</strong> '
        f"(reason code {esc(document.reason_code)}), {document.action_count} actions, adapter {esc(document.adapter)}, "
        f"worker {esc(document.worker_id)}</p><p>head anchor {code(document.head_anchor)}; action log "
        f"{code(document.action_log)}</p>{extra}</div>"
    )


def _frames(stage: Shown, document: SessionDocument | None, evidence: Evidence) -> list[FrameFacts]:
    if stage.actions:
        return [
            FrameFacts(
                a.index,
                a.kind,
                a.target,
                a.value_digest,
                a.prev_anchor,
                a.anchor,
                a.screenshot_hash,
                f"journal offset {a.offset}",
            )
            for a in stage.actions
        ]
    if document is None:
        return []
    blob, _ = evidence.get(document.action_log)
    if blob is None:
        return []
    try:
        log = parse_action_log(blob)
    except MalformedSessionDocument:
        return []
    return [
        FrameFacts(
            r.index,
            r.action.kind,
            r.action.target,
            r.action.value_digest,
            r.prev_anchor,
            r.anchor,
            r.screenshot_hash,
            "action log",
        )
        for r in (logged.record for logged in log.actions)
    ]


def _frame(
    frame: FrameFacts,
    step: dict[str, Any] | None,
    diverged_at: Any,
    unchecked: bool,
    evidence: Evidence,
    images: Images,
) -> str:
    data, why = evidence.get(frame.screenshot_hash)
    picture = shot(images, frame.screenshot_hash, data, why, f"screenshot before action {frame.index}")
    cls = "frame"
    if isinstance(diverged_at, int) and frame.index == diverged_at:
        cls += " fail"
        word = '<span class="bad">the chain diverges here</span>'
        if step is not None and step.get("message"):
            word += f": {esc(step.get('message'))}"
    elif step is not None:
        word = (
            '<span class="ok">replayed OK</span>'
            if step.get("ok")
            else f'<span class="bad">FAIL</span> ({esc(step.get("reason"))}): {esc(step.get("message"))}'
        )
    elif isinstance(diverged_at, int) and frame.index > diverged_at:
        cls += " after"
        word = '<span class="muted">not replayed: after the divergence</span>'
    else:
        word = '<span class="warn">not checked</span>' if unchecked else '<span class="muted">no step verdict</span>'
    typed = f"<br>typed value: {code(frame.value_digest)}" if frame.value_digest else ""
    target = _target_html(frame.kind, frame.target)
    return (
        f'<figure class="{cls}">{picture}<figcaption><strong>{esc(frame.index)}. {esc(frame.kind)}</strong>{target}{typed}'
        f"<br>{word}<br>anchor {code(frame.anchor)}<br>"
        f'<span class="muted">after {code(frame.prev_anchor)}; screenshot {code(frame.screenshot_hash)}; '
        f"{esc(frame.where)}</span></figcaption></figure>"
    )


def _target_html(kind: str, target: str) -> str:
    """Where an action landed: a pointer target as words (the point and the element), anything else as given."""
    if not target:
        return ""
    if is_pointer_target(target):
        try:
            pointer = parse_pointer_target(target, kind)
        except MalformedPointerTarget:
            pointer = None
        if pointer is not None:
            return " " + _pointer_html(pointer)
    return f" <code>{esc(target)}</code>"


def _pointer_html(pointer: PointerTarget) -> str:
    def on(point: tuple[int, int] | None, element: str | None) -> str:
        what = f"<code>{esc(element)}</code>" if element else "nothing"
        return f"({point[0]}, {point[1]}) on {what}" if point is not None else what

    if pointer.focused:
        return f"into the focused {on(None, pointer.element)}"
    if pointer.to_element is not None:
        return f"from {on(pointer.at, pointer.element)} to {on(pointer.to, pointer.to_element)}"
    return f"at {on(pointer.at, pointer.element)}"
