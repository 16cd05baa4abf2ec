"""No input record stops a partition (the security review's F1).

A producer may send what the scheduler's consumer cannot read: a zstd value that inflates past what the
client will receive (the review's "compression bomb": a few KB on the wire, 150 MB inflated). The broker
takes it (the submissions topic keeps batches as sent, so the broker never inflates it in its heap); the
scheduler's consumer gets ``_BAD_COMPRESSION`` at that offset, fetches it once more, then dead-letters the
offset (INPUT_UNREADABLE, the client's error as the detail) and reads on. An operator can also quarantine
an input offset by name (INPUT_QUARANTINED). Every input offset is accounted for once, the outputs are
byte-identical to the pure core's, and the honest runs around the bomb verify.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bernstein.consumers.core.model import InputRecord, OutputRecord, SchedulerConfig
from bernstein.consumers.core.native import make_core
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.consumers.shell import SchedulerShell, ShellOptions
from bernstein.schemas.records import DeadLetterCode
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import client_config
from bernstein.substrate.keys import InstallKeys, TrustedKeys
from bernstein.verifier.verify import verify
from tests.support.kafka import (
    CachedSource,
    crossings,
    fresh_topics,
    produce_all,
    read_outputs,
    scheduler_config,
    stored_form,
)
from tests.support.principals import producer_principal
from tests.support.scheduler_process import small_plan

BOMB_BYTES = 150_000_000
"""Inflated size of the bomb: past librdkafka's receive.message.max.bytes (100 MB), so the consumer cannot read it."""
LARGE_BYTES = 60_000_000
"""A value 28 times the documented limit that still inflates within what the consumer receives."""


def produce_bomb(bootstrap: str, topic: str, key: bytes, size: int = BOMB_BYTES) -> int:
    """A zstd batch of a few KB that inflates to ``size``; returns its offset (the broker must take it)."""
    producer = Producer(
        client_config(bootstrap, **{"compression.type": "zstd", "message.max.bytes": 1_000_000_000, "linger.ms": 0})
    )
    delivered: list[Any] = []
    producer.produce(topic, b"\xc3\x01" + bytes(size - 2), key, partition=0, on_delivery=lambda e, m: delivered.append((e, m)))
    producer.flush(60)
    ((error, message),) = delivered
    assert error is None, error
    return int(message.offset())


def readable_inputs(bootstrap: str, topics: Topics, count: int) -> tuple[dict[int, InputRecord], list[str]]:
    """The submissions partition as a consumer can read it: offset -> record, and the errors it met on the way."""
    consumer = Consumer(client_config(bootstrap, **{"group.id": "unreadable-test", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topics.submissions, 0, 0)])
    found: dict[int, InputRecord] = {}
    errors: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(found) + len(errors) < count and time.monotonic() < deadline:
            for m in consumer.consume(100, 1.0):
                if m.error() is None:
                    ts_type, ts = m.timestamp()
                    found[m.offset()] = InputRecord(m.topic(), 0, m.offset(), ts if ts_type else 0, m.key(), m.value())
                elif m.offset() is not None and m.offset() >= 0 and m.offset() not in found:
                    errors.append(m.error().str())
                    consumer.seek(TopicPartition(topics.submissions, 0, m.offset() + 1))
    finally:
        consumer.close()
    return found, errors


def expected_outputs(
    config: SchedulerConfig, inputs: dict[int, InputRecord], dead: dict[int, dict[str, Any]], count: int
) -> dict[str, list[OutputRecord]]:
    """The pure core over the partition, each offset in ``dead`` rejected with its dead letter's code and detail;
    a stand-in for an unread offset carries the timestamp of the input before it."""
    core = SchedulerCore(config)
    state = initial_state(config, 0)
    outputs: dict[str, list[OutputRecord]] = {s: [] for s in ("journal", "refusals", "audit", "deadletter", "checkpoints")}
    last_ts = 0
    for offset in range(count):
        record = inputs.get(offset)
        if record is None:
            record = InputRecord(inputs[0].topic, 0, offset, last_ts, None, None)
        last_ts = record.timestamp_ms
        if offset in dead:
            state, outs = core.reject(state, record, DeadLetterCode(dead[offset]["code"]), dead[offset]["detail"])
        else:
            state, outs = core.step(state, record)
        for out in outs:
            outputs[out.stream.value].append(out)
    return outputs


def test_a_compression_bomb_and_a_quarantined_input_are_dead_lettered_and_the_partition_reads_on(
    services: Any, settings: Settings, install_keys: InstallKeys, trusted: TrustedKeys, tmp_path: Path
) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)
    store = DirBlobStore(tmp_path / "cas")
    plan = small_plan(store, ("honest-a", "honest-b"), 8)
    before, after = plan[:9], plan[9:]
    produce_all(bootstrap, topics.submissions, before)
    with producer_principal(services):  # what one producer host's Kafka login can send
        bomb = produce_bomb(bootstrap, topics.submissions, b"honest-a")
        large = produce_bomb(bootstrap, topics.submissions, b"honest-b", LARGE_BYTES)
    offsets = produce_all(bootstrap, topics.submissions, after)
    quarantined = offsets[2]  # an honest stage an operator chose to keep out
    count = len(plan) + 2
    assert (bomb, large) == (len(before), len(before) + 1) and offsets[-1] == count - 1

    config = scheduler_config(install_keys, seal_every=50)
    log = io.StringIO()
    shell = SchedulerShell(
        bootstrap=bootstrap,
        topics=topics,
        partition=0,
        core=make_core(config, 0, "auto"),
        options=ShellOptions(batch_max=50, quarantine_inputs=frozenset({quarantined})),
        progress=log,
    )
    counters = shell.run(until=lambda c: c.consumed >= count, idle_exit=60)
    text = log.getvalue()
    assert counters.consumed == count, text
    assert f"input offset {bomb} could not be read" in text and f"input offset {bomb} cannot be read" in text, text
    assert counters.dead_letter_codes == {"INPUT_UNREADABLE": 1, "INPUT_QUARANTINED": 1, "UNKNOWN_SCHEMA_FINGERPRINT": 1}

    out = read_outputs(bootstrap, topics)
    assert [offset for offset, _ in crossings(out)] == list(range(count))  # every input offset, once
    dead = {r.record["input"]["offset"]: r.record for r in out["deadletter"]}
    assert sorted(dead) == [bomb, large, quarantined]
    # the 60 MB value was read (the client inflates zstd up to 100 MB) and dead-lettered by its bytes, kept as a digest
    assert (dead[large]["code"], dead[large]["raw_size"]) == ("UNKNOWN_SCHEMA_FINGERPRINT", LARGE_BYTES)
    assert dead[bomb]["code"] == "INPUT_UNREADABLE" and "_BAD_COMPRESSION" in dead[bomb]["detail"], dead[bomb]
    assert dead[bomb]["detail"].startswith(f"Kafka could not deliver input offset {bomb}: ")
    assert dead[quarantined]["code"] == "INPUT_QUARANTINED", dead[quarantined]
    assert dead[quarantined]["detail"] == f"input offset {quarantined} named by --quarantine submissions:{quarantined}"

    inputs, errors = readable_inputs(bootstrap, topics, count)
    assert sorted(inputs) == [o for o in range(count) if o != bomb] and errors, errors
    expected = expected_outputs(config, inputs, dead, count)
    for stream, records in out.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream

    source = CachedSource(bootstrap, topics)
    for run_id in ("honest-a", "honest-b"):
        report = verify(run_id, source, cas=store, trusted=trusted)
        assert report.exit_code == 0, (run_id, report.header)
