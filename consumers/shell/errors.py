"""The shell's exceptions: those that end a run, each with a code the CLI turns into an exit status
(``SchedulerFailed``, ``SchedulerFenced``, the start-up checks' ``TopicLimitTooSmall`` and
``SubmissionPartitionsMismatch``), and the internal ones by which the loop aborts a transaction and redoes its
batch (``_Abort`` and its two kinds).

Apart because they cross every seam: ``produce`` raises ``_Rejected``, ``loop`` catches ``_Abort``, ``produce``
learns from both (``_note``), ``recovery`` and ``preflight`` give up with ``SchedulerFailed``.
"""

from __future__ import annotations

from bernstein.schemas.errors import BernsteinError


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
