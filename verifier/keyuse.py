"""Which pinned key may sign or MAC which record, and when (docs/verifier.md "Keys").

A trusted-keys file (``bernstein.trusted-keys/v2``) pins every key with its purpose
(seal, audit, producer), its lifetime ``[valid_from_ms, valid_until_ms)`` and, for a
producer key, the producer it is registered to. A key id that is pinned is therefore
not enough: the record must be of the kind the key is for, stamped inside the key's
lifetime, and a producer's record must name the producer the key belongs to.

``key_problem`` checks one use of a pinned key and returns the first way it fails:

* ``KEY_PURPOSE_MISMATCH``: the key is pinned for another purpose (a producer key on a
  seal, a seal key on a submission, an audit secret's id on a signature);
* ``PRODUCER_NAME_MISMATCH``: a producer key registered to another producer than the
  one the record names;
* ``KEY_OUTSIDE_VALIDITY``: the record's Kafka timestamp (the input's timestamp, which
  the scheduler stamps on everything it writes for that input) is outside the key's
  lifetime: a retired key used after its successor took over, a revoked key used after
  its revocation, or a key used before it existed.

A key id that is not pinned at all is each caller's own code (``SEAL_KEY_NOT_PINNED``,
``AUDIT_KEY_NOT_PINNED``, ``CHECKPOINT_KEY_NOT_PINNED``, ``PRODUCER_KEY_NOT_PINNED``).
Keys from a v1 trusted-keys file carry no purpose (``any``, for Ed25519 keys) and no
lifetime: they pass these checks, as they did before keys had purposes.

``KeyLedger`` collects which key ids signed or MACed what in one run, for the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from bernstein.substrate.keys import KeyPurpose, TrustedKey, TrustedKeys
from bernstein.verifier.report import Problem


class KeyUse(StrEnum):
    """What a key was used for, as the verifier found it in the data."""

    SEAL = "seal"
    CHECKPOINT = "checkpoint"
    AUDIT = "audit"
    PRODUCER = "producer"
    """A producer's signature: a submission, a run close, a lineage entry, a data/ops receipt."""


_PURPOSE: Final = {
    KeyUse.SEAL: KeyPurpose.SEAL,
    KeyUse.CHECKPOINT: KeyPurpose.SEAL,
    KeyUse.AUDIT: KeyPurpose.AUDIT,
    KeyUse.PRODUCER: KeyPurpose.PRODUCER,
}


@dataclass(frozen=True)
class KeyFinding:
    """One failed key check, before it is placed on a record (``problem``)."""

    code: str
    message: str
    expected: str
    recomputed: str

    def problem(self, *, stream: str = "", offset: int | None = None, **where: Any) -> Problem:
        return Problem(
            self.code, self.message, stream=stream, offset=offset, expected=self.expected, recomputed=self.recomputed, **where
        )


def allowed_for(trusted: TrustedKeys, use: KeyUse) -> list[str]:
    """The pinned key ids a record of this use may name (for a not-pinned problem's ``expected``)."""
    purpose = _PURPOSE[use]
    return sorted(k for k, entry in trusted.entries.items() if entry.allows(purpose))


def key_fits(entry: TrustedKey, use: KeyUse, timestamp_ms: int | None, *, producer: str | None = None) -> bool:
    """``key_problem(...) is None``, without building a message: the check every record makes."""
    if not entry.allows(_PURPOSE[use]):
        return False
    if use == KeyUse.PRODUCER and producer is not None and entry.producer is not None and entry.producer != producer:
        return False
    return timestamp_ms is None or entry.validity.contains(timestamp_ms)


class KeysInForce:
    """``key_fits`` for the many records of one walk: what does not depend on the record (the key's pin,
    kind, purpose and owner) is looked up once per key id, leaving the lifetime to compare."""

    def __init__(self, trusted: TrustedKeys, use: KeyUse) -> None:
        self.trusted = trusted
        self.use = use
        self._bounds: dict[tuple[str, str | None], tuple[int, int | None] | None] = {}

    def fits(self, key_id: str, timestamp_ms: int, producer: str | None = None) -> bool:
        """The key is pinned, of the use's kind (an HMAC secret for audit, an Ed25519 key otherwise), and
        ``key_fits`` (purpose, owner, lifetime at ``timestamp_ms``)."""
        bounds = self._bounds.get((key_id, producer), _UNSEEN)
        if bounds is _UNSEEN:
            bounds = self._bounds[(key_id, producer)] = self._lookup(key_id, producer)
        if bounds is None:
            return False
        start, until = bounds
        return timestamp_ms >= start and (until is None or timestamp_ms < until)

    def windows(self) -> dict[str, tuple[str | None, int, int | None]]:
        """Every key id ``fits`` can accept, with its owner (a producer key's registered producer, else
        None) and lifetime: ``fits(k, t, p)`` is ``k`` listed, its owner None or ``p``, and ``t`` in the
        lifetime (the table ``native/src/walk.rs`` checks plain records with)."""
        table: dict[str, tuple[str | None, int, int | None]] = {}
        for key_id, entry in self.trusted.entries.items():
            bounds = self._lookup(key_id, None)
            if bounds is not None:
                table[key_id] = (entry.producer if self.use == KeyUse.PRODUCER else None, *bounds)
        return table

    def _lookup(self, key_id: str, producer: str | None) -> tuple[int, int | None] | None:
        entry = self.trusted.entry(key_id)
        if entry is None or entry.is_hmac != (self.use == KeyUse.AUDIT):
            return None
        if not key_fits(entry, self.use, None, producer=producer):
            return None
        return entry.validity.valid_from_ms, entry.validity.valid_until_ms


_UNSEEN: Final[Any] = object()


def key_problem(
    entry: TrustedKey, use: KeyUse, what: str, timestamp_ms: int | None, *, producer: str | None = None
) -> KeyFinding | None:
    """The first way ``what`` (a record naming pinned key ``entry``) misuses the key, or None.

    Order: purpose, then (producer keys) owner, then lifetime. ``timestamp_ms`` None
    skips the lifetime (a record without a timestamp: a kcat capture without them).
    """
    purpose = _PURPOSE[use]
    if not entry.allows(purpose):
        code = "KEY_PURPOSE_MISMATCH"
        return KeyFinding(
            code,
            f"{what} is {_verb(use)} by key {entry.key_id}, which is pinned as a {entry.purpose.value} key, "
            f"not a {purpose.value} key: one key, one purpose",
            purpose.value,
            entry.purpose.value,
        )
    if use == KeyUse.PRODUCER and producer is not None and entry.producer is not None and entry.producer != producer:
        code = "PRODUCER_NAME_MISMATCH"
        return KeyFinding(
            code,
            f"{what} names producer {producer!r}, but its key {entry.key_id} is registered to {entry.producer!r}",
            entry.producer,
            producer,
        )
    if timestamp_ms is not None and not entry.validity.contains(timestamp_ms):
        code = "KEY_OUTSIDE_VALIDITY"
        return KeyFinding(
            code,
            f"{what} (timestamp {timestamp_ms}) is {_verb(use)} by key {entry.key_id}, valid only in "
            f"{entry.validity.describe()} ({entry.status.value}): the key was not in force for this record",
            entry.validity.describe(),
            str(timestamp_ms),
        )
    return None


def _verb(use: KeyUse) -> str:
    return "MACed" if use == KeyUse.AUDIT else "signed"


@dataclass
class KeyLedger:
    """Which key ids signed or MACed what in one run (the report's ``keys`` section)."""

    seal: set[str] = field(default_factory=set)
    checkpoint: set[str] = field(default_factory=set)
    audit: set[str] = field(default_factory=set)
    producer: dict[tuple[str, str], int] = field(default_factory=dict)
    """(key id, producer name) -> records of the run it signed (verified signatures only)."""

    def signed_by_producer(self, key_id: str, producer: str) -> None:
        self.producer[(key_id, producer)] = self.producer.get((key_id, producer), 0) + 1
