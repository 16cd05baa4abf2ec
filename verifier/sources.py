"""Where the verifier reads topic records from: a live cluster, our dump, or a kcat dump.

All sources yield ``StoredRecord`` in offset order per (stream, partition) and
stream lazily, so memory stays flat however long a topic is. A dump that
cannot be parsed raises ``UnreadableInput`` naming the file and line; a torn
final line (an interrupted or truncated copy) is not a parse error: the
records before it are returned and ``torn_lines`` records where it happened,
so the chain checks can report the truncation as a verdict.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final, Protocol

import orjson

from schemas.errors import MalformedInput
from verifier import facts
from verifier.facts import Row

STREAMS: Final = ("journal", "refusals", "audit", "deadletter")
DUMP_FORMAT: Final = "bernstein.dump/v1"


class UnreadableInput(MalformedInput):
    """A dump or topic that cannot be read at all (exit 3, not a tamper verdict)."""

    code = "E_UNREADABLE_INPUT"


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A topic record exactly as stored: value bytes, key, headers, position, timestamp."""

    stream: str
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class RecordSource(Protocol):
    """A readable set of our topics."""

    def describe(self) -> str: ...

    def partitions(self, stream: str) -> list[int]: ...

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        """Records in offset order; ``headers=False`` lets a source skip decoding headers."""
        ...


@dataclass
class TornLine:
    path: str
    line: int
    """1-based line number of the unparseable final line."""


# ---------------------------------------------------------------------------
# Our dump format
# ---------------------------------------------------------------------------


def encode_dump_line(record: StoredRecord) -> bytes:
    """One JSON line of a dump file; bytes are base64 so any value round-trips."""
    return (
        orjson.dumps(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp_ms,
                "key": None if record.key is None else base64.b64encode(record.key).decode(),
                "value": None if record.value is None else base64.b64encode(record.value).decode(),
                "headers": [[k, base64.b64encode(v).decode()] for k, v in record.headers],
            }
        )
        + b"\n"
    )


class DumpSource:
    """A directory written by ``bernstein topic export``.

    Layout: ``manifest.json``, ``topics/<stream>/<partition>.jsonl``,
    ``cas/sha256/<aa>/<hex>``, ``keys/``.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.torn_lines: list[TornLine] = []
        manifest_path = self.root / "manifest.json"
        if not self.root.is_dir():
            raise UnreadableInput(
                f"{self.root} is not a directory; pass a dump made by `bernstein topic export` or a kcat -J file"
            )
        try:
            self.manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UnreadableInput(
                f"{self.root} has no manifest.json; it is not a dump made by `bernstein topic export`"
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UnreadableInput(f"{manifest_path} is unreadable: {exc}") from exc
        if self.manifest.get("format") != DUMP_FORMAT:
            raise UnreadableInput(f"{manifest_path} is not a {DUMP_FORMAT} manifest")

    def describe(self) -> str:
        return f"dump {self.root}"

    @property
    def cas_dir(self) -> Path:
        return self.root / "cas"

    def partitions(self, stream: str) -> list[int]:
        directory = self.root / "topics" / stream
        if not directory.is_dir():
            return []
        found = []
        for path in directory.glob("*.jsonl"):
            try:
                found.append(int(path.stem))
            except ValueError:
                raise UnreadableInput(f"unexpected file {path} in dump (expected <partition>.jsonl)") from None
        return sorted(found)

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        for rows in self.row_chunks(stream, partition, headers=headers):
            for offset, timestamp, key, value, topic, part, header_items in rows:
                yield StoredRecord(stream, topic, part, offset, timestamp, key, value, header_items)

    def row_chunks(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[list[Row]]:
        """``records`` as lists of rows ``(offset, timestamp, key, value, topic, partition, headers)``.

        Same records, same torn-line and unreadable-line handling, parsed a
        chunk of lines at a time (``verifier.facts``); a chunk is never empty.
        """
        path = self.root / "topics" / stream / f"{partition}.jsonl"
        return _read_dump_rows(path, headers, self.torn_lines)


_CHUNK_BYTES: Final = 1 << 18
"""Bytes read and parsed per chunk (about 250 records of ours): memory stays flat."""


def _open_records_file(path: Path) -> BinaryIO | None:
    """Open a JSONL file of records (a dump partition, a kcat capture) for both readers.

    None when it is absent (no records there); any other failure to open it is unreadable input.
    """
    try:
        return path.open("rb")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableInput(f"cannot read {path}: {exc.strerror}") from exc


def _read_dump_rows(path: Path, with_headers: bool, torn: list[TornLine]) -> Iterator[list[Row]]:
    """Rows of a dump file in chunks; exactly ``_read_jsonl``'s records, torn lines and errors."""
    handle = _open_records_file(path)
    if handle is None:
        return
    parse = facts.current().parse_dump_block
    with handle:
        seekable = handle.seekable()
        size = _CHUNK_BYTES
        before = 0  # lines parsed before this block
        carry = b""  # the start of a line (when the file cannot seek back to it)
        while True:
            data = handle.read(size)
            eof = len(data) < size  # a buffered read returns less only at the end of the file
            block = carry + data if carry else data
            if not block:
                return
            rows, count, end, bad = parse(block, with_headers, eof)
            if rows:
                yield rows
            if bad is not None:
                index, line = bad
                # Only the last line of a file can lack its newline: a torn copy.
                # A bad line followed by more lines (or ending in one) is corruption.
                if not line.endswith(b"\n"):
                    torn.append(TornLine(str(path), before + index + 1))
                    return
                raise UnreadableInput(f"{path}:{before + index + 1} is not a valid record line")
            if eof:
                return
            before += count
            if count == 0:
                size *= 2  # a line longer than the block
            if seekable:
                handle.seek(end - len(block), 1)
                carry = b""
            else:
                carry = block[end:]


# ---------------------------------------------------------------------------
# kcat -C -J dumps
# ---------------------------------------------------------------------------


@dataclass
class KcatSource:
    """JSON lines printed by ``kcat -C -J`` (one file per topic, or one file for all).

    kcat writes keys and payloads into JSON strings byte for byte: control
    bytes as ``\\u00XX`` escapes, every other byte raw, including bytes that
    are not valid UTF-8. Lines are therefore read as UTF-8 with
    ``surrogateescape`` and strings re-encoded the same way, which gives back
    the exact stored bytes (see ``decode_kcat_bytes``).
    """

    files: list[Path]
    prefix: str
    torn_lines: list[TornLine] = field(default_factory=list)

    def describe(self) -> str:
        return "kcat dump " + ", ".join(str(p) for p in self.files)

    def _stream_of(self, topic: str) -> str | None:
        mapping = {
            f"{self.prefix}.activity.journal": "journal",
            f"{self.prefix}.activity.refusals": "refusals",
            f"{self.prefix}.audit": "audit",
            f"{self.prefix}.activity.deadletter": "deadletter",
        }
        return mapping.get(topic)

    def _all(self) -> Iterator[StoredRecord]:
        for path in self.files:
            yield from _read_jsonl(path, "", self._parse, self.torn_lines, loads=_kcat_loads)

    def _parse(self, _stream: str, item: dict[str, Any]) -> StoredRecord:
        stream = self._stream_of(item["topic"]) or ""
        return StoredRecord(
            stream=stream,
            topic=item["topic"],
            partition=int(item["partition"]),
            offset=int(item["offset"]),
            timestamp_ms=int(item.get("ts") or 0),
            key=decode_kcat_bytes(item.get("key")),
            value=decode_kcat_bytes(item.get("payload")),
            headers=tuple(_kcat_headers(item.get("headers"))),
        )

    def partitions(self, stream: str) -> list[int]:
        return sorted({r.partition for r in self._all() if r.stream == stream})

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        last = -1
        for record in self._all():
            if record.stream == stream and record.partition == partition:
                if record.offset <= last:
                    raise UnreadableInput(
                        f"kcat dump lists {record.topic}[{partition}] offsets out of order ({record.offset} after {last}); "
                        "export each topic with one kcat -C -J invocation"
                    )
                last = record.offset
                yield record


def decode_kcat_bytes(value: Any) -> bytes | None:
    """Bytes of a kcat -J key or payload (a string parsed by ``_kcat_loads``).

    Characters decoded from valid UTF-8 re-encode to the same bytes, raw
    invalid bytes come back from their surrogate escapes, and ``\\u00XX``
    escapes of control bytes encode to that single byte. ``None`` (JSON null)
    means no key or no payload.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise UnreadableInput(f"kcat field is not a string: {value!r}")
    return value.encode("utf-8", "surrogateescape")


def _kcat_headers(value: Any) -> Iterator[tuple[str, bytes]]:
    if not value:
        return
    if isinstance(value, list):
        # kcat -J prints headers as a flat list: [k1, v1, k2, v2, ...]
        for i in range(0, len(value) - 1, 2):
            v = value[i + 1]
            yield str(value[i]), b"" if v is None else str(v).encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------
# shared JSONL reader
# ---------------------------------------------------------------------------


def _kcat_loads(line: bytes) -> Any:
    return json.loads(line.decode("utf-8", "surrogateescape"))


def _read_jsonl(path: Path, stream: str, parse: Any, torn: list[TornLine], loads: Any = orjson.loads) -> Iterator[StoredRecord]:
    handle = _open_records_file(path)
    if handle is None:
        return
    with handle:
        pending: tuple[int, bytes] | None = None
        for number, line in enumerate(handle, start=1):
            if pending is not None:
                # A bad line followed by more lines is corruption, not truncation.
                raise UnreadableInput(f"{path}:{pending[0]} is not a valid record line")
            if not line.strip():
                continue
            try:
                item = loads(line)
                if not isinstance(item, dict):
                    raise ValueError("not an object")
                record = parse(stream, item)
            except (ValueError, KeyError, TypeError, binascii.Error):
                if not line.endswith(b"\n"):
                    torn.append(TornLine(str(path), number))
                    return
                pending = (number, line)
                continue
            yield record
        if pending is not None:
            if pending[0] >= 1 and not pending[1].endswith(b"\n"):
                torn.append(TornLine(str(path), pending[0]))
                return
            raise UnreadableInput(f"{path}:{pending[0]} is not a valid record line")
