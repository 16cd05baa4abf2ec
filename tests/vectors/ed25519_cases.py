"""The cases of ``schemas/vectors/ed25519.json``: where ZIP 215 and RFC 8032's cofactorless check part ways.

Built from the curve's eight small-order points and their fourteen encodings
(six of them non-canonical), the way ZIP 215's own test set is, plus honest,
edited, malleated and mixed-order signatures from fixed seeds. Every verifier
of the system (``bernstein.schemas.ed25519``, the Rust core alone and in batches) must
give each case its ``valid``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from bernstein.schemas.ed25519 import BASE, IDENTITY, L, P, Point, add, decode_point, encode_point, is_identity, multiply

MESSAGE = b"bernstein/zip215 vectors"


def _order_eight() -> Point:
    """A point of order 8: [L] of a curve point leaves its torsion component."""
    y = 2
    while True:
        point = decode_point(y.to_bytes(32, "little"))
        if point is not None:
            torsion = multiply(L, point)
            if not is_identity(multiply(4, torsion)):
                return torsion
        y += 1


def small_order_encodings() -> list[bytes]:
    """The 14 encodings of the 8 small-order points: canonical, ``y + p`` where it fits, a sign bit on ``x = 0``."""
    generator = _order_eight()
    encodings: list[bytes] = []
    for i in range(8):
        canonical = encode_point(multiply(i, generator))
        encodings.append(canonical)
        raw = int.from_bytes(canonical, "little")
        y, sign = raw & ((1 << 255) - 1), raw >> 255
        x_is_zero = y in (1, P - 1)
        if x_is_zero:
            encodings.append((y | 1 << 255).to_bytes(32, "little"))
        if y + P < 1 << 255:
            encodings.append((y + P | sign << 255).to_bytes(32, "little"))
            if x_is_zero:
                encodings.append((y + P | 1 << 255).to_bytes(32, "little"))
    return encodings


def _secret(seed: bytes) -> tuple[int, bytes]:
    digest = hashlib.sha512(seed).digest()
    scalar = int.from_bytes(digest[:32], "little")
    scalar &= (1 << 254) - 8
    scalar |= 1 << 254
    return scalar, digest[32:]


def _sign(seed: bytes, message: bytes, *, public: bytes | None = None, r_torsion: Point = IDENTITY) -> tuple[bytes, bytes]:
    """RFC 8032 signing; under ``public`` when given (a key the secret does not match exactly), with
    ``r_torsion`` added to R when given (a signer's own small-order component)."""
    scalar, prefix = _secret(seed)
    public = public or encode_point(multiply(scalar, BASE))
    r = int.from_bytes(hashlib.sha512(prefix + message).digest(), "little") % L
    r_bytes = encode_point(add(multiply(r, BASE), r_torsion))
    k = int.from_bytes(hashlib.sha512(r_bytes + public + message).digest(), "little") % L
    return public, r_bytes + ((r + k * scalar) % L).to_bytes(32, "little")


def sign_with_torsion(seed: bytes, message: bytes) -> bytes:
    """An RFC 8032 signature by ``seed``'s key whose R carries a point of order 8: only its signer can make
    one, ZIP 215 accepts it, the cofactorless check (OpenSSL's) refuses it."""
    return _sign(seed, message, r_torsion=_order_eight())[1]


def _case(name: str, public: bytes, signature: bytes, message: bytes, valid: bool, why: str) -> dict[str, Any]:
    return {
        "name": name,
        "public_key_hex": public.hex(),
        "signature_hex": signature.hex(),
        "message_hex": message.hex(),
        "valid": valid,
        "why": why,
    }


def cases() -> list[dict[str, Any]]:
    encodings = small_order_encodings()
    found = [
        _case(
            f"small_order_a{a}_r{r}",
            a_bytes,
            r_bytes + bytes(32),
            MESSAGE,
            True,
            "A and R of small order, S = 0: [8]R = [8][k]A = 0",
        )
        for a, a_bytes in enumerate(encodings)
        for r, r_bytes in enumerate(encodings)
    ]
    seed = bytes(range(64, 96))
    public, signature = _sign(seed, MESSAGE)
    found.append(_case("honest", public, signature, MESSAGE, True, "RFC 8032 signature"))
    found.append(_case("message_edited", public, signature, MESSAGE + b"!", False, "another message"))
    s = int.from_bytes(signature[32:], "little")
    found.append(_case("s_not_canonical", public, signature[:32] + (s + L).to_bytes(32, "little"), MESSAGE, False, "S >= L"))
    torsion = _order_eight()
    r_point = decode_point(signature[:32])
    assert r_point is not None
    malleated = encode_point(add(r_point, torsion)) + signature[32:]
    found.append(
        _case("r_plus_torsion_by_another", public, malleated, MESSAGE, False, "R + T after signing: k hashes R, S no longer fits")
    )
    found.append(
        _case(
            "r_plus_torsion_by_signer",
            *_sign(seed, MESSAGE, r_torsion=torsion),
            MESSAGE,
            True,
            "R = [r]B + T (T of order 8), S = r + k a: [8]T = 0",
        )
    )
    y = 2
    while decode_point(y.to_bytes(32, "little")) is not None:
        y += 1
    off_curve = y.to_bytes(32, "little")
    found.append(_case("r_off_curve", public, off_curve + signature[32:], MESSAGE, False, "R names no curve point"))
    found.append(_case("a_off_curve", off_curve, signature, MESSAGE, False, "A names no curve point"))
    mixed = encode_point(add(decode_point(public) or IDENTITY, torsion))
    found.append(
        _case(
            "mixed_order_key",
            *_sign(seed, MESSAGE, public=mixed),
            MESSAGE,
            True,
            "A + T signed with A's secret: [8][k]T = 0",
        )
    )
    found.append(_case("short_signature", public, signature[:63], MESSAGE, False, "63 bytes"))
    return found
