"""The session's recorded documents: the per-action record, the action log and the session document.

Action record (one per anchored action)::

    {"index", "prev_anchor", "anchor", "screenshot_hash", "dom_digest", "observation_hash",
     "action": {"kind", "target", "value_digest"}, "lineage_entry_hash",
     "lineage": {"entry": <exact canonical entry text>, "hmac", "key_id", "signature": <base64>}}

Action log (a CAS blob, listed among the browser result's observations)::

    {"format": "bernstein.browser.action-log/v1", "run_id", "session_id", "actions": [<record>, ...]}

Session document (the browser activity result's artifact, canonical JSON)::

    {"format": "bernstein.browser.session/v1", "session_id", "run_id",
     "head_anchor", "action_count",              <- what the scheduler checks
     "genesis", "anchors": [<anchor of action i>, ...], "action_log": <sha256 of the action log>,
     "terminal_state": ok|driver_failure|timeout|refused, "reason_code",
     "adapter", "worker_id",
     "fault": {"code", "phase", "action_index"}     (driver_failure / timeout only)
     "refusal": {"code", ...evidence}                (refused only)
     "final_observation": {"screenshot_hash", "dom_digest", "observation_hash"}}
                                                     (the frame the agent saw when it declared itself done)

The action log keeps the artifact small however long the session is (the
artifact travels inline, bounded at 512 KiB), and because every record holds
its signed lineage entry, the verifier can replay a session from the artifact
and the CAS alone. Parsers check shape only and raise
``MalformedSessionDocument``; consistency is the replay's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from producers.computer_use.anchors import ObservationHashes
from producers.computer_use.boundary import Action
from producers.computer_use.errors import MalformedSessionDocument
from producers.computer_use.lineage import LineageEnvelope
from producers.computer_use.terminal import ComputerUseTerminalState
from schemas.canonical import canonical_json, is_digest
from schemas.records import BROWSER_SESSION_FORMAT

ACTION_LOG_FORMAT: Final = "bernstein.browser.action-log/v1"
_RECORD_DIGESTS: Final = ("prev_anchor", "anchor", "screenshot_hash", "dom_digest", "observation_hash", "lineage_entry_hash")


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """Everything needed to replay one action: its hashes, its action and its signed lineage."""

    index: int
    prev_anchor: str
    anchor: str
    screenshot_hash: str
    dom_digest: str
    observation_hash: str
    action: Action
    lineage: LineageEnvelope

    @property
    def lineage_entry_hash(self) -> str:
        return self.lineage.entry_hash

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "prev_anchor": self.prev_anchor,
            "anchor": self.anchor,
            "screenshot_hash": self.screenshot_hash,
            "dom_digest": self.dom_digest,
            "observation_hash": self.observation_hash,
            "action": self.action.to_record(),
            "lineage_entry_hash": self.lineage_entry_hash,
            "lineage": self.lineage.to_json(),
        }


@dataclass(frozen=True, slots=True)
class LoggedAction:
    """An action record as read back from an action log (``lineage_entry_hash`` as recorded)."""

    record: ActionRecord
    recorded_entry_hash: str


@dataclass(frozen=True, slots=True)
class ActionLog:
    run_id: str
    session_id: str
    actions: tuple[LoggedAction, ...]


@dataclass(frozen=True, slots=True)
class SessionDocument:
    """A parsed session document (the browser result's artifact)."""

    session_id: str
    run_id: str
    head_anchor: str
    action_count: int
    genesis: str
    anchors: tuple[str, ...]
    action_log: str
    terminal_state: ComputerUseTerminalState
    reason_code: str
    adapter: str
    worker_id: str
    fault: Mapping[str, Any] | None
    refusal: Mapping[str, Any] | None
    final_observation: ObservationHashes | None = None


def action_log_bytes(run_id: str, session_id: str, records: Sequence[ActionRecord]) -> bytes:
    return canonical_json(
        {"format": ACTION_LOG_FORMAT, "run_id": run_id, "session_id": session_id, "actions": [r.to_json() for r in records]}
    )


def session_document(
    *,
    run_id: str,
    session_id: str,
    genesis: str,
    records: Sequence[ActionRecord],
    action_log: str,
    terminal_state: ComputerUseTerminalState,
    reason_code: str,
    adapter: str,
    worker_id: str,
    fault: Mapping[str, Any] | None = None,
    refusal: Mapping[str, Any] | None = None,
    final: ObservationHashes | None = None,
) -> dict[str, Any]:
    """The session document of a session that anchored ``records`` and ended in ``terminal_state``."""
    document: dict[str, Any] = {
        "format": BROWSER_SESSION_FORMAT,
        "session_id": session_id,
        "run_id": run_id,
        "head_anchor": records[-1].anchor if records else genesis,
        "action_count": len(records),
        "genesis": genesis,
        "anchors": [r.anchor for r in records],
        "action_log": action_log,
        "terminal_state": terminal_state.value,
        "reason_code": reason_code,
        "adapter": adapter,
        "worker_id": worker_id,
    }
    if fault is not None:
        document["fault"] = dict(fault)
    if refusal is not None:
        document["refusal"] = dict(refusal)
    if final is not None:
        document["final_observation"] = {
            "screenshot_hash": final.screenshot_hash,
            "dom_digest": final.dom_digest,
            "observation_hash": final.observation_hash,
        }
    return document


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------


def _load(data: bytes, what: str, expected_format: str) -> dict[str, Any]:
    """The JSON object in ``data``, refused unless its ``format`` is ``expected_format``."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedSessionDocument(f"{what} is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise MalformedSessionDocument(f"{what} is not a JSON object")
    if document.get("format") != expected_format:
        raise MalformedSessionDocument(f"{what} format is {document.get('format')!r}, expected {expected_format!r}")
    return document


def _str(document: Mapping[str, Any], name: str, what: str) -> str:
    value = document.get(name)
    if not isinstance(value, str):
        raise MalformedSessionDocument(f"{what} field {name!r} must be a string")
    return value


def _digest(document: Mapping[str, Any], name: str, what: str) -> str:
    value = document.get(name)
    if not is_digest(value):
        raise MalformedSessionDocument(f"{what} field {name!r} must be a sha256:<hex> digest")
    assert isinstance(value, str)
    return value


def _count(document: Mapping[str, Any], name: str, what: str) -> int:
    value = document.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedSessionDocument(f"{what} field {name!r} must be a non-negative integer")
    return value


def parse_session_document(data: bytes) -> SessionDocument:
    """Parse a browser result's artifact (raises ``MalformedSessionDocument``)."""
    what = "session document"
    document = _load(data, what, BROWSER_SESSION_FORMAT)
    anchors = document.get("anchors")
    if not isinstance(anchors, list) or not all(is_digest(a) for a in anchors):
        raise MalformedSessionDocument(f"{what} field 'anchors' must be a list of sha256 digests")
    try:
        state = ComputerUseTerminalState(str(document.get("terminal_state")))
    except ValueError:
        raise MalformedSessionDocument(
            f"{what} terminal_state {document.get('terminal_state')!r} is not one of "
            f"{', '.join(s.value for s in ComputerUseTerminalState)}"
        ) from None
    fault = document.get("fault")
    refusal = document.get("refusal")
    if fault is not None and not isinstance(fault, dict):
        raise MalformedSessionDocument(f"{what} field 'fault' must be an object")
    if refusal is not None and not isinstance(refusal, dict):
        raise MalformedSessionDocument(f"{what} field 'refusal' must be an object")
    final = document.get("final_observation")
    final_hashes = None
    if final is not None:
        if not isinstance(final, dict):
            raise MalformedSessionDocument(f"{what} field 'final_observation' must be an object")
        label = f"{what} final_observation"
        final_hashes = ObservationHashes(
            screenshot_hash=_digest(final, "screenshot_hash", label),
            dom_digest=_digest(final, "dom_digest", label),
            observation_hash=_digest(final, "observation_hash", label),
        )
    return SessionDocument(
        session_id=_str(document, "session_id", what),
        run_id=_str(document, "run_id", what),
        head_anchor=_digest(document, "head_anchor", what),
        action_count=_count(document, "action_count", what),
        genesis=_digest(document, "genesis", what),
        anchors=tuple(anchors),
        action_log=_digest(document, "action_log", what),
        terminal_state=state,
        reason_code=_str(document, "reason_code", what),
        adapter=_str(document, "adapter", what),
        worker_id=_str(document, "worker_id", what),
        fault=fault,
        refusal=refusal,
        final_observation=final_hashes,
    )


def parse_action_log(data: bytes) -> ActionLog:
    """Parse an action log blob (raises ``MalformedSessionDocument``)."""
    what = "action log"
    document = _load(data, what, ACTION_LOG_FORMAT)
    items = document.get("actions")
    if not isinstance(items, list):
        raise MalformedSessionDocument(f"{what} field 'actions' must be a list")
    actions = []
    for position, item in enumerate(items):
        label = f"{what} action #{position}"
        if not isinstance(item, dict):
            raise MalformedSessionDocument(f"{label} is not an object")
        action = item.get("action")
        lineage = item.get("lineage")
        if not isinstance(action, dict) or not all(isinstance(action.get(k), str) for k in ("kind", "target", "value_digest")):
            raise MalformedSessionDocument(f"{label} field 'action' must hold string kind, target and value_digest")
        if not isinstance(lineage, dict):
            raise MalformedSessionDocument(f"{label} field 'lineage' must be an object")
        digests = {name: _digest(item, name, label) for name in _RECORD_DIGESTS}
        try:
            envelope = LineageEnvelope.from_json(lineage)
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedSessionDocument(f"{label} lineage is malformed: {exc}") from exc
        record = ActionRecord(
            index=_count(item, "index", label),
            prev_anchor=digests["prev_anchor"],
            anchor=digests["anchor"],
            screenshot_hash=digests["screenshot_hash"],
            dom_digest=digests["dom_digest"],
            observation_hash=digests["observation_hash"],
            action=Action.from_record(action),
            lineage=envelope,
        )
        actions.append(LoggedAction(record, digests["lineage_entry_hash"]))
    return ActionLog(run_id=_str(document, "run_id", what), session_id=_str(document, "session_id", what), actions=tuple(actions))
