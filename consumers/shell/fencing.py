"""One partition, one owner: how an instance learns that it no longer owns its partition, and stops rather than
fight back.

The newest instance wins: its ``init_transactions`` fences the older one. An instance that Kafka calls fenced
(``_FENCING``), that was paused since it last proved it owns the partition, or whose consumer group moved the
partition elsewhere raises ``SchedulerFenced``, and never makes a new producer, which would fence the newer
instance in turn. The watchdog (``_TxnCaller``) runs the producer's blocking transactional calls under a deadline
in awake seconds, as librdkafka can block in them past their own timeout; ``_retrying`` and ``_attempts`` retry
what Kafka calls retriable.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException

from bernstein.consumers.shell.base import ShellBase
from bernstein.consumers.shell.clock import _TXN_GRACE_S, _TXN_TIMEOUT_S, _awake_clock, _AwakeClock
from bernstein.consumers.shell.errors import SchedulerFailed, SchedulerFenced

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


class Fencing(ShellBase):
    """Stops an instance that no longer owns its partition; runs transactional calls under the watchdog."""

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
