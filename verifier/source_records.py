"""What every record source hands on: ``StoredRecord``, the damage it records, and its errors.

A leaf below ``bernstein.verifier.sources``, which re-exports these names: the types every source
and its callers share, apart from any reader, so the kcat source and the dump reader both build on them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from bernstein.schemas.errors import MalformedInput
from bernstein.substrate.config import Topics

STREAMS: Final = ("journal", "refusals", "audit", "deadletter", "checkpoints")

_TOPIC_SUFFIX: Final = {stream: Topics("").by_stream(stream) for stream in STREAMS}
"""The end of each stream's topic name after the deployment prefix (".activity.journal", ...)."""


class UnreadableInput(MalformedInput):
    """A dump or topic that cannot be read at all (exit 3, not a tamper verdict)."""

    code = "E_UNREADABLE_INPUT"


class UnsafeInputFile(UnreadableInput):
    """A dump or capture path that is a symlink, FIFO, socket, device or directory: refused before any read."""

    code = "E_UNSAFE_INPUT_FILE"

    def __init__(self, path: Path, kind: str, expected: str = "a regular file") -> None:
        super().__init__(f"{path} is {kind}, not {expected}; the verifier does not follow or read it")
        self.path = path
        self.kind = kind


class DumpDamaged(UnreadableInput):
    """Damage in a dump or capture while ``DAMAGE_IS_A_VERDICT`` is off: unusable input naming the line."""

    code = "E_DUMP_DAMAGED"

    def __init__(self, problem: DumpProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


@dataclass(frozen=True, slots=True)
class DumpProblem:
    """Damage found in a dump or kcat file: a verdict on the data (see the module docstring for the codes).

    ``stream`` and ``offset`` name the record when the line was one (a
    misplaced or out-of-order record); ``line`` is 1-based.
    """

    code: str
    message: str
    path: str
    line: int
    stream: str = ""
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A topic record exactly as stored: value bytes, key, headers, position, timestamp."""

    stream: str
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class RecordSource(Protocol):
    """A readable set of our topics."""

    def describe(self) -> str: ...

    def partitions(self, stream: str) -> list[int]: ...

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        """Records in offset order; ``headers=False`` lets a source skip decoding headers."""
        ...


def witnessed_checkpoints(source: RecordSource) -> tuple[bytes, ...]:
    """Signed checkpoints the auditor holds beside the topics, cosigned by witnesses (``activity verify --witnessed``):
    the source carries them so every partition's walk can hold its log to them."""
    return tuple(getattr(source, "witnessed", ()))


@dataclass
class TornLine:
    path: str
    line: int
    """1-based line number of the unparseable final line."""


class _ProblemLog:
    """The damage a source has found, each once however often its file is read."""

    def __init__(self, torn: list[TornLine]) -> None:
        self.torn = torn
        self._found: dict[tuple[str, int, str], DumpProblem] = {}
        self.prefix: str | None = None
        """The topic prefix of the first record read: every topic of one dump shares it."""

    def add(self, problem: DumpProblem) -> None:
        self._found.setdefault((problem.path, problem.line, problem.code), problem)
        if problem.code == "DUMP_TRUNCATED":
            torn = TornLine(problem.path, problem.line)
            if torn not in self.torn:
                self.torn.append(torn)

    def problems(self) -> list[DumpProblem]:
        return sorted(self._found.values(), key=lambda p: (p.path, p.line, p.code))

    def topic_problem(self, stream: str, topic: Any) -> str:
        """Why ``topic`` is not the topic of ``stream`` in this dump ("" when it is)."""
        suffix = _TOPIC_SUFFIX.get(stream)
        if suffix is None:
            return ""
        if not isinstance(topic, str) or not topic.endswith(suffix) or not topic[: -len(suffix)]:
            return f"topic {topic!r} is not a {stream} topic (<prefix>{suffix})"
        prefix = topic[: -len(suffix)]
        if self.prefix is None:
            self.prefix = prefix
        elif prefix != self.prefix:
            return f"topic {topic!r} is not {self.prefix + suffix!r}, the prefix of the rest of the dump"
        return ""
