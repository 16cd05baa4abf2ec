"""Avro single-object encoding: fingerprints, round trips, typed decode errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bernstein.schemas import codec

VECTORS = Path(__file__).resolve().parents[2] / "schemas" / "vectors"


def _crc64_avro(data: bytes) -> bytes:
    """An independent CRC-64-AVRO (Rabin) from the Avro spec, little-endian bytes."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp.to_bytes(8, "little")


def _unhex(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    if isinstance(value, dict):
        return {k: _unhex(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unhex(v) for v in value]
    return value


def test_fingerprints_match_an_independent_rabin_implementation() -> None:
    c = codec.default_codec()
    assert len(c.schemas) >= 10
    for schema in c.schemas:
        assert schema.fingerprint == _crc64_avro(schema.canonical_form.encode()), schema.name


def test_research_note_golden_vector() -> None:
    # From the Avro research notes: fastavro, python avro and avsc agree on these bytes.
    assert _crc64_avro(b'"int"').hex() == "8f5c393f1ad57572"


def test_avro_vectors_reproduce() -> None:
    document = json.loads((VECTORS / "avro.json").read_text(encoding="utf-8"))
    c = codec.default_codec()
    names = {s.name for s in c.schemas}
    assert {item["schema"] for item in document["schemas"]} == names
    checked = 0
    for item in document["schemas"]:
        schema = c.schema(item["schema"])
        assert schema.fingerprint.hex() == item["fingerprint_crc64_avro_le"]
        assert schema.canonical_form == item["parsing_canonical_form"]
        if "single_object_hex" in item:
            record = _unhex(item["record"])
            encoded = c.encode(item["schema"], record)
            assert encoded.hex() == item["single_object_hex"]
            assert c.decode(encoded).record == record
            checked += 1
    assert checked >= 3


def test_decode_selects_the_schema_by_fingerprint() -> None:
    c = codec.default_codec()
    value = c.encode(
        codec.RUN_CLOSE, {"submission_id": "s", "run_id": "r", "producer": {"id": "p", "sdk": "x"}, "occurred_at_ms": 5}
    )
    decoded = c.decode(value)
    assert decoded.schema.name == codec.RUN_CLOSE
    assert value[:2] == b"\xc3\x01" and value[2:10] == decoded.schema.fingerprint


def _sample() -> bytes:
    return codec.encode(
        codec.RUN_CLOSE, {"submission_id": "s", "run_id": "run-1", "producer": {"id": "p", "sdk": "x"}, "occurred_at_ms": 5}
    )


@pytest.mark.parametrize(
    ("data", "error", "code", "fragment"),
    [
        (b"", codec.NotSingleObjectEncoded, "NOT_AVRO_SINGLE_OBJECT", "expected it to start with c301"),
        (b'{"json": true}', codec.NotSingleObjectEncoded, "NOT_AVRO_SINGLE_OBJECT", "not an Avro single-object record"),
        (b"\xc3\x01" + b"\x00" * 8 + b"\x02", codec.UnknownFingerprint, "UNKNOWN_SCHEMA_FINGERPRINT", "0000000000000000"),
        (_sample()[:-3], codec.TruncatedRecord, "TRUNCATED_OR_MALFORMED_BODY", "truncated or malformed"),
        (_sample() + b"\x00\x01", codec.TruncatedRecord, "TRUNCATED_OR_MALFORMED_BODY", "2 unexpected trailing bytes"),
    ],
)
def test_undecodable_bytes_are_typed_errors(data: bytes, error: type[Exception], code: str, fragment: str) -> None:
    with pytest.raises(error) as info:
        codec.decode(data)
    assert isinstance(info.value, codec.DecodeError)
    assert info.value.code == code
    assert fragment in str(info.value)


def test_decode_refuses_a_known_schema_where_another_is_expected() -> None:
    with pytest.raises(codec.UnknownFingerprint, match="expected one of ActivitySubmission.v1"):
        codec.decode(_sample(), expect=frozenset({codec.ACTIVITY_SUBMISSION}))


def test_encode_error_is_typed() -> None:
    with pytest.raises(codec.EncodeError, match="RunClose.v1"):
        codec.encode(codec.RUN_CLOSE, {"submission_id": 5})


@given(st.binary(max_size=300))
def test_random_bytes_never_escape_as_foreign_exceptions(data: bytes) -> None:
    try:
        codec.decode(data)
    except codec.DecodeError:
        pass


@given(st.binary(min_size=1, max_size=60))
def test_mutated_bodies_never_escape_as_foreign_exceptions(tail: bytes) -> None:
    header = codec.default_codec().schema(codec.ACTIVITY_SUBMISSION).header
    try:
        codec.decode(header + tail)
    except codec.DecodeError:
        pass


def _strategy(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, str):
        return {
            "string": st.text(max_size=80),
            "bytes": st.binary(max_size=200),
            "int": st.integers(min_value=-(2**31), max_value=2**31 - 1),
            "long": st.integers(min_value=-(2**63), max_value=2**63 - 1),
            "boolean": st.booleans(),
        }[schema]
    if isinstance(schema, list):
        return st.one_of(st.none(), _strategy(schema[1]))
    if schema["type"] == "record":
        return st.fixed_dictionaries({f["name"]: _strategy(f["type"]) for f in schema["fields"]})
    if schema["type"] == "array":
        return st.lists(_strategy(schema["items"]), max_size=4)
    return _strategy(schema["type"])


@pytest.mark.parametrize("schema_name", [s.name for s in codec.default_codec().schemas])
def test_compiled_encoders_are_byte_identical_to_fastavro(schema_name: str) -> None:
    raw = json.loads((Path(codec.SCHEMA_DIR) / f"{schema_name}.avsc").read_text(encoding="utf-8"))
    c = codec.default_codec()

    @given(_strategy(raw))
    def check(record: dict[str, Any]) -> None:
        encoded = c.encode(schema_name, record)
        assert encoded == c.encode_with_fastavro(schema_name, record)
        assert c.decode(encoded).record == record

    check()


def test_fast_readers_agree_with_full_decoding() -> None:
    c = codec.default_codec()
    entry = {
        "run_id": "run-é",
        "seq": 2**40,
        "prev_hash": "sha256:" + "a" * 64,
        "entry_type": "activity.result",
        "stage_id": "s",
        "role": "r",
        "kind": "coding",
        "producer_id": "p",
        "submission_id": "x",
        "artifact_hash": "sha256:" + "b" * 64,
        "evidence_set_hash": "sha256:" + "c" * 64,
        "observations": [{"kind": "page", "ref": "u" * 300, "content_hash": "sha256:" + "d" * 64}],
        "terminal_state": "completed",
        "reason_code": "ok",
        "input": {"topic": "t", "partition": 3, "offset": 99},
        "occurred_at_ms": 1767225600000,
    }
    payload = c.encode(codec.JOURNAL_ENTRY, entry)
    assert codec.read_entry_head(payload) == (codec.JOURNAL_ENTRY, "run-é", 2**40, entry["prev_hash"], "activity.result")
    value = c.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": "sha256:" + "e" * 64})
    assert codec.split_envelope(value) == (codec.JOURNAL_RECORD, (payload, "sha256:" + "e" * 64))
    audit = {
        "partition": 7,
        "seq": 123456,
        "prev_mac": "hmac-sha256:" + "0" * 64,
        "event": "activity.result",
        "run_id": "run-é",
        "stage_id": "s",
        "kind": "coding",
        "terminal_state": "completed",
        "reason_code": "ok",
        "artifact_hash": "",
        "evidence_set_hash": "",
        "record_hash": "sha256:" + "f" * 64,
        "journal_seq": -1,
        "input": {"topic": "t", "partition": 7, "offset": 5},
    }
    for name, record in ((codec.AUDIT_ENTRY, audit), (codec.AUDIT_ENTRY_V2, {**audit, "computer_use": None})):
        head = codec.read_audit_head(c.encode(name, record))
        assert head == (name, 7, 123456, audit["prev_mac"], "activity.result", "run-é", "sha256:" + "f" * 64, -1)
    sealed = c.encode(codec.SEAL_RECORD, {"payload": b"p" * 200, "key_id": "k", "signature": b"s" * 64})
    assert codec.split_envelope(sealed) == (codec.SEAL_RECORD, (b"p" * 200, "k", b"s" * 64))


@given(st.binary(max_size=120))
def test_fast_readers_raise_only_decode_errors(tail: bytes) -> None:
    c = codec.default_codec()
    for name in (codec.JOURNAL_RECORD, codec.AUDIT_RECORD, codec.SEAL_RECORD):
        try:
            codec.split_envelope(c.schema(name).header + tail)
        except codec.DecodeError:
            pass
    for name, reader in ((codec.JOURNAL_ENTRY, codec.read_entry_head), (codec.AUDIT_ENTRY, codec.read_audit_head)):
        try:
            reader(c.schema(name).header + tail)
        except codec.DecodeError:
            pass
