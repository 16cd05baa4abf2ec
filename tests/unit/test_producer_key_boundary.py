"""No producer code path can load the scheduler's keys (issue 12, review C1 and mission defect 2).

The seal key and the audit key live only where the scheduler runs. A scan of the source
(every import, including ones inside functions) keeps every module under ``producers/``
and every producer command (``bernstein coding run``) from reaching the functions and
types that load or hold them: ``load_keys``, ``init_keys``, ``InstallKeys``,
``default_keys_dir`` and the CLI helper ``keys_from``. Producers load their own keys with
``load_producer_keys`` (``producers.identity``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

REPO = Path(__file__).resolve().parents[2]
SCHEDULER_KEY_NAMES: Final = frozenset({"load_keys", "init_keys", "InstallKeys", "default_keys_dir", "keys_from"})
PRODUCER_COMMANDS: Final = ("bernstein/commands/coding.py",)


def _violations(source: str, shown: str) -> list[str]:
    problems = []
    for node in ast.walk(ast.parse(source, shown)):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in SCHEDULER_KEY_NAMES:
                    problems.append(f"{shown}:{node.lineno}: imports {alias.name} from {node.module}")
        elif isinstance(node, ast.Attribute) and node.attr in SCHEDULER_KEY_NAMES:
            problems.append(f"{shown}:{node.lineno}: uses .{node.attr}")
    return problems


def _scan(paths: list[Path]) -> list[str]:
    problems = []
    for path in paths:
        problems += _violations(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    return problems


def test_no_producer_module_loads_the_schedulers_keys() -> None:
    files = sorted((REPO / "producers").rglob("*.py"))
    assert len(files) > 20
    assert _scan(files) == []


def test_no_producer_command_loads_the_schedulers_keys() -> None:
    assert _scan([REPO / path for path in PRODUCER_COMMANDS]) == []


def test_the_scan_finds_each_way_in() -> None:
    source = (
        "from substrate.keys import load_keys\n"
        "def f():\n"
        "    from bernstein.commands.common import keys_from\n"
        "import substrate.keys as k\n"
        "k.InstallKeys\n"
    )
    assert _violations(source, "x.py") == [
        "x.py:1: imports load_keys from substrate.keys",
        "x.py:3: imports keys_from from bernstein.commands.common",
        "x.py:5: uses .InstallKeys",
    ]
