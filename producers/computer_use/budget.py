"""The per-run screenshot byte cap, persisted so a restart does not reset it.

A run may store at most ``cap`` bytes of pre-action screenshots
(``DEFAULT_RUN_BYTE_CAP`` = 64 MiB). What counts is the bytes of *distinct*
screenshots the run stored: a frame identical to one already charged to the
run dedupes in the CAS and costs nothing again. The count lives in a small
JSON ledger under the worktree (digest -> size, written atomically under an
exclusive lock), so a second session of the same run, or the same session
after a crash, continues from the persisted total instead of from zero.

Overflow raises ``ActionByteCapExceeded`` *before* the screenshot is stored
or the action anchored; the session records it as a refused browser result
(reason ``byte_cap_exceeded``). A ledger that cannot be read is an error,
never an implicit reset.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, Final

from bernstein.producers.computer_use.errors import ComputerUseError, SessionRefused
from bernstein.schemas.canonical import canonical_json, is_digest

DEFAULT_RUN_BYTE_CAP: Final = 64 * 1024 * 1024
"""Screenshot bytes one run may store (64 MiB)."""
LEDGER_FORMAT: Final = "bernstein.computer-use.byte-ledger/v1"
LEDGERS_DIR: Final = Path(".bernstein") / "computer-use" / "runs"
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")


class ActionByteCapExceeded(SessionRefused):
    """Storing this screenshot would take the run past its byte cap."""

    code: ClassVar[str] = "BYTE_CAP_EXCEEDED"
    reason_code: ClassVar[str] = "byte_cap_exceeded"

    def __init__(self, *, run_id: str, cap_bytes: int, would_be_bytes: int, at_action: int | None = None) -> None:
        super().__init__(
            f"computer-use run {run_id!r} would store {would_be_bytes} screenshot bytes, exceeding the per-run cap of "
            f"{cap_bytes} bytes" + (f" (at action {at_action})" if at_action is not None else "")
        )
        self.run_id = run_id
        self.cap_bytes = cap_bytes
        self.would_be_bytes = would_be_bytes
        self.at_action = at_action

    def evidence(self) -> dict[str, str | int]:
        facts: dict[str, str | int] = {"code": self.code, "cap_bytes": self.cap_bytes, "would_be_bytes": self.would_be_bytes}
        if self.at_action is not None:
            facts["at_action"] = self.at_action
        return facts


class ByteLedgerUnreadable(ComputerUseError):
    """The run's byte ledger exists but cannot be read; refusing to start again from zero."""

    code: ClassVar[str] = "E_BYTE_LEDGER"


def ledger_path(run_id: str, *, worktree: Path) -> Path:
    """Where the run's ledger lives: collision-free per run id, like the profile directories."""
    readable = _UNSAFE.sub("_", run_id)[:40] or "run"
    suffix = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:16]
    return Path(worktree) / LEDGERS_DIR / f"{readable}-{suffix}" / "byte-ledger.json"


class RunByteLedger:
    """The persisted screenshot byte count of one run."""

    def __init__(self, run_id: str, *, worktree: Path, cap: int = DEFAULT_RUN_BYTE_CAP) -> None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            raise ValueError(f"the byte cap must be a non-negative integer, got {cap!r}")
        self.run_id = run_id
        self.cap = cap
        self.path = ledger_path(run_id, worktree=worktree)

    def total(self) -> int:
        """Bytes charged to the run so far (0 when nothing was stored yet)."""
        with self._locked():
            return sum(self._load().values())

    def charge(self, digest: str, size: int, *, at_action: int | None = None) -> int:
        """Charge a screenshot to the run; return the bytes newly counted (0 for a duplicate).

        Raises ``ActionByteCapExceeded`` (and records nothing) when the run's
        total would exceed the cap.
        """
        if not is_digest(digest) or size < 0:
            raise ValueError(f"charge needs a sha256 digest and a size, got {digest!r}, {size!r}")
        with self._locked():
            stored = self._load()
            if digest in stored:
                return 0
            would_be = sum(stored.values()) + size
            if would_be > self.cap:
                raise ActionByteCapExceeded(run_id=self.run_id, cap_bytes=self.cap, would_be_bytes=would_be, at_action=at_action)
            stored[digest] = size
            self._save(stored)
            return size

    # -- storage ------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path.with_suffix(".lock"), "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _load(self) -> dict[str, int]:
        try:
            document = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ByteLedgerUnreadable(
                f"byte ledger {self.path} is unreadable ({exc}); refusing to reset the run's count"
            ) from exc
        blobs = document.get("blobs") if isinstance(document, dict) else None
        if (
            not isinstance(document, dict)
            or document.get("format") != LEDGER_FORMAT
            or document.get("run_id") != self.run_id
            or not isinstance(blobs, dict)
            or not all(is_digest(k) and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in blobs.items())
        ):
            raise ByteLedgerUnreadable(f"byte ledger {self.path} is not a {LEDGER_FORMAT} ledger of run {self.run_id!r}")
        return dict(blobs)

    def _save(self, stored: dict[str, int]) -> None:
        data = canonical_json({"format": LEDGER_FORMAT, "run_id": self.run_id, "blobs": stored})
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".ledger-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
