"""What a shell is told (``ShellOptions``) and what it reports (``Counters``: the progress lines, the metrics,
``/healthz`` and ``/readyz``).

Plain dataclasses, apart from the machinery, so that the readers of the counters (``bernstein.consumers.metrics``,
the benches) and the CLI that fills the options need nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


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
