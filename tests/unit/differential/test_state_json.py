"""The native core writes the state's canonical JSON itself (``native/src/state_json.rs``): a snapshot of a large
state no longer exports it into Python objects on the loop. It must be ``state_bytes`` byte for byte."""

from __future__ import annotations

import json

import pytest

from bernstein.consumers.core.model import RunState, SchedulerState, SessionState
from bernstein.consumers.core.native import NativeSchedulerCore, StaleState
from bernstein.consumers.core.snapshot import Positions, encode_canonical, encode_form, snapshot_form, snapshot_json, state_bytes
from tests.support.core_history import config, history, step_all
from tests.support.cores import PARTITION

AWKWARD = ["plain", 'quote " and \\ backslash', "tab\t nl\n cr\r bs\b ff\f nul\x00 esc\x1b del\x7f", "é ü ß", "中文", "😀 𝄞", ""]


def test_the_native_json_of_every_state_of_a_history_is_state_bytes() -> None:
    cfg = config()
    core = NativeSchedulerCore(cfg, PARTITION, self_check=False)
    state = core.initial_state()
    assert core.state_json(state) == state_bytes(core.to_scheduler_state())
    for record in history():
        state, _ = core.step(state, record)
        assert core.state_json(state) == state_bytes(core.to_scheduler_state()), record.offset


def test_strings_python_escapes_are_escaped_alike() -> None:
    cfg = config()
    core = NativeSchedulerCore(cfg, PARTITION, self_check=False)
    state = SchedulerState(partition=PARTITION, audit_seq=7, audit_head=AWKWARD[2], checkpoint_seq=2, checkpoint_head=AWKWARD[5])
    for i, text in enumerate(AWKWARD):
        state.runs[f"{text}-{i}"] = RunState(
            head=text,
            entry_count=i,
            stages={text: AWKWARD[-1 - i], f"b{i}": text},
            evidence={AWKWARD[-1 - i]: text},
            closed=i % 2 == 0,
            sealed_count=i,
            sessions={text: SessionState(2**70 + i, AWKWARD[-1 - i], i % 3 == 0)},
            submissions={f"s{i}": text},
            evidence_bytes=i * 1000,
            blobs={text, "z", "a", "é", "😀"},
        )
    handle = core.load(state)
    expected = state_bytes(state)
    assert core.state_json(handle) == expected
    assert json.loads(expected)["runs"][3][1]["sessions"][0][1] == 2**70 + 3  # big integers survive


def test_the_snapshot_records_equal_those_of_the_python_form() -> None:
    cfg = config()
    core = NativeSchedulerCore(cfg, PARTITION, self_check=False)
    state, _ = step_all(core, core.initial_state(), history()[:40])
    positions = Positions(40, 123, 456, 7)
    python = encode_form(snapshot_form(core.to_scheduler_state(), positions), audit_secret=b"k" * 32, audit_key_id="k1")
    native = encode_canonical(
        snapshot_json(core.state_json(state), positions), PARTITION, 40, audit_secret=b"k" * 32, audit_key_id="k1"
    )
    assert native == python


def test_a_stale_handle_is_refused() -> None:
    cfg = config()
    core = NativeSchedulerCore(cfg, PARTITION, self_check=False)
    first = core.initial_state()
    step_all(core, first, history()[:2])
    with pytest.raises(StaleState):
        core.state_json(first)
