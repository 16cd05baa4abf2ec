"""A ``RecordSource`` over records held in memory, by stream and partition.

For a script or a test that builds records without Kafka and hands them to the
verifier or the exporter (``scripts/offline_dump.py``, the test doubles in
``tests/support/browser_fakes.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from bernstein.verifier.sources import StoredRecord


class MemorySource:
    """A ``RecordSource`` over in-memory records, by stream and partition."""

    def __init__(self, records: Mapping[str, Sequence[StoredRecord]] | None = None) -> None:
        self._records: dict[str, list[StoredRecord]] = {k: list(v) for k, v in (records or {}).items()}

    def describe(self) -> str:
        return "memory"

    def add(self, record: StoredRecord) -> None:
        self._records.setdefault(record.stream, []).append(record)

    def partitions(self, stream: str) -> list[int]:
        return sorted({r.partition for r in self._records.get(stream, [])})

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        yield from (r for r in self._records.get(stream, []) if r.partition == partition)

    def all(self, stream: str) -> list[StoredRecord]:
        return list(self._records.get(stream, []))

    def replaced(self, stream: str, records: Sequence[StoredRecord]) -> MemorySource:
        """A copy with ``stream`` replaced (tamper fixtures)."""
        copy: dict[str, Any] = dict(self._records)
        copy[stream] = list(records)
        return MemorySource(copy)
