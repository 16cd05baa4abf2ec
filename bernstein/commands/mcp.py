"""``bernstein mcp serve``: the journalled browser and research tools as a Model Context Protocol server.

    bernstein mcp serve --run RUN [--session browser-0] [--transport stdio|http] [--host H] [--port N]
        [--url URL] [--allow-origin ORIGIN ...] [--role navigator] [--worktree DIR] [--timeout S]
        [--action-timeout S] [--byte-cap N] [--max-actions N] [--no-browser]
        [--research-stage research-0] [--research-role scout] [--max-fetches N] [--max-cost N]
        [--cost-per-fetch N] [--max-bytes N] [--fetch-timeout S] [--allow-private] [--no-research]
        [--producer-keys DIR] [--producer-id ID] [--prefix P]

One process serves one run: one browser session (``--session``, the browser
stage) and one research stage (``--research-stage``), signed with this host's
producer keys. Over stdio the client starts it as a subprocess; over HTTP it
listens at ``http://HOST:PORT/mcp`` for one client. Everything it reports goes
to stderr (stdout is the protocol over stdio). Exit 0 when the client left and
every open result was published; 3 for a usage error, a missing extra (``mcp``,
or ``browser`` unless ``--no-browser``), unusable keys or unavailable services.
The tools and what each journals: docs/mcp.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from bernstein.commands.common import add_prefix_flag
from bernstein.producers.computer_use.budget import DEFAULT_RUN_BYTE_CAP
from bernstein.producers.computer_use.capability import CapabilityRefusal, require_computer_use_capable
from bernstein.producers.computer_use.session import DEFAULT_MAX_ACTIONS, ComputerUseSession, EmitterPublisher
from bernstein.producers.identity import add_producer_flags, producer_from_args
from bernstein.producers.netpolicy import OriginPolicy, TargetRefused
from bernstein.producers.research.budget import ResearchBudget
from bernstein.substrate.cli_args import command_group, non_negative_int, positive_seconds
from bernstein.substrate.exit_codes import EXIT_OK, EXIT_REFUSED

DEFAULT_PORT = 8931


def register(subparsers: Any) -> None:
    commands = command_group(
        subparsers, "mcp", help="the journalled browser and research tools as an MCP server", metavar="<mcp-command>"
    )
    serve = commands.add_parser(
        "serve",
        help="serve one run's browser session and research stage to an MCP client (stdio or streamable HTTP)",
        description="A Model Context Protocol server whose browser tools follow Playwright MCP's names and arguments. "
        "Every acting call is one anchored, signed, journalled action; fetch and submit_report build a cited research "
        "report. The results are published when the client calls finish or goes away.",
    )
    serve.add_argument("--run", dest="run_id", required=True, metavar="RUN", help="run id to publish into")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="stdio (default) or streamable HTTP")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP: address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=non_negative_int, default=DEFAULT_PORT, help=f"HTTP: port (default: {DEFAULT_PORT})")
    browser = serve.add_argument_group("browser session")
    browser.add_argument("--session", dest="session_id", default="browser-0", help="session id (= the browser stage id)")
    browser.add_argument("--url", default="", help="an origin the browser may reach, if its host is public")
    browser.add_argument(
        "--allow-origin",
        dest="allow_origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also allow this exact origin (scheme://host:port), even on a private or loopback address; repeatable",
    )
    browser.add_argument("--role", default="navigator", help="role publishing the session (default: navigator)")
    browser.add_argument("--worktree", type=Path, default=Path.cwd(), help="worktree for the profile and byte ledger")
    browser.add_argument("--timeout", type=positive_seconds, default=None, metavar="S", help="session timeout (default: none)")
    browser.add_argument("--action-timeout", type=positive_seconds, default=5.0, metavar="S", help="per-action timeout")
    browser.add_argument(
        "--byte-cap", type=non_negative_int, default=DEFAULT_RUN_BYTE_CAP, metavar="N", help="screenshot bytes per run"
    )
    browser.add_argument("--max-actions", type=non_negative_int, default=DEFAULT_MAX_ACTIONS, metavar="N", help="action budget")
    browser.add_argument("--no-browser", action="store_true", help="offer the research tools only (no Chromium, no Playwright)")
    research = serve.add_argument_group("research stage")
    research.add_argument("--research-stage", default="research-0", metavar="STAGE", help="stage id of the research report")
    research.add_argument("--research-role", default="scout", metavar="ROLE", help="role publishing the report (default: scout)")
    research.add_argument("--max-fetches", type=non_negative_int, default=8, metavar="N", help="fetch cap (default: 8)")
    research.add_argument("--max-cost", type=non_negative_int, default=None, metavar="N", help="cost-unit cap")
    research.add_argument("--cost-per-fetch", type=non_negative_int, default=1, metavar="N", help="cost units per fetch")
    research.add_argument("--max-bytes", type=non_negative_int, default=None, metavar="N", help="cap on total fetched bytes")
    research.add_argument("--fetch-timeout", type=positive_seconds, default=10.0, metavar="S", help="per-operation fetch timeout")
    research.add_argument("--allow-private", action="store_true", help="allow sources on private / loopback addresses")
    research.add_argument("--no-research", action="store_true", help="offer the browser tools only")
    add_producer_flags(serve, id_help="worker identity; must be the producer key's name (default: that name)")
    add_prefix_flag(serve)
    serve.set_defaults(func=_serve)


def _refused(code: str, message: str) -> int:
    print(f"mcp refused: {code}: {message} (nothing published)", file=sys.stderr)
    return EXIT_REFUSED


def _serve(args: argparse.Namespace) -> int:
    """Check the extras and the arguments, open the emitter, serve until the client leaves."""
    from bernstein.producers.emitter import Emitter
    from bernstein.producers.mcp import server as mcp_server  # raises McpExtraMissing without the [mcp] extra
    from bernstein.producers.mcp.browser import SteppedBrowser
    from bernstein.producers.mcp.research import ResearchDesk
    from bernstein.producers.mcp.run import McpRun
    from bernstein.producers.research.fetch import make_fetch
    from bernstein.substrate.config import Settings

    if args.no_browser and args.no_research:
        return _refused("INVALID_ARGUMENT", "--no-browser and --no-research leave no tool to serve")
    factory = None
    if not args.no_browser:
        try:
            require_computer_use_capable("playwright")
            policy = OriginPolicy.from_urls(args.url, args.allow_origin)
        except (CapabilityRefusal, TargetRefused) as exc:
            return _refused(exc.code, exc.message)
        from bernstein.producers.mcp.driver import ref_driver_factory, require_playwright

        require_playwright()  # BrowserExtraMissing (exit 3, naming the extra) before anything starts
        factory = ref_driver_factory(policy=policy, action_timeout_ms=int(args.action_timeout * 1000))
    keys = producer_from_args(args)
    budget = ResearchBudget(args.max_fetches, args.max_cost, args.cost_per_fetch, args.max_bytes)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="bernstein mcp: %(message)s")
    with Emitter.from_settings(Settings.load(prefix=args.prefix), producer=keys) as emitter:
        emitter.require_topic()  # before serving: no submissions topic, nothing to do (E_TOPIC_MISSING)
        publisher = EmitterPublisher(emitter)
        stepped = None
        if factory is not None:
            session = ComputerUseSession(
                args.run_id,
                args.session_id,
                keys=keys,
                store=emitter.store,
                publisher=publisher,
                worker_id=args.producer_id,
                worktree=args.worktree,
                role=args.role,
                byte_cap=args.byte_cap,
                max_actions=args.max_actions,
                timeout=args.timeout,
                navigation=policy,
            )
            stepped = SteppedBrowser(session, factory)
        desk = None
        if not args.no_research:
            fetch_fn = make_fetch(allow_private=args.allow_private, timeout=args.fetch_timeout)
            desk = ResearchDesk(
                args.run_id,
                args.research_stage,
                store=emitter.store,
                publisher=publisher,
                budget=budget,
                fetch_fn=fetch_fn,
                role=args.research_role,
            )
        runner = mcp_server.ToolRunner(McpRun(browser=stepped, research=desk))
        server = mcp_server.build_server(runner, browser=stepped is not None, research=desk is not None)
        try:
            if args.transport == "stdio":
                print(f"bernstein mcp: serving run {args.run_id} over stdio", file=sys.stderr)
                asyncio.run(mcp_server.serve_stdio(runner, server))
            else:

                def ready(port: int) -> None:
                    print(
                        f"bernstein mcp: serving run {args.run_id} at http://{args.host}:{port}/mcp", file=sys.stderr, flush=True
                    )

                asyncio.run(mcp_server.serve_http(runner, server, host=args.host, port=args.port, ready=ready))
        finally:
            runner.close()
    return EXIT_OK
