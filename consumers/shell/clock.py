"""The shell's sense of time: how long a Kafka call may take, and the awake clock that tells a pause of the process.

A transactional call's deadline is counted in seconds the process was running: a process frozen mid-call
(SIGSTOP, a VM or GC freeze) still gets the call's whole timeout once it resumes, and hears the broker's real
answer. The pauses the clock notices are what ``fencing`` asks about before it would make a new producer. A
module of its own because the watchdog (``fencing``), the shell's state (``base``) and the rebuild's reader all
use it, and it uses none of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

_TXN_TIMEOUT_S: Final = 30.0

_TXN_GRACE_S: Final = 5.0
"""How long past its own timeout a transactional call may block before the producer is given up."""

_PAUSED_S: Final = 5.0
"""A gap this long between two looks of the ticker is a pause of the process (SIGSTOP, a VM or GC freeze)."""


class _AwakeClock:
    """Seconds this process was running, and the pauses (SIGSTOP, a VM or GC freeze) it noticed.

    ``time.monotonic()`` keeps counting while the whole process is stopped. A ticker thread
    looks every ``tick`` seconds; ``awake()`` counts a gap between two looks up to ``gap``
    seconds only, and ``pauses()`` counts the gaps of at least ``_PAUSED_S``. A transactional
    call's deadline is measured in awake seconds, so a call that was in flight when the
    process froze gets its whole timeout to hear the broker's real answer once it resumes
    (PRODUCER_FENCED after a takeover), instead of being declared stuck on wake-up.
    """

    def __init__(self, now: Callable[[], float] = time.monotonic, *, tick: float = 0.2, gap: float = 1.0) -> None:
        self._now = now
        self._tick = tick
        self._gap = gap
        self._lock = threading.Lock()
        self._last = now()
        self._awake = 0.0
        self._paused = 0.0
        self._pauses = 0

    def start(self) -> _AwakeClock:
        threading.Thread(target=self._run, name="bernstein-clock", daemon=True).start()
        return self

    def _run(self) -> None:
        while True:
            time.sleep(self._tick)
            self.look()

    def look(self) -> None:
        """One look at the clock (the ticker's; tests call it directly)."""
        with self._lock:
            now = self._now()
            elapsed = max(now - self._last, 0.0)
            self._last = now
            if elapsed > self._gap:
                self._awake += self._gap
            else:
                self._awake += elapsed
            if elapsed >= _PAUSED_S:
                self._paused += elapsed
                self._pauses += 1

    def awake(self) -> float:
        """Awake seconds so far (monotonic; a gap the ticker has not seen yet counts at most ``gap``)."""
        with self._lock:
            return self._awake + min(max(self._now() - self._last, 0.0), self._gap)

    def pauses(self) -> tuple[int, float]:
        """The pauses of at least ``_PAUSED_S`` noticed so far: how many, and their seconds in all."""
        with self._lock:
            return self._pauses, self._paused


_CLOCK: _AwakeClock | None = None


def _awake_clock() -> _AwakeClock:
    """The process's one ticking clock (started on first use)."""
    global _CLOCK
    if _CLOCK is None:
        _CLOCK = _AwakeClock().start()
    return _CLOCK
