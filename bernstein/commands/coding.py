"""``bernstein coding run``: record a coding spawn (a command run in a directory) as an activity."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bernstein.commands.common import UsageError, add_prefix_flag, settings_from
from bernstein.producers.coding import publish_spawn, run_spawn
from bernstein.producers.emitter import Emitter
from bernstein.producers.identity import add_producer_flags, producer_from_args
from bernstein.substrate.exit_codes import EXIT_COMMAND_FAILED, EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    coding = sub.add_parser("coding", help="the coding modality")
    coding_sub = coding.add_subparsers(dest="coding_command", metavar="<coding command>")
    run = coding_sub.add_parser(
        "run",
        help="run a command in a directory and publish what it changed",
        description="Snapshot WORKDIR, run the command, publish a coding activity whose artifact is the unified "
        "diff and whose observations are the bytes of every file the command wrote. Exit 0 when the command "
        "succeeded, 2 when it exited non-zero or timed out (its activity is published either way), 3 on a usage "
        "or service error (a missing submissions topic: `bernstein topic create --prefix P`).",
    )
    add_prefix_flag(run)
    run.add_argument("--run", dest="run_id", required=True, help="run id")
    run.add_argument("--stage", required=True, help="stage id")
    run.add_argument("--role", default="developer", help="role from the roles manifest (default developer)")
    run.add_argument("--workdir", type=Path, required=True, help="directory the command works in")
    run.add_argument("--timeout", type=float, default=None, help="seconds before the spawn counts as timed out")
    add_producer_flags(run)
    run.add_argument("--json", action="store_true", help="print where the activity landed as JSON")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("give the command after --, e.g. bernstein coding run --run r --stage s --workdir . -- make fmt")
    if not args.workdir.is_dir():
        raise UsageError(f"--workdir {args.workdir} is not a directory")
    producer = producer_from_args(args)  # before the command runs: no keys, nothing to publish
    with Emitter.from_settings(settings_from(args), producer=producer) as emitter:
        emitter.require_topic()  # before the command runs: no submissions topic (E_TOPIC_MISSING), nothing is run
        spawn = run_spawn(args.workdir, command, timeout=args.timeout)
        published = publish_spawn(emitter, spawn, run_id=args.run_id, stage_id=args.stage, role=args.role)
    summary = {
        "run": published.run_id,
        "stage": args.stage,
        "files_written": spawn.written,
        "files_deleted": spawn.deleted,
        "exit_code": spawn.exit_code,
        "topic": published.topic,
        "partition": published.partition,
        "offset": published.offset,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"published coding activity {args.stage} of run {published.run_id}: {len(spawn.written)} files written, "
            f"{len(spawn.deleted)} deleted, exit {spawn.exit_code} -> {published.where}"
        )
    return EXIT_OK if spawn.exit_code == 0 and not spawn.timed_out else EXIT_COMMAND_FAILED
