"""Round trips of ``bernstein activity verify``: live Kafka, our dump, kcat dumps, offline, exit codes, memory.

The run is the shared realistic one (``tests.support.tamper.build_realistic_run``):
run-main (six coding stages, screenshots and a page among the evidence, a
refused redundant stage, seals every three entries and a final seal),
run-side interleaved on the same partition, and run-empty (closed with no
activity: a final seal only).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bernstein.substrate.config import Topics
from tests.conftest import kcat_security
from tests.support import pipeline as pk
from tests.support import tamper as kit
from tests.support.producers import producer_signer

pytestmark = pytest.mark.integration

VERIFIED = "verified -- every activity reconstructs from the journal."


def expected_report(run: kit.RealisticRun, view: kit.DumpView, *, live: bool = False) -> list[str]:
    """The whole human report of run-main, as the seed's format plus the chain/seal/audit lines. ``live``: from the
    topics, which hold the whole journal partition (the dump holds both of its runs: every record of it), so the
    audit line also names the Merkle log."""
    audit_records = len(view.audit)
    main_crossings = view.crossings()
    return [
        f"Activity verify run={kit.MAIN_RUN}",
        f"  OK chain (6 entries on partition 0, head {view.entry_hash(5)})",
        f"  OK seal (final seal covers 6 entries, 3 seals signed by pinned key {run.keys.signer.key_id}"
        f"{pk.closed_by(view, kit.MAIN_RUN)})",
        f"  OK audit ({audit_records} records on the partition, MACs verified with pinned key {run.keys.audit.key_id}; "
        f"{main_crossings} of this run agree with the journal, 1 refusal; {view.checkpoint_words(whole=True if live else None)})",
        producers_line(run, view),
        *view.refusal_lines(kit.MAIN_RUN),
        *[line for stage in kit.MAIN_STAGES for line in (f"  OK {stage} [coding] (evidence reattached)", by_line(view, stage))],
        VERIFIED,
    ]


def by_line(view: kit.DumpView, stage_id: str, run_id: str = kit.MAIN_RUN) -> str:
    """The line under a stage naming its producer and key, from its journal entry."""
    (record,) = [j.record for j in view.journal if j.run_id == run_id and j.kind == "entry" and j.record["stage_id"] == stage_id]
    return f"    by {record['producer_id']} (key {record['producer_key_id']})"


def producers_line(run: kit.RealisticRun, view: kit.DumpView, run_id: str = kit.MAIN_RUN) -> str:
    """The producers line: every entry and the run close signed by the suite's producer, and which keys signed what."""
    entries = [j for j in view.journal if j.run_id == run_id and j.kind == "entry"]
    closes = [s.record["closed_by"] for s in view.seals(run_id) if s.record.get("closed_by")]
    signers = sorted(
        {(j.record["producer_key_id"], j.record["producer_id"]) for j in entries}
        | {(c["key_id"], c["producer_id"]) for c in closes}
    )
    signed = len(entries) + len(closes)
    checkpoint = run.keys.signer.key_id if view.checkpoints() else "none"
    return (
        f"  OK producers ({signed} producer signature{'s' if signed != 1 else ''} verified with pinned producer keys; keys: "
        f"seal {run.keys.signer.key_id}; checkpoint {checkpoint}; audit {run.keys.audit.key_id}; "
        f"producer {', '.join(f'{key_id} ({name})' for key_id, name in signers) or 'none'})"
    )


def verify_args(run: kit.RealisticRun, source: str, run_id: str = kit.MAIN_RUN, *extra: str) -> list[str]:
    return ["activity", "verify", run_id, "--from", source, "--trusted-keys", str(run.trust_file), *extra]


# ---------------------------------------------------------------------------
# (a) live, (b) kcat, (c) determinism
# ---------------------------------------------------------------------------


def test_verify_live_from_kafka(run: kit.RealisticRun, view: kit.DumpView, tmp_path: Path) -> None:
    result = kit.bernstein(verify_args(run, "kafka"), run.env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected_report(run, view, live=True)
    # The seed's own lines, exactly.
    lines = result.stdout.splitlines()
    assert lines[0] == "Activity verify run=run-main"
    assert [line for line in lines if line.startswith("  OK stage-")] == [
        f"  OK stage-{i} [coding] (evidence reattached)" for i in range(6)
    ]
    assert lines[-1] == "verified -- every activity reconstructs from the journal."


def test_verify_exported_dump_matches_live(run: kit.RealisticRun, view: kit.DumpView) -> None:
    code, text, stderr = kit.verify_dump(run, run.dump, json_output=False)
    assert code == 0, stderr
    assert text.splitlines() == expected_report(run, view)


def kcat_export(run: kit.RealisticRun, directory: Path) -> dict[str, Path]:
    """Each topic exported with one real ``kcat -C -J -e`` invocation into its own file."""
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat (Debian package kcat) is required"
    topics = Topics(run.prefix)
    files = {}
    for stream, topic in (
        ("journal", topics.journal),
        ("refusals", topics.refusals),
        ("audit", topics.audit),
        ("checkpoints", topics.checkpoints),
    ):
        path = directory / f"{stream}.json"
        with path.open("wb") as out:
            result = subprocess.run(
                [kcat, *kcat_security(), "-C", "-J", "-e", "-q", "-b", run.bootstrap, "-t", topic],
                stdout=out,
                stderr=subprocess.PIPE,
                timeout=60,
            )
        assert result.returncode == 0, result.stderr.decode()
        files[stream] = path
    return files


def test_kcat_round_trip(run: kit.RealisticRun, view: kit.DumpView, tmp_path: Path) -> None:
    files = kcat_export(run, tmp_path)
    journal_lines = files["journal"].read_bytes().splitlines()
    audit_lines = files["audit"].read_bytes().splitlines()
    assert len(journal_lines) == len(view.journal_items)
    assert len(audit_lines) == len(view.audit_items)
    # kcat writes payload bytes raw (not UTF-8): read lines the way the verifier does.
    assert json.loads(journal_lines[0].decode("utf-8", "surrogateescape"))["topic"] == Topics(run.prefix).journal
    cas = tmp_path / "cas"
    shutil.copytree(run.dump / "cas", cas)
    source = f"{files['journal']},{files['audit']},{files['refusals']},{files['checkpoints']}"
    result = kit.bernstein(
        verify_args(run, source, kit.MAIN_RUN, "--cas", str(cas), "--prefix", run.prefix), kit.offline_env(), cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # A kcat capture holds every record of each topic: the audit line also names the partition's Merkle log
    assert result.stdout.splitlines() == expected_report(run, view, live=True)
    # The report does not depend on the dump's format: what our own dump gives, but for that log, which a dump of
    # selected runs cannot recompute (this one holds both runs, so every other line is the same, byte for byte).
    _, ours, _ = kit.verify_dump(run, run.dump, json_output=False)
    assert ours.splitlines() == expected_report(run, view)
    assert [line for line in result.stdout.splitlines() if "Merkle log" not in line] == [
        line for line in ours.splitlines() if "not covered by a checkpoint yet)" not in line
    ]
    # Without the refusals topic nothing fails, but the audited refusal went unchecked: not a pass (exit 6).
    without_refusals = kit.bernstein(
        verify_args(
            run,
            f"{files['journal']},{files['audit']},{files['checkpoints']}",
            kit.MAIN_RUN,
            "--cas",
            str(cas),
            "--prefix",
            run.prefix,
        ),
        kit.offline_env(),
        cwd=tmp_path,
    )
    assert without_refusals.returncode == 6
    ours_lines, capture_lines = ours.splitlines(), without_refusals.stdout.splitlines()
    # where the dump names the refusal's sender (REFUSED ...), the capture says it could not check refusals
    assert ours_lines[5].startswith("  REFUSED REDUNDANT_STAGE stage stage-0-again [coding] ")
    assert capture_lines[:5] == expected_report(run, view, live=True)[:5] and capture_lines[6:-1] == ours_lines[6:-1]
    assert capture_lines[5] == (
        "  NOT CHECKED REFUSALS_NOT_CAPTURED -- the audit chain mirrors 1 refusal of this run, but the capture has no "
        "refusals topic: they were not checked (add a kcat capture of the refusals topic)"
    )
    assert capture_lines[-1] == (
        "not fully verified -- not checked: REFUSALS_NOT_CAPTURED; nothing that was checked failed, but this is not a pass."
    )
    # A kcat capture carries no blobs: without --cas no evidence is reattached, which is no pass either.
    no_store = kit.bernstein(verify_args(run, source, kit.MAIN_RUN, "--prefix", run.prefix), kit.offline_env(), cwd=tmp_path)
    assert no_store.returncode == 6
    assert no_store.stdout.splitlines()[6].startswith(  # after the REFUSED line of the run's one refusal
        f"  NOT CHECKED NO_CONTENT_STORE -- no content store for kcat dump {files['journal']}"
    )


def test_kcat_dump_names_a_flipped_journal_byte(run: kit.RealisticRun, view: kit.DumpView, tmp_path: Path) -> None:
    """The kcat reader hands the verifier the exact stored bytes: a flip made in a kcat file is named like one in our dump."""
    files = kcat_export(run, tmp_path)
    lines = files["journal"].read_bytes().splitlines(keepends=True)
    line = view.entry(3)
    # kcat writes printable payload bytes raw: the stage id of seq 3 is there as text.
    target = lines[line.index]
    assert target.count(b"\\u000Estage-3") == 1
    lines[line.index] = target.replace(b"\\u000Estage-3", b"\\u000Estage-8")
    files["journal"].write_bytes(b"".join(lines))
    result = kit.bernstein(
        verify_args(
            run,
            f"{files['journal']},{files['audit']}",
            kit.MAIN_RUN,
            "--cas",
            str(run.dump / "cas"),
            "--prefix",
            run.prefix,
            "--json",
        ),
        kit.offline_env(),
        cwd=tmp_path,
    )
    assert result.returncode == 2
    document = json.loads(result.stdout)
    problem = document["chain"]["problem"]
    assert (problem["code"], problem["seq"], problem["offset"], problem["expected"]) == (
        "ENTRY_HASH_MISMATCH",
        3,
        line.offset,
        view.entry_hash(3),
    )
    assert document["chain"]["further_problems"] == 0
    assert [s["stage_id"] for s in document["stages"] if not s["ok"]] == ["stage-8"]


@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_two_runs_print_identical_bytes(json_output: bool, run: kit.RealisticRun, tmp_path: Path) -> None:
    dump = kit.copy_dump(run.dump, tmp_path)
    tampered = tmp_path / "tampered"
    shutil.copytree(dump, tampered)
    journal = kit.topic_file(tampered, "journal")
    items = kit.load_lines(journal)
    del items[kit.entry_line(items, kit.MAIN_RUN, 2).index]
    kit.save_lines(journal, items)
    for target, expected_code in ((dump, 0), (tampered, 2)):
        args = verify_args(run, str(target), kit.MAIN_RUN, *(["--json"] if json_output else []))
        first = kit.bernstein(args, kit.offline_env(), cwd=tmp_path)
        second = kit.bernstein(args, kit.offline_env(), cwd=tmp_path)
        assert first.returncode == second.returncode == expected_code
        assert first.stdout.encode() == second.stdout.encode()
        assert first.stdout


# ---------------------------------------------------------------------------
# (d) offline, with the network disabled
# ---------------------------------------------------------------------------


def test_offline_in_a_network_namespace(run: kit.RealisticRun, view: kit.DumpView, tmp_path: Path) -> None:
    prefix = pk.netns_prefix()
    if prefix is None:
        pytest.skip("neither `unshare -rn` nor `unshare -n` works here")
    dump = kit.copy_dump(run.dump, tmp_path)
    # The probe reaches the broker outside the namespace and fails inside it: the network really is gone.
    assert pk.can_connect(run.bootstrap)
    assert not pk.can_connect(run.bootstrap, prefix)
    env = kit.offline_env()
    assert not [k for k in env if k.startswith("BERNSTEIN_")]
    result = kit.bernstein(verify_args(run, str(dump)), env, cwd=tmp_path, prefix_cmd=prefix)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected_report(run, view)
    assert result.stderr == ""


# ---------------------------------------------------------------------------
# (e) exit codes
# ---------------------------------------------------------------------------


def test_unknown_run_is_not_found(run: kit.RealisticRun, tmp_path: Path) -> None:
    result = kit.bernstein(verify_args(run, str(run.dump), "run-nope"), kit.offline_env(), cwd=tmp_path)
    assert result.returncode == 1
    assert (
        result.stdout
        == f"Activity verify run=run-nope\nNO ACTIVITY -- no journal records for run 'run-nope' in dump {run.dump}\n"
    )
    assert result.stderr == ""
    as_json = kit.bernstein(verify_args(run, str(run.dump), "run-nope", "--json"), kit.offline_env(), cwd=tmp_path)
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    assert (document["found"], document["exit_code"], document["stages"]) == (False, 1, [])
    assert (document["chain"], document["seal"], document["audit"]) == (None, None, None)


def test_a_close_with_nothing_to_seal_leaves_no_run(run: kit.RealisticRun, view: kit.DumpView, tmp_path: Path) -> None:
    """The realistic run closes EMPTY_RUN, which never had a stage: RUN_EMPTY, no seal, no state. Its audit record
    mirrors a refusal, not a journal record, so the run is not found (exit 1), never "journal records deleted"."""
    assert view.seals(kit.EMPTY_RUN) == []
    refusals = [json.loads(line) for line in (run.dump / "topics" / "refusals" / "0.jsonl").read_text().splitlines()]
    assert any(r["key"] == base64.b64encode(kit.EMPTY_RUN.encode()).decode() for r in refusals)
    result = kit.bernstein(verify_args(run, str(run.dump), kit.EMPTY_RUN), kit.offline_env(), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == (
        f"Activity verify run={kit.EMPTY_RUN}\nNO ACTIVITY -- no journal records for run '{kit.EMPTY_RUN}' in dump {run.dump}\n"
    )


def _one_line_error(result: subprocess.CompletedProcess[str], starts: str) -> None:
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(starts), errors[0]


def test_nonexistent_dump_is_a_usage_error(run: kit.RealisticRun, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dump"
    result = kit.bernstein(verify_args(run, str(missing)), kit.offline_env(), cwd=tmp_path)
    _one_line_error(result, f"bernstein: error: --from {missing}: {missing} not found")
    assert len(result.stderr.splitlines()) == 1


def test_garbage_manifest_is_unreadable_input(run: kit.RealisticRun, tmp_path: Path) -> None:
    dump = kit.copy_dump(run.dump, tmp_path)
    (dump / "manifest.json").write_bytes(b'{"format": "bernstein.dump/v1", \x00\xff garbage')
    result = kit.bernstein(verify_args(run, str(dump)), kit.offline_env(), cwd=tmp_path)
    _one_line_error(result, f"bernstein: error: {dump / 'manifest.json'} is unreadable:")
    assert len(result.stderr.splitlines()) == 1
    (dump / "manifest.json").write_text('{"format": "something/else"}\n', encoding="utf-8")
    result = kit.bernstein(verify_args(run, str(dump)), kit.offline_env(), cwd=tmp_path)
    _one_line_error(result, f"bernstein: error: {dump / 'manifest.json'} is not a bernstein.dump/v1 manifest")


def test_corrupt_line_inside_a_dump_file_is_a_verdict(run: kit.RealisticRun, tmp_path: Path) -> None:
    """A broken line followed by more lines is an altered dump file: a named dump problem, exit 2, not 3 (review L6).

    The line is skipped and the rest of the file is still checked.
    """
    dump = kit.copy_dump(run.dump, tmp_path)
    journal = kit.topic_file(dump, "journal")
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[2] = b'{"topic": not json at all\n'
    journal.write_bytes(b"".join(lines))
    code, document, stderr = kit.verify_dump(run, dump)
    assert (code, stderr) == (2, "")
    assert document["ok"] is False
    assert document["dump_problems"] == [
        {"code": "DUMP_LINE_CORRUPTED", "message": f"{journal}:3 is not a valid record line (a line of the file was altered)"}
    ]


def test_bad_flag_is_a_usage_error(run: kit.RealisticRun, tmp_path: Path) -> None:
    result = kit.bernstein([*verify_args(run, str(run.dump)), "--bogus"], kit.offline_env(), cwd=tmp_path)
    _one_line_error(result, "bernstein: error: unrecognized arguments: --bogus")
    missing_keys = kit.bernstein(
        ["activity", "verify", kit.MAIN_RUN, "--from", str(run.dump), "--trusted-keys", str(tmp_path / "nope.json")],
        kit.offline_env(),
        cwd=tmp_path,
    )
    _one_line_error(missing_keys, f"bernstein: error: no trusted-keys file at {tmp_path / 'nope.json'}")


# ---------------------------------------------------------------------------
# (f) the --json report
# ---------------------------------------------------------------------------


def test_json_report_structure(run: kit.RealisticRun, view: kit.DumpView) -> None:
    code, document, _ = kit.verify_dump(run, run.dump)
    assert code == 0
    assert set(document) == {
        "run",
        "source",
        "found",
        "ok",
        "exit_code",
        "verdict",
        "open",
        "records_only",
        "reason",
        "dump_problems",
        "unchecked",
        "chain",
        "seal",
        "audit",
        "producers",
        "keys",
        "refusals",
        "stages",
    }
    assert (document["run"], document["found"], document["ok"], document["exit_code"]) == (kit.MAIN_RUN, True, True, 0)
    (refusal,) = [line for line in view.refusal_lines() if "REDUNDANT_STAGE" in line]
    assert [{k: r[k] for k in ("code", "stage_id", "producer", "key_id", "authenticated")} for r in document["refusals"]] == [
        {
            "code": "REDUNDANT_STAGE",
            "stage_id": "stage-0-again",
            "producer": "coder@tamper-suite",
            "key_id": producer_signer("coder@tamper-suite").key_id,
            "authenticated": True,
        }
    ]
    assert f"offset {document['refusals'][0]['offset']})" in refusal
    assert document["source"] == f"dump {run.dump}"
    assert document["dump_problems"] == [] and document["reason"] == ""
    assert (document["verdict"], document["open"], document["records_only"], document["unchecked"]) == (
        "verified",
        False,
        False,
        [],
    )
    assert document["chain"] == {
        "ok": True,
        "entries": 6,
        "head": view.entry_hash(5),
        "partition": 0,
        "problem": None,
        "further_problems": 0,
    }
    assert document["seal"] == {
        "ok": True,
        "seals": 3,
        "final": True,
        "covered": 6,
        "key_ids": [run.keys.signer.key_id],
        "closed_by": "coder@tamper-suite",  # the signed RunClose.v2 the final seal carries
        "closed_by_key": producer_signer("coder@tamper-suite").key_id,
        "problem": None,
        "further_problems": 0,
    }
    assert document["audit"] == {
        "ok": True,
        "records": len(view.audit),
        "run_records": len(kit.MAIN_STAGES) + 3 + 1,
        "refusals": 1,
        "macs_verified": True,
        "key_ids": [run.keys.audit.key_id],
        "note": "",
        "checkpoints": len(view.checkpoints()),
        "uncovered": len(view.audit) - view.checkpoints()[-1]["audit_seq"],
        "tree_leaves": None,  # a dump of selected runs: the partition's Merkle log is not recomputed
        "tree_heads": 0,
        "problem": None,
        "further_problems": 0,
    }
    producer = producer_signer("coder@tamper-suite").key_id
    signers = [{"key_id": producer, "producer": "coder@tamper-suite", "records": len(kit.MAIN_STAGES) + 1}]
    assert document["producers"] == {
        "ok": True,
        "signed": len(kit.MAIN_STAGES) + 1,  # the entries and the run close
        "legacy": 0,
        "keys": signers,
        "problem": None,
        "further_problems": 0,
    }
    assert document["keys"] == {
        "seal": [run.keys.signer.key_id],
        "checkpoint": [run.keys.signer.key_id],
        "audit": [run.keys.audit.key_id],
        "producer": signers,
    }
    assert [s["stage_id"] for s in document["stages"]] == list(kit.MAIN_STAGES)
    for seq, stage in enumerate(document["stages"]):
        assert stage == {
            "stage_id": kit.MAIN_STAGES[seq],
            "kind": "coding",
            "seq": seq,
            "offset": view.entry(seq).offset,
            "ok": True,
            "reason": "",
            "notes": ["evidence reattached"],
            "evidence_reattached": True,
            "terminal_state": "completed",
            "producer": "coder@tamper-suite",
            "key_id": producer_signer("coder@tamper-suite").key_id,
            "details": [],
        }


# ---------------------------------------------------------------------------
# (g) memory stays flat as the run grows
# ---------------------------------------------------------------------------

# Peak RSS is VmHWM of /proc/self/status: the high-water mark of this process's own
# address space. (getrusage's ru_maxrss would carry over the forking pytest
# process's footprint across exec, and hide the verifier's.)
_MEASURE = r"""
import json, sys
from pathlib import Path
import bernstein.verifier.checks
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.sources import DumpSource
from bernstein.verifier.verify import verify_stream

def peak_kib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise SystemExit("no VmHWM in /proc/self/status")

dump, trust, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
trusted = TrustedKeys.load(trust)
bernstein.verifier.checks._load_builtin_checks()  # pay lazy imports before measuring
before = peak_kib()
header, stages = verify_stream("run-big", DumpSource(dump), cas=None, trusted=trusted, records_only=True)
count = failed = 0
kept = []
for stage in stages:
    count += 1
    failed += 1 if stage.failed else 0
    if mode == "store":
        kept.append(stage)
after = peak_kib()
print(json.dumps({"header_ok": header.ok, "entries": header.chain.entries, "stages": count, "failed": failed,
                  "before_kib": before, "growth_kib": after - before}))
"""

SMALL, LARGE = 2_000, 20_000
FLAT_MARGIN_KIB = 4 * 1024


@pytest.fixture(scope="module")
def synthetic_dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[Path, Path]]:
    out = {}
    for entries in (SMALL, LARGE):
        root = tmp_path_factory.mktemp(f"synthetic-{entries}")
        trusted = kit.synthetic_dump(root / "dump", entries)
        trusted.write(root / "trusted.json")
        out[entries] = (root / "dump", root / "trusted.json")
    return out


def _measure(dump: Path, trust: Path, mode: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(dump), str(trust), mode],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=kit.REPO,
        env=kit.offline_env(),
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_memory_flat_in_the_number_of_entries(synthetic_dumps: dict[int, tuple[Path, Path]]) -> None:
    small = _measure(*synthetic_dumps[SMALL], "stream")
    large = _measure(*synthetic_dumps[LARGE], "stream")
    for entries, result in ((SMALL, small), (LARGE, large)):
        assert result["header_ok"] is True
        assert result["entries"] == result["stages"] == entries
        assert result["failed"] == 0
    growth = large["growth_kib"] - small["growth_kib"]
    assert growth < FLAT_MARGIN_KIB, (
        f"peak RSS grows by {growth} KiB from {SMALL} to {LARGE} entries (small {small}, large {large})"
    )


def test_memory_probe_sees_retained_stages(synthetic_dumps: dict[int, tuple[Path, Path]]) -> None:
    """The same probe does notice O(entries) memory: keeping every stage verdict exceeds the margin."""
    small = _measure(*synthetic_dumps[SMALL], "store")
    large = _measure(*synthetic_dumps[LARGE], "store")
    assert large["stages"] == LARGE
    assert large["growth_kib"] - small["growth_kib"] > FLAT_MARGIN_KIB
