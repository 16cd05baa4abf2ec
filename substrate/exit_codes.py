"""Every exit code of every ``bernstein`` command, with its meaning: the one table.

Each command imports its codes from here; none defines its own number. A code keeps one
meaning across commands, read with the command: 0 is always success, 2 always "the job ran
and found something the caller must look at" (never a usage error), 3 always "the job could
not be done as asked" (fix the invocation, the input or the environment; one typed line on
stderr, never a traceback), 4 always a defect. A few codes have a second *name* for what
they mean to one command (``EXIT_ALERTS`` is 2 for ``audit follow``); each name is one row
of ``TABLE``.

A leaf module (the standard library only) in ``substrate/``, the layer ``bernstein/``,
``verifier/``, ``producers/`` and ``consumers/`` all build on: the verifier and the
producer CLIs need the codes without importing the ``bernstein`` command-line package,
which imports them.

The table in docs/operations.md ("Exit codes") is generated from ``TABLE``
(``python -m bernstein.substrate.exit_codes --write docs/operations.md``) and a unit test fails when
they disagree.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

EXIT_OK: Final = 0
EXIT_NOT_FOUND: Final = 1
EXIT_WOULD_BE_REFUSED: Final = 1
EXIT_MISMATCH: Final = 2
EXIT_ALERTS: Final = 2
EXIT_BAD_DESCRIPTION: Final = 2
EXIT_COMMAND_FAILED: Final = 2
EXIT_USAGE: Final = 3
EXIT_UNAVAILABLE: Final = 3
EXIT_REFUSED: Final = 3
EXIT_INTERNAL: Final = 4
EXIT_OPEN: Final = 5
EXIT_NOT_FULLY_VERIFIED: Final = 6
EXIT_FENCED: Final = 7
EXIT_SIGNALLED: Final = 128
"""The base: a child killed by signal N counts as ``128 + N`` (137 for SIGKILL), as a shell reports it."""
EXIT_INTERRUPTED: Final = 130


@dataclass(frozen=True)
class ExitCode:
    """One row of the table: a code, the constant that names it, what it means, who exits with it."""

    code: int
    name: str
    meaning: str
    commands: str
    shown: str = ""
    """How the docs show the code when it is a family (``128+N``); empty: the number."""

    @property
    def label(self) -> str:
        return self.shown or str(self.code)


TABLE: Final[tuple[ExitCode, ...]] = (
    ExitCode(
        EXIT_OK,
        "EXIT_OK",
        "success: done, published, verified (every record authenticated and every evidence blob re-hashed), "
        "no alert, every submission would be journalled (`activity verify-rewriting`: the file PROVES the log signed "
        "two inconsistent checkpoints)",
        "every command",
    ),
    ExitCode(
        EXIT_NOT_FOUND,
        "EXIT_NOT_FOUND",
        "the run is not in the source, its journal holds no accepted activity, or it has no browser session (or "
        "stage: `activity prove`)",
        "`activity verify`, `activity report`, `activity prove`, `browser replay`",
    ),
    ExitCode(
        EXIT_WOULD_BE_REFUSED,
        "EXIT_WOULD_BE_REFUSED",
        "at least one submission would be refused or dead-lettered",
        "`submission check`",
    ),
    ExitCode(
        EXIT_MISMATCH,
        "EXIT_MISMATCH",
        "a check failed on bytes that were read: something was changed, lost or added (tamper)",
        "`activity verify`, `activity report`, `activity verify-proof`, `activity prove` (a checkpoint handed with "
        "`--witnessed` refused), `activity verify-rewriting` (the file does not prove a rewriting), `browser replay`",
    ),
    ExitCode(
        EXIT_ALERTS,
        "EXIT_ALERTS",
        "at least one alert was raised (the alerts are on stdout), or a tamper finding is still latched (`audit ack` clears it)",
        "`audit follow`",
    ),
    ExitCode(
        EXIT_BAD_DESCRIPTION,
        "EXIT_BAD_DESCRIPTION",
        "a description line is bad (its line and field are named) or the producer keys are unusable; nothing of "
        "that line was published, earlier lines were",
        "`submit` (and the Go and TypeScript SDKs' `emit` commands)",
    ),
    ExitCode(
        EXIT_COMMAND_FAILED,
        "EXIT_COMMAND_FAILED",
        "the recorded command exited non-zero or timed out; its activity was published",
        "`coding run`",
    ),
    ExitCode(
        EXIT_USAGE,
        "EXIT_USAGE",
        "usage error or unusable input: flags that do not parse, a missing or unreadable file, missing keys, a bad "
        "manifest; a command group run without its subcommand",
        "every command",
    ),
    ExitCode(
        EXIT_UNAVAILABLE,
        "EXIT_UNAVAILABLE",
        "Kafka or S3 could not be used: unreachable, refusing this principal (ACLs, a refused login), or without "
        "what was asked for: a missing topic (`E_TOPIC_MISSING`: create it with `bernstein topic create --prefix P`); "
        "nothing was judged",
        "every command that talks to Kafka or S3",
    ),
    ExitCode(
        EXIT_REFUSED,
        "EXIT_REFUSED",
        "the activity did not complete: refused before anything was published, or it stopped refused, failed or "
        "timed out (that result is published, so the stop is journalled)",
        "`research run`, `data run`, `ops run`, `browser run`",
    ),
    ExitCode(
        EXIT_INTERNAL,
        "EXIT_INTERNAL",
        "internal error: a defect, not a user mistake nor bad data (`--debug` prints the traceback; please report it)",
        "every command",
    ),
    ExitCode(
        EXIT_OPEN,
        "EXIT_OPEN",
        "the run has no final seal and nothing says one was written; everything else verified (`activity prove`: "
        "no signed checkpoint, or none handed with `--witnessed`, covers the stage yet; `activity prove-rewriting`: no two inconsistent signed checkpoints "
        "to show)",
        "`activity verify`, `activity report`, `activity prove`, `activity prove-rewriting`",
    ),
    ExitCode(
        EXIT_NOT_FULLY_VERIFIED,
        "EXIT_NOT_FULLY_VERIFIED",
        "nothing that was checked failed, but a check could not be run (no content store, `--records-only`, no audit "
        "key pinned, a topic not captured; `activity verify-proof`: the pinned witness policy's quorum did not "
        "cosign the proof's checkpoint)",
        "`activity verify`, `activity report`, `activity verify-proof`",
    ),
    ExitCode(
        EXIT_FENCED,
        "EXIT_FENCED",
        "another instance took the partition over, or this one was paused and cannot prove it still owns it: it "
        "stopped (do not restart it while the other runs)",
        "`scheduler run`",
    ),
    ExitCode(
        EXIT_SIGNALLED,
        "EXIT_SIGNALLED",
        "a partition's child process was killed by signal N (137: SIGKILL)",
        "`scheduler run --all-partitions`",
        shown="128+N",
    ),
    ExitCode(
        EXIT_INTERRUPTED,
        "EXIT_INTERRUPTED",
        "interrupted (SIGINT, Ctrl-C) before it finished",
        "every command but `scheduler run` and `audit follow`, which stop cleanly on SIGINT",
    ),
)
"""Every exit code, by code; a code with several names has a row per name."""


def names() -> dict[str, int]:
    """Every ``EXIT_*`` constant of this module and its value."""
    return {name: value for name, value in globals().items() if name.startswith("EXIT_") and isinstance(value, int)}


BEGIN: Final = (
    "<!-- exit-codes: generated by `python -m bernstein.substrate.exit_codes --write docs/operations.md`; do not edit -->"
)
END: Final = "<!-- /exit-codes -->"


def markdown_table() -> str:
    """``TABLE`` as the Markdown table the docs show (between ``BEGIN`` and ``END``)."""
    lines = ["| exit | name | meaning | commands |", "|---|---|---|---|"]
    for row in TABLE:
        lines.append(f"| {row.label} | `{row.name}` | {row.meaning} | {row.commands} |")
    return "\n".join(lines) + "\n"


def documented_table(text: str) -> str | None:
    """The text between ``BEGIN`` and ``END`` in ``text`` (one newline after BEGIN dropped); None without both."""
    start = text.find(BEGIN)
    end = text.find(END, start + 1)
    if start < 0 or end < 0:
        return None
    return text[start + len(BEGIN) : end].removeprefix("\n")


def rewrite(text: str) -> str:
    """``text`` with the generated table between the markers replaced by ``markdown_table()``."""
    start = text.find(BEGIN)
    end = text.find(END, start + 1)
    if start < 0 or end < 0:
        raise ValueError(f"no exit-code table: the page needs the lines {BEGIN!r} and {END!r}")
    return text[: start + len(BEGIN)] + "\n" + markdown_table() + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bernstein.substrate.exit_codes``: print the table; ``--write FILE`` puts it between the markers of FILE."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stdout.write(markdown_table())
        return EXIT_OK
    if len(args) == 2 and args[0] == "--write":
        path = Path(args[1])
        try:
            path.write_text(rewrite(path.read_text(encoding="utf-8")), encoding="utf-8")
        except (OSError, ValueError) as exc:
            print(f"exit_codes: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    print("usage: python -m bernstein.substrate.exit_codes [--write FILE]", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
