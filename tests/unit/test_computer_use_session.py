"""A recorded session, end to end in memory: fake driver -> session -> the real scheduler core.

No browser, no Kafka: ``FakeDriver`` serves frames, ``RecordingPublisher``
keeps what would be published, ``InMemoryScheduler`` folds the pure
scheduler core over it. What the scheduler accepts here is what it accepts
from a real browser session.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from pathlib import Path

import pytest

from bernstein.producers.computer_use import (
    ComputerUseDriverError,
    ComputerUseSession,
    ComputerUseTerminalState,
    DriverFault,
    Frame,
    ProposedAction,
    ScriptedAgent,
    parse_action_log,
    parse_session_document,
)
from bernstein.producers.computer_use.boundary import AgentView
from bernstein.producers.computer_use.profiles import isolated_profile_dir
from bernstein.producers.identity import ProducerIdMismatch
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    computer_use_genesis,
    lineage_hmac,
    lineage_signing_input,
    sha256_digest,
    typed_value_digest,
)
from bernstein.schemas.ed25519 import verify_signature
from bernstein.schemas.records import BROWSER_SESSION_FORMAT, TerminalState
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import ProducerKeys, init_producer_keys
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, InMemoryScheduler, RecordingPublisher

RUN = "run-cu-1"
SESSION = "browser-0"


def secret() -> str:
    return "pw-" + secrets.token_hex(12)


def frames(n: int, password: str = "") -> list[Frame]:
    """Distinct frames; from frame 3 on the page shows the typed password in its field (as aria_snapshot does)."""
    out = []
    for i in range(n):
        field = f'- textbox "Password": {password}' if password and i >= 3 else '- textbox "Password"'
        snapshot = (
            f'- heading "Step {i}" [level=1]\r\n- textbox "Full name"   \n{field}\n- button "Create account" [ref=e{i}]\n\n'
        )
        out.append(
            Frame(screenshot=b"\x89PNG\r\n\x1a\n" + f"frame-{i}".encode() * 40, aria_snapshot=snapshot, url=f"http://site/{i}")
        )
    return out


def flow(password: str) -> list[ProposedAction]:
    return [
        ProposedAction("navigate", "http://site/signup.html"),
        ProposedAction("type", "#name", "Ada Lovelace"),
        ProposedAction("type", "#password", password),
        ProposedAction("check", "#terms"),
        ProposedAction("submit", "#submit"),
    ]


@pytest.fixture
def keys(tmp_path: Path) -> ProducerKeys:
    return init_producer_keys(tmp_path / "producer-keys", "navigator@test")


@pytest.fixture
def store(tmp_path: Path) -> DirBlobStore:
    return DirBlobStore(tmp_path / "cas")


def make_session(
    keys: ProducerKeys, store: DirBlobStore, tmp_path: Path, publisher: RecordingPublisher, **options: object
) -> ComputerUseSession:
    return ComputerUseSession(
        options.pop("run_id", RUN),  # type: ignore[arg-type]
        options.pop("session_id", SESSION),  # type: ignore[arg-type]
        keys=keys,
        store=store,
        publisher=publisher,
        worker_id="navigator@test",
        worktree=tmp_path / "worktree",
        **options,  # type: ignore[arg-type]
    )


def test_every_action_is_anchored_signed_published_and_accepted(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    password = secret()
    publisher = RecordingPublisher(keys)
    driver = FakeDriver(frames(6, password))
    outcome = make_session(keys, store, tmp_path, publisher).run(ScriptedAgent(flow(password)), FakeDriverFactory(driver))

    assert outcome.ok and outcome.terminal_state is ComputerUseTerminalState.OK
    assert outcome.activity_terminal_state is TerminalState.COMPLETED and outcome.reason_code == "ok"
    assert outcome.action_count == 5 and len(publisher.actions) == 5 and len(publisher.results) == 1
    # the chain: action 0 follows the session genesis, every later one its predecessor
    prev = computer_use_genesis(RUN, SESSION)
    for record in outcome.records:
        assert record.prev_anchor == prev
        prev = record.anchor
    assert outcome.head_anchor == prev
    # the raw values reached the driver, and only the driver
    assert [a.value for a in driver.performed] == [a.value for a in flow(password)]
    assert driver.closed

    scheduler = InMemoryScheduler(keys)
    scheduler.feed_all(publisher)
    assert scheduler.refusals() == []
    journal = [codec.decode(codec.decode(r.value or b"").record["payload"]) for r in scheduler.source.all("journal")]
    # the SDK declares every blob's size and signs the result: v2 actions, a v3 result entry with the producer's key
    assert [d.schema.name for d in journal] == [codec.COMPUTER_USE_ENTRY_V2] * 5 + [codec.JOURNAL_ENTRY_V3]
    assert journal[5].record["producer_key_id"] == keys.signer.key_id
    assert [d.record["anchor"] for d in journal[:5]] == [r.anchor for r in outcome.records]
    result_entry = journal[5].record
    assert (result_entry["kind"], result_entry["stage_id"], result_entry["terminal_state"]) == ("browser", SESSION, "completed")
    # every declared size is the stored blob's length (what the verifier checks), and the run's total counts each once
    declared = [(e.record["screenshot_hash"], e.record["screenshot_size"]) for e in journal[:5]]
    declared += [(e.record["dom_digest"], e.record["dom_size"]) for e in journal[:5]]
    declared += [(o["content_hash"], o["size"]) for o in result_entry["observations"]]
    assert all(size == len(store.get(digest)) > 0 for digest, size in declared)
    assert scheduler.state.runs[RUN].evidence_bytes == sum(dict(declared).values())
    audit = [codec.decode(codec.decode(r.value or b"").record["payload"]) for r in scheduler.source.all("audit")]
    details = [a.record["computer_use"] for a in audit if a.schema.name == codec.AUDIT_ENTRY_V2]
    assert [d["anchor"] for d in details] == [r.anchor for r in outcome.records]


def test_the_session_document_names_head_count_anchors_and_action_log(
    keys: ProducerKeys, store: DirBlobStore, tmp_path: Path
) -> None:
    password = secret()
    publisher = RecordingPublisher(keys)
    outcome = make_session(keys, store, tmp_path, publisher).run(
        ScriptedAgent(flow(password)), FakeDriverFactory(FakeDriver(frames(6)))
    )
    document = parse_session_document(outcome.result.artifact)
    assert json.loads(outcome.result.artifact)["format"] == BROWSER_SESSION_FORMAT
    assert (document.session_id, document.run_id, document.action_count) == (SESSION, RUN, 5)
    assert document.head_anchor == outcome.head_anchor == document.anchors[-1]
    assert document.anchors == tuple(r.anchor for r in outcome.records)
    assert document.genesis == computer_use_genesis(RUN, SESSION)
    assert document.terminal_state is ComputerUseTerminalState.OK and document.fault is None and document.refusal is None
    log = parse_action_log(store.get(document.action_log))
    assert [a.record.anchor for a in log.actions] == list(document.anchors)
    kinds = {o.kind for o in outcome.result.observations}
    assert kinds == {"screenshot", "snapshot", "action_log"}
    hashes = {o.content_hash for o in outcome.result.observations}
    assert all(r.screenshot_hash in hashes and r.dom_digest in hashes for r in outcome.records)
    assert all(store.has(h) for h in hashes)


def test_lineage_entry_binds_the_action_and_verifies(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    publisher = RecordingPublisher(keys)
    outcome = make_session(keys, store, tmp_path, publisher).run(
        ScriptedAgent(flow(secret())), FakeDriverFactory(FakeDriver(frames(6)))
    )
    record = outcome.records[2]
    entry = json.loads(record.lineage.entry)
    assert entry["content_hash"] == record.anchor and entry["parent_hashes"] == [record.prev_anchor]
    assert (entry["run_id"], entry["session_id"], entry["action_index"], entry["worker_id"]) == (
        RUN,
        SESSION,
        2,
        "navigator@test",
    )
    assert entry["key_id"] == keys.signer.key_id and entry["hmac_key_id"] == keys.lineage.key_id
    assert entry["format"] == "bernstein.lineage-entry/v1" and entry["artefact_kind"] == "computer_use.action"
    assert entry["action"] == record.action.to_record()
    # the envelope is keyed with the producer's lineage key, the signature is the producer key's: no scheduler key
    assert record.lineage.hmac == lineage_hmac(keys.lineage.secret, record.lineage.entry)
    assert verify_signature(keys.signer.public_key_raw, record.lineage.signature, lineage_signing_input(record.lineage.entry))
    assert record.lineage_entry_hash == sha256_digest(record.lineage.entry)


def test_typed_values_never_leave_the_boundary(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    password = secret()
    publisher = RecordingPublisher(keys)
    outcome = make_session(keys, store, tmp_path, publisher).run(
        ScriptedAgent(flow(password)), FakeDriverFactory(FakeDriver(frames(6, password)))
    )
    needles = (password.encode(), b"Ada Lovelace")
    published = [value for _run, value in publisher.values()]
    blobs = [p.read_bytes() for p in (tmp_path / "cas").rglob("*") if p.is_file()]
    everything = published + blobs + [outcome.result.artifact] + [r.lineage.entry for r in outcome.records]
    assert blobs and all(needle not in data for needle in needles for data in everything)
    # the action carries the keyed digest; the snapshot shows the same digest where the field's value was
    digest = typed_value_digest(keys.redaction.secret, password)
    assert outcome.records[2].action.value_digest == digest
    # keyed with the redaction key only: not the lineage key (nor any key that leaves the host)
    assert digest != typed_value_digest(keys.lineage.secret, password)
    snapshot = store.get(outcome.records[3].dom_digest).decode()
    assert f'- textbox "Password": [redacted {digest}]' in snapshot


def test_same_inputs_give_the_same_anchors_and_entries(keys: ProducerKeys, tmp_path: Path) -> None:
    password = secret()
    runs = []
    for attempt in range(2):
        publisher = RecordingPublisher(keys)
        session = make_session(keys, DirBlobStore(tmp_path / f"cas{attempt}"), tmp_path / f"w{attempt}", publisher)
        runs.append(session.run(ScriptedAgent(flow(password)), FakeDriverFactory(FakeDriver(frames(6)))))
    assert [r.anchor for r in runs[0].records] == [r.anchor for r in runs[1].records]
    assert [r.lineage.entry for r in runs[0].records] == [r.lineage.entry for r in runs[1].records]
    assert [r.lineage.signature for r in runs[0].records] == [r.lineage.signature for r in runs[1].records]


def test_profile_is_isolated_under_the_worktree_and_removed(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    factory = FakeDriverFactory(FakeDriver(frames(2)))
    make_session(keys, store, tmp_path, RecordingPublisher(keys)).run(ScriptedAgent(flow(secret())[:1]), factory)
    expected = isolated_profile_dir(SESSION, worktree=tmp_path / "worktree", run_id=RUN)
    assert factory.launches == [expected]
    assert not expected.exists()


# ---------------------------------------------------------------------------
# terminal states: faults are anchored as the session's result, never free text
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "state", "activity", "reason"),
    [
        (ComputerUseDriverError("boom", fault=DriverFault.ACTION_FAILED), "driver_failure", "failed", "action_failed"),
        (
            ComputerUseDriverError("slow", terminal_state=ComputerUseTerminalState.TIMEOUT, fault=DriverFault.ACTION_TIMEOUT),
            "timeout",
            "timed_out",
            "action_timeout",
        ),
        (RuntimeError("a foreign library's error"), "driver_failure", "failed", "action_failed"),
    ],
)
def test_a_driver_fault_is_anchored_as_a_terminal_result(
    keys: ProducerKeys, store: DirBlobStore, tmp_path: Path, fault: Exception, state: str, activity: str, reason: str
) -> None:
    publisher = RecordingPublisher(keys)
    driver = FakeDriver(frames(6), faults={2: fault})
    outcome = make_session(keys, store, tmp_path, publisher).run(ScriptedAgent(flow(secret())), FakeDriverFactory(driver))
    assert (outcome.terminal_state.value, outcome.activity_terminal_state.value, outcome.reason_code) == (state, activity, reason)
    assert outcome.action_count == 3  # the failing action was decided and anchored before it was performed
    assert isinstance(outcome.error, ComputerUseDriverError)
    document = parse_session_document(outcome.result.artifact)
    assert document.fault == {"code": reason.upper(), "phase": "perform", "action_index": 2}
    assert driver.closed
    scheduler = InMemoryScheduler(keys)
    scheduler.feed_all(publisher)
    assert scheduler.refusals() == []


def test_a_launch_failure_is_recorded_with_no_actions(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    publisher = RecordingPublisher(keys)
    factory = FakeDriverFactory(
        FakeDriver(frames(1)), launch_error=ComputerUseDriverError("no chromium", fault=DriverFault.BROWSER_LAUNCH_FAILED)
    )
    outcome = make_session(keys, store, tmp_path, publisher).run(ScriptedAgent(flow(secret())), factory)
    assert (outcome.action_count, outcome.activity_terminal_state, outcome.reason_code) == (
        0,
        TerminalState.FAILED,
        "browser_launch_failed",
    )
    assert parse_session_document(outcome.result.artifact).head_anchor == computer_use_genesis(RUN, SESSION)
    scheduler = InMemoryScheduler(keys)
    scheduler.feed_all(publisher)
    assert scheduler.refusals() == []


def test_an_observe_fault_and_an_agent_failure_end_the_session(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    driver = FakeDriver(frames(3), observe_faults={1: ComputerUseDriverError("gone", fault=DriverFault.BROWSER_CLOSED)})
    outcome = make_session(keys, store, tmp_path, RecordingPublisher(keys)).run(
        ScriptedAgent(flow(secret())), FakeDriverFactory(driver)
    )
    assert (outcome.action_count, outcome.reason_code) == (1, "browser_closed")
    assert parse_session_document(outcome.result.artifact).fault == {
        "code": "BROWSER_CLOSED",
        "phase": "observe",
        "action_index": 1,
    }

    class Broken:
        def next_action(self, view: object) -> ProposedAction | None:
            raise KeyError("model output unparseable")

    outcome = make_session(keys, store, tmp_path, RecordingPublisher(keys), session_id="browser-1").run(
        Broken(), FakeDriverFactory(FakeDriver(frames(1)))
    )
    assert (outcome.terminal_state.value, outcome.reason_code) == ("driver_failure", "agent_failed")


def test_the_session_timeout_is_recorded_as_timed_out(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    # the clock is read for the deadline (0 -> 25), then before each observe, agent call and perform:
    # 10, 20, 30 for action 0; 40 > 25 before action 1
    ticks = iter(range(0, 1000, 10))
    session = make_session(keys, store, tmp_path, RecordingPublisher(keys), timeout=25.0, clock=lambda: float(next(ticks)))
    outcome = session.run(ScriptedAgent(flow(secret())), FakeDriverFactory(FakeDriver(frames(6))))
    assert (outcome.action_count, outcome.activity_terminal_state, outcome.reason_code) == (
        1,
        TerminalState.TIMED_OUT,
        "session_timeout",
    )


def test_an_agent_that_never_answers_is_stopped_at_the_session_timeout(
    keys: ProducerKeys, store: DirBlobStore, tmp_path: Path
) -> None:
    release = threading.Event()

    class Stuck(ScriptedAgent):
        def next_action(self, view: AgentView) -> ProposedAction | None:
            if view.index == 1:
                release.wait(30)  # bounded: released below
            return super().next_action(view)

    started = time.monotonic()
    try:
        # the session's own clock stands still, so only the agent's overrun (waited for in real time) can end
        # it: on a loaded machine action 0 alone may outlast a real 0.5 s deadline ("before action 1")
        outcome = make_session(keys, store, tmp_path, RecordingPublisher(keys), timeout=1.0, clock=lambda: 0.0).run(
            Stuck(flow(secret())), FakeDriverFactory(FakeDriver(frames(6)))
        )
    finally:
        release.set()
    assert time.monotonic() - started < 5
    assert (outcome.action_count, outcome.terminal_state, outcome.reason_code) == (
        1,
        ComputerUseTerminalState.TIMEOUT,
        "session_timeout",
    )
    assert "while the agent decided action 1" in (outcome.error.message if outcome.error else "")


def test_the_driver_is_told_the_time_left_and_its_timeout_past_the_deadline_is_the_sessions(
    keys: ProducerKeys, store: DirBlobStore, tmp_path: Path
) -> None:
    limits: list[float] = []

    class Limited(FakeDriver):
        def limit_time(self, seconds: float) -> None:
            limits.append(seconds)

    driver = Limited(
        frames(6),
        faults={
            1: ComputerUseDriverError(
                "Timeout 1ms exceeded.", terminal_state=ComputerUseTerminalState.TIMEOUT, fault=DriverFault.ACTION_TIMEOUT
            )
        },
    )
    ticks = iter(range(0, 1000, 10))
    session = make_session(keys, store, tmp_path, RecordingPublisher(keys), timeout=55.0, clock=lambda: float(next(ticks)))
    outcome = session.run(ScriptedAgent(flow(secret())), FakeDriverFactory(driver))
    # deadline 55; observe 10 (45 left), perform 30 (25 left); observe 40 (15), perform 60 (0.001): times out
    assert limits == [45.0, 25.0, 15.0, 0.001]
    assert (outcome.action_count, outcome.terminal_state, outcome.reason_code) == (
        2,
        ComputerUseTerminalState.TIMEOUT,
        "session_timeout",
    )


def test_action_budget_and_invalid_actions_are_refusals(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    outcome = make_session(keys, store, tmp_path, RecordingPublisher(keys), max_actions=2).run(
        ScriptedAgent(flow(secret())), FakeDriverFactory(FakeDriver(frames(6)))
    )
    assert (outcome.action_count, outcome.activity_terminal_state, outcome.reason_code) == (
        2,
        TerminalState.REFUSED,
        "action_limit_exceeded",
    )
    assert parse_session_document(outcome.result.artifact).refusal == {
        "code": "ACTION_LIMIT_EXCEEDED",
        "limit": 2,
        "at_action": 2,
    }

    bad = [ProposedAction("navigate", "http://site/"), ProposedAction("teleport", "#x")]
    outcome = make_session(keys, store, tmp_path, RecordingPublisher(keys), session_id="browser-1").run(
        ScriptedAgent(bad), FakeDriverFactory(FakeDriver(frames(3)))
    )
    assert (outcome.action_count, outcome.reason_code) == (1, "invalid_action")
    assert parse_session_document(outcome.result.artifact).refusal == {"code": "INVALID_ACTION", "field": "kind", "at_action": 1}


def test_a_finished_session_accepts_no_more_actions(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    session = make_session(keys, store, tmp_path, RecordingPublisher(keys))
    outcome = session.run(ScriptedAgent(flow(secret())[:1]), FakeDriverFactory(FakeDriver(frames(2))))
    assert session.finish() is outcome
    with pytest.raises(Exception, match="has ended"):
        session.record(session.observe(frames(1)[0]), ProposedAction("click", "#x"))


def test_a_selected_value_is_scrubbed_from_later_snapshots_like_a_typed_one(
    keys: ProducerKeys, store: DirBlobStore, tmp_path: Path
) -> None:
    answer = "maiden-name-" + secrets.token_hex(4)
    pages = [
        Frame(b"\x89PNG-select-0", '- combobox "Security question"\n'),
        Frame(b"\x89PNG-select-1", f'- heading "You chose {answer}"\n- option "{answer}" [selected]\n'),
    ]
    actions = [ProposedAction("select", "#question", answer)]
    outcome = make_session(keys, store, tmp_path, RecordingPublisher(keys)).run(
        ScriptedAgent(actions), FakeDriverFactory(FakeDriver(pages))
    )
    assert outcome.ok
    final = parse_session_document(outcome.result.artifact).final_observation
    assert final is not None
    snapshot = store.get(final.dom_digest).decode()
    marker = f"[redacted {typed_value_digest(keys.redaction.secret, answer)}]"
    assert answer not in snapshot and snapshot.count(marker) == 2


def test_one_session_one_producer(keys: ProducerKeys, store: DirBlobStore, tmp_path: Path) -> None:
    """Actions are signed by the session's producer key; its result must be published as that same producer."""
    other = init_producer_keys(tmp_path / "other-keys", "someone@else")
    with pytest.raises(ProducerIdMismatch, match="published as 'someone@else', but its actions are signed by producer"):
        make_session(keys, store, tmp_path, RecordingPublisher(other))
    with pytest.raises(ProducerIdMismatch, match="is not the name of the producer key"):
        ComputerUseSession(
            RUN, SESSION, keys=keys, store=store, publisher=RecordingPublisher(keys), worker_id="x@y", worktree=tmp_path
        )
