"""One command's view of a root (``Ctx``): its paths, services and ports, which services are external (from the
BERNSTEIN_* variables), deadlines, and the .infra/env it writes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from infra.base import CLUSTER_NODES, EXTERNAL_READY_TIMEOUT_S, READY_TIMEOUT_S, InfraError, atomic_write, warn
from infra.paths import Paths
from infra.ports import _free_ports, _port_free, cluster_bootstrap, load_ports, node_port_keys, save_ports
from infra.processes import Service
from infra.s3 import DEFAULT_BUCKET


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
