"""The Kafka edge of ``audit follow --witness KEYDIR``: read each partition's journal and checkpoints, fold them
(``logwatch.LogWatch``), and cosign the heads the journal reproduces with the witness key in KEYDIR.

One consumer, assigned (never in a group) the journal and checkpoints partitions of the audit partitions the
follower holds, each from its ``LogWatch``'s saved offsets. What was cosigned is kept as a witness keeps it
(``witness.store.FileWitnessStore`` in ``<state>/witness``: the latest cosigned checkpoint per origin and the
evidence of a conflict), and written as ``<state>/witness/cosigned/<partition>.checkpoint``, the file
``activity verify --witnessed`` and ``activity prove --witnessed`` take. A head is cosigned only after the
check and the save share the witness store's lock (``Witness.cosign_checked``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bernstein.schemas import notes
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.files import write_atomically
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.follow.alerts import Alert, AlertKind
from bernstein.verifier.follow.logwatch import Head, LogWatch
from bernstein.verifier.tlog import note_keys
from bernstein.verifier.witness.core import Witness, WitnessRefusal
from bernstein.verifier.witness.store import FileWitnessStore

_BATCH: Final = 5000


class WitnessStateUnknown(BernsteinError):
    """The witness state names a tree this follower's saved fold has passed without holding it to the journal."""

    code = "E_WITNESS_STATE_UNKNOWN"


class LogWitness:
    """Reads, folds and cosigns for the partitions the follower holds (see the module doc)."""

    def __init__(
        self,
        signer: notes.NoteSigner,
        directory: Path,
        journal_topic: str,
        checkpoints_topic: str,
        *,
        trusted: Callable[[], TrustedKeys],
        emit: Callable[[list[Alert]], None],
        progress: Callable[[dict[str, Any]], None] | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.signer = signer
        self.store = FileWitnessStore(directory)
        self.out = directory / "cosigned"
        self.journal_topic = journal_topic
        self.checkpoints_topic = checkpoints_topic
        self._trusted = trusted
        self._emit = emit
        self._progress = progress
        self._clock = clock
        self.consumer: Any = None
        self.ends: dict[int, tuple[int, int]] = {}
        """``once``: (checkpoints end, journal end) pinned per partition, the checkpoints' first."""
        self._adopted: set[int] = set()
        """Partitions whose origin's witness state was held against the fold (``_adopt``)."""

    def new_watch(self, partition: int) -> LogWatch:
        return LogWatch(self.checkpoints_topic, partition)

    def assign(self, watches: dict[int, LogWatch]) -> None:
        """Read the journal and checkpoints partitions of ``watches``, each from where its fold stands."""
        from confluent_kafka import TopicPartition

        self._adopted &= set(watches)
        self.consumer.assign(
            [TopicPartition(self.journal_topic, p, w.journal_read) for p, w in sorted(watches.items())]
            + [TopicPartition(self.checkpoints_topic, p, w.checkpoints_read) for p, w in sorted(watches.items())]
        )

    def done(self, partition: int, watch: LogWatch) -> bool:
        """``once``: both partitions were read up to their pinned ends and no head waits for a leaf still to come."""
        checkpoints_end, journal_end = self.ends.get(partition, (0, 0))
        return watch.checkpoints_read >= checkpoints_end and watch.journal_read >= journal_end and not watch.waiting

    def read(
        self, watches: dict[int, LogWatch], journal_end: Callable[[int], int], raise_error: Callable[[Any], None]
    ) -> set[int]:
        """What the consumer has now: fold it, hold the heads, cosign; returns the partitions whose fold moved.
        ``journal_end(p)``: the journal partition's last stable offset now (read once per batch of heads)."""
        from confluent_kafka import KafkaError as RdKafkaError
        from confluent_kafka import TopicPartition

        messages = self.consumer.consume(_BATCH, 0)
        journal: dict[int, list[tuple[int, bytes | None]]] = {}
        heads: dict[int, list[tuple[int, bytes | None]]] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != RdKafkaError._PARTITION_EOF:
                    raise_error(error)
                continue
            if message.topic() == self.journal_topic:
                journal.setdefault(message.partition(), []).append((message.offset(), message.value()))
            elif message.partition() not in self.ends or message.offset() < self.ends[message.partition()][0]:
                heads.setdefault(message.partition(), []).append((message.offset(), message.value()))
            # (``once``: a head past the pinned end is left for the next run, as the audit records past theirs)
        trusted = self._trusted()
        moved: set[int] = set()
        for partition, watch in watches.items():
            if partition in journal:
                watch.journal(journal[partition])
            if partition in heads:
                end = self.ends[partition][1] if partition in self.ends else journal_end(partition)
                self._emit(watch.heads(heads[partition], trusted, end))
            positions = self.consumer.position(
                [TopicPartition(self.journal_topic, partition), TopicPartition(self.checkpoints_topic, partition)]
            )
            # past transaction markers too: the offsets a fold stands at are the consumer's positions
            watch.journal_read = max(watch.journal_read, positions[0].offset)
            read_to = positions[1].offset if partition not in self.ends else min(positions[1].offset, self.ends[partition][0])
            watch.checkpoints_read = max(watch.checkpoints_read, read_to)
            if watch.origin is not None and partition not in self._adopted:
                self._adopt(partition, watch, journal_end)
            before = (watch.size, watch.checkpoints_next, watch.journal_read)
            alerts, reproduced = watch.settle()
            if watch.suspects:
                watch.refresh(journal_end(partition))
            self._emit(alerts)
            if reproduced:
                self._cosign(partition, watch, reproduced[-1], trusted)
            if alerts or reproduced or before != (watch.size, watch.checkpoints_next, watch.journal_read):
                moved.add(partition)
        return moved

    def _adopt(self, partition: int, watch: LogWatch, journal_end: Callable[[int], int]) -> None:
        """Hold what the witness state already cosigned for the origin to this fold too, before cosigning more."""
        assert watch.origin is not None
        self._adopted.add(partition)
        latest = self.store.latest(watch.origin)
        if latest is None or watch.knows(latest.size, latest.root_hash):
            return
        if latest.size < watch.base.size:
            raise WitnessStateUnknown(
                f"the witness state in {self.store.directory} cosigned size {latest.size} of {watch.origin!r}, which this "
                f"follower's saved fold (at {watch.base.size} leaves) never held to the journal: give each follower a "
                "witness state of its own, or remove the follower's state of this partition to fold its journal again"
            )
        watch.expect(latest.size, latest.root_hash, journal_end(partition))

    def _cosign(self, partition: int, watch: LogWatch, head: Head, trusted: TrustedKeys) -> None:
        assert watch.origin is not None
        keys = [notes.log_verifier(watch.origin, key.material) for key in note_keys(trusted)]
        witness = Witness(self.signer, {watch.origin: keys}, self.store, clock=self._clock)
        try:
            cosigned = witness.cosign_checked(head.note, lambda latest: watch.knows(latest.size, latest.root_hash))
        except WitnessRefusal as refusal:
            self._emit(
                [
                    Alert(
                        AlertKind.LOG_HEAD_MISMATCH,
                        self.checkpoints_topic,
                        partition,
                        head.offset,
                        f"the journal reproduces the signed head of size {head.size}, but not what this witness "
                        f"cosigned before: {refusal.message}",
                        {"tree_size": head.size, "refusal": refusal.code},
                    )
                ]
            )
            return
        if cosigned is None:
            return
        watch.cosigned = (cosigned.size, cosigned.root_hash)
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{partition}.checkpoint"
        write_atomically(path, cosigned.note)
        if self._progress is not None:
            self._progress(
                {
                    "event": "cosigned",
                    "partition": partition,
                    "origin": cosigned.origin,
                    "tree_size": cosigned.size,
                    "witness": self.signer.name,
                    "file": str(path),
                }
            )

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
