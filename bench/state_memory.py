"""Memory per closed run, before and after bounded state, in both scheduler cores.

    python -m bench.state_memory [--runs 2000] [--native-runs 10000] [--trials 3] [--stages 10] [--observations 3]

No services needed: the cores are stepped directly. Each measurement runs in its own child
process, over ``--runs`` runs of ``--stages`` accepted stages each (signed ActivitySubmission.v3
with ``--observations`` sized observations, as ``bench.scheduler`` publishes), every run then
closed with a signed RunClose.v2. The inputs are built before measuring; outputs are dropped.

- Python core: ``tracemalloc``'s traced bytes after the steps minus before, per run.
- Rust core: the resident set (``/proc/self/statm``) after minus before, per run, over
  ``--native-runs`` runs (RSS moves by pages and allocator arenas: more runs, less noise), the
  median of ``--trials`` children.

"before" is the state shape before bounded state, where a final seal only marked the run
closed. For the Python core it is measured by stepping with that old ``RunState.close``; the
Rust core cannot switch, so its "before" is the same runs left open (an unreduced closed run
held exactly the maps of the open run, plus two fields): the Python core measures both, so
the proxy's error is printed. An open run's cost per stage and per observation is printed
too (docs/scheduler.md, "How the scheduler's state grows").

The last line is the headline, ``closed_run_after_vs_before=<python ratio> native=<ratio>``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tracemalloc
from typing import Any

from bench.scheduler import PRODUCER, config, signed_close
from bernstein.consumers.core.model import InputRecord, RunState
from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    evidence_set_hash,
    sha256_digest,
    submission_signing_input,
    submission_statement,
)

TOPIC = "bench.activity.submissions"
SCENARIOS = ("closed", "closed-unreduced", "open", "open-double-observations")


def _submission(run: str, i: int, observations: int) -> bytes:
    obs: list[dict[str, Any]] = [
        {
            "kind": "file",
            "ref": f"src/module_{i}_{j}.py",
            "content_hash": sha256_digest(f"{run}:{i}:{j}".encode()),
            "size": 64,
        }
        for j in range(observations)
    ]
    artifact = f"--- a/src/module_{i}.py\n+++ b/src/module_{i}.py\n".encode()
    record = {
        "submission_id": f"{run}-{i}",
        "run_id": run,
        "stage_id": f"stage-{i}",
        "role": "developer",
        "producer": {"id": "bench", "sdk": "bench"},
        "kind": "coding",
        "artifact": artifact,
        "artifact_hash": sha256_digest(artifact),
        "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in obs),
        "observations": obs,
        "terminal_state": "completed",
        "reason_code": "ok",
        "occurred_at_ms": 1_700_000_000_000 + i,
    }
    signature = PRODUCER.sign(submission_signing_input(submission_statement(record, PRODUCER.key_id)))
    return codec.encode(
        codec.ACTIVITY_SUBMISSION_V3, {**record, "producer_key_id": PRODUCER.key_id, "producer_signature": signature}
    )


def _inputs(runs: int, stages: int, observations: int, *, close: bool) -> list[InputRecord]:
    values: list[tuple[bytes, bytes]] = []
    for r in range(runs):
        run = f"run-{r:06d}"
        values += [(run.encode(), _submission(run, i, observations)) for i in range(stages)]
        if close:
            values.append((run.encode(), signed_close(run)))
    return [InputRecord(TOPIC, 0, offset, 1_760_000_000_000 + offset, key, value) for offset, (key, value) in enumerate(values)]


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _unreduced_close(self: RunState) -> None:
    self.closed = True


def child(core_name: str, scenario: str, runs: int, stages: int, observations: int) -> dict[str, Any]:
    """One measurement: bytes the state grew by over ``runs`` runs (and a check that it is what was asked)."""
    if scenario == "closed-unreduced":
        RunState.close = _unreduced_close  # type: ignore[method-assign]  # the shape before bounded state
    if scenario == "open-double-observations":
        observations *= 2
    records = _inputs(runs, stages, observations, close=scenario.startswith("closed"))
    cfg = config()
    core: Any = SchedulerCore(cfg) if core_name == "python" else NativeSchedulerCore(cfg, 0, self_check=False)
    state: Any = initial_state(cfg, 0) if core_name == "python" else core.initial_state()
    # one run first, so caches and the allocator's first arenas are not counted per run
    warm = _inputs(1, stages, observations, close=False)
    for rec in warm:
        state, _ = core.step(state, InputRecord(TOPIC, 0, rec.offset, rec.timestamp_ms, b"warm-up", rec.value))
    gc.collect()
    if core_name == "python":
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
    else:
        before = _rss()
    for rec in records:
        state, outputs = core.step(state, rec)
        del outputs
    gc.collect()
    after = tracemalloc.get_traced_memory()[0] if core_name == "python" else _rss()
    final = state if core_name == "python" else core.to_scheduler_state()
    measured = [run for run_id, run in final.runs.items() if run_id.startswith("run-")]
    assert len(measured) == runs and all(run.entry_count == stages for run in measured)
    assert all(run.closed == scenario.startswith("closed") for run in measured)
    return {"bytes": after - before, "per_run": (after - before) / runs}


def _run_child(core: str, scenario: str, args: argparse.Namespace) -> float:
    runs, trials = (args.runs, 1) if core == "python" else (args.native_runs, args.trials)
    command = [sys.executable, "-m", "bench.state_memory", "--child", core, scenario]
    command += ["--runs", str(runs), "--stages", str(args.stages), "--observations", str(args.observations)]
    results: list[float] = []
    for _ in range(trials):
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1])["per_run"])
    return statistics.median(results)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.state_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--native-runs", type=int, default=10000)
    parser.add_argument("--trials", type=int, default=3, help="children per Rust-core measurement (median)")
    parser.add_argument("--stages", type=int, default=10)
    parser.add_argument("--observations", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("CORE", "SCENARIO"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        core, scenario = args.child
        print(json.dumps(child(core, scenario, args.runs, args.stages, args.observations)))
        return 0
    n, k, o = args.runs, args.stages, args.observations
    print(
        f"{n} runs (Python core; Rust core: {args.native_runs}, median of {args.trials}) x {k} stages, "
        f"{o} observations per stage; bytes of scheduler state per run"
    )
    results: dict[tuple[str, str], float] = {}
    for core in ("python", "native"):
        for scenario in SCENARIOS:
            if core == "native" and scenario == "closed-unreduced":
                continue
            results[core, scenario] = value = _run_child(core, scenario, args)
            print(f"  {core:6} {scenario:25} {value:10.0f} B/run", flush=True)
    ratios: dict[str, float] = {}
    for core in ("python", "native"):
        opened = results[core, "open"]
        before = results.get((core, "closed-unreduced"), opened)
        after = results[core, "closed"]
        per_observation = (results[core, "open-double-observations"] - opened) / (k * o)
        per_stage = opened / k
        ratios[core] = after / before
        print(
            f"{core}: open run {opened:.0f} B ({per_stage:.0f} B per stage, of which {per_observation:.0f} B per "
            f"observation); closed run before {before:.0f} B"
            + ("" if core == "python" else " (the open run: see the module doc)")
            + f", after {after:.0f} B ({after / k:.0f} B per stage)"
        )
    proxy = results["python", "open"] / results["python", "closed-unreduced"]
    print(f"python: open run / unreduced closed run = {proxy:.3f} (the native 'before' proxy's error)")
    print(f"closed_run_after_vs_before={ratios['python']:.3f} native={ratios['native']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
