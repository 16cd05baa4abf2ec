"""The signed lineage entry of one browser action, checked with pinned keys (step 4 of the replay).

``check_lineage`` is step 4 of ``bernstein.verifier.browser_replay`` on its own: it re-parses a stored lineage entry,
checks the binding, the pinned key, the signature and (when the audit key is
pinned) the HMAC, and names the first failure with a stable code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from bernstein.schemas.canonical import canonical_json, lineage_hmac, lineage_signing_input, macs_equal
from bernstein.schemas.documents.browser import Action, LineageBinding, LineageEnvelope
from bernstein.schemas.ed25519 import verify_signature
from bernstein.schemas.errors import CanonicalizationError
from bernstein.substrate.keys import KeyPurpose, TrustedKeys

# ---------------------------------------------------------------------------
# the signed lineage entry of one action
# ---------------------------------------------------------------------------


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
    KEY_PURPOSE_MISMATCH: Final = "key_purpose_mismatch"
    PRODUCER_NAME_MISMATCH: Final = "producer_name_mismatch"


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
    the key pinned as a producer key (or a v1 file's key of any purpose) ->
    registered to the entry's worker -> signature -> HMAC (only when the
    entry's audit key is pinned). The key's lifetime is the verifier's check
    (``bernstein.verifier.keyuse``, on the journal record's timestamp): an action log
    carries none.
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
    pinned = trusted.entry(envelope.key_id)
    if pinned is not None and not pinned.allows(KeyPurpose.PRODUCER):
        return LineageVerdict(
            LineageProblem(
                LineageCode.KEY_PURPOSE_MISMATCH,
                f"lineage entry is signed by key {envelope.key_id}, pinned as a {pinned.purpose.value} key, "
                "not a producer key: one key, one purpose",
            ),
            False,
        )
    if pinned is not None and pinned.producer is not None and pinned.producer != binding.worker_id:
        return LineageVerdict(
            LineageProblem(
                LineageCode.PRODUCER_NAME_MISMATCH,
                f"lineage entry of worker {binding.worker_id!r} is signed by key {envelope.key_id}, which is "
                f"registered to {pinned.producer!r}",
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
