"""The coding modality: record a coding spawn as an activity.

A coding spawn is a command (an agent, a formatter, a code generator) run in a
working directory. The activity's artifact is the unified diff of what it
changed, and its observations are the exact bytes of every file it wrote
(kind ``file``, ref = the path relative to the working directory). Deleted
files appear in the diff only: there are no bytes to pin.

The diff is deterministic (files in sorted order, ``difflib`` with fixed
context), so the same before/after trees give the same artifact hash.
"""

from __future__ import annotations

import difflib
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter, Published
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.records import ActivityKind, Observation, TerminalState

SKIP_DIRS: Final = frozenset({".git", ".venv", "__pycache__", ".infra", "node_modules", ".mypy_cache", ".ruff_cache"})
MAX_FILE_BYTES: Final = 16 * 1024 * 1024


class SpawnFailed(BernsteinError):
    code = "E_SPAWN_FAILED"


@dataclass(frozen=True)
class CodingSpawn:
    """What a spawn changed: files before and after (path -> bytes)."""

    before: Mapping[str, bytes]
    after: Mapping[str, bytes]
    exit_code: int = 0
    timed_out: bool = False

    @property
    def written(self) -> list[str]:
        """Paths created or modified, sorted."""
        return sorted(p for p, data in self.after.items() if self.before.get(p) != data)

    @property
    def deleted(self) -> list[str]:
        return sorted(p for p in self.before if p not in self.after)

    def unified_diff(self) -> bytes:
        """The unified diff of every changed file (sorted by path), as UTF-8 bytes."""
        chunks: list[str] = []
        for path in sorted(set(self.written) | set(self.deleted)):
            old = self.before.get(path)
            new = self.after.get(path)
            if _is_binary(old) or _is_binary(new):
                chunks.append(f"Binary files a/{path} and b/{path} differ\n")
                continue
            old_lines = [] if old is None else old.decode("utf-8").splitlines(keepends=True)
            new_lines = [] if new is None else new.decode("utf-8").splitlines(keepends=True)
            for line in difflib.unified_diff(
                old_lines,
                new_lines,
                fromfile="/dev/null" if old is None else f"a/{path}",
                tofile="/dev/null" if new is None else f"b/{path}",
                n=3,
            ):
                chunks.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
        return "".join(chunks).encode("utf-8")

    def observations(self) -> list[tuple[Observation, bytes]]:
        """One ``file`` observation per written file, with its bytes."""
        from bernstein.producers.activity import observe

        return [(observe("file", path, self.after[path]), self.after[path]) for path in self.written]

    def result(self) -> ActivityResult:
        state = TerminalState.COMPLETED
        reason = "ok"
        if self.timed_out:
            state, reason = TerminalState.TIMED_OUT, "spawn_timeout"
        elif self.exit_code != 0:
            state, reason = TerminalState.FAILED, f"exit_{self.exit_code}"
        return ActivityResult.build(
            ActivityKind.CODING,
            self.unified_diff(),
            [observation for observation, _ in self.observations()],
            terminal_state=state,
            reason_code=reason,
        )


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative posix path -> bytes), skipping tool caches."""
    files: dict[str, bytes] = {}
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(directory) / name
            if path.is_symlink() or not path.is_file():
                continue
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def run_spawn(workdir: Path, command: Sequence[str], *, timeout: float | None = None) -> CodingSpawn:
    """Run ``command`` in ``workdir`` and capture what it changed."""
    before = snapshot(workdir)
    timed_out = False
    try:
        completed = subprocess.run(list(command), cwd=workdir, timeout=timeout, check=False)
        code = completed.returncode
    except subprocess.TimeoutExpired:
        timed_out, code = True, -1
    except OSError as exc:
        raise SpawnFailed(f"cannot run {command[0]!r} in {workdir}: {exc.strerror}") from exc
    return CodingSpawn(before=before, after=snapshot(workdir), exit_code=code, timed_out=timed_out)


def publish_spawn(emitter: Emitter, spawn: CodingSpawn, *, run_id: str, stage_id: str, role: str = "developer") -> Published:
    """Store the written files' bytes, then publish the coding activity."""
    observations = []
    for observation, data in spawn.observations():
        observations.append(emitter.capture(observation.kind, observation.ref, data))
    result = spawn.result()
    return emitter.publish(run_id=run_id, stage_id=stage_id, role=role, result=result)


def _is_binary(data: bytes | None) -> bool:
    if data is None:
        return False
    if b"\x00" in data:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False
