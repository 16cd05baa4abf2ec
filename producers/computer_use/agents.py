"""A scripted external agent: follows a flow file, action by action.

Flow file (JSON): a list of actions, or ``{"format": "bernstein.browser.flow/v1",
"actions": [...]}``. Each action::

    {"kind": "navigate", "target": "{url}/signup.html"}
    {"kind": "type", "target": "#email", "value": "ada@example.org"}
    {"kind": "type", "target": "#password", "value_env": "SIGNUP_PASSWORD"}

``{url}`` in a target is replaced by the base URL the run was given.
``value_env`` names an environment variable that holds the value, so a
password never sits in the flow file in plain text (it is read when the flow
is loaded, and reaches only the driver; the journal gets its keyed digest).
A flow that cannot be loaded raises ``FlowError`` before any browser starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from bernstein.producers.computer_use.boundary import AgentView, ProposedAction, validate_proposal
from bernstein.producers.computer_use.errors import FlowError, InvalidAction

FLOW_FORMAT: Final = "bernstein.browser.flow/v1"
_KEYS: Final = frozenset({"kind", "target", "value", "value_env", "note"})


def parse_flow(
    data: bytes, *, base_url: str = "", env: Mapping[str, str] | None = None, source: str = "flow"
) -> tuple[ProposedAction, ...]:
    """The actions of a flow document (raises ``FlowError``)."""
    env = os.environ if env is None else env
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FlowError(f"{source} is not JSON: {exc}") from exc
    if isinstance(document, dict):
        if document.get("format") != FLOW_FORMAT:
            raise FlowError(f"{source} format must be {FLOW_FORMAT!r}")
        document = document.get("actions")
    if not isinstance(document, list) or not document:
        raise FlowError(f"{source} must hold a non-empty list of actions")
    actions = []
    for position, item in enumerate(document):
        label = f"{source} action #{position}"
        if not isinstance(item, dict):
            raise FlowError(f"{label} is not an object")
        unknown = set(item) - _KEYS
        if unknown:
            raise FlowError(f"{label} has unknown keys {sorted(unknown)} (allowed: {sorted(_KEYS)})")
        if "value" in item and "value_env" in item:
            raise FlowError(f"{label} has both value and value_env")
        kind, target = item.get("kind"), item.get("target", "")
        if not isinstance(kind, str) or not isinstance(target, str):
            raise FlowError(f"{label} needs a string kind and target")
        value = item.get("value")
        if "value_env" in item:
            name = item["value_env"]
            if not isinstance(name, str) or not name:
                raise FlowError(f"{label} value_env must name an environment variable")
            if name not in env:
                raise FlowError(f"{label} reads its value from ${name}, which is not set")
            value = env[name]
        if value is not None and not isinstance(value, str):
            raise FlowError(f"{label} value must be a string")
        action = ProposedAction(kind=kind, target=target.replace("{url}", base_url.rstrip("/")), value=value)
        try:
            validate_proposal(action, index=position)
        except InvalidAction as exc:
            raise FlowError(f"{label}: {exc.message}") from None
        actions.append(action)
    return tuple(actions)


def load_flow(path: Path, *, base_url: str = "", env: Mapping[str, str] | None = None) -> tuple[ProposedAction, ...]:
    """Read and parse a flow file (raises ``FlowError``)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise FlowError(f"cannot read flow file {path}: {exc.strerror}") from exc
    return parse_flow(data, base_url=base_url, env=env, source=str(path))


class ScriptedAgent:
    """An ``ExternalAgent`` that proposes the flow's actions in order, then stops."""

    def __init__(self, actions: Sequence[ProposedAction]) -> None:
        self.actions = tuple(actions)
        self.views: list[AgentView] = []

    def next_action(self, view: AgentView) -> ProposedAction | None:
        self.views.append(view)
        if view.index >= len(self.actions):
            return None
        return self.actions[view.index]

    def __repr__(self) -> str:
        return f"ScriptedAgent({len(self.actions)} actions)"


def flow_summary(actions: Sequence[ProposedAction]) -> list[dict[str, Any]]:
    """The flow without its values (for printing)."""
    return [{"kind": a.kind, "target": a.target, "has_value": a.value is not None} for a in actions]
