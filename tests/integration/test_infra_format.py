"""The real kafka-storage tool formats a data dir whose cluster id starts with "-".

A CI run once drew such an id at random and `kafka-storage format -t -YF-...` failed with
"expected one argument"; infra now passes `--cluster-id=<id>`.
"""

from __future__ import annotations

import socket
from pathlib import Path

import infra


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_storage_format_accepts_a_cluster_id_that_starts_with_a_dash(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    assert any(paths.kafka_libs.glob("kafka_*.jar")), f"no Kafka jars in {paths.kafka_libs}: run infra/up first"
    paths.kafka.mkdir(parents=True)
    infra.write_kafka_configs(paths, _free_port(), _free_port())
    cid = "-YF-E-BaRXi1BunrBM5b9A"
    infra.format_kafka_if_needed(paths, infra.java_exe(), cid)
    meta = (paths.kafka_data / "meta.properties").read_text()
    assert f"cluster.id={cid}\n" in meta
