"""A model's computer-use tool calls run on the journalled browser, in the model's own loop.

    computer = ComputerTool(browser)                        # a SteppedBrowser (see mcp/browser.py)
    reply = computer.anthropic(block["input"])              # a tool_use block of Claude's computer tool
    messages.append(anthropic_tool_result(block["id"], reply))
    reply = computer.openai(item["action"])                 # a computer_call item of OpenAI's tool
    inputs.append(openai_call_output(item["call_id"], reply))

Each acting call is one or more anchored, signed actions exactly as an MCP tool call's
(``SteppedBrowser.act``): the pre-action observation is the screenshot the model was last
shown (or a fresh one), a point is resolved to the element under it before anchoring, a typed
text is journalled only as its keyed digest. The reply carries the screenshot of the page
after the call, which is the observation the model's next action is anchored to. A refusal
or a stop comes back as a ``ToolError`` (``reply.error``): the model reads its code and
evidence. Declare the driver's viewport as the display size in the tool definition: the
screenshot's pixels are the coordinates. ``call`` is the same call raising its ``ToolError``
(the MCP server's ``computer`` tool answers with it).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bernstein.producers.mcp.browser import SteppedBrowser
from bernstein.producers.mcp.errors import ToolError
from bernstein.producers.mcp.model_formats import CursorQuery, Parsed, parse_anthropic, parse_openai
from bernstein.producers.mcp.tools import Act
from bernstein.schemas.documents.browser import ActionRecord
from bernstein.schemas.documents.pointer import Point

Parser = Callable[[Mapping[str, Any], Point | None], Parsed]


@dataclass(frozen=True)
class ComputerReply:
    """What one call did: its anchored actions, the screenshot after it, or the error the model gets instead."""

    records: tuple[ActionRecord, ...] = ()
    screenshot: bytes | None = None
    observation_hash: str | None = None
    """The screenshot's observation: the model's next action is anchored to it."""
    snapshot: str = ""
    """That observation's accessibility snapshot (typed values redacted), for a model that reads text too."""
    cursor: Point | None = None
    error: ToolError | None = None
    text: str = field(default="")


class ComputerTool:
    """One browser session driven by a model's computer-use calls (Anthropic's or OpenAI's format)."""

    def __init__(self, browser: SteppedBrowser) -> None:
        self.browser = browser
        self.cursor: Point | None = None
        """Where the model last put the pointer (a click without a coordinate acts there)."""

    def anthropic(self, tool_input: dict[str, Any]) -> ComputerReply:
        return self._answer(parse_anthropic, tool_input)

    def openai(self, action: dict[str, Any]) -> ComputerReply:
        return self._answer(parse_openai, action)

    def call(self, parse: Parser, call: Mapping[str, Any]) -> ComputerReply:
        """One call in the format ``parse`` reads; a refusal or a stop raises its ``ToolError``."""
        return self._carry_out(parse(call, self.cursor))

    def _answer(self, parse: Parser, call: Mapping[str, Any]) -> ComputerReply:
        try:
            return self.call(parse, call)
        except ToolError as exc:
            screenshot = observed = None
            if self.browser.outcome is None and self.browser.started:
                try:
                    view = self.browser.look()  # the page as it is: nothing was performed
                    screenshot, observed = view.screenshot, view.observation_hash
                except ToolError:
                    pass
            text = f"{exc.code}: {exc.message}"
            return ComputerReply(screenshot=screenshot, observation_hash=observed, cursor=self.cursor, error=exc, text=text)

    def _carry_out(self, parsed: Parsed) -> ComputerReply:
        request = parsed.request
        if isinstance(request, CursorQuery):
            where = "not placed yet" if self.cursor is None else f"X={self.cursor[0]},Y={self.cursor[1]}"
            return ComputerReply(cursor=self.cursor, text=where)
        records: list[ActionRecord] = []
        if isinstance(request, Act):
            for step in request.steps:
                records.append(self.browser.act(step).record)
        self.cursor = parsed.cursor
        view = self.browser.look()
        lines = [f"action {r.index} {r.action.kind} {r.action.target} anchor {r.anchor}" for r in records]
        lines.append(f"{view.url} (observation {view.observation_hash}, next action {view.index})")
        return ComputerReply(
            tuple(records), view.screenshot, view.observation_hash, view.snapshot, self.cursor, text="\n".join(lines)
        )


def anthropic_tool_result(tool_use_id: str, reply: ComputerReply) -> dict[str, Any]:
    """The ``tool_result`` content block Claude expects back: the screenshot, or the error's text."""
    if reply.error is not None:
        return {"type": "tool_result", "tool_use_id": tool_use_id, "is_error": True, "content": reply.text}
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}]
    if reply.screenshot is not None:
        content.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(reply.screenshot)}})
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}


def openai_call_output(call_id: str, reply: ComputerReply) -> dict[str, Any]:
    """The ``computer_call_output`` item OpenAI's API expects back: the screenshot of the page now.

    The item has no error field: after an error, relay ``reply.text`` (the code and message) as a message of
    your own beside it; the screenshot is then the unchanged page (none once the session has ended).
    """
    output: dict[str, Any] = {"type": "computer_call_output", "call_id": call_id}
    if reply.screenshot is not None:
        output["output"] = {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{_b64(reply.screenshot)}"}
    return output


def _b64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")
