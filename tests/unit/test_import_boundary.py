"""Import boundaries: the layer contract holds, and it breaks when a wrong-way import is added.

The contract is ``[tool.importlinter]`` in ``pyproject.toml`` (import-linter): imports run one way,
``bench`` > ``bernstein`` (the CLI) > ``producers`` | ``consumers`` | ``verifier`` (peers that never
import each other) > ``substrate`` > ``schemas``, and no shipped package imports the test support
(``tests``) or the non-package ``demo/``, and the scheduler's pure core (``consumers.core``) imports
neither its shell nor the adapters. Imports inside functions and ``if TYPE_CHECKING:`` blocks
count. ``scripts/check.sh`` runs ``lint-imports``; the tests here run it on the real tree, and on a
copy of the tree with one wrong-way module added (the real tree is not touched).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("bench", "bernstein", "producers", "consumers", "verifier", "substrate", "schemas")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _python_only(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if not (Path(directory, n).is_dir() or n.endswith(".py"))} | {"__pycache__", "node_modules"}


def test_the_layer_contract_holds() -> None:
    run = _lint_imports(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout or "broken" not in run.stdout.lower(), run.stdout


@pytest.mark.parametrize(
    ("package", "source", "edge"),
    [
        ("producers", "from verifier import report\n", "producers.wrong_way -> verifier.report"),
        (
            "producers",
            "def f() -> None:\n    from bernstein.commands import common\n",
            "producers.wrong_way -> bernstein.commands.common",
        ),
        ("verifier", "from consumers.core.step import SchedulerCore\n", "verifier.wrong_way -> consumers.core.step"),
        ("consumers", "import producers.emitter\n", "consumers.wrong_way -> producers.emitter"),
        (
            "schemas",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from substrate.keys import TrustedKeys\n",
            "schemas.wrong_way -> substrate.keys",
        ),
        ("substrate", "from tests.support import browser_fakes\n", "substrate.wrong_way -> tests"),
        ("consumers/core", "from consumers.shell import SchedulerShell\n", "consumers.core.wrong_way -> consumers.shell"),
    ],
)
def test_the_contract_breaks_on_a_wrong_way_import(tmp_path: Path, package: str, source: str, edge: str) -> None:
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=_python_only)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / package / "wrong_way.py").write_text(f'"""A wrong-way import."""\n\n{source}', encoding="utf-8")
    run = _lint_imports(tmp_path)
    assert run.returncode != 0, run.stdout + run.stderr
    assert "BROKEN" in run.stdout, run.stdout
    assert edge in run.stdout, run.stdout
    assert not (REPO / package / "wrong_way.py").exists()


def test_the_document_home_holds_every_modality_format() -> None:
    homes = {p.stem for p in (REPO / "schemas" / "documents").glob("*.py")}
    assert homes >= {"browser", "dataops", "research", "quotes", "rules"}


def test_the_sdk_names_are_the_shared_homes_objects_not_copies() -> None:
    import producers.computer_use as sdk
    import producers.dataops as dataops_sdk
    from schemas.documents import browser
    from substrate import dataops_receipts

    for name in (
        "Action",
        "ActionRecord",
        "ComputerUseTerminalState",
        "LineageEnvelope",
        "MalformedSessionDocument",
        "ObservationHashes",
        "SessionDocument",
        "TERMINAL_STATE_MAP",
        "activity_terminal_state",
        "observation_hashes",
        "parse_action_log",
        "parse_session_document",
    ):
        assert getattr(sdk, name) is getattr(browser, name), name
    for name in ("DataOpsVerdict", "ReceiptFailure", "verify_artifact", "verify_receipt", "verify_refusal"):
        assert getattr(dataops_sdk, name) is getattr(dataops_receipts, name), name
