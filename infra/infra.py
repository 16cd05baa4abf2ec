#!/usr/bin/env python3
"""Local infrastructure for bernstein: one Kafka 4.x broker (KRaft, combined
broker+controller), or a three-node cluster of such nodes (`up --brokers 3`), and
one MinIO server (the content-addressed store: a versioned bucket with Object Lock, and
one S3 identity each for producers, readers and ops, in .infra/s3/<name>.env).

No Docker needed: Kafka runs as a plain JVM process from jars fetched once from Maven
Central (see infra/kafka/pom.xml); MinIO is built once from the Go module proxy into
~/.cache/bernstein (BERNSTEIN_TOOL_CACHE). Standard library only; confluent_kafka
(Kafka readiness probe) and minio (bucket creation) are imported lazily from the
project venv, so run this with .venv/bin/python (the infra/up, infra/down and
infra/status wrappers do).

    infra.py up             start what is not running, wait until ready, write .infra/env
    infra.py up --secure    the same with the broker's SASL_SSL listener (SCRAM users, ACLs enforced)
    infra.py up --brokers 3 a local three-node KRaft cluster (each node broker+controller) instead
    infra.py node stop|start N  stop or start node N (1-3) of the three-node cluster (data is kept)
    infra.py down           stop both services (SIGTERM, then SIGKILL after 30 s)
    infra.py status         print state; exit 0 only if both services are ready
    infra.py restart-kafka  stop and start the broker only (data is kept)
    infra.py reset          down, then delete all data, ports and the cluster id (jars are kept)

Options (before or after the subcommand): --root DIR (state goes to DIR/.infra;
default: the repository root), --timeout SECONDS (readiness deadline).

If BERNSTEIN_KAFKA_BOOTSTRAP / BERNSTEIN_S3_ENDPOINT are set (and do not point at
this root's own services) the corresponding service is treated as external: it is
probed, never started or stopped.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import fcntl
import functools
import http.client
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

REPO = Path(__file__).resolve().parent.parent
KAFKA_POM = REPO / "infra" / "kafka" / "pom.xml"
# Fetched jars are a cache, not state: they always live in the repository's .infra,
# whatever --root says, so isolated test instances do not copy 140 MB each.
JAR_CACHE = REPO / ".infra"
MVN_DEP_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.11.0"
MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
"""The MinIO server, built from the Go module proxy (`go install`, ~6 min once) into TOOL_CACHE."""
TOOL_CACHE = Path(os.environ.get("BERNSTEIN_TOOL_CACHE") or Path.home() / ".cache" / "bernstein")
"""Built tools kept across clones and `infra/reset` (BERNSTEIN_TOOL_CACHE overrides): MinIO's binary."""

DEFAULT_BUCKET = "bernstein-cas"
S3_REGION = "us-east-1"

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

CLUSTER_NODES = (1, 2, 3)
"""Node ids of `up --brokers 3`: each node is broker and controller; the three controllers are the quorum."""
CLUSTER_REPLICATION = (3, 2)
"""(replication factor, min.insync.replicas) of the three-node cluster: one node may be down, writes go on."""
NODE_JVM_OPTS = ["-Xms512m", "-Xmx512m", "-Xmn96m", *KAFKA_JVM_OPTS[3:]]
"""A cluster node's JVM: three of them share the machine, so each gets a modest heap."""

POLL_S = 0.2
READY_TIMEOUT_S = 90.0
EXTERNAL_READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 40

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USERS = ("admin", "scheduler", "producer", "auditor")
"""The secure broker's principals: admin (super user, inter-broker), then one per component."""
BROKER_CN = "bernstein-broker"
"""The broker certificate's subject; on the mTLS controller listener the broker is User:CN=bernstein-broker."""
MODES = ("plaintext", "secure")


class InfraError(Exception):
    """An expected failure: the message is printed (no traceback) and we exit 1."""


def say(msg: str) -> None:
    print(f"infra: {msg}", flush=True)


def warn(msg: str) -> None:
    print(f"infra: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- paths


class Paths:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / ".infra"
        self.lock = self.state / ".lock"
        self.ports = self.state / "ports.json"
        self.env = self.state / "env"
        self.kafka = self.state / "kafka"
        self.kafka_data = self.kafka / "data"
        self.kafka_logs = self.kafka / "logs"
        self.broker_out = self.kafka_logs / "broker.out"
        self.broker_pid = self.kafka / "broker.pid"
        self.cluster_id = self.kafka / "cluster.id"
        self.server_props = self.kafka / "server.properties"
        self.log4j = self.kafka / "log4j2.properties"
        self.s3 = self.state / "minio"
        self.s3data = self.s3 / "data"
        self.s3_pid = self.s3 / "minio.pid"
        self.s3_log = self.s3 / "minio.log"
        self.s3_port = self.s3 / "port"
        self.s3_root = self.s3 / "root.json"
        """MinIO's root credential (random per deployment, 0600): only infra uses it, to manage identities."""
        self.s3_identities = self.state / "s3"
        """One env file per S3 identity infra made (producer, reader, ops), each 0600."""
        # secure mode (infra/up --secure): its own data dir, formatted with the SCRAM users
        self.kafka_data_secure = self.kafka / "data-secure"
        self.mode = self.kafka / "mode"
        self.scram = self.kafka / "scram.json"
        self.tls = self.state / "tls"
        self.ca_cert = self.tls / "ca.pem"
        self.ca_key = self.tls / "ca.key"
        self.broker_pem = self.tls / "broker.pem"
        self.clients = self.state / "clients"
        # the three-node cluster (infra/up --brokers 3): one directory per node, its own cluster id
        self.cluster = self.kafka / "cluster"
        self.cluster_id_multi = self.cluster / "cluster.id"
        self.brokers = self.kafka / "brokers"
        # jar cache (see JAR_CACHE)
        self.kafka_libs = JAR_CACHE / "kafka" / "libs"
        self.minio_bin = TOOL_CACHE / "minio" / MINIO_VERSION / "minio"

    def node(self, n: int) -> NodePaths:
        return NodePaths(self.cluster / f"node{n}")


class NodePaths:
    """One node of the three-node cluster: .infra/kafka/cluster/node<N>/."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.server_props = root / "server.properties"
        self.pid = root / "broker.pid"
        self.logs = root / "logs"
        self.out = self.logs / "broker.out"
        self.data = root / "data"
        self.data_secure = root / "data-secure"

    def data_dir(self, secure: bool) -> Path:
        return self.data_secure if secure else self.data


# ------------------------------------------------------------------------ processes


def _read_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _reap(pid: int) -> None:
    # Only matters when infra.py is imported and used in-process (we are the parent).
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


class Service:
    """A JVM process we start, identified by its pid file AND its command line: a pid is
    only considered ours if /proc/<pid>/cmdline contains the marker (kafka.Kafka or minio)
    and this root's config file path."""

    def __init__(self, name: str, marker: str, pid_file: Path, config: Path, log: Path) -> None:
        self.name = name
        self.marker = marker
        self.pid_file = pid_file
        self.config = config
        self.log = log

    def owns(self, pid: int, patient: bool = True) -> bool:
        cmd = _read_cmdline(pid)
        # A JVM that was just exec'd reads back an EMPTY /proc/<pid>/cmdline for a few ms
        # (seen with the Debian java launcher); a live user process never has an empty cmdline
        # for long, so for a pid we recorded ourselves re-read briefly before deciding. Not when
        # scanning all of /proc: kernel threads always have an empty cmdline.
        for _ in range(40 if patient else 0):
            if cmd != [] or _is_zombie(pid):
                break
            time.sleep(0.025)
            cmd = _read_cmdline(pid)
        if not cmd or _is_zombie(pid):
            _reap(pid)
            return False
        return any(self.marker in a for a in cmd) and any(a == str(self.config) for a in cmd)

    def _pid_from_file(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def _scan_proc(self) -> int | None:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid() and self.owns(int(entry), patient=False):
                return int(entry)
        return None

    def running_pid(self, adopt: bool = True) -> int | None:
        """Pid of our running process, or None. Cleans up a stale pid file. With adopt=True a
        running process of ours whose pid file went missing is found by its command line
        (it names this root's config file, so it can only be one we started) and re-recorded."""
        pid = self._pid_from_file()
        if pid is not None:
            if self.owns(pid):
                return pid
            self.pid_file.unlink(missing_ok=True)
        if adopt:
            pid = self._scan_proc()
            if pid is not None:
                say(f"{self.name}: found running pid {pid} without pid file; adopting it")
                self.pid_file.write_text(f"{pid}\n")
                return pid
        return None

    def spawn(self, argv: list[str], env: dict[str, str] | None = None) -> int:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"==== infra: starting {self.name} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # detached like nohup: survives our exit and ^C
                    close_fds=True,
                    env=env,
                )
            except OSError as e:
                raise InfraError(f"{self.name}: cannot start {argv[0]}: {e}") from None
        self.pid_file.write_text(f"{proc.pid}\n")
        proc.returncode = 0  # silence "subprocess still running" ResourceWarning at exit
        return proc.pid

    def alive(self, pid: int) -> bool:
        return self.owns(pid)


def stop_services(targets: list[tuple[Service, int]]) -> None:
    """SIGTERM all, poll up to STOP_TIMEOUT_S for exit, then SIGKILL the rest."""
    signalled = []
    for svc, pid in targets:
        if not svc.owns(pid):  # re-verify right before signalling
            svc.pid_file.unlink(missing_ok=True)
            continue
        say(f"{svc.name}: stopping pid {pid} (SIGTERM)")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        signalled.append((svc, pid))
    t0 = time.monotonic()
    live = list(signalled)
    while live and time.monotonic() - t0 < STOP_TIMEOUT_S:
        time.sleep(0.1)
        live = [(s, p) for s, p in live if s.owns(p)]
    for svc, pid in live:
        warn(f"{svc.name}: pid {pid} did not exit within {STOP_TIMEOUT_S:.0f}s; sending SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    t1 = time.monotonic()
    while live and time.monotonic() - t1 < 10:
        time.sleep(0.1)
        live = [(s, p) for s, p in live if s.owns(p)]
    if live:
        raise InfraError("; ".join(f"{s.name}: pid {p} survived SIGKILL (check `ps -p {p}`)" for s, p in live))
    for svc, _pid in signalled:
        svc.pid_file.unlink(missing_ok=True)
    say(f"stopped {', '.join(s.name for s, _ in signalled)} in {time.monotonic() - t0:.1f}s")


def tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            lines = deque(f, maxlen=n)
    except OSError:
        return f"(no log at {path})"
    return b"".join(lines).decode(errors="replace").rstrip("\n")


# ---------------------------------------------------------------------------- ports


def _port_free(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # SO_REUSEADDR like the JVM: TIME_WAIT leftovers of our own last run do not count
        # as "taken"; a live listener still makes bind fail.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError as e:
        if e.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    finally:
        s.close()


def _free_ports(n: int, exclude: set[int]) -> list[int]:
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)  # keep bound until all are chosen so they are distinct
            port = s.getsockname()[1]
            if port not in exclude:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def node_port_keys(n: int) -> tuple[str, str]:
    """The ports.json keys of cluster node ``n``: its client listener and its controller listener."""
    return f"kafka{n}", f"controller{n}"


PORT_KEYS = ("kafka", "controller", "s3", *(key for n in CLUSTER_NODES for key in node_port_keys(n)))


def load_ports(p: Paths) -> dict[str, int]:
    try:
        data = json.loads(p.ports.read_text())
        return {k: int(data[k]) for k in PORT_KEYS if k in data}
    except (OSError, ValueError, TypeError):
        pass
    # Fallback: recover from generated configs (e.g. ports.json deleted by hand).
    ports: dict[str, int] = {}
    with contextlib.suppress(OSError):
        text = p.server_props.read_text()
        if m := re.search(
            r"^listeners=(?:PLAINTEXT|SASL_SSL)://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)",
            text,
            re.MULTILINE,
        ):
            ports["kafka"], ports["controller"] = int(m[1]), int(m[2])
    for n in CLUSTER_NODES:
        with contextlib.suppress(OSError):
            if m := re.search(
                r"^listeners=(?:PLAINTEXT|SASL_SSL)://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)",
                p.node(n).server_props.read_text(),
                re.MULTILINE,
            ):
                kafka, controller = node_port_keys(n)
                ports[kafka], ports[controller] = int(m[1]), int(m[2])
    with contextlib.suppress(OSError, ValueError):
        ports["s3"] = int(p.s3_port.read_text().strip())
    return ports


def save_ports(p: Paths, ports: dict[str, int]) -> None:
    atomic_write(p.ports, json.dumps(ports, indent=2, sort_keys=True) + "\n")


def atomic_write(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``path`` whole or not at all, through an unpredictable temporary name, with ``mode`` from the start.

    Files with secrets (.infra/env, client properties, keys, the broker's config) get 0600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------- jars


def _need_tool(name: str, hint: str) -> str:
    exe = shutil.which(name)
    if not exe:
        raise InfraError(f"{name} not found on PATH: {hint}")
    return exe


@functools.lru_cache(maxsize=1)
def java_exe() -> str:
    exe = _need_tool("java", "install openjdk-17-jre-headless (Kafka 4.x needs Java 17+)")
    try:
        out = subprocess.run([exe, "-version"], check=False, capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError) as e:
        raise InfraError(f"cannot run `{exe} -version`: {e}") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if m:
        major = int(m[1]) if m[1] != "1" else int(m[2] or 0)
        if major < 17:
            raise InfraError(f"java {major} found at {exe}; Kafka 4.x needs 17+: install openjdk-17-jre-headless")
    return exe


def _kafka_version() -> str:
    try:
        m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", KAFKA_POM.read_text())
    except OSError:
        raise InfraError(f"missing {KAFKA_POM}; restore it from git") from None
    if not m:
        raise InfraError(f"no <kafka.version> in {KAFKA_POM}")
    return m[1].strip()


def _run_mvn(args: list[str], what: str) -> None:
    mvn = _need_tool(
        "mvn",
        "install maven (apt-get install maven); it fetches the jars from Maven Central once",
    )
    cmd = [mvn, "-B", "-q", *args]
    r = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        out = (r.stdout + r.stderr).strip().splitlines()[-30:]
        raise InfraError(
            f"fetching {what} failed (exit {r.returncode}); is Maven Central reachable?\n"
            f"  command: {' '.join(cmd)}\n" + "\n".join("  | " + line for line in out)
        )


def ensure_kafka_jars(p: Paths) -> None:
    version = _kafka_version()
    if (p.kafka_libs / f"kafka_2.13-{version}.jar").is_file():
        return
    say(f"fetching Kafka {version} jars from Maven Central into {p.kafka_libs} (one-time, ~45 MB) ...")
    t0 = time.monotonic()
    partial = p.kafka_libs.with_name("libs.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    _run_mvn(
        [
            "-f",
            str(KAFKA_POM),
            f"{MVN_DEP_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={partial}",
        ],
        "Kafka jars",
    )
    if not (partial / f"kafka_2.13-{version}.jar").is_file():
        raise InfraError(f"mvn finished but {partial}/kafka_2.13-{version}.jar is missing")
    shutil.rmtree(p.kafka_libs, ignore_errors=True)  # jars of another version, if any
    os.replace(partial, p.kafka_libs)
    say(f"fetched {len(list(p.kafka_libs.glob('*.jar')))} jars in {time.monotonic() - t0:.1f}s")


def ensure_minio(p: Paths) -> None:
    """MinIO's server binary, built once from the Go module proxy into TOOL_CACHE (kept across clones)."""
    if p.minio_bin.is_file():
        return
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise InfraError("go not found on PATH: install Go 1.24 or newer (MinIO is built from the Go module proxy once)")
    say(f"building MinIO {MINIO_VERSION} from the Go module proxy into {p.minio_bin.parent} (one-time, about 6 minutes) ...")
    t0 = time.monotonic()
    partial = p.minio_bin.parent / "partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    env = dict(os.environ, GOBIN=str(partial), GOFLAGS="-mod=mod", CGO_ENABLED="0")
    r = subprocess.run(
        [go, "install", f"{MINIO_MODULE}@{MINIO_VERSION}"], check=False, cwd=partial, env=env, capture_output=True, text=True
    )
    if r.returncode != 0 or not (partial / "minio").is_file():
        out = (r.stdout + r.stderr).strip().splitlines()[-30:]
        raise InfraError(
            f"building MinIO failed (exit {r.returncode}); is the Go module proxy reachable?\n"
            + "\n".join("  | " + line for line in out)
        )
    os.replace(partial / "minio", p.minio_bin)
    shutil.rmtree(partial, ignore_errors=True)
    say(f"built MinIO in {time.monotonic() - t0:.0f}s")


# ---------------------------------------------------------------------------- kafka


def new_cluster_id() -> str:
    """A random Kafka cluster id: 22 url-safe base64 characters, never starting with "-".

    kafka-storage's argument parser takes an id like "-YF-E..." for an option and
    fails ("expected one argument"); Kafka's own Uuid.randomUuid skips such ids too.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def data_dir(p: Paths, secure: bool) -> Path:
    """Plaintext and secure brokers keep separate data dirs: switching modes never reformats or mixes them."""
    return p.kafka_data_secure if secure else p.kafka_data


def read_mode(p: Paths) -> str | None:
    """The mode the broker was last started in ("plaintext" or "secure"), None if never."""
    with contextlib.suppress(OSError):
        mode = p.mode.read_text().strip()
        if mode in MODES:
            return mode
    return None


def ensure_scram_passwords(p: Paths) -> dict[str, str]:
    """The SCRAM users' passwords: random on first use, kept in .infra/kafka/scram.json (0600)."""
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(p.scram.read_text())
        if isinstance(saved, dict) and all(isinstance(saved.get(u), str) and saved[u] for u in SCRAM_USERS):
            return {u: saved[u] for u in SCRAM_USERS}
    for data in (p.kafka_data_secure, *(p.node(n).data_secure for n in CLUSTER_NODES)):
        if (data / "meta.properties").is_file():
            raise InfraError(
                f"kafka: {data} is formatted but {p.scram} (its SCRAM passwords) is missing or damaged; "
                "`infra/infra.py reset` deletes the data and starts over"
            )
    passwords = {u: secrets.token_urlsafe(24) for u in SCRAM_USERS}
    atomic_write(p.scram, json.dumps(passwords, indent=2) + "\n", mode=0o600)
    say(f"kafka: generated SCRAM passwords for {', '.join(SCRAM_USERS)} ({p.scram}, mode 0600)")
    return passwords


def ensure_tls(p: Paths) -> None:
    """A local CA and a broker certificate (127.0.0.1 and localhost), PEM, made once with `cryptography`."""
    if p.ca_cert.is_file() and p.broker_pem.is_file():
        return
    try:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise InfraError("python package cryptography missing: run infra with .venv/bin/python (`make venv`)") from None
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=825)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = name("bernstein local CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(BROKER_CN))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()
    atomic_write(p.ca_key, ca_key.private_bytes(pem, pkcs8, plain).decode(), mode=0o600)
    # Kafka's PEM key store: the private key (PKCS#8), then the certificate chain, in one file
    atomic_write(
        p.broker_pem,
        key.private_bytes(pem, pkcs8, plain).decode() + cert.public_bytes(pem).decode() + ca.public_bytes(pem).decode(),
        mode=0o600,
    )
    atomic_write(p.ca_cert, ca.public_bytes(pem).decode())
    say(f"kafka: generated a local CA and a broker certificate in {p.tls}")


def write_client_properties(p: Paths, passwords: dict[str, str]) -> None:
    """.infra/clients/<user>.properties (0600): what BERNSTEIN_KAFKA_CONFIG_FILE names for each principal."""
    for user in SCRAM_USERS:
        atomic_write(
            p.clients / f"{user}.properties",
            f"""\
# Generated by infra/infra.py up --secure: the local broker's principal User:{user}.
security.protocol=SASL_SSL
sasl.mechanism={SCRAM_MECHANISM}
sasl.username={user}
sasl.password={passwords[user]}
ssl.ca.location={p.ca_cert}
""",
            mode=0o600,
        )


def client_security(p: Paths, mode: str) -> dict[str, str]:
    """librdkafka settings for infra's own probe: the admin's in secure mode, none in plaintext."""
    if mode != "secure":
        return {}
    try:
        passwords = json.loads(p.scram.read_text())
    except (OSError, ValueError):
        raise InfraError(f"kafka: the broker runs secured but {p.scram} (its SCRAM passwords) is unreadable") from None
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": "admin",
        "sasl.password": passwords["admin"],
        "ssl.ca.location": str(p.ca_cert),
    }


def external_security() -> dict[str, str]:
    """For an external cluster: the settings of BERNSTEIN_KAFKA_CONFIG_FILE, read as every client reads them."""
    if not os.environ.get("BERNSTEIN_KAFKA_CONFIG_FILE"):
        return {}
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bernstein.substrate.kafka import KafkaError, security_config

    try:
        return security_config()
    except KafkaError as exc:
        raise InfraError(str(exc)) from None


def ensure_cluster_id(p: Paths, data: Path | None = None, id_file: Path | None = None) -> str:
    """The cluster id of a data dir: the formatted dir's own, else the one kept in ``id_file``, else a new one.

    The single broker keeps it in .infra/kafka/cluster.id, the three-node cluster (one id for all
    three nodes) in .infra/kafka/cluster/cluster.id.
    """
    meta = (data or p.kafka_data) / "meta.properties"
    id_file = id_file or p.cluster_id
    with contextlib.suppress(OSError):
        # An already formatted data dir wins: its id is what the broker will use.
        if m := re.search(r"^cluster\.id=(\S+)", meta.read_text(), re.MULTILINE):
            if not id_file.is_file() or id_file.read_text().strip() != m[1]:
                atomic_write(id_file, m[1] + "\n")
            return m[1]
    with contextlib.suppress(OSError):
        cid = id_file.read_text().strip()
        if len(cid) == 22:
            return cid
    cid = new_cluster_id()
    atomic_write(id_file, cid + "\n")
    say(f"kafka: generated cluster id {cid}")
    return cid


def _listener_config(p: Paths, port: int, cport: int, passwords: dict[str, str] | None, data: Path) -> str:
    if passwords is None:
        return f"""\
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
"""
    return f"""\
# Secure mode (infra/up --secure): clients speak SASL_SSL with SCRAM-SHA-512; the controller
# listener (127.0.0.1) takes only the broker's own certificate (mTLS, User:CN={BROKER_CN}).
listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms={SCRAM_MECHANISM}
sasl.mechanism.inter.broker.protocol={SCRAM_MECHANISM}
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="{passwords["admin"]}";
listener.name.controller.ssl.client.auth=required
ssl.keystore.type=PEM
ssl.keystore.location={p.broker_pem}
ssl.truststore.type=PEM
ssl.truststore.location={p.ca_cert}
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:CN={BROKER_CN}
allow.everyone.if.no.acl.found=false
log.dirs={data}
"""


def _server_properties(node_id: int, quorum: str, listeners: str, replication: tuple[int, int]) -> str:
    """server.properties of one KRaft node (broker+controller); ``replication`` is (factor, min ISR) of every topic."""
    factor, min_isr = replication
    internal = (
        "# Internal topics on a single broker: RF 1 (else init_transactions / group joins hang)\n"
        if factor == 1
        else f"# Internal topics: RF {factor}, min ISR {min_isr}, like the deployment's topics (one node may be down).\n"
    )
    return f"""\
# Generated by infra/infra.py on every broker start; edits are overwritten.
process.roles=broker,controller
node.id={node_id}
{quorum}
{listeners}num.partitions=1
default.replication.factor={factor}
min.insync.replicas={min_isr}
auto.create.topics.enable=false
{internal}# and 1 partition (the default 50 makes the first transaction / group join slow).
offsets.topic.replication.factor={factor}
offsets.topic.num.partitions=1
transaction.state.log.replication.factor={factor}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor={factor}
share.coordinator.state.topic.min.isr={min_isr}
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
# Audit journal: never delete data by age (size retention is unlimited by default).
log.retention.ms=-1
log.retention.bytes=-1
"""


def write_log4j(p: Paths) -> None:
    atomic_write(
        p.log4j,
        """\
# Generated by infra/infra.py. Log4j2 properties format (YAML would need jackson-dataformat-yaml).
status = warn
name = bernstein-kafka
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.raftserver.name = kafka.server.KafkaRaftServer
logger.raftserver.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
logger.controller.name = kafka.server.ControllerServer
logger.controller.level = INFO
logger.logmanager.name = kafka.log.LogManager
logger.logmanager.level = INFO
# Kafka's own shutdown hook logs the clean shutdown; keep Log4j alive until the JVM exits.
shutdownHook = disable
""",
    )


def write_kafka_configs(p: Paths, port: int, cport: int, passwords: dict[str, str] | None = None) -> None:
    """server.properties (0600: in secure mode it holds the admin's SCRAM password) and the Log4j config."""
    quorum = (
        "# Dynamic KRaft quorum (official 4.x layout); storage is formatted with --standalone.\n"
        f"controller.quorum.bootstrap.servers=127.0.0.1:{cport}"
    )
    listeners = _listener_config(p, port, cport, passwords, data_dir(p, passwords is not None))
    atomic_write(p.server_props, _server_properties(1, quorum, listeners, (1, 1)), mode=0o600)
    write_log4j(p)


def cluster_voters(ports: dict[str, int]) -> str:
    """controller.quorum.voters of the three-node cluster: ``1@127.0.0.1:<port>,2@...,3@...``."""
    return ",".join(f"{n}@127.0.0.1:{ports[node_port_keys(n)[1]]}" for n in CLUSTER_NODES)


def cluster_bootstrap(ports: dict[str, int]) -> str:
    """The three nodes' client listeners, as BERNSTEIN_KAFKA_BOOTSTRAP lists them."""
    return ",".join(f"127.0.0.1:{ports[node_port_keys(n)[0]]}" for n in CLUSTER_NODES)


def write_node_config(p: Paths, n: int, ports: dict[str, int], passwords: dict[str, str] | None = None) -> None:
    """Node ``n``'s server.properties (0600) for the three-node cluster, and the shared Log4j config.

    A static quorum (``controller.quorum.voters``): every node is a voter and knows the others from
    its config, so the storage is formatted without --standalone/--initial-controllers, and the
    ports may change while the whole cluster is down (every config is rewritten before it starts).
    """
    kafka, controller = node_port_keys(n)
    quorum = f"# Static KRaft quorum: the three nodes are its voters.\ncontroller.quorum.voters={cluster_voters(ports)}"
    node = p.node(n)
    listeners = _listener_config(p, ports[kafka], ports[controller], passwords, node.data_dir(passwords is not None))
    atomic_write(node.server_props, _server_properties(n, quorum, listeners, CLUSTER_REPLICATION), mode=0o600)
    write_log4j(p)


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


def cluster_cluster_id(p: Paths, secure: bool) -> str:
    """The three nodes' one cluster id: a formatted node's, else the kept or a new one."""
    for n in CLUSTER_NODES:
        data = p.node(n).data_dir(secure)
        if (data / "meta.properties").is_file():
            return ensure_cluster_id(p, data, p.cluster_id_multi)
    return ensure_cluster_id(p, p.node(CLUSTER_NODES[0]).data_dir(secure), p.cluster_id_multi)


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


# ------------------------------------------------------------------------------- s3


S3_LOCK_MODE = os.environ.get("BERNSTEIN_S3_LOCK_MODE", "COMPLIANCE").strip().upper()
"""The bucket's default Object Lock mode: COMPLIANCE (no one, not even MinIO's root, deletes or shortens a locked
version) or GOVERNANCE (a principal granted s3:BypassGovernanceRetention can)."""
S3_LOCK_DAYS = os.environ.get("BERNSTEIN_S3_LOCK_DAYS", "1").strip()
"""How long every new object version is locked by default, in days: 1 for a local test store; a deployment sets
what its retention policy says (docs/operations.md)."""

S3_IDENTITIES: Final = ("producer", "reader", "ops")
"""The S3 identities infra makes on its MinIO, each with the policy of ``s3_policy``; ``.infra/env`` names ops."""


def s3_policy(name: str, bucket: str) -> dict[str, Any]:
    """What each identity may do. A producer puts and gets blobs (no delete, no listing: it cannot see what
    others stored); the verifier and export read blobs and their versions (a poisoned address keeps the
    true bytes as an older version); ops may do anything with buckets, nothing with identities."""
    objects = f"arn:aws:s3:::{bucket}/sha256/*"
    statements: dict[str, list[dict[str, Any]]] = {
        "producer": [{"Effect": "Allow", "Action": ["s3:PutObject", "s3:GetObject"], "Resource": [objects]}],
        "reader": [
            {"Effect": "Allow", "Action": ["s3:GetObject", "s3:GetObjectVersion"], "Resource": [objects]},
            {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:ListBucketVersions"], "Resource": [f"arn:aws:s3:::{bucket}"]},
        ],
        "ops": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]}],
    }
    return {"Version": "2012-10-17", "Statement": statements[name]}


def s3_root_credentials(p: Paths) -> tuple[str, str]:
    """MinIO's root user and password: made at random on the first start (0600); never in .infra/env."""
    try:
        data = json.loads(p.s3_root.read_text())
        return str(data["user"]), str(data["password"])
    except (OSError, ValueError, KeyError, TypeError):
        user, password = "bernstein-root", secrets.token_urlsafe(24)
        atomic_write(p.s3_root, json.dumps({"user": user, "password": password}) + "\n", mode=0o600)
        return user, password


def start_s3(p: Paths, svc: Service, port: int) -> int:
    ensure_minio(p)
    p.s3data.mkdir(parents=True, exist_ok=True)
    atomic_write(p.s3_port, f"{port}\n")
    user, password = s3_root_credentials(p)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(p.s3),
        "MINIO_ROOT_USER": user,
        "MINIO_ROOT_PASSWORD": password,
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
        "MINIO_CI_CD": "1",
    }
    argv = [str(p.minio_bin), "server", "--quiet", "--address", f"127.0.0.1:{port}", str(p.s3data)]
    pid = svc.spawn(argv, env=env)
    say(f"s3: started MinIO pid {pid} on http://127.0.0.1:{port} (log {p.s3_log})")
    return pid


def _s3_probe(endpoint: str, timeout: float = 1.0) -> bool:
    u = urllib.parse.urlsplit(endpoint)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(
        u.hostname or "127.0.0.1",
        u.port or (443 if u.scheme == "https" else 80),
        timeout=timeout,
    )
    try:
        conn.request("GET", "/")
        conn.getresponse().read()
        return True  # any HTTP answer (403 for an unsigned request) means it serves
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def wait_s3(endpoint: str, deadline: float, svc: Service | None = None, pid: int | None = None) -> float:
    t0 = time.monotonic()
    while True:
        if svc is not None and pid is not None and not svc.alive(pid):
            raise InfraError(f"s3: MinIO pid {pid} exited during startup; last lines of {svc.log}:\n{tail(svc.log)}")
        if _s3_probe(endpoint):
            return time.monotonic() - t0
        if time.monotonic() >= deadline:
            if svc is not None:
                raise InfraError(f"s3: not ready after {time.monotonic() - t0:.0f}s; last lines of {svc.log}:\n{tail(svc.log)}")
            raise InfraError(
                f"s3: external endpoint BERNSTEIN_S3_ENDPOINT={endpoint} not reachable after "
                f"{time.monotonic() - t0:.0f}s; start it, or unset the variable to use the local MinIO"
            )
        time.sleep(POLL_S)


def _s3_client(endpoint: str, access: str, secret: str) -> Any:
    try:
        from minio import Minio
    except ImportError:
        raise InfraError(
            "python package minio missing: run infra with .venv/bin/python "
            "(use the infra/up wrapper; create the venv with `make venv`)"
        ) from None
    u = urllib.parse.urlsplit(endpoint)
    return Minio(u.netloc, access_key=access, secret_key=secret, secure=u.scheme == "https", region=S3_REGION)


def ensure_locked_bucket(endpoint: str, root: tuple[str, str], bucket: str) -> None:
    """The local MinIO's bucket: versioned, with Object Lock and a default retention (S3_LOCK_MODE, S3_LOCK_DAYS).
    A locked version cannot be deleted or overwritten; a put under its key only adds a version."""
    import urllib3
    from minio.error import S3Error
    from minio.objectlockconfig import DAYS, ObjectLockConfig

    if S3_LOCK_MODE not in ("COMPLIANCE", "GOVERNANCE") or not S3_LOCK_DAYS.isdigit() or int(S3_LOCK_DAYS) < 1:
        raise InfraError(
            f"BERNSTEIN_S3_LOCK_MODE={S3_LOCK_MODE!r} / BERNSTEIN_S3_LOCK_DAYS={S3_LOCK_DAYS!r}: the mode is COMPLIANCE or "
            "GOVERNANCE, the days a whole number of at least 1"
        )
    client = _s3_client(endpoint, *root)
    try:
        if not client.bucket_exists(bucket):
            client.make_bucket(bucket, object_lock=True)
            say(f"s3: created bucket {bucket} (versioned, Object Lock)")
        client.set_object_lock_config(bucket, ObjectLockConfig(S3_LOCK_MODE, int(S3_LOCK_DAYS), DAYS))
    except S3Error as e:
        raise InfraError(
            f"s3: bucket {bucket!r} with Object Lock failed at {endpoint}: {e.code}: {e.message}; a bucket made without "
            f"Object Lock cannot get it later: `infra/reset` starts the local store afresh"
        ) from None
    except (OSError, ValueError, urllib3.exceptions.HTTPError) as e:
        raise InfraError(f"s3: cannot talk to {endpoint}: {e}") from None


def ensure_s3_identities(p: Paths, endpoint: str, root: tuple[str, str], bucket: str) -> dict[str, tuple[str, str]]:
    """The local MinIO's identities (S3_IDENTITIES) with their policies, each written to .infra/s3/<name>.env (0600);
    their secrets are made once and kept. Returns name -> (access key, secret key)."""
    import urllib3
    from minio.credentials.providers import StaticProvider
    from minio.error import MinioAdminException
    from minio.minioadmin import MinioAdmin

    u = urllib.parse.urlsplit(endpoint)
    admin = MinioAdmin(endpoint=u.netloc, credentials=StaticProvider(*root), secure=u.scheme == "https", region=S3_REGION)
    made: dict[str, tuple[str, str]] = {}
    try:
        for name in S3_IDENTITIES:
            path = p.s3_identities / f"{name}.env"
            known = _read_env_file(path)
            access = f"bernstein-{name}"
            secret = known.get("BERNSTEIN_S3_SECRET_KEY") or secrets.token_urlsafe(24)
            admin.policy_add(f"bernstein-{name}", policy=s3_policy(name, bucket))
            admin.user_add(access, secret)
            admin.policy_set(f"bernstein-{name}", user=access)
            atomic_write(
                path,
                f"BERNSTEIN_S3_ENDPOINT={endpoint}\nBERNSTEIN_S3_ACCESS_KEY={access}\nBERNSTEIN_S3_SECRET_KEY={secret}\n"
                f"BERNSTEIN_S3_BUCKET={bucket}\n",
                mode=0o600,
            )
            made[name] = (access, secret)
    except (MinioAdminException, OSError, ValueError, urllib3.exceptions.HTTPError) as e:
        raise InfraError(f"s3: cannot set up the S3 identities at {endpoint}: {e}") from None
    return made


def _read_env_file(path: Path) -> dict[str, str]:
    with contextlib.suppress(OSError):
        return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {}


def ensure_bucket(endpoint: str, access: str, secret: str, bucket: str) -> None:
    """An external store's bucket, made plain when missing (its owner decides versioning and Object Lock)."""
    client = _s3_client(endpoint, access, secret)
    import urllib3
    from minio.error import S3Error

    try:
        if not client.bucket_exists(bucket):
            client.make_bucket(bucket)
            say(f"s3: created bucket {bucket}")
    except S3Error as e:
        raise InfraError(
            f"s3: bucket {bucket!r} check/create failed at {endpoint}: {e.code}: {e.message}; "
            "check BERNSTEIN_S3_ACCESS_KEY / BERNSTEIN_S3_SECRET_KEY"
        ) from None
    except (OSError, ValueError, urllib3.exceptions.HTTPError) as e:
        raise InfraError(f"s3: cannot talk to {endpoint}: {e}") from None


# ----------------------------------------------------------------------------- commands


def read_layout(p: Paths) -> int:
    """How many brokers the local Kafka was last started with (1, or 3 for `up --brokers 3`); 1 if never."""
    with contextlib.suppress(OSError, ValueError):
        if (n := int(p.brokers.read_text().strip())) == len(CLUSTER_NODES):
            return n
    return 1


class Ctx:
    def __init__(
        self,
        root: Path,
        timeout: float | None,
        secure: bool = False,
        keep_mode: bool = False,
        brokers: int = 1,
        node: int = 0,
        action: str = "",
    ) -> None:
        self.p = Paths(root)
        self.timeout = timeout
        self.secure = secure
        self.keep_mode = keep_mode
        self.brokers = brokers
        self.node = node
        """`node`'s node number and action (stop or start)."""
        self.action = action
        self.kafka = Service(
            "kafka",
            "kafka.Kafka",
            self.p.broker_pid,
            self.p.server_props,
            self.p.broker_out,
        )
        self.nodes = {n: self._node_service(n) for n in CLUSTER_NODES}
        self.s3 = Service("s3", "minio", self.p.s3_pid, self.p.s3data, self.p.s3_log)
        self.ports = load_ports(self.p)

    def _node_service(self, n: int) -> Service:
        node = self.p.node(n)
        return Service(f"kafka-{n}", "kafka.Kafka", node.pid, node.server_props, node.out)

    def running_nodes(self, adopt: bool = True) -> dict[int, int]:
        """The cluster's running nodes and their pids."""
        return {n: pid for n, svc in self.nodes.items() if (pid := svc.running_pid(adopt=adopt)) is not None}

    def own_bootstraps(self) -> set[str]:
        """The bootstrap strings that name this root's own Kafka (single broker or cluster)."""
        own = set()
        if "kafka" in self.ports:
            own.add(f"127.0.0.1:{self.ports['kafka']}")
        if all(key in self.ports for n in CLUSTER_NODES for key in node_port_keys(n)):
            own.add(cluster_bootstrap(self.ports))
        return own

    # external services ------------------------------------------------------------
    def kafka_external(self) -> str | None:
        bs = os.environ.get("BERNSTEIN_KAFKA_BOOTSTRAP", "").strip()
        # An env exported from our own .infra/env still means "the local broker" (or cluster).
        if not bs or bs in self.own_bootstraps():
            return None
        return bs

    def s3_external(self) -> str | None:
        ep = os.environ.get("BERNSTEIN_S3_ENDPOINT", "").strip().rstrip("/")
        if not ep or ("s3" in self.ports and ep == f"http://127.0.0.1:{self.ports['s3']}"):
            return None
        if not ep.startswith(("http://", "https://")):
            raise InfraError(f"BERNSTEIN_S3_ENDPOINT={ep!r} must start with http:// or https://")
        return ep

    def s3_creds(self, external: bool) -> tuple[str, str, str]:
        bucket = os.environ.get("BERNSTEIN_S3_BUCKET", "").strip() or DEFAULT_BUCKET
        if external:
            ak = os.environ.get("BERNSTEIN_S3_ACCESS_KEY", "")
            sk = os.environ.get("BERNSTEIN_S3_SECRET_KEY", "")
            if not ak or not sk:
                raise InfraError(
                    "BERNSTEIN_S3_ENDPOINT is set, so BERNSTEIN_S3_ACCESS_KEY and BERNSTEIN_S3_SECRET_KEY must be set too"
                )
            return ak, sk, bucket
        return "", "", bucket  # the local MinIO's: its ops identity, made once it is up (ensure_s3_identities)

    def deadline(self, external: bool) -> float:
        t = self.timeout if self.timeout is not None else (EXTERNAL_READY_TIMEOUT_S if external else READY_TIMEOUT_S)
        return time.monotonic() + t

    # ports ------------------------------------------------------------------------
    def settle_ports(self, keys: list[str]) -> None:
        """Give every key in `keys` (services about to be started) a usable port: keep the
        persisted one unless a foreign process now listens on it."""
        changed = False
        used = set(self.ports.values())
        for key in keys:
            old = self.ports.get(key)
            if old is not None and _port_free(old):
                continue
            (new,) = _free_ports(1, used)
            used.add(new)
            if old is not None:
                warn(f"{key} port {old} is taken by another process; using {new}")
            self.ports[key] = new
            changed = True
        if changed or not self.p.ports.is_file():
            save_ports(self.p, self.ports)

    def fixed_node_ports(self, nodes: list[int]) -> None:
        """Nodes started while others run keep their ports: the running nodes know them as quorum voters."""
        for n in nodes:
            for key in node_port_keys(n):
                port = self.ports.get(key)
                if port is None:
                    raise InfraError(
                        f"kafka: node {n} has no {key} port in {self.p.ports}; `infra/down`, then `infra/up --brokers 3`"
                    )
                if not _port_free(port):
                    raise InfraError(
                        f"kafka: node {n}'s {key} port {port} is taken by another process, and the running nodes know "
                        "the node by it; `infra/down`, then `infra/up --brokers 3` picks new ports"
                    )

    # env file ---------------------------------------------------------------------
    def write_env(
        self,
        bootstrap: str,
        s3_endpoint: str,
        ak: str,
        sk: str,
        bucket: str,
        config_file: str | None,
        replication: tuple[int, int] | None = None,
    ) -> None:
        """.infra/env, mode 0600 (it holds the S3 secret); in secure mode it names the admin's client properties.

        ``replication`` (the three-node cluster's (3, 2)) becomes BERNSTEIN_TOPIC_REPLICATION_FACTOR and
        BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS; without it the settings' default (1) applies.
        """
        values = [
            ("BERNSTEIN_KAFKA_BOOTSTRAP", bootstrap),
            *([("BERNSTEIN_KAFKA_CONFIG_FILE", config_file)] if config_file else []),
            ("BERNSTEIN_S3_ENDPOINT", s3_endpoint),
            ("BERNSTEIN_S3_ACCESS_KEY", ak),
            ("BERNSTEIN_S3_SECRET_KEY", sk),
            ("BERNSTEIN_S3_BUCKET", bucket),
        ]
        if replication is not None:
            values += [
                ("BERNSTEIN_TOPIC_REPLICATION_FACTOR", str(replication[0])),
                ("BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS", str(replication[1])),
            ]
        atomic_write(self.p.env, "".join(f"{k}={v}\n" for k, v in values), mode=0o600)


PRIVATE_UMASK: Final = 0o077
"""What every file and directory infra (and the Kafka and S3 processes it starts) creates under .infra/ gets:
no bits for group or others. The browser worker's Chromium runs as an unprivileged local user; S3's secret,
the broker's log segments and the keys must not be readable by it (or any other local account)."""


def make_private(root: Path) -> int:
    """Take group and other bits off everything under ``root`` (made before the umask, or by an older version);
    returns how many entries changed. Symbolic links are left alone (their target is not ours to change)."""
    changed = 0
    for directory, subdirs, files in os.walk(root):
        for path in (Path(directory), *(Path(directory) / name for name in (*subdirs, *files))):
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue  # a log rotated away, a temporary file renamed
            if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
                changed += 1
    return changed


@contextlib.contextmanager
def locked(p: Paths) -> Iterator[None]:
    os.umask(PRIVATE_UMASK)
    p.state.mkdir(parents=True, exist_ok=True)
    with open(p.lock, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another infra command on {p.state} to finish ...")
            fcntl.flock(f, fcntl.LOCK_EX)
        make_private(p.state)
        yield


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


COMMANDS = {
    "up": cmd_up,
    "prepare": cmd_prepare,
    "down": cmd_down,
    "status": cmd_status,
    "restart-kafka": cmd_restart_kafka,
    "node": cmd_node,
    "reset": cmd_reset,
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root",
        type=Path,
        default=argparse.SUPPRESS,
        help="project root; state lives in ROOT/.infra (default: the repository root)",
    )
    common.add_argument(
        "--timeout",
        type=float,
        default=argparse.SUPPRESS,
        help=f"readiness deadline in seconds (default {READY_TIMEOUT_S:.0f}; "
        f"{EXTERNAL_READY_TIMEOUT_S:.0f} for external services)",
    )
    ap = argparse.ArgumentParser(
        prog="infra.py",
        parents=[common],
        description="Local Kafka (KRaft) + MinIO for bernstein.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, func in COMMANDS.items():
        parser = sub.add_parser(name, parents=[common], help=(func.__doc__ or "").strip() or None)
        if name == "up":
            parser.add_argument(
                "--secure",
                action="store_true",
                help="broker with a SASL_SSL listener (SCRAM-SHA-512 users admin, scheduler, producer, auditor), "
                "the KRaft authorizer and no access without an ACL; without it the broker is plaintext. "
                "A running broker of the other mode is restarted (each mode has its own data dir)",
            )
            parser.add_argument(
                "--keep-mode",
                action="store_true",
                help="a running broker keeps its mode and its number of brokers (--secure and --brokers then only "
                "apply when Kafka is started)",
            )
            parser.add_argument(
                "--brokers",
                type=int,
                choices=(1, len(CLUSTER_NODES)),
                default=1,
                help="1 (default): one broker; 3: a local three-node KRaft cluster (each node broker and controller), "
                "topics with replication factor 3 and min.insync.replicas 2. A running Kafka of the other kind is "
                "stopped (each keeps its own data dirs)",
            )
        if name == "node":
            parser.add_argument("action", choices=("stop", "start"), help="stop (SIGTERM, clean shutdown) or start the node")
            parser.add_argument("number", type=int, choices=CLUSTER_NODES, help="the node: 1, 2 or 3")
    return ap.parse_args(argv)


def require_python_deps(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise InfraError(
            f"python package(s) {', '.join(missing)} missing in {sys.executable}: run infra with "
            f"{REPO / '.venv/bin/python'} (the infra/up wrapper does; create the venv with `make venv`)"
        )


def _reexec_in_venv_if_needed() -> None:
    """`infra/infra.py ...` run by a system python3 switches to the project venv (which has
    confluent_kafka and minio) when the current interpreter lacks them."""
    venv = REPO / ".venv"
    if importlib.util.find_spec("confluent_kafka") is not None or not (venv / "bin" / "python").exists():
        return
    if Path(sys.prefix).resolve() == venv.resolve():
        return
    py = str(venv / "bin" / "python")
    os.execv(py, [py, str(Path(__file__).resolve()), *sys.argv[1:]])  # noqa: S606 - re-run under the venv's python


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    root = Path(getattr(args, "root", REPO)).expanduser().resolve()
    try:
        ctx = Ctx(
            root,
            getattr(args, "timeout", None),
            getattr(args, "secure", False),
            getattr(args, "keep_mode", False),
            getattr(args, "brokers", 1),
            getattr(args, "number", 0),
            getattr(args, "action", ""),
        )
        return COMMANDS[args.command](ctx)
    except InfraError as e:
        warn(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        warn("interrupted; processes already started keep running (`infra/down` stops them)")
        return 130


if __name__ == "__main__":
    _reexec_in_venv_if_needed()
    sys.exit(main())
