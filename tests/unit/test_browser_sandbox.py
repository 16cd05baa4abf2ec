"""How the Playwright driver isolates Chromium from the worker: the user, the environment, the sandbox mode (no browser here)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError

from bernstein.producers.computer_use.playwright_driver import (
    BrowserUser,
    PlaywrightDriver,
    SandboxMode,
    _sandbox_failure,
    browser_env,
    browser_user,
    reachable_by,
    sandbox_mode,
)
from bernstein.producers.computer_use.terminal import ComputerUseDriverError, DriverFault
from bernstein.producers.netpolicy import OriginPolicy

NOBODY = pwd.getpwnam("nobody")


def test_the_sandbox_mode_is_auto_unless_the_operator_says_1_or_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", raising=False)
    assert sandbox_mode() is SandboxMode.AUTO
    for value, mode in (("", SandboxMode.AUTO), ("1", SandboxMode.OFF), ("0", SandboxMode.REQUIRED), (" 1 ", SandboxMode.OFF)):
        monkeypatch.setenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", value)
        assert sandbox_mode() is mode
    monkeypatch.setenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", "yes")
    with pytest.raises(ComputerUseDriverError) as bad:
        sandbox_mode()
    assert bad.value.fault == DriverFault.BROWSER_LAUNCH_FAILED
    assert bad.value.message == "BERNSTEIN_CHROMIUM_NO_SANDBOX must be 1 (no sandbox) or 0 (sandbox required), not 'yes'"


def test_as_root_the_browser_drops_to_nobody_or_the_configured_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERNSTEIN_BROWSER_USER", raising=False)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert browser_user() is None  # not root: Chromium runs as the worker, with its sandbox
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert browser_user() == BrowserUser("nobody", NOBODY.pw_uid, NOBODY.pw_gid)
    monkeypatch.setenv("BERNSTEIN_BROWSER_USER", str(NOBODY.pw_uid))
    assert browser_user() == BrowserUser("nobody", NOBODY.pw_uid, NOBODY.pw_gid)
    daemon = pwd.getpwnam("daemon")
    monkeypatch.setenv("BERNSTEIN_BROWSER_USER", "daemon")
    assert browser_user() == BrowserUser("daemon", daemon.pw_uid, daemon.pw_gid)
    monkeypatch.setenv("BERNSTEIN_BROWSER_USER", "root")
    assert browser_user() is None  # the operator's explicit choice (then without a sandbox)
    monkeypatch.setenv("BERNSTEIN_BROWSER_USER", "no-such-account-bernstein")
    with pytest.raises(ComputerUseDriverError) as missing:
        browser_user()
    assert missing.value.fault == DriverFault.BROWSER_LAUNCH_FAILED
    assert "'no-such-account-bernstein' is not an account on this host" in missing.value.message


def test_the_browser_inherits_no_credential_from_the_worker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "BERNSTEIN_S3_SECRET_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "BERNSTEIN_KAFKA_CONFIG_FILE",
        "BERNSTEIN_KEYS_DIR",
        "https_proxy",
    ):
        monkeypatch.setenv(name, "secret-value")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("HOME", "/root")
    monkeypatch.setenv("TMPDIR", "/root/tmp")
    same_user = browser_env(None)
    assert "secret-value" not in same_user.values()
    assert (same_user["LANG"], same_user["LC_TIME"], same_user["HOME"], same_user["TMPDIR"]) == (
        "C.UTF-8",
        "C",
        "/root",
        "/root/tmp",
    )
    dropped = browser_env(tmp_path / "home")
    assert "secret-value" not in dropped.values() and "TMPDIR" not in dropped
    assert (dropped["HOME"], dropped["XDG_CONFIG_HOME"]) == (str(tmp_path / "home"), str(tmp_path / "home" / ".config"))
    monkeypatch.delenv("PATH")
    assert browser_env(None)["PATH"] == "/usr/local/bin:/usr/bin:/bin"


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory under the system temp dir that anyone may traverse (pytest's tmp_path is its owner's only)."""
    path = Path(tempfile.mkdtemp(prefix="bernstein-unit-"))
    os.chmod(path, 0o755)  # noqa: S103 - the point of the fixture
    yield path
    shutil.rmtree(path)


def test_reachability_follows_the_permission_bits_of_every_parent(open_dir: Path, tmp_path: Path) -> None:
    user = BrowserUser("nobody", NOBODY.pw_uid, NOBODY.pw_gid)
    (open_dir / "a" / "b").mkdir(parents=True)
    target = open_dir / "a" / "b" / "profile"
    os.chmod(open_dir / "a", 0o700)
    assert not reachable_by(target, user)
    os.chmod(open_dir / "a", 0o711)  # traversable, not listable: enough
    os.chmod(open_dir / "a" / "b", 0o755)
    assert reachable_by(target, user)
    os.chmod(open_dir / "a" / "b", 0o750)  # the group's bit, and nobody is not in the owner's group
    assert not reachable_by(target, user)
    if os.geteuid() == 0:
        os.chown(open_dir / "a" / "b", 0, NOBODY.pw_gid)
        assert reachable_by(target, user)  # now its group may
        os.chown(open_dir / "a" / "b", NOBODY.pw_uid, 0)
        os.chmod(open_dir / "a" / "b", 0o100)
        assert reachable_by(target, user)  # its owner may
    assert not reachable_by(tmp_path / "x", user) or os.stat(tmp_path.parent).st_mode & stat.S_IXOTH


def test_a_sandbox_failure_is_told_apart_and_named_with_chromium_s_own_words() -> None:
    log = (
        "BrowserType.launch_persistent_context: Target page, context or browser has been closed\n"
        "Browser logs:\nChromium sandboxing failed!\n================================\n"
        "Call log:\n  - [pid=1][err] /usr/bin/chromium: 9: [: 1: unexpected operator\n"
        "  - [pid=1][err] [1:1:1201/171340.578104:ERROR:content/browser/zygote_host/zygote_host_impl_linux.cc:103] "
        "Running as root without --no-sandbox is not supported. See https://crbug.com/638180.\n"
    )
    assert (
        _sandbox_failure(PlaywrightError(log))
        == "Running as root without --no-sandbox is not supported. See https://crbug.com/638180."
    )
    userns = "[pid=2][err] [2:2:1201/171325.288134:ERROR:content/browser/zygote_host/zygote_host_impl_linux.cc:130] No usable sandbox! If this is a Debian system, please install the chromium-sandbox package"
    assert _sandbox_failure(PlaywrightError("Chromium sandboxing failed!\n" + userns)) == (
        "No usable sandbox! If this is a Debian system, please install the chromium-sandbox package"
    )
    assert _sandbox_failure(PlaywrightError("Chromium sandboxing failed!")) == "Chromium sandboxing failed"
    assert _sandbox_failure(PlaywrightError("Failed to launch: spawn /nonexistent/chromium ENOENT")) is None


def test_a_required_sandbox_refuses_a_root_browser_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setenv("BERNSTEIN_BROWSER_USER", "root")
    monkeypatch.setenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", "0")
    policy = OriginPolicy.from_urls("http://127.0.0.1:9/", allow=["http://127.0.0.1:9/"])
    with pytest.raises(ComputerUseDriverError) as refused:
        PlaywrightDriver.launch(tmp_path / "profile", policy=policy, executable_path="/nonexistent/chromium")
    assert refused.value.fault == DriverFault.BROWSER_LAUNCH_FAILED
    assert refused.value.message == (
        "Chromium's sandbox is required (BERNSTEIN_CHROMIUM_NO_SANDBOX=0) but it is off: "
        "the browser runs as root (BERNSTEIN_BROWSER_USER names root)"
    )
    assert not (tmp_path / "profile").exists()
