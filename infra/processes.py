"""The processes infra starts and stops: a ``Service`` is ours only by pid file and command line; stopping is
SIGTERM then SIGKILL; one infra command at a time holds ROOT/.infra/.lock, under a private umask."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import subprocess
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from infra.base import InfraError, say, warn
from infra.paths import Paths

STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 40


def _read_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _reap(pid: int) -> None:
    # Only matters when infra is imported and used in-process (we are the parent).
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


class Service:
    """A JVM process we start, identified by its pid file AND its command line: a pid is
    only considered ours if /proc/<pid>/cmdline contains the marker (kafka.Kafka or minio)
    and this root's config file path."""

    def __init__(self, name: str, marker: str, pid_file: Path, config: Path, log: Path) -> None:
        self.name = name
        self.marker = marker
        self.pid_file = pid_file
        self.config = config
        self.log = log

    def owns(self, pid: int, patient: bool = True) -> bool:
        cmd = _read_cmdline(pid)
        # A JVM that was just exec'd reads back an EMPTY /proc/<pid>/cmdline for a few ms
        # (seen with the Debian java launcher); a live user process never has an empty cmdline
        # for long, so for a pid we recorded ourselves re-read briefly before deciding. Not when
        # scanning all of /proc: kernel threads always have an empty cmdline.
        for _ in range(40 if patient else 0):
            if cmd != [] or _is_zombie(pid):
                break
            time.sleep(0.025)
            cmd = _read_cmdline(pid)
        if not cmd or _is_zombie(pid):
            _reap(pid)
            return False
        return any(self.marker in a for a in cmd) and any(a == str(self.config) for a in cmd)

    def _pid_from_file(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def _scan_proc(self) -> int | None:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid() and self.owns(int(entry), patient=False):
                return int(entry)
        return None

    def running_pid(self, adopt: bool = True) -> int | None:
        """Pid of our running process, or None. Cleans up a stale pid file. With adopt=True a
        running process of ours whose pid file went missing is found by its command line
        (it names this root's config file, so it can only be one we started) and re-recorded."""
        pid = self._pid_from_file()
        if pid is not None:
            if self.owns(pid):
                return pid
            self.pid_file.unlink(missing_ok=True)
        if adopt:
            pid = self._scan_proc()
            if pid is not None:
                say(f"{self.name}: found running pid {pid} without pid file; adopting it")
                self.pid_file.write_text(f"{pid}\n")
                return pid
        return None

    def spawn(self, argv: list[str], env: dict[str, str] | None = None) -> int:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"==== infra: starting {self.name} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # detached like nohup: survives our exit and ^C
                    close_fds=True,
                    env=env,
                )
            except OSError as e:
                raise InfraError(f"{self.name}: cannot start {argv[0]}: {e}") from None
        self.pid_file.write_text(f"{proc.pid}\n")
        proc.returncode = 0  # silence "subprocess still running" ResourceWarning at exit
        return proc.pid

    def alive(self, pid: int) -> bool:
        return self.owns(pid)


def stop_services(targets: list[tuple[Service, int]]) -> None:
    """SIGTERM all, poll up to STOP_TIMEOUT_S for exit, then SIGKILL the rest."""
    signalled = []
    for svc, pid in targets:
        if not svc.owns(pid):  # re-verify right before signalling
            svc.pid_file.unlink(missing_ok=True)
            continue
        say(f"{svc.name}: stopping pid {pid} (SIGTERM)")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        signalled.append((svc, pid))
    t0 = time.monotonic()
    live = list(signalled)
    while live and time.monotonic() - t0 < STOP_TIMEOUT_S:
        time.sleep(0.1)
        live = [(s, p) for s, p in live if s.owns(p)]
    for svc, pid in live:
        warn(f"{svc.name}: pid {pid} did not exit within {STOP_TIMEOUT_S:.0f}s; sending SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    t1 = time.monotonic()
    while live and time.monotonic() - t1 < 10:
        time.sleep(0.1)
        live = [(s, p) for s, p in live if s.owns(p)]
    if live:
        raise InfraError("; ".join(f"{s.name}: pid {p} survived SIGKILL (check `ps -p {p}`)" for s, p in live))
    for svc, _pid in signalled:
        svc.pid_file.unlink(missing_ok=True)
    say(f"stopped {', '.join(s.name for s, _ in signalled)} in {time.monotonic() - t0:.1f}s")


def tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            lines = deque(f, maxlen=n)
    except OSError:
        return f"(no log at {path})"
    return b"".join(lines).decode(errors="replace").rstrip("\n")


PRIVATE_UMASK: Final = 0o077
"""What every file and directory infra (and the Kafka and S3 processes it starts) creates under .infra/ gets:
no bits for group or others. The browser worker's Chromium runs as an unprivileged local user; S3's secret,
the broker's log segments and the keys must not be readable by it (or any other local account)."""


def make_private(root: Path) -> int:
    """Take group and other bits off everything under ``root`` (made before the umask, or by an older version);
    returns how many entries changed. Symbolic links are left alone (their target is not ours to change)."""
    changed = 0
    for directory, subdirs, files in os.walk(root):
        for path in (Path(directory), *(Path(directory) / name for name in (*subdirs, *files))):
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue  # a log rotated away, a temporary file renamed
            if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
                changed += 1
    return changed


@contextlib.contextmanager
def locked(p: Paths) -> Iterator[None]:
    os.umask(PRIVATE_UMASK)
    p.state.mkdir(parents=True, exist_ok=True)
    with open(p.lock, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another infra command on {p.state} to finish ...")
            fcntl.flock(f, fcntl.LOCK_EX)
        make_private(p.state)
        yield
