"""Local infrastructure for bernstein: a Kafka 4.x broker (KRaft) or a three-node cluster, and a MinIO server.

infra/infra.py is the command line (infra/up, infra/down, infra/status and infra/kafka-node run it); the
code is this package, one module per concern, each importing only those listed before it:

- ``base``: the repository root, timings, node ids, ``InfraError``, ``say``/``warn``, ``atomic_write``
- ``paths``: where state and caches live (``Paths``, ``NodePaths``) and what the state files say
- ``processes``: ``Service`` (a process of ours by pid file and command line), stopping, the lock
- ``ports``: the services' ports (.infra/ports.json) and the addresses made from them
- ``tools``: java, Kafka's jars (Maven Central) and MinIO (the Go module proxy), fetched or built once
- ``secure``: the SASL_SSL broker's SCRAM users, CA and certificate, client properties
- ``broker_config``: cluster ids, server.properties and Log4j config (files only)
- ``broker``: formatting, starting and waiting for the broker or the cluster's nodes
- ``s3``: the local MinIO (locked bucket, identities and policies) or an external store's bucket
- ``context``: ``Ctx``, one command's view of a root (external services, ports, .infra/env)
- ``commands``: the subcommands ``cmd_*``; ``cli``: their parser and ``main``

Standard library only at import; confluent_kafka, minio and cryptography are imported when needed.
The names below are the package's interface (tests import them as ``infra.<name>``).
"""

from __future__ import annotations

from infra.base import CLUSTER_NODES, EXTERNAL_READY_TIMEOUT_S, POLL_S, READY_TIMEOUT_S, REPO, InfraError, atomic_write, say, warn
from infra.broker import (
    KAFKA_JVM_OPTS,
    NODE_JVM_OPTS,
    format_kafka_if_needed,
    kafka_broker_ids,
    start_cluster_nodes,
    start_kafka,
    storage_format_argv,
    wait_cluster,
    wait_kafka,
)
from infra.broker_config import (
    CLUSTER_REPLICATION,
    cluster_cluster_id,
    ensure_cluster_id,
    new_cluster_id,
    write_kafka_configs,
    write_log4j,
    write_node_config,
)
from infra.cli import COMMANDS, main, parse_args
from infra.commands import cmd_down, cmd_node, cmd_prepare, cmd_reset, cmd_restart_kafka, cmd_status, cmd_up
from infra.context import Ctx
from infra.paths import JAR_CACHE, MINIO_VERSION, MODES, TOOL_CACHE, NodePaths, Paths, data_dir, read_layout, read_mode
from infra.ports import PORT_KEYS, cluster_bootstrap, cluster_voters, load_ports, node_port_keys, save_ports
from infra.processes import LOG_TAIL_LINES, PRIVATE_UMASK, STOP_TIMEOUT_S, Service, locked, make_private, stop_services, tail
from infra.s3 import (
    DEFAULT_BUCKET,
    S3_IDENTITIES,
    S3_LOCK_DAYS,
    S3_LOCK_MODE,
    S3_REGION,
    ensure_bucket,
    ensure_locked_bucket,
    ensure_s3_identities,
    s3_policy,
    s3_root_credentials,
    start_s3,
    wait_s3,
)
from infra.secure import (
    BROKER_CN,
    SCRAM_MECHANISM,
    SCRAM_USERS,
    client_security,
    ensure_scram_passwords,
    ensure_tls,
    external_security,
    write_client_properties,
)
from infra.tools import KAFKA_POM, MINIO_MODULE, MVN_DEP_PLUGIN, ensure_kafka_jars, ensure_minio, java_exe, require_python_deps

__all__ = [
    "REPO",
    "CLUSTER_NODES",
    "POLL_S",
    "READY_TIMEOUT_S",
    "EXTERNAL_READY_TIMEOUT_S",
    "InfraError",
    "say",
    "warn",
    "atomic_write",
    "JAR_CACHE",
    "MINIO_VERSION",
    "TOOL_CACHE",
    "MODES",
    "Paths",
    "NodePaths",
    "data_dir",
    "read_mode",
    "read_layout",
    "STOP_TIMEOUT_S",
    "LOG_TAIL_LINES",
    "Service",
    "stop_services",
    "tail",
    "PRIVATE_UMASK",
    "make_private",
    "locked",
    "node_port_keys",
    "PORT_KEYS",
    "load_ports",
    "save_ports",
    "cluster_voters",
    "cluster_bootstrap",
    "KAFKA_POM",
    "MVN_DEP_PLUGIN",
    "MINIO_MODULE",
    "java_exe",
    "ensure_kafka_jars",
    "ensure_minio",
    "require_python_deps",
    "SCRAM_MECHANISM",
    "SCRAM_USERS",
    "BROKER_CN",
    "ensure_scram_passwords",
    "ensure_tls",
    "write_client_properties",
    "client_security",
    "external_security",
    "CLUSTER_REPLICATION",
    "new_cluster_id",
    "ensure_cluster_id",
    "write_log4j",
    "write_kafka_configs",
    "write_node_config",
    "cluster_cluster_id",
    "KAFKA_JVM_OPTS",
    "NODE_JVM_OPTS",
    "format_kafka_if_needed",
    "storage_format_argv",
    "start_kafka",
    "start_cluster_nodes",
    "kafka_broker_ids",
    "wait_kafka",
    "wait_cluster",
    "DEFAULT_BUCKET",
    "S3_REGION",
    "S3_LOCK_MODE",
    "S3_LOCK_DAYS",
    "S3_IDENTITIES",
    "s3_policy",
    "s3_root_credentials",
    "start_s3",
    "wait_s3",
    "ensure_locked_bucket",
    "ensure_s3_identities",
    "ensure_bucket",
    "Ctx",
    "cmd_up",
    "cmd_down",
    "cmd_status",
    "cmd_restart_kafka",
    "cmd_node",
    "cmd_reset",
    "cmd_prepare",
    "COMMANDS",
    "parse_args",
    "main",
]
