"""Pointer targets: where an action given in screen coordinates landed, written as the action's target.

The computer-use tools of model APIs act at a point of the screen ("click at (412, 230)"),
not on a selector. Before such an action is anchored, the boundary resolves the point to the
element under it, and the action's ``target`` records both, as the canonical JSON (RFC 8785)
of one object::

    {"at": [x, y], "element": "<selector of the element under the point>"}
        click, double_click, right_click, hover, scroll
    {"at": [x0, y0], "element": "...", "to": [x1, y1], "to_element": "..."}
        drag (from a point to a point)
    {"element": "<selector>", "to_element": "<selector>"}
        drag (from an element to an element: an MCP client's refs)
    {"element": "<selector of the focused element>", "focused": true}
        type (keyboard input goes to whatever has the focus)

A target that starts with ``{`` is a pointer target: a selector or a URL never does. The
selectors are the resilient ones Playwright's code generator writes
(``internal:role=button[name="Sign in"i]``), so the journal names what was clicked in terms
that mean something without the screenshot; ``element`` is ``""`` when nothing is under the
point. Coordinates are the screenshot's pixels, which are the viewport's CSS pixels (the
driver renders at scale 1): integers from 0 to ``MAX_COORDINATE``.

There is exactly one spelling of each target (the canonical bytes), so the same action always
anchors to the same bytes, in every SDK. Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from bernstein.schemas.canonical import canonical_json
from bernstein.schemas.errors import CanonicalizationError, MalformedInput

MAX_COORDINATE: Final = 100_000
"""The largest coordinate a pointer target may name (a screen is far smaller; a bound keeps the bytes bounded)."""
POINTER_KINDS: Final = frozenset({"click", "double_click", "right_click", "hover", "scroll", "drag", "type"})
"""Action kinds whose target may be a pointer target (``drag``'s must be)."""
_AT_KINDS: Final = frozenset({"click", "double_click", "right_click", "hover", "scroll"})
_KEYS: Final = frozenset({"at", "element", "focused", "to", "to_element"})

Point = tuple[int, int]


class MalformedPointerTarget(MalformedInput):
    """An action target that starts with ``{`` but is not a pointer target its kind allows."""

    code = "E_MALFORMED_POINTER_TARGET"


@dataclass(frozen=True, slots=True)
class PointerTarget:
    """Where a pointer or keyboard action landed: a point and the element under it, or the focused element."""

    element: str
    at: Point | None = None
    to: Point | None = None
    to_element: str | None = None
    focused: bool = False

    def fields(self) -> dict[str, Any]:
        """The JSON object of the target: only the fields it has (no nulls, ``focused`` only when true)."""
        document: dict[str, Any] = {"element": self.element}
        if self.at is not None:
            document["at"] = list(self.at)
        if self.to is not None:
            document["to"] = list(self.to)
        if self.to_element is not None:
            document["to_element"] = self.to_element
        if self.focused:
            document["focused"] = True
        return document

    def text(self) -> str:
        """The target as the action records it: canonical JSON, keys in RFC 8785 order."""
        return canonical_json(self.fields()).decode("utf-8")


def is_pointer_target(target: str) -> bool:
    """True when ``target`` is written as a pointer target (it starts with ``{``)."""
    return target.startswith("{")


def parse_pointer_target(target: str, kind: str) -> PointerTarget:
    """The pointer target ``target`` of an action of ``kind``; ``MalformedPointerTarget`` says what is wrong.

    The text must be the canonical spelling, and its shape one that ``kind`` takes (see the module docstring).
    """
    if kind not in POINTER_KINDS:
        raise MalformedPointerTarget(f"a {kind} action takes no pointer target")
    try:
        document = json.loads(target)
    except (ValueError, RecursionError):
        raise MalformedPointerTarget("a target that starts with '{' must be a JSON object (a pointer target)") from None
    if not isinstance(document, dict):
        raise MalformedPointerTarget("a pointer target must be a JSON object")
    unknown = sorted(set(document) - _KEYS)
    if unknown:
        raise MalformedPointerTarget(f"a pointer target has no field {unknown[0]!r} (only {', '.join(sorted(_KEYS))})")
    element = document.get("element")
    if not isinstance(element, str):
        raise MalformedPointerTarget("a pointer target names its element: 'element' must be a string")
    to_element = document.get("to_element")
    if to_element is not None and not isinstance(to_element, str):
        raise MalformedPointerTarget("'to_element' must be a string")
    focused = document.get("focused", False)
    if focused is not True and "focused" in document:
        raise MalformedPointerTarget("'focused' is written only as true")
    parsed = PointerTarget(
        element=element,
        at=_point(document, "at"),
        to=_point(document, "to"),
        to_element=to_element,
        focused=focused is True,
    )
    _require_shape(parsed, kind)
    try:
        canonical = parsed.text()
    except CanonicalizationError:  # a lone surrogate escape: no canonical spelling exists
        raise MalformedPointerTarget("a pointer target's strings must be valid Unicode") from None
    if canonical != target:
        raise MalformedPointerTarget("a pointer target must be written in canonical JSON (RFC 8785: sorted keys, no spaces)")
    return parsed


def _point(document: dict[str, Any], name: str) -> Point | None:
    value = document.get(name)
    if value is None:
        if name in document:
            raise MalformedPointerTarget(f"{name!r} must be a point [x, y], not null")
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COORDINATE for v in value)
    ):
        raise MalformedPointerTarget(f"{name!r} must be a point [x, y] of integers from 0 to {MAX_COORDINATE}")
    return value[0], value[1]


def _require_shape(target: PointerTarget, kind: str) -> None:
    if kind == "type":
        if not target.focused or target.at is not None or target.to is not None or target.to_element is not None:
            raise MalformedPointerTarget('a type action\'s pointer target is {"element": ..., "focused": true}')
        return
    if target.focused:
        raise MalformedPointerTarget(f"a {kind} action does not act on the focused element")
    if kind == "drag":
        if target.to_element is None or (target.at is None) != (target.to is None):
            raise MalformedPointerTarget(
                "a drag's pointer target names both ends: 'element' and 'to_element', with 'at' and 'to' or neither"
            )
        return
    if kind in _AT_KINDS and (target.at is None or target.to is not None or target.to_element is not None):
        raise MalformedPointerTarget(f'a {kind} action\'s pointer target is {{"at": [x, y], "element": ...}}')
