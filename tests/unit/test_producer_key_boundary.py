"""No producer code path can load the scheduler's keys (review C1 and mission defect 2).

The seal key and the audit key live only where the scheduler runs. A scan of the source
(every import, including ones inside functions) keeps every module under ``producers/``
and every producer command (``bernstein coding run``) from reaching the functions and
types that load or hold them: ``load_keys``, ``init_keys``, ``InstallKeys``,
``default_keys_dir`` and the CLI helper ``keys_from``. Producers load their own keys with
``load_producer_keys`` (``bernstein.producers.identity``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

import pytest

from bernstein.substrate.keys import init_keys, init_producer_keys

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


DEMO = REPO / "demo" / "data"


def _producer_commands(tmp_path: Path) -> dict[str, list[str]]:
    return {
        "research": ["research", "run", "--query", "q", "--source", "https://example.org/a", "--run", "r", "--stage", "s"],
        "data": ["data", "run", "--run", "r", "--stage", "s", "--input", str(DEMO / "orders.csv")]
        + ["--output", str(tmp_path / "out.csv"), "--step", "count"],
        "ops": ["ops", "run", "--run", "r", "--stage", "s", "--input", str(DEMO / "service.conf")]
        + ["--output", str(tmp_path / "out.conf"), "--step", "set a = 1"],
        "coding": ["coding", "run", "--run", "r", "--stage", "s", "--workdir", str(tmp_path), "--", "true"],
        "browser": ["browser", "run", "--flow", str(tmp_path / "flow.json"), "--url", "https://example.org/"]
        + ["--run", "r", "--session", "s", "--worktree", str(tmp_path / "w")],
    }


@pytest.mark.parametrize("command", ["research", "data", "ops", "coding", "browser"])
def test_every_producer_command_refuses_the_schedulers_key_directory(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pointed at the scheduler's keys (even as its producer key directory), a producer command stops: typed, exit 3."""
    from bernstein.cli import main

    init_keys(tmp_path / "scheduler")
    monkeypatch.setenv("BERNSTEIN_KEYS_DIR", str(tmp_path / "scheduler"))
    monkeypatch.setenv("BERNSTEIN_PRODUCER_KEYS_DIR", str(tmp_path / "scheduler"))
    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "127.0.0.1:9")  # never reached
    assert main(_producer_commands(tmp_path)[command]) == 3
    err = capsys.readouterr().err
    assert "holds a scheduler's keys, not a producer's" in err and "Traceback" not in err
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "out.conf").exists()


@pytest.mark.parametrize("command", ["research", "data", "ops", "coding", "browser"])
def test_every_producer_command_publishes_only_as_its_keys_name(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bernstein.cli import main

    init_producer_keys(tmp_path / "producer", "worker@host")
    monkeypatch.delenv("BERNSTEIN_PRODUCER_KEYS_DIR", raising=False)
    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "127.0.0.1:9")  # never reached
    flags = ["--producer-keys", str(tmp_path / "producer"), "--producer-id", "someone@else"]
    base = _producer_commands(tmp_path)[command]
    argv = [*base[:-2], *flags, "--", "true"] if command == "coding" else [*base, *flags]  # coding's command follows --
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 3, err
    assert "producer id 'someone@else' is not the name of the producer key ('worker@host'" in err
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "out.conf").exists()
