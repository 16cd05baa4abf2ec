"""What the partition's Merkle log costs the scheduler: the native core with its log against the same core without.

    python -m bench.tlog [--records 200000] [--rounds 5] [--stages 10]

No services needed. The inputs are ``bench.scheduler``'s (signed ActivitySubmission.v3 with three
sized observations, runs of ``--stages`` stages, each run closed with a signed RunClose), built once.
Two native cores step them in batches of 500 (as the shell does), interleaved, ``--rounds`` times
each: one as it runs in production, and one told to stop appending to its Merkle log
(``disable_merkle_log_for_benchmark``: the same binary, so the difference is the log's work: one
leaf built, hashed and folded into the frontier per entry and per seal, and nothing else; both
still sign every checkpoint's note). Process CPU time, best round of each; the arms take turns going first
(the arm run first in every round paid for the previous round's garbage: 5 us a record of false cost).

The last line is ``with_log_vs_without=<ratio> log_us_per_record=<us>``: the core's throughput with its
log over without. The scheduler's whole process spends more per record than its core (Kafka
clients, the transaction shell: ``bench.scheduler`` prints its CPU per record), so the log's share
of the whole scheduler is smaller than this ratio says.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.scheduler import config, signed_close, submission
from bernstein.consumers.core.model import InputRecord
from bernstein.consumers.core.native import NativeSchedulerCore

TOPIC = "bench.activity.submissions"
BATCH = 500


def inputs(records: int, stages: int) -> list[InputRecord]:
    """``records`` inputs: runs of ``stages`` signed stages, each followed by its signed close."""
    values: list[tuple[bytes, bytes]] = []
    run = 0
    while len(values) < records:
        run_id = f"run-{run}"
        values += [(run_id.encode(), submission(i, run_id)) for i in range(stages)]
        values.append((run_id.encode(), signed_close(run_id)))
        run += 1
    return [
        InputRecord(TOPIC, 0, offset, 1_767_225_600_000 + offset, key, value)
        for offset, (key, value) in enumerate(values[:records])
    ]


def _round(core: NativeSchedulerCore, records: list[InputRecord]) -> tuple[float, Any]:
    state: Any = core.initial_state()
    started = time.process_time()
    for at in range(0, len(records), BATCH):
        state, _ = core.step_many(state, records[at : at + BATCH])
    return time.process_time() - started, state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stages", type=int, default=10)
    args = parser.parse_args()
    records = inputs(args.records, args.stages)
    cfg = config()
    timings: dict[str, list[float]] = {"with": [], "without": []}
    leaves: dict[str, int] = {}
    for round_ in range(args.rounds):
        for arm in ("with", "without") if round_ % 2 == 0 else ("without", "with"):  # neither arm always goes first
            core = NativeSchedulerCore(cfg, 0, self_check=False)
            if arm == "without":
                core._native.disable_merkle_log_for_benchmark()
            seconds, state = _round(core, records)
            timings[arm].append(seconds)
            leaves[arm] = state.to_scheduler_state().tree.size
            assert core.fallbacks == 0, "every record stepped natively"
    assert leaves["without"] == 0 < leaves["with"], leaves
    best = {arm: min(values) for arm, values in timings.items()}
    rate = {arm: len(records) / seconds for arm, seconds in best.items()}
    cost_us = (best["with"] - best["without"]) / len(records) * 1e6
    print(f"{len(records)} records ({leaves['with']} leaves: entries and seals), best of {args.rounds} rounds each")
    for arm in ("with", "without"):
        print(f"  {arm} the log: {rate[arm]:,.0f} records/s ({best[arm] / len(records) * 1e6:.2f} us CPU per record)")
    print(f"with_log_vs_without={rate['with'] / rate['without']:.3f} log_us_per_record={cost_us:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
