"""The restart fold (``bernstein.consumers.core.rebuild.rebuild_state``) in Python against the native fold reader.

    python -m bench.fold [--submissions 20000] [--runs 200] [--rounds 3]

No services needed. Builds a partition's history in memory with the scheduler core
(``make_core(..., "auto")``: the native core when it is built, else the Python one; both write
the same bytes): ``--submissions`` signed ActivitySubmission.v3 inputs (3 observations each)
spread over ``--runs`` runs, each run then closed by a signed RunClose.v2, so the journal holds
the entries and every run's final seal, the audit partition their HMAC chain and the
checkpoints partition the signed checkpoints (periodic ones and one after each final seal).
Then folds those records with every check (Avro decode, entry hash and chain link, seal and
checkpoint signatures, audit MAC and chain) ``--rounds`` times each way, alternating, and
reports the best time of each. The folded states must be byte-identical
(``bernstein.consumers.core.snapshot.state_bytes``). The last line is ``fold_native_vs_python=<ratio>``
of the speeds (journal records per second).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

from bench.scheduler import config, signed_close, submission
from bernstein.consumers.core.model import InputRecord, SchedulerConfig, SchedulerState, Stream
from bernstein.consumers.core.native import make_core, native_status
from bernstein.consumers.core.rebuild import rebuild_state
from bernstein.consumers.core.snapshot import state_bytes
from bernstein.consumers.core.step import initial_state

PARTITION = 0
BASE_TS = 1_760_000_000_000


def build(cfg: SchedulerConfig, submissions: int, runs: int) -> tuple[dict[Stream, list[bytes]], SchedulerState]:
    """The journal, audit and checkpoint values the scheduler writes for the inputs, and its state after them."""
    values: list[tuple[str, bytes]] = []
    per_run = max(1, submissions // runs)
    for r in range(runs):
        run = f"run-{r:05d}"
        values += [(run, submission(r * per_run + i, run)) for i in range(per_run)]
        values.append((run, signed_close(run)))
    records = [InputRecord("bench.submissions", PARTITION, offset, BASE_TS + offset, run.encode(), value)
               for offset, (run, value) in enumerate(values)]  # fmt: skip
    core = make_core(cfg, PARTITION, "auto")
    state: Any = initial_state(cfg, PARTITION)
    out: dict[Stream, list[bytes]] = {Stream.JOURNAL: [], Stream.AUDIT: [], Stream.CHECKPOINTS: []}
    for record in records:
        state, outputs = core.step(state, record)
        for o in outputs:
            if o.stream in out:
                out[o.stream].append(o.value)
    return out, state if isinstance(state, SchedulerState) else state.to_scheduler_state()


def _offsets(values: list[bytes]) -> Iterator[tuple[int, bytes]]:
    """(offset, value), as the shell streams them from Kafka."""
    return iter(enumerate(values))


def fold(cfg: SchedulerConfig, streams: dict[Stream, list[bytes]], *, native: bool) -> tuple[float, bytes]:
    started = time.perf_counter()
    state = rebuild_state(
        cfg,
        PARTITION,
        _offsets(streams[Stream.JOURNAL]),
        _offsets(streams[Stream.AUDIT]),
        checkpoint_values=_offsets(streams[Stream.CHECKPOINTS]),
        native=native,
    )
    return time.perf_counter() - started, state_bytes(state)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ok, reason = native_status()
    if not ok:
        raise SystemExit(f"bench: the native extension is not usable here ({reason}); `uv sync` builds it")
    cfg = config()
    t0 = time.perf_counter()
    streams, live = build(cfg, args.submissions, args.runs)
    journal = len(streams[Stream.JOURNAL])
    print(
        f"bench: history of {args.submissions} submissions over {args.runs} runs built in {time.perf_counter() - t0:.1f}s: "
        f"{journal} journal, {len(streams[Stream.AUDIT])} audit, {len(streams[Stream.CHECKPOINTS])} checkpoint records",
        flush=True,
    )
    best = {False: float("inf"), True: float("inf")}
    folded: dict[bool, bytes] = {}
    for _ in range(args.rounds):
        for native in (False, True):
            seconds, folded[native] = fold(cfg, streams, native=native)
            best[native] = min(best[native], seconds)
    if folded[True] != folded[False] or state_bytes(live) != folded[False]:
        raise SystemExit("bench: the two folds (or the live state) differ")
    rates = {native: journal / best[native] for native in best}
    for native, label in ((False, "python"), (True, "native")):
        print(
            f"bench: fold {label}: {best[native]:.3f}s best of {args.rounds}, {rates[native]:,.0f} journal records/s "
            f"({best[native] / journal * 1e6:.1f} us each, with its audit and checkpoint records)",
            flush=True,
        )
    print("bench: both folded states are byte-identical to the live one", flush=True)
    print(f"fold_native_vs_python={rates[True] / rates[False]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
