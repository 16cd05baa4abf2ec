"""A proof of rewriting (``activity prove-rewriting`` / ``verify-rewriting``): two checkpoints a log signed that cannot
both be true, written as a small file anyone checks with the pinned seal key alone.

The pure part on trees of hashed bytes and real Ed25519 keys: the equal-size and the smaller-tree case (an old size
that is a power of two too), byte-identical round trips, and each refusal code from one changed byte or field. Then
the maker on runs written by the real scheduler core, where the log signs one more checkpoint over a forked tree,
and the commands on a whole-topic dump.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bernstein.commands.rewriting import exit_code
from bernstein.schemas import codec, merkle, notes
from bernstein.schemas.canonical import checkpoint_signing_input
from bernstein.substrate.keys import Ed25519Signer, KeyPurpose, KeyStatus, TrustedKey, TrustedKeys
from bernstein.verifier.export import export_dump
from bernstein.verifier.rewriting import prove_rewriting, verify_rewriting
from bernstein.verifier.rewriting_format import HEADER, NothingToProve, RewritingProof, parse_rewriting_proof
from bernstein.verifier.sources import StoredRecord
from bernstein.verifier.tlog import partition_leaf_hashes
from bernstein.verifier.witness.core import Witness, WitnessRefusal
from bernstein.verifier.witness.store import FileWitnessStore
from tests.support.verdicts import RUN, Built, C, Writer
from tests.support.verdicts import build_checkpointed as build

ORIGIN = "bernstein/mem.activity.submissions/0/e1"
SEAL = Ed25519Signer.from_seed(b"\x11" * 32)
STRANGER = Ed25519Signer.from_seed(b"\x22" * 32)
TRUSTED = TrustedKeys.of([TrustedKey(SEAL.key_id, KeyPurpose.SEAL, SEAL.public_key_raw)])
LEAVES = [merkle.leaf_hash(b"leaf %d" % i) for i in range(20)]
FORKED = [*LEAVES[:3], merkle.leaf_hash(b"another leaf 3"), *LEAVES[4:]]
"""The same log with leaf 3 replaced: every tree of more than 3 leaves has another root."""


def signed(size: int, leaves: list[bytes] = LEAVES, *, signer: Ed25519Signer = SEAL, origin: str = ORIGIN) -> bytes:
    return notes.log_checkpoint_note(origin, size, merkle.root(leaves[:size]), signer.public_key_raw, signer.sign).encode()


def rewriting(m: int, n: int, old: list[bytes] = FORKED, **options: Any) -> RewritingProof:
    """A's tree of m leaves from ``old``, B's of n from ``LEAVES``, and the path over B's leaves."""
    return RewritingProof(tuple(merkle.consistency_path(LEAVES[:n], m)), signed(m, old, **options), signed(n))


def codes(proof: RewritingProof | bytes, trusted: TrustedKeys = TRUSTED) -> list[str]:
    data = proof.encode().encode() if isinstance(proof, RewritingProof) else proof
    return [p.code for p in verify_rewriting(data, trusted).problems]


# -- the file and its check ------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "n"), [(7, 12), (8, 12), (4, 5), (1, 2), (12, 12), (5, 5)])
def test_two_inconsistent_signed_heads_are_proved_with_the_pinned_key_alone(m: int, n: int) -> None:
    proof = rewriting(m, n, FORKED if m > 3 else [merkle.leaf_hash(b"x")] * 20)
    text = proof.encode().encode()
    assert text.startswith(HEADER.encode() + b"\n")
    assert len(proof.path) == (0 if m == n else merkle.consistency_path_length(m, n))
    report = verify_rewriting(text, TRUSTED)
    assert report.problems == () and report.proved and exit_code(report) == 0
    assert (report.origin, report.old_size, report.new_size) == (ORIGIN, m, n)
    assert (report.old_key, report.new_key) == (SEAL.key_id, SEAL.key_id)
    assert report.new_root == "sha256:" + merkle.root(LEAVES[:n]).hex()
    assert report.derived_root == "sha256:" + merkle.root(LEAVES[:m]).hex() != report.old_root


def test_the_format_round_trips_byte_identically_and_frames_each_note_by_its_length() -> None:
    proof = rewriting(7, 12)
    text = proof.encode().encode()
    parsed, old, new = parse_rewriting_proof(text)
    assert parsed == proof and parsed.encode().encode() == text
    assert (old.size, new.size, old.origin) == (7, 12, ORIGIN)
    lines = text.split(b"\n")
    assert lines[1 : 1 + len(proof.path)] == [base64.b64encode(h) for h in proof.path]
    assert lines[1 + len(proof.path)] == b"" and lines[2 + len(proof.path)] == b"note %d" % len(proof.old_note)
    assert text.endswith(b"note %d\n" % len(proof.new_note) + proof.new_note)
    equal = rewriting(9, 9)
    assert equal.encode().startswith(HEADER + "\n\nnote ")
    assert parse_rewriting_proof(equal.encode().encode())[0].encode() == equal.encode()


def test_a_flipped_byte_in_a_path_hash_does_not_reproduce_the_larger_root() -> None:
    proof = rewriting(7, 12)
    for i in range(len(proof.path)):
        path = list(proof.path)
        path[i] = bytes([path[i][0] ^ 1]) + path[i][1:]
        report = verify_rewriting(replace(proof, path=tuple(path)).encode().encode(), TRUSTED)
        assert [p.code for p in report.problems] == ["REWRITING_PROOF_INVALID"], i
        assert report.problems[0].expected == report.new_root and exit_code(report) == 2
    seeded = rewriting(8, 12)  # a power of two: the path starts with the old root, which must be the true one
    bent = replace(seeded, path=(merkle.root(FORKED[:8]), *seeded.path[1:]))
    assert codes(bent) == ["REWRITING_PROOF_INVALID"]


def test_a_note_no_pinned_key_signed_proves_nothing_and_a_revoked_key_is_named() -> None:
    stranger = rewriting(7, 12, signer=STRANGER)
    report = verify_rewriting(stranger.encode().encode(), TRUSTED)
    assert [p.code for p in report.problems] == ["REWRITING_NOTE_UNSIGNED"]
    assert "first (smaller tree's) note" in report.problems[0].message and report.problems[0].expected == SEAL.key_id
    assert report.old_key == "" and report.new_key == SEAL.key_id and exit_code(report) == 2
    revoked = TrustedKeys.of([replace(TRUSTED.entries[SEAL.key_id], status=KeyStatus.REVOKED)])
    report = verify_rewriting(rewriting(7, 12).encode().encode(), revoked)
    assert [p.code for p in report.problems] == ["REWRITING_NOTE_UNSIGNED"] * 2
    assert "which is revoked" in report.problems[0].message and report.problems[0].recomputed == SEAL.key_id
    # the root edited under the log's signature: the signature no longer verifies
    proof = rewriting(7, 12)
    edited = proof.new_note.replace(base64.b64encode(merkle.root(LEAVES[:12])), base64.b64encode(merkle.root(FORKED[:12])))
    assert codes(replace(proof, new_note=edited)) == ["REWRITING_NOTE_UNSIGNED", "REWRITING_PROOF_INVALID"]


def test_heads_of_two_logs_prove_nothing() -> None:
    other = ORIGIN.replace("/0/e1", "/0/e2")
    report = verify_rewriting(rewriting(7, 12, origin=other).encode().encode(), TRUSTED)
    assert [(p.code, p.expected, p.recomputed) for p in report.problems] == [("REWRITING_ORIGINS_DIFFER", other, ORIGIN)]
    assert report.origin == ""


def test_heads_two_different_pinned_keys_signed_prove_nothing_REWRITING_SIGNERS_DIFFER() -> None:
    """Two deployments with the default log name and prefix share an origin: one head of each is no rewriting."""
    both = TrustedKeys.of([*TRUSTED.entries.values(), TrustedKey(STRANGER.key_id, KeyPurpose.SEAL, STRANGER.public_key_raw)])
    proof = rewriting(7, 12, signer=STRANGER)
    report = verify_rewriting(proof.encode().encode(), both)
    assert [(p.code, p.expected, p.recomputed) for p in report.problems] == [
        ("REWRITING_SIGNERS_DIFFER", STRANGER.key_id, SEAL.key_id)
    ]
    assert (report.old_key, report.new_key) == (STRANGER.key_id, SEAL.key_id) and exit_code(report) == 2
    assert "one key signed two" in report.problems[0].message
    same_size = RewritingProof((), signed(12, FORKED, signer=STRANGER), signed(12))
    assert codes(same_size, both) == ["REWRITING_SIGNERS_DIFFER"]
    # one key's two inconsistent heads are still proved with both pinned
    assert verify_rewriting(rewriting(7, 12).encode().encode(), both).proved


def test_a_key_pinned_for_any_purpose_from_a_v1_file_signs_no_head_a_rewriting_rests_on() -> None:
    """A v1 trusted-keys file pins keys without a purpose: a producer's key among them could sign two notes."""
    v1 = TrustedKeys(ed25519={SEAL.key_id: SEAL.public_key_raw})
    assert v1.entries[SEAL.key_id].purpose == KeyPurpose.ANY
    report = verify_rewriting(rewriting(7, 12).encode().encode(), v1)
    assert [(p.code, p.recomputed) for p in report.problems] == [("REWRITING_NOTE_UNSIGNED", SEAL.key_id)] * 2
    assert "pinned without a purpose (a v1 trusted-keys file)" in report.problems[0].message
    assert report.problems[0].expected == "(no seal key pinned)" and exit_code(report) == 2
    # the same key pinned as a seal key beside it: proved
    mixed = TrustedKeys.of([*TRUSTED.entries.values(), TrustedKey(STRANGER.key_id, KeyPurpose.ANY, STRANGER.public_key_raw)])
    assert verify_rewriting(rewriting(7, 12).encode().encode(), mixed).proved
    assert codes(rewriting(7, 12, signer=STRANGER), mixed) == ["REWRITING_NOTE_UNSIGNED"]


def test_consistent_heads_are_not_shown_to_be_a_rewriting() -> None:
    consistent = rewriting(7, 12, LEAVES)
    report = verify_rewriting(consistent.encode().encode(), TRUSTED)
    assert [(p.code, p.expected, p.recomputed) for p in report.problems] == [
        ("REWRITING_NOT_SHOWN", report.old_root, report.old_root)
    ]
    assert codes(rewriting(3, 12)) == ["REWRITING_NOT_SHOWN"]  # FORKED's first 3 leaves are the log's
    assert codes(RewritingProof((), signed(12), signed(12))) == ["REWRITING_NOT_SHOWN"]
    assert codes(RewritingProof((), signed(0), signed(12))) == ["REWRITING_NOT_SHOWN"]  # the empty tree is everyone's prefix


def test_a_witness_cosigned_note_proves_the_same_and_is_kept_verbatim() -> None:
    witness = notes.NoteSigner("witness.example/w1", notes.SIG_COSIGNATURE_V1, b"\x33" * 32)
    proof = rewriting(7, 12)
    body = notes.parse_note(proof.old_note).text
    cosigned = notes.add_signatures(proof.old_note, [witness.sign(body, timestamp=1_700_000_000)])
    text = replace(proof, old_note=cosigned).encode().encode()
    assert cosigned in text and verify_rewriting(text, TRUSTED).proved


def test_every_flipped_bit_anywhere_is_a_named_refusal_never_an_exception() -> None:
    text = rewriting(7, 12).encode().encode()
    seen = set()
    for i in range(len(text)):
        bent = bytearray(text)
        bent[i] ^= 1 << (i % 8)
        report = verify_rewriting(bytes(bent), TRUSTED)
        assert report.problems and exit_code(report) == 2, i
        seen |= {p.code for p in report.problems}
    assert seen == {"REWRITING_PROOF_MALFORMED", "REWRITING_PROOF_INVALID", "REWRITING_NOTE_UNSIGNED", "REWRITING_ORIGINS_DIFFER"}


@pytest.mark.parametrize(
    "change",
    [
        lambda t: b"",
        lambda t: b"\xff\xfe garbage",
        lambda t: t.replace(HEADER.encode(), b"bernstein/rewriting-proof/v2"),
        lambda t: t.replace(b"\n\nnote ", b"\nnote ", 1),  # no empty line after the path
        lambda t: t.replace(b"note ", b"note 0", 1),  # a length with a leading zero
        lambda t: t.replace(b"note ", b"note  ", 1),
        lambda t: t + b"x",  # bytes after the second note
        lambda t: t[:-1],  # the second note cut short
        lambda t: t.replace(b"=\n", b"\n", 1),  # a path hash without its padding
        lambda t: b"\n".join([*t.split(b"\n")[:1], *t.split(b"\n")[2:]]),  # a path hash dropped
    ],
)
def test_malformed_files_are_named_never_raised(change: Any) -> None:
    text = rewriting(7, 12).encode().encode()
    report = verify_rewriting(change(text), TRUSTED)
    assert [p.code for p in report.problems] == ["REWRITING_PROOF_MALFORMED"] and exit_code(report) == 2


def test_the_smaller_tree_comes_first_and_notes_must_be_checkpoints() -> None:
    proof = rewriting(7, 12)
    swapped = RewritingProof(proof.path, proof.new_note, proof.old_note).encode().encode()
    report = verify_rewriting(swapped, TRUSTED)
    assert [p.code for p in report.problems] == ["REWRITING_PROOF_MALFORMED"]
    assert "the smaller tree's" in report.problems[0].message
    not_a_checkpoint = RewritingProof(proof.path, b"hello\n\n\xe2\x80\x94 x AAAAAAA=\n", proof.new_note).encode().encode()
    assert codes(not_a_checkpoint) == ["REWRITING_PROOF_MALFORMED"]


# -- making one from the topics ------------------------------------------------------------------


def five_stages(w: Writer) -> None:
    """Five stages; with checkpoint_every 3 the checkpoints sign trees of 3 and 6 leaves (stages and periodic seals)."""
    for i in range(5):
        w.stage(RUN, f"stage-{i}")


def payload(record: StoredRecord) -> dict[str, Any]:
    return dict(C.decode(C.decode(record.value or b"").record["payload"]).record)


def log_signs(b: Built, size: int, leaves: list[bytes]) -> tuple[bytes, StoredRecord]:
    """A further PartitionCheckpoint.v2 the log signs (seal key, note and all) over ``leaves[:size]``."""
    last = b.records("checkpoints")[-1]
    fields = payload(last)
    root = merkle.root(leaves[:size])
    signer = b.keys.signer
    note = notes.log_checkpoint_note(f"bernstein/{fields['input_topic']}/0/e1", size, root, signer.public_key_raw, signer.sign)
    fields.update(seq=fields["seq"] + 1, tree_size=size, tree_root="sha256:" + root.hex(), note=note)
    encoded = C.encode(codec.PARTITION_CHECKPOINT_V2, fields)
    value = C.encode(
        codec.CHECKPOINT_RECORD,
        {"payload": encoded, "key_id": signer.key_id, "signature": signer.sign(checkpoint_signing_input(encoded))},
    )
    return note.encode(), replace(last, offset=last.offset + 1, value=value)


def forked(b: Built) -> list[bytes]:
    """The partition's leaves with leaf 3 replaced: a history the log never held."""
    leaves = partition_leaf_hashes(b.source, 0)
    return [*leaves[:3], merkle.leaf_hash(b"a leaf the journal never held"), *leaves[4:]]


@pytest.mark.parametrize("size", [4, 5])
def test_the_maker_pairs_the_largest_reproduced_head_with_the_smallest_one_it_does_not_reproduce(
    tmp_path: Path, size: int
) -> None:
    b = build(tmp_path, five_stages, checkpoint_every=3)
    assert [payload(r)["tree_size"] for r in b.records("checkpoints")] == [3, 6]
    note, record = log_signs(b, size, forked(b))
    source = b.source.replaced("checkpoints", [*b.records("checkpoints"), record])
    (found,) = prove_rewriting(source, b.trusted)
    labels = (found.partition, found.old_label, found.new_label)
    assert labels == (0, f"the checkpoint at offset {record.offset}", "the checkpoint at offset 1")
    assert found.proof.old_note == note
    report = verify_rewriting(found.proof.encode().encode(), b.trusted)
    assert report.proved and (report.old_size, report.new_size) == (size, 6)
    assert report.derived_root == "sha256:" + merkle.root(partition_leaf_hashes(b.source, 0)[:size]).hex()
    assert report.old_root == "sha256:" + merkle.root(forked(b)[:size]).hex()
    with pytest.raises(NothingToProve, match="the log's signed heads are consistent: the journal reproduces all 2"):
        prove_rewriting(b.source, b.trusted)
    with pytest.raises(NothingToProve, match="consistent: memory, partition 1 holds none a pinned seal key signed$"):
        prove_rewriting(source, b.trusted, partitions=[1])


def test_a_handed_checkpoint_of_another_tree_of_the_same_size_is_paired_without_leaves(tmp_path: Path) -> None:
    b = build(tmp_path, five_stages, checkpoint_every=3)
    note, _ = log_signs(b, 6, forked(b))
    witness = notes.NoteSigner("witness.example/w1", notes.SIG_COSIGNATURE_V1, b"\x44" * 32)
    cosigned = notes.add_signatures(note, [witness.sign(notes.parse_note(note).text, timestamp=1_700_000_000)])
    (found,) = prove_rewriting(b.source, b.trusted, witnessed=[cosigned])
    assert (found.old_label, found.new_label, found.proof.path) == ("handed checkpoint 1", "the checkpoint at offset 1", ())
    assert found.proof.old_note == cosigned
    assert verify_rewriting(found.proof.encode().encode(), b.trusted).proved
    # the same head signed by a key nobody pinned is left out
    origin = notes.parse_checkpoint(notes.parse_note(note).text).origin
    stranger = notes.log_checkpoint_note(origin, 6, merkle.root(forked(b)[:6]), STRANGER.public_key_raw, STRANGER.sign)
    with pytest.raises(NothingToProve, match="consistent.*1 signed heads no pinned seal key signed were left out"):
        prove_rewriting(b.source, b.trusted, witnessed=[stranger.encode()])


def test_the_maker_pairs_only_heads_one_key_signed(tmp_path: Path) -> None:
    b = build(tmp_path, five_stages, checkpoint_every=3)
    forked_leaves = forked(b)
    origin = notes.parse_checkpoint(notes.parse_note(payload(b.records("checkpoints")[1])["note"].encode()).text).origin
    # another deployment's key (pinned too), signing a head of the same origin over another history
    other = notes.log_checkpoint_note(origin, 4, merkle.root(forked_leaves[:4]), STRANGER.public_key_raw, STRANGER.sign)
    both = TrustedKeys.of([*b.trusted.entries.values(), TrustedKey(STRANGER.key_id, KeyPurpose.SEAL, STRANGER.public_key_raw)])
    with pytest.raises(NothingToProve, match="never paired"):
        prove_rewriting(b.source, both, witnessed=[other.encode()])
    # the scheduler's own key signing that head: proved
    own, _ = log_signs(b, 4, forked_leaves)
    (found,) = prove_rewriting(b.source, both, witnessed=[other.encode(), own])
    assert (found.old_label, found.proof.old_note) == ("handed checkpoint 2", own)
    assert verify_rewriting(found.proof.encode().encode(), both).proved


def test_the_maker_leaves_out_heads_signed_only_by_a_key_pinned_for_any_purpose(tmp_path: Path) -> None:
    b = build(tmp_path, five_stages, checkpoint_every=3)
    note, record = log_signs(b, 4, forked(b))
    source = b.source.replaced("checkpoints", [*b.records("checkpoints"), record])
    v1 = TrustedKeys.of([replace(k, purpose=KeyPurpose.ANY) if not k.is_hmac else k for k in b.trusted.entries.values()])
    with pytest.raises(NothingToProve, match="3 signed heads no pinned seal key signed were left out"):
        prove_rewriting(source, v1)
    assert prove_rewriting(source, b.trusted)[0].proof.old_note == note


def test_a_cut_history_and_a_journal_changed_after_signing_are_not_provable(tmp_path: Path) -> None:
    b = build(tmp_path, five_stages, checkpoint_every=3)
    journal, checkpoints = b.records("journal"), b.records("checkpoints")
    cut = b.source.replaced("journal", journal[:4])
    with pytest.raises(NothingToProve, match="cut back behind it .*JOURNAL_TRUNCATED_BEFORE_CHECKPOINT"):
        prove_rewriting(cut, b.trusted)
    handed = payload(checkpoints[1])["note"].encode()
    behind = cut.replaced("checkpoints", checkpoints[:1])
    with pytest.raises(NothingToProve, match="handed checkpoint 1 signs a tree of 6 leaves.*HISTORY_CUT_BEHIND_WITNESSES"):
        prove_rewriting(behind, b.trusted, witnessed=[handed])
    edited = b.source.replaced("journal", [journal[0], journal[2], journal[1], *journal[3:]])
    with pytest.raises(NothingToProve, match="reproduces no head: the journal was changed .*CHECKPOINT_TREE_MISMATCH"):
        prove_rewriting(edited, b.trusted)


# -- the commands ---------------------------------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bernstein", *args], capture_output=True, text=True, check=False)


def test_the_commands_write_and_check_a_proof_of_rewriting_from_a_dump(tmp_path: Path) -> None:
    b = build(tmp_path, five_stages, checkpoint_every=3)
    _, record = log_signs(b, 5, forked(b))
    source = b.source.replaced("checkpoints", [*b.records("checkpoints"), record])
    dump = tmp_path / "dump"
    export_dump(source, dump, cas=b.store, runs=None, trusted=None)
    trusted = tmp_path / "trusted.json"
    trusted.write_text(json.dumps(b.trusted.to_json()), encoding="utf-8")
    out = tmp_path / "log.rewriting"
    made = run("activity", "prove-rewriting", "--from", str(dump), "--trusted-keys", str(trusted), "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"wrote {out} (") and "signed two checkpoints that cannot both be true" in made.stdout
    assert "  smaller tree: 5 leaves, root sha256:" in made.stdout and "  larger tree: 6 leaves, root sha256:" in made.stdout
    checked = run("activity", "verify-rewriting", str(out), "--trusted-keys", str(trusted))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1].startswith("rewriting PROVED -- the log signed two checkpoints")
    as_json = json.loads(run("activity", "verify-rewriting", str(out), "--trusted-keys", str(trusted), "--json").stdout)
    assert (as_json["verdict"], as_json["old"]["size"], as_json["new"]["size"]) == ("proved", 5, 6)
    lines = out.read_bytes().split(b"\n")
    lines[1] = (b"B" if lines[1][:1] != b"B" else b"C") + lines[1][1:]  # one byte of the first path hash
    out.write_bytes(b"\n".join(lines))
    bent = run("activity", "verify-rewriting", str(out), "--trusted-keys", str(trusted))
    assert bent.returncode == 2 and "NOT PROVED REWRITING_PROOF_INVALID -- " in bent.stdout
    missing = run("activity", "verify-rewriting", str(tmp_path / "nope"), "--trusted-keys", str(trusted))
    assert missing.returncode == 3 and "cannot read it" in missing.stderr and "Traceback" not in missing.stderr
    clean = tmp_path / "clean"
    export_dump(b.source, clean, cas=b.store, runs=None, trusted=None)
    nothing = run("activity", "prove-rewriting", "--from", str(clean), "--trusted-keys", str(trusted), "--out", str(out))
    assert nothing.returncode == 5 and "the log's signed heads are consistent" in nothing.stderr
    unreadable = run(
        "activity", "prove-rewriting", "--from", str(dump), "--trusted-keys", str(trusted), "--out", str(out),
        "--witnessed", str(tmp_path / "nope"),
    )  # fmt: skip
    assert unreadable.returncode == 3 and "Traceback" not in unreadable.stderr


WITNESS_KEY = notes.NoteSigner("witness.example/w9", notes.SIG_COSIGNATURE_V1, b"\x45" * 32)


def test_a_witness_s_evidence_file_is_made_into_a_proof_anyone_checks(tmp_path: Path) -> None:
    """A witness that cosigned the log's head of size 6 is presented another head of size 6 the log signed: it refuses
    and keeps both as evidence, which ``prove-rewriting --evidence`` turns into the transferable proof."""
    b = build(tmp_path, five_stages, checkpoint_every=3)
    head = payload(b.records("checkpoints")[-1])
    origin = head["note"].split("\n", 1)[0]
    store = FileWitnessStore(tmp_path / "witness")
    log_key = notes.log_verifier(origin, b.keys.signer.public_key_raw)
    witness = Witness(WITNESS_KEY, {origin: [log_key]}, store, clock=lambda: 1_767_225_600)
    witness.add_checkpoint(b"old 0\n\n" + head["note"].encode())
    fork, _ = log_signs(b, 6, forked(b))
    with pytest.raises(WitnessRefusal):
        witness.add_checkpoint(b"old 6\n\n" + fork)
    (kept,) = sorted((tmp_path / "witness" / "evidence").rglob("*.json"))
    dump = tmp_path / "dump"
    export_dump(b.source, dump, cas=b.store, runs=None, trusted=None)
    trusted = tmp_path / "trusted.json"
    trusted.write_text(json.dumps(b.trusted.to_json()), encoding="utf-8")
    out = tmp_path / "fork.rewriting"
    made = run(
        "activity", "prove-rewriting", "--from", str(dump), "--trusted-keys", str(trusted), "--out", str(out),
        "--evidence", str(kept),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    checked = run("activity", "verify-rewriting", str(out), "--trusted-keys", str(trusted), "--json")
    verdict = json.loads(checked.stdout)
    assert checked.returncode == 0 and (verdict["verdict"], verdict["old"]["size"], verdict["new"]["size"]) == ("proved", 6, 6)
    garbage = tmp_path / "garbage.json"
    garbage.write_text('{"cosigned": 1}')
    refused = run(
        "activity", "prove-rewriting", "--from", str(dump), "--trusted-keys", str(trusted), "--out", str(out),
        "--evidence", str(garbage),
    )  # fmt: skip
    assert refused.returncode == 3 and "not a witness evidence file" in refused.stderr and "Traceback" not in refused.stderr
