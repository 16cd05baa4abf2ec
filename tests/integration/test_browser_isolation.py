"""Isolation and terminal states with a real headless Chromium (in-memory scheduler, directory CAS).

Also what the browser process itself can reach: as root, Chromium runs as ``nobody`` with its
sandbox on, and with exactly its credentials no key file can be read (checked at the OS level).
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from bernstein.producers.computer_use import (
    ComputerUseSession,
    ComputerUseTerminalState,
    ProposedAction,
    ScriptedAgent,
    SessionOutcome,
    isolated_profile_dir,
    parse_session_document,
)
from bernstein.producers.computer_use.agents import load_flow
from bernstein.producers.computer_use.playwright_driver import BrowserUser, Isolation, PlaywrightDriver, _Staging
from bernstein.producers.computer_use.profiles import prepare_profile
from bernstein.producers.computer_use.terminal import ComputerUseDriverError, DriverFault
from bernstein.producers.netpolicy import OriginPolicy
from bernstein.schemas.records import TerminalState
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import ProducerKeys, init_keys, init_producer_keys
from bernstein.verifier.browser_replay import replay_run
from demo.site_server import serve
from tests.support.browser_fakes import InMemoryScheduler, RecordingPublisher
from tests.support.browser_site import SIGNUP_FLOW, SITE, chromium_processes

pytestmark = pytest.mark.browser


@pytest.fixture
def site() -> object:
    with serve(SITE) as (url, _stop):
        yield url


@pytest.fixture
def keys(tmp_path: Path) -> ProducerKeys:
    """This worker's own producer keys (the only keys a browser worker holds)."""
    return init_producer_keys(tmp_path / "producer-keys", "navigator@test")


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


def test_two_full_sessions_run_at_once_in_threads(site: str, tmp_path: Path, keys: ProducerKeys) -> None:
    store = DirBlobStore(tmp_path / "cas")
    outcomes: dict[str, SessionOutcome] = {}
    publishers = {name: RecordingPublisher(keys) for name in ("browser-a", "browser-b")}
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
        assert replay_run("run-iso", source=scheduler.source, cas=store, trusted=scheduler.trusted(), session_id=name).ok


def test_a_missing_selector_is_anchored_as_a_timed_out_result(site: str, tmp_path: Path, keys: ProducerKeys) -> None:
    store = DirBlobStore(tmp_path / "cas")
    publisher = RecordingPublisher(keys)
    actions = [ProposedAction("navigate", f"{site}/signup.html"), ProposedAction("click", "#does-not-exist")]
    session = ComputerUseSession("run-fault", "browser-0", keys=keys, store=store, publisher=publisher, worktree=tmp_path / "w")
    outcome = session.run(ScriptedAgent(actions), PlaywrightDriver.factory(policy=local(site), action_timeout_ms=1500))
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
    assert replay_run("run-fault", source=scheduler.source, cas=store, trusted=scheduler.trusted()).ok


def test_an_unreachable_page_and_a_missing_browser_are_driver_failures(tmp_path: Path, keys: ProducerKeys) -> None:
    store = DirBlobStore(tmp_path / "cas")
    session = ComputerUseSession(
        "run-fault",
        "browser-1",
        keys=keys,
        store=store,
        publisher=RecordingPublisher(keys),
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
        publisher=RecordingPublisher(keys),
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


def test_a_long_wait_is_cut_at_the_session_timeout(site: str, tmp_path: Path, keys: ProducerKeys) -> None:
    """The session's time left bounds the driver's own calls: a 60 s wait ends at the 3 s session timeout."""
    session = ComputerUseSession(
        "run-fault",
        "browser-wait",
        keys=keys,
        store=DirBlobStore(tmp_path / "cas"),
        publisher=RecordingPublisher(keys),
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


# -- what the browser process can reach ------------------------------------------------

ROOT = os.geteuid() == 0
NO_USERNS = r'''#!/usr/bin/python3
"""Chromium in a user namespace that may create no further one: its namespace sandbox cannot start."""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
    sys.exit("unshare(CLONE_NEWUSER) failed")
for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
    with open(f"/proc/self/{name}", "w") as f:
        f.write(text)
with open("/proc/sys/user/max_user_namespaces", "w") as f:
    f.write("0")
os.execv("/usr/bin/chromium", ["/usr/bin/chromium", *sys.argv[1:]])
'''


def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def browser_and_renderers(profile: Path) -> tuple[psutil.Process, list[psutil.Process]]:
    """The session's Chromium browser process (found by its profile) and its renderer processes."""
    browsers = [p for p in chromium_processes(str(profile)) if not any(a.startswith("--type=") for a in p.cmdline())]
    assert len(browsers) == 1, browsers
    children = browsers[0].children(recursive=True)
    renderers = [p for p in children if "--type=renderer" in p.cmdline()]
    return browsers[0], renderers


def as_user(uid: int, gid: int, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with exactly the browser's credentials (the user, its group, no supplementary groups)."""
    drop = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    return subprocess.run([*drop, *argv], capture_output=True, text=True, timeout=30, check=False)


def world_traversable_dir() -> Path:
    """A fresh directory under the system temp dir that any user may traverse (pytest's tmp_path is root's only)."""
    path = Path(tempfile.mkdtemp(prefix="bernstein-test-"))
    os.chmod(path, 0o755)  # noqa: S103 - the browser user must reach the profile below it
    return path


@pytest.mark.skipif(not ROOT, reason="the privilege drop applies when the worker runs as root (CI does)")
def test_as_root_chromium_runs_sandboxed_as_nobody_and_cannot_read_any_key(
    site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", raising=False)
    monkeypatch.delenv("BERNSTEIN_BROWSER_USER", raising=False)
    monkeypatch.setenv("BERNSTEIN_S3_SECRET_KEY", "worker-secret-not-for-the-browser")
    scheduler_keys = init_keys(tmp_path / "keys")
    producer_keys = init_producer_keys(tmp_path / "producer-keys", "research-worker")
    key_files = sorted(p for d in (scheduler_keys.directory, producer_keys.directory) for p in d.rglob("*") if p.is_file())
    assert len(key_files) >= 4
    profile = prepare_profile("sandboxed", worktree=tmp_path)
    driver = PlaywrightDriver.launch(profile, policy=local(site))
    try:
        driver.perform(ProposedAction("navigate", f"{site}/signup.html"))
        assert driver.page.url == f"{site}/signup.html"
        nobody = pwd.getpwnam("nobody")
        assert driver.isolation == Isolation(sandbox=True, user=BrowserUser("nobody", nobody.pw_uid, nobody.pw_gid), reason=None)
        browser, renderers = browser_and_renderers(profile)
        status = proc_status(browser.pid)
        uid, gid = nobody.pw_uid, nobody.pw_gid
        assert status["Uid"].split() == [str(uid)] * 4 and status["Gid"].split() == [str(gid)] * 4
        assert uid != 0 and all(uid != d.stat().st_uid for d in (scheduler_keys.directory, producer_keys.directory))
        assert status["Groups"] == "" and status["NoNewPrivs"] == "1"
        assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0000000000000000"
        # the sandbox is on: no --no-sandbox, and every renderer is in its own user, PID and network namespace under seccomp-bpf
        assert "--no-sandbox" not in browser.cmdline()
        assert renderers, [p.cmdline()[:3] for p in browser.children(recursive=True)]
        own = {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in ("user", "pid", "net")}
        for renderer in renderers:
            fields = proc_status(renderer.pid)
            assert (fields["Seccomp"], fields["NoNewPrivs"], fields["Uid"].split()[0]) == ("2", "1", str(uid))
            assert all(os.readlink(f"/proc/{renderer.pid}/ns/{ns}") != own[ns] for ns in own), renderer.pid
        # the browser inherits no credential from the worker's environment; HOME is a private directory of its own
        environ = dict(e.split("=", 1) for e in Path(f"/proc/{browser.pid}/environ").read_text().split("\0") if "=" in e)
        assert "BERNSTEIN_S3_SECRET_KEY" not in environ and "worker-secret" not in " ".join(environ.values())
        home = Path(environ["HOME"])
        assert home.name == "home" and home.stat().st_uid == uid and stat.S_IMODE(home.stat().st_mode) == 0o700
        # pytest's tmp_path is root's (0700): the profile Chromium uses is a private one, owned by nobody
        data_dir = Path(next(a for a in browser.cmdline() if a.startswith("--user-data-dir=")).split("=", 1)[1])
        assert data_dir == home / "profile" and data_dir.stat().st_uid == uid
        assert f"--bernstein-session-profile={profile}" in browser.cmdline()
        # at the OS level, with exactly the browser's credentials: no key file, no key directory
        for path in key_files:
            denied = as_user(uid, gid, "cat", str(path))
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, path
            assert os.access(path, os.R_OK)  # the worker (root) itself can
        for directory in (scheduler_keys.directory, producer_keys.directory):
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
            assert as_user(uid, gid, "ls", str(directory)).returncode != 0
        assert as_user(uid, gid, "cat", "/etc/hostname").returncode == 0  # the check itself can succeed
        assert as_user(uid, gid, "ls", str(data_dir)).returncode == 0  # and the browser does own its profile
        # and Chromium itself, with the origin policy's routes taken away (as if a bug let a file: URL through):
        # a world-readable file renders, no key file does (run as root, the same navigation read the key)
        driver.context.unroute_all(behavior="wait")
        readable = world_traversable_dir()
        try:
            (readable / "open.txt").write_text("anyone may read this")
            os.chmod(readable / "open.txt", 0o644)
            driver.page.goto(f"file://{readable / 'open.txt'}")
            assert driver.page.aria_snapshot() == "- text: anyone may read this"
        finally:
            shutil.rmtree(readable)
        for path in key_files:
            page = driver.context.new_page()
            with pytest.raises(PlaywrightError, match="net::ERR_FILE_NOT_FOUND"):
                page.goto(f"file://{path}")
            page.close()
        staging = home.parent
    finally:
        driver.close()
    assert not staging.exists()  # the private HOME and profile are removed with the browser


@pytest.mark.skipif(not ROOT, reason="the privilege drop applies when the worker runs as root")
def test_a_profile_the_browser_user_can_reach_is_used_in_place_and_nothing_else_is_handed_over(site: str) -> None:
    worktree = world_traversable_dir()
    nobody = pwd.getpwnam("nobody").pw_uid
    try:
        profile = prepare_profile("in-place", worktree=worktree)
        driver = PlaywrightDriver.launch(profile, policy=local(site))
        try:
            driver.perform(ProposedAction("navigate", f"{site}/signup.html"))
            browser, _ = browser_and_renderers(profile)
            assert f"--user-data-dir={profile}" in browser.cmdline()
            assert profile.stat().st_uid == nobody and (profile / "Default").stat().st_uid == nobody  # Chromium's own files
        finally:
            driver.close()
        # a profile holding a file that is not the browser user's is never chowned: Chromium gets a private one
        planted = prepare_profile("planted", worktree=worktree)
        (planted / "Local State").write_text("{}")
        driver = PlaywrightDriver.launch(planted, policy=local(site))
        try:
            browser, _ = browser_and_renderers(planted)
            assert f"--user-data-dir={planted}" not in browser.cmdline()
            assert f"--bernstein-session-profile={planted}" in browser.cmdline()
            assert (planted.stat().st_uid, (planted / "Local State").stat().st_uid) == (0, 0)
        finally:
            driver.close()
    finally:
        shutil.rmtree(worktree)


@pytest.mark.skipif(not ROOT, reason="staging directories exist when the worker runs as root")
def test_a_staging_directory_left_by_a_killed_worker_is_swept_and_a_live_one_is_not(site: str, tmp_path: Path) -> None:
    base = Path(tempfile.gettempdir())
    stale = Path(tempfile.mkdtemp(prefix="bernstein-browser-killed-", dir=base))
    (stale / "lock").write_text("")
    (stale / "home").mkdir()
    (stale / "home" / "Cookies").write_text("session=1")
    unlocked_elsewhere = Path(tempfile.mkdtemp(prefix="bernstein-browser-nolock-", dir=base))  # not ours: no lock file
    with sync_playwright() as playwright:
        first = PlaywrightDriver.launch(prepare_profile("live", worktree=tmp_path), policy=local(site), playwright=playwright)
        try:
            live = first._staging.root if first._staging is not None else None
            second = PlaywrightDriver.launch(
                prepare_profile("later", worktree=tmp_path), policy=local(site), playwright=playwright
            )
            second.close()
            assert not stale.exists()
            assert unlocked_elsewhere.exists()
            assert live is None or live.exists()  # the live browser's directory survives another session's sweep
            first.perform(ProposedAction("navigate", f"{site}/signup.html"))  # and its browser still works
        finally:
            first.close()
            shutil.rmtree(unlocked_elsewhere, ignore_errors=True)
        shutil.rmtree(stale, ignore_errors=True)


def test_without_user_namespaces_the_sandbox_falls_back_with_chromium_s_reason(
    site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Where Chromium cannot start its sandbox: =0 refuses to launch, by default it runs with --no-sandbox and says why."""
    bin_dir = world_traversable_dir()
    try:
        fake = bin_dir / "chromium-no-userns"
        fake.write_text(NO_USERNS)
        fake.chmod(0o755)
        monkeypatch.delenv("BERNSTEIN_BROWSER_USER", raising=False)
        monkeypatch.setenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", "0")
        with pytest.raises(ComputerUseDriverError) as refused:
            PlaywrightDriver.launch(prepare_profile("required", worktree=tmp_path), policy=local(site), executable_path=str(fake))
        assert refused.value.fault == DriverFault.BROWSER_LAUNCH_FAILED
        assert "BERNSTEIN_CHROMIUM_NO_SANDBOX=0 requires it: No usable sandbox!" in refused.value.message

        monkeypatch.delenv("BERNSTEIN_CHROMIUM_NO_SANDBOX")
        profile = prepare_profile("fallback", worktree=tmp_path)
        with caplog.at_level(logging.WARNING, logger="bernstein.browser"):
            driver = PlaywrightDriver.launch(profile, policy=local(site), executable_path=str(fake))
        try:
            driver.perform(ProposedAction("navigate", f"{site}/signup.html"))
            assert driver.isolation.sandbox is False
            assert (driver.isolation.reason or "").startswith("No usable sandbox!")
            assert [r.getMessage().split(": ", 1)[0] for r in caplog.records] == [
                "Chromium cannot start its sandbox, running it with --no-sandbox as "
                + ("nobody" if ROOT else "the worker's user")
            ]
            assert "No usable sandbox!" in caplog.records[0].getMessage()
            browser, _ = browser_and_renderers(profile)
            assert "--no-sandbox" in browser.cmdline()
            expected_uid = pwd.getpwnam("nobody").pw_uid if ROOT else os.geteuid()
            assert proc_status(browser.pid)["Uid"].split()[0] == str(expected_uid)  # still not the worker when it is root
        finally:
            driver.close()
        # the next launch on this Chromium goes straight to --no-sandbox (one failing attempt per worker, not per session)
        caplog.clear()
        again = PlaywrightDriver.launch(
            prepare_profile("again", worktree=tmp_path), policy=local(site), executable_path=str(fake)
        )
        try:
            assert again.isolation == driver.isolation and caplog.records == []
        finally:
            again.close()
    finally:
        shutil.rmtree(bin_dir)


def test_the_operator_can_turn_the_sandbox_off_and_the_browser_still_drops_root(
    site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", "1")
    profile = prepare_profile("forced", worktree=tmp_path)
    driver = PlaywrightDriver.launch(profile, policy=local(site))
    try:
        assert (driver.isolation.sandbox, driver.isolation.reason) == (False, "BERNSTEIN_CHROMIUM_NO_SANDBOX=1")
        browser, _ = browser_and_renderers(profile)
        assert "--no-sandbox" in browser.cmdline()
        assert proc_status(browser.pid)["Uid"].split()[0] == str(pwd.getpwnam("nobody").pw_uid if ROOT else os.geteuid())
    finally:
        driver.close()


def set_up_at_once(base: Path, user: BrowserUser, count: int) -> tuple[list[_Staging], list[BaseException]]:
    """``count`` staging directories set up by as many threads released together."""
    stagings: list[_Staging] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(count, timeout=30)

    def set_up(index: int) -> None:
        barrier.wait()
        try:
            stagings.append(_Staging(base / f"p{index}", user, "/usr/bin/chromium"))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted by the caller
            errors.append(exc)

    threads = [threading.Thread(target=set_up, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return stagings, errors


@pytest.mark.skipif(not ROOT, reason="staging directories exist when the worker runs as root")
def test_concurrent_launches_never_sweep_each_other_s_staging_directory(tmp_path: Path) -> None:
    """A launch's sweep runs while other sessions of the same worker set theirs up (threads, one process).

    Before the lock was taken before being named, this lost a directory being set up in most rounds.
    """
    nobody = pwd.getpwnam("nobody")
    user = BrowserUser("nobody", nobody.pw_uid, nobody.pw_gid)
    for attempt in range(10):
        stagings, errors = set_up_at_once(tmp_path / str(attempt), user, 8)
        try:
            assert errors == [] and len(stagings) == 8
            assert all(s.launcher.is_file() and s.home.is_dir() for s in stagings)
        finally:
            for staging in stagings:
                staging.remove()
