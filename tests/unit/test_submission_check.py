"""``bernstein submission check``: the scheduler's verdict, offline, for descriptions and raw Avro records.

Every single-record case of schemas/vectors/steps.json, written to a file as its raw bytes and
checked under the vectors' manifest at the vectors' timestamp, gets exactly the journal entry or
the refusal record the vectors state. Descriptions are signed with the producer's keys and checked
in order in one state; exit codes 0 / 1 / 3 (a usage error exits 3, as for every bernstein command)
and both output formats are pinned.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bernstein.commands.submission import as_json, as_text, check_file
from bernstein.schemas import codec
from bernstein.substrate.exit_codes import EXIT_USAGE

REPO = Path(__file__).resolve().parents[2]
STEPS = json.loads((REPO / "schemas" / "vectors" / "steps.json").read_text(encoding="utf-8"))
WRONG = "sha256:" + "00" * 32


def single_record_cases() -> list[dict[str, Any]]:
    """Cases of one Avro input keyed by its run id on partition 0 (what a file of raw bytes can hold)."""
    out = []
    for case in STEPS["cases"]:
        if len(case["inputs"]) != 1 or case["inputs"][0]["schema"] is None:
            continue
        item = case["inputs"][0]
        if item["key_utf8"] != item["record"].get("run_id") or "submission_partitions" in case:
            continue  # another key, or a partition check: what check cannot know offline
        out.append(case)
    return out


def test_the_single_record_cases_cover_most_refusal_codes() -> None:
    codes = {case["expect"] for case in single_record_cases()}
    assert len(codes - {"journal"}) >= 55 and "journal" in codes


@pytest.mark.parametrize("name", [case["name"] for case in single_record_cases()])
def test_a_raw_record_gets_the_verdict_the_step_vectors_state(name: str, tmp_path: Path) -> None:
    case = next(c for c in single_record_cases() if c["name"] == name)
    (item,) = case["inputs"]
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(STEPS["manifest_toml"], encoding="utf-8")
    record_file = tmp_path / "submission.avro"
    record_file.write_bytes(bytes.fromhex(item["value_hex"]))
    (verdict,) = check_file(record_file, manifest=manifest, producer_args=None, prefix="bernstein", at_ms=item["timestamp_ms"])
    first = case["outputs"][0]
    if case["expect"] == "journal":
        assert verdict.verdict == "journal"
        assert verdict.detail["schema"] == first["payload_schema"]
        if first["schema"] == codec.SEAL_RECORD:  # a run close: the seal commits to the (ephemeral) audit key's chain
            assert {k: v for k, v in as_json(verdict)["entry"].items() if k != "audit_head"} == {
                k: v for k, v in first["payload_record"].items() if k != "audit_head"
            }
        else:
            assert as_json(verdict)["entry"] == first["payload_record"]
            assert verdict.detail["entry_hash"] == first["record"]["entry_hash"]
    else:
        assert verdict.verdict == "refused"
        assert as_json(verdict)["refusal"] == first["record"]  # the very record the scheduler writes
        assert verdict.detail["code"] == case["expect"]


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------


def bernstein(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_")}
    return subprocess.run(
        [sys.executable, "-m", "bernstein", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A producer key directory (worker@check) and a manifest registering it for developer and scout (made once)."""
    home = tmp_path_factory.mktemp("producer")
    made = bernstein("keys", "init", "--producer", "worker@check", "--dir", "pk", cwd=home)
    assert made.returncode == 0, made.stderr
    ring = json.loads((home / "pk" / "keyring.json").read_text())
    public = next(k["public_key"] for k in ring["keys"] if k["purpose"] == "producer")
    manifest = home / "manifest.toml"
    manifest.write_text(
        (REPO / "config" / "roles.toml").read_text() + f'\n[[producers]]\nname = "worker@check"\nroles = ["developer", "scout"]\n'
        f'  [[producers.keys]]\n  public_key = "{public}"\n'
    )
    return home / "pk", manifest


@pytest.fixture
def producer(tmp_path: Path, registered: tuple[Path, Path]) -> tuple[Path, Path]:
    """``registered``, and the observed file the descriptions name (page.txt in the test's directory)."""
    (tmp_path / "page.txt").write_text("page one\n")
    return registered


def stage(**fields: Any) -> str:
    base = {
        "run_id": "run-1",
        "stage_id": "s0",
        "role": "developer",
        "kind": "coding",
        "artifact": {"diff": "+1"},
        "observations": [{"kind": "file", "ref": "page.txt", "file": "page.txt"}],
    }
    return json.dumps({**base, **fields})


def test_descriptions_are_checked_in_order_in_one_state(tmp_path: Path, producer: tuple[Path, Path]) -> None:
    keys, manifest = producer
    (tmp_path / "run.jsonl").write_text(
        "\n".join(
            [
                stage(submission_id="sub-0"),
                "",
                stage(stage_id="s1", artifact="x", artifact_hash=WRONG, observations=[]),
                stage(stage_id="s2", submission_id="sub-0", observations=[]),
                '{"close_run": "run-1"}',
                stage(stage_id="s3", observations=[]),
            ]
        )
        + "\n"
    )
    result = bernstein(
        "submission",
        "check",
        "run.jsonl",
        "--manifest",
        str(manifest),
        "--producer-keys",
        str(keys),
        "--at",
        "1767225600000",
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("line 1: journalled: run run-1 seq 0 stage s0 (activity.result, entry sha256:")
    assert lines[1] == (
        f"line 3: refused ARTIFACT_HASH_MISMATCH: artifact_hash mismatch: declared {WRONG}, recomputed "
        "sha256:ba2df4903a2c14e86dc3bcca58911b44ac1d2514b7227bf6eb08cfb978f55a1b"
    )
    assert lines[2] == (
        f"  evidence: field 'artifact_hash', declared '{WRONG}', "
        "recomputed 'sha256:ba2df4903a2c14e86dc3bcca58911b44ac1d2514b7227bf6eb08cfb978f55a1b'"
    )
    assert lines[3].startswith("line 4: refused DUPLICATE_SUBMISSION: submission_id 'sub-0' was already journalled")
    assert lines[5] == "line 5: journalled: run run-1 closed and sealed after 1 entries"
    assert lines[6] == "line 6: refused RUN_CLOSED: run 'run-1' is closed and sealed; no stage may follow"
    assert len(lines) == 8 and lines[7] == "  evidence: field 'run_id', declared 'run-1'"


def test_json_format_and_exit_0_when_everything_would_be_journalled(tmp_path: Path, producer: tuple[Path, Path]) -> None:
    keys, manifest = producer
    (tmp_path / "ok.jsonl").write_text(stage(submission_id="sub-0", occurred_at_ms=7) + "\n" + '{"close_run": "run-1"}\n')
    result = bernstein(
        "submission",
        "check",
        "ok.jsonl",
        "--manifest",
        str(manifest),
        "--producer-keys",
        str(keys),
        "--format",
        "json",
        "--at",
        "1767225600000",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert (first["submission"], first["line"], first["verdict"], first["schema"]) == (
        "line 1",
        1,
        "journal",
        codec.JOURNAL_ENTRY_V3,
    )
    entry = first["entry"]
    assert (entry["submission_id"], entry["producer_id"], entry["occurred_at_ms"], entry["input"]) == (
        "sub-0",
        "worker@check",
        7,
        {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 0},
    )
    assert entry["observations"] == [
        {
            "kind": "file",
            "ref": "page.txt",
            "content_hash": "sha256:" + hashlib.sha256(b"page one\n").hexdigest(),
            "size": 9,
        }
    ]
    assert (second["verdict"], second["schema"], second["entry"]["final"], second["entry"]["entry_count"]) == (
        "journal",
        codec.RUN_SEAL_V2,
        True,
        1,
    )


def test_an_unregistered_producer_is_refused_as_the_scheduler_would(tmp_path: Path, producer: tuple[Path, Path]) -> None:
    keys, _ = producer
    (tmp_path / "one.jsonl").write_text(stage() + "\n")
    roles_only = tmp_path / "roles.toml"
    roles_only.write_text((REPO / "config" / "roles.toml").read_text())
    result = bernstein(
        "submission", "check", "one.jsonl", "--manifest", str(roles_only), "--producer-keys", str(keys), cwd=tmp_path
    )
    assert result.returncode == 1
    assert result.stdout.startswith("line 1: refused PRODUCER_KEY_UNKNOWN: the signing key sha256:")


def test_a_raw_record_needs_no_producer_keys(tmp_path: Path) -> None:
    case = next(c for c in STEPS["cases"] if c["name"] == "artifact_hash_mismatch")
    (tmp_path / "m.toml").write_text(STEPS["manifest_toml"])
    (tmp_path / "sub.avro").write_bytes(bytes.fromhex(case["inputs"][0]["value_hex"]))
    result = bernstein("submission", "check", "sub.avro", "--manifest", "m.toml", "--at", "1767225600000", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(f"record: refused ARTIFACT_HASH_MISMATCH: artifact_hash mismatch: declared {WRONG}")
    # the same bytes, but an undecodable record: a dead letter
    (tmp_path / "bad.avro").write_bytes(bytes.fromhex(case["inputs"][0]["value_hex"])[:30])
    result = bernstein("submission", "check", "bad.avro", "--manifest", "m.toml", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.startswith("record: dead-lettered TRUNCATED_OR_MALFORMED_BODY: ")


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (lambda p: None, ("nope.jsonl",), "bernstein submission check: error: cannot read nope.jsonl: No such file or directory"),
        (
            lambda p: (p / "f.jsonl").write_text('{"close_run": "r"}\n{"close_run": 1}\n'),
            ("f.jsonl",),
            "bernstein submission check: error: f.jsonl: line 2, field close_run: must be a string, not a number",
        ),
        (
            lambda p: (p / "f.jsonl").write_text(stage(kind="poetry") + "\n"),
            ("f.jsonl",),
            "bernstein submission check: error: f.jsonl: line 1, field kind: unknown activity kind 'poetry' (UNKNOWN_KIND)",
        ),
        (
            lambda p: (p / "f.bin").write_bytes(b"\xff\xfe"),
            ("f.bin",),
            "bernstein submission check: error: f.bin is neither JSON lines (UTF-8) nor an Avro single-object record "
            "(c3 01 ...): byte 0 is not UTF-8",
        ),
        (
            lambda p: (p / "f.jsonl").write_text("\n\n"),
            ("f.jsonl",),
            "bernstein submission check: error: f.jsonl holds no submission",
        ),
        (
            lambda p: (p / "f.jsonl").write_text(stage() + "\n"),
            ("f.jsonl", "--manifest", "missing.toml"),
            "bernstein submission check: error: no roles manifest at missing.toml: pass --manifest FILE",
        ),
        (lambda p: None, ("f.jsonl", "--format", "yaml"), "argument --format: invalid choice: 'yaml'"),
        (lambda p: None, ("f.jsonl", "--bogus"), "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_exit_3_without_a_traceback(
    setup: Any, args: tuple[str, ...], message: str, tmp_path: Path, producer: tuple[Path, Path]
) -> None:
    keys, manifest = producer
    setup(tmp_path)
    extra = () if "--manifest" in args else ("--manifest", str(manifest))
    result = bernstein("submission", "check", *args, *extra, "--producer-keys", str(keys), cwd=tmp_path)
    assert result.returncode == EXIT_USAGE == 3, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_text_of_a_journal_entry_names_run_seq_and_stage(tmp_path: Path) -> None:
    case = next(c for c in STEPS["cases"] if c["name"] == "accepted_coding_stage")
    (tmp_path / "m.toml").write_text(STEPS["manifest_toml"])
    (tmp_path / "s.avro").write_bytes(bytes.fromhex(case["inputs"][0]["value_hex"]))
    (verdict,) = check_file(tmp_path / "s.avro", manifest=tmp_path / "m.toml", producer_args=None, at_ms=1767225600000)
    assert (
        as_text(verdict)
        == f"record: journalled: run run-1 seq 0 stage stage-0 (activity.result, entry {case['outputs'][0]['record']['entry_hash']})"
    )
