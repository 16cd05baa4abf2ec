"""Consumer-group mode: scheduler processes on any number of machines share the submissions' partitions.

Every process joins the consumer group ``<prefix>.scheduler`` with cooperative rebalancing
(the classic protocol's ``cooperative-sticky`` assignor). The group consumer only learns which
partitions are this process's: they are paused as soon as they are assigned and never fetched.
Each assigned partition gets a ``SchedulerShell`` on a thread of its own, run exactly as a static
``--partition`` scheduler runs it: its own read_committed fetch consumer, the partition's
transactional id ``<prefix>.scheduler.p<N>`` (whose ``init_transactions`` fences the previous
owner and aborts its open transaction), state from the newest snapshot and the tail.

Two fences keep one owner per partition:

* the transactional id: a new owner's ``init_transactions`` bumps the epoch, so a zombie's
  producer can commit nothing more (PRODUCER_FENCED);
* the group metadata (KIP-447): every transaction's input offsets carry this member's id and
  generation, so the group coordinator refuses them (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) once
  the group has moved on, and the shell aborts that transaction.

A revoked partition's shell stops after its in-flight transaction settled (committed, or aborted
and left to the next owner) before the rebalance goes on; a lost assignment (this member's
session expired) stops it the same way, and Kafka's fences refuse whatever it still tries. A
process that is killed loses its partitions after ``session.timeout.ms``; the others take them
over, each rebuilding from the partition's snapshot and tail.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bernstein.consumers.shell import SchedulerFenced, SchedulerShell
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.kafka import client_config

DEFAULT_SESSION_TIMEOUT_MS: Final = 6000
"""How long the group waits for a silent member before its partitions move (the broker's
``group.min.session.timeout.ms`` defaults to 6000)."""
_STOP_WAIT_S: Final = 60.0
"""How long a revocation waits for a partition's shell to settle its transaction and stop."""
_FENCED_RESTARTS: Final = 5
"""A shell fenced while the group still assigns its partition here is started again this many times at most."""
_RESTART_DELAY_S: Final = 1.0

ShellFactory = Callable[[int, Callable[[], Any], Callable[[], bool]], SchedulerShell]
"""(partition, the member's group metadata, whether the partition is still assigned here) -> its shell."""
LogEvent = Callable[[str, str, str, dict[str, Any]], None]
"""(message, event, level, fields): one log line of the group runner (as ``SchedulerShell._log`` takes them)."""


class GroupFailed(BernsteinError):
    """A partition's scheduler failed in a way a restart on this process will not mend (its error is named)."""

    code = "E_SCHEDULER_FAILED"


@dataclass
class _Owned:
    """A partition this process runs: its shell, the thread running it, and how it ended."""

    partition: int
    shell: SchedulerShell
    restarts: int = 0
    error: BaseException | None = None
    restart_at: float = 0.0
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._serve, name=f"scheduler-p{self.partition}", daemon=True)

    def _serve(self) -> None:
        try:
            self.shell.run()
        except BaseException as exc:  # noqa: BLE001 - judged by GroupScheduler._tend on the polling thread
            self.error = exc


class GroupScheduler:
    """Joins the scheduler group and runs a shell for each partition the group assigns to this process."""

    def __init__(
        self,
        *,
        bootstrap: str,
        group_id: str,
        input_topic: str,
        make_shell: ShellFactory,
        log: LogEvent,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    ) -> None:
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.input_topic = input_topic
        self.make_shell = make_shell
        self.log = log
        self.session_timeout_ms = session_timeout_ms
        self._owned: dict[int, _Owned] = {}
        self._assigned: set[int] = set()
        self._lock = threading.Lock()
        self._stop = False
        self._consumer: Any = None
        self._metadata: Any = None
        """The member's group metadata (member id, generation) as last read on the polling thread: the shells'
        transactions take it from here. The binding's ``consumer_group_metadata()`` called from a shell's thread
        while this thread polls was seen to block for good (its answer is served with the GIL held)."""
        self.failure: BaseException | None = None
        """The error that ended the process (a shell's failure); None after a clean stop."""
        self.heartbeat = time.monotonic()
        """When the polling loop last moved (``/healthz``)."""
        self.joined = False
        """The group has given this member its first assignment (possibly none): ``/readyz``."""
        self.fenced = False
        """A partition's shell kept being fenced while the group assigned it here (another instance owns it)."""

    # -- lifecycle ----------------------------------------------------------------

    def stop(self) -> None:
        """Leave the group after every partition's transaction settled (SIGTERM handler)."""
        self._stop = True

    def partitions(self) -> list[int]:
        """The partitions the group assigns to this process now."""
        with self._lock:
            return sorted(self._assigned)

    def shells(self) -> list[SchedulerShell]:
        """The shells running now (metrics read their counters)."""
        with self._lock:
            return [owned.shell for owned in self._owned.values()]

    def run(self) -> None:
        """Serve the group until stopped or until a partition's scheduler failed (``self.failure``)."""
        session = self.session_timeout_ms
        self._consumer = Consumer(
            client_config(
                self.bootstrap,
                **{
                    "group.id": self.group_id,
                    "partition.assignment.strategy": "cooperative-sticky",
                    "session.timeout.ms": session,
                    "heartbeat.interval.ms": max(session // 4, 100),
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    # the member fetches nothing (its partitions are paused): keep what it may prefetch small
                    "queued.max.messages.kbytes": 1024,
                    "fetch.max.bytes": 1048576,
                },
            )
        )
        consumer = self._consumer
        try:
            consumer.subscribe([self.input_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
            self.log(
                f"joined consumer group {self.group_id} on {self.input_topic} (cooperative rebalancing, session {session} ms)",
                "group_joined",
                "info",
                {"group": self.group_id, "topic": self.input_topic},
            )
            while not self._stop and self.failure is None:
                message = consumer.poll(0.05)  # serves the rebalance callbacks; its partitions are paused
                self.heartbeat = time.monotonic()
                self._metadata = consumer.consumer_group_metadata()
                if message is not None and message.error() is not None:
                    error = message.error()
                    if error.fatal():
                        raise KafkaException(error)
                    self.log(f"group consumer: {error}", "consumer_error", "warning", {"error": str(error)})
                self._tend()
        finally:
            self._stop = True
            try:
                consumer.close()  # revokes what is left (stopping those shells) and leaves the group
            except KafkaException as exc:
                self.log(f"leaving the group: {exc}", "group_leave_failed", "warning", {"error": str(exc)})
            self._stop_shells(list(self._owned))
        if self.failure is not None:
            raise GroupFailed(str(self.failure)) from self.failure

    # -- rebalance callbacks (on the polling thread) -------------------------------

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._metadata = consumer.consumer_group_metadata()  # the generation this rebalance made
        self.joined = True
        if not partitions:
            return
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)  # fetched by each partition's own shell, never by the member
        numbers = sorted(tp.partition for tp in partitions)
        with self._lock:
            self._assigned.update(numbers)
        self.log(
            f"assigned partition(s) {numbers}; now running {sorted(self._assigned)}",
            "partitions_assigned",
            "info",
            {"partitions": numbers, "running": sorted(self._assigned)},
        )
        for partition in numbers:
            if not self._stop:
                self._start_shell(partition)

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._give_up(partitions, "revoked", "partitions_revoked")

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._give_up(partitions, "lost", "partitions_lost")

    def _give_up(self, partitions: list[TopicPartition], how: str, event: str) -> None:
        if not partitions:
            return
        numbers = sorted(tp.partition for tp in partitions)
        with self._lock:
            self._assigned.difference_update(numbers)
        self.log(
            f"partition(s) {numbers} {how}: stopping their schedulers after the open transaction settles; now running "
            f"{sorted(self._assigned)}",
            event,
            "info" if how == "revoked" else "warning",
            {"partitions": numbers, "running": sorted(self._assigned)},
        )
        self._stop_shells(numbers)

    # -- shells -------------------------------------------------------------------------

    def _group_metadata(self) -> Any:
        """What a shell's transaction sends its offsets with (read on the polling thread; see ``_metadata``)."""
        return self._metadata

    def _still_owned(self, partition: int) -> Callable[[], bool]:
        def owned() -> bool:
            with self._lock:
                return partition in self._assigned and not self._stop

        return owned

    def _start_shell(self, partition: int, restarts: int = 0) -> None:
        shell = self.make_shell(partition, self._group_metadata, self._still_owned(partition))
        owned = _Owned(partition, shell, restarts=restarts)
        with self._lock:
            self._owned[partition] = owned
        owned.thread.start()

    def _stop_shells(self, partitions: list[int]) -> None:
        with self._lock:
            stopping = [self._owned.pop(p) for p in partitions if p in self._owned]
        for owned in stopping:
            owned.shell.stop()
        for owned in stopping:
            owned.thread.join(_STOP_WAIT_S)
            if owned.error is not None:
                message = getattr(owned.error, "message", str(owned.error))
                self.log(
                    f"partition {owned.partition}: its scheduler stopped: {message}",
                    "shell_stopped",
                    "warning",
                    {"partition": owned.partition, "error": getattr(owned.error, "error", type(owned.error).__name__)},
                )
            if owned.thread.is_alive():
                self.log(
                    f"partition {owned.partition}: its scheduler did not stop within {_STOP_WAIT_S:.0f}s; the next "
                    "owner's init_transactions fences it",
                    "shell_stuck",
                    "warning",
                    {"partition": owned.partition},
                )

    def _tend(self) -> None:
        """Judge the shells that ended on their own: restart a fenced one the group still assigns here, fail on others."""
        with self._lock:
            ended = [o for o in self._owned.values() if not o.thread.is_alive()]
        now = time.monotonic()
        for owned in ended:
            partition, error = owned.partition, owned.error
            if error is None or self._stop:
                continue  # a shell stops by itself only when asked to
            if not isinstance(error, SchedulerFenced):
                self.log(
                    f"partition {partition}: the scheduler failed ({error}); leaving the group so that another "
                    "process takes its partitions",
                    "shell_failed",
                    "error",
                    {"partition": partition, "error": str(error)},
                )
                self.failure = error
                return
            if not self._still_owned(partition)():
                with self._lock:
                    self._owned.pop(partition, None)
                continue
            if owned.restarts >= _FENCED_RESTARTS:
                self.log(
                    f"partition {partition}: fenced {owned.restarts + 1} times while the group assigns it here: another "
                    "scheduler instance (a static --partition one?) owns it; this process stops",
                    "fenced",
                    "error",
                    {"partition": partition},
                )
                self.fenced = True
                self.failure = error
                return
            if owned.restart_at == 0.0:
                owned.restart_at = now + _RESTART_DELAY_S * (owned.restarts + 1)
                self.log(
                    f"partition {partition}: {error.message}; the group still assigns it here: starting it again",
                    "shell_restarting",
                    "warning",
                    {"partition": partition, "error": error.error},
                )
            elif now >= owned.restart_at:
                self._start_shell(partition, owned.restarts + 1)
