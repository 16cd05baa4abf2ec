"""Import boundaries: the layer contract holds, and it breaks when a wrong-way import is added.

The contract is ``[tool.importlinter]`` in ``pyproject.toml`` (import-linter): imports run one way,
``bench`` > the CLI (``bernstein.cli``, ``bernstein.commands``) > ``bernstein.producers`` |
``bernstein.consumers`` | ``bernstein.verifier`` (peers that never import each other) > ``bernstein.substrate``
> ``bernstein.schemas``, and the shipped package imports no test support
(``tests``) or the non-package ``demo/``, and the scheduler's pure core (``bernstein.consumers.core``) imports
neither its shell nor the adapters. Imports inside functions and ``if TYPE_CHECKING:`` blocks
count. ``scripts/check.sh`` runs ``lint-imports``; the tests here run it on the real tree, and on a
copy of the tree with one wrong-way module added (the real tree is not touched).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("bench", "bernstein")


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
        ("producers", "from bernstein.verifier import report\n", "bernstein.producers.wrong_way -> bernstein.verifier.report"),
        (
            "producers",
            "def f() -> None:\n    from bernstein.commands import common\n",
            "bernstein.producers.wrong_way -> bernstein.commands.common",
        ),
        (
            "verifier",
            "from bernstein.consumers.core.step import SchedulerCore\n",
            "bernstein.verifier.wrong_way -> bernstein.consumers.core.step",
        ),
        ("consumers", "import bernstein.producers.emitter\n", "bernstein.consumers.wrong_way -> bernstein.producers.emitter"),
        (
            "schemas",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bernstein.substrate.keys import TrustedKeys\n",
            "bernstein.schemas.wrong_way -> bernstein.substrate.keys",
        ),
        ("substrate", "from tests.support import browser_fakes\n", "bernstein.substrate.wrong_way -> tests"),
        (
            "consumers/core",
            "from bernstein.consumers.shell import SchedulerShell\n",
            "bernstein.consumers.core.wrong_way -> bernstein.consumers.shell",
        ),
    ],
)
def test_the_contract_breaks_on_a_wrong_way_import(tmp_path: Path, package: str, source: str, edge: str) -> None:
    # copytree follows bernstein/'s links to the component folders: the copy holds real directories
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=_python_only)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "bernstein" / package / "wrong_way.py").write_text(f'"""A wrong-way import."""\n\n{source}', encoding="utf-8")
    run = _lint_imports(tmp_path)
    assert run.returncode != 0, run.stdout + run.stderr
    assert "BROKEN" in run.stdout, run.stdout
    assert edge in run.stdout, run.stdout
    assert not (REPO / package / "wrong_way.py").exists()


def test_the_document_home_holds_every_modality_format() -> None:
    homes = {p.stem for p in (REPO / "schemas" / "documents").glob("*.py")}
    assert homes >= {"browser", "dataops", "research", "quotes", "rules"}


def test_the_sdk_names_are_the_shared_homes_objects_not_copies() -> None:
    import bernstein.producers.computer_use as sdk
    import bernstein.producers.dataops as dataops_sdk
    from bernstein.schemas.documents import browser
    from bernstein.substrate import dataops_receipts

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


def test_nothing_imports_a_component_by_its_folder_name() -> None:
    """``import verifier`` would load a second copy of ``bernstein.verifier`` from the checkout's top level."""
    bare = re.compile(r"^\s*(?:from|import)\s+(?:schemas|substrate|producers|consumers|verifier)\b", re.M)
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    present = [f for f in files if (REPO / f).is_file()]  # a tracked file moved or deleted in the work tree is gone
    offenders = [f for f in present if bare.search((REPO / f).read_text(encoding="utf-8"))]
    assert offenders == [], f"import these as bernstein.<name>: {offenders}"
