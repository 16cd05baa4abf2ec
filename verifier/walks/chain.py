"""Steps 1-2: one run's journal walked in offset order: hash chain, seals and producer signatures.

Each entry and seal the walk meets is handed to the run's audit walk (``bernstein.verifier.walks.audit``) to be
joined with the audit chain as it goes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    journal_genesis,
    lineage_signing_input,
    run_close_statement,
    seal_signing_input,
    sha256_digest,
    submission_signing_input,
)
from bernstein.schemas.errors import CanonicalizationError
from bernstein.schemas.records import ENTRY_ACTIVITY_RESULT, ENTRY_COMPUTER_USE_ACTION
from bernstein.substrate.keys import TrustedKey, TrustedKeys, verify_signature
from bernstein.verifier.facts import J_ENTRY, J_ENTRY_UNDECODABLE, J_SEAL, P_ACTION, P_LEGACY, P_SIGNED, RAISE, Facts
from bernstein.verifier.keyuse import KeyLedger, KeysInForce, KeyUse, allowed_for, key_problem
from bernstein.verifier.report import ChainVerdict, Problem, ProducerKeyUse, ProducerVerdict, SealVerdict
from bernstein.verifier.walks.audit import Findings, _AuditWalk
from bernstein.verifier.walks.partition import RESULT

_SEAL = codec.RUN_SEALS
_SIGNED_ENTRY_TYPES = frozenset({ENTRY_ACTIVITY_RESULT, ENTRY_COMPUTER_USE_ACTION})


def producer_keys(ledger: KeyLedger) -> tuple[ProducerKeyUse, ...]:
    return tuple(ProducerKeyUse(key_id, name, count) for (key_id, name), count in sorted(ledger.producer.items()))


class _ChainWalk:
    def __init__(
        self, c: codec.Codec, run_id: str, partition: int, trusted: TrustedKeys, audit: _AuditWalk, ledger: KeyLedger
    ) -> None:
        self.c = c
        self.ledger = ledger
        self.producers = Findings()
        self.signed = 0
        self.legacy = 0
        self.run_id = run_id
        self.partition = partition
        self.trusted = trusted
        self.producer_keys = KeysInForce(trusted, KeyUse.PRODUCER)
        self.audit = audit
        walks = audit.part.walks
        self._plain = (
            None
            if walks is None
            else walks.ChainPlain(
                run_id, self.producer_keys.windows(), RESULT, ENTRY_ACTIVITY_RESULT, sorted(_SIGNED_ENTRY_TYPES)
            )
        )
        self.expected_seq = 0
        self.head = journal_genesis(run_id)
        # When the previous entry's stored hash does not recompute, the break is
        # already reported; its successor (and a seal) may name either the stored
        # or the recomputed hash, depending on which of the two was edited. Either
        # link continues the chain, so one edited entry is one chain problem.
        self.alt_head: str | None = None
        self.results = 0
        self.records = 0
        self.chain = Findings()
        self.seals = Findings()
        self.seal_count = 0
        self.final_seal_offset: int | None = None
        self.covered = 0
        self.seal_keys: set[str] = set()
        self.final_claimed = False
        """A seal record that says it is final (or cannot say: undecodable), valid or not."""
        self.closed_by = ("", "")
        """(producer, key id) of the signed RunClose the final seal carries."""

    def feed_many(
        self,
        facts: Facts,
        offsets: list[int],
        values: list[bytes | None],
        timestamps: list[int],
        signed: list[tuple[Any, ...]] | None = None,
    ) -> None:
        """Walk a batch of this run's journal records (offsets, values and Kafka timestamps, in offset order);
        ``signed``: their producer facts when already computed (``_signed_ahead``)."""
        journal = facts.journal_facts(values)
        if signed is None:
            signed = facts.producer_facts(values, self._public_for)
        plain = self._plain
        if plain is None:
            for record in zip(offsets, values, timestamps, journal, signed, strict=True):
                self._record(*record)
            return
        if not len(offsets) == len(values) == len(timestamps) == len(journal) == len(signed):
            raise ValueError("feed_many: the record lists differ in length")
        at, end = 0, len(offsets)
        while at < end:
            # the plain entries natively (what ``_record`` concludes for them), the next one here
            at = plain.advance(self, timestamps, journal, signed, at)
            if at < end:
                self._record(offsets[at], values[at], timestamps[at], journal[at], signed[at])
                at += 1

    def _record(self, offset: int, value: bytes | None, timestamp: int, fact: tuple[Any, ...], producer: tuple[Any, ...]) -> None:
        """One journal record of the run: an entry, a seal, or one that does not decode."""
        self.records += 1
        kind = fact[0]
        if kind == J_ENTRY:
            self._entry(offset, fact)
            if fact[6] in _SIGNED_ENTRY_TYPES:
                self._producer_entry(offset, value, timestamp, producer)
        elif kind == J_SEAL:
            self._seal(offset, value, fact)
        elif kind == J_ENTRY_UNDECODABLE:
            _, stored, recomputed, message = fact
            self.chain.add(
                Problem(
                    "ENTRY_UNDECODABLE",
                    f"entry at offset {offset}: payload does not decode ({message})",
                    stream="journal",
                    offset=offset,
                    expected=stored,
                    recomputed=recomputed,
                )
            )
            self._advance(self.expected_seq, stored)
        elif kind == RAISE:
            raise fact[1]
        else:
            self.chain.add(
                Problem(
                    "RECORD_UNDECODABLE",
                    f"journal record at offset {offset} does not decode: {fact[1]}",
                    stream="journal",
                    offset=offset,
                )
            )

    def _entry(self, offset: int, fact: tuple[Any, ...]) -> None:
        _, stored, recomputed, run_id, seq, prev_hash, entry_type = fact
        if (
            recomputed == stored
            and seq == self.expected_seq
            and run_id == self.run_id
            and self.final_seal_offset is None
            and (prev_hash == self.head or prev_hash == self.alt_head)
        ):
            # The plain entry (this run's, intact, next in its chain): what the checks below conclude.
            if entry_type == ENTRY_ACTIVITY_RESULT:
                self.results += 1
            self.audit.expect_result(seq, stored, offset)
            self.expected_seq = seq + 1
            self.head = stored
            self.alt_head = None
            return
        if self.final_seal_offset is not None:
            self.seals.add(
                Problem(
                    "ENTRY_AFTER_FINAL_SEAL",
                    f"entry seq {seq} at offset {offset} follows the run's final seal (offset {self.final_seal_offset})",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                )
            )
        if run_id != self.run_id:
            self.chain.add(
                Problem(
                    "ENTRY_WRONG_RUN",
                    f"entry at offset {offset} is keyed {self.run_id!r} but belongs to run {run_id!r}",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                )
            )
        elif recomputed != stored:
            self.chain.add(
                Problem(
                    "ENTRY_HASH_MISMATCH",
                    f"seq {seq} at offset {offset}: entry hash mismatch (stored '{stored}', recomputed '{recomputed}')",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                    expected=stored,
                    recomputed=recomputed,
                )
            )
        elif seq != self.expected_seq or prev_hash not in self._heads():
            self.chain.add(self._link_problem(offset, seq, prev_hash, stored))
        if entry_type == ENTRY_ACTIVITY_RESULT:
            self.results += 1
        self.audit.expect_result(seq, stored, offset, recomputed=recomputed)
        if seq + 1 >= self.expected_seq:
            self._advance(seq + 1, stored, alt=recomputed if recomputed != stored else None)
        # else: an entry from further back (moved or replayed) is named once above;
        # the chain continues from the furthest entry, so its successors are not
        # reported as missing all over again.

    def _heads(self) -> tuple[str, ...]:
        return (self.head,) if self.alt_head is None else (self.head, self.alt_head)

    # -- producer signatures ------------------------------------------------------

    def _public_for(self, key_id: str) -> bytes | None:
        """The pinned Ed25519 key a producer fact verifies under (whether it may sign that is decided here)."""
        pinned = self.trusted.entry(key_id)
        return None if pinned is None or pinned.is_hmac else pinned.material

    def _producer_entry(self, offset: int, value: bytes | None, timestamp: int, fact: tuple[Any, ...]) -> None:
        """A JournalEntry.v3's producer signature (``bernstein.verifier.facts`` checked it under the pinned key), with
        the key's purpose, owner and lifetime; older entries are counted; a computer-use entry's lineage key."""
        kind = fact[0]
        if kind == P_LEGACY:
            self.legacy += 1
        elif kind == P_ACTION:
            try:
                payload = codec.split_envelope(value or b"")[1][0]
            except (codec.DecodeError, IndexError):
                return  # the chain walk names it
            self._lineage_key(offset, payload, timestamp)
        elif kind == P_SIGNED:
            _, seq, key_id, producer, verified = fact
            if verified is True and self.producer_keys.fits(key_id, timestamp, producer):
                # what ``_producer_signature`` concludes, without building its messages
                self.signed += 1
                self.ledger.signed_by_producer(key_id, producer)
                return
            what = f"journal entry seq {seq} at offset {offset}"
            self._producer_signature(what, key_id, producer, lambda _pinned: verified is True, timestamp, offset, seq)
        elif kind == RAISE:
            raise fact[1]

    def _lineage_key(self, offset: int, payload: bytes, timestamp: int) -> None:
        """A computer-use action's lineage signature is its producer's: the key must be a pinned producer key,
        registered to the entry's producer, in force at the record's timestamp. Whether the signature itself
        verifies (and an unpinned key) is the browser replay's finding, on the session's stage."""
        try:
            action = self.c.decode(payload, expect=codec.COMPUTER_USE_ENTRIES).record
        except codec.DecodeError:
            return
        key_id = action["lineage_key_id"]
        pinned = self.trusted.entry(key_id)
        if pinned is None:
            return
        what = f"the lineage entry of action {action['action_index']} (journal seq {action['seq']} at offset {offset})"
        finding = key_problem(pinned, KeyUse.PRODUCER, what, timestamp, producer=action["producer_id"])
        if finding is not None:
            self.producers.add(finding.problem(stream="journal", offset=offset, seq=action["seq"]))
        elif verify_signature(pinned.material, action["lineage_signature"], lineage_signing_input(action["lineage_entry"])):
            self.signed += 1
            self.ledger.signed_by_producer(key_id, action["producer_id"])

    def _closed_by(self, seal: dict[str, Any], offset: int) -> None:
        """The producer signature of the RunClose.v2 that closed the run (a final seal's ``closed_by``)."""
        closed = seal.get("closed_by")
        if closed is None:
            self.legacy += 1  # closed by a RunClose.v1: it predates producer signatures
            return
        self.closed_by = (closed["producer_id"], closed["key_id"])
        what = f"the run close {closed['submission_id']!r} in the final seal at offset {offset}"
        try:
            signed: bytes | None = submission_signing_input(
                run_close_statement(
                    closed["submission_id"], seal["run_id"], closed["producer_id"], closed["occurred_at_ms"], closed["key_id"]
                )
            )
        except CanonicalizationError:
            signed = None

        def verifies(pinned: TrustedKey) -> bool:
            return signed is not None and verify_signature(pinned.material, closed["signature"], signed)

        self._producer_signature(
            what, closed["key_id"], closed["producer_id"], verifies, seal["sealed_at_ms"], offset, seal["entry_count"]
        )

    def _producer_signature(
        self,
        what: str,
        key_id: str,
        producer: str,
        verifies: Callable[[TrustedKey], bool],
        timestamp: int,
        offset: int,
        seq: int,
    ) -> None:
        """One producer signature: pinned as a producer key, registered to ``producer``, in force at ``timestamp``,
        and ``verifies`` under that pinned key."""
        pinned = self.trusted.entry(key_id)
        if pinned is None:
            allowed = allowed_for(self.trusted, KeyUse.PRODUCER)
            self.producers.add(
                Problem(
                    "PRODUCER_KEY_NOT_PINNED",
                    f"{what} is signed by producer key {key_id}, which is not among the pinned keys (--trusted-keys)",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                    expected=", ".join(allowed) or "(none pinned)",
                    recomputed=key_id,
                )
            )
            return
        finding = key_problem(pinned, KeyUse.PRODUCER, what, timestamp, producer=producer)
        if finding is not None:
            self.producers.add(finding.problem(stream="journal", offset=offset, seq=seq))
            return
        if pinned.is_hmac or not verifies(pinned):
            self.producers.add(
                Problem(
                    "PRODUCER_SIGNATURE_INVALID",
                    f"{what}: the producer signature does not verify against pinned key {key_id} ({producer!r}): "
                    "the signed fields were changed after the producer signed them",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                )
            )
            return
        self.signed += 1
        self.ledger.signed_by_producer(key_id, producer)

    def producer_verdict(self) -> ProducerVerdict:
        return ProducerVerdict(
            signed=self.signed,
            legacy=self.legacy,
            keys=producer_keys(self.ledger),
            problem=self.producers.first,
            further_problems=self.producers.further,
        )

    def _link_problem(self, offset: int, seq: int, prev: str, stored: str) -> Problem:
        if stored == self.head:
            what = f"seq {seq} at offset {offset} repeats the previous entry (duplicate record)"
            code = "ENTRY_DUPLICATED"
        elif seq < self.expected_seq:
            what = f"seq {seq} at offset {offset} comes after seq {self.expected_seq - 1} (records reordered or duplicated)"
            code = "ENTRY_OUT_OF_ORDER"
        elif seq > self.expected_seq:
            missing = f"seq {self.expected_seq}" if seq == self.expected_seq + 1 else f"seqs {self.expected_seq}..{seq - 1}"
            what = f"seq {seq} at offset {offset} follows seq {self.expected_seq - 1}: {missing} missing (deleted or moved)"
            code = "ENTRY_MISSING"
        else:
            what = f"seq {seq} at offset {offset}: prev_hash does not name the previous entry (stored '{prev}', expected '{self.head}')"
            code = "CHAIN_LINK_BROKEN"
        return Problem(code, what, stream="journal", offset=offset, seq=seq, expected=self.head, recomputed=prev)

    def _advance(self, next_seq: int, head: str, alt: str | None = None) -> None:
        self.expected_seq = next_seq
        self.head = head
        self.alt_head = alt

    def _seal(self, offset: int, value: bytes | None, fact: tuple[Any, ...]) -> None:
        _, payload, key_id, signature = fact
        self.seal_count += 1
        try:
            seal = self.c.decode(payload, expect=_SEAL).record
        except codec.DecodeError as exc:
            self.final_claimed = True  # it may have been the final one
            self.seals.add(
                Problem("SEAL_UNDECODABLE", f"seal at offset {offset} does not decode: {exc}", stream="journal", offset=offset)
            )
            return
        if seal["final"]:
            self.final_claimed = True
        self.audit.expect_seal(seal, sha256_digest(value or b""), offset)
        pinned = self.trusted.entry(key_id)
        if pinned is None:
            self.seals.add(
                Problem(
                    "SEAL_KEY_NOT_PINNED",
                    f"seal at offset {offset} is signed by key {key_id}, which is not among the pinned keys (--trusted-keys)",
                    stream="journal",
                    offset=offset,
                    expected=", ".join(allowed_for(self.trusted, KeyUse.SEAL)) or "(none pinned)",
                    recomputed=key_id,
                )
            )
            return
        # the seal's own signed timestamp (its input's), never a key found in the data
        finding = key_problem(pinned, KeyUse.SEAL, f"seal at offset {offset}", seal["sealed_at_ms"])
        if finding is not None and finding.code != "KEY_OUTSIDE_VALIDITY":
            self.seals.add(finding.problem(stream="journal", offset=offset))
            return
        if pinned.is_hmac or not verify_signature(pinned.material, signature, seal_signing_input(payload)):
            self.seals.add(
                Problem(
                    "SEAL_SIGNATURE_INVALID",
                    f"seal at offset {offset}: signature does not verify against pinned key {key_id}",
                    stream="journal",
                    offset=offset,
                )
            )
            return
        if finding is not None:  # signed by that key, but outside its lifetime
            self.seals.add(finding.problem(stream="journal", offset=offset))
            return
        self.seal_keys.add(key_id)
        count = seal["entry_count"]
        if seal["run_id"] != self.run_id:
            self.seals.add(
                Problem(
                    "SEAL_WRONG_RUN", f"seal at offset {offset} seals run {seal['run_id']!r}", stream="journal", offset=offset
                )
            )
        elif count != self.expected_seq or seal["head_hash"] not in self._heads():
            if count > self.expected_seq:
                message = (
                    f"seal at offset {offset} covers {count} entries but the journal holds {self.expected_seq} before it "
                    f"(entries deleted or truncated after seq {self.expected_seq - 1})"
                )
            elif count < self.expected_seq:
                message = f"seal at offset {offset} covers {count} entries but the journal holds {self.expected_seq} before it (entries inserted)"
            else:
                message = f"seal at offset {offset}: head mismatch (sealed '{seal['head_hash']}', journal '{self.head}')"
            self.seals.add(
                Problem(
                    "SEAL_MISMATCH",
                    message,
                    stream="journal",
                    offset=offset,
                    seq=count,
                    expected=seal["head_hash"],
                    recomputed=self.head,
                )
            )
        else:
            self.covered = count
        if seal["final"]:
            self._closed_by(seal, offset)
            if self.final_seal_offset is not None:
                self.seals.add(
                    Problem("SEAL_DUPLICATE_FINAL", f"second final seal at offset {offset}", stream="journal", offset=offset)
                )
            self.final_seal_offset = offset

    def finish(self, truncated: bool) -> bool:
        """Close the walk; True when the run is open.

        A run without a valid final seal is open only when nothing says a final
        seal was ever written: no seal record claiming to be final (valid or not)
        and no crossing of the run that the audit chain mirrors after the
        journal's end (``truncated``). Otherwise its tail was cut or its final
        seal forged: ``RUN_NOT_SEALED``, a mismatch.
        """
        if self.final_seal_offset is None:
            if not (truncated or self.final_claimed):
                return True
            tail = self.expected_seq - self.covered
            self.seals.add(
                Problem(
                    "RUN_NOT_SEALED",
                    f"no final seal: the last valid seal covers {self.covered} of {self.expected_seq} entries "
                    f"({tail} unsealed; the run is still open or its journal tail was truncated)",
                    seq=self.expected_seq,
                    expected="final seal",
                )
            )
        return False

    def chain_verdict(self) -> ChainVerdict:
        return ChainVerdict(
            entries=self.expected_seq,
            head=self.head,
            partition=self.partition,
            problem=self.chain.first,
            further_problems=self.chain.further,
        )

    def seal_verdict(self) -> SealVerdict:
        return SealVerdict(
            seals=self.seal_count,
            final=self.final_seal_offset is not None,
            covered=self.covered,
            key_ids=tuple(sorted(self.seal_keys)),
            closed_by=self.closed_by[0],
            closed_by_key=self.closed_by[1],
            problem=self.seals.first,
            further_problems=self.seals.further,
        )
