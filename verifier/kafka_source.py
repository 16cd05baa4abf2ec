"""Read our topics straight from a cluster (read_committed), partition by partition."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from substrate.config import Topics
from substrate.kafka import KafkaUnavailable, client_config
from verifier.sources import StoredRecord

_TIMEOUT: Final = 30.0


def _watermarks(consumer: Any, topic: str, partition: int, bootstrap: str) -> tuple[int, int]:
    """Low and high watermarks; a partition briefly unknown (a broker restarting) is retried for a while."""
    import time

    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    deadline = time.monotonic() + _TIMEOUT
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=_TIMEOUT)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            transient = isinstance(error, KafkaError) and error.code() in (KafkaError._UNKNOWN_PARTITION, KafkaError._TRANSPORT)
            if not transient or time.monotonic() > deadline:
                raise KafkaUnavailable(f"cannot read {topic}[{partition}] from {bootstrap}: {exc}") from exc
            time.sleep(0.2)


class KafkaSource:
    """A ``RecordSource`` over a live cluster; each ``records`` call is a fresh scan."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.bootstrap = bootstrap
        self.topics = topics

    def describe(self) -> str:
        return f"kafka {self.bootstrap} (prefix {self.topics.prefix})"

    def partitions(self, stream: str) -> list[int]:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        topic = self.topics.by_stream(stream)
        try:
            metadata = AdminClient(client_config(self.bootstrap)).list_topics(topic=topic, timeout=_TIMEOUT)
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            return []
        return sorted(info.partitions)

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        topic = self.topics.by_stream(stream)
        consumer: Any = Consumer(
            client_config(
                self.bootstrap,
                **{
                    "group.id": "bernstein.verifier",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 10,
                },
            )
        )
        try:
            low, high = _watermarks(consumer, topic, partition, self.bootstrap)
            if high <= low:
                return
            consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            while True:
                batch = consumer.consume(5000, 0.05)  # returns at once at the end-of-partition event
                for message in batch:
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            return
                        raise KafkaUnavailable(f"error reading {topic}[{partition}]: {error}")
                    ts_type, ts = message.timestamp()
                    yield StoredRecord(
                        stream=stream,
                        topic=topic,
                        partition=partition,
                        offset=message.offset(),
                        timestamp_ms=ts if ts_type != 0 else 0,
                        key=message.key(),
                        value=message.value(),
                        headers=tuple((k, v or b"") for k, v in (message.headers() or ())),
                    )
        finally:
            consumer.close()
