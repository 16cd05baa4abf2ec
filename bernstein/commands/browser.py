"""``bernstein browser run`` and ``bernstein browser replay``.

    bernstein browser run --flow FLOW.json --url URL --run RUN --session SESSION
        [--allow-origin ORIGIN ...] [--role navigator] [--adapter playwright] [--producer-keys DIR] [--worktree DIR]
        [--timeout S] [--action-timeout S] [--byte-cap N] [--max-actions N]
        [--producer-id ID] [--prefix P] [--json]
    bernstein browser replay RUN [--session S] [--from kafka|DUMP] [--cas s3|none|DIR]
        [--trusted-keys FILE] [--keys-dir DIR] [--prefix P] [--json]

The browser reaches only the session's origins: ``--url``'s origin (if its
host is public) and each ``--allow-origin`` (exactly that scheme, host and
port, which may be private: a local test server). Everything else -- other
origins, ``file:``, private / loopback / link-local addresses -- is refused
at the step that tries it (``NAVIGATION_REFUSED``, the session ends
``refused``); see ``bernstein.producers.netpolicy`` and docs/computer_use.md.

``run`` exit codes: 0 the session ended ok (every action and the result
published); 3 it was refused before anything started (incapable adapter, bad
flow, bad ids), or it ended refused / failed / timed out (that result IS
published, so the stop is journalled), or a usage / service error.

``replay`` exit codes: 0 every session replays and matches its signed head;
1 the run has no browser session; 2 a divergence (the first differing action
is named); 3 usage or unreadable input.

Only ``_run`` / ``_replay`` touch Kafka, S3 and Chromium; ``execute_run``
takes the store, the publisher and the driver factory, so it is unit-tested
with a directory store and a fake driver.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from bernstein.commands.common import add_prefix_flag, command_group, non_negative_int, positive_seconds
from bernstein.producers.activity import ActivityRejected
from bernstein.producers.computer_use.agents import ScriptedAgent, load_flow
from bernstein.producers.computer_use.boundary import DriverFactory
from bernstein.producers.computer_use.budget import DEFAULT_RUN_BYTE_CAP
from bernstein.producers.computer_use.capability import CapabilityRefusal, require_computer_use_capable
from bernstein.producers.computer_use.errors import FlowError
from bernstein.producers.computer_use.session import DEFAULT_MAX_ACTIONS, ActionPublisher, ComputerUseSession, SessionOutcome
from bernstein.producers.identity import ProducerIdMismatch, add_producer_flags, producer_from_args
from bernstein.producers.netpolicy import OriginPolicy, TargetRefused
from bernstein.substrate.cas import BlobStore
from bernstein.substrate.exit_codes import EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_OK, EXIT_REFUSED
from bernstein.substrate.keys import ProducerKeys
from bernstein.verifier.browser_replay import ReplayNotFound, ReplayResult, render_lines, replay_run, replay_sessions


def register(subparsers: Any) -> None:
    commands = command_group(
        subparsers,
        "browser",
        help="browser / computer-use sessions: every action anchored, signed, replayable",
        metavar="<browser-command>",
    )

    run = commands.add_parser(
        "run",
        help="drive a browser session with a scripted agent and publish every action",
        description="Run a flow file through a scripted external agent in headless Chromium. Each action is anchored to "
        "its pre-action screenshot and accessibility snapshot (stored in the CAS), signed, and published; the session "
        "ends with one browser activity result naming the head anchor.",
    )
    run.add_argument("--flow", type=Path, required=True, help="flow file (JSON list of actions)")
    run.add_argument(
        "--url",
        default="",
        help="base URL substituted for {url} in the flow's targets; its origin is the session's (public hosts only)",
    )
    run.add_argument(
        "--allow-origin",
        dest="allow_origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also allow this exact origin (scheme://host:port), even on a private or loopback address; repeatable",
    )
    run.add_argument("--run", dest="run_id", required=True, metavar="RUN", help="run id to publish into")
    run.add_argument("--session", dest="session_id", required=True, metavar="SESSION", help="session id (= the browser stage id)")
    run.add_argument("--role", default="navigator", help="role publishing the session (default: navigator)")
    run.add_argument("--adapter", default="playwright", help="computer-use adapter (default: playwright)")
    run.add_argument("--worktree", type=Path, default=Path.cwd(), help="worktree for profiles and the byte ledger (default: .)")
    run.add_argument(
        "--timeout", type=positive_seconds, default=None, metavar="S", help="session timeout in seconds (default: none)"
    )
    run.add_argument(
        "--action-timeout", type=positive_seconds, default=5.0, metavar="S", help="per-action driver timeout (default: 5)"
    )
    run.add_argument(
        "--byte-cap",
        type=non_negative_int,
        default=DEFAULT_RUN_BYTE_CAP,
        metavar="N",
        help="screenshot bytes per run (default: 64 MiB)",
    )
    run.add_argument(
        "--max-actions",
        type=non_negative_int,
        default=DEFAULT_MAX_ACTIONS,
        metavar="N",
        help=f"action budget (default: {DEFAULT_MAX_ACTIONS})",
    )
    add_producer_flags(run, id_help="worker identity; must be the producer key's name (default: that name)")
    add_prefix_flag(run)
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.set_defaults(func=_run)

    replay = commands.add_parser(
        "replay",
        help="replay a run's browser sessions offline: re-hash, recompute every anchor, check signatures and the head",
        description="Walk the run's journalled computer-use actions and the CAS; never re-runs the agent.",
    )
    replay.add_argument("run_id", metavar="RUN")
    replay.add_argument("--session", dest="session_id", default=None, help="replay only this session")
    replay.add_argument("--from", dest="source", default="kafka", metavar="kafka|DUMP", help="a live cluster or a dump directory")
    replay.add_argument("--cas", default=None, metavar="s3|none|DIR", help="content store (default: s3, or <dump>/cas)")
    replay.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        metavar="FILE",
        help="pinned keys (default: what `bernstein keys trust` would export here: the scheduler's key ring and the "
        "producers of $BERNSTEIN_ROLES)",
    )
    replay.add_argument(
        "--keys-dir", type=Path, default=None, help="the scheduler's key directory, used when --trusted-keys is absent"
    )
    add_prefix_flag(replay)
    replay.add_argument("--json", action="store_true", help="print the result as JSON")
    replay.set_defaults(func=_replay)


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    """The thin shell: gate, then this producer's keys and the emitter, then ``execute_run``."""
    try:
        require_computer_use_capable(args.adapter)  # before keys, Kafka or any browser
    except CapabilityRefusal as exc:
        return _refused(exc.code, exc.message, sys.stderr, suggested=exc.suggested_adapters)
    from bernstein.producers.computer_use.playwright_driver import PlaywrightDriver
    from bernstein.producers.computer_use.session import EmitterPublisher
    from bernstein.producers.emitter import Emitter
    from bernstein.substrate.config import Settings

    try:
        policy = session_policy(args)
    except TargetRefused as exc:
        return _refused(exc.code, exc.message, sys.stderr)
    keys = producer_from_args(args)
    factory = PlaywrightDriver.factory(policy=policy, action_timeout_ms=int(args.action_timeout * 1000))
    with Emitter.from_settings(Settings.load(prefix=args.prefix), producer=keys) as emitter:
        emitter.require_topic()  # before the browser starts: no submissions topic, nothing to do (E_TOPIC_MISSING)
        return execute_run(args, store=emitter.store, publisher=EmitterPublisher(emitter), keys=keys, driver_factory=factory)


def session_policy(args: argparse.Namespace) -> OriginPolicy:
    """``--url``'s origin plus every ``--allow-origin`` (raises ``TargetRefused`` for a non-http(s) one)."""
    return OriginPolicy.from_urls(args.url, getattr(args, "allow_origin", None) or ())


def execute_run(
    args: argparse.Namespace,
    *,
    store: BlobStore,
    publisher: ActionPublisher,
    keys: ProducerKeys,
    driver_factory: DriverFactory,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Load the flow, run the session, print the summary; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        require_computer_use_capable(args.adapter)
        policy = session_policy(args)
        actions = load_flow(args.flow, base_url=args.url)
        session = ComputerUseSession(
            args.run_id,
            args.session_id,
            keys=keys,
            store=store,
            publisher=publisher,
            worker_id=getattr(args, "producer_id", None),
            worktree=args.worktree,
            role=args.role,
            adapter=args.adapter,
            byte_cap=args.byte_cap,
            max_actions=args.max_actions,
            timeout=args.timeout,
            navigation=policy,
        )
    except CapabilityRefusal as exc:
        return _refused(exc.code, exc.message, err, suggested=exc.suggested_adapters)
    except (FlowError, ActivityRejected, TargetRefused, ProducerIdMismatch) as exc:
        return _refused(exc.code, exc.message, err)
    except ValueError as exc:
        return _refused("INVALID_ARGUMENT", str(exc), err)
    outcome = session.run(ScriptedAgent(actions), driver_factory)
    if outcome.error is not None:
        print(f"browser session stopped: {outcome.error.code}: {outcome.error.message}", file=err)
    _print_outcome(args, outcome, out)
    return EXIT_OK if outcome.ok else EXIT_REFUSED


def _refused(code: str, message: str, err: TextIO, *, suggested: tuple[str, ...] = ()) -> int:
    hint = f" (suggested adapters: {', '.join(suggested)})" if suggested else ""
    print(f"browser refused: {code}: {message}{hint} (nothing published)", file=err)
    return EXIT_REFUSED


def _print_outcome(args: argparse.Namespace, outcome: SessionOutcome, out: TextIO) -> None:
    summary = {
        "run_id": outcome.run_id,
        "session_id": outcome.session_id,
        "kind": "browser",
        "terminal_state": outcome.activity_terminal_state.value,
        "computer_use_state": outcome.terminal_state.value,
        "reason_code": outcome.reason_code,
        "actions": outcome.action_count,
        "head_anchor": outcome.head_anchor,
        "artifact_hash": outcome.result.artifact_hash,
        "landed": outcome.result_landed,
    }
    if args.json:
        print(json.dumps(summary, sort_keys=True), file=out)
        return
    headline = "published browser session" if outcome.ok else f"published {outcome.terminal_state.value} browser session"
    print(f"{headline}: run={outcome.run_id} session={outcome.session_id} [browser]", file=out)
    for record in outcome.records:
        print(f"  action {record.index} {record.action.kind} anchor {record.anchor}", file=out)
    print(f"  {outcome.action_count} actions, head {outcome.head_anchor}", file=out)
    print(f"  {outcome.activity_terminal_state.value}/{outcome.reason_code}, artifact {outcome.result.artifact_hash}", file=out)
    print(f"  landed at {outcome.result_landed}", file=out)


# ---------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------


def _replay(args: argparse.Namespace) -> int:
    from bernstein.commands.common import UsageError, settings_from, store_from, trusted_from
    from bernstein.verifier.sources import DumpSource

    settings = settings_from(args)
    trusted = trusted_from(args.trusted_keys, args.keys_dir)
    source: Any
    if args.source == "kafka":
        from bernstein.substrate.kafka import require_bootstrap
        from bernstein.verifier.kafka_source import KafkaSource

        source = KafkaSource(require_bootstrap(settings.kafka_bootstrap), settings.topics)
        cas = store_from(args.cas, settings)
    else:
        dump = Path(args.source)
        source = DumpSource(dump)
        cas = store_from(args.cas, settings, default_dir=dump / "cas")
    if cas is None:
        raise UsageError("replay re-hashes the stored screenshots: pass --cas s3 or a CAS directory")
    return execute_replay(args, source=source, cas=cas, trusted=trusted)


def execute_replay(args: argparse.Namespace, *, source: Any, cas: BlobStore, trusted: Any, out: TextIO | None = None) -> int:
    """Replay and print; returns 0 ok, 1 not found, 2 divergence."""
    out = out or sys.stdout
    try:
        if args.session_id is not None:
            results: tuple[ReplayResult, ...] = (
                replay_run(args.run_id, source=source, cas=cas, trusted=trusted, session_id=args.session_id),
            )
        else:
            results = replay_sessions(args.run_id, source=source, cas=cas, trusted=trusted)
    except ReplayNotFound as exc:
        if args.json:
            print(json.dumps({"run_id": args.run_id, "found": False, "reason": exc.message}, sort_keys=True), file=out)
        else:
            print(f"NOT FOUND -- {exc.message}", file=out)
        return EXIT_NOT_FOUND
    ok = all(r.ok for r in results)
    if args.json:
        print(
            json.dumps(
                {"run_id": args.run_id, "found": True, "ok": ok, "sessions": [r.to_json() for r in results]},
                indent=2,
                sort_keys=True,
            ),
            file=out,
        )
        return EXIT_OK if ok else EXIT_MISMATCH
    for result in results:
        print(f"replay run {result.run_id} session {result.session_id}", file=out)
        for line in render_lines(result):
            print(f"  {line}", file=out)
        if result.divergence is None:
            print(f"  replayed -- {result.action_count} actions reconstruct the signed head {result.head_anchor}", file=out)
        else:
            d = result.divergence
            print(f"  DIVERGED at action {d.action_index} ({d.reason.value}): {d.message}", file=out)
            print(f"    expected anchor  {d.expected_anchor or '-'}", file=out)
            print(f"    recomputed       {d.recomputed_anchor or '-'}", file=out)
    return EXIT_OK if ok else EXIT_MISMATCH
