"""The kcat source: reading ``kcat -C -J`` captures of our topics, as hostile input.

It reads through the bounded line reader and the per-file damage record of
``bernstein.verifier.sources`` (see its docstring for the rules), which re-exports ``KcatSource``.
"""

from __future__ import annotations

import binascii
import json
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from bernstein.verifier.source_records import DumpProblem, StoredRecord, TornLine, UnreadableInput, _ProblemLog
from bernstein.verifier.sources import _MAX_PARTITION, _FileReading, _open_records_file, _scan_jsonl

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

    The files are parsed once, on first use, into an index of where each
    (stream, partition)'s lines are; ``records`` then reads and parses only
    that partition's lines. Offsets must rise within each (stream,
    partition) across the files in the order given: export each topic with
    one ``kcat -C -J`` invocation. Damage is recorded as for a dump
    (``dump_problems``).
    """

    files: list[Path]
    prefix: str
    torn_lines: list[TornLine] = field(default_factory=list)
    _log: _ProblemLog = field(init=False, repr=False)
    _index: dict[tuple[str, int], _Spans] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._log = _ProblemLog(self.torn_lines)

    def describe(self) -> str:
        return "kcat dump " + ", ".join(str(p) for p in self.files)

    @property
    def dump_problems(self) -> list[DumpProblem]:
        """Damage found in the capture files (after the first ``partitions`` or ``records`` call)."""
        return self._log.problems()

    def _stream_of(self, topic: str) -> str | None:
        mapping = {
            f"{self.prefix}.activity.journal": "journal",
            f"{self.prefix}.activity.refusals": "refusals",
            f"{self.prefix}.audit": "audit",
            f"{self.prefix}.activity.deadletter": "deadletter",
            f"{self.prefix}.checkpoints": "checkpoints",
        }
        return mapping.get(topic)

    def _parse(self, _stream: str, item: dict[str, Any]) -> StoredRecord:
        stream = self._stream_of(item["topic"]) or ""
        return StoredRecord(
            stream=stream,
            topic=item["topic"],
            partition=_bounded(item["partition"], _MAX_PARTITION, "partition"),
            offset=_bounded(item["offset"], _MAX_OFFSET, "offset"),
            timestamp_ms=_bounded(item.get("ts") or 0, _MAX_OFFSET, "ts"),
            key=decode_kcat_bytes(item.get("key")),
            value=decode_kcat_bytes(item.get("payload")),
            headers=tuple(_kcat_headers(item.get("headers"))),
        )

    def _indexed(self) -> dict[tuple[str, int], _Spans]:
        """(stream, partition) -> where its lines are; built by one pass over the files."""
        if self._index is None:
            index: dict[tuple[str, int], _Spans] = {}
            last: dict[tuple[str, int], int] = {}
            for number, path in enumerate(self.files):
                reading = _FileReading(self._log, path, capture=True)
                reading.last = last  # offsets rise per (stream, partition) across the files
                for position, length, record in _scan_jsonl(path, "", self._parse, reading, _kcat_loads):
                    if record.stream:
                        spans = index.get((record.stream, record.partition))
                        if spans is None:
                            spans = index[(record.stream, record.partition)] = _Spans()
                        spans.add(number, position, length)
            self._index = index
        return self._index

    def partitions(self, stream: str) -> list[int]:
        return sorted(partition for s, partition in self._indexed() if s == stream)

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        spans = self._indexed().get((stream, partition))
        if spans is None:
            return
        handles: dict[int, BinaryIO] = {}
        try:
            for number, position, length in spans:
                handle = handles.get(number)
                if handle is None:
                    handle = _open_records_file(self.files[number])
                    if handle is None:
                        raise UnreadableInput(f"{self.files[number]} disappeared while it was read")
                    handles[number] = handle
                handle.seek(position)
                line = handle.read(length)
                try:
                    record = self._parse("", _kcat_loads(line))
                except (ValueError, KeyError, TypeError, binascii.Error, UnreadableInput, RecursionError):
                    raise UnreadableInput(f"{self.files[number]} changed while it was read") from None
                yield record
        finally:
            for handle in handles.values():
                handle.close()


class _Spans:
    """Where one partition's lines are: (file number, position, length) each, in compact arrays."""

    __slots__ = ("files", "lengths", "positions")

    def __init__(self) -> None:
        self.files = array("i")
        self.positions = array("q")
        self.lengths = array("q")

    def add(self, file: int, position: int, length: int) -> None:
        self.files.append(file)
        self.positions.append(position)
        self.lengths.append(length)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        return zip(self.files, self.positions, self.lengths, strict=True)


_MAX_OFFSET: Final = 2**63 - 1
"""Kafka's offsets and timestamps are int64."""


def _bounded(value: Any, most: int, name: str) -> int:
    """A kcat line's integer field within Kafka's range (a damaged line otherwise, never an OverflowError later)."""
    try:
        number = int(value)
    except (OverflowError, ValueError, TypeError) as exc:  # inf, nan, "1e400", a list
        raise ValueError(f"{name} {value!r} is not an integer") from exc
    if not 0 <= number <= most:
        raise ValueError(f"{name} {number} is outside 0..{most}")
    return number


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


def _kcat_loads(line: bytes) -> Any:
    return json.loads(line.decode("utf-8", "surrogateescape"))
