"""The MCP tools' pure part: Playwright MCP's names and arguments parsed into the journal's actions, or refused."""

from __future__ import annotations

from typing import Any

import pytest

from bernstein.producers.mcp import TOOL_NAMES, TOOLS, ToolCode, ToolError, parse_call
from bernstein.producers.mcp.errors import MCP_EXTRA, McpExtraMissing
from bernstein.producers.mcp.tools import Act, Back, ElementTarget, Fetch, Finish, Look, PlannedAction, SubmitReport
from bernstein.schemas.records import ACTION_KINDS

PLAYWRIGHT_MCP_TOOLS = {
    "browser_navigate",
    "browser_navigate_back",
    "browser_snapshot",
    "browser_click",
    "browser_type",
    "browser_press_key",
    "browser_select_option",
    "browser_hover",
    "browser_drag",
    "browser_mouse_wheel",
    "browser_wait_for",
    "browser_take_screenshot",
    "browser_close",
}


def refused(name: str, arguments: dict[str, Any] | None) -> ToolError:
    with pytest.raises(ToolError) as caught:
        parse_call(name, arguments)
    assert not caught.value.journalled
    return caught.value


def steps(name: str, **arguments: Any) -> tuple[PlannedAction, ...]:
    request = parse_call(name, arguments)
    assert isinstance(request, Act) and request.tool == name
    assert all(step.kind in ACTION_KINDS for step in request.steps)
    return request.steps


def test_the_tool_list_keeps_playwright_mcp_names_plus_finish_and_the_research_tools() -> None:
    assert len(TOOL_NAMES) == len(TOOLS)
    assert TOOL_NAMES == PLAYWRIGHT_MCP_TOOLS | {"finish", "fetch", "submit_report", "computer"}
    for spec in TOOLS:
        assert spec.schema["type"] == "object" and spec.schema["additionalProperties"] is False
        assert set(spec.schema["required"]) <= set(spec.schema["properties"])
    click = next(spec for spec in TOOLS if spec.name == "browser_click")
    assert {"element", "target", "ref", "doubleClick", "button", "modifiers"} == set(click.schema["properties"])
    wheel = next(spec for spec in TOOLS if spec.name == "browser_mouse_wheel")
    assert wheel.schema["required"] == ["deltaX", "deltaY"]


def test_double_and_right_clicks_hover_and_drag_are_journalled_kinds() -> None:
    (double,) = steps("browser_click", target="e3", doubleClick=True)
    (right,) = steps("browser_click", target="e3", button="right")
    (hover,) = steps("browser_hover", target="e4", element="Help")
    assert (double.kind, right.kind, hover.kind) == ("double_click", "right_click", "hover")
    assert hover.element == ElementTarget("e4", "Help")
    (drag,) = steps("browser_drag", startElement="Card", startRef="e5", endElement="Done", endRef="#done")
    assert (
        drag.kind == "drag" and drag.element == ElementTarget("e5", "Card") and drag.to_element == ElementTarget("#done", "Done")
    )
    assert refused("browser_drag", {"startRef": "e5"}).evidence == {"tool": "browser_drag", "argument": "endRef"}


def test_acting_calls_map_to_anchored_actions() -> None:
    assert steps("browser_navigate", url=" https://example.org/a ") == (PlannedAction("navigate", url="https://example.org/a"),)
    (click,) = steps("browser_click", element="Create account", target="e15")
    assert click.kind == "click" and click.element == ElementTarget("e15", "Create account") and click.element.is_ref
    (legacy,) = steps("browser_click", ref="f1e3")
    assert legacy.element is not None and legacy.element.is_ref and legacy.element.target == "f1e3"
    (by_selector,) = steps("browser_click", target="#submit")
    assert by_selector.element is not None and not by_selector.element.is_ref
    typed, enter = steps("browser_type", target="e7", text="s3cret-value", submit=True, slowly=True)
    assert (typed.kind, typed.value, enter.kind, enter.value) == ("type", "s3cret-value", "press", "Enter")
    assert typed.element == enter.element
    assert "s3cret-value" not in repr(typed)
    assert steps("browser_press_key", key="ArrowLeft") == (PlannedAction("press", value="ArrowLeft"),)
    assert steps("browser_select_option", target="e4", values=["blue"])[0].value == "blue"
    assert steps("browser_mouse_wheel", deltaX=0, deltaY=400.7) == (PlannedAction("scroll", value="0,400"),)
    waited, text = steps("browser_wait_for", time=1.5, text='Welcome "Ada"')
    assert waited == PlannedAction("wait", value="1500")
    assert text.raw_target == 'internal:text="Welcome \\"Ada\\""i >> nth=0'


def test_calls_that_do_not_act() -> None:
    assert parse_call("browser_snapshot", {}) == Look(screenshot=False)
    assert parse_call("browser_take_screenshot", {"type": "png", "fullPage": False}) == Look(screenshot=True)
    assert parse_call("browser_navigate_back", None) == Back()
    assert parse_call("browser_close", {}) == Finish("completed", "ok", via="browser_close")
    assert parse_call("finish", {"state": "completed"}) == Finish("completed", "ok", via="finish")
    assert parse_call("finish", {"state": "failed"}) == Finish("failed", "agent_failed", via="finish")
    assert parse_call("finish", {"state": "failed", "reason": "captcha_blocked"}).reason == "captcha_blocked"  # type: ignore[union-attr]
    assert parse_call("fetch", {"url": "https://example.org/n "}) == Fetch("https://example.org/n")


def test_a_report_becomes_drafts_and_an_uncited_claim_reaches_the_boundary() -> None:
    request = parse_call(
        "submit_report",
        {
            "query": "q",
            "claims": [
                {"claim_id": "a", "statement": "s", "citations": [{"source": "https://x/1", "quote": "q1"}]},
                {"statement": "uncited"},
            ],
        },
    )
    assert isinstance(request, SubmitReport) and request.query == "q"
    first, second = request.drafts
    assert (first.claim_id, first.spans[0].source_ref, first.spans[0].quote) == ("a", "https://x/1", "q1")
    assert (second.claim_id, second.spans) == ("", ())


@pytest.mark.parametrize(
    ("name", "arguments", "code", "argument"),
    [
        ("browser_navigate", {}, ToolCode.INVALID_ARGUMENT, "url"),
        ("browser_navigate", {"url": 5}, ToolCode.INVALID_ARGUMENT, "url"),
        ("browser_navigate", {"url": "https://a", "extra": 1}, ToolCode.INVALID_ARGUMENT, "extra"),
        ("browser_click", {}, ToolCode.INVALID_ARGUMENT, "target"),
        ("browser_click", {"target": "e1", "ref": "e2"}, ToolCode.INVALID_ARGUMENT, "ref"),
        ("browser_type", {"target": "e1"}, ToolCode.INVALID_ARGUMENT, "text"),
        ("browser_type", {"target": "e1", "text": "x", "submit": "yes"}, ToolCode.INVALID_ARGUMENT, "submit"),
        ("browser_press_key", {"key": ""}, ToolCode.INVALID_ARGUMENT, "key"),
        ("browser_select_option", {"target": "e1", "values": []}, ToolCode.INVALID_ARGUMENT, "values"),
        ("browser_mouse_wheel", {"deltaX": 0, "deltaY": True}, ToolCode.INVALID_ARGUMENT, "deltaY"),
        ("browser_mouse_wheel", {"deltaX": float("nan"), "deltaY": 1}, ToolCode.INVALID_ARGUMENT, "deltaX"),
        ("browser_wait_for", {}, ToolCode.INVALID_ARGUMENT, "time"),
        ("browser_wait_for", {"time": 61}, ToolCode.INVALID_ARGUMENT, "time"),
        ("finish", {"state": "done"}, ToolCode.INVALID_ARGUMENT, "state"),
        ("finish", {"state": "failed", "reason": "Gave up!"}, ToolCode.INVALID_ARGUMENT, "reason"),
        ("finish", {"state": "completed", "reason": "partial"}, ToolCode.INVALID_ARGUMENT, "reason"),
        ("finish", {"state": "failed", "reason": "ok"}, ToolCode.INVALID_ARGUMENT, "reason"),
        ("submit_report", {"query": "q", "claims": {}}, ToolCode.INVALID_ARGUMENT, "claims"),
        ("submit_report", {"query": "q", "claims": [{"statement": 1}]}, ToolCode.INVALID_ARGUMENT, "claims[0]"),
        (
            "submit_report",
            {"query": "q", "claims": [{"statement": "s", "citations": [{"source": "u"}]}]},
            ToolCode.INVALID_ARGUMENT,
            "claims[0].citations[0]",
        ),
    ],
)
def test_malformed_calls_are_refused_naming_the_argument(name: str, arguments: dict[str, Any], code: str, argument: str) -> None:
    error = refused(name, arguments)
    assert error.code == code and error.evidence == {"tool": name, "argument": argument}


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("browser_click", {"target": "e1", "button": "middle"}),
        ("browser_click", {"target": "e1", "button": "right", "doubleClick": True}),
        ("browser_click", {"target": "e1", "modifiers": ["Shift"]}),
        ("browser_select_option", {"target": "e1", "values": ["a", "b"]}),
        ("browser_wait_for", {"textGone": "Loading"}),
    ],
)
def test_what_the_journal_cannot_name_is_refused_not_performed_unrecorded(name: str, arguments: dict[str, Any]) -> None:
    error = refused(name, arguments)
    assert error.code == ToolCode.UNSUPPORTED_ACTION and error.evidence["tool"] == name


def test_unknown_tools_and_the_error_shape() -> None:
    error = refused("browser_evaluate", {"function": "() => 1"})
    assert error.code == ToolCode.UNKNOWN_TOOL and "browser_click" in error.evidence["tools"]
    assert error.to_json() == {"error": "UNKNOWN_TOOL", "message": error.message, "evidence": error.evidence, "journalled": False}
    assert refused("browser_navigate", [1]).code == ToolCode.INVALID_ARGUMENT  # type: ignore[arg-type]


def test_the_missing_extra_names_it() -> None:
    error = McpExtraMissing("mcp_types")
    assert error.code == "E_MCP_EXTRA_MISSING" and MCP_EXTRA in error.message and "mcp_types" in error.message
