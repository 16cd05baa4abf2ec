"""Integration fixtures: the ``integration`` marker, and the shared realistic run the verifier suites replay."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import tamper as kit


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def run(services: Any, tmp_path_factory: pytest.TempPathFactory) -> kit.RealisticRun:
    """The realistic run (``tests.support.tamper.build_realistic_run``), exported to a dump; built once per test process."""
    return kit.realistic_run(services, tmp_path_factory)


@pytest.fixture(scope="module")
def view(run: kit.RealisticRun) -> kit.DumpView:
    """The realistic run's pristine dump, decoded."""
    return kit.DumpView(run.dump)
