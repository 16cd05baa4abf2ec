"""A proof of one activity (``activity prove`` / ``verify-proof``) on runs written by the real scheduler core.

The proof is a C2SP tlog-proof whose extra data is the stage's journal record: checked with the pinned seal key
alone, it names what a flipped byte anywhere in it breaks, with the leaf index, and reattaches the evidence.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bernstein.commands.proofs import exit_code
from bernstein.schemas import merkle, notes
from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import CasUnavailable, DirBlobStore
from bernstein.substrate.keys import KeyPurpose, KeyStatus, TrustedKeys, init_keys
from bernstein.verifier.export import export_dump
from bernstein.verifier.proof import prove, verify_proof
from bernstein.verifier.proof_format import HEADER, ActivityProof, ProofUnavailable, parse_proof
from bernstein.verifier.tlog import journal_leaf
from tests.support.verdicts import RUN, Built, C, Writer
from tests.support.verdicts import build_checkpointed as build


def five_stages(w: Writer) -> None:
    """Five stages; with checkpoint_every 3 the checkpoints sign trees of 3 and 6 leaves (stages and periodic seals)."""
    for i in range(5):
        w.stage(RUN, f"stage-{i}")


def codes(text: bytes, b: Built, cas: DirBlobStore | None = None) -> list[tuple[str, int | None]]:
    return [(p.code, p.leaf_index) for p in verify_proof(text, b.trusted, cas).problems]


@pytest.fixture(name="made")
def _made(tmp_path: Path) -> tuple[Built, ActivityProof]:
    b = build(tmp_path, five_stages, checkpoint_every=3)
    return b, prove(b.source, RUN, "stage-1")


def test_a_proof_names_the_entry_its_leaf_and_the_newest_tree_head_that_covers_it(made: tuple[Built, ActivityProof]) -> None:
    b, proof = made
    text = proof.encode().encode()
    assert text.startswith(HEADER.encode() + b"\nextra ")
    leaves = [journal_leaf(C, r.value) for r in b.records("journal")]
    index = next(i for i, r in enumerate(b.records("journal")) if r.value == proof.record)
    assert proof.index == index == 1  # stage-0, then stage-1 (the periodic seal comes after stage-1)
    sizes = [C.decode(C.decode(r.value or b"").record["payload"]).record["tree_size"] for r in b.records("checkpoints")]
    assert sizes == [3, 6]  # the proof takes the newest: 6 leaves, a path of 3 hashes
    assert len(proof.path) == merkle.inclusion_proof_length(1, 6) == 3
    hashes = [merkle.leaf_hash(leaf) for leaf in leaves if leaf is not None]
    assert list(proof.path) == merkle.inclusion_proof(hashes[:6], 1)
    assert parse_proof(text) == proof
    report = verify_proof(text, b.trusted, b.store)
    assert report.problems == () and exit_code(report) == 0
    assert (report.run_id, report.stage_id, report.index, report.tree_size) == (RUN, "stage-1", 1, 6)
    newest = C.decode(C.decode(b.records("checkpoints")[1].value or b"").record["payload"]).record
    assert report.origin == f"bernstein/{newest['input_topic']}/0/e1" and report.root == newest["tree_root"]
    assert report.evidence_checked == 2 and set(report.evidence.values()) == {"verified"}
    assert report.producer == "verdicts@test" and report.producer_key_id.startswith("sha256:")


def test_one_flipped_byte_anywhere_is_a_named_mismatch_with_the_leaf_index(made: tuple[Built, ActivityProof]) -> None:
    b, proof = made
    # a path hash: the leaf no longer reaches the signed root
    path = list(proof.path)
    path[0] = bytes([path[0][0] ^ 1]) + path[0][1:]
    bent = ActivityProof(proof.record, proof.index, tuple(path), proof.note).encode().encode()
    assert codes(bent, b) == [("PROOF_INCLUSION_FAILED", 1)]
    # another index for the same entry and path
    moved = ActivityProof(proof.record, 2, proof.path, proof.note).encode().encode()
    assert codes(moved, b) == [("PROOF_INCLUSION_FAILED", 2)]
    # the checkpoint's root: its signature fails, so no pinned key signed it
    note = bytearray(proof.note)
    root_at = note.index(b"\n", note.index(b"\n") + 1) + 1
    note[root_at] = ord("A") if note[root_at] != ord("A") else ord("B")
    assert codes(ActivityProof(proof.record, proof.index, proof.path, bytes(note)).encode().encode(), b) == [
        ("PROOF_CHECKPOINT_NOT_SIGNED", None)
    ]
    # the entry's stored hash (the extra data): not the payload's, and then not the leaf either
    record = bytearray(proof.record)
    record[-3] ^= 1
    assert codes(ActivityProof(bytes(record), proof.index, proof.path, proof.note).encode().encode(), b) == [
        ("PROOF_ENTRY_HASH_MISMATCH", None)
    ]
    # the entry's payload: the producer's signature and the leaf both break
    record = bytearray(proof.record)
    at = bytes(record).index(b"stage-1")
    record[at + 6] = ord("9")
    assert codes(ActivityProof(bytes(record), proof.index, proof.path, proof.note).encode().encode(), b) == [
        ("PROOF_ENTRY_HASH_MISMATCH", None),
        ("PROOF_PRODUCER_SIGNATURE_INVALID", None),
        ("PROOF_INCLUSION_FAILED", 1),
    ]


def test_the_seal_key_must_be_pinned_and_the_evidence_must_reattach(made: tuple[Built, ActivityProof], tmp_path: Path) -> None:
    b, proof = made
    text = proof.encode().encode()
    others = TrustedKeys.from_install(init_keys(tmp_path / "other-keys"))
    found = [p.code for p in verify_proof(text, others).problems]
    assert found == ["PROOF_CHECKPOINT_NOT_SIGNED", "PROOF_PRODUCER_KEY_NOT_PINNED"]
    entry = C.decode(C.decode(proof.record).record["payload"]).record
    first = entry["observations"][0]["content_hash"]
    store = DirBlobStore(tmp_path / "copy")
    store.put(b.store.get(entry["observations"][1]["content_hash"]))
    report = verify_proof(text, b.trusted, store)
    assert [(p.code, p.expected) for p in report.problems] == [("PROOF_EVIDENCE_MISSING", first)]
    assert report.evidence[first] == "missing" and exit_code(report) == 2


def test_malformed_proofs_are_named_never_raised(made: tuple[Built, ActivityProof]) -> None:
    b, proof = made
    text = proof.encode()
    for bad in (
        b"",
        b"\xff\xfe",
        text.replace(HEADER, "c2sp.org/tlog-proof@v2").encode(),
        text.replace("index 1", "index 01").encode(),
    ):
        report = verify_proof(bad, b.trusted)
        assert [p.code for p in report.problems] == ["PROOF_MALFORMED"], bad[:40]
    not_an_entry = ActivityProof(b.records("journal")[2].value or b"", 1, proof.path, proof.note).encode().encode()
    assert [p.code for p in verify_proof(not_an_entry, b.trusted).problems][:1] == ["PROOF_ENTRY_UNDECODABLE"]
    assert base64.b64decode(text.split("\n")[1][6:]) == proof.record


def test_no_proof_before_a_signed_tree_head_covers_the_stage(tmp_path: Path) -> None:
    b = build(tmp_path, five_stages, checkpoint_every=3)
    with pytest.raises(ProofUnavailable, match="no signed checkpoint covers it yet") as late:
        prove(b.source, RUN, "stage-4")  # journalled after the last checkpoint
    assert not late.value.not_found
    with pytest.raises(ProofUnavailable, match="no journalled activity with stage id 'nope'") as missing:
        prove(b.source, RUN, "nope")
    assert missing.value.not_found


def test_the_commands_write_and_check_a_proof_from_a_dump(tmp_path: Path) -> None:
    b = build(tmp_path, five_stages, checkpoint_every=3)
    dump = tmp_path / "dump"
    export_dump(b.source, dump, cas=b.store, runs=None, trusted=None)
    trusted = tmp_path / "trusted.json"
    trusted.write_text(json.dumps(b.trusted.to_json()), encoding="utf-8")
    out = tmp_path / "stage-1.tlog-proof"
    bernstein = [sys.executable, "-m", "bernstein"]
    made = subprocess.run(
        [*bernstein, "activity", "prove", RUN, "stage-1", "--from", str(dump), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert "leaf 1, 3 path hashes" in made.stdout
    checked = subprocess.run(
        [*bernstein, "activity", "verify-proof", str(out), "--trusted-keys", str(trusted), "--cas", str(dump / "cas"), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    document = json.loads(checked.stdout)
    assert (document["verdict"], document["log"]["leaf_index"], document["log"]["tree_size"]) == ("verified", 1, 6)
    assert sorted(document["evidence"].values()) == ["verified", "verified"]
    out.write_bytes(out.read_bytes().replace(b"index 1", b"index 0"))
    bent = subprocess.run(
        [*bernstein, "activity", "verify-proof", str(out), "--trusted-keys", str(trusted)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bent.returncode == 2 and "MISMATCH PROOF_INCLUSION_FAILED -- leaf 0 " in bent.stdout
    late = subprocess.run(
        [*bernstein, "activity", "prove", RUN, "stage-4", "--from", str(dump), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert late.returncode == 5 and "no signed checkpoint covers it yet" in late.stderr


class _Store:
    """A content store answering with fixed bytes, or not at all (unit-test double of the CAS port)."""

    def __init__(self, answer: bytes | None) -> None:
        self.answer = answer

    def get(self, digest: str) -> bytes:
        if self.answer is None:
            raise CasUnavailable(f"the store did not answer for {digest}")
        return self.answer


def test_an_unreadable_checkpoint_another_partitions_log_and_changed_or_unreachable_evidence(
    made: tuple[Built, ActivityProof],
) -> None:
    b, proof = made
    garbage = ActivityProof(proof.record, proof.index, proof.path, b"not a note\n\nat all\n").encode().encode()
    assert codes(garbage, b) == [("PROOF_CHECKPOINT_UNDECODABLE", None)]
    # the same tree head, signed by the real seal key, under the origin of another partition's log
    body = notes.parse_checkpoint(notes.parse_note(proof.note).text)
    elsewhere = body.origin.rsplit("/", 2)[0] + "/9/e1"
    signer = b.keys.signer
    moved = notes.log_checkpoint_note(elsewhere, body.size, body.root_hash, signer.public_key_raw, signer.sign).encode()
    report = verify_proof(ActivityProof(proof.record, proof.index, proof.path, moved).encode().encode(), b.trusted)
    assert [(p.code, p.recomputed) for p in report.problems] == [("PROOF_ORIGIN_MISMATCH", elsewhere)]
    text = proof.encode().encode()
    changed = verify_proof(text, b.trusted, _Store(b"other bytes"))  # type: ignore[arg-type]
    assert [p.code for p in changed.problems] == ["PROOF_EVIDENCE_CHANGED", "PROOF_EVIDENCE_CHANGED"]
    assert changed.problems[0].recomputed == sha256_digest(b"other bytes") and exit_code(changed) == 2
    silent = verify_proof(text, b.trusted, _Store(None))  # type: ignore[arg-type]
    assert [p.code for p in silent.problems] == ["PROOF_EVIDENCE_UNAVAILABLE"] * 2
    assert exit_code(silent) == 3 and set(silent.evidence.values()) == {"unavailable"}


@pytest.mark.parametrize(
    "line",
    ["extra é", "index ²", "index ١", "index " + "9" * 5000, "index 18446744073709551615"],
)
def test_hostile_proof_text_is_malformed_never_an_exception(made: tuple[Built, ActivityProof], line: str) -> None:
    b, proof = made
    lines = proof.encode().split("\n")
    at = 1 if line.startswith("extra") else 2
    lines[at] = line
    assert [p.code for p in verify_proof("\n".join(lines).encode(), b.trusted).problems] == ["PROOF_MALFORMED"]


def test_a_revoked_seal_key_vouches_for_no_note_and_a_changed_blob_is_named(
    made: tuple[Built, ActivityProof], tmp_path: Path
) -> None:
    b, proof = made
    revoked = TrustedKeys.of(
        [replace(k, status=KeyStatus.REVOKED) if k.purpose == KeyPurpose.SEAL else k for k in b.trusted.entries.values()]
    )
    assert [p.code for p in verify_proof(proof.encode().encode(), revoked).problems] == ["PROOF_CHECKPOINT_NOT_SIGNED"]
    entry = C.decode(C.decode(proof.record).record["payload"]).record
    digest = entry["observations"][0]["content_hash"]
    path = tmp_path / "cas" / "sha256" / digest[7:9] / digest[7:]
    path.chmod(0o644)
    path.write_bytes(b"other bytes")
    report = verify_proof(proof.encode().encode(), b.trusted, DirBlobStore(tmp_path / "cas"))
    assert [(p.code, p.expected) for p in report.problems] == [("PROOF_EVIDENCE_CHANGED", digest)]
    assert report.problems[0].recomputed == sha256_digest(b"other bytes")
