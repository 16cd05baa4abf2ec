"""How the rebuild reads a partition: it stops waiting at the partition's end, and lets go of the partition."""

from __future__ import annotations

from typing import Any

from bernstein.consumers.shell import take


class Queue:
    """A consumer whose local queue holds ``ready`` messages; records each call."""

    def __init__(self, ready: list[str]) -> None:
        self.ready = list(ready)
        self.calls: list[tuple[str, Any, float]] = []

    def poll(self, timeout: float) -> str | None:
        self.calls.append(("poll", None, timeout))
        return self.ready.pop(0) if self.ready else None

    def consume(self, num_messages: int, timeout: float) -> list[str]:
        self.calls.append(("consume", num_messages, timeout))
        taken, self.ready = self.ready[:num_messages], self.ready[num_messages:]
        return taken


def test_the_first_record_ends_the_wait_and_the_rest_is_taken_without_waiting() -> None:
    queue = Queue(["a", "b", "c"])
    assert take(queue, 500, 0.02) == ["a", "b", "c"]
    assert queue.calls == [("poll", None, 0.02), ("consume", 499, 0)]


def test_at_most_the_batch_size_is_taken() -> None:
    queue = Queue([str(i) for i in range(10)])
    assert take(queue, 4, 0.02) == ["0", "1", "2", "3"]
    assert take(queue, 1, 0.02) == ["4"]
    assert queue.calls[-1] == ("poll", None, 0.02)  # a batch of one asks for no more
    assert queue.ready == ["5", "6", "7", "8", "9"]


def test_nothing_within_the_timeout_is_an_empty_batch() -> None:
    queue = Queue([])
    assert take(queue, 500, 0.05) == []
    assert queue.calls == [("poll", None, 0.05)]


class Partition:
    """A consumer over one partition's ``values`` that reports its end, and records assign/unassign."""

    def __init__(self, values: list[bytes]) -> None:
        self.values = values
        self.assigned: list[Any] | None = None
        self.calls: list[str] = []

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = partitions
        self.calls.append("assign")

    def unassign(self) -> None:
        self.assigned = None
        self.calls.append("unassign")

    def poll(self, timeout: float) -> Any:
        return self.consume(1, timeout)[0] if self.assigned is not None else None

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        out: list[Any] = []
        while len(out) < num_messages and self.values:
            value = self.values.pop(0)
            out.append(_Message(len(self.calls) + len(out), value, None))
        if len(out) < num_messages and not self.values and "eof" not in self.calls:
            self.calls.append("eof")
            out.append(_Message(-1, None, _Eof()))
        return out


class _Eof:
    def code(self) -> int:
        from confluent_kafka import KafkaError

        return KafkaError._PARTITION_EOF


class _Message:
    def __init__(self, offset: int, value: bytes | None, error: Any) -> None:
        self._offset, self._value, self._error = offset, value, error

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def error(self) -> Any:
        return self._error


def test_a_stream_read_to_its_end_unassigns_its_partition() -> None:
    from bernstein.consumers.shell import _values_from

    consumer = Partition([b"a", b"b", b"c"])
    assert [value for _, value in _values_from(consumer, "t", 0, 0)] == [b"a", b"b", b"c"]
    assert consumer.calls[0] == "assign" and consumer.calls[-1] == "unassign" and consumer.assigned is None


def test_a_stream_dropped_midway_unassigns_its_partition_too() -> None:
    from bernstein.consumers.shell import _values_from

    consumer = Partition([b"a", b"b", b"c"])
    stream = _values_from(consumer, "t", 0, 0)
    assert next(stream)[1] == b"a"
    assert consumer.calls[-1] != "unassign"  # still reading
    stream.close()
    assert consumer.calls[-1] == "unassign" and consumer.assigned is None
