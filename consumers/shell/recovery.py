"""Getting the state back after a failure, and keeping the next start short.

The state lives only in the journal, audit and checkpoints topics: ``_rebuild`` folds them, from the newest snapshot
that verifies, else from the beginning. After an aborted transaction this instance saw through, ``_rewind`` puts the
state of the last commit back in memory from the core's undo log instead, without reading Kafka. ``_recover``
chooses between the two, replaces the producer when Kafka itself failed, and rewinds the input to the committed
offset (``_seek_to_committed``). Snapshots of the state are taken on a cadence and written with a later batch's
outputs (docs/scheduler.md, "Snapshots and restart").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from bernstein.consumers.core.model import SchedulerState
from bernstein.consumers.core.native import NativeState
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
from bernstein.consumers.shell.clock import _TXN_TIMEOUT_S
from bernstein.consumers.shell.errors import SchedulerFailed
from bernstein.consumers.shell.preflight import Preflight
from bernstein.consumers.shell.stepping import Stepping

_COORDINATOR_MOVED: Final = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
)
"""Answers of a group coordinator that is restarting or moving; librdkafka does not flag them retriable."""


class Recovery(Preflight, Stepping):
    """Rebuilds, rewinds and snapshots the state, and recovers from a transaction that failed."""

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
