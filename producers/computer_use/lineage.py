"""Sealing the signed lineage entry of one action: HMAC-enveloped, Ed25519-signed, prior anchor as parent.

The entry format (``lineage_entry``), ``LineageEnvelope`` and
``LineageBinding`` live in ``schemas.documents.browser``; checking a stored
entry with pinned keys is the verifier's (``verifier.browser_replay.check_lineage``).
This module is the producer's one act on it: canonicalise the entry, envelope
it with the install's audit key (HMAC) and sign it with the install key. No
wall clock is in the entry, so the same action always seals to the same
bytes (and, Ed25519 being deterministic, the same signature). The HMAC and
the signature both cover ``PAE("bernstein/lineage-entry/v1", entry)``
(``schemas.canonical.lineage_signing_input``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.canonical import canonical_json, lineage_hmac, lineage_signing_input
from schemas.documents.browser import ARTEFACT_KIND, LINEAGE_FORMAT, LineageBinding, LineageEnvelope, lineage_entry
from substrate.keys import AuditKey, Ed25519Signer

__all__ = [
    "ARTEFACT_KIND",
    "LINEAGE_FORMAT",
    "LineageBinding",
    "LineageEnvelope",
    "lineage_entry",
    "seal_lineage",
]


def seal_lineage(entry: Mapping[str, Any], *, signer: Ed25519Signer, audit: AuditKey) -> LineageEnvelope:
    """Canonicalise, HMAC-envelope (audit key) and sign (install key) an entry."""
    data = canonical_json(dict(entry))
    return LineageEnvelope(
        entry=data,
        hmac=lineage_hmac(audit.secret, data),
        key_id=signer.key_id,
        signature=signer.sign(lineage_signing_input(data)),
    )
