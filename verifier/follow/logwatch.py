"""``audit follow --witness KEYDIR``: the follower as a witness that recomputed what it cosigns.

A witness handed only checkpoints and consistency proofs (``bernstein witness serve``) learns that the
log never forked; it cannot learn that the log's leaves are the journal's records. The follower can: it
folds each journal partition's records into that partition's Merkle log (the leaves
``verifier.tlog.journal_leaf`` gives, as the scheduler and ``activity verify`` build them) and holds
every signed tree head of the checkpoints topic to it. A head the journal reproduces may be cosigned
with the follower's own witness key; one it does not reproduce is alert ``log_head_mismatch``, and a
head whose note is not the partition log's, signed by a pinned seal key, is ``log_note_invalid``.

The journal and the checkpoints partitions are read apart, so a head may come before or after the leaves
it covers. Kept per partition: the tree at the last head held (a frontier: O(log n)), the leaf hashes
read after it (about one checkpoint interval's) and the heads not reached yet. Saved in the follower's
checkpoint: the frontier, the journal offset after its last leaf, the checkpoints offset of the first
head still waiting and the last head cosigned; a restart reads the tail and the waiting heads again.
Pure: the Kafka edge feeds records, journal ends and the cosigning.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Final

from bernstein.schemas import codec
from bernstein.schemas.canonical import DIGEST_PREFIX
from bernstein.schemas.merkle import Frontier, leaf_hash
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.follow.alerts import Alert, AlertKind
from bernstein.verifier.tlog import handed_claim, journal_leaf, note_keys

MAX_TAIL: Final = 1 << 21
"""Leaves kept past the last head held (64 MiB of hashes); beyond, the oldest are folded and a later head below
them is not judged (heads are written with their leaves: only a checkpoints partition far behind its journal
gets there)."""
MAX_HELD: Final = 64
"""Roots of recent heads kept, to recognise the head a witness state names."""


@dataclass(frozen=True, slots=True)
class Head:
    """A signed tree head waiting for the journal: where it is, what it signs, and the journal end that must hold it."""

    offset: int
    size: int
    root: bytes
    note: bytes
    journal_end: int
    """The journal partition's last stable offset read after this head: its leaves are below it."""
    suspect: int = 0
    """1: found short of leaves once, so the edge reads the journal's end again (``refresh``); 2: that end was read
    again, so the next time it is short it is named."""


@dataclass
class LogWatch:
    """One journal partition's Merkle log as the follower folds it (see the module doc)."""

    checkpoints_topic: str
    partition: int
    base: Frontier = field(default_factory=Frontier)
    """The tree at the last head the journal reproduced (or at the start)."""
    journal_next: int = 0
    """The journal offset after ``base``'s last leaf (where a restart reads from)."""
    checkpoints_next: int = 0
    """The checkpoints offset of the first head not held yet (where a restart reads from)."""
    cosigned: tuple[int, bytes] | None = None
    """(size, root) of the tree the witness state holds for the origin, held to this fold: the last head this
    follower cosigned, or the state's tree it found and reproduced (``expect``)."""
    unjudged: int = 0
    """Heads below the leaves kept (see ``MAX_TAIL``): neither held nor cosigned."""
    _tail: bytearray = field(default_factory=bytearray)
    _offsets: array[int] = field(default_factory=lambda: array("q"))
    _waiting: list[Head] = field(default_factory=list)
    _held: OrderedDict[int, bytes] = field(default_factory=OrderedDict)
    _cursor: Frontier | None = None
    """The tree over ``base`` and a prefix of the tail, kept between heads so that a run of heads (also after a
    mismatch, which leaves ``base`` where it was) costs one pass over the tail, not one per head."""
    journal_read: int = -1
    """The journal offset to read next (-1: ``journal_next``)."""
    checkpoints_read: int = -1
    """The checkpoints offset to read next (-1: ``checkpoints_next``)."""
    origin: str | None = None
    """The origin of the partition's valid heads (the first one's)."""

    def __post_init__(self) -> None:
        if self.journal_read < 0:
            self.journal_read = self.journal_next
        if self.checkpoints_read < 0:
            self.checkpoints_read = self.checkpoints_next
        if self.cosigned is not None:
            self._hold(*self.cosigned)

    @property
    def size(self) -> int:
        """Leaves folded so far."""
        return self.base.size + len(self._offsets)

    @property
    def waiting(self) -> int:
        """Heads read but not held yet."""
        return len(self._waiting)

    # -- the journal --------------------------------------------------------------------

    def journal(self, records: list[tuple[int, bytes | None]]) -> None:
        """Fold journal records (offset, value), in offset order; records that are no leaf are passed over."""
        c = codec.default_codec()
        for offset, value in records:
            leaf = journal_leaf(c, value)
            if leaf is not None:
                self._tail += leaf_hash(leaf)
                self._offsets.append(offset)
            self.journal_read = offset + 1
        if len(self._offsets) > MAX_TAIL:
            self._advance(len(self._offsets) - MAX_TAIL // 2)

    def _advance(self, leaves: int) -> None:
        """Fold the oldest ``leaves`` of the tail into ``base``."""
        self._move_base(self._tree_at(self.base.size + leaves))

    def _move_base(self, tree: Frontier) -> None:
        """``base`` becomes ``tree``, a tree over ``base`` and a prefix of the tail."""
        leaves = tree.size - self.base.size
        if leaves <= 0:
            return
        self.base = tree
        self.journal_next = self._offsets[leaves - 1] + 1
        del self._tail[: leaves * 32]
        del self._offsets[:leaves]

    def _tree_at(self, size: int) -> Frontier:
        """The tree of the first ``size`` leaves (``base.size <= size <= self.size``), from the cursor when it can."""
        cursor = self._cursor
        if cursor is None or not self.base.size <= cursor.size <= size:
            cursor = self.base
        hashes = bytes(self._tail[(cursor.size - self.base.size) * 32 : (size - self.base.size) * 32])
        self._cursor = cursor = cursor.extend(hashes[at : at + 32] for at in range(0, len(hashes), 32))
        return cursor

    # -- the checkpoints ------------------------------------------------------------------

    def heads(self, records: list[tuple[int, bytes | None]], trusted: TrustedKeys, journal_end: int) -> list[Alert]:
        """Read checkpoint records (offset, value), in offset order: each v2 head whose note is the partition
        log's, signed by a pinned seal key, waits for the journal; ``journal_end``: the journal's last stable
        offset read after these records. Alerts ``log_note_invalid`` for the others."""
        c = codec.default_codec()
        alerts: list[Alert] = []
        keys = None
        for offset, value in records:
            self.checkpoints_read = offset + 1
            try:
                name, fields = codec.split_envelope(value or b"")
                if name != codec.CHECKPOINT_RECORD:
                    continue
                record = c.decode(fields[0], expect=codec.PARTITION_CHECKPOINTS).record
            except codec.DecodeError:
                continue  # not a checkpoint: the audit chain and `activity verify` judge the topic's records
            if "tree_size" not in record:
                continue  # PartitionCheckpoint.v1: written before the Merkle log
            keys = note_keys(trusted) if keys is None else keys
            note = record["note"].encode("utf-8")
            judged = handed_claim(note, self.partition, self.origin, keys, None)
            origin = note.split(b"\n", 1)[0]
            if isinstance(judged, str):
                why = f"names another partition's log ({origin[:200]!r})"
            else:
                claim, problem = judged
                if claim is not None and (claim.size, claim.root) == (record["tree_size"], record["tree_root"]):
                    if self.origin is None:
                        self.origin = origin.decode("utf-8")
                    root = bytes.fromhex(claim.root[len(DIGEST_PREFIX) :])
                    self._waiting.append(Head(offset, claim.size, root, note, journal_end))
                    continue
                why = problem.message if problem is not None else "names another tree than its checkpoint record"
            alerts.append(
                Alert(
                    AlertKind.LOG_NOTE_INVALID,
                    self.checkpoints_topic,
                    self.partition,
                    offset,
                    f"checkpoint seq {record['seq']}: not cosigned, its signed note is not the partition log's: {why}",
                    {"tree_size": record["tree_size"], "signed_root": record["tree_root"]},
                )
            )
        return alerts

    def expect(self, size: int, root: bytes, journal_end: int) -> None:
        """Hold a tree a witness state names (one this follower did not cosign) to the journal like a head."""
        self._waiting.append(Head(-1, size, root, b"", journal_end))

    def knows(self, size: int, root: bytes) -> bool:
        """Whether the journal's leaves gave ``root`` at ``size`` (a recent head held, or the witness state's tree)."""
        return self._held.get(size) == root or self.cosigned == (size, root)

    @property
    def suspects(self) -> bool:
        """Whether a head found short of leaves waits for ``refresh``."""
        return any(h.suspect == 1 for h in self._waiting)

    def refresh(self, journal_end: int) -> None:
        """The journal's end read again: a head found short once waits for the leaves below it before it is named
        (the journal's transaction marker may be written a moment after the checkpoints')."""
        self._waiting = [
            replace(h, journal_end=max(h.journal_end, journal_end), suspect=2) if h.suspect == 1 else h for h in self._waiting
        ]

    def _hold(self, size: int, root: bytes) -> None:
        self._held[size] = root
        self._held.move_to_end(size)
        while len(self._held) > MAX_HELD:
            self._held.popitem(last=False)

    # -- holding heads to the journal -----------------------------------------------------

    def settle(self) -> tuple[list[Alert], list[Head]]:
        """Hold every waiting head the leaves read reach (or the journal end passed) to the log: the alerts, and the
        heads reproduced (smallest first). ``base`` moves to the largest head reproduced."""
        alerts: list[Alert] = []
        reproduced: list[Head] = []
        still: list[Head] = []
        for head in sorted(self._waiting, key=lambda h: (h.size, h.offset)):
            if head.size > self.size:
                if self.journal_read < head.journal_end:
                    still.append(head)
                elif head.suspect < 2:
                    still.append(replace(head, suspect=1))
                else:
                    alerts.append(self._short(head))
                continue
            if head.size < self.base.size:
                known = self._held.get(head.size)
                if self.cosigned is not None and self.cosigned[0] == head.size:
                    known = self.cosigned[1]
                if known is None:
                    self.unjudged += 1
                elif known != head.root:
                    alerts.append(self._mismatch(head, known))
                continue
            tree = self._tree_at(head.size)
            root = tree.root()
            if root != head.root:
                alerts.append(self._mismatch(head, root))
                continue
            self._hold(head.size, root)
            self._move_base(tree)
            if head.offset >= 0:
                reproduced.append(head)
            else:
                self.cosigned = (head.size, root)
        self._waiting = still
        offsets = [h.offset for h in still if h.offset >= 0]
        self.checkpoints_next = min(offsets) if offsets else self.checkpoints_read
        return alerts, reproduced

    def _short(self, head: Head) -> Alert:
        return self._head_alert(
            head,
            f"of size {head.size}, but the journal partition holds {self.size} leaves below offset {head.journal_end}: "
            "journal records were removed, or the log signed leaves it never wrote",
            {"leaves": self.size, "leaf_index": self.size, "signed_root": _digest(head.root)},
        )

    def _mismatch(self, head: Head, root: bytes) -> Alert:
        return self._head_alert(
            head,
            f"of size {head.size} signs root {_digest(head.root)}, the journal's leaves give {_digest(root)} (the first "
            f"{self.base.size} leaves were held to an earlier head): a journal record at leaf {self.base.size} or later "
            "was rewritten, removed or injected",
            {"leaf_index": self.base.size, "signed_root": _digest(head.root), "journal_root": _digest(root)},
        )

    def _head_alert(self, head: Head, detail: str, extra: dict[str, Any]) -> Alert:
        """``log_head_mismatch`` at a head of the checkpoints topic (or at no record: a witness state's tree)."""
        what = "the tree a witness state names" if head.offset < 0 else "a signed tree head"
        return Alert(
            AlertKind.LOG_HEAD_MISMATCH,
            self.checkpoints_topic,
            self.partition,
            head.offset if head.offset >= 0 else None,
            f"{what} {detail}",
            {"tree_size": head.size, **extra},
        )

    # -- the follower's checkpoint ----------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoints_topic": self.checkpoints_topic,
            "tree": self.base.encode().hex(),
            "journal_next": self.journal_next,
            "checkpoints_next": self.checkpoints_next,
            "cosigned": None if self.cosigned is None else [self.cosigned[0], self.cosigned[1].hex()],
            "origin": self.origin,
        }

    @classmethod
    def from_json(cls, partition: int, data: dict[str, Any]) -> LogWatch:
        cosigned = data["cosigned"]
        origin = data["origin"]
        return cls(
            str(data["checkpoints_topic"]),
            partition,
            Frontier.decode(bytes.fromhex(str(data["tree"]))),
            int(data["journal_next"]),
            int(data["checkpoints_next"]),
            None if cosigned is None else (int(cosigned[0]), bytes.fromhex(str(cosigned[1]))),
            origin=None if origin is None else str(origin),
        )


def _digest(root: bytes) -> str:
    return DIGEST_PREFIX + root.hex()
