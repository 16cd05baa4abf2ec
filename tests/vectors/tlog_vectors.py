"""tlog.json: RFC 6962 trees, proofs and C2SP signed checkpoints made by our code, for other implementations to check.

    python -m tests.vectors.generate          # writes it with the other files (FILES["tlog.json"])

Everything here comes from ``bernstein.schemas.merkle`` (leaf and node hashes, roots, inclusion and
consistency proofs) and ``bernstein.schemas.notes`` (checkpoint bodies, Ed25519 signed notes,
cosignature/v1): the Go SDK's conformance runner (built on ``golang.org/x/mod/sumdb/note``,
``github.com/transparency-dev/merkle`` and ``github.com/transparency-dev/formats``) and the TypeScript
SDK's accept every case under ``accepted`` and refuse every case under ``refused``; each refused case is an accepted one with one thing changed, named in its ``why``.
The leaves are test bytes, not the journal's leaf encodings, and the origin an example's: what the
vectors pin is the tree and note arithmetic, which the scheduler's log uses unchanged.
"""

from __future__ import annotations

import hashlib
from typing import Any

from bernstein.schemas import merkle, notes

LEAF_COUNT = 13
CHECKPOINT_SIZES = (1, 2, 7, 8, 13)
INCLUSION = [(0, 1), (0, 2), (1, 2), (0, 7), (3, 7), (6, 7), (0, 8), (5, 8), (7, 8), (0, 13), (4, 13), (8, 13), (12, 13)]
CONSISTENCY = [(1, 2), (1, 8), (2, 7), (3, 7), (4, 8), (6, 8), (7, 8), (1, 13), (5, 13), (7, 13), (8, 13), (12, 13), (13, 13)]
ORIGIN = "bernstein.example/vectors/journal/0"
LOG_NAME = ORIGIN
WITNESS_NAME = "witness.bernstein.example"
COSIGNED_AT = 1767225600
"""The witness's cosignature timestamp (seconds), stated: never the clock."""


def _seed(label: str) -> bytes:
    return hashlib.sha256(f"bernstein tlog vectors: {label}".encode()).digest()


def _flip(data: bytes, position: int) -> bytes:
    flipped = bytearray(data)
    flipped[position] ^= 0x01
    return bytes(flipped)


def tlog_vectors() -> dict[str, Any]:
    log = notes.NoteSigner(LOG_NAME, notes.SIG_ED25519, _seed("log key"))
    witness = notes.NoteSigner(WITNESS_NAME, notes.SIG_COSIGNATURE_V1, _seed("witness key"))
    stranger = notes.NoteSigner(LOG_NAME, notes.SIG_ED25519, _seed("another key with the log's name"))
    leaves = [f"leaf {i}".encode() for i in range(LEAF_COUNT)]
    hashes = [merkle.leaf_hash(leaf) for leaf in leaves]
    roots = {size: merkle.root(hashes[:size]) for size in range(LEAF_COUNT + 1)}

    checkpoints = []
    for size in CHECKPOINT_SIZES:
        body = notes.Checkpoint(ORIGIN, size, roots[size]).body()
        signed = notes.sign_note(body, [log])
        cosigned = notes.add_signatures(signed, [witness.sign(body, timestamp=COSIGNED_AT)])
        checkpoints.append(
            {
                "size": size,
                "root_hex": roots[size].hex(),
                "body": body.decode(),
                "note": signed.decode(),
                "cosigned": cosigned.decode(),
            }
        )
    inclusion = [
        {
            "index": index,
            "size": size,
            "leaf_hash_hex": hashes[index].hex(),
            "root_hex": roots[size].hex(),
            "proof_hex": [h.hex() for h in merkle.inclusion_proof(hashes[:size], index)],
        }
        for index, size in INCLUSION
    ]
    consistency = [
        {
            "size1": size1,
            "size2": size2,
            "root1_hex": roots[size1].hex(),
            "root2_hex": roots[size2].hex(),
            "proof_hex": [h.hex() for h in merkle.consistency_proof(hashes[:size2], size1)],
        }
        for size1, size2 in CONSISTENCY
    ]
    assert all(_inclusion_holds(case) for case in inclusion) and all(_consistency_holds(case) for case in consistency)

    last = checkpoints[-1]
    body = last["body"].encode()
    refused_notes = [
        {"why": "one bit of the log's signature line flipped", "note": _flip(last["note"].encode(), -10).decode()},
        {"why": "the tree size changed under the log's signature", "note": last["note"].replace("\n13\n", "\n14\n", 1)},
        {"why": "signed by another key under the log's name", "note": notes.sign_note(body, [stranger]).decode()},
    ]
    refused_cosigned = [
        {
            "why": "the cosignature's timestamp changed",
            "note": notes.add_signatures(
                last["note"].encode(),
                [
                    notes.Signature(
                        WITNESS_NAME,
                        witness.key_id,
                        (COSIGNED_AT + 1).to_bytes(8, "big") + witness.sign(body, timestamp=COSIGNED_AT).signature[8:],
                    )
                ],
            ).decode(),
        },
    ]
    mid = inclusion[10]
    refused_inclusion = [
        {
            **mid,
            "why": "one bit of a proof hash flipped",
            "proof_hex": [_flip(bytes.fromhex(mid["proof_hex"][0]), 0).hex(), *mid["proof_hex"][1:]],
        },
        {**mid, "why": "the leaf index moved by one", "index": mid["index"] + 1},
        {**inclusion[12], "why": "the tree size grown by one", "size": inclusion[12]["size"] + 1},
        {**mid, "why": "a proof hash dropped", "proof_hex": mid["proof_hex"][:-1]},
    ]
    cons = consistency[9]
    refused_consistency = [
        {
            **cons,
            "why": "one bit of a proof hash flipped",
            "proof_hex": [_flip(bytes.fromhex(cons["proof_hex"][0]), 31).hex(), *cons["proof_hex"][1:]],
        },
        {**cons, "why": "the old root is another tree's", "root1_hex": roots[cons["size1"] - 1].hex()},
        {**cons, "why": "the old size moved by one", "size1": cons["size1"] + 1},
    ]
    for case in refused_inclusion:
        assert not _inclusion_holds(case), case["why"]
    for case in refused_consistency:
        assert not _consistency_holds(case), case["why"]
    return {
        "description": (
            "RFC 6962 / 9162 Merkle trees and C2SP signed checkpoints made by bernstein.schemas.merkle and "
            "bernstein.schemas.notes (tests/vectors/tlog_vectors.py), for other implementations to check: "
            "leaf_hash = SHA-256(0x00 || leaf), node = SHA-256(0x01 || left || right); roots[size] of the first size "
            "leaves; checkpoints in the tlog-checkpoint format signed by the log key (note) and also cosigned by "
            "the witness key (cosigned: cosignature/v1 at the stated timestamp); inclusion and consistency proofs "
            "as RFC 9162 defines them. Every accepted case verifies; every refused case is an accepted one with one "
            "thing changed (why) and does not. The Go SDK's conformance runner checks them with the "
            "transparency-dev and sumdb note libraries, the TypeScript SDK's with its own code (make test)."
        ),
        "log": {"name": LOG_NAME, "vkey": log.verifier.vkey, "ed25519_seed_hex": log.seed.hex()},
        "witness": {"name": WITNESS_NAME, "vkey": witness.verifier.vkey, "ed25519_seed_hex": witness.seed.hex()},
        "origin": ORIGIN,
        "cosigned_at": COSIGNED_AT,
        "leaves_hex": [leaf.hex() for leaf in leaves],
        "leaf_hashes_hex": [h.hex() for h in hashes],
        "roots_hex": [roots[size].hex() for size in range(LEAF_COUNT + 1)],
        "accepted": {"checkpoints": checkpoints, "inclusion": inclusion, "consistency": consistency},
        "refused": {
            "notes": refused_notes,
            "cosigned": refused_cosigned,
            "inclusion": refused_inclusion,
            "consistency": refused_consistency,
        },
    }


def _inclusion_holds(case: dict[str, Any]) -> bool:
    try:
        return merkle.verify_inclusion(
            bytes.fromhex(case["leaf_hash_hex"]),
            case["index"],
            case["size"],
            [bytes.fromhex(h) for h in case["proof_hex"]],
            bytes.fromhex(case["root_hex"]),
        )
    except merkle.MalformedProof:
        return False


def _consistency_holds(case: dict[str, Any]) -> bool:
    try:
        return merkle.verify_consistency(
            case["size1"],
            case["size2"],
            bytes.fromhex(case["root1_hex"]),
            bytes.fromhex(case["root2_hex"]),
            [bytes.fromhex(h) for h in case["proof_hex"]],
        )
    except merkle.MalformedProof:
        return False
