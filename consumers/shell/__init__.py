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

The shell is a package, one concern a module. ``SchedulerShell`` is a single object whose class is made of one
class per concern, all over ``ShellBase`` (the state they share):

- ``loop``: ``SchedulerShell``, ``run`` and ``_one_batch``: consume, step, produce, send the offsets, commit.
- ``intake``: which consumed messages a batch steps (consumer errors, unreadable inputs, inputs set aside).
- ``stepping``: which core steps a batch (the native plan or the Python reference), and the undo marks.
- ``produce``: the outputs produced, the transaction settled, outputs Kafka refused and the redo that
  dead-letters their input.
- ``recovery``: the state rebuilt from Kafka, rewound in memory or snapshotted; the input rewound.
- ``fencing``: fenced, paused and revoked instances stop; the watchdog that runs transactional calls.
- ``preflight``: the output topics' size limits, the producer sized to them, the input's partition count.
- ``base``, ``options``, ``errors``, ``clock``, ``reader``: the shared state and log; ``ShellOptions`` and
  ``Counters``; the exceptions; the awake clock and timeouts; reading a partition to its end.

This module names what the rest of the code and the tests import from ``bernstein.consumers.shell``.
"""

from __future__ import annotations

from bernstein.consumers.shell.clock import _AwakeClock
from bernstein.consumers.shell.errors import (
    SchedulerFailed,
    SchedulerFenced,
    SubmissionPartitionsMismatch,
    TopicLimitTooSmall,
    _Abort,
)
from bernstein.consumers.shell.fencing import _TxnCaller, _TxnCallStuck
from bernstein.consumers.shell.loop import SchedulerShell
from bernstein.consumers.shell.options import Counters, ShellOptions
from bernstein.consumers.shell.produce import _codes_of, record_code
from bernstein.consumers.shell.reader import _stream_partition, _values_from, take

__all__ = [
    "Counters",
    "SchedulerFailed",
    "SchedulerFenced",
    "SchedulerShell",
    "ShellOptions",
    "SubmissionPartitionsMismatch",
    "TopicLimitTooSmall",
    "record_code",
    "take",
    # internals the unit and integration tests reach
    "_Abort",
    "_AwakeClock",
    "_TxnCallStuck",
    "_TxnCaller",
    "_codes_of",
    "_stream_partition",
    "_values_from",
]
