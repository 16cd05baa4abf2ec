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
(``schemas.canonical.lineage_signing_input``).

``lineage_problem`` is the verifier side: it re-parses the stored bytes,
checks the binding, the pinned key, the signature and (when the audit key is
pinned) the HMAC, and names the first failure with a stable code.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from producers.computer_use.boundary import Action
from schemas.canonical import canonical_json, lineage_hmac, lineage_signing_input, macs_equal, sha256_digest
from schemas.ed25519 import verify_signature
from schemas.errors import CanonicalizationError
from substrate.keys import AuditKey, Ed25519Signer, TrustedKeys

LINEAGE_FORMAT: Final = "bernstein.lineage-entry/v1"
ARTEFACT_KIND: Final = "computer_use.action"


@dataclass(frozen=True, slots=True)
class LineageEnvelope:
    """The stored entry bytes with their HMAC envelope and signature."""

    entry: bytes
    hmac: str
    key_id: str
    signature: bytes

    @property
    def entry_hash(self) -> str:
        return sha256_digest(self.entry)

    def to_record(self) -> dict[str, Any]:
        """The Avro ``LineageEnvelope`` of a ComputerUseAction."""
        return {"entry": self.entry, "hmac": self.hmac, "key_id": self.key_id, "signature": self.signature}

    def to_json(self) -> dict[str, str]:
        """JSON form (action log): the entry as its exact text, the signature as base64."""
        return {
            "entry": self.entry.decode("utf-8"),
            "hmac": self.hmac,
            "key_id": self.key_id,
            "signature": base64.b64encode(self.signature).decode("ascii"),
        }

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> LineageEnvelope:
        """Parse the JSON form (raises ValueError / KeyError / TypeError on a malformed item)."""
        try:
            signature = base64.b64decode(str(item["signature"]), validate=True)
        except binascii.Error as exc:
            raise ValueError(f"lineage signature is not base64: {exc}") from exc
        return cls(
            entry=str(item["entry"]).encode("utf-8"), hmac=str(item["hmac"]), key_id=str(item["key_id"]), signature=signature
        )


@dataclass(frozen=True, slots=True)
class LineageBinding:
    """What an entry must bind: the action it is the lineage of."""

    run_id: str
    session_id: str
    action_index: int
    anchor: str
    prev_anchor: str
    worker_id: str

    def required(self, key_id: str) -> dict[str, Any]:
        """The fields the scheduler checks (``consumers.core.step._lineage_refusal``)."""
        return {
            "run_id": self.run_id,
            "session_id": self.session_id,
            "action_index": self.action_index,
            "content_hash": self.anchor,
            "parent_hashes": [self.prev_anchor],
            "worker_id": self.worker_id,
            "key_id": key_id,
        }


def lineage_entry(
    binding: LineageBinding,
    *,
    key_id: str,
    hmac_key_id: str,
    observation_hash: str,
    screenshot_hash: str,
    dom_digest: str,
    action: Action,
) -> dict[str, Any]:
    """The lineage entry document of one action (see the module docstring)."""
    return {
        **binding.required(key_id),
        "format": LINEAGE_FORMAT,
        "artefact_kind": ARTEFACT_KIND,
        "hmac_key_id": hmac_key_id,
        "observation_hash": observation_hash,
        "screenshot_hash": screenshot_hash,
        "dom_digest": dom_digest,
        "action": action.to_record(),
    }


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
