"""Per-action hashes: the observation and the anchor that folds it into the session's chain.

    screenshot_hash  = sha256(pre-action screenshot bytes)
    dom_digest       = sha256(normalised snapshot bytes)
    observation_hash = sha256(screenshot bytes || dom_digest)
    anchor           = sha256(canonical({prev_anchor, observation_hash, action}))

The primitives live in ``schemas.canonical`` (the one module that owns hashed
bytes); this module only composes them, so the producer, the replay and the
verifier check compute every link the same way. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from producers.computer_use.boundary import Action
from schemas.canonical import action_anchor, computer_use_genesis, observation_hash, sha256_digest


@dataclass(frozen=True, slots=True)
class ObservationHashes:
    """The three hashes of one pre-action observation."""

    screenshot_hash: str
    dom_digest: str
    observation_hash: str


def observation_hashes(screenshot: bytes, snapshot: bytes) -> ObservationHashes:
    """Hash a pre-action observation (screenshot bytes, normalised snapshot bytes)."""
    dom_digest = sha256_digest(snapshot)
    return ObservationHashes(
        screenshot_hash=sha256_digest(screenshot),
        dom_digest=dom_digest,
        observation_hash=observation_hash(screenshot, dom_digest),
    )


def anchor(prev_anchor: str, observation: str, action: Action) -> str:
    """One link of the action chain."""
    return action_anchor(prev_anchor, observation, action.to_record())


def genesis(run_id: str, session_id: str) -> str:
    """The ``prev_anchor`` of a session's first action."""
    return computer_use_genesis(run_id, session_id)
