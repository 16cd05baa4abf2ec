"""How a browser session ended: four computer-use states, one explicit mapping onto the activity's.

``ComputerUseTerminalState`` is what the boundary observed (``ok``,
``driver_failure``, ``timeout``, ``refused``); the activity result carries the
closed ``TerminalState`` set the scheduler accepts. ``TERMINAL_STATE_MAP`` (in
``bernstein.schemas.documents.browser``, with the states) is the whole mapping, written
once, so a fault can never surface as free text:

    ok              -> completed
    driver_failure  -> failed
    timeout         -> timed_out
    refused         -> refused

``classify_terminal_state`` decides the computer-use state from what happened
(the exception that ended the session, an external agent's exit code, a
watchdog's timeout flag). Refusals win over timeouts, timeouts over failures.
"""

from __future__ import annotations

from typing import ClassVar, Final

from bernstein.producers.computer_use.errors import ComputerUseError, SessionRefused
from bernstein.schemas.documents.browser import ComputerUseTerminalState


class DriverFault:
    """Stable fault codes a driver reports (appended to, never renamed)."""

    BROWSER_LAUNCH_FAILED: Final = "BROWSER_LAUNCH_FAILED"
    OBSERVE_FAILED: Final = "OBSERVE_FAILED"
    ACTION_FAILED: Final = "ACTION_FAILED"
    ACTION_TIMEOUT: Final = "ACTION_TIMEOUT"
    NAVIGATION_FAILED: Final = "NAVIGATION_FAILED"
    BROWSER_CLOSED: Final = "BROWSER_CLOSED"
    SESSION_TIMEOUT: Final = "SESSION_TIMEOUT"
    AGENT_FAILED: Final = "AGENT_FAILED"


class ComputerUseDriverError(ComputerUseError):
    """The browser driver (or the external agent) failed; carries the terminal state it maps to.

    ``fault`` is a stable ``DriverFault`` code; it becomes the activity's
    reason code (lower-cased), so the journal never holds free text.
    """

    code: ClassVar[str] = "DRIVER_FAILURE"

    def __init__(
        self,
        message: str,
        *,
        terminal_state: ComputerUseTerminalState = ComputerUseTerminalState.DRIVER_FAILURE,
        fault: str = DriverFault.ACTION_FAILED,
    ) -> None:
        if terminal_state not in (ComputerUseTerminalState.DRIVER_FAILURE, ComputerUseTerminalState.TIMEOUT):
            raise ValueError(f"a driver error ends a session as driver_failure or timeout, not {terminal_state!r}")
        super().__init__(message)
        self.terminal_state = terminal_state
        self.fault = fault

    @property
    def reason_code(self) -> str:
        return self.fault.lower()


def classify_terminal_state(
    error: BaseException | None = None,
    *,
    timed_out: bool = False,
    exit_code: int | None = None,
) -> ComputerUseTerminalState:
    """The computer-use terminal state of a session that ended this way.

    1. a refusal (``SessionRefused``, incl. the byte cap) -> ``refused``;
    2. ``timed_out`` (a watchdog fired) -> ``timeout``;
    3. a ``ComputerUseDriverError`` -> the state it carries;
    4. any other exception, or a non-zero / missing exit code of an external
       agent process -> ``driver_failure``;
    5. otherwise -> ``ok``.
    """
    if isinstance(error, SessionRefused):
        return ComputerUseTerminalState.REFUSED
    if timed_out:
        return ComputerUseTerminalState.TIMEOUT
    if isinstance(error, ComputerUseDriverError):
        return error.terminal_state
    if error is not None:
        return ComputerUseTerminalState.DRIVER_FAILURE
    if exit_code is not None and exit_code != 0:
        return ComputerUseTerminalState.DRIVER_FAILURE
    return ComputerUseTerminalState.OK
