"""One MCP run: every tool call dispatched to the browser session or the research stage, replies rendered.

``McpRun.call(name, arguments) -> ToolReply`` is the whole server behind
the protocol, synchronous and free of the MCP SDK (``server.py`` wires it to
the transports), so it is tested with fakes. ``McpRun.end`` publishes what
is still open, however the run ended: ``finish`` (the agent's own terminal
state), ``browser_close``, or the client disconnecting. A reply is the text
an agent reads (Playwright MCP's shape: what was done, then the page state
with its snapshot), a JSON ``structured`` twin for programs, and, for a
screenshot, the PNG. A ``ToolError`` becomes an error reply (``isError``)
carrying its code and evidence.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Final

from bernstein.producers.computer_use.session import SessionOutcome
from bernstein.producers.mcp.browser import PageView, SteppedBrowser
from bernstein.producers.mcp.computer import ComputerTool
from bernstein.producers.mcp.errors import ToolCode, ToolError
from bernstein.producers.mcp.model_formats import parse_anthropic
from bernstein.producers.mcp.research import MAX_TEXT_SHOWN, Published, ResearchDesk, page_summary
from bernstein.producers.mcp.tools import Act, Back, Computer, Fetch, Finish, Look, SubmitReport, parse_call
from bernstein.schemas.documents.browser import ActionRecord
from bernstein.schemas.errors import BernsteinError

LOG: Final = logging.getLogger("bernstein.mcp")


@dataclass(frozen=True)
class ToolReply:
    """What a tool call returns: text, its structured twin, an optional PNG, and whether it is an error."""

    text: str
    structured: dict[str, Any] = field(default_factory=dict)
    image: bytes | None = None
    is_error: bool = False


class McpRun:
    """The tools of one run: a browser session and/or a research stage (either may be absent)."""

    def __init__(self, *, browser: SteppedBrowser | None, research: ResearchDesk | None) -> None:
        self.browser = browser
        self.research = research
        self.computer: ComputerTool | None = None
        """The ``computer`` tool's pointer state, made on its first call."""
        self.ended = False

    # -- one call --------------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any] | None) -> ToolReply:
        """Run one tool call; never raises for the agent's mistakes or the boundary's refusals."""
        try:
            reply = self._dispatch(name, arguments)
        except ToolError as exc:
            LOG.info("tool %s refused: %s", name, exc.code)
            return error_reply(exc)
        except BernsteinError as exc:  # a service failure (Kafka, S3): the call did not complete
            LOG.warning("tool %s failed: %s: %s", name, exc.code, exc.message)
            return error_reply(ToolError(exc.code, exc.message))
        return reply

    def _dispatch(self, name: str, arguments: dict[str, Any] | None) -> ToolReply:
        request = parse_call(name, arguments)
        if isinstance(request, Finish):
            return self._finish(request)
        if isinstance(request, Fetch):
            return self._fetch(request)
        if isinstance(request, SubmitReport):
            return self._submit(request)
        browser = self._browser()
        if isinstance(request, Computer):
            return self._computer(browser, request)
        if isinstance(request, Look):
            return page_reply(browser.look(), [], screenshot=request.screenshot)
        if isinstance(request, Back):
            step = browser.back()
            done = browser.act(step)
            browser.went_back()
            return self._after(browser, [action_json(done.record)], name)
        assert isinstance(request, Act)
        records = []
        for step in request.steps:
            records.append(action_json(browser.act(step).record))
        return self._after(browser, records, name)

    def _computer(self, browser: SteppedBrowser, request: Computer) -> ToolReply:
        if self.computer is None:
            self.computer = ComputerTool(browser)
        reply = self.computer.call(parse_anthropic, request.arguments)
        records = [action_json(record) for record in reply.records]
        structured: dict[str, Any] = {
            "actions": records,
            "observation_hash": reply.observation_hash,
            "cursor": list(reply.cursor) if reply.cursor else None,
        }
        return ToolReply(reply.text, structured, image=reply.screenshot)

    def _browser(self) -> SteppedBrowser:
        if self.browser is None:
            raise ToolError(
                ToolCode.BROWSER_DISABLED, "this server was started without a browser session (bernstein mcp serve --no-browser)"
            )
        return self.browser

    def _after(self, browser: SteppedBrowser, records: list[dict[str, Any]], tool: str) -> ToolReply:
        lines = [f"### Ran {tool}: {len(records)} anchored action(s)"]
        for record in records:
            action = record["action"]
            digest = f" value {action['value_digest']}" if action.get("value_digest") else ""
            lines.append(f"- action {record['index']} {action['kind']} {action['target']}{digest} anchor {record['anchor']}")
        return page_reply(browser.look(), lines, actions=records)

    def _finish(self, request: Finish) -> ToolReply:
        outcome = self.browser.finish(request.state, request.reason) if self.browser is not None else None
        if request.via == "browser_close":
            if outcome is None:
                return ToolReply("No browser session was started; nothing to close.", {"browser": None})
            return ToolReply(*_ended_browser(outcome))
        research = self.research.end() if self.research is not None else None
        self.ended = True
        text, structured = _ended_browser(outcome) if outcome is not None else ("No browser session was started.", {})
        lines = [text, _ended_research(research)]
        return ToolReply("\n".join(lines), {"browser": structured.get("browser"), "research": _research_json(research)})

    def _fetch(self, request: Fetch) -> ToolReply:
        desk = self._research()
        page = desk.fetch(request.url)
        text = page.text()
        shown = text[:MAX_TEXT_SHOWN]
        summary = {**page_summary(page), "text_chars": len(text), "truncated": len(shown) < len(text)}
        header = f"### Fetched {page.source_ref} ({page.size} bytes, pinned as {page.content_hash})"
        body = "Quote verbatim from this text (whitespace-normalised) and cite the source URL:\n\n" + shown
        return ToolReply(f"{header}\n{body}", {**summary, "text": shown})

    def _submit(self, request: SubmitReport) -> ToolReply:
        published = self._research().submit(request.query, request.drafts)
        structured = _research_json(published) or {}
        return ToolReply(
            f"### Report accepted: {published.claims} claim(s), artifact {published.result.artifact_hash}, "
            f"published at {published.landed}",
            structured,
        )

    def _research(self) -> ResearchDesk:
        if self.research is None:
            raise ToolError(ToolCode.RESEARCH_ENDED, "this server was started without a research stage")
        return self.research

    # -- the end -----------------------------------------------------------------------

    def end(self) -> tuple[SessionOutcome | None, Published | None]:
        """Publish what is still open: the client left without ``finish``. Idempotent."""
        outcome = None
        if self.browser is not None:
            outcome = self.browser.outcome or self.browser.disconnect()
        research = self.research.end() if self.research is not None else None
        self.ended = True
        return outcome, research


def action_json(record: ActionRecord) -> dict[str, Any]:
    """An anchored action as a reply names it (its lineage entry stays in the journal)."""
    return {
        "index": record.index,
        "prev_anchor": record.prev_anchor,
        "anchor": record.anchor,
        "observation_hash": record.observation_hash,
        "screenshot_hash": record.screenshot_hash,
        "dom_digest": record.dom_digest,
        "action": record.action.to_record(),
    }


def error_reply(exc: ToolError) -> ToolReply:
    body = exc.to_json()
    note = " (journalled)" if exc.journalled else ""
    return ToolReply(
        f"### Error {exc.code}{note}\n{exc.message}\n{json.dumps(exc.evidence, sort_keys=True)}", body, is_error=True
    )


def page_reply(
    view: PageView, lines: list[str], *, screenshot: bool = False, actions: list[dict[str, Any]] | None = None
) -> ToolReply:
    """Playwright MCP's page state, plus where the observation is pinned (the next action is anchored to it)."""
    text = "\n".join(
        [
            *lines,
            "### Page state",
            f"- Page URL: {view.url}",
            f"- Page Title: {view.title}",
            f"- Observation: {view.observation_hash} (next action index {view.index})",
            "- Page Snapshot:",
            "```yaml",
            view.snapshot.rstrip("\n"),
            "```",
        ]
    )
    structured: dict[str, Any] = {
        "url": view.url,
        "title": view.title,
        "next_action_index": view.index,
        "dom_digest": view.dom_digest,
        "observation_hash": view.observation_hash,
    }
    if actions is not None:
        structured["actions"] = actions
    return ToolReply(text, structured, image=view.screenshot if screenshot else None)


def _ended_browser(outcome: SessionOutcome) -> tuple[str, dict[str, Any]]:
    session = {
        "session_id": outcome.session_id,
        "terminal_state": outcome.activity_terminal_state.value,
        "computer_use_state": outcome.terminal_state.value,
        "reason_code": outcome.reason_code,
        "actions": outcome.action_count,
        "head_anchor": outcome.head_anchor,
        "artifact_hash": outcome.result.artifact_hash,
        "landed": outcome.result_landed,
    }
    text = (
        f"### Browser session {outcome.session_id} ended {session['terminal_state']}/{outcome.reason_code}: "
        f"{outcome.action_count} action(s), head {outcome.head_anchor}, result published at {outcome.result_landed}"
    )
    return text, {"browser": session}


def _research_json(published: Published | None) -> dict[str, Any] | None:
    if published is None:
        return None
    result = published.result
    return {
        "terminal_state": result.terminal_state.value,
        "reason_code": result.reason_code,
        "artifact_hash": result.artifact_hash,
        "claims": published.claims,
        "landed": published.landed,
    }


def _ended_research(published: Published | None) -> str:
    if published is None:
        return "### No research result (nothing was submitted, refused by the budget or failed to fetch)."
    result = published.result
    return (
        f"### Research stage published {result.terminal_state.value}/{result.reason_code}: artifact "
        f"{result.artifact_hash} at {published.landed}"
    )
