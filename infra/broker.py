"""Kafka's processes: format a data dir, start the single broker or cluster nodes (their JVM options), and wait
until the cluster's metadata lists them (confluent_kafka, imported lazily)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from infra.base import CLUSTER_NODES, POLL_S, InfraError, atomic_write, say
from infra.broker_config import cluster_cluster_id, ensure_cluster_id, write_kafka_configs, write_node_config
from infra.paths import Paths, data_dir
from infra.ports import node_port_keys
from infra.processes import Service, tail
from infra.secure import SCRAM_MECHANISM, ensure_scram_passwords, ensure_tls, write_client_properties
from infra.tools import ensure_kafka_jars, java_exe

KAFKA_JVM_OPTS = [
    # The whole heap from the start, and a fixed young generation (bench.scheduler's latency).
    # Left to G1's 20 ms pause goal on a busy 2-core machine, eden shrank to about 20 MB: a young pause
    # every 0.7 s at 1,000 submissions/s, stretched to 100-290 ms when the machine is loaded, each one
    # a stall of the scheduler's transactions. With 128 MB: a pause every 4-5 s, about as long, 30-70%
    # less pause time in all. With a 128 MB eden but a heap grown only to 340 MB, the old generation
    # (a 170-250 MB live set, 128 MB of it the log cleaner's dedupe buffer) sat above G1's occupancy
    # threshold: a concurrent cycle and mixed pauses every 20 s; a 768 MB heap leaves it room.
    # ZGC (pauses under 2 ms) was measured too: about 50% more broker CPU, which a shared machine pays back.
    # MaxTenuringThreshold=1: about 0.55 MB of each young collection lives on (metrics reservoirs and the
    # like); at the default 15 the survivor spaces held 9 MB of it, copied again at every pause. Promoted
    # after one copy: 1-2 survivor regions instead of 9, CPU per pause 0.02 s instead of 0.04 (median).
    # ParallelGCThreads=1: what survives a young collection is mostly the metrics reservoirs' skip-list nodes,
    # copied by pointer chasing that one worker does while the other spins in termination (-Xlog:gc+phases:
    # Object Copy 6 against 53 ms, Termination 37 ms), on a core the scheduler needs during the pause. With
    # one worker, over 62 pauses at 1,000 submissions/s: median 23 ms, max 42 ms (two workers: max 59-240 ms).
    "-Xms768m",
    "-Xmx768m",
    "-Xmn128m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:MaxTenuringThreshold=1",
    "-XX:ParallelGCThreads=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]


NODE_JVM_OPTS = ["-Xms512m", "-Xmx512m", "-Xmn96m", *KAFKA_JVM_OPTS[3:]]
"""A cluster node's JVM: three of them share the machine, so each gets a modest heap."""


def format_kafka_if_needed(p: Paths, java: str, cid: str, passwords: dict[str, str] | None = None) -> None:
    # Format exactly once per data dir. The controller port may still change later (when the
    # persisted one is taken by a foreign process): with the dynamic quorum (KIP-853),
    # `format --standalone` records this controller's endpoint in the voter set inside the
    # metadata log, but on startup the single voter, being its own leader, appends an updated
    # voter record with the endpoint from the regenerated server.properties. Verified on 4.3.1:
    # restart with a new controller port keeps all topics and transactions work, and the log then
    # holds the new endpoint. So no wipe/reformat is needed. (If a future Kafka refused this, the
    # fix would be `infra.py reset`, which deletes data; we never wipe data automatically.)
    data = data_dir(p, passwords is not None)
    if (data / "meta.properties").is_file():
        return
    data.mkdir(parents=True, exist_ok=True)
    cmd = storage_format_argv(p, java, cid, p.server_props, passwords, standalone=True)
    say(f"kafka: formatting {data} (cluster id {cid}{', SCRAM users ' + ', '.join(passwords) if passwords else ''})")
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        raise InfraError(_format_failed(r.stdout + r.stderr))


def _format_failed(output: str) -> str:
    return (
        "kafka: storage format failed:\n"
        + output.strip()
        + "\n  if the data dir is corrupt, run `infra/infra.py reset` (deletes all data)"
    )


def storage_format_argv(
    p: Paths, java: str, cid: str, config: Path, passwords: dict[str, str] | None, *, standalone: bool
) -> list[str]:
    """kafka-storage format for one node: the single broker's dynamic quorum is --standalone, a static quorum needs nothing."""
    # SCRAM users exist from the first start (KIP-900): the broker itself authenticates as admin.
    # Every node of the cluster is formatted with the same users (the controllers' bootstrap metadata).
    scram = [f"--add-scram={SCRAM_MECHANISM}=[name={u},password={pw}]" for u, pw in (passwords or {}).items()]
    return [
        java,
        "-Xmx256m",
        f"-Dlog4j2.configurationFile={p.log4j}",
        "-cp",
        f"{p.kafka_libs}/*",
        "kafka.tools.StorageTool",
        "format",
        *(["--standalone"] if standalone else []),
        "--ignore-formatted",
        # "--opt=value" so that even a stored id starting with "-" is read as a value
        f"--cluster-id={cid}",
        f"--config={config}",
        *scram,
    ]


def start_kafka(p: Paths, svc: Service, ports: dict[str, int], mode: str = "plaintext") -> int:
    java = java_exe()
    ensure_kafka_jars(p)
    p.kafka_logs.mkdir(parents=True, exist_ok=True)
    secure = mode == "secure"
    passwords = None
    if secure:
        passwords = ensure_scram_passwords(p)
        ensure_tls(p)
        write_client_properties(p, passwords)
    cid = ensure_cluster_id(p, data_dir(p, secure))
    write_kafka_configs(p, ports["kafka"], ports["controller"], passwords)
    format_kafka_if_needed(p, java, cid, passwords)
    atomic_write(p.mode, mode + "\n")
    atomic_write(p.brokers, "1\n")
    argv = [
        java,
        *KAFKA_JVM_OPTS,
        f"-Dlog4j2.configurationFile={p.log4j}",
        f"-Dkafka.logs.dir={p.kafka_logs}",
        "-cp",
        f"{p.kafka_libs}/*",
        "kafka.Kafka",
        str(p.server_props),
    ]
    pid = svc.spawn(argv)
    say(f"kafka: started broker pid {pid} on 127.0.0.1:{ports['kafka']}, {mode} (log {p.broker_out})")
    return pid


def start_cluster_nodes(
    p: Paths, services: dict[int, Service], ports: dict[str, int], mode: str, nodes: list[int]
) -> dict[int, int]:
    """Write the configs of ``nodes``, format the unformatted ones (in parallel), start them; their pids."""
    java = java_exe()
    ensure_kafka_jars(p)
    secure = mode == "secure"
    passwords = None
    if secure:
        passwords = ensure_scram_passwords(p)
        ensure_tls(p)
        write_client_properties(p, passwords)
    cid = cluster_cluster_id(p, secure)
    for n in nodes:
        p.node(n).logs.mkdir(parents=True, exist_ok=True)
        write_node_config(p, n, ports, passwords)
    formats = []
    for n in nodes:
        data = p.node(n).data_dir(secure)
        if not (data / "meta.properties").is_file():
            data.mkdir(parents=True, exist_ok=True)
            argv = storage_format_argv(p, java, cid, p.node(n).server_props, passwords, standalone=False)
            formats.append((n, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    if formats:
        users = f", SCRAM users {', '.join(passwords)}" if passwords else ""
        say(f"kafka: formatting node(s) {', '.join(str(n) for n, _ in formats)} (cluster id {cid}{users})")
    failed = [(n, out) for n, proc in formats if (out := proc.communicate()[0]) is not None and proc.returncode != 0]
    if failed:
        raise InfraError(_format_failed("\n".join(f"node {n}: {out.strip()}" for n, out in failed)))
    atomic_write(p.mode, mode + "\n")
    atomic_write(p.brokers, f"{len(CLUSTER_NODES)}\n")
    pids = {}
    for n in nodes:
        node = p.node(n)
        argv = [
            java,
            *NODE_JVM_OPTS,
            f"-Dlog4j2.configurationFile={p.log4j}",
            f"-Dkafka.logs.dir={node.logs}",
            "-cp",
            f"{p.kafka_libs}/*",
            "kafka.Kafka",
            str(node.server_props),
        ]
        pids[n] = services[n].spawn(argv)
        kafka, _ = node_port_keys(n)
        say(f"kafka: started node {n} pid {pids[n]} on 127.0.0.1:{ports[kafka]}, {mode} (log {node.out})")
    return pids


_quiet_logger: Any = None


def _kafka_probe(bootstrap: str, timeout: float = 1.0, security: dict[str, str] | None = None) -> bool:
    return bool(kafka_broker_ids(bootstrap, timeout, security))


def kafka_broker_ids(bootstrap: str, timeout: float = 1.0, security: dict[str, str] | None = None) -> set[int]:
    """The ids of the brokers the cluster's metadata lists (registered and not fenced); empty if unreachable."""
    global _quiet_logger
    try:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient
    except ImportError:
        raise InfraError(
            "python package confluent_kafka missing: run infra with .venv/bin/python "
            "(use the infra/up wrapper; create the venv with `make venv`)"
        ) from None
    if _quiet_logger is None:
        import logging

        _quiet_logger = logging.getLogger("infra.librdkafka")
        _quiet_logger.addHandler(logging.NullHandler())
        _quiet_logger.propagate = False
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": _quiet_logger,  # keep librdkafka's connection-refused chatter off the terminal
        "log_level": 0,
        "socket.connection.setup.timeout.ms": 1000,
        **(security or {}),
    }
    admin = AdminClient(conf)
    try:
        return set(admin.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return set()


def _tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _split_hostport(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.strip().rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def wait_kafka(
    bootstrap: str,
    deadline: float,
    svc: Service | None = None,
    pid: int | None = None,
    security: dict[str, str] | None = None,
) -> float:
    t0 = time.monotonic()
    first = bootstrap.split(",")[0]
    try:
        host, port = _split_hostport(first)
    except ValueError:
        raise InfraError(f"kafka: cannot parse bootstrap servers {bootstrap!r} (want host:port)") from None
    while True:
        if svc is not None and pid is not None and not svc.alive(pid):
            raise InfraError(
                f"kafka: broker pid {pid} exited during startup; last lines of {svc.log}:\n"
                f"{tail(svc.log)}\n  fix the cause above, or `infra/infra.py reset` to start from scratch"
            )
        # cheap TCP check first so librdkafka is not spun up while the JVM is still booting
        if _tcp_open(host, port) and _kafka_probe(bootstrap, security=security):
            return time.monotonic() - t0
        if time.monotonic() >= deadline:
            if svc is not None:
                raise InfraError(
                    f"kafka: not ready after {time.monotonic() - t0:.0f}s; last lines of {svc.log}:\n"
                    f"{tail(svc.log)}\n  see the log above; `infra/down` then `infra/up` to retry"
                )
            raise InfraError(
                f"kafka: external cluster BERNSTEIN_KAFKA_BOOTSTRAP={bootstrap} not reachable after "
                f"{time.monotonic() - t0:.0f}s; start it, or unset the variable to use the local broker"
            )
        time.sleep(POLL_S)


def wait_cluster(
    bootstrap: str,
    expected: set[int],
    deadline: float,
    services: dict[int, Service],
    pids: dict[int, int],
    security: dict[str, str] | None = None,
) -> float:
    """Until the cluster's metadata lists every node in ``expected`` as a broker; a started node that dies fails at once."""
    t0 = time.monotonic()
    while True:
        for n, pid in pids.items():
            if not services[n].alive(pid):
                raise InfraError(
                    f"kafka: node {n} (pid {pid}) exited during startup; last lines of {services[n].log}:\n"
                    f"{tail(services[n].log)}\n  fix the cause above, or `infra/infra.py reset` to start from scratch"
                )
        registered = kafka_broker_ids(bootstrap, 1.0, security)
        if expected <= registered:
            return time.monotonic() - t0
        if time.monotonic() >= deadline:
            missing = sorted(expected - registered)
            logs = "\n".join(f"last lines of {services[n].log}:\n{tail(services[n].log, 15)}" for n in missing)
            raise InfraError(
                f"kafka: node(s) {', '.join(map(str, missing))} not registered after {time.monotonic() - t0:.0f}s "
                f"(a node needs two of the three controllers up); {logs}\n  `infra/down` then `infra/up --brokers 3` to retry"
            )
        time.sleep(POLL_S)
