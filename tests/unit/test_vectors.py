"""The golden vectors are reproduced by the code that claims to implement them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bernstein.schemas import canonical, codec
from bernstein.substrate.keys import Ed25519Signer, verify_signature
from tests.vectors.generate import FILES, render

VECTORS = Path(__file__).resolve().parents[2] / "schemas" / "vectors"


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    return loaded


def test_vector_files_are_current() -> None:
    for name in FILES:
        assert (VECTORS / name).read_text(encoding="utf-8") == render(name), f"{name} is stale: run make vectors"


def test_digest_vectors() -> None:
    document = _load("digests.json")
    for case in document["content_hash"]:
        assert canonical.content_hash(bytes.fromhex(case["bytes_hex"])) == case["digest"]
    for case in document["evidence_set_hash"]:
        assert canonical.evidence_set_hash(case["members"]) == case["digest"]
    # The seed's public reference values (sha256 of "[]" for the empty set, "report" artifact).
    assert document["evidence_set_hash"][0]["digest"] == "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
    assert document["artifact_hash"][0]["digest"] == "sha256:8d0ccb734a265b631becd953b550e449e730498de4ee931d4ada5a3ce3783ae1"
    for bad in document["malformed_digests"]:
        assert not canonical.is_digest(bad)


def test_chain_vectors() -> None:
    document = _load("chain.json")
    journal = document["journal"]
    assert canonical.journal_genesis(journal["run_id"]) == journal["genesis"]
    payload = bytes.fromhex(journal["entry_payload_hex"])
    assert canonical.journal_entry_hash(payload) == journal["entry_hash"]
    assert codec.decode(payload).record["prev_hash"] == journal["genesis"]
    # every payload names its schema next to its bytes, and the bytes are that schema's record
    assert codec.decode(payload).schema.name == journal["entry_schema"] == codec.JOURNAL_ENTRY
    assert codec.encode(journal["entry_schema"], _unhex(journal["entry"])) == payload

    seal = document["seal"]
    signer = Ed25519Signer.from_seed(bytes.fromhex(seal["ed25519_seed_hex"]))
    assert signer.public_key_raw.hex() == seal["public_key_hex"]
    assert signer.key_id == seal["key_id"]
    seal_payload = bytes.fromhex(seal["seal_payload_hex"])
    assert canonical.seal_signing_input(seal_payload).hex() == seal["signing_input_hex"]
    signature = bytes.fromhex(seal["signature_hex"])
    assert signer.sign(canonical.seal_signing_input(seal_payload)) == signature  # Ed25519 is deterministic
    assert verify_signature(signer.public_key_raw, signature, canonical.seal_signing_input(seal_payload))
    assert codec.decode(seal_payload).record["head_hash"] == journal["entry_hash"]
    assert codec.encode(seal["seal_schema"], seal["seal"]) == seal_payload and seal["seal_schema"] == codec.RUN_SEAL

    audit = document["audit"]
    key = bytes.fromhex(audit["hmac_key_hex"])
    assert canonical.hmac_key_id(key) == audit["hmac_key_id"]
    assert canonical.audit_genesis(key, 0) == audit["genesis_partition_0"]
    assert canonical.audit_mac(key, bytes.fromhex(audit["entry_payload_hex"])) == audit["mac"]
    assert codec.encode(audit["entry_schema"], audit["entry"]).hex() == audit["entry_payload_hex"]
    assert audit["entry_schema"] == codec.AUDIT_ENTRY
    for case in document["pae"]:
        assert canonical.pae(case["type"], bytes.fromhex(case["body_hex"])).hex() == case["pae_hex"]


def test_modality_vectors() -> None:
    document = _load("modalities.json")
    plan = document["dataops_plan"]
    assert canonical.plan_hash(plan["input_hashes"], plan["steps"]) == plan["plan_hash"]
    assert canonical.sha256_digest(plan["plan_document_canonical"].encode()) == plan["plan_hash"]
    cu = document["computer_use"]
    key = bytes.fromhex(cu["hmac_key_hex"])
    assert canonical.typed_value_digest(key, cu["typed_value"]) == cu["typed_value_digest"]
    assert canonical.computer_use_genesis(cu["run_id"], cu["session_id"]) == cu["session_genesis"]
    assert canonical.observation_hash(bytes.fromhex(cu["screenshot_hex"]), cu["dom_digest"]) == cu["observation_hash"]
    assert canonical.action_anchor(cu["session_genesis"], cu["observation_hash"], cu["action"]) == cu["action_anchor"]


def test_checkpoint_vectors() -> None:
    document = _load("checkpoints.json")
    audit = document["audit_record_v2"]
    key = bytes.fromhex(audit["hmac_key_hex"])
    payload = bytes.fromhex(audit["entry_payload_hex"])
    assert canonical.hmac_key_id(key) == audit["key_id"]
    assert codec.encode(audit["entry_schema"], audit["entry"]) == payload and audit["entry_schema"] == codec.AUDIT_ENTRY
    assert audit["record_schema"] == codec.AUDIT_RECORD_V2
    assert (
        canonical.pae(canonical.DOMAIN_AUDIT_RECORD_V2, canonical.pae(audit["key_id"], payload)).hex() == audit["mac_input_hex"]
    )
    assert canonical.audit_record_mac(key, audit["key_id"], payload) == audit["mac"]
    assert audit["mac"] != audit["mac_v1_of_same_payload"] == canonical.audit_mac(key, payload)
    # the MAC binds the key id: the same payload under another key id has another MAC
    assert canonical.audit_record_mac(key, "sha256:" + "0" * 64, payload) != audit["mac"]
    name, fields = codec.split_envelope(bytes.fromhex(audit["record_hex"]))
    assert (name, fields) == (audit["record_schema"], (payload, audit["key_id"], audit["mac"]))

    checkpoints = document["checkpoints"]
    signer = Ed25519Signer.from_seed(bytes.fromhex(checkpoints["ed25519_seed_hex"]))
    assert signer.key_id == checkpoints["key_id"]
    prev = canonical.checkpoint_genesis(0)
    assert prev == checkpoints["genesis_partition_0"]
    for seq, case in enumerate(checkpoints["chain"]):
        cp_payload = bytes.fromhex(case["payload_hex"])
        assert codec.encode(codec.PARTITION_CHECKPOINT, case["checkpoint"]) == cp_payload
        assert (case["payload_schema"], case["record_schema"]) == (codec.PARTITION_CHECKPOINT, codec.CHECKPOINT_RECORD)
        assert case["checkpoint"]["seq"] == seq and case["checkpoint"]["prev_hash"] == prev
        assert canonical.checkpoint_signing_input(cp_payload).hex() == case["signing_input_hex"]
        signature = bytes.fromhex(case["signature_hex"])
        assert signer.sign(canonical.checkpoint_signing_input(cp_payload)) == signature
        assert verify_signature(signer.public_key_raw, signature, canonical.checkpoint_signing_input(cp_payload))
        assert codec.split_envelope(bytes.fromhex(case["record_hex"])) == (
            codec.CHECKPOINT_RECORD,
            (cp_payload, checkpoints["key_id"], signature),
        )
        assert canonical.checkpoint_hash(cp_payload) == case["checkpoint_hash"]
        prev = case["checkpoint_hash"]
    # a checkpoint's signature is not a seal's: the domains differ
    first = bytes.fromhex(checkpoints["chain"][0]["payload_hex"])
    assert canonical.checkpoint_signing_input(first) != canonical.seal_signing_input(first)


def test_signature_vectors_reproduce_every_producer_signed_or_maced_byte_string() -> None:
    document = _load("signatures.json")
    producer = document["producer"]
    signer = Ed25519Signer.from_seed(bytes.fromhex(producer["ed25519_seed_hex"]))
    assert signer.public_key_raw.hex() == producer["public_key_hex"] and signer.key_id == producer["key_id"]
    for name in ("activity_submission", "run_close"):
        case = document[name]
        encoded = codec.encode(case["schema"], _unhex(case["record"]))
        record = codec.decode(encoded).record
        if name == "run_close":
            statement = canonical.run_close_statement(
                record["submission_id"], record["run_id"], record["producer"]["id"], record["occurred_at_ms"], signer.key_id
            )
        else:
            statement = canonical.submission_statement(record, signer.key_id)
        assert statement == case["statement"], name
        assert canonical.canonical_json(statement).decode() == case["statement_canonical_utf8"], name
        signing_input = canonical.submission_signing_input(statement)
        assert signing_input.hex() == case["signing_input_hex"], name
        assert signing_input == canonical.pae(producer["signing_domain"], case["statement_canonical_utf8"].encode()), name
        signature = bytes.fromhex(case["signature_hex"])
        assert record["producer_signature"] == signature and record["producer_key_id"] == signer.key_id, name
        assert verify_signature(signer.public_key_raw, signature, signing_input), name
        assert not verify_signature(signer.public_key_raw, signature, signing_input[:-1] + b"x"), name
    lineage = document["lineage"]
    entry = lineage["entry_canonical_utf8"].encode()
    key = bytes.fromhex(lineage["lineage_key_hex"])
    assert canonical.hmac_key_id(key) == lineage["lineage_key_id"]
    assert canonical.lineage_signing_input(entry).hex() == lineage["signing_input_hex"]
    assert canonical.lineage_hmac(key, entry) == lineage["hmac"]
    assert verify_signature(
        signer.public_key_raw, bytes.fromhex(lineage["signature_hex"]), canonical.lineage_signing_input(entry)
    )
    assert json.loads(entry)["hmac_key_id"] == lineage["lineage_key_id"], "the entry names its envelope key"
    assert json.loads(entry)["key_id"] == signer.key_id
    typed = document["typed_value"]
    assert canonical.typed_value_digest(bytes.fromhex(typed["redaction_key_hex"]), typed["value"]) == typed["digest"]
    assert json.loads(entry)["action"]["value_digest"] == typed["digest"], "typed values are keyed with the redaction key"


def _unhex(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"hex"}:
            return bytes.fromhex(value["hex"])
        return {k: _unhex(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unhex(v) for v in value]
    return value


def test_every_schema_has_a_sample_record_and_its_single_object_bytes() -> None:
    """avro.json pins every schema of schemas/avro/*.avsc with a sample record -> single-object bytes."""
    document = _load("avro.json")
    shipped = sorted(path.stem for path in (VECTORS.parent / "avro").glob("*.avsc"))
    by_name = {item["schema"]: item for item in document["schemas"]}
    assert sorted(by_name) == shipped
    missing = [name for name in shipped if "record" not in by_name[name] or "single_object_hex" not in by_name[name]]
    assert missing == [], f"avro.json has no sample record for {missing}: add one to tests/vectors/generate.py"
    for name, item in by_name.items():
        record = _unhex(item["record"])
        data = bytes.fromhex(item["single_object_hex"])
        assert codec.encode(name, record) == data, name
        decoded = codec.decode(data)
        assert (decoded.schema.name, decoded.record) == (name, record), name
        assert data[:2] == codec.MAGIC and data[2:10].hex() == item["fingerprint_crc64_avro_le"], name
