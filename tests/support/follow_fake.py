"""An in-memory stand-in for the few Kafka calls ``audit follow`` makes, for the follower's state-machine test.

Unit tests only: the real consumer is exercised by ``tests/integration/test_audit_follow_kafka.py``. The fake
holds one log per topic-partition that the test appends to and rewrites (``Log``), answers the consumer calls
``bernstein.verifier.follow.consumer.Follower`` uses (``list_topics``, ``subscribe``/``assign``, ``consume``, ``seek``,
``get_watermark_offsets``, ``position``, ``commit``, ``close``) as librdkafka does for a single group member,
and replaces the checkpoint writer's thread by a queue the test drains (``ControlledWriter``), so a kill -9 can
leave any prefix of the queued saves on disk, as the real writer's atomic, in-order writes allow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from bernstein.verifier.follow.checkpoint import Checkpoint, CheckpointStore, encode


@dataclass
class Entry:
    """One record of a log: its value and Kafka timestamp; for the test, how it came there."""

    value: bytes
    timestamp_ms: int
    bad: str | None = None
    """How it was tampered with, when reading it must raise a tamper-class alert (None: it need not)."""
    chain: bool = False
    """Written by the scheduler, in its chain's order (it may have been edited since)."""


@dataclass
class Cluster:
    """Topic -> partition -> records (offsets are list indexes: no control records, log start 0)."""

    topics: dict[str, list[list[Entry]]] = field(default_factory=dict)

    def log(self, topic: str, partition: int) -> list[Entry]:
        return self.topics[topic][partition]


class _Eof:
    """What ``message.error()`` is at the end of a partition (``enable.partition.eof``)."""

    def code(self) -> int:
        return int(RdKafkaError._PARTITION_EOF)

    def fatal(self) -> bool:
        return False


@dataclass(frozen=True)
class Message:
    topic_: str
    partition_: int
    offset_: int
    value_: bytes | None
    timestamp_ms: int
    eof: bool = False

    def error(self) -> _Eof | None:
        return _Eof() if self.eof else None

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def value(self) -> bytes | None:
        return self.value_

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_CREATE_TIME, self.timestamp_ms)


class FakeConsumer:
    """One consumer of ``cluster``: at most ``batch`` records per partition per ``consume``, an EOF event once each
    time a partition's end is reached; group callbacks served inside ``consume`` (assignment, ``rebalance``) and at
    ``close``, as librdkafka does. ``dead``: the process was killed, nothing it does reaches anyone any more."""

    def __init__(self, cluster: Cluster, batch: int) -> None:
        self.cluster = cluster
        self.batch = batch
        self.positions: dict[tuple[str, int], int] = {}
        self._eof_sent: set[tuple[str, int]] = set()
        self._callbacks: tuple[Callable[..., None], Callable[..., None]] | None = None
        self._topic: str | None = None
        self._assign_pending = False
        self._revoke_pending = False
        self.closed = False
        self.dead = False
        self.commits: list[list[TopicPartition]] = []

    def list_topics(self, topic: str | None = None, timeout: float | None = None) -> Any:
        logs = self.cluster.topics.get(topic or "")
        if logs is None:
            return SimpleNamespace(topics={})
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions=dict.fromkeys(range(len(logs))), error=None)})

    def subscribe(self, topics: list[str], on_assign: Callable[..., None], on_revoke: Callable[..., None], **_: Any) -> None:
        (self._topic,) = topics
        self._callbacks = (on_assign, on_revoke)
        self._assign_pending = True

    def rebalance(self) -> None:
        """The group rebalances (another member came and went): revoke everything, then assign it again."""
        self._revoke_pending = True

    def _offset(self, topic: str, partition: int, offset: int) -> int:
        if offset == OFFSET_BEGINNING:
            return 0
        assert offset >= 0, f"the follower asked for offset {offset} of {topic}[{partition}]: it must name where it starts"
        return offset

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.positions = {(tp.topic, tp.partition): self._offset(tp.topic, tp.partition, tp.offset) for tp in partitions}
        self._eof_sent.clear()

    def seek(self, tp: TopicPartition) -> None:
        assert (tp.topic, tp.partition) in self.positions, "seek on a partition not assigned"
        self.positions[(tp.topic, tp.partition)] = self._offset(tp.topic, tp.partition, tp.offset)
        self._eof_sent.discard((tp.topic, tp.partition))

    def _assigned(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self.positions)]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        assert not self.closed and not self.dead
        if self._callbacks is not None and self._revoke_pending:
            self._revoke_pending = False
            revoked = self._assigned()
            self._callbacks[1](self, revoked)
            self.positions = {}
            self._assign_pending = True
            return []
        if self._callbacks is not None and self._assign_pending:
            self._assign_pending = False
            assert self._topic is not None
            self._callbacks[0](self, [TopicPartition(self._topic, p) for p in range(len(self.cluster.topics[self._topic]))])
            return []
        out: list[Message] = []
        for (topic, partition), position in sorted(self.positions.items()):
            log = self.cluster.log(topic, partition)
            upto = min(len(log), position + self.batch)
            for offset in range(position, upto):
                entry = log[offset]
                out.append(Message(topic, partition, offset, entry.value, entry.timestamp_ms))
            if upto > position:
                self.positions[(topic, partition)] = upto
                self._eof_sent.discard((topic, partition))
            if self.positions[(topic, partition)] >= len(log) and (topic, partition) not in self._eof_sent:
                self._eof_sent.add((topic, partition))
                out.append(Message(topic, partition, self.positions[(topic, partition)], None, 0, eof=True))
        assert len(out) <= num_messages
        return out

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        return 0, len(self.cluster.log(tp.topic, tp.partition))

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """The first offset stamped at or after each partition's ``offset`` (a timestamp), -1 when none is."""
        out = []
        for tp in partitions:
            log = self.cluster.log(tp.topic, tp.partition)
            found = next((i for i, entry in enumerate(log) if entry.timestamp_ms >= tp.offset), -1)
            out.append(TopicPartition(tp.topic, tp.partition, found))
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1001)) for tp in partitions]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        assert not self.dead
        self.commits.append(offsets)

    def close(self) -> None:
        if self.dead or self.closed:
            return
        if self._callbacks is not None and self.positions:
            self._callbacks[1](self, self._assigned())  # leaving the group revokes what is assigned
        self.positions = {}
        self.closed = True


class ControlledWriter:
    """``CheckpointWriter`` without its thread: saves are encoded when given (a snapshot) and queued; the test says
    when the disk catches up (``write``). Each write is atomic and they go in order, so a kill (``kill``) leaves
    a prefix of the queue on disk and loses the rest, as with the real writer."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self.pending: list[tuple[str, int, bytes, Callable[[], None] | None]] = []
        self.dead = False

    def save(self, checkpoint: Checkpoint, then: Callable[[], None] | None = None) -> None:
        if not self.dead:
            self.pending.append((checkpoint.topic, checkpoint.partition, encode(checkpoint), then))

    def write(self, count: int) -> None:
        """The writer thread gets ``count`` more saves onto the disk."""
        for _ in range(min(count, len(self.pending))):
            topic, partition, data, then = self.pending.pop(0)
            self.store.write(topic, partition, data)
            if then is not None:
                then()

    def flush(self) -> None:
        self.write(len(self.pending))

    def raise_error(self) -> None:
        pass

    def close(self) -> None:
        self.flush()

    def kill(self, written: int) -> None:
        """kill -9: ``written`` of the queued saves made it to the disk, the rest are lost."""
        self.write(written)
        self.pending.clear()
        self.dead = True
