"""``bernstein audit follow``: check the audit topic as it grows and print alerts (docs/operations.md).

Exit codes: 0 no alert (``--once``: everything up to the end checked; following: stopped
cleanly by SIGTERM/SIGINT); 2 at least one alert was raised; 3 a usage error, an unreadable
keys or checkpoint file, or Kafka unreachable or refusing (typed, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from bernstein.commands.common import (
    UsageError,
    add_keys_flag,
    add_prefix_flag,
    command_group,
    non_negative_int,
    settings_from,
    trusted_from,
)
from substrate.kafka import require_bootstrap
from substrate.keys import TrustedKeys
from verifier.facts import A_RECORD
from verifier.follow.alerts import Alert
from verifier.follow.checker import Policy
from verifier.follow.checkpoint import CheckpointStore
from verifier.follow.consumer import Follower, FollowOptions

EXIT_CLEAN = 0
EXIT_ALERTS = 2


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    audit_sub = command_group(sub, "audit", help="watch the audit topic")
    follow = audit_sub.add_parser(
        "follow",
        help="check every audit record as it arrives and print alerts (exit 0 clean, 2 alerts, 3 error)",
        description="A read_committed consumer of <prefix>.audit in a consumer group: checks each record's MAC with "
        "the pinned audit keys, its chain link and sequence, and raises alerts as JSON lines on stdout "
        "(docs/operations.md lists every kind). Resumes from a local checkpoint it verifies first. With --once, "
        "checks every partition up to its current end and exits: 0 clean, 2 on any alert.",
    )
    add_prefix_flag(follow)
    add_keys_flag(follow)
    follow.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        help="pinned keys file from `bernstein keys trust` holding the audit keys (as `activity verify` takes it; "
        "re-read when it changes)",
    )
    follow.add_argument(
        "--roles", type=Path, default=None, help="roles manifest (only without --trusted-keys, as `activity verify`)"
    )
    follow.add_argument(
        "--state",
        type=Path,
        default=None,
        help="checkpoint directory (default: $BERNSTEIN_FOLLOW_STATE or ~/.local/state/bernstein/follow/<prefix>)",
    )
    follow.add_argument("--group", default=None, help="consumer group (default: <prefix>.audit-follow)")
    follow.add_argument(
        "--instance-id", default=None, help="static group membership id (a restart takes its partitions back at once)"
    )
    follow.add_argument("--once", action="store_true", help="check up to the current end of every partition, then exit")
    follow.add_argument(
        "--check-journal",
        action="store_true",
        help="also read the journal and alert (journal_missing) when a journal record the audit chain mirrors is not there",
    )
    follow.add_argument(
        "--format",
        choices=("json", "text"),
        default="json",
        help="json: alerts as JSON lines; text: every record and alert for a human",
    )
    follow.add_argument(
        "--progress",
        action="store_true",
        help="JSON lines on stderr: one per checkpointed range of records, and per partitions assigned or revoked",
    )
    follow.add_argument(
        "--refusal-burst",
        type=non_negative_int,
        default=20,
        help="refusals within --refusal-window that raise refusal_burst (0: off; default 20)",
    )
    follow.add_argument("--refusal-window", type=float, default=60.0, help="seconds (record timestamps; default 60)")
    follow.add_argument(
        "--unsealed-after", type=float, default=3600.0, help="seconds a run may stay unsealed (0: off; default 3600)"
    )
    follow.add_argument(
        "--silent-after",
        type=float,
        default=60.0,
        help="seconds without an audit record while submissions wait (0: off; default 60)",
    )
    follow.add_argument("--checkpoint-every", type=float, default=1.0, help="seconds between checkpoint saves (default 1)")
    follow.set_defaults(func=_follow)


def _seconds_ms(value: float, flag: str, *, off: bool = True) -> int | None:
    if value < 0 or value != value:
        raise UsageError(f"{flag} {value}: must be a number of seconds >= 0")
    if value == 0 and off:
        return None
    return int(value * 1000)


def _state_dir(args: argparse.Namespace, prefix: str) -> Path:
    if args.state is not None:
        return Path(args.state)
    explicit = os.environ.get("BERNSTEIN_FOLLOW_STATE")
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "bernstein" / "follow" / prefix


class _Keys:
    """The pinned keys; the --trusted-keys file is read again when it changes (a rotation adds a key)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.path: Path | None = args.trusted_keys
        self.keys = trusted_from(args.trusted_keys, args.keys_dir, args.roles)
        if not self.keys.hmac:
            raise UsageError(
                "the trusted keys pin no audit key: audit follow cannot check a MAC (export them for auditors with "
                "`bernstein keys trust`, which includes the audit keys)"
            )
        self.stamp = self._stamp()

    def _stamp(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            status = self.path.stat()
        except OSError:
            return None
        return (status.st_mtime_ns, status.st_size)

    def __call__(self) -> TrustedKeys:
        stamp = self._stamp()
        if stamp is not None and stamp != self.stamp and self.path is not None:
            self.stamp = stamp
            reloaded = TrustedKeys.load(self.path)
            if reloaded.hmac:
                self.keys = reloaded
        return self.keys


def _printer(out: TextIO, text: bool) -> Any:
    def emit(alert: Alert) -> None:
        out.write((alert.to_text() if text else alert.line()) + "\n")
        out.flush()

    return emit


def _record_view(out: TextIO, topic: str) -> Any:
    def show(partition: int, offset: int, fact: tuple[Any, ...], alerts: list[Alert]) -> None:
        if fact[0] == A_RECORD:
            seq, event, run_id = fact[5], fact[7], fact[8]
            line = f"{topic}[{partition}]@{offset} seq {seq} {event} {run_id}"
        else:
            line = f"{topic}[{partition}]@{offset} (undecodable)"
        out.write(f"{line} {'ok' if not alerts else 'ALERT ' + ','.join(a.kind.value for a in alerts)}\n")

    return show


def _follow(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    bootstrap = require_bootstrap(settings.kafka_bootstrap)
    topics = settings.topics
    policy = Policy(
        refusal_burst=args.refusal_burst or None,
        refusal_window_ms=_seconds_ms(args.refusal_window, "--refusal-window", off=False) or 1,
        unsealed_after_ms=_seconds_ms(args.unsealed_after, "--unsealed-after"),
        silent_after_ms=_seconds_ms(args.silent_after, "--silent-after"),
    )
    if not args.checkpoint_every > 0:
        raise UsageError(f"--checkpoint-every {args.checkpoint_every}: must be a positive number of seconds")
    keys = _Keys(args)
    options = FollowOptions(
        bootstrap=bootstrap,
        topics=topics,
        store=CheckpointStore(_state_dir(args, topics.prefix)),
        group=args.group or f"{topics.prefix}.audit-follow",
        once=bool(args.once),
        check_journal=bool(args.check_journal),
        policy=policy,
        checkpoint_every=float(args.checkpoint_every),
        instance_id=args.instance_id,
    )
    text = args.format == "text"

    def progress(line: dict[str, Any]) -> None:
        sys.stderr.write(json.dumps(line, separators=(",", ":")) + "\n")
        sys.stderr.flush()

    follower = Follower(
        options,
        keys,
        _printer(sys.stdout, text),
        on_record=_record_view(sys.stdout, topics.audit) if text else None,
        progress=progress if args.progress else None,
    )
    stopping: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        alerts = follower.run(lambda: bool(stopping))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if text:
        print(f"checked {follower.checked} records, {alerts} alerts", file=sys.stdout)
    return EXIT_ALERTS if alerts else EXIT_CLEAN
