"""A long mixed history and either scheduler core by name: the rewind, open-runs and state-JSON tests."""

from __future__ import annotations

from typing import Any

from bernstein.consumers.core.model import InputRecord, OutputRecord, SchedulerConfig, SchedulerState
from bernstein.consumers.core.native import NativeSchedulerCore, NativeState
from bernstein.consumers.core.step import SchedulerCore
from tests.support.cores import BASE_TS, PARTITION, TOPIC, browser_artifact, enc_close, enc_sub, make_config, mixed_inputs


def history() -> list[InputRecord]:
    """Every kind of change a step makes, several times over: the mixed inputs, then more runs that close and refuse."""
    inputs = mixed_inputs()
    for i in range(40):
        run_id = f"run-{i % 5}"
        if i % 13 == 12:
            inputs.append((run_id.encode(), enc_close(run_id)))
        elif i % 11 == 10:
            inputs.append((run_id.encode(), enc_sub(run_id=run_id, stage_id=f"s{i - 1}", pages=[b"again"])))  # redundant
        elif i % 17 == 16:
            artifact = browser_artifact(run_id, f"b{i}")
            inputs.append(
                (run_id.encode(), enc_sub(run_id=run_id, stage_id=f"b{i}", role="navigator", kind="browser", artifact=artifact))
            )
        else:
            inputs.append((run_id.encode(), enc_sub(run_id=run_id, stage_id=f"s{i}", pages=[f"p{i}".encode(), b"shared"])))
    return [InputRecord(TOPIC, PARTITION, offset, BASE_TS + offset, key, value) for offset, (key, value) in enumerate(inputs)]


def config() -> SchedulerConfig:
    return SchedulerConfig(**{**make_config(seal_every=3).__dict__, "checkpoint_every": 7})


def make_core(kind: str, cfg: SchedulerConfig) -> Any:
    return SchedulerCore(cfg) if kind == "python" else NativeSchedulerCore(cfg, PARTITION, self_check=False)


def plain(state: Any) -> SchedulerState:
    return state.to_scheduler_state() if isinstance(state, NativeState) else state


def step_all(core: Any, state: Any, records: list[InputRecord]) -> tuple[Any, list[OutputRecord]]:
    outputs: list[OutputRecord] = []
    for record in records:
        state, outs = core.step(state, record)
        outputs.extend(outs)
    return state, outputs
