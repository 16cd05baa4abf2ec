"""A proof that a log signed two checkpoints that cannot both be true: ``activity prove-rewriting`` and ``verify-rewriting``.

Two signed notes A (tree size m, root a) and B (size n, root b) of one origin, both signed under that origin by
one and the same pinned (not revoked) seal key, A the smaller (or equal) tree. The file proves that ONE key signed two
heads that cannot both be true: two deployments with the default log name and prefix share an origin, so a head of
each, by two keys an auditor pins both of, proves nothing (``REWRITING_SIGNERS_DIFFER``). Only keys pinned as seal keys
count (``rewriting_keys``): a v1 trusted-keys file's keys carry no purpose (``any``), and such a key may be a
producer's, whose two notes would prove nothing about the log.

* m == n and a != b: two trees of one size with different roots; nothing more is needed;
* m < n: with the consistency path from m to n (``merkle.consistency_path``), made from the journal's leaves of
  B's tree. The check runs the consistency verification without the old root (``merkle.consistency_old_root``):
  the path must reproduce b, and the old root it then derives is, by SHA-256's collision resistance, the true root
  of B's first m leaves. It is not a, so no tree both heads describe exists: the log rewrote its history (or shows
  different histories to different readers).

The file, ``bernstein/rewriting-proof/v1``, is text in the spirit of the C2SP tlog-proof::

    bernstein/rewriting-proof/v1
    <base64 hashes of the consistency path from m to n, one a line (none when m == n)>

    note <byte length of A's signed note>
    <A's signed note, verbatim>note <byte length of B's signed note>
    <B's signed note, verbatim>

Each note is framed by its length in bytes (a note holds an empty line before its signatures, so no line could
end it), ends with a newline, and the file ends with B's. Base64 is canonical, a length is a decimal without
leading zeros, and the path has exactly ``merkle.consistency_path_length(m, n)`` hashes; anything else is
``REWRITING_PROOF_MALFORMED``. Witness cosignatures on a note are kept verbatim and not needed: the log's own
signature is the one that binds it.

``prove_rewriting`` finds such a pair in a source (Kafka or a dump of whole topics, plus checkpoints handed beside
it); ``verify_rewriting`` checks a file with the pinned keys alone and names why a file proves nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bernstein.schemas import merkle
from bernstein.schemas.canonical import DIGEST_PREFIX, parse_tlog_origin
from bernstein.schemas.errors import MalformedInput
from bernstein.schemas.notes import Checkpoint, NoteRejected, log_verifier, open_checkpoint, parse_checkpoint, parse_note
from bernstein.substrate.keys import KeyPurpose, KeyStatus, TrustedKey, TrustedKeys
from bernstein.verifier.keyuse import KeyUse, key_fits
from bernstein.verifier.report import Problem
from bernstein.verifier.rewriting_format import MalformedRewritingProof, NothingToProve, RewritingProof, parse_rewriting_proof
from bernstein.verifier.sources import RecordSource
from bernstein.verifier.tlog import SignedHead, note_keys, partition_leaf_hashes, reproduced, signed_heads

# -- checking one ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RewritingReport:
    """What ``verify_rewriting`` found: the two tree heads, the pinned keys that signed them, the old root the path
    derives, and every reason the file does not prove a rewriting (none: it does)."""

    problems: tuple[Problem, ...]
    origin: str = ""
    old_size: int = -1
    old_root: str = ""
    old_key: str = ""
    """The pinned seal key that signed A ("" when none did)."""
    new_size: int = -1
    new_root: str = ""
    new_key: str = ""
    derived_root: str = ""
    """The root of B's first ``old_size`` leaves the path derives ("" when it does not reproduce B's root)."""

    @property
    def proved(self) -> bool:
        return not self.problems


def verify_rewriting(data: bytes, trusted: TrustedKeys) -> RewritingReport:
    """Check a proof of rewriting against the pinned keys: pure, never raises for bad bytes."""
    try:
        proof, old, new = parse_rewriting_proof(data)
    except MalformedRewritingProof as exc:
        return RewritingReport((Problem("REWRITING_PROOF_MALFORMED", str(exc)),))
    problems: list[Problem] = []
    add = problems.append
    old_signers = _signed(proof.old_note, old, "the first (smaller tree's) note", trusted, add)
    new_signers = _signed(proof.new_note, new, "the second (larger tree's) note", trusted, add)
    old_key, new_key = _one_signer(old_signers, new_signers, add)
    if old.origin != new.origin:
        add(
            Problem(
                "REWRITING_ORIGINS_DIFFER",
                f"the notes are of two logs, {old.origin[:200]!r} and {new.origin[:200]!r}: different logs may hold different trees",
                expected=old.origin[:200],
                recomputed=new.origin[:200],
            )
        )
    a, b = _digest(old.root_hash), _digest(new.root_hash)
    try:
        derived = merkle.consistency_old_root(old.size, new.size, proof.path, new.root_hash)
    except merkle.MalformedProof:  # the parser holds the path to the sizes' length: kept for a check that never raises
        derived = None
    if derived is None:
        add(
            Problem(
                "REWRITING_PROOF_INVALID",
                f"the consistency path from {old.size} to {new.size} leaves does not reproduce the root the second note "
                f"signs for {new.size} leaves, so it says nothing about that tree's first {old.size}",
                expected=b,
            )
        )
    elif derived == old.root_hash:
        same = "the two notes sign one tree head" if old.size == new.size else "the path derives the first note's root"
        add(
            Problem(
                "REWRITING_NOT_SHOWN",
                f"{same}: the tree of {old.size} leaves is a prefix of the tree of {new.size}, the heads are consistent",
                expected=a,
                recomputed=_digest(derived),
            )
        )
    return RewritingReport(
        tuple(problems),
        origin=new.origin if old.origin == new.origin else "",
        old_size=old.size,
        old_root=a,
        old_key=old_key,
        new_size=new.size,
        new_root=b,
        new_key=new_key,
        derived_root="" if derived is None else _digest(derived),
    )


def _digest(root: bytes) -> str:
    return DIGEST_PREFIX + root.hex()


def rewriting_keys(trusted: TrustedKeys) -> list[TrustedKey]:
    """The pinned keys a note of a proof of rewriting may be signed by: ``note_keys`` (never revoked, never an HMAC
    secret) pinned as seal keys explicitly. A v1 file's keys (purpose ``any``) are left out: one of them may be a
    producer's key, and two notes its holder signed prove nothing about the log."""
    return [key for key in note_keys(trusted) if key.purpose == KeyPurpose.SEAL]


def _signed(
    note: bytes, checkpoint: Checkpoint, what: str, trusted: TrustedKeys, add: Callable[[Problem], None]
) -> list[TrustedKey]:
    """The pinned seal keys that signed ``note`` under its origin; none (and a problem saying why) when none did."""
    keys = rewriting_keys(trusted)
    signers = signers_of(note, checkpoint.origin, keys)
    if signers:
        return signers
    ed25519 = [entry for entry in trusted.entries.values() if not entry.is_hmac]
    revoked = [e for e in ed25519 if key_fits(e, KeyUse.CHECKPOINT, None) and e.status == KeyStatus.REVOKED]
    unmarked = [e for e in ed25519 if e.purpose == KeyPurpose.ANY and e.status != KeyStatus.REVOKED]
    gone = signer_of(note, checkpoint.origin, revoked)
    any_key = None if gone is not None else signer_of(note, checkpoint.origin, unmarked)
    if gone is not None:
        why = f"is signed by seal key {gone.key_id}, which is revoked: its secret may be in other hands"
    elif any_key is not None:
        why = (
            f"is signed by key {any_key.key_id}, which is pinned without a purpose (a v1 trusted-keys file): it may be a "
            "producer's key, so its signature says nothing about the log; a proof of rewriting needs a key pinned as a "
            "seal key (`bernstein keys trust` writes them so)"
        )
    else:
        why = f"is not signed by a pinned seal key under its origin {checkpoint.origin[:200]!r} ({len(keys)} pinned)"
    found = gone or any_key
    add(
        Problem(
            "REWRITING_NOTE_UNSIGNED",
            f"{what} (tree of {checkpoint.size} leaves) {why}",
            expected=", ".join(sorted(k.key_id for k in keys)) or "(no seal key pinned)",
            recomputed=found.key_id if found is not None else "",
        )
    )
    return []


def _one_signer(old: list[TrustedKey], new: list[TrustedKey], add: Callable[[Problem], None]) -> tuple[str, str]:
    """The key ids the report names for A and B: one key both notes are signed by, or (and ``REWRITING_SIGNERS_DIFFER``)
    each note's own when no pinned seal key signed both; "" for a note none signed."""
    if not old or not new:
        return (old[0].key_id if old else ""), (new[0].key_id if new else "")
    common = next((key for key in old if key in new), None)
    if common is not None:
        return common.key_id, common.key_id
    olds, news = ", ".join(k.key_id for k in old), ", ".join(k.key_id for k in new)
    add(
        Problem(
            "REWRITING_SIGNERS_DIFFER",
            f"the first note is signed by pinned seal key {olds} and the second by {news}: a proof of rewriting shows that "
            "one key signed two heads that cannot both be true, and two keys may belong to two deployments whose logs share "
            "an origin (the default log name and prefix)",
            expected=olds,
            recomputed=news,
        )
    )
    return old[0].key_id, new[0].key_id


def signers_of(note: bytes, origin: str, keys: Iterable[TrustedKey]) -> list[TrustedKey]:
    """Every one of ``keys`` whose log signature under ``origin`` is on ``note`` and verifies, in the order given."""
    signers: list[TrustedKey] = []
    for key in keys:
        try:
            verifier = log_verifier(origin, key.material)
            _, opened = open_checkpoint(note, (verifier,))
        except (MalformedInput, NoteRejected):
            continue
        if opened.signed_by(verifier) is not None:
            signers.append(key)
    return signers


def signer_of(note: bytes, origin: str, keys: Iterable[TrustedKey]) -> TrustedKey | None:
    """The first of ``keys`` whose log signature under ``origin`` is on ``note`` and verifies; None when none is."""
    return next(iter(signers_of(note, origin, keys)), None)


# -- making one -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Head:
    """A signed tree head whose note a pinned seal key signed: from the checkpoints topic or handed beside it."""

    label: str
    origin: str
    size: int
    root: bytes
    note: bytes
    signers: tuple[str, ...]
    """The key ids of the pinned seal keys that signed the note (``rewriting_keys``)."""


@dataclass(frozen=True, slots=True)
class Found:
    """A proof of rewriting of one partition's log, with where its two heads came from."""

    partition: int
    proof: RewritingProof
    old_label: str
    new_label: str


def prove_rewriting(
    source: RecordSource, trusted: TrustedKeys, *, witnessed: Sequence[bytes] = (), partitions: Sequence[int] | None = None
) -> list[Found]:
    """Every partition's proof of rewriting, in partition order: B the largest signed head the journal reproduces,
    A the smallest signed head no larger than B that it does not reproduce (or, without such a pair, two signed
    heads of one size with different roots). Only heads a pinned seal key signed count (``rewriting_keys``), and
    only heads one key signed are paired; ``witnessed`` are handed checkpoint notes (each goes to the partition its
    origin names). ``NothingToProve`` when no partition has one, saying why."""
    keys = rewriting_keys(trusted)
    handed: dict[int, list[_Head]] = {}
    left_out = 0
    for i, note in enumerate(witnessed, start=1):
        head = _head(f"handed checkpoint {i}", note, keys)
        parsed = parse_tlog_origin(head.origin) if head is not None else None
        if head is None or parsed is None:
            left_out += 1
            continue
        handed.setdefault(parsed[2], []).append(head)
    wanted = sorted(set(source.partitions("journal")) | set(source.partitions("checkpoints")) | set(handed))
    if partitions is not None:
        wanted = [p for p in wanted if p in set(partitions)]
    found: list[Found] = []
    reasons: list[str] = []
    heads_seen = 0
    for partition in wanted:
        heads: list[_Head] = []
        for signed in signed_heads(source, partition):
            head = _head(f"the checkpoint at offset {signed.offset}", signed.note, keys)
            if head is None:
                left_out += 1
            else:
                heads.append(head)
        heads += handed.get(partition, [])
        heads_seen += len(heads)
        if not heads:
            continue
        hashes = partition_leaf_hashes(source, partition)
        made = None
        for origin in dict.fromkeys(head.origin for head in heads):
            of_origin = [head for head in heads if head.origin == origin]
            signers = list(dict.fromkeys(key for head in of_origin for key in head.signers))
            for signer in signers:  # one key's heads: a pair by two keys proves nothing (REWRITING_SIGNERS_DIFFER)
                by = "" if len(signers) == 1 else signer
                made = _pair(partition, [head for head in of_origin if signer in head.signers], hashes, reasons.append, by)
                if made is not None:
                    break
            if made is not None:
                found.append(made)
                break
    if found:
        return found
    unsigned = f"; {left_out} signed heads no pinned seal key signed were left out" if left_out else ""
    if left_out and any(key.purpose == KeyPurpose.ANY for key in trusted.entries.values()):
        unsigned += " (keys pinned without a purpose, from a v1 trusted-keys file, are no seal keys to a proof of rewriting)"
    if reasons:
        raise NothingToProve("no rewriting can be proved: " + "; ".join(reasons) + unsigned)
    where = source.describe() + (f", partition {', '.join(map(str, partitions))}" if partitions is not None else "")
    if not heads_seen:
        raise NothingToProve(f"the log's signed heads are consistent: {where} holds none a pinned seal key signed{unsigned}")
    raise NothingToProve(
        f"the log's signed heads are consistent: the journal reproduces all {heads_seen} signed tree heads of {where}{unsigned}"
    )


def _head(label: str, note: bytes, keys: Sequence[TrustedKey]) -> _Head | None:
    try:
        checkpoint = parse_checkpoint(parse_note(note).text)
    except MalformedInput:
        return None
    signers = tuple(key.key_id for key in signers_of(note, checkpoint.origin, keys))
    if not signers:
        return None
    return _Head(label, checkpoint.origin, checkpoint.size, checkpoint.root_hash, note, signers)


def _pair(
    partition: int, heads: list[_Head], hashes: list[bytes], because: Callable[[str], None], signer: str = ""
) -> Found | None:
    """The proof of one origin's heads of ``partition`` one key signed, or None (and, for a head the journal does not
    reproduce, why). ``signer`` names that key when other keys signed heads of the origin too."""
    signed = [SignedHead(-1, head.size, _digest(head.root), head.note) for head in heads]
    by_id = {id(s): head for s, head in zip(signed, heads, strict=True)}
    checked = [(by_id[id(s)], ok) for s, ok in reproduced(signed, hashes)]
    good = [head for head, ok in checked if ok]
    bad = [head for head, ok in checked if not ok]
    if not bad:
        return None
    largest = max(good, key=lambda head: head.size, default=None)
    if largest is not None:
        smaller = [head for head in bad if head.size <= largest.size]
        if smaller:
            old = min(smaller, key=lambda head: head.size)
            path = merkle.consistency_path(hashes[: largest.size], old.size)
            return Found(partition, RewritingProof(tuple(path), old.note, largest.note), old.label, largest.label)
    for old in sorted(bad, key=lambda head: head.size):  # two heads of one size with different roots need no leaves
        other = next((head for head in bad if head.size == old.size and head.root != old.root), None)
        if other is not None:
            return Found(partition, RewritingProof((), old.note, other.note), old.label, other.label)
    first = min(bad, key=lambda head: head.size)
    below = f"no head larger than {largest.size} leaves" if largest is not None else "no head"
    if signer:
        because(
            f"partition {partition}: {first.label}, signed by seal key {signer}, signs a tree of {first.size} leaves the "
            f"journal does not reproduce, and it reproduces {below} that key signed: heads different seal keys signed "
            "are never paired (two deployments whose logs share an origin sign different trees; a proof of rewriting "
            "shows that one key signed two histories)"
        )
        return None
    if first.size > len(hashes):
        cut = "HISTORY_CUT_BEHIND_WITNESSES" if first.label.startswith("handed") else "JOURNAL_TRUNCATED_BEFORE_CHECKPOINT"
        because(
            f"partition {partition}: {first.label} signs a tree of {first.size} leaves, but the journal holds {len(hashes)} "
            f"and reproduces {below}: the history was cut back behind it (`activity verify` names that {cut}), and "
            "without the cut leaves no consistency path shows two histories"
        )
    else:
        because(
            f"partition {partition}: {first.label} signs a tree of {first.size} leaves the journal does not reproduce, "
            f"and it reproduces {below}: the journal was changed after the heads were signed (`activity verify` names "
            "that CHECKPOINT_TREE_MISMATCH); no smaller signed head disagrees, so the log's signatures show one history"
        )
    return None
