"""The tools the MCP server offers, and the pure translation of a tool call into what the boundary does.

No I/O and no MCP SDK here: ``TOOLS`` describes every tool (name, title,
description, JSON Schema of its arguments, whether it acts), and
``parse_call(name, arguments)`` turns one call into a typed request or
raises ``ToolError`` (``UNKNOWN_TOOL``, ``INVALID_ARGUMENT``,
``UNSUPPORTED_ACTION``) before anything is observed, stored or anchored.

The browser tools take the names and arguments of Playwright's MCP server
(``@playwright/mcp``), so a client configured for it works unchanged: an
element is named by ``target`` (a ref from the last snapshot, ``e12``, or a
unique selector) with an optional human-readable ``element``; the older
``ref`` argument is accepted as ``target``. Each acting call becomes one or
more ``PlannedAction``s of the journal's closed set of action kinds
(``bernstein.schemas.records.ACTION_KINDS``):

=========================  ==================================================
tool                       anchored action(s)
=========================  ==================================================
browser_navigate           navigate url
browser_navigate_back      navigate <the previous page's URL> (the server's history)
browser_click              click target (double_click with ``doubleClick``, right_click with button right)
browser_hover              hover target
browser_drag               drag {"element": start, "to_element": end} (a pointer target)
browser_type               type target text; with ``submit``: then press target Enter
browser_press_key          press key (the keyboard)
browser_select_option      select target value (exactly one value)
browser_mouse_wheel        scroll "deltaX,deltaY"
browser_wait_for           wait <ms> and/or wait for text (``internal:text=...``)
browser_snapshot           none: the page as the next action will be anchored to
browser_take_screenshot    none: the same observation's screenshot
browser_close, finish      none: the session's result is published
computer                   Anthropic's computer-use format (``model_formats``): actions at points
=========================  ==================================================

Options whose effect the journal could not name (a middle click, modifier
keys, several options at once, waiting for text to disappear) are refused
with ``UNSUPPORTED_ACTION`` rather than performed unrecorded.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bernstein.producers.mcp.errors import ToolCode, ToolError
from bernstein.producers.research.synthesis import ClaimDraft, SpanRef

REF_PATTERN: Final = re.compile(r"^(?:f\d+)?e\d+$")
"""A ref of Playwright's AI snapshot (``e12``; ``f1e3`` inside a frame)."""
MAX_WAIT_SECONDS: Final = 60
MAX_KEY_CHARS: Final = 64
MAX_TEXT_CHARS: Final = 4096
REASON_PATTERN: Final = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
"""A finish reason: a lower-case code (it becomes the journalled reason code), never free text."""
FINISH_STATES: Final = ("completed", "failed")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool as ``tools/list`` shows it."""

    name: str
    title: str
    description: str
    schema: Mapping[str, Any]
    read_only: bool
    browser: bool


def _schema(properties: Mapping[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required), "additionalProperties": False}


_ELEMENT: Final = {
    "type": "string",
    "description": "Human-readable element description (for the record of intent; not journalled)",
}
_TARGET: Final = {
    "type": "string",
    "description": "Exact target element reference from the page snapshot (e.g. e12), or a unique element selector",
}
_REF: Final = {"type": "string", "description": "Older name of target (Playwright MCP before its target argument)"}
_ELEMENT_ARGS: Final = {"element": _ELEMENT, "target": _TARGET, "ref": _REF}

TOOLS: Final[tuple[ToolSpec, ...]] = (
    ToolSpec(
        "browser_navigate",
        "Navigate to a URL",
        "Navigate to a URL (anchored and journalled; only the session's origins)",
        _schema({"url": {"type": "string", "description": "The URL to navigate to"}}, ["url"]),
        False,
        True,
    ),
    ToolSpec(
        "browser_navigate_back",
        "Go back",
        "Go back to the previous page in the history (journalled as a navigate to its URL)",
        _schema({}),
        False,
        True,
    ),
    ToolSpec(
        "browser_snapshot",
        "Page snapshot",
        "Capture the accessibility snapshot of the current page (typed values redacted); the next action is anchored to it",
        _schema({"target": _TARGET, "filename": {"type": "string"}, "depth": {"type": "number"}, "boxes": {"type": "boolean"}}),
        True,
        True,
    ),
    ToolSpec(
        "browser_click",
        "Click",
        "Perform click on a web page",
        _schema(
            {
                **_ELEMENT_ARGS,
                "doubleClick": {"type": "boolean", "description": "Whether to perform a double click instead of a single click"},
                "button": {"type": "string", "description": "Button to click, left (the default) or right"},
                "modifiers": {"type": "array", "items": {"type": "string"}, "description": "Not supported"},
            }
        ),
        False,
        True,
    ),
    ToolSpec(
        "browser_type",
        "Type text",
        "Type text into editable element (the text is journalled only as a keyed digest)",
        _schema(
            {
                **_ELEMENT_ARGS,
                "text": {"type": "string", "description": "Text to type into the element"},
                "submit": {"type": "boolean", "description": "Whether to submit entered text (press Enter after)"},
                "slowly": {"type": "boolean", "description": "Accepted; the text is filled at once"},
            },
            ["text"],
        ),
        False,
        True,
    ),
    ToolSpec(
        "browser_press_key",
        "Press a key",
        "Press a key on the keyboard",
        _schema(
            {
                "key": {
                    "type": "string",
                    "description": "Name of the key to press or a character to generate, such as ArrowLeft or a",
                }
            },
            ["key"],
        ),
        False,
        True,
    ),
    ToolSpec(
        "browser_select_option",
        "Select option",
        "Select an option in a dropdown",
        _schema(
            {**_ELEMENT_ARGS, "values": {"type": "array", "items": {"type": "string"}, "description": "Exactly one value"}},
            ["values"],
        ),
        False,
        True,
    ),
    ToolSpec(
        "browser_hover",
        "Hover mouse",
        "Hover over element on page",
        _schema(_ELEMENT_ARGS),
        False,
        True,
    ),
    ToolSpec(
        "browser_drag",
        "Drag mouse",
        "Perform drag and drop between two elements",
        _schema(
            {
                "startElement": {"type": "string", "description": "Human-readable source element description"},
                "startRef": {"type": "string", "description": "Exact source element reference from the page snapshot"},
                "endElement": {"type": "string", "description": "Human-readable target element description"},
                "endRef": {"type": "string", "description": "Exact target element reference from the page snapshot"},
            },
            ["startRef", "endRef"],
        ),
        False,
        True,
    ),
    ToolSpec(
        "browser_mouse_wheel",
        "Scroll mouse wheel",
        "Scroll mouse wheel",
        _schema(
            {"deltaX": {"type": "number", "description": "X delta"}, "deltaY": {"type": "number", "description": "Y delta"}},
            ["deltaX", "deltaY"],
        ),
        False,
        True,
    ),
    ToolSpec(
        "browser_wait_for",
        "Wait for",
        "Wait for text to appear or a specified time to pass",
        _schema(
            {
                "time": {"type": "number", "description": "The time to wait in seconds (at most 60)"},
                "text": {"type": "string", "description": "The text to wait for"},
                "textGone": {"type": "string", "description": "Not supported"},
            }
        ),
        False,
        True,
    ),
    ToolSpec(
        "browser_take_screenshot",
        "Take a screenshot",
        "Take a screenshot of the current viewport (the observation the next action is anchored to)",
        _schema(
            {
                **_ELEMENT_ARGS,
                "type": {"type": "string"},
                "filename": {"type": "string"},
                "fullPage": {"type": "boolean"},
                "scale": {"type": "string"},
            }
        ),
        True,
        True,
    ),
    ToolSpec(
        "computer",
        "Computer (a model's computer-use format)",
        "Act at screen coordinates in the format of Anthropic's computer tool (screenshot, left_click, double_click, "
        "right_click, mouse_move, left_click_drag, type, key, scroll, wait); each point is journalled with the element "
        "under it; the reply is the screenshot after the action, whose pixels are the coordinates",
        _schema(
            {
                "action": {"type": "string", "description": "The action (see the tool description)"},
                "coordinate": {"type": "array", "items": {"type": "integer"}, "description": "[x, y] in screenshot pixels"},
                "start_coordinate": {"type": "array", "items": {"type": "integer"}, "description": "A drag's start [x, y]"},
                "text": {"type": "string", "description": "Text to type, or a key or chord such as ctrl+s"},
                "scroll_direction": {"type": "string", "enum": ["up", "down", "left", "right"]},
                "scroll_amount": {"type": "integer", "description": "Wheel steps of 100 pixels"},
                "duration": {"type": "number", "description": "Seconds to wait (at most 60)"},
            },
            ["action"],
        ),
        False,
        True,
    ),
    ToolSpec(
        "browser_close",
        "Close browser",
        "Close the page: the browser session ends ok and its result is published",
        _schema({}),
        False,
        True,
    ),
    ToolSpec(
        "finish",
        "Finish the session",
        "End the run's browser session and research stage with a terminal state and reason; their results are published",
        _schema(
            {
                "state": {
                    "type": "string",
                    "enum": list(FINISH_STATES),
                    "description": "completed: the task is done; failed: given up",
                },
                "reason": {
                    "type": "string",
                    "description": "A lower-case code (e.g. ok, captcha_blocked); journalled as the reason code",
                },
            },
            ["state"],
        ),
        False,
        False,
    ),
    ToolSpec(
        "fetch",
        "Fetch a source",
        "Fetch a URL for research: the exact bytes are content-addressed as they land; returns the page text to quote from",
        _schema({"url": {"type": "string", "description": "http(s) URL of the source"}}, ["url"]),
        False,
        False,
    ),
    ToolSpec(
        "submit_report",
        "Submit a research report",
        "Submit claims with citations (source URL and a verbatim quote of a fetched page); a refusal returns its code and evidence",
        _schema(
            {
                "query": {"type": "string", "description": "The research question"},
                "claims": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "claim_id": {"type": "string"},
                            "statement": {"type": "string"},
                            "citations": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {"source": {"type": "string"}, "quote": {"type": "string"}},
                                    "required": ["source", "quote"],
                                },
                            },
                        },
                        "required": ["statement"],
                    },
                },
            },
            ["query", "claims"],
        ),
        False,
        False,
    ),
)
TOOL_NAMES: Final = frozenset(spec.name for spec in TOOLS)


# ---------------------------------------------------------------------------
# requests
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElementTarget:
    """An element as the agent named it: a snapshot ref (resolved to a selector before anchoring) or a selector."""

    target: str
    element: str = ""

    @property
    def is_ref(self) -> bool:
        return REF_PATTERN.fullmatch(self.target) is not None


@dataclass(frozen=True, slots=True)
class PlannedAction:
    """One action to anchor: ``kind``, its target (a URL, an element, or nothing) and its raw value."""

    kind: str
    url: str = ""
    element: ElementTarget | None = None
    raw_target: str = ""
    """A target that is neither URL nor element (a ``wait`` selector)."""
    value: str | None = field(default=None, repr=False)
    to_element: ElementTarget | None = None
    """A drag's end (its start is ``element``)."""
    at: tuple[int, int] | None = None
    """A point of the screenshot the action acts at (a model's computer-use action): resolved to its element."""
    to: tuple[int, int] | None = None
    """A drag's end point (its start is ``at``)."""
    focused: bool = False
    """Keyboard input into whatever has the focus (a model's ``type``): the focused element is recorded."""


@dataclass(frozen=True, slots=True)
class Act:
    """Acting tool call: its actions, anchored and performed one after another."""

    tool: str
    steps: tuple[PlannedAction, ...]


@dataclass(frozen=True, slots=True)
class Back:
    """``browser_navigate_back``: a navigate to the previous page, resolved from the server's history."""


@dataclass(frozen=True, slots=True)
class Look:
    """``browser_snapshot`` / ``browser_take_screenshot``: show the current observation."""

    screenshot: bool


@dataclass(frozen=True, slots=True)
class Finish:
    """``finish`` / ``browser_close``: end the session with this state and reason."""

    state: str
    reason: str
    via: str


@dataclass(frozen=True, slots=True)
class Fetch:
    url: str


@dataclass(frozen=True, slots=True)
class SubmitReport:
    query: str
    drafts: tuple[ClaimDraft, ...]


@dataclass(frozen=True, slots=True)
class Computer:
    """``computer``: one call in Anthropic's computer-use format (``model_formats.parse_anthropic`` reads it)."""

    arguments: dict[str, Any]


Request = Act | Back | Look | Finish | Fetch | SubmitReport | Computer


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------


def parse_call(name: str, arguments: Mapping[str, Any] | None) -> Request:
    """The typed request of one tool call (raises ``ToolError``; nothing has happened yet)."""
    if name not in TOOL_NAMES:
        raise ToolError(ToolCode.UNKNOWN_TOOL, f"no tool named {name!r}", evidence={"tool": name, "tools": sorted(TOOL_NAMES)})
    args = _Args(name, arguments)
    return _PARSERS[name](args)


class _Args:
    """A call's arguments, read once each; unknown names are refused at the end."""

    def __init__(self, tool: str, arguments: Mapping[str, Any] | None) -> None:
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise self._bad(tool, "", "the arguments must be an object")
        self.tool = tool
        self.values = dict(arguments)
        spec = next(s for s in TOOLS if s.name == tool)
        unknown = sorted(set(self.values) - set(spec.schema["properties"]))
        if unknown:
            raise self._bad(tool, unknown[0], f"{tool} takes no argument {unknown[0]!r}")

    @staticmethod
    def _bad(tool: str, name: str, message: str) -> ToolError:
        return ToolError(ToolCode.INVALID_ARGUMENT, message, evidence={"tool": tool, "argument": name})

    def bad(self, name: str, message: str) -> ToolError:
        return self._bad(self.tool, name, message)

    def string(self, name: str, *, required: bool = False, limit: int = MAX_TEXT_CHARS) -> str | None:
        value = self.values.get(name)
        if value is None:
            if required:
                raise self.bad(name, f"{self.tool} needs {name!r} (a string)")
            return None
        if not isinstance(value, str):
            raise self.bad(name, f"{name!r} must be a string")
        if len(value) > limit:
            raise self.bad(name, f"{name!r} is longer than {limit} characters")
        return value

    def flag(self, name: str) -> bool:
        value = self.values.get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.bad(name, f"{name!r} must be true or false")
        return value

    def number(self, name: str, *, required: bool = False) -> float | None:
        value = self.values.get(name)
        if value is None:
            if required:
                raise self.bad(name, f"{self.tool} needs {name!r} (a number)")
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.bad(name, f"{name!r} must be a finite number")
        return float(value)

    def element(self) -> ElementTarget:
        target, ref = self.string("target"), self.string("ref")
        if target is not None and ref is not None and target != ref:
            raise self.bad("ref", "give target or its older name ref, not both")
        chosen = target if target is not None else ref
        if chosen is None or not chosen.strip():
            raise self.bad("target", f"{self.tool} needs target: a ref from the last snapshot (e.g. e12) or a unique selector")
        return ElementTarget(chosen.strip(), self.string("element") or "")


def _unsupported(tool: str, what: str) -> ToolError:
    return ToolError(
        ToolCode.UNSUPPORTED_ACTION,
        f"{tool}: {what} is not an action the journal can record, so it is not performed",
        evidence={"tool": tool, "unsupported": what},
    )


def _navigate(args: _Args) -> Request:
    url = args.string("url", required=True)
    assert url is not None
    if not url.strip():
        raise args.bad("url", "url must not be empty")
    return Act(args.tool, (PlannedAction("navigate", url=url.strip()),))


def _click(args: _Args) -> Request:
    element = args.element()
    double = args.flag("doubleClick")
    button = args.string("button")
    if button not in (None, "left", "right"):
        raise _unsupported(args.tool, f"a {button} click")
    if double and button == "right":
        raise _unsupported(args.tool, "a right double click")
    modifiers = args.values.get("modifiers")
    if modifiers not in (None, []):
        raise _unsupported(args.tool, "a click with modifier keys")
    kind = "double_click" if double else "right_click" if button == "right" else "click"
    return Act(args.tool, (PlannedAction(kind, element=element),))


def _type(args: _Args) -> Request:
    element = args.element()
    text = args.string("text", required=True)
    args.flag("slowly")
    steps = [PlannedAction("type", element=element, value=text)]
    if args.flag("submit"):
        steps.append(PlannedAction("press", element=element, value="Enter"))
    return Act(args.tool, tuple(steps))


def _press(args: _Args) -> Request:
    key = args.string("key", required=True, limit=MAX_KEY_CHARS)
    if not key:
        raise args.bad("key", "key must not be empty")
    return Act(args.tool, (PlannedAction("press", value=key),))


def _select(args: _Args) -> Request:
    element = args.element()
    values = args.values.get("values")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values) or not values:
        raise args.bad("values", "values must be a non-empty array of strings")
    if len(values) != 1:
        raise _unsupported(args.tool, "selecting several options at once")
    return Act(args.tool, (PlannedAction("select", element=element, value=values[0]),))


def _hover(args: _Args) -> Request:
    return Act(args.tool, (PlannedAction("hover", element=args.element()),))


def _drag(args: _Args) -> Request:
    ends = []
    for end in ("start", "end"):
        ref = args.string(f"{end}Ref", required=True)
        assert ref is not None
        if not ref.strip():
            raise args.bad(f"{end}Ref", f"{end}Ref must name an element: a ref from the last snapshot or a unique selector")
        ends.append(ElementTarget(ref.strip(), args.string(f"{end}Element") or ""))
    return Act(args.tool, (PlannedAction("drag", element=ends[0], to_element=ends[1]),))


def _wheel(args: _Args) -> Request:
    dx, dy = args.number("deltaX", required=True), args.number("deltaY", required=True)
    assert dx is not None and dy is not None
    return Act(args.tool, (PlannedAction("scroll", value=f"{int(dx)},{int(dy)}"),))


def _wait(args: _Args) -> Request:
    if args.string("textGone") is not None:
        raise _unsupported(args.tool, "waiting for text to disappear")
    seconds, text = args.number("time"), args.string("text")
    steps = []
    if seconds is not None:
        if not 0 <= seconds <= MAX_WAIT_SECONDS:
            raise args.bad("time", f"time must be between 0 and {MAX_WAIT_SECONDS} seconds")
        steps.append(PlannedAction("wait", value=str(int(seconds * 1000))))
    if text is not None:
        if not text.strip():
            raise args.bad("text", "text must not be empty")
        steps.append(PlannedAction("wait", raw_target=text_selector(text)))
    if not steps:
        raise args.bad("time", "browser_wait_for needs time or text")
    return Act(args.tool, tuple(steps))


def text_selector(text: str) -> str:
    """Playwright's selector for the first element containing ``text`` (case-insensitive), as ``get_by_text`` builds it."""
    return f"internal:text={json.dumps(text)}i >> nth=0"


def _look(screenshot: bool) -> Callable[[_Args], Request]:
    def parse(args: _Args) -> Request:
        return Look(screenshot=screenshot)

    return parse


def _back(args: _Args) -> Request:
    return Back()


def _close(args: _Args) -> Request:
    return Finish("completed", "ok", via=args.tool)


def _finish(args: _Args) -> Request:
    state = args.string("state", required=True)
    if state not in FINISH_STATES:
        raise args.bad("state", f"state must be one of {', '.join(FINISH_STATES)}")
    reason = args.string("reason")
    if reason is None:
        reason = "ok" if state == "completed" else "agent_failed"
    if REASON_PATTERN.fullmatch(reason) is None:
        raise args.bad("reason", "reason must be a lower-case code: a letter, then up to 62 of a-z 0-9 _")
    if state == "completed" and reason != "ok":
        raise args.bad("reason", "a completed session's reason is ok")
    if state == "failed" and reason == "ok":
        raise args.bad("reason", "a failed session needs a reason other than ok")
    return Finish(state, reason, via=args.tool)


def _fetch(args: _Args) -> Request:
    url = args.string("url", required=True)
    assert url is not None
    return Fetch(url.strip())


def _submit(args: _Args) -> Request:
    query = args.string("query", required=True)
    assert query is not None
    claims = args.values.get("claims")
    if not isinstance(claims, list):
        raise args.bad("claims", "claims must be an array of {claim_id?, statement, citations}")
    drafts = []
    for position, claim in enumerate(claims):
        where = f"claims[{position}]"
        if not isinstance(claim, dict) or set(claim) - {"claim_id", "statement", "citations"}:
            raise args.bad(where, f"{where} must be an object with claim_id (optional), statement and citations")
        statement, claim_id, citations = claim.get("statement"), claim.get("claim_id", ""), claim.get("citations", [])
        if not isinstance(statement, str) or not isinstance(claim_id, str) or not isinstance(citations, list):
            raise args.bad(where, f"{where} needs a string statement, a string claim_id and an array of citations")
        spans = []
        for index, citation in enumerate(citations):
            cited = f"{where}.citations[{index}]"
            if (
                not isinstance(citation, dict)
                or set(citation) != {"source", "quote"}
                or not all(isinstance(v, str) for v in citation.values())
            ):
                raise args.bad(cited, f"{cited} must be {{source: URL, quote: text}}")
            spans.append(SpanRef(source_ref=citation["source"], quote=citation["quote"]))
        drafts.append(ClaimDraft(statement=statement, spans=tuple(spans), claim_id=claim_id))
    return SubmitReport(query=query, drafts=tuple(drafts))


_PARSERS: Final[dict[str, Callable[[_Args], Request]]] = {
    "browser_navigate": _navigate,
    "browser_navigate_back": _back,
    "browser_snapshot": _look(False),
    "browser_click": _click,
    "browser_type": _type,
    "browser_press_key": _press,
    "browser_select_option": _select,
    "browser_hover": _hover,
    "computer": lambda args: Computer(dict(args.values)),
    "browser_drag": _drag,
    "browser_mouse_wheel": _wheel,
    "browser_wait_for": _wait,
    "browser_take_screenshot": _look(True),
    "browser_close": _close,
    "finish": _finish,
    "fetch": _fetch,
    "submit_report": _submit,
}
