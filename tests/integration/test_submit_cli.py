"""``bernstein submit`` against the real (secured) broker and S3, and ``submission check``'s prediction.

A producer program describes a run as JSON lines; ``bernstein submit`` (as User:producer) stores
the blobs and publishes; the scheduler (as User:scheduler) journals the good stage, refuses the
one with a wrong artifact hash (the steps.json ``artifact_hash_mismatch`` stage replayed) and seals
the run. ``bernstein submission check`` on the same file, offline, predicts every verdict: the very
journal entry (same entry hash) and the very refusal records.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bernstein.commands.common import without_endpoint_line
from bernstein.schemas.canonical import artifact_hash, canonical_json, content_hash
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Topics
from tests.conftest import REPO, as_component
from tests.support.kafka import read_partition

pytestmark = pytest.mark.integration

STEPS = json.loads((REPO / "schemas" / "vectors" / "steps.json").read_text(encoding="utf-8"))
WRONG = "sha256:" + "00" * 32
OCCURRED = 1767225600000


def vector_case(name: str) -> dict[str, Any]:
    return next(case for case in STEPS["cases"] if case["name"] == name)


def bernstein(args: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bernstein", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=as_component(args, env),
        timeout=180,
    )


def descriptions(workdir: Path) -> str:
    (workdir / "evidence").mkdir()
    (workdir / "evidence" / "page.html").write_bytes(b"<html><p>the page the agent read</p></html>")
    replayed = vector_case("artifact_hash_mismatch")["inputs"][0]["stage"]
    lines = [
        {
            "run_id": "run-cli",
            "stage_id": "research-0",
            "role": "developer",
            "kind": "coding",
            "artifact": {"summary": "read one page", "pages": 1},
            "observations": [
                {"kind": "page", "ref": "https://example.test/page", "file": "evidence/page.html"},
                {"kind": "note", "ref": "notes", "text": "caf\u00e9 notes"},
            ],
            "submission_id": "sub-cli-0",
            "occurred_at_ms": OCCURRED,
        },
        {
            "run_id": "run-cli",
            "stage_id": "coding-1",
            "role": "developer",
            "kind": "coding",
            "artifact": "a diff",
            "artifact_hash": WRONG,
            "submission_id": "sub-cli-1",
            "occurred_at_ms": OCCURRED + 1,
        },
        {**replayed, "submission_id": "sub-vector", "occurred_at_ms": OCCURRED + 2},
        {"close_run": "run-cli", "submission_id": "close-cli"},
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def test_submit_publishes_and_the_scheduler_gives_the_verdicts_check_predicted(
    services: Any, cli_env: dict[str, str], manifest: Path, tmp_path: Path
) -> None:
    text = descriptions(tmp_path)
    (tmp_path / "run.jsonl").write_text(text, encoding="utf-8")
    topics = Topics(cli_env["BERNSTEIN_TOPIC_PREFIX"])

    predicted = bernstein(
        ["submission", "check", "run.jsonl", "--manifest", str(manifest), "--format", "json"], cli_env, tmp_path
    )
    assert predicted.returncode == 1, predicted.stderr  # two stages would be refused
    prediction = [json.loads(line) for line in predicted.stdout.splitlines()]
    assert [(p["line"], p["verdict"]) for p in prediction] == [(1, "journal"), (2, "refused"), (3, "refused"), (4, "journal")]

    if services.secure:
        assert as_component(["submit"], cli_env)["BERNSTEIN_KAFKA_CONFIG_FILE"].endswith("/producer.properties")
    published = bernstein(["submit"], cli_env, tmp_path, stdin=text)
    assert published.returncode == 0, published.stderr
    assert without_endpoint_line(published.stderr) == ""
    landed = [json.loads(line) for line in published.stdout.splitlines()]
    assert landed == [
        {"run_id": run_id, "submission_id": sid, "topic": topics.submissions, "partition": 0, "offset": offset}
        for offset, (run_id, sid) in enumerate(
            [("run-cli", "sub-cli-0"), ("run-cli", "sub-cli-1"), ("run-1", "sub-vector"), ("run-cli", "close-cli")]
        )
    ]
    # blobs first: every observation and the artifact are in the bucket
    store = S3BlobStore(services.s3)
    for data in (
        b"<html><p>the page the agent read</p></html>",
        "caf\u00e9 notes".encode(),
        canonical_json({"summary": "read one page", "pages": 1}),
    ):
        assert store.has(content_hash(data))

    scheduler = bernstein(["scheduler", "run", "--idle-exit", "3"], cli_env, REPO)
    assert scheduler.returncode == 0, scheduler.stderr
    assert "Traceback" not in scheduler.stderr

    journal = read_partition(services.bootstrap, topics, "journal")
    entries = [r for r in journal if "stage_id" in r.inner]
    assert len(entries) == 1 and len(journal) == 2  # the stage and the run's final seal
    entry = entries[0]
    assert entry.inner == prediction[0]["entry"] | {"producer_signature": entry.inner["producer_signature"]}
    assert entry.inner["producer_signature"].hex() == prediction[0]["entry"]["producer_signature"]["hex"]
    assert entry.record["entry_hash"] == prediction[0]["entry_hash"]  # the very entry check predicted
    assert entry.inner["artifact_hash"] == artifact_hash(canonical_json({"summary": "read one page", "pages": 1}))
    assert [(o["kind"], o["size"]) for o in entry.inner["observations"]] == [("page", 43), ("note", 11)]
    seal = journal[1].inner
    assert (seal["run_id"], seal["final"], seal["entry_count"], seal["closed_by"]["submission_id"]) == (
        "run-cli",
        True,
        1,
        "close-cli",
    )

    refusals = [r.record for r in read_partition(services.bootstrap, topics, "refusals")]
    assert refusals == [prediction[1]["refusal"], prediction[2]["refusal"]]  # exactly the predicted records
    assert (refusals[0]["code"], refusals[0]["declared"], refusals[0]["recomputed"]) == (
        "ARTIFACT_HASH_MISMATCH",
        WRONG,
        artifact_hash(canonical_json("a diff")),
    )
    # the vectors' stage, published by another producer: the refusal the scheduler-step vectors predict
    vector = vector_case("artifact_hash_mismatch")["outputs"][0]["record"]
    same = (
        "exception",
        "code",
        "message",
        "run_id",
        "stage_id",
        "role",
        "kind",
        "field",
        "declared",
        "recomputed",
        "earlier_stage_id",
    )
    assert {k: refusals[1][k] for k in same} == {k: vector[k] for k in same}


def test_submit_as_a_producer_without_the_grant_exits_3_and_prints_nothing(
    services: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    if not services.secure:
        pytest.skip("ACLs exist only on the secured broker")
    ungranted = {**cli_env, "BERNSTEIN_TOPIC_PREFIX": cli_env["BERNSTEIN_TOPIC_PREFIX"] + "-other"}
    line = json.dumps({"run_id": "r", "stage_id": "s", "role": "developer", "kind": "coding", "artifact": 1})
    producer_env = {**ungranted, "BERNSTEIN_KAFKA_CONFIG_FILE": str(services.principal_file("producer"))}
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", "submit", "--timeout", "10"],
        input=line + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=producer_env,
        timeout=120,
    )
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""
    assert without_endpoint_line(result.stderr).startswith(
        "bernstein submit: error: line 1: nothing published for this line: this principal may not describe topic"
    )
    assert "Traceback" not in result.stderr


def test_submit_to_a_mistyped_prefix_exits_3_naming_topic_create_and_creates_no_topic(
    services: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Producers never create topics: ``--prefix`` naming no deployment is E_TOPIC_MISSING (exit 3), not a new topic set.

    Run with the environment's own client properties (the admin's on the secured broker, none on a
    plaintext one): a principal that may Describe any topic, so the broker says the topic is missing
    (a producer principal without the prefix's ACLs is told E_KAFKA_NOT_AUTHORIZED, see above).
    """
    from confluent_kafka.admin import AdminClient

    from bernstein.substrate.kafka import client_config
    from tests.support.prefixes import fresh_prefix

    typo = fresh_prefix()
    admin = AdminClient(client_config(services.bootstrap))
    before = set(admin.list_topics(timeout=15).topics)
    (tmp_path / "page.html").write_bytes(b"evidence of " + typo.encode())
    line = {
        "run_id": "r",
        "stage_id": "s",
        "role": "developer",
        "kind": "coding",
        "artifact": typo,
        "observations": [{"kind": "page", "ref": "p", "file": "page.html"}],
    }
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", "submit", "--prefix", typo, "--timeout", "10"],
        input=json.dumps(line) + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_env,
        timeout=120,
    )
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert without_endpoint_line(result.stderr).startswith(
        f"bernstein submit: error: line 1: nothing published for this line: topic {typo}.activity.submissions does not "
        f"exist on Kafka at {services.bootstrap}: no deployment has the prefix {typo!r} there"
    ), result.stderr
    assert result.stderr.endswith(f"`bernstein topic create --prefix {typo}`\n")
    after = set(admin.list_topics(timeout=15).topics)
    assert not {name for name in before | after if name.startswith(typo)}, "a producer created topics"
    # and nothing was stored: the topic is checked before the first blob
    assert not S3BlobStore(services.s3).has(content_hash(b"evidence of " + typo.encode()))
