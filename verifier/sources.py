"""Where the verifier reads topic records from: a live cluster, our dump, or a kcat dump.

All sources yield ``StoredRecord`` in offset order per (stream, partition) and
stream lazily, so memory stays flat however long a topic is.

A dump or capture is read as hostile input: it can neither hang nor exhaust
the verifier.

- Every file (``manifest.json``, each ``topics/<stream>/<partition>.jsonl``, a
  kcat capture) is opened without following a symbolic link and without
  blocking, and read only when it is a regular file: a symlink (to
  ``/dev/zero``, say), FIFO, socket or device is refused before any read
  (``UnsafeInputFile``, naming the path). ``topics/`` and its stream folders
  must be real directories.
- No line is read past ``MAX_LINE_BYTES``: more than any record can take
  (see there), so a longer line is damage, and the rest of its file is not
  read.
- Partition files are named in canonical decimal (``0.jsonl``, ``12.jsonl``;
  ``01``, ``-0``, ``+1``, ``1_0`` are refused), within Kafka's int32 range.
- A kcat capture is parsed once into a per-(stream, partition) index of line
  positions: a capture spread over N partitions costs O(N) parses, not O(N²).
- The blobs of a dump's ``cas/`` are read the same way (``bernstein.substrate.cas``:
  regular files only, at most ``MAX_BLOB_BYTES``, hashed in a stream).

**Damage to a dump is a verdict; a dump that is not one is unusable input.**
A dump file holds one line per record, as ``bernstein topic export`` wrote
it. When a line in it is garbled, cut short, longer than any record, in the
wrong file, or out of offset order, the records of the file are still there to
check, and what happened to the file is evidence: a ``DumpProblem`` is
recorded (``dump_problems``) and reading goes on past it (a garbled line is
skipped; a misplaced or out-of-order record is still handed on, so the chain
checks name what it breaks). The verifier reports each one as a problem of
the run (its report's ``dump_problems``), so the run does not verify (exit
2); a kcat capture is judged the same way. (Until ``DAMAGE_IS_A_VERDICT`` is
switched on together with that report, the kinds that used to stop the read
still raise: see there.) Codes:

- ``DUMP_TRUNCATED``: the last line of a file is torn (no newline, not a
  record): the copy was cut short. Records before it are read.
- ``DUMP_LINE_CORRUPTED``: a line that ends in a newline is not a record line
  (not JSON, not an object, a field missing or of the wrong type, bad
  base64). It is skipped and the lines after it are read.
- ``DUMP_LINE_TOO_LONG``: a line longer than ``MAX_LINE_BYTES``; the rest of
  the file is not read (finding the next line would mean reading without
  bound).
- ``DUMP_RECORD_MISPLACED``: a record line whose ``topic`` or ``partition`` is
  not the file's (``topics/<stream>/<partition>.jsonl``; every topic of a dump
  shares one prefix). The record is still read.
- ``DUMP_OFFSET_ORDER``: a record whose offset is not above the one before it
  in its partition (a duplicated or moved line). The record is still read.

After ``MAX_FILE_PROBLEMS`` problems in one file the rest of it is not read.

Everything else that stops a dump from being read at all is unusable input
(``UnreadableInput``, exit 3), because then there is no record to judge: the
path does not exist or is not a directory; no ``manifest.json`` or one that is
not a ``bernstein.dump/v1`` manifest; a file that is a symlink, FIFO, device
or socket (``UnsafeInputFile``); a ``.jsonl`` whose name is not a partition
number; a file the operating system will not let us read.

The records and the damage every source hands on (``StoredRecord``, ``DumpProblem``, the errors) are
``bernstein.verifier.source_records``, and the kcat source is ``bernstein.verifier.kcat_source``; this
module reads our dump and holds the bounded line reader both use, and hands on the others' names
(the kcat source's on first use, as it builds on this module).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final

import orjson

from bernstein.substrate.cas import NotRegularFile, file_kind, open_regular
from bernstein.substrate.kafka import RETAIN_FOREVER
from bernstein.verifier import facts
from bernstein.verifier.facts import Row
from bernstein.verifier.source_records import (
    _TOPIC_SUFFIX,
    STREAMS,
    DumpDamaged,
    DumpProblem,
    RecordSource,
    StoredRecord,
    TornLine,
    UnreadableInput,
    UnsafeInputFile,
    _ProblemLog,
)

if TYPE_CHECKING:
    from bernstein.verifier.kcat_source import KcatSource, decode_kcat_bytes

__all__ = [
    "DAMAGE_IS_A_VERDICT",
    "DUMP_FORMAT",
    "MAX_FILE_PROBLEMS",
    "MAX_LINE_BYTES",
    "MAX_MANIFEST_BYTES",
    "MAX_MESSAGE_BYTES",
    "STREAMS",
    "DumpDamaged",
    "DumpProblem",
    "DumpSource",
    "KcatSource",
    "RecordSource",
    "StoredRecord",
    "TornLine",
    "UnreadableInput",
    "UnsafeInputFile",
    "decode_kcat_bytes",
    "encode_dump_line",
]

DUMP_FORMAT: Final = "bernstein.dump/v1"

MAX_MESSAGE_BYTES: Final = int(RETAIN_FOREVER["max.message.bytes"])
"""The largest record our topics hold (2 MiB): key, value and headers together."""

MAX_LINE_BYTES: Final = 6 * MAX_MESSAGE_BYTES + 64 * 1024
"""The longest line (without its newline) a dump or kcat capture of a record can have: 12 MiB + 64 KiB.

A record's key, value and header bytes are at most ``MAX_MESSAGE_BYTES``
together. A line spends at most 6 bytes on each of them: a control byte
(kcat key or payload; a header name in our dump) is a 6-byte ``\\u00XX``
escape, base64 spends 4 bytes on 3, and an empty header costs 8 bytes of
``["",""],`` for its 2 bytes of lengths. The fields besides (topic name of at
most 249 characters, numbers, field names) take far less than 64 KiB.
"""

MAX_MANIFEST_BYTES: Final = 64 * 1024 * 1024
"""The largest ``manifest.json`` read (it names files and runs; ours are a few KiB)."""

DAMAGE_IS_A_VERDICT: Final = True
"""Whether every damage is recorded in ``dump_problems`` (True), or the kinds that used to stop the read still raise.

A switch for the hand-over only: a consumer that does not report
``dump_problems`` would skip a garbled line in silence and could pass a
tampered dump. So while it is False, a garbled line, a line too long and a
kcat offset out of order raise ``DumpDamaged`` (unusable input, exit 3, as a
garbled line and kcat order did before); a torn last line, a misplaced
record and a dump's offset order (which nothing checked before) are
recorded. Set it to True together with the ``verifier/verify.py`` change
that turns every ``DumpProblem`` into a problem of the run.
"""

MAX_FILE_PROBLEMS: Final = 100
"""Problems recorded per file; the rest of a file this damaged is not read."""

_PARTITION_FILE: Final = re.compile(r"(0|[1-9][0-9]{0,9})\.jsonl")
_MAX_PARTITION: Final = 2**31 - 1


class _FileReading:
    """One pass over one file: its problems (at most ``MAX_FILE_PROBLEMS``) and the offset order per partition."""

    def __init__(
        self, log: _ProblemLog, path: Path, stream: str = "", partition: int | None = None, *, capture: bool = False
    ) -> None:
        self.log = log
        self.path = str(path)
        self.stream = stream
        self.partition = partition
        self.capture = capture
        """A kcat capture: one offset order per (stream, partition) its lines name, not one per file."""
        self.count = 0
        self.last: dict[tuple[str, int], int] = {}
        self.stop = False
        """True once the file has had its share of problems, or a line too long: read no further."""

    def stopped(self) -> bool:
        return self.stop

    def add(self, code: str, line: int, message: str, *, stream: str = "", offset: int | None = None) -> None:
        self.count += 1
        if self.count >= MAX_FILE_PROBLEMS:
            message += f"; {MAX_FILE_PROBLEMS} problems in this file, the rest of it is not read"
            self.stop = True
        location = stream if offset is not None and stream in ("journal", "audit", "refusals") else ""
        problem = DumpProblem(code, message, self.path, line, location, offset if location else None)
        if not DAMAGE_IS_A_VERDICT and (
            code in ("DUMP_LINE_CORRUPTED", "DUMP_LINE_TOO_LONG") or (code == "DUMP_OFFSET_ORDER" and self.capture)
        ):
            raise DumpDamaged(problem)  # what was unusable input before dump problems existed stays so until then
        self.log.add(problem)

    def torn(self, line: int) -> None:
        self.add("DUMP_TRUNCATED", line, f"{self.path} ends in a torn line at line {line}: the dump file was truncated")

    def corrupted(self, line: int) -> None:
        self.add("DUMP_LINE_CORRUPTED", line, f"{self.path}:{line} is not a valid record line (a line of the file was altered)")

    def too_long(self, line: int) -> None:
        self.add(
            "DUMP_LINE_TOO_LONG",
            line,
            f"{self.path}:{line} is longer than {MAX_LINE_BYTES} bytes, more than any record takes; "
            "the rest of the file is not read",
        )
        self.stop = True

    @property
    def order_key(self) -> tuple[str, int]:
        """Whose offsets must rise: the file's, in a dump (whatever its lines claim)."""
        return (self.stream, -1 if self.partition is None else self.partition)

    def record(self, line: int, stream: str, topic: Any, partition: int, offset: int) -> None:
        """Check one record line: its topic and partition against the file's, its offset against the one before.

        A dump file keeps one offset order; a kcat capture one per (stream,
        partition) its lines name.
        """
        why = self.log.topic_problem(stream, topic)
        if not why and self.partition is not None and partition != self.partition:
            why = f"partition {partition} is not the file's partition {self.partition}"
        if why:
            self.add(
                "DUMP_RECORD_MISPLACED",
                line,
                f"{self.path}:{line} holds a record of {topic}[{partition}] at offset {offset}, which does not belong in it: {why}",
                stream=stream,
                offset=offset,
            )
        order = (stream, partition) if self.capture else self.order_key
        last = self.last.get(order)
        if last is not None and offset <= last:
            kind = "repeats" if offset == last else "goes back from"
            self.add(
                "DUMP_OFFSET_ORDER",
                line,
                f"{self.path}:{line}: offset {offset} of {topic}[{partition}] {kind} offset {last} before it "
                "(a record duplicated or moved)",
                stream=stream,
                offset=offset,
            )
        self.last[order] = offset


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
        self._log = _ProblemLog(self.torn_lines)
        manifest_path = self.root / "manifest.json"
        if not self.root.is_dir():
            raise UnreadableInput(
                f"{self.root} is not a directory; pass a dump made by `bernstein topic export` or a kcat -J file"
            )
        handle = _open_records_file(manifest_path)
        if handle is None:
            raise UnreadableInput(f"{self.root} has no manifest.json; it is not a dump made by `bernstein topic export`")
        try:
            with handle:
                text = handle.read(MAX_MANIFEST_BYTES + 1)
            if len(text) > MAX_MANIFEST_BYTES:
                raise UnreadableInput(f"{manifest_path} is larger than {MAX_MANIFEST_BYTES} bytes; it is not a dump manifest")
            self.manifest: dict[str, Any] = json.loads(text.decode("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UnreadableInput(f"{manifest_path} is unreadable: {exc}") from exc
        except RecursionError:
            raise UnreadableInput(f"{manifest_path} is nested too deeply to be a dump manifest") from None
        if not isinstance(self.manifest, dict) or self.manifest.get("format") != DUMP_FORMAT:
            raise UnreadableInput(f"{manifest_path} is not a {DUMP_FORMAT} manifest")

    def describe(self) -> str:
        return f"dump {self.root}"

    @property
    def exported_runs(self) -> frozenset[str] | None:
        """The runs the dump was exported for (``topic export --run``), None for whole partitions."""
        runs = self.manifest.get("runs")
        if isinstance(runs, list) and all(isinstance(run, str) for run in runs):
            return frozenset(runs)
        return None

    @property
    def cas_dir(self) -> Path:
        return self.root / "cas"

    @property
    def dump_problems(self) -> list[DumpProblem]:
        """Damage found so far in the files read (a verdict on the data; see the module docstring)."""
        return self._log.problems()

    def log_start(self, stream: str, partition: int) -> int:
        """Where the partition's log started on the cluster at export (``manifest.json`` ``log_start``, written for
        the input partitions of the exported audit chains); 0 when the manifest does not say (or says nonsense)."""
        starts = self.manifest.get("log_start")
        by_partition = starts.get(stream) if isinstance(starts, dict) else None
        found = by_partition.get(str(partition)) if isinstance(by_partition, dict) else None
        return found if isinstance(found, int) and not isinstance(found, bool) and found >= 0 else 0

    def partitions(self, stream: str) -> list[int]:
        topics = self.root / "topics"
        directory = topics / stream
        if not _real_directory(topics) or not _real_directory(directory):
            return []
        found = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.name.endswith(".jsonl"):
                    continue
                match = _PARTITION_FILE.fullmatch(entry.name)
                if match is None or int(match.group(1)) > _MAX_PARTITION:
                    raise UnreadableInput(
                        f"unexpected file {directory / entry.name} in dump (expected <partition>.jsonl, "
                        "the partition in decimal without sign or leading zeros)"
                    )
                found.append(int(match.group(1)))
        return sorted(found)

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        for rows in self.row_chunks(stream, partition, headers=headers):
            for offset, timestamp, key, value, topic, part, header_items in rows:
                yield StoredRecord(stream, topic, part, offset, timestamp, key, value, header_items)

    def row_chunks(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[list[Row]]:
        """``records`` as lists of rows ``(offset, timestamp, key, value, topic, partition, headers)``.

        Same records, same torn-line and damaged-line handling, parsed a
        chunk of lines at a time (``bernstein.verifier.facts``); a chunk is never empty.
        """
        topics = self.root / "topics"
        directory = topics / stream
        if not _real_directory(topics) or not _real_directory(directory):
            return iter(())
        path = directory / f"{partition}.jsonl"
        return _read_dump_rows(path, headers, _FileReading(self._log, path, stream, partition))


def _real_directory(path: Path) -> bool:
    """True for a directory, False when absent; a symlink or anything else there is unsafe input."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UnreadableInput(f"cannot read {path}: {exc.strerror}") from exc
    if stat.S_ISDIR(mode):
        return True
    raise UnsafeInputFile(path, file_kind(mode), "a directory")


_CHUNK_BYTES: Final = 1 << 18
"""Bytes read and parsed per chunk (about 250 records of ours): memory stays flat."""


def _open_records_file(path: Path) -> BinaryIO | None:
    """Open a file of a dump (a partition, the manifest) or a kcat capture, only if it is a regular file.

    None when it is absent (no records there); a symlink, FIFO, socket, device
    or directory is ``UnsafeInputFile`` (refused before any read, and without
    blocking); any other failure to open it is unreadable input.
    """
    try:
        fd, _ = open_regular(path)
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise UnsafeInputFile(path, exc.kind) from None
    except OSError as exc:
        raise UnreadableInput(f"cannot read {path}: {exc.strerror}") from exc
    return os.fdopen(fd, "rb")


def _read_dump_rows(path: Path, with_headers: bool, reading: _FileReading) -> Iterator[list[Row]]:
    """Rows of a dump file in chunks; exactly ``_read_jsonl``'s records and problems.

    Memory is bounded by ``MAX_LINE_BYTES``: a block grows (from
    ``_CHUNK_BYTES``) only while it holds no whole line, and a block of
    ``MAX_LINE_BYTES + 1`` bytes without a newline is a line too long.
    """
    handle = _open_records_file(path)
    if handle is None:
        return
    parse = facts.current().parse_dump_block
    with handle:
        size = _CHUNK_BYTES
        before = 0  # lines parsed before this block
        start = 0  # file position of this block
        while True:
            handle.seek(start)
            block = handle.read(size)
            eof = len(block) < size  # a buffered read returns less only at the end of the file
            if not block:
                return
            rows, count, end, bad = parse(block, with_headers, eof)
            if rows:
                rows = _check_rows(rows, block, eof, before, reading)
                yield rows
                if reading.stopped():
                    return
            if bad is not None:
                index, line = bad
                # Only the last line of a file can lack its newline: a torn copy.
                # A bad line followed by more lines (or ending in one) is a damaged line: skipped.
                if not line.endswith(b"\n"):
                    reading.torn(before + index + 1)
                    return
                reading.corrupted(before + index + 1)
                if reading.stopped():
                    return
                start += _line_end(block, index)
                before += index + 1
                size = _CHUNK_BYTES
                continue
            if eof:
                return
            if count == 0:  # no whole line in the block
                if len(block) > MAX_LINE_BYTES:
                    reading.too_long(before + 1)
                    return
                size = min(size * 2, MAX_LINE_BYTES + 1)
                continue
            before += count
            start += end


def _line_end(block: bytes, index: int) -> int:
    """Where line ``index`` (0-based) of ``block`` ends, after its newline."""
    position = 0
    for _ in range(index + 1):
        position = block.index(b"\n", position) + 1
    return position


def _check_rows(rows: list[Row], block: bytes, eof: bool, before: int, reading: _FileReading) -> list[Row]:
    """Each row's topic, partition and offset order (``_FileReading.record``); line numbers only on a problem.

    The rows to hand on: all of them, or those up to the one that used up the file's problems.
    """
    stream, partition, order = reading.stream, reading.partition, reading.order_key
    last = reading.last.get(order, -1)
    expected = None if reading.log.prefix is None else reading.log.prefix + _TOPIC_SUFFIX.get(stream, "")
    for row in rows:
        if row[0] <= last or row[4] != expected or row[5] != partition:
            break
        last = row[0]
    else:  # the common case: all in order and in place
        reading.last[order] = last
        return rows
    lines = facts.split_lines(block, eof)[0]
    numbers = [before + i + 1 for i, line in enumerate(lines) if line.strip()]
    for kept, (number, row) in enumerate(zip(numbers, rows, strict=False), start=1):
        reading.record(number, stream, row[4], row[5], row[0])
        if reading.stopped():
            return rows[:kept]
    return rows


# ---------------------------------------------------------------------------
# shared JSONL reader
# ---------------------------------------------------------------------------


def _bounded_lines(handle: BinaryIO) -> Iterator[tuple[int, int, bytes | None]]:
    """(1-based number, position, line) of each line of a file, as iterating it gives them, but bounded.

    A line (without its newline) longer than ``MAX_LINE_BYTES`` comes as None
    and ends the iteration: it is never held whole.
    """
    position = 0
    number = 0
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            yield number, position, None
            return
        yield number, position, line
        position += len(line)


def _scan_jsonl(
    path: Path, stream: str, parse: Callable[[str, dict[str, Any]], StoredRecord], reading: _FileReading, loads: Any
) -> Iterator[tuple[int, int, StoredRecord]]:
    """(position, length, record) of each record line of a file, one line at a time; damage goes to ``reading``."""
    handle = _open_records_file(path)
    if handle is None:
        return
    with handle:
        for number, position, line in _bounded_lines(handle):
            if line is None:
                reading.too_long(number)
                return
            if not line.strip():
                continue
            try:
                item = loads(line)
                if not isinstance(item, dict):
                    raise ValueError("not an object")
                record = parse(stream, item)
            except (ValueError, KeyError, TypeError, binascii.Error, UnreadableInput, RecursionError):
                # Only the last line of a file can lack its newline: a torn copy.
                if not line.endswith(b"\n"):
                    reading.torn(number)
                    return
                reading.corrupted(number)  # a damaged line: skipped
                if reading.stopped():
                    return
                continue
            if record.stream:
                reading.record(number, record.stream, record.topic, record.partition, record.offset)
            yield position, len(line), record
            if reading.stopped():
                return


def _read_jsonl(
    path: Path,
    stream: str,
    parse: Callable[[str, dict[str, Any]], StoredRecord],
    torn: list[TornLine],
    loads: Any = orjson.loads,
    *,
    reading: _FileReading | None = None,
) -> Iterator[StoredRecord]:
    """The records of a JSONL file one line at a time: the reference for ``_read_dump_rows``.

    Torn last lines go to ``torn``; every problem to ``reading`` (by default
    one of its own, for a file of ``stream``).
    """
    if reading is None:
        reading = _FileReading(_ProblemLog(torn), path, stream)
    for _, _, record in _scan_jsonl(path, stream, parse, reading, loads):
        yield record


def __getattr__(name: str) -> Any:
    # The kcat source reads through the reader above, so its names are imported from it on first use (not a cycle).
    if name in ("KcatSource", "decode_kcat_bytes"):
        from bernstein.verifier import kcat_source

        return getattr(kcat_source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
