"""What an accepted input becomes: its run's journal entry, the run's state after it, its audit record.

``JournalEntries`` holds the step's handler of each input kind: ``_submission`` (an ActivitySubmission:
a JournalEntry.v3 chained onto its run's head), ``_computer_use_action`` (a ComputerUseAction: an entry
that also moves its session's anchor chain) and ``_run_close`` (a RunClose: the run's final seal). Each
validates first (``validate``) and refuses on the first broken rule (``outputs``); nothing changes
before the journal record is written, since it may be too large. A separate module because here an
input is accepted and its run moves on; the checks before it only read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bernstein.consumers.core.evidence import _SIZED_INPUTS, _action_blobs, _observation_blobs, charge_evidence
from bernstein.consumers.core.model import InputRecord, RunState, SchedulerState, SessionState, Stream
from bernstein.consumers.core.outputs import OutputRecords
from bernstein.consumers.core.refusal import _invalid_id
from bernstein.consumers.core.validate import InputValidation, _envelope_refusal
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    action_digest,
    computer_use_genesis,
    journal_entry_hash,
    journal_genesis,
    sha256_digest,
    tlog_entry_leaf,
)
from bernstein.schemas.merkle import leaf_hash
from bernstein.schemas.records import (
    ENTRY_ACTIVITY_RESULT,
    ENTRY_COMPUTER_USE_ACTION,
    AuditEvent,
    RefusalCode,
    is_valid_id,
)

if TYPE_CHECKING:
    from bernstein.consumers.core.step import _Emitter


class JournalEntries(InputValidation, OutputRecords):
    """The handler of each input kind, a part of ``SchedulerCore`` (``_dispatch`` picks one)."""

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
        state.tree = state.tree.append(leaf_hash(tlog_entry_leaf(run_id, seq, entry_hash)))

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

    @staticmethod
    def _opened(state: SchedulerState, run_id: str, producer_id: str) -> RunState:
        """The run an accepted record changes; a run it opens counts toward its producer's open runs."""
        new = run_id not in state.runs
        run = state.run_for(run_id)
        if new:
            run.opened_by = producer_id
            state.open_runs[producer_id] = state.open_runs.get(producer_id, 0) + 1
        return run

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
        state.tree = state.tree.append(leaf_hash(tlog_entry_leaf(run_id, seq, entry_hash)))
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

    # -- run close ----------------------------------------------------------------

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
