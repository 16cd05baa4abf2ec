"""Test producers: deterministic Ed25519 identities, their manifest registration, and signing.

Every submission the scheduler accepts is signed by a producer key registered in the
manifest (docs/security.md). Tests name many producers (``tests@host``, ``navigator@test``
...): each name gets a key derived from the name, so a test signs as whoever its record
says it is, and ``TEST_PRODUCERS`` registers all of them with every role and agent kind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from bernstein.consumers.core.model import Lifetime, Producer, ProducerKey, ProducerRegistry
from bernstein.schemas import codec
from bernstein.schemas.canonical import run_close_statement, submission_signing_input, submission_statement
from bernstein.schemas.records import KINDS
from bernstein.substrate.keys import Ed25519Signer, KeyPurpose, TrustedKey, TrustedKeys
from tests.support.roles import ROLES

NAMES: Final = (
    "tests@host",
    "tests@pipeline",
    "tester@host",
    "unit@test",
    "navigator@test",
    "navigator@host",
    "navigator-it",
    "coder@test",
    "coder@host",
    "coder@tamper-suite",
    "facts@test",
    "verdicts@test",
    "p@test",
    "demo-agents",
    "closer",
    "bench",
    "worker",
    "p",
    "t",
    "w",
)
"""Producer names the test suites use, all registered in ``TEST_PRODUCERS``."""


def producer_seed(name: str) -> bytes:
    """The fixed Ed25519 seed of test producer ``name``."""
    return hashlib.sha256(b"bernstein-test-producer/" + name.encode()).digest()


def producer_signer(name: str) -> Ed25519Signer:
    """The test identity of producer ``name`` (same name, same key, in every process)."""
    return Ed25519Signer.from_seed(producer_seed(name))


def producer(
    name: str,
    *,
    roles: Iterable[str] | None = None,
    agent_kinds: Iterable[str] | None = None,
    lifetime: Lifetime = Lifetime(),
    signer: Ed25519Signer | None = None,
) -> Producer:
    """A registered producer: by default every test role and every agent kind."""
    key = signer or producer_signer(name)
    granted = frozenset(ROLES if roles is None else roles)
    kinds = frozenset(KINDS if agent_kinds is None else agent_kinds) | {ROLES[r] for r in granted if r in ROLES}
    return Producer(name, granted, kinds, (ProducerKey(key.key_id, key.public_key_raw, lifetime),))


def registry(*names: str, extra: Iterable[Producer] = ()) -> ProducerRegistry:
    """Producers ``names`` (default: ``NAMES``) with every grant, plus ``extra``."""
    return ProducerRegistry.of([*(producer(n) for n in (names or NAMES)), *extra])


TEST_PRODUCERS: Final = registry()


def signed_submission(record: Mapping[str, Any], signer: Ed25519Signer | None = None) -> dict[str, Any]:
    """An ActivitySubmission.v3 record: ``record`` (v2 fields) signed as its ``producer.id``."""
    key = signer or producer_signer(record["producer"]["id"])
    fields = {k: v for k, v in record.items() if k not in ("producer_key_id", "producer_signature")}
    statement = submission_statement(fields, key.key_id)
    return {**fields, "producer_key_id": key.key_id, "producer_signature": key.sign(submission_signing_input(statement))}


def signed_close(record: Mapping[str, Any], signer: Ed25519Signer | None = None) -> dict[str, Any]:
    """A RunClose.v2 record: ``record`` (v1 fields) signed as its ``producer.id``."""
    key = signer or producer_signer(record["producer"]["id"])
    statement = run_close_statement(
        record["submission_id"], record["run_id"], record["producer"]["id"], record["occurred_at_ms"], key.key_id
    )
    fields = {k: record[k] for k in ("submission_id", "run_id", "producer", "occurred_at_ms")}
    return {**fields, "producer_key_id": key.key_id, "producer_signature": key.sign(submission_signing_input(statement))}


def encode_signed_submission(record: Mapping[str, Any], signer: Ed25519Signer | None = None) -> bytes:
    return codec.encode(codec.ACTIVITY_SUBMISSION_V3, signed_submission(record, signer))


def encode_signed_close(record: Mapping[str, Any], signer: Ed25519Signer | None = None) -> bytes:
    return codec.encode(codec.RUN_CLOSE_V2, signed_close(record, signer))


def producer_trust(*names: str) -> TrustedKeys:
    """The trusted-keys entries a verifier pins for producers ``names`` (default: ``NAMES``), as ``keys trust`` exports them."""
    return TrustedKeys.of(
        TrustedKey(signer.key_id, KeyPurpose.PRODUCER, signer.public_key_raw, producer=name)
        for name in (names or NAMES)
        for signer in (producer_signer(name),)
    )
