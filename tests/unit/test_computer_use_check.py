"""The verifier's ``browser`` check: a session replayed from its artifact and the CAS alone."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from bernstein.producers.computer_use import ComputerUseSession, Frame, ProposedAction, ScriptedAgent, SessionOutcome
from bernstein.schemas import codec
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import ProducerKeys, init_producer_keys
from bernstein.verifier.checks import CheckContext, check_for
from bernstein.verifier.checks.browser import NO_STORE, check_browser
from bernstein.verifier.stages import verify_stage
from bernstein.verifier.verify import verify
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, InMemoryScheduler, RecordingPublisher

RUN = "run-check"
SESSION = "browser-0"
FLOW = [
    ProposedAction("navigate", "http://site/signup.html"),
    ProposedAction("type", "#password", "hunter2-but-longer"),
    ProposedAction("submit", "#submit"),
]


def frames(n: int) -> list[Frame]:
    return [Frame(b"\x89PNG" + f"frame-{i}".encode() * 30, f'- heading "Step {i}"\n') for i in range(n)]


def record(tmp_path: Path, keys: ProducerKeys, **options: Any) -> tuple[InMemoryScheduler, SessionOutcome]:
    publisher = RecordingPublisher(keys)
    session = ComputerUseSession(
        RUN,
        SESSION,
        keys=keys,
        store=DirBlobStore(tmp_path / "cas"),
        publisher=publisher,
        worker_id="navigator@test",
        worktree=tmp_path / "w",
        **options,
    )
    outcome = session.run(ScriptedAgent(FLOW), FakeDriverFactory(FakeDriver(frames(4))))
    scheduler = InMemoryScheduler(keys)
    scheduler.feed_all(publisher)
    scheduler.close_run(RUN)
    assert scheduler.refusals() == []
    return scheduler, outcome


def browser_entry(scheduler: InMemoryScheduler) -> tuple[dict[str, Any], int]:
    for stored in scheduler.source.all("journal"):
        envelope = codec.decode(stored.value or b"")
        if envelope.schema.name != codec.JOURNAL_RECORD:
            continue
        entry = codec.decode(envelope.record["payload"]).record
        if entry["entry_type"] == "activity.result" and entry["kind"] == "browser":
            return entry, stored.offset
    raise AssertionError("no browser entry")


def action_entries(scheduler: InMemoryScheduler) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for stored in scheduler.source.all("journal"):
        envelope = codec.decode(stored.value or b"")
        if envelope.schema.name == codec.JOURNAL_RECORD:
            decoded = codec.decode(envelope.record["payload"])
            if decoded.schema.name in codec.COMPUTER_USE_ENTRIES:
                out.append((stored.offset, decoded.record))
    return out


@pytest.fixture
def keys(tmp_path: Path) -> ProducerKeys:
    return init_producer_keys(tmp_path / "producer-keys", "navigator@test")


def test_the_check_is_registered_for_browser() -> None:
    assert check_for("browser") is check_browser


def test_a_recorded_session_verifies_step_by_step(tmp_path: Path, keys: ProducerKeys) -> None:
    scheduler, outcome = record(tmp_path, keys)
    entry, offset = browser_entry(scheduler)
    stage = verify_stage(entry, offset, cas=DirBlobStore(tmp_path / "cas"), trusted=scheduler.trusted())
    assert stage.ok, stage.reason
    assert "3 steps replayed" in stage.notes and "evidence reattached" in stage.notes
    assert [d.text for d in stage.details] == [
        "step OK index=0 navigate",
        "step OK index=1 type",
        "step OK index=2 submit",
        f"head OK 3 actions, head {outcome.head_anchor}, final observation re-hashed",
    ]


def test_a_flipped_screenshot_byte_fails_the_stage_at_its_index(tmp_path: Path, keys: ProducerKeys) -> None:
    scheduler, outcome = record(tmp_path, keys)
    shutil.copytree(tmp_path / "cas", tmp_path / "tampered")
    store = DirBlobStore(tmp_path / "tampered")
    path = store.path_of(outcome.records[1].screenshot_hash)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    entry, offset = browser_entry(scheduler)
    stage = verify_stage(entry, offset, cas=store, trusted=scheduler.trusted())
    assert not stage.ok
    assert stage.reason.startswith(
        "browser replay diverged at action 1 (screenshot_changed): screenshot bytes changed: anchor mismatch"
    )
    lines = [d.text for d in stage.details]
    assert lines[0] == "step OK index=0 navigate" and lines[2] == "step OK index=2 submit"
    assert lines[1].startswith(
        f"step FAIL index=1 type -- screenshot bytes changed: anchor mismatch (expected '{outcome.records[1].anchor}', recomputed 'sha256:"
    )


def test_without_a_store_nothing_is_replayed(tmp_path: Path, keys: ProducerKeys) -> None:
    scheduler, _ = record(tmp_path, keys)
    entry, offset = browser_entry(scheduler)
    stage = verify_stage(entry, offset, cas=None, trusted=scheduler.trusted())
    # Not replayed is not verified: the stage is not ok, and not a mismatch either.
    assert not stage.ok and not stage.failed
    assert stage.unchecked == f"{NO_STORE} (no content store)" == "steps not replayed (no content store)"
    assert (stage.reason, stage.details, stage.evidence_reattached) == ("", (), False)


def test_terminal_state_must_map_onto_the_journalled_one(tmp_path: Path, keys: ProducerKeys) -> None:
    scheduler, outcome = record(tmp_path, keys, max_actions=1)
    entry, _ = browser_entry(scheduler)
    assert (entry["terminal_state"], entry["reason_code"]) == ("refused", "action_limit_exceeded")
    ctx = CheckContext(
        run_id=RUN,
        stage_id=SESSION,
        kind="browser",
        entry={**entry, "terminal_state": "completed"},
        artifact=outcome.result.artifact,
        artifact_problem="",
        cas=DirBlobStore(tmp_path / "cas"),
        trusted=scheduler.trusted(),
    )
    verdict = check_browser(ctx)
    assert not verdict.ok and "maps to 'refused'" in verdict.reason
    ok = check_browser(CheckContext(**{**ctx.__dict__, "entry": entry}))
    assert ok.ok and "ended refused (action_limit_exceeded)" in ok.notes


def test_journalled_actions_are_cross_checked_when_the_verifier_hands_them_over(tmp_path: Path, keys: ProducerKeys) -> None:
    scheduler, outcome = record(tmp_path, keys)
    entry, _ = browser_entry(scheduler)
    ctx = CheckContext(
        run_id=RUN,
        stage_id=SESSION,
        kind="browser",
        entry=entry,
        artifact=outcome.result.artifact,
        artifact_problem="",
        cas=DirBlobStore(tmp_path / "cas"),
        trusted=scheduler.trusted(),
    )
    related = action_entries(scheduler)
    object.__setattr__(ctx, "related_entries", tuple(related))
    verdict = check_browser(ctx)
    assert verdict.ok and verdict.details[-1].text == "journal OK 3 journalled actions agree with the action log"

    offset, first = related[0]
    edited = {**first, "action": {**first["action"], "target": "http://evil.example/"}}
    object.__setattr__(ctx, "related_entries", ((offset, edited), *related[1:]))
    verdict = check_browser(ctx)
    assert not verdict.ok and verdict.reason.startswith("journalled actions diverged at action 0 (anchor_mismatch)")


def test_the_whole_run_verifies_and_a_flipped_screenshot_is_named(tmp_path: Path, keys: ProducerKeys) -> None:
    scheduler, outcome = record(tmp_path, keys)
    trusted = scheduler.trusted()
    report = verify(RUN, scheduler.source, cas=DirBlobStore(tmp_path / "cas"), trusted=trusted)
    assert report.ok and report.exit_code == 0
    assert report.header.chain is not None and report.header.chain.entries == 4  # 3 actions + the session's result

    shutil.copytree(tmp_path / "cas", tmp_path / "tampered")
    store = DirBlobStore(tmp_path / "tampered")
    path = store.path_of(outcome.records[2].screenshot_hash)
    path.write_bytes(path.read_bytes()[:-1] + b"!")
    report = verify(RUN, scheduler.source, cas=store, trusted=trusted)
    assert report.exit_code == 2
    (stage,) = report.stages
    assert stage.reason.startswith("browser replay diverged at action 2 (screenshot_changed)")
