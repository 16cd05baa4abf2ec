"""The partitioner on the real (secured) broker.

librdkafka with ``partitioner=murmur2_random`` (the Python SDK's setting) puts every keyed record
where ``bernstein.schemas.partitioning.partition_for`` says, on a 6-partition topic; librdkafka's default
(``consistent_random``, CRC-32 of the key) does not. A submission a CRC-32 producer put on the
wrong partition for its run id is refused by the running scheduler as WRONG_PARTITION with the
exact evidence; the same submission produced with murmur2 is journalled. Records are produced
as the ``producer`` principal when the broker is secured.
"""

from __future__ import annotations

import zlib
from typing import Any

from confluent_kafka import Producer

from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell
from bernstein.schemas import codec
from bernstein.schemas.partitioning import partition_for
from bernstein.schemas.records import RefusalCode
from bernstein.substrate.config import Settings
from bernstein.substrate.kafka import SECURITY_KEYS, emitter_producer_config, security_config
from bernstein.substrate.keys import InstallKeys
from tests.conftest import Services
from tests.support.kafka import fresh_topics, read_partition, scheduler_config, submission_record
from tests.support.producers import encode_signed_submission

PARTITIONS = 6


def producer_config(services: Services, *, murmur2: bool) -> dict[str, Any]:
    """The Python SDK's producer settings as the producer principal; without ``murmur2``, librdkafka's default partitioner."""
    config = emitter_producer_config(services.bootstrap)
    if services.secure:
        for key in SECURITY_KEYS:
            config.pop(key, None)
        config.update(security_config(services.principal_file("producer")))
    if not murmur2:
        del config["partitioner"]  # librdkafka's default: consistent_random, CRC-32 of the key
    return config


def produce_keyed(config: dict[str, Any], topic: str, items: list[tuple[bytes, bytes]]) -> list[tuple[int, int]]:
    """Produce (key, value) pairs, letting the client's partitioner choose; (partition, offset) of each, in order."""
    producer = Producer(config)
    placed: list[tuple[int, int] | None] = [None] * len(items)
    errors: list[str] = []

    def report(index: int) -> Any:
        def callback(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                placed[index] = (msg.partition(), msg.offset())

        return callback

    for index, (key, value) in enumerate(items):
        producer.produce(topic, key=key, value=value, on_delivery=report(index))
    assert producer.flush(60) == 0 and not errors, errors
    assert all(p is not None for p in placed)
    return [p for p in placed if p is not None]


def test_librdkafka_murmur2_random_places_every_run_where_partition_for_says(services: Services, settings: Settings) -> None:
    topics = fresh_topics(services.bootstrap, settings.topics.prefix, partitions=PARTITIONS)
    keys = [f"run-{i}".encode() for i in range(300)] + ["r\u00fcn-\u00e9".encode(), b"a", b"ab", b"abc"]
    items = [(key, b"not a submission") for key in keys]

    murmur2 = produce_keyed(producer_config(services, murmur2=True), topics.submissions, items)
    assert [partition for partition, _ in murmur2] == [partition_for(key, PARTITIONS) for key in keys]

    crc32 = produce_keyed(producer_config(services, murmur2=False), topics.submissions, items)
    assert [partition for partition, _ in crc32] == [zlib.crc32(key) % PARTITIONS for key in keys]
    moved = sum(a != b for (a, _), (b, _) in zip(murmur2, crc32, strict=True))
    assert moved > len(keys) // 2, "the two partitioners disagree on most run ids (5 in 6 by chance)"


def _run_partition(services: Services, settings: Settings, core: Any, partition: int, expect: int) -> None:
    shell = SchedulerShell(bootstrap=services.bootstrap, topics=settings.topics, partition=partition, core=core, progress=None)
    counters = shell.run(until=lambda c: c.consumed >= expect, idle_exit=30.0)
    assert counters.consumed == expect
    assert core.config.submission_partitions == PARTITIONS, "the shell read the count from the topic"


def test_a_crc32_placed_submission_is_refused_and_the_murmur2_placed_one_journalled(
    services: Services, settings: Settings, install_keys: InstallKeys
) -> None:
    topics = fresh_topics(services.bootstrap, settings.topics.prefix, partitions=PARTITIONS)
    run_id = next(
        f"crc-{i}"
        for i in range(100)
        if zlib.crc32(f"crc-{i}".encode()) % PARTITIONS != partition_for(f"crc-{i}".encode(), PARTITIONS)
    )
    key = run_id.encode()
    right, wrong = partition_for(key, PARTITIONS), zlib.crc32(key) % PARTITIONS
    record = submission_record(run_id=run_id, stage_id="stage-0")
    value = encode_signed_submission(record)

    ((crc_partition, crc_offset),) = produce_keyed(producer_config(services, murmur2=False), topics.submissions, [(key, value)])
    ((mm_partition, mm_offset),) = produce_keyed(producer_config(services, murmur2=True), topics.submissions, [(key, value)])
    assert (crc_partition, mm_partition) == (wrong, right)

    config = scheduler_config(install_keys)  # submission_partitions None: the shell reads 6 from the topic
    native = NativeSchedulerCore(config, wrong)
    _run_partition(services, settings, native, wrong, expect=1)
    assert native.fallbacks == 0, "the Rust core wrote the refusal"
    _run_partition(services, settings, SchedulerCore(config), right, expect=1)

    refused = read_partition(services.bootstrap, topics, "refusals", wrong)
    assert [codec.decode(r.value or b"").record for r in refused] == [
        {
            "exception": "ActivityRejected",
            "code": RefusalCode.WRONG_PARTITION.value,
            "message": f"the record of run '{run_id}' is on partition {wrong} of {PARTITIONS}, but its key belongs on "
            f"partition {right}: produce with Kafka's murmur2 partitioner, (murmur2(key) & 0x7fffffff) % {PARTITIONS}",
            "run_id": run_id,
            "stage_id": "stage-0",
            "role": record["role"],
            "kind": record["kind"],
            "submission_id": record["submission_id"],
            "field": "partition",
            "declared": str(wrong),
            "recomputed": str(right),
            "earlier_stage_id": None,
            "input": {"topic": topics.submissions, "partition": wrong, "offset": crc_offset},
            "occurred_at_ms": record["occurred_at_ms"],
            "producer": record["producer"]["id"],
            "key_id": codec.decode(value).record["producer_key_id"],
            "authenticated": False,  # the partition is checked before the signature
        }
    ]
    assert [r.key for r in refused] == [key]
    assert read_partition(services.bootstrap, topics, "journal", wrong) == [], "nothing of the run on the CRC-32 partition"

    journal = read_partition(services.bootstrap, topics, "journal", right)
    assert len(journal) == 1
    entry = codec.decode(codec.decode(journal[0].value or b"").record["payload"]).record
    assert (entry["run_id"], entry["submission_id"], entry["seq"]) == (run_id, record["submission_id"], 0)
    assert entry["input"] == {"topic": topics.submissions, "partition": right, "offset": mm_offset}
    assert read_partition(services.bootstrap, topics, "refusals", right) == []
