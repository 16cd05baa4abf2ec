"""What a snapshot costs the scheduler's loop, with the Rust core (latency).

    python -m bench.snapshot [--runs 200] [--stages 100] [--repeats 5]

No services needed. The state is the Rust core's after ``--runs`` runs of ``--stages`` signed
submissions each (``bench.rewind``'s history; the default is about the 20,000 inputs after
which a snapshot is taken). Two ways to take what the worker thread then compresses and MACs:

- before: export the state into Python objects (``to_scheduler_state``) and build its JSON form
  on the loop (``snapshot_form``; the canonical JSON itself was already built on the worker);
- now: the extension writes the state's canonical JSON (``state_json``), checked equal to
  ``state_bytes`` of the export.

Medians of ``--repeats``; the last line is ``loop_before_vs_now=<before / now>``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.rewind import _core, _interleaved, _start, _step
from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.consumers.core.snapshot import Positions, snapshot_form, state_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--stages", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    records = _interleaved(args.runs, args.stages)
    core = _core("native")
    assert isinstance(core, NativeSchedulerCore)
    state, _ = _step(core, _start(core), records, 500, marks=False)
    positions = Positions(len(records), 0, 0, 0)
    before, now = [], []
    for _ in range(args.repeats):
        began = time.perf_counter()
        form = snapshot_form(state.to_scheduler_state(), positions)
        before.append(time.perf_counter() - began)
        began = time.perf_counter()
        written = core.state_json(state)
        now.append(time.perf_counter() - began)
    assert form is not None and written == state_bytes(state.to_scheduler_state()), "the native JSON differs"
    b, n = statistics.median(before), statistics.median(now)
    print(f"state after {len(records)} inputs over {args.runs} runs: {len(written):,} bytes of canonical JSON")
    print(f"on the loop: export + form {b * 1000:.1f} ms, native canonical JSON {n * 1000:.1f} ms")
    print(f"loop_before_vs_now={b / n:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
