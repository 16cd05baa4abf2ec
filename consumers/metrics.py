"""The scheduler's Prometheus metrics (``bernstein scheduler run --metrics-port``).

A custom collector reads the shell's ``Counters`` when Prometheus scrapes: the loop only
adds to plain integers, as it did before there were metrics. The three histograms are
observed once per committed transaction (never per record). Every sample carries the
deployment's topic ``prefix`` (so two deployments scraped by one Prometheus stay apart) and the
input ``partition`` it is about (one scheduler process owns one partition; a ``--group`` process
the partitions assigned to it). The full list, with what each metric means, is in
docs/operations.md ("Metrics and health").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from bernstein.consumers.shell import Counters, SchedulerShell
from bernstein.substrate.ops_http import DEFAULT_STALL_S

PREFIX: Final = "bernstein_scheduler_"
LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
LABELS: Final = ("prefix", "partition")
"""The labels every scheduler sample starts with: the deployment's topic prefix, the input partition."""


def core_name(description: str) -> str:
    """``rust`` or ``python`` from ``choose_core``'s description of the core that runs."""
    return "python" if description.startswith("python") else "rust"


def _labels(shell: SchedulerShell) -> tuple[str, str]:
    """The values of ``LABELS`` for ``shell``'s samples."""
    return shell.topics.prefix, str(shell.partition)


class SchedulerMetrics:
    """One registry with the scheduler's metrics, for one shell or for the shells a ``--group`` process runs now.

    ``attach`` makes a shell's per-commit hook observe the histograms under its partition's label.
    """

    def __init__(self, shells: SchedulerShell | Callable[[], Iterable[SchedulerShell]], core_description: str) -> None:
        single = shells if isinstance(shells, SchedulerShell) else None
        self._shells: Callable[[], Iterable[SchedulerShell]] = (lambda: (single,)) if single is not None else shells  # type: ignore[assignment]
        self.registry = CollectorRegistry()
        self.core_description = core_description
        self._transaction = Histogram(
            PREFIX + "transaction_duration_seconds",
            "Seconds from begin_transaction to the commit's answer, per committed transaction.",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._commit = Histogram(
            PREFIX + "commit_duration_seconds",
            "Seconds commit_transaction took, per committed transaction.",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._batch = Histogram(
            PREFIX + "batch_size_records",
            "Input records per committed transaction.",
            LABELS,
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_ShellCollector(self))
        ProcessCollector(registry=self.registry)
        if single is not None:
            self.attach(single)

    def shells(self) -> list[SchedulerShell]:
        """The shells whose counters a scrape reads (a ``--group`` process's change with its assignment)."""
        return list(self._shells())

    def attach(self, shell: SchedulerShell) -> None:
        """Observe ``shell``'s committed transactions (its ``observer``) under its prefix's and partition's labels."""
        labels = _labels(shell)
        transaction = self._transaction.labels(*labels)
        commit = self._commit.labels(*labels)
        batch = self._batch.labels(*labels)

        def observe(records: int, transaction_s: float, commit_s: float) -> None:
            transaction.observe(transaction_s)
            commit.observe(commit_s)
            batch.observe(records)

        shell.observer = observe


DEFAULT_STUCK_S: Final = 30.0
"""How long a backlog may wait behind an input offset that does not move before ``/readyz`` fails."""


class ShellProbe:
    """``/healthz`` and ``/readyz`` of a scheduler: its loop's heartbeat and its phase."""

    def __init__(
        self, shell: SchedulerShell, *, stall_after: float = DEFAULT_STALL_S, stuck_after: float = DEFAULT_STUCK_S
    ) -> None:
        self.shell = shell
        self.stall_after = stall_after
        self.stuck_after = stuck_after

    def health(self) -> tuple[bool, str]:
        c = self.shell.counters
        if c.phase in ("stopped", "failed"):
            return False, c.phase
        silent = time.monotonic() - c.heartbeat
        if silent > self.stall_after:
            return False, f"stalled: the loop has not moved for {silent:.0f}s (limit {self.stall_after:.0f}s)"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        """Ready while consuming and moving: input waiting behind an offset that has not moved for
        ``stuck_after`` seconds (a loop that spins without committing) is not ready, and says where."""
        c = self.shell.counters
        if c.phase != "consuming":
            return False, c.phase
        backlog = c.high_watermark - c.next_offset
        still = time.monotonic() - c.progressed
        if c.next_offset >= 0 and backlog > 0 and still > self.stuck_after:
            return False, (
                f"stuck: input offset {c.next_offset} has not been committed for {still:.0f}s with {backlog} record(s) "
                "waiting; see the scheduler's log for the error at that offset"
            )
        return True, "consuming"


class GroupProbe:
    """``/healthz`` and ``/readyz`` of a ``--group`` process: its polling loop and every partition it runs."""

    def __init__(self, group: Any, *, stall_after: float = DEFAULT_STALL_S) -> None:
        self.group = group
        self.stall_after = stall_after

    def health(self) -> tuple[bool, str]:
        silent = time.monotonic() - self.group.heartbeat
        if silent > self.stall_after:
            return False, f"stalled: the group loop has not moved for {silent:.0f}s (limit {self.stall_after:.0f}s)"
        for shell in self.group.shells():
            healthy, why = ShellProbe(shell, stall_after=self.stall_after).health()
            if not healthy and why != "stopped":  # a revoked partition's shell is stopping: not a fault
                return False, f"partition {shell.partition}: {why}"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        if not self.group.joined:
            return False, "joining the group"
        waiting = []
        for shell in self.group.shells():
            ready, why = ShellProbe(shell).readiness()
            if not ready:
                waiting.append(f"p{shell.partition} {why}")
        return (False, ", ".join(waiting)) if waiting else (True, "consuming")


class _ShellCollector(Collector):
    """The shell's counters and gauges, read at scrape time."""

    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        shells = self.metrics.shells()
        counted: dict[str, tuple[str, Callable[[Counters], float]]] = {
            "records_consumed": ("Input records whose outputs were committed.", lambda c: c.consumed),
            "records_journalled": ("Journal entries committed (seals not included).", lambda c: c.journalled),
            "seals": ("Run seals committed (journal records of type bernstein.run.sealed).", lambda c: c.seals),
            "recoveries": (
                "Recoveries (transaction aborted or producer replaced; state rewound or rebuilt).",
                lambda c: c.recoveries_total,
            ),
            "native_fallbacks": (
                "Batches redone with the Python reference after the native core failed.",
                lambda c: c.native_fallbacks,
            ),
            "rebuilds": ("State rebuilds from the committed journal, audit and checkpoints.", lambda c: c.rebuilds),
            "rewinds": (
                "Recoveries that put the state back to the last commit in memory (undo log) instead of rebuilding it.",
                lambda c: c.rewinds,
            ),
        }
        families: dict[str, CounterMetricFamily] = {}
        for name, (doc, _) in counted.items():
            families[name] = CounterMetricFamily(PREFIX + name, doc, labels=LABELS)
        refused = CounterMetricFamily(
            PREFIX + "records_refused", "Refusal records committed, by refusal code.", labels=[*LABELS, "code"]
        )
        dead = CounterMetricFamily(
            PREFIX + "records_dead_lettered", "Dead letters committed, by dead-letter code.", labels=[*LABELS, "code"]
        )
        transactions = CounterMetricFamily(
            PREFIX + "transactions", "Kafka transactions, by outcome (committed, aborted).", labels=[*LABELS, "outcome"]
        )
        gauges = {
            "consumer_lag_records": "Input high watermark minus the next offset the scheduler will commit: records not yet committed.",
            "input_high_watermark": "The input partition's high watermark (last fetched).",
            "input_committed_offset": "The next input offset, as committed with the outputs.",
            "last_seal_timestamp_seconds": "Unix time of the commit of the last seal this process wrote.",
            "rebuild_duration_seconds": "Seconds the last state rebuild took.",
            "ready": "1 while rebuilt and consuming (/readyz answers 200), else 0.",
        }
        gauge = {name: GaugeMetricFamily(PREFIX + name, doc, labels=LABELS) for name, doc in gauges.items()}
        info = InfoMetricFamily(PREFIX + "core", "The step function that runs: core is rust or python.", labels=LABELS)
        description = self.metrics.core_description
        for shell in sorted(shells, key=lambda s: s.partition):
            c: Counters = shell.counters
            p = list(_labels(shell))
            for name, (_, value) in counted.items():
                families[name].add_metric(p, value(c))
            for code, count in sorted(dict(c.refused_codes).items()):  # dict(): a copy the loop cannot change under us
                refused.add_metric([*p, code], count)
            for code, count in sorted(dict(c.dead_letter_codes).items()):
                dead.add_metric([*p, code], count)
            transactions.add_metric([*p, "committed"], c.transactions)
            transactions.add_metric([*p, "aborted"], c.aborts)
            if c.next_offset >= 0 and c.high_watermark >= 0:
                gauge["consumer_lag_records"].add_metric(p, max(c.high_watermark - c.next_offset, 0))
                gauge["input_high_watermark"].add_metric(p, c.high_watermark)
                gauge["input_committed_offset"].add_metric(p, c.next_offset)
            if c.last_seal_time > 0:
                gauge["last_seal_timestamp_seconds"].add_metric(p, c.last_seal_time)
            if c.rebuilds:
                gauge["rebuild_duration_seconds"].add_metric(p, c.rebuild_seconds)
            gauge["ready"].add_metric(p, 1 if c.phase == "consuming" else 0)
            info.add_metric(p, {"core": core_name(description), "description": description})
        yield families["records_consumed"]
        yield families["records_journalled"]
        yield refused
        yield dead
        yield families["seals"]
        yield transactions
        yield from (families[name] for name in ("recoveries", "native_fallbacks", "rebuilds", "rewinds"))
        yield from (family for family in gauge.values() if family.samples)
        yield info
