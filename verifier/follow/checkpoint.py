"""Where ``audit follow`` resumes: one small JSON file per partition, written atomically.

A checkpoint is not a bare offset. It names the last record checked (its offset and
the SHA-256 of its stored value) and the chain state the next record is checked
against (next seq, head MAC, ...). On resume the follower reads that record again
and compares: if it changed or vanished, the topic's history was rewritten (alert
``history_rewritten``) and the partition is checked again from its start. So
editing the topic while the follower is down cannot make it skip a break: records
after the checkpoint are checked against the chain head it saved, and records up
to it must be the ones it checked.

The file is local (``--state DIR``; one ``<topic>.<partition>.json`` each), never
the consumer group's committed offsets, which anyone with Read on the group can
move. It is written to a temporary file in the same directory, flushed to disk and
renamed over the old one, so a crash leaves either the old or the new checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bernstein.schemas.errors import BernsteinError, MalformedInput
from bernstein.substrate.files import write_atomically
from bernstein.verifier.follow.checker import ChainState
from bernstein.verifier.follow.journal import JournalJoin
from bernstein.verifier.follow.logwatch import LogWatch

FORMAT: Final = "bernstein.audit-follow-checkpoint/v1"


class CheckpointError(BernsteinError):
    """A checkpoint file cannot be read or written (the message names it)."""

    code = "E_FOLLOW_CHECKPOINT"


def value_digest(value: bytes | None) -> str:
    """What a checkpoint pins of the last record's stored value."""
    return "sha256:" + hashlib.sha256(value or b"").hexdigest()


@dataclass(frozen=True)
class Checkpoint:
    topic: str
    partition: int
    offset: int
    """Offset of the last record checked."""
    value_sha256: str
    """``value_digest`` of that record's stored value."""
    checked: int
    """Records of the partition checked so far (over every run of the follower)."""
    state: ChainState
    journal: JournalJoin | None = None
    """``--check-journal``: the journal position and the mirrors not matched yet."""
    log: LogWatch | None = None
    """``--witness``: the partition's Merkle log as folded, and where its journal and checkpoints are read from."""

    def to_json(self) -> dict[str, Any]:
        return {
            **({"journal": self.journal.to_json()} if self.journal is not None else {}),
            **({"log": self.log.to_json()} if self.log is not None else {}),
            "format": FORMAT,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "value_sha256": self.value_sha256,
            "checked": self.checked,
            "state": self.state.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> Checkpoint:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} document")
        offset, partition, checked = data["offset"], data["partition"], data["checked"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (offset, partition, checked)):
            raise ValueError("offset, partition and checked must be integers")
        return cls(
            topic=str(data["topic"]),
            partition=partition,
            offset=offset,
            value_sha256=str(data["value_sha256"]),
            checked=checked,
            state=ChainState.from_json(data["state"]),
            journal=JournalJoin.from_json(str(data["topic"]), partition, data["journal"]) if "journal" in data else None,
            log=LogWatch.from_json(partition, data["log"]) if "log" in data else None,
        )


def resume_mismatch(checkpoint: Checkpoint, offset: int | None, value: bytes | None) -> str | None:
    """How the first record read on resume differs from the one the checkpoint names, or None when it is that record.

    ``offset`` None: the partition no longer holds the checkpoint's offset at all.
    """
    if offset is None or offset > checkpoint.offset:
        found = "nothing" if offset is None else f"the next record is at offset {offset}"
        return f"has vanished ({found})"
    if offset != checkpoint.offset:
        return f"is not where it was (a record at offset {offset} came first)"
    if value_digest(value) != checkpoint.value_sha256:
        return f"has changed (its value is now {value_digest(value)})"
    return None


class CheckpointStore:
    """The checkpoints of one follower state directory (see the module doc)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, topic: str, partition: int) -> Path:
        return self.directory / f"{topic}.{partition}.json"

    def load(self, topic: str, partition: int) -> Checkpoint | None:
        path = self.path(topic, partition)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"cannot read the follow checkpoint {path}: {exc}") from None
        try:
            checkpoint = Checkpoint.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError, IndexError, MalformedInput) as exc:
            raise CheckpointError(
                f"{path} is not a follow checkpoint ({exc}); move it away to check the partition again from its start"
            ) from None
        if checkpoint.topic != topic or checkpoint.partition != partition:
            raise CheckpointError(
                f"{path} is the checkpoint of {checkpoint.topic}[{checkpoint.partition}], not {topic}[{partition}]"
            )
        return checkpoint

    def save(self, checkpoint: Checkpoint) -> None:
        self.write(checkpoint.topic, checkpoint.partition, encode(checkpoint))

    def write(self, topic: str, partition: int, data: bytes) -> None:
        """Replace the partition's checkpoint file with ``data`` (``encode``), atomically and durably."""
        path = self.path(topic, partition)
        try:
            write_atomically(path, data)
        except OSError as exc:
            raise CheckpointError(f"cannot write the follow checkpoint {path}: {exc}") from None

    def discard(self, topic: str, partition: int) -> None:
        self.path(topic, partition).unlink(missing_ok=True)


def encode(checkpoint: Checkpoint) -> bytes:
    """The checkpoint file's bytes (a snapshot: the chain state goes on changing after this)."""
    return json.dumps(checkpoint.to_json(), separators=(",", ":")).encode("utf-8")


class CheckpointWriter:
    """Writes checkpoints on a thread, in the order given, then runs each one's ``then``.

    A durable write waits for the disk (fsync: 10-100 ms on a busy machine); the follower keeps
    checking meanwhile. ``flush`` waits until everything given is on disk (before a partition is
    handed to another follower, and at the end); a failed write is raised by the next call.
    """

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self._queue: queue.Queue[tuple[str, int, bytes, Callable[[], None] | None] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="follow-checkpoints", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                topic, partition, data, then = item
                if self._error is None:
                    self.store.write(topic, partition, data)
                    if then is not None:
                        then()
            except BaseException as exc:  # noqa: BLE001 - handed to the follower's thread (raise_error)
                self._error = exc
            finally:
                self._queue.task_done()

    def save(self, checkpoint: Checkpoint, then: Callable[[], None] | None = None) -> None:
        self.raise_error()
        self._queue.put((checkpoint.topic, checkpoint.partition, encode(checkpoint), then))

    def flush(self) -> None:
        self._queue.join()
        self.raise_error()

    def raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Write what is queued and stop the thread (errors: ``flush`` first to see them)."""
        self._queue.put(None)
        self._thread.join()
