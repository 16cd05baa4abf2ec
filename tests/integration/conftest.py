"""Integration fixtures: the ``integration`` marker, and the shared realistic run the verifier suites replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import tamper as kit

ALONE: frozenset[str] = frozenset(
    {
        "test_scheduler_faults.py::test_exactly_once_under_kill9_and_a_broker_restart",  # restarts the shared broker
        "test_three_brokers.py",  # three more brokers: the machine's cores are theirs
    }
)
"""Tests that need the machine to themselves: ``make test`` runs them after the others (marker ``alone``)."""

BESIDE: frozenset[str] = frozenset(
    {
        "test_group_failover.py",
        "test_scheduler_fencing.py",
        "test_audit_follow_kafka.py",
        "test_scheduler_metrics.py",
        "test_key_rotation.py",
    }
)
"""Tests that spend most of their time waiting out session timeouts, fencing and followers, and start no
Chromium: ``make test`` runs them in a second pytest beside the rest (marker ``beside``)."""


def _names(item: pytest.Item) -> tuple[str, str]:
    module = Path(str(item.fspath)).name
    return module, f"{module}::{item.name.split('[', 1)[0]}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" not in str(item.fspath):
            continue
        item.add_marker(pytest.mark.integration)
        module, test = _names(item)
        if module in ALONE or test in ALONE:
            item.add_marker(pytest.mark.alone)
        elif module in BESIDE or test in BESIDE:
            item.add_marker(pytest.mark.beside)


@pytest.fixture(scope="module")
def run(services: Any, tmp_path_factory: pytest.TempPathFactory) -> kit.RealisticRun:
    """The realistic run (``tests.support.tamper.build_realistic_run``), exported to a dump; built once per test process."""
    return kit.realistic_run(services, tmp_path_factory)


@pytest.fixture(scope="module")
def view(run: kit.RealisticRun) -> kit.DumpView:
    """The realistic run's pristine dump, decoded."""
    return kit.DumpView(run.dump)
