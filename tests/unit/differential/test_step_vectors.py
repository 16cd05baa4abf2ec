"""schemas/vectors/steps.json: both scheduler cores reproduce every output byte from the stated inputs.

The scheduler is configured from the file alone (its manifest text, seal seed and audit key), so the
vectors are a contract another implementation can check itself against: every input's ``value_hex``
is its ``record`` encoded with its ``schema``, every output decodes to its ``record``, the Python
reference and the Rust core (``make_core(..., "native")``) produce exactly the listed outputs, and
every ``RefusalCode`` has a case whose last input gets it.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from bernstein.consumers.core.model import InputRecord, OutputRecord, SchedulerConfig
from bernstein.consumers.core.native import make_core
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.consumers.manifest import parse_manifest
from bernstein.schemas import canonical, codec
from bernstein.schemas.records import RefusalCode
from bernstein.substrate.keys import Ed25519Signer
from tests.vectors.step_vectors import ce_type, headers_by_rule, render

PATH = Path(__file__).resolve().parents[3] / "schemas" / "vectors" / "steps.json"


@cache
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(PATH.read_text(encoding="utf-8"))
    return loaded


def case_names() -> list[str]:
    return [case["name"] for case in document()["cases"]]


def case_named(name: str) -> dict[str, Any]:
    return next(case for case in document()["cases"] if case["name"] == name)


def config_from_file(case: dict[str, Any]) -> SchedulerConfig:
    """The scheduler configuration steps.json states for ``case`` (nothing taken from the generator)."""
    doc = document()
    manifest = parse_manifest(doc["manifest_toml"], source="steps.json")
    audit_key = bytes.fromhex(doc["keys"]["audit_hmac_key_hex"])
    signer = Ed25519Signer.from_seed(bytes.fromhex(doc["keys"]["seal_ed25519_seed_hex"]))
    assert signer.key_id == doc["keys"]["seal_key_id"]
    assert canonical.hmac_key_id(audit_key) == doc["keys"]["audit_key_id"]
    return SchedulerConfig(
        roles=manifest.roles,
        signer=signer,
        audit_key=audit_key,
        audit_key_id=canonical.hmac_key_id(audit_key),
        producers=manifest.producers,
        submission_partitions=case.get("submission_partitions", doc["submission_partitions"]),
    )


def inputs_of(case: dict[str, Any]) -> list[InputRecord]:
    return [
        InputRecord(
            item["topic"],
            item["partition"],
            item["offset"],
            item["timestamp_ms"],
            None if item["key_hex"] is None else bytes.fromhex(item["key_hex"]),
            bytes.fromhex(item["value_hex"]),
        )
        for item in case["inputs"]
    ]


def stated(output: dict[str, Any]) -> tuple[str, bytes, bytes, tuple[tuple[str, bytes], ...], int]:
    headers = tuple((h["name"], h["value_utf8"].encode()) for h in output["headers"])
    return output["stream"], bytes.fromhex(output["key_hex"]), bytes.fromhex(output["value_hex"]), headers, output["timestamp_ms"]


def produced(index: int, out: OutputRecord) -> tuple[int, tuple[str, bytes, bytes, tuple[tuple[str, bytes], ...], int]]:
    return index, (out.stream.value, out.key, out.value, out.headers, out.timestamp_ms)


def unhex(value: Any) -> Any:
    """A record as steps.json writes it, back to Python values ({"hex": ...} -> bytes)."""
    if isinstance(value, dict):
        if set(value) == {"hex"} and isinstance(value["hex"], str):
            return bytes.fromhex(value["hex"])
        return {k: unhex(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unhex(v) for v in value]
    return value


def run(core_choice: str, case: dict[str, Any]) -> list[tuple[int, Any]]:
    config = config_from_file(case)
    records = inputs_of(case)
    partition = records[0].partition
    core = SchedulerCore(config) if core_choice == "python" else make_core(config, partition, "native")
    if core_choice == "native":
        assert type(core).__name__ == "NativeSchedulerCore"
    state: Any = initial_state(config, partition)
    outputs = []
    for index, record in enumerate(records):
        state, outs = core.step(state, record)
        outputs += [produced(index, out) for out in outs]
    return outputs


@pytest.mark.parametrize("core_choice", ["python", "native"])
@pytest.mark.parametrize("name", case_names())
def test_both_cores_reproduce_every_output_byte(core_choice: str, name: str) -> None:
    case = case_named(name)
    expected = [(o["input_index"], stated(o)) for o in case["outputs"]]
    assert run(core_choice, case) == expected


@pytest.mark.parametrize("name", case_names())
def test_inputs_encode_from_their_records_and_outputs_decode_to_theirs(name: str) -> None:
    case = case_named(name)
    for item in case["inputs"]:
        if item["schema"] is None:
            assert item["record"] is None
            continue
        assert codec.encode(item["schema"], unhex(item["record"])).hex() == item["value_hex"]
        assert item["key_hex"] == (None if item["key_utf8"] is None else item["key_utf8"].encode().hex())
    for output in case["outputs"]:
        decoded = codec.decode(bytes.fromhex(output["value_hex"]))
        assert decoded.schema.name == output["schema"]
        assert decoded.record == unhex(output["record"])
        assert codec.encode(output["schema"], decoded.record).hex() == output["value_hex"]
        if "payload_schema" in output:
            inner = codec.decode(decoded.record["payload"])
            assert (inner.schema.name, inner.record) == (output["payload_schema"], unhex(output["payload_record"]))


@pytest.mark.parametrize("name", case_names())
def test_expect_is_what_the_last_input_gets(name: str) -> None:
    case = case_named(name)
    last = len(case["inputs"]) - 1
    outs = [o for o in case["outputs"] if o["input_index"] == last]
    streams = [o["stream"] for o in outs]
    if case["expect"] == "journal":
        assert streams[0] == "journal" and "refusals" not in streams and "deadletter" not in streams
    elif case["expect"] == "deadletter":
        assert streams == ["deadletter", "audit"]
        assert outs[0]["record"]["code"] in {
            "NOT_AVRO_SINGLE_OBJECT",
            "EMPTY_VALUE",
            "UNKNOWN_SCHEMA_FINGERPRINT",
            "TRUNCATED_OR_MALFORMED_BODY",
        }
    else:
        assert streams == ["refusals", "audit"]
        assert outs[0]["record"]["code"] == case["expect"]
        audit = outs[1]["payload_record"]
        assert (audit["event"], audit["reason_code"], audit["journal_seq"]) == ("activity.refused", case["expect"], -1)


def test_every_refusal_code_has_a_case() -> None:
    covered = {case["expect"] for case in document()["cases"]}
    missing = sorted(code.value for code in RefusalCode if code.value not in covered)
    assert missing == [], f"steps.json has no case for {missing}: add one to tests/vectors/step_vectors.py"


def test_accepted_stages_of_every_kind_a_seal_and_a_dead_letter() -> None:
    journalled = {
        o["payload_record"]["kind"]
        for case in document()["cases"]
        if case["expect"] == "journal"
        for o in case["outputs"]
        if o["schema"] == codec.JOURNAL_RECORD and o["payload_schema"] == codec.JOURNAL_ENTRY_V3
    }
    assert journalled == {"coding", "research", "browser", "data", "ops"}
    close = case_named("run_close_seals_the_run")
    assert [o["schema"] for o in close["outputs"] if o["input_index"] == 1] == [
        codec.SEAL_RECORD,
        codec.AUDIT_RECORD_V2,
        codec.CHECKPOINT_RECORD,
    ]
    seal = close["outputs"][2]["payload_record"]
    assert (seal["final"], seal["entry_count"], seal["closed_by"]["producer_id"]) == (True, 1, "worker@host")
    assert case_named("deadletter_not_avro")["outputs"][0]["record"]["code"] == "NOT_AVRO_SINGLE_OBJECT"


def test_the_artifact_hash_mismatch_case_states_what_an_sdk_publishes() -> None:
    """The SDK integration tests publish this stage and expect this refusal (but for ids and position)."""
    case = case_named("artifact_hash_mismatch")
    (item,) = case["inputs"]
    stage = item["stage"]
    record = unhex(item["record"])
    assert stage["artifact_hash"] == record["artifact_hash"] != canonical.artifact_hash(record["artifact"])
    assert {k: stage[k] for k in ("run_id", "stage_id", "role", "kind", "terminal_state", "reason_code")} == {
        k: record[k] for k in ("run_id", "stage_id", "role", "kind", "terminal_state", "reason_code")
    }
    refusal = case["outputs"][0]["record"]
    assert (refusal["code"], refusal["field"], refusal["declared"], refusal["recomputed"]) == (
        "ARTIFACT_HASH_MISMATCH",
        "artifact_hash",
        stage["artifact_hash"],
        canonical.artifact_hash(record["artifact"]),
    )


def test_make_vectors_regenerates_steps_json_identically() -> None:
    first = render()
    assert first == render()  # no clock, no randomness
    assert PATH.read_text(encoding="utf-8") == first, (
        "steps.json is stale: run make vectors (python -m tests.vectors.step_vectors)"
    )


def test_every_output_header_follows_the_stated_headers_rule() -> None:
    """headers_rule recomputes every output's ce_* headers from the stated inputs and outputs: none is a free choice."""
    rule = document()["headers_rule"]
    assert rule["order"] == ["ce_specversion", "ce_id", "ce_source", "ce_type"]
    for case in document()["cases"]:
        by_rule = headers_by_rule(case)
        stated = [[(h["name"], h["value_utf8"]) for h in o["headers"]] for o in case["outputs"]]
        assert stated == by_rule, case["name"]
        for output in case["outputs"]:
            assert output["timestamp_ms"] == case["inputs"][output["input_index"]]["timestamp_ms"], case["name"]
    # the rule knows every (stream, payload) the cases produce
    assert {ce_type(o) for c in document()["cases"] for o in c["outputs"]} >= {
        "bernstein.activity.result",
        "bernstein.computer_use.action",
        "bernstein.run.sealed",
        "bernstein.activity.refused",
        "bernstein.input.deadletter",
        "bernstein.partition.checkpoint",
        "bernstein.audit.activity.result",
    }


def _journalled(case: dict[str, Any]) -> set[int]:
    return {o["input_index"] for o in case["outputs"] if o["stream"] == "journal"}


def test_blobs_state_the_bytes_of_every_observation_of_a_journalled_input() -> None:
    blobs = {digest: bytes.fromhex(data) for digest, data in document()["blobs"].items()}
    assert blobs and all(canonical.content_hash(data) == digest for digest, data in blobs.items())
    named: set[str] = set()
    for case in document()["cases"]:
        journalled = _journalled(case)
        for index, item in enumerate(case["inputs"]):
            record = unhex(item["record"]) if item["record"] is not None else {}
            for obs in record.get("observations", []):
                named.add(obs["content_hash"])
                if index not in journalled:
                    continue
                if case["expect"] == "EVIDENCE_CAP_EXCEEDED":
                    assert obs["content_hash"] not in blobs  # declared 32 MiB blobs, bytes not stated (its note)
                    continue
                assert len(blobs[obs["content_hash"]]) == obs["size"], case["name"]
            if item["schema"] == codec.COMPUTER_USE_ACTION_V2:
                named |= {record["screenshot_hash"], record["dom_digest"]}
                shot, dom = blobs[record["screenshot_hash"]], blobs[record["dom_digest"]]
                assert (len(shot), len(dom)) == (record["screenshot_size"], record["dom_size"])
                assert canonical.observation_hash(shot, record["dom_digest"]) == record["observation_hash"]
    assert set(blobs) <= named, "a blob no input names"


def test_lineage_hmacs_recompute_from_each_producers_stated_lineage_key() -> None:
    producers = document()["keys"]["producers"]
    checked = 0
    for case in document()["cases"]:
        for index, item in enumerate(case["inputs"]):
            if item["schema"] not in (codec.COMPUTER_USE_ACTION, codec.COMPUTER_USE_ACTION_V2):
                continue
            record = unhex(item["record"])
            stated = producers[record["producer"]["id"]]
            key = bytes.fromhex(stated["lineage_hmac_key_hex"])
            assert canonical.hmac_key_id(key) == stated["lineage_hmac_key_id"]
            right = canonical.lineage_hmac(key, record["lineage"]["entry"]) == record["lineage"]["hmac"]
            broken = index == len(case["inputs"]) - 1 and case["expect"] in ("LINEAGE_HMAC_INVALID", "LINEAGE_MALFORMED")
            assert right != broken, case["name"]
            checked += 1
    assert checked >= 20


def test_data_ops_receipts_recompute_from_the_receipt_signer_and_the_blobs() -> None:
    from bernstein.schemas.documents.dataops import DataOpsReceipt, artifact_signing_input, decode_signature

    stated = document()["keys"]["receipt_signer"]
    signer = Ed25519Signer.from_seed(bytes.fromhex(stated["ed25519_seed_hex"]))
    assert (signer.public_key_raw.hex(), signer.key_id) == (stated["public_key_hex"], stated["key_id"])
    blobs = {digest: bytes.fromhex(data) for digest, data in document()["blobs"].items()}
    rebuilt = 0
    for name in ("accepted_ops_receipt", "accepted_data_receipt"):
        record = unhex(case_named(name)["inputs"][-1]["record"])
        receipt = DataOpsReceipt.parse(record["artifact"])
        for item in (*receipt.inputs, *receipt.outputs):
            assert canonical.content_hash(blobs[item.content_hash]) == item.content_hash
            statement = item.statement(
                run_id=receipt.run_id, stage_id=receipt.stage_id, kind=receipt.kind, plan_hash=receipt.plan.plan_hash
            )
            assert signer.sign(artifact_signing_input(**statement)) == decode_signature(item.signature), name
        assert receipt.signed(signer).canonical_bytes() == record["artifact"], name
        rebuilt += 1
    assert rebuilt == 2


def test_research_documents_name_pages_whose_bytes_blobs_state() -> None:
    """A journalled research report's sources (hash and size) and a research refusal's fetched pages recompute from blobs."""
    blobs = {digest: bytes.fromhex(data) for digest, data in document()["blobs"].items()}
    checked = 0
    for case in document()["cases"]:
        for index in _journalled(case):
            record = unhex(case["inputs"][index]["record"])
            if record.get("kind") != "research":
                continue
            doc = json.loads(record["artifact"])
            for source in doc.get("sources", []):
                page = blobs[source["page_content_hash"]]
                assert (canonical.content_hash(page), len(page)) == (source["page_content_hash"], source["size"])
                checked += 1
            for fetched in doc.get("fetched", []):
                assert canonical.content_hash(blobs[fetched["page_content_hash"]]) == fetched["page_content_hash"]
                checked += 1
    assert checked >= 3
