"""What the scheduler keeps for one producer is bounded: a producer may have at most
``max_open_runs`` runs open at once (the roles manifest; default ``DEFAULT_MAX_OPEN_RUNS``). A record that would open
one more is refused with OPEN_RUNS_EXCEEDED by both cores alike; a close frees a place. The counts are part of the
state's meaning, so they survive every way a state is rebuilt: a snapshot, the restart fold, a rewind."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from bernstein.consumers.core.model import DEFAULT_MAX_OPEN_RUNS, ProducerRegistry, SchedulerConfig, Stream, count_open_runs
from bernstein.consumers.core.rebuild import rebuild_state
from bernstein.consumers.core.snapshot import state_form, state_of_form
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.consumers.manifest import ManifestError, parse_manifest
from bernstein.schemas import codec
from tests.support.core_history import make_core, plain, step_all
from tests.support.cores import PARTITION, PRODUCERS, Pair, enc_close, enc_sub, kinds, make_config
from tests.support.producers import NAMES, producer, producer_signer

LIMITED = "unit@test"
OTHER = "navigator@test"


def limited_config(limit: int = 2) -> SchedulerConfig:
    """The native tests' producers, unit@test allowed ``limit`` open runs."""
    producers = [dataclasses.replace(p, max_open_runs=limit) if p.name == LIMITED else p for p in PRODUCERS.producers.values()]
    return dataclasses.replace(make_config(), producers=ProducerRegistry.of(producers))


def open_stage(pair: Pair, run_id: str, stage_id: str = "s0", by: str = LIMITED) -> list[Any]:
    value = enc_sub(run_id=run_id, stage_id=stage_id, pages=[f"{run_id}/{stage_id}".encode()], producer={"id": by, "sdk": "x"})
    return pair.feed(value, key=run_id.encode())


def test_a_producer_at_its_limit_cannot_open_another_run_until_it_closes_one() -> None:
    pair = Pair(limited_config())
    assert kinds(open_stage(pair, "run-a"))[0] == codec.JOURNAL_RECORD
    assert kinds(open_stage(pair, "run-b"))[0] == codec.JOURNAL_RECORD
    assert pair.py_state.open_runs == {LIMITED: 2}
    # its open runs still take stages; another producer still opens runs
    assert kinds(open_stage(pair, "run-a", "s1"))[0] == codec.JOURNAL_RECORD
    assert kinds(open_stage(pair, "run-x", by=OTHER))[0] == codec.JOURNAL_RECORD
    before = dict(pair.py_state.runs)
    outs = open_stage(pair, "run-c")
    assert kinds(outs) == [codec.REFUSAL_V2, codec.AUDIT_RECORD_V2]
    refusal = codec.decode(outs[0].value).record
    assert {k: refusal[k] for k in ("code", "message", "field", "declared", "recomputed", "producer", "authenticated")} == {
        "code": "OPEN_RUNS_EXCEEDED",
        "message": f"producer '{LIMITED}' already has 2 open runs, its limit (max_open_runs in the roles manifest); "
        "close one before opening run 'run-c'",
        "field": "run_id",
        "declared": "run-c",
        "recomputed": "2",
        "producer": LIMITED,
        "authenticated": True,
    }
    assert refusal["key_id"] == producer_signer(LIMITED).key_id
    assert pair.py_state.runs == before and pair.py_state.open_runs == {LIMITED: 2, OTHER: 1}  # nothing kept of it
    pair.feed(enc_close("run-a"), key=b"run-a")  # a close frees a place
    assert pair.py_state.open_runs == {LIMITED: 1, OTHER: 1}
    assert kinds(open_stage(pair, "run-c"))[0] == codec.JOURNAL_RECORD
    assert pair.py_state.open_runs == {LIMITED: 2, OTHER: 1}
    assert pair.native.fallbacks == 0, "the native core decided every record itself"


def test_the_counts_are_rebuilt_from_a_snapshot_and_from_the_journal() -> None:
    pair = Pair(limited_config())
    open_stage(pair, "run-a")
    open_stage(pair, "run-b")
    open_stage(pair, "run-x", by=OTHER)
    pair.feed(enc_close("run-b"), key=b"run-b")
    expected = {LIMITED: 1, OTHER: 1}
    assert pair.py_state.open_runs == expected
    assert state_of_form(state_form(pair.py_state)).open_runs == expected
    journal = [o.value for o in pair.outputs if o.stream is Stream.JOURNAL]
    audit = [o.value for o in pair.outputs if o.stream is Stream.AUDIT]
    for native in (False, True):
        rebuilt = rebuild_state(pair.config, PARTITION, journal, audit, native=native)
        assert rebuilt.open_runs == expected and rebuilt.runs == pair.py_state.runs  # (no checkpoints folded here)
        assert {run_id: run.opened_by for run_id, run in rebuilt.runs.items()} == {
            "run-a": LIMITED,
            "run-b": LIMITED,
            "run-x": OTHER,
        }
    # the native core loaded with a rebuilt state counts the same, and refuses the same
    pair.native.load(rebuilt)
    assert pair.native.to_scheduler_state().open_runs == expected


def test_a_snapshot_from_before_open_run_limits_loads_and_counts_nothing_for_its_runs() -> None:
    pair = Pair(limited_config())
    open_stage(pair, "run-a")
    form = state_form(pair.py_state)
    for _, run in form["runs"]:
        del run["opened_by"]
    old = state_of_form(form)
    assert old.runs["run-a"].opened_by == "" and old.open_runs == {}


@pytest.mark.parametrize("kind", ("python", "native"))
def test_a_rewind_puts_the_counts_back(kind: str) -> None:
    cfg = limited_config(limit=1)
    core = make_core(kind, cfg)
    first = Pair(cfg)
    records = [first.record(enc_sub(run_id="run-a", stage_id="s0", pages=[b"a"]), key=b"run-a")]
    state, _ = step_all(core, initial_state(cfg, PARTITION), records)
    state, mark = core.mark(state)
    records = [
        first.record(enc_close("run-a"), key=b"run-a"),
        first.record(enc_sub(run_id="run-b", stage_id="s0", pages=[b"b"]), key=b"run-b"),
    ]
    state, _ = step_all(core, state, records)
    assert plain(state).open_runs == {LIMITED: 1} and "run-b" in plain(state).runs
    state = core.rewind(state, mark)
    assert state is not None and plain(state).open_runs == {LIMITED: 1} and "run-b" not in plain(state).runs
    # at the mark again: run-a is open, so a second run is refused
    state, outs = step_all(core, state, [first.record(enc_sub(run_id="run-c", stage_id="s0", pages=[b"c"]), key=b"run-c")])
    assert codec.decode(outs[0].value).record["code"] == "OPEN_RUNS_EXCEEDED"


def test_count_open_runs_counts_only_open_runs_with_an_opener() -> None:
    cfg = make_config()
    state, _ = step_all(SchedulerCore(cfg), initial_state(cfg, PARTITION), [])
    assert count_open_runs(state.runs) == {}
    pair = Pair(cfg)
    open_stage(pair, "run-a")
    open_stage(pair, "run-b")
    pair.feed(enc_close("run-a"), key=b"run-a")
    pair.py_state.runs["run-b"].opened_by = ""
    assert count_open_runs(pair.py_state.runs) == {}
    pair.py_state.runs["run-b"].opened_by = LIMITED
    assert count_open_runs(pair.py_state.runs) == {LIMITED: 1}


def _manifest(extra: str) -> str:
    key = producer_signer(LIMITED).public_key_raw.hex()
    return (
        '[[roles]]\nrole = "developer"\n\n[[producers]]\n'
        f'name = "{LIMITED}"\nroles = ["developer"]\n{extra}\n  [[producers.keys]]\n  public_key = "{key}"\n'
    )


def test_the_manifest_reads_max_open_runs_and_refuses_nonsense() -> None:
    assert parse_manifest(_manifest("")).producers.producers[LIMITED].max_open_runs == DEFAULT_MAX_OPEN_RUNS
    assert parse_manifest(_manifest("max_open_runs = 3")).producers.producers[LIMITED].max_open_runs == 3
    for bad in ("0", "-1", "true", '"10"', "1.5", str(1 << 40)):
        with pytest.raises(ManifestError, match="max_open_runs must be a whole number"):
            parse_manifest(_manifest(f"max_open_runs = {bad}"))


def test_the_test_identities_keep_the_default_limit() -> None:
    assert {producer(name).max_open_runs for name in NAMES} == {DEFAULT_MAX_OPEN_RUNS}
