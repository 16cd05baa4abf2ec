"""Where infra keeps things: the state under ROOT/.infra (``Paths``, one ``NodePaths`` per cluster node), the
jar and tool caches shared by every root, and what the state files say (mode, layout)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from infra.base import CLUSTER_NODES, REPO

# Fetched jars are a cache, not state: they always live in the repository's .infra,
# whatever --root says, so isolated test instances do not copy 140 MB each.
JAR_CACHE = REPO / ".infra"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
"""The MinIO server, built from the Go module proxy (`go install`, ~6 min once) into TOOL_CACHE."""
TOOL_CACHE = Path(os.environ.get("BERNSTEIN_TOOL_CACHE") or Path.home() / ".cache" / "bernstein")
"""Built tools kept across clones and `infra/reset` (BERNSTEIN_TOOL_CACHE overrides): MinIO's binary."""

MODES = ("plaintext", "secure")


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


def read_layout(p: Paths) -> int:
    """How many brokers the local Kafka was last started with (1, or 3 for `up --brokers 3`); 1 if never."""
    with contextlib.suppress(OSError, ValueError):
        if (n := int(p.brokers.read_text().strip())) == len(CLUSTER_NODES):
            return n
    return 1
