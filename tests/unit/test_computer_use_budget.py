"""The per-run screenshot byte cap: deduped, persisted across restarts, and recorded when it fires."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bernstein.producers.computer_use import (
    DEFAULT_RUN_BYTE_CAP,
    ActionByteCapExceeded,
    ByteLedgerUnreadable,
    ComputerUseSession,
    Frame,
    ProposedAction,
    RunByteLedger,
    ScriptedAgent,
    parse_session_document,
)
from bernstein.schemas.canonical import sha256_digest
from bernstein.schemas.records import TerminalState
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import ProducerKeys, init_producer_keys
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, InMemoryScheduler, RecordingPublisher

RUN = "run-cap"
SHOT = 1000  # bytes per screenshot in these tests


def shot(tag: str) -> bytes:
    return (tag.encode() * SHOT)[:SHOT]


def digest(tag: str) -> str:
    return sha256_digest(shot(tag))


def test_the_default_cap_is_64_mib() -> None:
    assert DEFAULT_RUN_BYTE_CAP == 64 * 1024 * 1024


def test_charges_dedupe_and_overflow_raises_with_evidence(tmp_path: Path) -> None:
    ledger = RunByteLedger(RUN, worktree=tmp_path, cap=2500)
    assert ledger.charge(digest("a"), SHOT) == SHOT
    assert ledger.charge(digest("a"), SHOT) == 0  # a duplicate frame costs nothing again
    assert ledger.charge(digest("b"), SHOT) == SHOT
    with pytest.raises(ActionByteCapExceeded) as caught:
        ledger.charge(digest("c"), SHOT, at_action=7)
    error = caught.value
    assert (error.code, error.run_id, error.cap_bytes, error.would_be_bytes, error.at_action) == (
        "BYTE_CAP_EXCEEDED",
        RUN,
        2500,
        3000,
        7,
    )
    assert error.reason_code == "byte_cap_exceeded"
    assert error.evidence() == {"code": "BYTE_CAP_EXCEEDED", "cap_bytes": 2500, "would_be_bytes": 3000, "at_action": 7}
    assert ledger.total() == 2 * SHOT  # the refused screenshot was not counted


def test_the_count_survives_a_restart_and_runs_are_independent(tmp_path: Path) -> None:
    RunByteLedger(RUN, worktree=tmp_path, cap=2500).charge(digest("a"), SHOT)
    RunByteLedger(RUN, worktree=tmp_path, cap=2500).charge(digest("b"), SHOT)
    restarted = RunByteLedger(RUN, worktree=tmp_path, cap=2500)
    assert restarted.total() == 2 * SHOT
    with pytest.raises(ActionByteCapExceeded):
        restarted.charge(digest("c"), SHOT)
    assert RunByteLedger("another-run", worktree=tmp_path, cap=2500).total() == 0
    # ids that sanitise alike keep separate ledgers
    assert RunByteLedger("r.1", worktree=tmp_path).path != RunByteLedger("r_1", worktree=tmp_path).path


def test_an_unreadable_ledger_is_never_a_silent_reset(tmp_path: Path) -> None:
    ledger = RunByteLedger(RUN, worktree=tmp_path, cap=2500)
    ledger.charge(digest("a"), SHOT)
    ledger.path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ByteLedgerUnreadable):
        ledger.charge(digest("b"), SHOT)
    ledger.path.write_text(
        json.dumps({"format": "bernstein.computer-use.byte-ledger/v1", "run_id": "other", "blobs": {}}), encoding="utf-8"
    )
    with pytest.raises(ByteLedgerUnreadable):
        ledger.total()


# ---------------------------------------------------------------------------
# in a session
# ---------------------------------------------------------------------------


def session(tmp_path: Path, keys: ProducerKeys, publisher: RecordingPublisher, session_id: str, cap: int) -> ComputerUseSession:
    return ComputerUseSession(
        RUN,
        session_id,
        keys=keys,
        store=DirBlobStore(tmp_path / "cas"),
        publisher=publisher,
        worker_id="navigator@test",
        worktree=tmp_path / "worktree",
        byte_cap=cap,
    )


def clicks(n: int) -> list[ProposedAction]:
    return [ProposedAction("click", f"#b{i}") for i in range(n)]


def test_overflow_is_recorded_as_a_refused_browser_result(tmp_path: Path) -> None:
    keys = init_producer_keys(tmp_path / "producer-keys", "navigator@test")
    publisher = RecordingPublisher(keys)
    frames = [Frame(shot(str(i)), f"- button b{i}\n") for i in range(5)]
    outcome = session(tmp_path, keys, publisher, "browser-0", cap=2500).run(
        ScriptedAgent(clicks(5)), FakeDriverFactory(FakeDriver(frames))
    )
    assert outcome.action_count == 2
    assert (outcome.activity_terminal_state, outcome.reason_code) == (TerminalState.REFUSED, "byte_cap_exceeded")
    assert isinstance(outcome.error, ActionByteCapExceeded)
    document = parse_session_document(outcome.result.artifact)
    assert document.refusal == {"code": "BYTE_CAP_EXCEEDED", "cap_bytes": 2500, "would_be_bytes": 3000, "at_action": 2}
    assert not DirBlobStore(tmp_path / "cas").has(sha256_digest(frames[2].screenshot))  # the refused frame was not stored
    scheduler = InMemoryScheduler(keys)
    scheduler.feed_all(publisher)
    assert scheduler.refusals() == []  # the refused result is journalled, naming the 2 anchored actions


def test_the_low_level_record_raises(tmp_path: Path) -> None:
    keys = init_producer_keys(tmp_path / "producer-keys", "navigator@test")
    recorder = session(tmp_path, keys, RecordingPublisher(keys), "browser-0", cap=SHOT)
    recorder.record(recorder.observe(Frame(shot("x"), "- a\n")), ProposedAction("click", "#a"))
    with pytest.raises(ActionByteCapExceeded):
        recorder.record(recorder.observe(Frame(shot("y"), "- b\n")), ProposedAction("click", "#b"))


def test_duplicate_frames_do_not_count_twice(tmp_path: Path) -> None:
    keys = init_producer_keys(tmp_path / "producer-keys", "navigator@test")
    same = [Frame(shot("same"), "- page\n")] * 6
    outcome = session(tmp_path, keys, RecordingPublisher(keys), "browser-0", cap=SHOT).run(
        ScriptedAgent(clicks(5)), FakeDriverFactory(FakeDriver(same))
    )
    assert outcome.ok and outcome.action_count == 5


def test_a_new_session_of_the_same_run_continues_from_the_persisted_count(tmp_path: Path) -> None:
    keys = init_producer_keys(tmp_path / "producer-keys", "navigator@test")
    first = [Frame(shot(f"first{i}"), "- a\n") for i in range(3)]
    outcome = session(tmp_path, keys, RecordingPublisher(keys), "browser-0", cap=4500).run(
        ScriptedAgent(clicks(2)), FakeDriverFactory(FakeDriver(first))
    )
    assert outcome.ok and outcome.action_count == 2  # 2 action frames + the final frame: 3000 of 4500 bytes
    # a restart: new session object, new process state, same run and worktree
    second = [Frame(shot(f"second{i}"), "- b\n") for i in range(3)]
    outcome = session(tmp_path, keys, RecordingPublisher(keys), "browser-1", cap=4500).run(
        ScriptedAgent(clicks(3)), FakeDriverFactory(FakeDriver(second))
    )
    assert (outcome.action_count, outcome.reason_code) == (1, "byte_cap_exceeded")
    refusal = {"code": "BYTE_CAP_EXCEEDED", "cap_bytes": 4500, "would_be_bytes": 5000, "at_action": 1}
    assert parse_session_document(outcome.result.artifact).refusal == refusal
