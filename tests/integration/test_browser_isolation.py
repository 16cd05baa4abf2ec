"""Isolation and terminal states with a real headless Chromium (in-memory scheduler, directory CAS)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from demo.site_server import serve
from producers.computer_use import (
    ComputerUseSession,
    ComputerUseTerminalState,
    ProposedAction,
    ScriptedAgent,
    SessionOutcome,
    isolated_profile_dir,
    parse_session_document,
)
from producers.computer_use.agents import load_flow
from producers.computer_use.fakes import InMemoryScheduler, RecordingPublisher
from producers.computer_use.playwright_driver import PlaywrightDriver
from producers.computer_use.profiles import prepare_profile
from producers.netpolicy import OriginPolicy
from schemas.records import TerminalState
from substrate.cas import DirBlobStore
from substrate.keys import InstallKeys, TrustedKeys, init_keys
from tests.integration.test_browser_kit import SIGNUP_FLOW, SITE, chromium_processes
from verifier.browser_replay import replay_run

pytestmark = pytest.mark.browser


@pytest.fixture
def site() -> object:
    with serve(SITE) as (url, _stop):
        yield url


@pytest.fixture
def keys(tmp_path: Path) -> InstallKeys:
    return init_keys(tmp_path / "keys")


@pytest.fixture(autouse=True)
def no_chromium_left(tmp_path: Path) -> object:
    yield
    assert chromium_processes(str(tmp_path)) == []


def local(url: str) -> OriginPolicy:
    """The local test server's exact origin, allowed explicitly (it is on loopback)."""
    return OriginPolicy.from_urls(url, allow=[url])


def test_two_concurrent_sessions_share_no_cookies(site: str, tmp_path: Path) -> None:
    # ids that sanitise alike ("iso.a" and "iso_a") still get disjoint profiles
    profile_a = prepare_profile("iso.a", worktree=tmp_path)
    profile_b = prepare_profile("iso_a", worktree=tmp_path)
    assert profile_a != profile_b and profile_a.name.split("-")[0] == profile_b.name.split("-")[0] == "iso_a"
    with sync_playwright() as playwright:
        a = PlaywrightDriver.launch(profile_a, policy=local(site), playwright=playwright)
        b = PlaywrightDriver.launch(profile_b, policy=local(site), playwright=playwright)
        try:
            assert len(chromium_processes(str(profile_a))) >= 1 and len(chromium_processes(str(profile_b))) >= 1  # both running
            for action in load_flow(SIGNUP_FLOW, base_url=site, env={"BERNSTEIN_SIGNUP_PASSWORD": "pw-isolation-1"}):
                a.perform(action)
            b.perform(ProposedAction("navigate", f"{site}/signup.html"))
            assert a.page.url.endswith("/welcome.html")
            assert [c["name"] for c in a.context.cookies()] == ["quill_member"]
            assert b.context.cookies() == []
            assert b.page.evaluate("document.cookie") == ""
            assert b.page.evaluate("sessionStorage.getItem('quill_member')") is None
            # and the other way round: what B sets, A does not see
            b.page.evaluate("document.cookie = 'only_b=1; path=/'")
            assert "only_b" not in a.page.evaluate("document.cookie")
        finally:
            a.close()
            b.close()


def test_two_full_sessions_run_at_once_in_threads(site: str, tmp_path: Path, keys: InstallKeys) -> None:
    store = DirBlobStore(tmp_path / "cas")
    outcomes: dict[str, SessionOutcome] = {}
    publishers = {name: RecordingPublisher() for name in ("browser-a", "browser-b")}
    barrier = threading.Barrier(2, timeout=60)

    class Synchronised(ScriptedAgent):
        def next_action(self, view):  # type: ignore[no-untyped-def]
            if view.index == 1:
                barrier.wait()  # both browsers are up and on the signup page
            return super().next_action(view)

    def work(session_id: str, password: str) -> None:
        actions = load_flow(SIGNUP_FLOW, base_url=site, env={"BERNSTEIN_SIGNUP_PASSWORD": password})
        session = ComputerUseSession(
            "run-iso",
            session_id,
            keys=keys,
            store=store,
            publisher=publishers[session_id],
            worker_id="navigator@test",
            worktree=tmp_path / "worktree",
            keep_profile=True,
        )
        outcomes[session_id] = session.run(Synchronised(actions), PlaywrightDriver.factory(policy=local(site)))

    threads = [threading.Thread(target=work, args=(name, f"pw-{name}-0123")) for name in publishers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(outcomes[name].ok for name in publishers), {k: v.error for k, v in outcomes.items()}
    profiles = [isolated_profile_dir(name, worktree=tmp_path / "worktree", run_id="run-iso") for name in publishers]
    assert profiles[0] != profiles[1] and all(p.is_dir() for p in profiles)
    scheduler = InMemoryScheduler(keys)
    for name in publishers:
        scheduler.feed_all(publishers[name])
    assert scheduler.refusals() == []
    for name in publishers:
        assert replay_run(
            "run-iso", source=scheduler.source, cas=store, trusted=TrustedKeys.from_install(keys), session_id=name
        ).ok


def test_a_missing_selector_is_anchored_as_a_timed_out_result(site: str, tmp_path: Path, keys: InstallKeys) -> None:
    store = DirBlobStore(tmp_path / "cas")
    publisher = RecordingPublisher()
    actions = [ProposedAction("navigate", f"{site}/signup.html"), ProposedAction("click", "#does-not-exist")]
    session = ComputerUseSession(
        "run-fault", "browser-0", keys=keys, store=store, publisher=publisher, worker_id="navigator@test", worktree=tmp_path / "w"
    )
    outcome = session.run(ScriptedAgent(actions), PlaywrightDriver.factory(policy=local(site), action_timeout_ms=400))
    assert outcome.terminal_state is ComputerUseTerminalState.TIMEOUT
    assert (outcome.activity_terminal_state, outcome.reason_code, outcome.action_count) == (
        TerminalState.TIMED_OUT,
        "action_timeout",
        2,
    )
    assert parse_session_document(outcome.result.artifact).fault == {
        "code": "ACTION_TIMEOUT",
        "phase": "perform",
        "action_index": 1,
    }
    scheduler = InMemoryScheduler(keys)
    scheduler.feed_all(publisher)
    assert scheduler.refusals() == []
    assert replay_run("run-fault", source=scheduler.source, cas=store, trusted=TrustedKeys.from_install(keys)).ok


def test_an_unreachable_page_and_a_missing_browser_are_driver_failures(tmp_path: Path, keys: InstallKeys) -> None:
    store = DirBlobStore(tmp_path / "cas")
    session = ComputerUseSession(
        "run-fault",
        "browser-1",
        keys=keys,
        store=store,
        publisher=RecordingPublisher(),
        worker_id="navigator@test",
        worktree=tmp_path / "w",
    )
    closed_port = local("http://127.0.0.1:9")  # allowed, but nothing listens there
    outcome = session.run(
        ScriptedAgent([ProposedAction("navigate", "http://127.0.0.1:9/")]), PlaywrightDriver.factory(policy=closed_port)
    )
    assert (outcome.terminal_state, outcome.reason_code) == (ComputerUseTerminalState.DRIVER_FAILURE, "navigation_failed")

    session = ComputerUseSession(
        "run-fault",
        "browser-2",
        keys=keys,
        store=store,
        publisher=RecordingPublisher(),
        worker_id="navigator@test",
        worktree=tmp_path / "w",
    )
    outcome = session.run(
        ScriptedAgent([ProposedAction("navigate", "http://127.0.0.1:9/")]),
        PlaywrightDriver.factory(policy=closed_port, executable_path="/nonexistent/chromium"),
    )
    assert (outcome.terminal_state, outcome.reason_code, outcome.action_count) == (
        ComputerUseTerminalState.DRIVER_FAILURE,
        "browser_launch_failed",
        0,
    )


def test_a_long_wait_is_cut_at_the_session_timeout(site: str, tmp_path: Path, keys: InstallKeys) -> None:
    """The session's time left bounds the driver's own calls: a 60 s wait ends at the 3 s session timeout."""
    session = ComputerUseSession(
        "run-fault",
        "browser-wait",
        keys=keys,
        store=DirBlobStore(tmp_path / "cas"),
        publisher=RecordingPublisher(),
        worker_id="navigator@test",
        worktree=tmp_path / "w",
        timeout=3.0,
    )
    actions = [ProposedAction("navigate", f"{site}/signup.html"), ProposedAction("wait", value="60000")]
    started = time.monotonic()
    outcome = session.run(ScriptedAgent(actions), PlaywrightDriver.factory(policy=local(site)))
    assert time.monotonic() - started < 20  # launch included; without the bound the wait alone is 60 s
    assert (outcome.terminal_state, outcome.reason_code, outcome.action_count) == (
        ComputerUseTerminalState.TIMEOUT,
        "session_timeout",
        2,
    )
