"""The scheduler shell without a broker: a producer that records what it is given, a batch of consumer messages."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import Message

from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell
from bernstein.substrate.config import Topics
from tests.support.cores import BASE_TS, PARTITION, TOPIC, TRUNCATED, enc_sub, encode_v3, make_config, mixed_inputs, sub

SHELL_TOPICS = Topics("unit")
SHELL_TOPICS_BY_STREAM = (
    SHELL_TOPICS.journal,
    SHELL_TOPICS.refusals,
    SHELL_TOPICS.audit,
    SHELL_TOPICS.deadletter,
    SHELL_TOPICS.checkpoints,
)


class RecordingProducer:
    """A producer that records what ``produce`` was given (the C binding's positional order).

    ``buffer_errors``: the attempts (1-based) that raise BufferError instead; ``keep``:
    hold on to every headers list it was given, as a caller that keeps it would.
    """

    def __init__(self, buffer_errors: Iterable[int] = (), *, keep: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.attempts = 0
        self.buffer_errors = set(buffer_errors)
        self.polls: list[float] = []
        self.keep = keep
        self.kept: list[tuple[list[Any], list[Any]]] = []
        self.log: list[str] = []

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        self.attempts += 1
        if self.attempts in self.buffer_errors:
            raise BufferError("Local: Queue full")
        assert callback is None and on_delivery is None
        assert type(headers) is list and all(type(h) is tuple for h in headers)
        if self.keep:
            self.kept.append((headers, list(headers)))
        self.calls.append((topic, value, key, partition, timestamp, tuple(headers)))

    def poll(self, timeout: float) -> int:
        self.polls.append(timeout)
        return 0

    # the transactional calls the shell makes
    def begin_transaction(self) -> None:
        self.log.append("begin")

    def send_offsets_to_transaction(self, offsets: list[Any], metadata: Any, timeout: float) -> None:
        self.log.append(f"offsets {[(tp.topic, tp.partition, tp.offset) for tp in offsets]}")

    def commit_transaction(self, timeout: float) -> None:
        self.log.append("commit")


def batch_messages() -> list[Message]:
    """``mixed_inputs`` as consumer messages, plus what the native batch path treats specially."""
    inputs: list[tuple[Any, Any]] = list(mixed_inputs())
    inputs[3:3] = [
        (b"run-a", enc_sub(run_id="run-a", stage_id="k-1", kind="caf\u00e9")),  # a non-ASCII repr, with the interpreter
        ("str-key", enc_sub(run_id="run-a", stage_id="k-2")),  # a shape the extension does not read: the reference
        (b"run-b", TRUNCATED["truncated-tail"]),  # the reference, in the middle of the batch
        # signatures verified ahead of the steps (Core::preverify): a forged one, one of a retired key
        (b"run-a", encode_v3(sub(run_id="run-a", stage_id="forged"), producer_signature=bytes(64))),
        (b"run-a", encode_v3({**sub(run_id="run-a", stage_id="retired"), "producer": {"id": "retired@test", "sdk": "x"}})),
    ]
    inputs.append((b"run-a", enc_sub(run_id="run-a", stage_id="last")))
    messages = []
    for offset, (key, value) in enumerate(inputs):
        timestamp = (0, -1) if offset % 5 == 2 else (1 + offset % 2, BASE_TS + 3 * offset)  # 0: not available
        messages.append(Message(topic=TOPIC, partition=PARTITION, offset=offset, key=key, value=value, timestamp=timestamp))
    return messages


def offline_shell(core: Any = None) -> SchedulerShell:
    return SchedulerShell(
        bootstrap="unused:9", topics=SHELL_TOPICS, partition=PARTITION, core=core or SchedulerCore(make_config()), progress=None
    )
