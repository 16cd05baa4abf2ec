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

A produce error about one record (the broker or librdkafka refuses one of its
outputs: MSG_SIZE_TOO_LARGE, INVALID_RECORD, ...) is that record's, not the
producer's: the transaction is aborted, the batch is redone up to that input
and committed, then the input is dead-lettered on its own (PRODUCE_REJECTED,
with Kafka's error text) and the partition carries on. A failure of the native
batch path that is not Kafka's (a Rust panic, a defect) is contained the same
way: that batch is redone with the Python reference.

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
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn, TextIO

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from bernstein.consumers.core.model import OUTPUT_FRAMING_ALLOWANCE, InputRecord, OutputRecord, SchedulerState, Stream
from bernstein.consumers.core.native import NativeSchedulerCore, NativeState, SchedulerCoreLike
from bernstein.consumers.core.rebuild import StateCorrupted, rebuild_state
from bernstein.consumers.core.snapshot import (
    Positions,
    Snapshot,
    encode_canonical,
    encode_form,
    newest_verified,
    snapshot_form,
    snapshot_json,
    state_bytes,
)
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.records import DeadLetterCode
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import client_config, partition_count, transactional_producer_config
from bernstein.substrate.logs import write_line

_TXN_TIMEOUT_S: Final = 30.0
_PRODUCER_MAX_MESSAGE_BYTES: Final = 2097152
"""bernstein.substrate.kafka's message.max.bytes for the scheduler's producer (raised when max_output_bytes needs it)."""
_JOURNAL, _REFUSALS, _DEADLETTER = Stream.JOURNAL, Stream.REFUSALS, Stream.DEADLETTER
_FETCH_MIN_BYTES: Final = 65536
"""What the loop's consumer asks the broker to gather before it answers (bounded by ``fetch.wait.max.ms``)."""
_REBUILD_POLL_S: Final = 0.05
"""consume() waits its whole timeout unless the batch fills, even after the end-of-partition event: keep it short."""
_TXN_GRACE_S: Final = 5.0
"""How long past its own timeout a transactional call may block before the producer is given up."""
_PAUSED_S: Final = 5.0
"""A gap this long between two looks of the ticker is a pause of the process (SIGSTOP, a VM or GC freeze)."""
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


class TopicLimitTooSmall(BernsteinError):
    """An output topic's max.message.bytes is below what the scheduler may write to it."""

    code = "E_TOPIC_LIMIT_TOO_SMALL"


class SubmissionPartitionsMismatch(BernsteinError):
    """The core was configured for another partition count than the input topic has."""

    code = "E_SUBMISSION_PARTITIONS_MISMATCH"


class _Abort(Exception):
    """Internal: the open transaction must be aborted and the batch replayed."""

    txn_open = True
    """False when the failure came before this batch's transaction began (nothing to abort)."""


class _Rejected(_Abort):
    """Internal: Kafka refused an output of the input at ``offset``; it is dead-lettered on the replay."""

    def __init__(self, offset: int, detail: str) -> None:
        super().__init__(f"input offset {offset}: {detail}")
        self.offset = offset
        self.detail = detail


class _NativeFailed(_Abort):
    """Internal: the native batch path failed (not Kafka's doing); the batch is redone with the reference."""

    def __init__(self, last_offset: int, cause: BaseException, *, txn_open: bool) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.last_offset = last_offset
        self.txn_open = txn_open


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


class _TxnCallStuck(KafkaException):
    """Internal: a transactional call outlived its timeout; the producer must be replaced (handled as fatal)."""


class _AwakeClock:
    """Seconds this process was running, and the pauses (SIGSTOP, a VM or GC freeze) it noticed.

    ``time.monotonic()`` keeps counting while the whole process is stopped. A ticker thread
    looks every ``tick`` seconds; ``awake()`` counts a gap between two looks up to ``gap``
    seconds only, and ``pauses()`` counts the gaps of at least ``_PAUSED_S``. A transactional
    call's deadline is measured in awake seconds, so a call that was in flight when the
    process froze gets its whole timeout to hear the broker's real answer once it resumes
    (PRODUCER_FENCED after a takeover), instead of being declared stuck on wake-up.
    """

    def __init__(self, now: Callable[[], float] = time.monotonic, *, tick: float = 0.2, gap: float = 1.0) -> None:
        self._now = now
        self._tick = tick
        self._gap = gap
        self._lock = threading.Lock()
        self._last = now()
        self._awake = 0.0
        self._paused = 0.0
        self._pauses = 0

    def start(self) -> _AwakeClock:
        threading.Thread(target=self._run, name="bernstein-clock", daemon=True).start()
        return self

    def _run(self) -> None:
        while True:
            time.sleep(self._tick)
            self.look()

    def look(self) -> None:
        """One look at the clock (the ticker's; tests call it directly)."""
        with self._lock:
            now = self._now()
            elapsed = max(now - self._last, 0.0)
            self._last = now
            if elapsed > self._gap:
                self._awake += self._gap
            else:
                self._awake += elapsed
            if elapsed >= _PAUSED_S:
                self._paused += elapsed
                self._pauses += 1

    def awake(self) -> float:
        """Awake seconds so far (monotonic; a gap the ticker has not seen yet counts at most ``gap``)."""
        with self._lock:
            return self._awake + min(max(self._now() - self._last, 0.0), self._gap)

    def pauses(self) -> tuple[int, float]:
        """The pauses of at least ``_PAUSED_S`` noticed so far: how many, and their seconds in all."""
        with self._lock:
            return self._pauses, self._paused


_CLOCK: _AwakeClock | None = None


def _awake_clock() -> _AwakeClock:
    """The process's one ticking clock (started on first use)."""
    global _CLOCK
    if _CLOCK is None:
        _CLOCK = _AwakeClock().start()
    return _CLOCK


class _TxnCaller:
    """Runs the producer's blocking transactional calls on a daemon thread, with a deadline they cannot ignore.

    librdkafka can block in ``send_offsets_to_transaction`` forever, past its timeout, when the group
    coordinator it cached went away (confluentinc/librdkafka#5456, #5511): one broker restart is enough.
    Past the deadline the caller raises ``_TxnCallStuck``; the shell then abandons this caller and its
    producer (the thread stays blocked) and starts a new producer, whose ``init_transactions`` fences
    the old one and aborts its open transaction.
    """

    def __init__(self, clock: _AwakeClock | None = None) -> None:
        self.stuck = False
        self.clock = clock or _awake_clock()
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
        """Start ``call`` on the worker thread; ``result()`` waits for it (at most ``deadline`` awake seconds from now)."""
        pending = _Pending(self, what, self.clock.awake() + deadline, deadline)
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
        clock = self.caller.clock
        # in slices, so that a pause of the process (not counted by the awake clock) extends the wait
        while not self.done.wait(min(max(self.due - clock.awake(), 0.0), 0.5)):
            if clock.awake() >= self.due:
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
    dead_lettered: int = -1
    """The input offset this transaction dead-letters because Kafka refused an output of it, or -1."""
    codes: tuple[list[tuple[str, int]], list[tuple[str, int]]] = ([], [])
    """The batch's refusals and dead letters by code (counted once the transaction committed)."""
    timing: list[float] = field(default_factory=list)
    """[began, commit seconds, committed]: monotonic times the commit call fills in (metrics)."""


@dataclass
class Counters:
    """What the scheduler has done since it started (shown as progress, read by ``bernstein.consumers.metrics``)."""

    consumed: int = 0
    journalled: int = 0
    refused: int = 0
    dead_letters: int = 0
    seals: int = 0
    transactions: int = 0
    aborts: int = 0
    recoveries: int = 0
    """Recoveries since the last commit (the budget ``max_recoveries`` bounds)."""
    last_offset: int = -1
    started: float = field(default_factory=time.monotonic)
    refused_codes: dict[str, int] = field(default_factory=dict)
    """Committed refusal records by code (their sum is ``refused``)."""
    dead_letter_codes: dict[str, int] = field(default_factory=dict)
    """Committed dead letters by code (their sum is ``dead_letters``)."""
    recoveries_total: int = 0
    native_fallbacks: int = 0
    """Batches redone with the Python reference because the native batch path failed."""
    rebuilds: int = 0
    rebuild_seconds: float = field(default=0.0, compare=False)
    """How long the last rebuild took."""
    rebuild_journal_records: int = 0
    """Journal records the last rebuild read (only the tail after a snapshot)."""
    rebuild_snapshot: int = -1
    """The input offset of the snapshot the last rebuild started from (-1: it folded the whole partition)."""
    rewinds: int = 0
    """Recoveries that put the state back to the last commit in memory instead of rebuilding it (``_rewind``)."""
    rewind_seconds: float = field(default=0.0, compare=False)
    """How long the last rewind took."""
    snapshots: int = 0
    """State snapshots this process wrote (docs/scheduler.md, "Snapshots and restart")."""
    snapshot_seconds: float = field(default=0.0, compare=False)
    """Time spent taking snapshots (waiting for the commit they cover, encoding them, asking for the ends)."""
    next_offset: int = -1
    """The next input offset, as committed with the outputs (-1 until the consumer is placed)."""
    high_watermark: int = -1
    """The input partition's high watermark as last fetched (-1 until known)."""
    last_seal_time: float = field(default=0.0, compare=False)
    """Unix time of the commit of the last seal this process wrote (0: none yet)."""
    phase: str = "starting"
    """starting, rebuilding, consuming, stopped or failed (``/readyz``: ready while consuming)."""
    heartbeat: float = field(default_factory=time.monotonic, compare=False)
    """When the loop (or a rebuild) last moved (``/healthz``)."""
    progressed: float = field(default_factory=time.monotonic, compare=False)
    """When the committed input offset last moved on (``/readyz`` fails while a backlog waits and it does not)."""


@dataclass(frozen=True)
class ShellOptions:
    batch_max: int = 500
    batch_timeout: float = 0.02
    """The batching window, in seconds: a batch is taken when ``batch_max`` records came or this much time passed
    (``consume(n, timeout)``). At 1,000 submissions/s it makes batches of about 20 records; taking whatever had
    come as soon as one record came made batches of about 6, three times the transactions, and more broker
    load than latency saved (p99 122-328 ms against 44-49 ms here)."""
    progress_every: float = 5.0
    max_recoveries: int = 20
    quarantine: frozenset[int] = frozenset()
    """Journal offsets of this partition the rebuild skips: records an operator inspected and
    found not written by this scheduler (see docs/scheduler.md, "When the scheduler will not start")."""
    quarantine_inputs: frozenset[int] = frozenset()
    """Input (submissions) offsets of this partition to dead-letter without stepping them
    (``INPUT_QUARANTINED``): a record an operator chose not to let the scheduler read."""
    snapshot_every_transactions: int = 1000
    """Write a state snapshot after this many committed transactions since the last one (0: never by count)."""
    snapshot_every_records: int = 20_000
    """... or after this many committed input records, whichever comes first (0: never by records)."""
    snapshot_bytes_per_record: int = 128
    """... but never before the inputs since the last snapshot reach its size divided by this: a large
    state is snapshotted less often, so a snapshot costs at most about this many bytes per input."""
    check_rewind: bool = False
    """After each rewind also rebuild the state from Kafka and stop (SchedulerFailed) unless both are the same
    bytes: a self-check for tests and audits, at the cost of a rebuild per aborted transaction."""


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
        group_metadata: Callable[[], Any] | None = None,
        still_owned: Callable[[], bool] | None = None,
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
        self.group_metadata = group_metadata
        """Consumer-group mode (``bernstein.consumers.group``): the group member's metadata (member id, generation) that
        every transaction's input offsets carry (KIP-447), so the group coordinator refuses the offsets of a
        process the group has moved on from. Default: this shell's own consumer's (no member: a static owner)."""
        self.still_owned = still_owned
        """Consumer-group mode: whether the group still assigns this partition to this process. A recovery
        that would make a new producer (whose init_transactions fences the current owner) asks first."""
        self.counters = Counters()
        self.observer: Callable[[int, float, float], None] | None = None
        self.emit: Callable[[str, str, str, dict[str, Any]], None] | None = None
        """Writes a log event (event, message, level, fields) instead of the text line (``bernstein.substrate.logs``)."""
        """Called once per committed transaction with (records, transaction seconds, commit seconds) (metrics)."""
        self._stop = False
        self._producer: Any = None
        self._txn: _TxnCaller | None = None
        self._inflight: _Inflight | None = None
        self._consumer: Any = None
        self._state: Any = None
        """The core's state: a SchedulerState (Python core) or a native handle."""
        self._last_progress = time.monotonic()
        self._rejected: dict[int, tuple[DeadLetterCode, str]] = {
            offset: (DeadLetterCode.INPUT_QUARANTINED, f"input offset {offset} named by --quarantine submissions:{offset}")
            for offset in options.quarantine_inputs
        }
        """Input offset -> why it is dead-lettered instead of stepped: Kafka refused one of its outputs
        (PRODUCE_REJECTED), Kafka could not deliver it (INPUT_UNREADABLE), or an operator quarantined it."""
        self._unreadable_seen: set[int] = set()
        """Input offsets the consumer delivered an error for once: a second sight makes it INPUT_UNREADABLE."""
        self._read_from = 0
        """The input offset the loop reads next (after a batch, a seek or the start): an error about an
        offset before it is a stale copy of one already dealt with."""
        self._last_input_ts = 0
        """The Kafka timestamp of the last input read: what an unreadable input's dead letter is stamped with."""
        self._refused_outputs: dict[tuple[str, bytes], str] = {}
        """(topic, value) -> the broker's refusal, from delivery reports: the replay finds whose output it was."""
        self._undelivered: list[tuple[KafkaError, str, int, bytes]] = []
        """Per-record delivery failures of the open transaction: (error, topic, size, value)."""
        self._reference_until = -1
        """Batches starting at or before this input offset are stepped by the Python reference."""
        self._max_request = _PRODUCER_MAX_MESSAGE_BYTES
        """The producer's message.max.bytes: at least the largest output, at most the smallest topic limit (set by the
        start-up check)."""
        self._batch_bytes = _PRODUCER_MAX_MESSAGE_BYTES - OUTPUT_FRAMING_ALLOWANCE
        """The producer's batch.size: no batch of two or more records exceeds a topic's limit (set by the start-up check)."""
        self._txn_began: float | None = None
        """When the newest transaction began (monotonic), to tell a takeover from this instance's own timeout."""
        self._txn_timeout_s = (
            int(transactional_producer_config(bootstrap, self.transactional_id)["transaction.timeout.ms"]) / 1000
        )
        """The producer's transaction.timeout.ms, in seconds (set with the producer)."""
        self._topic_of = {stream: topics.by_stream(stream.value) for stream in Stream}
        self._topics = tuple(
            self._topic_of[stream] for stream in (_JOURNAL, _REFUSALS, Stream.AUDIT, _DEADLETTER, Stream.CHECKPOINTS)
        )
        self._native = core if isinstance(core, NativeSchedulerCore) else None
        """The native core's batch path (``plan`` / ``produce_planned``): no Python object per output."""
        self._clock = _awake_clock()
        self._owned_since = self._clock.pauses()
        self._since_snapshot = [0, 0]
        """Committed transactions and input records since the last snapshot (or rebuild)."""
        self._committed_next = -1
        """The next input offset after the last commit (what a snapshot covers)."""
        self._snapshot_inflight = False
        """The open transaction carries a snapshot."""
        self._last_snapshot_bytes = 0
        self._encoding: Future[list[tuple[bytes, bytes]]] | None = None
        """A snapshot being encoded on the worker thread."""
        self._encoder: ThreadPoolExecutor | None = None
        """The size of the last snapshot this process took (the cadence waits longer after a large one)."""
        self._marks: list[int | None] = []
        """The core's undo mark before each batch planned since the last commit, oldest first (None: a batch stepped on a
        copy, which the core cannot rewind): an aborted transaction rewinds to the first (``_rewind``)."""
        self._reader = _PartitionReader(bootstrap)
        """The rebuild's consumers (kept: each new one costs a connection and, on a secured cluster, a login)."""
        """The clock's pauses when this instance last proved it owns the partition (init_transactions, a commit)."""

    # -- lifecycle --------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish its current batch and return (SIGTERM handler)."""
        self._stop = True

    def run(self, *, until: Callable[[Counters], bool] | None = None, idle_exit: float | None = None) -> Counters:
        """Process until stopped, until ``until(counters)`` holds, or after ``idle_exit`` idle seconds.

        Raises ``SchedulerFenced`` when another instance took the partition over (nothing more is
        committed by this one), ``SchedulerFailed`` when Kafka errors keep recurring.
        """
        counters = self.counters
        try:
            self._start()
        except KafkaException as exc:
            counters.phase = "failed"
            self._close()
            self._raise_if_fenced(exc)
            raise self._kafka_failed(exc, "starting") from exc
        except BaseException:
            counters.phase = "failed"
            raise
        idle_since = time.monotonic()
        try:
            while not self._stop:
                counters.heartbeat = time.monotonic()
                if until is not None and until(counters):
                    break
                try:
                    processed = self._one_batch()
                except _Abort as abort:
                    self._note(abort)
                    self._recover(abortable=True, txn_open=abort.txn_open)
                    continue
                except KafkaException as exc:
                    self._raise_if_fenced(exc)
                    self._raise_if_paused(exc)
                    self._log(f"fatal Kafka error, recreating the producer: {exc}", "producer_recreated", "error", error=str(exc))
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
            counters.phase = "stopped"
        except KafkaException as exc:  # e.g. from a recovery's own calls
            counters.phase = "failed"
            self._raise_if_fenced(exc)
            raise self._kafka_failed(exc, "recovering") from exc
        except BaseException:
            counters.phase = "failed"
            raise
        finally:
            self._close()
        if self.progress is not None:
            self._report(final=True)
        return self.counters

    def _start(self) -> None:
        self._check_topic_limits()
        self._check_partitioning()
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
                    # the broker answers a fetch when a batch's worth came or after half the batching window,
                    # not as soon as one record came: at 1,000 submissions/s about 130 fetches a second instead
                    # of one per record, a quarter less broker CPU (bench.scheduler --only latency, README)
                    "fetch.wait.max.ms": 10,
                    "fetch.min.bytes": _FETCH_MIN_BYTES,
                    "queued.max.messages.kbytes": 65536,
                },
            )
        )
        self._seek_to_committed()
        self.counters.phase = "consuming"

    def _close(self) -> None:
        if self._encoder is not None:
            self._encoder.shutdown(wait=True)
            self._encoder = None
        self._reader.close()
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

    def _kafka_failed(self, exc: KafkaException, doing: str) -> SchedulerFailed:
        """A Kafka error that ends the run, as the documented failure (exit 3), never as a defect."""
        return SchedulerFailed(
            f"partition {self.partition}: Kafka failed while {doing} ({exc}): check that the broker at {self.bootstrap} "
            "is up and reachable (infra/status; its log is under .infra/kafka/logs) and start the scheduler again"
        )

    def _raise_if_paused(self, exc: KafkaException) -> None:
        """Raise ``SchedulerFenced`` when the process was paused since it last proved it owns the partition.

        Called before a new producer would be made. After a pause a newer instance may have
        taken the partition over; a new producer's ``init_transactions`` would fence it (the
        zombie would win). Without a commit or an ``init_transactions`` since the pause that
        proves otherwise, this instance stops instead (exit 7).
        """
        count, seconds = self._clock.pauses()
        since, before = self._owned_since
        if count <= since:
            return
        self._producer = None  # never flushed, aborted or reused: it may commit nothing more
        raise SchedulerFenced(
            f"partition {self.partition}: this instance was paused for {seconds - before:.0f}s since it last committed "
            f"(transactional id {self.transactional_id}), then Kafka answered: {exc}. Another instance may own the "
            "partition now, and a new producer would fence it: this instance stops (nothing more was committed by "
            "it). If no other instance runs, start the scheduler again",
            partition=self.partition,
            transactional_id=self.transactional_id,
            error="PAUSED",
        ) from exc

    def _raise_if_revoked(self) -> None:
        """Consumer-group mode: raise ``SchedulerFenced`` when the group no longer assigns the partition here.

        A recovery rebuilds and may make a new producer, whose ``init_transactions`` would fence
        the process that owns the partition now; the group has moved on, so this shell stops.
        """
        if self.still_owned is None or self.still_owned():
            return
        self._producer = None  # never flushed, aborted or reused: it may commit nothing more
        raise SchedulerFenced(
            f"partition {self.partition}: the consumer group assigned it to another process; this shell stops "
            "(nothing more was committed by it)",
            partition=self.partition,
            transactional_id=self.transactional_id,
            error="REVOKED",
        )

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

    def _check_topic_limits(self) -> None:
        """Every output topic takes the largest output the core may write (``max_output_bytes`` plus Kafka's framing).

        Otherwise a large but valid output would be refused by the broker and its input
        dead-lettered (PRODUCE_REJECTED) where a correctly sized deployment journals it.
        """
        needed = self.core.config.max_output_bytes + OUTPUT_FRAMING_ALLOWANCE
        limits = _max_message_bytes(self.bootstrap, self._topics)
        small = [f"{topic} ({limit})" for topic, limit in limits.items() if limit < needed]
        if small:
            raise TopicLimitTooSmall(
                f"partition {self.partition}: max.message.bytes of {', '.join(small)} is below {needed}, the largest "
                f"output the scheduler may write (max_output_bytes {self.core.config.max_output_bytes} + "
                f"{OUTPUT_FRAMING_ALLOWANCE} for Kafka's framing): raise it (kafka-configs.sh --alter --entity-type topics "
                f"--entity-name <topic> --add-config max.message.bytes={needed}) or lower --max-output-bytes"
            )
        self._max_request, self._batch_bytes = _producer_sizes(min(limits.values()), needed)

    def _check_partitioning(self) -> None:
        """The core checks every input's partition against the input topic's partition count, read here.

        A record must sit on ``partition_for(key, N)`` (Kafka's murmur2 partitioner), else it is refused
        with WRONG_PARTITION. ``N`` is read at every start. Partitions added to the topic later (the
        README says never to) are not seen by a running scheduler, which refuses the records producers
        then move to another partition; a restarted one adopts the new count (docs/decisions.md, "A record sits on
        its run id's murmur2 partition"). A core configured with another count is refused.
        """
        count = partition_count(self.bootstrap, self.input_topic)
        configured = self.core.config.submission_partitions
        if configured is None:
            self.core.set_submission_partitions(count)
        elif configured != count:
            raise SubmissionPartitionsMismatch(
                f"partition {self.partition}: the scheduler core checks records against {configured} partition(s), "
                f"but {self.input_topic} has {count}: configure submission_partitions={count} (or None, and the "
                "scheduler reads it from the topic)"
            )
        self._log(
            f"input records must sit on their key's murmur2 partition of {count} ({self.input_topic})",
            "partitioning",
            partitions=count,
            topic=self.input_topic,
        )

    def _producer_config(self) -> dict[str, Any]:
        config = transactional_producer_config(self.bootstrap, self.transactional_id)
        # the client's own size check must not refuse what the topics take, nor pass what one refuses
        config["message.max.bytes"] = self._max_request
        # a record batch the broker refuses is then one record: the refusal is about that record alone
        config["batch.size"] = self._batch_bytes
        config["on_delivery"] = self._on_delivery
        config["delivery.report.only.error"] = True
        return config

    def _new_producer(self) -> Any:
        config = self._producer_config()
        self._txn_timeout_s = int(config["transaction.timeout.ms"]) / 1000
        producer = Producer(config)
        if self._txn is None or self._txn.stuck:
            self._txn = _TxnCaller(self._clock)
        clock = self._clock

        def init() -> tuple[int, float]:
            producer.init_transactions(_TXN_TIMEOUT_S)
            return clock.pauses()  # ownership is proved as the call returns (a pause after it counts)

        self._owned_since = self._retrying(init, "init_transactions")
        return producer

    # -- state ---------------------------------------------------------------------

    def _rebuild(self) -> SchedulerState:
        """Fold the committed journal, audit and checkpoints partitions (records no key vouches for are logged, not adopted)."""
        started = time.monotonic()
        counters = self.counters
        counters.phase = "rebuilding"
        rebuilt = (self.topics.journal, self.topics.audit, self.topics.checkpoints, self.topics.state)
        self._reader.warm(rebuilt)
        for topic in rebuilt:
            counters.heartbeat = time.monotonic()
            # a transaction this instance committed a moment ago is visible once its markers are written
            if not self._reader.wait_stable(topic, self.partition):
                self._log(
                    f"{topic}[{self.partition}] keeps a transaction open; rebuilding from what is committed",
                    "transaction_open",
                    "warning",
                    topic=topic,
                )
        snapshot = self._newest_snapshot()
        read = [0]

        def journal(start: int) -> Iterator[tuple[int, bytes]]:
            for item in self._reader.stream(self.topics.journal, self.partition, start):
                read[0] += 1
                counters.heartbeat = time.monotonic()
                yield item

        def fold(snapshot: Snapshot | None) -> SchedulerState:
            read[0] = 0
            p = snapshot.positions if snapshot is not None else Positions(OFFSET_BEGINNING, *(OFFSET_BEGINNING,) * 3)
            return rebuild_state(
                self.core.config,
                self.partition,
                journal(p.journal_next),
                self._reader.stream(self.topics.audit, self.partition, p.audit_next),
                journal_topic=self.topics.journal,
                audit_topic=self.topics.audit,
                quarantined=self.options.quarantine,
                checkpoint_values=self._reader.stream(self.topics.checkpoints, self.partition, p.checkpoints_next),
                checkpoints_topic=self.topics.checkpoints,
                report=lambda skipped: self._log(f"warning: {skipped}", "rebuild_skipped", "warning"),
                start=snapshot.state if snapshot is not None else None,
            )

        try:
            state = fold(snapshot)
        except StateCorrupted as exc:
            if snapshot is None:
                raise
            self._log(
                f"warning: the tail after the snapshot at input offset {snapshot.positions.input_next} does not fold onto "
                f"it ({exc}); folding the whole partition",
                "snapshot_rejected",
                "warning",
            )
            snapshot = None
            state = fold(None)
        counters.rebuilds += 1
        counters.rebuild_seconds = time.monotonic() - started
        counters.rebuild_journal_records = read[0]
        counters.rebuild_snapshot = snapshot.positions.input_next if snapshot is not None else -1
        since = f"the snapshot at input offset {snapshot.positions.input_next} and " if snapshot is not None else ""
        self._log(
            f"state rebuilt from {since}{read[0]} journal records in {counters.rebuild_seconds:.2f}s: "
            f"{len(state.runs)} runs, audit seq {state.audit_seq}",
            "state_rebuilt",
            journal_records=read[0],
            snapshot_input_offset=counters.rebuild_snapshot,
            seconds=round(counters.rebuild_seconds, 3),
            runs=len(state.runs),
            audit_seq=state.audit_seq,
        )
        self._since_snapshot = [0, 0]
        return state

    def _newest_snapshot(self) -> Snapshot | None:
        """The newest snapshot of the partition that verifies (docs/scheduler.md, "Snapshots and restart"); None: fold everything."""
        snapshot = newest_verified(
            self.core.config,
            self.partition,
            self._reader.stream(self.topics.state, self.partition),
            report=lambda rejected: self._log(
                f"warning: {self.topics.state}[{self.partition}] {rejected}", "snapshot_rejected", "warning"
            ),
        )
        if snapshot is not None and any(offset < snapshot.positions.journal_next for offset in self.options.quarantine):
            self._log(
                f"warning: a quarantined journal offset lies before the snapshot at input offset "
                f"{snapshot.positions.input_next}; folding the whole partition",
                "snapshot_skipped",
                "warning",
            )
            return None
        if snapshot is not None:
            p = snapshot.positions
            wanted = {
                self.topics.journal: p.journal_next,
                self.topics.audit: p.audit_next,
                self.topics.checkpoints: p.checkpoints_next,
            }
            ends = {
                topic: self._reader.committed(topic).get_watermark_offsets(
                    TopicPartition(topic, self.partition), timeout=_TXN_TIMEOUT_S
                )[1]
                for topic in wanted
            }
            short = [
                f"{topic}[{self.partition}] ends at {ends[topic]}" for topic, offset in wanted.items() if ends[topic] < offset
            ]
            if short:
                self._log(
                    f"warning: the snapshot at input offset {p.input_next} covers more than the topics hold "
                    f"({'; '.join(short)}); folding the whole partition",
                    "snapshot_rejected",
                    "warning",
                )
                return None
        return snapshot

    def _snapshot_due(self) -> bool:
        transactions, records = self._since_snapshot
        every_t, every_r = self.options.snapshot_every_transactions, self.options.snapshot_every_records
        if transactions == 0 or records * max(self.options.snapshot_bytes_per_record, 1) < self._last_snapshot_bytes:
            return False
        return (every_t > 0 and transactions >= every_t) or (every_r > 0 and records >= every_r)

    def _take_snapshot(self) -> Future[list[tuple[bytes, bytes]]]:
        """The records of a snapshot of the state at the last commit (no transaction may be in flight).

        The state is copied and the output ends read here; the encoding (JSON, zlib, MAC) runs on a
        worker thread while the loop goes on, and the records go into the first transaction that
        begins after it finished (a snapshot stays true however much later it is written)."""
        assert self._inflight is None
        topics = (self.topics.journal, self.topics.audit, self.topics.checkpoints)
        # Every record below a partition's end belongs to a decided transaction (this scheduler is the
        # only writer and has none open), so the ends are where the tail starts; read_uncommitted, as
        # the commit markers may still be on their way.
        reader = self._reader.uncommitted()
        ends = [
            reader.get_watermark_offsets(TopicPartition(topic, self.partition), timeout=_TXN_TIMEOUT_S, cached=False)[1]
            for topic in topics
        ]
        config = self.core.config
        secret, key_id = (
            (config.audit_keys[-1].secret, config.audit_keys[-1].key_id)
            if config.audit_keys
            else (config.audit_key, config.audit_key_id)
        )
        positions = Positions(self._committed_next, *ends)
        self._since_snapshot = [0, 0]

        # The native core writes its state's canonical JSON itself (no Python object per entry); a Python state is
        # the live one, whose form is copied here. Compression and the MAC run on the worker thread.
        native, live = self._native, self._state
        state_json = native.state_json(live) if native is not None and isinstance(live, NativeState) else None
        form = snapshot_form(live, positions) if state_json is None else None
        partition = self.partition

        def encode() -> list[tuple[bytes, bytes]]:
            if state_json is not None:
                canonical = snapshot_json(state_json, positions)
                records = encode_canonical(canonical, partition, positions.input_next, audit_secret=secret, audit_key_id=key_id)
            else:
                assert form is not None
                records = encode_form(form, audit_secret=secret, audit_key_id=key_id)
            self._last_snapshot_bytes = sum(len(value) for _, value in records)
            return records

        if self._encoder is None:
            self._encoder = ThreadPoolExecutor(1, thread_name_prefix="snapshot")
        return self._encoder.submit(encode)

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
                self._log(f"committed offset: {error}; retrying", "retrying", "warning", call="committed", error=str(error))
                time.sleep(0.2)
        offset = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
        self._committed_next = committed.offset
        self._read_from = max(offset, 0)
        try:  # where the lag counts from (the metrics): the committed offset, else the partition's start
            low, high = self._consumer.get_watermark_offsets(tp, timeout=_TXN_TIMEOUT_S, cached=False)
            self.counters.next_offset, self.counters.high_watermark = (offset if offset >= 0 else low), high
        except KafkaException as exc:
            self._log(
                f"cannot read the input's watermarks ({exc}); the lag is known after the first fetch",
                "watermarks_unknown",
                "warning",
                error=str(exc),
            )
        self._consumer.assign([TopicPartition(self.input_topic, self.partition, offset)])
        self._log(
            f"reading {self.input_topic}[{self.partition}] from {'the beginning' if offset < 0 else offset}",
            "consuming",
            topic=self.input_topic,
            offset=offset if offset >= 0 else None,
        )

    def _recover(self, *, abortable: bool, txn_open: bool = True) -> None:
        self._raise_if_revoked()
        self._snapshot_inflight = False
        self._encoding = None  # the rebuild resets the cadence; a snapshot of an older commit is not needed
        self._inflight = None  # its transaction failed: the batch is redone from the committed offset
        self._undelivered.clear()
        self.counters.recoveries += 1
        self.counters.recoveries_total += 1
        if self.counters.recoveries > self.options.max_recoveries:
            raise SchedulerFailed(
                f"partition {self.partition}: {self.counters.recoveries - 1} recoveries without lasting progress; "
                "check the broker log (.infra/kafka/logs) and restart the scheduler"
            )
        if abortable and txn_open:
            self.counters.aborts += 1
            try:
                self._retrying(lambda: self._producer.abort_transaction(_TXN_TIMEOUT_S), "abort_transaction")
            except KafkaException as exc:
                self._raise_if_fenced(exc)
                self._raise_if_paused(exc)
                self._log(f"abort failed ({exc}); recreating the producer", "producer_recreated", "error", error=str(exc))
                abortable = False
        if not abortable:
            self._producer = self._new_producer()
            # Kafka itself was in trouble (a fatal error, a call that never returned: often a broker restart):
            # the rebuild connects afresh instead of waiting out its kept consumers' reconnect backoff
            self._reader.close()
        # Only an abort this instance saw through leaves the last commit known: anything else rebuilds from Kafka.
        rewound = self._rewind() if abortable else None
        self._marks = []
        self._state = rewound if rewound is not None else self._rebuild()
        self._seek_to_committed()
        self.counters.phase = "consuming"

    def _rewind(self) -> Any | None:
        """The state at the last commit, put back in memory from the core's undo log (docs/scheduler.md, "Snapshots and
        restart"); None when it cannot be had that way (a batch since was stepped on a copy, or the core lost its
        state): the caller rebuilds from Kafka."""
        marks = self._marks
        oldest = marks[0] if marks else None
        if oldest is None or None in marks:
            return None
        started = time.monotonic()
        state = self.core.rewind(self._state, oldest)
        if state is None:
            return None
        counters = self.counters
        counters.rewinds += 1
        counters.rewind_seconds = time.monotonic() - started
        self._log(
            f"state rewound to the last commit in {counters.rewind_seconds * 1000:.1f} ms ({len(marks)} batches undone)",
            "state_rewound",
            batches=len(marks),
            seconds=round(counters.rewind_seconds, 6),
        )
        if self.options.check_rewind:
            rebuilt = self._plain(self._rebuild())
            if state_bytes(rebuilt) != state_bytes(self._plain(state)):
                raise SchedulerFailed(
                    f"partition {self.partition}: the state rewound in memory differs from the one rebuilt from Kafka "
                    "(a defect of the undo log): restart the scheduler, which rebuilds, and report it"
                )
            state = rebuilt
        return state

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

    # -- the loop -----------------------------------------------------------------

    def _one_batch(self) -> int:
        """Consume a batch and compute its outputs while the previous batch's transaction commits.

        The step function is pure, so the next batch can be computed before the
        previous commit is known; its outputs are produced only after that commit
        succeeded, in a new transaction. If a commit fails, the recovery path
        rebuilds the state from what Kafka committed and rewinds the input, so
        the speculative work is simply discarded.

        An input whose output Kafka refused (``_rejected``) ends the batch before
        it, and is then dead-lettered alone in its own transaction. Batches up to
        ``_reference_until`` are stepped by the Python reference (after a failure
        of the native path, or to find the input a broker-side rejection was about).
        """
        messages = self._consumer.consume(self.options.batch_max, self.options.batch_timeout)  # the batching window
        if self.observer is not None:  # metrics on: the high watermark the last fetch brought (no request)
            high = self._consumer.get_watermark_offsets(TopicPartition(self.input_topic, self.partition), cached=True)[1]
            if high >= 0:
                self.counters.high_watermark = high
        native = self._native
        records = messages if native is not None and self._messages_ok(native, messages) else self._usable(messages)
        if not records:
            self._settle()
            return 0
        rejection: tuple[DeadLetterCode, str] | None = None
        if self._rejected:
            records, rejection = self._cut_at_rejected(records)
        first, last = records[0].offset(), records[-1].offset()
        self._read_from = max(self._read_from, last + 1)
        stamped, timestamp = records[-1].timestamp()
        if stamped:
            self._last_input_ts = timestamp
        if self._encoding is None and self._snapshot_due():
            began = time.monotonic()
            self._settle()  # the snapshot covers the last commit: let it finish
            if self._committed_next >= 0:
                self._encoding = self._take_snapshot()
            self.counters.snapshot_seconds += time.monotonic() - began
        snapshot: list[tuple[bytes, bytes]] = []
        if self._encoding is not None and self._encoding.done():
            snapshot, self._encoding = self._encoding.result(), None
        state = self._state
        assert state is not None
        partition = self.partition
        # The outputs: the native core keeps them inside the extension (no Python object per output).
        planned: list[list[OutputRecord]] = []
        if rejection is not None:
            native = None
            state, mark = self._mark_if_python(self._plain(state))
            self._marks.append(mark)
            state, outputs = self._reference_core().reject(state, InputRecord.of_message(records[0], partition), *rejection)
            planned = [outputs]
        elif native is not None and first > self._reference_until:
            self._refused_outputs.clear()  # past the batches that were redone to find them
            try:
                state, mark = native.mark(state)
                self._marks.append(mark)
                state = native.plan(state, records, partition)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # noqa: BLE001 - a Rust panic is a BaseException (L7)
                self._settle()  # the previous batch was planned before this failure: let it commit
                raise _NativeFailed(last, exc, txn_open=False) from exc
        else:
            native = None
            core = self.core if self._native is None else self._reference_core()
            state, mark = self._mark_if_python(state if self._native is None else self._plain(state))
            self._marks.append(mark)
            state, planned = self._step_all(state, records, core)
        self._settle()
        producer = self._producer
        txn = self._txn
        assert txn is not None
        offsets = [TopicPartition(self.input_topic, partition, last + 1)]
        # Group mode reads the member's metadata when the offsets go out (a rebalance may have moved the
        # generation on since the batch began); the shell's own consumer is asked here, on the loop's thread.
        own_metadata = self._consumer.consumer_group_metadata() if self.group_metadata is None else None
        group_metadata = self.group_metadata or (lambda: own_metadata)
        try:
            producer.begin_transaction()
            self._txn_began = time.monotonic()
            for key, value in snapshot:  # committed with this batch's outputs, or not at all
                self._produce(producer, self.topics.state, key, value, (), 0)
            self._snapshot_inflight = bool(snapshot)
            if native is not None:
                tallies = self._produce_native(native, producer, last)
                codes = native.plan_codes() if tallies[2] or tallies[3] else _NO_CODES
            else:
                tallies = self._produce_all(producer, planned, records, dead_lettering=rejection is not None)
                codes = _codes_of(planned) if tallies[2] or tallies[3] else _NO_CODES
            # The offsets go after the outputs, on the watchdog thread (their round trips overlap the
            # produce acknowledgements). Sent before or during the produce calls, AddOffsetsToTxn
            # races the AddPartitionsToTxn that the first output triggers, and the coordinator
            # answers the loser CONCURRENT_TRANSACTIONS, to be retried after a backoff: measured
            # 8% slower (median of 8 interleaved runs each).
            offsets_sent = txn.submit(
                lambda: self._attempts(
                    lambda: producer.send_offsets_to_transaction(offsets, group_metadata(), _TXN_TIMEOUT_S),
                    "send_offsets_to_transaction",
                ),
                "send_offsets_to_transaction",
                _TXN_TIMEOUT_S + _TXN_GRACE_S,
            )
        except KafkaException as exc:
            self._raise_for(exc, last)

        clock = self._clock
        timing = [self._txn_began or time.monotonic()]

        def commit() -> tuple[int, float]:
            # Runs on the watchdog thread after the offsets call (one queue, in order). Its outcome is
            # re-raised here, so a transaction whose offsets were not sent is never committed.
            offsets_sent.result()
            calling = time.monotonic()
            self._attempts(lambda: producer.commit_transaction(_TXN_TIMEOUT_S), "commit_transaction")
            done = time.monotonic()
            timing.extend((done - calling, done))
            return clock.pauses()  # the commit proved ownership up to here

        pending = txn.submit(commit, "send_offsets_to_transaction/commit_transaction", _TXN_TIMEOUT_S + _TXN_GRACE_S)
        self._state = state
        self._inflight = _Inflight(
            pending,
            len(records),
            last,
            *tallies,
            dead_lettered=first if rejection is not None else -1,
            codes=codes,
            timing=timing,
        )
        return len(records)

    def _messages_ok(self, native: NativeSchedulerCore, messages: list[Any]) -> bool:
        try:
            return native.messages_ok(messages)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # noqa: BLE001 - then the Python check decides (L7)
            return False

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

    def _reference_core(self) -> Any:
        """The Python reference core (it steps the batches the native path does not, and dead-letters rejected inputs)."""
        return self._native.reference if self._native is not None else self.core

    def _mark_if_python(self, state: SchedulerState) -> tuple[SchedulerState, int | None]:
        """An undo mark on a state the Python core steps in place (the shell's core is the Python one); None when the
        shell's core is the native one and this is a copy of its state (nothing to rewind to)."""
        if self._native is not None:
            return state, None
        marked: tuple[SchedulerState, int] = self.core.mark(state)
        return marked

    @staticmethod
    def _plain(state: Any) -> SchedulerState:
        """The state as a ``SchedulerState`` (what the reference steps)."""
        return state.to_scheduler_state() if isinstance(state, NativeState) else state

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

    def _step_all(
        self, state: Any, records: list[Any], core: SchedulerCoreLike | None = None
    ) -> tuple[Any, list[list[OutputRecord]]]:
        """Any core (default: the shell's): the outputs of every record, in order."""
        partition = self.partition
        step = (core or self.core).step
        planned = []
        for message in records:
            state, outputs = step(state, InputRecord.of_message(message, partition))
            planned.append(outputs)
        return state, planned

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
                    self._log(f"{what}: retriable error ({error}); retrying", "retrying", "warning", call=what, error=str(error))
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
            f"{c.consumed / elapsed:.0f} rec/s",
            "stopped" if final else "progress",
            offset=c.last_offset,
            consumed=c.consumed,
            journalled=c.journalled,
            refused=c.refused,
            dead_lettered=c.dead_letters,
            seals=c.seals,
            transactions=c.transactions,
            aborts=c.aborts,
            records_per_second=round(c.consumed / elapsed),
        )

    def _log(self, text: str, event: str = "log", level: str = "info", **fields: Any) -> None:
        """One log event: the text line as always (``scheduler p0: ...``), or ``self.emit``'s (``--log-format json``)."""
        if self.progress is None:
            return
        if self.emit is not None:
            self.emit(event, text, level, fields)
        else:
            write_line(self.progress, f"scheduler p{self.partition}: {text}")


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


def _max_message_bytes(bootstrap: str, topics: tuple[str, ...]) -> dict[str, int]:
    """Each topic's effective max.message.bytes (its own setting, else the broker's default)."""
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    admin = AdminClient(client_config(bootstrap))
    try:
        futures = admin.describe_configs([ConfigResource("topic", topic) for topic in topics], request_timeout=_TXN_TIMEOUT_S)
        return {
            resource.name: int(future.result(_TXN_TIMEOUT_S)["max.message.bytes"].value) for resource, future in futures.items()
        }
    except KafkaException as exc:
        raise SchedulerFailed(f"cannot read the output topics' max.message.bytes: {exc}") from exc


def _producer_sizes(smallest_limit: int, needed: int) -> tuple[int, int]:
    """The producer's (message.max.bytes, batch.size) for output topics whose smallest max.message.bytes is given.

    ``needed`` (the largest output plus ``OUTPUT_FRAMING_ALLOWANCE``) is at most ``smallest_limit`` (the
    start-up check). message.max.bytes is librdkafka's check of one record at produce(): at least
    ``needed``, never above a topic's limit. batch.size leaves the framing allowance under both, so a
    batch of two or more records always fits every topic (librdkafka sends a record larger than
    batch.size in a batch of its own): when the broker refuses a batch for its size, that batch is
    one record, and only its input is dead-lettered (PRODUCE_REJECTED), whatever the batching.
    """
    max_request = min(smallest_limit, max(needed, _PRODUCER_MAX_MESSAGE_BYTES))
    return max_request, max_request - OUTPUT_FRAMING_ALLOWANCE


def _rejection_detail(stream: Stream, key: bytes, value: bytes, headers: Any, error: KafkaError) -> str:
    """What a PRODUCE_REJECTED dead letter says: the output Kafka refused and Kafka's own words (deterministic)."""
    size = len(key or b"") + len(value or b"") + sum(len(name) + len(data) for name, data in headers)
    return f"Kafka refused its {stream.value} output ({size} bytes of key, value and headers): {error.name()}: {error.str()}"


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
