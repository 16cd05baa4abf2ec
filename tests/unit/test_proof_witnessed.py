"""A proof of one activity under a checkpoint witnesses cosigned (``activity prove --witnessed``), and ``verify-proof``
holding its cosignatures to the pinned witness policy.

The runs are written by the real scheduler core (``tests.support.verdicts``); the witnesses are real Ed25519
cosignature/v1 keys that cosign the scheduler's own signed notes, as ``witness submit`` collects them.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bernstein.commands.proofs import _cosigned_words, _render_json, _render_text, exit_code
from bernstein.schemas import codec, merkle, notes
from bernstein.schemas.canonical import checkpoint_signing_input
from bernstein.substrate.cas import CasUnavailable
from bernstein.substrate.keys import Ed25519Signer, TrustedKeys, init_keys
from bernstein.verifier.export import export_dump
from bernstein.verifier.proof import ProofReport, prove, verify_proof
from bernstein.verifier.proof_format import ActivityProof, ProofUnavailable, WitnessedCheckpointRefused, parse_proof
from bernstein.verifier.tlog import journal_leaf
from bernstein.verifier.witness.client import collect
from bernstein.verifier.witness.core import Witness
from bernstein.verifier.witness.http import make_server
from bernstein.verifier.witness.store import FileWitnessStore
from tests.support.browser_fakes import MemorySource
from tests.support.verdicts import RUN, Built, C, Writer, build_checkpointed

W1 = notes.NoteSigner("witness.example/w1", notes.SIG_COSIGNATURE_V1, b"\x41" * 32)
W2 = notes.NoteSigner("witness.example/w2", notes.SIG_COSIGNATURE_V1, b"\x42" * 32)
STRANGER = notes.NoteSigner("witness.example/w3", notes.SIG_COSIGNATURE_V1, b"\x43" * 32)
BOTH = f"witness W1 {W1.verifier.vkey}\nwitness W2 {W2.verifier.vkey}\ngroup both all W1 W2\nquorum both\n"
AT = 1_767_225_600


def five_stages(w: Writer) -> None:
    """Leaves: stage-0, stage-1, seal, stage-2, stage-3, seal, stage-4; checkpoints sign trees of 3 and 6 leaves."""
    for i in range(5):
        w.stage(RUN, f"stage-{i}")


def heads(b: Built) -> list[dict[str, Any]]:
    return [dict(C.decode(C.decode(r.value or b"").record["payload"]).record) for r in b.records("checkpoints")]


def cosigned(note: str | bytes, *witnesses: notes.NoteSigner) -> bytes:
    data = note.encode() if isinstance(note, str) else note
    body = notes.parse_note(data).text
    return notes.add_signatures(data, [w.sign(body, timestamp=AT) for w in witnesses])


def flip_last_cosignature(note: bytes) -> bytes:
    """One base64 character of the last line's signature bytes changed (a canonical encoding still)."""
    line = note.rstrip(b"\n").rsplit(b"\n", 1)[1]
    return note.replace(line, line[:-6] + (b"A" if line[-6:-5] != b"A" else b"B") + line[-5:])


def leaf_hashes(b: Built) -> list[bytes]:
    return [merkle.leaf_hash(leaf) for r in b.records("journal") if (leaf := journal_leaf(C, r.value)) is not None]


@pytest.fixture(name="b")
def _b(tmp_path: Path) -> Built:
    b = build_checkpointed(tmp_path, five_stages, checkpoint_every=3)
    assert [h["tree_size"] for h in heads(b)] == [3, 6]
    return b


def policy(b: Built, text: str = BOTH) -> TrustedKeys:
    return b.trusted.with_witness_policy(text)


def proved(b: Built, *witnessed: bytes, stage: str = "stage-1", trusted: TrustedKeys | None = None) -> ActivityProof:
    return prove(b.source, RUN, stage, witnessed=witnessed, trusted=trusted or policy(b))


# -- making one -------------------------------------------------------------------------------------


def test_the_proof_rests_on_the_largest_handed_checkpoint_that_covers_the_stage_and_carries_it_verbatim(b: Built) -> None:
    small, large = (cosigned(h["note"], W1, W2) for h in heads(b))
    proof = proved(b, small, large)
    assert proof.note == large and proof.index == 1
    assert list(proof.path) == merkle.inclusion_proof(leaf_hashes(b)[:6], 1)
    # the smaller one alone still covers stage-1: the path is computed for its tree size
    alone = proved(b, small)
    assert alone.note == small and list(alone.path) == merkle.inclusion_proof(leaf_hashes(b)[:3], 1)
    report = verify_proof(alone.encode().encode(), policy(b))
    assert report.problems == () and report.tree_size == 3 and report.witnesses == ("W1", "W2")


def test_no_handed_checkpoint_covers_the_stage_exit_5_says_to_submit_a_newer_one(b: Built) -> None:
    small = cosigned(heads(b)[0]["note"], W1, W2)
    with pytest.raises(ProofUnavailable, match=r"holds 3 leaves; submit a newer checkpoint to the witnesses") as late:
        proved(b, small, stage="stage-2")  # leaf 3: only the topic's 6-leaf head covers it
    assert not late.value.not_found and "bernstein witness submit" in str(late.value)
    with pytest.raises(ProofUnavailable, match="no signed checkpoint covers it yet either"):
        proved(b, small, cosigned(heads(b)[1]["note"], W1), stage="stage-4")  # leaf 6: after every head
    # a handed checkpoint of another partition's log is not this stage's: nothing handed covers it
    body = notes.parse_checkpoint(notes.parse_note(heads(b)[1]["note"].encode()).text)
    signer = b.keys.signer
    elsewhere = notes.log_checkpoint_note(
        body.origin.rsplit("/", 2)[0] + "/9/e1", body.size, body.root_hash, signer.public_key_raw, signer.sign
    )
    with pytest.raises(ProofUnavailable, match="none of the 1 handed checkpoint is of its log"):
        proved(b, cosigned(elsewhere, W1, W2))


def test_a_handed_checkpoint_the_journal_does_not_reproduce_is_refused_never_passed_over(b: Built, tmp_path: Path) -> None:
    small, large = heads(b)
    good = cosigned(large["note"], W1, W2)
    signer = b.keys.signer
    origin = notes.parse_checkpoint(notes.parse_note(good).text).origin
    other_root = notes.log_checkpoint_note(origin, small["tree_size"], b"\x09" * 32, signer.public_key_raw, signer.sign)
    with pytest.raises(WitnessedCheckpointRefused, match="handed checkpoint 2, the handed checkpoint of 3 leaves") as bent:
        proved(b, good, cosigned(other_root, W1, W2))  # the good one covers the stage: still refused
    assert (bent.value.problem, bent.value.position) == ("CHECKPOINT_TREE_MISMATCH", 1)
    cut = b.source.replaced("journal", b.records("journal")[: small["tree_size"]])
    with pytest.raises(WitnessedCheckpointRefused) as behind:
        prove(cut, RUN, "stage-1", witnessed=(good,), trusted=policy(b))
    assert behind.value.problem == "HISTORY_CUT_BEHIND_WITNESSES" and "holds 3" in str(behind.value)
    with pytest.raises(WitnessedCheckpointRefused) as flipped:
        proved(b, flip_last_cosignature(good))
    assert flipped.value.problem == "WITNESSED_CHECKPOINT_INVALID"
    with pytest.raises(WitnessedCheckpointRefused, match="not signed by a pinned seal key") as unpinned:
        proved(b, good, trusted=TrustedKeys.from_install(init_keys(tmp_path / "other-keys")))
    assert unpinned.value.problem == "WITNESSED_CHECKPOINT_INVALID"


def test_with_a_policy_the_largest_covering_checkpoint_its_quorum_cosigned_wins_over_a_larger_one_it_did_not(b: Built) -> None:
    small, large = heads(b)
    quorum_small = cosigned(small["note"], W1, W2)
    stranger_large = cosigned(large["note"], STRANGER)  # cosigned, but by nobody the policy names
    proof = proved(b, stranger_large, quorum_small)
    assert proof.note == quorum_small and list(proof.path) == merkle.inclusion_proof(leaf_hashes(b)[:3], 1)
    report = verify_proof(proof.encode().encode(), policy(b))
    assert report.problems == () and report.witnesses == ("W1", "W2") and exit_code(report) == 0
    # one witness short on the larger one: the smaller one its quorum cosigned still wins
    assert proved(b, cosigned(large["note"], W1), quorum_small).note == quorum_small
    # none the quorum cosigned: the largest that covers it, as before (prove warns, verify-proof says exit 6)
    short_small = cosigned(small["note"], W1)
    assert proved(b, short_small, stranger_large).note == stranger_large
    # a stage only the larger one covers rests on it, whoever cosigned it
    assert proved(b, stranger_large, quorum_small, stage="stage-2").note == stranger_large
    # without a policy nobody's quorum is asked for: the largest that covers it
    assert proved(b, stranger_large, quorum_small, trusted=b.trusted).note == stranger_large


def with_forged_first(b: Built, origin: str) -> MemorySource:
    """The topics with a PartitionCheckpoint.v2 before the first: its note signed under ``origin`` by a key nobody
    pinned (what anyone who can write to the checkpoints topic can put there)."""
    first, *rest = b.records("checkpoints")
    fields = dict(C.decode(C.decode(first.value or b"").record["payload"]).record)
    forger = Ed25519Signer.from_seed(b"\x66" * 32)
    fields["note"] = notes.log_checkpoint_note(origin, 3, b"\x05" * 32, forger.public_key_raw, forger.sign)
    fields["tree_root"] = "sha256:" + "05" * 32
    encoded = C.encode(codec.PARTITION_CHECKPOINT_V2, fields)
    value = C.encode(
        codec.CHECKPOINT_RECORD,
        {"payload": encoded, "key_id": forger.key_id, "signature": forger.sign(checkpoint_signing_input(encoded))},
    )
    shifted = [replace(record, offset=record.offset + 1) for record in (first, *rest)]
    return b.source.replaced("checkpoints", [replace(first, value=value), *shifted])


@pytest.mark.parametrize(
    "forged_origin",
    ["bernstein/mem.activity.submissions/0/e9", "bernstein/another.activity.submissions/0/e1", "an-origin-of-no-log"],
)
def test_a_forged_first_checkpoint_record_does_not_decide_which_log_the_handed_checkpoints_are_of(
    b: Built, forged_origin: str
) -> None:
    good = cosigned(heads(b)[1]["note"], W1, W2)
    proof = prove(with_forged_first(b, forged_origin), RUN, "stage-1", witnessed=(good,), trusted=policy(b))
    assert proof.note == good
    assert verify_proof(proof.encode().encode(), policy(b)).problems == ()


def test_with_no_signed_head_a_handed_checkpoint_of_another_prefix_s_log_is_passed_over_never_a_mismatch(b: Built) -> None:
    bare = b.source.replaced("checkpoints", [])
    signer = b.keys.signer
    elsewhere = notes.log_checkpoint_note(
        "bernstein/other.activity.submissions/0/e1", 6, b"\x07" * 32, signer.public_key_raw, signer.sign
    ).encode()
    good = cosigned(heads(b)[1]["note"], W1, W2)
    for handed in ((cosigned(elsewhere, W1, W2), good), (good, cosigned(elsewhere, W1, W2))):
        assert prove(bare, RUN, "stage-1", witnessed=handed, trusted=policy(b)).note == good
    with pytest.raises(ProofUnavailable, match="none of the 1 handed checkpoint is of its log"):
        prove(bare, RUN, "stage-1", witnessed=(cosigned(elsewhere, W1, W2),), trusted=policy(b))
    # the stage's own log under another epoch is still the stage's log: judged, and refused when the journal disagrees
    epoch = notes.log_checkpoint_note(
        "bernstein/mem.activity.submissions/0/e2", 6, b"\x07" * 32, signer.public_key_raw, signer.sign
    ).encode()
    with pytest.raises(WitnessedCheckpointRefused) as bent:
        prove(bare, RUN, "stage-1", witnessed=(good, epoch), trusted=policy(b))
    assert (bent.value.problem, bent.value.position) == ("CHECKPOINT_TREE_MISMATCH", 1)
    # bytes that are no checkpoint note are refused, never passed over as another log's
    with pytest.raises(WitnessedCheckpointRefused) as garbage:
        prove(b.source, RUN, "stage-1", witnessed=(good, b"no note at all\n"), trusted=policy(b))
    assert (garbage.value.problem, garbage.value.position) == ("WITNESSED_CHECKPOINT_INVALID", 1)


def test_prove_never_says_cosigned_by_of_signature_lines_nobody_checked(b: Built) -> None:
    note = cosigned(heads(b)[1]["note"], W1, W2)
    words = _cosigned_words(proved(b, note, trusted=b.trusted), b.trusted)
    assert "cosigned" not in words
    assert words == (
        f", under the handed checkpoint of 6 leaves; further signature lines, not checked (no witness policy pinned): "
        f"{W1.name}, {W2.name}"
    )
    bare = heads(b)[1]["note"].encode()
    assert _cosigned_words(proved(b, bare, trusted=b.trusted), b.trusted) == (
        ", under the handed checkpoint of 6 leaves (no witness policy pinned; it carries no further signature line)"
    )
    # with a policy: the witnesses whose cosignatures verified, and the other lines named as not checked
    with_stranger = cosigned(heads(b)[1]["note"], W1, W2, STRANGER)
    assert _cosigned_words(proved(b, with_stranger), policy(b)) == (
        f", under the handed checkpoint of 6 leaves cosigned by W1, W2; by keys the policy does not name (not checked): "
        f"{STRANGER.name}"
    )


# -- checking one -----------------------------------------------------------------------------------


def test_a_cosigned_proof_verifies_when_the_policy_is_met(b: Built) -> None:
    text = proved(b, cosigned(heads(b)[1]["note"], W2, W1, STRANGER)).encode().encode()
    report = verify_proof(text, policy(b), b.store)
    assert report.problems == () and exit_code(report) == 0
    stranger = STRANGER.name
    assert (report.witness_policy, report.witnesses, report.unknown_signatures) == ("2 of (W1, W2)", ("W1", "W2"), (stranger,))
    out = io.StringIO()
    _render_text(report, out)
    assert (
        "witness policy 2 of (W1, W2): cosignatures checked and verified: W1, W2; "
        f"by keys the policy does not name (not checked): {stranger}"
    ) in out.getvalue()
    assert "proof verified -- included in the log's signed tree head, cosigned by W1, W2; 2 evidence blobs" in out.getvalue()
    document = json_of(report)
    assert (document["verdict"], document["cosigned_by"], document["further_signatures"]) == (
        "verified",
        ["W1", "W2"],
        [stranger],
    )


def test_one_witness_short_of_a_two_of_two_policy_is_not_fully_verified_exit_6(b: Built) -> None:
    text = proved(b, cosigned(heads(b)[1]["note"], W1)).encode().encode()
    report = verify_proof(text, policy(b))
    assert [(p.code, p.expected, p.recomputed) for p in report.problems] == [
        ("PROOF_WITNESS_QUORUM_NOT_MET", "2 of (W1, W2)", "W1")
    ]
    assert exit_code(report) == 6 and report.witnesses == ("W1",) and report.tree_size == 6
    assert (json_of(report)["verdict"], json_of(report)["exit_code"]) == ("unchecked", 6)
    out = io.StringIO()
    _render_text(report, out)
    assert "NOT CHECKED PROOF_WITNESS_QUORUM_NOT_MET -- " in out.getvalue()
    assert "proof not fully verified" in out.getvalue()
    # a scheduler-signed head with no cosignature at all (prove without --witnessed), under the same policy
    bare = prove(b.source, RUN, "stage-1").encode().encode()
    assert [p.code for p in verify_proof(bare, policy(b)).problems] == ["PROOF_WITNESS_QUORUM_NOT_MET"]
    # a mismatch beats it: exit 2
    moved = replace(parse_proof(text), index=2).encode().encode()
    assert exit_code(verify_proof(moved, policy(b))) == 2


def test_a_flipped_byte_in_a_cosignature_is_a_mismatch_exit_2(b: Built) -> None:
    proof = proved(b, cosigned(heads(b)[1]["note"], W1, W2))
    bent = ActivityProof(proof.record, proof.index, proof.path, flip_last_cosignature(proof.note)).encode().encode()
    report = verify_proof(bent, policy(b))
    key = f"{W2.name}+{W2.key_id:08x}"
    assert [(p.code, p.recomputed) for p in report.problems] == [("PROOF_COSIGNATURE_INVALID", key)]
    assert "pinned witness W2" in report.problems[0].message
    assert exit_code(report) == 2 and json_of(report)["verdict"] == "mismatch"
    out = io.StringIO()
    _render_text(report, out)
    assert "a pinned witness's cosignature does not verify, so none counts" in out.getvalue()
    assert "MISMATCH PROOF_COSIGNATURE_INVALID -- " in out.getvalue()
    assert report.tree_size == 6 and report.witnesses == ()  # the log's head is still read and the path still checked
    # the same bytes without a policy: no witness key is pinned, the line is not checked, the verdict is today's
    assert verify_proof(bent, b.trusted).problems == ()


def test_without_a_policy_a_proof_with_or_without_cosignatures_keeps_today_s_verdict(b: Built) -> None:
    bare = prove(b.source, RUN, "stage-1")
    report = verify_proof(bare.encode().encode(), b.trusted)
    assert report.problems == () and exit_code(report) == 0
    assert (report.witness_policy, report.witnesses, report.unknown_signatures) == ("", (), ())
    with_lines = proved(b, cosigned(heads(b)[1]["note"], W1, W2), trusted=b.trusted)
    report = verify_proof(with_lines.encode().encode(), b.trusted)
    assert report.problems == () and report.unknown_signatures == (W1.name, W2.name)
    out = io.StringIO()
    _render_text(report, out)
    assert f"no witness policy pinned; further signatures (not checked): {W1.name}, {W2.name}" in out.getvalue()
    assert json_of(report)["witness_policy"] is None


def test_the_json_verdict_of_a_store_that_did_not_answer_is_unavailable(b: Built) -> None:
    report = verify_proof(prove(b.source, RUN, "stage-1").encode().encode(), b.trusted, _Silent())  # type: ignore[arg-type]
    assert [p.code for p in report.problems] == ["PROOF_EVIDENCE_UNAVAILABLE"] * 2
    assert exit_code(report) == 3 and (json_of(report)["verdict"], json_of(report)["exit_code"]) == ("unavailable", 3)
    # with the quorum missing too, it is not fully verified: exit 6
    unchecked = verify_proof(prove(b.source, RUN, "stage-1").encode().encode(), policy(b), _Silent())  # type: ignore[arg-type]
    assert sorted({p.code for p in unchecked.problems}) == ["PROOF_EVIDENCE_UNAVAILABLE", "PROOF_WITNESS_QUORUM_NOT_MET"]
    assert exit_code(unchecked) == 6 and json_of(unchecked)["verdict"] == "unchecked"


def test_the_commands_prove_against_a_handed_checkpoint_and_verify_it_with_the_policy(b: Built, tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    export_dump(b.source, dump, cas=b.store, runs=None, trusted=None)
    trusted = tmp_path / "trusted.json"
    trusted.write_text(json.dumps(policy(b).to_json()), encoding="utf-8")
    handed = tmp_path / "0.checkpoint"
    handed.write_bytes(cosigned(heads(b)[1]["note"], W1, W2))
    out = tmp_path / "stage-1.tlog-proof"
    made = bernstein(*_prove_args(dump, out, handed, trusted))
    assert made.returncode == 0, made.stderr
    assert "under the handed checkpoint of 6 leaves cosigned by W1, W2" in made.stdout
    checked = bernstein("activity", "verify-proof", str(out), "--trusted-keys", str(trusted), "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["cosigned_by"] == ["W1", "W2"]
    # one witness short: the proof is written (with a warning), and verify-proof says not fully verified
    handed.write_bytes(cosigned(heads(b)[1]["note"], W1))
    made = bernstein(*_prove_args(dump, out, handed, trusted))
    assert made.returncode == 0 and "PROOF_WITNESS_QUORUM_NOT_MET (exit 6)" in made.stderr
    checked = bernstein("activity", "verify-proof", str(out), "--trusted-keys", str(trusted))
    assert checked.returncode == 6 and "NOT CHECKED PROOF_WITNESS_QUORUM_NOT_MET" in checked.stdout
    # a handed checkpoint the journal does not reproduce: exit 2, named; none that covers the stage: exit 5
    handed.write_bytes(flip_last_cosignature(cosigned(heads(b)[1]["note"], W1, W2)))
    refused = bernstein(*_prove_args(dump, out, handed, trusted))
    assert (
        refused.returncode == 2 and f"WITNESSED_CHECKPOINT_INVALID: --witnessed {handed}: handed checkpoint 1" in refused.stderr
    )
    handed.write_bytes(cosigned(heads(b)[0]["note"], W1, W2))
    late = bernstein(*_prove_args(dump, out, handed, trusted, stage="stage-2"))
    assert late.returncode == 5 and "`bernstein witness submit`" in late.stderr
    missing = bernstein(*_prove_args(dump, out, tmp_path / "nope.checkpoint", trusted))
    assert missing.returncode == 3 and "--witnessed" in missing.stderr and "Traceback" not in missing.stderr


def test_the_checkpoint_witness_submit_collects_from_a_witness_is_what_the_proof_rests_on(b: Built, tmp_path: Path) -> None:
    """The real client (``collect``, what ``witness submit`` writes) against a real witness over HTTP, in this process."""
    origin = notes.parse_note(heads(b)[1]["note"].encode()).text.split("\n", 1)[0]
    log = notes.log_verifier(origin, b.keys.signer.public_key_raw)
    witness = Witness(W1, {origin: [log]}, FileWitnessStore(tmp_path / "state"), clock=lambda: AT)
    server = make_server(witness, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        collected = collect(b.source, 0, [(f"http://127.0.0.1:{server.server_address[1]}", W1.verifier)])
    finally:
        server.shutdown()
        server.server_close()
    assert collected.answers[0].status == 200 and collected.size == 6
    one_of_one = policy(b, f"witness W1 {W1.verifier.vkey}\nquorum W1\n")
    proof = proved(b, collected.cosigned, stage="stage-3", trusted=one_of_one)
    assert proof.note == collected.cosigned and proof.index == 4
    report = verify_proof(proof.encode().encode(), one_of_one, b.store)
    assert report.problems == () and report.witnesses == ("W1",) and report.tree_size == 6
    assert [p.code for p in verify_proof(proof.encode().encode(), policy(b)).problems] == ["PROOF_WITNESS_QUORUM_NOT_MET"]


# -- helpers ----------------------------------------------------------------------------------------


class _Silent:
    """A content store that never answers (unit-test double of the CAS port)."""

    def get(self, digest: str) -> bytes:
        raise CasUnavailable(f"the store did not answer for {digest}")


def json_of(report: ProofReport) -> dict[str, Any]:
    out = io.StringIO()
    _render_json(report, out)
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


def bernstein(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bernstein", *args], capture_output=True, text=True, check=False, timeout=120)


def _prove_args(dump: Path, out: Path, handed: Path, trusted: Path, *, stage: str = "stage-1") -> list[str]:
    return ["activity", "prove", RUN, stage, "--from", str(dump), "--out", str(out)] + [
        "--witnessed",
        str(handed),
        "--trusted-keys",
        str(trusted),
    ]
