"""``SchedulerShell`` and its loop, in the order of confluent-kafka's exactly-once example.

``run`` starts (the start-up checks, the producer, the state rebuilt, the consumer placed at the committed offset),
then repeats ``_one_batch``: consume a batch, step it through the core, begin a transaction, produce the outputs,
send the input offsets to the transaction, commit. The commit runs on the watchdog thread while the next batch is
stepped (the core is pure: that work is dropped if the commit fails), and a failed transaction sends the loop
through ``recovery``. The rest of the class comes from its parts, one concern a module of this package.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bernstein.consumers.core.model import InputRecord, OutputRecord
from bernstein.consumers.shell.clock import _TXN_GRACE_S, _TXN_TIMEOUT_S
from bernstein.consumers.shell.errors import _Abort, _NativeFailed
from bernstein.consumers.shell.fencing import Fencing
from bernstein.consumers.shell.intake import Intake
from bernstein.consumers.shell.options import Counters
from bernstein.consumers.shell.preflight import Preflight
from bernstein.consumers.shell.produce import _NO_CODES, Producing, _codes_of, _Inflight
from bernstein.consumers.shell.recovery import Recovery
from bernstein.consumers.shell.stepping import Stepping
from bernstein.schemas.records import DeadLetterCode
from bernstein.substrate.kafka import client_config

_FETCH_MIN_BYTES: Final = 65536
"""What the loop's consumer asks the broker to gather before it answers (bounded by ``fetch.wait.max.ms``)."""


class SchedulerShell(Recovery, Preflight, Producing, Fencing, Intake, Stepping):
    """Runs ``SchedulerCore`` over one partition with Kafka transactions.

    Its state and constructor are ``ShellBase``'s (``base``); each concern's methods are in the class of its module.
    """

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
        # 1. Consume: a batch, less the inputs to set aside (intake).
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
        # 2. Step: the native plan or the Python reference (stepping), after an undo mark for a rewind (recovery).
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
        # 3. Produce, in a new transaction once the previous one committed (produce).
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
            # 4. Send the offsets.
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

        # 5. Commit, on the watchdog thread; the next batch is stepped meanwhile and settles this one (produce).
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
