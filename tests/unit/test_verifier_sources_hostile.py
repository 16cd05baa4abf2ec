"""A hostile dump or kcat capture can neither hang nor exhaust the verifier, and its damage is a verdict.

Review findings M13 (symlinks, FIFOs, unbounded lines, a capture read once per
partition), L11 (partition file names, lines in the wrong file, offset order in
a dump) and L6 (a garbled line or a repeated offset is tampering, not unusable
input). See ``verifier/sources.py``'s module docstring for the rules.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import bernstein.verifier.kcat_source as kcat_source
import bernstein.verifier.sources as sources
from bernstein.verifier import facts
from bernstein.verifier.facts import NATIVE, PYTHON, Facts
from bernstein.verifier.sources import (
    DUMP_FORMAT,
    MAX_FILE_PROBLEMS,
    MAX_LINE_BYTES,
    MAX_MESSAGE_BYTES,
    DumpDamaged,
    DumpProblem,
    DumpSource,
    KcatSource,
    StoredRecord,
    TornLine,
    UnreadableInput,
    UnsafeInputFile,
    encode_dump_line,
)

PREFIX = "bernstein"
JOURNAL = f"{PREFIX}.activity.journal"


@pytest.fixture(autouse=True)
def damage_is_a_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    """The behaviour once verify.py reports ``dump_problems`` (see ``DAMAGE_IS_A_VERDICT``)."""
    monkeypatch.setattr(sources, "DAMAGE_IS_A_VERDICT", True)


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """Fail (instead of hanging the suite) if anything blocks for 10 s: a FIFO opened for reading would."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("blocked: the reader waited on a FIFO or read without end")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def record(offset: int, *, partition: int = 0, topic: str = JOURNAL, key: bytes = b"run-a") -> StoredRecord:
    return StoredRecord("journal", topic, partition, offset, 1000 + offset, key, b"value %d" % offset, (("h", b"v"),))


def line(offset: int, **kwargs: Any) -> bytes:
    return encode_dump_line(record(offset, **kwargs))


def make_dump(root: Path, files: dict[str, bytes] | None = None) -> Path:
    (root / "topics" / "journal").mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"format": DUMP_FORMAT}))
    for name, data in (files or {}).items():
        (root / "topics" / "journal" / name).write_bytes(data)
    return root


def read_all(source: DumpSource | KcatSource, partition: int = 0) -> list[int]:
    return [r.offset for r in source.records("journal", partition)]


def native() -> Facts:
    assert NATIVE is not None, "bernstein_native is not built (`uv sync`)"
    return NATIVE


# ---------------------------------------------------------------------------
# symlinks, FIFOs, devices: refused before any read
# ---------------------------------------------------------------------------


def test_a_partition_file_that_is_a_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    dump = make_dump(tmp_path / "dump")
    path = dump / "topics" / "journal" / "0.jsonl"
    path.symlink_to("/dev/zero")
    source = DumpSource(dump)
    assert source.partitions("journal") == [0]
    with pytest.raises(UnsafeInputFile) as info:
        read_all(source)
    assert (info.value.path, info.value.kind, info.value.code) == (path, "a symbolic link", "E_UNSAFE_INPUT_FILE")
    assert str(info.value) == f"{path} is a symbolic link, not a regular file; the verifier does not follow or read it"
    assert isinstance(info.value, UnreadableInput)  # unusable input: exit 3, never a pass


def test_a_symlink_to_a_good_file_is_refused_too(tmp_path: Path) -> None:
    dump = make_dump(tmp_path / "dump")
    (tmp_path / "elsewhere.jsonl").write_bytes(line(0))
    (dump / "topics" / "journal" / "0.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(UnsafeInputFile, match="a symbolic link"):
        read_all(DumpSource(dump))


def test_a_partition_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    dump = make_dump(tmp_path / "dump")
    path = dump / "topics" / "journal" / "0.jsonl"
    os.mkfifo(path)  # no writer ever comes: a blocking open would wait forever
    with pytest.raises(UnsafeInputFile) as info:
        read_all(DumpSource(dump))
    assert (info.value.path, info.value.kind) == (path, "a FIFO")
    with pytest.raises(UnsafeInputFile, match="a FIFO"):
        list(DumpSource(dump).row_chunks("journal", 0))


def test_a_partition_file_that_is_a_directory_or_device_is_refused(tmp_path: Path) -> None:
    dump = make_dump(tmp_path / "dump")
    path = dump / "topics" / "journal" / "0.jsonl"
    path.mkdir()
    with pytest.raises(UnsafeInputFile, match="is a directory, not a regular file"):
        read_all(DumpSource(dump))
    with pytest.raises(UnsafeInputFile, match="a character device"):
        list(sources._read_jsonl(Path("/dev/null"), "journal", lambda s, i: record(0), []))


def test_a_manifest_that_is_a_symlink_or_fifo_is_refused(tmp_path: Path) -> None:
    dump = make_dump(tmp_path / "dump")
    manifest = dump / "manifest.json"
    manifest.unlink()
    manifest.symlink_to("/dev/zero")
    with pytest.raises(UnsafeInputFile) as info:
        DumpSource(dump)
    assert (info.value.path, info.value.kind) == (manifest, "a symbolic link")
    manifest.unlink()
    os.mkfifo(manifest)
    with pytest.raises(UnsafeInputFile, match="a FIFO"):
        DumpSource(dump)


def test_a_huge_manifest_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = make_dump(tmp_path / "dump")
    monkeypatch.setattr(sources, "MAX_MANIFEST_BYTES", 100)
    (dump / "manifest.json").write_text(json.dumps({"format": DUMP_FORMAT, "pad": "x" * 100}))
    with pytest.raises(UnreadableInput, match=r"manifest.json is larger than 100 bytes"):
        DumpSource(dump)


def test_a_symlinked_stream_or_topics_folder_is_refused(tmp_path: Path) -> None:
    dump = make_dump(tmp_path / "dump")
    stream = dump / "topics" / "journal"
    stream.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0.jsonl").write_bytes(line(0))
    stream.symlink_to(elsewhere)
    for read in (lambda s: s.partitions("journal"), read_all):
        with pytest.raises(UnsafeInputFile) as info:
            read(DumpSource(dump))
        assert str(info.value) == f"{stream} is a symbolic link, not a directory; the verifier does not follow or read it"
    stream.unlink()
    stream.write_bytes(b"")
    with pytest.raises(UnsafeInputFile, match="is a regular file, not a directory"):
        DumpSource(dump).partitions("journal")
    assert DumpSource(dump).partitions("audit") == []  # an absent stream is just empty


def test_a_kcat_capture_that_is_a_fifo_or_symlink_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "journal.json"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeInputFile, match="a FIFO"):
        KcatSource([fifo], PREFIX).partitions("journal")
    link = tmp_path / "link.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(UnsafeInputFile, match="a symbolic link"):
        KcatSource([link], PREFIX).partitions("journal")


# ---------------------------------------------------------------------------
# bounded lines
# ---------------------------------------------------------------------------


def test_the_line_bound_covers_the_largest_record() -> None:
    assert MAX_MESSAGE_BYTES == 2 * 1024 * 1024
    assert MAX_LINE_BYTES == 12 * 1024 * 1024 + 64 * 1024
    # The worst record: 2 MiB of header names that are all control bytes, and a kcat payload of them.
    worst = encode_dump_line(
        StoredRecord("journal", "x" * 249, 2**31 - 1, 2**63 - 1, 2**63 - 1, None, None, (("\x01" * MAX_MESSAGE_BYTES, b""),))
    )
    assert len(worst) - 1 <= MAX_LINE_BYTES
    kcat = json.dumps({"topic": "x" * 249, "payload": "\x01" * MAX_MESSAGE_BYTES}).encode()
    assert len(kcat) <= MAX_LINE_BYTES
    base64_value = encode_dump_line(StoredRecord("journal", "x" * 249, 0, 0, 0, None, b"\xff" * MAX_MESSAGE_BYTES))
    assert len(base64_value) - 1 <= MAX_LINE_BYTES


@pytest.mark.parametrize("impl", ["python", "native"])
def test_a_huge_line_without_newline_is_a_problem_read_in_bounded_blocks(
    tmp_path: Path, impl: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = make_dump(tmp_path / "dump", {"0.jsonl": line(0) + line(1)})
    path = dump / "topics" / "journal" / "0.jsonl"
    with path.open("ab") as handle:  # then 64 MiB of zero bytes without a newline (sparse: no disk)
        handle.truncate(path.stat().st_size + (64 << 20))
    blocks: list[int] = []
    impl_facts = PYTHON if impl == "python" else native()
    parse = impl_facts.parse_dump_block

    def counting(block: bytes, with_headers: bool, eof: bool) -> Any:
        blocks.append(len(block))
        return parse(block, with_headers, eof)

    monkeypatch.setattr(impl_facts, "parse_dump_block", counting)
    with facts.use(impl_facts):
        source = DumpSource(dump)
        assert read_all(source) == [0, 1]
    assert max(blocks) == MAX_LINE_BYTES + 1  # never more than the bound (and one byte) at once
    assert sum(blocks) < 3 * MAX_LINE_BYTES  # and not the 64 MiB: the rest of the file is not read
    assert source.dump_problems == [
        DumpProblem(
            "DUMP_LINE_TOO_LONG",
            f"{path}:3 is longer than {MAX_LINE_BYTES} bytes, more than any record takes; the rest of the file is not read",
            str(path),
            3,
        )
    ]
    assert source.torn_lines == []


def test_a_huge_kcat_line_is_a_problem_and_the_line_reader_is_bounded(tmp_path: Path) -> None:
    capture = tmp_path / "journal.json"
    good = kcat_line(0, 0)
    capture.write_bytes(good)
    with capture.open("ab") as handle:
        handle.truncate(len(good) + (64 << 20))
    source = KcatSource([capture], PREFIX)
    assert source.partitions("journal") == [0]
    assert read_all(source) == [0]
    assert [(p.code, p.line) for p in source.dump_problems] == [("DUMP_LINE_TOO_LONG", 2)]


# ---------------------------------------------------------------------------
# partition file names (L11)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["01", "-0", "+1", "1_0", "00", " 1", "1 ", "", "0x1", "2147483648", "99999999999", "\u0661"])
def test_a_partition_file_name_must_be_canonical_decimal(tmp_path: Path, name: str) -> None:
    dump = make_dump(tmp_path / "dump", {"0.jsonl": line(0), f"{name}.jsonl": line(1)})
    with pytest.raises(UnreadableInput) as info:
        DumpSource(dump).partitions("journal")
    assert str(info.value) == (
        f"unexpected file {dump / 'topics' / 'journal' / f'{name}.jsonl'} in dump "
        "(expected <partition>.jsonl, the partition in decimal without sign or leading zeros)"
    )


def test_canonical_partition_names_are_read(tmp_path: Path) -> None:
    dump = make_dump(
        tmp_path / "dump",
        {"0.jsonl": line(0), "12.jsonl": line(0, partition=12), "2147483647.jsonl": line(0, partition=2147483647), "x.txt": b""},
    )
    source = DumpSource(dump)
    assert source.partitions("journal") == [0, 12, 2147483647]
    assert read_all(source, 12) == [0]
    assert source.dump_problems == []


# ---------------------------------------------------------------------------
# damaged lines are a verdict (L6, L11)
# ---------------------------------------------------------------------------


def dump_problems_of(tmp_path: Path, data: bytes, impl: Facts = PYTHON) -> tuple[list[int], list[DumpProblem], Path]:
    dump = make_dump(tmp_path / "dump", {"0.jsonl": data})
    with facts.use(impl):
        source = DumpSource(dump)
        offsets = read_all(source)
    return offsets, source.dump_problems, dump / "topics" / "journal" / "0.jsonl"


@pytest.mark.parametrize("impl", ["python", "native"])
def test_a_line_whose_partition_or_topic_disagrees_with_its_file_is_named(tmp_path: Path, impl: str) -> None:
    data = line(0) + line(1, partition=1) + line(2, topic=f"{PREFIX}.audit") + line(3)
    offsets, problems, path = dump_problems_of(tmp_path, data, PYTHON if impl == "python" else native())
    assert offsets == [0, 1, 2, 3]  # still handed on: the chain checks name what they break
    assert problems == [
        DumpProblem(
            "DUMP_RECORD_MISPLACED",
            f"{path}:2 holds a record of {JOURNAL}[1] at offset 1, which does not belong in it: "
            "partition 1 is not the file's partition 0",
            str(path),
            2,
            "journal",
            1,
        ),
        DumpProblem(
            "DUMP_RECORD_MISPLACED",
            f"{path}:3 holds a record of {PREFIX}.audit[0] at offset 2, which does not belong in it: "
            f"topic '{PREFIX}.audit' is not a journal topic (<prefix>.activity.journal)",
            str(path),
            3,
            "journal",
            2,
        ),
    ]


def test_every_topic_of_a_dump_shares_one_prefix(tmp_path: Path) -> None:
    dump = make_dump(tmp_path / "dump", {"0.jsonl": line(0)})
    (dump / "topics" / "audit").mkdir()
    audit = dump / "topics" / "audit" / "0.jsonl"
    audit.write_bytes(encode_dump_line(StoredRecord("audit", "other.audit", 0, 0, 0, b"k", b"v")))
    source = DumpSource(dump)
    read_all(source)
    assert [r.offset for r in source.records("audit", 0)] == [0]
    assert [(p.code, p.path, p.line, p.stream, p.offset) for p in source.dump_problems] == [
        ("DUMP_RECORD_MISPLACED", str(audit), 1, "audit", 0)
    ]
    assert "topic 'other.audit' is not 'bernstein.audit', the prefix of the rest of the dump" in source.dump_problems[0].message


@pytest.mark.parametrize("impl", ["python", "native"])
def test_repeated_and_reordered_offsets_in_a_dump_are_named(tmp_path: Path, impl: str) -> None:
    data = line(0) + line(1) + line(1) + line(3) + line(2) + line(4)
    offsets, problems, path = dump_problems_of(tmp_path, data, PYTHON if impl == "python" else native())
    assert offsets == [0, 1, 1, 3, 2, 4]
    assert problems == [
        DumpProblem(
            "DUMP_OFFSET_ORDER",
            f"{path}:3: offset 1 of {JOURNAL}[0] repeats offset 1 before it (a record duplicated or moved)",
            str(path),
            3,
            "journal",
            1,
        ),
        DumpProblem(
            "DUMP_OFFSET_ORDER",
            f"{path}:5: offset 2 of {JOURNAL}[0] goes back from offset 3 before it (a record duplicated or moved)",
            str(path),
            5,
            "journal",
            2,
        ),
    ]


@pytest.mark.parametrize("impl", ["python", "native"])
def test_a_garbled_middle_line_is_skipped_and_named_not_unreadable(tmp_path: Path, impl: str) -> None:
    data = line(0) + b'{"topic": not json at all\n' + line(1) + b"\n  \n" + b"[1, 2]\n" + line(2) + line(3)[:30]
    offsets, problems, path = dump_problems_of(tmp_path, data, PYTHON if impl == "python" else native())
    assert offsets == [0, 1, 2]  # the lines after a damaged one are read
    assert problems == [
        DumpProblem("DUMP_LINE_CORRUPTED", f"{path}:2 is not a valid record line (a line of the file was altered)", str(path), 2),
        DumpProblem("DUMP_LINE_CORRUPTED", f"{path}:6 is not a valid record line (a line of the file was altered)", str(path), 6),
        DumpProblem("DUMP_TRUNCATED", f"{path} ends in a torn line at line 8: the dump file was truncated", str(path), 8),
    ]


def test_problems_are_named_once_however_often_a_file_is_read(tmp_path: Path) -> None:
    dump = make_dump(tmp_path / "dump", {"0.jsonl": line(0) + b"junk\n" + line(0) + line(1)[:20]})
    source = DumpSource(dump)
    for _ in range(3):
        assert read_all(source) == [0, 0]
        list(source.row_chunks("journal", 0, headers=False))
    assert [(p.code, p.line) for p in source.dump_problems] == [
        ("DUMP_LINE_CORRUPTED", 2),
        ("DUMP_OFFSET_ORDER", 3),
        ("DUMP_TRUNCATED", 4),
    ]
    assert source.torn_lines == [TornLine(str(dump / "topics" / "journal" / "0.jsonl"), 4)]


@pytest.mark.parametrize("impl", ["python", "native"])
def test_a_file_with_too_many_problems_is_read_no_further(tmp_path: Path, impl: str) -> None:
    data = line(0) + b"junk\n" * (MAX_FILE_PROBLEMS + 50) + line(1)
    offsets, problems, path = dump_problems_of(tmp_path, data, PYTHON if impl == "python" else native())
    assert offsets == [0]
    assert len(problems) == MAX_FILE_PROBLEMS
    assert problems[-1].line == MAX_FILE_PROBLEMS + 1
    assert problems[-1].message.endswith(f"; {MAX_FILE_PROBLEMS} problems in this file, the rest of it is not read")


# ---------------------------------------------------------------------------
# the block reader and the line reader agree on hostile files
# ---------------------------------------------------------------------------


HOSTILE: dict[str, bytes] = {
    "garbled-middle": line(0) + b"garbage\n" + line(1),
    "garbled-last": line(0) + line(1) + b"garbage\n",
    "garbled-many": b"x\n" * 3 + line(0) + b"y\n" + line(1) + b"\n" + b"z\n",
    "torn": line(0) + line(1)[:25],
    "too-long-first": b"a" * 3000 + b"\n" + line(0),
    "too-long-after": line(0) + line(1) + b"b" * 3000,
    "long-but-fine": line(0) + line(1, key=b"k" * 1400) + line(2),
    "misplaced": line(0) + line(1, partition=7) + line(2, topic="x.activity.refusals"),
    "order": line(5) + line(5) + line(4) + line(6),
    "too-many": b"q\n" * (MAX_FILE_PROBLEMS + 5) + line(0),
    "too-many-order": b"".join(line(9) for _ in range(MAX_FILE_PROBLEMS + 5)),
}


@pytest.mark.parametrize("impl", ["python", "native"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_block_and_line_readers_agree(tmp_path: Path, impl: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "_CHUNK_BYTES", 300)  # many blocks, lines longer than a block
    monkeypatch.setattr(sources, "MAX_LINE_BYTES", 2500)
    dump = make_dump(tmp_path / "dump", {"0.jsonl": HOSTILE[name]})
    path = dump / "topics" / "journal" / "0.jsonl"
    with facts.use(PYTHON if impl == "python" else native()):
        source = DumpSource(dump)
        got = list(source.records("journal", 0))
    torn: list[TornLine] = []
    log = sources._ProblemLog(torn)
    reading = sources._FileReading(log, path, "journal", 0)
    parse = lambda stream, item: _stored(stream, facts.item_row(item, True))  # noqa: E731
    expected = list(sources._read_jsonl(path, "journal", parse, torn, reading=reading))
    assert got == expected
    assert source.dump_problems == log.problems()
    assert source.torn_lines == torn
    assert source.dump_problems or name == "long-but-fine"


def _stored(stream: str, row: Any) -> StoredRecord:
    offset, timestamp, key, value, topic, partition, headers = row
    return StoredRecord(stream, topic, partition, offset, timestamp, key, value, headers)


# ---------------------------------------------------------------------------
# kcat captures: parsed once, damage is a verdict
# ---------------------------------------------------------------------------


def kcat_line(partition: int, offset: int, *, topic: str = JOURNAL, key: str = "run-x") -> bytes:
    item = {"topic": topic, "partition": partition, "offset": offset, "tstype": "create", "ts": 1, "broker": 0}
    item |= {"headers": ["h", "v"], "key": key, "payload": f"value {offset}"}
    return json.dumps(item).encode() + b"\n"


def counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = kcat_source._kcat_loads

    def loads(line: bytes) -> Any:
        calls.append(len(line))
        return real(line)

    monkeypatch.setattr(kcat_source, "_kcat_loads", loads)
    return calls


def test_a_capture_over_many_partitions_is_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    n = 5000
    capture = tmp_path / "journal.json"
    capture.write_bytes(b"".join(kcat_line(p, 0) for p in range(n)))
    calls = counting_loads(monkeypatch)
    source = KcatSource([capture], PREFIX)
    assert source.partitions("journal") == list(range(n))
    assert len(calls) == n  # the index: one parse per line
    for partition in source.partitions("journal"):
        assert [(r.partition, r.offset) for r in source.records("journal", partition)] == [(partition, 0)]
    assert len(calls) == 2 * n  # then one per record handed on, never a re-scan per partition
    assert source.partitions("audit") == [] and list(source.records("audit", 0)) == []
    assert len(calls) == 2 * n
    assert source.dump_problems == []


def test_verifying_a_run_against_a_capture_over_many_partitions_stays_linear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bernstein.substrate.keys import TrustedKeys
    from bernstein.verifier.verify import verify_stream

    n = 5000
    capture = tmp_path / "journal.json"
    capture.write_bytes(b"".join(kcat_line(p, 0) for p in range(n)))
    calls = counting_loads(monkeypatch)
    header, _ = verify_stream("run-absent", KcatSource([capture], PREFIX), cas=None, trusted=TrustedKeys())
    assert not header.found
    assert n <= len(calls) <= 3 * n  # with a re-scan per partition this was n * n = 25,000,000


def test_a_capture_is_a_verdict_on_garbled_lines_and_offset_order(tmp_path: Path) -> None:
    capture = tmp_path / "journal.json"
    data = kcat_line(0, 0) + b"{garbled\n" + kcat_line(0, 1) + kcat_line(0, 1) + kcat_line(1, 5) + kcat_line(0, 0)
    capture.write_bytes(data + kcat_line(1, 6)[:20])
    source = KcatSource([capture], PREFIX)
    assert source.partitions("journal") == [0, 1]
    assert read_all(source, 0) == [0, 1, 1, 0]  # handed on as captured: no exception, no exit 3
    assert read_all(source, 1) == [5]
    assert source.dump_problems == [
        DumpProblem(
            "DUMP_LINE_CORRUPTED", f"{capture}:2 is not a valid record line (a line of the file was altered)", str(capture), 2
        ),
        DumpProblem(
            "DUMP_OFFSET_ORDER",
            f"{capture}:4: offset 1 of {JOURNAL}[0] repeats offset 1 before it (a record duplicated or moved)",
            str(capture),
            4,
            "journal",
            1,
        ),
        DumpProblem(
            "DUMP_OFFSET_ORDER",
            f"{capture}:6: offset 0 of {JOURNAL}[0] goes back from offset 1 before it (a record duplicated or moved)",
            str(capture),
            6,
            "journal",
            0,
        ),
        DumpProblem("DUMP_TRUNCATED", f"{capture} ends in a torn line at line 7: the dump file was truncated", str(capture), 7),
    ]
    assert source.torn_lines == [TornLine(str(capture), 7)]


def test_capture_offsets_rise_across_files_and_foreign_topics_are_ignored(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_bytes(kcat_line(0, 0) + kcat_line(0, 1) + kcat_line(0, 0, topic="someone.else"))
    second.write_bytes(kcat_line(0, 2) + kcat_line(0, 1) + kcat_line(0, 7, topic="someone.else"))
    source = KcatSource([first, second], PREFIX)
    assert read_all(source) == [0, 1, 2, 1]
    assert [(p.code, p.path, p.line, p.offset) for p in source.dump_problems] == [("DUMP_OFFSET_ORDER", str(second), 2, 1)]


def test_a_kcat_field_of_the_wrong_type_is_a_damaged_line(tmp_path: Path) -> None:
    capture = tmp_path / "journal.json"
    bad = json.dumps({"topic": JOURNAL, "partition": 0, "offset": 1, "key": 5, "payload": "x"}).encode() + b"\n"
    capture.write_bytes(kcat_line(0, 0) + bad + kcat_line(0, 2))
    source = KcatSource([capture], PREFIX)
    assert read_all(source) == [0, 2]
    assert [(p.code, p.line) for p in source.dump_problems] == [("DUMP_LINE_CORRUPTED", 2)]


def test_a_capture_changed_after_it_was_indexed_is_unreadable(tmp_path: Path) -> None:
    capture = tmp_path / "journal.json"
    capture.write_bytes(kcat_line(0, 0) + kcat_line(0, 1))
    source = KcatSource([capture], PREFIX)
    assert source.partitions("journal") == [0]
    capture.write_bytes(b"x" * 400)
    with pytest.raises(UnreadableInput, match="changed while it was read"):
        read_all(source)


# ---------------------------------------------------------------------------
# until verify.py reports dump_problems: damage is unusable input, never skipped in silence
# ---------------------------------------------------------------------------


def test_without_the_switch_damage_raises_instead_of_being_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "DAMAGE_IS_A_VERDICT", False)
    dump = make_dump(tmp_path / "dump", {"0.jsonl": line(0) + b"junk\n" + line(1)})
    path = dump / "topics" / "journal" / "0.jsonl"
    with pytest.raises(DumpDamaged) as info:
        read_all(DumpSource(dump))
    assert str(info.value) == f"{path}:2 is not a valid record line (a line of the file was altered)"
    assert (info.value.problem.code, info.value.problem.line, info.value.code) == ("DUMP_LINE_CORRUPTED", 2, "E_DUMP_DAMAGED")
    assert isinstance(info.value, UnreadableInput)
    capture = tmp_path / "journal.json"
    capture.write_bytes(kcat_line(0, 1) + kcat_line(0, 1))
    with pytest.raises(DumpDamaged, match="repeats offset 1"):
        KcatSource([capture], PREFIX).partitions("journal")
    long = tmp_path / "long.json"
    long.write_bytes(b"x" * (MAX_LINE_BYTES + 1))
    with pytest.raises(DumpDamaged, match="is longer than"):
        KcatSource([long], PREFIX).partitions("journal")
    # recorded either way: a torn last line (always a verdict), and what nothing checked before
    (dump / "topics" / "journal" / "0.jsonl").write_bytes(line(0) + line(0) + line(1, partition=3) + line(2)[:10])
    source = DumpSource(dump)
    assert read_all(source) == [0, 0, 1]
    assert [(p.code, p.line) for p in source.dump_problems] == [
        ("DUMP_OFFSET_ORDER", 2),
        ("DUMP_RECORD_MISPLACED", 3),
        ("DUMP_TRUNCATED", 4),
    ]


# ---------------------------------------------------------------------------
# what Python's own parsers raise on hostile input is a typed verdict, never exit 4 (security review F7)
# ---------------------------------------------------------------------------


def test_a_deeply_nested_manifest_is_unreadable_input(tmp_path: Path) -> None:
    root = make_dump(tmp_path / "dump")
    (root / "manifest.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(UnreadableInput, match="nested too deeply to be a dump manifest"):
        DumpSource(root)


@pytest.mark.parametrize(
    ("field", "value"),
    [("partition", 10**20), ("partition", -1), ("offset", 2**63), ("partition", "Infinity"), ("offset", 1e400)],
)
def test_a_kcat_number_outside_kafkas_range_is_a_damaged_line(tmp_path: Path, field: str, value: Any) -> None:
    capture = tmp_path / "journal.json"
    item = {"topic": JOURNAL, "partition": 0, "offset": 1, "key": "run-a", "payload": "x", field: value}
    bad = json.dumps(item).replace('"Infinity"', "Infinity").encode() + b"\n"
    capture.write_bytes(kcat_line(0, 0) + bad + kcat_line(0, 2))
    source = KcatSource([capture], PREFIX)
    assert read_all(source) == [0, 2]
    assert [(p.code, p.line) for p in source.dump_problems] == [("DUMP_LINE_CORRUPTED", 2)]


def test_a_deeply_nested_kcat_line_is_a_damaged_line(tmp_path: Path) -> None:
    capture = tmp_path / "journal.json"
    nested = (
        b'{"topic": "'
        + JOURNAL.encode()
        + b'", "partition": 0, "offset": 1, "payload": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}\n"
    )
    capture.write_bytes(kcat_line(0, 0) + nested + kcat_line(0, 2))
    source = KcatSource([capture], PREFIX)
    assert read_all(source) == [0, 2]
    assert [(p.code, p.line) for p in source.dump_problems] == [("DUMP_LINE_CORRUPTED", 2)]
