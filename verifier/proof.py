"""A proof of one activity that anyone can check offline: ``bernstein activity prove`` and ``verify-proof``.

The proof is a C2SP ``tlog-proof`` (c2sp.org/tlog-proof, file extension ``.tlog-proof``)::

    c2sp.org/tlog-proof@v1
    extra <base64 of the stage's JournalRecord bytes, as the journal stores them>
    index <the entry's leaf index in its partition's Merkle log>
    <base64 hashes of the RFC 6962 inclusion path, from the leaf's sibling up>

    <the signed checkpoint note, verbatim: the log's signature, and any witness cosignatures>

The extra data carries the entry, so the leaf (``canonical.tlog_entry_leaf`` of its run, seq and
recomputed entry hash) and every digest the stage commits to (its artifact, its evidence set and
each observation's content hash) come out of the proof itself; nothing in it is trusted before it
verifies. ``prove`` reads the journal and checkpoints partitions (Kafka or a whole dump) and picks
the newest signed tree head that covers the entry and that the journal reproduces, or, handed
checkpoints witnesses cosigned (``witness submit --out``), the largest of those that covers it and whose
cosigners meet the pinned witness policy's quorum (the largest that covers it when none does), whose
note it carries verbatim with the cosignatures. ``verify_proof`` needs only the proof and the pinned
keys (and optionally a content store, to reattach the evidence): about log2(n) hashes and two
signature checks, and one per cosignature of a witness the pinned policy names, whose quorum must
have cosigned (``PROOF_WITNESS_QUORUM_NOT_MET`` otherwise: not fully verified).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bernstein.schemas import codec, merkle
from bernstein.schemas.canonical import (
    DIGEST_PREFIX,
    journal_entry_hash,
    parse_tlog_origin,
    sha256_digest,
    submission_signing_input,
    submission_statement,
    tlog_entry_leaf,
)
from bernstein.schemas.ed25519 import verify_signature
from bernstein.schemas.errors import CanonicalizationError, MalformedInput
from bernstein.schemas.notes import parse_checkpoint, parse_note
from bernstein.schemas.tlog_policy import Policy
from bernstein.substrate.cas import BlobIntegrityError, BlobStore, CasError, CasUnavailable
from bernstein.substrate.keys import TrustedKey, TrustedKeys
from bernstein.substrate.text import plural
from bernstein.verifier.keyuse import KeyUse, key_fits
from bernstein.verifier.proof_format import (
    ActivityProof,
    MalformedProof,
    ProofUnavailable,
    WitnessedCheckpointRefused,
    parse_proof,
)
from bernstein.verifier.report import Problem
from bernstein.verifier.sources import RecordSource
from bernstein.verifier.tlog import (
    CosignatureInvalid,
    SignedHead,
    TreeClaim,
    WitnessedHead,
    handed_claim,
    note_keys,
    open_witnessed,
    partition_leaves,
    reproduced,
    signed_heads,
)

# -- making one ---------------------------------------------------------------------------------


def prove(
    source: RecordSource,
    run_id: str,
    stage_id: str,
    *,
    witnessed: Sequence[bytes] = (),
    trusted: TrustedKeys | None = None,
) -> ActivityProof:
    """The proof of ``stage_id``'s activity in ``run_id`` under the newest signed tree head that covers it; with
    ``witnessed`` (cosigned checkpoints, as ``witness submit --out`` writes them), under the largest of those that
    covers it (the largest the pinned policy's quorum cosigned, when one is: ``_witnessed_head``), each one of the
    stage's log held to ``trusted`` (its pinned seal keys and witness policy) and to the journal first
    (``WitnessedCheckpointRefused`` otherwise: never a fallback to another head)."""
    c = codec.default_codec()
    for partition in source.partitions("journal"):
        leaves: list[bytes] = []
        index: int | None = None
        record: bytes | None = None
        log: tuple[str, int] | None = None
        for hashed, stored in partition_leaves(source, partition):
            if index is None and stored.key == run_id.encode():
                entry = _entry_of_record(c, stored.value or b"")
                if entry is not None and str(entry["stage_id"]) == stage_id:
                    index, record = len(leaves), stored.value
                    log = (str(entry["input"]["topic"]), int(entry["input"]["partition"]))
            leaves.append(hashed)
        if index is None or record is None or log is None:
            continue
        heads = signed_heads(source, partition)
        if witnessed:
            size, note = _witnessed_head(heads, partition, log, leaves, index, witnessed, trusted)
        else:
            size, note = _covering_head(heads, partition, leaves, index)
        return ActivityProof(record, index, tuple(merkle.inclusion_proof(leaves[:size], index)), note)
    raise ProofUnavailable(
        f"run {run_id!r} has no journalled activity with stage id {stage_id!r} in {source.describe()}", not_found=True
    )


def _entry_of_record(c: codec.Codec, value: bytes) -> dict[str, Any] | None:
    """The activity entry a journal record holds; None for a seal or bytes that are no entry."""
    try:
        name, fields = codec.split_envelope(value)
        if name != codec.JOURNAL_RECORD:
            return None
        return dict(c.decode(fields[0], expect=codec.JOURNAL_ENTRIES).record)
    except codec.DecodeError:
        return None


_NEXT_HEAD = "the scheduler signs the next one after a final seal or --checkpoint-every audit records"


def _covering_head(heads: list[SignedHead], partition: int, leaves: list[bytes], index: int) -> tuple[int, bytes]:
    """(tree size, signed note) of the newest checkpoint whose tree holds leaf ``index`` and whose root the journal reproduces."""
    covering = [(head, ok) for head, ok in reproduced(heads, leaves) if index < head.size]
    good = [head for head, ok in covering if ok]
    if not good:
        refused = len(covering)
        why = (
            f"{refused} signed tree heads that cover it disagree with the journal (verify the partition)"
            if refused
            else f"no signed checkpoint covers it yet: {_NEXT_HEAD}"
        )
        raise ProofUnavailable(f"leaf {index} of journal partition {partition}: {why}")
    best = max(good, key=lambda head: head.size)
    return best.size, best.note


def _witnessed_head(
    heads: list[SignedHead],
    partition: int,
    log: tuple[str, int],
    leaves: list[bytes],
    index: int,
    witnessed: Sequence[bytes],
    trusted: TrustedKeys | None,
) -> tuple[int, bytes]:
    """(tree size, note as handed) of the handed checkpoint of the stage's log the proof rests on: with a witness policy
    pinned, the largest that covers leaf ``index`` and whose cosigners meet its quorum, or, when none does, the largest
    that covers it (``activity verify-proof`` then says the quorum is not met); without one, the largest that covers it.

    The stage's log is ``log`` (the entry's input topic and partition: the handed checkpoint's origin names them, else
    it is another log, passed over) under the origin of the first of the partition's checkpoints whose note a pinned
    seal key signed (as ``activity verify``'s tree walk takes it; with none, any). Every handed one of that log must be
    signed by a pinned seal key under its origin, its pinned witnesses' cosignatures verifying (``handed_claim``, as
    ``activity verify --witnessed`` holds it), and reproduced by the journal: the same size holds the same root."""
    if trusted is None:
        raise ValueError("a proof under handed checkpoints needs the pinned keys to check them with")
    seal_keys, policy = note_keys(trusted), trusted.policy()
    seen = _log_origin(heads, log, seal_keys)
    good: list[tuple[TreeClaim, bytes]] = []
    for number, note in enumerate(witnessed, 1):
        if _of_another_log(note, log):
            continue  # another partition's, another topic's (another prefix's) log: not the stage's
        handed = handed_claim(note, partition, seen, seal_keys, policy)
        if isinstance(handed, str):
            continue
        claim, problem = handed
        if problem is not None:
            raise WitnessedCheckpointRefused(problem.code, f"handed checkpoint {number}: {problem.message}", position=number - 1)
        if claim is None:
            continue
        _reproduce(claim, number, partition, leaves)
        good.append((claim, note))
    covering = [(claim, note) for claim, note in good if index < claim.size]
    if not covering:
        largest = max((claim.size for claim, _ in good), default=None)
        what = (
            f"none of the {plural(len(witnessed), 'handed checkpoint')} is of its log"
            if largest is None
            else f"the largest handed checkpoint of its log holds {plural(largest, 'leaf', 'leaves')}"
        )
        topic = "" if any(index < head.size for head in heads) else f" (no signed checkpoint covers it yet either: {_NEXT_HEAD})"
        raise ProofUnavailable(
            f"leaf {index} of journal partition {partition}: {what}; submit a newer checkpoint to the witnesses "
            f"(`bernstein witness submit`) first{topic}, and hand its file to --witnessed"
        )
    # ``witnessed_at_ms`` is set exactly when the pinned policy's quorum cosigned the claim (``open_witnessed``)
    quorum = [(claim, note) for claim, note in covering if claim.witnessed_at_ms is not None]
    claim, note = max(quorum or covering, key=lambda item: item[0].size)
    return claim.size, note


def _log_origin(heads: Sequence[SignedHead], log: tuple[str, int], seal_keys: Sequence[TrustedKey]) -> str | None:
    """The origin of the first checkpoint of the partition whose note names the stage's log (its input topic and
    partition) and a pinned seal key signed under that origin; None when none is (a forged record decides nothing)."""
    for head in heads:
        if not _names_log(head.note.split(b"\n", 1)[0], log):
            continue
        try:
            if open_witnessed(head.note, seal_keys, None) is not None:
                return head.note.split(b"\n", 1)[0].decode("utf-8")
        except (MalformedInput, UnicodeDecodeError):
            continue
    return None


def _names_log(origin: bytes, log: tuple[str, int]) -> bool:
    """``origin`` is ``<log name>/<input topic>/<partition>/e<epoch>`` of the stage's topic and partition."""
    parsed = parse_tlog_origin(origin.decode("utf-8", "replace"))
    return parsed is not None and parsed[1:3] == log


def _of_another_log(note: bytes, log: tuple[str, int]) -> bool:
    """A handed checkpoint note whose origin is a log's, not the stage's; a note that does not parse is not (it is
    ``handed_claim``'s to refuse)."""
    try:
        origin = parse_checkpoint(parse_note(note).text).origin
    except MalformedInput:
        return False
    return parse_tlog_origin(origin) is not None and not _names_log(origin.encode(), log)


def _reproduce(claim: TreeClaim, number: int, partition: int, leaves: list[bytes]) -> None:
    """``WitnessedCheckpointRefused`` unless the journal's first ``claim.size`` leaves hash to the handed root."""
    label = f"handed checkpoint {number}, {claim.label}"
    if claim.size > len(leaves):
        raise WitnessedCheckpointRefused(
            "HISTORY_CUT_BEHIND_WITNESSES",
            f"{label}, commits a tree of {claim.size} leaves, but journal partition {partition} holds {len(leaves)}: "
            "its tail was deleted after that checkpoint was signed",
            position=number - 1,
        )
    root = DIGEST_PREFIX + merkle.root(leaves[: claim.size]).hex()
    if root != claim.root:
        raise WitnessedCheckpointRefused(
            "CHECKPOINT_TREE_MISMATCH",
            f"{label}, signs the root {claim.root} of {claim.size} leaves, but the journal partition {partition}'s "
            f"first {claim.size} hash to {root}: a journal record was edited, inserted, deleted or moved",
            position=number - 1,
        )


# -- checking one ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProofReport:
    """What ``verify_proof`` found: the entry's facts, the tree head it is proved against, and every problem."""

    problems: tuple[Problem, ...]
    run_id: str = ""
    stage_id: str = ""
    kind: str = ""
    producer: str = ""
    producer_key_id: str = ""
    entry_hash: str = ""
    artifact_hash: str = ""
    evidence_set_hash: str = ""
    observations: tuple[tuple[str, str, str, int], ...] = ()
    """(kind, ref, content_hash, size) of each observation the entry commits to."""
    origin: str = ""
    index: int = -1
    tree_size: int = 0
    root: str = ""
    witness_policy: str = ""
    """The pinned witness policy's quorum in words (``2 of (W1, W2)``); empty when no policy is pinned."""
    witnesses: tuple[str, ...] = ()
    """The policy's witnesses (their policy names) whose cosignature/v1 on the note verified over the checkpoint."""
    unknown_signatures: tuple[str, ...] = ()
    """Key names of the note's other signature lines (by no pinned seal key nor policy witness): not checked."""
    evidence_checked: int = 0
    evidence: dict[str, str] = field(default_factory=dict)
    """content hash -> ``verified`` | ``missing`` | ``changed`` | ``unavailable``, with a content store."""


def verify_proof(text: bytes, trusted: TrustedKeys, cas: BlobStore | None = None) -> ProofReport:
    """Check a proof against pinned keys (and reattach its evidence from ``cas``): never raises for bad bytes."""
    try:
        proof = parse_proof(text)
    except MalformedProof as exc:
        return ProofReport((Problem("PROOF_MALFORMED", str(exc)),))
    problems: list[Problem] = []
    add = problems.append
    entry, stored_hash, payload = _entry_of(proof.record, add)
    policy = trusted.policy()
    head = _head_of(proof.note, trusted, policy, add)
    if entry is None:
        return ProofReport(tuple(problems))
    entry_hash = journal_entry_hash(payload)
    if entry_hash != stored_hash:
        add(
            Problem(
                "PROOF_ENTRY_HASH_MISMATCH",
                "the journal record's stored entry_hash is not its payload's",
                expected=stored_hash,
                recomputed=entry_hash,
                seq=entry["seq"],
            )
        )
    producer_key = entry.get("producer_key_id", "")
    _check_producer(entry, trusted, add)
    facts: dict[str, Any] = {
        "run_id": entry["run_id"],
        "stage_id": entry["stage_id"],
        "kind": entry["kind"],
        "producer": entry["producer_id"],
        "producer_key_id": producer_key,
        "entry_hash": entry_hash,
        "artifact_hash": entry["artifact_hash"],
        "evidence_set_hash": entry["evidence_set_hash"],
        "observations": tuple((o["kind"], o["ref"], o["content_hash"], o.get("size", -1)) for o in entry["observations"]),
        "index": proof.index,
        "witness_policy": policy.describe() if policy is not None else "",
    }
    if head is not None:
        checkpoint = head.checkpoint
        facts.update(
            origin=checkpoint.origin,
            tree_size=checkpoint.size,
            root=DIGEST_PREFIX + checkpoint.root_hash.hex(),
            witnesses=head.cosigned,
            unknown_signatures=head.unknown,
        )
        _check_origin(checkpoint.origin, entry, add)
        try:
            leaf = merkle.leaf_hash(tlog_entry_leaf(entry["run_id"], entry["seq"], entry_hash))
            included = proof.index < checkpoint.size and merkle.verify_inclusion(
                leaf, proof.index, checkpoint.size, proof.path, checkpoint.root_hash
            )
        except CanonicalizationError as exc:  # a seq no step writes (above 2**53 - 1): no leaf of the log
            included = True  # nothing more to say about the path
            add(Problem("PROOF_ENTRY_UNDECODABLE", f"the proof's entry names no leaf the log could hold: {exc}"))
        except merkle.MalformedProof as exc:
            included = False
            add(
                Problem(
                    "PROOF_INCLUSION_FAILED",
                    f"the inclusion path is malformed for leaf {proof.index} of {checkpoint.size}: {exc}",
                    leaf_index=proof.index,
                )
            )
        else:
            if not included:
                add(
                    Problem(
                        "PROOF_INCLUSION_FAILED",
                        f"leaf {proof.index} (run {entry['run_id']!r}, seq {entry['seq']}, {entry_hash}) and its path do not "
                        f"hash to the root the checkpoint signs for {checkpoint.size} leaves",
                        expected=DIGEST_PREFIX + checkpoint.root_hash.hex(),
                        leaf_index=proof.index,
                        seq=entry["seq"],
                    )
                )
    evidence: dict[str, str] = {}
    if cas is not None:
        for _kind, _ref, digest, _size in facts["observations"]:
            evidence[digest] = _reattach(cas, digest, add)
    return ProofReport(tuple(problems), evidence_checked=len(evidence), evidence=evidence, **facts)


def _entry_of(record: bytes, add: Callable[[Problem], None]) -> tuple[dict[str, Any] | None, str, bytes]:
    """The journal entry, its stored entry hash and its payload's bytes (the envelope split once)."""
    try:
        name, fields = codec.split_envelope(record)
        if name != codec.JOURNAL_RECORD:
            raise codec.UnknownFingerprint(f"the extra data is a {name} record, expected a journal entry", "")
        entry = codec.default_codec().decode(fields[0], expect=codec.JOURNAL_ENTRIES).record
    except codec.DecodeError as exc:
        add(Problem("PROOF_ENTRY_UNDECODABLE", f"the proof's journal record does not decode as an activity entry: {exc}"))
        return None, "", b""
    return dict(entry), str(fields[1]), fields[0]


def _head_of(note: bytes, trusted: TrustedKeys, policy: Policy | None, add: Callable[[Problem], None]) -> WitnessedHead | None:
    """The checkpoint a pinned seal key signed under its origin, with the pinned policy's witnesses that cosigned it
    (``open_witnessed``: the note parsed once); None (and a problem) when no pinned seal key signed it."""
    seal_keys = note_keys(trusted)
    try:
        head = open_witnessed(note, seal_keys, policy)
    except MalformedInput as exc:
        add(Problem("PROOF_CHECKPOINT_UNDECODABLE", f"the proof's checkpoint is no signed tlog-checkpoint note: {exc}"))
        return None
    except CosignatureInvalid as exc:
        key = f"{exc.name}+{exc.key_id:08x}"
        add(
            Problem(
                "PROOF_COSIGNATURE_INVALID",
                f"the cosignature of pinned witness {exc.witness} ({key}) does not verify over the checkpoint the seal "
                "key signed: the cosignature, or the note under it, was changed",
                recomputed=key,
            )
        )
        return exc.head
    if head is None:
        origin = note.split(b"\n", 1)[0].decode("utf-8", "replace")
        add(
            Problem(
                "PROOF_CHECKPOINT_NOT_SIGNED",
                f"no pinned seal key signed the checkpoint under its origin {origin[:200]!r} ({len(seal_keys)} pinned)",
                expected=", ".join(sorted(k.key_id for k in seal_keys)) or "(no seal key pinned)",
            )
        )
        return None
    if policy is not None and not policy.satisfied(frozenset(head.cosigned)):
        cosigned = ", ".join(head.cosigned) or "no pinned witness"
        add(
            Problem(
                "PROOF_WITNESS_QUORUM_NOT_MET",
                f"the pinned witness policy asks for a checkpoint cosigned by {policy.describe()}, and this one is "
                f"cosigned by {cosigned}: make the proof with `activity prove --witnessed` against a checkpoint its "
                "quorum cosigned (`bernstein witness submit`)",
                expected=policy.describe(),
                recomputed=", ".join(head.cosigned),
            )
        )
    return head


def _check_origin(origin: str, entry: dict[str, Any], add: Callable[[Problem], None]) -> None:
    where = entry["input"]
    tail = f"/{where['topic']}/{where['partition']}/e"
    parsed = parse_tlog_origin(origin)
    if parsed is None or parsed[1:3] != (where["topic"], where["partition"]):
        add(
            Problem(
                "PROOF_ORIGIN_MISMATCH",
                f"the checkpoint's origin {origin[:200]!r} is not the log of the entry's partition ('<log name>{tail}<epoch>')",
                expected=f"<log name>{tail}<epoch>",
                recomputed=origin[:200],
            )
        )


def _check_producer(entry: dict[str, Any], trusted: TrustedKeys, add: Callable[[Problem], None]) -> None:
    key_id = entry.get("producer_key_id")
    if not key_id:
        return  # JournalEntry v1/v2: written before producers signed their stages
    pinned = trusted.entry(key_id)
    if pinned is None or not key_fits(pinned, KeyUse.PRODUCER, entry["occurred_at_ms"], producer=entry["producer_id"]):
        add(
            Problem(
                "PROOF_PRODUCER_KEY_NOT_PINNED",
                f"the stage is signed by key {key_id}, not a pinned key of producer {entry['producer_id']!r}",
                recomputed=key_id,
            )
        )
        return
    try:
        signed = submission_signing_input(submission_statement(entry, key_id))
    except CanonicalizationError:
        signed = b""
    if not signed or not verify_signature(pinned.material, entry["producer_signature"], signed):
        add(
            Problem(
                "PROOF_PRODUCER_SIGNATURE_INVALID",
                f"the producer's signature on the stage does not verify with pinned key {key_id}",
                recomputed=key_id,
            )
        )


def _reattach(cas: BlobStore, digest: str, add: Callable[[Problem], None]) -> str:
    try:
        data = cas.get(digest)
    except CasUnavailable as exc:
        add(Problem("PROOF_EVIDENCE_UNAVAILABLE", f"the content store did not answer for {digest}: {exc}", expected=digest))
        return "unavailable"
    except BlobIntegrityError as exc:
        add(
            Problem("PROOF_EVIDENCE_CHANGED", f"evidence blob {digest} holds other bytes", expected=digest, recomputed=exc.actual)
        )
        return "changed"
    except MalformedInput:
        add(
            Problem(
                "PROOF_EVIDENCE_MISSING",
                f"the entry names evidence {digest[:80]!r}, which is no sha256 digest",
                expected=digest[:80],
            )
        )
        return "missing"
    except CasError:
        add(Problem("PROOF_EVIDENCE_MISSING", f"evidence blob {digest} is not in the content store", expected=digest))
        return "missing"
    recomputed = sha256_digest(data)
    if recomputed != digest:
        add(
            Problem("PROOF_EVIDENCE_CHANGED", f"evidence blob {digest} holds other bytes", expected=digest, recomputed=recomputed)
        )
        return "changed"
    return "verified"
