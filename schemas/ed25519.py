"""Ed25519 signature verification as a pure function (no key files, no I/O).

Kept apart from ``substrate.keys`` (which reads key files) so that the
scheduler's pure core and the offline verifier can check signatures without
importing anything that touches the filesystem.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def verify_signature(public_key_raw: bytes, signature: bytes, data: bytes) -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``data`` by ``public_key_raw``."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key_raw).verify(signature, data)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True
