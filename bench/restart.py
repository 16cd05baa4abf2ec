"""Scheduler restart time with a large journal against a small one (bounded restart).

    python -m bench.restart [--small 10000] [--large 200000] [--restarts 3]

Needs the local services (``infra/up``). For each size, a fresh deployment (one partition)
gets that many inputs: runs of 50 signed submissions (3 observations each) then a RunClose,
processed by the scheduler (native core, default snapshot cadence). Then the scheduler is
started ``--restarts`` times, each in a child process, and stopped as soon as it is consuming:
the restart time is the median of the child's wall time from construction to consuming (topic
checks, producer init, snapshot load, the tail fold, the seek), with its rebuild seconds,
journal records read and peak RSS. The last line is ``restart_large_vs_small=<ratio>`` of the
medians (target <= 3; without snapshots it grows linearly with the journal).

Every topic of the run starts with one fresh prefix and is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid

from confluent_kafka import Producer

from bench.memory import peak_rss_mib
from bench.scheduler import config, signed_close, submission
from bernstein.consumers.core.native import make_core
from bernstein.consumers.shell import SchedulerShell, ShellOptions
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import client_config, delete_topics_with_prefixes, ensure_topics

RUN_LENGTH = 50


def publish(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer(
        client_config(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 20, "batch.num.messages": 10000})
    )
    for i in range(count):
        run = f"run-{i // (RUN_LENGTH + 1)}"
        value = signed_close(run) if i % (RUN_LENGTH + 1) == RUN_LENGTH else submission(i, run)
        while True:
            try:
                producer.produce(topic, key=run.encode(), value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("bench: could not publish the input")


def _shell(bootstrap: str, prefix: str) -> SchedulerShell:
    return SchedulerShell(
        bootstrap=bootstrap,
        topics=Topics(prefix),
        partition=0,
        core=make_core(config(), 0, "auto"),
        options=ShellOptions(),
        progress=None,
    )


def child(bootstrap: str, prefix: str, count: int) -> None:
    """One restart: construct, rebuild, seek; stop before the first batch."""
    started = time.perf_counter()
    shell = _shell(bootstrap, prefix)
    counters = shell.run(until=lambda c: True)
    seconds = time.perf_counter() - started
    assert counters.consumed == 0
    print(
        json.dumps(
            {
                "seconds": seconds,
                "rebuild_seconds": counters.rebuild_seconds,
                "journal_records_read": counters.rebuild_journal_records,
                "snapshot_input_offset": counters.rebuild_snapshot,
                "peak_rss_mib": peak_rss_mib(),
            }
        )
    )


def prepare(bootstrap: str, prefix: str, count: int) -> dict[str, float]:
    topics = Topics(prefix)
    ensure_topics(bootstrap, topics)
    t0 = time.perf_counter()
    publish(bootstrap, topics.submissions, count)
    t1 = time.perf_counter()
    shell = _shell(bootstrap, prefix)
    counters = shell.run(until=lambda c: c.consumed >= count, idle_exit=60)
    if counters.consumed != count:
        raise SystemExit(f"bench: the scheduler consumed {counters.consumed} of {count}")
    return {
        "publish_s": t1 - t0,
        "process_s": time.perf_counter() - t1,
        "journalled": counters.journalled,
        "seals": counters.seals,
        "snapshots": counters.snapshots,
        "snapshot_s": counters.snapshot_seconds,
    }


def restart(bootstrap: str, prefix: str, count: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.restart", "--child", "--bootstrap", bootstrap, "--prefix", prefix, "--count", str(count)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=200_000)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.bootstrap, args.prefix, args.count)
        return 0
    settings = Settings.load()
    if not settings.kafka_bootstrap:
        raise SystemExit("bench: no Kafka; run `infra/up` first")
    bootstrap = settings.kafka_bootstrap
    base = f"benchr{uuid.uuid4().hex[:8]}"
    medians: dict[str, float] = {}
    lines = []
    try:
        for label, count in (("small", args.small), ("large", args.large)):
            prefix = f"{base}{label}"
            built = prepare(bootstrap, prefix, count)
            print(
                f"bench: {label}: {count} inputs published in {built['publish_s']:.1f}s, processed in {built['process_s']:.1f}s "
                f"({built['journalled']} journalled, {built['seals']} seals, {built['snapshots']} snapshots taking "
                f"{built['snapshot_s']:.2f}s)",
                flush=True,
            )
            runs = [restart(bootstrap, prefix, count) for _ in range(args.restarts)]
            for run in runs:
                print(f"bench: {label} restart: {json.dumps(run)}", flush=True)
            medians[label] = statistics.median(r["seconds"] for r in runs)
            last = runs[-1]
            lines.append(
                f"{label}: {count} inputs, restart {medians[label]:.2f}s (median of {len(runs)}; rebuild "
                f"{statistics.median(r['rebuild_seconds'] for r in runs):.2f}s), journal records read {last['journal_records_read']:.0f} "
                f"after the snapshot at input offset {last['snapshot_input_offset']:.0f}, peak RSS "
                f"{max(r['peak_rss_mib'] for r in runs):.0f} MiB"
            )
    finally:
        deleted = delete_topics_with_prefixes(bootstrap, [base])
        print(f"bench: deleted the run's {len(deleted)} topics", flush=True)
    lines.append(f"restart_large_vs_small={medians['large'] / medians['small']:.2f}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
