"""The tamper latches of the audit partitions a follower checks, and the ack log that clears them.

A tamper-class alert latches its partition (``bernstein.verifier.follow.latch``): the latch file in
the state directory is written before the next batch is read, stays across restarts, and is
cleared only by an ack in the state directory's ack log (``bernstein audit ack``), read at start
and at every tick. ``LatchKeeping`` is that bookkeeping, mixed into the follower (which owns the
loop that calls it).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bernstein.verifier.follow.alerts import Alert, AlertKind
from bernstein.verifier.follow.latch import Ack, AckLog, Latch, LatchStore, PartitionLatches


class LatchKeeping:
    """The latches of the partitions this process checks: loaded on open, saved when they change."""

    topic: str
    prefix: str
    _notice: Callable[[dict[str, Any]], None] | None
    _clock: Callable[[], float]

    def _init_latches(self, state_directory: Path) -> None:
        self.state_directory = state_directory
        self.latches: dict[int, PartitionLatches] = {}
        self.held_at_end = 0
        """Latches held when ``run`` finished (the command exits 2 while any is held)."""
        self._latch_store = LatchStore(state_directory)
        self._ack_log = AckLog(state_directory)
        self._acks: list[Ack] = []
        self._acks_stamp: tuple[int, int] | None = None
        self._latches_dirty: set[int] = set()

    def _latch(self, alert: Alert) -> None:
        latches = self.latches.get(alert.partition)
        if latches is None:
            latches = self._load_latches(alert.partition)
        latch = latches.latch(alert, self._now_ms())
        self._latches_dirty.add(alert.partition)
        if latch is not None:
            self._latch_event("latched", latches, latch)

    def _load_latches(self, partition: int) -> PartitionLatches:
        """The partition's latches from its file, with the acks logged so far applied; each one held is announced."""
        latches = self.latches[partition] = self._latch_store.load(self.topic, partition)
        self._apply_acks(self._read_acks(), [partition])
        for latch in list(latches.held.values()):
            self._latch_event("latch_held", latches, latch)
        return latches

    def _read_acks(self) -> list[Ack]:
        """The ack log, read again only when it changed."""
        stamp = self._ack_log.stamp()
        if stamp != self._acks_stamp:
            self._acks = self._ack_log.read()
            self._acks_stamp = stamp
        return self._acks

    def _apply_acks(self, acks: list[Ack], partitions: list[int] | None = None) -> None:
        now = self._now_ms()
        for partition in sorted(self.latches) if partitions is None else partitions:
            latches = self.latches[partition]
            for ack in acks:
                if ack.partition != partition or ack.kind not in latches.held:
                    continue
                cleared = latches.acknowledge(ack, now)
                if cleared is None:
                    continue
                self._latches_dirty.add(partition)
                self._latch_event("latch_acknowledged", latches, cleared, {"by": ack.by, "reason": ack.reason})
                renewed = latches.held.get(ack.kind)
                if renewed is not None:
                    self._latch_event("latched", latches, renewed)

    def _refresh_acks(self) -> None:
        """At every tick: apply what was acknowledged since the last look (one stat when nothing was)."""
        if self.latches and self._ack_log.stamp() != self._acks_stamp:
            self._apply_acks(self._read_acks())

    def _flush_latches(self, partitions: list[int] | None = None) -> None:
        """Write the latch files that changed (before the next batch: a latch is on disk before much else happens)."""
        for partition in sorted(self._latches_dirty if partitions is None else self._latches_dirty & set(partitions)):
            latches = self.latches.get(partition)
            if latches is not None:
                self._latch_store.save(latches)
            self._latches_dirty.discard(partition)

    def _latch_event(self, event: str, latches: PartitionLatches, latch: Latch, extra: dict[str, Any] | None = None) -> None:
        if self._notice is None:
            return
        self._notice(
            {
                "event": event,
                "topic": self.topic,
                "partition": latches.partition,
                "kind": latch.kind.value,
                "latch": latch.id,
                "since": latch.to_json()["since"],
                "findings": latch.findings,
                "first_offset": latch.first.get("offset"),
                **(extra or {}),
                "ack": f"bernstein audit ack --prefix {shlex.quote(self.prefix)} "
                f"--state {shlex.quote(str(self.state_directory))} "
                f"--partition {latches.partition} --kind {latch.kind.value} --reason TEXT",
            }
        )

    def latched(self) -> dict[int, frozenset[AlertKind]]:
        """The kinds latched per partition this process checks (what the metrics endpoint serves)."""
        return {partition: frozenset(tuple(latches.held)) for partition, latches in tuple(self.latches.items())}

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)
