"""What a browser replay reads and reports: its inputs, the signed head, and its verdicts.

The types ``bernstein.verifier.browser_walk`` walks with and every caller of
``bernstein.verifier.browser_replay`` reads, apart from the walk itself so both can import them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bernstein.schemas.documents.browser import ActionRecord, ObservationHashes

# ---------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------


class DivergenceReason(StrEnum):
    """Why a replay diverged (stable; appended to, never renamed)."""

    ACTION_MISSING = "action_missing"
    ACTION_DUPLICATED = "action_duplicated"
    CHAIN_BREAK = "chain_break"
    SCREENSHOT_MISSING = "screenshot_missing"
    SCREENSHOT_CHANGED = "screenshot_changed"
    SNAPSHOT_MISSING = "snapshot_missing"
    SNAPSHOT_CHANGED = "snapshot_changed"
    STORE_UNAVAILABLE = "store_unavailable"
    OBSERVATION_MISMATCH = "observation_mismatch"
    ANCHOR_MISMATCH = "anchor_mismatch"
    LINEAGE_MALFORMED = "lineage_malformed"
    LINEAGE_MISMATCH = "lineage_mismatch"
    LINEAGE_ENTRY_HASH_MISMATCH = "lineage_entry_hash_mismatch"
    UNPINNED_KEY = "unpinned_key"
    SIGNATURE_INVALID = "signature_invalid"
    HMAC_INVALID = "hmac_invalid"
    JOURNAL_RECORD_EDITED = "journal_record_edited"
    ANCHOR_LIST_MISMATCH = "anchor_list_mismatch"
    TRUNCATED_TAIL = "truncated_tail"
    EXTRA_ACTIONS = "extra_actions"
    HEAD_MISMATCH = "head_mismatch"
    NO_SESSION_RESULT = "no_session_result"
    SESSION_RESULT_UNREADABLE = "session_result_unreadable"
    FINAL_OBSERVATION_MISSING = "final_observation_missing"
    FINAL_OBSERVATION_CHANGED = "final_observation_changed"
    KEY_PURPOSE_MISMATCH = "key_purpose_mismatch"
    PRODUCER_NAME_MISMATCH = "producer_name_mismatch"


@dataclass(frozen=True, slots=True)
class ReplayDivergence:
    """The first place a replay differs from the record: which action, which anchors, why."""

    action_index: int
    expected_anchor: str
    """The anchor the signed record holds (or the anchor a link should name)."""
    recomputed_anchor: str
    """What replay recomputed or found ("" when nothing could be recomputed, e.g. missing bytes)."""
    reason: DivergenceReason
    message: str = ""

    def describe(self) -> str:
        """``diverged at action 2 (screenshot_changed): <message>``."""
        return f"diverged at action {self.action_index} ({self.reason.value}): {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "action_index": self.action_index,
            "expected_anchor": self.expected_anchor,
            "recomputed_anchor": self.recomputed_anchor,
            "reason": self.reason.value,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """One replayed action."""

    index: int
    kind: str
    ok: bool
    anchor: str
    reason: DivergenceReason | None = None
    message: str = ""
    where: str = ""

    def line(self) -> str:
        """``step OK index=0 navigate`` or ``step FAIL index=1 click -- <message>``."""
        if self.ok:
            return f"step OK index={self.index} {self.kind}"
        return f"step FAIL index={self.index} {self.kind} -- {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "ok": self.ok,
            "anchor": self.anchor,
            "reason": self.reason.value if self.reason else "",
            "message": self.message,
            "where": self.where,
        }


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A replayed session: ``ok`` only when every step and the signed head agree."""

    ok: bool
    action_count: int
    """Actions found and walked."""
    head_anchor: str
    """Anchor of the last walked action (the session's genesis when there is none)."""
    divergence: ReplayDivergence | None
    steps: tuple[StepVerdict, ...]
    run_id: str = ""
    session_id: str = ""
    signed_head: str = ""
    """The head anchor named by the session's result ("" when there is none)."""
    signed_count: int | None = None
    head_line: str = ""
    """``head OK ...`` / ``head FAIL ... -- ...``: the comparison with the signed head."""
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "action_count": self.action_count,
            "head_anchor": self.head_anchor,
            "signed_head": self.signed_head,
            "signed_count": self.signed_count,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "steps": [s.to_json() for s in self.steps],
            "head": self.head_line,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class StepInput:
    """One recorded action, from the journal or an action log, ready to be walked."""

    record: ActionRecord
    recorded_entry_hash: str
    worker_id: str
    where: str
    journal_problem: str = ""


@dataclass(frozen=True, slots=True)
class SignedHead:
    """What the session's result vouches for."""

    head_anchor: str
    action_count: int
    anchors: tuple[str, ...]
    where: str
    final: ObservationHashes | None = None
    """The frame the agent saw when it declared itself done, when the session recorded one."""


@dataclass(frozen=True, slots=True)
class HeadProblem:
    """Why there is no usable signed head."""

    reason: DivergenceReason
    message: str
