"""Producing a batch's outputs into its transaction, settling the transaction, and what follows when Kafka
refuses one output.

A batch whose commit is under way on the watchdog thread is an ``_Inflight`` while the next batch is stepped;
``_settle`` waits for it and counts its work only once it committed. A produce error about one record's bytes
(``_PER_RECORD``) is that input's, not the producer's: the transaction is aborted (``_raise_for``), the refused
bytes are learnt from the delivery reports, and ``_note`` has the batch redone by the Python reference up to that
input, which is then dead-lettered alone (PRODUCE_REJECTED). Also here: the tallies of refusals and dead letters by
code that the metrics show.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from confluent_kafka import KafkaError, KafkaException

from bernstein.consumers.core.model import OutputRecord, Stream
from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.consumers.shell.base import _DEADLETTER, _JOURNAL, _REFUSALS
from bernstein.consumers.shell.errors import SchedulerFailed, _Abort, _NativeFailed, _Rejected
from bernstein.consumers.shell.fencing import Fencing, _Pending
from bernstein.schemas.records import DeadLetterCode

_PER_RECORD: Final = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.INVALID_RECORD,
        KafkaError.RECORD_LIST_TOO_LARGE,
    }
)
"""Produce errors about one record's bytes (librdkafka's check at produce(), or the broker's answer)."""


@dataclass
class _Inflight:
    """A batch whose transaction is committing while the next batch is being computed."""

    pending: _Pending
    records: int
    last_offset: int
    journalled: int
    seals: int
    refused: int
    dead_letters: int
    dead_lettered: int = -1
    """The input offset this transaction dead-letters because Kafka refused an output of it, or -1."""
    codes: tuple[list[tuple[str, int]], list[tuple[str, int]]] = ([], [])
    """The batch's refusals and dead letters by code (counted once the transaction committed)."""
    timing: list[float] = field(default_factory=list)
    """[began, commit seconds, committed]: monotonic times the commit call fills in (metrics)."""


class Producing(Fencing):
    """Produces a batch's outputs and settles its transaction; an output Kafka refuses has its input dead-lettered."""

    def _produce_native(self, native: NativeSchedulerCore, producer: Any, last: int) -> tuple[int, int, int, int]:
        """The native plan's outputs; a failure about one record, or not Kafka's, redoes the batch with the reference."""
        try:
            return native.produce_planned(producer, self._topics, self.partition)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() in _PER_RECORD:
                # the plan does not say which input an output belongs to: the reference's replay finds it
                raise _NativeFailed(last, exc, txn_open=True) from exc
            raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - a Rust panic is a BaseException (L7)
            raise _NativeFailed(last, exc, txn_open=True) from exc

    def _produce_all(
        self, producer: Any, planned: list[list[OutputRecord]], records: list[Any] | None = None, *, dead_lettering: bool = False
    ) -> tuple[int, int, int, int]:
        """Produce every output (``NativeSchedulerCore.produce_planned`` does the same for its plan).

        ``planned[i]`` holds the outputs of ``records[i]`` (without ``records``, produce errors propagate as they
        are). A produce error about one output raises
        ``_Rejected`` for its input (``dead_lettering``: the outputs are already that input's dead
        letter, and Kafka refusing those too stops the scheduler with ``SchedulerFailed``).
        Returns (journalled, seals, refused, dead_letters), added to the counters once the transaction committed.
        """
        partition = self.partition
        produce = producer.produce
        topic_of = self._topic_of
        refused_outputs = self._refused_outputs
        journalled = seals = refused = dead_letters = 0
        for index, outputs in enumerate(planned):
            for out in outputs:
                stream = out.stream
                try:
                    if refused_outputs and records and (topic_of[stream], out.value) in refused_outputs:
                        # the broker refused exactly these bytes in an earlier attempt (delivery report)
                        raise _Rejected(records[index].offset(), refused_outputs[(topic_of[stream], out.value)])
                    produce(
                        topic_of[stream],
                        out.value,
                        out.key,
                        partition=partition,
                        timestamp=out.timestamp_ms,
                        headers=list(out.headers),
                    )
                except BufferError:  # the local queue is full: wait for deliveries, then retry
                    self._produce(producer, topic_of[stream], out.key, out.value, out.headers, out.timestamp_ms)
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    if not isinstance(error, KafkaError) or error.code() not in _PER_RECORD or not records:
                        raise
                    rejected = _Rejected(
                        records[index].offset(), _rejection_detail(stream, out.key, out.value, out.headers, error)
                    )
                    self._refuse_dead_letter(rejected, dead_lettering)
                    raise rejected from exc
                except _Rejected as rejected:
                    self._refuse_dead_letter(rejected, dead_lettering)
                    raise
                if stream is _JOURNAL:
                    if out.headers[3][1] == b"bernstein.run.sealed":
                        seals += 1
                    else:
                        journalled += 1
                elif stream is _REFUSALS:
                    refused += 1
                elif stream is _DEADLETTER:
                    dead_letters += 1
        return journalled, seals, refused, dead_letters

    def _refuse_dead_letter(self, rejected: _Rejected, dead_lettering: bool) -> None:
        if dead_lettering:
            raise SchedulerFailed(
                f"partition {self.partition}: Kafka refused even the dead letter of input offset {rejected.offset} "
                f"({rejected.detail}); the output topics' max.message.bytes is below what the scheduler writes: "
                "raise it (docs/scheduler.md, 'Running the scheduler') and restart the scheduler"
            )

    def _settle(self) -> None:
        """Wait for the in-flight transaction; count its work once it committed."""
        inflight = self._inflight
        if inflight is None:
            return
        self._inflight = None
        try:
            owned_since = inflight.pending.result()
        except KafkaException as exc:
            self._raise_for(exc, inflight.last_offset)
        counters = self.counters
        counters.journalled += inflight.journalled
        counters.seals += inflight.seals
        counters.refused += inflight.refused
        counters.dead_letters += inflight.dead_letters
        counters.consumed += inflight.records
        counters.transactions += 1
        counters.last_offset = inflight.last_offset
        counters.next_offset = inflight.last_offset + 1
        counters.progressed = time.monotonic()
        self._committed_next = inflight.last_offset + 1
        if self._snapshot_inflight:
            counters.snapshots += 1
            self._snapshot_inflight = False
        self._since_snapshot[0] += 1
        self._since_snapshot[1] += inflight.records
        if inflight.seals:
            counters.last_seal_time = time.time()
        refused_codes, dead_letter_codes = inflight.codes
        for code, count in refused_codes:
            counters.refused_codes[code] = counters.refused_codes.get(code, 0) + count
        for code, count in dead_letter_codes:
            counters.dead_letter_codes[code] = counters.dead_letter_codes.get(code, 0) + count
        if self.observer is not None and len(inflight.timing) == 3:
            began, commit_s, done = inflight.timing
            self.observer(inflight.records, done - began, commit_s)
        self._owned_since = owned_since
        self._txn_began = None  # no transaction is open until the next batch begins one
        committed = self._marks.pop(0) if self._marks else None
        if committed is not None:
            self.core.forget(self._state, committed)  # a rewind never goes back past a commit
        if inflight.dead_lettered >= 0:
            self._rejected.pop(inflight.dead_lettered, None)
        # The state was only committed with the transaction; keep the recovery budget for real trouble.
        counters.recoveries = 0

    def _settle_quietly(self) -> None:
        """On the way out: let the last transaction finish; if it cannot, the next instance redoes that batch."""
        try:
            self._settle()
        except (_Abort, KafkaException) as exc:
            self._raise_if_fenced(exc)
            self._log(
                f"the last transaction did not commit ({exc}); its input will be processed again on restart",
                "last_transaction_lost",
                "warning",
                error=str(exc),
            )

    def _raise_for(self, exc: KafkaException, last_offset: int) -> NoReturn:
        """Raise ``_Abort`` for an abortable error of the transaction of a batch ending at ``last_offset``, else ``exc``."""
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.txn_requires_abort():
            try:
                self._producer.poll(0)  # serves the delivery reports (commit_transaction does not)
            except KafkaException:
                pass
            if self._undelivered:
                self._learn_refused_output(last_offset)
            self._log(
                f"transaction must be aborted ({error}); replaying the batch", "transaction_aborted", "warning", error=str(error)
            )
            raise _Abort(str(error)) from exc
        raise exc

    def _on_delivery(self, error: KafkaError | None, message: Any) -> None:
        """The producer's delivery reports, failures only (``delivery.report.only.error``)."""
        if error is not None and error.code() in _PER_RECORD:
            value = message.value() or b""
            self._undelivered.append((error, message.topic(), len(message.key() or b"") + len(value), value))

    def _learn_refused_output(self, last_offset: int) -> None:
        """The broker refused records of the failed transaction: remember the culprit's bytes.

        A refused record batch fails every record in it, so the largest refused record is taken
        for the one the broker meant (the others are only its batch mates). Delivery reports
        carry no headers, so the replay, stepped by the reference, finds its input by these bytes.
        """
        failures, self._undelivered = self._undelivered, []
        error, topic, size, value = max(failures, key=lambda failure: failure[2])
        stream = next(stream for stream, name in self._topic_of.items() if name == topic)
        self._refused_outputs[(topic, value)] = (
            f"Kafka refused its {stream.value} output ({size} bytes of key and value): {error.name()}: {error.str()}"
        )
        self._reference_until = max(self._reference_until, last_offset)

    def _produce(self, producer: Any, topic: str, key: bytes, value: bytes, headers: Any, timestamp: int) -> None:
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key, partition=self.partition, timestamp=timestamp, headers=list(headers)
                )
                return
            except BufferError:
                producer.poll(0.05)

    def _note(self, abort: _Abort) -> None:
        """Remember what an abort taught: an input to dead-letter, or a batch the native path cannot do."""
        if isinstance(abort, _Rejected):
            self._rejected[abort.offset] = (DeadLetterCode.PRODUCE_REJECTED, abort.detail)
            self._reference_until = max(self._reference_until, abort.offset)
            self._log(
                f"input offset {abort.offset}: Kafka refused an output of it ({abort.detail}); "
                f"redoing the batch up to it, then dead-lettering it ({DeadLetterCode.PRODUCE_REJECTED.value})",
                "output_rejected",
                "warning",
                input_offset=abort.offset,
            )
        elif isinstance(abort, _NativeFailed):
            self.counters.native_fallbacks += 1
            self._reference_until = max(self._reference_until, abort.last_offset)
            self._log(
                f"the native core failed on a batch ending at input offset {abort.last_offset} ({abort}); "
                "redoing it with the Python reference",
                "native_failed",
                "error",
                input_offset=abort.last_offset,
            )


_NO_CODES: Final[tuple[list[tuple[str, int]], list[tuple[str, int]]]] = ([], [])


def _codes_of(planned: list[list[OutputRecord]]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The refusals and dead letters of a batch by code (``NativeSchedulerCore.plan_codes`` for the reference's outputs)."""
    refused: dict[str, int] = {}
    dead_letters: dict[str, int] = {}
    for outputs in planned:
        for out in outputs:
            if out.stream is _REFUSALS:
                code = record_code(out.value, 1)
                refused[code] = refused.get(code, 0) + 1
            elif out.stream is _DEADLETTER:
                code = record_code(out.value, 0)
                dead_letters[code] = dead_letters.get(code, 0) + 1
    return list(refused.items()), list(dead_letters.items())


def record_code(value: bytes, skip: int) -> str:
    """The string after ``skip`` strings of a single-object-encoded record's body: a refusal's code (skip 1,
    after ``exception``), a dead letter's (skip 0). ``UNKNOWN`` if the bytes do not hold one."""
    pos = 10  # the single-object header: 2 magic bytes, 8 of fingerprint
    for index in range(skip + 1):
        length = shift = 0
        while True:
            if pos >= len(value) or shift > 63:
                return "UNKNOWN"
            byte = value[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        length = (length >> 1) ^ -(length & 1)
        if length < 0 or pos + length > len(value):
            return "UNKNOWN"
        if index == skip:
            try:
                return value[pos : pos + length].decode()
            except UnicodeDecodeError:
                return "UNKNOWN"
        pos += length
    return "UNKNOWN"


def _rejection_detail(stream: Stream, key: bytes, value: bytes, headers: Any, error: KafkaError) -> str:
    """What a PRODUCE_REJECTED dead letter says: the output Kafka refused and Kafka's own words (deterministic)."""
    size = len(key or b"") + len(value or b"") + sum(len(name) + len(data) for name, data in headers)
    return f"Kafka refused its {stream.value} output ({size} bytes of key, value and headers): {error.name()}: {error.str()}"
