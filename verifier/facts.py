"""Compact facts of raw records: the verifier's per-record byte work, in batches.

``verifier/verify.py`` makes every decision; what it needs of each record is a
small tuple: the envelope split, the entry or audit head, the recomputed entry
hash, MAC or evidence-set hash, the decoded stage fields, or the text of the
decode error. The functions here compute those tuples for a whole batch of
records at once, and ``verifier/sources.py`` parses dump lines the same way.

Two implementations return identical tuples (``tests/unit/differential/test_verifier_facts.py``
checks it on valid and malformed inputs):

* ``PYTHON``: the reference, built on ``bernstein.schemas.codec``'s readers, fastavro
  and orjson (the code the verifier ran per record before);
* ``NATIVE``: ``bernstein_native.FactReader`` / ``parse_dump_lines`` (Rust),
  which hands back the items it does not reproduce (unusual dump lines,
  bodies its strict Avro reader refuses, ...) to the Python function for that
  item.

``current()`` is the native one when the extension is installed and reads the
same schemas as this tree, else the Python one; ``use()`` overrides it.

Fact tuples (the first item is the kind):

``journal_facts(values)``
    ``(J_UNDECODABLE, message)``, ``(J_ENTRY, stored, recomputed, run_id, seq,
    prev_hash, entry_type)``, ``(J_ENTRY_UNDECODABLE, stored, recomputed,
    message)``, ``(J_SEAL, payload, key_id, signature)``.
``audit_facts(values, secret_for)``
    ``(A_UNDECODABLE, message)``, ``(A_RECORD, key_id, mac, recomputed mac or
    None when the key is not pinned, partition, seq, prev_mac, event, run_id,
    record_hash, journal_seq, input partition, input offset)``.
``stage_facts(values)``
    ``(S_SKIP,)`` not a decodable JournalRecord; ``(S_NOT_RESULT, stored)``
    not a decodable ``activity.result`` entry; ``(S_RESULT, stored,
    recomputed, run_id, seq, stage_id, kind, terminal_state, artifact_hash,
    evidence_set_hash, observations, recomputed evidence-set hash or None
    when a member is malformed, payload, declared sizes)``, observations as
    ``((kind, ref, content_hash), ...)``, the sizes a tuple of ints
    (``JournalEntry.v2``/``v3``) or None (``v1`` declares none).
``producer_facts(values, public_for)``
    for the journal records of signed entry types: ``(P_OTHER,)`` no entry
    that carries a producer signature, ``(P_LEGACY,)`` a JournalEntry.v1/v2
    (it predates producer signatures), ``(P_ACTION,)`` a computer-use entry
    (its lineage signature is checked by ``bernstein.verifier.verify``), ``(P_SIGNED,
    seq, key_id, producer_id, verified)`` a JournalEntry.v3, ``verified``
    whether its producer signature verifies over the statement rebuilt from
    the entry under ``public_for(key_id)`` (a pinned raw Ed25519 key), None
    when that gives None.
``parse_dump_lines(lines, with_headers)``
    ``(rows, bad)``: a row ``(offset, timestamp, key, value, topic,
    partition, headers)`` per record line up to the first line that is not
    one (blank lines skipped), and that line's index or None.
``parse_dump_block(block, with_headers, eof)``
    the same for the lines of a block of a dump file (``split_lines``):
    ``(rows, count, end, bad)`` with ``count`` lines ending before ``end``
    and ``bad`` None or (index, line).

Any kind may also be ``(RAISE, exception)``: the Python code raised an
exception that is not a verdict for this item; the consumer raises it when it
reaches the item, where the per-record code raised it.
"""

from __future__ import annotations

import binascii
import contextlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Final, Protocol

import orjson

from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    audit_mac,
    audit_record_mac,
    evidence_set_hash,
    journal_entry_hash,
    submission_signing_input,
    submission_statement,
)
from bernstein.schemas.ed25519 import verify_signature
from bernstein.schemas.errors import CanonicalizationError, MalformedDigest
from bernstein.schemas.fact_shapes import KINDS
from bernstein.schemas.records import ENTRY_ACTIVITY_RESULT

RAISE: Final = -1  # a Python-only kind: the reader raised (the extension never makes it)
# the kind tags, from the one table the extension is held to (bernstein.schemas.fact_shapes)
_TAGS: Final = KINDS["verifier"]
J_UNDECODABLE: Final[int] = _TAGS["J_UNDECODABLE"]
J_ENTRY: Final[int] = _TAGS["J_ENTRY"]
J_ENTRY_UNDECODABLE: Final[int] = _TAGS["J_ENTRY_UNDECODABLE"]
J_SEAL: Final[int] = _TAGS["J_SEAL"]
A_UNDECODABLE: Final[int] = _TAGS["A_UNDECODABLE"]
A_RECORD: Final[int] = _TAGS["A_RECORD"]
S_SKIP: Final[int] = _TAGS["S_SKIP"]
S_NOT_RESULT: Final[int] = _TAGS["S_NOT_RESULT"]
S_RESULT: Final[int] = _TAGS["S_RESULT"]
P_OTHER: Final[int] = _TAGS["P_OTHER"]
P_LEGACY: Final[int] = _TAGS["P_LEGACY"]
P_ACTION: Final[int] = _TAGS["P_ACTION"]
P_SIGNED: Final[int] = _TAGS["P_SIGNED"]

Row = tuple[int, int, "bytes | None", "bytes | None", Any, int, tuple[tuple[str, bytes], ...]]
SecretFor = Callable[[str], "bytes | None"]
PublicFor = Callable[[str], "bytes | None"]

_ENTRY: Final = codec.JOURNAL_ENTRIES
_S_SKIP: Final = (S_SKIP,)
_P_OTHER: Final = (P_OTHER,)
_P_LEGACY: Final = (P_LEGACY,)
_P_ACTION: Final = (P_ACTION,)
_V3: Final = frozenset({codec.JOURNAL_ENTRY_V3})
_V3_HEADER: Final = codec.default_codec().schema(codec.JOURNAL_ENTRY_V3).header
_LEGACY_HEADERS: Final = frozenset(codec.default_codec().schema(n).header for n in (codec.JOURNAL_ENTRY, codec.JOURNAL_ENTRY_V2))
_ACTION_HEADERS: Final = frozenset(codec.default_codec().schema(n).header for n in codec.COMPUTER_USE_ENTRIES)

_native: ModuleType | None
try:
    import bernstein_native as _loaded
except ImportError:  # not built: `uv sync` builds it (needs cargo)
    _native = None
else:
    _native = _loaded


class Facts(Protocol):
    name: str
    walks: ModuleType | None
    """The module with the plain path of the chain and audit walks (``AuditPlain``, ``ChainPlain``,
    ``EventQueue``: ``native/src/walk.rs``), or None: the Python walk checks every record."""

    def journal_facts(self, values: list[bytes | None]) -> list[tuple[Any, ...]]: ...

    def audit_facts(self, values: list[bytes | None], secret_for: SecretFor) -> list[tuple[Any, ...]]: ...

    def stage_facts(self, values: list[bytes | None]) -> list[tuple[Any, ...]]: ...

    def producer_facts(self, values: list[bytes | None], public_for: PublicFor) -> list[tuple[Any, ...]]: ...

    def parse_dump_lines(self, lines: list[bytes], with_headers: bool) -> tuple[list[Row], int | None]: ...

    def parse_dump_block(
        self, block: bytes, with_headers: bool, eof: bool
    ) -> tuple[list[Row], int, int, tuple[int, bytes] | None]: ...


# ---------------------------------------------------------------------------
# the reference: one item at a time
# ---------------------------------------------------------------------------


def journal_fact(value: bytes | None) -> tuple[Any, ...]:
    """The facts of one journal record value (``_ChainWalk``'s byte work)."""
    try:
        try:
            name, fields = codec.split_envelope(value or b"")
            if name in codec.AUDIT_RECORDS:
                raise codec.UnknownFingerprint("an audit record on the journal topic", "")
            if name == codec.CHECKPOINT_RECORD:
                raise codec.UnknownFingerprint("a checkpoint record on the journal topic", "")
        except codec.DecodeError as exc:
            return (J_UNDECODABLE, str(exc))
        if name == codec.JOURNAL_RECORD:
            payload, stored = fields
            recomputed = journal_entry_hash(payload)
            try:
                _, run_id, seq, prev_hash, entry_type = codec.read_entry_head(payload)
            except codec.DecodeError as exc:
                return (J_ENTRY_UNDECODABLE, stored, recomputed, str(exc))
            return (J_ENTRY, stored, recomputed, run_id, seq, prev_hash, entry_type)
        return (J_SEAL, fields[0], fields[1], fields[2])
    except Exception as exc:  # noqa: BLE001 (not a verdict: re-raised where the record is reached)
        return (RAISE, exc)


def audit_fact(value: bytes | None, secret_for: SecretFor) -> tuple[Any, ...]:
    """The facts of one audit record value (``_AuditWalk._check``'s byte work)."""
    try:
        try:
            name, fields = codec.split_envelope(value or b"")
            if name not in codec.AUDIT_RECORDS:
                raise codec.UnknownFingerprint(f"a {name} record on the audit topic", "")
            payload, key_id, mac = fields
            _, partition, seq, prev_mac, event, run_id, record_hash, journal_seq = codec.read_audit_head(payload)
            input_partition, input_offset = _audit_input(payload)
        except codec.DecodeError as exc:
            return (A_UNDECODABLE, str(exc))
        secret = secret_for(key_id)
        if secret is None:
            recomputed = None
        elif name == codec.AUDIT_RECORD_V2:  # the MAC covers the key id too
            recomputed = audit_record_mac(secret, key_id, payload)
        else:
            recomputed = audit_mac(secret, payload)
        return (
            A_RECORD,
            key_id,
            mac,
            recomputed,
            partition,
            seq,
            prev_mac,
            event,
            run_id,
            record_hash,
            journal_seq,
            input_partition,
            input_offset,
        )
    except Exception as exc:  # noqa: BLE001 (re-raised where the record is reached)
        return (RAISE, exc)


def _audit_input(payload: bytes) -> tuple[int, int]:
    """(partition, offset) of an audit payload's ``input`` position (the field after ``journal_seq``)."""
    pos = codec.HEADER_SIZE
    for _ in range(2):  # partition, seq
        _, pos = codec._varint(payload, pos)
    for _ in range(9):  # prev_mac, event, run_id, stage_id, kind, terminal_state, reason_code, artifact_hash, evidence_set_hash
        _, pos = codec._blob(payload, pos)
    _, pos = codec._blob(payload, pos)  # record_hash
    _, pos = codec._varint(payload, pos)  # journal_seq
    _, pos = codec._text(payload, pos)  # input.topic
    partition, pos = codec._varint(payload, pos)
    offset, _ = codec._varint(payload, pos)
    return partition, offset


def stage_fact(value: bytes | None) -> tuple[Any, ...]:
    """The facts of one journal record value for the stage pass."""
    try:
        try:
            name, fields = codec.split_envelope(value or b"")
        except codec.DecodeError:
            return _S_SKIP
        if name != codec.JOURNAL_RECORD:
            return _S_SKIP
        payload, stored = fields
        try:
            if codec.read_entry_head(payload)[4] != ENTRY_ACTIVITY_RESULT:
                return (S_NOT_RESULT, stored)
            entry = codec.decode(payload, expect=_ENTRY).record
        except codec.DecodeError:
            return (S_NOT_RESULT, stored)
        if entry["entry_type"] != ENTRY_ACTIVITY_RESULT:
            return (S_NOT_RESULT, stored)
        return result_fact(entry, stored, payload)
    except Exception as exc:  # noqa: BLE001 (re-raised where the record is reached)
        return (RAISE, exc)


def producer_fact(value: bytes | None, public_for: PublicFor) -> tuple[Any, ...]:
    """The producer-signature facts of one journal record value (``_ChainWalk``'s producer checks)."""
    try:
        try:
            name, fields = codec.split_envelope(value or b"")
        except codec.DecodeError:
            return _P_OTHER
        if name != codec.JOURNAL_RECORD:
            return _P_OTHER
        payload = fields[0]
        header = bytes(payload[: codec.HEADER_SIZE])
        if header in _LEGACY_HEADERS:
            return _P_LEGACY
        if header in _ACTION_HEADERS:
            return _P_ACTION
        if header != _V3_HEADER:
            return _P_OTHER
        try:
            entry = codec.decode(payload, expect=_V3).record
        except codec.DecodeError:
            return _P_OTHER  # ENTRY_UNDECODABLE, named by the chain walk
        key_id = entry["producer_key_id"]
        public = public_for(key_id)
        verified: bool | None = None
        if public is not None:
            try:
                signed = submission_signing_input(submission_statement(entry, key_id))
            except CanonicalizationError:
                verified = False
            else:
                verified = verify_signature(public, entry["producer_signature"], signed)
        return (P_SIGNED, entry["seq"], key_id, entry["producer_id"], verified)
    except Exception as exc:  # noqa: BLE001 (re-raised where the record is reached)
        return (RAISE, exc)


def result_fact(entry: dict[str, Any], stored: str, payload: bytes) -> tuple[Any, ...]:
    """The ``S_RESULT`` fact of a decoded activity.result entry (``payload`` its bytes)."""
    observations = tuple((o["kind"], o["ref"], o["content_hash"]) for o in entry["observations"])
    try:
        recomputed_set: str | None = evidence_set_hash(o[2] for o in observations)
    except MalformedDigest:
        recomputed_set = None
    return (
        S_RESULT,
        stored,
        journal_entry_hash(payload),
        entry["run_id"],
        entry["seq"],
        entry["stage_id"],
        entry["kind"],
        entry["terminal_state"],
        entry["artifact_hash"],
        entry["evidence_set_hash"],
        observations,
        recomputed_set,
        payload,
        _declared(entry["observations"]),
        entry["producer_id"],
        entry.get("producer_key_id", ""),
    )


def _declared(observations: list[dict[str, Any]]) -> tuple[int, ...] | None:
    """The observations' declared sizes, or None when one declares none (a JournalEntry.v1)."""
    sizes = tuple(o.get("size") for o in observations)
    return sizes if all(isinstance(size, int) for size in sizes) else None  # type: ignore[return-value]


_BLANK: Final = object()
_BAD: Final = object()


def b64(value: Any) -> bytes | None:
    """A base64 field of a dump line (strict), None for JSON null."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("base64 field is not a string")
    return binascii.a2b_base64(value, strict_mode=True)


def item_row(item: dict[str, Any], with_headers: bool) -> Row:
    """The row of one parsed dump line (raises ValueError, KeyError, TypeError, binascii.Error)."""
    topic = item["topic"]
    partition = int(item["partition"])
    offset = int(item["offset"])
    timestamp = int(item.get("timestamp") or 0)
    key = b64(item.get("key"))
    value = b64(item.get("value"))
    headers: tuple[tuple[str, bytes], ...] = ()
    if with_headers:
        raw_headers = item.get("headers") or ()
        if raw_headers:
            headers = tuple((str(k), b64(v) or b"") for k, v in raw_headers)
    return (offset, timestamp, key, value, topic, partition, headers)


def _line_row(line: bytes, with_headers: bool) -> Any:
    """A row, ``_BLANK`` or ``_BAD`` for one dump line."""
    if not line.strip():
        return _BLANK
    try:
        item = orjson.loads(line)
        if not isinstance(item, dict):
            raise ValueError("not an object")
        return item_row(item, with_headers)
    except (ValueError, KeyError, TypeError, binascii.Error):
        return _BAD


def split_lines(block: bytes, eof: bool) -> tuple[list[bytes], int]:
    """The lines of a block as a binary file yields them (each ends with its newline), and where they end.

    Unless ``eof``, bytes after the last newline are not a line yet (they
    start the next block).
    """
    end = len(block) if eof else block.rfind(b"\n") + 1
    pieces = block[:end].split(b"\n")
    last = pieces.pop()
    lines = [piece + b"\n" for piece in pieces]
    if last:
        lines.append(last)
    return lines, end


class PythonFacts:
    """The reference implementation."""

    name = "python"
    walks: ModuleType | None = None

    def journal_facts(self, values: list[bytes | None]) -> list[tuple[Any, ...]]:
        return [journal_fact(v) for v in values]

    def audit_facts(self, values: list[bytes | None], secret_for: SecretFor) -> list[tuple[Any, ...]]:
        return [audit_fact(v, secret_for) for v in values]

    def stage_facts(self, values: list[bytes | None]) -> list[tuple[Any, ...]]:
        return [stage_fact(v) for v in values]

    def producer_facts(self, values: list[bytes | None], public_for: PublicFor) -> list[tuple[Any, ...]]:
        return [producer_fact(v, public_for) for v in values]

    def parse_dump_lines(self, lines: list[bytes], with_headers: bool) -> tuple[list[Row], int | None]:
        rows: list[Row] = []
        for index, line in enumerate(lines):
            row = _line_row(line, with_headers)
            if row is _BLANK:
                continue
            if row is _BAD:
                return rows, index
            rows.append(row)
        return rows, None

    def parse_dump_block(
        self, block: bytes, with_headers: bool, eof: bool
    ) -> tuple[list[Row], int, int, tuple[int, bytes] | None]:
        lines, end = split_lines(block, eof)
        rows, bad = self.parse_dump_lines(lines, with_headers)
        return rows, len(lines), end, None if bad is None else (bad, lines[bad])


class NativeFacts:
    """``bernstein_native``'s batch functions; the items they hand back go to the reference."""

    name = "native"

    def __init__(self, native: ModuleType) -> None:
        self.walks: ModuleType | None = native if hasattr(native, "ChainPlain") else None
        self._reader = native.FactReader([(s.fingerprint, s.name) for s in codec.default_codec().schemas])
        self._parse = native.parse_dump_lines
        self._parse_block = native.parse_dump_block

    def journal_facts(self, values: list[bytes | None]) -> list[tuple[Any, ...]]:
        facts, fallback = self._reader.journal_facts(values)
        for i in fallback:
            facts[i] = journal_fact(values[i])
        return facts  # type: ignore[no-any-return]

    def audit_facts(self, values: list[bytes | None], secret_for: SecretFor) -> list[tuple[Any, ...]]:
        facts, fallback = self._reader.audit_facts(values, secret_for)
        for i in fallback:
            facts[i] = audit_fact(values[i], secret_for)
        return facts  # type: ignore[no-any-return]

    def stage_facts(self, values: list[bytes | None]) -> list[tuple[Any, ...]]:
        facts, fallback = self._reader.stage_facts(values)
        for i in fallback:
            facts[i] = stage_fact(values[i])
        return facts  # type: ignore[no-any-return]

    def producer_facts(self, values: list[bytes | None], public_for: PublicFor) -> list[tuple[Any, ...]]:
        facts, fallback = self._reader.producer_facts(values, public_for)
        for i in fallback:
            facts[i] = producer_fact(values[i], public_for)
        return facts  # type: ignore[no-any-return]

    def parse_dump_lines(self, lines: list[bytes], with_headers: bool) -> tuple[list[Row], int | None]:
        rows, fallback = self._parse(lines, with_headers)
        if not fallback:
            return rows, None
        rows, bad = _resolve(rows, [(i, lines[i]) for i in fallback], with_headers)
        return rows, None if bad is None else bad[0]

    def parse_dump_block(
        self, block: bytes, with_headers: bool, eof: bool
    ) -> tuple[list[Row], int, int, tuple[int, bytes] | None]:
        rows, fallback, count, end = self._parse_block(block, with_headers, eof)
        if not fallback:
            return rows, count, end, None
        rows, bad = _resolve(rows, fallback, with_headers)
        return rows, count, end, bad


def _resolve(
    rows: list[Any], fallback: list[tuple[int, bytes]], with_headers: bool
) -> tuple[list[Row], tuple[int, bytes] | None]:
    """Rows with the lines the extension handed back parsed by the reference; up to the first bad line."""
    blanks = False
    for i, line in fallback:  # ascending: the first bad one is the first bad line
        row = _line_row(line, with_headers)
        if row is _BAD:
            del rows[i:]
            return [r for r in rows if r is not None], (i, line)
        if row is _BLANK:
            blanks = True
        else:
            rows[i] = row
    return ([r for r in rows if r is not None] if blanks else rows), None


def native_status() -> tuple[bool, str]:
    """Whether the extension can compute facts for this tree, and if not why."""
    if _native is None:
        return False, "the bernstein_native extension is not installed"
    pinned = getattr(_native, "VERIFIER_SCHEMAS", None)
    if pinned is None or not hasattr(_native, "FactReader"):
        return False, "bernstein_native predates the verifier's facts (rebuild it with `uv sync`)"
    if not hasattr(_native.FactReader, "producer_facts"):
        return False, "bernstein_native predates the producer-signature facts (rebuild it with `uv sync`)"
    schemas = {s.name: s.fingerprint for s in codec.default_codec().schemas}
    changed = [name for name, fingerprint in pinned if schemas.get(name) != fingerprint]
    if changed:
        return False, f"bernstein_native reads old layouts of {', '.join(changed)}"
    # a journal entry layout it does not know would read as undecodable: the reference reads it instead
    unknown = sorted(_ENTRY - {name for name, _ in pinned})
    if unknown:
        return False, f"bernstein_native predates {', '.join(unknown)} (rebuild it with `uv sync`)"
    return True, f"bernstein_native {_native.VERSION}"


PYTHON: Final = PythonFacts()
NATIVE: NativeFacts | None = NativeFacts(_native) if _native is not None and native_status()[0] else None
_selected: Facts | None = None


def current() -> Facts:
    """The implementation the verifier uses: ``use()``'s choice, else native when available."""
    if _selected is not None:
        return _selected
    return NATIVE if NATIVE is not None else PYTHON


@contextlib.contextmanager
def use(facts: Facts) -> Iterator[Facts]:
    """Run the verifier with ``facts`` (tests compare the implementations)."""
    global _selected
    previous = _selected
    _selected = facts
    try:
        yield facts
    finally:
        _selected = previous
