"""Checkpoints held outside the deployment (``activity verify --witnessed``) and a pinned witness policy.

One copy of the topics cannot tell a history cut back, all three tails together, to an earlier checkpoint
from a shorter real one: it reads as an open run. A checkpoint a witness cosigned (and still serves) can:
the cut is then a named mismatch with the leaf index. Without the policy and the handed checkpoint, the
same data keeps today's verdicts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from bernstein.schemas import codec, notes
from bernstein.schemas.canonical import journal_entry_hash
from bernstein.verifier.export import export_dump
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_NOT_FULLY_VERIFIED, EXIT_OPEN, EXIT_VERIFIED
from bernstein.verifier.sources import DumpSource
from bernstein.verifier.tlog import journal_leaf
from bernstein.verifier.verify import audit_chain_findings
from tests.support.verdicts import RUN, Built, C, Writer, build_checkpointed

WITNESS = notes.NoteSigner("witness.example/w1", notes.SIG_COSIGNATURE_V1, b"\x21" * 32)
OTHER = notes.NoteSigner("witness.example/w2", notes.SIG_COSIGNATURE_V1, b"\x22" * 32)
POLICY = f"# one witness must have seen it\nwitness W1 {WITNESS.verifier.vkey}\nwitness W2 {OTHER.verifier.vkey}\ngroup any-of-us any W1 W2\nquorum any-of-us\n"


def four_stages_and_a_close(w: Writer) -> None:
    for i in range(4):
        w.stage(RUN, f"stage-{i}")
    w.close(RUN)


def checkpoints(b: Built) -> list[dict[str, Any]]:
    return [dict(C.decode(C.decode(r.value or b"").record["payload"]).record) for r in b.records("checkpoints")]


def cosigned(note: str, *witnesses: notes.NoteSigner) -> bytes:
    body = notes.parse_note(note.encode()).text
    return notes.add_signatures(note.encode(), [w.sign(body, timestamp=1_767_225_600) for w in witnesses])


def handed(source: Any, *checkpoints: bytes) -> Any:
    source.witnessed = checkpoints
    return source


def cut_back_to_the_first_checkpoint(b: Built) -> Any:
    """Journal, audit chain and checkpoints all cut back to the first checkpoint: a consistent shorter history."""
    first = checkpoints(b)[0]
    journal = b.records("journal")[: first["tree_size"]]
    audit = b.records("audit")[: first["audit_seq"]]
    return b.source.replaced("journal", journal).replaced("audit", audit).replaced("checkpoints", b.records("checkpoints")[:1])


def test_a_cut_all_three_tails_reads_as_open_without_a_witness_and_as_a_mismatch_with_one(tmp_path: Path) -> None:
    b = build_checkpointed(tmp_path, four_stages_and_a_close, checkpoint_every=3)
    last = checkpoints(b)[-1]
    assert last["reason"] == "final" and len(checkpoints(b)) >= 2
    # today's verdict, without a witness: a shorter open run
    assert b.verify(cut_back_to_the_first_checkpoint(b)).exit_code == EXIT_OPEN
    witnessed = cosigned(last["note"], WITNESS)
    trusted = b.trusted.with_witness_policy(POLICY)
    # the untouched history with the witnessed checkpoint verifies
    report = b.verify(handed(b.source.replaced("journal", b.records("journal")), witnessed), trusted=trusted)
    assert report.exit_code == EXIT_VERIFIED, report
    assert report.header.audit is not None and report.header.audit.tree_heads == len(checkpoints(b)) + 1
    # the cut history, with it: the witnesses saw more than the topics hold
    source = handed(cut_back_to_the_first_checkpoint(b), witnessed)
    report = b.verify(source, trusted=trusted)
    assert report.exit_code == EXIT_MISMATCH
    (problem,) = [p for p in audit_chain_findings(source, 0, trusted) if p.code == "HISTORY_CUT_BEHIND_WITNESSES"]
    first = checkpoints(b)[0]
    assert (problem.expected, problem.recomputed, problem.leaf_index) == (
        str(last["tree_size"]),
        str(first["tree_size"]),
        first["tree_size"],
    )
    assert "cosigned by W1" in problem.message and problem.offset is None


def test_a_pinned_policy_needs_a_checkpoint_its_quorum_cosigned(tmp_path: Path) -> None:
    b = build_checkpointed(tmp_path, four_stages_and_a_close, checkpoint_every=3)
    trusted = b.trusted.with_witness_policy(POLICY)
    report = b.verify(trusted=trusted)
    assert report.exit_code == EXIT_NOT_FULLY_VERIFIED
    assert [p.code for p in report.header.unchecked] == ["WITNESS_QUORUM_NOT_MET"]
    assert "cosigned by 1 of (W1, W2)" in report.header.unchecked[0].message
    # a cosignature by a key the policy does not name does not count
    stranger = notes.NoteSigner("witness.example/w1", notes.SIG_COSIGNATURE_V1, b"\x23" * 32)
    last = checkpoints(b)[-1]["note"]
    assert b.verify(
        handed(b.source.replaced("journal", b.records("journal")), cosigned(last, stranger)), trusted=trusted
    ).exit_code == (EXIT_NOT_FULLY_VERIFIED)
    # without the policy, the same data and the same handed checkpoint verify as before
    assert (
        b.verify(handed(b.source.replaced("journal", b.records("journal")), cosigned(last, stranger))).exit_code == EXIT_VERIFIED
    )


def test_a_handed_checkpoint_with_a_flipped_cosignature_or_another_root_is_named(tmp_path: Path) -> None:
    b = build_checkpointed(tmp_path, four_stages_and_a_close, checkpoint_every=3)
    trusted = b.trusted.with_witness_policy(POLICY)
    last = checkpoints(b)[-1]
    good = cosigned(last["note"], WITNESS)
    line = good.rstrip(b"\n").rsplit(b"\n", 1)[1]
    flipped = good.replace(line, line[:-6] + (b"A" if line[-6:-5] != b"A" else b"B") + line[-5:])
    source = handed(b.source.replaced("journal", b.records("journal")), flipped)
    assert b.verify(source, trusted=trusted).exit_code == EXIT_MISMATCH
    assert [p.code for p in audit_chain_findings(source, 0, trusted)] == ["WITNESSED_CHECKPOINT_INVALID"]
    # a log-signed, witness-cosigned head of another tree of the same size: the journal does not reproduce it
    signer = b.keys.signer
    other = notes.log_checkpoint_note(
        notes.parse_checkpoint(notes.parse_note(good).text).origin,
        last["tree_size"],
        b"\x09" * 32,
        signer.public_key_raw,
        signer.sign,
    )
    source = handed(b.source.replaced("journal", b.records("journal")), cosigned(other, WITNESS, OTHER))
    assert b.verify(source, trusted=trusted).exit_code == EXIT_MISMATCH
    (mismatch,) = audit_chain_findings(source, 0, trusted)
    # leaf_index: the size of the last head the journal reproduced before it (the previous checkpoint's)
    assert mismatch.code == "CHECKPOINT_TREE_MISMATCH" and mismatch.leaf_index == checkpoints(b)[-2]["tree_size"]
    assert "cosigned by W1, W2" in mismatch.message and mismatch.expected == "sha256:" + "09" * 32
    assert replace(mismatch, message="").stream == ""


def cosigned_at(note: str, seconds: int) -> bytes:
    body = notes.parse_note(note.encode()).text
    return notes.add_signatures(note.encode(), [WITNESS.sign(body, timestamp=seconds)])


def test_a_pinned_bound_on_the_unwitnessed_tail_names_records_older_than_it(tmp_path: Path) -> None:
    b = build_checkpointed(tmp_path, four_stages_and_a_close, checkpoint_every=3)
    first, last = checkpoints(b)[0], checkpoints(b)[-1]
    written_s = 1_700_000_000  # the records' timestamps (tests/support/verdicts.py): offsets after this second
    bounded = b.trusted.with_witness_policy(POLICY, 3600)

    def verdict(note: str, at_s: int) -> Any:
        source = b.source.replaced("journal", b.records("journal"))
        source.witnessed = (cosigned_at(note, at_s),)
        return b.verify(source, trusted=bounded)

    # the witness cosigned only the first checkpoint, two hours after the records were written: the rest is too old
    late = verdict(first["note"], written_s + 7200)
    assert late.exit_code == EXIT_NOT_FULLY_VERIFIED
    (unchecked,) = late.header.unchecked
    tail = len(b.records("journal")) - first["tree_size"]
    assert unchecked.code == "WITNESSED_TAIL_TOO_OLD"
    assert f"{tail} journal records of partition 0 (from leaf {first['tree_size']})" in unchecked.message
    assert "go unwitnessed 3600 s at most" in unchecked.message
    # within the bound, or with the whole journal witnessed, the same data verifies
    assert verdict(first["note"], written_s + 600).exit_code == EXIT_VERIFIED
    assert verdict(last["note"], written_s + 7200).exit_code == EXIT_VERIFIED
    # no bound pinned: the old tail is not judged
    unbounded = b.source.replaced("journal", b.records("journal"))
    unbounded.witnessed = (cosigned_at(first["note"], written_s + 7200),)
    assert b.verify(unbounded, trusted=b.trusted.with_witness_policy(POLICY)).exit_code == EXIT_VERIFIED


def test_a_handed_checkpoint_under_another_epoch_of_the_same_log_is_named(tmp_path: Path) -> None:
    b = build_checkpointed(tmp_path, four_stages_and_a_close, checkpoint_every=3)
    last = checkpoints(b)[-1]
    body = notes.parse_checkpoint(notes.parse_note(last["note"].encode()).text)
    bumped = body.origin.rsplit("/", 1)[0] + "/e2"
    signer = b.keys.signer
    other_epoch = notes.log_checkpoint_note(bumped, body.size, body.root_hash, signer.public_key_raw, signer.sign)
    source = handed(b.source.replaced("journal", b.records("journal")), cosigned(other_epoch, WITNESS))
    (problem,) = audit_chain_findings(source, 0, b.trusted.with_witness_policy(POLICY))
    assert problem.code == "WITNESSED_CHECKPOINT_INVALID" and "the same log under another name or epoch" in problem.message


def test_a_dump_of_selected_runs_says_the_log_was_not_recomputed(tmp_path: Path) -> None:
    b = build_checkpointed(tmp_path, four_stages_and_a_close, checkpoint_every=3)
    dump = tmp_path / "dump"
    export_dump(b.source, dump, cas=b.store, runs=[RUN], trusted=None)
    source = handed(DumpSource(dump), cosigned(checkpoints(b)[-1]["note"], WITNESS))
    report = b.verify(source, trusted=b.trusted.with_witness_policy(POLICY))
    assert report.exit_code == EXIT_NOT_FULLY_VERIFIED
    assert [p.code for p in report.header.unchecked] == ["MERKLE_LOG_NOT_RECOMPUTED"]


def test_a_journal_record_with_a_number_no_step_writes_is_no_leaf_and_stops_nothing(tmp_path: Path) -> None:
    b = build_checkpointed(tmp_path, four_stages_and_a_close, checkpoint_every=3)
    first = b.records("journal")[0]
    envelope = C.decode(first.value or b"").record
    entry = dict(C.decode(envelope["payload"]).record)
    payload = C.encode(C.decode(envelope["payload"]).schema.name, {**entry, "run_id": "junk", "seq": 2**60})
    value = C.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": journal_entry_hash(payload)})
    assert journal_leaf(C, value) is None
    junk = replace(first, key=b"junk", value=value, offset=len(b.records("journal")))
    source = b.source.replaced("journal", [*b.records("journal"), junk])
    assert b.verify(source).exit_code == EXIT_VERIFIED  # the run's verdict; the junk record is another run's
