"""Activity descriptions (producers/description.py) and ``bernstein submit``'s offline failures.

A description line becomes exactly the bytes the Python emitter publishes (the steps.json
artifact_hash_mismatch case is reproduced byte for byte from its described stage); every mistake is a
DescriptionError naming the line and the field; ``bernstein submit`` exits 2 for a bad description
or missing producer keys and 3 when S3 is not configured, never with a traceback.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bernstein.commands.common import without_endpoint_line
from bernstein.producers.description import (
    CloseDescription,
    DescriptionError,
    ObservedBytes,
    StageDescription,
    parse_description,
    parse_descriptions,
    signed_value,
)
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    artifact_hash,
    content_hash,
    evidence_set_hash,
    run_close_statement,
    submission_signing_input,
    submission_statement,
)
from bernstein.substrate.keys import Ed25519Signer, verify_signature

REPO = Path(__file__).resolve().parents[2]
STEPS = REPO / "schemas" / "vectors" / "steps.json"
SIGNER = Ed25519Signer.from_seed(bytes(range(32, 64)))
STAGE: dict[str, Any] = {
    "run_id": "run-42",
    "stage_id": "research-0",
    "role": "scout",
    "kind": "coding",
    "artifact": {"b": [1, 2], "a": "x"},
}


def line(**fields: Any) -> str:
    return json.dumps({**STAGE, **fields})


def error_of(text: str, *, number: int = 1, cwd: Path | None = None) -> tuple[str, str, int]:
    with pytest.raises(DescriptionError) as caught:
        parse_description(text, line=number, cwd=cwd)
    return caught.value.field, caught.value.reason, caught.value.line


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------


def test_a_stage_with_defaults_publishes_its_artifact_as_canonical_json() -> None:
    parsed = parse_description(line(), line=4)
    assert parsed == StageDescription(
        line=4, run_id="run-42", stage_id="research-0", role="scout", kind="coding", artifact=b'{"a":"x","b":[1,2]}'
    )
    assert (parsed.terminal_state, parsed.reason_code, parsed.submission_id, parsed.occurred_at_ms, parsed.artifact_hash) == (
        "completed",
        "ok",
        None,
        None,
        None,
    )


def test_artifact_and_observation_bytes_from_files_text_and_base64(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.bin").write_bytes(b"\x00report\xff")
    (tmp_path / "page.html").write_bytes(b"<p>hi</p>")
    text = json.dumps(
        {
            **{k: v for k, v in STAGE.items() if k != "artifact"},
            "artifact_file": "out/report.bin",
            "observations": [
                {"kind": "page", "ref": "https://a.test/", "file": "page.html"},
                {"kind": "note", "ref": "n", "text": "caf\u00e9"},
                {"kind": "blob", "ref": "b", "base64": base64.b64encode(b"\x01\x02").decode()},
            ],
            "terminal_state": "failed",
            "reason_code": "crashed",
            "submission_id": "sub-7",
            "occurred_at_ms": 1767225600000,
        }
    )
    parsed = parse_description(text, cwd=tmp_path)
    assert isinstance(parsed, StageDescription)
    assert parsed.artifact == b"\x00report\xff"
    assert parsed.observations == (
        ObservedBytes("page", "https://a.test/", b"<p>hi</p>"),
        ObservedBytes("note", "n", "caf\u00e9".encode()),
        ObservedBytes("blob", "b", b"\x01\x02"),
    )
    assert (parsed.terminal_state, parsed.reason_code, parsed.submission_id, parsed.occurred_at_ms) == (
        "failed",
        "crashed",
        "sub-7",
        1767225600000,
    )
    assert parsed.blobs == [b"<p>hi</p>", "caf\u00e9".encode(), b"\x01\x02", b"\x00report\xff"]
    b64 = parse_description(
        line(artifact=None).replace('"artifact": null', f'"artifact_base64": "{base64.b64encode(b"raw").decode()}"')
    )
    assert isinstance(b64, StageDescription) and b64.artifact == b"raw"


def test_a_run_close() -> None:
    assert parse_description('{"close_run": "run-42"}', line=2) == CloseDescription(2, "run-42", None)
    assert parse_description('{"close_run": "run-42", "submission_id": "c-1"}') == CloseDescription(1, "run-42", "c-1")


def test_blank_lines_are_skipped_and_lines_keep_their_numbers() -> None:
    parsed = list(parse_descriptions([line(), "", "   ", '{"close_run": "run-42"}'], cwd=Path.cwd()))
    assert [d.line for d in parsed] == [1, 4]
    with pytest.raises(DescriptionError) as caught:
        list(parse_descriptions([line(), "", "{oops"]))
    assert caught.value.line == 3 and caught.value.message.startswith("line 3: not JSON")


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        ("{oops", "", "not JSON: Expecting property name enclosed in double quotes at column 2"),
        ("[1, 2]", "", "a description is a JSON object, not a list"),
        ('{"run_id": "a", "run_id": "b"}', "run_id", "is given twice"),
        (
            line(artifact=1, extra=1),
            "extra",
            "unknown field; a stage takes artifact, artifact_base64, artifact_file, "
            "artifact_hash, kind, observations, occurred_at_ms, reason_code, role, run_id, stage_id, submission_id, "
            "terminal_state (a run close: close_run, submission_id)",
        ),
        (json.dumps({k: v for k, v in STAGE.items() if k != "role"}), "role", "is required"),
        (line(stage_id=7), "stage_id", "must be a string, not a number"),
        (
            json.dumps({k: v for k, v in STAGE.items() if k != "artifact"}),
            "artifact",
            "give exactly one of artifact, artifact_file, artifact_base64",
        ),
        (
            line(artifact_base64="eA=="),
            "artifact_base64",
            "give exactly one of artifact, artifact_file, artifact_base64 (got artifact, artifact_base64)",
        ),
        (
            line(artifact=1.5),
            "artifact",
            "has no RFC 8785 canonical JSON form: floats are not allowed in hashed documents (got 1.5); use an integer or a string",
        ),
        (
            line(artifact=2**53),
            "artifact",
            "has no RFC 8785 canonical JSON form: integer 9007199254740992 is outside the RFC 8785 safe range +/-(2**53-1)",
        ),
        (line(observations={}), "observations", "must be a list, not an object"),
        (line(observations=["page"]), "observations[0]", "an observation is a JSON object, not a string"),
        (
            line(observations=[{"kind": "page", "ref": "r"}]),
            "observations[0]",
            "give exactly one of file, text, base64 (the observed bytes)",
        ),
        (
            line(observations=[{"kind": "page", "ref": "r", "text": "a", "base64": "YQ=="}]),
            "observations[0]",
            "give exactly one of file, text, base64 (the observed bytes)",
        ),
        (line(observations=[{"kind": "page", "text": "a"}]), "observations[0].ref", "is required"),
        (
            line(observations=[{"kind": "page", "ref": "r", "text": "a", "size": 1}]),
            "observations[0].size",
            "unknown field; an observation takes kind, ref and one of file, text, base64",
        ),
        (
            line(observations=[{"kind": "page", "ref": "r", "base64": "not base64!"}]),
            "observations[0].base64",
            "is not standard base64 (RFC 4648, with padding)",
        ),
        (
            line(occurred_at_ms=-1),
            "occurred_at_ms",
            "must be an integer of milliseconds since the epoch (0 to 9007199254740991), not -1",
        ),
        (
            line(occurred_at_ms=True),
            "occurred_at_ms",
            "must be an integer of milliseconds since the epoch (0 to 9007199254740991), not true",
        ),
        (line(artifact_hash=5), "artifact_hash", "must be a string, not a number"),
        ('{"close_run": "run-42", "role": "scout"}', "role", "a run close takes only close_run and submission_id; unknown: role"),
        ('{"close_run": null}', "close_run", "must be a string, not null"),
        ("NaN", "", "NaN is not JSON"),
    ],
)
def test_every_mistake_names_its_line_and_field(text: str, field: str, reason: str) -> None:
    assert error_of(text, number=9) == (field, reason, 9)


def test_a_missing_file_is_named_relative_to_the_working_directory(tmp_path: Path) -> None:
    field, reason, _ = error_of(line(artifact=None).replace('"artifact": null', '"artifact_file": "gone.bin"'), cwd=tmp_path)
    assert (field, reason) == ("artifact_file", f"no such file: {tmp_path / 'gone.bin'}")
    obs = [{"kind": "page", "ref": "r", "file": "."}]
    field, reason, _ = error_of(line(observations=obs), cwd=tmp_path)
    assert (field, reason) == ("observations[0].file", f"is a directory, not a file: {tmp_path / '.'}")


# ---------------------------------------------------------------------------
# signing: the bytes a producer publishes
# ---------------------------------------------------------------------------


def test_a_stage_becomes_a_signed_activity_submission_v3() -> None:
    description = parse_description(line(observations=[{"kind": "page", "ref": "https://a.test/", "text": "page"}]))
    run_id, sid, value = signed_value(description, producer_id="worker@host", signer=SIGNER, now_ms=1767225600123)
    decoded = codec.decode(value)
    assert decoded.schema.name == codec.ACTIVITY_SUBMISSION_V3
    record = decoded.record
    assert (run_id, record["run_id"], record["submission_id"], len(sid)) == ("run-42", "run-42", sid, 32)
    assert record["artifact"] == b'{"a":"x","b":[1,2]}' and record["artifact_hash"] == artifact_hash(record["artifact"])
    assert record["observations"] == [
        {"kind": "page", "ref": "https://a.test/", "content_hash": content_hash(b"page"), "size": 4}
    ]
    assert record["evidence_set_hash"] == evidence_set_hash([content_hash(b"page")])
    assert (record["occurred_at_ms"], record["producer"]["id"], record["producer_key_id"]) == (
        1767225600123,
        "worker@host",
        SIGNER.key_id,
    )
    fields = {k: v for k, v in record.items() if k not in ("producer_key_id", "producer_signature")}
    signed = submission_signing_input(submission_statement(fields, SIGNER.key_id))
    assert verify_signature(SIGNER.public_key_raw, record["producer_signature"], signed)


def test_a_close_becomes_a_signed_run_close_v2() -> None:
    description = parse_description('{"close_run": "run-42", "submission_id": "close-1"}')
    run_id, sid, value = signed_value(description, producer_id="worker@host", signer=SIGNER, now_ms=5)
    decoded = codec.decode(value)
    assert (decoded.schema.name, run_id, sid, decoded.record["occurred_at_ms"]) == (codec.RUN_CLOSE_V2, "run-42", "close-1", 5)
    statement = run_close_statement("close-1", "run-42", "worker@host", 5, SIGNER.key_id)
    assert verify_signature(SIGNER.public_key_raw, decoded.record["producer_signature"], submission_signing_input(statement))


def test_the_vectors_wrong_hash_stage_reproduces_its_submission_bytes() -> None:
    """steps.json's artifact_hash_mismatch input, published from its described stage with the vectors' producer key."""
    case = next(c for c in json.loads(STEPS.read_text())["cases"] if c["name"] == "artifact_hash_mismatch")
    (item,) = case["inputs"]
    record = item["record"]
    stage = {**item["stage"], "submission_id": record["submission_id"], "occurred_at_ms": record["occurred_at_ms"]}
    description = parse_description(json.dumps(stage))
    run_id, _, value = signed_value(description, producer_id="worker@host", signer=SIGNER, sdk=record["producer"]["sdk"])
    assert (run_id.encode().hex(), value.hex()) == (item["key_hex"], item["value_hex"])


@pytest.mark.parametrize(
    ("fields", "field", "code"),
    [
        ({"run_id": "-run"}, "run_id", "INVALID_RUN_ID"),
        ({"role": "a role"}, "role", "INVALID_ROLE"),
        ({"kind": "poetry"}, "kind", "UNKNOWN_KIND"),
        ({"terminal_state": "done"}, "terminal_state", "UNKNOWN_TERMINAL_STATE"),
        ({"reason_code": " "}, "reason_code", "EMPTY_REASON_CODE"),
        ({"artifact": "x" * (512 * 1024)}, "artifact", "ARTIFACT_TOO_LARGE"),
    ],
)
def test_what_the_sdk_refuses_before_publishing_is_a_description_error(fields: dict[str, Any], field: str, code: str) -> None:
    description = parse_description(line(**fields), line=3)
    with pytest.raises(DescriptionError) as caught:
        signed_value(description, producer_id="worker@host", signer=SIGNER)
    assert (caught.value.line, caught.value.field) == (3, field)
    assert caught.value.message.startswith("line 3, field " + field) and caught.value.message.endswith(f"({code})")


def test_the_testing_artifact_hash_is_published_as_given() -> None:
    wrong = "sha256:" + "00" * 32
    _, _, value = signed_value(parse_description(line(artifact_hash=wrong)), producer_id="p", signer=SIGNER)
    assert codec.decode(value).record["artifact_hash"] == wrong
    _, _, odd = signed_value(parse_description(line(artifact_hash="not a digest")), producer_id="p", signer=SIGNER)
    assert codec.decode(odd).record["artifact_hash"] == "not a digest"


# ---------------------------------------------------------------------------
# bernstein submit, without services
# ---------------------------------------------------------------------------


def submit(stdin: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_")}
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "bernstein", "submit", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=tmp_path,  # no .infra/env here: no endpoint is configured
        env=base,
        timeout=60,
    )


@pytest.fixture
def producer_keys(tmp_path: Path) -> Path:
    keys = tmp_path / "pk"
    made = subprocess.run(
        [sys.executable, "-m", "bernstein", "keys", "init", "--producer", "worker@unit", "--dir", str(keys)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    return keys


def test_submit_exits_2_naming_the_line_of_a_bad_description(tmp_path: Path, producer_keys: Path) -> None:
    result = submit(line() + "\n\n" + line(kind="poetry") + "\n", tmp_path, "--producer-keys", str(producer_keys))
    # the first line would need S3 to publish, and there is none: it fails first, with 3
    assert result.returncode == 3, result.stderr
    result = submit("\n" + line(kind="poetry") + "\n" + line() + "\n", tmp_path, "--producer-keys", str(producer_keys))
    assert result.returncode == 2
    assert without_endpoint_line(result.stderr) == (
        "bernstein submit: error: line 2, field kind: unknown activity kind 'poetry' (UNKNOWN_KIND)\n"
    )
    assert result.stdout == ""


def test_submit_without_s3_exits_3_and_publishes_nothing(tmp_path: Path, producer_keys: Path) -> None:
    result = submit(
        line() + "\n", tmp_path, "--producer-keys", str(producer_keys), env={"BERNSTEIN_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    )
    assert result.returncode == 3
    assert without_endpoint_line(result.stderr).startswith(
        "bernstein submit: error: line 1: nothing published for this line: no S3 endpoint"
    )
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_submit_without_producer_keys_exits_2(tmp_path: Path) -> None:
    result = submit(line() + "\n", tmp_path, "--producer-keys", str(tmp_path / "none"))
    assert result.returncode == 2
    assert "no producer keys" in result.stderr and "Traceback" not in result.stderr


def test_submit_help_says_the_artifact_hash_is_for_testing_refusals() -> None:
    result = subprocess.run([sys.executable, "-m", "bernstein", "submit", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "TESTING ONLY" in text and "it exists to test refusals" in text
