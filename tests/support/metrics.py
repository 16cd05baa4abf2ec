"""Metrics helpers: what the follower's metrics read of a ``Follower``, and reading a served ``/metrics`` page."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bernstein.verifier.follow.alerts import AlertKind


class FollowerTallies:
    """What ``FollowerMetrics`` reads of a ``Follower``: one partition seen, one alert raised."""

    def __init__(self) -> None:
        self.verified_by_partition = {0: 5}
        self.alert_kinds = {"gap": 1}
        self.last_timestamp_ms = {0: 1_700_000_000_000}
        self.prefix = "p"

    def latched(self) -> dict[int, frozenset[AlertKind]]:
        return {0: frozenset({AlertKind.CHAIN_BREAK})}

    def lag_by_partition(self) -> dict[int, int]:
        return {0: 2}

    def logs(self) -> dict[int, Any]:
        """``--witness``: partition 0's fold, 9 leaves, size 6 cosigned, a head waiting (``LogWatch``'s fields)."""
        return {0: SimpleNamespace(size=9, cosigned=(6, b"\x00" * 32), waiting=1, unjudged=0)}

    def readiness(self) -> tuple[bool, str]:
        return True, "following"


def scrape_metrics(url: str) -> dict[str, float]:
    """``/metrics`` as {'name{labels}': value} (the samples only)."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def http_status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
