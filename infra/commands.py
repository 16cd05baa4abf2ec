"""The subcommands (``cmd_*``): up, down, status, restart-kafka, node, reset and prepare, each over a ``Ctx``."""

from __future__ import annotations

import os
import re
import shutil
import time

from infra.base import CLUSTER_NODES, InfraError, atomic_write, say, warn
from infra.broker import (
    _kafka_probe,
    _split_hostport,
    _tcp_open,
    kafka_broker_ids,
    start_cluster_nodes,
    start_kafka,
    wait_cluster,
    wait_kafka,
)
from infra.broker_config import CLUSTER_REPLICATION
from infra.context import Ctx
from infra.paths import Paths, read_layout, read_mode
from infra.ports import cluster_bootstrap, node_port_keys
from infra.processes import locked, stop_services
from infra.s3 import (
    _s3_probe,
    ensure_bucket,
    ensure_locked_bucket,
    ensure_s3_identities,
    s3_root_credentials,
    start_s3,
    wait_s3,
)
from infra.secure import client_security, external_security
from infra.tools import ensure_kafka_jars, ensure_minio, java_exe, require_python_deps


def _describe(brokers: int, mode: str) -> str:
    return f"{mode} broker" if brokers == 1 else f"{mode} three-node cluster"


def cmd_up(ctx: Ctx) -> int:
    """start what is not running, wait until ready, ensure the bucket, write .infra/env"""
    require_python_deps("confluent_kafka", "minio")
    t0 = time.monotonic()
    p = ctx.p
    with locked(p):
        k_ext, s_ext = ctx.kafka_external(), ctx.s3_external()
        ak, sk, bucket = ctx.s3_creds(bool(s_ext))
        kpid = None if k_ext else ctx.kafka.running_pid()
        node_pids = {} if k_ext else ctx.running_nodes()
        spid = None if s_ext else ctx.s3.running_pid()
        wanted = "secure" if ctx.secure else "plaintext"
        brokers = ctx.brokers
        running_mode = read_mode(p) or "plaintext"
        running_layout = 1 if kpid is not None else len(CLUSTER_NODES) if node_pids else None
        if running_layout is not None and ctx.keep_mode:
            wanted, brokers = running_mode, running_layout
        elif running_layout == 1 and brokers == 1 and running_mode != wanted:
            say(f"kafka: the running broker is {running_mode}; restarting it {wanted} (separate data dirs, nothing is lost)")
        elif running_layout is not None and (running_layout, running_mode) != (brokers, wanted):
            say(
                f"kafka: the running {_describe(running_layout, running_mode)} is replaced by a "
                f"{_describe(brokers, wanted)} (separate data dirs, nothing is lost)"
            )
        stop = []
        if kpid is not None and (brokers != 1 or running_mode != wanted):
            stop.append((ctx.kafka, kpid))
            kpid = None
        if node_pids and (brokers == 1 or running_mode != wanted):
            stop += [(ctx.nodes[n], pid) for n, pid in node_pids.items()]
            node_pids = {}
        if stop:
            stop_services(stop)

        missing_nodes = [] if k_ext or brokers == 1 else [n for n in CLUSTER_NODES if n not in node_pids]
        start_single = not k_ext and brokers == 1 and kpid is None
        s3_missing = not s_ext and spid is None
        to_start = (["kafka"] if start_single or missing_nodes else []) + (["s3"] if s3_missing else [])
        keys = (["kafka", "controller"] if start_single else []) + (["s3"] if s3_missing else [])
        if missing_nodes and node_pids:
            ctx.fixed_node_ports(missing_nodes)
        elif missing_nodes:  # the whole cluster is down: every node may move
            keys += [key for n in CLUSTER_NODES for key in node_port_keys(n)]
        if keys:
            ctx.settle_ports(keys)
        k_new = s_new = None
        node_new: dict[int, int] = {}
        if to_start:  # fail early (no half-started state) if java or a jar is missing
            java_exe()
            if "kafka" in to_start:
                ensure_kafka_jars(p)
            if "s3" in to_start:
                ensure_minio(p)
        # Start the JVMs before waiting for any: they boot in parallel.
        if start_single:
            k_new = start_kafka(p, ctx.kafka, ctx.ports, wanted)
        if missing_nodes:
            node_new = start_cluster_nodes(p, ctx.nodes, ctx.ports, wanted, missing_nodes)
        if s3_missing:
            try:
                s_new = start_s3(p, ctx.s3, ctx.ports["s3"])
            except InfraError:
                if k_new or node_new:
                    warn("kafka: Kafka was started; `infra/down` stops it")
                raise

        if k_ext:
            bootstrap = k_ext
        elif brokers == 1:
            bootstrap = f"127.0.0.1:{ctx.ports['kafka']}"
        else:
            bootstrap = cluster_bootstrap(ctx.ports)
        s3_endpoint = s_ext or f"http://127.0.0.1:{ctx.ports['s3']}"

        if k_ext:
            say(f"kafka: using external cluster {bootstrap} (BERNSTEIN_KAFKA_BOOTSTRAP); not starting one")
        security = external_security() if k_ext else client_security(p, wanted)
        if k_ext or brokers == 1:
            dt = wait_kafka(
                bootstrap,
                ctx.deadline(bool(k_ext)),
                None if k_ext else ctx.kafka,
                None if k_ext else (k_new or kpid),
                security,
            )
        else:
            dt = wait_cluster(bootstrap, set(CLUSTER_NODES), ctx.deadline(False), ctx.nodes, node_new, security)
        if k_new or node_new:
            say(f"kafka: ready in {dt:.1f}s")
        if s_ext:
            say(f"s3: using external endpoint {s3_endpoint} (BERNSTEIN_S3_ENDPOINT); not starting one")
        dt = wait_s3(
            s3_endpoint,
            ctx.deadline(bool(s_ext)),
            None if s_ext else ctx.s3,
            None if s_ext else (s_new or spid),
        )
        if s_new:
            say(f"s3: ready in {dt:.1f}s")
        if s_ext:
            ensure_bucket(s3_endpoint, ak, sk, bucket)
        else:
            root = s3_root_credentials(p)
            ensure_locked_bucket(s3_endpoint, root, bucket)
            ak, sk = ensure_s3_identities(p, s3_endpoint, root, bucket)["ops"]
        if k_ext:
            config_file = os.environ.get("BERNSTEIN_KAFKA_CONFIG_FILE") or None
        else:
            config_file = str(p.clients / "admin.properties") if wanted == "secure" else None
        replication = CLUSTER_REPLICATION if not k_ext and brokers != 1 else None
        ctx.write_env(bootstrap, s3_endpoint, ak, sk, bucket, config_file, replication)

    if not to_start:
        say("already running")
    if k_ext:
        kdesc = "external"
    elif brokers == 1:
        kdesc = f"pid {ctx.kafka.running_pid(adopt=False)}, {wanted}"
    else:
        pids = ctx.running_nodes(adopt=False)
        kdesc = f"{wanted} three-node cluster, pids {', '.join(str(pids.get(n, '-')) for n in CLUSTER_NODES)}"
    sdesc = "external" if s_ext else f"pid {ctx.s3.running_pid(adopt=False)}"
    say(f"kafka  BERNSTEIN_KAFKA_BOOTSTRAP={bootstrap}  ({kdesc})")
    if replication is not None:
        say(f"kafka  BERNSTEIN_TOPIC_REPLICATION_FACTOR={replication[0]}  BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS={replication[1]}")
    if not k_ext and wanted == "secure":
        say(f"kafka  BERNSTEIN_KAFKA_CONFIG_FILE={p.clients / 'admin.properties'}  (one file per principal in {p.clients})")
    say(f"s3     BERNSTEIN_S3_ENDPOINT={s3_endpoint}  bucket={bucket}  ({sdesc})")
    say(f"env    {p.env}  (load with: set -a; . {p.env}; set +a)")
    say(f"up done in {time.monotonic() - t0:.1f}s")
    return 0


def cmd_down(ctx: Ctx) -> int:
    """stop the broker (or the three nodes) and MinIO started here (SIGTERM, SIGKILL after 30 s)"""
    with locked(ctx.p):
        services = (ctx.kafka, *ctx.nodes.values(), ctx.s3)
        targets = [(svc, pid) for svc in services if (pid := svc.running_pid()) is not None]
        if not targets:
            say("nothing running")
            return 0
        stop_services(targets)
    return 0


def cmd_status(ctx: Ctx) -> int:
    """print state of both services; exit 0 only if both are ready"""
    require_python_deps("confluent_kafka")
    k_ext, s_ext = ctx.kafka_external(), ctx.s3_external()
    ok = True
    # Kafka
    if k_ext:
        ready = _tcp_open(*_split_hostport(k_ext.split(",")[0])) and _kafka_probe(k_ext, timeout=3, security=external_security())
        say(f"kafka  external  endpoint={k_ext}  ready={'yes' if ready else 'no'}")
    elif read_layout(ctx.p) != 1:
        ready = _cluster_status(ctx)
    else:
        pid = ctx.kafka.running_pid(adopt=False)
        ep = f"127.0.0.1:{ctx.ports['kafka']}" if "kafka" in ctx.ports else "-"
        mode = read_mode(ctx.p) or "plaintext"
        ready = (
            bool(pid)
            and ep != "-"
            and _tcp_open("127.0.0.1", ctx.ports["kafka"])
            and _kafka_probe(ep, timeout=3, security=client_security(ctx.p, mode))
        )
        state = "running" if pid else "stopped"
        say(f"kafka  {state}  pid={pid or '-'}  endpoint={ep}  mode={mode}  ready={'yes' if ready else 'no'}")
    ok &= ready
    # S3
    if s_ext:
        ready = _s3_probe(s_ext, timeout=3)
        say(f"s3     external  endpoint={s_ext}  ready={'yes' if ready else 'no'}")
    else:
        pid = ctx.s3.running_pid(adopt=False)
        ep = f"http://127.0.0.1:{ctx.ports['s3']}" if "s3" in ctx.ports else "-"
        ready = bool(pid) and ep != "-" and _s3_probe(ep, timeout=3)
        state = "running" if pid else "stopped"
        say(f"s3     {state}  pid={pid or '-'}  endpoint={ep}  ready={'yes' if ready else 'no'}")
    ok &= ready
    return 0 if ok else 1


def _cluster_status(ctx: Ctx) -> bool:
    """One line per node of the three-node cluster; True if every node runs and is a registered broker."""
    mode = read_mode(ctx.p) or "plaintext"
    pids = ctx.running_nodes(adopt=False)
    known = all(key in ctx.ports for n in CLUSTER_NODES for key in node_port_keys(n))
    registered = kafka_broker_ids(cluster_bootstrap(ctx.ports), 3, client_security(ctx.p, mode)) if known and pids else set()
    ok = True
    for n in CLUSTER_NODES:
        kafka, controller = node_port_keys(n)
        pid = pids.get(n)
        ready = pid is not None and known and _tcp_open("127.0.0.1", ctx.ports[kafka]) and n in registered
        ep = f"127.0.0.1:{ctx.ports[kafka]}" if known else "-"
        cep = f"127.0.0.1:{ctx.ports[controller]}" if known else "-"
        say(
            f"kafka-{n} {'running' if pid else 'stopped'}  pid={pid or '-'}  endpoint={ep}  controller={cep}  "
            f"mode={mode}  ready={'yes' if ready else 'no'}"
        )
        ok &= ready
    return ok


def cmd_restart_kafka(ctx: Ctx) -> int:
    """stop and start the broker only (data is kept)"""
    require_python_deps("confluent_kafka")
    if k_ext := ctx.kafka_external():
        raise InfraError(
            f"BERNSTEIN_KAFKA_BOOTSTRAP={k_ext} points at an external cluster; "
            "restart-kafka only restarts the broker this script started"
        )
    if read_layout(ctx.p) != 1:
        return _restart_cluster(ctx)
    t0 = time.monotonic()
    with locked(ctx.p):
        pid = ctx.kafka.running_pid()
        if pid is not None:
            stop_services([(ctx.kafka, pid)])
        else:
            say("kafka: not running; starting it")
        ctx.settle_ports(["kafka", "controller"])
        mode = read_mode(ctx.p) or "plaintext"
        new = start_kafka(ctx.p, ctx.kafka, ctx.ports, mode)
        bootstrap = f"127.0.0.1:{ctx.ports['kafka']}"
        dt = wait_kafka(bootstrap, ctx.deadline(False), ctx.kafka, new, client_security(ctx.p, mode))
        say(f"kafka: ready in {dt:.1f}s")
        _update_env_bootstrap(ctx.p, bootstrap)
    say(f"kafka  BERNSTEIN_KAFKA_BOOTSTRAP={bootstrap}  (pid {new}); restart took {time.monotonic() - t0:.1f}s")
    return 0


def _update_env_bootstrap(p: Paths, bootstrap: str) -> None:
    """Keep .infra/env in step if a port had to move."""
    if p.env.is_file():
        text = re.sub(
            r"^BERNSTEIN_KAFKA_BOOTSTRAP=.*$",
            f"BERNSTEIN_KAFKA_BOOTSTRAP={bootstrap}",
            p.env.read_text(),
            flags=re.MULTILINE,
        )
        atomic_write(p.env, text, mode=0o600)


def _restart_cluster(ctx: Ctx) -> int:
    """restart-kafka on the three-node cluster: stop every node, start all three (data is kept)."""
    t0 = time.monotonic()
    with locked(ctx.p):
        if running := ctx.running_nodes():
            stop_services([(ctx.nodes[n], pid) for n, pid in running.items()])
        else:
            say("kafka: no node running; starting the three-node cluster")
        ctx.settle_ports([key for n in CLUSTER_NODES for key in node_port_keys(n)])
        mode = read_mode(ctx.p) or "plaintext"
        pids = start_cluster_nodes(ctx.p, ctx.nodes, ctx.ports, mode, list(CLUSTER_NODES))
        bootstrap = cluster_bootstrap(ctx.ports)
        dt = wait_cluster(bootstrap, set(CLUSTER_NODES), ctx.deadline(False), ctx.nodes, pids, client_security(ctx.p, mode))
        say(f"kafka: ready in {dt:.1f}s")
        _update_env_bootstrap(ctx.p, bootstrap)
    say(f"kafka  BERNSTEIN_KAFKA_BOOTSTRAP={bootstrap}  (three nodes); restart took {time.monotonic() - t0:.1f}s")
    return 0


def cmd_node(ctx: Ctx) -> int:
    """stop or start one node of the three-node cluster (infra/up --brokers 3); data is kept"""
    require_python_deps("confluent_kafka")
    n, action = ctx.node, ctx.action
    if ctx.kafka_external() or read_layout(ctx.p) == 1:
        raise InfraError("`node` stops and starts nodes of the local three-node cluster: start it with `infra/up --brokers 3`")
    t0 = time.monotonic()
    with locked(ctx.p):
        svc = ctx.nodes[n]
        pid = svc.running_pid()
        if action == "stop":
            if pid is None:
                say(f"kafka-{n}: not running")
                return 0
            stop_services([(svc, pid)])  # SIGTERM: a controlled shutdown moves its leaderships first
            say(f"kafka-{n}: stopped in {time.monotonic() - t0:.1f}s")
            return 0
        if pid is not None:
            say(f"kafka-{n}: already running (pid {pid})")
            return 0
        ctx.fixed_node_ports([n])
        mode = read_mode(ctx.p) or "plaintext"
        pids = start_cluster_nodes(ctx.p, ctx.nodes, ctx.ports, mode, [n])
        bootstrap = cluster_bootstrap(ctx.ports)
        dt = wait_cluster(bootstrap, {n}, ctx.deadline(False), ctx.nodes, pids, client_security(ctx.p, mode))
    say(f"kafka-{n}: registered again in {dt:.1f}s (pid {pids[n]}); took {time.monotonic() - t0:.1f}s")
    return 0


def cmd_reset(ctx: Ctx) -> int:
    """down, then delete Kafka/S3 data, cluster id, ports and logs (jars are kept)"""
    cmd_down(ctx)
    p = ctx.p
    with locked(p):
        for d in (p.kafka_data, p.kafka_data_secure, p.cluster, p.s3data, p.s3_identities, p.kafka_logs, p.tls, p.clients):
            shutil.rmtree(d, ignore_errors=True)
        for f in (
            p.mode,
            p.brokers,
            p.scram,
            p.cluster_id,
            p.ports,
            p.env,
            p.server_props,
            p.log4j,
            p.s3_port,
            p.s3_root,
            p.s3_log,
        ):
            f.unlink(missing_ok=True)
    say(
        f"reset: deleted Kafka data (both modes), S3 data, certificates, SCRAM users, cluster id, ports and logs under {p.state} (jars kept)"
    )
    return 0


def cmd_prepare(ctx: Ctx) -> int:
    """fetch the Kafka jars and build MinIO when missing, starting nothing (make test runs it early, in the background)"""
    t0 = time.monotonic()
    ensure_kafka_jars(ctx.p)
    ensure_minio(ctx.p)
    say(f"prepare: Kafka jars and MinIO ready in {time.monotonic() - t0:.0f}s")
    return 0
