"""Signed partition checkpoints, checked against the partition's audit chain.

The scheduler writes a ``PartitionCheckpoint`` (in a ``CheckpointRecord``
envelope, Ed25519 by its seal key) to ``<prefix>.checkpoints`` as the last
output of every step that wrote a final seal, and of every step that leaves
``checkpoint_every`` (at most ``MAX_CHECKPOINT_EVERY``) audit records
uncovered since the previous checkpoint. Each checkpoint commits to the
audit chain's length (``audit_seq``) and head (the MAC of its last record)
and to the input position after its step (``next_offset``); checkpoints
chain by ``prev_hash``. So records written after a run's final seal (a late
refusal) and the tail of the audit chain are covered by something signed:

* every checkpoint must decode, name a pinned key, verify, and follow its
  predecessor (``CHECKPOINT_UNDECODABLE``, ``CHECKPOINT_KEY_NOT_PINNED``,
  ``CHECKPOINT_SIGNATURE_INVALID``, ``CHECKPOINT_CHAIN_BROKEN``);
* the audit chain must reach each checkpoint's ``audit_seq`` with exactly its
  head, and the last record it covers must account for input offset
  ``next_offset - 1`` (``AUDIT_TRUNCATED_BEFORE_CHECKPOINT``,
  ``CHECKPOINT_AUDIT_HEAD_MISMATCH``, ``CHECKPOINT_INPUT_MISMATCH``);
* where the scheduler that wrote the audit records (``AuditRecord.v2``:
  the same release writes checkpoints) had to write a checkpoint, one must be
  there: after the run's final seal, and whenever ``MAX_CHECKPOINT_EVERY`` or
  more audit records follow the last checkpoint (``CHECKPOINT_MISSING``). The
  tail is held to the maximum, not to the last checkpoint's signed
  ``checkpoint_every``: a scheduler restarted with a larger setting after that
  checkpoint writes its next one later. Nor is the gap between two
  checkpoints held to the later one's setting: steps written before it by an
  instance with a larger setting left more records uncovered, honestly.

The walk is fed the audit records in order by ``bernstein.verifier.verify``'s audit
walk and reads the checkpoints lazily alongside, so memory stays flat. What no
checkpoint covers yet (the audit records after the last verified one) is
counted, not a problem: a later checkpoint will cover them. Deleting the tail
of all three topics at once (journal, audit and checkpoints) stays invisible
from a single copy; a checkpoint held outside Kafka (a witness's, handed with
``--witnessed``) shows it: the partition's Merkle log (``bernstein.verifier.tlog``)
holds the journal to every signed tree head, the topic's and the handed ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from bernstein.schemas import codec
from bernstein.schemas.canonical import checkpoint_genesis, checkpoint_hash, checkpoint_signing_input, macs_equal
from bernstein.schemas.tlog_policy import NONE
from bernstein.substrate.keys import TrustedKeys, verify_signature
from bernstein.substrate.text import plural
from bernstein.verifier.keyuse import KeyUse, allowed_for, key_problem
from bernstein.verifier.report import Problem
from bernstein.verifier.source_records import witnessed_checkpoints
from bernstein.verifier.sources import RecordSource, StoredRecord
from bernstein.verifier.tlog import LeafRecorder, TreeWalk, handed_claim, note_keys, partition_leaves

MAX_CHECKPOINT_EVERY: Final = 1000
"""The largest ``checkpoint_every`` a scheduler accepts, so the verifier knows the bound before the first checkpoint."""

_CHECKPOINT: Final = codec.PARTITION_CHECKPOINTS


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    offset: int
    seq: int
    audit_seq: int
    audit_head: str
    next_offset: int
    every: int
    valid: bool
    """Decoded, signed by a pinned key and verified: only valid checkpoints are matched with the audit chain."""


class CheckpointWalk:
    """The checkpoints of one partition, merged with its audit chain (see the module doc)."""

    def __init__(
        self, c: codec.Codec, source: RecordSource, partition: int, trusted: TrustedKeys, add: Callable[[Problem], None]
    ) -> None:
        self.c = c
        self.partition = partition
        self.trusted = trusted
        self.add = add
        self.present = partition in source.partitions("checkpoints")
        self._records: Iterator[StoredRecord] = (
            iter(source.records("checkpoints", partition, headers=False)) if self.present else iter(())
        )
        self._pending: _Checkpoint | None = None
        self._exhausted = False
        self.records = 0
        """Checkpoint records read."""
        self.verified = 0
        """Checkpoints that verified and agree with the audit chain."""
        self.covered = 0
        """audit_seq of the last checkpoint that verified and agrees with the audit chain."""
        self.last_seen = 0
        """audit_seq of the last checkpoint read up to here (valid or not): where the scheduler last wrote one."""
        self.key_ids: set[str] = set()
        self.tree = TreeWalk(partition, add)
        """The Merkle log claims of the valid v2 checkpoints (``check_tree`` holds them to the journal)."""
        self.log_unchecked: str | None = None
        """Why handed checkpoints or a witness policy could not be held to the journal (None: they were, or none)."""
        self.tail_too_old: str | None = None
        """Why the unwitnessed tail is older than the pinned bound allows (None: it is not, or no bound)."""
        self.quorum_missing: str | None = None
        """Why no handed checkpoint met the pinned witness policy (None: it was met, or no policy is pinned)."""
        self._source = source
        self._expected_seq = 0
        self._prev_hash: str | None = checkpoint_genesis(partition)

    # -- reading checkpoints ---------------------------------------------------------

    def _peek(self) -> _Checkpoint | None:
        if self._pending is None and not self._exhausted:
            record = next(self._records, None)
            if record is None:
                self._exhausted = True
            else:
                self._pending = self._read(record)
        return self._pending

    def _read(self, record: StoredRecord) -> _Checkpoint:
        self.records += 1
        offset = record.offset
        try:
            name, fields = codec.split_envelope(record.value or b"")
            if name != codec.CHECKPOINT_RECORD:
                raise codec.UnknownFingerprint(f"value is a {name} record, expected a checkpoint", "")
            payload, key_id, signature = fields
            checkpoint = self.c.decode(payload, expect=_CHECKPOINT).record
        except codec.DecodeError as exc:
            self.add(
                Problem(
                    "CHECKPOINT_UNDECODABLE",
                    f"checkpoint record at offset {offset} does not decode: {exc}",
                    stream="checkpoints",
                    offset=offset,
                )
            )
            self._expected_seq += 1
            self._prev_hash = None  # the next one's link cannot be checked
            return _Checkpoint(offset, -1, -1, "", -1, MAX_CHECKPOINT_EVERY, valid=False)
        seq, audit_seq = checkpoint["seq"], checkpoint["audit_seq"]
        valid = True
        pinned = self.trusted.entry(key_id)
        finding = (
            None
            if pinned is None
            else key_problem(
                pinned, KeyUse.CHECKPOINT, f"checkpoint seq {seq} at offset {offset}", checkpoint["checkpointed_at_ms"]
            )
        )
        if pinned is None:
            valid = False
            self.add(
                Problem(
                    "CHECKPOINT_KEY_NOT_PINNED",
                    f"checkpoint seq {seq} at offset {offset} is signed by key {key_id}, which is not among the pinned keys",
                    stream="checkpoints",
                    offset=offset,
                    audit_seq=audit_seq,
                    expected=", ".join(allowed_for(self.trusted, KeyUse.CHECKPOINT)) or "(none pinned)",
                    recomputed=key_id,
                )
            )
        elif finding is not None and finding.code != "KEY_OUTSIDE_VALIDITY":
            valid = False  # a producer key or an audit secret's id: never a checkpoint key
            self.add(finding.problem(stream="checkpoints", offset=offset, audit_seq=audit_seq))
        elif pinned.is_hmac or not verify_signature(pinned.material, signature, checkpoint_signing_input(payload)):
            valid = False
            self.add(
                Problem(
                    "CHECKPOINT_SIGNATURE_INVALID",
                    f"checkpoint at offset {offset}: signature does not verify against pinned key {key_id}",
                    stream="checkpoints",
                    offset=offset,
                    audit_seq=audit_seq,
                )
            )
        elif finding is not None:
            valid = False  # signed by that key, but outside its lifetime
            self.add(finding.problem(stream="checkpoints", offset=offset, audit_seq=audit_seq))
        else:
            self.key_ids.add(key_id)
        if valid:
            broken = ""
            if checkpoint["partition"] != self.partition:
                broken = f"names partition {checkpoint['partition']}, not {self.partition}"
            elif seq != self._expected_seq:
                broken = f"has seq {seq} where seq {self._expected_seq} was due (checkpoints deleted, reordered or repeated)"
            elif self._prev_hash is not None and checkpoint["prev_hash"] != self._prev_hash:
                broken = f"does not link to its predecessor (prev_hash '{checkpoint['prev_hash']}', expected '{self._prev_hash}')"
            if broken:
                valid = False
                self.add(
                    Problem(
                        "CHECKPOINT_CHAIN_BROKEN",
                        f"checkpoint seq {seq} at offset {offset} {broken}",
                        stream="checkpoints",
                        offset=offset,
                        audit_seq=audit_seq,
                        expected=self._prev_hash or "",
                        recomputed=checkpoint["prev_hash"],
                    )
                )
        if valid and pinned is not None:
            self.tree.claim(offset, checkpoint, pinned.material)
        self._expected_seq = seq + 1
        self._prev_hash = checkpoint_hash(payload)
        every = checkpoint["checkpoint_every"]
        return _Checkpoint(offset, seq, audit_seq, checkpoint["audit_head"], checkpoint["next_offset"], every, valid)

    # -- merging with the audit chain -------------------------------------------------

    def due(self) -> int | None:
        """The audit_seq of the next checkpoint to merge, without reading one: ``on_audit(seq, ...)`` does
        nothing while ``seq + 1`` is below it. None when none is left; -1 when the next is not read yet."""
        if self._pending is not None:
            return self._pending.audit_seq
        return None if self._exhausted else -1

    def on_audit(self, seq: int, mac: str, input_offset: int) -> None:
        """The audit record ``seq`` (stored MAC ``mac``) was just read: check the checkpoints that end at it."""
        while (checkpoint := self._peek()) is not None and checkpoint.audit_seq <= seq + 1:
            self._pending = None
            self.last_seen = max(self.last_seen, checkpoint.audit_seq)
            if not checkpoint.valid:
                continue
            if checkpoint.audit_seq != seq + 1:
                self._head_mismatch(checkpoint, f"the audit chain has no record seq {checkpoint.audit_seq - 1}", "")
            elif mac != checkpoint.audit_head and not macs_equal(mac, checkpoint.audit_head):
                self._head_mismatch(checkpoint, f"audit seq {seq} has MAC '{mac}'", mac)
            elif input_offset != checkpoint.next_offset - 1:
                self.add(
                    Problem(
                        "CHECKPOINT_INPUT_MISMATCH",
                        f"checkpoint seq {checkpoint.seq} at offset {checkpoint.offset} commits input position "
                        f"{checkpoint.next_offset}, but the last audit record it covers (seq {seq}) accounts for input "
                        f"offset {input_offset}",
                        stream="checkpoints",
                        offset=checkpoint.offset,
                        audit_seq=seq,
                        expected=str(checkpoint.next_offset - 1),
                        recomputed=str(input_offset),
                    )
                )
            else:
                self.verified += 1
                self.covered = checkpoint.audit_seq

    def _head_mismatch(self, checkpoint: _Checkpoint, found: str, recomputed: str) -> None:
        self.add(
            Problem(
                "CHECKPOINT_AUDIT_HEAD_MISMATCH",
                f"checkpoint seq {checkpoint.seq} at offset {checkpoint.offset} commits audit seq {checkpoint.audit_seq} "
                f"head '{checkpoint.audit_head}', but {found}",
                stream="checkpoints",
                offset=checkpoint.offset,
                audit_seq=checkpoint.audit_seq,
                expected=checkpoint.audit_head,
                recomputed=recomputed,
            )
        )

    def require_after_final_seal(self, run_id: str, seal_audit_seq: int, audit_offset: int) -> None:
        """The run's final seal (audit record ``seal_audit_seq``, written by a checkpointing scheduler) was just read.

        The scheduler wrote a checkpoint as the last output of that step, so one
        must commit to exactly ``seal_audit_seq + 1`` audit records.
        """
        problem = final_seal_checkpoint_missing(run_id, seal_audit_seq, audit_offset, self.last_seen)
        if problem is not None:
            self.add(problem)

    def finish(self, chain_length: int, tail_written_by_checkpointer: bool) -> int:
        """After the last audit record: checkpoints beyond the chain, a missing last checkpoint; returns the uncovered count.

        ``chain_length`` is the number of audit records the chain holds (the
        next seq due); ``tail_written_by_checkpointer`` whether its last record
        is an ``AuditRecord.v2`` (its scheduler wrote checkpoints).
        """
        first: _Checkpoint | None = None
        while (checkpoint := self._peek()) is not None:
            self._pending = None
            self.last_seen = max(self.last_seen, checkpoint.audit_seq)
            if checkpoint.valid and first is None:
                first = checkpoint
        if first is not None:
            missing = first.audit_seq - chain_length
            self.add(
                Problem(
                    "AUDIT_TRUNCATED_BEFORE_CHECKPOINT",
                    f"checkpoint seq {first.seq} at offset {first.offset} commits {plural(first.audit_seq, 'audit record')} "
                    f"(head '{first.audit_head}'), but the audit chain holds {chain_length}: "
                    f"{plural(missing, 'record')} of its tail deleted",
                    stream="checkpoints",
                    offset=first.offset,
                    audit_seq=first.audit_seq,
                    expected=str(first.audit_seq),
                    recomputed=str(chain_length),
                )
            )
        elif tail_written_by_checkpointer and chain_length - self.last_seen >= MAX_CHECKPOINT_EVERY:
            # The last checkpoint's own ``checkpoint_every`` says nothing about the tail: a scheduler restarted
            # after it with a larger setting legitimately writes its next checkpoint later. Only the bound every
            # scheduler keeps is known.
            self.add(
                Problem(
                    "CHECKPOINT_MISSING",
                    f"the audit chain holds {plural(chain_length - self.last_seen, 'record')} after the last checkpoint "
                    f"(audit seq {self.last_seen}); every scheduler writes one at least every {MAX_CHECKPOINT_EVERY} "
                    "(checkpoints deleted)",
                    expected=str(self.last_seen + MAX_CHECKPOINT_EVERY),
                    audit_seq=self.last_seen,
                )
            )
        return max(0, chain_length - self.covered)

    def check_tree(self, recorded: LeafRecorder | None = None) -> int | None:
        """After ``finish``: the journal partition's leaves held to every tree claim (the topic's checkpoints and
        those handed beside it); the leaf count, or None when the source does not hold the whole journal partition
        (a dump of selected runs), so no tree was recomputed."""
        source = self._source
        handed = witnessed_checkpoints(source)
        self._hand_over(handed)
        if not whole_journal(source, self.partition):
            if handed or self.trusted.witness_policy is not None:
                self.log_unchecked = (
                    "the source holds only some runs' journal records (a dump of selected runs), so the partition's "
                    "Merkle log was not recomputed and no handed checkpoint was held to it (export whole topics: "
                    "`bernstein topic export --all`)"
                )
            return None
        if recorded is not None:
            self.tree.check(recorded.leaves())
        else:
            self._check_tree_from(source)
        self._tail_age()
        return self.tree.leaves

    def _check_tree_from(self, source: RecordSource) -> None:
        self.tree.check((hashed, r.key, r.timestamp_ms) for hashed, r in partition_leaves(source, self.partition))

    def _tail_age(self) -> None:
        """With a witness policy that bounds the unwitnessed tail's age: every record older than that, at the newest
        cosignature of the largest witnessed checkpoint, must be inside it (else ``tail_too_old`` says which)."""
        limit = self.trusted.witness_max_lag_s
        witnessed = [c for c in self.tree.claims if c.witnessed_at_ms is not None]
        tail = self.tree.tail
        if limit is None or not witnessed or tail.oldest_ms is None:
            return
        at = max(witnessed, key=lambda c: c.size).witnessed_at_ms or 0
        if at - tail.oldest_ms > limit * 1000:
            self.tail_too_old = (
                f"{plural(tail.leaves, 'journal record')} of partition {self.partition} (from leaf {tail.first_index}) "
                f"follow the largest checkpoint witnesses cosigned, the oldest written {(at - tail.oldest_ms) // 1000} s "
                f"before its cosignature: the witness policy lets a record go unwitnessed {limit} s at most (submit "
                "checkpoints to the witnesses more often, `bernstein witness submit`, and hand the verifier a newer one)"
            )

    def _hand_over(self, notes: tuple[bytes, ...]) -> None:
        """The handed checkpoints of this partition's log: each log-signed one becomes a tree claim; with a witness
        policy, one the quorum cosigned must be among them (else ``quorum_missing`` says why)."""
        policy = self.trusted.policy()
        seal_keys = note_keys(self.trusted)
        met = False
        for note in notes:
            handed = handed_claim(note, self.partition, self.tree.origin, seal_keys, policy)
            if isinstance(handed, str):
                continue  # another partition's (or prefix's) log
            claim, problem = handed
            if problem is not None:
                self.add(problem)
                continue
            if claim is not None:
                self.tree.claims.append(claim)
                met = met or (policy is not None and policy.satisfied(frozenset(claim.witnesses or ())))
        if policy is not None and policy.quorum != NONE and not met:
            self.quorum_missing = (
                f"the witness policy asks for a checkpoint of partition {self.partition}'s log cosigned by "
                f"{policy.describe()}, and none of the {plural(len(notes), 'handed checkpoint')} is (pass one with "
                "--witnessed: a witness serves its latest at <prefix>/<sha256(origin)>/checkpoint)"
            )


def whole_journal(source: RecordSource, partition: int) -> bool:
    """Whether ``source`` holds every journal record of the partition: a live topic or a whole-topic dump, not a
    dump of selected runs (``topic export --run``), whose journal holds only those runs' records."""
    manifest = getattr(source, "manifest", None)
    if isinstance(manifest, dict):
        return manifest.get("runs") is None
    return True


def final_seal_checkpoint_missing(run_id: str, seal_audit_seq: int, audit_offset: int, last_seen: int) -> Problem | None:
    """CHECKPOINT_MISSING when no checkpoint commits to exactly the audit records up to a run's final seal.

    ``last_seen`` is ``CheckpointWalk.last_seen`` right after the seal's audit record was read: the
    ``audit_seq`` of the last checkpoint written up to it (the step's checkpoint commits to
    ``seal_audit_seq + 1``)."""
    if last_seen == seal_audit_seq + 1:
        return None
    return Problem(
        "CHECKPOINT_MISSING",
        f"the final seal of run {run_id!r} (audit seq {seal_audit_seq}, offset {audit_offset}) is followed by no "
        f"checkpoint at audit seq {seal_audit_seq + 1} (checkpoints deleted)",
        stream="audit",
        offset=audit_offset,
        audit_seq=seal_audit_seq,
        expected=str(seal_audit_seq + 1),
    )
