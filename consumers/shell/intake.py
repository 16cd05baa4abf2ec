"""Which of the consumed messages a batch steps.

A consumer error is logged and the fetch goes on, a fatal one is raised. An input Kafka cannot deliver
(``_UNREADABLE``) is fetched once more, then stood in for by an ``_UnreadInput`` and dead-lettered as
INPUT_UNREADABLE. An input to dead-letter (``_rejected``: an output Kafka refused, unreadable, quarantined) ends the
batch before it and is then dead-lettered alone (``_cut_at_rejected``). One bad input never stops the partition.
"""

from __future__ import annotations

from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from bernstein.consumers.shell.base import ShellBase
from bernstein.schemas.records import DeadLetterCode

_UNREADABLE: Final = frozenset({KafkaError._BAD_COMPRESSION, KafkaError._BAD_MSG, KafkaError.MSG_SIZE_TOO_LARGE})
"""Consumer errors about one input offset that refetching does not cure: the record cannot be decompressed,
is corrupt, or is larger than the client may receive. Each is dead-lettered as INPUT_UNREADABLE."""


class _UnreadInput:
    """Stands for an input record Kafka could not deliver: its place (topic, offset) and no bytes.

    It quacks like the ``confluent_kafka.Message`` that ``InputRecord.of_message`` reads. Its timestamp is
    the last one read before it (the record's own is unknown; LogAppendTime keeps it no earlier), 0 when
    it is the first input this process reads.
    """

    __slots__ = ("_offset", "_timestamp", "_topic")

    def __init__(self, topic: str, offset: int, timestamp: int) -> None:
        self._topic, self._offset, self._timestamp = topic, offset, timestamp

    def topic(self) -> str:
        return self._topic

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp) if self._timestamp > 0 else (0, 0)

    def key(self) -> None:
        return None

    def value(self) -> None:
        return None

    def error(self) -> None:
        return None


class Intake(ShellBase):
    """Turns consumed messages into the inputs of a batch, setting aside those to dead-letter."""

    def _usable(self, messages: list[Any]) -> list[Any]:
        """The messages without an error; raises for a fatal consumer error, logs the others.

        An error about one input offset that Kafka could not deliver (``_UNREADABLE``: a record the
        client cannot decompress, or too large to receive) ends the batch there. Seen once, the offset is
        fetched again (a transient fault clears); seen twice, it becomes a stand-in record
        (``_UnreadInput``) that ``_cut_at_rejected`` dead-letters alone as INPUT_UNREADABLE, and the
        consumer moves past it. One such record never stops the partition.
        """
        records: list[Any] = []
        for message in messages:
            error = message.error()
            if error is None:
                records.append(message)
                continue
            if error.code() == KafkaError._PARTITION_EOF:
                continue
            if error.fatal():
                raise KafkaException(error)
            offset = message.offset()
            if error.code() in _UNREADABLE and offset is not None and offset >= 0 and message.partition() == self.partition:
                if offset < self._read_from:
                    continue  # librdkafka repeats an error it queued before the seek past it
                stand_in = self._unreadable(offset, error)
                if stand_in is not None:
                    records.append(stand_in)
                break  # what came after it is fetched again from where the consumer now stands
            self._log(f"consumer error (will retry): {error}", "consumer_error", "warning", error=str(error))
        return records

    def _unreadable(self, offset: int, error: KafkaError) -> _UnreadInput | None:
        """The stand-in for input ``offset`` that Kafka delivered as ``error``; moves the consumer on."""
        tp = TopicPartition(self.input_topic, self.partition, offset)
        self._read_from = offset
        if offset in self._rejected:  # already judged (or quarantined): dead-letter it, then read on after it
            tp.offset = offset + 1
        elif offset not in self._unreadable_seen:
            self._unreadable_seen.add(offset)
            self._consumer.seek(tp)  # once more, in case it was a passing fault
            self._log(
                f"input offset {offset} could not be read ({error}); fetching it once more",
                "input_unreadable_retry",
                "warning",
                input_offset=offset,
                error=str(error),
            )
            return None
        else:
            detail = f"Kafka could not deliver input offset {offset}: {error}"
            self._rejected[offset] = (DeadLetterCode.INPUT_UNREADABLE, detail)
            self._unreadable_seen.discard(offset)
            tp.offset = offset + 1
            self._log(
                f"input offset {offset} cannot be read ({error}); dead-lettering it "
                f"({DeadLetterCode.INPUT_UNREADABLE.value}) and reading on",
                "input_unreadable",
                "error",
                input_offset=offset,
                error=str(error),
            )
        self._consumer.seek(tp)
        return _UnreadInput(self.input_topic, offset, self._last_input_ts)

    def _cut_at_rejected(self, records: list[Any]) -> tuple[list[Any], tuple[DeadLetterCode, str] | None]:
        """The batch up to the first input to dead-letter (``_rejected``); that input alone when it comes first."""
        for index, message in enumerate(records):
            detail = self._rejected.get(message.offset())
            if detail is None:
                continue
            cut = max(index, 1)
            if cut < len(records):
                self._consumer.seek(TopicPartition(self.input_topic, self.partition, records[cut].offset()))
                self._read_from = records[cut].offset()
            return records[:cut], (detail if index == 0 else None)
        return records, None
