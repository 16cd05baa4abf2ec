"""``consumers.shell.take``: a batch waits only for its first record, never for a full batch."""

from __future__ import annotations

from typing import Any

from consumers.shell import take


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
