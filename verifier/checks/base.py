"""The contract between the verifier and a modality check.

The verifier reconstructs each ``activity.result`` entry (evidence set,
observation bytes, artifact bytes) and then hands the entry to the check
registered for its kind, which returns a ``ModalityVerdict``: extra notes for
the stage line (``2 citations resolved``, ``signed receipt verified``,
``5 steps replayed``), the first failure reason, and detail lines printed under
the stage (``    cite OK claim=c1 (1 checked)``). Checks are pure functions of
the entry, the reattached bytes and the pinned keys: no network, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from bernstein.substrate.cas import BlobStore
from bernstein.substrate.keys import TrustedKeys


@dataclass(frozen=True)
class DetailLine:
    """One line printed under a stage, already formatted without indentation.

    Example: ``cite OK claim=c1 (1 checked)`` or
    ``cite FAIL claim=c1 (0 checked) -- claim 'c1' citation failed: ...``.
    """

    text: str
    ok: bool
    data: Mapping[str, Any] = field(default_factory=dict)
    """The same facts, machine-readable, for the --json report."""


@dataclass(frozen=True)
class ModalityVerdict:
    ok: bool
    notes: tuple[str, ...] = ()
    """Appended to the stage's OK parentheses, e.g. ("signed receipt verified",)."""
    reason: str = ""
    """First failure, used in ``MISMATCH <stage> [<kind>] -- <reason>`` (empty when ok)."""
    details: tuple[DetailLine, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    """Extra machine-readable facts for the --json report."""
    unchecked: str = ""
    """Why the check could not be run at all (e.g. no content store); ``ok`` is then False. A check
    never returns ok when it could not reattach what it checks."""


@dataclass(frozen=True)
class CheckContext:
    """What a modality check may look at."""

    run_id: str
    stage_id: str
    kind: str
    entry: Mapping[str, Any]
    """The decoded JournalEntry (artifact_hash, observations, terminal_state, ...)."""
    artifact: bytes | None
    """The artifact bytes, reattached from the CAS and re-hashed; None when no CAS or missing."""
    artifact_problem: str
    """Why ``artifact`` is None ("" when it is present, or when no CAS was given)."""
    cas: BlobStore | None
    """The content store to reattach further blobs from (None when verifying without one)."""
    trusted: TrustedKeys
    """Pinned keys; a check must never trust a key found in the data it checks."""
    related_entries: tuple[tuple[int, Mapping[str, Any]], ...] = ()
    """(offset, decoded entry) of the run's other journal entries this stage owns: for a browser
    stage, the session's journalled computer_use.action entries, in journal order."""


def observed_hashes(entry: Mapping[str, Any]) -> frozenset[str]:
    """The content hashes of the entry's journalled observations.

    A check may only trust bytes the journal pinned for this stage; entries come
    decoded as mappings or as record objects, so both are read.
    """
    hashes: set[str] = set()
    for observation in entry.get("observations") or ():
        value = (
            observation.get("content_hash") if isinstance(observation, Mapping) else getattr(observation, "content_hash", None)
        )
        if isinstance(value, str):
            hashes.add(value)
    return frozenset(hashes)


class ModalityCheck(Protocol):
    """A per-kind check; register it in ``bernstein.verifier.checks.REGISTRY``."""

    def __call__(self, ctx: CheckContext) -> ModalityVerdict: ...
