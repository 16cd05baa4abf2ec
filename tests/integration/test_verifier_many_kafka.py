"""Verifying every run of a live cluster reads each partition once (``verify_many``, ``activity verify --all``).

The real scheduler journals five runs on a two-partition topic (each run on its murmur2
partition, one left open); one run's journal then gets a record it should not have. Every
topic partition is read once by ``verify_many`` over the real ``KafkaSource``, each run's
report equals ``verify`` of that run alone, and the command run as the ``auditor``
principal prints the same verdicts with the worst exit code.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell, ShellOptions
from bernstein.schemas.partitioning import partition_for
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.keys import InstallKeys, TrustedKeys
from bernstein.verifier.kafka_source import KafkaSource
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_OPEN, EXIT_VERIFIED
from bernstein.verifier.sources import StoredRecord
from bernstein.verifier.verify import verify, verify_many
from tests.conftest import Services, as_component, bernstein_env
from tests.support.kafka import encode_close, fresh_topics, produce_all, scheduler_config, signed_stage
from tests.support.producers import producer_trust
from tests.support.verdicts import json_of

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


class CountingKafka(KafkaSource):
    def __init__(self, bootstrap: str, topics: Topics) -> None:
        super().__init__(bootstrap, topics)
        self.reads: Counter[tuple[str, int]] = Counter()

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        self.reads[stream, partition] += 1
        return super().records(stream, partition, headers=headers)


def schedule(bootstrap: str, topics: Topics, core: SchedulerCore, partition: int, items: list[tuple[bytes, bytes]]) -> None:
    produce_all(bootstrap, topics.submissions, items, partition=partition)
    shell = SchedulerShell(
        bootstrap=bootstrap,
        topics=topics,
        partition=partition,
        core=core,
        options=ShellOptions(batch_max=4),
        progress=io.StringIO(),
    )
    counters = shell.run(until=lambda c: bool(c.consumed >= len(items)), idle_exit=30.0)
    assert counters.consumed == len(items)


def runs_on(partition: int, count: int, tag: str) -> list[str]:
    """``count`` run ids whose murmur2 partition of two is ``partition``."""
    names = (f"many-{tag}-{i}" for i in range(1000))
    return [name for name in names if partition_for(name.encode(), 2) == partition][:count]


def test_every_run_of_a_cluster_is_verified_reading_each_partition_once(
    services: Services, prefix: str, settings: Settings, s3_store: S3BlobStore, install_keys: InstallKeys, tmp_path: Path
) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, prefix, partitions=2)
    config = scheduler_config(install_keys, seal_every=2)
    placed = {0: runs_on(0, 3, "zero"), 1: runs_on(1, 2, "one")}
    open_run = placed[1][-1]
    for partition, names in placed.items():
        items = [signed_stage(run, f"s{i}", s3_store) for i in range(2) for run in names]
        items += [(run.encode(), encode_close(run)) for run in names if run != open_run]
        schedule(bootstrap, topics, SchedulerCore(config), partition, items)
    # a record replayed into one run's journal (appended after its final seal)
    tampered = placed[0][1]
    replayed = next(r for r in KafkaSource(bootstrap, topics).records("journal", 0) if r.key == tampered.encode())
    produce_all(bootstrap, topics.journal, [(replayed.key, replayed.value)], partition=0)

    trusted = TrustedKeys.from_install(install_keys).merged(producer_trust())
    every = sorted(placed[0] + placed[1])
    counting = CountingKafka(bootstrap, topics)
    reports = verify_many(None, counting, cas=s3_store, trusted=trusted)
    assert [r.run_id for r in reports] == every
    assert set(counting.reads.values()) == {1}
    assert {("journal", 0), ("journal", 1), ("audit", 0), ("audit", 1), ("checkpoints", 0), ("refusals", 1)} <= set(
        counting.reads
    )
    alone = {run: json_of(verify(run, KafkaSource(bootstrap, topics), cas=s3_store, trusted=trusted)) for run in every}
    assert {r.run_id: json_of(r) for r in reports} == alone
    expected = {run: EXIT_VERIFIED for run in every} | {tampered: EXIT_MISMATCH, open_run: EXIT_OPEN}
    assert {run: document["exit_code"] for run, document in alone.items()} == expected
    assert alone[tampered]["seal"]["problem"]["code"] == "ENTRY_AFTER_FINAL_SEAL"

    # the command, as the auditor principal
    trusted_file = tmp_path / "trusted.json"
    trusted.write(trusted_file)
    args = ["activity", "verify", "--all", "--json", "--trusted-keys", str(trusted_file)]
    base = {k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_")}
    env = {**base, **as_component(args, bernstein_env(services, prefix, install_keys))}
    assert env.get("BERNSTEIN_KAFKA_CONFIG_FILE", "auditor.properties").endswith("auditor.properties")
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=300
    )
    assert result.returncode == EXIT_MISMATCH, result.stderr
    documents = json.loads(result.stdout)
    assert {d["run"]: d["exit_code"] for d in documents} == expected
    assert [d["run"] for d in documents] == every
