"""The walk of one browser session: each action checked in order, then the signed head.

Steps 1-5 and the comparison with the signed head described in ``bernstein.verifier.browser_replay``,
over ``StepInput``s from either the journal or an action log, reading every blob through
``FailFast`` (``_guarded``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bernstein.schemas.canonical import observation_hash, sha256_digest
from bernstein.schemas.documents.browser import ActionRecord, LineageBinding, ObservationHashes
from bernstein.schemas.documents.browser import anchor as compute_anchor
from bernstein.schemas.documents.browser import genesis as session_genesis
from bernstein.substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, CasError, DirBlobStore
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.blobs import FailFast, StoreUnavailable
from bernstein.verifier.browser_lineage import check_lineage
from bernstein.verifier.browser_verdicts import (
    DivergenceReason,
    HeadProblem,
    ReplayDivergence,
    ReplayResult,
    SignedHead,
    StepInput,
    StepVerdict,
)

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
            # Not a gap: the lineage HMAC is the producer's own integrity check of its local lineage, keyed with a
            # lineage key that never leaves its host; a third party relies on the entry's Ed25519 signature by a
            # pinned producer key, verified above for every one of these (docs/computer_use.md, "Lineage HMAC").
            extra.append(
                f"lineage HMACs of {self.hmac_unchecked} action(s) are their producer's local check, by design "
                "(its lineage key never leaves the host); their pinned Ed25519 signatures verified"
            )
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


def _guarded(cas: BlobStore) -> BlobStore:
    """``cas`` behind ``FailFast`` (a remote store's outage raises ``StoreUnavailable``; a local one is as it was)."""
    guarded = FailFast.wrap(cas)
    assert guarded is not None
    return guarded
