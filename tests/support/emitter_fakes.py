"""A Kafka producer stand-in for the emitter tests: each produce acks, stays silent or fails as it is told."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class _Error:
    def __init__(self, retriable: bool) -> None:
        self._retriable = retriable

    def retriable(self) -> bool:
        return self._retriable

    def __str__(self) -> str:
        return "Broker: Not enough in-sync replicas" if self._retriable else "Broker: Message size too large"


class _Message:
    def __init__(self, topic: str, offset: int) -> None:
        self._topic, self._offset = topic, offset

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


class FakeProducer:
    """``outcomes[i]`` answers the i-th produce: "ack", "silent" (no callback) or "retriable"/"fatal" errors."""

    def __init__(self, outcomes: list[str]) -> None:
        self.outcomes = outcomes
        self.produced: list[tuple[str, bytes, bytes]] = []
        self._pending: list[Callable[[], None]] = []

    def produce(self, topic: str, *, key: bytes, value: bytes, on_delivery: Callable[[Any, Any], None]) -> None:
        outcome = self.outcomes[len(self.produced)]
        self.produced.append((topic, key, value))
        offset = len(self.produced) - 1
        if outcome == "ack":
            self._pending.append(lambda: on_delivery(None, _Message(topic, offset)))
        elif outcome in ("retriable", "fatal"):
            self._pending.append(lambda: on_delivery(_Error(outcome == "retriable"), None))

    def poll(self, timeout: float) -> int:
        pending, self._pending = self._pending, []
        for callback in pending:
            callback()
        return len(pending)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0
