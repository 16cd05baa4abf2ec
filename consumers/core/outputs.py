"""The records a step writes besides journal entries: refusals, seals, dead letters, audit records, checkpoints.

``OutputRecords`` encodes each with the core's codec, signs or MACs it with the key the input's Kafka
timestamp chooses, and hands it to the step's emitter (``step._Emitter``, which bounds every output). Every
crossing is mirrored into the partition's hash-only HMAC audit chain (``_audit``), and a step's last output
may be a signed partition checkpoint (``_checkpoint_if_due``; docs/checkpoints.md). A separate module
because these are the bytes the verifier judges (``verifier/audit_chain.py``, ``verifier/checkpoints.py``)
and the native core reproduces (``native/src/core/outputs.rs``), whatever the input was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bernstein.consumers.core.model import InputRecord, RunState, SchedulerConfig, SchedulerState, Stream
from bernstein.consumers.core.refusal import _clip, _Refusal
from bernstein.consumers.core.validate import _key_of
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    DIGEST_PREFIX,
    audit_record_mac,
    checkpoint_hash,
    checkpoint_signing_input,
    is_digest,
    seal_signing_input,
    sha256_digest,
    tlog_origin,
    tlog_seal_leaf,
)
from bernstein.schemas.merkle import leaf_hash
from bernstein.schemas.notes import log_checkpoint_note
from bernstein.schemas.records import (
    KINDS,
    MAX_KEPT_KEY_BYTES,
    MAX_OCCURRED_AT_MS,
    TERMINAL_STATES,
    AuditEvent,
    DeadLetterCode,
    is_valid_id,
)

if TYPE_CHECKING:
    from bernstein.consumers.core.step import _Emitter

_MAX_DEAD_LETTER_RAW = 512 * 1024
_CE_DEADLETTER = b"bernstein.input.deadletter"
_CE_CHECKPOINT = b"bernstein.partition.checkpoint"


class OutputRecords:
    """The records besides journal entries, a part of ``SchedulerCore`` (which sets ``config`` and ``_codec``)."""

    config: SchedulerConfig
    _codec: codec.Codec

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

    # -- seals ------------------------------------------------------------------

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
        state.tree = state.tree.append(
            leaf_hash(tlog_seal_leaf(run_id, run.entry_count, run.head, record.offset, final, state.audit_head))
        )
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
        signer = self.config.seal_key_at(record.timestamp_ms)
        tree = state.tree
        root = tree.root()
        origin = tlog_origin(self.config.log_name, record.topic, state.partition, self.config.log_epoch)
        payload = self._codec.encode(
            codec.PARTITION_CHECKPOINT_V2,
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
                "tree_size": tree.size,
                "tree_root": DIGEST_PREFIX + root.hex(),
                "note": log_checkpoint_note(origin, tree.size, root, signer.public_key_raw, signer.sign),
            },
        )
        value = self._codec.encode(
            codec.CHECKPOINT_RECORD,
            {"payload": payload, "key_id": signer.key_id, "signature": signer.sign(checkpoint_signing_input(payload))},
        )
        emit.add(Stream.CHECKPOINTS, str(state.partition).encode(), value, _CE_CHECKPOINT)
        state.checkpoint_seq += 1
        state.checkpoint_head = checkpoint_hash(payload)
        state.checkpoint_audit_seq = state.audit_seq


def _digest_or_empty(value: object) -> str:
    return value if isinstance(value, str) and is_digest(value) else ""


def _occurred_at(item: dict[str, Any], record: InputRecord) -> int:
    """A refusal's occurred_at_ms: the item's when it is in range, else the input record's timestamp."""
    value = item.get("occurred_at_ms")
    return value if isinstance(value, int) and 0 <= value <= MAX_OCCURRED_AT_MS else record.timestamp_ms
