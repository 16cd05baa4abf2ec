"""The verifier's checkpoint verdicts on in-memory runs written by the real scheduler core.

Each test changes the checkpoints, the audit chain or the journal as an
attacker could and asserts the exact verdict (code, place, exit code); exit 0
only for untouched runs. The runs come from ``Writer`` (tests/support/verdicts.py),
with ``checkpoint_every`` small enough that periodic checkpoints occur.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from bernstein.consumers.core.step import SchedulerCore
from bernstein.schemas import codec, merkle, notes
from bernstein.schemas.canonical import audit_mac, checkpoint_signing_input, seal_signing_input, sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import Ed25519Signer
from bernstein.verifier.export import export_dump
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_NOT_FULLY_VERIFIED, EXIT_OPEN, EXIT_VERIFIED
from bernstein.verifier.sources import DumpSource, KcatSource, StoredRecord
from bernstein.verifier.tlog import journal_leaf
from bernstein.verifier.verify import audit_chain_findings
from tests.support.verdicts import (
    PREFIX,
    RUN,
    VERIFIED,
    Built,
    C,
    Writer,
    assert_exit,
    first_problem,
    json_of,
    kcat_file,
    kind_of,
    located,
)
from tests.support.verdicts import (
    build_checkpointed as build,
)


def closed_with_a_late_refusal(w: Writer) -> None:
    """stage-0, stage-1 (a periodic seal), the close (final seal + checkpoint), a late stage refused (uncovered)."""
    w.stage(RUN, "stage-0")
    w.stage(RUN, "stage-1")
    w.close(RUN)
    w.stage(RUN, "stage-late")


def closed(w: Writer) -> None:
    w.stage(RUN, "stage-0")
    w.stage(RUN, "stage-1")
    w.close(RUN)


def still_open(w: Writer) -> None:
    """Four stages and no close: with checkpoint_every=3, periodic checkpoints after stages 1 and 3."""
    for i in range(4):
        w.stage(RUN, f"stage-{i}")


def payloads(records: list[StoredRecord]) -> list[dict[str, Any]]:
    return [dict(C.decode(C.decode(r.value or b"").record["payload"]).record) for r in records]


def resigned(record: StoredRecord, signer: Ed25519Signer, **changes: Any) -> StoredRecord:
    """The checkpoint with its payload fields changed and signed again by ``signer`` (an insider's edit)."""
    fields = {**payloads([record])[0], **changes}
    payload = C.encode(codec.PARTITION_CHECKPOINT_V2 if "tree_size" in fields else codec.PARTITION_CHECKPOINT, fields)
    value = C.encode(
        codec.CHECKPOINT_RECORD,
        {"payload": payload, "key_id": signer.key_id, "signature": signer.sign(checkpoint_signing_input(payload))},
    )
    return replace(record, value=value)


def test_an_untouched_run_reports_its_checkpoints_and_what_none_covers_yet(tmp_path: Path) -> None:
    b = build(tmp_path, closed_with_a_late_refusal)
    (checkpoint,) = payloads(b.records("checkpoints"))
    assert (checkpoint["seq"], checkpoint["audit_seq"], checkpoint["reason"]) == (0, 4, "final")
    report = b.verify()
    lines = assert_exit(report, EXIT_VERIFIED)
    assert report.header.audit is not None
    assert (report.header.audit.checkpoints, report.header.audit.uncovered) == (1, 1)  # the late refusal
    leaves = len(b.records("journal"))  # 3 entries and the final seal, each a leaf of the partition's Merkle log
    assert (report.header.audit.tree_leaves, report.header.audit.tree_heads) == (leaves, 1)
    assert lines[3].endswith(
        f"; 1 signed checkpoint, 1 record not covered by a checkpoint yet; its Merkle log of {leaves} leaves "
        "reproduces 1 signed tree head)"
    )
    assert lines[-1] == VERIFIED
    document = json_of(report)
    assert (document["audit"]["checkpoints"], document["audit"]["uncovered"]) == (1, 1)


def test_dropping_the_final_seal_and_its_audit_record_is_caught_by_the_checkpoint(tmp_path: Path) -> None:
    """Without checkpoints this read as an open run (exit 5); the checkpoint written with the seal still counts it."""
    b = build(tmp_path, closed)
    journal, audit = b.records("journal"), b.records("audit")
    assert C.decode(journal[-1].value or b"").schema.name == codec.SEAL_RECORD
    cut = b.source.replaced("journal", journal[:-1]).replaced("audit", audit[:-1])
    report = b.verify(cut)
    lines = assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    (checkpoint,) = b.records("checkpoints")
    assert located(problem) == ("AUDIT_TRUNCATED_BEFORE_CHECKPOINT", "checkpoints", checkpoint.offset)
    assert (problem.audit_seq, problem.expected, problem.recomputed) == (4, "4", "3")
    assert lines[3] == f"  MISMATCH audit -- {problem.message}"
    # the partition's Merkle log names the same cut (the checkpoint signed one leaf more than the journal holds); the
    # run's report keeps the audit chain's finding alone, as before the log existed
    tree = _tree_problem(b, cut)
    assert located(tree) == ("JOURNAL_TRUNCATED_BEFORE_CHECKPOINT", "checkpoints", checkpoint.offset)
    assert (tree.expected, tree.recomputed, tree.leaf_index) == (str(len(journal)), str(len(journal) - 1), len(journal) - 1)
    # the same cut with the checkpoint deleted too looks open: a deletion of all three tails needs an outside anchor
    all_three = cut.replaced("checkpoints", [])
    assert b.verify(all_three).exit_code == EXIT_OPEN


def test_truncating_the_audit_tail_after_a_periodic_checkpoint_is_named(tmp_path: Path) -> None:
    b = build(tmp_path, still_open, checkpoint_every=3)
    assert assert_exit(b.verify(), EXIT_OPEN)
    checkpoints = b.records("checkpoints")
    assert [(c["audit_seq"], c["reason"]) for c in payloads(checkpoints)] == [(3, "periodic"), (6, "periodic")]
    # cut the last step (stage-3 and its periodic seal) from the journal and the audit chain: a shorter open run
    journal, audit = b.records("journal"), b.records("audit")
    report = b.verify(b.source.replaced("journal", journal[:-2]).replaced("audit", audit[:-2]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("AUDIT_TRUNCATED_BEFORE_CHECKPOINT", "checkpoints", checkpoints[1].offset)


def test_an_edited_checkpoint_does_not_verify(tmp_path: Path) -> None:
    b = build(tmp_path, closed_with_a_late_refusal)
    (record,) = b.records("checkpoints")
    head = payloads([record])[0]["audit_head"]
    flipped = head[:-1] + ("0" if head[-1] != "0" else "1")
    edited = replace(record, value=(record.value or b"").replace(head.encode(), flipped.encode()))
    report = b.verify(b.source.replaced("checkpoints", [edited]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("CHECKPOINT_SIGNATURE_INVALID", "checkpoints", record.offset)
    assert report.header.audit is not None and report.header.audit.further_problems == 0
    assert (report.header.audit.checkpoints, report.header.audit.uncovered) == (0, 5)


def test_a_checkpoint_signed_by_another_key_is_not_trusted(tmp_path: Path) -> None:
    b = build(tmp_path, closed)
    (record,) = b.records("checkpoints")
    stranger = Ed25519Signer.from_seed(bytes(range(1, 33)))
    report = b.verify(b.source.replaced("checkpoints", [resigned(record, stranger)]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("CHECKPOINT_KEY_NOT_PINNED", "checkpoints", record.offset)
    assert problem.recomputed == stranger.key_id


def test_an_insider_checkpoint_with_another_head_or_position_disagrees_with_the_chain(tmp_path: Path) -> None:
    b = build(tmp_path, closed)
    (record,) = b.records("checkpoints")
    signer = b.keys.signer
    other_head = "hmac-sha256:" + "1" * 64
    report = b.verify(b.source.replaced("checkpoints", [resigned(record, signer, audit_head=other_head)]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("CHECKPOINT_AUDIT_HEAD_MISMATCH", "checkpoints", record.offset)
    assert (problem.audit_seq, problem.expected) == (4, other_head)
    report = b.verify(b.source.replaced("checkpoints", [resigned(record, signer, next_offset=7)]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("CHECKPOINT_INPUT_MISMATCH", "checkpoints", record.offset)
    assert (problem.expected, problem.recomputed) == ("6", "2")


def test_a_deleted_or_undecodable_checkpoint_breaks_the_checkpoint_chain(tmp_path: Path) -> None:
    b = build(tmp_path, still_open, checkpoint_every=3)
    first, second = b.records("checkpoints")
    report = b.verify(b.source.replaced("checkpoints", [second]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("CHECKPOINT_CHAIN_BROKEN", "checkpoints", second.offset)
    assert problem.message.startswith("checkpoint seq 1 at offset 1 has seq 1 where seq 0 was due")
    report = b.verify(b.source.replaced("checkpoints", [replace(first, value=b"\xc3\x01garbage"), second]))
    assert_exit(report, EXIT_MISMATCH)
    assert located(first_problem(report, "audit")) == ("CHECKPOINT_UNDECODABLE", "checkpoints", first.offset)


def test_a_missing_checkpoint_is_named_where_the_scheduler_had_to_write_one(tmp_path: Path) -> None:
    b = build(tmp_path, closed_with_a_late_refusal)
    report = b.verify(b.source.replaced("checkpoints", []))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    seal_audit = b.records("audit")[3]
    assert located(problem) == ("CHECKPOINT_MISSING", "audit", seal_audit.offset)
    assert (problem.audit_seq, problem.expected) == (3, "4")
    # an open run whose periodic checkpoints were deleted: MAX_CHECKPOINT_EVERY audit records with none after them
    o = build(tmp_path / "open", long_open, checkpoint_every=3)
    kept = o.records("checkpoints")[:1]
    assert payloads(kept)[0]["audit_seq"] == 3
    report = o.verify(o.source.replaced("checkpoints", kept))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert (problem.code, problem.stream, problem.audit_seq, problem.expected) == ("CHECKPOINT_MISSING", "", 3, "1003")
    assert problem.message.startswith("the audit chain holds 1002 records after the last checkpoint (audit seq 3)")
    # the last two steps cut too (three records): 999 after the kept checkpoint, where none was due yet
    cut = o.source.replaced("checkpoints", kept)
    cut = cut.replaced("journal", o.records("journal")[:-3]).replaced("audit", o.records("audit")[:-3])
    assert o.verify(cut).exit_code == EXIT_OPEN


def long_open(w: Writer) -> None:
    """670 stages and no close: 1005 audit records (a periodic seal after every second stage), checkpoints every 3."""
    for i in range(670):
        w.stage(RUN, f"stage-{i}")


def test_raising_checkpoint_every_on_a_restart_is_not_a_missing_checkpoint(tmp_path: Path) -> None:
    """Four stages with checkpoint_every=3, then the same state continued by a scheduler set to 1000, four more
    stages: the tail after the last checkpoint (written under 3) is longer than 3, honestly."""

    def restarted(w: Writer) -> None:
        still_open(w)
        config = replace(w.core.config, checkpoint_every=1000)
        w.core = SchedulerCore(config)
        for i in range(4, 8):
            w.stage(RUN, f"stage-{i}")

    b = build(tmp_path, restarted, checkpoint_every=3)
    assert [(c["audit_seq"], c["checkpoint_every"]) for c in payloads(b.records("checkpoints"))] == [(3, 3), (6, 3)]
    assert len(b.records("audit")) == 12
    report = b.verify()
    assert_exit(report, EXIT_OPEN)
    assert report.header.audit is not None and report.header.audit.uncovered == 6


def test_a_capture_without_the_checkpoints_topic_is_not_fully_verified(tmp_path: Path) -> None:
    b = build(tmp_path, closed)
    files = [kcat_file(b, tmp_path / f"{stream}.json", stream) for stream in ("journal", "audit", "refusals")]
    report = b.verify(KcatSource(files, PREFIX))
    lines = assert_exit(report, EXIT_NOT_FULLY_VERIFIED)
    assert [p.code for p in report.header.unchecked] == ["CHECKPOINTS_NOT_CAPTURED"]
    assert lines[-1].startswith("not fully verified -- not checked: CHECKPOINTS_NOT_CAPTURED;")
    files.append(kcat_file(b, tmp_path / "checkpoints.json", "checkpoints"))
    assert b.verify(KcatSource(files, PREFIX)).exit_code == EXIT_VERIFIED


def test_an_export_of_a_run_carries_its_partitions_checkpoints(tmp_path: Path) -> None:
    b = build(tmp_path, closed_with_a_late_refusal)
    summary = export_dump(b.source, tmp_path / "dump", cas=b.store, runs=[RUN], trusted=b.trusted)
    assert summary.records["checkpoints"] == 1
    manifest = json.loads((tmp_path / "dump" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["streams"]["checkpoints"]["0"]["records"] == 1
    report = b.verify(DumpSource(tmp_path / "dump"), cas=DirBlobStore(tmp_path / "dump" / "cas"))
    assert_exit(report, EXIT_VERIFIED)
    assert report.header.audit is not None and report.header.audit.checkpoints == 1


def test_a_partition_written_before_checkpoints_still_verifies(tmp_path: Path) -> None:
    """AuditRecord.v1 (MAC over the payload only) and no checkpoints: the pre-checkpoint layout, rebuilt from a run
    (every audit record re-MACed as v1 and relinked, every seal re-signed over the new heads). It verifies, no
    checkpoint is expected, and every audit record is reported uncovered."""
    b = build(tmp_path, closed_with_a_late_refusal)
    secret, signer = b.keys.audit.secret, b.keys.signer
    journal = list(b.records("journal"))
    seal_at = {sha256_digest(r.value or b""): i for i, r in enumerate(journal) if kind_of(r.value) == codec.SEAL_RECORD}
    new_mac: dict[str, str] = {}
    audit: list[StoredRecord] = []
    for record in b.records("audit"):
        envelope = C.decode(record.value or b"").record
        entry = dict(C.decode(envelope["payload"]).record)
        entry["prev_mac"] = new_mac.get(entry["prev_mac"], entry["prev_mac"])  # the genesis does not change
        if entry["event"] == "run.sealed":
            index = seal_at[entry["record_hash"]]
            seal_envelope = C.decode(journal[index].value or b"").record
            seal = dict(C.decode(seal_envelope["payload"]).record)
            seal["audit_head"] = new_mac.get(seal["audit_head"], seal["audit_head"])
            payload = C.encode(codec.RUN_SEAL, seal)
            value = C.encode(
                codec.SEAL_RECORD,
                {"payload": payload, "key_id": signer.key_id, "signature": signer.sign(seal_signing_input(payload))},
            )
            journal[index] = replace(journal[index], value=value)
            entry["record_hash"] = sha256_digest(value)
        payload = C.encode(codec.AUDIT_ENTRY, entry)
        mac = audit_mac(secret, payload)
        new_mac[envelope["mac"]] = mac
        audit.append(
            replace(record, value=C.encode(codec.AUDIT_RECORD, {"payload": payload, "key_id": envelope["key_id"], "mac": mac}))
        )
    old = b.source.replaced("journal", journal).replaced("audit", audit).replaced("checkpoints", [])
    report = b.verify(old)
    lines = assert_exit(report, EXIT_VERIFIED)
    assert report.header.audit is not None and report.header.audit.macs_verified
    assert (report.header.audit.checkpoints, report.header.audit.uncovered) == (0, 5)
    assert lines[3].endswith("; 0 signed checkpoints, 5 records not covered by a checkpoint yet)")
    # the same v1 chain with one payload edited is still caught by its MAC
    edited = list(audit)
    envelope = C.decode(edited[1].value or b"").record
    forged = C.encode(codec.AUDIT_ENTRY, {**C.decode(envelope["payload"]).record, "stage_id": "stage-9"})
    edited[1] = replace(edited[1], value=C.encode(codec.AUDIT_RECORD, {**envelope, "payload": forged}))
    report = b.verify(old.replaced("audit", edited))
    assert_exit(report, EXIT_MISMATCH)
    assert located(first_problem(report, "audit")) == ("AUDIT_MAC_MISMATCH", "audit", edited[1].offset)


# ---------------------------------------------------------------------------
# the partition's Merkle log (PartitionCheckpoint.v2)
# ---------------------------------------------------------------------------


def _tree_problems(b: Built, source: Any) -> list[Any]:
    """The partition's Merkle log findings, in order."""
    found = audit_chain_findings(source, 0, b.trusted)
    return [p for p in found if p.code.startswith(("CHECKPOINT_TREE", "CHECKPOINT_NOTE", "JOURNAL_TRUNCATED"))]


def _tree_problem(b: Built, source: Any) -> Any:
    """The partition's one Merkle log finding."""
    tree = _tree_problems(b, source)
    assert len(tree) == 1, [p.code for p in tree]
    return tree[0]


def test_each_checkpoint_signs_the_merkle_root_of_the_journal_before_it_as_a_c2sp_note(tmp_path: Path) -> None:
    b = build(tmp_path, still_open, checkpoint_every=3)
    journal = b.records("journal")
    leaves = [journal_leaf(C, r.value) for r in journal]
    assert None not in leaves
    for checkpoint in payloads(b.records("checkpoints")):
        size = checkpoint["tree_size"]
        root = merkle.root([merkle.leaf_hash(leaf) for leaf in leaves[:size] if leaf is not None])
        assert checkpoint["tree_root"] == "sha256:" + root.hex()
        origin = f"bernstein/{checkpoint['input_topic']}/0/e1"
        body, opened = notes.open_checkpoint(
            checkpoint["note"].encode(), [notes.log_verifier(origin, b.keys.signer.public_key_raw)]
        )
        assert (body.origin, body.size, body.root_hash) == (origin, size, root)
        assert len(opened.verified) == 1
    # the first periodic checkpoint follows stage-1 and its periodic seal: 3 leaves; the second 6 (two more stages, a seal)
    assert [c["tree_size"] for c in payloads(b.records("checkpoints"))] == [3, 6]
    assert assert_exit(b.verify(), EXIT_OPEN)


def test_an_edited_journal_record_is_a_tree_mismatch_at_the_first_checkpoint_after_it(tmp_path: Path) -> None:
    b = build(tmp_path, still_open, checkpoint_every=3)
    journal, checkpoints = b.records("journal"), b.records("checkpoints")
    # entry seq 1's stored payload is replaced by another run's valid entry: a different leaf at index 1
    other = replace(journal[1], value=journal[0].value)
    source = b.source.replaced("journal", [journal[0], other, *journal[2:]])
    report = b.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    # each signed tree head after the edit disagrees, both from leaf 0 (the last head the journal reproduced: none)
    first, second = _tree_problems(b, source)
    assert located(first) == ("CHECKPOINT_TREE_MISMATCH", "checkpoints", checkpoints[0].offset)
    assert located(second) == ("CHECKPOINT_TREE_MISMATCH", "checkpoints", checkpoints[1].offset)
    assert (first.leaf_index, second.leaf_index) == (0, 0)
    assert [first.expected, second.expected] == [c["tree_root"] for c in payloads(checkpoints)]
    assert "among leaves 0..2 was edited" in first.message and first.to_json()["leaf_index"] == 0
    # an untouched prefix is reproduced: editing the last entry leaves the first checkpoint's head standing
    tail = replace(journal[-2], value=journal[0].value)
    late = _tree_problem(b, b.source.replaced("journal", [*journal[:-2], tail, journal[-1]]))
    assert located(late) == ("CHECKPOINT_TREE_MISMATCH", "checkpoints", checkpoints[1].offset)
    assert late.leaf_index == 3 and "among leaves 3..5" in late.message


def test_deleting_the_journal_tail_behind_a_checkpoint_is_named_with_the_leaf_count(tmp_path: Path) -> None:
    b = build(tmp_path, still_open, checkpoint_every=3)
    journal, checkpoints = b.records("journal"), b.records("checkpoints")
    source = b.source.replaced("journal", journal[:4])
    report = b.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    problem = _tree_problem(b, source)
    assert located(problem) == ("JOURNAL_TRUNCATED_BEFORE_CHECKPOINT", "checkpoints", checkpoints[1].offset)
    assert (problem.expected, problem.recomputed, problem.leaf_index) == ("6", "4", 4)


def test_a_note_that_names_another_tree_head_is_refused_even_under_the_real_key(tmp_path: Path) -> None:
    b = build(tmp_path, still_open, checkpoint_every=3)
    checkpoints = b.records("checkpoints")
    first = payloads(checkpoints)[0]
    origin = f"bernstein/{first['input_topic']}/0/e1"
    signer = b.keys.signer
    wrong = notes.log_checkpoint_note(origin, 2, b"\x07" * 32, signer.public_key_raw, signer.sign)
    edited = resigned(checkpoints[0], signer, note=wrong)
    source = b.source.replaced("checkpoints", [edited, *checkpoints[1:]])
    report = b.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    problem = _tree_problem(b, source)
    assert located(problem) == ("CHECKPOINT_NOTE_INVALID", "checkpoints", checkpoints[0].offset)
    assert "names tree 2 sha256:0707" in problem.message


def test_a_selected_runs_dump_leaves_the_tree_unchecked_and_says_so(tmp_path: Path) -> None:
    b = build(tmp_path, closed)
    dump = tmp_path / "dump"
    export_dump(b.source, dump, cas=b.store, runs=[RUN], trusted=None)
    report = b.verify(DumpSource(dump))
    assert_exit(report, EXIT_VERIFIED)
    assert report.header.audit is not None and report.header.audit.tree_leaves is None
    whole = tmp_path / "whole"
    export_dump(b.source, whole, cas=b.store, runs=None, trusted=None)
    audit = b.verify(DumpSource(whole)).header.audit
    assert audit is not None and (audit.tree_leaves, audit.tree_heads) == (len(b.records("journal")), 1)


def test_a_later_checkpoint_that_signs_a_smaller_tree_is_named(tmp_path: Path) -> None:
    b = build(tmp_path, still_open, checkpoint_every=3)
    checkpoints = b.records("checkpoints")
    first = payloads(checkpoints)[0]
    leaves = [journal_leaf(C, r.value) for r in b.records("journal")]
    size = first["tree_size"] - 1
    root = merkle.root([merkle.leaf_hash(leaf) for leaf in leaves[:size] if leaf is not None])
    origin = f"bernstein/{first['input_topic']}/0/e1"
    signer = b.keys.signer
    note = notes.log_checkpoint_note(origin, size, root, signer.public_key_raw, signer.sign)
    smaller = resigned(checkpoints[1], signer, tree_size=size, tree_root="sha256:" + root.hex(), note=note)
    source = b.source.replaced("checkpoints", [checkpoints[0], smaller])
    shrank = [p for p in _tree_problems(b, source) if p.code == "CHECKPOINT_TREE_SHRANK"]
    assert [located(p) for p in shrank] == [("CHECKPOINT_TREE_SHRANK", "checkpoints", checkpoints[1].offset)]
    assert (shrank[0].expected, shrank[0].recomputed) == (f">= {first['tree_size']}", str(size))
