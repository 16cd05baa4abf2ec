"""The journalled browser and research tools for agents that own their loop: ``bernstein mcp serve``.

An MCP client (Claude, an IDE assistant, an OpenAI or browser-use agent)
calls tools; each browser tool call that acts is one anchored, signed,
journalled action of a ``ComputerUseSession`` and the research tools build a
cited report through the research worker's own steps. Nothing here copies a
rule of the modalities: it drives their code one tool call at a time.

Modules, one job each: ``tools`` (the tool list and the pure parsing of a
call into actions: Playwright MCP's names and arguments), ``errors`` (the
tool error and the missing extra), ``browser`` (``SteppedBrowser``: one
anchored action per call), ``driver`` (the Playwright driver with snapshot
refs; imports Playwright), ``research`` (``ResearchDesk``: ``fetch`` and
``submit_report``), ``run`` (``McpRun``: dispatch and replies, no SDK) and
``server`` (the official ``mcp`` SDK over stdio and streamable HTTP; the only
module importing it). ``bernstein mcp serve`` is ``bernstein/commands/mcp.py``;
the rules are written down in ``docs/mcp.md``.
"""

from __future__ import annotations

from bernstein.producers.mcp.errors import MCP_EXTRA, McpExtraMissing, ToolCode, ToolError
from bernstein.producers.mcp.tools import TOOL_NAMES, TOOLS, ToolSpec, parse_call

__all__ = ["MCP_EXTRA", "TOOLS", "TOOL_NAMES", "McpExtraMissing", "ToolCode", "ToolError", "ToolSpec", "parse_call"]
