"""Verifying from a live cluster reads one snapshot (``bernstein.verifier.kafka_source``).

A scheduler keeps committing while the verifier reads. The source pins where
each partition ends when it first touches it (checkpoints, then audit, then
journal), so a checkpoint committed while the verifier is half way through
the audit chain is not read against a shorter chain. The appends below happen
at the worst moment, deterministically: when the verifier starts reading the
checkpoints topic, after it has begun the audit chain.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from typing import Any

import pytest

from bernstein.consumers.core.model import SchedulerConfig
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell, ShellOptions
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.keys import InstallKeys, TrustedKeys
from bernstein.verifier.kafka_source import KafkaSource
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_VERIFIED
from bernstein.verifier.sources import StoredRecord
from bernstein.verifier.verify import verify
from tests.support.kafka import encode_close, fresh_topics, produce_all, scheduler_config, signed_stage
from tests.support.producers import producer_trust

pytestmark = pytest.mark.integration


def _schedule(bootstrap: str, topics: Topics, config: SchedulerConfig, items: list[tuple[bytes, bytes]]) -> None:
    produce_all(bootstrap, topics.submissions, items)
    shell = SchedulerShell(
        bootstrap=bootstrap,
        topics=topics,
        partition=0,
        core=SchedulerCore(config),
        options=ShellOptions(batch_max=4),
        progress=io.StringIO(),
    )
    counters = shell.run(until=lambda c: c.consumed >= len(items), idle_exit=30.0)
    assert counters.consumed == len(items)


class _AppendingSource(KafkaSource):
    """A KafkaSource that lets the scheduler commit more steps the moment the checkpoints topic is first read."""

    def __init__(self, bootstrap: str, topics: Topics, append: Any) -> None:
        super().__init__(bootstrap, topics)
        self.append = append
        self.reads: list[str] = []

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        self.reads.append(stream)
        if stream == "checkpoints" and self.append is not None:
            append, self.append = self.append, None
            append()
        yield from super().records(stream, partition, headers=headers)


class _UnpinnedSource(_AppendingSource):
    """The same, re-reading each partition's end on every scan (the reader before the snapshot pin)."""

    def bounds(self, stream: str, partition: int) -> tuple[int, int]:
        self._ends.clear()
        return super().bounds(stream, partition)


def test_a_verify_from_kafka_reads_one_snapshot_while_the_scheduler_appends(
    settings: Settings, s3_store: S3BlobStore, install_keys: InstallKeys
) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)
    config = dataclasses.replace(scheduler_config(install_keys, seal_every=2), checkpoint_every=1)  # one per step
    run = "snap-a"
    stages = [signed_stage(run, f"s{i}", s3_store) for i in range(3)]
    _schedule(bootstrap, topics, config, [*stages, (run.encode(), encode_close(run))])
    trusted = TrustedKeys.from_install(install_keys).merged(producer_trust())  # and the test producers (keys trust --manifest)
    batch = 0

    def more() -> None:
        nonlocal batch
        batch += 1
        other = f"snap-b{batch}"
        _schedule(
            bootstrap,
            topics,
            config,
            [signed_stage(other, f"s{i}", s3_store) for i in range(2)],
        )

    pinned = _AppendingSource(bootstrap, topics, more)
    audit_before = len(list(KafkaSource(bootstrap, topics).records("audit", 0)))
    report = verify(run, pinned, cas=s3_store, trusted=trusted)
    assert batch == 1 and "checkpoints" in pinned.reads  # the scheduler did commit while the verifier read
    assert report.exit_code == EXIT_VERIFIED, report.header
    assert len(list(pinned.records("audit", 0))) == audit_before  # the pinned snapshot, not what is there now
    assert len(list(KafkaSource(bootstrap, topics).records("audit", 0))) == audit_before + 2 + 1  # two stages, a seal

    # the same moment without the pin: the checkpoints read commit to audit records the chain read did not hold
    report = verify(run, _UnpinnedSource(bootstrap, topics, more), cas=s3_store, trusted=trusted)
    assert batch == 2
    assert report.exit_code == EXIT_MISMATCH
    assert report.header.audit is not None and report.header.audit.problem is not None
    assert report.header.audit.problem.code == "AUDIT_TRUNCATED_BEFORE_CHECKPOINT"
