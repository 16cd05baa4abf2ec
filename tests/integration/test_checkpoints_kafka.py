"""Signed partition checkpoints through the real broker: written, restored after a restart, verified.

The scheduler shell (Python and native core) journals runs that close, a late
stage refused after a close, and enough crossings for periodic checkpoints
(``checkpoint_every`` 4). What Kafka holds on ``<prefix>.checkpoints`` must be
byte for byte what the pure core folds over the input partition, also when the
scheduler stopped half way and rebuilt its state from the committed topics; the
verifier, reading Kafka, checks every run against the checkpoints.
"""

from __future__ import annotations

import dataclasses
import io

import pytest

from bernstein.consumers.core.model import SchedulerConfig
from bernstein.consumers.core.native import NativeSchedulerCore, native_status
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell, ShellOptions
from bernstein.schemas import codec
from bernstein.schemas.canonical import checkpoint_genesis, checkpoint_hash
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Settings
from bernstein.substrate.keys import InstallKeys, TrustedKeys
from bernstein.verifier.kafka_source import KafkaSource
from bernstein.verifier.report import EXIT_VERIFIED
from bernstein.verifier.verify import verify
from tests.support.kafka import (
    encode_close,
    encode_submission,
    fold,
    fresh_topics,
    produce_all,
    read_outputs,
    read_partition,
    scheduler_config,
)
from tests.support.producers import producer_trust

pytestmark = pytest.mark.integration


def _inputs(store: S3BlobStore) -> list[tuple[bytes, bytes]]:
    items: list[tuple[bytes, bytes]] = []
    for run in ("cp-a", "cp-b", "cp-c"):
        for i in range(3):
            items.append(
                (run.encode(), encode_submission(run_id=run, stage_id=f"s{i}", pages=[f"{run} {i}".encode()], store=store))
            )
        items.append((run.encode(), encode_close(run)))
        # a stage after the close: refused (RUN_CLOSED), written after the run's final seal
        items.append((run.encode(), encode_submission(run_id=run, stage_id="late", pages=[b"late"], store=store)))
    return items


def _shell(settings: Settings, config: SchedulerConfig, core_kind: str) -> SchedulerShell:
    assert settings.kafka_bootstrap is not None
    core = NativeSchedulerCore(config, 0) if core_kind == "native" else SchedulerCore(config)
    return SchedulerShell(
        bootstrap=settings.kafka_bootstrap,
        topics=settings.topics,
        partition=0,
        core=core,
        options=ShellOptions(batch_max=4),
        progress=io.StringIO(),
    )


@pytest.mark.parametrize("core_kind", ["python", "native"])
def test_checkpoints_are_written_restored_and_verified_through_the_broker(
    settings: Settings, s3_store: S3BlobStore, install_keys: InstallKeys, core_kind: str
) -> None:
    if core_kind == "native" and not native_status()[0]:
        pytest.skip(native_status()[1])
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)
    config = dataclasses.replace(scheduler_config(install_keys, seal_every=2), checkpoint_every=4)
    items = _inputs(s3_store)
    half = 7
    produce_all(bootstrap, topics.submissions, items[:half])
    first = _shell(settings, config, core_kind).run(until=lambda c: c.consumed >= half, idle_exit=30.0)
    assert first.consumed == half
    # the second instance rebuilds its state (checkpoint chain included) from what Kafka committed
    produce_all(bootstrap, topics.submissions, items[half:])
    second = _shell(settings, config, core_kind).run(until=lambda c: c.consumed >= len(items) - half, idle_exit=30.0)
    assert second.consumed == len(items) - half

    stored = read_outputs(bootstrap, topics)
    expected = fold(config, read_partition(bootstrap, topics, "submissions"))
    for stream in ("journal", "refusals", "audit", "deadletter", "checkpoints"):
        assert [r.stored() for r in stored[stream]] == [(o.key, o.value, o.headers, o.timestamp_ms) for o in expected[stream]], (
            stream
        )

    checkpoints = [codec.decode(r.record["payload"]).record for r in stored["checkpoints"]]
    assert len(checkpoints) >= 5  # three final seals and periodic ones
    assert {c["reason"] for c in checkpoints} == {"final", "periodic"}
    previous = checkpoint_genesis(0)
    for seq, (record, checkpoint) in enumerate(zip(stored["checkpoints"], checkpoints, strict=True)):
        assert (checkpoint["seq"], checkpoint["prev_hash"], record.key) == (seq, previous, b"0")
        previous = checkpoint_hash(record.record["payload"])
    audit = stored["audit"]
    assert all(codec.decode(r.value or b"").schema.name == codec.AUDIT_RECORD_V2 for r in audit)
    last = checkpoints[-1]
    assert last["audit_head"] == audit[last["audit_seq"] - 1].record["mac"]

    trusted = TrustedKeys.from_install(install_keys).merged(producer_trust())  # and the test producers (keys trust --manifest)
    for run in ("cp-a", "cp-b", "cp-c"):
        report = verify(run, KafkaSource(bootstrap, topics), cas=s3_store, trusted=trusted)
        assert report.exit_code == EXIT_VERIFIED, report.header
        assert report.header.audit is not None
        assert report.header.audit.checkpoints == len(checkpoints)
        assert report.header.audit.uncovered == len(audit) - last["audit_seq"]
