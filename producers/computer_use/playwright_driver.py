"""The concrete browser driver: Playwright's sync API driving Debian's Chromium.

The only module of the modality that imports a browser library. It launches
``/usr/bin/chromium`` (``$BERNSTEIN_CHROMIUM`` overrides) through
``executable_path`` -- Playwright's own browser download is never used -- as
a persistent context on the session's isolated profile directory, so two
sessions never share cookies or storage.

Every Playwright exception is translated here into ``ComputerUseDriverError``
with its terminal state: Playwright timeouts -> ``timeout``
(``ACTION_TIMEOUT``), a closed browser -> ``driver_failure``
(``BROWSER_CLOSED``), failed navigations -> ``NAVIGATION_FAILED``, anything
else -> ``ACTION_FAILED``; launch problems -> ``BROWSER_LAUNCH_FAILED``.
Messages keep only Playwright's first line, with the action's raw value
scrubbed, so a typed secret cannot reach a log through an error.

Where the browser may go is the session's ``OriginPolicy`` (``producers.
netpolicy``), enforced twice, below the agent:

* Chromium's own resolver is given ``--host-resolver-rules`` that map each
  allowed origin (host *and* port) to the address vetted at launch and
  every other host, IP literals included, to "not found": no connection to
  anything else can even start, whatever asks for it (a redirect hop, a
  subresource, ``window.location``, a prefetch), and an allowed host name
  cannot be rebound to another address by DNS;
* every request and WebSocket goes through ``context.route`` /
  ``route_web_socket``, which aborts (``blockedbyclient``) anything whose
  scheme or origin the policy refuses before it is sent; service workers
  are blocked so none can bypass the routes. Redirect hops are not routed
  by Playwright, so they are seen through the ``request`` event (and were
  already stopped by the resolver rules).

Every refused request is kept in ``blocked``. When an action led the page's
main frame to a refused URL (a redirect, a script's navigation), ``perform``
raises ``NavigationRefused`` (the session ends ``refused``); a refused
subresource only fails to load. A ``navigate`` to a refused URL is refused
before ``goto`` (the session's boundary refuses it even earlier).

Chromium's sandbox (its seccomp-bpf filter and the namespace sandbox that
puts every renderer in its own user, PID and network namespace) is on
wherever the platform allows (``launch_persistent_context(chromium_sandbox=
True)``: Playwright itself would pass ``--no-sandbox`` by default). Chromium
refuses its sandbox as root ("Running as root without --no-sandbox is not
supported"), so a worker running as root never runs Chromium as root: the
browser is started through a small root-owned wrapper that drops to an
unprivileged user (``$BERNSTEIN_BROWSER_USER``, default ``nobody``) with
``setpriv`` (util-linux): no supplementary groups, no capabilities,
``no_new_privs``. Playwright talks to Chromium over inherited pipes, which
survive the switch. The browser's HOME is a fresh private directory owned
by that user, its environment is an allow-list (no credentials inherited),
and its profile is the session's profile directory (handed to that user)
when the user can reach it and it holds only that user's files, else a
private one beside HOME. The staging directory goes with the browser; one
whose worker died (its lock is free) is swept by the next launch. Only when
Chromium cannot start its sandbox (no user namespaces, no setuid helper)
does the driver fall back to ``--no-sandbox``, logging Chromium's own reason
on the ``bernstein.browser`` logger; ``BERNSTEIN_CHROMIUM_NO_SANDBOX=1``
turns it off explicitly and ``=0`` forbids the fallback. ``driver.isolation``
tells which happened.

Screenshots are of the viewport, with animations disabled, the caret hidden,
and every field the session has typed into masked (painted over), so a
value typed into an unmasked text field does not reach the CAS as pixels
either. (Text a page echoes elsewhere is still rendered; the snapshot text
is scrubbed, the pixels are not: see docs/computer_use.md.)

Action kinds: ``navigate`` (goto URL), ``click``, ``type`` (fill), ``select``
(select_option), ``press`` (key on a selector, or the keyboard), ``check``
(value "false" unchecks), ``scroll`` (value "dx,dy"; with a target: scroll it
into view), ``wait`` (a selector to appear, or a value in milliseconds, at
most 60000), ``submit`` (click, then wait for the resulting page to load).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pwd
import re
import shlex
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, quote_plus

from bernstein.producers.computer_use.errors import BrowserExtraMissing

try:  # the [browser] extra: without it, asking for this driver is a typed error naming the extra
    from playwright.sync_api import BrowserContext, Page, Playwright, Request, Route, WebSocketRoute, sync_playwright
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
except ModuleNotFoundError as _exc:
    if _exc.name is None or _exc.name.split(".")[0] not in ("playwright", "greenlet", "pyee"):
        raise
    raise BrowserExtraMissing(_exc.name) from None

from bernstein.producers.computer_use.boundary import DriverFactory, Frame, ProposedAction
from bernstein.producers.computer_use.errors import NavigationRefused
from bernstein.producers.computer_use.pointer_actions import element_at, focused_element, perform_pointer, wheel_delta
from bernstein.producers.computer_use.terminal import ComputerUseDriverError, DriverFault
from bernstein.producers.netpolicy import Origin, OriginPolicy, TargetRefused
from bernstein.schemas.documents.browser import ComputerUseTerminalState
from bernstein.schemas.documents.pointer import is_pointer_target, parse_pointer_target

DEFAULT_CHROMIUM: Final = "/usr/bin/chromium"
NO_SANDBOX_ENV: Final = "BERNSTEIN_CHROMIUM_NO_SANDBOX"
BROWSER_USER_ENV: Final = "BERNSTEIN_BROWSER_USER"
DEFAULT_BROWSER_USER: Final = "nobody"
STAGING_PREFIX: Final = "bernstein-browser-"
ENV_ALLOWED: Final = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "FONTCONFIG_FILE", "FONTCONFIG_PATH"})
"""Worker variables the browser inherits (plus ``LC_*``); S3, Kafka, proxy and key settings are not among them."""
ENV_ALLOWED_SAME_USER: Final = frozenset(
    {"HOME", "TMPDIR", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"}
)
"""Also inherited when the browser runs as the worker's own user (it has them anyway)."""
_CHROMIUM_ERROR: Final = re.compile(r"ERROR:[^\]]*\] (.*)$")
LOG: Final = logging.getLogger("bernstein.browser")
LOCAL_SCHEMES: Final = frozenset({"data", "blob"})
"""Schemes a page may use for subresources without any network (never for a top-level navigation)."""
CHROMIUM_ARGS: Final = (
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
DEFAULT_VIEWPORT: Final = (800, 600)
DEFAULT_ACTION_TIMEOUT_MS: Final = 5_000
DEFAULT_NAVIGATION_TIMEOUT_MS: Final = 15_000
MAX_WAIT_MS: Final = 60_000


def chromium_path() -> str:
    """Debian's Chromium, unless ``$BERNSTEIN_CHROMIUM`` names another binary."""
    return os.environ.get("BERNSTEIN_CHROMIUM") or DEFAULT_CHROMIUM


class SandboxMode(StrEnum):
    """``$BERNSTEIN_CHROMIUM_NO_SANDBOX``: unset -> ``auto``, ``1`` -> ``off``, ``0`` -> ``required``."""

    AUTO = "auto"
    """The sandbox, unless Chromium cannot start it: then ``--no-sandbox`` with a logged reason."""
    OFF = "off"
    """``--no-sandbox``, explicitly (the privilege drop still applies)."""
    REQUIRED = "required"
    """The sandbox or no browser: a launch that cannot start it fails (``BROWSER_LAUNCH_FAILED``)."""


def sandbox_mode() -> SandboxMode:
    """The operator's choice in ``$BERNSTEIN_CHROMIUM_NO_SANDBOX`` (a typed launch failure for another value)."""
    value = os.environ.get(NO_SANDBOX_ENV, "").strip()
    modes = {"": SandboxMode.AUTO, "1": SandboxMode.OFF, "0": SandboxMode.REQUIRED}
    if value not in modes:
        raise ComputerUseDriverError(
            f"{NO_SANDBOX_ENV} must be 1 (no sandbox) or 0 (sandbox required), not {value!r}",
            fault=DriverFault.BROWSER_LAUNCH_FAILED,
        )
    return modes[value]


def sandbox_args() -> list[str]:
    """``--no-sandbox`` only when the operator turned the sandbox off; the launch adds it on a fallback."""
    return ["--no-sandbox"] if sandbox_mode() is SandboxMode.OFF else []


@dataclass(frozen=True, slots=True)
class BrowserUser:
    """The unprivileged account Chromium runs as when the worker is root."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class Isolation:
    """How this Chromium is isolated from the worker (``PlaywrightDriver.isolation``)."""

    sandbox: bool
    """Chromium's sandbox is on."""
    user: BrowserUser | None
    """The account Chromium runs as when the worker is root; None: the worker's own."""
    reason: str | None
    """Why the sandbox is off (Chromium's own message on a fallback); None when it is on."""


def browser_user() -> BrowserUser | None:
    """The account to drop to: ``$BERNSTEIN_BROWSER_USER`` (a name or a uid, default ``nobody``) when running as root.

    None when the worker is not root (it cannot switch, and Chromium's sandbox
    works as any unprivileged user) or when the operator named root itself.
    """
    if os.geteuid() != 0:
        return None
    wanted = os.environ.get(BROWSER_USER_ENV, "").strip() or DEFAULT_BROWSER_USER
    try:
        entry = pwd.getpwuid(int(wanted)) if wanted.isdigit() else pwd.getpwnam(wanted)
    except (KeyError, OverflowError):
        raise ComputerUseDriverError(
            f"{BROWSER_USER_ENV}={wanted!r} is not an account on this host; Chromium is never run as root by default",
            fault=DriverFault.BROWSER_LAUNCH_FAILED,
        ) from None
    if entry.pw_uid == 0:
        return None
    return BrowserUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def browser_env(home: Path | None) -> dict[str, str]:
    """The browser's environment: an allow-list of the worker's (no credentials, no proxies); ``home`` replaces HOME."""
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWED or k.startswith("LC_")}
    if home is None:
        env.update({k: v for k, v in os.environ.items() if k in ENV_ALLOWED_SAME_USER})
    else:
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def reachable_by(path: Path, user: BrowserUser) -> bool:
    """Whether ``user`` (no supplementary groups) may traverse every directory above ``path``."""
    for directory in reversed(Path(path).resolve().parents):
        try:
            info = directory.stat()
        except OSError:
            return False
        if info.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif info.st_gid == user.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return True


class _Staging:
    """A root-owned private directory (mode 0711) holding the privilege-dropping wrapper and the browser's HOME.

    ``launch`` (root, 0700) is what Playwright executes: ``setpriv`` to the
    browser user, then Chromium. It is root's, in a root-owned directory, so
    the browser user cannot change what root runs. ``home`` (the user's,
    0700) is HOME; the profile is the session's when the user can reach it,
    else ``home/profile``. Removed by ``remove``.
    """

    def __init__(self, profile_dir: Path, user: BrowserUser, chromium: str) -> None:
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        if not os.access(setpriv, os.X_OK):
            raise ComputerUseDriverError(
                "setpriv (util-linux) is needed to run Chromium as an unprivileged user when the worker is root",
                fault=DriverFault.BROWSER_LAUNCH_FAILED,
            )
        base = Path(tempfile.gettempdir())
        if not reachable_by(base / "x", user):
            raise ComputerUseDriverError(
                f"the browser user {user.name} cannot reach the temporary directory {base} (set TMPDIR)",
                fault=DriverFault.BROWSER_LAUNCH_FAILED,
            )
        _sweep_stale(base)
        self.root = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{profile_dir.name[:60]}-", dir=base))
        self._lock: int | None = None
        try:
            os.chmod(self.root, 0o711)  # noqa: S103 - traversable, not listable: the browser user reaches home/
            # held while the browser lives (kill -9 frees it); locked before it is named "lock", so a
            # concurrent launch's sweep never sees an unlocked lock of a directory being set up
            self._lock = os.open(self.root / "lock.new", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(self.root / "lock.new", self.root / "lock")
            self.home = self.root / "home"
            self.home.mkdir(mode=0o700)
            os.chown(self.home, user.uid, user.gid)
            self.profile = profile_dir if _can_hand_over(profile_dir, user) else self.home / "profile"
            if self.profile != profile_dir:
                self.profile.mkdir(mode=0o700)
            os.lchown(self.profile, user.uid, user.gid)
            self.launcher = self.root / "launch"
            drop = [setpriv, f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--nnp"]
            drop += ["--inh-caps=-all", "--bounding-set=-all", "--", chromium]
            fd = os.open(self.launcher, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
            with os.fdopen(fd, "w") as script:
                script.write(f'#!/bin/sh\nexec {shlex.join(drop)} "$@"\n')
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def _can_hand_over(profile_dir: Path, user: BrowserUser) -> bool:
    """Whether the session's own profile directory can be given to ``user`` as it is.

    Only a real directory the worker created, that ``user`` can reach, and
    that holds nothing but ``user``'s files (fresh, or left by an earlier
    browser of the same user). Nothing is ever chowned recursively: a file
    the browser user could swap for a link must not become its own.
    """
    try:
        info = profile_dir.lstat()
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in (os.geteuid(), user.uid) or not reachable_by(profile_dir, user):
        return False
    for parent, dirs, files in os.walk(profile_dir):
        for name in (*dirs, *files):
            if os.lstat(os.path.join(parent, name)).st_uid != user.uid:
                return False
    return True


def _sweep_stale(base: Path) -> None:
    """Remove staging directories whose worker died (kill -9): theirs, not locked by a live worker, owned by this uid."""
    for path in base.glob(f"{STAGING_PREFIX}*"):
        try:
            if path.is_symlink() or path.lstat().st_uid != os.geteuid() or not (path / "lock").is_file():
                continue
            fd = os.open(path / "lock", os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live browser's
        finally:
            os.close(fd)
        shutil.rmtree(path, ignore_errors=True)


_SANDBOX_UNAVAILABLE: dict[tuple[str, int], str] = {}
"""Per (Chromium, uid): Chromium's reason it could not start its sandbox, so each later launch skips the failing attempt."""


def _planned_isolation(mode: SandboxMode, user: BrowserUser | None, cache_key: tuple[str, int]) -> Isolation:
    """What to try first: the sandbox, unless the operator, a root browser or an earlier failure rules it out."""
    if mode is SandboxMode.OFF:
        return Isolation(False, user, f"{NO_SANDBOX_ENV}=1")
    if user is None and os.geteuid() == 0:
        return Isolation(False, None, f"the browser runs as root ({BROWSER_USER_ENV} names root)")
    if cache_key in _SANDBOX_UNAVAILABLE and mode is SandboxMode.AUTO:
        return Isolation(False, user, _SANDBOX_UNAVAILABLE[cache_key])
    return Isolation(True, user, None)


def _sandbox_failure(exc: PlaywrightError) -> str | None:
    """Chromium's own reason when ``exc`` is a failure to start the sandbox, else None."""
    text = str(exc)
    if "sandboxing failed" not in text and "No usable sandbox" not in text and "crbug.com/638180" not in text:
        return None
    for line in text.splitlines():
        match = _CHROMIUM_ERROR.search(line)
        if match and ("sandbox" in match.group(1).lower() or "638180" in match.group(1)):
            return match.group(1).strip()
    return "Chromium sandboxing failed"


def host_resolver_rules(pins: Mapping[Origin, list[str]]) -> str:
    """Chromium resolver rules: each allowed host:port to its vetted address, everything else not found."""
    rules = []
    for origin, addresses in sorted(pins.items()):
        host = f"[{origin.host}]" if ":" in origin.host else origin.host
        address = addresses[0]
        target = f"[{address}]" if ":" in address else address
        rules.append(f"MAP {host}:{origin.port} {target}:{origin.port}")
    rules.append("MAP * ~NOTFOUND")
    return ", ".join(rules)


@dataclass(frozen=True, slots=True)
class BlockedRequest:
    """A request the origin policy refused (aborted before it was sent, or unresolvable by the rules)."""

    url: str
    policy: str
    """The ``TargetCode`` that refused it."""
    navigation: bool
    """A navigation of the page's main frame (it ends the session); otherwise a subresource or subframe."""
    redirect: bool
    """The hop of a redirect."""


class PlaywrightDriver:
    """A ``BrowserDriver`` over one persistent Chromium context (one profile directory)."""

    name: Final = "playwright"

    def __init__(
        self,
        context: BrowserContext,
        *,
        owned: Playwright | None,
        policy: OriginPolicy,
        action_timeout_ms: int = DEFAULT_ACTION_TIMEOUT_MS,
        navigation_timeout_ms: int = DEFAULT_NAVIGATION_TIMEOUT_MS,
    ) -> None:
        self.context = context
        self.navigation_policy = policy
        """The session's origin policy (the session's boundary reads it too)."""
        self.blocked: list[BlockedRequest] = []
        """Every request the policy refused, in order."""
        self._owned = owned
        context.on("request", self._on_request)
        context.route("**/*", self._route)
        context.route_web_socket("**/*", self._route_web_socket)
        self._action_timeout = action_timeout_ms
        self._navigation_timeout = navigation_timeout_ms
        context.set_default_timeout(action_timeout_ms)
        context.set_default_navigation_timeout(navigation_timeout_ms)
        self.page: Page = context.pages[0] if context.pages else context.new_page()
        self._typed_targets: list[str] = []
        self._wait_cap_ms = MAX_WAIT_MS
        self._closed = False
        self.isolation = Isolation(sandbox=False, user=None, reason="not launched by PlaywrightDriver.launch")
        """How Chromium is isolated (set by ``launch``)."""
        self._staging: _Staging | None = None

    @classmethod
    def launch(
        cls,
        profile_dir: Path,
        *,
        policy: OriginPolicy,
        playwright: Playwright | None = None,
        executable_path: str | None = None,
        headless: bool = True,
        viewport: tuple[int, int] = DEFAULT_VIEWPORT,
        action_timeout_ms: int = DEFAULT_ACTION_TIMEOUT_MS,
        navigation_timeout_ms: int = DEFAULT_NAVIGATION_TIMEOUT_MS,
    ) -> PlaywrightDriver:
        """Start Chromium on ``profile_dir``, reaching only ``policy``'s origins.

        With ``playwright`` None this driver owns its own Playwright. Raises
        ``NavigationRefused`` (via ``launch``) when an allowed origin cannot be
        vetted (a name resolving to a private address), before Chromium starts.
        """
        try:
            pins = policy.vet()
        except TargetRefused as exc:
            raise NavigationRefused(exc.message, policy=exc.code, url=exc.url, via="launch") from None
        mode = sandbox_mode()
        user = browser_user()
        chromium = executable_path or chromium_path()
        staging = _Staging(profile_dir, user, chromium) if user is not None else None
        args = [*CHROMIUM_ARGS, f"--host-resolver-rules={host_resolver_rules(pins)}"]
        if staging is not None and staging.profile != profile_dir:
            args.append(f"--bernstein-session-profile={profile_dir}")  # ignored by Chromium; names the session in ps
        cache_key = (chromium, user.uid if user is not None else os.geteuid())
        isolation = _planned_isolation(mode, user, cache_key)
        if mode is SandboxMode.REQUIRED and not isolation.sandbox:
            if staging is not None:
                staging.remove()
            raise ComputerUseDriverError(
                f"Chromium's sandbox is required ({NO_SANDBOX_ENV}=0) but it is off: {isolation.reason}",
                fault=DriverFault.BROWSER_LAUNCH_FAILED,
            )
        env: dict[str, str | float | bool] = {**browser_env(staging.home if staging is not None else None)}
        owned: Playwright | None = None
        try:
            if playwright is None:
                owned = playwright = sync_playwright().start()
            while True:
                try:
                    context = playwright.chromium.launch_persistent_context(
                        str(staging.profile if staging is not None else profile_dir),
                        executable_path=str(staging.launcher) if staging is not None else chromium,
                        headless=headless,
                        args=args,
                        chromium_sandbox=isolation.sandbox,  # False: Playwright passes --no-sandbox
                        env=env,
                        viewport={"width": viewport[0], "height": viewport[1]},
                        accept_downloads=False,
                        service_workers="block",
                    )
                    break
                except PlaywrightError as exc:
                    reason = _sandbox_failure(exc) if isolation.sandbox else None
                    if reason is None:
                        raise
                    if mode is SandboxMode.REQUIRED:
                        raise ComputerUseDriverError(
                            f"Chromium cannot start its sandbox and {NO_SANDBOX_ENV}=0 requires it: {reason}",
                            fault=DriverFault.BROWSER_LAUNCH_FAILED,
                        ) from None
                    _SANDBOX_UNAVAILABLE[cache_key] = reason
                    isolation = Isolation(False, user, reason)
                    LOG.warning(
                        "Chromium cannot start its sandbox, running it with --no-sandbox as %s: %s "
                        "(see docs/computer_use.md, Chromium's sandbox; %s=0 makes this fatal)",
                        user.name if user is not None else "the worker's user",
                        reason,
                        NO_SANDBOX_ENV,
                    )
        except (PlaywrightError, ComputerUseDriverError) as exc:
            if owned is not None:
                _quietly(owned.stop)
            if staging is not None:
                staging.remove()
            if isinstance(exc, ComputerUseDriverError):
                raise
            raise ComputerUseDriverError(
                f"cannot start Chromium ({chromium}): {_first_line(exc)}",
                fault=DriverFault.BROWSER_LAUNCH_FAILED,
            ) from exc
        try:
            driver = cls(
                context,
                owned=owned,
                policy=policy,
                action_timeout_ms=action_timeout_ms,
                navigation_timeout_ms=navigation_timeout_ms,
            )
        except PlaywrightError as exc:
            _quietly(context.close)
            if owned is not None:
                _quietly(owned.stop)
            if staging is not None:
                staging.remove()
            raise ComputerUseDriverError(
                f"cannot set up Chromium: {_first_line(exc)}", fault=DriverFault.BROWSER_LAUNCH_FAILED
            ) from exc
        driver.isolation = isolation
        driver._staging = staging
        return driver

    @classmethod
    def factory(cls, **options: Any) -> DriverFactory:
        """A ``DriverFactory`` that launches this driver with ``options`` (see ``launch``)."""

        def start(profile_dir: Path) -> PlaywrightDriver:
            return cls.launch(profile_dir, **options)

        return start

    # -- BrowserDriver ------------------------------------------------------------

    def limit_time(self, seconds: float) -> None:
        """Bound every later Playwright call by ``seconds`` (the session's time left), never above the configured timeouts."""
        ms = max(int(seconds * 1000), 1)
        self.context.set_default_timeout(min(self._action_timeout, ms))
        self.context.set_default_navigation_timeout(min(self._navigation_timeout, ms))
        self._wait_cap_ms = min(MAX_WAIT_MS, ms)

    def observe(self) -> Frame:
        with _translated(DriverFault.OBSERVE_FAILED):
            self.page.wait_for_load_state("load")
            mask = [self.page.locator(target) for target in self._typed_targets]
            screenshot = self.page.screenshot(type="png", animations="disabled", caret="hide", mask=mask, mask_color="#444444")
            snapshot = self.page.aria_snapshot()
            return Frame(screenshot=screenshot, aria_snapshot=snapshot, url=self.page.url)

    def perform(self, action: ProposedAction) -> None:
        handler = self._handlers().get(action.kind)
        if handler is None:
            raise ComputerUseDriverError(
                f"the playwright driver cannot perform {action.kind!r} actions", fault=DriverFault.ACTION_FAILED
            )
        fault = DriverFault.NAVIGATION_FAILED if action.kind == "navigate" else DriverFault.ACTION_FAILED
        mark = len(self.blocked)
        try:
            with _translated(fault, secret=action.value):
                if is_pointer_target(action.target):
                    self._at_pointer(action)
                else:
                    handler(action)
        except ComputerUseDriverError:
            self._refuse_blocked_navigation(mark)  # a failure caused by the policy is a refusal, not a fault
            raise
        self._refuse_blocked_navigation(mark)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            _quietly(self.context.close)
        finally:
            if self._owned is not None:
                _quietly(self._owned.stop)
            if self._staging is not None:
                self._staging.remove()

    # -- actions ----------------------------------------------------------------------

    def element_at(self, x: int, y: int) -> str:
        """The selector of the element under viewport point (x, y) ("" for none): what a pointer action records."""
        with _translated(DriverFault.ACTION_FAILED):
            return element_at(self.page, x, y)

    def focused_element(self) -> str:
        """The selector of the element keyboard input goes to."""
        with _translated(DriverFault.ACTION_FAILED):
            return focused_element(self.page)

    def _handlers(self) -> dict[str, Callable[[ProposedAction], None]]:
        return {
            "navigate": self._navigate,
            "click": lambda a: self.page.click(a.target),
            "double_click": lambda a: self.page.dblclick(a.target),
            "right_click": lambda a: self.page.click(a.target, button="right"),
            "hover": lambda a: self.page.hover(a.target),
            "drag": self._at_pointer,  # a drag's target is always a pointer target (both ends)
            "type": self._type,
            "select": lambda a: self._select(a),
            "press": self._press,
            "check": self._check,
            "scroll": self._scroll,
            "wait": self._wait,
            "submit": self._submit,
        }

    def _navigate(self, action: ProposedAction) -> None:
        try:
            self.navigation_policy.check(action.target, resolve_names=False)
        except TargetRefused as exc:
            raise NavigationRefused(exc.message, policy=exc.code, url=action.target, via="action") from None
        self.page.goto(action.target, wait_until="load")

    # -- the origin policy ---------------------------------------------------------------

    def _verdict(self, url: str, *, navigation: bool) -> str | None:
        """None if the policy lets ``url`` through, else the refusing ``TargetCode``."""
        scheme = url.split(":", 1)[0].lower()
        if scheme in LOCAL_SCHEMES and not navigation:
            return None
        try:
            self.navigation_policy.check(url, resolve_names=False)
        except TargetRefused as exc:
            return exc.code
        return None

    def _is_main_navigation(self, request: Request) -> bool:
        try:
            return request.is_navigation_request() and request.frame == self.page.main_frame
        except PlaywrightError:
            return False

    def _on_request(self, request: Request) -> None:
        """Every request, redirect hops included (which ``route`` never sees): record the refused ones."""
        navigation = self._is_main_navigation(request)
        verdict = self._verdict(request.url, navigation=navigation)
        if verdict is not None:
            redirect = request.redirected_from is not None
            self.blocked.append(BlockedRequest(request.url, verdict, navigation, redirect))

    def _route(self, route: Route) -> None:
        """Abort, before it is sent, any request the policy refuses; let the rest through."""
        request = route.request
        if self._verdict(request.url, navigation=self._is_main_navigation(request)) is None:
            route.continue_()
        else:
            route.abort("blockedbyclient")

    def _route_web_socket(self, socket: WebSocketRoute) -> None:
        url = socket.url
        scheme, sep, rest = url.partition(":")
        http_url = {"ws": "http", "wss": "https"}.get(scheme.lower(), scheme) + sep + rest
        verdict = self._verdict(http_url, navigation=True)
        if verdict is None:
            socket.connect_to_server()
        else:
            self.blocked.append(BlockedRequest(url, verdict, navigation=False, redirect=False))
            socket.close(code=1008, reason="refused by the session's origin policy")

    def _refuse_blocked_navigation(self, mark: int) -> None:
        for blocked in self.blocked[mark:]:
            if blocked.navigation:
                via = "redirect" if blocked.redirect else "page"
                raise NavigationRefused(
                    f"the page was led to {blocked.url!r} ({via}), which the session's origin policy refuses ({blocked.policy})",
                    policy=blocked.policy,
                    url=blocked.url,
                    via=via,
                )

    def _at_pointer(self, action: ProposedAction) -> None:
        typed = perform_pointer(self.page, action.kind, parse_pointer_target(action.target, action.kind), action.value)
        if typed is not None and typed not in self._typed_targets:
            self._typed_targets.append(typed)  # masked in every later screenshot

    def _type(self, action: ProposedAction) -> None:
        if action.target not in self._typed_targets:
            self._typed_targets.append(action.target)  # masked in every later screenshot
        self.page.fill(action.target, action.value or "")

    def _select(self, action: ProposedAction) -> None:
        if action.target not in self._typed_targets:
            self._typed_targets.append(action.target)  # the chosen option is masked like a typed value
        self.page.select_option(action.target, action.value or "")

    def _press(self, action: ProposedAction) -> None:
        if action.target:
            self.page.press(action.target, action.value or "")
        else:
            self.page.keyboard.press(action.value or "")

    def _check(self, action: ProposedAction) -> None:
        if (action.value or "true").strip().lower() in ("false", "0", "off", "no"):
            self.page.uncheck(action.target)
        else:
            self.page.check(action.target)

    def _scroll(self, action: ProposedAction) -> None:
        if action.target:
            self.page.locator(action.target).scroll_into_view_if_needed()
            return
        self.page.mouse.wheel(*wheel_delta(action.value))

    def _wait(self, action: ProposedAction) -> None:
        if action.target:
            self.page.wait_for_selector(action.target)
        else:
            self.page.wait_for_timeout(min(max(int(action.value or "0"), 0), self._wait_cap_ms))

    def _submit(self, action: ProposedAction) -> None:
        # click() waits for a navigation the click initiates to commit; then wait for its load.
        self.page.click(action.target)
        self.page.wait_for_load_state("load")


@contextmanager
def _translated(fault: str, *, secret: str | None = None) -> Iterator[None]:
    """Translate Playwright's exceptions (and bad action values) at the edge."""
    try:
        yield
    except PlaywrightTimeoutError as exc:
        raise ComputerUseDriverError(
            _scrub(_first_line(exc), secret), terminal_state=ComputerUseTerminalState.TIMEOUT, fault=DriverFault.ACTION_TIMEOUT
        ) from None
    except PlaywrightError as exc:
        message = _scrub(_first_line(exc), secret)
        closed = "closed" in message.lower() and ("target" in message.lower() or "browser" in message.lower())
        raise ComputerUseDriverError(message, fault=DriverFault.BROWSER_CLOSED if closed else fault) from None
    except ValueError:
        raise ComputerUseDriverError("the action's value is not valid for its kind", fault=fault) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _scrub(message: str, secret: str | None) -> str:
    """``message`` without ``secret`` in any spelling an error may quote it in (raw, JSON, repr, URL-encoded)."""
    if not secret:
        return message
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1]}
    forms |= {quote(secret, safe=""), quote_plus(secret)}
    for form in sorted((f for f in forms if f), key=len, reverse=True):
        message = message.replace(form, "<redacted>")
    return message


def _quietly(call: Callable[[], object]) -> None:
    try:
        call()
    except Exception:  # noqa: BLE001, S110 - teardown of a browser that may already be gone
        pass
