"""Reading a partition to its end, read_committed: what the rebuild (``recovery``) folds.

The shell keeps one consumer per topic for its life (``_PartitionReader``), as a new consumer costs a connection, a
TLS handshake and a SASL login. ``take``, ``_values_from`` and ``_stream_partition`` read the same way for anyone
(tests read the topics with them). Nothing here knows the state or the scheduler: offsets and bytes only.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from bernstein.consumers.shell.clock import _TXN_TIMEOUT_S
from bernstein.substrate.kafka import client_config

_REBUILD_POLL_S: Final = 0.05
"""consume() waits its whole timeout unless the batch fills, even after the end-of-partition event: keep it short."""


def _rebuild_consumer(bootstrap: str) -> Any:
    """A read_committed consumer that reports the end of a partition (used only to rebuild state)."""
    return Consumer(
        client_config(
            bootstrap,
            **{
                "group.id": "bernstein.rebuild",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
            },
        )
    )


def _uncommitted_consumer(bootstrap: str) -> Any:
    return Consumer(client_config(bootstrap, **{"group.id": "bernstein.rebuild", "isolation.level": "read_uncommitted"}))


def _stable(committed: Any, uncommitted: Any, tp: TopicPartition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            # ListOffsets(latest) answers the last stable offset to a read_committed client
            stable = committed.get_watermark_offsets(tp, timeout=timeout, cached=False)[1]
            high = uncommitted.get_watermark_offsets(tp, timeout=timeout, cached=False)[1]
        except KafkaException:
            stable, high = -1, 0  # e.g. NOT_LEADER_FOR_PARTITION on a topic created a moment ago: ask again
            time.sleep(0.1)
        if stable >= high:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


class _PartitionReader:
    """The rebuild's consumers, one per topic (the fold reads the journal and audit streams interleaved), kept
    for the shell's life.

    A new consumer costs a connection: a TLS handshake and a SASL login on a secured cluster, about 80 ms
    each here, and a rebuild used to open fourteen of them (a third of a 10k-record rebuild's time). A
    topic's consumer whose last stream was left unfinished (a fold that stopped early) is replaced, so
    nothing fetched for that stream can reach the next one.
    """

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._committed: dict[str, Any] = {}
        self._uncommitted: Any = None
        self._open: set[str] = set()
        """Topics whose stream was started and not read to its end."""

    def committed(self, topic: str) -> Any:
        consumer = self._committed.get(topic)
        if consumer is not None and topic in self._open:
            consumer.close()
            consumer = None
        if consumer is None:
            consumer = self._committed[topic] = _rebuild_consumer(self.bootstrap)
            self._open.discard(topic)
        return consumer

    def warm(self, topics: Iterable[str]) -> None:
        """Make the consumers of ``topics`` now: they connect in librdkafka's threads at once, side by side,
        instead of one after the other at their first request."""
        for topic in topics:
            self.committed(topic)
        self.uncommitted()

    def uncommitted(self) -> Any:
        if self._uncommitted is None:
            self._uncommitted = _uncommitted_consumer(self.bootstrap)
        return self._uncommitted

    def wait_stable(self, topic: str, partition: int, timeout: float = _TXN_TIMEOUT_S) -> bool:
        return _stable(self.committed(topic), self.uncommitted(), TopicPartition(topic, partition), timeout)

    def stream(self, topic: str, partition: int, start: int = OFFSET_BEGINNING) -> Iterator[tuple[int, bytes]]:
        """``_stream_partition`` on this topic's consumer."""
        consumer = self.committed(topic)
        self._open.add(topic)
        yield from _stream_with(consumer, topic, partition, start)
        self._open.discard(topic)

    def close(self) -> None:
        for consumer in self._committed.values():
            consumer.close()
        if self._uncommitted is not None:
            self._uncommitted.close()
        self._committed, self._uncommitted = {}, None


def take(consumer: Any, most: int, timeout: float) -> list[Any]:
    """Up to ``most`` messages: waits at most ``timeout`` seconds for the first, then takes what the fetches so far
    brought. For reading a partition to its end (the rebuild): ``consume(most, timeout)`` returns only when ``most``
    messages came or ``timeout`` passed, so each stream waited out its timeout at the partition's end."""
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, 0)] if most > 1 else [first]


def _values_from(consumer: Any, topic: str, partition: int, start: int) -> Iterator[tuple[int, bytes | None]]:
    """Every committed (offset, value) of one partition from offset ``start`` to its current end.

    The partition is unassigned when the stream ends (or is dropped): an assigned consumer goes on fetching in
    librdkafka's threads, and a kept one (``_PartitionReader``) would re-read every record the scheduler writes
    after the rebuild, a fetch request every ``fetch.wait.max.ms`` per topic, for the shell's life."""
    consumer.assign([TopicPartition(topic, partition, start)])
    try:
        while True:
            done = False
            for message in take(consumer, 10000, _REBUILD_POLL_S):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done = True
                        continue
                    raise KafkaException(error)
                yield message.offset(), message.value()
            if done:
                return
    finally:
        try:
            consumer.unassign()
        except (KafkaException, RuntimeError):
            pass  # a closed consumer (the reader was closed under an abandoned stream) fetches nothing either


def _stream_partition(bootstrap: str, topic: str, partition: int, start: int = OFFSET_BEGINNING) -> Iterator[tuple[int, bytes]]:
    """Every committed (offset, value) of one partition from ``start`` (default: its beginning), in offset order,
    read as the caller goes (flat memory)."""
    consumer = _rebuild_consumer(bootstrap)
    try:
        yield from _stream_with(consumer, topic, partition, start)
    finally:
        consumer.close()


def _stream_with(consumer: Any, topic: str, partition: int, start: int) -> Iterator[tuple[int, bytes]]:
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=_TXN_TIMEOUT_S)
    if high <= max(low, start):
        return
    for offset, value in _values_from(consumer, topic, partition, max(start, low) if start >= 0 else start):
        yield offset, value or b""  # a tombstone is not a record the scheduler wrote: the rebuild names it
