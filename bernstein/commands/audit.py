"""``bernstein audit follow``: check the audit topic as it grows and print alerts (docs/operations.md).

Exit codes: 0 no alert (``--once``: everything up to the end checked; following: stopped
cleanly by SIGTERM/SIGINT); 2 at least one alert was raised, or a tamper finding is still
latched; 3 a usage error, an unreadable keys or checkpoint file, or Kafka unreachable or
refusing (typed, never a traceback).

``bernstein audit ack`` acknowledges a latched tamper finding (``bernstein.verifier.follow.latch``),
``bernstein audit latches`` lists those not acknowledged yet, and ``bernstein audit rules``
prints the shipped alert rules with their runbook links under another base
(``bernstein.verifier.follow.rules``). None of the three talks to Kafka.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from bernstein.commands.common import (
    UsageError,
    add_keys_flag,
    add_prefix_flag,
    command_group,
    metrics_port,
    non_negative_int,
    settings_from,
    trusted_from,
)
from bernstein.substrate.exit_codes import EXIT_ALERTS
from bernstein.substrate.exit_codes import EXIT_OK as EXIT_CLEAN
from bernstein.substrate.kafka import require_bootstrap
from bernstein.substrate.keys import KeyStoreError, TrustedKeys
from bernstein.substrate.ops_http import DEFAULT_HOST, OpsServer
from bernstein.verifier.facts import A_RECORD
from bernstein.verifier.follow.alerts import Alert, AlertKind
from bernstein.verifier.follow.checker import Policy
from bernstein.verifier.follow.checkpoint import CheckpointStore
from bernstein.verifier.follow.consumer import Follower, FollowOptions
from bernstein.verifier.follow.latch import TAMPER, AckLog, LatchStore, NotLatched, acknowledge, pending
from bernstein.verifier.follow.rules import DEFAULT_RUNBOOK_BASE, check_base, rebase, shipped_rules


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
        "--witness",
        type=Path,
        default=None,
        metavar="KEYDIR",
        help="also act as a witness with the key in KEYDIR (`bernstein witness init`): fold each journal partition's "
        "Merkle log, hold every signed tree head of the checkpoints topic to it (alerts log_head_mismatch, "
        "log_note_invalid) and cosign the heads it reproduces into <state>/witness/cosigned/<partition>.checkpoint",
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
    follow.add_argument(
        "--metrics-port",
        type=metrics_port,
        default=None,
        help="serve /metrics (Prometheus), /healthz and /readyz on this port (9310 in the shipped unit and the docs; "
        "0: any free port, printed on stderr). Default: no server (docs/operations.md)",
    )
    follow.add_argument(
        "--metrics-host",
        default=DEFAULT_HOST,
        help=f"address the metrics server listens on (default {DEFAULT_HOST}; 0.0.0.0 for every interface)",
    )
    follow.set_defaults(func=_follow)

    latchable = ", ".join(sorted(k.value for k in TAMPER))
    ack = audit_sub.add_parser(
        "ack",
        help="acknowledge a latched tamper finding (the alert on it stops; exit 0 acked, 3 nothing latched)",
        description="A tamper-class finding of `audit follow` stays latched (in the follower's state directory, "
        "and as the gauge bernstein_audit_tamper_latched) until it is acknowledged here, by the partition and kind "
        "the alert and the follower's output name. The ack is appended to <state>/acks.jsonl (when, who, why, the "
        "finding's evidence) and printed as that JSON line; the follower clears the latch at its next tick or start. "
        "A new finding of the same kind latches again. Reads and writes local files only.",
    )
    add_prefix_flag(ack)
    ack.add_argument("--state", type=Path, default=None, help="the follower's state directory (as `audit follow --state`)")
    ack.add_argument(
        "--partition", type=non_negative_int, required=True, help="the audit partition (the alert's partition label)"
    )
    ack.add_argument("--kind", required=True, help=f"the finding's kind (the alert's kind label): one of {latchable}")
    ack.add_argument("--reason", required=True, help="why it is acknowledged: what was found and done (kept in the ack log)")
    ack.add_argument("--by", default=None, help="who acknowledges (default: $SUDO_USER, else the login name of this process)")
    ack.set_defaults(func=_ack)

    latches = audit_sub.add_parser(
        "latches",
        help="list the tamper findings latched and not acknowledged yet (JSON lines; exit 0)",
        description="Each latched finding of the follower state directory not acknowledged yet, one JSON line: "
        "partition, kind, since, findings, the first and last alert line, and the `audit ack` command to type.",
    )
    add_prefix_flag(latches)
    latches.add_argument("--state", type=Path, default=None, help="the follower's state directory (as `audit follow --state`)")
    latches.set_defaults(func=_latches)

    rules = audit_sub.add_parser(
        "rules",
        help="print the Prometheus alert rules with runbook links under --runbook-base",
        description="Prints ops/prometheus/alerts.yml (or --rules FILE) with every runbook_url under --runbook-base "
        f"(the alert's #anchor kept; default base {DEFAULT_RUNBOOK_BASE}): point the links at where you host "
        "docs/operations.md. Nothing else of the rules changes.",
    )
    rules.add_argument(
        "--runbook-base",
        default=DEFAULT_RUNBOOK_BASE,
        help="absolute URL of the runbook page; each alert links to <base>#<alert name in lower case>",
    )
    rules.add_argument(
        "--rules", type=Path, default=None, help="the rules file (default: the shipped ops/prometheus/alerts.yml, in the package)"
    )
    rules.add_argument("--out", type=Path, default=None, help="write here instead of stdout")
    rules.set_defaults(func=_rules)


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
    witness = None
    if args.witness is not None:
        from bernstein.verifier.witness.keys import load_witness_key

        try:
            witness = load_witness_key(args.witness)
        except KeyStoreError as exc:
            raise UsageError(f"--witness {args.witness}: {exc} (make one with `bernstein witness init`)") from None
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
        witness=witness,
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
        notice=progress if args.progress else _latch_notice,
    )
    server = None
    if args.metrics_port is not None:
        from bernstein.verifier.follow.metrics import FollowerMetrics, FollowerProbe

        server = OpsServer(
            FollowerMetrics(follower).registry, FollowerProbe(follower), host=args.metrics_host, port=args.metrics_port
        ).start()
        progress({"event": "metrics_listening", "url": server.url, "port": server.port})
    stopping: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        alerts = follower.run(lambda: bool(stopping))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if server is not None:
            server.close()
    if text:
        print(f"checked {follower.checked} records, {alerts} alerts", file=sys.stdout)
    return EXIT_ALERTS if alerts or follower.held_at_end else EXIT_CLEAN


def _latch_notice(line: dict[str, Any]) -> None:
    """A latch held at start, latched or acknowledged, as one line on stderr (without --progress)."""
    where = f"{line['topic']}[{line['partition']}] {line['kind']}"
    if line["event"] == "latch_acknowledged":
        text = f"latch cleared: {where}, acknowledged by {line['by']}: {line['reason']}"
    else:
        held = "latched" if line["event"] == "latched" else "still latched"
        text = (
            f"{held}: {where} since {line['since']} ({line['findings']} finding(s), the first at offset "
            f"{line['first_offset']}); acknowledge with `{line['ack']}`"
        )
    sys.stderr.write(f"bernstein audit follow: {text}\n")
    sys.stderr.flush()


def _latch_state(args: argparse.Namespace) -> tuple[str, str, LatchStore, AckLog]:
    """(prefix, audit topic, latch files, ack log) of the follower state directory the flags name."""
    topics = settings_from(args).topics
    directory = _state_dir(args, topics.prefix)
    if not directory.is_dir():
        raise UsageError(
            f"no follower state directory {directory} (pass the --state the follower runs with, and the same --prefix)"
        )
    return topics.prefix, topics.audit, LatchStore(directory), AckLog(directory)


def _who(given: str | None) -> str:
    if given is not None:
        return given
    sudo = os.environ.get("SUDO_USER")
    if sudo:
        return sudo
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        raise UsageError("cannot tell who you are from the environment: pass --by NAME") from None


def _ack(args: argparse.Namespace) -> int:
    try:
        kind = AlertKind(args.kind)
    except ValueError:
        kind = None
    if kind not in TAMPER:
        raise UsageError(f"--kind {args.kind}: not a kind that latches; one of {', '.join(sorted(k.value for k in TAMPER))}")
    assert kind is not None
    prefix, topic, store, log = _latch_state(args)
    acks = log.read()
    try:
        made = acknowledge(
            store.load(topic, args.partition),
            kind,
            by=_who(args.by),
            reason=args.reason,
            now_ms=int(time.time() * 1000),
            log=acks,
        )
    except NotLatched as exc:
        held = [
            f"partition {latches.partition} {latch.kind.value}"
            for partition in store.partitions(topic)
            for latches in [store.load(topic, partition)]
            for latch in pending(latches, acks)
        ]
        listed = f"latched in {store.directory}: {', '.join(held)}" if held else f"nothing is latched in {store.directory}"
        raise UsageError(f"{exc.message} ({listed})") from None
    log.append(made)
    print(made.line())
    return EXIT_CLEAN


def _latches(args: argparse.Namespace) -> int:
    prefix, topic, store, log = _latch_state(args)
    acks = log.read()
    for partition in store.partitions(topic):
        for latch in pending(store.load(topic, partition), acks):
            line = {"topic": topic, "partition": partition, **latch.to_json()}
            line["ack"] = (
                f"bernstein audit ack --prefix {shlex.quote(prefix)} --state {shlex.quote(str(store.directory))} "
                f"--partition {partition} "
                f"--kind {latch.kind.value} --reason TEXT"
            )
            print(json.dumps(line, separators=(",", ":")))
    return EXIT_CLEAN


def _rules(args: argparse.Namespace) -> int:
    try:
        base = check_base(args.runbook_base)
    except ValueError as exc:
        raise UsageError(f"--runbook-base: {exc}") from None
    path = args.rules or shipped_rules()
    if path is None:
        raise UsageError("no ops/prometheus/alerts.yml beside this installation: pass --rules PATH (the file of the release)")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the rules {path}: {exc}") from None
    try:
        rebased = rebase(text, base)
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None
    if args.out is None:
        sys.stdout.write(rebased)
        return EXIT_CLEAN
    try:
        Path(args.out).write_text(rebased, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc}") from None
    return EXIT_CLEAN
