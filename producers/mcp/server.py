"""The Model Context Protocol wiring: ``McpRun`` behind the official SDK's low-level server, over stdio or HTTP.

The only module that imports the ``mcp`` SDK (the ``mcp`` extra; without it
importing this module raises ``McpExtraMissing`` naming the extra). Every
tool call runs on one worker thread, in order: Playwright's sync API is
bound to the thread that started it, and one agent's calls are a sequence
anyway. When the client is gone the run's open results are published
(``McpRun.end``) before the process exits:

* **stdio**: when the client closes stdin (or the server is interrupted);
* **streamable HTTP** (``/mcp``): when the client ends its MCP session
  (the HTTP ``DELETE`` the SDK's client sends when it closes), or the
  server is stopped (SIGINT / SIGTERM). One process serves one session: a
  second client is refused (``max_sessions=1``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from bernstein.producers.mcp.errors import McpExtraMissing

try:  # the [mcp] extra
    import mcp_types as types
    import uvicorn
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
except ModuleNotFoundError as _exc:
    if _exc.name is None or _exc.name.split(".")[0] not in ("mcp", "mcp_types", "uvicorn", "starlette", "pydantic", "anyio"):
        raise
    raise McpExtraMissing(_exc.name) from None

from bernstein.producers.mcp.run import McpRun, ToolReply
from bernstein.producers.mcp.tools import TOOLS

LOG: Final = logging.getLogger("bernstein.mcp")
SERVER_NAME: Final = "bernstein"
INSTRUCTIONS: Final = (
    "Every browser action you take is anchored to the page you were last shown, signed and journalled; typed text is "
    "kept only as a keyed digest. Refused navigations and budget stops come back as errors with a code and evidence. "
    "For research, fetch sources, then submit_report with claims citing verbatim quotes. Call finish when done."
)


class ToolRunner:
    """``McpRun`` on its one worker thread."""

    def __init__(self, run: McpRun) -> None:
        self.run = run
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bernstein-mcp")

    async def call(self, name: str, arguments: dict[str, Any] | None) -> ToolReply:
        return await asyncio.get_running_loop().run_in_executor(self._thread, self.run.call, name, arguments)

    async def end(self) -> None:
        outcome, research = await asyncio.get_running_loop().run_in_executor(self._thread, self.run.end)
        if outcome is not None:
            LOG.info(
                "browser session %s published %s/%s (%d actions)",
                outcome.session_id,
                outcome.activity_terminal_state.value,
                outcome.reason_code,
                outcome.action_count,
            )
        if research is not None:
            LOG.info("research stage published %s/%s", research.result.terminal_state.value, research.result.reason_code)

    def close(self) -> None:
        self._thread.shutdown(wait=True)


def build_server(runner: ToolRunner, *, browser: bool = True, research: bool = True) -> Server[Any]:
    """The low-level server: ``tools/list`` from ``TOOLS``, ``tools/call`` through ``runner``."""
    offered = [
        spec for spec in TOOLS if (browser or not spec.browser) and (research or spec.name not in ("fetch", "submit_report"))
    ]
    tools = [
        types.Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=dict(spec.schema),
            annotations=types.ToolAnnotations(title=spec.title, read_only_hint=spec.read_only),
        )
        for spec in offered
    ]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        reply = await runner.call(params.name, params.arguments)
        return as_result(reply)

    return Server(SERVER_NAME, instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)


def as_result(reply: ToolReply) -> types.CallToolResult:
    content: list[Any] = [types.TextContent(type="text", text=reply.text)]
    if reply.image is not None:
        content.append(
            types.ImageContent(type="image", data=base64.b64encode(reply.image).decode("ascii"), mime_type="image/png")
        )
    return types.CallToolResult(content=content, structured_content=reply.structured, is_error=reply.is_error)


async def serve_stdio(runner: ToolRunner, server: Server[Any]) -> None:
    """Serve one client over stdin/stdout until it closes stdin; then publish what is open."""
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await runner.end()


async def serve_http(
    runner: ToolRunner, server: Server[Any], *, host: str, port: int, ready: Callable[[int], None] | None = None
) -> None:
    """Serve one client over streamable HTTP at ``/mcp`` until its session ends or the server is stopped."""
    app = server.streamable_http_app(host=host, max_sessions=1, session_idle_timeout=None)
    ended = asyncio.Event()
    config = uvicorn.Config(_EndOnDelete(app, ended), host=host, port=port, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)

    async def watch() -> None:
        await ended.wait()
        web.should_exit = True

    watcher = asyncio.create_task(watch())
    try:
        serving = asyncio.create_task(web.serve())
        while not web.started and not serving.done():
            await asyncio.sleep(0.05)
        if web.started and ready is not None:
            sockets = [s for server_ in web.servers for s in server_.sockets]
            ready(int(sockets[0].getsockname()[1]) if sockets else port)
        await serving
    finally:
        watcher.cancel()
        await runner.end()


class _EndOnDelete:
    """ASGI wrapper: once the client's ``DELETE /mcp`` (the end of its session) is answered, the server stops."""

    def __init__(self, app: Any, ended: asyncio.Event) -> None:
        self.app = app
        self.ended = ended

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
        if scope.get("type") == "http" and scope.get("method") == "DELETE":
            self.ended.set()
