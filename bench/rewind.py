"""After an aborted transaction: rewinding the state in memory against rebuilding it.

    python -m bench.rewind [--runs 200] [--stages 100] [--batch 500] [--repeats 5] [--core native|python]

No services needed: the core is stepped directly. The history is ``--runs`` runs of ``--stages``
signed submissions each, interleaved, every run closed at the end (``bench.state_memory``'s
inputs), the most a rebuild folds after a snapshot at the default cadence (20k inputs).

- rebuild: what a recovery did before: ``rebuild_state`` over the committed outputs of the
  history (journal, audit, checkpoints), then loading it into the core. Reading those records
  from Kafka comes on top in the scheduler, so this understates the rebuild.
- rewind: what a recovery does now: two batches of ``--batch`` inputs planned past the last
  commit (the shell plans the next batch while the previous one commits), then
  ``rewind`` to the mark before the first.
- overhead: stepping the whole history in batches of ``--batch``, with a mark before every batch
  and the previous one forgotten (the shell's pattern), against the same without marks.

The rebuild and rewind figures are the median of ``--repeats``, the step times the fastest. The last line is the headline,
``rebuild_vs_rewind=<rebuild seconds / rewind seconds> marked_vs_unmarked=<step time ratio>``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.scheduler import config
from bench.state_memory import _inputs
from bernstein.consumers.core.model import InputRecord, OutputRecord, Stream
from bernstein.consumers.core.native import NativeSchedulerCore, NativeState
from bernstein.consumers.core.rebuild import rebuild_state
from bernstein.consumers.core.snapshot import state_bytes
from bernstein.consumers.core.step import SchedulerCore, initial_state


def _core(name: str) -> Any:
    cfg = config()
    return SchedulerCore(cfg) if name == "python" else NativeSchedulerCore(cfg, 0, self_check=False)


def _start(core: Any) -> Any:
    return core.initial_state() if isinstance(core, NativeSchedulerCore) else initial_state(core.config, 0)


def _interleaved(runs: int, stages: int) -> list[InputRecord]:
    """The runs' inputs round-robin (as many producers publish at once), offsets renumbered."""
    by_run: dict[bytes | None, list[InputRecord]] = {}
    for record in _inputs(runs, stages, 3, close=True):
        by_run.setdefault(record.key, []).append(record)
    lanes = list(by_run.values())
    mixed = [lane[i] for i in range(max(len(lane) for lane in lanes)) for lane in lanes if i < len(lane)]
    return [InputRecord(r.topic, 0, offset, 1_760_000_000_000 + offset, r.key, r.value) for offset, r in enumerate(mixed)]


def _step(core: Any, state: Any, records: list[InputRecord], batch: int, *, marks: bool) -> tuple[Any, list[OutputRecord]]:
    outputs: list[OutputRecord] = []
    previous: int | None = None
    for start in range(0, len(records), batch):
        if marks:
            state, mark = core.mark(state)
            if previous is not None:
                core.forget(state, previous)
            previous = mark
        state, results = (
            core.step_many(state, records[start : start + batch])
            if isinstance(core, NativeSchedulerCore)
            else _python_many(core, state, records[start : start + batch])
        )
        for outs in results:
            outputs.extend(outs)
    return state, outputs


def _python_many(core: SchedulerCore, state: Any, records: list[InputRecord]) -> tuple[Any, list[list[OutputRecord]]]:
    results = []
    for record in records:
        state, outs = core.step(state, record)
        results.append(outs)
    return state, results


def _plain(state: Any) -> Any:
    return state.to_scheduler_state() if isinstance(state, NativeState) else state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--stages", type=int, default=100)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--core", choices=("native", "python"), default="native")
    args = parser.parse_args()

    records = _interleaved(args.runs, args.stages)
    cut = len(records) - 2 * args.batch
    print(f"history: {len(records)} inputs over {args.runs} runs; {args.core} core; batches of {args.batch}")

    rebuilds, rewinds, plain_steps, marked_steps = [], [], [], []
    for _ in range(args.repeats):
        core = _core(args.core)
        began = time.perf_counter()
        state, outputs = _step(core, _start(core), records, args.batch, marks=False)
        plain_steps.append(time.perf_counter() - began)
        core = _core(args.core)
        began = time.perf_counter()
        _step(core, _start(core), records, args.batch, marks=True)
        marked_steps.append(time.perf_counter() - began)

        committed = [o for o in outputs if o.stream in (Stream.JOURNAL, Stream.AUDIT, Stream.CHECKPOINTS)]
        core = _core(args.core)
        began = time.perf_counter()
        rebuilt = rebuild_state(
            core.config,
            0,
            (o.value for o in committed if o.stream is Stream.JOURNAL),
            (o.value for o in committed if o.stream is Stream.AUDIT),
            checkpoint_values=(o.value for o in committed if o.stream is Stream.CHECKPOINTS),
        )
        loaded, _ = core.mark(rebuilt)  # the first plan after a rebuild loads the state into the core
        rebuilds.append(time.perf_counter() - began)

        # the rewind: the history up to the last commit, then two batches planned past it
        core = _core(args.core)
        state, _ = _step(core, _start(core), records[:cut], args.batch, marks=False)
        at_commit = state_bytes(_plain(state))
        state, first = core.mark(state)
        state, _ = _step(core, state, records[cut : cut + args.batch], args.batch, marks=False)
        state, _ = core.mark(state)
        state, _ = _step(core, state, records[cut + args.batch :], args.batch, marks=False)
        began = time.perf_counter()
        rewound = core.rewind(state, first)
        rewinds.append(time.perf_counter() - began)
        assert rewound is not None and state_bytes(_plain(rewound)) == at_commit, "the rewound state differs"

    rebuild, rewind = statistics.median(rebuilds), statistics.median(rewinds)
    plain_s, marked_s = min(plain_steps), min(marked_steps)  # the least disturbed run of each (CPU-bound, noisy machine)
    print(f"rebuild (fold of {len(records)} inputs' outputs + load): {rebuild * 1000:.1f} ms")
    print(f"rewind of {2 * args.batch} inputs past the last commit: {rewind * 1000:.3f} ms")
    print(
        f"stepping {len(records)} inputs: {plain_s:.3f} s without marks, {marked_s:.3f} s with a mark per batch "
        f"({len(records) / plain_s:,.0f} vs {len(records) / marked_s:,.0f} inputs/s)"
    )
    print(f"rebuild_vs_rewind={rebuild / rewind:.0f} marked_vs_unmarked={marked_s / plain_s:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
