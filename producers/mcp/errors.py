"""Typed failures of the MCP front: the tool error an agent gets back, and the missing extra.

A ``ToolError`` is what a tool call returns instead of a result (``isError``
on the wire): a stable ``code``, a sentence, machine-readable ``evidence``
and whether the stop was journalled (a refused navigation, a budget stop, a
driver fault end the browser session and publish its result; a malformed
argument or an unknown ref changes nothing). The agent reads the code and
evidence and repairs its call, or gives up and calls ``finish``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

from bernstein.schemas.errors import BernsteinError

MCP_EXTRA: Final = "bernstein-journal[mcp]"
"""The extra that installs the Model Context Protocol SDK (``bernstein mcp serve`` needs it)."""


class ToolCode:
    """Codes of tool errors raised by the MCP front itself; appended to, never renamed.

    Refusals of the modalities keep their own codes (``NAVIGATION_REFUSED``,
    ``BYTE_CAP_EXCEEDED``, ``ACTION_LIMIT_EXCEEDED``, ``BUDGET_EXCEEDED``,
    ``UNCITED_CLAIM``, a ``FetchCode``, a driver fault ...).
    """

    UNKNOWN_TOOL: Final = "UNKNOWN_TOOL"
    INVALID_ARGUMENT: Final = "INVALID_ARGUMENT"
    UNSUPPORTED_ACTION: Final = "UNSUPPORTED_ACTION"
    UNKNOWN_REF: Final = "UNKNOWN_REF"
    NO_PREVIOUS_PAGE: Final = "NO_PREVIOUS_PAGE"
    SESSION_ENDED: Final = "SESSION_ENDED"
    RESEARCH_ENDED: Final = "RESEARCH_ENDED"
    BROWSER_DISABLED: Final = "BROWSER_DISABLED"


class ToolError(BernsteinError):
    """A tool call that did not do what was asked; returned to the agent as an error result."""

    code: ClassVar[str] = "TOOL_ERROR"

    def __init__(self, code: str, message: str, *, evidence: Mapping[str, Any] | None = None, journalled: bool = False) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]  # per-instance stable code
        self.evidence: dict[str, Any] = dict(evidence or {})
        self.journalled = journalled
        """True when the stop was published (the session's or the stage's result says so)."""

    def to_json(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, "evidence": self.evidence, "journalled": self.journalled}


class McpExtraMissing(BernsteinError):
    """``bernstein mcp`` was asked for in an install without the MCP SDK (the ``mcp`` extra)."""

    code: ClassVar[str] = "E_MCP_EXTRA_MISSING"

    def __init__(self, missing: str = "mcp") -> None:
        super().__init__(
            f"the MCP server needs the Model Context Protocol SDK ({missing} is not installed): pip install '{MCP_EXTRA}' "
            "(its browser tools also need Playwright: 'bernstein-journal[browser,mcp]'; see docs/mcp.md)"
        )
