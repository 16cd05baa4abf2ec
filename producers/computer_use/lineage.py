"""Sealing the signed lineage entry of one action: HMAC-enveloped, Ed25519-signed, prior anchor as parent.

The entry format (``lineage_entry``), ``LineageEnvelope`` and
``LineageBinding`` live in ``bernstein.schemas.documents.browser``; checking a stored
entry with pinned keys is the verifier's (``bernstein.verifier.browser_replay.check_lineage``).
This module is the producer's one act on it: canonicalise the entry, envelope
it with the producer's lineage key (HMAC; the entry's ``hmac_key_id`` names it) and
sign it with the producer key (``bernstein keys init --producer``). Neither is a
scheduler key: the scheduler checks the signature against the manifest's registered
producer keys and does not check a producer's own envelope. No
wall clock is in the entry, so the same action always seals to the same
bytes (and, Ed25519 being deterministic, the same signature). The HMAC and
the signature both cover ``PAE("bernstein/lineage-entry/v1", entry)``
(``bernstein.schemas.canonical.lineage_signing_input``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bernstein.schemas.canonical import canonical_json, lineage_hmac, lineage_signing_input
from bernstein.schemas.documents.browser import ARTEFACT_KIND, LINEAGE_FORMAT, LineageBinding, LineageEnvelope, lineage_entry
from bernstein.substrate.keys import AuditKey, Ed25519Signer

__all__ = [
    "ARTEFACT_KIND",
    "LINEAGE_FORMAT",
    "LineageBinding",
    "LineageEnvelope",
    "lineage_entry",
    "seal_lineage",
]


def seal_lineage(entry: Mapping[str, Any], *, signer: Ed25519Signer, envelope_key: AuditKey) -> LineageEnvelope:
    """Canonicalise, HMAC-envelope (the producer's lineage key) and sign (the producer key) an entry."""
    data = canonical_json(dict(entry))
    return LineageEnvelope(
        entry=data,
        hmac=lineage_hmac(envelope_key.secret, data),
        key_id=signer.key_id,
        signature=signer.sign(lineage_signing_input(data)),
    )
