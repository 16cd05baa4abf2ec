"""Avro single-object encoding (SOE) for every record on our topics.

Wire form: ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the
writer schema's Parsing Canonical Form + the Avro binary body. The ``.avsc``
files in ``schemas/avro/`` are the cross-language contract; the fingerprint
is derived from the schema itself, so no registry is needed and every
language computes the same 8 bytes. Decoding picks the writer schema by
fingerprint and refuses anything else with a typed error; fastavro's own
exceptions never escape this module.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from bernstein.schemas.errors import BernsteinError, MalformedInput

MAGIC: Final = b"\xc3\x01"
HEADER_SIZE: Final = 10
SCHEMA_DIR: Final = Path(__file__).resolve().parent / "avro"

# Schema names are the .avsc file stems: "<Record>.v<N>".
ACTIVITY_SUBMISSION: Final = "ActivitySubmission.v1"
ACTIVITY_SUBMISSION_V2: Final = "ActivitySubmission.v2"
"""What the SDK publishes since v2: each observation declares its blob's byte size (the per-run evidence
cap); v1 stays accepted (its blobs count 0 toward the cap, and the verifier reports their sizes)."""
ACTIVITY_SUBMISSION_V3: Final = "ActivitySubmission.v3"
"""What the SDK publishes since v3: v2 plus the producer's key id and Ed25519 signature over the
submission statement (``canonical.submission_statement``). v1 and v2 decode, and are refused as
SUBMISSION_UNSIGNED."""
ACTIVITY_SUBMISSIONS: Final = frozenset({ACTIVITY_SUBMISSION, ACTIVITY_SUBMISSION_V2, ACTIVITY_SUBMISSION_V3})
RUN_CLOSE: Final = "RunClose.v1"
RUN_CLOSE_V2: Final = "RunClose.v2"
"""A signed run close (producer key id and signature over ``canonical.run_close_statement``)."""
RUN_CLOSES: Final = frozenset({RUN_CLOSE, RUN_CLOSE_V2})
JOURNAL_ENTRY: Final = "JournalEntry.v1"
JOURNAL_ENTRY_V2: Final = "JournalEntry.v2"
"""The entry the scheduler writes for an ActivitySubmission.v2 (observations with their declared sizes)."""
JOURNAL_ENTRY_V3: Final = "JournalEntry.v3"
"""The entry for an ActivitySubmission.v3: v2 plus the producer key id and signature."""
JOURNAL_ENTRIES: Final = frozenset({JOURNAL_ENTRY, JOURNAL_ENTRY_V2, JOURNAL_ENTRY_V3})
"""Every activity.result entry layout (the same fields; v2 observations also carry ``size``; v3 adds
the producer's key id and signature)."""
JOURNAL_RECORD: Final = "JournalRecord.v1"
RUN_SEAL: Final = "RunSeal.v1"
RUN_SEAL_V2: Final = "RunSeal.v2"
"""What the scheduler writes since v2: v1 plus ``closed_by``, the signed RunClose.v2 that closed the run."""
RUN_SEALS: Final = frozenset({RUN_SEAL, RUN_SEAL_V2})
SEAL_RECORD: Final = "SealRecord.v1"
REFUSAL: Final = "Refusal.v1"
REFUSAL_V2: Final = "Refusal.v2"
"""What the scheduler writes since v2: v1 plus who sent the refused record (``producer``, ``key_id``) and
whether its signature was verified before the refusal (``authenticated``); v1 records stay decodable."""
REFUSALS: Final = frozenset({REFUSAL, REFUSAL_V2})
DEAD_LETTER: Final = "DeadLetter.v1"
DEAD_LETTER_V2: Final = "DeadLetter.v2"
"""What the scheduler writes since v2 (key digest and size, at most 1 KiB of the key); v1 records stay decodable."""
AUDIT_ENTRY: Final = "AuditEntry.v1"
AUDIT_RECORD: Final = "AuditRecord.v1"
AUDIT_ENTRY_V2: Final = "AuditEntry.v2"
AUDIT_RECORD_V2: Final = "AuditRecord.v2"
"""What the scheduler writes since v2: the MAC covers the key id too (``canonical.audit_record_mac``); v1 stays readable."""
AUDIT_RECORDS: Final = frozenset({AUDIT_RECORD, AUDIT_RECORD_V2})
"""Every audit envelope layout (``split_envelope`` returns the same fields for both)."""
PARTITION_CHECKPOINT: Final = "PartitionCheckpoint.v1"
PARTITION_CHECKPOINT_V2: Final = "PartitionCheckpoint.v2"
"""What the scheduler writes since v2: v1 plus the partition's Merkle log (tree_size, tree_root, the signed note)."""
PARTITION_CHECKPOINTS: Final = frozenset({PARTITION_CHECKPOINT, PARTITION_CHECKPOINT_V2})
CHECKPOINT_RECORD: Final = "CheckpointRecord.v1"
COMPUTER_USE_ACTION: Final = "ComputerUseAction.v1"
COMPUTER_USE_ENTRY: Final = "ComputerUseEntry.v1"
COMPUTER_USE_ACTION_V2: Final = "ComputerUseAction.v2"
"""Since v2 an action declares its screenshot's and DOM snapshot's byte sizes (``screenshot_size``, ``dom_size``)."""
COMPUTER_USE_ENTRY_V2: Final = "ComputerUseEntry.v2"
"""The entry the scheduler writes for a ComputerUseAction.v2 (the declared sizes pinned)."""
COMPUTER_USE_ENTRIES: Final = frozenset({COMPUTER_USE_ENTRY, COMPUTER_USE_ENTRY_V2})


class DecodeError(MalformedInput):
    """Wire bytes that are not a record of one of our schemas."""

    code = "E_DECODE"


class NotSingleObjectEncoded(DecodeError):
    """The bytes do not start with the Avro single-object marker C3 01."""

    code = "NOT_AVRO_SINGLE_OBJECT"


class UnknownFingerprint(DecodeError):
    """The schema fingerprint names no schema this codec knows (or not one expected here)."""

    code = "UNKNOWN_SCHEMA_FINGERPRINT"

    def __init__(self, message: str, fingerprint_hex: str) -> None:
        super().__init__(message)
        self.fingerprint_hex = fingerprint_hex


class TruncatedRecord(DecodeError):
    """The body ends before the record does, or carries bytes after it."""

    code = "TRUNCATED_OR_MALFORMED_BODY"


class EncodeError(BernsteinError):
    """A record that does not fit its schema (a programming error in the caller)."""

    code = "E_ENCODE"


@dataclass(frozen=True)
class Schema:
    """One versioned schema: its name, fingerprint and parsed form."""

    name: str
    fingerprint: bytes
    canonical_form: str
    parsed: Any
    write_body: Callable[[Mapping[str, Any]], bytes]
    """A compiled encoder of the record body (byte-identical to fastavro's; see tests)."""

    @property
    def header(self) -> bytes:
        return MAGIC + self.fingerprint


@dataclass(frozen=True)
class Decoded:
    """A decoded record and the schema it was written with."""

    schema: Schema
    record: dict[str, Any]


class Codec:
    """Encodes and decodes single-object Avro records for a fixed set of schemas."""

    def __init__(self, schema_dir: Path = SCHEMA_DIR) -> None:
        self._by_name: dict[str, Schema] = {}
        self._by_fingerprint: dict[bytes, Schema] = {}
        for path in sorted(schema_dir.glob("*.avsc")):
            raw = json.loads(path.read_text(encoding="utf-8"))
            # A fresh named-type table per file: every file defines its nested
            # types inline so that each file is a complete contract on its own.
            parsed = parse_schema(raw, named_schemas={})
            pcf = to_parsing_canonical_form(raw)
            schema = Schema(
                name=path.stem,
                fingerprint=bytes.fromhex(fingerprint(pcf, "CRC-64-AVRO")),
                canonical_form=pcf,
                parsed=parsed,
                write_body=_compile(raw),
            )
            if schema.fingerprint in self._by_fingerprint:
                other = self._by_fingerprint[schema.fingerprint].name
                raise EncodeError(f"schemas {other} and {schema.name} have the same fingerprint")
            self._by_name[schema.name] = schema
            self._by_fingerprint[schema.fingerprint] = schema

    def schema(self, name: str) -> Schema:
        try:
            return self._by_name[name]
        except KeyError:
            raise EncodeError(f"no schema named {name!r}; known: {', '.join(sorted(self._by_name))}") from None

    @property
    def schemas(self) -> tuple[Schema, ...]:
        return tuple(self._by_name[name] for name in sorted(self._by_name))

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        """Single-object encode ``record`` with the schema ``name``."""
        schema = self.schema(name)
        try:
            return schema.header + schema.write_body(record)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError, UnicodeEncodeError) as exc:
            raise EncodeError(f"record does not fit schema {name}: {exc}") from exc

    def encode_with_fastavro(self, name: str, record: Mapping[str, Any]) -> bytes:
        """The same bytes through fastavro's writer (the reference the compiled encoders are tested against)."""
        schema = self.schema(name)
        buffer = io.BytesIO()
        buffer.write(schema.header)
        try:
            schemaless_writer(buffer, schema.parsed, record)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise EncodeError(f"record does not fit schema {name}: {exc}") from exc
        return buffer.getvalue()

    def schema_of(self, data: bytes) -> Schema:
        """The schema named by the header of ``data`` (raises DecodeError)."""
        if len(data) < HEADER_SIZE or data[:2] != MAGIC:
            shown = data[:12].hex()
            raise NotSingleObjectEncoded(
                f"value is not an Avro single-object record (expected it to start with c301, got {shown!r}, {len(data)} bytes)"
            )
        fp = bytes(data[2:HEADER_SIZE])
        schema = self._by_fingerprint.get(fp)
        if schema is None:
            raise UnknownFingerprint(
                f"value names schema fingerprint {fp.hex()} which is not one of our schemas "
                f"(a newer producer, or a foreign record on our topic)",
                fp.hex(),
            )
        return schema

    def decode(self, data: bytes, *, expect: frozenset[str] | None = None) -> Decoded:
        """Decode a single-object record, optionally insisting on one of ``expect``."""
        schema = self.schema_of(data)
        if expect is not None and schema.name not in expect:
            raise UnknownFingerprint(
                f"value is a {schema.name} record, expected one of {', '.join(sorted(expect))}",
                schema.fingerprint.hex(),
            )
        buffer = io.BytesIO(data)
        buffer.seek(HEADER_SIZE)
        try:
            record = schemaless_reader(buffer, schema.parsed, None)
        except (
            EOFError,
            StopIteration,
            ValueError,
            IndexError,
            OverflowError,
            UnicodeDecodeError,
            MemoryError,
            TypeError,
        ) as exc:
            raise TruncatedRecord(f"{schema.name} body is truncated or malformed: {exc or type(exc).__name__}") from exc
        if buffer.tell() != len(data):
            raise TruncatedRecord(f"{schema.name} body has {len(data) - buffer.tell()} unexpected trailing bytes")
        if not isinstance(record, dict):
            raise TruncatedRecord(f"{schema.name} body did not decode to a record")
        return Decoded(schema=schema, record=record)


# ---------------------------------------------------------------------------
# Compiled body encoders
#
# Our schemas use only records, arrays, ["null", T] unions, string, bytes,
# int, long and boolean, so a body is a concatenation of zig-zag varints and
# length-prefixed bytes. Compiling each schema into nested closures once is
# several times faster than interpreting it per record, which matters on the
# scheduler's hot path (four encodes per input).
# ---------------------------------------------------------------------------

_SMALL_LENGTHS = tuple(bytes([2 * n]) for n in range(64))
_SMALL_LONGS = tuple(bytes([n]) for n in range(128))
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _long(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)  # TypeError for anything but an int
    if 0 <= n < 0x80:
        return _SMALL_LONGS[n]
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise OverflowError(f"{value} does not fit a long")
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _int(value: int) -> bytes:
    if not -(2**31) <= value < 2**31:
        raise OverflowError(f"{value} does not fit an int")
    return _long(value)


def _bytes(value: bytes) -> bytes:
    n = len(value)
    return (_SMALL_LENGTHS[n] if n < 64 else _long(n)) + value  # TypeError unless bytes-like


def _string(value: str) -> bytes:
    data = value.encode("utf-8")  # AttributeError unless a str
    n = len(data)
    return (_SMALL_LENGTHS[n] if n < 64 else _long(n)) + data


def _boolean(value: bool) -> bytes:
    if value is True:
        return b"\x01"
    if value is False:
        return b"\x00"
    raise TypeError(f"expected a boolean, got {type(value).__name__}")


_PRIMITIVES: dict[str, Callable[[Any], bytes]] = {
    "string": _string,
    "bytes": _bytes,
    "int": _int,
    "long": _long,
    "boolean": _boolean,
}


def _compile(schema: Any) -> Callable[[Any], bytes]:
    if isinstance(schema, str):
        try:
            return _PRIMITIVES[schema]
        except KeyError:
            raise EncodeError(f"no compiled encoder for Avro type {schema!r}") from None
    if isinstance(schema, list):
        if len(schema) == 2 and schema[0] == "null":
            inner = _compile(schema[1])
            return lambda value: b"\x00" if value is None else b"\x02" + inner(value)
        raise EncodeError(f"no compiled encoder for union {schema!r}")
    kind = schema.get("type")
    if kind == "record":
        fields = [(field["name"], _compile(field["type"])) for field in schema["fields"]]

        def record(value: Mapping[str, Any]) -> bytes:
            return b"".join([encode(value[name]) for name, encode in fields])

        return record
    if kind == "array":
        item = _compile(schema["items"])

        def array(value: list[Any]) -> bytes:
            if not isinstance(value, (list, tuple)):
                raise TypeError(f"expected a list, got {type(value).__name__}")
            if not value:
                return b"\x00"
            return _long(len(value)) + b"".join([item(v) for v in value]) + b"\x00"

        return array
    return _compile(kind)


@lru_cache(maxsize=1)
def default_codec() -> Codec:
    """The codec over the schemas shipped with this package."""
    return Codec()


def encode(name: str, record: Mapping[str, Any]) -> bytes:
    return default_codec().encode(name, record)


def decode(data: bytes, *, expect: frozenset[str] | None = None) -> Decoded:
    return default_codec().decode(data, expect=expect)


# ---------------------------------------------------------------------------
# Fast readers for the verifier's hot path
#
# The verifier touches every journal and audit record several times but needs
# only a few leading fields of most of them. These readers parse exactly those
# fields straight from the bytes (a varint and a slice each) instead of
# materialising whole records; tests check them against full decoding.
# ---------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        try:
            byte = data[pos]
        except IndexError:
            raise TruncatedRecord("record ends inside a number") from None
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise TruncatedRecord("number longer than 10 bytes")


def _blob(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = _varint(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        raise TruncatedRecord("record ends inside a byte string")
    return data[pos:end], end


def _text(data: bytes, pos: int) -> tuple[str, int]:
    raw, pos = _blob(data, pos)
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError:
        raise TruncatedRecord("string is not UTF-8") from None


def split_envelope(value: bytes) -> tuple[str, tuple[Any, ...]]:
    """(schema name, fields) of a JournalRecord, SealRecord, AuditRecord or CheckpointRecord value.

    JournalRecord -> (payload, entry_hash); SealRecord and CheckpointRecord ->
    (payload, key_id, signature); AuditRecord v1 and v2 -> (payload, key_id,
    mac) (v2 stores key_id first; the name tells which MAC applies). Anything
    else raises DecodeError exactly as ``decode`` would.
    """
    codec = default_codec()
    schema = codec.schema_of(value)
    name = schema.name
    pos = HEADER_SIZE
    if name == JOURNAL_RECORD:
        payload, pos = _blob(value, pos)
        entry_hash, pos = _text(value, pos)
        fields: tuple[Any, ...] = (payload, entry_hash)
    elif name in (SEAL_RECORD, CHECKPOINT_RECORD):
        payload, pos = _blob(value, pos)
        key_id, pos = _text(value, pos)
        signature, pos = _blob(value, pos)
        fields = (payload, key_id, signature)
    elif name == AUDIT_RECORD:
        payload, pos = _blob(value, pos)
        key_id, pos = _text(value, pos)
        mac, pos = _text(value, pos)
        fields = (payload, key_id, mac)
    elif name == AUDIT_RECORD_V2:
        key_id, pos = _text(value, pos)
        payload, pos = _blob(value, pos)
        mac, pos = _text(value, pos)
        fields = (payload, key_id, mac)
    else:
        raise UnknownFingerprint(
            f"value is a {name} record, expected a journal, seal or audit envelope", schema.fingerprint.hex()
        )
    if pos != len(value):
        raise TruncatedRecord(f"{name} body has {len(value) - pos} unexpected trailing bytes")
    return name, fields


_ENTRY_HEADS: Final = JOURNAL_ENTRIES | COMPUTER_USE_ENTRIES
_AUDIT_HEADS: Final = frozenset({AUDIT_ENTRY, AUDIT_ENTRY_V2})


def read_entry_head(payload: bytes) -> tuple[str, str, int, str, str]:
    """(schema name, run_id, seq, prev_hash, entry_type) of a journal entry payload."""
    schema = default_codec().schema_of(payload)
    if schema.name not in _ENTRY_HEADS:
        raise UnknownFingerprint(f"payload is a {schema.name} record, expected a journal entry", schema.fingerprint.hex())
    run_id, pos = _text(payload, HEADER_SIZE)
    seq, pos = _varint(payload, pos)
    prev_hash, pos = _text(payload, pos)
    entry_type, pos = _text(payload, pos)
    return schema.name, run_id, seq, prev_hash, entry_type


def read_audit_head(payload: bytes) -> tuple[str, int, int, str, str, str, str, int]:
    """(schema name, partition, seq, prev_mac, event, run_id, record_hash, journal_seq) of an audit payload."""
    schema = default_codec().schema_of(payload)
    if schema.name not in _AUDIT_HEADS:
        raise UnknownFingerprint(f"payload is a {schema.name} record, expected an audit entry", schema.fingerprint.hex())
    partition, pos = _varint(payload, HEADER_SIZE)
    seq, pos = _varint(payload, pos)
    prev_mac, pos = _text(payload, pos)
    event, pos = _text(payload, pos)
    run_id, pos = _text(payload, pos)
    for _ in range(6):  # stage_id, kind, terminal_state, reason_code, artifact_hash, evidence_set_hash
        _, pos = _blob(payload, pos)
    record_hash, pos = _text(payload, pos)
    journal_seq, pos = _varint(payload, pos)
    return schema.name, partition, seq, prev_mac, event, run_id, record_hash, journal_seq
