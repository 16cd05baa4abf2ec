"""Ed25519 signature verification as a pure function (no key files, no I/O): the system's one rule.

Kept apart from ``bernstein.substrate.keys`` (which reads key files) so that the
scheduler's pure core and the offline verifier can check signatures without
importing anything that touches the filesystem.

The rule is ZIP 215 (the cofactored check Zcash and ``ed25519-zebra`` apply),
the same in this reference, in the scheduler's Rust core and in the verifier
(``native/src/ed25519.rs``):

- the public key ``A`` and the signature's ``R`` decode from any 32 bytes whose
  ``y`` (taken mod p) is on the curve: non-canonical encodings (``y >= p``, a
  sign bit on ``x = 0``) are accepted, and ``k`` hashes the bytes as given;
- ``S`` must be canonical (``S < L``);
- ``[8]([S]B - R - [k]A)`` is the identity, ``k = SHA-512(R || A || M) mod L``.

Why this rule and not RFC 8032's cofactorless one (OpenSSL's): a batch of
signatures can then be checked with one equation that decides exactly as the
single checks do, about half the work a signature, and no two cores can
disagree about a crafted signature with small-order components. Everything
the cofactorless check accepts, this accepts too (multiply its equation by 8),
so OpenSSL answers first and this module's arithmetic only runs for what
OpenSSL refuses: honest signatures cost what they did.
"""

from __future__ import annotations

import functools
import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
"""The order of the base point's subgroup."""
_D = -121665 * pow(121666, P - 2, P) % P
_SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = tuple[int, int, int, int]
"""Extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, xy = T/Z."""

IDENTITY: Point = (0, 1, 1, 0)


def add(p: Point, q: Point) -> Point:
    """Twisted Edwards addition (a = -1), complete: doubling and the identity need no special case."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * t1 * t2 * _D % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def negate(p: Point) -> Point:
    x, y, z, t = p
    return (-x % P, y, z, -t % P)


def multiply(scalar: int, p: Point) -> Point:
    result = IDENTITY
    while scalar:
        if scalar & 1:
            result = add(result, p)
        p = add(p, p)
        scalar >>= 1
    return result


def is_identity(p: Point) -> bool:
    x, y, z, _ = p
    return x % P == 0 and (y - z) % P == 0


def encode_point(p: Point) -> bytes:
    """The canonical encoding: ``y`` mod p, the sign of ``x`` in the top bit."""
    x, y, z, _ = p
    inverse = pow(z, P - 2, P)
    x, y = x * inverse % P, y * inverse % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def decode_point(encoded: bytes) -> Point | None:
    """ZIP 215 decoding: any 32 bytes whose ``y`` mod p has an ``x`` on the curve; None otherwise."""
    if len(encoded) != 32:
        return None
    raw = int.from_bytes(encoded, "little")
    sign = raw >> 255
    y = (raw & ((1 << 255) - 1)) % P
    u = (y * y - 1) % P
    v = (_D * y * y + 1) % P
    x2 = u * pow(v, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * _SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    if x & 1 != sign:
        x = -x % P  # on x = 0 this is 0 again: the sign bit is ignored (ZIP 215)
    return (x, y, 1, x * y % P)


BASE: Point = decode_point((4 * pow(5, P - 2, P) % P).to_bytes(32, "little"))  # type: ignore[assignment]


def zip215_verify(public_key_raw: bytes, signature: bytes, data: bytes) -> bool:
    """The ZIP 215 check itself, in Python integers (milliseconds: for what OpenSSL refused).

    Only ``bytes`` verify (a key handed over as another type never does, as with OpenSSL)."""
    if not all(isinstance(b, bytes) for b in (public_key_raw, signature, data)) or len(signature) != 64:
        return False
    a = decode_point(public_key_raw)
    r = decode_point(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a is None or r is None or s >= L:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public_key_raw + data).digest(), "little") % L
    residue = add(add(multiply(s, BASE), negate(r)), negate(multiply(k, a)))
    return is_identity(multiply(8, residue))


def weak_key(public_key_raw: bytes) -> str | None:
    """Why a public key must not be registered, or None for one ``[a]B`` can be.

    Pure and slow (two scalar multiplications in Python, about 2 ms), so answers are remembered for
    the few keys a process meets: a verifier checks the same pinned keys again and again.

    Under any Ed25519 rule a key of small order lets anyone sign for it, and under ZIP 215 a key
    with a small-order component verifies signatures its owner's secret did not make exactly; an
    honest key is the canonical encoding of a point of the base point's subgroup, so nothing else
    is accepted where keys are registered (a producer manifest)."""
    return _weak_key(public_key_raw) if isinstance(public_key_raw, bytes) else "names no point of the curve"


@functools.lru_cache(maxsize=4096)
def _weak_key(public_key_raw: bytes) -> str | None:
    point = decode_point(public_key_raw)
    if point is None:
        return "names no point of the curve"
    if encode_point(point) != public_key_raw:
        return "is not the canonical encoding of its point"
    if is_identity(multiply(8, point)):
        return "has small order (anyone could sign for it)"
    if not is_identity(multiply(L, point)):
        return "has a small-order component (not a key [a]B makes)"
    return None


def verify_signature(public_key_raw: bytes, signature: bytes, data: bytes) -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``data`` by ``public_key_raw`` (ZIP 215)."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key_raw).verify(signature, data)
    except (InvalidSignature, ValueError, TypeError):
        return zip215_verify(public_key_raw, signature, data)
    return True
