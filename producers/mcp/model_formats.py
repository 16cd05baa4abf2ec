"""The computer-use action formats of model APIs, translated into the journal's anchored actions.

Pure: a model's tool call in, a typed request out (or a ``ToolError``), before anything is
observed, stored or anchored. ``ComputerTool`` (``computer.py``) carries the requests out on
the journalled browser.

Anthropic's ``computer`` tool (``input`` of a ``tool_use`` block; versions 20241022 and
20250124) and OpenAI's computer-use tool (``action`` of a ``computer_call`` item):

=====================================  ===========================  ==================================
Anthropic ``action``                   OpenAI ``type``              anchored action
=====================================  ===========================  ==================================
screenshot                             screenshot                   none: the observation is shown
cursor_position                        -                            none: the pointer's last point
left_click [coordinate]                click (button left)          click at the point
double_click [coordinate]              double_click                 double_click at the point
right_click [coordinate]               click (button right)         right_click at the point
mouse_move coordinate                  move                         hover at the point
left_click_drag start_coordinate,      drag path (first to last     drag from the point to the point
coordinate                             point)
type text                              type text                    type into the focused element
key text (xdotool: ``ctrl+s``)         keypress keys                press (Playwright's key names)
scroll [coordinate], direction,        scroll x, y, scroll_x,       scroll at the point, "dx,dy" pixels
amount (x ``SCROLL_STEP`` pixels)      scroll_y
wait duration (seconds)                wait (``OPENAI_WAIT_MS``)    wait
=====================================  ===========================  ==================================

Every point is resolved to the element under it before the action is anchored
(``bernstein.schemas.documents.pointer``). What the journal could not name is refused with
``UNSUPPORTED_ACTION`` rather than performed unrecorded: a middle, back or forward click, a
triple click, a click or scroll with modifier keys held, holding a key, pressing or releasing
a button alone, zooming. A click without a coordinate acts at the pointer's last point (the
model moved it there); with no point yet it is an ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from bernstein.producers.mcp.errors import ToolCode, ToolError
from bernstein.producers.mcp.tools import MAX_KEY_CHARS, MAX_TEXT_CHARS, MAX_WAIT_SECONDS, Act, Look, PlannedAction
from bernstein.schemas.documents.pointer import MAX_COORDINATE, Point

SCROLL_STEP: Final = 100
"""Pixels of one Anthropic ``scroll_amount`` step (a wheel notch)."""
OPENAI_WAIT_MS: Final = 2000
"""An OpenAI ``wait`` has no duration; this is the wait of OpenAI's own samples."""

# xdotool key names (Anthropic) and OpenAI's key names, lower-cased, to Playwright's
_KEY_NAMES: Final = {
    "return": "Enter",
    "enter": "Enter",
    "kp_enter": "Enter",
    "escape": "Escape",
    "esc": "Escape",
    "backspace": "Backspace",
    "tab": "Tab",
    "delete": "Delete",
    "del": "Delete",
    "insert": "Insert",
    "space": "Space",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "left": "ArrowLeft",
    "right": "ArrowRight",
    "arrowup": "ArrowUp",
    "arrowdown": "ArrowDown",
    "arrowleft": "ArrowLeft",
    "arrowright": "ArrowRight",
    "page_up": "PageUp",
    "page_down": "PageDown",
    "pageup": "PageUp",
    "pagedown": "PageDown",
    "prior": "PageUp",
    "next": "PageDown",
    "home": "Home",
    "end": "End",
    "capslock": "CapsLock",
    "caps_lock": "CapsLock",
    "ctrl": "Control",
    "control": "Control",
    "control_l": "Control",
    "control_r": "Control",
    "alt": "Alt",
    "alt_l": "Alt",
    "alt_r": "Alt",
    "option": "Alt",
    "shift": "Shift",
    "shift_l": "Shift",
    "shift_r": "Shift",
    "super": "Meta",
    "super_l": "Meta",
    "meta": "Meta",
    "cmd": "Meta",
    "command": "Meta",
    "win": "Meta",
    **{f"f{n}": f"F{n}" for n in range(1, 13)},
}
_MODIFIERS: Final = frozenset({"Control", "Alt", "Shift", "Meta"})


@dataclass(frozen=True, slots=True)
class CursorQuery:
    """Anthropic's ``cursor_position``: where the pointer is (nothing is performed or journalled)."""


ModelRequest = Act | Look | CursorQuery


@dataclass(frozen=True, slots=True)
class Parsed:
    """A model's call as a request, and where the pointer is after it."""

    request: ModelRequest
    cursor: Point | None


def parse_anthropic(tool_input: Mapping[str, Any], cursor: Point | None = None) -> Parsed:
    """The request of one Anthropic ``computer`` tool call (raises ``ToolError``; nothing has happened yet)."""
    args = _Input("computer", tool_input)
    action = args.string("action", required=True)
    tool = f"computer.{action}"
    if action == "screenshot":
        return Parsed(Look(screenshot=True), cursor)
    if action == "cursor_position":
        return Parsed(CursorQuery(), cursor)
    if action in ("left_click", "double_click", "right_click"):
        if args.string("text"):
            raise _unsupported(tool, "a click with modifier keys held")
        point = args.point("coordinate") or _need_cursor(tool, cursor)
        kind = {"left_click": "click", "double_click": "double_click", "right_click": "right_click"}[action]
        return Parsed(Act(tool, (PlannedAction(kind, at=point),)), point)
    if action == "mouse_move":
        point = args.required_point("coordinate")
        return Parsed(Act(tool, (PlannedAction("hover", at=point),)), point)
    if action == "left_click_drag":
        end = args.required_point("coordinate")
        start = args.point("start_coordinate") or _need_cursor(tool, cursor)
        return Parsed(Act(tool, (PlannedAction("drag", at=start, to=end),)), end)
    if action == "type":
        text = args.string("text", required=True, limit=MAX_TEXT_CHARS)
        return Parsed(Act(tool, (PlannedAction("type", focused=True, value=text),)), cursor)
    if action == "key":
        keys = args.string("text", required=True, limit=MAX_KEY_CHARS) or ""
        return Parsed(Act(tool, (PlannedAction("press", value=playwright_keys(keys.split("+"), tool)),)), cursor)
    if action == "scroll":
        if args.string("text"):
            raise _unsupported(tool, "a scroll with modifier keys held")
        where = args.point("coordinate") or cursor
        direction = args.string("scroll_direction", required=True)
        amount = args.number("scroll_amount", required=True)
        if direction not in ("up", "down", "left", "right"):
            raise args.bad("scroll_direction", "scroll_direction must be up, down, left or right")
        if not 0 <= amount <= 100:
            raise args.bad("scroll_amount", "scroll_amount must be between 0 and 100")
        pixels = int(amount) * SCROLL_STEP
        dx, dy = {"up": (0, -pixels), "down": (0, pixels), "left": (-pixels, 0), "right": (pixels, 0)}[direction]
        return Parsed(Act(tool, (PlannedAction("scroll", at=where, value=f"{dx},{dy}"),)), where)
    if action == "wait":
        seconds = args.number("duration", required=True)
        if not 0 <= seconds <= MAX_WAIT_SECONDS:
            raise args.bad("duration", f"duration must be between 0 and {MAX_WAIT_SECONDS} seconds")
        return Parsed(Act(tool, (PlannedAction("wait", value=str(int(seconds * 1000))),)), cursor)
    if action in ("middle_click", "triple_click", "left_mouse_down", "left_mouse_up", "hold_key", "zoom"):
        raise _unsupported(tool, f"the {action} action")
    raise args.bad("action", f"no computer action {action!r}")


def parse_openai(action: Mapping[str, Any], cursor: Point | None = None) -> Parsed:
    """The request of one OpenAI ``computer_call`` action (raises ``ToolError``; nothing has happened yet)."""
    args = _Input("computer_call", action)
    kind = args.string("type", required=True)
    tool = f"computer_call.{kind}"
    if kind == "screenshot":
        return Parsed(Look(screenshot=True), cursor)
    if kind in ("click", "double_click"):
        point = args.xy()
        button = args.string("button") or "left"
        if button not in ("left", "right") or (kind == "double_click" and button != "left"):
            raise _unsupported(tool, f"a {button} {'double ' if kind == 'double_click' else ''}click")
        journalled = "double_click" if kind == "double_click" else "right_click" if button == "right" else "click"
        return Parsed(Act(tool, (PlannedAction(journalled, at=point),)), point)
    if kind == "move":
        point = args.xy()
        return Parsed(Act(tool, (PlannedAction("hover", at=point),)), point)
    if kind == "drag":
        path = args.values.get("path")
        if not isinstance(path, list) or len(path) < 2:
            raise args.bad("path", "path must be at least two points {x, y}")
        points = [_Input(tool, p if isinstance(p, Mapping) else {}).xy() for p in path]
        return Parsed(Act(tool, (PlannedAction("drag", at=points[0], to=points[-1]),)), points[-1])
    if kind == "type":
        text = args.string("text", required=True, limit=MAX_TEXT_CHARS)
        return Parsed(Act(tool, (PlannedAction("type", focused=True, value=text),)), cursor)
    if kind == "keypress":
        keys = args.values.get("keys")
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
            raise args.bad("keys", "keys must be a non-empty array of key names")
        return Parsed(Act(tool, (PlannedAction("press", value=playwright_keys(keys, tool)),)), cursor)
    if kind == "scroll":
        point = args.xy()
        dx, dy = args.number("scroll_x", required=True), args.number("scroll_y", required=True)
        return Parsed(Act(tool, (PlannedAction("scroll", at=point, value=f"{int(dx)},{int(dy)}"),)), point)
    if kind == "wait":
        return Parsed(Act(tool, (PlannedAction("wait", value=str(OPENAI_WAIT_MS)),)), cursor)
    raise args.bad("type", f"no computer action {kind!r}")


def playwright_keys(keys: list[str], tool: str) -> str:
    """A key or chord in Playwright's names (``Control+a``); raises ``ToolError`` for an empty or oversized one."""
    names = [_KEY_NAMES.get(key.strip().lower(), key.strip()) for key in keys]
    if not names or not all(names):
        raise ToolError(ToolCode.INVALID_ARGUMENT, "a key name is empty", evidence={"tool": tool, "argument": "keys"})
    if any(name in _MODIFIERS for name in names[:-1]) and len(names[-1]) == 1:
        names[-1] = names[-1].lower()  # ctrl+A is the chord ctrl+a, as xdotool and OpenAI mean it, not ctrl+shift+a
    chord = "+".join(names)
    if len(chord) > MAX_KEY_CHARS:
        raise ToolError(
            ToolCode.INVALID_ARGUMENT, f"the keys are longer than {MAX_KEY_CHARS} characters", evidence={"tool": tool}
        )
    return chord


def _need_cursor(tool: str, cursor: Point | None) -> Point:
    if cursor is None:
        raise ToolError(
            ToolCode.INVALID_ARGUMENT,
            f"{tool} has no coordinate and the pointer has not been placed yet: give a coordinate",
            evidence={"tool": tool, "argument": "coordinate"},
        )
    return cursor


def _unsupported(tool: str, what: str) -> ToolError:
    return ToolError(
        ToolCode.UNSUPPORTED_ACTION,
        f"{tool}: {what} is not an action the journal can record, so it is not performed",
        evidence={"tool": tool, "unsupported": what},
    )


class _Input:
    """A call's arguments, with typed reads that raise ``INVALID_ARGUMENT`` naming the argument."""

    def __init__(self, tool: str, values: Mapping[str, Any]) -> None:
        if not isinstance(values, Mapping):
            raise ToolError(ToolCode.INVALID_ARGUMENT, f"{tool}: the input must be an object", evidence={"tool": tool})
        self.tool = tool
        self.values = values

    def bad(self, name: str, message: str) -> ToolError:
        return ToolError(ToolCode.INVALID_ARGUMENT, f"{self.tool}: {message}", evidence={"tool": self.tool, "argument": name})

    def string(self, name: str, *, required: bool = False, limit: int = MAX_TEXT_CHARS) -> str | None:
        value = self.values.get(name)
        if value is None:
            if required:
                raise self.bad(name, f"{name!r} is required")
            return None
        if not isinstance(value, str) or len(value) > limit:
            raise self.bad(name, f"{name!r} must be a string of at most {limit} characters")
        return value

    def number(self, name: str, *, required: bool = False) -> float:
        value = self.values.get(name)
        if value is None and not required:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.bad(name, f"{name!r} must be a finite number")
        return float(value)

    def required_point(self, name: str) -> Point:
        point = self.point(name)
        if point is None:
            raise self.bad(name, f"{name!r} is required: a point [x, y]")
        return point

    def point(self, name: str) -> Point | None:
        value = self.values.get(name)
        if value is None:
            return None
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise self.bad(name, f"{name!r} must be a point [x, y]")
        return _coordinates(self, name, value[0], value[1])

    def xy(self) -> Point:
        return _coordinates(self, "x", self.values.get("x"), self.values.get("y"))


def _coordinates(args: _Input, name: str, x: Any, y: Any) -> Point:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (x, y)):
        raise args.bad(name, "a point's x and y must be numbers")
    point = (round(x), round(y))
    if not all(0 <= v <= MAX_COORDINATE for v in point):
        raise args.bad(name, f"a point's x and y must be between 0 and {MAX_COORDINATE}")
    return point
