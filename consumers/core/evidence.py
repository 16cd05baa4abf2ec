"""The per-run evidence cap: what a run's distinct blobs add up to, and the refusals that keep it bounded.

The step checks the cap last (``rules`` for a submission, ``validate`` for a computer-use action) and
charges a run once it accepted the input (``journal``); the rebuild (``bernstein.consumers.core.rebuild``)
charges a run from its journal with the same ``charge_evidence``, so both count alike. The rules are in
``bernstein.consumers.core.step``'s module doc ("The evidence cap").
"""

from __future__ import annotations

from typing import Any

from bernstein.consumers.core.model import RunState
from bernstein.consumers.core.refusal import _Refusal
from bernstein.schemas import codec
from bernstein.schemas.records import MAX_RUN_EVIDENCE_BYTES, RefusalCode

_SIZED_INPUTS = frozenset({codec.ACTIVITY_SUBMISSION_V2, codec.ACTIVITY_SUBMISSION_V3, codec.COMPUTER_USE_ACTION_V2})


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
