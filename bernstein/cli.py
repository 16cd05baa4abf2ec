"""The ``bernstein`` command line: one console script, subcommands registered by modules.

Each command module exposes ``register(subparsers)`` which adds its parser
and sets ``func`` to a handler ``(args) -> int``. Handlers return the exit
code; a ``BernsteinError`` escaping a handler is a user-facing failure and is
printed as one line (exit 3), never as a traceback. Before a handler runs, a
command that talks to Kafka or S3 (``ENDPOINTS``) writes its first stderr line:
which broker, protocol, prefix and S3 endpoint it uses, and where each came
from (``bernstein.commands.common.endpoint_banner``). Every exit code of every
command, with its meaning, is in ``bernstein.substrate.exit_codes`` (docs/operations.md,
"Exit codes"): 0 success, 1 not found, 2 mismatch (or the command's own finding:
alerts, a bad description), 3 usage error, unusable input or a service unavailable,
4 internal error, 5 open, 6 not fully verified, 7 fenced, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, NoReturn

from bernstein.commands.common import NOTHING, Uses, announce_endpoints
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.config import unknown_variables
from bernstein.substrate.exit_codes import EXIT_INTERNAL as EXIT_INTERNAL
from bernstein.substrate.exit_codes import EXIT_INTERRUPTED
from bernstein.substrate.exit_codes import EXIT_MISMATCH as EXIT_MISMATCH
from bernstein.substrate.exit_codes import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from bernstein.substrate.exit_codes import EXIT_OK as EXIT_OK
from bernstein.substrate.exit_codes import EXIT_USAGE as EXIT_USAGE

# Modules that register subcommands; a module that is not present yet is skipped.
COMMAND_MODULES: Final = (
    "bernstein.commands.init",
    "bernstein.commands.keys",
    "bernstein.commands.topics",
    "bernstein.commands.kafka",
    "bernstein.commands.scheduler",
    "bernstein.commands.activity",
    "bernstein.commands.audit",
    "bernstein.commands.coding",
    "bernstein.commands.demo",
    "bernstein.commands.submit",
    "bernstein.commands.submission",
    "bernstein.producers.research.cli",
    "bernstein.producers.dataops.cli",
    "bernstein.commands.browser",
    "bernstein.commands.mcp",
    "bernstein.commands.witness",
)


def _scheduler_uses(args: argparse.Namespace) -> Uses:
    from bernstein.substrate.logs import LogFormatError, log_format

    try:
        json_logs = log_format(args.log_format) == "json"
    except LogFormatError:
        json_logs = False  # the command names the bad value itself
    partition = None if args.all_partitions or args.group else (args.partition or 0)  # as its own lines say
    return Uses(kafka=True, json=json_logs, logger="bernstein.scheduler", fields=(("partition", partition),))


def _verify_uses(args: argparse.Namespace) -> Uses:
    """``activity verify`` and ``activity report``: Kafka for ``--from kafka``; S3 for ``--cas s3``, or by default from Kafka (when it is
    configured; the line then says it is not); the prefix unless a dump directory is read."""
    kafka = args.source == "kafka"
    dump = not kafka and "," not in args.source and Path(args.source).is_dir()
    records_only = bool(args.records_only) or args.cas == "none"
    return Uses(kafka=kafka, s3=not records_only and (args.cas == "s3" or (args.cas is None and kafka)), prefix=not dump)


def _replay_uses(args: argparse.Namespace) -> Uses:
    kafka = args.source == "kafka"
    return Uses(kafka=kafka, s3=args.cas == "s3" or (args.cas is None and kafka), prefix=kafka)


def _publish_uses(args: argparse.Namespace) -> Uses:
    """``data run`` / ``ops run``: nothing with ``--no-publish``; S3 unless ``--cas-dir`` stores the blobs."""
    publish = not args.no_publish
    return Uses(kafka=publish, s3=publish and not args.cas_dir)


ENDPOINTS: Final[dict[tuple[str, ...], Uses | Callable[[argparse.Namespace], Uses]]] = {
    ("keys", "init"): NOTHING,
    ("keys", "show"): NOTHING,
    ("keys", "rotate"): NOTHING,
    ("keys", "trust"): NOTHING,
    ("topic", "create"): Uses(kafka=True),
    ("topic", "export"): lambda args: Uses(kafka=True, s3=args.cas == "s3"),
    ("kafka", "acls"): lambda args: Uses(kafka=bool(args.apply)),
    ("kafka", "users"): lambda args: Uses(kafka=bool(args.apply), prefix=False),
    ("scheduler", "run"): _scheduler_uses,
    ("activity", "verify"): _verify_uses,
    ("activity", "report"): _verify_uses,
    ("activity", "prove"): lambda args: Uses(kafka=args.source == "kafka", prefix=args.source == "kafka"),
    ("activity", "verify-proof"): lambda args: Uses(s3=args.cas == "s3", prefix=False),
    ("activity", "prove-rewriting"): lambda args: Uses(kafka=args.source == "kafka", prefix=args.source == "kafka"),
    ("activity", "verify-rewriting"): NOTHING,
    ("audit", "follow"): lambda args: Uses(kafka=True, json=bool(args.progress)),
    ("audit", "ack"): NOTHING,
    ("audit", "latches"): NOTHING,
    ("audit", "rules"): NOTHING,
    ("coding", "run"): Uses(kafka=True, s3=True),
    ("demo",): Uses(kafka=True, s3=True),
    ("init",): Uses(kafka=True),  # its last step creates the prefix's topics
    ("submit",): Uses(kafka=True, s3=True),
    ("submission", "check"): NOTHING,
    ("research", "run"): Uses(kafka=True, s3=True),
    ("data", "run"): _publish_uses,
    ("ops", "run"): _publish_uses,
    ("browser", "run"): Uses(kafka=True, s3=True),
    ("browser", "replay"): _replay_uses,
    ("mcp", "serve"): Uses(kafka=True, s3=True),
    ("witness", "init"): NOTHING,
    ("witness", "serve"): NOTHING,
    ("witness", "submit"): lambda args: Uses(kafka=args.source == "kafka", prefix=args.source == "kafka"),
}
"""What each command talks to, by its words: the one table behind the endpoint line every command that talks to
Kafka or S3 writes first on stderr (``bernstein.commands.common.endpoint_banner``). A unit test fails for a
command missing here (a command of a module that is not installed may stay listed)."""


def command_uses(args: argparse.Namespace) -> Uses:
    """``ENDPOINTS``' entry for the parsed command (``NOTHING`` for a command group run bare)."""
    entry = ENDPOINTS.get(getattr(args, "command_path", ()), NOTHING)
    return entry if isinstance(entry, Uses) else entry(args)


def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every runnable command of ``parser`` by its words (``("activity", "verify")``), aliases once."""
    subs = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not subs:
        return {path: parser} if path else {}
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    seen: set[int] = set()
    for name, child in subs[0].choices.items():
        if id(child) not in seen:
            seen.add(id(child))
            found.update(leaf_commands(child, (*path, name)))
    return found


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors; 2 means "mismatch" here, so use 3."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _version() -> str:
    """The installed distribution's version (the package metadata); "unknown" when run from a bare tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bernstein-journal")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bernstein", description="A verifiable activity journal for AI agents, on Kafka.")
    parser.add_argument("--debug", action="store_true", help="print tracebacks for internal errors")
    parser.add_argument("--version", action="version", version=f"bernstein {_version()}", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="<command>", parser_class=_Parser)
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise
        module.register(sub)
    for path, leaf in leaf_commands(parser).items():
        leaf.set_defaults(command_path=path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        # first: which Kafka, S3 and prefix this command uses, and from where (a warning below may say why)
        announce_endpoints(command_uses(args), getattr(args, "prefix", None))
        for name, meant in unknown_variables():
            hint = f" (did you mean {meant}?)" if meant else ""
            print(
                f"bernstein: warning: {name} is set but no setting of bernstein has that name{hint}; it is ignored",
                file=sys.stderr,
            )
        code = int(args.func(args))
    except BernsteinError as exc:
        print(f"bernstein: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("bernstein: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); nothing more to say.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if args.debug or os.environ.get("BERNSTEIN_DEBUG"):
            raise
        print(
            f"bernstein: internal error: {type(exc).__name__}: {exc} (a defect; rerun with --debug and report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    return code


if __name__ == "__main__":
    sys.exit(main())
