"""Re-export of the browser session replay from ``verifier.browser_replay`` (where verification lives)."""

from __future__ import annotations

from verifier.browser_replay import (
    DivergenceReason,
    HeadProblem,
    ReplayDivergence,
    ReplayResult,
    SignedHead,
    StepInput,
    StepVerdict,
    render_lines,
    replay_action_log,
    replay_run,
    replay_sessions,
    replay_steps,
    step_input_from_entry,
)

__all__ = [
    "DivergenceReason",
    "HeadProblem",
    "ReplayDivergence",
    "ReplayResult",
    "SignedHead",
    "StepInput",
    "StepVerdict",
    "render_lines",
    "replay_action_log",
    "replay_run",
    "replay_sessions",
    "replay_steps",
    "step_input_from_entry",
]
