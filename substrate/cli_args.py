"""argparse helpers shared by every command module, the CLI's and the modality workers' alike.

They sit below both (``bernstein.commands.common`` re-exports them), so a modality's CLI module
(``producers/research/cli.py``) needs nothing from the ``bernstein`` package.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bernstein.substrate.exit_codes import EXIT_USAGE


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0, with a message that names the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def show_usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Handler for a command group run without a subcommand: its help on stderr, exit 3."""

    def handler(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return handler


def command_group(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, *, help: str, metavar: str | None = None
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Add ``bernstein NAME <command>`` and return where its subcommands go.

    Every group is wired the same way: subcommand in ``args.<name>_command``,
    and run bare it prints its own help and exits 3 (``show_usage``).
    """
    group = sub.add_parser(name, help=help)
    group.set_defaults(func=show_usage(group))
    return group.add_subparsers(dest=f"{name}_command", metavar=metavar or f"<{name} command>")
