"""Aggregate scheduler throughput with 1, 2 and 4 partitions, one scheduler process each.

    python -m bench.partitions [--count 40000] [--trials 3] [--runs 16]

Needs the local services (``infra/up``). For each trial and each k of ``--partitions`` (1, 2, 4),
a fresh deployment (its own topic prefix) whose topics have k partitions gets the same
``--count`` signed submissions (``bench.scheduler``'s: 3 observations each, into ``--runs``
runs that stay open). The run ids are chosen so that every partition holds as many runs as
the next (``balanced_runs``), and every record sits on its run id's murmur2 partition
(``bernstein.schemas.partitioning``), as a producer's client puts it. Then k scheduler processes start,
one per partition (``SchedulerShell``, the loop ``bernstein scheduler run --partition p`` runs,
with ``bench.scheduler``'s keys and roles and its batch settings, native core). Each one gets
ready (topic checks, producer, rebuild, seek) and waits; all start consuming at one moment, and
each notes when its last input was committed. The aggregate throughput is the inputs over the
time from that moment to the last commit of the last process. The journal topic is then read
(read_committed): its JournalEntry records per partition must equal the inputs per partition,
with nothing refused or dead-lettered.

The machine is shared: the k runs of a trial run back to back (1, 2, 4, the next trial 4, 2, 1),
and the headline, the last line ``partitions4_vs_1=<ratio>``, is the median over the trials of
the per-trial ratio of the aggregate throughput with 4 partitions to that with 1. The table
shows each k's median trial, with the CPU the scheduler processes and the broker spent per
input while it ran; from these, the most ``os.cpu_count()`` cores could give this work alone. An uncounted warm-up round with one
partition runs first (a fresh broker keeps getting faster for a while). Every topic of the run
starts with one fresh prefix and is deleted once its trial is counted (and at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.memory import peak_rss_mib
from bench.scheduler import BATCH_MAX, BATCH_TIMEOUT, broker_cpu_seconds, config, submission
from bernstein.consumers.core.native import make_core
from bernstein.consumers.shell import Counters, SchedulerShell, ShellOptions
from bernstein.schemas.partitioning import partition_for
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import client_config, delete_topics_with_prefixes, ensure_topics

JOURNAL_ENTRY_TYPE = b"bernstein.activity.result"
"""The ``ce_type`` of a journalled submission (seals share the journal topic under another type)."""


# -- pure helpers ---------------------------------------------------------------------


def balanced_runs(prefix: str, partitions: int, per_partition: int) -> list[str]:
    """``partitions * per_partition`` run ids, the j-th on partition ``j % partitions`` of ``partitions``.

    Candidates ``<prefix>-<n>`` are taken in order of n, each kept while its murmur2 partition
    still needs runs. A topic with ``d`` partitions, ``d`` a divisor of ``partitions``, then holds
    the same number of them on every partition too (the partition of ``d`` is the one of
    ``partitions`` modulo ``d``), so one set of runs serves 1, 2 and 4 partitions alike.
    """
    if partitions < 1 or per_partition < 1:
        raise ValueError(f"need at least one partition and one run per partition, not {partitions} and {per_partition}")
    slots: list[list[str]] = [[] for _ in range(partitions)]
    n = 0
    while any(len(runs) < per_partition for runs in slots):
        run = f"{prefix}-{n}"
        n += 1
        runs = slots[partition_for(run.encode(), partitions)]
        if len(runs) < per_partition:
            runs.append(run)
    return [slots[j % partitions][j // partitions] for j in range(partitions * per_partition)]


def run_of(runs: Sequence[str], i: int) -> str:
    """The run of the i-th submission: the runs in turn."""
    return runs[i % len(runs)]


def inputs_per_partition(runs: Sequence[str], count: int, partitions: int) -> list[int]:
    """How many of ``count`` submissions (``run_of``) sit on each of ``partitions`` partitions."""
    counts = [0] * partitions
    for j, run in enumerate(runs):
        records = count // len(runs) + (1 if j < count % len(runs) else 0)
        counts[partition_for(run.encode(), partitions)] += records
    return counts


@dataclass(frozen=True, slots=True)
class Process:
    """One scheduler process's measurement (``child``'s JSON line)."""

    records: int
    seconds: float
    """From the common start to this process's last commit."""
    cpu_seconds: float
    """CPU time of every thread of the process over the same span."""
    peak_rss_mib: float


@dataclass(frozen=True, slots=True)
class Row:
    """One k of one trial: the table's row."""

    partitions: int
    processes: int
    records: int
    seconds: float
    scheduler_cpu_seconds: float
    broker_cpu_seconds: float | None
    per_process: tuple[float, ...]
    """Each process's own records/s."""
    load: tuple[float, float, float]

    @property
    def aggregate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def cores_busy(self) -> float:
        """The CPU seconds of the scheduler processes and the broker per second of the span: the cores this work used."""
        cpu = self.scheduler_cpu_seconds + (self.broker_cpu_seconds or 0.0)
        return cpu / self.seconds if self.seconds > 0 else 0.0

    @property
    def per_process_mean(self) -> float:
        return statistics.fmean(self.per_process) if self.per_process else 0.0


def make_row(partitions: int, processes: Sequence[Process], broker_cpu: float | None, load: tuple[float, float, float]) -> Row:
    """The aggregate over the processes: all inputs over the longest span (they all start at one moment)."""
    return Row(
        partitions=partitions,
        processes=len(processes),
        records=sum(p.records for p in processes),
        seconds=max((p.seconds for p in processes), default=0.0),
        scheduler_cpu_seconds=sum(p.cpu_seconds for p in processes),
        broker_cpu_seconds=broker_cpu,
        per_process=tuple(p.records / p.seconds if p.seconds > 0 else 0.0 for p in processes),
        load=load,
    )


TABLE_HEADER = (
    "partitions",
    "processes",
    "records",
    "seconds",
    "rec/s aggregate",
    "rec/s per process",
    "sched CPU us/rec",
    "broker CPU us/rec",
    "cores busy",
    "load 1m",
)


def table(rows: Sequence[Row]) -> list[str]:
    """The rows as a Markdown table (the README quotes it)."""
    cells = [TABLE_HEADER]
    for row in rows:
        per_record = 1e6 / max(row.records, 1)
        broker = "-" if row.broker_cpu_seconds is None else f"{row.broker_cpu_seconds * per_record:.0f}"
        busy = "-" if row.broker_cpu_seconds is None else f"{row.cores_busy:.2f}"
        cells.append(
            (
                str(row.partitions),
                str(row.processes),
                str(row.records),
                f"{row.seconds:.2f}",
                f"{row.aggregate:.0f}",
                f"{row.per_process_mean:.0f}",
                f"{row.scheduler_cpu_seconds * per_record:.0f}",
                broker,
                busy,
                f"{row.load[0]:.2f}",
            )
        )
    widths = [max(len(line[c]) for line in cells) for c in range(len(TABLE_HEADER))]
    lines = ["| " + " | ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) + " |" for line in cells]
    lines.insert(1, "|" + "|".join("-" * (width + 1) + ":" for width in widths) + "|")
    return lines


def cpu_bound(row: Row, cores: int) -> float | None:
    """The records/s ``cores`` fully busy with this work alone could give: cores over the CPU per record
    of the scheduler processes and the broker together (None without the broker's CPU)."""
    if row.broker_cpu_seconds is None or row.records == 0:
        return None
    per_record = (row.scheduler_cpu_seconds + row.broker_cpu_seconds) / row.records
    return cores / per_record if per_record > 0 else None


def trial_order(ks: Sequence[int], trial: int) -> list[int]:
    """The order of the partition counts in a trial: alternately up and down, so a drift of the shared
    machine's load over a trial does not always favour the same k."""
    return list(ks) if trial % 2 == 0 else list(reversed(ks))


def median_row(trials: Sequence[Mapping[int, Row]], k: int) -> Row:
    """The row of k from the trial whose aggregate for k is the median (the lower middle one of an even count)."""
    ordered = sorted((trial[k] for trial in trials), key=lambda row: row.aggregate)
    return ordered[(len(ordered) - 1) // 2]


def ratio(trials: Sequence[Mapping[int, Row]], high: int, low: int) -> float:
    """The median over the trials of each trial's aggregate with ``high`` partitions over that with ``low``."""
    return statistics.median(trial[high].aggregate / trial[low].aggregate for trial in trials)


# -- the scheduler processes -------------------------------------------------------------


def child(bootstrap: str, prefix: str, partition: int, expect: int) -> None:
    """One scheduler process: get ready, say so, wait for ``go`` on stdin, process ``expect`` inputs, report."""
    shell = SchedulerShell(
        bootstrap=bootstrap,
        topics=Topics(prefix),
        partition=partition,
        core=make_core(config(), partition, "native"),
        options=ShellOptions(batch_max=BATCH_MAX, batch_timeout=BATCH_TIMEOUT),
        progress=None,
    )
    marks: dict[str, float] = {}

    def until(counters: Counters) -> bool:
        if "go" not in marks:  # called first once the shell is consuming, before the first batch
            print("ready", flush=True)
            if sys.stdin.readline().strip() != "go":
                raise SystemExit("bench: no go from the parent")
            marks["go"] = time.monotonic()
            marks["cpu"] = time.process_time()
        return counters.consumed >= expect

    counters = shell.run(until=until, idle_exit=60)  # never hangs the bench: the parent checks the count
    seconds = time.monotonic() - marks["go"]
    cpu = time.process_time() - marks["cpu"]
    print(
        json.dumps(
            {
                "records": counters.consumed,
                "journalled": counters.journalled,
                "refused": counters.refused,
                "dead_letters": counters.dead_letters,
                "go": marks["go"],
                "seconds": seconds,
                "cpu_seconds": cpu,
                "peak_rss_mib": peak_rss_mib(),
            }
        ),
        flush=True,
    )


def _line(proc: subprocess.Popen[str], log: IO[str], what: str) -> str:
    assert proc.stdout is not None  # opened with stdout=PIPE
    line = proc.stdout.readline()
    if not line:
        proc.wait(30)
        log.seek(0)
        raise SystemExit(f"bench: a scheduler process ended before {what} (exit {proc.returncode}):\n{log.read()}")
    return line.strip()


def measure(bootstrap: str, prefix: str, expected: Sequence[int]) -> tuple[list[Process], float | None]:
    """Start one scheduler process per partition, start them together, wait for their inputs; their results."""
    procs: list[tuple[subprocess.Popen[str], IO[str]]] = []
    try:
        for partition, expect in enumerate(expected):
            stderr: IO[str] = tempfile.TemporaryFile("w+")
            command = [sys.executable, "-m", "bench.partitions", "--child", "--bootstrap", bootstrap, "--prefix", prefix]
            command += ["--partition", str(partition), "--count", str(expect)]
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
            procs.append((proc, stderr))
        for proc, log in procs:
            if _line(proc, log, "getting ready") != "ready":
                raise SystemExit("bench: a scheduler process said something else than ready")
        broker_before = broker_cpu_seconds()
        for proc, _ in procs:
            assert proc.stdin is not None  # opened with stdin=PIPE
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = [json.loads(_line(proc, log, "reporting")) for proc, log in procs]
        broker_after = broker_cpu_seconds()
        for proc, _ in procs:
            proc.wait(60)
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    for partition, (report, expect) in enumerate(zip(reports, expected, strict=True)):
        if (report["records"], report["journalled"], report["refused"], report["dead_letters"]) != (expect, expect, 0, 0):
            raise SystemExit(f"bench: partition {partition} expected {expect} journalled inputs, got {report}")
    go = min(report["go"] for report in reports)
    # every span from the earliest go: the processes were told within a few milliseconds of each other
    processes = [
        Process(report["records"], report["go"] - go + report["seconds"], report["cpu_seconds"], report["peak_rss_mib"])
        for report in reports
    ]
    broker = None if broker_before is None or broker_after is None else broker_after - broker_before
    return processes, broker


# -- input and checks ----------------------------------------------------------------------


def encode_all(runs: Sequence[str], count: int) -> list[bytes]:
    """The ``count`` signed submissions, once for every k (a topic's partition count is not in them)."""
    return [submission(i, run_of(runs, i)) for i in range(count)]


def publish(bootstrap: str, topic: str, runs: Sequence[str], values: Sequence[bytes], partitions: int) -> None:
    """Every submission onto its run id's murmur2 partition of ``partitions``."""
    producer = Producer(
        client_config(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 20, "batch.num.messages": 10000})
    )
    partition_of = {run: partition_for(run.encode(), partitions) for run in runs}
    for i, value in enumerate(values):
        run = run_of(runs, i)
        while True:
            try:
                producer.produce(topic, key=run.encode(), value=value, partition=partition_of[run])
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("bench: could not publish the input")


def journal_entries(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """JournalEntry records per partition of the journal topic, read_committed to its end."""
    consumer = Consumer(
        client_config(
            bootstrap,
            **{"group.id": f"bench-count-{uuid.uuid4().hex}", "enable.auto.commit": False, "isolation.level": "read_committed"},
        )
    )
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        counts = [0] * partitions
        done = [end == 0 for end in ends]
        quiet_since = time.monotonic()
        # the end is the last record's offset + 2 (its transaction's marker follows it); a partition whose
        # last transaction aborted ends earlier, so reading also stops after 5 quiet seconds (and then the
        # counts say what was found)
        while not all(done) and time.monotonic() - quiet_since < 5:
            messages = consumer.consume(1000, 1.0)
            if messages:
                quiet_since = time.monotonic()
            for message in messages:
                if message.error() is not None:
                    continue
                p, offset = message.partition(), message.offset()
                assert p is not None and offset is not None  # a delivered record has both
                if dict(message.headers() or []).get("ce_type") == JOURNAL_ENTRY_TYPE:
                    counts[p] += 1
                if offset + 2 >= ends[p]:
                    done[p] = True
        return counts
    finally:
        consumer.close()


# -- the run ---------------------------------------------------------------------------------


def trial(bootstrap: str, prefix: str, partitions: int, runs: Sequence[str], values: Sequence[bytes]) -> Row:
    """One k: a fresh deployment of ``partitions`` partitions, its inputs, k processes, the checks."""
    topics = Topics(prefix)
    try:
        ensure_topics(bootstrap, topics, partitions=partitions)
        publish(bootstrap, topics.submissions, runs, values, partitions)
        expected = inputs_per_partition(runs, len(values), partitions)
        processes, broker = measure(bootstrap, prefix, expected)
        load = os.getloadavg()
        journalled = journal_entries(bootstrap, topics.journal, partitions)
        if journalled != expected:
            raise SystemExit(f"bench: {topics.journal} holds {journalled} journal entries per partition, not {expected}")
    finally:
        delete_topics_with_prefixes(bootstrap, [prefix])
    return make_row(partitions, processes, broker, load)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=40_000, help="submissions per deployment (default 40000)")
    parser.add_argument("--trials", type=int, default=5, help="rounds of 1, 2 and 4 partitions (default 5)")
    parser.add_argument("--runs", type=int, default=16, help="runs the submissions are spread over (a multiple of 4)")
    parser.add_argument("--partitions", default="1,2,4", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--partition", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.bootstrap, args.prefix, args.partition, args.count)
        return 0
    ks = [int(k) for k in args.partitions.split(",")]
    widest = max(ks)
    if 1 not in ks or 4 not in ks or any(widest % k for k in ks) or args.runs % widest or args.count < args.runs:
        raise SystemExit(f"bench: --partitions must include 1 and 4 and divide {widest}; --runs a multiple of {widest}")

    settings = Settings.load()
    if not settings.kafka_bootstrap:
        raise SystemExit("bench: no Kafka; run `infra/up` first (make bench does)")
    bootstrap = settings.kafka_bootstrap
    prefix = f"bench{uuid.uuid4().hex[:8]}"  # every topic of the run starts with it
    runs = balanced_runs(f"{prefix}-run", widest, args.runs // widest)
    t0 = time.perf_counter()
    values = encode_all(runs, args.count)
    print(f"bench: {args.count} signed submissions into {len(runs)} runs, encoded in {time.perf_counter() - t0:.1f}s", flush=True)
    print(f"bench: {os.cpu_count()} cores; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    trials: list[dict[int, Row]] = []
    try:
        warm = trial(bootstrap, f"{prefix}warm", 1, runs, values)
        print(f"warm-up, 1 partition: {warm.aggregate:.0f} rec/s (not counted)", flush=True)
        for t in range(args.trials):
            rows: dict[int, Row] = {}
            for k in trial_order(ks, t):
                rows[k] = trial(bootstrap, f"{prefix}k{k}t{t}", k, runs, values)
                row = rows[k]
                print(
                    f"trial {t + 1}, {k} partition(s): {row.aggregate:.0f} rec/s aggregate ({row.records} in {row.seconds:.2f}s; "
                    f"per process {', '.join(f'{r:.0f}' for r in row.per_process)}), cores busy {row.cores_busy:.2f}, "
                    f"load {row.load[0]:.2f}",
                    flush=True,
                )
            trials.append(rows)
    finally:
        delete_topics_with_prefixes(bootstrap, [prefix])
    medians = [median_row(trials, k) for k in ks]
    print(f"the median trial of each partition count, over {len(trials)} (journal entries checked equal to the inputs):")
    print("\n".join(table(medians)))
    cores = os.cpu_count() or 1
    bounds = [(row.partitions, cpu_bound(row, cores)) for row in medians]
    if all(bound is not None for _, bound in bounds):
        print(
            f"CPU bound: {cores} cores busy with this work alone (scheduler processes + broker CPU per record) give at most "
            + ", ".join(f"{bound:.0f} rec/s with {k}" for k, bound in bounds)
        )
    for k in ks:
        if k != 1:
            print(f"per-trial {k} vs 1: {', '.join(f'{rows[k].aggregate / rows[1].aggregate:.2f}' for rows in trials)}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"partitions4_vs_1={ratio(trials, 4, 1):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
