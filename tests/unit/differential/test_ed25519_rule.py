"""One Ed25519 rule (ZIP 215) in the Python reference, the Rust core alone, and the Rust core in batches.

``schemas/vectors/ed25519.json`` holds the cases where ZIP 215 and RFC 8032's cofactorless check
part ways (small-order and non-canonical points, a signer's torsion in R, a mixed-order key) and
the ordinary ones (honest, edited, S not canonical, points off the curve). Every verifier gives
every case its ``valid``, and a batch equation holds exactly when every signature in it is valid.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import bernstein_native as native
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bernstein.schemas.ed25519 import decode_point, encode_point, is_identity, multiply, verify_signature, zip215_verify
from tests.vectors.ed25519_cases import small_order_encodings

VECTORS = Path(__file__).resolve().parents[3] / "schemas" / "vectors" / "ed25519.json"
Case = tuple[str, bytes, bytes, bytes, bool]


def _cases() -> list[Case]:
    document = json.loads(VECTORS.read_text(encoding="utf-8"))
    return [
        (
            c["name"],
            bytes.fromhex(c["public_key_hex"]),
            bytes.fromhex(c["signature_hex"]),
            bytes.fromhex(c["message_hex"]),
            c["valid"],
        )
        for c in document["cases"]
    ]


CASES = _cases()


def _openssl_accepts(public: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def test_the_vectors_cover_what_the_rules_disagree_on() -> None:
    encodings = small_order_encodings()
    assert len(encodings) == 14 and len(set(encodings)) == 14
    points = [decode_point(e) for e in encodings]
    assert all(p is not None and is_identity(multiply(8, p)) for p in points)
    assert len({encode_point(p) for p in points if p is not None}) == 8
    non_canonical = [e for e, p in zip(encodings, points, strict=True) if p is not None and encode_point(p) != e]
    assert len(non_canonical) == 6
    refused_by_openssl = [name for name, a, s, m, valid in CASES if valid and not _openssl_accepts(a, s, m)]
    assert len(refused_by_openssl) > 150  # most small-order cases, the signer's torsion: the fallback is exercised
    assert "r_plus_torsion_by_signer" in refused_by_openssl
    assert {valid for *_, valid in CASES} == {True, False}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_verifier_gives_each_case_its_verdict(case: Case) -> None:
    _, public, signature, message, valid = case
    assert verify_signature(public, signature, message) is valid
    assert zip215_verify(public, signature, message) is valid  # the pure arithmetic alone, OpenSSL skipped
    assert native.ed25519_verify(public, signature, message) is valid


def test_batches_answer_as_single_checks_in_any_order() -> None:
    items = [(a, s, m) for _, a, s, m, _ in CASES]
    assert native.ed25519_verify_many(items) == [valid for *_, valid in CASES]
    shuffled = list(CASES)
    random.Random(215).shuffle(shuffled)
    assert native.ed25519_verify_many([(a, s, m) for _, a, s, m, _ in shuffled]) == [valid for *_, valid in shuffled]


def test_the_batch_equation_holds_exactly_when_every_signature_is_valid() -> None:
    valid = [(a, s, m) for _, a, s, m, ok in CASES if ok]
    assert native.ed25519_batch_equation(valid)
    for name, a, s, m, ok in CASES:
        if not ok:
            assert not native.ed25519_batch_equation([*valid[:40], (a, s, m), *valid[40:80]]), name


def test_honest_and_edited_signatures_agree_across_verifiers() -> None:
    rng = random.Random(8032)
    items: list[tuple[bytes, bytes, bytes]] = []
    for i in range(40):
        key = Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
        public = key.public_key().public_bytes_raw()
        message = rng.randbytes(rng.randrange(0, 300))
        signature = key.sign(message)
        items.append((public, signature, message))
        edited = bytearray(signature)
        edited[rng.randrange(64)] ^= 1 << rng.randrange(8)
        items.append((public, bytes(edited), message))
        items.append((public, signature, message + bytes([i])))
    expected = [verify_signature(*item) for item in items]
    assert expected == [i % 3 == 0 for i in range(len(items))]
    assert [native.ed25519_verify(*item) for item in items] == expected
    assert native.ed25519_verify_many(items) == expected


def test_arguments_that_are_not_bytes_never_verify() -> None:
    _, public, signature, message, _ = next(c for c in CASES if c[0] == "honest")
    assert verify_signature(public, signature, message)
    assert not verify_signature(public, None, message)  # type: ignore[arg-type]
    assert not verify_signature(public, signature, 7)  # type: ignore[arg-type]
    assert not verify_signature(public[:31], signature, message)
