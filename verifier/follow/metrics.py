"""The audit follower's Prometheus metrics (``bernstein audit follow --metrics-port``).

A custom collector reads the ``Follower``'s own tallies when Prometheus scrapes, so the check
loop pays nothing per record. The alert rules in ``ops/prometheus/alerts.yml`` and the
dashboard use exactly these names (docs/operations.md, "Metrics and health"). Every sample carries
the deployment's topic ``prefix``, as the scheduler's do, so two deployments on one Prometheus stay apart:

- ``bernstein_audit_records_verified_total{prefix,partition}``: audit records this process checked;
- ``bernstein_audit_alerts_total{prefix,kind}``: alerts raised, by kind (``AlertKind``);
- ``bernstein_audit_last_record_timestamp_seconds{prefix,partition}``: Kafka timestamp of the last record checked;
- ``bernstein_audit_lag_records{prefix,partition}``: records on the partition not checked yet;
- ``bernstein_audit_ready{prefix}``: 1 while following (partitions assigned, no failure), else 0;
- ``bernstein_audit_tamper_latched{prefix,partition,kind}``: 1 while a tamper-class finding of that kind is
  latched on a partition this process checks, until ``bernstein audit ack`` (``bernstein.verifier.follow.latch``), else 0;
- with ``--witness`` (``bernstein.verifier.follow.logwatch``), per partition: ``bernstein_audit_log_leaves`` (leaves of
  the journal's Merkle log folded), ``bernstein_audit_log_cosigned_size`` (the tree the witness state holds, held to
  that fold; 0: none yet), ``bernstein_audit_log_heads_waiting`` (signed heads read whose leaves are not) and
  ``bernstein_audit_log_heads_unjudged`` (heads below the leaves kept, neither held nor cosigned).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from bernstein.substrate.ops_http import DEFAULT_STALL_S
from bernstein.verifier.follow.alerts import AlertKind
from bernstein.verifier.follow.consumer import Follower
from bernstein.verifier.follow.latch import TAMPER
from bernstein.verifier.follow.logwatch import LogWatch

PREFIX: Final = "bernstein_audit_"
DEFAULT_PORT: Final = 9310
"""The follower's metrics port in the shipped unit (ops/systemd/bernstein-audit-follow.service), the docs and the
rule tests. ``--metrics-port`` itself has no default (no server unless asked); the schedulers' ports are 9300
(``--group``) and 9400 + partition (one process per partition), so one host can run all of them."""


class FollowerMetrics:
    """One registry with the follower's metrics."""

    def __init__(self, follower: Follower) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_FollowerCollector(follower))
        ProcessCollector(registry=self.registry)


class FollowerProbe:
    """``/healthz``: the check loop beats; ``/readyz``: partitions are assigned and nothing failed."""

    def __init__(self, follower: Follower, *, stall_after: float = DEFAULT_STALL_S) -> None:
        self.follower = follower
        self.stall_after = stall_after

    def health(self) -> tuple[bool, str]:
        silent = self.follower.since_beat()
        if silent > self.stall_after:
            return False, f"stalled: the check loop has not moved for {silent:.0f}s (limit {self.stall_after:.0f}s)"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        return self.follower.readiness()


class _FollowerCollector(Collector):
    def __init__(self, follower: Follower) -> None:
        self.follower = follower

    def collect(self) -> Iterator[Metric]:
        f = self.follower
        verified = CounterMetricFamily(
            PREFIX + "records_verified",
            "Audit records this process checked (MAC, key, link, sequence).",
            labels=["prefix", "partition"],
        )
        for partition, count in sorted(f.verified_by_partition.items()):
            verified.add_metric([f.prefix, str(partition)], count)
        yield verified
        alerts = CounterMetricFamily(PREFIX + "alerts", "Alerts this process raised, by kind.", labels=["prefix", "kind"])
        for kind in AlertKind:
            alerts.add_metric([f.prefix, kind.value], f.alert_kinds.get(kind.value, 0))
        yield alerts
        stamp = GaugeMetricFamily(
            PREFIX + "last_record_timestamp_seconds",
            "Kafka timestamp of the last audit record checked (age: time() minus it).",
            labels=["prefix", "partition"],
        )
        for partition, ms in sorted(f.last_timestamp_ms.items()):
            stamp.add_metric([f.prefix, str(partition)], ms / 1000)
        yield stamp
        lag = GaugeMetricFamily(
            PREFIX + "lag_records",
            "Records on the audit partition not checked yet (end offset minus next).",
            labels=["prefix", "partition"],
        )
        for partition, records in sorted(f.lag_by_partition().items()):
            lag.add_metric([f.prefix, str(partition)], records)
        yield lag
        latched = GaugeMetricFamily(
            PREFIX + "tamper_latched",
            "1 while a tamper-class finding of this kind is latched on this partition (until `bernstein audit ack`), else 0.",
            labels=["prefix", "partition", "kind"],
        )
        kinds = sorted(TAMPER)
        for partition, held in sorted(f.latched().items()):
            for kind in kinds:
                latched.add_metric([f.prefix, str(partition), kind.value], 1 if kind in held else 0)
        yield latched
        logs = f.logs()
        if logs:
            yield from _log_families(f.prefix, logs)
        ready, _ = f.readiness()
        ready_family = GaugeMetricFamily(
            PREFIX + "ready", "1 while following (partitions assigned, no failure), else 0.", labels=["prefix"]
        )
        ready_family.add_metric([f.prefix], 1 if ready else 0)
        yield ready_family


def _log_families(prefix: str, logs: dict[int, LogWatch]) -> Iterator[Metric]:
    """``--witness``: how far each partition's fold and cosigning have come (see the module doc)."""
    families: tuple[tuple[str, str, Callable[[LogWatch], int]], ...] = (
        ("log_leaves", "Leaves of the partition's Merkle log folded from its journal (--witness).", _leaves),
        (
            "log_cosigned_size",
            "Tree size the witness state holds for the partition's log, held to the fold (0: none yet; --witness).",
            _cosigned_size,
        ),
        ("log_heads_waiting", "Signed tree heads read whose leaves are not read yet (--witness).", _waiting),
        (
            "log_heads_unjudged",
            "Signed tree heads below the leaves the fold keeps: neither held to the journal nor cosigned (--witness).",
            _unjudged,
        ),
    )
    for name, text, value in families:
        family = GaugeMetricFamily(PREFIX + name, text, labels=["prefix", "partition"])
        for partition, watch in sorted(logs.items()):
            family.add_metric([prefix, str(partition)], value(watch))
        yield family


def _leaves(watch: LogWatch) -> int:
    return watch.size


def _cosigned_size(watch: LogWatch) -> int:
    return 0 if watch.cosigned is None else watch.cosigned[0]


def _waiting(watch: LogWatch) -> int:
    return watch.waiting


def _unjudged(watch: LogWatch) -> int:
    return watch.unjudged
