"""The partition's Merkle log, recomputed from the journal and held to every signed checkpoint that names it.

Since ``PartitionCheckpoint.v2`` the scheduler keeps one RFC 6962 tree per journal partition: a leaf
for every journal entry and seal it wrote, in order (``canonical.tlog_entry_leaf``,
``canonical.tlog_seal_leaf``), and each checkpoint carries the tree's size and root, and the same tree
head as a C2SP signed note under the checkpoint's origin (docs/checkpoints.md, "The Merkle log").
``TreeWalk`` collects what the valid checkpoints claim (``claim``: the note is checked there, against
the checkpoint's own fields and its pinned seal key), then reads the journal partition once, extending
a frontier leaf by leaf, and compares each claim's root when the tree reaches its size:

* ``CHECKPOINT_NOTE_INVALID``: the note does not parse, names another tree head than the checkpoint's
  fields, another partition or topic, or is not signed by the checkpoint's key under its origin;
* ``CHECKPOINT_TREE_MISMATCH``: the journal's first ``tree_size`` leaves do not hash to the signed root
  (a journal record edited, inserted, deleted or reordered before it; the leaves between the last
  matching checkpoint and this one are named);
* ``JOURNAL_TRUNCATED_BEFORE_CHECKPOINT``: the journal holds fewer leaves than a checkpoint commits;
* ``CHECKPOINT_TREE_SHRANK``: a later checkpoint names a smaller tree than an earlier one (two signed
  tree heads that cannot both be true).

Records that are no journal entry or seal are not leaves (the step never writes them; other walks
name them). Memory: the claims (a few hundred bytes per checkpoint) and an O(log n) frontier.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from bernstein.schemas import codec
from bernstein.schemas.canonical import DIGEST_PREFIX, journal_entry_hash, parse_tlog_origin, tlog_entry_leaf, tlog_seal_leaf
from bernstein.schemas.errors import MalformedInput
from bernstein.schemas.merkle import Frontier, leaf_hash
from bernstein.schemas.notes import (
    Checkpoint,
    InvalidNoteSignature,
    NoteRejected,
    NoteVerifier,
    cosignature_timestamp,
    log_verifier,
    open_checkpoint,
    parse_checkpoint,
    parse_note,
)
from bernstein.schemas.tlog_policy import NONE, Policy
from bernstein.substrate.keys import KeyStatus, TrustedKey, TrustedKeys
from bernstein.verifier.keyuse import KeyUse, key_fits
from bernstein.verifier.report import Problem
from bernstein.verifier.source_records import RecordSource, StoredRecord


def journal_leaf(c: codec.Codec, value: bytes | None) -> bytes | None:
    """The Merkle log leaf of a journal record (an entry or a seal); None for bytes that are neither."""
    if not value:
        return None
    try:
        name, fields = codec.split_envelope(value)
        if name == codec.JOURNAL_RECORD:
            payload = fields[0]
            _, run_id, seq, _, _ = codec.read_entry_head(payload)
            return tlog_entry_leaf(run_id, seq, journal_entry_hash(payload))
        if name == codec.SEAL_RECORD:
            seal = c.decode(fields[0], expect=codec.RUN_SEALS).record
            return tlog_seal_leaf(
                seal["run_id"],
                seal["entry_count"],
                seal["head_hash"],
                seal["last_input_offset"],
                seal["final"],
                seal["audit_head"],
            )
    except (codec.DecodeError, MalformedInput):  # a number canonical JSON refuses (above 2**53 - 1): no leaf the step wrote
        return None
    return None


@dataclass(frozen=True, slots=True)
class TreeClaim:
    """What one signed tree head says about the partition's tree: a valid v2 checkpoint of the topic (``offset``
    and ``seq`` its own), or a checkpoint the auditor was handed beside it (``offset`` -1; ``witnesses`` the
    policy's witnesses that cosigned it)."""

    offset: int
    seq: int
    size: int
    root: str
    witnesses: tuple[str, ...] | None = None
    """None for a checkpoint of the topic; for a handed one, who of the policy cosigned it (maybe nobody)."""
    witnessed_at_ms: int | None = None
    """For a handed one its policy's quorum cosigned: the newest cosignature time of those witnesses."""

    @property
    def label(self) -> str:
        if self.witnesses is None:
            return f"checkpoint seq {self.seq} at offset {self.offset}"
        cosigned = f"cosigned by {', '.join(self.witnesses)}" if self.witnesses else "cosigned by no pinned witness"
        return f"the handed checkpoint of {self.size} leaves ({cosigned})"

    def where(self) -> dict[str, Any]:
        return {"stream": "checkpoints", "offset": self.offset} if self.witnesses is None else {}


@dataclass
class UnwitnessedTail:
    """The leaves after the largest handed checkpoint witnesses cosigned: how many, and the oldest record's time."""

    leaves: int = 0
    first_index: int = -1
    oldest_ms: int | None = None

    def see(self, index: int, timestamp_ms: int) -> None:
        if self.first_index < 0:
            self.first_index = index
        self.leaves += 1
        if self.oldest_ms is None or timestamp_ms < self.oldest_ms:
            self.oldest_ms = timestamp_ms


class TreeWalk:
    """The tree claims of one partition's checkpoints, checked against its journal (see the module doc)."""

    def __init__(self, partition: int, add: Callable[[Problem], None]) -> None:
        self.partition = partition
        self.add = add
        self.claims: list[TreeClaim] = []
        self.verified = 0
        """Claims whose root the journal reproduced."""
        self.leaves = 0
        """Leaves the journal partition holds (after ``check``)."""
        self.origin: str | None = None
        """The origin the partition's valid v2 checkpoints name (the first one's)."""
        self.tail = UnwitnessedTail()
        """The journal's leaves after the largest checkpoint witnesses cosigned (with a witness policy)."""

    def claim(self, offset: int, checkpoint: dict[str, Any], public_key: bytes) -> None:
        """A valid (decoded, pinned, verified, chained) checkpoint: its note checked now, its tree kept for ``check``."""
        if "tree_size" not in checkpoint:
            return  # PartitionCheckpoint.v1: written before the Merkle log
        seq, size, root = checkpoint["seq"], checkpoint["tree_size"], checkpoint["tree_root"]
        problem = self._note_problem(checkpoint, public_key)
        if problem is not None:
            self.add(
                Problem(
                    "CHECKPOINT_NOTE_INVALID",
                    f"checkpoint seq {seq} at offset {offset}: its signed note {problem}",
                    stream="checkpoints",
                    offset=offset,
                    audit_seq=checkpoint["audit_seq"],
                )
            )
            return
        self.claims.append(TreeClaim(offset, seq, size, root))
        if self.origin is None:
            self.origin = checkpoint["note"].split("\n", 1)[0]

    def _note_problem(self, checkpoint: dict[str, Any], public_key: bytes) -> str | None:
        try:
            text = checkpoint["note"].encode("utf-8")
            origin = text.split(b"\n", 1)[0].decode("utf-8")
            from_note, opened = open_checkpoint(text, (log_verifier(origin, public_key),))
        except (MalformedInput, NoteRejected, UnicodeDecodeError) as exc:
            return f"does not verify under the checkpoint's seal key ({exc})"
        if not opened.verified:
            return "is not signed by the checkpoint's seal key"
        parsed = parse_tlog_origin(origin)
        if parsed is None or parsed[1:3] != (checkpoint["input_topic"], self.partition):
            return f"names origin {origin[:200]!r}, not '<log name>/{checkpoint['input_topic']}/{self.partition}/e<epoch>'"
        root = DIGEST_PREFIX + from_note.root_hash.hex()
        if (from_note.size, root) != (checkpoint["tree_size"], checkpoint["tree_root"]):
            return f"names tree {from_note.size} {root}, the checkpoint {checkpoint['tree_size']} {checkpoint['tree_root']}"
        return None

    def check(self, leaves: Iterable[tuple[bytes, bytes | None, int]]) -> None:
        """Read the journal's leaves once, in order (each leaf's hash and its record's key, the run id) and hold every
        claim to them. A mismatch concerns the runs with a leaf between the last reproduced head and it."""
        claims = self.claims
        if not claims:
            for _ in leaves:
                self.leaves += 1
            return
        largest_witnessed = max((c for c in claims if c.witnessed_at_ms is not None), key=lambda c: c.size, default=None)
        tree = Frontier()
        at = 0  # the next claim to compare
        matched = 0  # the size of the last claim the journal reproduced
        segment: set[bytes | None] = set()  # the runs with a leaf since then
        largest: TreeClaim | None = None
        order = sorted(claims, key=lambda claim: (claim.size, claim.seq))
        for claim in (c for c in claims if c.witnesses is None):  # in chain order: a tree head never shrinks
            if largest is not None and claim.size < largest.size:
                self.add(
                    Problem(
                        "CHECKPOINT_TREE_SHRANK",
                        f"checkpoint seq {claim.seq} at offset {claim.offset} signs a tree of {claim.size} leaves after "
                        f"checkpoint seq {largest.seq} signed {largest.size}",
                        stream="checkpoints",
                        offset=claim.offset,
                        expected=f">= {largest.size}",
                        recomputed=str(claim.size),
                    )
                )
            if largest is None or claim.size > largest.size:
                largest = claim

        def compare(claim: TreeClaim) -> None:
            nonlocal matched
            root = DIGEST_PREFIX + tree.root().hex()
            if root == claim.root:
                self.verified += 1
                matched = claim.size
                segment.clear()
                return
            # the topic's own head concerns the runs with a leaf in the changed span; a handed one, every run
            runs = None if claim.witnesses is not None else frozenset(key.decode("utf-8", "replace") for key in segment if key)
            self.add(
                Problem(
                    "CHECKPOINT_TREE_MISMATCH",
                    f"{claim.label} signs the root of {claim.size} leaves, but the journal's first {claim.size} hash to "
                    f"another: a journal record among leaves {matched}..{claim.size - 1} was edited, inserted, deleted or moved",
                    expected=claim.root,
                    recomputed=root,
                    leaf_index=matched,
                    runs=runs,
                    **claim.where(),
                )
            )

        while at < len(order) and order[at].size == 0:
            compare(order[at])
            at += 1
        for hashed, key, timestamp_ms in leaves:
            if largest_witnessed is not None and tree.size >= largest_witnessed.size:
                self.tail.see(tree.size, timestamp_ms)
            tree = tree.append(hashed)
            segment.add(key)
            while at < len(order) and order[at].size == tree.size:
                compare(order[at])
                at += 1
        self.leaves = tree.size
        beyond = order[at:]
        topic = next((claim for claim in beyond if claim.witnesses is None), None)
        handed = next((claim for claim in reversed(beyond) if claim.witnesses is not None), None)
        for first in (claim for claim in (topic, handed) if claim is not None):
            witnessed = bool(first.witnesses)
            # a handed checkpoint's cut concerns every run: whose records went is unknown
            runs = None if first.witnesses is not None else frozenset(key.decode("utf-8", "replace") for key in segment if key)
            code = "JOURNAL_TRUNCATED_BEFORE_CHECKPOINT"
            if witnessed:
                code = "HISTORY_CUT_BEHIND_WITNESSES"
            self.add(
                Problem(
                    code,
                    f"{first.label} commits a tree of {first.size} leaves, but the journal partition holds {tree.size}: "
                    f"{first.size - tree.size} journal records of its tail deleted"
                    + (" after witnesses saw them" if witnessed else ""),
                    expected=str(first.size),
                    recomputed=str(tree.size),
                    leaf_index=tree.size,
                    runs=runs,
                    **first.where(),
                )
            )


def handed_claim(
    note: bytes, partition: int, origin_seen: str | None, seal_keys: Sequence[TrustedKey], policy: Policy | None
) -> tuple[TreeClaim | None, Problem | None] | str:
    """A checkpoint handed beside the topics: its claim (with the policy's witnesses that cosigned it), or the
    problem with it; a string when it is another partition's log (not this walk's to judge)."""
    try:
        origin = parse_checkpoint(parse_note(note).text).origin
    except MalformedInput as exc:
        return None, Problem("WITNESSED_CHECKPOINT_INVALID", f"a handed checkpoint is no signed tlog-checkpoint note: {exc}")
    parsed = parse_tlog_origin(origin)
    if parsed is None or parsed[2] != partition:
        return "another log"
    seen = None if origin_seen is None else parse_tlog_origin(origin_seen)
    if origin_seen is not None and origin != origin_seen:
        if seen is None or parsed[1] != seen[1]:
            return "another log"  # another prefix's partition of the same number
        return None, Problem(
            "WITNESSED_CHECKPOINT_INVALID",
            f"the handed checkpoint names origin {origin[:200]!r}, while the partition's own checkpoints name "
            f"{origin_seen!r}: the same log under another name or epoch",
        )
    try:
        head = open_witnessed(note, seal_keys, policy)
    except InvalidNoteSignature as exc:
        return None, Problem("WITNESSED_CHECKPOINT_INVALID", f"the handed checkpoint of {origin!r}: {exc}")
    except MalformedInput as exc:
        return None, Problem("WITNESSED_CHECKPOINT_INVALID", f"a handed checkpoint is no signed tlog-checkpoint note: {exc}")
    if head is None:
        return None, Problem(
            "WITNESSED_CHECKPOINT_INVALID",
            f"the handed checkpoint of {origin[:200]!r} is not signed by a pinned seal key under its origin",
        )
    root = DIGEST_PREFIX + head.checkpoint.root_hash.hex()
    if policy is None:
        return TreeClaim(-1, -1, head.checkpoint.size, root, ()), None
    return TreeClaim(-1, -1, head.checkpoint.size, root, head.cosigned, head.witnessed_at_ms), None


@dataclass(frozen=True, slots=True)
class WitnessedHead:
    """A checkpoint note a pinned seal key signed under its origin, and the witness policy's cosignatures on it."""

    checkpoint: Checkpoint
    seal_key: TrustedKey
    cosigned: tuple[str, ...] = ()
    """The policy's witnesses (by their policy names, sorted) whose cosignature/v1 verified over the checkpoint body."""
    unknown: tuple[str, ...] = ()
    """Key names of the other signature lines: by no pinned seal key and no witness of the policy, so not checked."""
    witnessed_at_ms: int | None = None
    """When ``cosigned`` meets the policy's quorum (not ``none``): its newest cosignature time, what bounds the
    unwitnessed tail (``TreeClaim.witnessed_at_ms``)."""


class CosignatureInvalid(InvalidNoteSignature):
    """A policy witness's cosignature line (its key name and id) that does not verify over the checkpoint body, on a
    note a pinned seal key did sign: ``head`` is that note without its cosignatures (``cosigned`` empty)."""

    def __init__(self, name: str, key_id: int, witness: str, head: WitnessedHead) -> None:
        super().__init__(name, key_id)
        self.witness = witness
        self.head = head


def open_witnessed(note: bytes, seal_keys: Sequence[TrustedKey], policy: Policy | None) -> WitnessedHead | None:
    """Open a checkpoint note against the pinned seal keys (under the note's own origin) and the policy's witness keys,
    in one pass: every signature line by a known key must verify (c2sp.org/signed-note), a witness's cosignature/v1
    over the checkpoint body. The one check of cosignatures, for handed checkpoints and proofs alike.

    None when no pinned seal key signed the note under its origin (its log signature fails, or is by another key).
    ``MalformedInput`` for bytes that are no signed tlog-checkpoint note; ``CosignatureInvalid`` when a policy
    witness's cosignature does not verify on a note the log did sign."""
    origin = note.split(b"\n", 1)[0].decode("utf-8", "replace")
    logs: dict[NoteVerifier, TrustedKey] = {}
    for key in seal_keys:
        try:
            logs[log_verifier(origin, key.material)] = key
        except MalformedInput:  # an origin no key name can carry (or a weak key): no signature under it counts
            continue
    witnesses = {verifier: name for name, verifier in policy.witnesses.items()} if policy is not None else {}
    try:
        checkpoint, opened = open_checkpoint(note, (*logs, *witnesses))
    except NoteRejected as exc:
        signed = _log_signed(note, logs)  # a rejected note: does its log signature stand without the witnesses?
        bad = (exc.name, exc.key_id) if isinstance(exc, InvalidNoteSignature) else None
        witness = next((n for v, n in witnesses.items() if (v.name, v.key_id) == bad), None)
        if signed is None or bad is None or witness is None:
            return None  # the log's own signature fails (or none is there): the note is not the log's
        raise CosignatureInvalid(bad[0], bad[1], witness, signed) from None
    seal_key = next((key for verifier, key in logs.items() if opened.signed_by(verifier) is not None), None)
    if seal_key is None:
        return None  # only witnesses signed it
    unknown = tuple(dict.fromkeys(sig.name for sig in opened.unknown))
    if policy is None:
        return WitnessedHead(checkpoint, seal_key, (), unknown)
    cosigned = tuple(sorted(policy.witnessed_by(opened)))
    met = policy.quorum != NONE and policy.satisfied(frozenset(cosigned))
    times = [cosignature_timestamp(sig) * 1000 for name in cosigned if (sig := opened.signed_by(policy.witnesses[name]))]
    at = max(times) if met and times else None  # only a head the quorum cosigned bounds the unwitnessed tail
    return WitnessedHead(checkpoint, seal_key, cosigned, unknown, at)


def _log_signed(note: bytes, logs: dict[NoteVerifier, TrustedKey]) -> WitnessedHead | None:
    """The note's checkpoint if a pinned seal key's signature on it verifies (the witnesses' lines left unchecked);
    ``MalformedInput`` for bytes that are no checkpoint note."""
    parse_checkpoint(parse_note(note).text)
    for verifier, key in logs.items():
        try:
            checkpoint, _ = open_checkpoint(note, (verifier,))
        except NoteRejected:
            continue
        return WitnessedHead(checkpoint, key)
    return None


class LeafRecorder:
    """The journal partition's leaves as its rows pass by on their way to the run walks, so the log is checked
    without reading the partition again: 32 bytes, a run index and a timestamp per entry or seal."""

    def __init__(self) -> None:
        self._c = codec.default_codec()
        self._hashes = bytearray()
        self._runs = array("I")
        self._times = array("q")
        self._keys: dict[bytes | None, int] = {}
        self._names: list[bytes | None] = []

    def rows(self, chunks: Iterable[list[Any]]) -> Iterator[list[Any]]:
        """``chunks`` of rows ``(offset, timestamp, key, value, ...)`` unchanged, each row's leaf recorded."""
        for rows in chunks:
            for row in rows:
                leaf = journal_leaf(self._c, row[3])
                if leaf is None:
                    continue
                self._hashes += leaf_hash(leaf)
                index = self._keys.get(row[2])
                if index is None:
                    index = self._keys[row[2]] = len(self._names)
                    self._names.append(row[2])
                self._runs.append(index)
                self._times.append(row[1])
            yield rows

    def leaves(self) -> Iterator[tuple[bytes, bytes | None, int]]:
        hashes, names, times = bytes(self._hashes), self._names, self._times
        for i, run in enumerate(self._runs):
            yield hashes[32 * i : 32 * i + 32], names[run], times[i]


@dataclass(frozen=True, slots=True)
class SignedHead:
    """A v2 checkpoint's tree head as the topic holds it (its signatures are the caller's to check)."""

    offset: int
    size: int
    root: str
    note: bytes


def signed_heads(source: RecordSource, partition: int) -> list[SignedHead]:
    """Every decodable PartitionCheckpoint.v2 of the partition, in offset order."""
    if partition not in source.partitions("checkpoints"):
        return []
    c = codec.default_codec()
    heads: list[SignedHead] = []
    for stored in source.records("checkpoints", partition, headers=False):
        try:
            name, fields = codec.split_envelope(stored.value or b"")
            if name != codec.CHECKPOINT_RECORD:
                continue
            checkpoint = c.decode(fields[0], expect=codec.PARTITION_CHECKPOINTS).record
        except codec.DecodeError:
            continue
        if "tree_size" in checkpoint:
            heads.append(SignedHead(stored.offset, checkpoint["tree_size"], checkpoint["tree_root"], checkpoint["note"].encode()))
    return heads


def partition_leaves(source: RecordSource, partition: int) -> Iterator[tuple[bytes, StoredRecord]]:
    """Each leaf of the partition's journal, in order: its hash and the record it is (records that are no leaf left out)."""
    if partition not in source.partitions("journal"):
        return
    c = codec.default_codec()
    for record in source.records("journal", partition, headers=False):
        leaf = journal_leaf(c, record.value)
        if leaf is not None:
            yield leaf_hash(leaf), record


def partition_leaf_hashes(source: RecordSource, partition: int) -> list[bytes]:
    """The leaf hashes of the partition's journal, in order (32 bytes each: a million leaves hold 32 MB)."""
    return [hashed for hashed, _ in partition_leaves(source, partition)]


def reproduced(heads: Sequence[SignedHead], hashes: Sequence[bytes]) -> list[tuple[SignedHead, bool]]:
    """Each head with whether the leaves reproduce its root (a head larger than the leaves does not): one pass."""
    tree = Frontier()
    found: list[tuple[SignedHead, bool]] = []
    for head in sorted(heads, key=lambda head: head.size):
        if head.size > len(hashes):
            found.append((head, False))
            continue
        tree = tree.extend(hashes[tree.size : head.size])
        found.append((head, DIGEST_PREFIX + tree.root().hex() == head.root))
    return found


def note_keys(trusted: TrustedKeys) -> list[TrustedKey]:
    """The pinned keys a log's note may be signed by: seal keys (or v1 files' keys of any signing purpose), never a
    revoked one. A note carries no time, so a revoked key, whose secret may be in other hands, vouches for nothing."""
    return [
        entry
        for entry in trusted.entries.values()
        if key_fits(entry, KeyUse.CHECKPOINT, None) and not entry.is_hmac and entry.status != KeyStatus.REVOKED
    ]
