"""The deadline every request to an S3 store gets, and the notices of a long wait.

Each request gets a deadline (``S3Settings.timeout``, else ``BERNSTEIN_S3_TIMEOUT`` seconds, default 10):
connection failures, timeouts and 5xx answers are retried (three attempts at most) only while the
deadline lasts, and no single wait outlives it; a wait of more than a few seconds is announced on
the ``bernstein.s3`` logger (stderr, when nothing else is configured) as it goes on. urllib3
machinery of its own, apart from the S3 adapter (``bernstein.substrate.cas_s3``) that hands the
pool to minio.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from typing import Any, Final

from bernstein.substrate.cas import CasConfigError

S3_TIMEOUT_SETTING: Final = "BERNSTEIN_S3_TIMEOUT"
DEFAULT_S3_TIMEOUT: Final = 10.0
"""A reachable store answers a blob request in milliseconds; a stopped or stalled one is named within seconds."""
_ATTEMPTS: Final = 3
"""Attempts of one request at most (connection failures, timeouts, 5xx answers), all within its deadline."""
_CONNECT_TIMEOUT: Final = 5.0
_WAIT_NOTICE_S: Final = 3.0
"""A request still unanswered after this many seconds is announced (and again every as many seconds)."""
_RETRY_NOTICE_S: Final = 1.0
"""A retry is announced once its request has waited this long (quicker ones are silent)."""
_S3_LOG: Final = logging.getLogger("bernstein.s3")


def s3_timeout() -> float:
    """``BERNSTEIN_S3_TIMEOUT`` (environment, then ``.infra/env``) in seconds, default 10: more than 0, at most 600."""
    from bernstein.substrate.config import seconds_setting  # substrate.config imports this module

    return seconds_setting(S3_TIMEOUT_SETTING, DEFAULT_S3_TIMEOUT, CasConfigError)


def _short(exc: BaseException) -> str:
    """``Type: message`` of a network error, without urllib3's object reprs and pool details (one readable line)."""
    text = re.sub(r"<[^<>]* object at 0x[0-9a-f]+>:?\s*", "", str(exc)).strip()
    text = re.sub(r"^HTTPS?Connection(?:Pool)?\([^)]*\):\s*", "", text)
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Waits:
    """Requests to S3 in flight, of every store of the process; one daemon thread announces each one still
    waiting, every ``_WAIT_NOTICE_S`` seconds (the progress of a long wait)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, tuple[str, float, float, list[float]]] = {}
        """Request id -> (store, deadline in seconds, began, [next announcement]) (monotonic)."""
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def begin(self, describe: str, seconds: float) -> int:
        now = time.monotonic()
        with self._lock:
            key = next(self._ids)
            self._open[key] = (describe, seconds, now, [now + _WAIT_NOTICE_S])
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="s3-waits", daemon=True)
                self._thread.start()
        return key

    def end(self, key: int) -> None:
        with self._lock:
            self._open.pop(key, None)

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            with self._lock:
                due = [(describe, seconds, began) for describe, seconds, began, at in self._open.values() if now >= at[0]]
                for _, _, _, at in self._open.values():
                    if now >= at[0]:
                        at[0] = now + _WAIT_NOTICE_S
            for describe, seconds, began in due:
                _S3_LOG.warning(
                    "bernstein: still waiting for %s: %.0fs so far (the request gives up after %gs: %s)",
                    describe,
                    now - began,
                    seconds,
                    S3_TIMEOUT_SETTING,
                )


_WAITS: Final = _Waits()


def _deadline_pool(seconds: float, describe: str) -> Any:
    """A urllib3 pool whose every request has one deadline, ``seconds`` from its start: its attempts (at most
    ``_ATTEMPTS``: connection failures, timeouts, 5xx answers) and each socket wait end there; the last 5xx
    answer is handed to minio (an ``S3Error`` with its code), not turned into a bare retry error."""
    import urllib3

    class DeadlineRetry(urllib3.Retry):
        deadline = float("inf")

        def new(self, **kw: Any) -> DeadlineRetry:
            renewed = super().new(**kw)
            renewed.deadline = self.deadline
            return renewed

        def is_exhausted(self) -> bool:
            return super().is_exhausted() or time.monotonic() >= self.deadline

        def get_backoff_time(self) -> float:
            return min(super().get_backoff_time(), max(0.0, self.deadline - time.monotonic()))

        def increment(self, *args: Any, **kw: Any) -> DeadlineRetry:
            renewed = super().increment(*args, **kw)
            if time.monotonic() - (self.deadline - seconds) < _RETRY_NOTICE_S:
                return renewed  # a quick retry (a refused connection) is not a wait worth a line
            error, response = kw.get("error"), kw.get("response")
            what = _short(error) if error is not None else f"HTTP {getattr(response, 'status', '?')}"
            _S3_LOG.warning(
                "bernstein: %s: %s; trying again (attempt %d of %d, %.1fs left of %gs, %s)",
                describe,
                what,
                len(renewed.history) + 1,
                _ATTEMPTS,
                max(0.0, self.deadline - time.monotonic()),
                seconds,
                S3_TIMEOUT_SETTING,
            )
            return renewed

    class DeadlineTimeout(urllib3.Timeout):
        deadline = float("inf")

        def clone(self) -> urllib3.Timeout:
            left = max(self.deadline - time.monotonic(), 0.05)
            connect, read = self.connect_timeout, self.read_timeout
            return urllib3.Timeout(
                connect=min(connect, left) if isinstance(connect, float | int) else left,
                read=min(read, left) if isinstance(read, float | int) else left,
            )

    class DeadlinePool(urllib3.PoolManager):
        def urlopen(self, method: str, url: str, redirect: bool = True, **kw: Any) -> Any:  # type: ignore[override]
            deadline = time.monotonic() + seconds
            retries = DeadlineRetry(
                total=_ATTEMPTS - 1,
                backoff_factor=0.2,
                status_forcelist=(500, 502, 503, 504),
                raise_on_status=False,
            )
            retries.deadline = deadline
            timeout = DeadlineTimeout(connect=min(_CONNECT_TIMEOUT, seconds), read=seconds)
            timeout.deadline = deadline
            kw.setdefault("retries", retries)
            kw.setdefault("timeout", timeout)
            key = _WAITS.begin(describe, seconds)
            try:
                return super().urlopen(method, url, redirect=redirect, **kw)
            finally:
                _WAITS.end(key)

    return DeadlinePool(maxsize=8)
