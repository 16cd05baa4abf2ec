"""What every document module shares: the typed violation and bounded, printable values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bernstein.schemas.records import RefusalCode

MAX_SHOWN_CHARS: Final = 120
"""How much of one untrusted value a message quotes (messages stay bounded)."""
MAX_EVIDENCE_CHARS: Final = 256


@dataclass(frozen=True, slots=True)
class Violation:
    """The first rule a submission breaks, as the scheduler records it in a Refusal.

    ``field`` names where in the submission (``artifact`` or a path inside it,
    ``observations[3]``); ``declared`` is the offending value and
    ``recomputed`` what the rule expected ("" when there is nothing to show).
    Every string is bounded, so a hostile document cannot grow the record.
    """

    code: RefusalCode
    message: str
    field: str = "artifact"
    declared: str = ""
    recomputed: str = ""


@dataclass(frozen=True, slots=True)
class Submission:
    """The parts of an ActivitySubmission a document rule may read (its own bytes only)."""

    run_id: str
    stage_id: str
    kind: str
    terminal_state: str
    reason_code: str
    artifact: bytes
    observations: Sequence[Mapping[str, Any]]

    @property
    def observed_hashes(self) -> frozenset[str]:
        return frozenset(str(o.get("content_hash")) for o in self.observations)


def show(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """``repr`` of an untrusted value, clipped to ``limit`` characters (``...`` marks a cut)."""
    return clip(repr(value), limit)


def clip(text: str, limit: int = MAX_EVIDENCE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
