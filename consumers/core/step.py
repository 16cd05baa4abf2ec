"""The scheduler's pure step: one input record in, a successor state and outputs out.

``SchedulerCore.step(state, record)`` validates a submission, chains it into
its run's journal, refuses what must be refused with a typed record, mirrors
every crossing into the partition's HMAC audit chain and seals runs. It reads
no clock (time comes from the input record), draws no randomness and performs
no I/O; Ed25519 signatures are deterministic (RFC 8032). Replaying the same
input partition therefore yields byte-identical outputs.

Order of checks for an ActivitySubmission (the first failure wins and
changes no state): ids -> submission_id -> producer id and sdk ->
occurred_at_ms -> record key = run id -> the record's partition is the key's
(``bernstein.schemas.partitioning.partition_for``, when ``config.submission_partitions`` is set) -> the producer's signature
(``_producer_refusal``: unsigned v1/v2 -> key unknown -> producer mismatch ->
key not valid at the input's Kafka timestamp -> signature -> role not granted
to the producer) -> repeated submission_id -> kind ->
role -> kind allowed for role -> terminal state -> reason code -> artifact
size -> artifact hash -> observations -> evidence-set hash -> run closed ->
duplicate stage -> redundant evidence -> the modality's rules (a browser
result's session; a research report's citations or a data/ops receipt's
structure, plan and order, decided by ``schemas/documents/`` from the
submission's own bytes: docs/modality_rules.md) -> the per-run evidence cap
(a v1 submission with observations: EVIDENCE_SIZES_UNDECLARED instead).

A RunClose and a ComputerUseAction are keyed by their run id too, and get the same
record-key and partition checks at the same place (``_envelope_refusal``): a close on
the wrong partition is refused (WRONG_PARTITION) and leaves the run open, so a
producer on another partitioner can neither close a run nor start a second chain of it
elsewhere. The refusal is written on the partition the record sat on.

The evidence cap: ActivitySubmission.v2 observations and ComputerUseAction.v2
screenshots and DOM snapshots declare each blob's byte size (0 to 64 MiB, else
INVALID_EVIDENCE_SIZE, checked with the observation or digest it belongs to).
A run's distinct blob digests may add up to ``MAX_RUN_EVIDENCE_BYTES`` of
declared bytes; the input that would cross it is refused as the last check
(EVIDENCE_CAP_EXCEEDED). v1 inputs declare no sizes, so the cap cannot count
them: an ActivitySubmission.v1 with observations and every ComputerUseAction.v1
(it names a screenshot and a DOM snapshot) is refused at that same last check
(EVIDENCE_SIZES_UNDECLARED), unless ``config.accept_undeclared_sizes`` lets them
in for a migration (counted as nothing; the verifier then sums their real
sizes). A v1 submission without observations carries nothing to count. The
verifier checks every declared size against the stored blob.

Every output is bounded: no field reaches an output unbounded (an input key
is kept as its digest, its size and at most 1 KiB of it), and an output whose
key, value and headers would exceed ``config.max_output_bytes`` is never
written: its input is dead-lettered instead (OUTPUT_TOO_LARGE).

Key choice (docs/checkpoints.md): seals and checkpoints are signed with
``config.seal_key_at(t)`` and audit records MACed with ``config.audit_key_at(t)``,
``t`` the input record's Kafka timestamp: the newest key of the ring whose
validity range contains ``t``, else the newest. A partition's audit genesis is
keyed like its first audit record. A run close (RunClose.v2) is signed like a
submission; its final seal (RunSeal.v2) keeps the close's statement and signature
in ``closed_by``.

Audit records are ``AuditRecord.v2`` (the MAC covers the key id). The last
output of a step is a signed partition checkpoint (``PartitionCheckpoint`` in a
``CheckpointRecord``, on the checkpoints stream) when the step wrote a final
seal, or when ``config.checkpoint_every`` or more audit records follow the
previous checkpoint: it commits to the audit chain's length and head and the
input position after the step (docs/checkpoints.md).

This module is the entry: ``SchedulerCore`` (the step, its dispatch, rewinding) and the emitter that
bounds every output. The rest of the step lives beside it in ``bernstein.consumers.core``: the handler
of each input kind in ``journal``, the checks from ids to signatures in ``validate``, the stage rules in
``rules``, the evidence cap in ``evidence``, the refusal value in ``refusal``, and the records besides
journal entries (refusals, seals, dead letters, audit records, checkpoints) in ``outputs``.
"""

from __future__ import annotations

from dataclasses import replace

from bernstein.consumers.core.evidence import _SIZED_INPUTS
from bernstein.consumers.core.evidence import charge_evidence as charge_evidence
from bernstein.consumers.core.journal import JournalEntries
from bernstein.consumers.core.model import (
    MAX_CHECKPOINT_EVERY,
    MIN_MAX_OUTPUT_BYTES,
    InputRecord,
    OutputRecord,
    SchedulerConfig,
    SchedulerState,
    Stream,
)
from bernstein.consumers.core.outputs import _MAX_DEAD_LETTER_RAW as _MAX_DEAD_LETTER_RAW
from bernstein.consumers.core.refusal import _MAX_EVIDENCE_CHARS as _MAX_EVIDENCE_CHARS
from bernstein.consumers.core.refusal import _clip as _clip
from bernstein.consumers.core.undo import UndoLog
from bernstein.schemas import codec
from bernstein.schemas.canonical import audit_genesis
from bernstein.schemas.records import DeadLetterCode

# charge_evidence, _clip, _MAX_EVIDENCE_CHARS and _MAX_DEAD_LETTER_RAW stay importable from here (``x as x``): the
# rebuild imports charge_evidence, the native adapter checks the two constants against the extension's, tests use _clip.

_INPUT_SCHEMAS = frozenset(
    {
        codec.ACTIVITY_SUBMISSION,
        codec.ACTIVITY_SUBMISSION_V2,
        codec.ACTIVITY_SUBMISSION_V3,
        codec.RUN_CLOSE,
        codec.RUN_CLOSE_V2,
        codec.COMPUTER_USE_ACTION,
        codec.COMPUTER_USE_ACTION_V2,
    }
)
_CE_SOURCE = b"bernstein/scheduler"


def initial_state(config: SchedulerConfig, partition: int) -> SchedulerState:
    """The state of a partition whose scheduler has written nothing yet.

    Its audit head is the genesis under the current audit key; the step replaces it, while the
    partition's chain is empty, by the genesis under the audit key it picks for the input at hand
    (``_start``), so the first audit record and its genesis use one key.
    """
    return SchedulerState(partition=partition, audit_seq=0, audit_head=audit_genesis(config.audit_key, partition))


class SchedulerCore(JournalEntries):
    """The pure step function, bound to its configuration.

    Its handlers, checks and outputs are its bases' (``journal.JournalEntries`` and those it builds on; module doc).
    """

    def __init__(self, config: SchedulerConfig) -> None:
        if config.seal_every < 1:
            raise ValueError("seal_every must be at least 1")
        if not 1 <= config.checkpoint_every <= MAX_CHECKPOINT_EVERY:
            raise ValueError(f"checkpoint_every must be 1 to {MAX_CHECKPOINT_EVERY}")
        if config.max_output_bytes < MIN_MAX_OUTPUT_BYTES:
            raise ValueError(f"max_output_bytes must be at least {MIN_MAX_OUTPUT_BYTES}")
        _check_partitions(config.submission_partitions)
        self.config = config
        self._codec = codec.default_codec()

    def set_submission_partitions(self, partitions: int) -> None:
        """Check every later input's partition against ``partitions`` (the shell, from the topic's metadata at start)."""
        _check_partitions(partitions)
        self.config = replace(self.config, submission_partitions=partitions)

    def step(self, state: SchedulerState, record: InputRecord) -> tuple[SchedulerState, list[OutputRecord]]:
        """Process one input record. Never raises for bad input; see module doc."""
        limit = self.config.max_output_bytes
        self._start(state, record)
        emit = _Emitter(record, limit)
        try:
            self._dispatch(state, record, emit)
        except _OutputTooLarge as exc:
            # Only a journal record can grow with its input, and it is the first output
            # of its step, written before any state changes: dead-letter the input instead.
            emit = _Emitter(record, limit)
            self._dead_letter(state, record, emit, DeadLetterCode.OUTPUT_TOO_LARGE, str(exc))
        except Exception as exc:  # noqa: BLE001 - a defect must not stop the partition
            # Mutations happen only after every check has passed, so the state
            # is untouched here; discard partial outputs and dead-letter the input.
            emit = _Emitter(record, limit)
            self._dead_letter(state, record, emit, DeadLetterCode.SCHEDULER_ERROR, f"{type(exc).__name__}: {exc}")
        self._checkpoint_if_due(state, record, emit)
        return state, emit.outputs

    def reject(
        self, state: SchedulerState, record: InputRecord, code: DeadLetterCode, detail: str
    ) -> tuple[SchedulerState, list[OutputRecord]]:
        """Dead-letter ``record`` with ``code`` and ``detail`` instead of stepping it.

        For the shell, when Kafka refuses one of a record's outputs (a per-record
        produce error such as MSG_SIZE_TOO_LARGE): call it with the state *before*
        that record was stepped. The dead letter and its audit record are bounded
        like every output; only the audit chain moves on.
        """
        self._start(state, record)
        emit = _Emitter(record, self.config.max_output_bytes)
        self._dead_letter(state, record, emit, code, detail)
        self._checkpoint_if_due(state, record, emit)
        return state, emit.outputs

    # -- rewinding (the shell, after an aborted transaction) ----------------------

    def mark(self, state: SchedulerState) -> tuple[SchedulerState, int]:
        """Opens an undo epoch at ``state`` (``bernstein.consumers.core.undo``): ``rewind`` can go back to here.

        Returns the state to go on with (``state``) and the epoch's id."""
        if state.undo is None:
            state.undo = UndoLog()
        return state, state.undo.mark(state)

    def forget(self, state: SchedulerState, through: int) -> None:
        """The epochs up to ``through`` were committed: their undo records go."""
        if state.undo is not None:
            state.undo.forget(through)

    def rewind(self, state: SchedulerState, to: int) -> SchedulerState | None:
        """``state`` as it was at mark ``to``, or None when that epoch is not open (rebuild instead)."""
        if state.undo is None or not state.undo.rewind(state, to):
            return None
        return state

    def _start(self, state: SchedulerState, record: InputRecord) -> None:
        """Before a partition's first audit record: its genesis under the audit key chosen for this input."""
        if state.audit_seq == 0:
            key = self.config.audit_key_at(record.timestamp_ms)
            state.audit_head = audit_genesis(key.secret, state.partition)

    # -- dispatch -------------------------------------------------------------

    def _dispatch(self, state: SchedulerState, record: InputRecord, emit: _Emitter) -> None:
        if record.value is None or len(record.value) == 0:
            self._dead_letter(state, record, emit, DeadLetterCode.EMPTY_VALUE, "record has no value (tombstone or empty)")
            return
        try:
            decoded = self._codec.decode(record.value, expect=_INPUT_SCHEMAS)
        except codec.DecodeError as exc:
            self._dead_letter(state, record, emit, DeadLetterCode(exc.code), exc.message)
            return
        name = decoded.schema.name
        if name in codec.RUN_CLOSES:
            self._run_close(state, record, decoded.record, emit, name)
        elif name in (codec.COMPUTER_USE_ACTION, codec.COMPUTER_USE_ACTION_V2):
            self._computer_use_action(state, record, decoded.record, emit, sized=name in _SIZED_INPUTS)
        else:
            self._submission(state, record, decoded.record, emit, name)


class _OutputTooLarge(Exception):
    """An output would exceed ``max_output_bytes``; the step dead-letters its input instead."""


class _Emitter:
    """Collects one step's outputs with deterministic CloudEvents headers, none above ``limit`` bytes."""

    __slots__ = ("_record", "final_sealed", "limit", "outputs")

    def __init__(self, record: InputRecord, limit: int) -> None:
        self._record = record
        self.limit = limit
        self.outputs: list[OutputRecord] = []
        self.final_sealed = False
        """The step wrote a final seal (so it ends with a checkpoint)."""

    def _headers(self, ce_type: bytes) -> tuple[tuple[str, bytes], ...]:
        r = self._record
        ce_id = f"{r.topic}:{r.partition}:{r.offset}:{len(self.outputs)}".encode()
        return (
            ("ce_specversion", b"1.0"),
            ("ce_id", ce_id),
            ("ce_source", _CE_SOURCE),
            ("ce_type", ce_type),
        )

    def size(self, key: bytes, value: bytes, ce_type: bytes) -> int:
        """The next output's size: key + value + every header's name and value, in bytes."""
        return _size(key, value, self._headers(ce_type))

    def add(self, stream: Stream, key: bytes, value: bytes, ce_type: bytes) -> None:
        headers = self._headers(ce_type)
        size = _size(key, value, headers)
        if size > self.limit:
            raise _OutputTooLarge(
                f"the {stream.value} record would be {size} bytes with its key and headers; "
                f"the limit (max_output_bytes) is {self.limit}"
            )
        self.outputs.append(OutputRecord(stream, key, value, headers, self._record.timestamp_ms))


_HEADER_NAMES_SIZE = len(b"ce_specversion1.0ce_idce_sourcece_type") + len(_CE_SOURCE)


def _size(key: bytes, value: bytes, headers: tuple[tuple[str, bytes], ...]) -> int:
    """key + value + the four CloudEvents headers' names and values (ASCII names), in bytes."""
    return len(key) + len(value) + _HEADER_NAMES_SIZE + len(headers[1][1]) + len(headers[3][1])


def _check_partitions(partitions: int | None) -> None:
    if partitions is not None and (type(partitions) is not int or partitions < 1):
        raise ValueError(f"submission_partitions must be None or at least 1, not {partitions!r}")
