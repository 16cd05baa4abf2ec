"""Import boundaries: the scheduler and the verifier never read a format through the producers' SDK.

Each modality's document format and rules have one home (``schemas/documents/``)
that the producers, the scheduler core and the verifier all use; verification
logic lives in ``verifier/``. A scan of the source (every import statement,
including ones inside functions and ``if TYPE_CHECKING:`` blocks, and dynamic
imports by a literal name) keeps it that way:

* ``verifier/``, ``consumers/`` and ``schemas/`` import nothing from ``producers``;
* ``schemas/`` (the shared home) imports nothing from the layers above it
  (``substrate``, ``consumers``, ``verifier``, ``producers``, ``bernstein``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _imported_modules(source: str, filename: str) -> list[tuple[int, str]]:
    """Every absolute module name ``source`` imports, with its line number."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call):
            target = ast.unparse(node.func)
            if (
                target in ("__import__", "importlib.import_module", "import_module")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.append((node.lineno, node.args[0].value))
    return found


def _violations(packages: tuple[str, ...], forbidden: frozenset[str]) -> list[str]:
    problems = []
    for package in packages:
        files = sorted((REPO / package).rglob("*.py"))
        assert files, f"no source under {package}/"
        for path in files:
            shown = str(path.relative_to(REPO))
            for line, name in _imported_modules(path.read_text(encoding="utf-8"), shown):
                if name.split(".")[0] in forbidden:
                    problems.append(f"{shown}:{line}: imports {name}")
    return problems


def test_the_verifier_scheduler_and_schemas_import_nothing_from_producers() -> None:
    assert _violations(("verifier", "consumers", "schemas"), frozenset({"producers"})) == []


def test_the_shared_document_home_imports_no_layer_above_it() -> None:
    assert _violations(("schemas",), frozenset({"producers", "substrate", "consumers", "verifier", "bernstein"})) == []


def test_the_document_home_holds_every_modality_format() -> None:
    homes = {p.stem for p in (REPO / "schemas" / "documents").glob("*.py")}
    assert homes >= {"browser", "dataops", "research", "quotes", "rules"}


@pytest.mark.parametrize(
    "source",
    [
        "from producers.computer_use.replay import replay_steps",
        "import producers.dataops.verify",
        "import json, producers",
        "def f():\n    from producers.computer_use import document\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from producers.activity import ActivityResult\n",
        "m = importlib.import_module('producers.dataops')",
        "m = __import__('producers')",
    ],
)
def test_the_scan_catches_an_import_from_producers(source: str) -> None:
    assert [name.split(".")[0] for _, name in _imported_modules(source, "probe.py")].count("producers") == 1


def test_the_scan_ignores_relative_imports_and_lookalike_names() -> None:
    source = "from . import base\nfrom .checks import register\nimport producers_extra\nfrom schemas.documents import browser\n"
    names = [name for _, name in _imported_modules(source, "probe.py")]
    assert names == ["producers_extra", "schemas.documents"]
    assert all(name.split(".")[0] != "producers" for name in names)


def test_the_sdk_names_are_the_shared_homes_objects_not_copies() -> None:
    import producers.computer_use as sdk
    import producers.dataops as dataops_sdk
    from schemas.documents import browser
    from verifier import browser_replay, dataops_receipts

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
    for name in ("DivergenceReason", "ReplayNotFound", "ReplayResult", "replay_action_log", "replay_run", "replay_sessions"):
        assert getattr(sdk, name) is getattr(browser_replay, name), name
    for name in ("DataOpsVerdict", "ReceiptFailure", "verify_artifact", "verify_receipt", "verify_refusal"):
        assert getattr(dataops_sdk, name) is getattr(dataops_receipts, name), name
