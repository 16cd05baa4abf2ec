"""``bernstein data run`` / ``bernstein ops run`` offline (--no-publish --cas-dir): no Kafka, no S3."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bernstein.producers.dataops.cli import register
from bernstein.schemas.canonical import sha256_digest
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.dataops_receipts import verify_artifact
from bernstein.substrate.keys import KeyPurpose, TrustedKey, TrustedKeys, init_keys, init_producer_keys, load_producer_keys

DEMO = Path(__file__).resolve().parents[2] / "demo" / "data"


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bernstein")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))


@pytest.fixture
def keys_dir(tmp_path: Path) -> Path:
    """A producer host's key directory: the receipt is signed with its producer key."""
    init_producer_keys(tmp_path / "producer-keys", "analyst@test")
    return tmp_path / "producer-keys"


def _common(tmp_path: Path, keys_dir: Path, stage: str) -> list[str]:
    return [
        "--run",
        "run-1",
        "--stage",
        stage,
        "--producer-keys",
        str(keys_dir),
        "--cas-dir",
        str(tmp_path / "cas"),
        "--no-publish",
    ]


def _receipt_hash(stdout: str) -> str:
    line = next(line for line in stdout.splitlines() if line.strip().startswith(("receipt", "refusal")))
    return line.split()[1]


def test_data_run_writes_the_rollup_and_stores_a_verifiable_receipt(tmp_path: Path, keys_dir: Path, capsys) -> None:
    output = tmp_path / "out" / "shipped_by_region.csv"
    argv = ["data", "run", *_common(tmp_path, keys_dir, "rollup"), "--input", str(DEMO / "orders.csv"), "--output", str(output)]
    code = run_cli([*argv, "--job", str(DEMO / "orders.job.json")])
    stdout = capsys.readouterr().out

    assert code == 0
    assert output.read_text().splitlines()[1:] == ["east,3,44049", "north,4,26800", "south,3,21475", "west,3,44249"]
    assert stdout.startswith("data run-1/rollup completed: 1 input, 1 output signed\n")
    assert "not published (--no-publish)" in stdout
    store = DirBlobStore(tmp_path / "cas")
    receipt = store.get(_receipt_hash(stdout))
    producer = load_producer_keys(keys_dir)
    assert json.loads(receipt)["signer_key_id"] == producer.signer.key_id
    trusted = TrustedKeys.of(
        [TrustedKey(producer.signer.key_id, KeyPurpose.PRODUCER, producer.signer.public_key_raw, producer="analyst@test")]
    )
    verdict = verify_artifact(receipt, trusted=trusted, cas=store, entry=None)
    assert verdict.ok and verdict.evidence_reattached
    assert json.loads(receipt)["outputs"][0]["content_hash"] == sha256_digest(output.read_bytes())


def test_ops_run_with_steps_on_the_command_line(tmp_path: Path, keys_dir: Path, capsys) -> None:
    output = tmp_path / "service.conf"
    code = run_cli(
        [
            "ops",
            "run",
            *_common(tmp_path, keys_dir, "tune"),
            "--input",
            str(DEMO / "service.conf"),
            "--output",
            str(output),
            "--step",
            "set max_connections = 200",
            "--step",
            "set log_level = info",
        ]
    )
    stdout = capsys.readouterr().out
    assert code == 0
    assert "max_connections = 200" in output.read_text()
    assert "  change   max_connections: 100 -> 200" in stdout
    assert "  change   log_level: debug -> info" in stdout


def test_a_deliberate_violation_is_recorded_as_a_refusal(tmp_path: Path, keys_dir: Path, capsys) -> None:
    output = tmp_path / "out.csv"
    argv = ["data", "run", *_common(tmp_path, keys_dir, "rollup"), "--input", str(DEMO / "orders.csv"), "--output", str(output)]
    code = run_cli([*argv, "--job", str(DEMO / "orders.job.json"), "--violate", "effect-before-plan"])
    stdout = capsys.readouterr().out
    assert code == 3
    assert stdout.startswith("data run-1/rollup refused: EFFECT_BEFORE_PLAN -- ")
    assert not output.exists()
    refusal = json.loads(DirBlobStore(tmp_path / "cas").get(_receipt_hash(stdout)))
    assert refusal["code"] == "EFFECT_BEFORE_PLAN" and refusal["plan_hash"] is None


def test_a_bad_step_is_recorded_as_a_refusal(tmp_path: Path, keys_dir: Path, capsys) -> None:
    argv = ["data", "run", *_common(tmp_path, keys_dir, "rollup"), "--input", str(DEMO / "orders.csv")]
    code = run_cli([*argv, "--output", str(tmp_path / "o.csv"), "--step", "delete everything"])
    assert code == 3
    assert "refused: INVALID_STEP" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--input", "/nonexistent/orders.csv", "--job", str(DEMO / "orders.job.json")], "does not exist"),
        (["--input", str(DEMO / "orders.csv"), "--job", str(DEMO / "service.job.json")], "is a ops job"),
    ],
)
def test_user_mistakes_are_one_line_errors(tmp_path: Path, keys_dir: Path, extra: list[str], message: str) -> None:
    argv = ["data", "run", *_common(tmp_path, keys_dir, "rollup"), "--output", str(tmp_path / "o.csv"), *extra]
    with pytest.raises(BernsteinError, match=message):
        run_cli(argv)


def test_no_publish_needs_a_local_store(tmp_path: Path, keys_dir: Path) -> None:
    argv = ["data", "run", "--run", "r", "--stage", "s", "--producer-keys", str(keys_dir), "--no-publish"]
    with pytest.raises(BernsteinError, match="--no-publish needs --cas-dir"):
        run_cli([*argv, "--input", str(DEMO / "orders.csv"), "--output", str(tmp_path / "o"), "--step", "count"])


def test_the_key_comes_only_from_the_key_directory(tmp_path: Path, keys_dir: Path) -> None:
    spec = tmp_path / "job.json"
    spec.write_text(
        json.dumps({"format": "bernstein.dataops.job/v1", "kind": "data", "steps": ["count"], "private_key": "00" * 32})
    )
    argv = [
        "data",
        "run",
        *_common(tmp_path, keys_dir, "s"),
        "--input",
        str(DEMO / "orders.csv"),
        "--output",
        str(tmp_path / "o"),
    ]
    with pytest.raises(BernsteinError, match=r"unknown fields \['private_key'\]"):
        run_cli([*argv, "--job", str(spec)])
    with pytest.raises(BernsteinError, match="no producer keys in .*bernstein keys init --producer NAME"):
        run_cli(
            [
                "data",
                "run",
                *_common(tmp_path, tmp_path / "empty", "s"),
                "--input",
                str(DEMO / "orders.csv"),
                "--output",
                "o",
                "--step",
                "count",
            ]
        )


def test_a_scheduler_key_directory_is_refused(tmp_path: Path) -> None:
    """A producer never signs with the scheduler's keys: pointing it at them is a typed error."""
    init_keys(tmp_path / "scheduler-keys")
    argv = ["data", "run", *_common(tmp_path, tmp_path / "scheduler-keys", "s"), "--input", str(DEMO / "orders.csv")]
    with pytest.raises(BernsteinError, match="holds a scheduler's keys, not a producer's"):
        run_cli([*argv, "--output", str(tmp_path / "o"), "--step", "count"])
    assert not (tmp_path / "o").exists()


def test_a_producer_id_other_than_the_keys_name_is_refused(tmp_path: Path, keys_dir: Path) -> None:
    argv = ["data", "run", *_common(tmp_path, keys_dir, "s"), "--input", str(DEMO / "orders.csv"), "--producer-id", "x@y"]
    with pytest.raises(BernsteinError, match=r"producer id 'x@y' is not the name of the producer key \('analyst@test'"):
        run_cli([*argv, "--output", str(tmp_path / "o"), "--step", "count"])


def test_wired_into_the_bernstein_command(tmp_path: Path, keys_dir: Path, capsys) -> None:
    from bernstein.cli import main

    output = tmp_path / "o.csv"
    argv = ["data", "run", *_common(tmp_path, keys_dir, "rollup"), "--input", str(DEMO / "orders.csv"), "--output", str(output)]
    assert main([*argv, "--step", "count"]) == 0
    assert output.read_text() == "count\n20\n"
    with pytest.raises(SystemExit) as exited:
        main(["data", "run", "--run", "r"])
    assert exited.value.code == 3  # usage errors exit 3 (2 means "mismatch")
    capsys.readouterr()
