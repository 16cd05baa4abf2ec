"""The browser (computer-use) documents: action, anchors, lineage entry, action log and session document.

One home for every format a browser session records, used by the producer
that records a session (``bernstein.producers.computer_use``), the scheduler that
checks a browser result against its session, and the verifier that replays
it (``bernstein.verifier.browser_replay``, ``bernstein.verifier.checks.browser``).

Per-action hashes (the primitives live in ``bernstein.schemas.canonical``, the one
module that owns hashed bytes; this module only composes them)::

    screenshot_hash  = sha256(pre-action screenshot bytes)
    dom_digest       = sha256(normalised snapshot bytes)
    observation_hash = sha256(screenshot bytes || dom_digest)
    anchor           = sha256(canonical({prev_anchor, observation_hash, action}))

Action (what is anchored, signed, published and journalled)::

    {"kind", "target", "value_digest"}      value_digest: hmac-sha256:<hex> of a typed value, or ""

Lineage entry (canonical JSON; the scheduler requires the first seven fields
to bind the action it arrives with)::

    {"run_id", "session_id", "action_index",
     "content_hash": <anchor>, "parent_hashes": [<prev_anchor>],
     "worker_id", "key_id": <Ed25519 key id>,
     "format": "bernstein.lineage-entry/v1", "artefact_kind": "computer_use.action",
     "hmac_key_id": <audit key id>, "observation_hash", "screenshot_hash", "dom_digest",
     "action": {"kind", "target", "value_digest"}}

No wall clock is in the entry, so the same action always seals to the same
bytes. The HMAC and the signature both cover
``PAE("bernstein/lineage-entry/v1", entry)``
(``bernstein.schemas.canonical.lineage_signing_input``); sealing is the producer's
(``bernstein.producers.computer_use.lineage``), checking the verifier's.

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

The session's four terminal states map onto the activity's closed set in one
place (``TERMINAL_STATE_MAP``): ok -> completed, driver_failure -> failed,
timeout -> timed_out, refused -> refused.

The action log keeps the artifact small however long the session is (the
artifact travels inline, bounded at 512 KiB), and because every record holds
its signed lineage entry, the verifier can replay a session from the artifact
and the CAS alone. Parsers check shape only and raise
``MalformedSessionDocument``; consistency is the replay's job.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from bernstein.schemas.canonical import (
    action_anchor,
    canonical_json,
    computer_use_genesis,
    is_digest,
    observation_hash,
    sha256_digest,
)
from bernstein.schemas.errors import MalformedInput
from bernstein.schemas.records import BROWSER_SESSION_FORMAT, TerminalState

ACTION_LOG_FORMAT: Final = "bernstein.browser.action-log/v1"
_RECORD_DIGESTS: Final = ("prev_anchor", "anchor", "screenshot_hash", "dom_digest", "observation_hash", "lineage_entry_hash")


class MalformedSessionDocument(MalformedInput):
    """Bytes that are not a well-formed browser session document or action log."""

    code = "E_BROWSER_DOCUMENT"


# ---------------------------------------------------------------------------
# terminal states
# ---------------------------------------------------------------------------


class ComputerUseTerminalState(StrEnum):
    """How the computer-use boundary saw a session end."""

    OK = "ok"
    DRIVER_FAILURE = "driver_failure"
    TIMEOUT = "timeout"
    REFUSED = "refused"


TERMINAL_STATE_MAP: Final[Mapping[ComputerUseTerminalState, TerminalState]] = MappingProxyType(
    {
        ComputerUseTerminalState.OK: TerminalState.COMPLETED,
        ComputerUseTerminalState.DRIVER_FAILURE: TerminalState.FAILED,
        ComputerUseTerminalState.TIMEOUT: TerminalState.TIMED_OUT,
        ComputerUseTerminalState.REFUSED: TerminalState.REFUSED,
    }
)
"""The one mapping from the boundary's states onto the activity's (total and injective)."""


def activity_terminal_state(state: ComputerUseTerminalState | str) -> TerminalState:
    """Map a computer-use state onto the activity ``TerminalState`` (raises ValueError for unknown states)."""
    return TERMINAL_STATE_MAP[ComputerUseTerminalState(state)]


# ---------------------------------------------------------------------------
# the action and its anchor
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Action:
    """The canonical action: what is anchored, signed, published and journalled."""

    kind: str
    target: str
    value_digest: str
    """``hmac-sha256:<hex>`` of the typed value, or "" when the action has none."""

    def to_record(self) -> dict[str, str]:
        return {"kind": self.kind, "target": self.target, "value_digest": self.value_digest}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Action:
        return cls(kind=str(record["kind"]), target=str(record["target"]), value_digest=str(record["value_digest"]))


@dataclass(frozen=True, slots=True)
class ObservationHashes:
    """The three hashes of one pre-action observation."""

    screenshot_hash: str
    dom_digest: str
    observation_hash: str


def observation_hashes(screenshot: bytes, snapshot: bytes) -> ObservationHashes:
    """Hash a pre-action observation (screenshot bytes, normalised snapshot bytes)."""
    dom_digest = sha256_digest(snapshot)
    return ObservationHashes(
        screenshot_hash=sha256_digest(screenshot),
        dom_digest=dom_digest,
        observation_hash=observation_hash(screenshot, dom_digest),
    )


def anchor(prev_anchor: str, observation: str, action: Action) -> str:
    """One link of the action chain."""
    return action_anchor(prev_anchor, observation, action.to_record())


def genesis(run_id: str, session_id: str) -> str:
    """The ``prev_anchor`` of a session's first action."""
    return computer_use_genesis(run_id, session_id)


# ---------------------------------------------------------------------------
# the signed lineage entry
# ---------------------------------------------------------------------------


LINEAGE_FORMAT: Final = "bernstein.lineage-entry/v1"
ARTEFACT_KIND: Final = "computer_use.action"


@dataclass(frozen=True, slots=True)
class LineageEnvelope:
    """The stored entry bytes with their HMAC envelope and signature."""

    entry: bytes
    hmac: str
    key_id: str
    signature: bytes

    @property
    def entry_hash(self) -> str:
        return sha256_digest(self.entry)

    def to_record(self) -> dict[str, Any]:
        """The Avro ``LineageEnvelope`` of a ComputerUseAction."""
        return {"entry": self.entry, "hmac": self.hmac, "key_id": self.key_id, "signature": self.signature}

    def to_json(self) -> dict[str, str]:
        """JSON form (action log): the entry as its exact text, the signature as base64."""
        return {
            "entry": self.entry.decode("utf-8"),
            "hmac": self.hmac,
            "key_id": self.key_id,
            "signature": base64.b64encode(self.signature).decode("ascii"),
        }

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> LineageEnvelope:
        """Parse the JSON form (raises ValueError / KeyError / TypeError on a malformed item)."""
        try:
            signature = base64.b64decode(str(item["signature"]), validate=True)
        except binascii.Error as exc:
            raise ValueError(f"lineage signature is not base64: {exc}") from exc
        return cls(
            entry=str(item["entry"]).encode("utf-8"), hmac=str(item["hmac"]), key_id=str(item["key_id"]), signature=signature
        )


@dataclass(frozen=True, slots=True)
class LineageBinding:
    """What an entry must bind: the action it is the lineage of."""

    run_id: str
    session_id: str
    action_index: int
    anchor: str
    prev_anchor: str
    worker_id: str

    def required(self, key_id: str) -> dict[str, Any]:
        """The fields the scheduler checks, in its order (``bernstein.consumers.core.validate._lineage_refusal``)."""
        return {
            "run_id": self.run_id,
            "session_id": self.session_id,
            "action_index": self.action_index,
            "content_hash": self.anchor,
            "parent_hashes": [self.prev_anchor],
            "worker_id": self.worker_id,
            "key_id": key_id,
        }


def lineage_entry(
    binding: LineageBinding,
    *,
    key_id: str,
    hmac_key_id: str,
    observation_hash: str,
    screenshot_hash: str,
    dom_digest: str,
    action: Action,
) -> dict[str, Any]:
    """The lineage entry document of one action (see the module docstring)."""
    return {
        **binding.required(key_id),
        "format": LINEAGE_FORMAT,
        "artefact_kind": ARTEFACT_KIND,
        "hmac_key_id": hmac_key_id,
        "observation_hash": observation_hash,
        "screenshot_hash": screenshot_hash,
        "dom_digest": dom_digest,
        "action": action.to_record(),
    }


# ---------------------------------------------------------------------------
# action records, action log, session document
# ---------------------------------------------------------------------------


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
