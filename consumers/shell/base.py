"""``ShellBase``: what every part of the shell shares: its configuration, its Kafka clients, the bookkeeping
carried from one batch to the next, and the log.

``SchedulerShell`` (``loop``) is one object made of the parts in this package, each a class over ``ShellBase``
holding one concern's methods (``fencing``, ``preflight``, ``produce``, ``recovery``, ``intake``, ``stepping``). They
all read and write the attributes set up here, in one ``__init__``, so that each attribute's meaning is written once,
where it starts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, TextIO

from confluent_kafka import KafkaError

from bernstein.consumers.core.model import OUTPUT_FRAMING_ALLOWANCE, Stream
from bernstein.consumers.core.native import NativeSchedulerCore, SchedulerCoreLike
from bernstein.consumers.shell.clock import _awake_clock
from bernstein.consumers.shell.options import Counters, ShellOptions
from bernstein.consumers.shell.reader import _PartitionReader
from bernstein.schemas.records import DeadLetterCode
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import transactional_producer_config
from bernstein.substrate.logs import write_line

if TYPE_CHECKING:
    from bernstein.consumers.shell.fencing import _TxnCaller
    from bernstein.consumers.shell.produce import _Inflight

_PRODUCER_MAX_MESSAGE_BYTES: Final = 2097152
"""bernstein.substrate.kafka's message.max.bytes for the scheduler's producer (raised when max_output_bytes needs it)."""
_JOURNAL, _REFUSALS, _DEADLETTER = Stream.JOURNAL, Stream.REFUSALS, Stream.DEADLETTER


class ShellBase:
    """One partition's shell: its settings and the state its parts share (``SchedulerShell`` is their sum)."""

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
        """Called once per committed transaction with (records, transaction seconds, commit seconds) (metrics)."""
        self.emit: Callable[[str, str, str, dict[str, Any]], None] | None = None
        """Writes a log event (event, message, level, fields) instead of the text line (``bernstein.substrate.logs``)."""
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
        """The clock's pauses when this instance last proved it owns the partition (init_transactions, a commit)."""
        self._since_snapshot = [0, 0]
        """Committed transactions and input records since the last snapshot (or rebuild)."""
        self._committed_next = -1
        """The next input offset after the last commit (what a snapshot covers)."""
        self._snapshot_inflight = False
        """The open transaction carries a snapshot."""
        self._last_snapshot_bytes = 0
        """The size of the last snapshot this process took (the cadence waits longer after a large one)."""
        self._encoding: Future[list[tuple[bytes, bytes]]] | None = None
        """A snapshot being encoded on the worker thread."""
        self._encoder: ThreadPoolExecutor | None = None
        self._marks: list[int | None] = []
        """The core's undo mark before each batch planned since the last commit, oldest first (None: a batch stepped on a
        copy, which the core cannot rewind): an aborted transaction rewinds to the first (``_rewind``)."""
        self._reader = _PartitionReader(bootstrap)
        """The rebuild's consumers (kept: each new one costs a connection and, on a secured cluster, a login)."""

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
