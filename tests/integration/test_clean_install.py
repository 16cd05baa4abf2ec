"""A clean virtualenv with no Rust toolchain: ``pip install .`` then ``bernstein activity verify`` on an
exported dump works, on Python 3.11 and on 3.13 (scripts/clean-install.sh does the work).

Real parts: the interpreters (3.13 from pyenv when it is not on PATH), PyPI (the pip installs download
every dependency, with no wheel cache), the installed package. The dump is written offline by the dev
environment (scripts/offline_dump.py): the check is about the install, not the services.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("python", ["python3.11", "3.13"])
def test_pip_install_without_rust_then_verify_a_dump(python: str) -> None:
    done = subprocess.run(
        [str(REPO / "scripts" / "clean-install.sh"), python], cwd=REPO, capture_output=True, text=True, timeout=880, check=False
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    version = python.removeprefix("python")
    assert re.search(rf"^clean-install: interpreter \S+ \({re.escape(version)}\.\d+\)$", done.stderr, re.M), log
    assert "clean-install: no Rust in the clean environment (command -v cargo fails;" in done.stderr
    assert (
        "clean-install: installed package: top-level names ['bernstein'], no bernstein_native, no playwright, py.typed, Python core and facts"
        in (done.stdout)
    )
    for who in ("dump written by the dev environment", "dump written by the installed package"):
        assert f"clean-install: bernstein activity verify offline-run-1 ({who}): exit 0" in done.stderr, log
    assert "clean-install: bernstein browser run without the extra: exit 3, names bernstein-journal[browser]" in done.stderr
    assert "clean-install: bernstein audit rules from the installed package: exit 0, the shipped rules (" in done.stderr, log
    assert re.search(
        rf"^clean-install: OK on Python {re.escape(version)}\.\d+: pip install \. without Rust", done.stderr, re.M
    ), log


def test_a_missing_interpreter_is_a_clear_failure() -> None:
    done = subprocess.run(
        [str(REPO / "scripts" / "clean-install.sh"), "3.99"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.startswith("clean-install: no interpreter for '3.99': not on PATH and not in ")
    assert "pyenv install 3.99" in done.stderr
