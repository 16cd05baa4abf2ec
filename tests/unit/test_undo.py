"""Rewinding the scheduler core's state to a mark (``consumers/core/undo.py``, ``native/src/undo.rs``).

After an aborted transaction the shell puts the state back to its last commit in memory instead
of re-reading Kafka. A rewound state must be the very state the core had at the mark, byte for
byte (``state_bytes`` keeps dict orders), in both cores, whatever the steps in between did: new
runs, periodic and final seals, refusals, dead letters, duplicates, the Python reference's
write-back of a browser result, a checkpoint.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from bernstein.consumers.core.model import InputRecord, OutputRecord
from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.consumers.core.snapshot import state_bytes
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.consumers.core.undo import copy_run
from tests.support.core_history import config, history, make_core, plain, step_all
from tests.support.cores import PARTITION

CORES = ("python", "native")


def form(state: Any) -> bytes:
    return state_bytes(plain(state))


def straight(records: list[InputRecord]) -> tuple[bytes, list[OutputRecord]]:
    cfg = config()
    state, outputs = step_all(SchedulerCore(cfg), initial_state(cfg, PARTITION), records)
    return state_bytes(state), outputs


@pytest.mark.parametrize("kind", CORES)
@pytest.mark.parametrize("cut", [0, 7, 20, 33, 50])
def test_a_rewind_puts_back_the_state_at_the_mark_and_the_replay_repeats_every_output(kind: str, cut: int) -> None:
    records = history()
    whole_state, whole_outputs = straight(records)
    cfg = config()
    core = make_core(kind, cfg)
    state, before = step_all(core, initial_state(cfg, PARTITION), records[:cut])
    at_first = form(state)
    state, first = core.mark(state)
    state, _ = step_all(core, state, records[cut : cut + 9])
    at_second = form(state)
    state, second = core.mark(state)
    state, _ = step_all(core, state, records[cut + 9 :])
    assert form(state) == whole_state

    state = core.rewind(state, second)
    assert state is not None and form(state) == at_second
    state = core.rewind(state, first)
    assert state is not None and form(state) == at_first
    assert core.rewind(state, first) is None  # closed by the rewind: nothing is undone twice

    state, again = step_all(core, state, records[cut:])
    assert before + again == whole_outputs
    assert form(state) == whole_state


@pytest.mark.parametrize("kind", CORES)
def test_a_rewind_past_both_marks_at_once_and_a_forgotten_mark(kind: str) -> None:
    records = history()
    cfg = config()
    core = make_core(kind, cfg)
    state, _ = step_all(core, initial_state(cfg, PARTITION), records[:10])
    committed = form(state)
    state, first = core.mark(state)
    state, _ = step_all(core, state, records[10:30])
    after_first = form(state)
    state, second = core.mark(state)
    state, _ = step_all(core, state, records[30:])
    core.forget(state, first)  # the first batch committed
    assert core.rewind(state, first) is None
    state = core.rewind(state, second)
    assert state is not None and form(state) == after_first
    state, third = core.mark(state)
    state, _ = step_all(core, state, records[30:45])
    state, fourth = core.mark(state)
    state, _ = step_all(core, state, records[45:])
    state = core.rewind(state, third)  # both open epochs at once
    assert state is not None and form(state) == after_first
    assert form(state) != committed


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("kind", CORES)
def test_random_marks_commits_and_rewinds_match_the_states_they_saw(kind: str, seed: int) -> None:
    """The shell's pattern: a mark before each batch, a commit forgets the oldest, an abort rewinds to it."""
    rng = random.Random(seed)
    records = history()
    whole_state, whole_outputs = straight(records)
    cfg = config()
    core = make_core(kind, cfg)
    state: Any = initial_state(cfg, PARTITION)
    open_marks: list[tuple[int, int, int, bytes]] = []  # (mark, input position, outputs so far, state bytes) at each mark
    position = 0
    outputs: list[OutputRecord] = []
    rewinds = 0
    while position < len(records) or open_marks:
        if position < len(records) and len(open_marks) < 2:
            before = form(state)
            state, mark = core.mark(state)
            open_marks.append((mark, position, len(outputs), before))
            size = rng.randint(1, 9)
            state, outs = step_all(core, state, records[position : position + size])
            outputs.extend(outs)
            position = min(position + size, len(records))
        elif rng.random() < 0.3:  # the oldest open batch aborted
            mark, position, produced, before = open_marks[0]
            state = core.rewind(state, mark)
            assert state is not None
            assert form(state) == before
            del outputs[produced:]
            open_marks = []
            rewinds += 1
        else:  # the oldest open batch committed
            mark, *_ = open_marks.pop(0)
            core.forget(state, mark)
    assert rewinds > 0
    assert outputs == whole_outputs
    assert form(state) == whole_state


def test_the_native_core_cannot_rewind_across_a_replaced_state() -> None:
    cfg = config()
    core = NativeSchedulerCore(cfg, PARTITION, self_check=False)
    records = history()
    state, _ = step_all(core, core.initial_state(), records[:10])
    state, mark = core.mark(state)
    state, _ = step_all(core, state, records[10:20])
    replaced = plain(state)
    state, _ = core.step(replaced, records[20])  # a SchedulerState is loaded: the log is gone with the old state
    assert core.rewind(state, mark) is None


def test_a_native_rewind_accepts_the_handle_from_before_an_abandoned_plan_but_not_a_lost_state() -> None:
    cfg = config()
    core = NativeSchedulerCore(cfg, PARTITION, self_check=False)
    records = history()
    state, _ = step_all(core, core.initial_state(), records[:10])
    committed = form(state)
    held, mark = core.mark(state)
    moved, _ = step_all(core, held, records[10:20])  # the shell still holds ``held`` when the batch aborts
    rewound = core.rewind(held, mark)
    assert rewound is not None and form(rewound) == committed
    other = NativeSchedulerCore(cfg, PARTITION, self_check=False)
    assert other.rewind(rewound, 1) is None  # a handle of another core
    assert moved is not rewound


def test_a_python_copy_of_a_run_shares_nothing_with_it() -> None:
    cfg = config()
    state, _ = step_all(SchedulerCore(cfg), initial_state(cfg, PARTITION), history()[:12])
    run = next(iter(state.runs.values()))
    copy = copy_run(run)
    assert copy == run
    run.stages["new"] = "x"
    run.submissions["new"] = "x"
    run.evidence["new"] = "x"
    run.blobs.add("new")
    for session in run.sessions.values():
        session.next_index += 1
    assert "new" not in copy.stages and "new" not in copy.submissions and "new" not in copy.evidence
    assert "new" not in copy.blobs
    assert copy != run
