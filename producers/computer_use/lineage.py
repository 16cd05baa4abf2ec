"""The signed lineage entry of one action: HMAC-enveloped, Ed25519-signed, prior anchor as parent.

Entry (canonical JSON; the scheduler requires the first seven fields to bind
the action it arrives with)::

    {"run_id", "session_id", "action_index",
     "content_hash": <anchor>, "parent_hashes": [<prev_anchor>],
     "worker_id", "key_id": <Ed25519 key id>,
     "format": "bernstein.lineage-entry/v1", "artefact_kind": "computer_use.action",
     "hmac_key_id": <audit key id>, "observation_hash", "screenshot_hash", "dom_digest",
     "action": {"kind", "target", "value_digest"}}

No wall clock is in the entry, so the same action always seals to the same
bytes (and, Ed25519 being deterministic, the same signature). The HMAC and
the signature both cover ``PAE("bernstein/lineage-entry/v1", entry)``
(``schemas.canonical.lineage_signing_input``). The entry format,
``LineageEnvelope`` and ``LineageBinding`` live in ``schemas.documents.browser``.

``check_lineage`` is the verifier side: it re-parses the stored bytes,
checks the binding, the pinned key, the signature and (when the audit key is
pinned) the HMAC, and names the first failure with a stable code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from schemas.canonical import canonical_json, lineage_hmac, lineage_signing_input, macs_equal
from schemas.documents.browser import ARTEFACT_KIND, LINEAGE_FORMAT, Action, LineageBinding, LineageEnvelope, lineage_entry
from schemas.ed25519 import verify_signature
from schemas.errors import CanonicalizationError
from substrate.keys import AuditKey, Ed25519Signer, TrustedKeys

__all__ = [
    "ARTEFACT_KIND",
    "LINEAGE_FORMAT",
    "LineageBinding",
    "LineageCode",
    "LineageEnvelope",
    "LineageProblem",
    "LineageVerdict",
    "check_lineage",
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
    signature -> HMAC (only when the entry's audit key is pinned).
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
