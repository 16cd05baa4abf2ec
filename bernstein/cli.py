"""The ``bernstein`` command line: one console script, subcommands registered by modules.

Each command module exposes ``register(subparsers)`` which adds its parser
and sets ``func`` to a handler ``(args) -> int``. Handlers return the exit
code; a ``BernsteinError`` escaping a handler is a user-facing failure and is
printed as one line (exit 3), never as a traceback. Every exit code of every
command, with its meaning, is in ``substrate.exit_codes`` (docs/operations.md,
"Exit codes"): 0 success, 1 not found, 2 mismatch (or the command's own finding:
alerts, a bad description), 3 usage error, unusable input or a service unavailable,
4 internal error, 5 open, 6 not fully verified, 7 fenced, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Final, NoReturn

from schemas.errors import BernsteinError
from substrate.config import unknown_variables
from substrate.exit_codes import EXIT_INTERNAL as EXIT_INTERNAL
from substrate.exit_codes import EXIT_INTERRUPTED
from substrate.exit_codes import EXIT_MISMATCH as EXIT_MISMATCH
from substrate.exit_codes import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from substrate.exit_codes import EXIT_OK as EXIT_OK
from substrate.exit_codes import EXIT_USAGE as EXIT_USAGE

# Modules that register subcommands; a module that is not present yet is skipped.
COMMAND_MODULES: Final = (
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
    "producers.research.cli",
    "producers.dataops.cli",
    "producers.computer_use.cli",
)


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    for name, meant in unknown_variables():
        hint = f" (did you mean {meant}?)" if meant else ""
        print(
            f"bernstein: warning: {name} is set but no setting of bernstein has that name{hint}; it is ignored", file=sys.stderr
        )
    try:
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
