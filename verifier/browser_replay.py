"""Deterministic replay of recorded browser sessions: re-hash, recompute, verify, compare with the signed head.

The verification side of the browser modality; the formats it reads (action
record, action log, session document, lineage entry) are
``bernstein.schemas.documents.browser``'s. The producer records, this module checks:
the offline verifier's browser check (``bernstein.verifier.checks.browser``), its
incomplete-session replay (``bernstein.verifier.verify``) and ``bernstein browser
replay`` all walk a session here.

``replay_run(run_id, source=..., cas=..., trusted=...)`` walks the run's
``ComputerUseEntry`` records from the journal (a ``RecordSource``: live
Kafka, a dump, a kcat file) and the CAS. It never re-runs the agent. For
every action, in journal order, it checks (the first failure names the step):

1. order: the action index is the next one (a gap is a deleted action, a
   repeat a duplicated or reordered one);
2. link: ``prev_anchor`` names the previous action's anchor (the session's
   genesis for action 0);
3. bytes: the pre-action screenshot and the snapshot are reattached from the
   CAS by hash (missing and changed are different reasons); the observation
   hash and the anchor are recomputed from the stored bytes and the recorded
   action;
4. lineage: the signed entry binds this action (anchor as content hash,
   prior anchor as parent, hashes, action), its key is pinned, its Ed25519
   signature verifies, and its HMAC envelope verifies when the audit key is
   pinned;
5. journal: the journal record's stored entry hash recomputes over its payload.

Then the walk is compared with the signed head: the session's browser
activity result (its artifact, reattached from the CAS by its journalled
hash) names the head anchor, the action count and every anchor. A journal
that lost its tail, gained actions, or never got a result fails here; this
is what a deleted trailing action cannot get past.

``replay_action_log`` runs the same walk over a session's action log (from
the artifact and the CAS alone); the verifier's browser check uses it.
Divergences name the first differing action index, the expected (signed)
and recomputed anchors and a stable reason.

A remote store that does not answer is an outage, never a divergence:
every replay reads through ``bernstein.verifier.blobs.FailFast``, so the first read that
gets no answer raises ``StoreUnavailable`` (``browser replay`` prints it as one
line, exit 3) and nothing more is asked. Only once a divergence was found from
bytes that were read does a later outage just mark the steps it stops (the
replay already fails on what it read).

``check_lineage`` is step 4 on its own: it re-parses a stored lineage entry,
checks the binding, the pinned key, the signature and (when the audit key is
pinned) the HMAC, and names the first failure with a stable code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Final

from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    canonical_json,
    is_digest,
    journal_entry_hash,
    lineage_hmac,
    lineage_signing_input,
    macs_equal,
    observation_hash,
    sha256_digest,
)
from bernstein.schemas.documents.browser import (
    Action,
    ActionLog,
    ActionRecord,
    LineageBinding,
    LineageEnvelope,
    MalformedSessionDocument,
    ObservationHashes,
    SessionDocument,
    parse_session_document,
)
from bernstein.schemas.documents.browser import anchor as compute_anchor
from bernstein.schemas.documents.browser import genesis as session_genesis
from bernstein.schemas.ed25519 import verify_signature
from bernstein.schemas.errors import BernsteinError, CanonicalizationError
from bernstein.schemas.records import ENTRY_COMPUTER_USE_ACTION
from bernstein.substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, CasError, DirBlobStore
from bernstein.substrate.keys import KeyPurpose, TrustedKeys
from bernstein.verifier.blobs import FailFast, StoreUnavailable

if TYPE_CHECKING:
    from bernstein.verifier.sources import RecordSource

_JOURNAL: Final = frozenset({codec.JOURNAL_RECORD, codec.SEAL_RECORD})
_ENTRIES: Final = codec.JOURNAL_ENTRIES | codec.COMPUTER_USE_ENTRIES


class ReplayNotFound(BernsteinError):
    """The run holds no computer-use session to replay (exit 1, not a tamper verdict)."""

    code: ClassVar[str] = "NO_BROWSER_SESSION"


# ---------------------------------------------------------------------------
# the signed lineage entry of one action
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LineageProblem:
    """The first way a stored lineage entry fails, with a stable code."""

    code: str
    message: str


class LineageCode:
    """Stable codes of lineage problems (the replay's divergence reasons reuse them)."""

    MALFORMED: Final = "lineage_malformed"
    MISMATCH: Final = "lineage_mismatch"
    ENTRY_HASH_MISMATCH: Final = "lineage_entry_hash_mismatch"
    UNPINNED_KEY: Final = "unpinned_key"
    SIGNATURE_INVALID: Final = "signature_invalid"
    HMAC_INVALID: Final = "hmac_invalid"
    KEY_PURPOSE_MISMATCH: Final = "key_purpose_mismatch"
    PRODUCER_NAME_MISMATCH: Final = "producer_name_mismatch"


@dataclass(frozen=True, slots=True)
class LineageVerdict:
    problem: LineageProblem | None
    hmac_checked: bool
    """False when the entry's audit key is not pinned (signature still checked)."""


def check_lineage(
    envelope: LineageEnvelope,
    binding: LineageBinding,
    *,
    trusted: TrustedKeys,
    recorded_entry_hash: str | None = None,
    observation: Mapping[str, str] | None = None,
    action: Action | None = None,
) -> LineageVerdict:
    """Verify a stored entry against the action it must bind, with pinned keys only.

    Order: canonical JSON -> binding (and, when given, the recorded
    observation hashes and action) -> recorded entry hash -> pinned key ->
    the key pinned as a producer key (or a v1 file's key of any purpose) ->
    registered to the entry's worker -> signature -> HMAC (only when the
    entry's audit key is pinned). The key's lifetime is the verifier's check
    (``bernstein.verifier.keyuse``, on the journal record's timestamp): an action log
    carries none.
    """
    try:
        entry = json.loads(envelope.entry)
        if not isinstance(entry, dict) or canonical_json(entry) != envelope.entry:
            raise ValueError("not canonical JSON")
    except (ValueError, UnicodeDecodeError, CanonicalizationError):
        return LineageVerdict(LineageProblem(LineageCode.MALFORMED, "lineage entry is not a canonical JSON object"), False)
    expected: dict[str, Any] = binding.required(envelope.key_id)
    if observation is not None:
        expected.update(observation)
    if action is not None:
        expected["action"] = action.to_record()
    for name, value in expected.items():
        if entry.get(name) != value:
            return LineageVerdict(
                LineageProblem(
                    LineageCode.MISMATCH,
                    f"lineage entry field {name!r} does not bind this action (entry has {_show(entry.get(name))}, "
                    f"the action {_show(value)})",
                ),
                False,
            )
    if recorded_entry_hash is not None and recorded_entry_hash != envelope.entry_hash:
        return LineageVerdict(
            LineageProblem(
                LineageCode.ENTRY_HASH_MISMATCH,
                f"lineage entry hashes to '{envelope.entry_hash}' but the record names '{recorded_entry_hash}'",
            ),
            False,
        )
    public = trusted.public_key(envelope.key_id)
    if public is None:
        return LineageVerdict(
            LineageProblem(
                LineageCode.UNPINNED_KEY,
                f"lineage entry is signed by key {envelope.key_id}, which is not pinned (--trusted-keys)",
            ),
            False,
        )
    pinned = trusted.entry(envelope.key_id)
    if pinned is not None and not pinned.allows(KeyPurpose.PRODUCER):
        return LineageVerdict(
            LineageProblem(
                LineageCode.KEY_PURPOSE_MISMATCH,
                f"lineage entry is signed by key {envelope.key_id}, pinned as a {pinned.purpose.value} key, "
                "not a producer key: one key, one purpose",
            ),
            False,
        )
    if pinned is not None and pinned.producer is not None and pinned.producer != binding.worker_id:
        return LineageVerdict(
            LineageProblem(
                LineageCode.PRODUCER_NAME_MISMATCH,
                f"lineage entry of worker {binding.worker_id!r} is signed by key {envelope.key_id}, which is "
                f"registered to {pinned.producer!r}",
            ),
            False,
        )
    if not verify_signature(public, envelope.signature, lineage_signing_input(envelope.entry)):
        return LineageVerdict(
            LineageProblem(
                LineageCode.SIGNATURE_INVALID, f"lineage signature does not verify against pinned key {envelope.key_id}"
            ),
            False,
        )
    hmac_key_id = entry.get("hmac_key_id")
    secret = trusted.audit_secret(hmac_key_id) if isinstance(hmac_key_id, str) else None
    if secret is None:
        return LineageVerdict(None, False)
    recomputed = lineage_hmac(secret, envelope.entry)
    if not macs_equal(recomputed, envelope.hmac):
        return LineageVerdict(
            LineageProblem(
                LineageCode.HMAC_INVALID, f"lineage HMAC envelope does not verify with pinned audit key {hmac_key_id}"
            ),
            True,
        )
    return LineageVerdict(None, True)


def _show(value: object) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 90 else text[:87] + "..."


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


# ---------------------------------------------------------------------------
# the walk
# ---------------------------------------------------------------------------


@dataclass
class _Fetched:
    data: bytes | None
    state: str
    """ok | missing | changed | unavailable"""
    actual: str = ""
    message: str = ""


@dataclass
class _Walker:
    run_id: str
    session_id: str
    cas: BlobStore
    trusted: TrustedKeys
    head: SignedHead | None
    steps: list[StepVerdict] = field(default_factory=list)
    divergence: ReplayDivergence | None = None
    hmac_unchecked: int = 0
    _blobs: dict[str, _Fetched] = field(default_factory=dict)

    def walk(self, inputs: Iterable[StepInput]) -> tuple[int, int, str]:
        """Walk every input; return (actions walked, the index after the last one, the last anchor)."""
        expected_index = 0
        prev = session_genesis(self.run_id, self.session_id)
        walked = 0
        for item in inputs:
            record = item.record
            if record.index < expected_index:
                self._fail(
                    record,
                    item,
                    DivergenceReason.ACTION_DUPLICATED,
                    f"action {record.index} appears again after action {expected_index - 1} ({item.where}): duplicated or reordered",
                    expected=self._signed_anchor(record.index),
                    recomputed=record.anchor,
                )
                continue
            gap = ""
            if record.index > expected_index:
                missing = (
                    f"action {expected_index}"
                    if record.index == expected_index + 1
                    else f"actions {expected_index}..{record.index - 1}"
                )
                gap = f"{missing} missing before this one ({item.where}): deleted from the record"
                prev = record.prev_anchor  # the gap is named once; judge this action on its own link
            walked += 1
            problem = self._step_problem(item, prev)
            if gap:
                also = f"; this action also fails: {problem[1]}" if problem is not None else ""
                self._fail(
                    record,
                    item,
                    DivergenceReason.ACTION_MISSING,
                    gap + also,
                    divergence_index=expected_index,
                    expected=self._signed_anchor(expected_index),
                    recomputed="",
                )
            elif problem is not None:
                reason, message, expected, recomputed = problem
                self._fail(record, item, reason, message, expected=expected, recomputed=recomputed)
            else:
                self.steps.append(StepVerdict(record.index, record.action.kind, True, record.anchor, where=item.where))
            expected_index = record.index + 1
            prev = record.anchor
        return walked, expected_index, prev

    def _step_problem(self, item: StepInput, prev: str) -> tuple[DivergenceReason, str, str, str] | None:
        record = item.record
        # 2. link
        if record.prev_anchor != prev:
            return (
                DivergenceReason.CHAIN_BREAK,
                f"chain break: prev_anchor does not name the previous action's anchor (expected '{prev}', found '{record.prev_anchor}')",
                prev,
                record.prev_anchor,
            )
        # 3. bytes and anchor
        shot = self._fetch(record.screenshot_hash)
        snap = self._fetch(record.dom_digest)
        recomputed = ""
        if shot.data is not None and snap.data is not None:
            observed = observation_hash(shot.data, sha256_digest(snap.data))
            recomputed = compute_anchor(record.prev_anchor, observed, record.action)
        else:
            observed = ""
        for fetched, what, missing_reason, changed_reason in (
            (shot, "screenshot", DivergenceReason.SCREENSHOT_MISSING, DivergenceReason.SCREENSHOT_CHANGED),
            (snap, "snapshot", DivergenceReason.SNAPSHOT_MISSING, DivergenceReason.SNAPSHOT_CHANGED),
        ):
            digest = record.screenshot_hash if what == "screenshot" else record.dom_digest
            if fetched.state == "missing":
                return (
                    missing_reason,
                    f"{what} bytes missing from the store ({digest}): the anchor cannot be recomputed",
                    record.anchor,
                    "",
                )
            if fetched.state == "unavailable":
                return DivergenceReason.STORE_UNAVAILABLE, f"{what} bytes unreadable: {fetched.message}", record.anchor, ""
            if fetched.state == "changed":
                shown = f"'{recomputed}'" if recomputed else f"unknown: the bytes under {digest} now hash to '{fetched.actual}'"
                return (
                    changed_reason,
                    f"{what} bytes changed: anchor mismatch (expected '{record.anchor}', recomputed {shown})",
                    record.anchor,
                    recomputed,
                )
        if observed != record.observation_hash:
            return (
                DivergenceReason.OBSERVATION_MISMATCH,
                f"recorded observation hash '{record.observation_hash}' does not match the stored bytes ('{observed}'): "
                "the record was changed",
                record.anchor,
                recomputed,
            )
        if recomputed != record.anchor:
            return (
                DivergenceReason.ANCHOR_MISMATCH,
                f"anchor mismatch: the recorded action does not recompute its anchor (expected '{record.anchor}', "
                f"recomputed '{recomputed}'): the record was changed",
                record.anchor,
                recomputed,
            )
        # 4. lineage
        verdict = check_lineage(
            record.lineage,
            LineageBinding(self.run_id, self.session_id, record.index, record.anchor, record.prev_anchor, item.worker_id),
            trusted=self.trusted,
            recorded_entry_hash=item.recorded_entry_hash,
            observation={
                "observation_hash": record.observation_hash,
                "screenshot_hash": record.screenshot_hash,
                "dom_digest": record.dom_digest,
            },
            action=record.action,
        )
        if verdict.problem is not None:
            return DivergenceReason(verdict.problem.code), verdict.problem.message, record.anchor, ""
        if not verdict.hmac_checked:
            self.hmac_unchecked += 1
        # 5. journal record
        if item.journal_problem:
            return DivergenceReason.JOURNAL_RECORD_EDITED, item.journal_problem, record.anchor, ""
        signed = self._signed_anchor(record.index)
        if self.head is not None and record.index < len(self.head.anchors) and signed != record.anchor:
            return (
                DivergenceReason.ANCHOR_LIST_MISMATCH,
                f"the session result lists anchor '{signed}' for this action, the record holds '{record.anchor}'",
                signed,
                record.anchor,
            )
        return None

    def _signed_anchor(self, index: int) -> str:
        if self.head is not None and 0 <= index < len(self.head.anchors):
            return self.head.anchors[index]
        return ""

    def _fail(
        self,
        record: ActionRecord,
        item: StepInput,
        reason: DivergenceReason,
        message: str,
        *,
        expected: str,
        recomputed: str,
        divergence_index: int | None = None,
    ) -> None:
        self.steps.append(StepVerdict(record.index, record.action.kind, False, record.anchor, reason, message, item.where))
        if self.divergence is None:
            index = record.index if divergence_index is None else divergence_index
            self.divergence = ReplayDivergence(index, expected, recomputed, reason, message)

    def _fetch(self, digest: str) -> _Fetched:
        cached = self._blobs.get(digest)
        if cached is None:
            try:
                cached = _fetch(self.cas, digest)
            except StoreUnavailable as exc:
                if self.divergence is None:
                    raise  # nothing judged yet: the outage is the answer, never a divergence
                cached = _Fetched(None, "unavailable", message=exc.message)  # the replay already fails on bytes read
            self._blobs[digest] = cached
        return cached

    # -- the signed head ---------------------------------------------------------

    def compare_head(self, walked_next: int, last: str, head_problem: HeadProblem | None) -> str:
        """Compare the walk with the signed head; return the ``head ...`` line."""
        head = self.head
        if head is None:
            problem = head_problem or HeadProblem(
                DivergenceReason.NO_SESSION_RESULT,
                f"no browser result of session {self.session_id!r} names its head: the session never ended, "
                "or its result was deleted; its actions cannot be vouched for",
            )
            self._diverge(walked_next, "", last, problem.reason, problem.message)
            return f"head FAIL -- {problem.message}"
        if len(head.anchors) != head.action_count or head.head_anchor != (
            head.anchors[-1] if head.anchors else session_genesis(self.run_id, self.session_id)
        ):
            message = (
                f"the session result is inconsistent: it names {head.action_count} actions and head '{head.head_anchor}' "
                f"but lists {len(head.anchors)} anchors"
            )
            self._diverge(walked_next, head.head_anchor, last, DivergenceReason.HEAD_MISMATCH, message)
            return f"head FAIL -- {message}"
        if walked_next < head.action_count:
            missing = (
                f"action {walked_next}"
                if head.action_count == walked_next + 1
                else f"actions {walked_next}..{head.action_count - 1}"
            )
            message = (
                f"the signed head names {head.action_count} actions (head '{head.head_anchor}') but the record holds "
                f"{walked_next}: {missing} missing (tail deleted)"
            )
            self._diverge(walked_next, head.anchors[walked_next], "", DivergenceReason.TRUNCATED_TAIL, message)
            return f"head FAIL -- {message}"
        if walked_next > head.action_count:
            message = (
                f"the record holds {walked_next} actions but the signed head names {head.action_count} "
                f"(head '{head.head_anchor}'): actions from {head.action_count} on were never vouched for"
            )
            self._diverge(head.action_count, head.head_anchor, last, DivergenceReason.EXTRA_ACTIONS, message)
            return f"head FAIL -- {message}"
        if last != head.head_anchor:
            message = f"head mismatch: the signed head is '{head.head_anchor}', the record ends at '{last}'"
            self._diverge(max(walked_next - 1, 0), head.head_anchor, last, DivergenceReason.HEAD_MISMATCH, message)
            return f"head FAIL -- {message}"
        line = f"head OK {head.action_count} action{'' if head.action_count == 1 else 's'}, head {head.head_anchor}"
        if head.final is None:
            return line
        final_problem = self._final_problem(head.final)
        if final_problem is not None:
            final_reason, message = final_problem
            self._diverge(head.action_count, head.head_anchor, "", final_reason, message)
            return f"head FAIL -- {message}"
        return line + ", final observation re-hashed"

    def _final_problem(self, final: ObservationHashes) -> tuple[DivergenceReason, str] | None:
        shot = self._fetch(final.screenshot_hash)
        snap = self._fetch(final.dom_digest)
        for fetched, what, digest in ((shot, "screenshot", final.screenshot_hash), (snap, "snapshot", final.dom_digest)):
            if fetched.state in ("missing", "unavailable"):
                return DivergenceReason.FINAL_OBSERVATION_MISSING, f"final {what} bytes missing from the store ({digest})"
            if fetched.state == "changed":
                return (
                    DivergenceReason.FINAL_OBSERVATION_CHANGED,
                    f"final {what} bytes changed (pinned '{digest}', recomputed '{fetched.actual}')",
                )
        assert shot.data is not None and snap.data is not None
        recomputed = observation_hash(shot.data, sha256_digest(snap.data))
        if recomputed != final.observation_hash:
            return (
                DivergenceReason.FINAL_OBSERVATION_CHANGED,
                f"final observation hash mismatch (recorded '{final.observation_hash}', recomputed '{recomputed}')",
            )
        return None

    def _diverge(self, index: int, expected: str, recomputed: str, reason: DivergenceReason, message: str) -> None:
        if self.divergence is None:
            self.divergence = ReplayDivergence(index, expected, recomputed, reason, message)

    def result(self, walked: int, last: str, head_line: str, notes: Sequence[str] = ()) -> ReplayResult:
        extra = list(notes)
        if self.hmac_unchecked:
            # a producer's own lineage key is never exported: its pinned signature binds the entry
            extra.append(f"lineage HMACs not verified for {self.hmac_unchecked} action(s): their key is not a pinned audit key")
        return ReplayResult(
            ok=self.divergence is None,
            action_count=walked,
            head_anchor=last,
            divergence=self.divergence,
            steps=tuple(self.steps),
            run_id=self.run_id,
            session_id=self.session_id,
            signed_head=self.head.head_anchor if self.head is not None else "",
            signed_count=self.head.action_count if self.head is not None else None,
            head_line=head_line,
            notes=tuple(extra),
        )


def _fetch(cas: BlobStore, digest: str) -> _Fetched:
    """Reattach a blob; on an integrity failure keep the changed bytes when the store can give them."""
    try:
        data = cas.get(digest)
    except BlobNotFound:
        return _Fetched(None, "missing")
    except BlobIntegrityError as exc:
        return _Fetched(_changed_bytes(cas, digest, exc), "changed", actual=exc.actual)
    except CasError as exc:
        return _Fetched(None, "unavailable", message=exc.message)
    actual = sha256_digest(data)  # do not rely on the adapter having re-hashed
    if actual != digest:
        return _Fetched(data, "changed", actual=actual)
    return _Fetched(data, "ok")


def _changed_bytes(cas: BlobStore, digest: str, exc: BlobIntegrityError) -> bytes | None:
    """The bytes now stored under ``digest``, so the divergent anchor can be recomputed and shown."""
    data = getattr(exc, "data", None)
    if isinstance(data, bytes):
        return data
    if isinstance(cas, DirBlobStore):
        try:
            return cas.path_of(digest).read_bytes()
        except OSError:
            return None
    return None


def replay_steps(
    inputs: Iterable[StepInput],
    *,
    run_id: str,
    session_id: str,
    cas: BlobStore,
    trusted: TrustedKeys,
    head: SignedHead | None,
    head_problem: HeadProblem | None = None,
    notes: Sequence[str] = (),
) -> ReplayResult:
    """Walk recorded actions and compare them with the signed head (see the module docstring)."""
    walker = _Walker(run_id, session_id, _guarded(cas), trusted, head)
    walked, next_index, last = walker.walk(inputs)
    head_line = walker.compare_head(next_index, last, head_problem)
    return walker.result(walked, last, head_line, notes)


# ---------------------------------------------------------------------------
# from an action log (verifier check) and from the journal (replay_run)
# ---------------------------------------------------------------------------


def _guarded(cas: BlobStore) -> BlobStore:
    """``cas`` behind ``FailFast`` (a remote store's outage raises ``StoreUnavailable``; a local one is as it was)."""
    guarded = FailFast.wrap(cas)
    assert guarded is not None
    return guarded


def replay_action_log(document: SessionDocument, log: ActionLog, *, cas: BlobStore, trusted: TrustedKeys) -> ReplayResult:
    """Replay a session from its session document and action log (the artifact and the CAS alone)."""
    inputs = [
        StepInput(logged.record, logged.recorded_entry_hash, document.worker_id, f"action log #{position}")
        for position, logged in enumerate(log.actions)
    ]
    head: SignedHead | None = SignedHead(
        document.head_anchor, document.action_count, document.anchors, "session document", document.final_observation
    )
    problem = None
    if (log.run_id, log.session_id) != (document.run_id, document.session_id):
        problem = HeadProblem(
            DivergenceReason.HEAD_MISMATCH,
            f"the action log belongs to run {log.run_id!r} session {log.session_id!r}, not to this session",
        )
        head = None
    return replay_steps(
        inputs, run_id=document.run_id, session_id=document.session_id, cas=cas, trusted=trusted, head=head, head_problem=problem
    )


@dataclass
class _SessionRecords:
    inputs: list[StepInput] = field(default_factory=list)
    result_artifact: str | None = None
    result_where: str = ""


def step_input_from_entry(entry: dict[str, Any], *, where: str, journal_problem: str = "") -> StepInput:
    """A ``StepInput`` from a decoded ComputerUseEntry (journal) record."""
    lineage = LineageEnvelope(
        entry=entry["lineage_entry"],
        hmac=entry["lineage_hmac"],
        key_id=entry["lineage_key_id"],
        signature=entry["lineage_signature"],
    )
    record = ActionRecord(
        index=entry["action_index"],
        prev_anchor=entry["prev_anchor"],
        anchor=entry["anchor"],
        screenshot_hash=entry["screenshot_hash"],
        dom_digest=entry["dom_digest"],
        observation_hash=entry["observation_hash"],
        action=Action.from_record(entry["action"]),
        lineage=lineage,
    )
    return StepInput(record, entry["lineage_entry_hash"], entry["producer_id"], where, journal_problem)


def _collect(run_id: str, source: RecordSource) -> tuple[dict[str, _SessionRecords], list[str]]:
    c = codec.default_codec()
    key = run_id.encode()
    sessions: dict[str, _SessionRecords] = {}
    notes: list[str] = []
    for partition in source.partitions("journal"):
        for stored in source.records("journal", partition, headers=False):
            if stored.key != key:
                continue
            where = f"journal {stored.topic}[{stored.partition}]@{stored.offset}"
            try:
                envelope = c.decode(stored.value or b"", expect=_JOURNAL)
                if envelope.schema.name != codec.JOURNAL_RECORD:
                    continue
                payload: bytes = envelope.record["payload"]
                decoded = c.decode(payload, expect=_ENTRIES)
            except codec.DecodeError as exc:
                notes.append(f"{where} does not decode ({exc}); any action it held shows as missing")
                continue
            entry = decoded.record
            if entry["run_id"] != run_id:
                notes.append(f"{where} is keyed {run_id!r} but belongs to run {entry['run_id']!r}; ignored")
                continue
            if decoded.schema.name in codec.COMPUTER_USE_ENTRIES and entry["entry_type"] == ENTRY_COMPUTER_USE_ACTION:
                recomputed = journal_entry_hash(payload)
                problem = ""
                if recomputed != envelope.record["entry_hash"]:
                    problem = (
                        f"the journal record ({where}) was edited: its entry hash does not recompute "
                        f"(stored '{envelope.record['entry_hash']}', recomputed '{recomputed}')"
                    )
                item = step_input_from_entry(entry, where=where, journal_problem=problem)
                sessions.setdefault(entry["session_id"], _SessionRecords()).inputs.append(item)
            elif decoded.schema.name in codec.JOURNAL_ENTRIES and entry["kind"] == "browser":
                records = sessions.setdefault(entry["stage_id"], _SessionRecords())
                if records.result_artifact is None:
                    records.result_artifact = entry["artifact_hash"]
                    records.result_where = where
    return sessions, notes


def _signed_head(
    run_id: str, session_id: str, records: _SessionRecords, cas: BlobStore
) -> tuple[SignedHead | None, HeadProblem | None]:
    if records.result_artifact is None:
        return None, None
    artifact_hash = records.result_artifact
    where = records.result_where
    if not is_digest(artifact_hash):
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE, f"the session result ({where}) names a malformed artifact hash"
        )
    try:
        data = cas.get(artifact_hash)
    except BlobNotFound:
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE, f"the session result's artifact {artifact_hash} is missing from the store"
        )
    except BlobIntegrityError as exc:
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE,
            f"the session result's artifact changed in the store (pinned '{exc.expected}', recomputed '{exc.actual}')",
        )
    except CasError as exc:
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE, f"the session result's artifact is unreadable: {exc.message}"
        )
    try:
        document = parse_session_document(data)
    except MalformedSessionDocument as exc:
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE, f"the session result's artifact is malformed: {exc.message}"
        )
    if (document.run_id, document.session_id) != (run_id, session_id):
        return None, HeadProblem(
            DivergenceReason.HEAD_MISMATCH,
            f"the session result's document names run {document.run_id!r} session {document.session_id!r}",
        )
    return SignedHead(document.head_anchor, document.action_count, document.anchors, where, document.final_observation), None


def replay_sessions(run_id: str, *, source: RecordSource, cas: BlobStore, trusted: TrustedKeys) -> tuple[ReplayResult, ...]:
    """Replay every browser session of ``run_id`` (first-seen order); raises ``ReplayNotFound`` when there is none."""
    sessions, notes = _collect(run_id, source)
    if not sessions:
        raise ReplayNotFound(f"run {run_id!r} has no browser session in {source.describe()}")
    cas = _guarded(cas)  # one guard for every session: after an outage nothing more is asked
    results: list[ReplayResult] = []
    for session_id, records in sessions.items():
        try:
            results.append(_replay_one(run_id, session_id, records, cas, trusted, notes))
        except StoreUnavailable as exc:
            if all(result.ok for result in results):
                raise  # nothing judged wrong yet: the outage is the answer
            results.append(_not_replayed(run_id, session_id, exc))  # an earlier session's divergence still stands
    return tuple(results)


def _not_replayed(run_id: str, session_id: str, exc: StoreUnavailable) -> ReplayResult:
    """A session the store stopped answering for, after another session diverged on bytes that were read."""
    divergence = ReplayDivergence(0, "", "", DivergenceReason.STORE_UNAVAILABLE, f"not replayed: {exc.message}")
    return ReplayResult(False, 0, "", divergence, (), run_id=run_id, session_id=session_id, head_line="")


def replay_run(
    run_id: str,
    *,
    source: RecordSource,
    cas: BlobStore,
    trusted: TrustedKeys,
    session_id: str | None = None,
) -> ReplayResult:
    """Replay one browser session of ``run_id`` from the journal (``source``) and the CAS.

    ``source`` is a ``bernstein.verifier.sources.RecordSource``. With ``session_id``
    None the run must hold exactly one session. Raises ``ReplayNotFound``
    when the run (or the session) has no browser record at all.
    """
    sessions, notes = _collect(run_id, source)
    if session_id is None:
        if len(sessions) != 1:
            if not sessions:
                raise ReplayNotFound(f"run {run_id!r} has no browser session in {source.describe()}")
            raise ReplayNotFound(f"run {run_id!r} has {len(sessions)} browser sessions ({', '.join(sessions)}); name one")
        session_id = next(iter(sessions))
    records = sessions.get(session_id)
    if records is None:
        raise ReplayNotFound(f"run {run_id!r} has no browser session {session_id!r} in {source.describe()}")
    return _replay_one(run_id, session_id, records, _guarded(cas), trusted, notes)


def _replay_one(
    run_id: str, session_id: str, records: _SessionRecords, cas: BlobStore, trusted: TrustedKeys, notes: Sequence[str]
) -> ReplayResult:
    head, problem = _signed_head(run_id, session_id, records, cas)
    return replay_steps(
        records.inputs,
        run_id=run_id,
        session_id=session_id,
        cas=cas,
        trusted=trusted,
        head=head,
        head_problem=problem,
        notes=notes,
    )


def render_lines(result: ReplayResult) -> Iterator[str]:
    """The per-step lines and the head line of a replay, for a terminal."""
    for step in result.steps:
        yield step.line()
    if result.head_line:
        yield result.head_line
    for note in result.notes:
        yield f"note: {note}"
