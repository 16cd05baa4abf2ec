"""The coding modality: a spawn's diff and written files."""

from __future__ import annotations

import sys
from pathlib import Path

from bernstein.producers.coding import CodingSpawn, run_spawn, snapshot
from bernstein.schemas.canonical import content_hash, evidence_set_hash
from bernstein.schemas.records import TerminalState


def test_diff_and_observations_cover_exactly_what_was_written(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("same\n")
    (tmp_path / "edit.py").write_text("x = 1\n")
    (tmp_path / "gone.txt").write_text("bye\n")
    script = "import os;open('edit.py','w').write('x = 2\\n');open('new.py','w').write('y = 3\\n');os.remove('gone.txt')"
    spawn = run_spawn(tmp_path, [sys.executable, "-c", script])
    assert spawn.written == ["edit.py", "new.py"]
    assert spawn.deleted == ["gone.txt"]
    diff = spawn.unified_diff().decode()
    assert "--- a/edit.py\n+++ b/edit.py\n" in diff and "-x = 1\n+x = 2\n" in diff
    assert "--- /dev/null\n+++ b/new.py\n" in diff
    assert "--- a/gone.txt\n+++ /dev/null\n" in diff
    assert "keep.txt" not in diff
    result = spawn.result()
    assert [o.ref for o in result.observations] == ["edit.py", "new.py"]
    assert result.evidence_set_hash == evidence_set_hash([content_hash(b"x = 2\n"), content_hash(b"y = 3\n")])
    assert result.terminal_state is TerminalState.COMPLETED


def test_same_trees_give_the_same_artifact_hash() -> None:
    a = CodingSpawn(before={"a": b"1\n"}, after={"a": b"2\n", "b": b"3\n"})
    b = CodingSpawn(before={"a": b"1\n"}, after={"b": b"3\n", "a": b"2\n"})
    assert a.result().artifact_hash == b.result().artifact_hash


def test_failed_spawn_is_a_failed_activity(tmp_path: Path) -> None:
    spawn = run_spawn(tmp_path, [sys.executable, "-c", "raise SystemExit(3)"])
    result = spawn.result()
    assert result.terminal_state is TerminalState.FAILED and result.reason_code == "exit_3"


def test_snapshot_skips_tool_caches(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("m")
    assert snapshot(tmp_path) == {"src/m.py": b"m"}
