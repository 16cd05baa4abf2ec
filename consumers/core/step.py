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
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from bernstein.consumers.core.model import (
    MAX_CHECKPOINT_EVERY,
    MIN_MAX_OUTPUT_BYTES,
    InputRecord,
    OutputRecord,
    Producer,
    ProducerKey,
    RunState,
    SchedulerConfig,
    SchedulerState,
    SessionState,
    Stream,
)
from bernstein.consumers.core.undo import UndoLog
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    MAX_JSON_DEPTH,
    action_anchor,
    action_digest,
    artifact_hash,
    audit_genesis,
    audit_record_mac,
    canonical_json,
    checkpoint_hash,
    checkpoint_signing_input,
    computer_use_genesis,
    evidence_set_hash,
    is_digest,
    is_mac,
    journal_entry_hash,
    journal_genesis,
    json_nesting_exceeds,
    lineage_hmac,
    lineage_signing_input,
    macs_equal,
    run_close_statement,
    seal_signing_input,
    sha256_digest,
    submission_signing_input,
    submission_statement,
)
from bernstein.schemas.documents.browser import LineageBinding
from bernstein.schemas.documents.rules import DOCUMENT_KINDS, record_violation
from bernstein.schemas.ed25519 import verify_signature
from bernstein.schemas.errors import CanonicalizationError
from bernstein.schemas.partitioning import partition_for
from bernstein.schemas.records import (
    ACTION_KINDS,
    BROWSER_SESSION_FORMAT,
    ENTRY_ACTIVITY_RESULT,
    ENTRY_COMPUTER_USE_ACTION,
    ID_RULE,
    KINDS,
    LABEL_RULE,
    MAX_INLINE_ARTIFACT_BYTES,
    MAX_KEPT_KEY_BYTES,
    MAX_KIND_LENGTH,
    MAX_LINEAGE_ENTRY_BYTES,
    MAX_OBSERVATIONS,
    MAX_OCCURRED_AT_MS,
    MAX_REF_LENGTH,
    MAX_RUN_EVIDENCE_BYTES,
    TERMINAL_STATES,
    AuditEvent,
    DeadLetterCode,
    RefusalCode,
    has_control,
    is_valid_id,
    is_valid_label,
    is_valid_reason_code,
)

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
_SIZED_INPUTS = frozenset({codec.ACTIVITY_SUBMISSION_V2, codec.ACTIVITY_SUBMISSION_V3, codec.COMPUTER_USE_ACTION_V2})
_SIGNED_INPUTS = frozenset({codec.ACTIVITY_SUBMISSION_V3, codec.RUN_CLOSE_V2})
_SIGNED_VERSION = {
    codec.ACTIVITY_SUBMISSION: codec.ACTIVITY_SUBMISSION_V3,
    codec.ACTIVITY_SUBMISSION_V2: codec.ACTIVITY_SUBMISSION_V3,
    codec.RUN_CLOSE: codec.RUN_CLOSE_V2,
}
"""The signed schema that replaces each unsigned input schema (SUBMISSION_UNSIGNED names it)."""
_MAX_SIGNATURE_SHOWN = 128
"""A refusal shows at most this many bytes of a signature (hex)."""
_MAX_EVIDENCE_CHARS = 256
_MAX_DEAD_LETTER_RAW = 512 * 1024
_CE_SOURCE = b"bernstein/scheduler"
_CE_DEADLETTER = b"bernstein.input.deadletter"
_CE_CHECKPOINT = b"bernstein.partition.checkpoint"


@dataclass(frozen=True, slots=True)
class _Refusal:
    code: RefusalCode
    message: str
    field: str = ""
    declared: str = ""
    recomputed: str = ""
    earlier_stage_id: str | None = None
    exception: str = "ActivityRejected"
    authenticated: bool = False
    """Reached after the producer's signature verified: the refusal names a sender that provably sent it."""


def initial_state(config: SchedulerConfig, partition: int) -> SchedulerState:
    """The state of a partition whose scheduler has written nothing yet.

    Its audit head is the genesis under the current audit key; the step replaces it, while the
    partition's chain is empty, by the genesis under the audit key it picks for the input at hand
    (``_start``), so the first audit record and its genesis use one key.
    """
    return SchedulerState(partition=partition, audit_seq=0, audit_head=audit_genesis(config.audit_key, partition))


class SchedulerCore:
    """The pure step function, bound to its configuration."""

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

    # -- submissions ------------------------------------------------------------

    def _submission(self, state: SchedulerState, record: InputRecord, sub: dict[str, Any], emit: _Emitter, schema: str) -> None:
        sized = schema in _SIZED_INPUTS
        refusal = self._validate(state, record, sub, schema)
        if refusal is not None:
            self._refuse(state, record, sub, refusal, emit)
            return
        run_id: str = sub["run_id"]
        # nothing changes before the journal record is written (it may be too large)
        known = state.runs.get(run_id)
        seq = known.entry_count if known is not None else 0
        entry = {
            "run_id": run_id,
            "seq": seq,
            "prev_hash": known.head if known is not None else journal_genesis(run_id),
            "entry_type": ENTRY_ACTIVITY_RESULT,
            "stage_id": sub["stage_id"],
            "role": sub["role"],
            "kind": sub["kind"],
            "producer_id": sub["producer"]["id"],
            "submission_id": sub["submission_id"],
            "artifact_hash": sub["artifact_hash"],
            "evidence_set_hash": sub["evidence_set_hash"],
            "observations": sub["observations"],
            "terminal_state": sub["terminal_state"],
            "reason_code": sub["reason_code"],
            "input": {"topic": record.topic, "partition": record.partition, "offset": record.offset},
            "occurred_at_ms": sub["occurred_at_ms"],
        }
        # only a signed ActivitySubmission.v3 gets here: its entry keeps the producer's key id and signature
        entry["producer_key_id"] = sub["producer_key_id"]
        entry["producer_signature"] = sub["producer_signature"]
        payload = self._codec.encode(codec.JOURNAL_ENTRY_V3, entry)
        entry_hash = journal_entry_hash(payload)
        value = self._codec.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": entry_hash})
        emit.add(Stream.JOURNAL, run_id.encode(), value, b"bernstein.activity.result")

        run = self._opened(state, run_id, sub["producer"]["id"])
        run.head = entry_hash
        run.entry_count = seq + 1
        run.submissions[sub["submission_id"]] = sub["stage_id"]
        run.stages[sub["stage_id"]] = sub["evidence_set_hash"]
        if sub["observations"]:
            run.evidence.setdefault(sub["evidence_set_hash"], sub["stage_id"])
        if sized:
            charge_evidence(run, _observation_blobs(sub))
        if sub["kind"] == "browser":
            # A browser stage is its session: accepting its result closes the action chain.
            session = run.sessions.get(sub["stage_id"])
            if session is None:
                run.sessions[sub["stage_id"]] = SessionState(0, computer_use_genesis(run_id, sub["stage_id"]), closed=True)
            else:
                session.closed = True

        self._audit(
            state,
            record,
            emit,
            event=AuditEvent.ACTIVITY_RESULT,
            run_id=run_id,
            stage_id=sub["stage_id"],
            kind=sub["kind"],
            terminal_state=sub["terminal_state"],
            reason_code=sub["reason_code"],
            artifact_hash=sub["artifact_hash"],
            evidence_set_hash=sub["evidence_set_hash"],
            record_hash=entry_hash,
            journal_seq=seq,
        )
        if run.entry_count - run.sealed_count >= self.config.seal_every:
            self._seal(state, record, emit, run_id, run, final=False)

    def _validate(self, state: SchedulerState, record: InputRecord, sub: dict[str, Any], schema: str) -> _Refusal | None:
        """The first refusal a submission earns, or None; refusals after its signature verified say so."""
        run_id, stage_id, role = sub["run_id"], sub["stage_id"], sub["role"]
        for code, field, value in (
            (RefusalCode.INVALID_RUN_ID, "run_id", run_id),
            (RefusalCode.INVALID_STAGE_ID, "stage_id", stage_id),
            (RefusalCode.INVALID_ROLE, "role", role),
        ):
            if not is_valid_id(value):
                return _invalid_id(code, field, value)
        refusal = _envelope_refusal(record, sub, self.config.submission_partitions) or self._producer_refusal(
            record, sub, schema, role=role
        )
        if refusal is not None:
            return refusal
        refusal = self._validate_signed(state, sub, schema)
        return None if refusal is None else replace(refusal, authenticated=True)

    def _validate_signed(self, state: SchedulerState, sub: dict[str, Any], schema: str) -> _Refusal | None:
        """The stage rules, once its producer is authenticated."""
        sized = schema in _SIZED_INPUTS
        run_id, stage_id, role, kind = sub["run_id"], sub["stage_id"], sub["role"], sub["kind"]
        refusal = self._owner_refusal(run_id, sub["producer"]["id"]) or _duplicate_submission(state, sub)
        if refusal is not None:
            return refusal
        if kind not in KINDS:
            return _Refusal(
                RefusalCode.UNKNOWN_KIND,
                f"kind {_clip(kind, 64)!r} is not one of {', '.join(sorted(KINDS))}",
                "kind",
                _clip(kind),
            )
        allowed = self.config.roles.get(role)
        if allowed is None:
            return _Refusal(RefusalCode.UNKNOWN_ROLE, f"role {role!r} is not declared in the roles manifest", "role", role)
        if kind != allowed:
            return _Refusal(
                RefusalCode.KIND_NOT_ALLOWED_FOR_ROLE,
                f"role {role!r} declares agent_kind {allowed!r}, but the submission is of kind {kind!r}",
                "kind",
                kind,
                allowed,
            )
        terminal_state = sub["terminal_state"]
        if terminal_state not in TERMINAL_STATES:
            return _Refusal(
                RefusalCode.UNKNOWN_TERMINAL_STATE,
                f"terminal_state {_clip(terminal_state, 64)!r} is not one of {', '.join(sorted(TERMINAL_STATES))}",
                "terminal_state",
                _clip(terminal_state),
            )
        reason_code = sub["reason_code"]
        if reason_code.strip() == "":
            return _Refusal(RefusalCode.EMPTY_REASON_CODE, "reason_code is empty", "reason_code", reason_code)
        if not is_valid_reason_code(reason_code):
            return _Refusal(
                RefusalCode.INVALID_REASON_CODE,
                "reason_code must be at most 128 characters without control characters",
                "reason_code",
                _clip(reason_code),
            )
        artifact: bytes = sub["artifact"]
        if len(artifact) > MAX_INLINE_ARTIFACT_BYTES:
            return _too_large(RefusalCode.ARTIFACT_TOO_LARGE, "inline artifact", "artifact", artifact, MAX_INLINE_ARTIFACT_BYTES)
        declared_artifact = sub["artifact_hash"]
        if not is_digest(declared_artifact):
            return _malformed_digest("artifact_hash", declared_artifact)
        recomputed_artifact = artifact_hash(artifact)
        if recomputed_artifact != declared_artifact:
            return _Refusal(
                RefusalCode.ARTIFACT_HASH_MISMATCH,
                f"artifact_hash mismatch: declared {declared_artifact}, recomputed {recomputed_artifact}",
                "artifact_hash",
                declared_artifact,
                recomputed_artifact,
            )
        observations: list[dict[str, Any]] = sub["observations"]
        if len(observations) > MAX_OBSERVATIONS:
            return _Refusal(
                RefusalCode.TOO_MANY_OBSERVATIONS,
                f"{len(observations)} observations; the limit is {MAX_OBSERVATIONS}",
                "observations",
                str(len(observations)),
                str(MAX_OBSERVATIONS),
            )
        for index, observation in enumerate(observations):
            if not is_digest(observation["content_hash"]):
                return _malformed_digest(f"observations[{index}].content_hash", observation["content_hash"])
            obs_kind, obs_ref = observation["kind"], observation["ref"]
            if (
                obs_kind.strip() == ""
                or len(obs_kind) > MAX_KIND_LENGTH
                or len(obs_ref) > MAX_REF_LENGTH
                or has_control(obs_kind)
                or has_control(obs_ref)
            ):
                return _Refusal(
                    RefusalCode.INVALID_OBSERVATION,
                    f"observations[{index}] needs a kind of 1-{MAX_KIND_LENGTH} characters and a ref of at most "
                    f"{MAX_REF_LENGTH}, without control characters",
                    f"observations[{index}]",
                    _clip(obs_kind),
                )
            if sized:
                refusal = _size_refusal(f"observations[{index}].size", observation["size"])
                if refusal is not None:
                    return refusal
        declared_evidence = sub["evidence_set_hash"]
        if not is_digest(declared_evidence):
            return _malformed_digest("evidence_set_hash", declared_evidence)
        recomputed_evidence = evidence_set_hash(o["content_hash"] for o in observations)
        if recomputed_evidence != declared_evidence:
            return _Refusal(
                RefusalCode.EVIDENCE_SET_HASH_MISMATCH,
                f"evidence_set_hash mismatch: declared {declared_evidence}, recomputed {recomputed_evidence}",
                "evidence_set_hash",
                declared_evidence,
                recomputed_evidence,
            )
        run = state.runs.get(run_id)
        if run is not None:
            if run.closed:
                return _Refusal(
                    RefusalCode.RUN_CLOSED, f"run {run_id!r} is closed and sealed; no stage may follow", "run_id", run_id
                )
            if stage_id in run.stages:
                return _Refusal(
                    RefusalCode.DUPLICATE_STAGE,
                    f"stage {stage_id!r} was already accepted in run {run_id!r}",
                    "stage_id",
                    stage_id,
                    earlier_stage_id=stage_id,
                )
            earlier = run.evidence.get(declared_evidence) if observations else None
            if earlier is not None:
                return _Refusal(
                    RefusalCode.REDUNDANT_STAGE,
                    f"stage {stage_id!r} introduces no new evidence (evidence_set_hash already contributed by stage {earlier!r})",
                    "evidence_set_hash",
                    declared_evidence,
                    declared_evidence,
                    earlier_stage_id=earlier,
                    exception="RedundantStage",
                )
        refusal = None
        if kind == "browser":
            refusal = self._browser_session_refusal(run_id, stage_id, artifact, run)
        elif kind in DOCUMENT_KINDS:
            refusal = _document_refusal(sub)
        if refusal is None and sized:
            refusal = _cap_refusal(run_id, run, _observation_blobs(sub))
        elif refusal is None and observations and not self.config.accept_undeclared_sizes:
            refusal = _undeclared_refusal(codec.ACTIVITY_SUBMISSION, f"{len(observations)} observations", "observations")
        return refusal or self._open_runs_refusal(state, run_id, sub["producer"]["id"])

    def _open_runs_refusal(self, state: SchedulerState, run_id: str, producer_id: str) -> _Refusal | None:
        """A record that would open a run while its (authenticated) producer has ``max_open_runs`` open: the last
        check, so what the scheduler keeps for one producer stays bounded (docs/security.md)."""
        if run_id in state.runs:
            return None
        producer = self.config.producers.producers.get(producer_id)
        count = state.open_runs.get(producer_id, 0)
        if producer is None or count < producer.max_open_runs:
            return None
        return _Refusal(
            RefusalCode.OPEN_RUNS_EXCEEDED,
            f"producer {producer_id!r} already has {count} open runs, its limit (max_open_runs in the roles manifest); "
            f"close one before opening run {run_id!r}",
            "run_id",
            run_id,
            str(producer.max_open_runs),
        )

    @staticmethod
    def _opened(state: SchedulerState, run_id: str, producer_id: str) -> RunState:
        """The run an accepted record changes; a run it opens counts toward its producer's open runs."""
        new = run_id not in state.runs
        run = state.run_for(run_id)
        if new:
            run.opened_by = producer_id
            state.open_runs[producer_id] = state.open_runs.get(producer_id, 0) + 1
        return run

    def _owner_refusal(self, run_id: str, producer_id: str) -> _Refusal | None:
        """A run id in another producer's run prefixes takes records only from its owner and the owner's
        collaborators (docs/security.md, "Runs and their owners"); an id in nobody's prefixes is open to all."""
        owned = self.config.producers.run_owner(run_id)
        if owned is None:
            return None
        owner, prefix = owned
        if producer_id == owner.name or producer_id in owner.collaborators:
            return None
        return _Refusal(
            RefusalCode.RUN_NOT_OWNED,
            f"run {run_id!r} belongs to {owner.name!r} (run prefix {prefix!r} in the roles manifest); "
            f"{_clip(producer_id, 80)!r} is not one of its collaborators",
            "run_id",
            run_id,
            _clip(owner.name),
        )

    def _producer_refusal(self, record: InputRecord, item: dict[str, Any], schema: str, *, role: str | None) -> _Refusal | None:
        """Who may submit (docs/security.md): a producer key registered in the manifest signed this very input.

        In order: unsigned -> key unknown -> producer mismatch -> key not valid at the input's Kafka
        timestamp -> signature -> role not granted (``role`` None: a run close, which takes no role).
        """
        if schema not in _SIGNED_INPUTS:
            signed = _SIGNED_VERSION[schema]
            return _Refusal(
                RefusalCode.SUBMISSION_UNSIGNED,
                f"this {schema} carries no producer signature; publish {signed}, signed by a producer key registered "
                "in the roles manifest",
                "producer_signature",
                schema,
                signed,
            )
        key_id: str = item["producer_key_id"]
        found = self.config.producers.lookup(key_id)
        if found is None:
            return _Refusal(
                RefusalCode.PRODUCER_KEY_UNKNOWN,
                f"the signing key {_clip(key_id, 80)} is not registered to any producer in the roles manifest ([[producers]])",
                "producer_key_id",
                _clip(key_id),
            )
        producer, key = found
        producer_id: str = item["producer"]["id"]
        refusal = _key_holder_refusal(producer, key, key_id, producer_id, record.timestamp_ms, "producer_key_id")
        if refusal is not None:
            return refusal
        signature: bytes = item["producer_signature"]
        shown = signature[:_MAX_SIGNATURE_SHOWN].hex()
        try:
            if schema == codec.RUN_CLOSE_V2:
                statement = run_close_statement(
                    item["submission_id"], item["run_id"], producer_id, item["occurred_at_ms"], key_id
                )
            else:
                statement = submission_statement(item, key_id)
            signed_bytes = submission_signing_input(statement)
        except CanonicalizationError:
            return _Refusal(
                RefusalCode.SUBMISSION_SIGNATURE_INVALID,
                "the submission statement has no canonical JSON form (an integer beyond 2**53 - 1): no signature "
                "can verify over it",
                "producer_signature",
                _clip(shown),
            )
        if not verify_signature(key.public_key, signature, signed_bytes):
            return _Refusal(
                RefusalCode.SUBMISSION_SIGNATURE_INVALID,
                f"the producer signature does not verify under key {key_id} over the {schema} statement "
                f"(signed bytes {sha256_digest(signed_bytes)})",
                "producer_signature",
                _clip(shown),
                sha256_digest(signed_bytes),
            )
        # An undeclared role is refused by the stage rules as UNKNOWN_ROLE, not as a missing grant.
        if role is not None and role in self.config.roles and role not in producer.roles:
            return _Refusal(
                RefusalCode.PRODUCER_ROLE_NOT_ALLOWED,
                f"producer {producer.name!r} is not granted role {role!r} in the roles manifest",
                "role",
                role,
                _clip(", ".join(sorted(producer.roles))),
                authenticated=True,  # the signature verified: only the grant is missing
            )
        return None

    def _browser_session_refusal(self, run_id: str, stage_id: str, artifact: bytes, run: RunState | None) -> _Refusal | None:
        """A browser result must name its session (= stage) and that session's accepted head anchor."""
        if json_nesting_exceeds(artifact):
            return _too_deep("artifact")
        try:
            document = json.loads(artifact)
            if not isinstance(document, dict) or canonical_json(document) != artifact:
                raise ValueError("not canonical JSON")
        except (ValueError, UnicodeDecodeError, CanonicalizationError):
            return _Refusal(
                RefusalCode.BROWSER_SESSION_MISMATCH,
                f"a browser artifact must be the canonical JSON {BROWSER_SESSION_FORMAT} document of its session",
                "artifact",
            )
        session = run.sessions.get(stage_id) if run is not None else None
        expected_head = session.last_anchor if session is not None else computer_use_genesis(run_id, stage_id)
        expected_count = session.next_index if session is not None else 0
        declared = (document.get("format"), document.get("session_id"), document.get("head_anchor"), document.get("action_count"))
        if declared != (BROWSER_SESSION_FORMAT, stage_id, expected_head, expected_count):
            return _Refusal(
                RefusalCode.BROWSER_SESSION_MISMATCH,
                f"browser stage {stage_id!r} must name its session's head anchor {expected_head} after {expected_count} "
                f"accepted actions; it names {_clip(repr(document.get('head_anchor')), 80)} "
                f"after {_clip(repr(document.get('action_count')), 32)}",
                "artifact",
                _clip(f"{document.get('head_anchor')}#{document.get('action_count')}"),
                f"{expected_head}#{expected_count}",
            )
        return None

    def _refuse(self, state: SchedulerState, record: InputRecord, sub: dict[str, Any], refusal: _Refusal, emit: _Emitter) -> None:
        run_id, stage_id, kind = sub["run_id"], sub.get("stage_id", ""), sub.get("kind", "")
        value = self._codec.encode(
            codec.REFUSAL_V2,
            {
                "exception": refusal.exception,
                "code": refusal.code.value,
                "message": refusal.message,
                "run_id": _clip(run_id),
                "stage_id": _clip(stage_id),
                "role": _clip(sub.get("role", "")),
                "kind": _clip(kind),
                "submission_id": _clip(sub.get("submission_id", "")),
                "field": refusal.field,
                "declared": _clip(refusal.declared),
                "recomputed": _clip(refusal.recomputed),
                "earlier_stage_id": refusal.earlier_stage_id,
                "input": {"topic": record.topic, "partition": record.partition, "offset": record.offset},
                "occurred_at_ms": _occurred_at(sub, record),
                "producer": _clip(sub["producer"]["id"]),
                "key_id": _clip(sub.get("producer_key_id", "")),
                "authenticated": refusal.authenticated,
            },
        )
        # keyed by the run id when it is one, else by nothing: never by an unbounded input key
        key = run_id.encode() if is_valid_id(run_id) else b""
        emit.add(Stream.REFUSALS, key, value, b"bernstein.activity.refused")
        terminal_state = sub.get("terminal_state", "")
        self._audit(
            state,
            record,
            emit,
            event=AuditEvent.ACTIVITY_REFUSED,
            run_id=run_id if is_valid_id(run_id) else "",
            stage_id=stage_id if is_valid_id(stage_id) else "",
            kind=kind if kind in KINDS else "",
            terminal_state=terminal_state if terminal_state in TERMINAL_STATES else "",
            reason_code=refusal.code.value,
            artifact_hash=_digest_or_empty(sub.get("artifact_hash")),
            evidence_set_hash=_digest_or_empty(sub.get("evidence_set_hash")),
            record_hash=sha256_digest(value),
            journal_seq=-1,
        )

    # -- computer-use actions -----------------------------------------------------

    def _computer_use_action(
        self, state: SchedulerState, record: InputRecord, act: dict[str, Any], emit: _Emitter, *, sized: bool = False
    ) -> None:
        refusal = self._validate_action(state, record, act, sized=sized)
        if refusal is not None:
            self._refuse(
                state,
                record,
                {
                    **act,
                    "stage_id": act["session_id"],
                    "kind": "browser",
                    "role": "",
                    "producer_key_id": act["lineage"]["key_id"],
                },
                refusal,
                emit,
            )
            return
        run_id: str = act["run_id"]
        session_id: str = act["session_id"]
        # nothing changes before the journal record is written (it may be too large)
        known = state.runs.get(run_id)
        seq = known.entry_count if known is not None else 0
        lineage = act["lineage"]
        lineage_hash = sha256_digest(lineage["entry"])
        sizes = {"screenshot_size": act["screenshot_size"], "dom_size": act["dom_size"]} if sized else {}
        payload = self._codec.encode(
            codec.COMPUTER_USE_ENTRY_V2 if sized else codec.COMPUTER_USE_ENTRY,
            {
                **sizes,
                "run_id": run_id,
                "seq": seq,
                "prev_hash": known.head if known is not None else journal_genesis(run_id),
                "entry_type": ENTRY_COMPUTER_USE_ACTION,
                "session_id": session_id,
                "action_index": act["action_index"],
                "producer_id": act["producer"]["id"],
                "submission_id": act["submission_id"],
                "prev_anchor": act["prev_anchor"],
                "anchor": act["anchor"],
                "screenshot_hash": act["screenshot_hash"],
                "dom_digest": act["dom_digest"],
                "observation_hash": act["observation_hash"],
                "action": act["action"],
                "lineage_entry_hash": lineage_hash,
                "lineage_key_id": lineage["key_id"],
                "lineage_signature": lineage["signature"],
                "lineage_hmac": lineage["hmac"],
                "lineage_entry": lineage["entry"],
                "input": {"topic": record.topic, "partition": record.partition, "offset": record.offset},
                "occurred_at_ms": act["occurred_at_ms"],
            },
        )
        entry_hash = journal_entry_hash(payload)
        value = self._codec.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": entry_hash})
        emit.add(Stream.JOURNAL, run_id.encode(), value, b"bernstein.computer_use.action")
        run = self._opened(state, run_id, act["producer"]["id"])
        session = run.sessions.get(session_id)
        if session is None:
            session = SessionState(0, computer_use_genesis(run_id, session_id))
            run.sessions[session_id] = session
        run.head = entry_hash
        run.entry_count = seq + 1
        run.submissions[act["submission_id"]] = session_id
        session.next_index += 1
        session.last_anchor = act["anchor"]
        if sized:
            charge_evidence(run, _action_blobs(act))
        self._audit(
            state,
            record,
            emit,
            event=AuditEvent.COMPUTER_USE_ACTION,
            run_id=run_id,
            stage_id=session_id,
            kind="browser",
            terminal_state="",
            reason_code="",
            artifact_hash="",
            evidence_set_hash="",
            record_hash=entry_hash,
            journal_seq=seq,
            computer_use={
                "session_id": session_id,
                "action_index": act["action_index"],
                "anchor": act["anchor"],
                "prev_anchor": act["prev_anchor"],
                "screenshot_hash": act["screenshot_hash"],
                "dom_digest": act["dom_digest"],
                "observation_hash": act["observation_hash"],
                "action_kind": act["action"]["kind"],
                "action_digest": action_digest(act["action"]),
                "lineage_entry_hash": lineage_hash,
                "worker_id": act["producer"]["id"],
            },
        )
        if run.entry_count - run.sealed_count >= self.config.seal_every:
            self._seal(state, record, emit, run_id, run, final=False)

    def _validate_action(
        self, state: SchedulerState, record: InputRecord, act: dict[str, Any], *, sized: bool = False
    ) -> _Refusal | None:
        run_id, session_id = act["run_id"], act["session_id"]
        if not is_valid_id(run_id):
            return _invalid_id(RefusalCode.INVALID_RUN_ID, "run_id", run_id)
        if not is_valid_id(session_id):
            return _invalid_id(RefusalCode.INVALID_SESSION_ID, "session_id", session_id)
        refusal = _envelope_refusal(record, act, self.config.submission_partitions) or _duplicate_submission(state, act)
        if refusal is not None:
            return refusal
        action = act["action"]
        if action["kind"] not in ACTION_KINDS:
            return _Refusal(
                RefusalCode.UNKNOWN_ACTION_KIND,
                f"action kind {_clip(action['kind'], 64)!r} is not one of {', '.join(sorted(ACTION_KINDS))}",
                "action.kind",
                _clip(action["kind"]),
            )
        if len(action["target"]) > MAX_REF_LENGTH or act["action_index"] < 0:
            return _Refusal(
                RefusalCode.INVALID_ACTION,
                f"action target longer than {MAX_REF_LENGTH} or negative index",
                "action",
                _clip(action["target"]),
            )
        for name in ("prev_anchor", "screenshot_hash", "dom_digest", "observation_hash", "anchor"):
            if not is_digest(act[name]):
                return _malformed_digest(name, act[name])
        if action["value_digest"] and not is_mac(action["value_digest"]):
            return _malformed_digest("action.value_digest", action["value_digest"])
        if sized:
            refusal = _size_refusal("screenshot_size", act["screenshot_size"]) or _size_refusal("dom_size", act["dom_size"])
            if refusal is not None:
                return refusal
        recomputed = action_anchor(act["prev_anchor"], act["observation_hash"], action)
        if recomputed != act["anchor"]:
            return _Refusal(
                RefusalCode.ANCHOR_MISMATCH,
                f"anchor mismatch at action {act['action_index']}: declared {act['anchor']}, recomputed {recomputed}",
                "anchor",
                act["anchor"],
                recomputed,
            )
        run = state.runs.get(run_id)
        if run is not None and run.closed:
            return _Refusal(
                RefusalCode.RUN_CLOSED, f"run {run_id!r} is closed and sealed; no action may follow", "run_id", run_id
            )
        session = run.sessions.get(session_id) if run is not None else None
        if session is not None and session.closed:
            return _Refusal(
                RefusalCode.SESSION_CLOSED,
                f"session {session_id!r} already ended with its browser result",
                "session_id",
                session_id,
            )
        expected_index = session.next_index if session is not None else 0
        expected_prev = session.last_anchor if session is not None else computer_use_genesis(run_id, session_id)
        if act["action_index"] != expected_index:
            return _Refusal(
                RefusalCode.ACTION_OUT_OF_ORDER,
                f"session {session_id!r} expects action {expected_index}, got {act['action_index']}",
                "action_index",
                str(act["action_index"]),
                str(expected_index),
            )
        if act["prev_anchor"] != expected_prev:
            return _Refusal(
                RefusalCode.ANCHOR_DOES_NOT_FOLLOW,
                f"action {expected_index} of session {session_id!r} does not follow the last accepted anchor",
                "prev_anchor",
                act["prev_anchor"],
                expected_prev,
            )
        refusal = self._lineage_refusal(record, act)
        if refusal is not None:
            return refusal
        refusal = self._owner_refusal(run_id, act["producer"]["id"])
        if refusal is None and sized:
            refusal = _cap_refusal(run_id, run, _action_blobs(act))
        elif refusal is None and not self.config.accept_undeclared_sizes:
            refusal = _undeclared_refusal(codec.COMPUTER_USE_ACTION, "a screenshot and a DOM snapshot", "evidence")
        refusal = refusal or self._open_runs_refusal(state, run_id, act["producer"]["id"])
        return None if refusal is None else replace(refusal, authenticated=True)

    def _lineage_refusal(self, record: InputRecord, act: dict[str, Any]) -> _Refusal | None:
        """The signed lineage entry must bind this very action, under a registered producer key.

        Its Ed25519 signature is the producer's signature (docs/security.md): the key must be registered
        to producer.id, valid at the input's Kafka timestamp, and the producer granted agent kind browser.
        The HMAC envelope is checked only when ``hmac_key_id`` names one of the scheduler's audit keys
        (entries written before producer identities); otherwise it is keyed with the producer's own
        lineage key, which the scheduler does not hold, and only its form is checked.
        """
        lineage = act["lineage"]
        entry_bytes: bytes = lineage["entry"]
        if len(entry_bytes) > MAX_LINEAGE_ENTRY_BYTES:
            return _too_large(
                RefusalCode.LINEAGE_TOO_LARGE, "lineage entry", "lineage.entry", entry_bytes, MAX_LINEAGE_ENTRY_BYTES
            )
        if json_nesting_exceeds(entry_bytes):
            return _too_deep("lineage.entry")
        try:
            entry = json.loads(entry_bytes)
            if not isinstance(entry, dict) or canonical_json(entry) != entry_bytes:
                raise ValueError("not canonical JSON")
        except (ValueError, UnicodeDecodeError, CanonicalizationError):
            return _Refusal(RefusalCode.LINEAGE_MALFORMED, "lineage entry is not a canonical JSON object", "lineage.entry")
        binding = LineageBinding(
            act["run_id"], act["session_id"], act["action_index"], act["anchor"], act["prev_anchor"], act["producer"]["id"]
        )
        expected = binding.required(lineage["key_id"])
        for name, value in expected.items():
            if entry.get(name) != value:
                return _Refusal(
                    RefusalCode.LINEAGE_MISMATCH,
                    f"lineage entry field {name!r} does not bind this action",
                    f"lineage.entry.{name}",
                    _clip(json.dumps(entry.get(name))),
                    _clip(json.dumps(value)),
                )
        hmac_key_id = entry.get("hmac_key_id")
        audit_secret = self.config.audit_secret(hmac_key_id) if isinstance(hmac_key_id, str) else None
        if audit_secret is not None:
            hmac_ok = macs_equal(lineage_hmac(audit_secret, entry_bytes), lineage["hmac"])
        else:
            hmac_ok = is_mac(lineage["hmac"])
        if not hmac_ok:
            return _Refusal(
                RefusalCode.LINEAGE_HMAC_INVALID,
                "lineage entry HMAC envelope does not verify"
                if audit_secret is not None
                else "lineage entry HMAC envelope is not of the form hmac-sha256:<64 lowercase hex>",
                "lineage.hmac",
                _clip(lineage["hmac"]),
            )
        key_id = lineage["key_id"]
        found = self.config.producers.lookup(key_id)
        if found is None:
            return _Refusal(
                RefusalCode.LINEAGE_KEY_NOT_PINNED,
                f"lineage entry is signed by key {_clip(key_id, 80)}, which is not a registered producer key",
                "lineage.key_id",
                _clip(key_id),
            )
        producer, key = found
        refusal = _key_holder_refusal(producer, key, key_id, act["producer"]["id"], record.timestamp_ms, "lineage.key_id")
        if refusal is not None:
            return refusal
        if not verify_signature(key.public_key, lineage["signature"], lineage_signing_input(entry_bytes)):
            return _Refusal(RefusalCode.LINEAGE_SIGNATURE_INVALID, "lineage entry signature does not verify", "lineage.signature")
        if "browser" not in producer.agent_kinds:
            return _Refusal(
                RefusalCode.PRODUCER_ROLE_NOT_ALLOWED,
                f"producer {producer.name!r} is not granted agent kind 'browser' in the roles manifest",
                "kind",
                "browser",
                _clip(", ".join(sorted(producer.agent_kinds))),
                authenticated=True,  # the signature verified: only the grant is missing
            )
        return None

    # -- run close and seals ----------------------------------------------------

    def _run_close(self, state: SchedulerState, record: InputRecord, close: dict[str, Any], emit: _Emitter, schema: str) -> None:
        run_id = close["run_id"]
        if not is_valid_id(run_id):
            self._refuse(state, record, close, _invalid_id(RefusalCode.INVALID_RUN_ID, "run_id", run_id), emit)
            return
        refusal = _envelope_refusal(record, close, self.config.submission_partitions) or self._producer_refusal(
            record, close, schema, role=None
        )
        if refusal is None:
            refusal = self._close_refusal(state, run_id, close)
            refusal = None if refusal is None else replace(refusal, authenticated=True)
        if refusal is not None:
            self._refuse(state, record, close, refusal, emit)
            return
        closed_by = None
        if schema == codec.RUN_CLOSE_V2:
            closed_by = {
                "submission_id": close["submission_id"],
                "producer_id": close["producer"]["id"],
                "occurred_at_ms": close["occurred_at_ms"],
                "key_id": close["producer_key_id"],
                "signature": close["producer_signature"],
            }
        self._seal(state, record, emit, run_id, state.run_for(run_id), final=True, closed_by=closed_by)

    def _close_refusal(self, state: SchedulerState, run_id: str, close: dict[str, Any]) -> _Refusal | None:
        """The rules of a close from an authenticated producer: its run's owner, a run still open, not empty."""
        refusal = self._owner_refusal(run_id, close["producer"]["id"])
        if refusal is not None:
            return refusal
        run = state.runs.get(run_id)
        if run is not None and run.closed:
            return _Refusal(RefusalCode.RUN_CLOSED, f"run {run_id!r} is already closed and sealed", "run_id", run_id)
        if run is None or run.entry_count == 0:  # nothing to seal: a close makes no state (or seal) out of nothing
            return _Refusal(
                RefusalCode.RUN_EMPTY,
                f"run {run_id!r} has no journal entry to seal; close a run after its first stage",
                "run_id",
                run_id,
            )
        return None

    def _seal(
        self,
        state: SchedulerState,
        record: InputRecord,
        emit: _Emitter,
        run_id: str,
        run: RunState,
        *,
        final: bool,
        closed_by: dict[str, Any] | None = None,
    ) -> None:
        payload = self._codec.encode(
            codec.RUN_SEAL_V2,
            {
                "run_id": run_id,
                "partition": state.partition,
                "entry_count": run.entry_count,
                "head_hash": run.head,
                "last_input_offset": record.offset,
                "final": final,
                "audit_seq": state.audit_seq,
                "audit_head": state.audit_head,
                "sealed_at_ms": record.timestamp_ms,
                "closed_by": closed_by,
            },
        )
        signer = self.config.seal_key_at(record.timestamp_ms)
        value = self._codec.encode(
            codec.SEAL_RECORD,
            {"payload": payload, "key_id": signer.key_id, "signature": signer.sign(seal_signing_input(payload))},
        )
        emit.add(Stream.JOURNAL, run_id.encode(), value, b"bernstein.run.sealed")
        run.sealed_count = run.entry_count
        if final:
            run.close()  # keeps only what later refusals of the closed run need
            emit.final_sealed = True
            opened = state.open_runs.get(run.opened_by, 0)
            if opened > 1:
                state.open_runs[run.opened_by] = opened - 1
            elif opened == 1:
                del state.open_runs[run.opened_by]  # a producer without open runs takes no room
        self._audit(
            state,
            record,
            emit,
            event=AuditEvent.RUN_SEALED,
            run_id=run_id,
            stage_id="",
            kind="",
            terminal_state="",
            reason_code="final" if final else "periodic",
            artifact_hash="",
            evidence_set_hash="",
            record_hash=sha256_digest(value),
            journal_seq=run.entry_count,
        )

    # -- dead letters and audit -------------------------------------------------

    def _dead_letter(self, state: SchedulerState, record: InputRecord, emit: _Emitter, code: DeadLetterCode, detail: str) -> None:
        raw = record.value or b""
        key = _key_of(record)
        fields = {
            "code": code.value,
            "detail": _clip(detail, 1024),
            "raw_sha256": sha256_digest(raw),
            "raw_size": len(raw),
            "raw": raw if len(raw) <= _MAX_DEAD_LETTER_RAW else b"",
            "key": None if key is None else key[:MAX_KEPT_KEY_BYTES],
            "key_sha256": "" if key is None else sha256_digest(key),
            "key_size": 0 if key is None else len(key),
            "input": {"topic": record.topic, "partition": record.partition, "offset": record.offset},
            "record_timestamp_ms": record.timestamp_ms,
        }
        # keyed by the input key while it is small, else by nothing
        out_key = key if key is not None and len(key) <= MAX_KEPT_KEY_BYTES else b""
        value = self._codec.encode(codec.DEAD_LETTER_V2, fields)
        if fields["raw"] and emit.size(out_key, value, _CE_DEADLETTER) > emit.limit:
            value = self._codec.encode(codec.DEAD_LETTER_V2, {**fields, "raw": b""})  # by digest and size only
        emit.add(Stream.DEADLETTER, out_key, value, _CE_DEADLETTER)
        self._audit(
            state,
            record,
            emit,
            event=AuditEvent.INPUT_DEADLETTER,
            run_id="",
            stage_id="",
            kind="",
            terminal_state="",
            reason_code=code.value,
            artifact_hash="",
            evidence_set_hash="",
            record_hash=sha256_digest(raw),
            journal_seq=-1,
        )

    def _audit(
        self,
        state: SchedulerState,
        record: InputRecord,
        emit: _Emitter,
        *,
        event: AuditEvent,
        run_id: str,
        stage_id: str,
        kind: str,
        terminal_state: str,
        reason_code: str,
        artifact_hash: str,
        evidence_set_hash: str,
        record_hash: str,
        journal_seq: int,
        computer_use: dict[str, Any] | None = None,
    ) -> None:
        """Append one hash-only record to the partition's HMAC chain (v2 only for computer-use detail)."""
        fields = {
            "partition": state.partition,
            "seq": state.audit_seq,
            "prev_mac": state.audit_head,
            "event": event.value,
            "run_id": run_id,
            "stage_id": stage_id,
            "kind": kind,
            "terminal_state": terminal_state,
            "reason_code": reason_code,
            "artifact_hash": artifact_hash,
            "evidence_set_hash": evidence_set_hash,
            "record_hash": record_hash,
            "journal_seq": journal_seq,
            "input": {"topic": record.topic, "partition": record.partition, "offset": record.offset},
        }
        if computer_use is None:
            payload = self._codec.encode(codec.AUDIT_ENTRY, fields)
        else:
            payload = self._codec.encode(codec.AUDIT_ENTRY_V2, {**fields, "computer_use": computer_use})
        key = self.config.audit_key_at(record.timestamp_ms)
        mac = audit_record_mac(key.secret, key.key_id, payload)
        value = self._codec.encode(codec.AUDIT_RECORD_V2, {"key_id": key.key_id, "payload": payload, "mac": mac})
        emit.add(Stream.AUDIT, run_id.encode(), value, b"bernstein.audit." + event.value.encode())
        state.audit_seq += 1
        state.audit_head = mac

    # -- checkpoints --------------------------------------------------------------

    def _checkpoint_if_due(self, state: SchedulerState, record: InputRecord, emit: _Emitter) -> None:
        """The step's last output: a signed partition checkpoint, after a final seal or every ``checkpoint_every`` audit records."""
        if emit.final_sealed:
            reason = "final"
        elif state.audit_seq - state.checkpoint_audit_seq >= self.config.checkpoint_every:
            reason = "periodic"
        else:
            return
        payload = self._codec.encode(
            codec.PARTITION_CHECKPOINT,
            {
                "partition": state.partition,
                "seq": state.checkpoint_seq,
                "prev_hash": state.checkpoint_head,
                "input_topic": record.topic,
                "next_offset": record.offset + 1,
                "audit_seq": state.audit_seq,
                "audit_head": state.audit_head,
                "reason": reason,
                "checkpoint_every": self.config.checkpoint_every,
                "checkpointed_at_ms": record.timestamp_ms,
            },
        )
        signer = self.config.seal_key_at(record.timestamp_ms)
        value = self._codec.encode(
            codec.CHECKPOINT_RECORD,
            {"payload": payload, "key_id": signer.key_id, "signature": signer.sign(checkpoint_signing_input(payload))},
        )
        emit.add(Stream.CHECKPOINTS, str(state.partition).encode(), value, _CE_CHECKPOINT)
        state.checkpoint_seq += 1
        state.checkpoint_head = checkpoint_hash(payload)
        state.checkpoint_audit_seq = state.audit_seq


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


def _key_holder_refusal(
    producer: Producer, key: ProducerKey, key_id: str, producer_id: str, timestamp_ms: int, key_field: str
) -> _Refusal | None:
    """A registered key must sign for the producer it belongs to, inside its lifetime (submissions and lineage alike)."""
    if producer_id != producer.name:
        return _Refusal(
            RefusalCode.PRODUCER_MISMATCH,
            f"producer.id {producer_id!r} is not {producer.name!r}, the producer key {key_id} is registered to",
            "producer.id",
            producer_id,
            _clip(producer.name),
        )
    if not key.lifetime.contains(timestamp_ms):
        valid = _lifetime_text(key.lifetime.valid_from_ms, key.lifetime.valid_until_ms)
        return _Refusal(
            RefusalCode.PRODUCER_KEY_NOT_VALID,
            f"producer key {key_id} of {producer.name!r} signs inputs stamped {valid}; this input is stamped "
            f"{timestamp_ms} (retired, revoked or not yet valid)",
            key_field,
            str(timestamp_ms),
            valid,
        )
    return None


def _clip(value: object, limit: int = _MAX_EVIDENCE_CHARS) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _digest_or_empty(value: object) -> str:
    return value if isinstance(value, str) and is_digest(value) else ""


def _invalid_id(code: RefusalCode, field: str, value: object) -> _Refusal:
    return _Refusal(code, f"{field} {ID_RULE}", field, _clip(value))


def _envelope_refusal(record: InputRecord, item: dict[str, Any], partitions: int | None) -> _Refusal | None:
    """The fields every input record carries besides its ids: labels, time, the record key and its partition.

    ``item`` is an ActivitySubmission, ComputerUseAction or RunClose whose run_id is valid; ``partitions``
    the submissions topic's partition count (None: the partition is not checked).
    """
    submission_id = item["submission_id"]
    if not is_valid_label(submission_id):
        return _Refusal(RefusalCode.INVALID_SUBMISSION_ID, f"submission_id {LABEL_RULE}", "submission_id", _clip(submission_id))
    for name in ("id", "sdk"):
        value = item["producer"][name]
        if not is_valid_label(value):
            return _Refusal(RefusalCode.INVALID_PRODUCER, f"producer.{name} {LABEL_RULE}", f"producer.{name}", _clip(value))
    occurred_at_ms = item["occurred_at_ms"]
    if not 0 <= occurred_at_ms <= MAX_OCCURRED_AT_MS:
        return _Refusal(
            RefusalCode.INVALID_OCCURRED_AT,
            f"occurred_at_ms must be 0 to {MAX_OCCURRED_AT_MS} (1970-01-01 to 9999-12-31 UTC), got {occurred_at_ms}",
            "occurred_at_ms",
            str(occurred_at_ms),
            str(MAX_OCCURRED_AT_MS),
        )
    run_id: str = item["run_id"]
    expected = run_id.encode()
    key = _key_of(record)
    if key != expected:
        run_digest = sha256_digest(expected)
        if key is None:
            message = f"the record has no key; a record of run {run_id!r} ({run_digest}) must be keyed by its run id"
            declared = ""
        else:
            declared = sha256_digest(key)
            message = (
                f"the record key ({len(key)} bytes, {declared}) is not the run id {run_id!r} ({run_digest}): "
                "a record must be keyed by its run id"
            )
        return _Refusal(RefusalCode.RUN_KEY_MISMATCH, message, "key", declared, run_digest)
    if partitions is not None:
        return _partition_refusal(run_id, expected, record.partition, partitions)
    return None


def _partition_refusal(run_id: str, key: bytes, partition: int, partitions: int) -> _Refusal | None:
    """A record keyed by its run id sits on the partition Kafka's murmur2 partitioner gives that key, or is refused.

    Otherwise a producer on another partitioner (librdkafka's CRC-32 default) would split the run over
    several partitions, each with its own chain. Evidence: the record's partition (``declared``), the
    expected one (``recomputed``); the message names the partition count.
    """
    wanted = partition_for(key, partitions)
    if partition == wanted:
        return None
    return _Refusal(
        RefusalCode.WRONG_PARTITION,
        f"the record of run {run_id!r} is on partition {partition} of {partitions}, but its key belongs on partition "
        f"{wanted}: produce with Kafka's murmur2 partitioner, (murmur2(key) & 0x7fffffff) % {partitions}",
        "partition",
        str(partition),
        str(wanted),
    )


def _check_partitions(partitions: int | None) -> None:
    if partitions is not None and (type(partitions) is not int or partitions < 1):
        raise ValueError(f"submission_partitions must be None or at least 1, not {partitions!r}")


def _lifetime_text(valid_from_ms: int, valid_until_ms: int | None) -> str:
    """A key's validity range as a refusal shows it: ``[from, until)``, ``[from, )`` when open-ended."""
    return f"[{valid_from_ms}, {'' if valid_until_ms is None else valid_until_ms})"


def _key_of(record: InputRecord) -> bytes | None:
    """The record's key as bytes (Kafka's are; a str key, as a test may pass, counts as its UTF-8)."""
    key: object = record.key
    if key is None or type(key) is bytes:
        return key
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    return repr(key).encode()  # not a key Kafka could deliver; never fail on it


def _duplicate_submission(state: SchedulerState, item: dict[str, Any]) -> _Refusal | None:
    """A submission_id already journalled in the run: a retried publish is journalled once."""
    run = state.runs.get(item["run_id"])
    earlier = run.submissions.get(item["submission_id"]) if run is not None else None
    if earlier is None:
        return None
    return _Refusal(
        RefusalCode.DUPLICATE_SUBMISSION,
        f"submission_id {item['submission_id']!r} was already journalled in run {item['run_id']!r} (stage {earlier!r}); "
        "a repeated submission is journalled once",
        "submission_id",
        item["submission_id"],
        earlier_stage_id=earlier,
    )


def _occurred_at(item: dict[str, Any], record: InputRecord) -> int:
    """A refusal's occurred_at_ms: the item's when it is in range, else the input record's timestamp."""
    value = item.get("occurred_at_ms")
    return value if isinstance(value, int) and 0 <= value <= MAX_OCCURRED_AT_MS else record.timestamp_ms


def _too_large(code: RefusalCode, what: str, field: str, value: bytes, limit: int) -> _Refusal:
    """``value`` (the submission's ``field``) has more bytes than ``limit``."""
    return _Refusal(code, f"{what} has {len(value)} bytes; the limit is {limit}", field, str(len(value)), str(limit))


def _too_deep(field: str) -> _Refusal:
    return _Refusal(
        RefusalCode.JSON_TOO_DEEP,
        f"{field} nests JSON arrays and objects deeper than {MAX_JSON_DEPTH} levels",
        field,
        "",
        str(MAX_JSON_DEPTH),
    )


def _malformed_digest(field: str, value: object) -> _Refusal:
    return _Refusal(
        RefusalCode.MALFORMED_DIGEST,
        f"{field} is not of the form sha256:<64 lowercase hex>",
        field,
        _clip(value),
    )


def _observation_blobs(sub: dict[str, Any]) -> list[tuple[str, int]]:
    """(digest, declared size) of an ActivitySubmission.v2's observations, in order."""
    return [(o["content_hash"], o["size"]) for o in sub["observations"]]


def _action_blobs(act: dict[str, Any]) -> list[tuple[str, int]]:
    """(digest, declared size) of a ComputerUseAction.v2's screenshot and DOM snapshot."""
    return [(act["screenshot_hash"], act["screenshot_size"]), (act["dom_digest"], act["dom_size"])]


def _new_evidence(run: RunState | None, blobs: list[tuple[str, int]]) -> tuple[int, int]:
    """(bytes, blobs) that ``blobs`` add to the run: digests not counted yet, each once (its first size)."""
    seen: set[str] = set()
    added = count = 0
    for digest, size in blobs:
        if digest in seen or (run is not None and digest in run.blobs):
            continue
        seen.add(digest)
        added += size
        count += 1
    return added, count


def charge_evidence(run: RunState, blobs: list[tuple[str, int]]) -> None:
    """Count the blobs not counted yet (the step after acceptance; the rebuild from the journal)."""
    for digest, size in blobs:
        if digest not in run.blobs:
            run.blobs.add(digest)
            run.evidence_bytes += size


def _size_refusal(field: str, size: int) -> _Refusal | None:
    if 0 <= size <= MAX_RUN_EVIDENCE_BYTES:
        return None
    return _Refusal(
        RefusalCode.INVALID_EVIDENCE_SIZE,
        f"{field} must be 0 to {MAX_RUN_EVIDENCE_BYTES} bytes (the per-run evidence cap), got {size}",
        field,
        str(size),
        str(MAX_RUN_EVIDENCE_BYTES),
    )


def _cap_refusal(run_id: str, run: RunState | None, blobs: list[tuple[str, int]]) -> _Refusal | None:
    """The per-run evidence cap: the run's distinct blobs, with these, may hold at most MAX_RUN_EVIDENCE_BYTES."""
    before = run.evidence_bytes if run is not None else 0
    added, count = _new_evidence(run, blobs)
    total = before + added
    if total <= MAX_RUN_EVIDENCE_BYTES:
        return None
    return _Refusal(
        RefusalCode.EVIDENCE_CAP_EXCEEDED,
        f"run {run_id!r} would hold {total} bytes of evidence ({before} already, {added} in {count} new blobs); "
        f"the per-run cap is {MAX_RUN_EVIDENCE_BYTES}",
        "evidence",
        str(total),
        str(MAX_RUN_EVIDENCE_BYTES),
    )


def _undeclared_refusal(schema: str, what: str, field: str) -> _Refusal:
    """A v1 input that carries evidence without sizes: the per-run cap could not count it."""
    sized = codec.ACTIVITY_SUBMISSION_V2 if schema == codec.ACTIVITY_SUBMISSION else codec.COMPUTER_USE_ACTION_V2
    return _Refusal(
        RefusalCode.EVIDENCE_SIZES_UNDECLARED,
        f"this {schema} carries {what} without byte sizes, so the per-run evidence cap of {MAX_RUN_EVIDENCE_BYTES} "
        f"bytes cannot count them; publish {sized} with each blob's size",
        field,
        schema,
        sized,
    )


def _document_refusal(sub: dict[str, Any]) -> _Refusal | None:
    """The first research or data/ops document rule the submission breaks (``bernstein.schemas.documents.rules``)."""
    violation = record_violation(sub)
    if violation is None:
        return None
    return _Refusal(violation.code, violation.message, violation.field, violation.declared, violation.recomputed)
