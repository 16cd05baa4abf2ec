"""The seed's result contract: ``ActivityResult`` and its hashes, built on the producer side.

Every modality returns an ActivityResult: an artifact plus the hashes needed to
replay it. Hashes come from ``bernstein.schemas.canonical``; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bernstein.schemas.canonical import artifact_hash, canonical_json, content_hash, evidence_set_hash
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.records import (
    ID_RULE,
    MAX_INLINE_ARTIFACT_BYTES,
    ActivityKind,
    Observation,
    TerminalState,
    is_valid_id,
    is_valid_reason_code,
)


class ActivityRejected(BernsteinError):
    """A result that may not cross the activity boundary, refused before publishing.

    ``code`` is one of the scheduler's stable refusal codes (``RefusalCode``)
    or a modality's own (e.g. ``UNCITED_CLAIM``), and ``evidence`` holds what
    was declared and what was found.
    """

    code = "ACTIVITY_REJECTED"

    def __init__(self, message: str, *, code: str | None = None, evidence: dict[str, str] | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code  # type: ignore[misc]
        self.evidence = dict(evidence or {})


def require_valid_ids(*named: tuple[str, object], with_evidence: bool = False) -> None:
    """Refuse the first ``(name, value)`` that is not a valid id, as ``INVALID_<NAME>``.

    Every boundary that takes ids (emitter, browser session, data/ops activity)
    refuses them with the same code scheme and wording, so it lives here once.
    ``with_evidence`` also records the refused value under ``name``.
    """
    for name, value in named:
        if not is_valid_id(value):
            raise ActivityRejected(
                f"{name} {value!r} {ID_RULE}",
                code=f"INVALID_{name.upper()}",
                evidence={name: str(value)} if with_evidence else None,
            )


class ArtifactTooLarge(ActivityRejected):
    """The artifact exceeds the inline bound the scheduler accepts."""

    code = "ARTIFACT_TOO_LARGE"


def observe(kind: str, ref: str, data: bytes) -> Observation:
    """An Observation of ``data``, content-addressed now and sized; ``ref`` is provenance only."""
    return Observation(kind=kind, ref=ref, content_hash=content_hash(data), size=len(data))


def artifact_bytes(artifact: bytes | Any) -> bytes:
    """Artifact bytes: raw bytes as given, anything else as RFC 8785 canonical JSON."""
    if isinstance(artifact, (bytes, bytearray, memoryview)):
        return bytes(artifact)
    return canonical_json(artifact)


@dataclass(frozen=True)
class ActivityResult:
    """What an activity returns: the artifact and the hashes needed to replay it."""

    kind: ActivityKind
    artifact: bytes
    artifact_hash: str
    evidence_set_hash: str
    terminal_state: TerminalState
    reason_code: str
    observations: tuple[Observation, ...]

    @classmethod
    def build(
        cls,
        kind: ActivityKind | str,
        artifact: bytes | Any,
        observations: Sequence[Observation] = (),
        *,
        terminal_state: TerminalState | str = TerminalState.COMPLETED,
        reason_code: str = "ok",
    ) -> ActivityResult:
        """Compute both hashes; refuse a result the scheduler would refuse anyway."""
        try:
            kind = ActivityKind(kind)
        except ValueError:
            raise ActivityRejected(f"unknown activity kind {kind!r}", code="UNKNOWN_KIND") from None
        try:
            terminal_state = TerminalState(terminal_state)
        except ValueError:
            raise ActivityRejected(f"unknown terminal state {terminal_state!r}", code="UNKNOWN_TERMINAL_STATE") from None
        if not isinstance(reason_code, str) or reason_code.strip() == "":
            raise ActivityRejected("reason_code must not be empty", code="EMPTY_REASON_CODE")
        if not is_valid_reason_code(reason_code):
            raise ActivityRejected(
                "reason_code must be at most 128 characters without control characters", code="INVALID_REASON_CODE"
            )
        body = artifact_bytes(artifact)
        if len(body) > MAX_INLINE_ARTIFACT_BYTES:
            raise ArtifactTooLarge(
                f"artifact has {len(body)} bytes; the inline limit is {MAX_INLINE_ARTIFACT_BYTES} "
                "(store large evidence as observations and keep the artifact a small manifest of their hashes)",
                evidence={"size": str(len(body)), "limit": str(MAX_INLINE_ARTIFACT_BYTES)},
            )
        observations = tuple(observations)
        return cls(
            kind=kind,
            artifact=body,
            artifact_hash=artifact_hash(body),
            evidence_set_hash=evidence_set_hash(o.content_hash for o in observations),
            terminal_state=terminal_state,
            reason_code=reason_code,
            observations=observations,
        )
