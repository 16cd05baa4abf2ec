"""The native plain path of the verifier's walks (``native/src/walk.rs``) changes no report.

``AuditPlain`` and ``ChainPlain`` take the plain records of a chunk off the Python walk; the
Python walk checks the rest. Every report here is computed twice with the native facts, with
and without the plain path, over tampered dumps and key sets that stop it at every condition
it states (a link, a MAC, a key's owner and lifetime, a checkpoint due, a refusal, a run
filter), and must be identical. The reports against the Python facts are compared in
``test_verifier_facts.py`` (the native facts there walk with the plain path).
"""

from __future__ import annotations

import copy
import io
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bernstein.consumers.core.model import InputRecord
from bernstein.schemas import codec
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import TrustedKeys, Validity
from bernstein.verifier import facts
from bernstein.verifier import verify as verify_module
from bernstein.verifier.facts import Facts
from bernstein.verifier.keyuse import KeyLedger
from bernstein.verifier.render import render_json
from bernstein.verifier.sources import DumpSource
from bernstein.verifier.verify import verify_many, verify_stream
from bernstein.verifier.walks.audit import _AuditWalk
from bernstein.verifier.walks.chain import _ChainWalk
from bernstein.verifier.walks.partition import _AuditEvent, _PartitionAudit
from tests.support import fact_dumps
from tests.support.fact_dumps import TAMPERS, TRUSTED, edit_lines, native, write_dump

C = codec.default_codec()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plain") / "dump"
    write_dump(root)
    return root


def without_plain_path() -> Facts:
    slow = copy.copy(native())
    slow.walks = None
    return slow


def reports(impl: Facts, root: Path, trusted: TrustedKeys) -> list[Any]:
    """Every run's report alone and all runs' in one pass, rendered as JSON, with and without the store."""
    out: list[Any] = []
    with facts.use(impl):
        for cas in (False, True):
            store = DirBlobStore(root / "cas") if cas else None
            for run_id in ("run-a", "run-b"):
                header, stages = verify_stream(run_id, DumpSource(root), cas=store, trusted=trusted)
                text = io.StringIO()
                out.append((render_json(header, stages, text), text.getvalue()))
            for report in verify_many(None, DumpSource(root), cas=store, trusted=trusted):
                out.append((report.header, report.stages))
            for report in verify_many(["run-b"], DumpSource(root), cas=store, trusted=trusted):
                out.append((report.header, report.stages))  # a run filter: run-a's crossings are not queued
    return out


def same_reports(root: Path, trusted: TrustedKeys = TRUSTED) -> list[Any]:
    expected = reports(without_plain_path(), root, trusted)
    assert reports(native(), root, trusted) == expected
    return expected


EXTRA_TAMPERS = {
    "checkpoint-deleted": ("checkpoints", lambda ls: ls[:1] + ls[2:]),
    "checkpoints-gone": ("checkpoints", lambda ls: []),
    "audit-duplicated": ("audit", lambda ls: ls[:9] + ls[8:]),
    "audit-reordered": ("audit", lambda ls: [*ls[:5], ls[6], ls[5], *ls[7:]]),
    "journal-record-moved-late": ("journal", lambda ls: [*ls[:4], *ls[5:], ls[4]]),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS) + sorted(EXTRA_TAMPERS))
def test_tampered_dumps_report_the_same_with_and_without_the_plain_path(tmp_path: Path, pristine: Path, tamper: str) -> None:
    root = tmp_path / "dump"
    shutil.copytree(pristine, root)
    stream, edit = {**TAMPERS, **EXTRA_TAMPERS}[tamper]
    edit_lines(root / "topics" / stream / "0.jsonl", edit)
    found = same_reports(root)
    headers = [item[0] for item in found if not isinstance(item[0], int)]
    assert len(headers) == 6
    if tamper == "pristine":  # (a check that could not fail would compare two empty reports)
        for header in headers:
            assert header.found and not header.dump_problems
            for verdict in (header.chain, header.seal, header.audit, header.producers):
                assert verdict is not None and verdict.problem is None, header.run_id


def pinned_with(**changes: Any) -> TrustedKeys:
    """TRUSTED with the pinned keys of a purpose (``audit``, ``producer``) changed by ``changes[purpose]``."""
    return TrustedKeys.of(
        replace(entry, **changes[entry.purpose.value]) if entry.purpose.value in changes else entry
        for entry in TRUSTED.entries.values()
    )


@pytest.mark.parametrize(
    ("changes", "verdict", "code"),
    [
        # the audit key retired mid-chain (the records' timestamps are 1000 + input offset), or starting mid-chain
        ({"audit": {"validity": Validity(0, 1_010)}}, "audit", "KEY_OUTSIDE_VALIDITY"),
        ({"audit": {"validity": Validity(1_012, None)}}, "audit", "KEY_OUTSIDE_VALIDITY"),
        # the producer keys retired mid-run, or registered to another producer
        ({"producer": {"validity": Validity(0, 1_015)}}, "producers", "KEY_OUTSIDE_VALIDITY"),
        ({"producer": {"producer": "someone-else"}}, "producers", "PRODUCER_NAME_MISMATCH"),
    ],
    ids=["audit-retired", "audit-not-yet", "producer-retired", "producer-owner"],
)
def test_keys_out_of_force_stop_the_plain_path_where_the_walk_would(
    pristine: Path, changes: dict[str, Any], verdict: str, code: str
) -> None:
    found = same_reports(pristine, pinned_with(**changes))
    run_a = found[2][0]  # verify_many's report of run-a, without the store
    assert run_a.run_id == "run-a"
    assert getattr(run_a, verdict).problem.code == code


def test_the_plain_path_takes_the_plain_records(pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the plain path, most records never reach the Python checks (the point of it); without, all do."""
    calls = {"audit": 0, "journal": 0}
    check, record = _PartitionAudit._check, _ChainWalk._record

    def counted_check(self: Any, *args: Any) -> None:
        calls["audit"] += 1
        check(self, *args)

    def counted_record(self: Any, *args: Any) -> None:
        calls["journal"] += 1
        record(self, *args)

    monkeypatch.setattr(_PartitionAudit, "_check", counted_check)
    monkeypatch.setattr(_ChainWalk, "_record", counted_record)
    source = DumpSource(pristine)
    audit_records = sum(1 for _ in source.records("audit", 0))
    run_a_records = sum(1 for r in source.records("journal", 0) if r.key == b"run-a")
    with facts.use(without_plain_path()):
        verify_stream("run-a", DumpSource(pristine), cas=None, trusted=TRUSTED)
    assert calls == {"audit": audit_records, "journal": run_a_records}
    calls.update(audit=0, journal=0)
    with facts.use(native()):
        verify_stream("run-a", DumpSource(pristine), cas=None, trusted=TRUSTED)
    # left to Python: each chunk's first audit record after a checkpoint, seals, and entries whose
    # audit crossing is not read yet
    assert 0 < calls["audit"] < audit_records / 2
    assert 0 < calls["journal"] < run_a_records / 2


def test_the_event_queue_hands_back_what_it_was_given() -> None:
    queue = native().walks.EventQueue(_AuditEvent)  # type: ignore[union-attr]
    first = _AuditEvent(3, 17, "activity.result", 2, "sha256:" + "a" * 64, "hmac-sha256:x", True, 2, 9, 8)
    queue.append(first)
    queue.append(_AuditEvent(4, 18, "run.sealed", 3, "h", "m", False))
    assert len(queue) == 2
    got = queue.popleft()
    assert isinstance(got, _AuditEvent)
    assert [getattr(got, name) for name in _AuditEvent.__slots__] == [getattr(first, name) for name in _AuditEvent.__slots__]
    assert queue.popleft().event == "run.sealed"
    assert len(queue) == 0 and not queue
    with pytest.raises(IndexError):
        queue.popleft()


def test_an_input_the_scheduler_skipped_is_named_with_and_without_the_plain_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit records that are otherwise plain but account for inputs with a gap between them (INPUT_OFFSET_GAP)."""

    def skipping(topic: str, partition: int, offset: int, *rest: Any) -> InputRecord:
        return InputRecord(topic, partition, offset + 3 * (offset >= 20), *rest)  # inputs 20..22 never seen

    monkeypatch.setattr(fact_dumps, "InputRecord", skipping)  # the dump's scheduler sees the gap
    root = tmp_path / "dump"
    write_dump(root)
    found = same_reports(root)
    assert found[2][0].audit.problem.code == "INPUT_OFFSET_GAP"


def join_findings(impl: Facts, pristine: Path, event: Any) -> tuple[Any, ...]:
    """Run-a's first journal entry joined with ``event`` as its only queued audit crossing."""
    part = _PartitionAudit(C, iter(()), 0, TRUSTED, None, walks=impl.walks)
    audit = _AuditWalk(part, "run-a")
    walk = _ChainWalk(C, "run-a", 0, TRUSTED, audit, KeyLedger())
    part.run("run-a").events.append(event)
    first = next(r for r in DumpSource(pristine).records("journal", 0) if r.key == b"run-a")
    walk.feed_many(impl, [first.offset], [first.value], [first.timestamp_ms])
    return (
        walk.chain.first,
        audit.findings.first,
        audit.findings.further,
        walk.expected_seq,
        walk.head,
        walk.signed,
        walk.results,
    )


def test_the_join_with_the_audit_crossing_stops_where_the_walk_would(pristine: Path) -> None:
    first = next(r for r in DumpSource(pristine).records("journal", 0) if r.key == b"run-a")
    stored = native().journal_facts([first.value])[0][1]
    event = _AuditEvent
    cases = {
        "joined": event(0, 0, "activity.result", 0, stored, "m", False),
        "later entry": event(0, 0, "activity.result", 1, stored, "m", False),
        "earlier entry": event(0, 0, "activity.result", -1, stored, "m", False),
        "a seal": event(0, 0, "run.sealed", 0, stored, "m", False),
        "other hash": event(0, 0, "activity.result", 0, "sha256:" + "0" * 64, "m", False),
        "other hash, tainted": event(0, 0, "activity.result", 0, "sha256:" + "0" * 64, "m", True),
    }
    codes = {}
    for name, crossing in cases.items():
        expected = join_findings(without_plain_path(), pristine, crossing)
        assert join_findings(native(), pristine, crossing) == expected, name
        codes[name] = expected[1].code if expected[1] is not None else None
    assert codes == {
        "joined": None,
        "later entry": "AUDIT_MISSING_ENTRY",
        "earlier entry": "JOURNAL_MISSING_ENTRY",
        "a seal": "AUDIT_MISSING_ENTRY",
        "other hash": "AUDIT_DISAGREES",
        "other hash, tainted": None,
    }


def test_the_walk_checks_later_chunks_signatures_itself_while_its_next_chunk_is_being_checked() -> None:
    """``_signed_ahead``: while the signature thread is busy with the chunk the walk needs next, the walk's
    thread takes over chunks not yet started; every chunk's facts still come back in order."""
    import threading

    release = threading.Event()
    by: dict[int, str] = {}

    class SlowFirst:
        name = "test"
        walks = None

        def producer_facts(self, values: list[bytes | None], public_for: Any) -> list[tuple[Any, ...]]:
            number = int((values[0] or b"0").decode())
            by[number] = threading.current_thread().name
            if number == 0:
                assert release.wait(10)  # the first chunk is slow ...
            if number == 1:
                release.set()  # ... until the walk's thread has taken the chunks behind it (newest first: 4, 3, 2, 1)
            return [(number,) for _ in values]

    chunks = [[(i, 0, b"k", str(i).encode(), "t", 0, ())] for i in range(8)]
    got = []
    for rows, signed in verify_module._signed_ahead(iter(chunks), lambda row: True, SlowFirst(), TRUSTED):  # type: ignore[arg-type]
        got.append((rows[0][0], signed))
    assert [number for number, _ in got] == list(range(8))  # in order
    assert all(signed == [(number,)] for number, signed in got)
    assert by[0].startswith("verifier-signatures")
    assert [by[n] for n in range(1, 5)] == [threading.current_thread().name] * 4
