"""Terminal states: four computer-use states, one explicit mapping, never free text."""

from __future__ import annotations

import pytest

from bernstein.producers.computer_use import (
    TERMINAL_STATE_MAP,
    ActionByteCapExceeded,
    ActionLimitExceeded,
    ComputerUseDriverError,
    ComputerUseTerminalState,
    DriverFault,
    InvalidAction,
    activity_terminal_state,
    classify_terminal_state,
)
from bernstein.schemas.records import TERMINAL_STATES, TerminalState

S = ComputerUseTerminalState


def test_the_mapping_is_total_and_one_to_one() -> None:
    assert set(TERMINAL_STATE_MAP) == set(S)
    assert {v.value for v in TERMINAL_STATE_MAP.values()} == set(TERMINAL_STATES)
    assert dict(TERMINAL_STATE_MAP) == {
        S.OK: TerminalState.COMPLETED,
        S.DRIVER_FAILURE: TerminalState.FAILED,
        S.TIMEOUT: TerminalState.TIMED_OUT,
        S.REFUSED: TerminalState.REFUSED,
    }
    assert activity_terminal_state("timeout") is TerminalState.TIMED_OUT
    with pytest.raises(ValueError):
        activity_terminal_state("crashed")


TIMEOUT_ERROR = ComputerUseDriverError("slow", terminal_state=S.TIMEOUT, fault=DriverFault.ACTION_TIMEOUT)
CAP = ActionByteCapExceeded(run_id="r", cap_bytes=1, would_be_bytes=2)


@pytest.mark.parametrize(
    ("error", "timed_out", "exit_code", "expected"),
    [
        (None, False, None, S.OK),
        (None, False, 0, S.OK),
        (None, False, 1, S.DRIVER_FAILURE),
        (None, True, None, S.TIMEOUT),
        (None, True, 0, S.TIMEOUT),
        (ComputerUseDriverError("boom"), False, None, S.DRIVER_FAILURE),
        (TIMEOUT_ERROR, False, None, S.TIMEOUT),
        (ComputerUseDriverError("boom"), True, None, S.TIMEOUT),
        (RuntimeError("anything else"), False, None, S.DRIVER_FAILURE),
        (CAP, False, None, S.REFUSED),
        (CAP, True, 1, S.REFUSED),
        (ActionLimitExceeded(session_id="s", limit=3), False, None, S.REFUSED),
        (InvalidAction("bad", field="kind"), False, None, S.REFUSED),
    ],
)
def test_classify_terminal_state(error: BaseException | None, timed_out: bool, exit_code: int | None, expected: S) -> None:
    assert classify_terminal_state(error, timed_out=timed_out, exit_code=exit_code) is expected


def test_a_driver_error_carries_its_state_and_a_stable_reason_code() -> None:
    assert (TIMEOUT_ERROR.terminal_state, TIMEOUT_ERROR.reason_code) == (S.TIMEOUT, "action_timeout")
    default = ComputerUseDriverError("x")
    assert (default.terminal_state, default.fault, default.code) == (S.DRIVER_FAILURE, "ACTION_FAILED", "DRIVER_FAILURE")
    for state in (S.OK, S.REFUSED):
        with pytest.raises(ValueError):
            ComputerUseDriverError("x", terminal_state=state)
