"""The stage rules: what an input must satisfy once its producer is authenticated.

``StageRules`` holds the checks ``SchedulerCore`` runs after a submission's signature verified
(``_validate_signed``: kind and role, terminal state and reason code, artifact and observations,
evidence-set hash, run closed, duplicate and redundant stage, the modality's rules, the evidence cap,
open runs; the order is in ``bernstein.consumers.core.step``'s module doc), and the rules a computer-use
action and a run close share with it: run ownership, open runs, a repeated submission_id. A separate
module because these rules read the configuration and the state and change neither: the step's
handlers (``journal``) call them, mostly through ``validate``, before anything is written.
"""

from __future__ import annotations

import json
from typing import Any

from bernstein.consumers.core.evidence import (
    _SIZED_INPUTS,
    _cap_refusal,
    _observation_blobs,
    _size_refusal,
    _undeclared_refusal,
)
from bernstein.consumers.core.model import RunState, SchedulerConfig, SchedulerState
from bernstein.consumers.core.refusal import _clip, _malformed_digest, _Refusal, _too_deep, _too_large
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    artifact_hash,
    canonical_json,
    computer_use_genesis,
    evidence_set_hash,
    is_digest,
    json_nesting_exceeds,
)
from bernstein.schemas.documents.rules import DOCUMENT_KINDS, record_violation
from bernstein.schemas.errors import CanonicalizationError
from bernstein.schemas.records import (
    BROWSER_SESSION_FORMAT,
    KINDS,
    MAX_INLINE_ARTIFACT_BYTES,
    MAX_KIND_LENGTH,
    MAX_OBSERVATIONS,
    MAX_REF_LENGTH,
    TERMINAL_STATES,
    RefusalCode,
    has_control,
    is_valid_reason_code,
)


class StageRules:
    """The rules of an authenticated input, a part of ``SchedulerCore`` (which sets ``config``)."""

    config: SchedulerConfig

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


def _document_refusal(sub: dict[str, Any]) -> _Refusal | None:
    """The first research or data/ops document rule the submission breaks (``bernstein.schemas.documents.rules``)."""
    violation = record_violation(sub)
    if violation is None:
        return None
    return _Refusal(violation.code, violation.message, violation.field, violation.declared, violation.recomputed)
