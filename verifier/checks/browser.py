"""Offline check of a browser activity: replay its session from the artifact and the CAS.

The stage's artifact is the session document (``bernstein.browser.session/v1``,
its format and the action log's in ``bernstein.schemas.documents.browser``);
it names the head anchor, the action count, every anchor and the action log
(a CAS blob holding each action's full record and signed lineage entry).
The check, in order, stopping at the first failure:

1. the document parses and belongs to this run and stage;
2. its computer-use terminal state maps (``TERMINAL_STATE_MAP``) onto the
   entry's journalled terminal state, and its reason code is the entry's;
3. the action log is one of the stage's observations, reattached from the
   CAS by hash and parsed;
4. every action is replayed (``bernstein.verifier.browser_replay``): order, link
   to the previous anchor, screenshot and snapshot bytes re-hashed, observation
   hash and anchor recomputed, lineage entry bound, signed by a pinned key,
   HMAC verified when the audit key is pinned; then the walk is compared with
   the document's head anchor and action count;
5. every action's screenshot and snapshot (and the final observation's,
   the frame the agent saw when it declared itself done, re-hashed in step 4)
   are among the stage's observations;
6. when the verifier passes the run's journalled ComputerUseEntry records of
   this session (``ctx.related_entries``), they are replayed the same way and
   must carry the log's anchors.

One detail line per action (``step OK index=0 navigate`` /
``step FAIL index=1 click -- <reason>``) and a ``head`` line; the stage note
is ``"<N> steps replayed"``; the reason names the first failing action index.
Without a content store nothing can be re-hashed: the verdict is not ok but
``unchecked`` ("steps not replayed"), which the run reports as not fully
verified, never as a pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from bernstein.schemas.documents.browser import (
    MalformedSessionDocument,
    SessionDocument,
    activity_terminal_state,
    parse_action_log,
    parse_session_document,
)
from bernstein.substrate.cas import BlobIntegrityError, BlobNotFound, CasError
from bernstein.verifier.browser_replay import ReplayResult, SignedHead, replay_action_log, replay_steps, step_input_from_entry
from bernstein.verifier.checks import register
from bernstein.verifier.checks.base import CheckContext, DetailLine, ModalityVerdict, observed_hashes

NO_STORE: Final = "steps not replayed"


def check_browser(ctx: CheckContext) -> ModalityVerdict:
    """The ``browser`` modality check (see the module docstring)."""
    if ctx.cas is None:
        return ModalityVerdict(ok=False, unchecked=NO_STORE)
    if ctx.artifact is None:
        return _fail(ctx.artifact_problem or "session document not reattached from the content store")
    # 1. the document
    try:
        document = parse_session_document(ctx.artifact)
    except MalformedSessionDocument as exc:
        return _fail(f"browser artifact is not a session document: {exc.message}")
    if (document.run_id, document.session_id) != (ctx.run_id, ctx.stage_id):
        return _fail(
            f"session document names run {document.run_id!r} session {document.session_id!r}, "
            f"but the stage is {ctx.stage_id!r} of run {ctx.run_id!r}"
        )
    # 2. terminal state and reason code
    mapped = activity_terminal_state(document.terminal_state).value
    journalled = ctx.entry.get("terminal_state")
    if journalled is not None and journalled != mapped:
        return _fail(
            f"session ended {document.terminal_state.value!r}, which maps to {mapped!r}, but the stage is journalled {journalled!r}"
        )
    reason_code = ctx.entry.get("reason_code")
    if reason_code is not None and reason_code != document.reason_code:
        return _fail(f"session document reason code {document.reason_code!r} differs from the journalled {reason_code!r}")
    # 3. the action log
    observed = observed_hashes(ctx.entry)
    if document.action_log not in observed:
        return _fail(f"action log '{document.action_log}' is not among the stage's observations")
    try:
        log = parse_action_log(ctx.cas.get(document.action_log))
    except BlobNotFound:
        return _fail(f"action log bytes missing from store ({document.action_log})")
    except BlobIntegrityError as exc:
        return _fail(f"action log changed in the store (pinned '{exc.expected}', recomputed '{exc.actual}')")
    except CasError as exc:
        return _fail(f"action log unreadable: {exc.message}")
    except MalformedSessionDocument as exc:
        return _fail(f"action log is malformed: {exc.message}")
    # 4. replay
    result = replay_action_log(document, log, cas=ctx.cas, trusted=ctx.trusted)
    details = [DetailLine(step.line(), step.ok, step.to_json()) for step in result.steps]
    details.append(
        DetailLine(result.head_line, result.divergence is None, {"head": document.head_anchor, "count": document.action_count})
    )
    reason = "" if result.divergence is None else f"browser replay {result.divergence.describe()}"
    # 5. observations
    if not reason:
        for logged in log.actions:
            record = logged.record
            for what, digest in (("screenshot", record.screenshot_hash), ("snapshot", record.dom_digest)):
                if digest not in observed:
                    reason = f"browser replay diverged at action {record.index}: its {what} '{digest}' is not among the stage's observations"
                    details.append(
                        DetailLine(f"step FAIL index={record.index} {record.action.kind} -- {what} not observed", False)
                    )
                    break
            if reason:
                break
    final = document.final_observation
    if not reason and final is not None:
        for what, digest in (("screenshot", final.screenshot_hash), ("snapshot", final.dom_digest)):
            if digest not in observed:
                reason = f"the final {what} '{digest}' is not among the stage's observations"
                details.append(DetailLine(f"final FAIL -- {what} not observed", False))
                break
    # 6. the journalled actions, when the verifier hands them over
    related: Sequence[tuple[int, Mapping[str, Any]]] = getattr(ctx, "related_entries", ()) or ()
    if related and not reason:
        reason = _cross_check(ctx, document, result, related, details)
    notes = [f"{result.action_count} step{'' if result.action_count == 1 else 's'} replayed"]
    if document.terminal_state.value != "ok":
        notes.append(f"ended {document.terminal_state.value} ({document.reason_code})")
    notes.extend(result.notes)
    data = {"session": result.to_json(), "terminal_state": document.terminal_state.value, "reason_code": document.reason_code}
    if reason:
        return ModalityVerdict(ok=False, reason=reason, notes=tuple(notes), details=tuple(details), data=data)
    return ModalityVerdict(ok=True, notes=tuple(notes), details=tuple(details), data=data)


def _cross_check(
    ctx: CheckContext,
    document: SessionDocument,
    logged: ReplayResult,
    related: Sequence[tuple[int, Mapping[str, Any]]],
    details: list[DetailLine],
) -> str:
    """Replay the journal's ComputerUseEntry records too; they must carry the action log's anchors."""
    assert ctx.cas is not None
    inputs = [step_input_from_entry(dict(entry), where=f"journal offset {offset}") for offset, entry in related]
    head = SignedHead(
        document.head_anchor, document.action_count, document.anchors, "session document", document.final_observation
    )
    journal = replay_steps(inputs, run_id=ctx.run_id, session_id=ctx.stage_id, cas=ctx.cas, trusted=ctx.trusted, head=head)
    if journal.divergence is not None:
        details.append(DetailLine(f"journal FAIL -- {journal.divergence.describe()}", False, journal.divergence.to_json()))
        return f"journalled actions {journal.divergence.describe()}"
    for step, logged_step in zip(journal.steps, logged.steps, strict=False):
        if step.anchor != logged_step.anchor:
            message = f"journalled action {step.index} has anchor '{step.anchor}', the action log '{logged_step.anchor}'"
            details.append(DetailLine(f"journal FAIL index={step.index} {step.kind} -- {message}", False))
            return message
    details.append(DetailLine(f"journal OK {journal.action_count} journalled actions agree with the action log", True))
    return ""


def _fail(reason: str) -> ModalityVerdict:
    return ModalityVerdict(ok=False, reason=reason, details=(DetailLine(f"session FAIL -- {reason}", False),))


register("browser", check_browser)
