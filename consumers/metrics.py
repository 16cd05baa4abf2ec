"""The scheduler's Prometheus metrics (``bernstein scheduler run --metrics-port``).

A custom collector reads the shell's ``Counters`` when Prometheus scrapes: the loop only
adds to plain integers, as it did before there were metrics. The three histograms are
observed once per committed transaction (never per record). Every sample carries the
input ``partition`` it is about (one scheduler process owns one partition). The full list,
with what each metric means, is in docs/operations.md ("Metrics and health").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from consumers.shell import Counters, SchedulerShell
from substrate.ops_http import DEFAULT_STALL_S

PREFIX: Final = "bernstein_scheduler_"
LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


def core_name(description: str) -> str:
    """``rust`` or ``python`` from ``choose_core``'s description of the core that runs."""
    return "python" if description.startswith("python") else "rust"


class SchedulerMetrics:
    """One registry with the scheduler's metrics; ``observe_transaction`` is the shell's per-commit hook."""

    def __init__(self, shell: SchedulerShell, core_description: str) -> None:
        self.shell = shell
        self.registry = CollectorRegistry()
        partition = str(shell.partition)
        self.core_description = core_description
        self._transaction = Histogram(
            PREFIX + "transaction_duration_seconds",
            "Seconds from begin_transaction to the commit's answer, per committed transaction.",
            ["partition"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(partition=partition)
        self._commit = Histogram(
            PREFIX + "commit_duration_seconds",
            "Seconds commit_transaction took, per committed transaction.",
            ["partition"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(partition=partition)
        self._batch = Histogram(
            PREFIX + "batch_size_records",
            "Input records per committed transaction.",
            ["partition"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        ).labels(partition=partition)
        self.registry.register(_ShellCollector(self))
        ProcessCollector(registry=self.registry)
        shell.observer = self.observe_transaction

    def observe_transaction(self, records: int, transaction_s: float, commit_s: float) -> None:
        self._transaction.observe(transaction_s)
        self._commit.observe(commit_s)
        self._batch.observe(records)


class ShellProbe:
    """``/healthz`` and ``/readyz`` of a scheduler: its loop's heartbeat and its phase."""

    def __init__(self, shell: SchedulerShell, *, stall_after: float = DEFAULT_STALL_S) -> None:
        self.shell = shell
        self.stall_after = stall_after

    def health(self) -> tuple[bool, str]:
        c = self.shell.counters
        if c.phase in ("stopped", "failed"):
            return False, c.phase
        silent = time.monotonic() - c.heartbeat
        if silent > self.stall_after:
            return False, f"stalled: the loop has not moved for {silent:.0f}s (limit {self.stall_after:.0f}s)"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        phase = self.shell.counters.phase
        return phase == "consuming", phase


class _ShellCollector(Collector):
    """The shell's counters and gauges, read at scrape time."""

    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        shell = self.metrics.shell
        c: Counters = shell.counters
        p = str(shell.partition)

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return _one(name, doc, value, p)

        yield counter("records_consumed", "Input records whose outputs were committed.", c.consumed)
        yield counter("records_journalled", "Journal entries committed (seals not included).", c.journalled)
        yield _by_code(
            "records_refused",
            "Refusal records committed, by refusal code.",
            p,
            c.refused_codes,
        )
        yield _by_code(
            "records_dead_lettered",
            "Dead letters committed, by dead-letter code.",
            p,
            c.dead_letter_codes,
        )
        yield counter("seals", "Run seals committed (journal records of type bernstein.run.sealed).", c.seals)
        transactions = CounterMetricFamily(
            PREFIX + "transactions", "Kafka transactions, by outcome (committed, aborted).", labels=["partition", "outcome"]
        )
        transactions.add_metric([p, "committed"], c.transactions)
        transactions.add_metric([p, "aborted"], c.aborts)
        yield transactions
        yield counter("recoveries", "Recoveries (transaction aborted or producer replaced, state rebuilt).", c.recoveries_total)
        yield counter(
            "native_fallbacks", "Batches redone with the Python reference after the native core failed.", c.native_fallbacks
        )
        yield counter("rebuilds", "State rebuilds from the committed journal, audit and checkpoints.", c.rebuilds)

        if c.next_offset >= 0 and c.high_watermark >= 0:
            yield _gauge(
                "consumer_lag_records",
                "Input high watermark minus the next offset the scheduler will commit: records not yet committed.",
                p,
                max(c.high_watermark - c.next_offset, 0),
            )
            yield _gauge("input_high_watermark", "The input partition's high watermark (last fetched).", p, c.high_watermark)
            yield _gauge("input_committed_offset", "The next input offset, as committed with the outputs.", p, c.next_offset)
        if c.last_seal_time > 0:
            yield _gauge(
                "last_seal_timestamp_seconds",
                "Unix time of the commit of the last seal this process wrote.",
                p,
                c.last_seal_time,
            )
        if c.rebuilds:
            yield _gauge("rebuild_duration_seconds", "Seconds the last state rebuild took.", p, c.rebuild_seconds)
        yield _gauge(
            "ready", "1 while rebuilt and consuming (/readyz answers 200), else 0.", p, 1 if c.phase == "consuming" else 0
        )
        info = InfoMetricFamily(PREFIX + "core", "The step function that runs: core is rust or python.", labels=["partition"])
        info.add_metric([p], {"core": core_name(self.metrics.core_description), "description": self.metrics.core_description})
        yield info


def _one(name: str, doc: str, value: float, partition: str) -> CounterMetricFamily:
    family = CounterMetricFamily(PREFIX + name, doc, labels=["partition"])
    family.add_metric([partition], value)
    return family


def _gauge(name: str, doc: str, partition: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(PREFIX + name, doc, labels=["partition"])
    family.add_metric([partition], value)
    return family


def _by_code(name: str, doc: str, partition: str, codes: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(PREFIX + name, doc, labels=["partition", "code"])
    for code, count in sorted(dict(codes).items()):  # dict(): a copy the loop cannot change under us
        family.add_metric([partition, code], count)
    return family
