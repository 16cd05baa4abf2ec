"""The Kafka transaction shell around the pure scheduler core.

One shell owns one input partition. Per batch it opens a transaction, feeds
each record to ``SchedulerCore.step``, produces the outputs to the same
partition number of the output topics, adds the next input offset to the
transaction and commits. Outputs and input progress therefore become visible
together or not at all (read_committed), which gives exactly-once across
crashes: a kill -9 at any point either loses the whole open transaction
(the input is re-read and re-processed from the same state, giving the same
bytes) or nothing.

Start-up: ``init_transactions`` fences any older instance with the same
transactional id and aborts its open transaction; then the state is rebuilt
from the committed journal and audit partitions (``core.rebuild``) and the
consumer resumes at the committed offset.

One partition, one owner: the newest instance wins. An instance that finds
itself fenced (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH, which librdkafka
reports as ``_FENCED``, or TRANSACTIONAL_ID_AUTHORIZATION_FAILED) commits
nothing more and stops with ``SchedulerFenced``; it never recreates its
producer, which would fence the newer instance in turn (ping-pong).

Error triage otherwise follows librdkafka's transactional producer contract:
retriable -> retry the same call; txn_requires_abort -> abort, rebuild state,
rewind to the committed offset; any other fatal or unknown error -> recreate
the producer and start over, a bounded number of times.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn, TextIO

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from consumers.core.model import InputRecord, OutputRecord, SchedulerState, Stream
from consumers.core.native import NativeSchedulerCore, SchedulerCoreLike
from consumers.core.rebuild import rebuild_state
from schemas.errors import BernsteinError
from substrate.config import Topics
from substrate.kafka import client_config, transactional_producer_config

_TXN_TIMEOUT_S: Final = 30.0
_JOURNAL, _REFUSALS, _DEADLETTER = Stream.JOURNAL, Stream.REFUSALS, Stream.DEADLETTER
_REBUILD_POLL_S: Final = 0.05
"""consume() waits its whole timeout unless the batch fills, even after the end-of-partition event: keep it short."""
_TXN_GRACE_S: Final = 5.0
"""How long past its own timeout a transactional call may block before the producer is given up."""
_COORDINATOR_MOVED: Final = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
)
"""Answers of a group coordinator that is restarting or moving; librdkafka does not flag them retriable."""


class SchedulerFailed(BernsteinError):
    """The scheduler could not make progress (Kafka fatal errors kept recurring)."""

    code = "E_SCHEDULER_FAILED"


class SchedulerFenced(BernsteinError):
    """Another scheduler instance took the partition over (or the broker refused this one its transactional id).

    This instance has committed nothing since; it stops rather than fence the other one back.
    """

    code = "E_SCHEDULER_FENCED"

    def __init__(self, message: str, *, partition: int, transactional_id: str, error: str) -> None:
        super().__init__(message)
        self.partition = partition
        self.transactional_id = transactional_id
        self.error = error


_FENCING: Final = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
"""Errors that mean another instance owns the partition now, or this one may not own it (never retried)."""


class _Abort(Exception):
    """Internal: the open transaction must be aborted and the batch replayed."""


class _TxnCallStuck(KafkaException):
    """Internal: a transactional call outlived its timeout; the producer must be replaced (handled as fatal)."""


class _TxnCaller:
    """Runs the producer's blocking transactional calls on a daemon thread, with a deadline they cannot ignore.

    librdkafka can block in ``send_offsets_to_transaction`` forever, past its timeout, when the group
    coordinator it cached went away (confluentinc/librdkafka#5456, #5511): one broker restart is enough.
    Past the deadline the caller raises ``_TxnCallStuck``; the shell then abandons this caller and its
    producer (the thread stays blocked) and starts a new producer, whose ``init_transactions`` fences
    the old one and aborts its open transaction.
    """

    def __init__(self) -> None:
        self.stuck = False
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any], list[tuple[bool, Any]], threading.Event]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="bernstein-txn", daemon=True).start()

    def _serve(self) -> None:
        while True:
            call, box, done = self._requests.get()
            try:
                box.append((True, call()))
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                box.append((False, exc))
            done.set()

    def call(self, call: Callable[[], Any], what: str, deadline: float) -> Any:
        return self.submit(call, what, deadline).result()

    def submit(self, call: Callable[[], Any], what: str, deadline: float) -> _Pending:
        """Start ``call`` on the worker thread; ``result()`` waits for it (at most ``deadline`` from now)."""
        pending = _Pending(self, what, time.monotonic() + deadline, deadline)
        self._requests.put((call, pending.box, pending.done))
        return pending


class _Pending:
    """A transactional call running on the worker thread."""

    def __init__(self, caller: _TxnCaller, what: str, due: float, deadline: float) -> None:
        self.caller = caller
        self.what = what
        self.due = due
        self.deadline = deadline
        self.box: list[tuple[bool, Any]] = []
        self.done = threading.Event()

    def result(self) -> Any:
        if not self.done.wait(max(self.due - time.monotonic(), 0.0)):
            self.caller.stuck = True
            raise _TxnCallStuck(f"{self.what} did not return within {self.deadline:.0f}s (librdkafka ignored its timeout)")
        ok, value = self.box[0]
        if ok:
            return value
        raise value


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


@dataclass
class Counters:
    """What the scheduler has done since it started (shown as progress)."""

    consumed: int = 0
    journalled: int = 0
    refused: int = 0
    dead_letters: int = 0
    seals: int = 0
    transactions: int = 0
    aborts: int = 0
    recoveries: int = 0
    last_offset: int = -1
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class ShellOptions:
    batch_max: int = 500
    batch_timeout: float = 0.02
    """Longest wait for the first record of a batch, in seconds."""
    progress_every: float = 5.0
    max_recoveries: int = 20


class SchedulerShell:
    """Runs ``SchedulerCore`` over one partition with Kafka transactions."""

    def __init__(
        self,
        *,
        bootstrap: str,
        topics: Topics,
        partition: int,
        core: SchedulerCoreLike,
        options: ShellOptions = ShellOptions(),
        progress: TextIO | None = sys.stderr,
        group_id: str | None = None,
        input_topic: str | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        # The topic read (default: ``topics.submissions``); outputs always go to ``topics``.
        # Reading another deployment's submissions replays them into fresh output topics.
        self.input_topic = input_topic or topics.submissions
        self.partition = partition
        self.core = core
        self.options = options
        self.progress = progress
        self.group_id = group_id or f"{topics.prefix}.scheduler"
        self.transactional_id = f"{topics.prefix}.scheduler.p{partition}"
        self.counters = Counters()
        self._stop = False
        self._producer: Any = None
        self._txn: _TxnCaller | None = None
        self._inflight: _Inflight | None = None
        self._consumer: Any = None
        self._state: Any = None
        """The core's state: a SchedulerState (Python core) or a native handle."""
        self._last_progress = time.monotonic()
        self._txn_began: float | None = None
        """When the newest transaction began (monotonic), to tell a takeover from this instance's own timeout."""
        self._txn_timeout_s = _TXN_TIMEOUT_S
        """The producer's transaction.timeout.ms, in seconds (set with the producer)."""
        self._topic_of = {stream: topics.by_stream(stream.value) for stream in Stream}
        self._topics = tuple(self._topic_of[stream] for stream in (_JOURNAL, _REFUSALS, Stream.AUDIT, _DEADLETTER))
        self._native = core if isinstance(core, NativeSchedulerCore) else None
        """The native core's batch path (``plan`` / ``produce_planned``): no Python object per output."""

    # -- lifecycle --------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish its current batch and return (SIGTERM handler)."""
        self._stop = True

    def run(self, *, until: Callable[[Counters], bool] | None = None, idle_exit: float | None = None) -> Counters:
        """Process until stopped, until ``until(counters)`` holds, or after ``idle_exit`` idle seconds.

        Raises ``SchedulerFenced`` when another instance took the partition over (nothing more is
        committed by this one), ``SchedulerFailed`` when Kafka errors keep recurring.
        """
        try:
            self._start()
        except KafkaException as exc:
            self._close()
            self._raise_if_fenced(exc)
            raise
        idle_since = time.monotonic()
        try:
            while not self._stop:
                if until is not None and until(self.counters):
                    break
                try:
                    processed = self._one_batch()
                except _Abort:
                    self._recover(abortable=True)
                    continue
                except KafkaException as exc:
                    self._raise_if_fenced(exc)
                    self._log(f"fatal Kafka error, recreating the producer: {exc}")
                    self._recover(abortable=False)
                    continue
                now = time.monotonic()
                if processed:
                    idle_since = now
                elif idle_exit is not None and now - idle_since >= idle_exit:
                    break
                if self.progress is not None and now - self._last_progress >= self.options.progress_every:
                    self._report()
            self._settle_quietly()
        except KafkaException as exc:  # e.g. from a recovery's own calls
            self._raise_if_fenced(exc)
            raise
        finally:
            self._close()
        if self.progress is not None:
            self._report(final=True)
        return self.counters

    def _start(self) -> None:
        self._producer = self._new_producer()
        self._state = self._rebuild()
        self._consumer = Consumer(
            client_config(
                self.bootstrap,
                **{
                    "group.id": self.group_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 10,
                    "queued.max.messages.kbytes": 65536,
                },
            )
        )
        self._seek_to_committed()

    def _close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except KafkaException:
                pass
            self._consumer = None
        if self._producer is not None:
            try:
                self._producer.flush(5)
            except KafkaException:
                pass  # a fenced or otherwise failed producer has nothing left to deliver
            self._producer = None

    # -- fencing ---------------------------------------------------------------------

    def _raise_if_fenced(self, exc: BaseException) -> None:
        """Raise ``SchedulerFenced`` when ``exc`` says another instance owns the partition now."""
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError):
            return
        if error.code() == KafkaError._FATAL:
            # produce() on a producer that already failed fatally says only "Fatal error"; the
            # transactional API names the cause (it fails at once, without a request, once fatal)
            error = self._fatal_cause() or error
        if error.code() not in _FENCING:
            return
        self._producer = None  # never flushed, aborted or reused: it may commit nothing more
        raise SchedulerFenced(
            self._fenced_message(error), partition=self.partition, transactional_id=self.transactional_id, error=error.name()
        ) from exc

    def _fatal_cause(self) -> KafkaError | None:
        producer = self._producer
        if producer is None:
            return None
        try:
            producer.abort_transaction(0.1)
        except KafkaException as exc:
            cause = exc.args[0] if exc.args else None
            return cause if isinstance(cause, KafkaError) else None
        return None

    def _fenced_message(self, error: KafkaError) -> str:
        partition, txn_id = self.partition, self.transactional_id
        if error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return (
                f"partition {partition}: the broker does not let this instance use transactional id {txn_id} "
                f"({error.name()}); this instance stops. Grant it Write and Describe on that transactional id"
            )
        message = (
            f"partition {partition} is now owned by another scheduler instance (transactional id {txn_id}); "
            f"this instance stops ({error.name()}: nothing more was committed by it)"
        )
        began = self._txn_began
        if began is not None and time.monotonic() - began >= self._txn_timeout_s:
            message += (
                f". Its last transaction had been open {time.monotonic() - began:.0f}s, longer than "
                f"transaction.timeout.ms ({self._txn_timeout_s:.0f}s): if the process was paused and no other "
                "instance runs, the broker aborted that transaction; start the scheduler again"
            )
        return message

    def _new_producer(self) -> Any:
        config = transactional_producer_config(self.bootstrap, self.transactional_id)
        self._txn_timeout_s = int(config.get("transaction.timeout.ms", 60000)) / 1000
        producer = Producer(config)
        if self._txn is None or self._txn.stuck:
            self._txn = _TxnCaller()
        self._retrying(lambda: producer.init_transactions(_TXN_TIMEOUT_S), "init_transactions")
        return producer

    # -- state ---------------------------------------------------------------------

    def _rebuild(self) -> SchedulerState:
        """Fold the committed journal and the last committed audit record."""
        started = time.monotonic()
        journal = _read_partition(self.bootstrap, self.topics.journal, self.partition)
        last_audit = _last_value(self.bootstrap, self.topics.audit, self.partition)
        state = rebuild_state(self.core.config, self.partition, journal, last_audit)
        self._log(
            f"state rebuilt from {len(journal)} journal records in {time.monotonic() - started:.2f}s: "
            f"{len(state.runs)} runs, audit seq {state.audit_seq}"
        )
        return state

    def _seek_to_committed(self) -> None:
        tp = TopicPartition(self.input_topic, self.partition)
        deadline = time.monotonic() + _TXN_TIMEOUT_S
        while True:
            try:
                committed = self._consumer.committed([tp], timeout=_TXN_TIMEOUT_S)[0]
                break
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                moved = isinstance(error, KafkaError) and (error.retriable() or error.code() in _COORDINATOR_MOVED)
                if not moved or time.monotonic() >= deadline:
                    raise
                self._log(f"committed offset: {error}; retrying")
                time.sleep(0.2)
        offset = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
        self._consumer.assign([TopicPartition(self.input_topic, self.partition, offset)])
        self._log(f"reading {self.input_topic}[{self.partition}] from {'the beginning' if offset < 0 else offset}")

    def _recover(self, *, abortable: bool) -> None:
        self._inflight = None  # its transaction failed: the batch is redone from the committed offset
        self.counters.recoveries += 1
        if self.counters.recoveries > self.options.max_recoveries:
            raise SchedulerFailed(
                f"partition {self.partition}: {self.counters.recoveries - 1} recoveries without lasting progress; "
                "check the broker log (.infra/kafka/logs) and restart the scheduler"
            )
        if abortable:
            self.counters.aborts += 1
            try:
                self._retrying(lambda: self._producer.abort_transaction(_TXN_TIMEOUT_S), "abort_transaction")
            except KafkaException as exc:
                self._raise_if_fenced(exc)
                self._log(f"abort failed ({exc}); recreating the producer")
                abortable = False
        if not abortable:
            self._producer = self._new_producer()
        self._state = self._rebuild()
        self._seek_to_committed()

    # -- the loop -----------------------------------------------------------------

    def _one_batch(self) -> int:
        """Consume a batch and compute its outputs while the previous batch's transaction commits.

        The step function is pure, so the next batch can be computed before the
        previous commit is known; its outputs are produced only after that commit
        succeeded, in a new transaction. If a commit fails, the recovery path
        rebuilds the state from what Kafka committed and rewinds the input, so
        the speculative work is simply discarded.
        """
        messages = self._consumer.consume(self.options.batch_max, self.options.batch_timeout)
        native = self._native
        records = messages if native is not None and native.messages_ok(messages) else self._usable(messages)
        if not records:
            self._settle()
            return 0
        state = self._state
        assert state is not None
        partition = self.partition
        # The outputs: the native core keeps them inside the extension (no Python object per output).
        planned: list[list[OutputRecord]] = []
        if native is not None:
            state = native.plan(state, records, partition)
        else:
            state, planned = self._step_all(state, records)
        self._settle()
        producer = self._producer
        txn = self._txn
        assert txn is not None
        last = records[-1].offset()
        offsets = [TopicPartition(self.input_topic, partition, last + 1)]
        metadata = self._consumer.consumer_group_metadata()
        try:
            producer.begin_transaction()
            self._txn_began = time.monotonic()
            if native is not None:
                tallies = native.produce_planned(producer, self._topics, partition)
            else:
                tallies = self._produce_all(producer, planned)
            # The offsets go after the outputs, on the watchdog thread (their round trips overlap the
            # produce acknowledgements). Sent before or during the produce calls, AddOffsetsToTxn
            # races the AddPartitionsToTxn that the first output triggers, and the coordinator
            # answers the loser CONCURRENT_TRANSACTIONS, to be retried after a backoff: measured
            # 8% slower (median of 8 interleaved runs each).
            offsets_sent = txn.submit(
                lambda: self._attempts(
                    lambda: producer.send_offsets_to_transaction(offsets, metadata, _TXN_TIMEOUT_S),
                    "send_offsets_to_transaction",
                ),
                "send_offsets_to_transaction",
                _TXN_TIMEOUT_S + _TXN_GRACE_S,
            )
        except KafkaException as exc:
            self._raise_for(exc)

        def commit() -> None:
            # Runs on the watchdog thread after the offsets call (one queue, in order). Its outcome is
            # re-raised here, so a transaction whose offsets were not sent is never committed.
            offsets_sent.result()
            self._attempts(lambda: producer.commit_transaction(_TXN_TIMEOUT_S), "commit_transaction")

        pending = txn.submit(commit, "send_offsets_to_transaction/commit_transaction", _TXN_TIMEOUT_S + _TXN_GRACE_S)
        self._state = state
        self._inflight = _Inflight(pending, len(records), last, *tallies)
        return len(records)

    def _usable(self, messages: list[Any]) -> list[Any]:
        """The messages without an error; raises for a fatal consumer error, logs the others."""
        records = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if error.fatal():
                    raise KafkaException(error)
                self._log(f"consumer error (will retry): {error}")
                continue
            records.append(message)
        return records

    def _step_all(self, state: Any, records: list[Any]) -> tuple[Any, list[list[OutputRecord]]]:
        """Any core: the outputs of every record, in order."""
        partition = self.partition
        step = self.core.step
        planned = []
        for message in records:
            state, outputs = step(state, InputRecord.of_message(message, partition))
            planned.append(outputs)
        return state, planned

    def _produce_all(self, producer: Any, planned: list[list[OutputRecord]]) -> tuple[int, int, int, int]:
        """Produce every output (``NativeSchedulerCore.produce_planned`` does the same for its plan).

        Returns (journalled, seals, refused, dead_letters), added to the counters once the transaction committed.
        """
        partition = self.partition
        produce = producer.produce
        topic_of = self._topic_of
        journalled = seals = refused = dead_letters = 0
        for outputs in planned:
            for out in outputs:
                stream = out.stream
                try:
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

    def _settle(self) -> None:
        """Wait for the in-flight transaction; count its work once it committed."""
        inflight = self._inflight
        if inflight is None:
            return
        self._inflight = None
        try:
            inflight.pending.result()
        except KafkaException as exc:
            self._raise_for(exc)
        counters = self.counters
        counters.journalled += inflight.journalled
        counters.seals += inflight.seals
        counters.refused += inflight.refused
        counters.dead_letters += inflight.dead_letters
        counters.consumed += inflight.records
        counters.transactions += 1
        counters.last_offset = inflight.last_offset
        # The state was only committed with the transaction; keep the recovery budget for real trouble.
        counters.recoveries = 0

    def _settle_quietly(self) -> None:
        """On the way out: let the last transaction finish; if it cannot, the next instance redoes that batch."""
        try:
            self._settle()
        except (_Abort, KafkaException) as exc:
            self._raise_if_fenced(exc)
            self._log(f"the last transaction did not commit ({exc}); its input will be processed again on restart")

    def _raise_for(self, exc: KafkaException) -> NoReturn:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.txn_requires_abort():
            self._log(f"transaction must be aborted ({error}); replaying the batch")
            raise _Abort() from exc
        raise exc

    def _produce(self, producer: Any, topic: str, key: bytes, value: bytes, headers: Any, timestamp: int) -> None:
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key, partition=self.partition, timestamp=timestamp, headers=list(headers)
                )
                return
            except BufferError:
                producer.poll(0.05)

    def _retrying(self, call: Callable[[], Any], what: str, attempts: int = 10) -> Any:
        """``call`` with retries, each attempt on the watchdog thread under a deadline."""
        assert self._txn is not None
        txn = self._txn
        return self._attempts(lambda: txn.call(call, what, _TXN_TIMEOUT_S + _TXN_GRACE_S), what, attempts)

    def _attempts(self, call: Callable[[], Any], what: str, attempts: int = 10) -> Any:
        """``call``, retried while Kafka says the error is retriable."""
        for attempt in range(attempts):
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.retriable() and attempt + 1 < attempts:
                    self._log(f"{what}: retriable error ({error}); retrying")
                    time.sleep(min(0.1 * (attempt + 1), 1.0))
                    continue
                raise
        raise AssertionError("unreachable")

    # -- progress -------------------------------------------------------------------

    def _report(self, *, final: bool = False) -> None:
        c = self.counters
        elapsed = max(time.monotonic() - c.started, 1e-9)
        self._last_progress = time.monotonic()
        label = "stopped" if final else "running"
        self._log(
            f"{label}: offset {c.last_offset} | consumed {c.consumed} journalled {c.journalled} refused {c.refused} "
            f"dead-lettered {c.dead_letters} seals {c.seals} | {c.transactions} txns {c.aborts} aborts | "
            f"{c.consumed / elapsed:.0f} rec/s"
        )

    def _log(self, text: str) -> None:
        if self.progress is not None:
            print(f"scheduler p{self.partition}: {text}", file=self.progress, flush=True)


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


def _values_from(consumer: Any, topic: str, partition: int, start: int) -> Iterator[bytes | None]:
    """Every committed value of one partition from offset ``start`` to its current end."""
    consumer.assign([TopicPartition(topic, partition, start)])
    while True:
        done = False
        for message in consumer.consume(10000, _REBUILD_POLL_S):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    done = True
                    continue
                raise KafkaException(error)
            yield message.value()
        if done:
            return


def _read_partition(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    """Every committed value of one partition, in offset order."""
    consumer = _rebuild_consumer(bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=_TXN_TIMEOUT_S)
        if high <= low:
            return []
        # a tombstone becomes b"" and fails the rebuild as corrupt
        return [value or b"" for value in _values_from(consumer, topic, partition, OFFSET_BEGINNING)]
    finally:
        consumer.close()


def _last_value(bootstrap: str, topic: str, partition: int) -> bytes | None:
    """The value of the last committed record of a partition, or None when it has none."""
    consumer = _rebuild_consumer(bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=_TXN_TIMEOUT_S)
        if high <= low:
            return None
        window = 64
        while True:
            # the tail may hold only transaction markers: widen the window until a record shows up
            start = max(low, high - window)
            last: bytes | None = None
            for value in _values_from(consumer, topic, partition, start):
                last = value
            if last is not None or start <= low:
                return last
            window *= 4
    finally:
        consumer.close()
