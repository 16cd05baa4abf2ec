"""The verifier's verdicts on in-memory runs: every named verdict, each with its exact code, place and exit code.

A run is written by the real scheduler core (``bernstein.consumers.core.step``) into an
in-memory source, with its evidence in a real ``DirBlobStore``; each test
changes records the way an attacker (or an insider holding the keys) could,
and asserts the exact verdict: the problem's code and where it points, the
exit code, and the report's last line. Exit 0 is asserted only for untouched
runs.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    audit_mac,
    audit_record_mac,
    evidence_set_hash,
    journal_entry_hash,
    seal_signing_input,
    sha256_digest,
)
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import TrustedKeys, init_keys
from bernstein.verifier.export import export_dump
from bernstein.verifier.render import escape
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_NOT_FULLY_VERIFIED, EXIT_OPEN, EXIT_VERIFIED, Problem
from bernstein.verifier.sources import DUMP_FORMAT, DumpSource, KcatSource, StoredRecord, encode_dump_line
from bernstein.verifier.verify import verify_many
from tests.support.browser_fakes import MemorySource
from tests.support.producers import encode_signed_submission, producer_signer
from tests.support.verdicts import (
    OTHER,
    PREFIX,
    RUN,
    TOPICS,
    VERIFIED,
    Built,
    C,
    Writer,
    assert_exit,
    build,
    entries,
    entry_value,
    first_problem,
    inner,
    journal_of,
    json_of,
    kcat_file,
    kind_of,
    located,
    session_script,
    standard,
    text_of,
)

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------
# building a run with the real core
# ---------------------------------------------------------------------------


@pytest.fixture
def built(tmp_path: Path) -> Built:
    return build(tmp_path)


# ---------------------------------------------------------------------------
# helpers: decoded views and edits
# ---------------------------------------------------------------------------


def seals(b: Built, run_id: str = RUN) -> list[tuple[int, StoredRecord]]:
    return [(i, r) for i, r in journal_of(b, run_id) if kind_of(r.value) == codec.SEAL_RECORD]


def audits(b: Built) -> list[dict[str, Any]]:
    return [inner(r.value) for r in b.records("audit")]


def checkpoints(b: Built) -> list[dict[str, Any]]:
    """The decoded payloads of the partition's checkpoints, in order."""
    return [inner(r.value) for r in b.records("checkpoints")]


def audit_index(b: Built, event: str, run_id: str = RUN, nth: int = 0) -> int:
    return [i for i, a in enumerate(audits(b)) if a["event"] == event and a["run_id"] == run_id][nth]


def with_value(record: StoredRecord, value: bytes, **changes: Any) -> StoredRecord:
    return replace(record, value=value, **changes)


def edited(b: Built, stream: str, edit: Callable[[list[StoredRecord]], list[StoredRecord]]) -> MemorySource:
    return b.source.replaced(stream, edit(b.records(stream)))


def renumbered(records: list[StoredRecord]) -> list[StoredRecord]:
    """Offsets 0.. in list order (a record inserted or removed, as the topic would store it)."""
    return [replace(r, offset=i) for i, r in enumerate(records)]


def seal_value(b: Built, payload: bytes, key_id: str | None = None) -> bytes:
    signer = b.keys.signer
    return C.encode(
        codec.SEAL_RECORD,
        {"payload": payload, "key_id": key_id or signer.key_id, "signature": signer.sign(seal_signing_input(payload))},
    )


def rewrite_audit(b: Built, index: int, *, relink: bool = True, **changes: Any) -> list[StoredRecord]:
    """The audit stream with record ``index``'s payload changed and re-MACed by an insider holding the audit key;
    with ``relink`` every later record's prev_mac and MAC follow, so only the change itself is visible."""
    secret = b.keys.audit.secret
    out = list(b.records("audit"))
    previous_mac = None
    for i in range(index, len(out) if relink else index + 1):
        stored = C.decode(out[i].value or b"")
        envelope = stored.record
        decoded = C.decode(envelope["payload"])
        record = dict(decoded.record)
        if i == index:
            record.update(changes)
        elif previous_mac is not None:
            record["prev_mac"] = previous_mac
        payload = C.encode(decoded.schema.name, record)
        key_id = envelope["key_id"]
        if stored.schema.name == codec.AUDIT_RECORD_V2:  # the same envelope version as the scheduler wrote
            mac = audit_record_mac(secret, key_id, payload)
            value = C.encode(codec.AUDIT_RECORD_V2, {"key_id": key_id, "payload": payload, "mac": mac})
        else:
            mac = audit_mac(secret, payload)
            value = C.encode(codec.AUDIT_RECORD, {"payload": payload, "key_id": key_id, "mac": mac})
        out[i] = with_value(out[i], value)
        previous_mac = mac
    return out


# ---------------------------------------------------------------------------
# controls
# ---------------------------------------------------------------------------


def test_untouched_run_verifies(built: Built) -> None:
    report = built.verify()
    lines = assert_exit(report, EXIT_VERIFIED)
    assert report.ok and lines[-1] == VERIFIED
    assert [s.stage_id for s in report.stages] == ["stage-0", "stage-1", "stage-2", "stage-3"]
    assert all(s.ok and s.evidence_reattached for s in report.stages)
    assert report.header.audit is not None and report.header.audit.refusals == 1
    assert (report.header.unchecked, report.header.open) == ((), False)
    assert json_of(report)["verdict"] == "verified"
    # the partition holds two dead letters, mirrored by the audit chain and checked against it
    assert len(built.records("deadletter")) == 2
    assert built.verify(run_id=OTHER).exit_code == EXIT_VERIFIED


def test_the_report_names_who_sent_each_refused_record_and_whether_that_was_proven(tmp_path: Path) -> None:
    """Refusal.v2 names the sender: "by" once its signature verified, "claimed by" when refused before."""

    def script(w: Writer) -> None:
        standard(w)  # stage-x: refused for its unknown role, after verdicts@test's signature verified
        record = {
            "submission_id": "impostor",
            "run_id": RUN,
            "stage_id": "stage-y",
            "role": "developer",
            "producer": {"id": "verdicts@test", "sdk": "test"},
            "kind": "coding",
            "artifact": b"a",
            "artifact_hash": sha256_digest(b"a"),
            "evidence_set_hash": evidence_set_hash([]),
            "observations": [],
            "terminal_state": "completed",
            "reason_code": "ok",
            "occurred_at_ms": 1,
        }
        # unit@test signs a stage in verdicts@test's name: PRODUCER_MISMATCH, the name only claimed
        w.feed(RUN, encode_signed_submission(record, producer_signer("unit@test")))

    report = build(tmp_path, script=script).verify()
    lines = assert_exit(report, EXIT_VERIFIED)  # refusals change no run: it still verifies
    verdicts, impostor = producer_signer("verdicts@test").key_id, producer_signer("unit@test").key_id
    assert [line for line in lines if "REFUSED" in line] == [
        f"  REFUSED UNKNOWN_ROLE stage stage-x [coding] (refusals partition 0, offset 0) -- by verdicts@test (key {verdicts})",
        f"  REFUSED PRODUCER_MISMATCH stage stage-y [coding] (refusals partition 0, offset 1) -- claimed by verdicts@test "
        f"(key {impostor}; not authenticated: refused before its signature verified)",
    ]
    assert json_of(report)["refusals"] == [
        {
            "partition": 0,
            "offset": 0,
            "code": "UNKNOWN_ROLE",
            "stage_id": "stage-x",
            "kind": "coding",
            "producer": "verdicts@test",
            "key_id": verdicts,
            "authenticated": True,
        },
        {
            "partition": 0,
            "offset": 1,
            "code": "PRODUCER_MISMATCH",
            "stage_id": "stage-y",
            "kind": "coding",
            "producer": "verdicts@test",
            "key_id": impostor,
            "authenticated": False,
        },
    ]


# ---------------------------------------------------------------------------
# no content store, --records-only (H4)
# ---------------------------------------------------------------------------


def test_no_content_store_is_not_a_pass(built: Built) -> None:
    report = built.verify(cas=None)
    lines = assert_exit(report, EXIT_NOT_FULLY_VERIFIED)
    assert [p.code for p in report.header.unchecked] == ["NO_CONTENT_STORE"]
    assert report.header.ok  # nothing failed ...
    for stage in report.stages:  # ... but no stage was checked
        assert (stage.ok, stage.failed, stage.unchecked) == (False, False, "evidence not reattached (no content store)")
    assert lines[-9:-1:2] == [f"  NOT CHECKED stage-{i} [coding] -- evidence not reattached (no content store)" for i in range(4)]
    assert lines[-8:-1:2] == [f"    by verdicts@test (key {producer_signer('verdicts@test').key_id})"] * 4
    assert lines[-1] == (
        "not fully verified -- not checked: NO_CONTENT_STORE; nothing that was checked failed, but this is not a pass."
    )
    document = json_of(report)
    assert document["verdict"] == "not_fully_verified"
    assert [p["code"] for p in document["unchecked"]] == ["NO_CONTENT_STORE"]
    assert document["stages"][0]["unchecked"] == "evidence not reattached (no content store)"


def test_records_only_says_the_evidence_was_not_checked(built: Built) -> None:
    report = built.verify(records_only=True)  # a store is given, and deliberately not used
    lines = assert_exit(report, EXIT_NOT_FULLY_VERIFIED)
    assert [p.code for p in report.header.unchecked] == ["RECORDS_ONLY"]
    assert report.header.records_only
    assert all(s.unchecked == "evidence not reattached (--records-only)" for s in report.stages)
    assert lines[-1] == (
        "records verified -- evidence NOT checked (--records-only): no blob was reattached or re-hashed; not a pass."
    )


def test_a_records_only_run_with_a_broken_chain_is_still_a_mismatch(built: Built) -> None:
    index, record = entries(built)[1]
    source = edited(built, "journal", lambda rs: [*rs[:index], with_value(record, b"garbage"), *rs[index + 1 :]])
    report = built.verify(source, records_only=True)
    assert_exit(report, EXIT_MISMATCH)
    assert located(first_problem(report, "chain")) == ("RECORD_UNDECODABLE", "journal", record.offset)


def dump_of(b: Built, root: Path, *, blobs: int | None, with_cas: bool, drop: tuple[str, ...] = ()) -> DumpSource:
    for stream in ("journal", "refusals", "audit", "deadletter", "checkpoints"):
        if stream in drop:
            continue
        (root / "topics" / stream).mkdir(parents=True, exist_ok=True)
        (root / "topics" / stream / "0.jsonl").write_bytes(b"".join(encode_dump_line(r) for r in b.records(stream)))
    manifest: dict[str, Any] = {"format": DUMP_FORMAT, "runs": [RUN, OTHER]}
    if blobs is not None:
        manifest["blobs"] = blobs
    (root / "manifest.json").write_text(json.dumps(manifest))
    if with_cas:
        shutil.copytree(b.store.root, root / "cas")
    return DumpSource(root)


def test_a_dump_whose_manifest_lists_blobs_but_has_no_cas_is_a_mismatch(built: Built, tmp_path: Path) -> None:
    dump = dump_of(built, tmp_path / "dump", blobs=12, with_cas=False)
    report = built.verify(dump, cas=None)
    lines = assert_exit(report, EXIT_MISMATCH)
    (problem,) = report.header.dump_problems
    assert problem.code == "CAS_MISSING"
    assert problem.message == (
        f"the dump's manifest lists 12 evidence blobs but {tmp_path / 'dump' / 'cas'} is missing (content store deleted)"
    )
    assert lines[1] == f"  MISMATCH dump -- {problem.message}"
    # the same dump with its store verifies; listing no blobs and having none is "not fully verified"
    assert built.verify(dump_of(built, tmp_path / "whole", blobs=12, with_cas=True)).exit_code == EXIT_VERIFIED
    empty = built.verify(dump_of(built, tmp_path / "bare", blobs=0, with_cas=False), cas=None)
    assert empty.exit_code == EXIT_NOT_FULLY_VERIFIED
    assert [p.code for p in empty.header.unchecked] == ["NO_CONTENT_STORE"]


# ---------------------------------------------------------------------------
# audit keys (H3, M5) and the refusals stream (M4)
# ---------------------------------------------------------------------------


def forged_refusal(b: Built, key_id: str | None) -> MemorySource:
    """H3's repro: the refusal edited, its audit mirror's record_hash made to match, and (optionally) the
    envelope key id replaced (it is outside the MAC), the MAC left as it was."""
    (refusal,) = [r for r in b.records("refusals") if r.key == RUN.encode()]
    forged = (refusal.value or b"").replace(b"UNKNOWN_ROLE", b"UNKNOWN_ROLX")
    assert forged != refusal.value
    refusals = [with_value(r, forged) if r is refusal else r for r in b.records("refusals")]
    index = audit_index(b, "activity.refused")
    audit = list(b.records("audit"))
    envelope = C.decode(audit[index].value or b"").record
    decoded = C.decode(envelope["payload"])
    payload = C.encode(decoded.schema.name, {**decoded.record, "record_hash": sha256_digest(forged)})
    audit[index] = with_value(
        audit[index],
        C.encode(codec.AUDIT_RECORD, {"payload": payload, "key_id": key_id or envelope["key_id"], "mac": envelope["mac"]}),
    )
    return b.source.replaced("refusals", refusals).replaced("audit", audit)


def test_an_audit_record_whose_key_id_is_not_pinned_is_a_mismatch(built: Built) -> None:
    source = forged_refusal(built, key_id="hmac-sha256:" + "e" * 16)
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    index = audit_index(built, "activity.refused")
    problem = first_problem(report, "audit")
    assert located(problem) == ("AUDIT_KEY_NOT_PINNED", "audit", built.records("audit")[index].offset)
    assert (problem.audit_seq, problem.expected, problem.recomputed) == (
        index,
        built.keys.audit.key_id,
        "hmac-sha256:" + "e" * 16,
    )
    # and the edited refusal is not vouched for by anything: it is named too
    assert report.header.audit is not None and report.header.audit.further_problems == 1


def test_without_the_audit_key_nothing_is_verified(built: Built) -> None:
    """M5: with no audit key pinned the forged refusal is not caught, so the verdict must not be exit 0."""
    public_only = TrustedKeys(ed25519=dict(built.trusted.ed25519))
    report = built.verify(forged_refusal(built, key_id=None), trusted=public_only)
    lines = assert_exit(report, EXIT_NOT_FULLY_VERIFIED)
    assert [p.code for p in report.header.unchecked] == ["AUDIT_MACS_NOT_VERIFIED"]
    assert report.header.audit is not None and not report.header.audit.macs_verified
    assert (
        f"  NOT CHECKED AUDIT_MACS_NOT_VERIFIED -- no audit key is pinned: the MACs of the partition's audit records (key {built.keys.audit.key_id})"
        in "\n".join(lines)
    )
    assert lines[-1].startswith("not fully verified -- not checked: AUDIT_MACS_NOT_VERIFIED;")
    # the untouched run, without the key, is not verified either
    assert built.verify(trusted=public_only).exit_code == EXIT_NOT_FULLY_VERIFIED


def test_a_missing_refusals_stream_is_a_mismatch(built: Built, tmp_path: Path) -> None:
    index = audit_index(built, "activity.refused")
    mirror = built.records("audit")[index]
    for source in (
        built.source.replaced("refusals", []),
        dump_of(built, tmp_path / "dump", blobs=None, with_cas=False, drop=("refusals",)),
    ):
        report = built.verify(source)
        assert_exit(report, EXIT_MISMATCH)
        problem = first_problem(report, "audit")
        assert located(problem) == ("REFUSALS_STREAM_MISSING", "audit", mirror.offset)
        assert (problem.audit_seq, problem.expected) == (index, audits(built)[index]["record_hash"])


def test_a_kcat_capture_without_the_refusals_topic_is_not_fully_verified(built: Built, tmp_path: Path) -> None:
    streams = ("journal", "audit", "checkpoints", "deadletter")
    files = [kcat_file(built, tmp_path / f"{stream}.json", stream) for stream in streams]
    capture = KcatSource(files, PREFIX)
    report = built.verify(capture)
    lines = assert_exit(report, EXIT_NOT_FULLY_VERIFIED)
    assert [p.code for p in report.header.unchecked] == ["REFUSALS_NOT_CAPTURED"]
    assert report.header.unchecked[0].message.startswith(
        "the audit chain mirrors 1 refusal of this run, but the capture has no refusals topic"
    )
    assert all(stage.ok for stage in report.stages)
    assert (
        lines[-1]
        == "not fully verified -- not checked: REFUSALS_NOT_CAPTURED; nothing that was checked failed, but this is not a pass."
    )
    # with the refusals topic it verifies; without a store as well, both are named
    files.append(kcat_file(built, tmp_path / "refusals.json", "refusals"))
    assert built.verify(KcatSource(files, PREFIX)).exit_code == EXIT_VERIFIED
    bare = built.verify(KcatSource(files[:4], PREFIX), cas=None)
    assert [p.code for p in bare.header.unchecked] == ["NO_CONTENT_STORE", "REFUSALS_NOT_CAPTURED"]


def test_a_kcat_capture_without_the_deadletter_topic_is_not_fully_verified(built: Built, tmp_path: Path) -> None:
    streams = ("journal", "audit", "checkpoints", "refusals")
    files = [kcat_file(built, tmp_path / f"{stream}.json", stream) for stream in streams]
    report = built.verify(KcatSource(files, PREFIX))
    lines = assert_exit(report, EXIT_NOT_FULLY_VERIFIED)
    assert [p.code for p in report.header.unchecked] == ["DEADLETTERS_NOT_CAPTURED"]
    assert report.header.unchecked[0].message.startswith(
        "the audit chain mirrors 2 dead letters on this partition, but the capture has no dead-letter topic"
    )
    assert lines[-1].startswith("not fully verified -- not checked: DEADLETTERS_NOT_CAPTURED;")
    files.append(kcat_file(built, tmp_path / "deadletter.json", "deadletter"))
    assert built.verify(KcatSource(files, PREFIX)).exit_code == EXIT_VERIFIED


# ---------------------------------------------------------------------------
# deleted journal (M7), input accounting and dead letters (M6)
# ---------------------------------------------------------------------------


def test_deleted_journal_is_a_mismatch_even_with_blanked_audit_keys(built: Built) -> None:
    journal = [r for r in built.records("journal") if r.key != RUN.encode()]
    audit = [replace(r, key=b"") for r in built.records("audit")]
    report = built.verify(built.source.replaced("journal", journal).replaced("audit", audit))
    assert_exit(report, EXIT_MISMATCH)
    (problem,) = report.header.dump_problems
    mirrored = sum(1 for a in audits(built) if a["run_id"] == RUN and a["event"] != "activity.refused")
    assert mirrored == 4 + 3  # results and seals (two periodic, the final): a refusal mirrors no journal record
    assert (problem.code, problem.message) == (
        "JOURNAL_MISSING",
        f"the journal holds no records of run {RUN!r}, but the audit chain mirrors {mirrored} crossings of it (journal records deleted)",
    )


def test_audit_records_that_do_not_authenticate_do_not_make_a_run_exist(built: Built) -> None:
    """A run named only by forged audit payloads (MACs that do not verify) is not found, not 'deleted'."""
    index = audit_index(built, "activity.result", OTHER)
    audit = list(built.records("audit"))
    envelope = C.decode(audit[index].value or b"").record
    decoded = C.decode(envelope["payload"])
    payload = C.encode(decoded.schema.name, {**decoded.record, "run_id": "run-ghost"})
    audit[index] = with_value(audit[index], C.encode(codec.AUDIT_RECORD, {**envelope, "payload": payload}))
    report = built.verify(built.source.replaced("audit", audit), run_id="run-ghost")
    assert (report.exit_code, report.header.found, report.header.dump_problems) == (EXIT_NOT_FOUND, False, ())


def accounting(tmp_path: Path, script: Callable[[Writer], None]) -> tuple[Built, Problem]:
    b = build(tmp_path, script=script)
    report = b.verify()
    assert_exit(report, EXIT_MISMATCH)
    return b, first_problem(report, "audit")


def test_a_skipped_input_offset_is_named(tmp_path: Path) -> None:
    """The scheduler's group offset moved past a submission (M6): every output is intact, one input produced none."""

    def script(w: Writer) -> None:
        w.stage(RUN, "stage-0")
        w.stage(RUN, "stage-1")  # input offset 1, then a periodic seal at the same offset
        w.stage(RUN, "stage-2", at=3)  # input offset 2 was never processed
        w.close(RUN)

    b, problem = accounting(tmp_path, script)
    index = [i for i, a in enumerate(audits(b)) if a["input"]["offset"] == 3][0]
    assert located(problem) == ("INPUT_OFFSET_GAP", "audit", b.records("audit")[index].offset)
    assert (problem.audit_seq, problem.expected, problem.recomputed) == (index, "2", "3")
    assert "input offset 2 produced no output" in problem.message


def test_an_input_offset_accounted_for_twice_is_named(tmp_path: Path) -> None:
    def script(w: Writer) -> None:
        w.stage(RUN, "stage-0")
        w.stage(RUN, "stage-1", at=0)  # a second crossing for input offset 0
        w.close(RUN)

    b, problem = accounting(tmp_path, script)
    assert located(problem) == ("INPUT_OFFSET_REPEATED", "audit", b.records("audit")[1].offset)
    assert (problem.audit_seq, problem.expected, problem.recomputed) == (1, "1", "0")


class RetainedSource(MemorySource):
    """The records of ``source``, on a cluster whose input partition's log starts at ``start`` (retention removed
    the submissions before it, after they were processed)."""

    def __init__(self, source: MemorySource, start: int) -> None:
        super().__init__({stream: source.all(stream) for stream in TOPICS})
        self.start = start

    def log_start(self, stream: str, partition: int) -> int:
        return self.start if stream == "submissions" else 0


def test_input_offsets_going_backwards_are_named(tmp_path: Path) -> None:
    def script(w: Writer) -> None:
        w.stage(RUN, "stage-0", at=5)
        w.stage(OTHER, "other-0", at=6)
        w.stage(RUN, "stage-1", at=4)
        w.close(RUN, at=7)

    b = build(tmp_path, script=script)
    report = b.verify(RetainedSource(b.source, 5))  # the input log starts at 5: the chain's first offset is due
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("INPUT_OFFSET_OUT_OF_ORDER", "audit", b.records("audit")[2].offset)
    assert (problem.audit_seq, problem.expected, problem.recomputed) == (2, "7", "4")


def late_start(w: Writer) -> None:
    """The scheduler's group offset was reset past the partition's first two submissions: it starts at offset 2."""
    w.stage(RUN, "stage-0", at=2)
    w.stage(RUN, "stage-1")
    w.close(RUN)


def test_a_chain_that_starts_past_the_first_input_offset_is_named(tmp_path: Path) -> None:
    b, problem = accounting(tmp_path, late_start)
    assert located(problem) == ("INPUT_OFFSET_GAP", "audit", b.records("audit")[0].offset)
    assert (problem.audit_seq, problem.expected, problem.recomputed) == (0, "0", "2")
    assert "the chain's first record, accounts for input offset 2, but the input partition starts at offset 0" in (
        problem.message
    )
    assert "input offsets 0..1 produced no output" in problem.message
    # where the source says the input log starts there (retention removed 0 and 1), it verifies
    assert_exit(b.verify(RetainedSource(b.source, 2)), EXIT_VERIFIED)
    # a log that starts at 1 still lacks offset 1
    problem = first_problem(b.verify(RetainedSource(b.source, 1)), "audit")
    assert (problem.code, problem.expected, problem.recomputed) == ("INPUT_OFFSET_GAP", "1", "2")
    assert "input offset 1 produced no output" in problem.message


def test_an_export_records_where_the_input_log_starts(tmp_path: Path) -> None:
    b = build(tmp_path, script=late_start)
    export_dump(RetainedSource(b.source, 2), tmp_path / "dump", cas=b.store, runs=[RUN], trusted=b.trusted)
    manifest_path = tmp_path / "dump" / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    assert manifest["log_start"] == {"submissions": {"0": 2}}
    cas = DirBlobStore(tmp_path / "dump" / "cas")
    assert DumpSource(tmp_path / "dump").log_start("submissions", 0) == 2
    assert_exit(b.verify(DumpSource(tmp_path / "dump"), cas=cas), EXIT_VERIFIED)
    # the same dump with the log start edited out (or made nonsense) is held to offset 0
    for edited in ({}, {"submissions": {"0": "2"}}, {"submissions": {"0": -1}}):
        manifest_path.write_text(json.dumps({**manifest, "log_start": edited}), encoding="utf-8")
        problem = first_problem(b.verify(DumpSource(tmp_path / "dump"), cas=cas), "audit")
        assert (problem.code, problem.expected, problem.recomputed) == ("INPUT_OFFSET_GAP", "0", "2")


def test_an_edited_dead_letter_is_named(built: Built) -> None:
    letter, second = built.records("deadletter")
    value = letter.value or b""
    changed = value.replace(b"definitely not avro", b"definitely not AVRO")
    assert changed != value
    report = built.verify(built.source.replaced("deadletter", [with_value(letter, changed), second]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("DEADLETTER_NOT_AUDITED", "deadletter", letter.offset)
    assert problem.recomputed == sha256_digest(b"definitely not avro")  # its raw_sha256; the raw bytes no longer hash to it
    assert "holds raw bytes hashing to" in problem.message


def test_a_deleted_dead_letter_is_named(built: Built) -> None:
    letter, second = built.records("deadletter")
    index = [i for i, a in enumerate(audits(built)) if a["event"] == "input.deadletter"][0]
    report = built.verify(built.source.replaced("deadletter", [second]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("DEADLETTER_MISSING", "audit", built.records("audit")[index].offset)
    assert (problem.audit_seq, problem.expected) == (index, sha256_digest(b"definitely not avro"))


def test_a_missing_deadletter_stream_is_a_mismatch(built: Built, tmp_path: Path) -> None:
    """The audit chain mirrors dead letters; the source (memory, a dump of ours) has no dead-letter stream at all."""
    index = audit_index(built, "input.deadletter", run_id="")
    mirror = built.records("audit")[index]
    for source in (
        built.source.replaced("deadletter", []),
        dump_of(built, tmp_path / "dump", blobs=None, with_cas=False, drop=("deadletter",)),
    ):
        report = built.verify(source)
        assert_exit(report, EXIT_MISMATCH)
        problem = first_problem(report, "audit")
        assert located(problem) == ("DEADLETTER_STREAM_MISSING", "audit", mirror.offset)
        assert (problem.audit_seq, problem.expected) == (index, sha256_digest(b"definitely not avro"))
        assert "mirrors 2 dead letters on this partition" in problem.message


def test_a_dead_letter_whose_code_was_changed_is_named(built: Built) -> None:
    letter, second = built.records("deadletter")
    decoded = C.decode(letter.value or b"")
    original = decoded.record["code"]
    forged = C.encode(decoded.schema.name, {**decoded.record, "code": "EMPTY_VALUE"})
    assert original != "EMPTY_VALUE"
    report = built.verify(built.source.replaced("deadletter", [with_value(letter, forged), second]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    index = audit_index(built, "input.deadletter", run_id="")
    assert located(problem) == ("DEADLETTER_CODE_MISMATCH", "deadletter", letter.offset)
    assert (problem.audit_seq, problem.expected, problem.recomputed) == (index, original, "EMPTY_VALUE")


def test_an_export_of_one_run_carries_its_partitions_dead_letters(built: Built, tmp_path: Path) -> None:
    export_dump(built.source, tmp_path / "dump", cas=built.store, runs=[RUN], trusted=built.trusted)
    manifest = json.loads((tmp_path / "dump" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["streams"]["deadletter"]["0"]["records"] == 2
    report = built.verify(DumpSource(tmp_path / "dump"), cas=DirBlobStore(tmp_path / "dump" / "cas"))
    assert_exit(report, EXIT_VERIFIED)


# ---------------------------------------------------------------------------
# open runs
# ---------------------------------------------------------------------------


def open_script(w: Writer) -> None:
    w.stage(RUN, "stage-0")
    w.stage(RUN, "stage-1")
    w.stage(RUN, "stage-2")


def test_an_open_run_has_its_own_verdict(tmp_path: Path) -> None:
    b = build(tmp_path, script=open_script)
    report = b.verify()
    lines = assert_exit(report, EXIT_OPEN)
    assert not report.ok  # ok means exit 0, in the report as in --json
    assert report.header.open and report.header.seal is not None and report.header.seal.ok
    assert (report.header.seal.final, report.header.seal.covered) == (False, 2)
    assert (
        lines[2]
        == f"  OPEN seal (no final seal yet: the last valid seal covers 2 entries, 1 periodic seal signed by pinned key {b.keys.signer.key_id})"
    )
    assert lines[-1] == "open -- run is not sealed yet; 3 entries verified so far."
    assert (json_of(report)["verdict"], json_of(report)["open"]) == ("open", True)
    # a check that could not be run beats "open"; a mismatch beats both
    assert b.verify(cas=None).exit_code == EXIT_NOT_FULLY_VERIFIED
    (index, entry), *_ = entries(b)
    source = b.source.replaced("journal", [with_value(r, b"x") if r is entry else r for r in b.records("journal")])
    assert b.verify(source).exit_code == EXIT_MISMATCH


def test_a_journal_cut_after_a_seal_is_not_an_open_run(built: Built) -> None:
    """The final seal deleted, its audit record kept: the audit chain proves it was written."""
    index, final = seals(built)[-1]
    source = edited(built, "journal", lambda rs: [r for r in rs if r is not final])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert not report.header.open
    assert first_problem(report, "seal").code == "RUN_NOT_SEALED"
    mirror = audit_index(built, "run.sealed", nth=2)
    assert located(first_problem(report, "audit")) == ("JOURNAL_TRUNCATED", "audit", built.records("audit")[mirror].offset)


def test_a_final_seal_that_does_not_verify_is_not_an_open_run(built: Built) -> None:
    index, final = seals(built)[-1]
    value = bytearray(final.value or b"")
    value[-3] ^= 1  # inside the signature
    source = edited(built, "journal", lambda rs: [with_value(r, bytes(value)) if r is final else r for r in rs])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert located(first_problem(report, "seal")) == ("SEAL_SIGNATURE_INVALID", "journal", final.offset)
    assert report.header.seal is not None and report.header.seal.further_problems == 1  # RUN_NOT_SEALED
    assert not report.header.open


# ---------------------------------------------------------------------------
# the chain codes
# ---------------------------------------------------------------------------


def test_run_on_several_partitions(built: Built) -> None:
    index, record = entries(built)[2]
    source = edited(built, "journal", lambda rs: [replace(r, partition=1) if r is record else r for r in rs])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    (problem,) = report.header.dump_problems
    assert problem.code == "RUN_ON_SEVERAL_PARTITIONS"
    assert problem.message == f"run {RUN!r} has journal records on partitions [0, 1]; a run lives on exactly one"


def test_entry_undecodable(built: Built) -> None:
    index, record = entries(built)[1]
    broken = entry_value(b"\xc3\x01" + b"\x00" * 8 + b"not a payload")
    source = edited(built, "journal", lambda rs: [with_value(r, broken) if r is record else r for r in rs])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "chain")
    assert located(problem) == ("ENTRY_UNDECODABLE", "journal", record.offset)
    assert problem.expected == problem.recomputed == journal_entry_hash(b"\xc3\x01" + b"\x00" * 8 + b"not a payload")


def test_entry_wrong_run(built: Built) -> None:
    index, record = entries(built)[1]
    (_, foreign), *_ = entries(built, OTHER)
    source = edited(built, "journal", lambda rs: [with_value(r, foreign.value or b"") if r is record else r for r in rs])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "chain")
    assert located(problem) == ("ENTRY_WRONG_RUN", "journal", record.offset)
    assert problem.seq == 0  # the other run's seq, as the record states it


def test_entry_out_of_order(built: Built) -> None:
    """An old entry replayed later: a copy of seq 0 right after seq 1."""
    (_, first), (index, second), *_ = entries(built)
    source = edited(built, "journal", lambda rs: renumbered([*rs[: index + 1], first, *rs[index + 1 :]]))
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "chain")
    assert located(problem) == ("ENTRY_OUT_OF_ORDER", "journal", second.offset + 1)
    assert problem.seq == 0


def test_chain_link_broken(built: Built) -> None:
    """An insider rewrites seq 2's prev_hash and recomputes its entry hash: the link is what breaks."""
    index, record = entries(built)[2]
    payload = C.decode(record.value or b"").record["payload"]
    entry = C.decode(payload).record
    forged = C.encode(codec.JOURNAL_ENTRY, {**entry, "prev_hash": "sha256:" + "ab" * 32})
    source = edited(built, "journal", lambda rs: [with_value(r, entry_value(forged)) if r is record else r for r in rs])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "chain")
    assert located(problem) == ("CHAIN_LINK_BROKEN", "journal", record.offset)
    assert (problem.seq, problem.recomputed) == (2, "sha256:" + "ab" * 32)


# ---------------------------------------------------------------------------
# the seal codes
# ---------------------------------------------------------------------------


def test_seal_undecodable(built: Built) -> None:
    index, first = seals(built)[0]
    bad = seal_value(built, b"not a seal payload")
    source = edited(built, "journal", lambda rs: [with_value(r, bad) if r is first else r for r in rs])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert located(first_problem(report, "seal")) == ("SEAL_UNDECODABLE", "journal", first.offset)


def test_seal_wrong_run(built: Built) -> None:
    """run-b's final seal (validly signed) copied over run-a's first periodic seal."""
    index, first = seals(built)[0]
    (_, foreign), *_ = seals(built, OTHER)
    source = edited(built, "journal", lambda rs: [with_value(r, foreign.value or b"") if r is first else r for r in rs])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert located(first_problem(report, "seal")) == ("SEAL_WRONG_RUN", "journal", first.offset)


def test_seal_duplicate_final(built: Built) -> None:
    """The final seal delivered twice: a second final seal, whose audit record does not exist."""
    index, final = seals(built)[-1]
    source = edited(built, "journal", lambda rs: renumbered([*rs[: index + 1], final, *rs[index + 1 :]]))
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert located(first_problem(report, "seal")) == ("SEAL_DUPLICATE_FINAL", "journal", final.offset + 1)
    problem = first_problem(report, "audit")
    assert located(problem) == ("AUDIT_TRUNCATED", "journal", final.offset + 1)


def test_entry_after_final_seal(built: Built) -> None:
    """An insider appends a well-chained entry after the run's final seal."""
    (_, last) = entries(built)[-1]
    index, final = seals(built)[-1]
    head = C.decode(last.value or b"").record["entry_hash"]
    entry = C.decode(C.decode(last.value or b"").record["payload"]).record
    extra = entry_value(C.encode(codec.JOURNAL_ENTRY, {**entry, "seq": 4, "prev_hash": head, "stage_id": "stage-late"}))
    late = replace(final, value=extra)
    source = edited(built, "journal", lambda rs: renumbered([*rs[: index + 1], late, *rs[index + 1 :]]))
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "seal")
    assert located(problem) == ("ENTRY_AFTER_FINAL_SEAL", "journal", final.offset + 1)
    assert problem.seq == 4
    assert located(first_problem(report, "audit")) == ("AUDIT_MISSING_ENTRY", "journal", final.offset + 1)


# ---------------------------------------------------------------------------
# the audit codes
# ---------------------------------------------------------------------------


def test_audit_out_of_order(built: Built) -> None:
    """One audit record delivered twice."""
    audit = list(built.records("audit"))
    report = built.verify(built.source.replaced("audit", renumbered([*audit[:4], audit[3], *audit[4:]])))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert (located(problem), problem.audit_seq) == (("AUDIT_OUT_OF_ORDER", "audit", 4), 3)


def test_audit_link_broken(built: Built) -> None:
    """An insider with the audit key rewrites one record's prev_mac (and its MAC)."""
    forged = "hmac-sha256:" + "0" * 64
    audit = rewrite_audit(built, 3, relink=False, prev_mac=forged)
    report = built.verify(built.source.replaced("audit", audit))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("AUDIT_LINK_BROKEN", "audit", audit[3].offset)
    assert (problem.audit_seq, problem.expected, problem.recomputed) == (3, audits(built)[3]["prev_mac"], forged)


def test_audit_wrong_partition(built: Built) -> None:
    audit = rewrite_audit(built, 2, partition=1)
    report = built.verify(built.source.replaced("audit", audit))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert (located(problem), problem.audit_seq) == (("AUDIT_WRONG_PARTITION", "audit", audit[2].offset), 2)
    # relinking the chain after it changed every later MAC, and each later seal and checkpoint signed the original heads
    later_checkpoints = [c for c in checkpoints(built) if c["audit_seq"] > 2]
    assert later_checkpoints
    assert report.header.audit is not None and report.header.audit.further_problems == len(seals(built)) + len(
        seals(built, OTHER)
    ) - 1 + len(later_checkpoints)


def test_audit_undecodable(built: Built) -> None:
    """A journal record where an audit record belongs."""
    audit = list(built.records("audit"))
    _, entry = entries(built)[0]
    audit[2] = with_value(audit[2], entry.value or b"")
    report = built.verify(built.source.replaced("audit", audit))
    assert_exit(report, EXIT_MISMATCH)
    assert located(first_problem(report, "audit")) == ("AUDIT_UNDECODABLE", "audit", audit[2].offset)


def test_audit_truncated(built: Built) -> None:
    """The audit tail cut from run-a's final seal on: the seal commits an audit seq the chain never reaches."""
    mirror = audit_index(built, "run.sealed", nth=2)
    index, final = seals(built)[-1]
    report = built.verify(built.source.replaced("audit", built.records("audit")[:mirror]))
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("AUDIT_TRUNCATED", "journal", final.offset)
    assert (problem.seq, problem.audit_seq) == (4, mirror)


def test_seal_audit_head_mismatch(built: Built) -> None:
    """An insider holding both keys re-signs a seal committing another audit head, and re-MACs the audit chain
    so that the seal's audit record mirrors the new seal: only the committed head disagrees."""
    index, first = seals(built)[0]
    envelope = C.decode(first.value or b"").record
    seal = C.decode(envelope["payload"]).record
    payload = C.encode(codec.RUN_SEAL, {**seal, "audit_head": "hmac-sha256:" + "1" * 64})
    value = seal_value(built, payload)
    mirror = audit_index(built, "run.sealed")
    audit = rewrite_audit(built, mirror, record_hash=sha256_digest(value))
    source = edited(built, "journal", lambda rs: [with_value(r, value) if r is first else r for r in rs]).replaced("audit", audit)
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    problem = first_problem(report, "audit")
    assert located(problem) == ("SEAL_AUDIT_HEAD_MISMATCH", "journal", first.offset)
    assert (problem.expected, problem.recomputed) == ("hmac-sha256:" + "1" * 64, seal["audit_head"])
    assert report.header.seal is not None and report.header.seal.ok


# ---------------------------------------------------------------------------
# incomplete computer-use sessions (M8)
# ---------------------------------------------------------------------------


def test_actions_of_a_session_without_a_result_are_replayed_and_shown(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "keys")
    script, records = session_script(keys, tmp_path)
    b = build(tmp_path, script=script, keys=keys)
    report = b.verify()
    lines = assert_exit(report, EXIT_VERIFIED)  # every action verifies: a truthful record of a stopped worker
    stage, session = report.stages
    assert (stage.stage_id, stage.ok, session.stage_id, session.incomplete, session.ok) == (
        "stage-0",
        True,
        "browser-0",
        True,
        True,
    )
    assert session.notes == (
        "3 steps replayed",
        "evidence reattached",
        "lineage HMACs of 3 action(s) are their producer's local check, by design (its lineage key never leaves the host); their pinned Ed25519 signatures verified",
    )
    assert [d.text for d in session.details] == [
        "step OK index=0 navigate",
        "step OK index=1 click",
        "step OK index=2 submit",
        "head NONE -- no accepted browser result names this session's head: 3 journalled actions verified, its end is not vouched for",
    ]
    assert lines[-2] == f"    by navigator@test (key {producer_signer('navigator@test').key_id})"
    assert lines[-7] == (
        "  INCOMPLETE browser-0 [browser] (3 steps replayed, evidence reattached, lineage HMACs of 3 action(s) are "
        "their producer's local check, by design (its lineage key never leaves the host); their pinned Ed25519 "
        "signatures verified) -- the session never produced an accepted "
        "browser result (worker stopped, or its result was refused)"
    )
    assert (
        lines[-1] == "verified -- every activity reconstructs from the journal; 1 incomplete session verified as far as it went."
    )
    assert json_of(report)["stages"][1]["incomplete"] is True

    # a flipped screenshot byte of one of its actions is a mismatch, named at the action
    path = b.store.path_of(records[1].screenshot_hash)
    path.write_bytes(path.read_bytes()[:-1] + b"!")
    report = b.verify()
    assert_exit(report, EXIT_MISMATCH)
    session = report.stages[1]
    assert session.failed and session.incomplete
    assert session.reason.startswith("browser replay diverged at action 1 (screenshot_changed)")
    # without a store its actions are not checked: not a pass
    report = b.verify(cas=None)
    assert report.exit_code == EXIT_NOT_FULLY_VERIFIED
    assert report.stages[1].unchecked == "3 journalled actions of an incomplete session not replayed (no content store)"


# ---------------------------------------------------------------------------
# text report escaping (L1)
# ---------------------------------------------------------------------------


def test_control_characters_in_the_data_cannot_forge_report_lines(built: Built) -> None:
    """A seal re-signed by an unpinned key whose key id carries a newline, ANSI escapes and a forged verdict."""
    index, final = seals(built)[-1]
    hostile = "k\x1b[2K\r\nverified -- every activity reconstructs from the journal.\u202e"
    envelope = C.decode(final.value or b"").record
    value = C.encode(codec.SEAL_RECORD, {**envelope, "key_id": hostile})
    source = edited(built, "journal", lambda rs: [with_value(r, value) if r is final else r for r in rs])
    report = built.verify(source)
    lines = assert_exit(report, EXIT_MISMATCH)
    assert VERIFIED not in lines
    assert not any("\x1b" in line or "\r" in line or "\u202e" in line for line in lines)
    seal_line = [line for line in lines if line.startswith("  MISMATCH seal")][0]
    assert "k\\x1b[2K\\r\\nverified -- every activity reconstructs from the journal.\\u202e" in seal_line
    assert escape("plain line") == "plain line"
    assert escape("a\tb\x00\x85") == "a\\tb\\x00\\x85"


# ---------------------------------------------------------------------------
# every documented code is asserted by name somewhere
# ---------------------------------------------------------------------------


def test_every_documented_code_is_asserted_by_some_test() -> None:
    docs = (REPO / "docs" / "verifier.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([A-Z][A-Z_]+)` \|", docs, re.MULTILINE))
    assert len(documented) >= 45
    sources = "\n".join(
        path.read_text(encoding="utf-8")
        for folder, pattern in (("unit", "test_*.py"), ("integration", "test_*.py"), ("support", "*.py"))
        for path in sorted((REPO / "tests" / folder).rglob(pattern))  # tests/unit/differential/ too
        if path.name != Path(__file__).name
    )
    mine = Path(__file__).read_text(encoding="utf-8").split("def test_every_documented_code_is_asserted_by_some_test")[0]
    quoted = set(re.findall(r"""["']([A-Z][A-Z_]+)["']""", sources + mine))
    assert sorted(documented - quoted) == []


# ---------------------------------------------------------------------------
# who did what (security review F4): every stage and the close name their producer and key
# ---------------------------------------------------------------------------


def test_a_run_made_by_two_producers_names_both_per_stage_and_who_closed_it(tmp_path: Path) -> None:
    def two_producers(w: Writer) -> None:
        w.stage(RUN, "by-alice", producer="coder@host")
        w.stage(RUN, "by-mallory", producer="tester@host")
        w.close(RUN, producer="tester@host")

    built = build(tmp_path, script=two_producers)
    report = built.verify()
    assert report.exit_code == EXIT_VERIFIED  # both are registered and signed: attributed, not refused
    keys = {name: producer_signer(name).key_id for name in ("coder@host", "tester@host")}
    assert [(s.stage_id, s.producer, s.key_id) for s in report.stages] == [
        ("by-alice", "coder@host", keys["coder@host"]),
        ("by-mallory", "tester@host", keys["tester@host"]),
    ]
    document = json_of(report)
    assert [(s["stage_id"], s["producer"], s["key_id"]) for s in document["stages"]] == [
        ("by-alice", "coder@host", keys["coder@host"]),
        ("by-mallory", "tester@host", keys["tester@host"]),
    ]
    assert (document["seal"]["closed_by"], document["seal"]["closed_by_key"]) == ("tester@host", keys["tester@host"])
    _, lines = text_of(report)
    at = lines.index("  OK by-mallory [coding] (evidence reattached)")
    assert lines[at + 1] == f"    by tester@host (key {keys['tester@host']})"  # a coding stage has no detail lines
    assert f"    by coder@host (key {keys['coder@host']})" in lines
    (seal_line,) = [line for line in lines if line.startswith("  OK seal ")]
    assert seal_line.endswith(f", closed by tester@host (key {keys['tester@host']}))")


def test_a_run_whose_only_records_were_refused_is_not_found_never_deleted(tmp_path: Path) -> None:
    """Its audit records mirror refusals, not journal records: "not found" (exit 1), not JOURNAL_MISSING (exit 2)."""

    def refused_only(w: Writer) -> None:
        w.stage(RUN, "stage-0")
        w.stage("run-refused", "s0", role="nobody")  # refused: unknown role
        w.close("run-refused")  # refused: nothing to seal (RUN_EMPTY)
        w.close(RUN)

    built = build(tmp_path, script=refused_only)
    assert [a["event"] for a in audits(built) if a["run_id"] == "run-refused"] == ["activity.refused"] * 2
    report = built.verify(run_id="run-refused")
    assert (report.exit_code, report.header.found, report.header.dump_problems) == (EXIT_NOT_FOUND, False, ())
    (many,) = [r for r in verify_many(["run-refused"], built.source, cas=built.store, trusted=built.trusted)]
    assert many.exit_code == EXIT_NOT_FOUND
