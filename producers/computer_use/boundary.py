"""The boundary between an external computer-use agent and the journal.

An external agent decides its own actions; a driver carries them out in a
browser. This module is the contract between the two and the session that
records them, and it imports no browser library:

* ``BrowserDriver``: ``observe() -> Frame`` (screenshot bytes + accessibility
  snapshot text) and ``perform(ProposedAction)``; ``close()``.
* ``DriverFactory``: ``(profile_dir) -> BrowserDriver``. Calling it starts a
  process, so it is called only after capability gating passed.
* ``ExternalAgent``: ``next_action(AgentView) -> ProposedAction | None``
  (``None``: the agent is done).

A ``ProposedAction`` may carry a raw typed value (a password); it goes to the
driver and nowhere else. ``canonical_action`` turns it into the ``Action``
that is anchored, published and journalled: kind, target and only a keyed
digest of the value (``typed_value_digest`` keyed with the producer's redaction
key, so a short secret cannot be recovered by hashing guesses; that key never
leaves the producer host, so no auditor's trusted-keys file can test guesses either). ``Action`` is a
recorded format, so it lives in ``bernstein.schemas.documents.browser``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bernstein.producers.computer_use.errors import InvalidAction
from bernstein.schemas.canonical import typed_value_digest
from bernstein.schemas.documents.browser import Action
from bernstein.schemas.documents.pointer import MalformedPointerTarget, is_pointer_target, parse_pointer_target
from bernstein.schemas.records import ACTION_KINDS, MAX_REF_LENGTH

VALUE_KINDS = frozenset({"type", "select", "press", "scroll", "wait", "check"})
"""Kinds whose proposal may carry a value (digested before it leaves the boundary)."""
TARGET_REQUIRED = frozenset(
    {"navigate", "click", "double_click", "right_click", "hover", "drag", "type", "select", "check", "submit"}
)
"""Kinds that act on a target (a URL for navigate, a selector or a pointer target otherwise)."""


@dataclass(frozen=True, slots=True)
class ProposedAction:
    """An action as the agent decided it. ``value`` may be a secret: it is never printed."""

    kind: str
    target: str = ""
    value: str | None = None

    def __repr__(self) -> str:
        shown = "None" if self.value is None else "<redacted>"
        return f"ProposedAction(kind={self.kind!r}, target={self.target!r}, value={shown})"


@dataclass(frozen=True, slots=True)
class Frame:
    """What the driver saw before an action: screenshot bytes and the raw accessibility snapshot."""

    screenshot: bytes
    aria_snapshot: str
    url: str = ""

    def __repr__(self) -> str:
        return (
            f"Frame(screenshot=<{len(self.screenshot)} bytes>, aria_snapshot=<{len(self.aria_snapshot)} chars>, url={self.url!r})"
        )


@dataclass(frozen=True, slots=True)
class AgentView:
    """What the agent is shown before deciding action ``index``: the recorded observation."""

    index: int
    screenshot: bytes
    snapshot: str
    """The normalised, redacted snapshot: exactly the bytes whose digest is the DOM digest."""
    url: str


class BrowserDriver(Protocol):
    """Carries out actions in one browser profile; translates its own library's errors.

    Every failure raises ``ComputerUseDriverError`` carrying its terminal state
    (``driver_failure`` or ``timeout``) and a stable fault code.
    """

    def observe(self) -> Frame: ...

    def perform(self, action: ProposedAction) -> None: ...

    def close(self) -> None: ...


DriverFactory = Callable[[Path], BrowserDriver]
"""Starts a browser on the given (isolated) profile directory and returns its driver."""


class ExternalAgent(Protocol):
    """A third-party agent that decides its own actions from what it sees."""

    def next_action(self, view: AgentView) -> ProposedAction | None: ...


def validate_proposal(action: ProposedAction, *, index: int | None = None) -> None:
    """Raise ``InvalidAction`` for a proposal the scheduler would refuse (before any value is digested)."""
    if not isinstance(action, ProposedAction):
        raise InvalidAction(f"the agent returned {type(action).__name__}, not a ProposedAction", field="action", index=index)
    if action.kind not in ACTION_KINDS:
        raise InvalidAction(
            f"action kind {action.kind!r} is not one of {', '.join(sorted(ACTION_KINDS))}", field="kind", index=index
        )
    if not isinstance(action.target, str) or len(action.target) > MAX_REF_LENGTH:
        raise InvalidAction(f"action target must be a string of at most {MAX_REF_LENGTH} characters", field="target", index=index)
    if action.kind in TARGET_REQUIRED and not action.target.strip():
        raise InvalidAction(f"a {action.kind} action needs a target", field="target", index=index)
    if is_pointer_target(action.target):
        try:
            parse_pointer_target(action.target, action.kind)
        except MalformedPointerTarget as exc:
            raise InvalidAction(exc.message, field="target", index=index) from None
    elif action.kind == "drag":
        raise InvalidAction(
            "a drag action's target is a pointer target naming both ends (bernstein.schemas.documents.pointer)",
            field="target",
            index=index,
        )
    if action.value is not None:
        if not isinstance(action.value, str):
            raise InvalidAction("an action value must be a string", field="value", index=index)
        if action.kind not in VALUE_KINDS:
            raise InvalidAction(f"a {action.kind} action takes no value", field="value", index=index)
    if action.kind in ("type", "select", "press") and action.value is None:
        raise InvalidAction(f"a {action.kind} action needs a value", field="value", index=index)


def canonical_action(action: ProposedAction, *, key: bytes, index: int | None = None) -> Action:
    """Validate a proposal and digest its value with ``key`` (the producer's redaction key)."""
    validate_proposal(action, index=index)
    digest = "" if action.value is None else typed_value_digest(key, action.value)
    return Action(kind=action.kind, target=action.target, value_digest=digest)
