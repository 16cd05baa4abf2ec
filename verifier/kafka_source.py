"""Read our topics straight from a cluster (read_committed), partition by partition, as one snapshot.

A live scheduler keeps appending while the verifier reads, and the verifier
reads the same partition several times and its streams one after another. So
the source pins where each partition ends the first time it is touched, and
every later read of it stops there: one verify reads one snapshot. The ends of
one partition number are pinned together, in the order the streams cover each
other: ``checkpoints`` first, then ``audit``, then ``journal``, ``refusals``
and ``deadletter``. Every output of a scheduler step is in one transaction, and
each pinned end is the last stable offset (read_committed), so the audit chain
read holds every record a checkpoint read commits to, and the journal every
entry the audit chain read mirrors. (Pins are taken one after another, not at
one instant: a run whose own step commits in the few milliseconds between the
audit and the journal pins can still show that step's journal entry without
its audit record; verify again.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import (
    KafkaUnavailable,
    client_config,
    connect_timeout,
    is_authorization_error,
    not_authorized,
    unreachable,
)
from bernstein.verifier.sources import StoredRecord

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


_PIN_ORDER: Final = ("checkpoints", "audit", "journal", "refusals", "deadletter", "submissions")
"""The order the ends of one partition number are pinned in: each stream covers at most what the next one holds."""


def _consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        client_config(
            bootstrap,
            **{
                "group.id": "bernstein.verifier",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",  # the watermarks' high end is then the last stable offset
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
            },
        )
    )


class KafkaSource:
    """A ``RecordSource`` over a live cluster, pinned to one snapshot (see the module doc).

    Each ``records`` call is a fresh scan, from the partition's start to the end
    pinned when the partition number was first touched.
    """

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self._partitions: dict[str, list[int]] = {}
        self._ends: dict[tuple[str, int], tuple[int, int]] = {}
        """(stream, partition) -> (log start, pinned end): the low watermark and the last stable offset."""

    def bounds(self, stream: str, partition: int) -> tuple[int, int]:
        """(log start, pinned end) of the partition; the first touch of a partition number pins it on every stream."""
        if (stream, partition) not in self._ends:
            consumer = _consumer(self.bootstrap)
            try:
                for name in (*_PIN_ORDER, stream) if stream not in _PIN_ORDER else _PIN_ORDER:
                    if (name, partition) not in self._ends and partition in self.partitions(name):
                        topic = self.topics.by_stream(name)
                        self._ends[name, partition] = _watermarks(consumer, topic, partition, self.bootstrap)
            finally:
                consumer.close()
        return self._ends.get((stream, partition), (0, 0))

    def log_start(self, stream: str, partition: int) -> int:
        """The first offset the partition still holds (0 unless retention or a deletion removed its start)."""
        return self.bounds(stream, partition)[0]

    def describe(self) -> str:
        return f"kafka {self.bootstrap} (prefix {self.topics.prefix})"

    def partitions(self, stream: str) -> list[int]:
        """The stream's partitions, listed once per source (a topic created later is not part of the snapshot)."""
        if stream not in self._partitions:
            self._partitions[stream] = self._list_partitions(stream)
        return self._partitions[stream]

    def _list_partitions(self, stream: str) -> list[int]:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        topic = self.topics.by_stream(stream)
        try:
            metadata = AdminClient(client_config(self.bootstrap)).list_topics(topic=topic, timeout=connect_timeout())
        except KafkaException as exc:
            if is_authorization_error(exc):
                raise not_authorized(f"read the topics of prefix {self.topics.prefix!r} ({exc})") from None
            raise unreachable(exc, self.bootstrap) from exc
        info = metadata.topics.get(topic)
        if info is not None and info.error is not None and is_authorization_error(info.error):
            # a topic this principal may not see is not a missing stream (that verdict is tamper evidence)
            raise not_authorized(f"describe topic {topic} (an auditor needs Read and Describe on {self.topics.prefix}.*)")
        if info is None or info.error is not None:
            return []
        return sorted(info.partitions)

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        topic = self.topics.by_stream(stream)
        low, end = self.bounds(stream, partition)
        if end <= low:
            return
        consumer = _consumer(self.bootstrap)
        try:
            consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            while True:
                batch = consumer.consume(5000, 0.05)  # returns at once at the end-of-partition event
                for message in batch:
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            return
                        raise KafkaUnavailable(f"error reading {topic}[{partition}]: {error}")
                    if message.offset() >= end:  # appended after the pin: not part of this snapshot
                        return
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
                    if message.offset() >= end - 1:
                        return
        finally:
            consumer.close()
