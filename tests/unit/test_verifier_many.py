"""Verifying many runs at once (``verify_many``, ``activity verify --all`` / a run list).

Every partition is read once, however many runs it holds (a source that counts its reads
proves it), and each run's report is the one ``verify`` gives for that run alone, byte for
byte in JSON: for untouched runs and with tampered runs among clean ones, on one partition
shared by several runs and across two partitions.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bernstein.consumers.core.model import InputRecord, SchedulerConfig
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import codec
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import TrustedKeys, init_keys
from bernstein.verifier.render import render_many_json, render_many_text, summary_line, worst_code
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_NOT_FULLY_VERIFIED, EXIT_OPEN, EXIT_VERIFIED, RunReport
from bernstein.verifier.sources import DUMP_FORMAT, DumpSource, RecordSource, StoredRecord, encode_dump_line
from bernstein.verifier.verify import verify, verify_many
from tests.support.browser_fakes import MemorySource
from tests.support.producers import TEST_PRODUCERS, producer_trust
from tests.support.verdicts import OTHER, PREFIX, ROLES, RUN, TOPICS, C, Writer, entry_value, inner, json_of, kind_of

REPO = Path(__file__).resolve().parents[2]
THIRD = "run-c"
P1_CLOSED = "run-p1-closed"
P1_OPEN = "run-p1-open"


class PartitionWriter(Writer):
    """``Writer`` on input partition ``partition`` (its own scheduler state, its own output partitions)."""

    def __init__(self, *args: Any, partition: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.partition = partition
        self.state = initial_state(self.core.config, partition)

    def feed(self, run_id: str, value: bytes, *, at: int | None = None) -> None:
        offset = self.next_input if at is None else at
        self.next_input = offset + 1
        self.state, outputs = self.core.step(
            self.state,
            InputRecord(
                f"{PREFIX}.activity.submissions", self.partition, offset, 1_700_000_000_000 + offset, run_id.encode(), value
            ),
        )
        for out in outputs:
            stream = out.stream.value
            at_ = self.offsets.get(stream, 0)
            self.offsets[stream] = at_ + 1
            self.source.add(
                StoredRecord(
                    stream, f"{PREFIX}.{TOPICS[stream]}", self.partition, at_, out.timestamp_ms, out.key, out.value, out.headers
                )
            )


class Built:
    def __init__(self, tmp_path: Path) -> None:
        keys = init_keys(tmp_path / "keys")
        self.store = DirBlobStore(tmp_path / "cas")
        self.keys = keys
        self.trusted = TrustedKeys.from_install(keys).merged(producer_trust())
        config = SchedulerConfig(
            roles=ROLES,
            signer=keys.signer,
            audit_key=keys.audit.secret,
            audit_key_id=keys.audit.key_id,
            seal_every=2,
            checkpoint_every=3,
            producers=TEST_PRODUCERS,
        )
        zero = PartitionWriter(keys, self.store, partition=0)
        one = PartitionWriter(keys, self.store, partition=1)
        for writer in (zero, one):
            writer.core = SchedulerCore(config)
            writer.state = initial_state(config, writer.partition)
        # partition 0: three runs interleaved, a refusal and two dead letters; all closed
        zero.stage(RUN, "stage-0")
        zero.stage(OTHER, "other-0")
        zero.stage(RUN, "stage-1")
        zero.stage(THIRD, "third-0")
        zero.stage(RUN, "stage-x", role="nobody")  # refused: unknown role
        zero.garbage()  # dead-lettered
        zero.stage(OTHER, "other-1")
        zero.stage(RUN, "stage-2")
        zero.stage(THIRD, "third-1")
        zero.close(OTHER)
        zero.stage(THIRD, "third-2")
        zero.close(RUN)
        zero.close(THIRD)
        zero.garbage()
        # partition 1: a closed run and an open one
        one.stage(P1_CLOSED, "a-0")
        one.stage(P1_OPEN, "b-0")
        one.stage(P1_CLOSED, "a-1")
        one.stage(P1_OPEN, "b-1")
        one.close(P1_CLOSED)
        one.stage(P1_OPEN, "b-2")
        records: dict[str, list[StoredRecord]] = {}
        for writer in (zero, one):
            for stream in TOPICS:
                records.setdefault(stream, []).extend(writer.source.all(stream))
        self.source = MemorySource(records)

    def records(self, stream: str) -> list[StoredRecord]:
        return self.source.all(stream)


ALL_RUNS = sorted([RUN, OTHER, THIRD, P1_CLOSED, P1_OPEN])


class CountingSource:
    """A ``RecordSource`` that counts how often each (stream, partition) is read."""

    def __init__(self, inner: RecordSource) -> None:
        self.inner = inner
        self.reads: Counter[tuple[str, int]] = Counter()

    def describe(self) -> str:
        return self.inner.describe()

    def partitions(self, stream: str) -> list[int]:
        return self.inner.partitions(stream)

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        self.reads[stream, partition] += 1
        return self.inner.records(stream, partition, headers=headers)


@pytest.fixture
def built(tmp_path: Path) -> Built:
    return Built(tmp_path)


def one_by_one(b: Built, source: RecordSource, runs: list[str], **options: Any) -> dict[str, dict[str, Any]]:
    options.setdefault("cas", b.store)
    return {run: json_of(verify(run, source, trusted=b.trusted, **options)) for run in runs}


def together(b: Built, source: RecordSource, runs: list[str] | None, **options: Any) -> dict[str, dict[str, Any]]:
    options.setdefault("cas", b.store)
    reports = verify_many(runs, source, trusted=b.trusted, **options)
    return {report.run_id: json_of(report) for report in reports}


def codes(documents: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {run: document["exit_code"] for run, document in documents.items()}


# ---------------------------------------------------------------------------
# reads
# ---------------------------------------------------------------------------


def test_all_runs_read_every_partition_once(built: Built) -> None:
    counting = CountingSource(built.source)
    reports = verify_many(None, counting, cas=built.store, trusted=built.trusted)
    assert [r.run_id for r in reports] == ALL_RUNS
    expected = {
        (stream, partition): 1
        for stream in ("journal", "audit", "checkpoints", "refusals", "deadletter")
        for partition in built.source.partitions(stream)
    }
    assert dict(counting.reads) == expected
    assert ("deadletter", 0) in expected and ("checkpoints", 1) in expected  # every stream is there to be read


def test_verifying_one_run_alone_reads_its_partition_several_times(built: Built) -> None:
    """The counter sees the repeated reads that ``verify_many`` saves (so the test above could fail)."""
    counting = CountingSource(built.source)
    verify(RUN, counting, cas=built.store, trusted=built.trusted)
    assert counting.reads["journal", 0] >= 3  # which partition, the chain, the stages


def test_a_run_list_reads_every_partition_once_too(built: Built) -> None:
    counting = CountingSource(built.source)
    reports = verify_many([P1_OPEN, RUN, "run-nowhere", RUN], counting, cas=built.store, trusted=built.trusted)
    assert [r.run_id for r in reports] == [P1_OPEN, RUN, "run-nowhere"]
    assert max(counting.reads.values()) == 1


# ---------------------------------------------------------------------------
# verdicts: the same as one by one
# ---------------------------------------------------------------------------


def test_untouched_runs_get_the_reports_they_get_alone(built: Built) -> None:
    many = together(built, built.source, None)
    assert many == one_by_one(built, built.source, ALL_RUNS)
    assert codes(many) == {
        RUN: EXIT_VERIFIED,
        OTHER: EXIT_VERIFIED,
        THIRD: EXIT_VERIFIED,
        P1_CLOSED: EXIT_VERIFIED,
        P1_OPEN: EXIT_OPEN,
    }
    assert many[RUN]["audit"]["refusals"] == 1 and many[RUN]["audit"]["records"] == many[OTHER]["audit"]["records"]


def test_records_only_and_no_store_match_too(built: Built) -> None:
    assert together(built, built.source, None, records_only=True) == one_by_one(built, built.source, ALL_RUNS, records_only=True)
    many = together(built, built.source, None, cas=None)
    assert many == one_by_one(built, built.source, ALL_RUNS, cas=None)
    assert set(codes(many).values()) == {EXIT_NOT_FULLY_VERIFIED}


def entry_edited(b: Built, run_id: str) -> MemorySource:
    """The second journal entry of ``run_id`` with its stage id changed (its entry hash no longer recomputes)."""
    journal = b.records("journal")
    mine = [i for i, r in enumerate(journal) if r.key == run_id.encode() and kind_of(r.value) == codec.JOURNAL_RECORD]
    index = mine[1]
    envelope = C.decode(journal[index].value or b"")
    decoded = C.decode(envelope.record["payload"])
    payload = C.encode(decoded.schema.name, {**decoded.record, "stage_id": "forged"})
    value = C.encode(envelope.schema.name, {**envelope.record, "payload": payload})
    journal[index] = replace(journal[index], value=value)
    return b.source.replaced("journal", journal)


def audit_deleted(b: Built, nth_of_run: str) -> MemorySource:
    """Partition 0's audit chain without the first audit record of run ``nth_of_run`` (a gap every run there sees)."""
    audit = b.records("audit")
    index = next(i for i, r in enumerate(audit) if r.partition == 0 and inner(r.value).get("run_id") == nth_of_run)
    return b.source.replaced("audit", audit[:index] + audit[index + 1 :])


def refusal_deleted(b: Built) -> MemorySource:
    return b.source.replaced("refusals", [])


def deadletter_deleted(b: Built) -> MemorySource:
    return b.source.replaced("deadletter", b.records("deadletter")[1:])


def journal_of_run_deleted(b: Built, run_id: str) -> MemorySource:
    return b.source.replaced("journal", [r for r in b.records("journal") if r.key != run_id.encode()])


def checkpoint_deleted(b: Built) -> MemorySource:
    return b.source.replaced("checkpoints", [r for r in b.records("checkpoints") if not (r.partition == 0 and r.offset == 1)])


def seal_entry_swapped(b: Built, run_id: str) -> MemorySource:
    """A journal entry of ``run_id`` replaced by a well-formed entry naming a changed payload (the audit disagrees)."""
    journal = b.records("journal")
    index = next(i for i, r in enumerate(journal) if r.key == run_id.encode() and kind_of(r.value) == codec.JOURNAL_RECORD)
    envelope = C.decode(journal[index].value or b"")
    decoded = C.decode(envelope.record["payload"])
    payload = C.encode(decoded.schema.name, {**decoded.record, "reason_code": "forged"})
    journal[index] = replace(journal[index], value=entry_value(payload))
    return b.source.replaced("journal", journal)


TAMPERS: dict[str, tuple[Callable[[Built], MemorySource], dict[str, int]]] = {
    "entry edited": (lambda b: entry_edited(b, OTHER), {OTHER: EXIT_MISMATCH}),
    "entry rehashed (audit disagrees)": (lambda b: seal_entry_swapped(b, THIRD), {THIRD: EXIT_MISMATCH}),
    "audit record deleted": (
        lambda b: audit_deleted(b, THIRD),
        {RUN: EXIT_MISMATCH, OTHER: EXIT_MISMATCH, THIRD: EXIT_MISMATCH},
    ),
    "refusals deleted": (refusal_deleted, {RUN: EXIT_MISMATCH}),
    "dead letter deleted": (deadletter_deleted, {RUN: EXIT_MISMATCH, OTHER: EXIT_MISMATCH, THIRD: EXIT_MISMATCH}),
    "checkpoint deleted": (checkpoint_deleted, {RUN: EXIT_MISMATCH, OTHER: EXIT_MISMATCH, THIRD: EXIT_MISMATCH}),
    "a run's journal deleted": (lambda b: journal_of_run_deleted(b, P1_CLOSED), {P1_CLOSED: EXIT_MISMATCH}),
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_a_tampered_run_among_clean_ones_gets_the_report_it_gets_alone(built: Built, name: str) -> None:
    tamper, changed = TAMPERS[name]
    source = tamper(built)
    many = together(built, source, None)
    assert list(many) == ALL_RUNS  # --all lists a run whose journal is gone (the audit chain mirrors it)
    assert many == one_by_one(built, source, ALL_RUNS)
    clean = {RUN: EXIT_VERIFIED, OTHER: EXIT_VERIFIED, THIRD: EXIT_VERIFIED, P1_CLOSED: EXIT_VERIFIED, P1_OPEN: EXIT_OPEN}
    assert codes(many) == {**clean, **changed}


def test_the_first_problem_of_a_shared_audit_chain_is_placed_as_for_the_run_alone(built: Built) -> None:
    """A gap in partition 0's audit chain is the first audit problem of the runs that meet it, with the count of
    what follows as each run's walk alone counts it (not smeared, not lost)."""
    source = audit_deleted(built, THIRD)
    many = together(built, source, [RUN, OTHER, THIRD])
    for run in (RUN, OTHER):
        assert many[run]["audit"]["problem"]["code"] == "AUDIT_GAP"
    assert many[THIRD]["audit"]["problem"]["code"] == "AUDIT_GAP"
    assert many == one_by_one(built, source, [RUN, OTHER, THIRD])


def test_a_run_list_names_a_missing_run_and_matches_one_by_one(built: Built) -> None:
    runs = [P1_OPEN, "run-nowhere", RUN]
    many = together(built, built.source, runs)
    assert many == one_by_one(built, built.source, runs)
    assert codes(many) == {P1_OPEN: EXIT_OPEN, "run-nowhere": EXIT_NOT_FOUND, RUN: EXIT_VERIFIED}


def test_a_run_on_two_partitions_is_named_as_alone(built: Built) -> None:
    journal = built.records("journal")
    stray = next(r for r in journal if r.key == RUN.encode())
    source = built.source.replaced("journal", [*journal, replace(stray, partition=1, offset=10_000)])
    many = together(built, source, None)
    assert many[RUN]["dump_problems"][0]["code"] == "RUN_ON_SEVERAL_PARTITIONS"
    assert many == one_by_one(built, source, ALL_RUNS)


# ---------------------------------------------------------------------------
# dumps: damage is reported on the runs whose files hold it
# ---------------------------------------------------------------------------


def dump(b: Built, root: Path, source: RecordSource | None = None) -> Path:
    source = source or b.source
    for stream in TOPICS:
        for partition in source.partitions(stream):
            (root / "topics" / stream).mkdir(parents=True, exist_ok=True)
            lines = b"".join(encode_dump_line(r) for r in source.records(stream, partition))
            (root / "topics" / stream / f"{partition}.jsonl").write_bytes(lines)
    (root / "manifest.json").write_text(json.dumps({"format": DUMP_FORMAT, "runs": ALL_RUNS}))
    return root


def test_a_dump_with_a_torn_audit_file_marks_the_runs_of_that_partition(built: Built, tmp_path: Path) -> None:
    root = dump(built, tmp_path / "dump")
    audit = root / "topics" / "audit" / "1.jsonl"
    audit.write_bytes(audit.read_bytes()[:-5])  # the last record of partition 1's audit chain torn
    many = {r.run_id: json_of(r) for r in verify_many(None, DumpSource(root), cas=built.store, trusted=built.trusted)}
    alone = {run: json_of(verify(run, DumpSource(root), cas=built.store, trusted=built.trusted)) for run in ALL_RUNS}
    assert many == alone
    assert [p["code"] for p in many[P1_OPEN]["dump_problems"]] == ["DUMP_TRUNCATED"]
    assert many[RUN]["dump_problems"] == [] and many[RUN]["exit_code"] == EXIT_VERIFIED


# ---------------------------------------------------------------------------
# rendering and the command
# ---------------------------------------------------------------------------


def test_worst_code_ranks_mismatch_then_not_found_then_not_fully_verified_then_open() -> None:
    assert worst_code([EXIT_VERIFIED, EXIT_OPEN, EXIT_NOT_FULLY_VERIFIED]) == EXIT_NOT_FULLY_VERIFIED
    assert worst_code([EXIT_OPEN, EXIT_NOT_FOUND, EXIT_NOT_FULLY_VERIFIED]) == EXIT_NOT_FOUND
    assert worst_code([EXIT_NOT_FOUND, EXIT_MISMATCH, EXIT_VERIFIED]) == EXIT_MISMATCH
    assert worst_code([EXIT_VERIFIED, EXIT_OPEN]) == EXIT_OPEN
    assert worst_code([]) == EXIT_VERIFIED
    assert summary_line([("a", 0, "verified"), ("b", 2, "mismatch"), ("c", 5, "open")]) == (
        "summary -- 3 runs: 1 verified, 1 open, 1 mismatch; mismatch: b; exit 2"
    )


def test_many_reports_render_each_run_then_a_summary(built: Built) -> None:
    reports: list[RunReport] = verify_many(None, entry_edited(built, OTHER), cas=built.store, trusted=built.trusted)
    text = io.StringIO()
    code = render_many_text(((r.header, r.stages) for r in reports), text)
    lines = text.getvalue().splitlines()
    assert code == EXIT_MISMATCH
    assert lines[-1] == "summary -- 5 runs: 3 verified, 1 open, 1 mismatch; mismatch: run-b; exit 2"
    assert sum(line.startswith("Activity verify run=") for line in lines) == 5
    out = io.StringIO()
    assert render_many_json(((r.header, r.stages) for r in reports), out) == EXIT_MISMATCH
    documents = json.loads(out.getvalue())
    assert [d["run"] for d in documents] == ALL_RUNS
    assert [d["exit_code"] for d in documents] == [EXIT_VERIFIED, EXIT_MISMATCH, EXIT_VERIFIED, EXIT_VERIFIED, EXIT_OPEN]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bernstein", "activity", "verify", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def test_the_command_verifies_all_runs_and_a_runs_file(built: Built, tmp_path: Path) -> None:
    root = dump(built, tmp_path / "dump", entry_edited(built, OTHER))
    trusted = tmp_path / "trusted.json"
    built.trusted.write(trusted)
    common = ["--from", str(root), "--cas", str(built.store.root), "--trusted-keys", str(trusted)]
    every = cli("--all", "--json", *common)
    assert every.returncode == EXIT_MISMATCH, every.stderr
    documents = json.loads(every.stdout)
    assert [(d["run"], d["exit_code"]) for d in documents] == [
        (RUN, EXIT_VERIFIED),
        (OTHER, EXIT_MISMATCH),
        (THIRD, EXIT_VERIFIED),
        (P1_CLOSED, EXIT_VERIFIED),
        (P1_OPEN, EXIT_OPEN),
    ]
    runs_file = tmp_path / "runs.txt"
    runs_file.write_text(f"# runs to check\n{RUN}\n\n{P1_OPEN}\n")
    listed = cli("--runs-file", str(runs_file), *common)
    assert listed.returncode == EXIT_OPEN, listed.stderr
    assert listed.stdout.splitlines()[-1] == "summary -- 2 runs: 1 verified, 1 open; exit 5"
    two = cli(RUN, THIRD, "--json", *common)
    assert two.returncode == EXIT_VERIFIED, two.stderr
    assert [d["run"] for d in json.loads(two.stdout)] == [RUN, THIRD]
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    none = cli("--runs-file", str(empty), *common)
    assert none.returncode == 3 and "no run id in it" in none.stderr and "Traceback" not in none.stderr


# ---------------------------------------------------------------------------
# blobs re-hashed ahead (verifier.blobs) give the verdicts the store gives
# ---------------------------------------------------------------------------


class PlainStore:
    """The store behind a proxy that is not a ``DirBlobStore``: nothing is re-hashed ahead."""

    def __init__(self, store: DirBlobStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_blobs_hashed_ahead_give_the_same_verdicts_as_the_store(built: Built, tmp_path: Path) -> None:
    from bernstein.verifier.blobs import HashedAhead

    wrapped = HashedAhead.wrap(built.store)
    assert isinstance(wrapped, HashedAhead)  # the native extension is built for the tests
    entries = [inner(r.value) for r in built.records("journal") if kind_of(r.value) == codec.JOURNAL_RECORD]
    observations = [o["content_hash"] for e in entries if e["run_id"] == RUN for o in e.get("observations", [])]
    changed, missing, linked = observations[0], observations[2], observations[4]
    built.store.path_of(changed).write_bytes(b"changed evidence")
    built.store.path_of(missing).unlink()
    target = tmp_path / "elsewhere"
    target.write_bytes(b"outside the store")
    built.store.path_of(linked).unlink()
    built.store.path_of(linked).symlink_to(target)
    ahead = json_of(verify(RUN, built.source, cas=built.store, trusted=built.trusted))
    plain = json_of(verify(RUN, built.source, cas=PlainStore(built.store), trusted=built.trusted))  # type: ignore[arg-type]
    assert ahead == plain
    reasons = [stage["reason"] for stage in ahead["stages"]]
    assert reasons[0].startswith("content hash mismatch reattaching 'src/stage-0/0.py'")
    assert "missing from store" in reasons[1] and "symbolic link" in reasons[2], reasons
    assert ahead["exit_code"] == EXIT_MISMATCH
    wrapped.ahead([observations[1], changed], keep=[observations[1]])
    assert wrapped.sized(changed) is not None and wrapped.sized(missing) is None
    assert wrapped.get(observations[1]) == built.store.get(observations[1])


def test_a_dump_exported_for_some_runs_says_the_others_are_not_in_it_never_deleted(built: Built, tmp_path: Path) -> None:
    """``topic export --run RUN`` keeps the partition's audit chain whole but only RUN's journal records; ``--all``
    on it reports RUN alone, and any other run is "not in this dump" (exit not found), not JOURNAL_MISSING."""
    root = dump(built, tmp_path / "dump")
    for path in (root / "topics" / "journal").iterdir():
        kept = [
            line
            for line in path.read_bytes().splitlines(keepends=True)
            if json.loads(line).get("key") == base64.b64encode(RUN.encode()).decode()
        ]
        path.write_bytes(b"".join(kept))
    (root / "manifest.json").write_text(json.dumps({"format": DUMP_FORMAT, "runs": [RUN]}))
    many = verify_many(None, DumpSource(root), cas=built.store, trusted=built.trusted)
    assert [(r.run_id, r.exit_code) for r in many] == [(RUN, EXIT_VERIFIED)]
    other = verify(OTHER, DumpSource(root), cas=built.store, trusted=built.trusted)
    assert other.exit_code == EXIT_NOT_FOUND and not other.header.found
    assert other.header.reason is not None and "it was exported with --run for 1 other run(s) only" in other.header.reason
