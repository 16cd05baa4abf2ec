"""Model computer-use formats (Anthropic's computer tool, OpenAI's computer_call) parsed into the journal's actions."""

from __future__ import annotations

from typing import Any

import pytest

from bernstein.producers.mcp.errors import ToolCode, ToolError
from bernstein.producers.mcp.model_formats import (
    OPENAI_WAIT_MS,
    SCROLL_STEP,
    CursorQuery,
    Parsed,
    parse_anthropic,
    parse_openai,
    playwright_keys,
)
from bernstein.producers.mcp.tools import Act, Look, PlannedAction
from bernstein.schemas.records import ACTION_KINDS


def step(parsed: Parsed) -> PlannedAction:
    assert isinstance(parsed.request, Act)
    (only,) = parsed.request.steps
    assert only.kind in ACTION_KINDS
    return only


@pytest.mark.parametrize(
    ("tool_input", "expected", "cursor_after"),
    [
        ({"action": "left_click", "coordinate": [10, 20]}, PlannedAction("click", at=(10, 20)), (10, 20)),
        ({"action": "double_click", "coordinate": [10, 20]}, PlannedAction("double_click", at=(10, 20)), (10, 20)),
        ({"action": "right_click", "coordinate": [10, 20]}, PlannedAction("right_click", at=(10, 20)), (10, 20)),
        ({"action": "mouse_move", "coordinate": [7, 8]}, PlannedAction("hover", at=(7, 8)), (7, 8)),
        (
            {"action": "left_click_drag", "start_coordinate": [1, 2], "coordinate": [30, 40]},
            PlannedAction("drag", at=(1, 2), to=(30, 40)),
            (30, 40),
        ),
        ({"action": "type", "text": "hello"}, PlannedAction("type", focused=True, value="hello"), (5, 5)),
        ({"action": "key", "text": "ctrl+A"}, PlannedAction("press", value="Control+a"), (5, 5)),
        ({"action": "key", "text": "Return"}, PlannedAction("press", value="Enter"), (5, 5)),
        (
            {"action": "scroll", "coordinate": [50, 60], "scroll_direction": "down", "scroll_amount": 3},
            PlannedAction("scroll", at=(50, 60), value=f"0,{3 * SCROLL_STEP}"),
            (50, 60),
        ),
        (
            {"action": "scroll", "scroll_direction": "left", "scroll_amount": 2},
            PlannedAction("scroll", at=(5, 5), value=f"{-2 * SCROLL_STEP},0"),
            (5, 5),
        ),
        ({"action": "wait", "duration": 1.5}, PlannedAction("wait", value="1500"), (5, 5)),
        ({"action": "left_click"}, PlannedAction("click", at=(5, 5)), (5, 5)),
        ({"action": "left_click_drag", "coordinate": [9, 9]}, PlannedAction("drag", at=(5, 5), to=(9, 9)), (9, 9)),
    ],
)
def test_anthropic_actions(tool_input: dict[str, Any], expected: PlannedAction, cursor_after: tuple[int, int]) -> None:
    parsed = parse_anthropic(tool_input, cursor=(5, 5))
    assert step(parsed) == expected and parsed.cursor == cursor_after


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ({"type": "click", "x": 10, "y": 20, "button": "left"}, PlannedAction("click", at=(10, 20))),
        ({"type": "click", "x": 10.4, "y": 19.6}, PlannedAction("click", at=(10, 20))),
        ({"type": "click", "x": 10, "y": 20, "button": "right"}, PlannedAction("right_click", at=(10, 20))),
        ({"type": "double_click", "x": 10, "y": 20}, PlannedAction("double_click", at=(10, 20))),
        ({"type": "move", "x": 3, "y": 4}, PlannedAction("hover", at=(3, 4))),
        (
            {"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 5, "y": 5}, {"x": 30, "y": 40}]},
            PlannedAction("drag", at=(1, 2), to=(30, 40)),
        ),
        ({"type": "type", "text": "hi"}, PlannedAction("type", focused=True, value="hi")),
        ({"type": "keypress", "keys": ["CTRL", "A"]}, PlannedAction("press", value="Control+a")),
        ({"type": "keypress", "keys": ["ENTER"]}, PlannedAction("press", value="Enter")),
        ({"type": "scroll", "x": 1, "y": 2, "scroll_x": 0, "scroll_y": 250}, PlannedAction("scroll", at=(1, 2), value="0,250")),
        ({"type": "wait"}, PlannedAction("wait", value=str(OPENAI_WAIT_MS))),
    ],
)
def test_openai_actions(action: dict[str, Any], expected: PlannedAction) -> None:
    assert step(parse_openai(action)) == expected


def test_observing_calls_anchor_nothing() -> None:
    assert parse_anthropic({"action": "screenshot"}, (1, 1)) == Parsed(Look(screenshot=True), (1, 1))
    assert parse_openai({"type": "screenshot"}) == Parsed(Look(screenshot=True), None)
    assert parse_anthropic({"action": "cursor_position"}, (4, 4)) == Parsed(CursorQuery(), (4, 4))


def refused(call: dict[str, Any], *, openai: bool = False) -> ToolError:
    with pytest.raises(ToolError) as caught:
        parse_openai(call) if openai else parse_anthropic(call)
    assert not caught.value.journalled
    return caught.value


@pytest.mark.parametrize(
    "call",
    [
        {"action": "triple_click", "coordinate": [1, 1]},
        {"action": "middle_click", "coordinate": [1, 1]},
        {"action": "left_mouse_down"},
        {"action": "hold_key", "text": "shift", "duration": 1},
        {"action": "left_click", "coordinate": [1, 1], "text": "shift"},
        {"action": "scroll", "coordinate": [1, 1], "scroll_direction": "up", "scroll_amount": 1, "text": "ctrl"},
        {"action": "zoom"},
    ],
)
def test_what_the_journal_cannot_name_is_unsupported(call: dict[str, Any]) -> None:
    assert refused(call).code == ToolCode.UNSUPPORTED_ACTION


@pytest.mark.parametrize(
    "call", [{"type": "click", "x": 1, "y": 1, "button": "wheel"}, {"type": "double_click", "x": 1, "y": 1, "button": "right"}]
)
def test_openai_buttons_the_journal_cannot_name_are_unsupported(call: dict[str, Any]) -> None:
    assert refused(call, openai=True).code == ToolCode.UNSUPPORTED_ACTION


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        ({"action": "left_click"}, "coordinate"),
        ({"action": "left_click", "coordinate": [1]}, "coordinate"),
        ({"action": "left_click", "coordinate": [1, "2"]}, "coordinate"),
        ({"action": "left_click", "coordinate": [1, 200_000]}, "coordinate"),
        ({"action": "mouse_move"}, "coordinate"),
        ({"action": "type"}, "text"),
        ({"action": "scroll", "scroll_direction": "sideways", "scroll_amount": 1}, "scroll_direction"),
        ({"action": "scroll", "scroll_direction": "up", "scroll_amount": 500}, "scroll_amount"),
        ({"action": "wait", "duration": 3600}, "duration"),
        ({"action": "fly"}, "action"),
        ({}, "action"),
    ],
)
def test_malformed_anthropic_calls_name_the_argument(call: dict[str, Any], argument: str) -> None:
    error = refused(call)
    assert error.code == ToolCode.INVALID_ARGUMENT and error.evidence["argument"] == argument


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        ({"type": "click", "x": 1}, "x"),
        ({"type": "drag", "path": [{"x": 1, "y": 1}]}, "path"),
        ({"type": "keypress", "keys": []}, "keys"),
        ({"type": "scroll", "x": 1, "y": 1, "scroll_x": 0}, "scroll_y"),
        ({"type": "teleport"}, "type"),
    ],
)
def test_malformed_openai_calls_name_the_argument(call: dict[str, Any], argument: str) -> None:
    error = refused(call, openai=True)
    assert error.code == ToolCode.INVALID_ARGUMENT and error.evidence["argument"] == argument


def test_key_names_follow_playwright() -> None:
    assert playwright_keys(["alt", "Tab"], "t") == "Alt+Tab"
    assert playwright_keys(["Page_Down"], "t") == "PageDown"
    assert playwright_keys(["A"], "t") == "A"  # a single key keeps its case: it types that character
    assert playwright_keys(["super", "l"], "t") == "Meta+l"
    with pytest.raises(ToolError):
        playwright_keys(["ctrl", ""], "t")
    with pytest.raises(ToolError):
        playwright_keys(["x" * 70], "t")
