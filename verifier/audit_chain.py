"""One judgement of an audit chain, one record at a time: what ``activity verify`` and ``audit follow`` both conclude.

The verifier (``verifier/verify.py`` ``_PartitionAudit``) and the follower
(``verifier/follow/checker.py``) used to classify audit records each in its own way and
disagreed on the same bytes: a record edited in place was a MAC mismatch to one and a MAC
mismatch plus a gap to the other, an inserted forgery a MAC mismatch to one and a MAC
mismatch plus a replay to the other. Both now ask ``judge`` and only phrase its findings.

The rules (the table ``schemas/vectors/audit_walks.json`` holds every judge to):

* Only an authentic record moves the chain: its MAC verifies under a pinned audit key, it
  names this partition, and its seq is not behind the chain. Every other record is
  reported once and stands in for at most one seq (``ChainPosition.stand_ins``): a forged
  record inserted between two genuine ones, or one edited in place, is one finding, never
  also a gap or a broken link after it.
* An authentic record whose seq jumps ahead of the chain by more than the records that
  stood in since the last authentic one is a gap (records deleted). Its link to the
  predecessor is checked when its seq is the one the chain expects; after a gap, or
  after records that stood in for its predecessors, the predecessor it names is not one
  the judge has seen.
* A record outside its key's pinned lifetime is reported and still moves the chain (its
  MAC is the scheduler's).
* With no audit key pinned at all the MACs cannot be checked (``unverified``): the chain's
  sequence and links are still judged.

Pure: no I/O and no clock; the caller passes the record's Kafka timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from bernstein.schemas.canonical import audit_genesis, macs_equal
from bernstein.schemas.fact_shapes import AuditRecordFact
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.facts import A_RECORD
from bernstein.verifier.keyuse import KeyFinding, KeyUse, key_problem

UNDECODABLE: Final = "AUDIT_UNDECODABLE"
KEY_NOT_PINNED: Final = "AUDIT_KEY_NOT_PINNED"
MAC_MISMATCH: Final = "AUDIT_MAC_MISMATCH"
WRONG_PARTITION: Final = "AUDIT_WRONG_PARTITION"
OUT_OF_ORDER: Final = "AUDIT_OUT_OF_ORDER"
GAP: Final = "AUDIT_GAP"
LINK_BROKEN: Final = "AUDIT_LINK_BROKEN"
KEY_PURPOSE_MISMATCH: Final = "KEY_PURPOSE_MISMATCH"
KEY_OUTSIDE_VALIDITY: Final = "KEY_OUTSIDE_VALIDITY"

CODES: Final = (
    UNDECODABLE,
    KEY_PURPOSE_MISMATCH,
    KEY_NOT_PINNED,
    MAC_MISMATCH,
    WRONG_PARTITION,
    OUT_OF_ORDER,
    KEY_OUTSIDE_VALIDITY,
    GAP,
    LINK_BROKEN,
)
"""Every code ``judge`` can give, in the order it checks."""


@dataclass
class ChainPosition:
    """Where one partition's chain stands: what the next record is judged against."""

    next_seq: int = 0
    head: str | None = None
    """MAC of the last authentic record; None before the first one (the chain then starts at its genesis)."""
    stand_ins: int = 0
    """Records since the last authentic one that were reported and did not move the chain."""


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a record: a stable code and what the caller needs to phrase it."""

    code: str
    seq: int | None = None
    expected: str | None = None
    """What the chain expected (a seq, a MAC, a key id list), as text."""
    found: str | None = None
    """What the record holds instead, as text."""
    key: KeyFinding | None = None
    """The key finding, for the KEY_* codes (its message names the key and its lifetime)."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Judgement:
    findings: tuple[Finding, ...]
    moves: bool
    """The record is the chain's next authentic record: the position moves to it."""
    unverified: bool = False
    """No audit key is pinned at all: the MAC could not be checked (never a finding by itself)."""

    @property
    def tainted(self) -> bool:
        """A finding about the record itself (anything but its key's lifetime): its contents are not vouched for."""
        return any(f.code != KEY_OUTSIDE_VALIDITY for f in self.findings)


_CLEAN: Final = Judgement((), True)


def judge(
    position: ChainPosition, fact: tuple[Any, ...], *, partition: int, timestamp_ms: int | None, trusted: TrustedKeys, where: str
) -> Judgement:
    """Judge one record (its ``bernstein.verifier.facts.audit_fact``) against ``position``; ``where`` names it in key messages."""
    if fact[0] != A_RECORD:
        return Judgement((Finding(UNDECODABLE, found=str(fact[1])),), False)
    record = AuditRecordFact._make(fact)
    key_id, mac, recomputed, seq, prev_mac = record.key_id, record.mac, record.recomputed, record.seq, record.prev_mac
    record_partition, input_partition = record.partition, record.input_partition
    unverified = False
    pinned = trusted.entry(key_id)
    if recomputed is None:
        if pinned is not None and not pinned.is_hmac:
            finding = key_problem(pinned, KeyUse.AUDIT, where, timestamp_ms)
            assert finding is not None  # a signing key is never an audit key
            return Judgement((Finding(finding.code, seq, finding.expected, finding.recomputed, finding),), False)
        if trusted.hmac:
            return Judgement((Finding(KEY_NOT_PINNED, seq, ", ".join(sorted(trusted.hmac)), key_id),), False)
        unverified = True
    elif recomputed != mac and not macs_equal(recomputed, mac):
        return Judgement((Finding(MAC_MISMATCH, seq, mac, recomputed, extra={"key_id": key_id}),), False)
    if record_partition != partition or input_partition != partition:
        return Judgement(
            (Finding(WRONG_PARTITION, seq, str(partition), str(record_partition), extra={"input_partition": input_partition}),),
            False,
        )
    if seq < position.next_seq:
        return Judgement((Finding(OUT_OF_ORDER, seq, str(position.next_seq), str(seq)),), False)
    findings: list[Finding] = []
    if pinned is not None and timestamp_ms is not None and not unverified:
        late = key_problem(pinned, KeyUse.AUDIT, where, timestamp_ms)
        if late is not None:
            findings.append(Finding(late.code, seq, late.expected, late.recomputed, late))
    missing = seq - position.next_seq - position.stand_ins
    if missing > 0:
        findings.append(Finding(GAP, seq, str(position.next_seq), str(seq), extra={"missing": missing}))
    elif seq == position.next_seq:
        expected = position.head
        if expected is None:  # the chain's first record follows the genesis under its own key
            secret = trusted.audit_secret(key_id)
            expected = audit_genesis(secret, partition) if secret is not None else prev_mac
        if prev_mac != expected and not macs_equal(prev_mac, expected):
            findings.append(Finding(LINK_BROKEN, seq, expected, prev_mac))
    if not findings and not unverified:
        return _CLEAN
    return Judgement(tuple(findings), True, unverified)


def advance(position: ChainPosition, judgement: Judgement, seq: int, mac: str) -> None:
    """Move ``position`` past a judged record: to it when it moves the chain, else count it as a stand-in."""
    if judgement.moves:
        position.next_seq = seq + 1
        position.head = mac
        position.stand_ins = 0
    else:
        position.stand_ins += 1
