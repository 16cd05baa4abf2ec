"""``bernstein scheduler run``: one deterministic scheduler per input partition.

Exit codes: 0 after a clean stop (SIGTERM/SIGINT, ``--idle-exit``); 3 on a usage,
configuration or service error, or when Kafka errors keep recurring
(``E_SCHEDULER_FAILED``); ``EXIT_FENCED`` (7) when another instance took the
partition over, or when it was paused and cannot prove it still owns it: this one
committed nothing more and stopped, and must not be restarted blindly (the newer
instance owns the partition now). With ``--all-partitions`` the supervisor starts a
child that died again (``restart_delay``) and exits with the worst final child's code;
a child killed by a signal counts as ``128 + signal`` (137 for SIGKILL), as a shell
reports it. With ``--group`` the process exits 3 when a partition's scheduler failed
(the group moves its partitions to the other processes) and 7 when one kept being
fenced while the group assigned it here.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Final

from bernstein.commands.common import (
    UsageError,
    add_keys_flag,
    add_prefix_flag,
    command_group,
    keys_from,
    metrics_port,
    settings_from,
)
from bernstein.consumers.core.model import (
    DEFAULT_LOG_NAME,
    DEFAULT_MAX_OUTPUT_BYTES,
    LOG_NAME_RULE,
    MAX_CHECKPOINT_EVERY,
    MAX_LOG_EPOCH,
    MIN_MAX_OUTPUT_BYTES,
    OUTPUT_FRAMING_ALLOWANCE,
    AuditKeyVersion,
    Lifetime,
    SchedulerConfig,
    SealKey,
    is_valid_log_name,
)
from bernstein.consumers.core.native import NATIVE_LABEL, NativeSchedulerCore, SchedulerCoreLike, choose_core
from bernstein.consumers.group import DEFAULT_SESSION_TIMEOUT_MS, GroupFailed, GroupScheduler
from bernstein.consumers.manifest import load_manifest
from bernstein.consumers.metrics import GroupProbe, SchedulerMetrics, ShellProbe, core_name
from bernstein.consumers.shell import SchedulerFenced, SchedulerShell, ShellOptions
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.config import Topics
from bernstein.substrate.exit_codes import EXIT_FENCED, EXIT_INTERNAL, EXIT_OK, EXIT_SIGNALLED, EXIT_USAGE
from bernstein.substrate.kafka import (
    TopicMissing,
    client_config,
    connect_timeout,
    ensure_topics,
    is_authorization_error,
    not_authorized,
    partition_count,
    require_bootstrap,
    unreachable,
)
from bernstein.substrate.keys import InstallKeys, KeyPurpose, RingKey
from bernstein.substrate.logs import LOG_FORMATS, EventLog, install_json_logging, log_format
from bernstein.substrate.ops_http import DEFAULT_HOST, OpsServer
from bernstein.substrate.topic_policy import require_history_kept

DEFAULT_ROLES = Path("config") / "roles.toml"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    scheduler_sub = command_group(sub, "scheduler", help="run the deterministic scheduler")
    run = scheduler_sub.add_parser(
        "run",
        help="validate, chain, refuse and audit one partition of submissions (exactly once)",
        description="Consume <prefix>.activity.submissions (read_committed) and write journal, refusals, "
        "audit and dead letters in one Kafka transaction per batch. Stops cleanly on SIGTERM/SIGINT. "
        f"Exits {EXIT_FENCED} when a newer instance took the partition over (one owner per partition).",
    )
    add_prefix_flag(run)
    add_keys_flag(run)
    which = run.add_mutually_exclusive_group()
    which.add_argument("--partition", type=int, default=None, help="the input partition this process owns (default 0)")
    which.add_argument(
        "--all-partitions",
        action="store_true",
        help="start one child process per partition on this host and supervise them (a child that dies is started again)",
    )
    which.add_argument(
        "--group",
        action="store_true",
        help="join the consumer group <prefix>.scheduler and run the partitions it assigns to this process: start it on "
        "any number of machines; a process that dies or stops hands its partitions to the others (docs/scheduler.md, 'Failover across machines')",
    )
    run.add_argument("--roles", type=Path, default=None, help="roles manifest (default: $BERNSTEIN_ROLES or config/roles.toml)")
    run.add_argument(
        "--create-topics",
        action="store_true",
        help="create the prefix's missing topics first, as `bernstein topic create` does (a local or test deployment). "
        "Without it a missing topic stops the scheduler (E_TOPIC_MISSING, exit 3): a mistyped prefix starts nothing",
    )
    run.add_argument("--seal-every", type=int, default=1000, help="sign a seal after every N entries of a run (default 1000)")
    run.add_argument(
        "--checkpoint-every",
        type=int,
        default=MAX_CHECKPOINT_EVERY,
        help=f"sign a partition checkpoint once N audit records follow the last one (1 to {MAX_CHECKPOINT_EVERY}, "
        f"default {MAX_CHECKPOINT_EVERY}); one also follows every final seal (docs/checkpoints.md)",
    )
    run.add_argument(
        "--log-name",
        default=DEFAULT_LOG_NAME,
        help=f"the deployment's name in every partition log's checkpoint origin, '<name>/<input topic>/<partition>/e<epoch>' "
        f"(default {DEFAULT_LOG_NAME!r}); witnesses and proofs know the log by it, so keep it for the deployment's life "
        "(docs/checkpoints.md, 'The Merkle log')",
    )
    run.add_argument(
        "--log-epoch",
        type=int,
        default=1,
        help="the logs' epoch in the origin (default 1): raise it only when the deployment's topics start over, so a "
        "witness sees new logs rather than a rewritten history",
    )
    run.add_argument(
        "--max-output-bytes",
        type=int,
        default=DEFAULT_MAX_OUTPUT_BYTES,
        help=f"largest output record (key + value + headers) the scheduler writes; an input whose journal record "
        f"would be larger is dead-lettered (OUTPUT_TOO_LARGE). Every output topic's max.message.bytes must be at least "
        f"this + {OUTPUT_FRAMING_ALLOWANCE} (checked at start). Default {DEFAULT_MAX_OUTPUT_BYTES}",
    )
    run.add_argument(
        "--accept-undeclared-sizes",
        action="store_true",
        help="migration only: accept ComputerUseAction.v1 inputs, which declare no blob sizes (else refused: "
        "EVIDENCE_SIZES_UNDECLARED; an unsigned ActivitySubmission.v1 is refused as SUBMISSION_UNSIGNED either way). "
        "The per-run evidence cap does not "
        'hold for them; the verifier still sums their real sizes (docs/decisions.md, "The evidence cap")',
    )
    run.add_argument("--batch-max", type=int, default=500, help="records per transaction at most (default 500)")
    run.add_argument("--batch-ms", type=int, default=20, help="wait for the first record of a batch, ms (default 20)")
    run.add_argument("--idle-exit", type=float, default=None, help="exit after this many idle seconds (tests, demos)")
    run.add_argument(
        "--session-timeout-ms",
        type=int,
        default=DEFAULT_SESSION_TIMEOUT_MS,
        help=f"with --group: how long the group waits for a silent process before its partitions move to the others "
        f"(default {DEFAULT_SESSION_TIMEOUT_MS}; the broker allows group.min.session.timeout.ms to "
        "group.max.session.timeout.ms)",
    )
    run.add_argument("--progress-every", type=float, default=5.0, help="seconds between progress lines (default 5)")
    run.add_argument(
        "--quarantine",
        type=_quarantined_offset,
        action="append",
        default=[],
        metavar="[journal:|submissions:]OFFSET",
        help="journal:OFFSET (or OFFSET): skip this journal offset of the partition when rebuilding state, a record an "
        "operator inspected and found not written by this scheduler (see E_STATE_CORRUPTED in the README). "
        "submissions:OFFSET: dead-letter this input offset without reading it (INPUT_QUARANTINED). Repeatable; needs "
        "--partition. Audit and checkpoint records that do not verify are skipped (and named) without it",
    )
    run.add_argument(
        "--check-rewind",
        action="store_true",
        help="after each aborted transaction, when the state is put back to the last commit in memory (undo log), "
        "also rebuild it from Kafka and stop (exit 3) unless both are the same bytes: a self-check for tests and "
        'audits that costs a rebuild per abort (docs/scheduler.md, "Snapshots and restart")',
    )
    run.add_argument(
        "--core",
        choices=("auto", "native", "python"),
        default="auto",
        help="step function: the Rust core (byte-identical, ~10x faster) when built, else the Python reference "
        "(default auto; $BERNSTEIN_CORE overrides)",
    )
    run.add_argument(
        "--metrics-port",
        type=metrics_port,
        default=None,
        help="serve /metrics (Prometheus), /healthz and /readyz on this port (0: any free port, logged at start; "
        "with --all-partitions partition p serves on PORT+p). Default: no server (docs/operations.md)",
    )
    run.add_argument(
        "--metrics-host",
        default=DEFAULT_HOST,
        help=f"address the metrics server listens on (default {DEFAULT_HOST}; 0.0.0.0 for every interface)",
    )
    run.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=None,
        help="stderr lines as text (default) or one JSON object per line ($BERNSTEIN_LOG_FORMAT sets the default)",
    )
    run.set_defaults(func=_run)


def _quarantined_offset(text: str) -> tuple[str, int]:
    """``--quarantine`` takes ``OFFSET``, ``journal:OFFSET`` or ``submissions:OFFSET``; another topic is refused with
    what to do instead."""
    topic, colon, offset = text.rpartition(":")
    topic = topic if colon else "journal"
    if topic not in ("journal", "submissions"):
        raise argparse.ArgumentTypeError(
            f"--quarantine names journal or submissions offsets, not {topic!r}: an audit or checkpoint record the "
            "scheduler cannot vouch for is skipped and named without it (docs/scheduler.md, 'When the scheduler will not start')"
        )
    try:
        value = int(offset)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--quarantine takes OFFSET, journal:OFFSET or submissions:OFFSET, not {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"--quarantine takes a non-negative offset, not {text!r}")
    return topic, value


def scheduler_config(
    keys: InstallKeys,
    roles_path: Path,
    seal_every: int,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    checkpoint_every: int = MAX_CHECKPOINT_EVERY,
    *,
    accept_undeclared_sizes: bool = False,
    log_name: str = DEFAULT_LOG_NAME,
    log_epoch: int = 1,
) -> SchedulerConfig:
    if seal_every < 1:
        raise UsageError("--seal-every must be at least 1")
    if not 1 <= checkpoint_every <= MAX_CHECKPOINT_EVERY:
        raise UsageError(f"--checkpoint-every must be 1 to {MAX_CHECKPOINT_EVERY}")
    if not is_valid_log_name(log_name):
        raise UsageError(f"--log-name {log_name!r}: {LOG_NAME_RULE}")
    if not 1 <= log_epoch <= MAX_LOG_EPOCH:
        raise UsageError(f"--log-epoch must be 1 to {MAX_LOG_EPOCH}")
    if max_output_bytes < MIN_MAX_OUTPUT_BYTES:
        raise UsageError(f"--max-output-bytes must be at least {MIN_MAX_OUTPUT_BYTES}")
    manifest = load_manifest(roles_path)
    ring = keys.key_ring
    return SchedulerConfig(
        roles=manifest.roles,
        signer=keys.signer,
        audit_key=keys.audit.secret,
        audit_key_id=keys.audit.key_id,
        seal_every=seal_every,
        max_output_bytes=max_output_bytes,
        checkpoint_every=checkpoint_every,
        accept_undeclared_sizes=accept_undeclared_sizes,
        log_name=log_name,
        log_epoch=log_epoch,
        producers=manifest.producers,
        # Every ring key with its private part, oldest first: the scheduler signs and MACs each input's
        # outputs with the key valid at the input's timestamp, and its rebuild checks records written
        # under retired keys. A revoked audit key keeps its secret (verifiers need it for the records
        # before the revocation); the key that took over its range is newer, so it is never chosen again.
        seal_keys=tuple(SealKey(k.signer, _lifetime(k)) for k in ring.of(KeyPurpose.SEAL) if k.signer is not None),
        audit_keys=tuple(
            AuditKeyVersion(k.secret, k.key_id, _lifetime(k)) for k in ring.of(KeyPurpose.AUDIT) if k.secret is not None
        ),
    )


def _lifetime(key: RingKey) -> Lifetime:
    return Lifetime(key.validity.valid_from_ms, key.validity.valid_until_ms)


NO_PRODUCERS_WARNING: Final = (
    "WARNING: the roles manifest registers no producer ([[producers]]): every submission will be refused "
    "(SUBMISSION_UNSIGNED or PRODUCER_KEY_UNKNOWN). Fix: on each producer host run `bernstein keys init --producer "
    "NAME`, then add a [[producers]] entry with that name, its roles and its public key to {path} and restart the "
    "scheduler (docs/security.md, 'Producers are pinned')."
)


def startup_report(
    config: SchedulerConfig, core: SchedulerCoreLike, roles_path: Path, core_label: str | None = None
) -> list[str]:
    """What the scheduler logs at start: registered producers and keys, key rings and the core that runs
    (``core_label``: ``choose_core``'s description, which says why the Python core runs when it fell back)."""
    producers = config.producers.producers
    lines = [
        f"{len(producers)} producer(s) registered with {len(config.producers.by_key)} key(s) from {roles_path}"
        + (f": {', '.join(sorted(producers))}" if producers else ""),
        f"seal keys: {len(config.seal_keys) or 1}, audit keys: {len(config.audit_keys) or 1} "
        f"(current seal {config.signer.key_id}, audit {config.audit_key_id})",
        f"core: {core_label or (NATIVE_LABEL if isinstance(core, NativeSchedulerCore) else 'python reference')}",
    ]
    if not producers:
        lines.append(NO_PRODUCERS_WARNING.format(path=roles_path))
    return lines


def _roles_path(args: argparse.Namespace) -> Path:
    return args.roles or Path(os.environ.get("BERNSTEIN_ROLES") or DEFAULT_ROLES)


STARTUP_EVENTS: Final = ("producers_registered", "keys", "core", "no_producers")
"""The ``event`` of each ``startup_report`` line in JSON logs."""


def _run(args: argparse.Namespace) -> int:
    """``scheduler run``; with ``--log-format json`` its errors are JSON lines too (the exit codes stay)."""
    json_logs = log_format(args.log_format) == "json"
    partition = None if args.all_partitions or args.group else (args.partition or 0)
    log = EventLog(
        "bernstein.scheduler",
        json=json_logs,
        text_prefix="scheduler group: " if args.group else f"scheduler p{partition}: ",
        fields={"partition": partition},
    )
    if not json_logs:
        return _run_logged(args, log)
    install_json_logging(log)
    try:
        return _run_logged(args, log)
    except BernsteinError as exc:
        log.emit("error", exc.message, level="error", code=exc.code)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the cli's last line of defence, as a JSON line
        if getattr(args, "debug", False) or os.environ.get("BERNSTEIN_DEBUG"):
            raise
        log.emit(
            "internal_error",
            f"{type(exc).__name__}: {exc} (a defect; rerun with --debug and report it)",
            level="error",
            exception=type(exc).__name__,
        )
        return EXIT_INTERNAL


def _run_logged(args: argparse.Namespace, log: EventLog) -> int:
    if args.group:
        for flag, value in (("--quarantine", args.quarantine), ("--idle-exit", args.idle_exit)):
            if value not in (None, []):
                raise UsageError(
                    f"{flag} is not available with --group (it is about one partition or one process's own loop): "
                    "use --partition N for it"
                )
    settings = settings_from(args)
    bootstrap = require_bootstrap(settings.kafka_bootstrap)
    config = scheduler_config(
        keys_from(args),
        _roles_path(args),
        args.seal_every,
        args.max_output_bytes,
        args.checkpoint_every,
        accept_undeclared_sizes=args.accept_undeclared_sizes,
        log_name=args.log_name,
        log_epoch=args.log_epoch,
    )
    if args.create_topics:
        ensure_topics(bootstrap, settings.topics)
    else:
        require_topics(bootstrap, settings.topics)
    require_history_kept(
        bootstrap, settings.topics.all, compacted=(settings.topics.state,), submissions=settings.topics.submissions
    )
    if args.all_partitions:
        if args.quarantine:
            raise UsageError("--quarantine names offsets of one partition's topics: use it with --partition")
        return _supervise(args, partition_count(bootstrap, settings.topics.submissions))
    if args.group:
        return _run_group(args, log, bootstrap, settings.topics, config)
    partition = args.partition or 0
    count = partition_count(bootstrap, settings.topics.submissions)
    if not 0 <= partition < count:
        raise UsageError(f"--partition {partition}: {settings.topics.submissions} has partitions 0..{count - 1}")
    core, core_label = choose_core(config, partition, args.core, environ=os.environ)
    _log_startup(log, config, core, core_label, args)
    shell = _shell(args, log, bootstrap, settings.topics, partition, core)
    server = None
    if args.metrics_port is not None:
        metrics = SchedulerMetrics(shell, core_label)
        server = _serve_metrics(args, log, metrics.registry, ShellProbe(shell))
    _stop_on_signals(shell.stop)
    try:
        shell.run(idle_exit=args.idle_exit)
    except SchedulerFenced as exc:
        if log.json:
            log.emit("fenced", exc.message, level="error", code=exc.code, error=exc.error)
        else:
            print(f"bernstein: error: {exc.message}", file=sys.stderr)
        return EXIT_FENCED
    finally:
        if server is not None:
            server.close()
    return EXIT_OK


def require_topics(bootstrap: str, topics: Topics) -> None:
    """Every topic of the deployment exists, else ``TopicMissing`` naming them and `bernstein topic create` (exit 3).

    The scheduler creates no topic unless told to (``--create-topics``): like a producer's (``TopicMissing``), a
    mistyped ``--prefix`` would otherwise start a topic set of its own that no producer writes to. Under ACLs a topic
    this principal may not describe is missing to it too (Kafka hides it), so the message names the ACLs as well.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient(client_config(bootstrap, error_cb=errors.append, **{"allow.auto.create.topics": False}))
    try:
        metadata = admin.list_topics(timeout=connect_timeout())
    except KafkaException as exc:
        if is_authorization_error(exc):
            raise not_authorized("list topics") from None
        raise unreachable(exc, bootstrap, errors, admin) from exc
    missing = [name for name in topics.all if name not in metadata.topics]
    if not missing:
        return
    which = (
        f"no topic of prefix {topics.prefix!r} exists"
        if len(missing) == len(topics.all)
        else f"topic(s) {', '.join(missing)} of prefix {topics.prefix!r} do not exist"
    )
    raise TopicMissing(
        f"{which} on Kafka at {bootstrap} (a mistyped --prefix or BERNSTEIN_TOPIC_PREFIX?). The scheduler does not "
        f"create topics: the Kafka admin creates them with `bernstein topic create --prefix {topics.prefix}` (and grants "
        f"this principal their ACLs, `bernstein kafka acls --prefix {topics.prefix}`); a local deployment may pass "
        "--create-topics instead"
    )


def _serve_metrics(args: argparse.Namespace, log: EventLog, registry: Any, probe: Any, scope: str = "") -> OpsServer:
    """``--metrics-port``'s server, started, and the ``metrics_listening`` line naming its address."""
    server = OpsServer(registry, probe, host=args.metrics_host, port=args.metrics_port).start()
    log.emit(
        "metrics_listening",
        f"metrics on {server.url}/metrics (health {server.url}/healthz, ready {server.url}/readyz){scope}",
        url=server.url,
        port=server.port,
    )
    return server


def _stop_on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT ask for a clean stop (the open transactions settle first)."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _log_startup(
    log: EventLog, config: SchedulerConfig, core: SchedulerCoreLike, core_label: str, args: argparse.Namespace
) -> None:
    for event, line in zip(STARTUP_EVENTS, startup_report(config, core, _roles_path(args), core_label), strict=False):
        fields = {"core": core_name(core_label)} if event == "core" else {}
        log.emit(event, line, level="warning" if event == "no_producers" else "info", **fields)


def _shell(
    args: argparse.Namespace,
    log: EventLog,
    bootstrap: str,
    topics: Topics,
    partition: int,
    core: SchedulerCoreLike,
    **group: Any,
) -> SchedulerShell:
    """The shell of one partition as the flags configure it (``group``: consumer-group mode's hooks)."""
    shell = SchedulerShell(
        bootstrap=bootstrap,
        topics=topics,
        partition=partition,
        core=core,
        options=ShellOptions(
            batch_max=args.batch_max,
            batch_timeout=args.batch_ms / 1000,
            progress_every=args.progress_every,
            quarantine=frozenset(offset for topic, offset in args.quarantine if topic == "journal"),
            quarantine_inputs=frozenset(offset for topic, offset in args.quarantine if topic == "submissions"),
            check_rewind=args.check_rewind,
        ),
        **group,
    )
    if log.json:

        def emit(event: str, message: str, level: str, fields: dict[str, Any]) -> None:
            log.emit(event, message, level=level, **{"partition": partition, **fields})  # type: ignore[arg-type]

        shell.emit = emit
    return shell


def _run_group(args: argparse.Namespace, log: EventLog, bootstrap: str, topics: Topics, config: SchedulerConfig) -> int:
    """``--group``: run the partitions the consumer group assigns to this process (``bernstein.consumers.group``)."""
    labels: list[str] = []
    metrics: list[SchedulerMetrics] = []

    def make_shell(partition: int, metadata: Any, still_owned: Any) -> SchedulerShell:
        core, core_label = choose_core(config, partition, args.core, environ=os.environ)
        if not labels:
            labels.append(core_label)
            _log_startup(log, config, core, core_label, args)
        shell = _shell(args, log, bootstrap, topics, partition, core, group_metadata=metadata, still_owned=still_owned)
        if metrics:
            metrics[0].attach(shell)
        return shell

    def log_event(message: str, event: str, level: str, fields: dict[str, Any]) -> None:
        log.emit(event, message, level=level, **fields)  # type: ignore[arg-type]

    group = GroupScheduler(
        bootstrap=bootstrap,
        group_id=f"{topics.prefix}.scheduler",
        input_topic=topics.submissions,
        make_shell=make_shell,
        log=log_event,
        session_timeout_ms=args.session_timeout_ms,
    )

    server = None
    if args.metrics_port is not None:
        core_label = choose_core(config, 0, args.core, environ=os.environ)[1]
        metrics.append(SchedulerMetrics(group.shells, core_label))
        server = _serve_metrics(
            args, log, metrics[0].registry, GroupProbe(group), ": every partition this process runs, labelled partition"
        )
    _stop_on_signals(group.stop)
    try:
        group.run()
    except GroupFailed as exc:
        fenced = group.fenced
        if log.json:
            log.emit("fenced" if fenced else "error", exc.message, level="error", code=exc.code)
        else:
            print(f"bernstein: error: {exc.message}", file=sys.stderr)
        return EXIT_FENCED if fenced else EXIT_USAGE
    finally:
        if server is not None:
            server.close()
    return EXIT_OK


def _supervise(args: argparse.Namespace, partitions: int) -> int:
    """One child per partition; a child that dies is started again (``restart_delay``); SIGTERM is forwarded.

    The exit code is the worst final child's (``supervised_exit``). Several hosts, or failover between them:
    ``--group`` instead (docs/scheduler.md, "Failover across machines").
    """
    base = [sys.executable, "-m", "bernstein"]
    passthrough = []
    for flag in ("prefix", "keys_dir", "roles", "idle_exit"):
        value = getattr(args, flag)
        if value is not None:
            passthrough += [f"--{flag.replace('_', '-')}", str(value)]
    passthrough += ["--seal-every", str(args.seal_every), "--batch-max", str(args.batch_max), "--batch-ms", str(args.batch_ms)]
    passthrough += ["--checkpoint-every", str(args.checkpoint_every)]
    passthrough += ["--max-output-bytes", str(args.max_output_bytes)]
    passthrough += ["--core", args.core]
    if args.log_format is not None:
        passthrough += ["--log-format", args.log_format]
    passthrough += ["--metrics-host", args.metrics_host]
    if args.accept_undeclared_sizes:
        passthrough.append("--accept-undeclared-sizes")
    if args.check_rewind:
        passthrough.append("--check-rewind")

    port = args.metrics_port
    if port and port + partitions - 1 > 65535:
        raise UsageError(f"--metrics-port {port}: partition p serves on {port}+p, past 65535 for {partitions} partitions")

    def metrics(p: int) -> list[str]:
        return [] if port is None else ["--metrics-port", str(port + p if port else 0)]

    def start(p: int) -> Any:
        return subprocess.Popen([*base, "scheduler", "run", "--partition", str(p), *passthrough, *metrics(p)])

    children = {p: start(p) for p in range(partitions)}
    started = dict.fromkeys(children, time.monotonic())
    restarts = dict.fromkeys(children, 0)
    due: dict[int, float] = {}
    """Partitions whose child died, and when it is started again."""
    final: dict[int, int] = {}
    stopping = [False]

    def forward(signum: int, frame: FrameType | None) -> None:
        stopping[0] = True
        for p, child in children.items():
            if p not in final and p not in due:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while len(final) < partitions:
        now = time.monotonic()
        for p, child in children.items():
            if p in final:
                continue
            if p in due:
                if stopping[0]:
                    final[p] = 0  # it was down when the stop came: nothing to stop
                    due.pop(p)
                elif now >= due[p]:
                    due.pop(p)
                    children[p], started[p] = start(p), now
                    print(f"scheduler supervisor: partition {p}: started again (restart {restarts[p]})", file=sys.stderr)
                continue
            code = child.poll()
            if code is None:
                continue
            ran = now - started[p]
            if ran >= _STEADY_S:
                restarts[p] = 0
            delay = restart_delay(code, ran_for=ran, stopping=stopping[0], restarts=restarts[p])
            if delay is None:
                # the SIGTERM forwarded to a child still starting (before its handler was installed) is a clean stop
                final[p] = 0 if stopping[0] and code == -signal.SIGTERM else code
                continue
            restarts[p] += 1
            due[p] = now + delay
            print(
                f"scheduler supervisor: partition {p}: the scheduler exited with {_described(code)} after {ran:.0f}s; "
                f"starting it again in {delay:.0f}s",
                file=sys.stderr,
            )
        time.sleep(_SUPERVISE_POLL_S)
    return supervised_exit([final[p] for p in range(partitions)])


_STEADY_S: Final = 60.0
"""A child that ran this long before it died starts again after the shortest delay."""
_QUICK_FAILURE_S: Final = 10.0
"""A child that exits 3 sooner than this after its start met a configuration error: starting it again repeats it."""
_SUPERVISE_POLL_S: Final = 0.2


def restart_delay(code: int, *, ran_for: float, stopping: bool, restarts: int) -> float | None:
    """Seconds until ``--all-partitions`` starts a child that exited with ``code`` (``Popen.returncode``) again;
    None: it stays down.

    Never while the supervisor stops, after a clean exit (0: SIGTERM or ``--idle-exit``), after ``EXIT_FENCED``
    (another instance owns the partition now) or after exit 3 within ``_QUICK_FAILURE_S`` of its start (a
    configuration error). A child killed by a signal, or failing later (Kafka errors that kept recurring),
    starts again after 1, 2, 4 ... 30 seconds (``restarts`` since it last ran ``_STEADY_S``).
    """
    if stopping or code in (EXIT_OK, EXIT_FENCED) or (code == EXIT_USAGE and ran_for < _QUICK_FAILURE_S):
        return None
    return float(min(2**restarts, 30))


def _described(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"


def supervised_exit(returncodes: list[int]) -> int:
    """The supervisor's exit code from its children's return codes (``Popen.returncode``: -N = killed by signal N).

    A child killed by a signal counts as ``128 + N``; a child that failed outright matters more
    than one that was fenced (a newer instance runs there).
    """
    codes = [EXIT_SIGNALLED - code if code < 0 else code for code in returncodes]
    failures = [code for code in codes if code not in (EXIT_OK, EXIT_FENCED)]
    return max(failures) if failures else max(codes)
