"""Bounded state: a closed run keeps only what later inputs to it can still produce.

Every later input to a closed run is refused. A submission or computer-use action whose
submission_id the run journalled is DUPLICATE_SUBMISSION, naming the earlier stage or session
(checked before RUN_CLOSED); everything else is RUN_CLOSED. So at its final seal a run keeps its
submission map, head, entry count and sealed count, and drops its stages, evidence sets, sessions
and blob digests, in both cores and in the rebuild. These tests pin that the reduction changes no
output: the same later inputs give byte-identical outputs with and without it.
"""

from __future__ import annotations

from typing import Any

import pytest

from bernstein.consumers.core.model import OutputRecord, RunState, SchedulerState
from bernstein.consumers.core.rebuild import _apply_entry
from bernstein.schemas import codec
from bernstein.schemas.canonical import canonical_json
from bernstein.schemas.records import BROWSER_SESSION_FORMAT
from tests.support.core_driver import Driver, cu_action, decode_out, enc_close, enc_sub, mixed_inputs, run_all
from tests.support.cores import Pair

Inputs = list[tuple[bytes | None, bytes | None]]


def _before_close() -> Inputs:
    """Run run-1: a computer-use action of session browser-0 and two stages with evidence; run-2 stays open."""
    return [
        (b"run-1", cu_action(index=0)),
        (b"run-1", enc_sub(stage_id="s1", pages=[b"one", b"shared"], submission_id="first")),
        (b"run-1", enc_sub(stage_id="s2", pages=[b"two"], submission_id="second")),
        (b"run-2", enc_sub(run_id="run-2", stage_id="s1", pages=[b"open"])),
    ]


def _after_close() -> Inputs:
    """Every kind of later input to the closed run-1, each one that an unreduced run would answer from its maps."""
    return [
        (b"run-1", enc_sub(stage_id="s1", pages=[b"one", b"shared"], submission_id="first")),  # a retried publish
        (b"run-1", enc_sub(stage_id="s9", pages=[b"new"], submission_id="second")),  # the id again, another stage
        (b"run-1", enc_sub(stage_id="s1", pages=[b"fresh"], submission_id="third")),  # a stage it accepted
        (b"run-1", enc_sub(stage_id="s3", pages=[b"shared", b"one"], submission_id="fourth")),  # evidence it holds
        (b"run-1", cu_action(index=0)),  # the action again: its submission_id is journalled
        (b"run-1", cu_action(index=1)),  # the session's next action
        (b"run-1", _browser_result()),  # the session's browser result, naming its head after one action
        (b"run-1", enc_close("run-1")),  # a second close
        (b"run-2", enc_sub(run_id="run-2", stage_id="s2", pages=[b"still open"])),
    ]


def _browser_result() -> bytes:
    """The browser stage that would end session browser-0 of an open run-1 (its head anchor after action 0)."""
    anchor = codec.decode(cu_action(index=0)).record["anchor"]
    document = {"format": BROWSER_SESSION_FORMAT, "session_id": "browser-0", "head_anchor": anchor, "action_count": 1}
    return enc_sub(
        role="navigator",
        kind="browser",
        stage_id="browser-0",
        pages=[b"end"],
        artifact=canonical_json(document),
        submission_id="end",
    )


def _feed(driver: Driver, inputs: Inputs) -> list[OutputRecord]:
    before = len(driver.outputs)
    for key, value in inputs:
        driver.feed(value, key=key)
    return driver.outputs[before:]


def _unreduced_close(self: RunState) -> None:
    """The state shape before bounded state: a final seal only marked the run closed."""
    self.closed = True


def _closed_then(later: Inputs, *, reduce: bool) -> tuple[Driver, list[OutputRecord]]:
    """run-1 closed after ``_before_close``, then ``later``: the driver and the outputs of ``later``."""
    with pytest.MonkeyPatch.context() as patch:
        if not reduce:
            patch.setattr(RunState, "close", _unreduced_close)
        d = Driver()
        _feed(d, [*_before_close(), (b"run-1", enc_close("run-1"))])
        return d, _feed(d, later)


def _refusals(outputs: list[OutputRecord]) -> list[tuple[str, str | None]]:
    return [(r.record["code"], r.record["earlier_stage_id"]) for r in map(decode_out, outputs) if r.what == "refusal"]


def test_a_closed_run_keeps_its_submissions_head_and_counts_and_nothing_else() -> None:
    d = Driver()
    _feed(d, [*_before_close(), (b"run-1", enc_close("run-1"))])
    seal = decode_out([o for o in d.outputs if o.value and decode_out(o).what == "seal"][-1]).inner
    run = d.state.runs["run-1"]
    assert run == RunState(
        head=seal["head_hash"],
        entry_count=3,
        stages={},
        evidence={},
        closed=True,
        sealed_count=3,
        sessions={},
        submissions={"action-0": "browser-0", "first": "s1", "second": "s2"},
        evidence_bytes=0,
        blobs=set(),
        opened_by="navigator@test",  # its first record's producer: the run no longer counts toward its open runs
    )
    assert (seal["entry_count"], seal["final"]) == (3, True)
    assert d.state.open_runs == {"unit@test": 1}  # run-2, still open
    # the open run keeps everything its later inputs are checked against
    open_run = d.state.runs["run-2"]
    assert not open_run.closed and list(open_run.stages) == ["s1"] and len(open_run.blobs) == 1


def test_the_browser_result_is_what_the_open_run_would_accept() -> None:
    d = Driver()
    _feed(d, _before_close())
    outs = d.feed(_browser_result(), key=b"run-1")
    assert outs[0].what == "journal-entry" and d.state.runs["run-1"].sessions["browser-0"].closed


def test_later_inputs_to_a_closed_run_give_the_outputs_of_an_unreduced_run() -> None:
    old, old_outputs = _closed_then(_after_close(), reduce=False)
    assert set(old.state.runs["run-1"].stages) == {"s1", "s2"} and old.state.runs["run-1"].sessions  # kept, unreduced
    new, new_outputs = _closed_then(_after_close(), reduce=True)
    assert new.state.runs["run-1"].stages == {} and new.state.runs["run-1"].sessions == {}
    assert [(o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in new_outputs] == [
        (o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in old_outputs
    ]
    assert _refusals(new_outputs) == [
        ("DUPLICATE_SUBMISSION", "s1"),
        ("DUPLICATE_SUBMISSION", "s2"),
        ("RUN_CLOSED", None),
        ("RUN_CLOSED", None),
        ("DUPLICATE_SUBMISSION", "browser-0"),
        ("RUN_CLOSED", None),
        ("RUN_CLOSED", None),
        ("RUN_CLOSED", None),
    ]
    # the open run's stage is journalled in both
    assert [decode_out(o).what for o in new_outputs[-2:]] == ["journal-entry", "audit"]
    assert new.state.runs["run-2"] == old.state.runs["run-2"]


def test_rebuilding_from_the_journal_gives_the_reduced_state_the_step_left() -> None:
    d, _ = _closed_then(_after_close(), reduce=True)
    rebuilt = d.rebuilt()
    assert rebuilt == d.state
    assert rebuilt.runs["run-1"].closed and rebuilt.runs["run-1"].stages == {} and rebuilt.runs["run-1"].blobs == set()
    assert rebuilt.runs["run-1"].submissions == {"action-0": "browser-0", "first": "s1", "second": "s2"}
    # the mixed traffic of the core's tests: two runs closed (one with periodic seals), one open
    mixed = run_all(mixed_inputs())
    assert mixed.rebuilt() == mixed.state
    assert [run_id for run_id, run in mixed.state.runs.items() if run.closed and not run.stages] == ["run-a", "run-b"]
    # a journal folded without the reduction differs only in what a closed run drops
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RunState, "close", _unreduced_close)
        unreduced = d.rebuilt()
    assert unreduced != d.state and unreduced.runs["run-1"].stages.keys() == {"s1", "s2"}
    for run in unreduced.runs.values():
        if run.closed:
            run.close()
    assert unreduced == d.state


def test_a_restart_after_the_close_refuses_later_inputs_byte_for_byte_as_never_stopping() -> None:
    whole, whole_later = _closed_then(_after_close(), reduce=True)
    resumed = Driver()
    first, _ = _closed_then([], reduce=True)
    resumed.state, resumed.offset = first.rebuilt(), first.offset
    assert resumed.state == first.state
    assert _feed(resumed, _after_close()) == whole_later
    assert resumed.state == whole.state


def test_the_native_core_reduces_a_closed_run_as_the_reference_does() -> None:
    pair = Pair()
    for key, value in [*_before_close(), (b"run-1", enc_close("run-1")), *_after_close()]:
        pair.feed(value, key=key)  # outputs byte-identical, exported state equal after every record
    exported = pair.native.to_scheduler_state()
    assert exported == pair.py_state
    run = exported.runs["run-1"]
    assert (run.closed, run.stages, run.evidence, run.sessions, run.blobs, run.evidence_bytes) == (True, {}, {}, {}, set(), 0)
    assert run.submissions == {"action-0": "browser-0", "first": "s1", "second": "s2"}
    # a rebuilt (reduced) state loaded into the native core goes on like the reference
    d, _ = _closed_then([], reduce=True)
    loaded = Pair()
    loaded.py_state, loaded.state, loaded.offset = d.rebuilt(), d.rebuilt(), d.offset
    for key, value in _after_close():
        loaded.feed(value, key=key)
    assert loaded.native.to_scheduler_state() == loaded.py_state


def test_a_closed_run_costs_the_same_whatever_its_stages_held() -> None:
    """What stays of a closed run does not grow with its evidence: only with its submission count."""

    def closed_run(pages_per_stage: int) -> SchedulerState:
        d = Driver()
        inputs: Inputs = [
            (b"run-1", enc_sub(stage_id=f"s{i}", pages=[b"%d-%d" % (i, p) for p in range(pages_per_stage)])) for i in range(5)
        ]
        _feed(d, [*inputs, (b"run-1", enc_close("run-1"))])
        return d.state

    small, large = closed_run(1), closed_run(20)
    assert small.runs["run-1"].submissions == large.runs["run-1"].submissions
    assert small.runs["run-1"].blobs == large.runs["run-1"].blobs == set()


class _ReferenceOnly:
    """The extension, except that every record goes to the Python reference (its lazy view of the native state)."""

    def __init__(self, native: Any) -> None:
        self._real = native

    def step_one(self, record: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_close_the_reference_steps_for_the_native_core_reduces_the_native_run() -> None:
    pair = Pair()
    for key, value in _before_close():
        pair.feed(value, key=key)
    real = pair.native._native
    pair.native._native = _ReferenceOnly(real)  # type: ignore[assignment]
    fallbacks = pair.native.fallbacks
    pair.feed(enc_close("run-1"), key=b"run-1")  # written back through apply_run
    assert pair.native.fallbacks == fallbacks + 1
    pair.native._native = real
    for key, value in _after_close():
        pair.feed(value, key=key)
    run = pair.native.to_scheduler_state().runs["run-1"]
    assert (run.closed, run.stages, run.evidence, run.sessions, run.blobs, run.evidence_bytes) == (True, {}, {}, {}, set(), 0)
    assert run.submissions == {"action-0": "browser-0", "first": "s1", "second": "s2"}


def test_an_entry_folded_after_a_final_seal_grows_only_the_closed_runs_submission_ids() -> None:
    """The step never journals after a final seal; the fold, given one that chains, keeps the run reduced."""
    stages: Inputs = [(b"run-1", enc_sub(stage_id=f"s{i}", pages=[b"%d" % i], submission_id=f"id-{i}")) for i in range(2)]
    open_run = Driver()
    _feed(open_run, stages)
    closed = Driver()
    _feed(closed, [stages[0], (b"run-1", enc_close("run-1"))])
    state = closed.rebuilt()
    # the second entry of the open run chains onto the closed run's head (same first entry, same offset)
    second = codec.decode(open_run.journal_values()[1]).record
    assert _apply_entry(state, codec.default_codec(), second) is None
    run = state.runs["run-1"]
    assert (run.entry_count, run.head) == (2, open_run.state.runs["run-1"].head)
    assert run.submissions == {"id-0": "s0", "id-1": "s1"}
    assert (run.closed, run.stages, run.evidence, run.blobs, run.evidence_bytes) == (True, {}, {}, set(), 0)
