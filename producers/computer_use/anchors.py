"""Re-export of the per-action hashes from ``schemas.documents.browser`` (their one home)."""

from __future__ import annotations

from schemas.documents.browser import ObservationHashes, anchor, genesis, observation_hashes

__all__ = ["ObservationHashes", "anchor", "genesis", "observation_hashes"]
