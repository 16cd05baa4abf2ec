"""The Kafka edge of ``audit follow``: a read_committed consumer of ``<prefix>.audit``.

Two modes:

* following (default): the partitions of the audit topic are shared by the members of a
  consumer group (``--group``); each member checks the partitions it is assigned, saves
  their checkpoints when they are revoked, and runs until stopped;
* ``once``: every partition is assigned to this process (no group membership) and read
  up to the last stable offset it had when the run started; then the process stops.

Each partition starts from its checkpoint (``bernstein.verifier.follow.checkpoint``): the
record the checkpoint names is read again and compared before anything after it is
checked; without a checkpoint the partition is checked from its first record. The
group's committed offsets are written (for lag tooling) but never read: they are not
trusted. Checkpoints are saved every ``checkpoint_every`` seconds, at revocation and
at the end; a ``progress`` line is given for every saved range of records, after the
save, so the saved ranges of successive runs follow each other without overlap.
Alerts are emitted as soon as a record is checked, before its checkpoint is saved:
after a crash the records checked since the last save are checked again (an alert
may repeat; none is lost).

A tamper-class alert also latches (``bernstein.verifier.follow.latch``): the partition's latch
file in the state directory is written before the next batch is read, the latch
stays across restarts, and it is cleared only by an ack in the state directory's ack
log (``bernstein audit ack``), read at start and at every tick.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from bernstein.schemas import notes
from bernstein.schemas.canonical import sha256_digest
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import (
    KafkaError,
    KafkaNotAuthorized,
    KafkaUnavailable,
    client_config,
    connect_timeout,
    is_authorization_error,
    unreachable,
)
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier import facts
from bernstein.verifier.follow.alerts import Alert, AlertKind
from bernstein.verifier.follow.checker import PartitionChecker, Policy
from bernstein.verifier.follow.checkpoint import Checkpoint, CheckpointStore, CheckpointWriter, resume_mismatch, value_digest
from bernstein.verifier.follow.journal import Expected, JournalJoin
from bernstein.verifier.follow.latch import TAMPER
from bernstein.verifier.follow.latching import LatchKeeping
from bernstein.verifier.follow.logwatch import LogWatch
from bernstein.verifier.follow.witnessing import LogWitness

_TIMEOUT: Final = 30.0
_BATCH: Final = 5000
_METADATA_TIMEOUT: Final = 10.0


@dataclass
class FollowOptions:
    bootstrap: str
    topics: Topics
    store: CheckpointStore
    group: str
    once: bool = False
    policy: Policy = field(default_factory=Policy)
    checkpoint_every: float = 1.0
    """Seconds between checkpoint saves (also at revocation and at the end)."""
    tick_every: float = 1.0
    """Seconds between the time-based checks (unsealed runs, a silent scheduler)."""
    check_journal: bool = False
    """Also read the journal partitions and check that every record the audit chain mirrors is there."""
    instance_id: str | None = None
    """Static group membership (``group.instance.id``): a restarted follower takes its partitions back at once."""
    witness: notes.NoteSigner | None = None
    """``--witness``: fold each journal partition's Merkle log, hold the signed heads to it and cosign them with this
    key (``follow.witnessing``; its state in ``<state>/witness``)."""


@dataclass
class _Partition:
    checker: PartitionChecker
    resume: Checkpoint | None
    """The checkpoint whose record must be read again first (None: nothing to compare)."""
    checked: int = 0
    """Records checked over every run (from the checkpoint)."""
    last_offset: int | None = None
    last_value_sha256: str | None = None
    """``value_digest`` of the record at ``last_offset``: from the checkpoint on resume, from the record once read.
    (Not the bytes: a time-based alert raised before any new record is read saves this checkpoint again, and it
    must pin the record it names, never the digest of nothing, which the next start would call a rewrite.)"""
    saved_offset: int | None = None
    """Offset of the last record covered by a saved checkpoint."""
    unsaved: int = 0
    first_unsaved: int | None = None
    dirty: bool = False
    """The chain state changed without a new record (a time-based alert was raised): save it."""
    end: int | None = None
    """``once``: the last stable offset pinned at the start (records at or after it are left for the next run)."""
    done: bool = False
    restarted: bool = False
    """Checked again from its first record after a rewritten history (``_restart``)."""
    join: JournalJoin | None = None
    """``check_journal``: the mirrors expected and the journal hashes seen."""
    journal_end: int | None = None
    """``check_journal``: the journal end each expectation of the current audit batch gets (``once``: pinned)."""
    log: LogWatch | None = None
    """``witness``: the partition's Merkle log as folded from its journal, and the heads waiting for it."""


Emit = Callable[[Alert], None]
OnRecord = Callable[[int, int, tuple[Any, ...], list[Alert]], None]
Progress = Callable[[dict[str, Any]], None]


class Follower(LatchKeeping):
    """Checks the audit topic as it grows (see the module doc)."""

    def __init__(
        self,
        options: FollowOptions,
        trusted: Callable[[], TrustedKeys],
        emit: Emit,
        *,
        on_record: OnRecord | None = None,
        progress: Progress | None = None,
        notice: Progress | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = options
        self.topic = options.topics.audit
        self._trusted = trusted
        self._emit_alert = emit
        self._on_record = on_record
        self._progress = progress
        self._notice = notice
        """Called with one event per latch held at start, latched, or cleared by an ack (``_latch_event``)."""
        self._clock = clock
        self.partitions: dict[int, _Partition] = {}
        self.alerts = 0
        self.alert_kinds: dict[str, int] = {}
        self.checked = 0
        """Records checked by this run."""
        self._errors: list[Any] = []
        self._consumer: Any = None
        self._writer = CheckpointWriter(options.store)
        self._journal: Any = None
        """``check_journal``: the journal's consumer (assigned the audit partitions' numbers, never in the group)."""
        self._failure: BernsteinError | None = None
        self._witness = (
            None
            if options.witness is None
            else LogWitness(
                options.witness,
                options.store.directory / "witness",
                options.topics.journal,
                options.topics.checkpoints,
                trusted=trusted,
                emit=self._emit,
                progress=progress,
            )
        )
        self.prefix = options.topics.prefix
        self._init_latches(options.store.directory)
        # what the metrics endpoint reads (verifier.follow.metrics), kept by the loop at no cost per record
        self.verified_by_partition: dict[int, int] = {}
        self.last_timestamp_ms: dict[int, int] = {}
        self._high: dict[int, int] = {}
        self._position: dict[int, int] = {}
        self._beat = time.monotonic()
        self._state = (False, "starting")

    # -- alerts -------------------------------------------------------------------

    def _emit(self, alerts: list[Alert]) -> None:
        for alert in alerts:
            self.alerts += 1
            self.alert_kinds[alert.kind.value] = self.alert_kinds.get(alert.kind.value, 0) + 1
            self._emit_alert(alert)
            if alert.kind in TAMPER:
                self._latch(alert)

    # -- the consumer ---------------------------------------------------------------

    def _make_consumer(self, *, group: bool = True) -> Any:
        """The audit topic's consumer (in the group, unless ``once``); ``group`` False: the journal's, assigned only."""
        from confluent_kafka import Consumer

        extra: dict[str, Any] = {
            "group.id": self.options.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "error_cb": self._errors.append,
        }
        if self.options.instance_id and group:
            extra["group.instance.id"] = self.options.instance_id
        return Consumer(client_config(self.options.bootstrap, **extra))

    def _audit_partitions(self, consumer: Any) -> list[int]:
        from confluent_kafka import KafkaException

        try:
            metadata = consumer.list_topics(topic=self.topic, timeout=min(_METADATA_TIMEOUT, connect_timeout()))
        except KafkaException as exc:
            self._raise_errors()
            if is_authorization_error(exc):
                raise self._refused() from None
            raise unreachable(exc, self.options.bootstrap) from None
        self._raise_errors()
        info = metadata.topics.get(self.topic)
        if info is not None and info.error is not None and is_authorization_error(info.error):
            raise self._refused()
        if info is None or info.error is not None or not info.partitions:
            raise KafkaError(
                f"topic {self.topic} does not exist (create the deployment's topics: `bernstein topic create --prefix "
                f"{self.options.topics.prefix}`)"
            )
        return sorted(info.partitions)

    def _refused(self) -> KafkaNotAuthorized:
        return KafkaNotAuthorized(
            f"Kafka refused this client's principal to follow {self.topic}: an auditor needs Read and Describe on the "
            f"topics of prefix {self.options.topics.prefix!r} and Read on consumer group {self.options.group!r} "
            f"(`bernstein kafka acls --prefix {self.options.topics.prefix} --apply`)"
        )

    def _raise_errors(self) -> None:
        errors, self._errors[:] = list(self._errors), []
        for error in errors:
            if is_authorization_error(error):
                raise KafkaNotAuthorized(
                    f"Kafka at {self.options.bootstrap} refused this client's login or an operation ({error}): check "
                    "BERNSTEIN_KAFKA_CONFIG_FILE and the auditor's ACLs (`bernstein kafka acls`)"
                )
            fatal = getattr(error, "fatal", lambda: False)()
            if fatal or (self.options.once and getattr(error, "code", lambda: None)() == _all_brokers_down()):
                raise KafkaUnavailable(f"Kafka at {self.options.bootstrap}: {error}")

    # -- partitions -------------------------------------------------------------------

    def _watermarks(self, partition: int, topic: str | None = None) -> tuple[int, int]:
        """(log start, last stable offset) of a partition of the audit topic (or ``topic``)."""
        from confluent_kafka import KafkaException, TopicPartition

        topic = topic or self.topic
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=_TIMEOUT, cached=False)
        except KafkaException as exc:
            if is_authorization_error(exc):
                raise self._refused() from None
            raise KafkaUnavailable(f"cannot read the offsets of {topic}[{partition}]: {exc}") from None
        return int(low), int(high)

    def _open(self, partition: int) -> int:
        """Set the partition up from its checkpoint; return the offset to read from (-2: the beginning)."""
        from confluent_kafka import OFFSET_BEGINNING

        checkpoint = self.options.store.load(self.topic, partition)
        fold = checkpoint.log if checkpoint is not None else None  # the journal's: kept if the audit topic was rewritten
        self._load_latches(partition)
        low, high = self._watermarks(partition)
        state = None
        if checkpoint is not None:
            if not low <= checkpoint.offset < high:
                self._rewritten(checkpoint, f"has vanished (the partition now holds offsets {low}..{high - 1})")
                checkpoint = None
            else:
                state = checkpoint.state
        checker = PartitionChecker(self.topic, partition, self._trusted(), self.options.policy, state)
        entry = _Partition(checker, checkpoint, checked=checkpoint.checked if checkpoint else 0)
        if checkpoint is not None:
            entry.saved_offset = entry.last_offset = checkpoint.offset
            entry.last_value_sha256 = checkpoint.value_sha256
        if self.options.once:
            entry.end = high
            entry.done = checkpoint is None and high <= low
        if self.options.check_journal:
            join = checkpoint.journal if checkpoint is not None else None
            self._join(entry, partition, join or JournalJoin(self.topic, partition))
        if self._witness is not None:
            entry.log = fold or self._witness.new_watch(partition)
            if self.options.once:  # the checkpoints' end first: the journal's, read later, holds their leaves
                ends = self._watermarks(partition, self.options.topics.checkpoints)[1]
                self._witness.ends[partition] = (ends, self._watermarks(partition, self.options.topics.journal)[1])
        self.partitions[partition] = entry
        return checkpoint.offset if checkpoint is not None else OFFSET_BEGINNING

    def _join(self, entry: _Partition, partition: int, join: JournalJoin) -> None:
        """Set up ``--check-journal`` for the partition (after its audit end was pinned: the journal's is pinned later)."""
        entry.join = join
        if self.options.once:
            entry.journal_end = self._watermarks(partition, self.options.topics.journal)[1]

        def mirror(offset: int, seq: int, run_id: str, record_hash: str, journal_seq: int) -> None:
            assert entry.journal_end is not None
            join.expect(record_hash, Expected(offset, seq, run_id, journal_seq, entry.journal_end))

        entry.checker.mirror = mirror

    def _rewritten(self, checkpoint: Checkpoint, what: str) -> None:
        self._emit(
            [
                Alert(
                    AlertKind.HISTORY_REWRITTEN,
                    self.topic,
                    checkpoint.partition,
                    checkpoint.offset,
                    f"the record this follower checked last (offset {checkpoint.offset}, {checkpoint.value_sha256}) "
                    f"{what}: the topic was rewritten; checking the partition again from its start",
                    {"expected": checkpoint.value_sha256, "seq": checkpoint.state.next_seq - 1},
                )
            ]
        )
        self._writer.flush()
        self._flush_latches([checkpoint.partition])  # on disk before the checkpoint that led to it is gone
        self.options.store.discard(self.topic, checkpoint.partition)

    def _restart(self, partition: int) -> None:
        """After a rewritten history: check the partition again from its first record."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        old = self.partitions[partition]
        entry = _Partition(PartitionChecker(self.topic, partition, self._trusted(), self.options.policy), None, restarted=True)
        entry.end = old.end
        entry.log = old.log  # the journal's fold stands: it is held to the signed heads, not to the audit chain
        self.partitions[partition] = entry
        self._consumer.seek(TopicPartition(self.topic, partition, OFFSET_BEGINNING))
        if old.join is not None:  # the journal is read again from its start too
            self._join(entry, partition, JournalJoin(self.topic, partition))
            self._journal.seek(TopicPartition(self.options.topics.journal, partition, OFFSET_BEGINNING))

    def _on_assign(self, consumer: Any, assigned: list[Any]) -> None:
        from confluent_kafka import TopicPartition

        try:
            consumer.assign([TopicPartition(self.topic, tp.partition, self._open(tp.partition)) for tp in assigned])
            self._assign_journal([tp.partition for tp in assigned])
            self._assign_logs()
        except BernsteinError as exc:
            self._failure = exc
            consumer.assign([])
            return
        if self._progress is not None:
            self._progress({"event": "assigned", "topic": self.topic, "partitions": sorted(tp.partition for tp in assigned)})

    def _on_revoke(self, consumer: Any, revoked: list[Any]) -> None:
        try:
            self._save([tp.partition for tp in revoked if tp.partition in self.partitions])
            self._writer.flush()  # on disk before another member may load it
            self._flush_latches([tp.partition for tp in revoked])
        except BernsteinError as exc:
            self._failure = exc
        for tp in revoked:
            self.partitions.pop(tp.partition, None)
            self.latches.pop(tp.partition, None)
        if self._journal is not None:
            self._journal.assign([])
        if self._witness is not None:
            self._assign_logs()
        if self._progress is not None and revoked:
            self._progress({"event": "revoked", "topic": self.topic, "partitions": sorted(tp.partition for tp in revoked)})

    def _on_lost(self, consumer: Any, lost: list[Any]) -> None:
        self._on_revoke(consumer, lost)

    # -- checking -------------------------------------------------------------------------

    def _check_batch(self, messages: list[Any]) -> None:
        from confluent_kafka import KafkaError as RdKafkaError

        by_partition: dict[int, list[Any]] = {}
        at_end: list[int] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == RdKafkaError._PARTITION_EOF:
                    at_end.append(message.partition())
                    continue
                self._message_error(error, self.topic)
                continue
            by_partition.setdefault(message.partition(), []).append(message)
        trusted = self._trusted()
        now = self._now_ms()
        for partition, batch in by_partition.items():
            entry = self.partitions.get(partition)
            if entry is None or entry.done:
                continue
            entry.checker.trusted = trusted
            if entry.end is not None and batch[-1].offset() >= entry.end - 1:
                entry.done = True  # (records at or after the pinned end are dropped below)
            if entry.resume is not None:
                first = batch[0]
                what = resume_mismatch(entry.resume, first.offset(), first.value())
                if what is None:
                    entry.resume = None
                    batch = batch[1:]
                else:
                    self._rewritten(entry.resume, what)
                    self._restart(partition)
                    continue
            if entry.end is not None and batch and batch[-1].offset() >= entry.end:
                batch = [m for m in batch if m.offset() < entry.end]
            if batch:
                self._check_records(entry, partition, batch, trusted, now)
        if self.options.once:
            for partition in at_end:  # after the records of this batch: the end event follows them
                entry = self.partitions.get(partition)
                # a partition restarted from its start reads again: an end event from before the seek (this
                # batch or a later one) is not its end; it would stop the re-check before its first record
                if entry is not None and entry.resume is None and not (entry.restarted and entry.last_offset is None):
                    entry.done = True

    def _count_checked(self, partition: int, records: int) -> None:
        """The process-wide counters the metrics endpoint reads from its own thread."""
        self.checked += records
        self.verified_by_partition[partition] = self.verified_by_partition.get(partition, 0) + records

    def _check_records(self, entry: _Partition, partition: int, batch: list[Any], trusted: TrustedKeys, now: int) -> None:
        values = [m.value() for m in batch]
        found = facts.current().audit_facts(values, trusted.hmac.get)
        check = entry.checker.check
        on_record = self._on_record
        counted = 0  # records of this batch already in the counters
        for index, (message, fact) in enumerate(zip(batch, found, strict=True)):
            offset = message.offset()
            ts_type, ts = message.timestamp()
            alerts = check(offset, fact, ts if ts_type != 0 else 0, now)
            if alerts:
                # count the records checked so far first: a scrape that sees the alert sees its record checked
                self._count_checked(partition, index + 1 - counted)
                counted = index + 1
                self._emit(alerts)
            if on_record is not None:
                on_record(partition, offset, fact, alerts)
        self._count_checked(partition, len(batch) - counted)
        entry.unsaved += len(batch)
        entry.checked += len(batch)
        ts_type, ts = batch[-1].timestamp()
        if ts_type != 0:
            self.last_timestamp_ms[partition] = ts
        self._note_end(partition)
        if entry.first_unsaved is None:
            entry.first_unsaved = batch[0].offset()
        entry.last_offset = batch[-1].offset()
        entry.last_value_sha256 = value_digest(values[-1])

    def _assign_journal(self, partitions: list[int]) -> None:
        """``check_journal``: the journal partitions of the audit partitions assigned, each from its saved position."""
        from confluent_kafka import TopicPartition

        if self._journal is None:
            return
        self._journal.assign(
            [
                TopicPartition(self.options.topics.journal, p, join.next_offset)
                for p in partitions
                if (join := self.partitions[p].join) is not None
            ]
        )

    def _read_journal(self) -> None:
        """``check_journal``: what the journal consumer has now; the mirrors its position passed and were not seen."""
        from confluent_kafka import KafkaError as RdKafkaError
        from confluent_kafka import KafkaException, TopicPartition

        journal = self._journal
        if journal is None:
            return
        try:
            messages = journal.consume(_BATCH, 0)
        except KafkaException as exc:
            raise KafkaUnavailable(f"error reading {self.options.topics.journal}: {exc}") from None
        touched: set[int] = set()
        by_partition: dict[int, list[Any]] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == RdKafkaError._PARTITION_EOF:
                    touched.add(message.partition())
                    continue
                self._message_error(error, self.options.topics.journal)
                continue
            by_partition.setdefault(message.partition(), []).append(message)
        for partition, batch in by_partition.items():
            entry = self.partitions.get(partition)
            if entry is None or entry.join is None:
                continue
            touched.add(partition)
            values = [m.value() for m in batch]
            for value, fact in zip(values, facts.current().journal_facts(values), strict=True):
                if fact[0] == facts.J_ENTRY:
                    entry.join.journal(fact[2])
                elif fact[0] == facts.J_SEAL:
                    entry.join.journal(sha256_digest(value or b""))
        # every partition with mirrors pending: an expectation may be due without a new journal record
        touched |= {p for p, e in self.partitions.items() if e.join is not None and (e.join.expected or self.options.once)}
        for partition in sorted(touched):
            entry = self.partitions.get(partition)
            if entry is None or entry.join is None:
                continue
            (position,) = journal.position([TopicPartition(self.options.topics.journal, partition)])
            if position.offset < 0:
                continue
            moved = position.offset != entry.join.next_offset
            alerts = entry.join.reached(position.offset)
            if moved or alerts:
                entry.dirty = True
                self._emit(alerts)

    def _assign_logs(self) -> None:
        """``witness``: the journal and checkpoints partitions of the audit partitions held, each from its fold."""
        if self._witness is not None:
            self._witness.assign({p: e.log for p, e in self.partitions.items() if e.log is not None})

    def _read_logs(self) -> None:
        """``witness``: fold what was read, hold the signed heads to it, cosign; a moved fold is saved."""
        from confluent_kafka import KafkaException

        if self._witness is None:
            return
        watches = {p: e.log for p, e in self.partitions.items() if e.log is not None}
        try:
            moved = self._witness.read(
                watches,
                lambda p: self._watermarks(p, self.options.topics.journal)[1],
                lambda error: self._message_error(error, f"{self.options.topics.journal} or {self.options.topics.checkpoints}"),
            )
        except KafkaException as exc:
            raise KafkaUnavailable(
                f"error reading {self.options.topics.journal} or {self.options.topics.checkpoints}: {exc}"
            ) from None
        for partition in moved:
            self.partitions[partition].dirty = True

    def _message_error(self, error: Any, topic: str) -> None:
        """A consumed message's error (not a partition's end): refused or fatal (any error with ``once``) raises; a
        transient one is left to librdkafka's retries."""
        if is_authorization_error(error):
            raise self._refused()
        if error.fatal() or self.options.once:
            raise KafkaUnavailable(f"error reading {topic}: {error}")

    def _journal_ends(self, partitions: list[int]) -> None:
        """``check_journal`` (following): the journal end the expectations of the next audit batch get."""
        for partition in partitions:
            entry = self.partitions.get(partition)
            if entry is not None and entry.join is not None:
                entry.journal_end = self._watermarks(partition, self.options.topics.journal)[1]

    def _save(self, partitions: list[int] | None = None) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        commits = []
        for partition in sorted(self.partitions if partitions is None else partitions):
            entry = self.partitions[partition]
            if not (entry.unsaved or entry.dirty) or entry.last_offset is None or entry.last_value_sha256 is None:
                continue
            entry.dirty = False
            then = None
            if self._progress is not None and entry.unsaved:
                line = {
                    "event": "checked",
                    "topic": self.topic,
                    "partition": partition,
                    "first_offset": entry.first_unsaved,
                    "last_offset": entry.last_offset,
                    "records": entry.unsaved,
                    "next_seq": entry.checker.state.next_seq,
                }
                then = functools.partial(self._progress, line)  # once the checkpoint is on disk
            self._writer.save(
                Checkpoint(
                    self.topic,
                    partition,
                    entry.last_offset,
                    entry.last_value_sha256,
                    entry.checked,
                    entry.checker.state,
                    entry.join,
                    entry.log,
                ),
                then,
            )
            entry.saved_offset, entry.unsaved, entry.first_unsaved = entry.last_offset, 0, None
            commits.append(TopicPartition(self.topic, partition, entry.last_offset + 1))
        if commits and not self.options.once:
            try:  # for lag tooling only: never read back
                self._consumer.commit(offsets=commits, asynchronous=True)
            except KafkaException:
                pass

    def _submission_ends(self) -> dict[int, int]:
        """The submissions partitions' end offsets (for ``scheduler_silent``); a partition that cannot be read is left out."""
        from confluent_kafka import KafkaException, TopicPartition

        ends: dict[int, int] = {}
        for partition in self.partitions:
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.options.topics.submissions, partition), timeout=5.0, cached=False
                )
            except KafkaException:
                continue
            ends[partition] = int(high)
        return ends

    def _waited_since(self, partition: int, end: int, now_ms: int, silent_ms: int) -> int | None:
        """For a partition whose checker never saw an audit record: ``now_ms - silent_ms`` when a submission older
        than that waits (the broker's offset for that time is past the last input accounted for), else None.

        So a scheduler that never started (or a fresh ``--state``) is caught by the first ``--once``, from the
        submissions' own timestamps (LogAppendTime: the broker's clock), instead of starting the silence clock now."""
        from confluent_kafka import KafkaException, TopicPartition

        since = now_ms - silent_ms
        try:
            found = self._consumer.offsets_for_times(
                [TopicPartition(self.options.topics.submissions, partition, since)], timeout=5.0
            )
        except KafkaException:
            return None
        offset = int(found[0].offset) if found else -1
        # offset: the first submission stamped at or after ``since`` (-1: none is); older ones lie before it
        first_waiting = self.partitions[partition].checker.state.last_input + 1
        older_end = offset if offset >= 0 else end  # none stamped since: every submission is older
        return since if older_end > first_waiting else None

    def _tick(self) -> None:
        self._refresh_acks()
        now = self._now_ms()
        silent = self.options.policy.silent_after_ms
        ends = self._submission_ends() if silent is not None else {}
        for partition in sorted(self.partitions):
            entry = self.partitions[partition]
            waited = None
            if silent is not None and entry.checker.state.progress_ms is None and partition in ends:
                waited = self._waited_since(partition, ends[partition], now, silent)
            alerts = entry.checker.tick(now, ends.get(partition), waited_since_ms=waited)
            if alerts:
                entry.dirty = True
                self._emit(alerts)

    # -- running ----------------------------------------------------------------------------

    def run(self, stop: Callable[[], bool] = lambda: False) -> int:
        """Check until ``stop()`` (following) or until every partition's pinned end (``once``); return the alert count."""
        from confluent_kafka import KafkaException, TopicPartition

        self._consumer = consumer = self._make_consumer()
        if self.options.check_journal:
            self._journal = self._make_consumer(group=False)
        if self._witness is not None:
            self._witness.consumer = self._make_consumer(group=False)
        try:
            partitions = self._audit_partitions(consumer)
            if self.options.once:
                consumer.assign([TopicPartition(self.topic, p, self._open(p)) for p in partitions])
                self._assign_journal(partitions)
                self._assign_logs()
            else:
                consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
            last_save = last_tick = time.monotonic()
            while not stop():
                self._beat = time.monotonic()
                self._state = (
                    (True, f"following {len(self.partitions)} partition(s)")
                    if self.partitions
                    else (False, "no partition assigned")
                )
                try:
                    messages = consumer.consume(_BATCH, 0.1)
                except KafkaException as exc:
                    if is_authorization_error(exc):
                        raise self._refused() from None
                    raise KafkaUnavailable(f"error reading {self.topic}: {exc}") from None
                if self._failure is not None:
                    raise self._failure
                self._raise_errors()
                if self._journal is not None and not self.options.once:
                    self._journal_ends(sorted({m.partition() for m in messages if m.error() is None}))
                self._check_batch(messages)
                self._read_journal()
                self._read_logs()
                if self._latches_dirty:
                    self._flush_latches()
                moment = time.monotonic()
                if moment - last_save >= self.options.checkpoint_every:
                    self._save()
                    for partition in list(self.partitions):  # the lag metric, also while nothing arrives
                        self._note_end(partition)
                    last_save = moment
                if self.options.once:
                    if all(
                        entry.done and self._journal_done(entry) and self._log_done(p) for p, entry in self.partitions.items()
                    ):
                        break
                elif moment - last_tick >= self.options.tick_every:
                    self._tick()
                    last_tick = moment
            self._save()
            self._tick()
            self._save()  # what the last tick alerted on (runs, silence) is not alerted again by the next run
            self._writer.flush()
            self._flush_latches()
            self.held_at_end = sum(len(latches.held) for latches in self.latches.values())
        except BaseException as exc:
            self._state = (False, f"failed: {exc}")
            raise
        finally:
            if self._state[0]:
                self._state = (False, "stopped")
            for client in (consumer, self._journal, self._witness.consumer if self._witness is not None else None):
                try:
                    if client is not None:
                        client.close()  # (the group's revocation saves the checkpoints first)
                except (KafkaException, RuntimeError):
                    pass
            self._writer.close()
        return self.alerts

    # -- what the metrics endpoint reads ---------------------------------------------

    def _note_end(self, partition: int) -> None:
        """The partition's end offset as the consumer last fetched it (no request: librdkafka's cached value)."""
        from confluent_kafka import KafkaException, TopicPartition

        if self._consumer is None:
            return
        tp = TopicPartition(self.topic, partition)
        try:
            _, high = self._consumer.get_watermark_offsets(tp, cached=True)
            (position,) = self._consumer.position([tp])
        except (KafkaException, RuntimeError, ValueError):
            return
        if high is not None and high >= 0:
            self._high[partition] = int(high)
        if position.offset >= 0:
            self._position[partition] = int(position.offset)

    def logs(self) -> dict[int, LogWatch]:
        """``witness``: each partition's Merkle log as folded (read by the metrics endpoint's thread)."""
        return {p: e.log for p, e in list(self.partitions.items()) if e.log is not None}

    def lag_by_partition(self) -> dict[int, int]:
        """Records not checked yet per partition with a known end and position (end minus the next offset)."""
        lag: dict[int, int] = {}
        for partition in list(self.partitions):
            high, position = self._high.get(partition), self._position.get(partition)
            if high is not None and position is not None:
                lag[partition] = max(0, high - position)
        return lag

    def since_beat(self) -> float:
        """Seconds since the check loop last went round."""
        return time.monotonic() - self._beat

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): ready while following with partitions assigned and nothing failed."""
        return self._state

    def _log_done(self, partition: int) -> bool:
        """``once``: the partition's journal and checkpoints were read up to their pinned ends (or are not witnessed)."""
        log = self.partitions[partition].log
        return self._witness is None or log is None or self._witness.done(partition, log)

    @staticmethod
    def _journal_done(entry: _Partition) -> bool:
        """``once``: the journal was read up to its end pinned at the start (or is not checked)."""
        return entry.join is None or entry.journal_end is None or entry.join.next_offset >= entry.journal_end


def _all_brokers_down() -> Any:
    from confluent_kafka import KafkaError as RdKafkaError

    return RdKafkaError._ALL_BROKERS_DOWN
