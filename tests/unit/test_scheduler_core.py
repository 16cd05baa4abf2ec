"""The scheduler's pure core, without Kafka: ``SchedulerCore.step`` and ``rebuild_state``.

Every refusal rule, every dead-letter code, seals, the journal and audit chains,
crash recovery by rebuilding state from the outputs, byte-for-byte determinism,
a hypothesis fuzz over random and mutated inputs, and an import scan that keeps
the core free of clocks, randomness and I/O.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bernstein.consumers.core.model import SchedulerConfig, Stream
from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.consumers.core.rebuild import Skipped, StateCorrupted, rebuild_state
from bernstein.consumers.core.step import SchedulerCore, _clip, initial_state
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    artifact_hash,
    audit_genesis,
    audit_record_mac,
    canonical_json,
    checkpoint_signing_input,
    evidence_set_hash,
    hmac_key_id,
    is_digest,
    journal_entry_hash,
    journal_genesis,
    seal_signing_input,
    sha256_digest,
    submission_signing_input,
    submission_statement,
)
from bernstein.schemas.records import (
    BROWSER_SESSION_FORMAT,
    MAX_INLINE_ARTIFACT_BYTES,
    MAX_LINEAGE_ENTRY_BYTES,
    MAX_OBSERVATIONS,
    MAX_OCCURRED_AT_MS,
    DeadLetterCode,
    RefusalCode,
)
from bernstein.substrate.keys import Ed25519Signer, verify_signature
from tests.support import fuzz
from tests.support.core_driver import (
    AUDIT_KEY,
    BASE_TS,
    NEW_AUDIT,
    NEW_SEAL,
    OLD_AUDIT,
    OLD_SEAL,
    PARTITION,
    SIGNER,
    TOPIC,
    UNIT_PRODUCERS,
    VALID_BYTES,
    Driver,
    Out,
    cu_action,
    decode_out,
    enc_close,
    enc_sub,
    make_config,
    mixed_inputs,
    record,
    rotated_driver,
    run_all,
    run_close,
    submission,
)
from tests.support.modality import dataops_submission, research_submission
from tests.support.producers import (
    encode_signed_close,
    encode_signed_submission,
    producer_signer,
    signed_close,
    signed_submission,
)
from tests.support.roles import ROLES

REPO = Path(__file__).resolve().parents[2]
CE_TYPES = {
    "journal-entry": b"bernstein.activity.result",
    "seal": b"bernstein.run.sealed",
    "refusal": b"bernstein.activity.refused",
    "deadletter": b"bernstein.input.deadletter",
}


OUTSIDER = Ed25519Signer.from_seed(bytes(range(7, 39)))
"""A key registered to no producer."""


# ---------------------------------------------------------------------------
# reading outputs
# ---------------------------------------------------------------------------


def expected_headers(offset: int, index: int, ce_type: bytes) -> tuple[tuple[str, bytes], ...]:
    return (
        ("ce_specversion", b"1.0"),
        ("ce_id", f"{TOPIC}:{PARTITION}:{offset}:{index}".encode()),
        ("ce_source", b"bernstein/scheduler"),
        ("ce_type", ce_type),
    )


def check_audit(out: Out, *, seq: int, prev_mac: str, offset: int, **fields: Any) -> None:
    """The audit record's MAC recomputes and its entry carries exactly ``fields``."""
    assert out.what == "audit"
    assert out.record["key_id"] == hmac_key_id(AUDIT_KEY)
    assert out.record["mac"] == audit_record_mac(AUDIT_KEY, out.record["key_id"], out.record["payload"])
    assert out.inner is not None
    expected = {
        "partition": PARTITION,
        "seq": seq,
        "prev_mac": prev_mac,
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": offset},
        **fields,
    }
    assert out.inner == expected


# ---------------------------------------------------------------------------
# acceptance
# ---------------------------------------------------------------------------


def test_valid_submission_becomes_one_chained_journal_entry_and_one_audit_record() -> None:
    d = Driver()
    sub = submission()
    signed = signed_submission(sub)
    value = codec.encode(codec.ACTIVITY_SUBMISSION_V3, signed)
    outs = d.feed(value)
    assert [o.what for o in outs] == ["journal-entry", "audit"]
    journal, audit = outs
    # the producer's key id and signature are journalled (JournalEntry.v3), so the verifier re-checks them
    assert codec.decode(journal.record["payload"]).schema.name == codec.JOURNAL_ENTRY_V3

    payload = journal.record["payload"]
    entry_hash = journal_entry_hash(payload)
    assert journal.record["entry_hash"] == entry_hash
    assert journal.inner == {
        "run_id": "run-1",
        "seq": 0,
        "prev_hash": journal_genesis("run-1"),
        "entry_type": "activity.result",
        "stage_id": "stage-0",
        "role": "developer",
        "kind": "coding",
        "producer_id": "unit@test",
        "submission_id": "sub-run-1-stage-0",
        "artifact_hash": sub["artifact_hash"],
        "evidence_set_hash": sub["evidence_set_hash"],
        "observations": sub["observations"],
        "terminal_state": "completed",
        "reason_code": "ok",
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": 0},
        "occurred_at_ms": 1_700_000_000_123,
        "producer_key_id": producer_signer("unit@test").key_id,
        "producer_signature": signed["producer_signature"],
    }
    # the artifact body is never journalled, nor mirrored to the audit topic
    assert sub["artifact"] not in journal.raw.value
    assert sub["artifact"] not in audit.raw.value
    for observation in sub["observations"]:
        assert observation["ref"].encode() not in audit.raw.value

    check_audit(
        audit,
        seq=0,
        prev_mac=audit_genesis(AUDIT_KEY, PARTITION),
        offset=0,
        event="activity.result",
        run_id="run-1",
        stage_id="stage-0",
        kind="coding",
        terminal_state="completed",
        reason_code="ok",
        artifact_hash=sub["artifact_hash"],
        evidence_set_hash=sub["evidence_set_hash"],
        record_hash=entry_hash,
        journal_seq=0,
    )
    # keys, headers and timestamps come from the input record, never a clock
    assert journal.raw.key == b"run-1" and audit.raw.key == b"run-1"
    assert journal.raw.headers == expected_headers(0, 0, CE_TYPES["journal-entry"])
    assert audit.raw.headers == expected_headers(0, 1, b"bernstein.audit.activity.result")
    assert journal.raw.timestamp_ms == audit.raw.timestamp_ms == BASE_TS

    run = d.state.runs["run-1"]
    assert (run.head, run.entry_count, run.closed, run.sealed_count) == (entry_hash, 1, False, 0)
    assert run.stages == {"stage-0": sub["evidence_set_hash"]}
    assert run.evidence == {sub["evidence_set_hash"]: "stage-0"}
    assert (d.state.audit_seq, d.state.audit_head) == (1, audit.record["mac"])


def test_every_role_kind_pair_of_the_manifest_is_accepted() -> None:
    """Each declared role may submit its kind (browser results carry a session document: tested with computer use)."""
    d = Driver()
    pairs = [(role, kind) for role, kind in sorted(ROLES.items()) if kind != "browser"]
    assert len(pairs) == 3
    for index, (role, kind) in enumerate(pairs):
        # research and ops results carry their modality's document (schemas/documents/, tests/support/modality.py)
        if kind == "research":
            value = encode_signed_submission(research_submission(stage_id=f"s{index}"))
        elif kind == "ops":
            value = encode_signed_submission(dataops_submission(stage_id=f"s{index}"))
        else:
            value = enc_sub(stage_id=f"s{index}", role=role, kind=kind, pages=[f"p{index}".encode()])
        outs = d.feed(value)
        assert [o.what for o in outs] == ["journal-entry", "audit"], (role, kind)
        assert outs[0].inner is not None and outs[0].inner["seq"] == index


def test_journal_chain_links_every_entry_of_a_run_and_runs_chain_independently() -> None:
    d = Driver()
    heads = {"run-a": journal_genesis("run-a"), "run-b": journal_genesis("run-b")}
    counts = {"run-a": 0, "run-b": 0}
    for i in range(10):
        run_id = "run-a" if i % 3 else "run-b"
        outs = d.feed(enc_sub(run_id=run_id, stage_id=f"s{i}", pages=[f"page {i}".encode()]), key=run_id.encode())
        entry = outs[0]
        assert entry.inner is not None
        assert entry.inner["seq"] == counts[run_id]
        assert entry.inner["prev_hash"] == heads[run_id]
        heads[run_id] = entry.record["entry_hash"]
        counts[run_id] += 1
    assert {r: (s.entry_count, s.head) for r, s in d.state.runs.items()} == {r: (counts[r], heads[r]) for r in counts}


# ---------------------------------------------------------------------------
# refusal rules (stateless)
# ---------------------------------------------------------------------------

VALID = submission()
BIG = b"x" * (MAX_INLINE_ARTIFACT_BYTES + 1)
TAMPERED = b'{"report":"three pages"}'
BAD_DIGEST = "sha256:" + "AB" * 32
OTHER_EVIDENCE = evidence_set_hash([sha256_digest(b"something else")])
MANY_OBSERVATIONS = [
    {"kind": "page", "ref": f"r{i}", "content_hash": sha256_digest(b"%d" % i), "size": 1} for i in range(MAX_OBSERVATIONS + 1)
]
MANY_DIGESTS = [sha256_digest(b"%d" % i) for i in range(MAX_OBSERVATIONS + 1)]


@dataclass(frozen=True)
class Rule:
    """A mutation of the valid submission and the refusal it must produce."""

    code: RefusalCode
    changes: dict[str, Any]
    field: str
    declared: str
    recomputed: str = ""
    encode: Callable[[dict[str, Any]], bytes] = encode_signed_submission
    """How the mutated record is published (default: ActivitySubmission.v3 signed as its producer.id)."""


def _v3_with(record: dict[str, Any], **fields: Any) -> bytes:
    """``record`` signed as its producer, then ``fields`` replaced (a forged or broken signature)."""
    return codec.encode(codec.ACTIVITY_SUBMISSION_V3, {**signed_submission(record), **fields})


def _v3_unsignable(record: dict[str, Any]) -> bytes:
    """An ActivitySubmission.v3 whose statement has no canonical JSON form (a size beyond 2**53 - 1)."""
    return codec.encode(
        codec.ACTIVITY_SUBMISSION_V3,
        {**record, "producer_key_id": producer_signer("unit@test").key_id, "producer_signature": b"\x01" * 64},
    )


def _signing_digest(record: dict[str, Any]) -> str:
    """sha256 of the bytes unit@test's key signs for ``record``."""
    return sha256_digest(submission_signing_input(submission_statement(record, producer_signer("unit@test").key_id)))


_UNSIGNABLE_OBSERVATIONS = [{**VALID["observations"][0], "size": 2**53}, VALID["observations"][1]]

RULES: dict[str, Rule] = {
    # producer identity (docs/security.md), after the envelope and before every other rule
    "unsigned-v2": Rule(
        RefusalCode.SUBMISSION_UNSIGNED,
        {},
        "producer_signature",
        codec.ACTIVITY_SUBMISSION_V2,
        codec.ACTIVITY_SUBMISSION_V3,
        encode=lambda r: codec.encode(codec.ACTIVITY_SUBMISSION_V2, r),
    ),
    "unsigned-v1": Rule(
        RefusalCode.SUBMISSION_UNSIGNED,
        {"observations": [], "evidence_set_hash": evidence_set_hash([])},
        "producer_signature",
        codec.ACTIVITY_SUBMISSION,
        codec.ACTIVITY_SUBMISSION_V3,
        encode=lambda r: codec.encode(codec.ACTIVITY_SUBMISSION, r),
    ),
    "producer-key-unknown": Rule(
        RefusalCode.PRODUCER_KEY_UNKNOWN,
        {},
        "producer_key_id",
        OUTSIDER.key_id,
        encode=lambda r: encode_signed_submission(r, OUTSIDER),
    ),
    "producer-mismatch": Rule(
        RefusalCode.PRODUCER_MISMATCH,
        {"producer": {"id": "coder@test", "sdk": "x"}},
        "producer.id",
        "coder@test",
        "unit@test",
        encode=lambda r: encode_signed_submission(r, producer_signer("unit@test")),
    ),
    "producer-key-retired": Rule(
        RefusalCode.PRODUCER_KEY_NOT_VALID,
        {"producer": {"id": "retired@test", "sdk": "x"}},
        "producer_key_id",
        str(BASE_TS + 7),
        f"[0, {BASE_TS})",
    ),
    "producer-key-not-yet-valid": Rule(
        RefusalCode.PRODUCER_KEY_NOT_VALID,
        {"producer": {"id": "future@test", "sdk": "x"}},
        "producer_key_id",
        str(BASE_TS + 7),
        f"[{BASE_TS + 1_000_000}, )",
    ),
    "signature-invalid": Rule(
        RefusalCode.SUBMISSION_SIGNATURE_INVALID,
        {},
        "producer_signature",
        "00" * 64,
        _signing_digest({**VALID, "stage_id": "stage-9", "submission_id": "sub-run-1-stage-9"}),
        encode=lambda r: _v3_with(r, producer_signature=bytes(64)),
    ),
    "signature-over-another-stage": Rule(
        RefusalCode.SUBMISSION_SIGNATURE_INVALID,
        {},
        "producer_signature",
        signed_submission({**VALID, "stage_id": "stage-8", "submission_id": "sub-run-1-stage-9"})["producer_signature"].hex(),
        _signing_digest({**VALID, "stage_id": "stage-9", "submission_id": "sub-run-1-stage-9"}),
        encode=lambda r: _v3_with(r, producer_signature=signed_submission({**r, "stage_id": "stage-8"})["producer_signature"]),
    ),
    "statement-not-canonical": Rule(
        RefusalCode.SUBMISSION_SIGNATURE_INVALID,
        {"observations": _UNSIGNABLE_OBSERVATIONS},
        "producer_signature",
        "01" * 64,
        encode=_v3_unsignable,
    ),
    "producer-role-not-allowed": Rule(
        RefusalCode.PRODUCER_ROLE_NOT_ALLOWED,
        {"producer": {"id": "scout@test", "sdk": "x"}},
        "role",
        "developer",
        "scout",
    ),
    "invalid-run-id": Rule(RefusalCode.INVALID_RUN_ID, {"run_id": "-run"}, "run_id", "-run"),
    "empty-run-id": Rule(RefusalCode.INVALID_RUN_ID, {"run_id": ""}, "run_id", ""),
    "invalid-stage-id": Rule(RefusalCode.INVALID_STAGE_ID, {"stage_id": "stage 1"}, "stage_id", "stage 1"),
    "invalid-role": Rule(RefusalCode.INVALID_ROLE, {"role": "scout/../x"}, "role", "scout/../x"),
    "unknown-kind": Rule(RefusalCode.UNKNOWN_KIND, {"kind": "poetry"}, "kind", "poetry"),
    "unknown-role": Rule(RefusalCode.UNKNOWN_ROLE, {"role": "ghost"}, "role", "ghost"),
    # a producer not granted an undeclared role: the role is unknown, not a missing grant
    "unknown-role-ungranted": Rule(
        RefusalCode.UNKNOWN_ROLE, {"role": "ghost", "producer": {"id": "scout@test", "sdk": "x"}}, "role", "ghost"
    ),
    "kind-not-allowed-for-role": Rule(
        RefusalCode.KIND_NOT_ALLOWED_FOR_ROLE, {"role": "scout", "kind": "coding"}, "kind", "coding", "research"
    ),
    "submission-id-empty": Rule(RefusalCode.INVALID_SUBMISSION_ID, {"submission_id": ""}, "submission_id", ""),
    "submission-id-too-long": Rule(
        RefusalCode.INVALID_SUBMISSION_ID, {"submission_id": "s" * 257}, "submission_id", "s" * 253 + "..."
    ),
    "submission-id-2mb": Rule(
        RefusalCode.INVALID_SUBMISSION_ID, {"submission_id": "s" * 2_000_000}, "submission_id", "s" * 253 + "..."
    ),
    "submission-id-control": Rule(RefusalCode.INVALID_SUBMISSION_ID, {"submission_id": "a\nb"}, "submission_id", "a\nb"),
    "producer-id-control": Rule(RefusalCode.INVALID_PRODUCER, {"producer": {"id": "w\x00", "sdk": "x"}}, "producer.id", "w\x00"),
    "producer-id-empty": Rule(RefusalCode.INVALID_PRODUCER, {"producer": {"id": "", "sdk": "x"}}, "producer.id", ""),
    "producer-sdk-too-long": Rule(
        RefusalCode.INVALID_PRODUCER, {"producer": {"id": "w", "sdk": "v" * 300}}, "producer.sdk", "v" * 253 + "..."
    ),
    "occurred-at-negative": Rule(
        RefusalCode.INVALID_OCCURRED_AT, {"occurred_at_ms": -1}, "occurred_at_ms", "-1", str(MAX_OCCURRED_AT_MS)
    ),
    "occurred-at-after-9999": Rule(
        RefusalCode.INVALID_OCCURRED_AT,
        {"occurred_at_ms": MAX_OCCURRED_AT_MS + 1},
        "occurred_at_ms",
        str(MAX_OCCURRED_AT_MS + 1),
        str(MAX_OCCURRED_AT_MS),
    ),
    "kind-not-allowed-default-coding": Rule(
        RefusalCode.KIND_NOT_ALLOWED_FOR_ROLE, {"role": "developer", "kind": "research"}, "kind", "research", "coding"
    ),
    "unknown-terminal-state": Rule(
        RefusalCode.UNKNOWN_TERMINAL_STATE, {"terminal_state": "exploded"}, "terminal_state", "exploded"
    ),
    "terminal-state-wrong-case": Rule(
        RefusalCode.UNKNOWN_TERMINAL_STATE, {"terminal_state": "Completed"}, "terminal_state", "Completed"
    ),
    "empty-reason-code": Rule(RefusalCode.EMPTY_REASON_CODE, {"reason_code": ""}, "reason_code", ""),
    "blank-reason-code": Rule(RefusalCode.EMPTY_REASON_CODE, {"reason_code": " \t "}, "reason_code", " \t "),
    "reason-code-control-char": Rule(RefusalCode.INVALID_REASON_CODE, {"reason_code": "ok\n"}, "reason_code", "ok\n"),
    "reason-code-too-long": Rule(RefusalCode.INVALID_REASON_CODE, {"reason_code": "r" * 129}, "reason_code", "r" * 129),
    "artifact-too-large": Rule(
        RefusalCode.ARTIFACT_TOO_LARGE,
        {"artifact": BIG, "artifact_hash": artifact_hash(BIG)},
        "artifact",
        str(MAX_INLINE_ARTIFACT_BYTES + 1),
        str(MAX_INLINE_ARTIFACT_BYTES),
    ),
    "artifact-hash-malformed": Rule(RefusalCode.MALFORMED_DIGEST, {"artifact_hash": BAD_DIGEST}, "artifact_hash", BAD_DIGEST),
    "artifact-hash-not-sha256": Rule(
        RefusalCode.MALFORMED_DIGEST, {"artifact_hash": "md5:" + "0" * 32}, "artifact_hash", "md5:" + "0" * 32
    ),
    "artifact-hash-mismatch": Rule(
        RefusalCode.ARTIFACT_HASH_MISMATCH,
        {"artifact": TAMPERED},
        "artifact_hash",
        VALID["artifact_hash"],
        artifact_hash(TAMPERED),
    ),
    "too-many-observations": Rule(
        RefusalCode.TOO_MANY_OBSERVATIONS,
        {"observations": MANY_OBSERVATIONS, "evidence_set_hash": evidence_set_hash(MANY_DIGESTS)},
        "observations",
        str(MAX_OBSERVATIONS + 1),
        str(MAX_OBSERVATIONS),
    ),
    "observation-digest-malformed": Rule(
        RefusalCode.MALFORMED_DIGEST,
        {"observations": [VALID["observations"][0], {**VALID["observations"][1], "content_hash": "sha256:xyz"}]},
        "observations[1].content_hash",
        "sha256:xyz",
    ),
    "observation-kind-empty": Rule(
        RefusalCode.INVALID_OBSERVATION,
        {"observations": [{**VALID["observations"][0], "kind": ""}, VALID["observations"][1]]},
        "observations[0]",
        "",
    ),
    "observation-ref-control": Rule(
        RefusalCode.INVALID_OBSERVATION,
        {"observations": [VALID["observations"][0], {**VALID["observations"][1], "ref": "https://a\x1b[2J"}]},
        "observations[1]",
        "page",
    ),
    "observation-kind-newline": Rule(
        RefusalCode.INVALID_OBSERVATION,
        {"observations": [{**VALID["observations"][0], "kind": "page\n"}, VALID["observations"][1]]},
        "observations[0]",
        "page\n",
    ),
    "evidence-set-hash-malformed": Rule(
        RefusalCode.MALFORMED_DIGEST, {"evidence_set_hash": "sha256:" + "0" * 63}, "evidence_set_hash", "sha256:" + "0" * 63
    ),
    "evidence-set-hash-mismatch": Rule(
        RefusalCode.EVIDENCE_SET_HASH_MISMATCH,
        {"evidence_set_hash": OTHER_EVIDENCE},
        "evidence_set_hash",
        OTHER_EVIDENCE,
        VALID["evidence_set_hash"],
    ),
    "evidence-set-hash-of-dropped-observation": Rule(
        RefusalCode.EVIDENCE_SET_HASH_MISMATCH,
        {"observations": VALID["observations"][:1]},
        "evidence_set_hash",
        VALID["evidence_set_hash"],
        evidence_set_hash([VALID["observations"][0]["content_hash"]]),
    ),
}


SENT_BY_UNIT: Final = {"producer": "unit@test", "key_id": producer_signer("unit@test").key_id, "authenticated": True}
"""A Refusal.v2's sender once unit@test's signature verified."""
CLAIMED_BY_UNIT: Final = {**SENT_BY_UNIT, "authenticated": False}
"""... and before: the names are only what the record claims."""

REFUSED_BEFORE_THE_SIGNATURE = frozenset(
    {
        RefusalCode.INVALID_RUN_ID,
        RefusalCode.INVALID_STAGE_ID,
        RefusalCode.INVALID_ROLE,
        RefusalCode.INVALID_OCCURRED_AT,
        RefusalCode.INVALID_PRODUCER,
        RefusalCode.INVALID_SUBMISSION_ID,
        RefusalCode.RUN_KEY_MISMATCH,
        RefusalCode.WRONG_PARTITION,
        RefusalCode.SUBMISSION_UNSIGNED,
        RefusalCode.PRODUCER_KEY_UNKNOWN,
        RefusalCode.PRODUCER_MISMATCH,
        RefusalCode.PRODUCER_KEY_NOT_VALID,
        RefusalCode.SUBMISSION_SIGNATURE_INVALID,
    }
)
"""The codes a submission earns before its producer's signature is checked (or because it failed):
their Refusal.v2 names the producer and key only as claimed (``authenticated`` false)."""


@pytest.mark.parametrize("name", sorted(RULES))
def test_each_refusal_rule_produces_the_exact_refusal_record_and_changes_no_run_state(name: str) -> None:
    rule = RULES[name]
    d = Driver()
    # an accepted stage of the same run first, so "no state change" has something to keep
    d.feed(enc_sub(stage_id="accepted-0", pages=[b"first"]))
    before = copy.deepcopy(d.state)
    bad = {**submission(stage_id="stage-9"), **rule.changes}
    raw = rule.encode(bad)
    outs = d.feed(raw, key=bad["run_id"].encode())
    assert [o.what for o in outs] == ["refusal", "audit"]
    refusal, audit = outs

    message = refusal.record.pop("message")
    assert refusal.record == {
        "exception": "ActivityRejected",
        "code": rule.code.value,
        "run_id": bad["run_id"],
        "stage_id": bad["stage_id"],
        "role": bad["role"],
        "kind": bad["kind"],
        "submission_id": _clip(bad["submission_id"]),
        "field": rule.field,
        "declared": rule.declared,
        "recomputed": rule.recomputed,
        "earlier_stage_id": None,
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": 1},
        # an out-of-range time is not repeated: the refusal carries the input record's timestamp
        "occurred_at_ms": bad["occurred_at_ms"] if 0 <= bad["occurred_at_ms"] <= MAX_OCCURRED_AT_MS else BASE_TS + 7,
        # who sent it, as the record states; authenticated once its signature verified
        "producer": _clip(bad["producer"]["id"]),
        "key_id": _clip(codec.decode(raw).record.get("producer_key_id", "")),
        "authenticated": rule.code not in REFUSED_BEFORE_THE_SIGNATURE,
    }
    assert message.strip(), "a refusal explains itself"
    for evidence in (rule.declared, rule.recomputed):
        if evidence.startswith("sha256:") and rule.code is not RefusalCode.MALFORMED_DIGEST:
            assert evidence in message
    # keyed by run id when the run id is valid, else by nothing (never by an unbounded input key)
    assert refusal.raw.key == (bad["run_id"].encode() if rule.code is not RefusalCode.INVALID_RUN_ID else b"")
    assert refusal.raw.headers == expected_headers(1, 0, CE_TYPES["refusal"])

    valid_run = rule.code is not RefusalCode.INVALID_RUN_ID
    valid_stage = rule.code is not RefusalCode.INVALID_STAGE_ID
    check_audit(
        audit,
        seq=1,
        prev_mac=before.audit_head,
        offset=1,
        event="activity.refused",
        run_id=bad["run_id"] if valid_run else "",
        stage_id=bad["stage_id"] if valid_stage else "",
        kind=bad["kind"] if bad["kind"] in ("coding", "research", "browser", "data", "ops") else "",
        terminal_state=bad["terminal_state"] if bad["terminal_state"] in ("completed", "refused", "failed", "timed_out") else "",
        reason_code=rule.code.value,
        artifact_hash=bad["artifact_hash"] if is_digest(bad["artifact_hash"]) else "",
        evidence_set_hash=bad["evidence_set_hash"] if is_digest(bad["evidence_set_hash"]) else "",
        record_hash=sha256_digest(refusal.raw.value),
        journal_seq=-1,
    )
    # no run state changed; only the audit chain moved on by one record
    assert d.state.runs == before.runs
    assert (d.state.audit_seq, d.state.audit_head) == (before.audit_seq + 1, audit.record["mac"])


COMPUTER_USE_CODES = frozenset(
    {
        "INVALID_SESSION_ID",
        "UNKNOWN_ACTION_KIND",
        "INVALID_ACTION",
        "ANCHOR_MISMATCH",
        "ACTION_OUT_OF_ORDER",
        "ANCHOR_DOES_NOT_FOLLOW",
        "SESSION_CLOSED",
        "LINEAGE_MALFORMED",
        "LINEAGE_MISMATCH",
        "LINEAGE_HMAC_INVALID",
        "LINEAGE_KEY_NOT_PINNED",
        "LINEAGE_SIGNATURE_INVALID",
        "BROWSER_SESSION_MISMATCH",
        "LINEAGE_TOO_LARGE",
    }
)
"""Refusals of the computer-use boundary (actions, sessions, lineage): tested with that modality."""


def test_every_activity_refusal_code_has_a_rule_here() -> None:
    """A new activity refusal code needs its exact-record test above (computer-use codes are tested with that modality)."""
    # the run-memory tests below, and the key, repeated-id and nesting tests of their own
    stateful = {
        "RUN_CLOSED",
        "RUN_EMPTY",
        "DUPLICATE_STAGE",
        "REDUNDANT_STAGE",
        "RUN_KEY_MISMATCH",
        "DUPLICATE_SUBMISSION",
        "JSON_TOO_DEEP",
    }
    # WRONG_PARTITION needs a partition count: its exact-record tests (both cores) are in test_partitioning.py;
    # RUN_NOT_OWNED needs a manifest with run prefixes: its exact-record tests (both cores) are in test_run_owners.py;
    # OPEN_RUNS_EXCEEDED needs a producer at its max_open_runs: its tests (both cores) are in test_open_runs.py.
    covered = {rule.code.value for rule in RULES.values()} | stateful | {"WRONG_PARTITION", "RUN_NOT_OWNED", "OPEN_RUNS_EXCEEDED"}
    # The modality document rules have their exact-record tests in test_scheduler_modality_rules.py.
    documents = {code.value for code in RefusalCode if code.value.startswith(("RESEARCH_", "DATAOPS_"))}
    # The evidence cap's codes have theirs (both cores) in test_evidence_cap.py.
    evidence = {"INVALID_EVIDENCE_SIZE", "EVIDENCE_CAP_EXCEEDED", "EVIDENCE_SIZES_UNDECLARED"}
    assert covered == {code.value for code in RefusalCode} - COMPUTER_USE_CODES - documents - evidence


def test_run_close_with_an_invalid_run_id_is_refused() -> None:
    d = Driver()
    outs = d.feed(encode_signed_close(run_close("bad id")), key=b"k" * 100_000)
    assert [o.what for o in outs] == ["refusal", "audit"]
    refusal = outs[0].record
    assert (refusal["code"], refusal["field"], refusal["declared"], refusal["run_id"]) == (
        "INVALID_RUN_ID",
        "run_id",
        "bad id",
        "bad id",
    )
    assert (refusal["stage_id"], refusal["role"], refusal["kind"]) == ("", "", "")
    assert outs[0].raw.key == b""  # not the input key: it may be of any size
    assert d.state.runs == {}


# ---------------------------------------------------------------------------
# refusal rules that depend on the run's memory
# ---------------------------------------------------------------------------


def test_redundant_stage_names_the_earlier_stage_and_changes_no_state() -> None:
    d = Driver()
    d.feed(enc_sub(stage_id="fetch-1", pages=[b"a", b"b"]))
    d.feed(enc_sub(stage_id="fetch-2", pages=[b"c"]))
    before = copy.deepcopy(d.state)
    # same evidence set in another order, with a duplicate: the set is what counts
    outs = d.feed(enc_sub(stage_id="fetch-3", pages=[b"b", b"a", b"b"], artifact=b"a different report"))
    assert [o.what for o in outs] == ["refusal", "audit"]
    refusal = outs[0].record
    esh = evidence_set_hash([sha256_digest(b"a"), sha256_digest(b"b")])
    message = refusal.pop("message")
    assert "fetch-1" in message
    assert refusal == {
        "exception": "RedundantStage",
        "code": "REDUNDANT_STAGE",
        "run_id": "run-1",
        "stage_id": "fetch-3",
        "role": "developer",
        "kind": "coding",
        "submission_id": "sub-run-1-fetch-3",
        "field": "evidence_set_hash",
        "declared": esh,
        "recomputed": esh,
        "earlier_stage_id": "fetch-1",
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": 2},
        "occurred_at_ms": 1_700_000_000_123,
        **SENT_BY_UNIT,
    }
    assert outs[1].inner is not None and outs[1].inner["reason_code"] == "REDUNDANT_STAGE"
    assert outs[1].inner["evidence_set_hash"] == esh and outs[1].inner["journal_seq"] == -1
    assert d.state.runs == before.runs
    # the refused stage left no trace: its id is still free, its evidence still names fetch-1
    outs = d.feed(enc_sub(stage_id="fetch-3", pages=[b"new"]))
    assert [o.what for o in outs] == ["journal-entry", "audit"]
    outs = d.feed(enc_sub(stage_id="fetch-4", pages=[b"a", b"b"]))
    assert outs[0].record["earlier_stage_id"] == "fetch-1"


def test_redundancy_is_per_run_and_ignores_empty_evidence_sets() -> None:
    d = Driver()
    assert d.feed(enc_sub(run_id="run-1", stage_id="s1", pages=[b"a"]))[0].what == "journal-entry"
    # the same evidence in another run is new to that run
    assert d.feed(enc_sub(run_id="run-2", stage_id="s1", pages=[b"a"]), key=b"run-2")[0].what == "journal-entry"
    # stages without observations introduce no exogenous signal to repeat: never redundant
    assert d.feed(enc_sub(run_id="run-1", stage_id="plan-1", pages=[]))[0].what == "journal-entry"
    assert d.feed(enc_sub(run_id="run-1", stage_id="plan-2", pages=[]))[0].what == "journal-entry"
    assert d.state.runs["run-1"].entry_count == 3


def test_duplicate_stage_is_refused_even_with_new_evidence() -> None:
    d = Driver()
    d.feed(enc_sub(stage_id="s1", pages=[b"a"]))
    before = copy.deepcopy(d.state)
    outs = d.feed(enc_sub(stage_id="s1", pages=[b"b"], submission_id="again"))
    refusal = outs[0].record
    refusal.pop("message")
    assert refusal == {
        "exception": "ActivityRejected",
        "code": "DUPLICATE_STAGE",
        "run_id": "run-1",
        "stage_id": "s1",
        "role": "developer",
        "kind": "coding",
        "submission_id": "again",
        "field": "stage_id",
        "declared": "s1",
        "recomputed": "",
        "earlier_stage_id": "s1",
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": 1},
        "occurred_at_ms": 1_700_000_000_123,
        **SENT_BY_UNIT,
    }
    assert d.state.runs == before.runs


def test_run_closed_refuses_later_stages_and_a_second_close() -> None:
    d = Driver()
    d.feed(enc_sub(stage_id="s1", pages=[b"a"]))
    outs = d.feed(enc_close())
    assert [o.what for o in outs] == ["seal", "audit", "checkpoint"]
    before = copy.deepcopy(d.state)
    outs = d.feed(enc_sub(stage_id="s2", pages=[b"b"]))
    refusal = outs[0].record
    refusal.pop("message")
    assert refusal == {
        "exception": "ActivityRejected",
        "code": "RUN_CLOSED",
        "run_id": "run-1",
        "stage_id": "s2",
        "role": "developer",
        "kind": "coding",
        "submission_id": "sub-run-1-s2",
        "field": "run_id",
        "declared": "run-1",
        "recomputed": "",
        "earlier_stage_id": None,
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": 2},
        "occurred_at_ms": 1_700_000_000_123,
        **SENT_BY_UNIT,
    }
    outs = d.feed(enc_close())
    assert [o.what for o in outs] == ["refusal", "audit"]
    second = outs[0].record
    assert (second["code"], second["field"], second["submission_id"], second["stage_id"]) == (
        "RUN_CLOSED",
        "run_id",
        "close-run-1",
        "",
    )
    assert second["occurred_at_ms"] == 1_700_000_000_999
    assert {k: second[k] for k in SENT_BY_UNIT} == SENT_BY_UNIT  # a signed close: its sender verified
    assert d.state.runs == before.runs


def test_rule_order_first_failure_wins() -> None:
    """A submission breaking several rules is refused for the first in the documented order."""
    d = Driver()
    bad = {**submission(), "kind": "poetry", "terminal_state": "exploded", "reason_code": "", "artifact": b"changed"}
    assert d.feed(encode_signed_submission(bad))[0].record["code"] == "UNKNOWN_KIND"
    bad = {**submission(), "terminal_state": "exploded", "reason_code": "", "artifact": b"changed"}
    assert d.feed(encode_signed_submission(bad))[0].record["code"] == "UNKNOWN_TERMINAL_STATE"
    bad = {**submission(), "reason_code": "", "artifact": b"changed"}
    assert d.feed(encode_signed_submission(bad))[0].record["code"] == "EMPTY_REASON_CODE"
    bad = {**submission(), "artifact": b"changed", "evidence_set_hash": OTHER_EVIDENCE}
    assert d.feed(encode_signed_submission(bad))[0].record["code"] == "ARTIFACT_HASH_MISMATCH"


# ---------------------------------------------------------------------------
# dead letters
# ---------------------------------------------------------------------------

_UNKNOWN_FP = codec.MAGIC + bytes.fromhex("0123456789abcdef") + VALID_BYTES[codec.HEADER_SIZE :]


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"hello, not avro", DeadLetterCode.NOT_AVRO_SINGLE_OBJECT),
        (b'{"run_id": "run-1"}', DeadLetterCode.NOT_AVRO_SINGLE_OBJECT),
        (codec.MAGIC + b"\x00\x01\x02", DeadLetterCode.NOT_AVRO_SINGLE_OBJECT),  # shorter than a header
        (_UNKNOWN_FP, DeadLetterCode.UNKNOWN_SCHEMA_FINGERPRINT),
        # one of our schemas, but not an input record: refused by fingerprint too
        (codec.encode(codec.JOURNAL_RECORD, {"payload": b"x", "entry_hash": "h"}), DeadLetterCode.UNKNOWN_SCHEMA_FINGERPRINT),
        (VALID_BYTES[:-7], DeadLetterCode.TRUNCATED_OR_MALFORMED_BODY),
        (VALID_BYTES[: codec.HEADER_SIZE + 3], DeadLetterCode.TRUNCATED_OR_MALFORMED_BODY),
        (VALID_BYTES + b"\x00", DeadLetterCode.TRUNCATED_OR_MALFORMED_BODY),
        (codec.default_codec().schema(codec.RUN_CLOSE).header, DeadLetterCode.TRUNCATED_OR_MALFORMED_BODY),
        (b"", DeadLetterCode.EMPTY_VALUE),
        (None, DeadLetterCode.EMPTY_VALUE),
    ],
    ids=[
        "text",
        "json",
        "short-header",
        "unknown-fingerprint",
        "non-input-schema",
        "truncated-tail",
        "truncated-early",
        "trailing-byte",
        "header-only",
        "empty",
        "tombstone",
    ],
)
def test_undecodable_input_becomes_a_dead_letter_and_the_partition_moves_on(raw: bytes | None, code: DeadLetterCode) -> None:
    d = Driver()
    d.feed(enc_sub(stage_id="s0", pages=[b"zero"]))
    before = copy.deepcopy(d.state)
    outs = d.feed(raw, key=b"some-key")
    assert [o.what for o in outs] == ["deadletter", "audit"]
    dead, audit = outs
    detail = dead.record.pop("detail")
    assert detail.strip()
    data = raw or b""
    assert dead.record == {
        "code": code.value,
        "raw_sha256": sha256_digest(data),
        "raw_size": len(data),
        "raw": data,
        "key": b"some-key",
        "key_sha256": sha256_digest(b"some-key"),
        "key_size": 8,
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": 1},
        "record_timestamp_ms": BASE_TS + 7,
    }
    assert dead.raw.key == b"some-key"
    assert dead.raw.headers == expected_headers(1, 0, CE_TYPES["deadletter"])
    check_audit(
        audit,
        seq=1,
        prev_mac=before.audit_head,
        offset=1,
        event="input.deadletter",
        run_id="",
        stage_id="",
        kind="",
        terminal_state="",
        reason_code=code.value,
        artifact_hash="",
        evidence_set_hash="",
        record_hash=sha256_digest(data),
        journal_seq=-1,
    )
    assert d.state.runs == before.runs
    # the next valid submission is journalled as if nothing had happened
    outs = d.feed(enc_sub(stage_id="s1", pages=[b"one"]))
    assert [o.what for o in outs] == ["journal-entry", "audit"]
    assert outs[0].inner is not None and outs[0].inner["seq"] == 1


def test_unknown_fingerprint_dead_letter_names_the_fingerprint() -> None:
    d = Driver()
    outs = d.feed(_UNKNOWN_FP)
    assert "0123456789abcdef" in outs[0].record["detail"]


def test_dead_letter_with_a_null_key_keeps_it_null() -> None:
    d = Driver()
    outs = d.feed(b"junk", key=None)
    assert (outs[0].record["key"], outs[0].record["key_sha256"], outs[0].record["key_size"]) == (None, "", 0)
    assert outs[0].raw.key == b""


# ---------------------------------------------------------------------------
# seals
# ---------------------------------------------------------------------------


def _check_seal(
    out: Out,
    *,
    run_id: str,
    entry_count: int,
    head: str,
    offset: int,
    final: bool,
    audit_seq: int,
    audit_head: str,
    closed_by: dict[str, Any] | None = None,
) -> None:
    assert out.what == "seal"
    assert out.record["key_id"] == SIGNER.key_id
    assert verify_signature(SIGNER.public_key_raw, out.record["signature"], seal_signing_input(out.record["payload"]))
    assert out.inner == {
        "run_id": run_id,
        "partition": PARTITION,
        "entry_count": entry_count,
        "head_hash": head,
        "last_input_offset": offset,
        "final": final,
        "audit_seq": audit_seq,
        "audit_head": audit_head,
        "sealed_at_ms": BASE_TS + 7 * offset,
        "closed_by": closed_by,
    }
    assert out.raw.key == run_id.encode()
    assert out.raw.timestamp_ms == BASE_TS + 7 * offset


def test_periodic_seal_every_n_entries_per_run_and_final_seal_on_close() -> None:
    d = Driver(seal_every=3)
    seals: list[tuple[int, Out, Out]] = []
    for i in range(8):
        run_id = "run-a" if i < 7 else "run-b"
        offset = d.offset
        outs = d.feed(enc_sub(run_id=run_id, stage_id=f"s{i}", pages=[f"p{i}".encode()]), key=run_id.encode())
        if len(outs) == 4:
            assert [o.what for o in outs] == ["journal-entry", "audit", "seal", "audit"]
            seals.append((offset, outs[0], outs[2]))
            journal_audit, seal_audit = outs[1], outs[3]
            entry = outs[0]
            assert entry.inner is not None
            _check_seal(
                outs[2],
                run_id=run_id,
                entry_count=entry.inner["seq"] + 1,
                head=entry.record["entry_hash"],
                offset=offset,
                final=False,
                audit_seq=journal_audit.inner["seq"] + 1,
                audit_head=journal_audit.record["mac"],
            )
            assert seal_audit.inner is not None
            assert seal_audit.inner["event"] == "run.sealed"
            assert seal_audit.inner["reason_code"] == "periodic"
            assert seal_audit.inner["journal_seq"] == entry.inner["seq"] + 1
            assert seal_audit.inner["record_hash"] == sha256_digest(outs[2].raw.value)
            assert seal_audit.inner["seq"] == outs[2].inner["audit_seq"]
            assert outs[2].raw.headers == expected_headers(offset, 2, CE_TYPES["seal"])
        else:
            assert [o.what for o in outs] == ["journal-entry", "audit"]
    # run-a: 7 entries -> seals after the 3rd and the 6th; run-b: 1 entry -> none
    assert [(offset, entry.inner["seq"]) for offset, entry, _ in seals] == [(2, 2), (5, 5)]
    assert d.state.runs["run-a"].sealed_count == 6

    offset = d.offset
    head = d.state.runs["run-a"].head
    audit_seq, audit_head = d.state.audit_seq, d.state.audit_head
    outs = d.feed(enc_close("run-a"), key=b"run-a")
    assert [o.what for o in outs] == ["seal", "audit", "checkpoint"]
    close = signed_close(run_close("run-a"))
    _check_seal(
        outs[0],
        run_id="run-a",
        entry_count=7,
        head=head,
        offset=offset,
        final=True,
        audit_seq=audit_seq,
        audit_head=audit_head,
        # the final seal of a signed RunClose.v2 keeps who closed the run, with the proof (RunSeal.v2)
        closed_by={
            "submission_id": "close-run-a",
            "producer_id": "unit@test",
            "occurred_at_ms": 1_700_000_000_999,
            "key_id": producer_signer("unit@test").key_id,
            "signature": close["producer_signature"],
        },
    )
    assert outs[1].inner is not None and outs[1].inner["reason_code"] == "final" and outs[1].inner["seq"] == audit_seq
    assert d.state.runs["run-a"].closed and d.state.runs["run-a"].sealed_count == 7
    assert not d.state.runs["run-b"].closed


def test_closing_a_run_with_nothing_to_seal_is_refused_and_makes_no_state() -> None:
    """Security review F6: each signed close of a fresh run id was a seal, an audit record, a checkpoint and a state
    entry kept for good. A run with no journal entry (unknown, or only refused stages) has nothing to seal."""
    d = Driver()
    outs = d.feed(enc_close("never-started"), key=b"never-started")
    assert [o.what for o in outs] == ["refusal", "audit"]
    assert (outs[0].record["code"], outs[0].record["field"], outs[0].record["declared"]) == (
        "RUN_EMPTY",
        "run_id",
        "never-started",
    )
    assert outs[0].record["message"] == "run 'never-started' has no journal entry to seal; close a run after its first stage"
    assert "never-started" not in d.state.runs
    d.feed(enc_sub(run_id="refused-only", role="ghost-role"), key=b"refused-only")  # refused: still nothing to seal
    assert [o.what for o in d.feed(enc_close("refused-only"), key=b"refused-only")] == ["refusal", "audit"]


# ---------------------------------------------------------------------------
# the audit chain, recovery, determinism
# ---------------------------------------------------------------------------


def test_audit_chain_counts_from_zero_and_links_every_record() -> None:
    d = run_all(mixed_inputs())
    audits = [decode_out(o) for o in d.outputs if o.stream is Stream.AUDIT]
    prev = audit_genesis(AUDIT_KEY, PARTITION)
    for seq, audit in enumerate(audits):
        assert audit.inner is not None
        assert audit.inner["seq"] == seq
        assert audit.inner["prev_mac"] == prev
        assert audit.record["mac"] == audit_record_mac(AUDIT_KEY, audit.record["key_id"], audit.record["payload"])
        prev = audit.record["mac"]
    assert (d.state.audit_seq, d.state.audit_head) == (len(audits), prev)
    # one audit record per crossing: every non-audit output is mirrored exactly once, in order
    others = [decode_out(o) for o in d.outputs if o.stream not in (Stream.AUDIT, Stream.CHECKPOINTS)]
    assert len(others) == len(audits)
    for other, audit in zip(others, audits, strict=True):
        assert audit.inner is not None
        expected_hash = other.record["entry_hash"] if other.what == "journal-entry" else sha256_digest(other.raw.value)
        if other.what == "deadletter":
            expected_hash = other.record["raw_sha256"]
        assert audit.inner["record_hash"] == expected_hash
    # every output's kinds
    counts: dict[str, int] = {}
    for other in others:
        counts[other.what] = counts.get(other.what, 0) + 1
    assert counts == {"journal-entry": 22, "seal": 7, "refusal": 6, "deadletter": 3}


def test_rebuild_from_outputs_equals_the_live_state() -> None:
    d = run_all(mixed_inputs())
    rebuilt = d.rebuilt()
    assert rebuilt == d.state
    assert rebuilt.runs["run-b"].closed and rebuilt.runs["run-a"].closed and not rebuilt.runs["run-c"].closed
    assert rebuilt.runs["run-a"].evidence == d.state.runs["run-a"].evidence
    # nothing written yet: the initial state
    assert rebuild_state(d.config, PARTITION, [], []) == initial_state(d.config, PARTITION)


def test_a_crash_after_any_record_resumes_to_byte_identical_outputs() -> None:
    """Rebuilding from the outputs written so far and continuing equals never stopping."""
    inputs = mixed_inputs()
    whole = run_all(inputs)
    for cut in range(len(inputs) + 1):
        first = run_all(inputs[:cut])
        resumed = Driver(seal_every=4)
        resumed.state = first.rebuilt()
        assert resumed.state == first.state, cut
        resumed.offset = cut
        for key, value in inputs[cut:]:
            resumed.feed(value, key=key)
        assert first.outputs + resumed.outputs == whole.outputs, cut


def test_rebuild_refuses_outputs_that_do_not_recompute() -> None:
    d = run_all(mixed_inputs())
    journal, audits = d.journal_values(), d.audit_values()
    envelope = codec.decode(journal[1]).record
    forged = codec.encode(codec.JOURNAL_RECORD, {**envelope, "entry_hash": sha256_digest(b"forged")})
    with pytest.raises(StateCorrupted, match="does not recompute its entry_hash"):  # an edited record the audit mirrors
        rebuild_state(d.config, PARTITION, [journal[0], forged, *journal[2:]], audits)
    with pytest.raises(StateCorrupted, match="that the journal does not hold") as caught:  # a deleted entry
        rebuild_state(d.config, PARTITION, [journal[0], *journal[2:]], audits)
    assert caught.value.topic == "audit" and "bernstein scheduler run" not in str(caught.value)
    # a changed audit key: no audit record verifies, the rebuild stops instead of starting a second chain
    rekeyed = dataclasses.replace(d.config, audit_key=b"k" * 32)
    with pytest.raises(
        StateCorrupted, match=rf"audit\[{PARTITION}\] record #0 \(offset not given\): none of the {len(audits)} audit"
    ):
        rebuild_state(rekeyed, PARTITION, journal, audits)


def test_same_inputs_give_byte_identical_outputs() -> None:
    inputs = mixed_inputs()
    first = run_all(inputs)
    # a second core built from the same key material (not the same objects)
    second = Driver(seal_every=4)
    second.config = SchedulerConfig(
        roles=dict(ROLES),
        signer=Ed25519Signer.from_seed(bytes(range(32))),
        audit_key=bytes(AUDIT_KEY),
        audit_key_id=hmac_key_id(AUDIT_KEY),
        seal_every=4,
        producers=UNIT_PRODUCERS,
    )
    second.core = SchedulerCore(second.config)
    second.state = initial_state(second.config, PARTITION)
    for key, value in inputs:
        second.feed(value, key=key)
    assert first.outputs == second.outputs
    assert [(o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in first.outputs] == [
        (o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in second.outputs
    ]
    assert first.state == second.state


def test_outputs_depend_on_the_keys_and_the_partition() -> None:
    """Determinism is not constancy: another audit key or partition gives another chain."""
    inputs = mixed_inputs()[:3]
    base = run_all(inputs)
    other = Driver(seal_every=4)
    other.config = SchedulerConfig(
        roles=ROLES,
        signer=SIGNER,
        audit_key=b"another audit key!",
        audit_key_id=hmac_key_id(b"another audit key!"),
        seal_every=4,
        producers=UNIT_PRODUCERS,
    )
    other.core = SchedulerCore(other.config)
    other.state = initial_state(other.config, PARTITION)
    for key, value in inputs:
        other.feed(value, key=key)
    assert [o.value for o in base.outputs if o.stream is Stream.JOURNAL] == [
        o.value for o in other.outputs if o.stream is Stream.JOURNAL
    ]
    assert [o.value for o in base.outputs if o.stream is Stream.AUDIT] != [
        o.value for o in other.outputs if o.stream is Stream.AUDIT
    ]


# ---------------------------------------------------------------------------
# bounds: the record key, repeated submission ids, output size, nesting
# ---------------------------------------------------------------------------


def _refusal_fields(out: Out) -> dict[str, Any]:
    record = dict(out.record)
    record.pop("input")
    return record


@pytest.mark.parametrize(
    "key",
    [None, b"", b"run-2", b"RUN-1", b"run-1\x00", b"k" * 1_100_000],
    ids=["none", "empty", "other-run", "case", "nul", "1.1MB"],
)
def test_a_record_not_keyed_by_its_run_id_is_refused_and_keyed_by_the_run_id(key: bytes | None) -> None:
    d = Driver()
    d.feed(enc_sub(stage_id="accepted-0", pages=[b"first"]))
    before = copy.deepcopy(d.state)
    run_digest = sha256_digest(b"run-1")
    declared = "" if key is None else sha256_digest(key)
    if key is None:
        message = f"the record has no key; a record of run 'run-1' ({run_digest}) must be keyed by its run id"
    else:
        message = (
            f"the record key ({len(key)} bytes, {declared}) is not the run id 'run-1' ({run_digest}): "
            "a record must be keyed by its run id"
        )
    outs = d.feed(enc_sub(stage_id="s1", pages=[b"one"]), key=key)
    assert [o.what for o in outs] == ["refusal", "audit"]
    assert _refusal_fields(outs[0]) == {
        "exception": "ActivityRejected",
        "code": "RUN_KEY_MISMATCH",
        "message": message,
        "run_id": "run-1",
        "stage_id": "s1",
        "role": "developer",
        "kind": "coding",
        "submission_id": "sub-run-1-s1",
        "field": "key",
        "declared": declared,
        "recomputed": run_digest,
        "earlier_stage_id": None,
        "occurred_at_ms": 1_700_000_000_123,
        **CLAIMED_BY_UNIT,
    }
    assert outs[0].raw.key == b"run-1"
    assert len(outs[0].raw.value) < 2048 and len(outs[1].raw.value) < 2048
    assert d.state.runs == before.runs
    # a RunClose keyed elsewhere closes nothing
    outs = d.feed(enc_close(), key=key)
    assert outs[0].what == "refusal" and outs[0].record["code"] == "RUN_KEY_MISMATCH"
    assert not d.state.runs["run-1"].closed
    # the same submission keyed by its run id is journalled
    assert d.feed(enc_sub(stage_id="s1", pages=[b"one"]))[0].what == "journal-entry"


def test_a_repeated_submission_id_is_refused_naming_the_earlier_stage_and_survives_a_rebuild() -> None:
    d = Driver()
    first = enc_sub(stage_id="s0", pages=[b"zero"], submission_id="retry-me")
    assert d.feed(first)[0].what == "journal-entry"
    # a retried publish (the same bytes) is journalled once
    outs = d.feed(first)
    assert [o.what for o in outs] == ["refusal", "audit"]
    assert _refusal_fields(outs[0]) == {
        "exception": "ActivityRejected",
        "code": "DUPLICATE_SUBMISSION",
        "message": "submission_id 'retry-me' was already journalled in run 'run-1' (stage 's0'); "
        "a repeated submission is journalled once",
        "run_id": "run-1",
        "stage_id": "s0",
        "role": "developer",
        "kind": "coding",
        "submission_id": "retry-me",
        "field": "submission_id",
        "declared": "retry-me",
        "recomputed": "",
        "earlier_stage_id": "s0",
        "occurred_at_ms": 1_700_000_000_123,
        **SENT_BY_UNIT,
    }
    assert outs[1].inner is not None and outs[1].inner["reason_code"] == "DUPLICATE_SUBMISSION"
    # the id, not the stage: another stage under the same id is refused too
    assert d.feed(enc_sub(stage_id="s1", pages=[b"one"], submission_id="retry-me"))[0].record["earlier_stage_id"] == "s0"
    # a refused submission's id is not remembered: corrected, it is accepted under the same id
    assert d.feed(enc_sub(stage_id="s2", role="ghost", submission_id="fixed-later"))[0].record["code"] == "UNKNOWN_ROLE"
    assert d.feed(enc_sub(stage_id="s2", pages=[b"two"], submission_id="fixed-later"))[0].what == "journal-entry"
    # per run
    assert d.feed(enc_sub(run_id="run-2", stage_id="s0", submission_id="retry-me"), key=b"run-2")[0].what == "journal-entry"
    assert d.state.runs["run-1"].submissions == {"retry-me": "s0", "fixed-later": "s2"}
    rebuilt = d.rebuilt()
    assert rebuilt.runs["run-1"].submissions == {"retry-me": "s0", "fixed-later": "s2"}
    assert rebuilt == d.state
    # after a restart the retry is still refused
    resumed = Driver()
    resumed.state, resumed.offset = rebuilt, d.offset
    assert resumed.feed(first)[0].record["code"] == "DUPLICATE_SUBMISSION"


def _big_submission(count: int) -> dict[str, Any]:
    observations: list[dict[str, Any]] = [
        {"kind": "page", "ref": "r" * 4000, "content_hash": sha256_digest(b"%d" % i), "size": len(b"%d" % i)}
        for i in range(count)
    ]
    return {
        **submission(stage_id="big"),
        "observations": observations,
        "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in observations),
    }


def test_an_output_over_max_output_bytes_is_replaced_by_a_dead_letter_by_digest_and_size() -> None:
    limit = 64 * 1024
    d = Driver()
    d.config = SchedulerConfig(
        roles=ROLES,
        signer=SIGNER,
        audit_key=AUDIT_KEY,
        audit_key_id=hmac_key_id(AUDIT_KEY),
        max_output_bytes=limit,
        producers=UNIT_PRODUCERS,
    )
    d.core = SchedulerCore(d.config)
    value = encode_signed_submission(_big_submission(20))
    assert len(value) > limit
    outs = d.feed(value)
    assert [o.what for o in outs] == ["deadletter", "audit"]
    journal = Driver().feed(value)[0].raw  # what the journal record would have been, without the limit
    size = len(journal.key) + len(journal.value) + sum(len(n) + len(v) for n, v in journal.headers)
    assert outs[0].record.pop("detail") == (
        f"the journal record would be {size} bytes with its key and headers; the limit (max_output_bytes) is 65536"
    )
    assert outs[0].record == {
        "code": "OUTPUT_TOO_LARGE",
        "raw_sha256": sha256_digest(value),
        "raw_size": len(value),
        "raw": b"",  # it would not fit either
        "key": b"run-1",
        "key_sha256": sha256_digest(b"run-1"),
        "key_size": 5,
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": 0},
        "record_timestamp_ms": BASE_TS,
    }
    assert d.state.runs == {}  # nothing of the run was remembered
    for out in d.outputs:
        assert (
            len(out.raw.key if isinstance(out, Out) else out.key) + len(out.value) + sum(len(n) + len(v) for n, v in out.headers)
            <= limit
        )
    # the records behind it are journalled
    outs = d.feed(encode_signed_submission(_big_submission(14)))
    assert [o.what for o in outs] == ["journal-entry", "audit"]
    assert outs[0].inner is not None and outs[0].inner["seq"] == 0
    assert d.rebuilt() == d.state
    with pytest.raises(ValueError, match="max_output_bytes"):
        SchedulerCore(SchedulerConfig(roles=ROLES, signer=SIGNER, audit_key=AUDIT_KEY, audit_key_id="k", max_output_bytes=1000))


def test_the_default_output_limit_leaves_room_for_kafkas_framing() -> None:
    assert make_config().max_output_bytes == 2 * 1024 * 1024 - 16 * 1024


def test_a_dead_letter_keeps_the_digest_size_and_first_kilobyte_of_a_huge_key() -> None:
    d = Driver()
    key = bytes(range(256)) * 4400  # 1.1 MB
    outs = d.feed(b"junk", key=key)
    assert [o.what for o in outs] == ["deadletter", "audit"]
    dead = outs[0].record
    assert (dead["key"], dead["key_sha256"], dead["key_size"]) == (key[:1024], sha256_digest(key), len(key))
    assert outs[0].raw.key == b""
    assert len(outs[0].raw.value) < 2048
    outs = d.feed(b"junk", key=b"k" * 1024)
    assert (outs[0].record["key"], outs[0].raw.key) == (b"k" * 1024, b"k" * 1024)


def test_reject_dead_letters_one_record_with_the_given_code() -> None:
    d = Driver()
    d.feed(enc_sub(stage_id="s0", pages=[b"zero"]))
    before = copy.deepcopy(d.state)
    value = enc_sub(stage_id="s1", pages=[b"one"])
    d.state, outputs = d.core.reject(d.state, record(1, value), DeadLetterCode.PRODUCE_REJECTED, "Broker: Message size too large")
    outs = [decode_out(o) for o in outputs]
    assert [o.what for o in outs] == ["deadletter", "audit"]
    assert outs[0].record == {
        "code": "PRODUCE_REJECTED",
        "detail": "Broker: Message size too large",
        "raw_sha256": sha256_digest(value),
        "raw_size": len(value),
        "raw": value,
        "key": b"run-1",
        "key_sha256": sha256_digest(b"run-1"),
        "key_size": 5,
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": 1},
        "record_timestamp_ms": BASE_TS + 7,
    }
    assert outs[0].raw.headers == expected_headers(1, 0, CE_TYPES["deadletter"])
    assert outs[1].inner is not None and outs[1].inner["reason_code"] == "PRODUCE_REJECTED"
    assert d.state.runs == before.runs and d.state.audit_seq == before.audit_seq + 1


def test_a_deeply_nested_browser_artifact_is_refused_with_a_typed_code() -> None:
    d = Driver()
    for artifact in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 65 + b"1" + b"}" * 65):
        outs = d.feed(enc_sub(role="navigator", kind="browser", stage_id="b0", artifact=artifact))
        assert [o.what for o in outs] == ["refusal", "audit"]
        fields = _refusal_fields(outs[0])
        assert (fields["code"], fields["field"], fields["declared"], fields["recomputed"]) == (
            "JSON_TOO_DEEP",
            "artifact",
            "",
            "64",
        )
        assert fields["message"] == "artifact nests JSON arrays and objects deeper than 64 levels"
    # 64 levels parse (and are then refused for what they say, not for their depth)
    outs = d.feed(enc_sub(role="navigator", kind="browser", stage_id="b0", artifact=b"[" * 64 + b"]" * 64))
    assert outs[0].record["code"] == "BROWSER_SESSION_MISMATCH"


def test_lineage_entries_are_bounded_in_size_and_depth() -> None:
    d = Driver()
    outs = d.feed(cu_action(entry_suffix=b',"zz":"' + b"p" * MAX_LINEAGE_ENTRY_BYTES + b'"'))
    fields = _refusal_fields(outs[0])
    size = int(fields["declared"])
    assert size > MAX_LINEAGE_ENTRY_BYTES
    assert (fields["code"], fields["field"], fields["recomputed"]) == ("LINEAGE_TOO_LARGE", "lineage.entry", "32768")
    assert fields["message"] == f"lineage entry has {size} bytes; the limit is 32768"
    outs = d.feed(cu_action(entry_suffix=b',"zz":' + b"[" * 5000 + b"]" * 5000))
    fields = _refusal_fields(outs[0])
    assert (fields["code"], fields["field"], fields["message"]) == (
        "JSON_TOO_DEEP",
        "lineage.entry",
        "lineage.entry nests JSON arrays and objects deeper than 64 levels",
    )
    # the plain action is journalled, and its submission id remembered
    outs = d.feed(cu_action())
    assert outs[0].what == "journal-entry"
    assert d.state.runs["run-1"].submissions == {"action-0": "browser-0"}
    assert d.feed(cu_action())[0].record["code"] == "DUPLICATE_SUBMISSION"
    assert d.rebuilt() == d.state


LINEAGE_KEY = b"navigator's own lineage key".ljust(32, b".")
"""A producer-held lineage envelope key: the scheduler does not hold it, so it checks only the envelope's form."""
LINEAGE_CASES: dict[str, tuple[dict[str, Any], tuple[str, str, str, str] | None]] = {
    "registered-key": ({}, None),
    "own-lineage-key": (
        {"hmac_key_id": hmac_key_id(LINEAGE_KEY), "hmac_key": LINEAGE_KEY},
        None,
    ),
    "own-lineage-key-malformed-envelope": (
        {"hmac_key_id": hmac_key_id(LINEAGE_KEY), "hmac": "hmac-sha256:" + "AB" * 32},
        ("LINEAGE_HMAC_INVALID", "lineage.hmac", "hmac-sha256:" + "AB" * 32, ""),
    ),
    "legacy-audit-key-envelope": ({"hmac_key_id": hmac_key_id(AUDIT_KEY)}, None),
    "legacy-audit-key-envelope-wrong": (
        {"hmac_key_id": hmac_key_id(AUDIT_KEY), "hmac_key": LINEAGE_KEY},
        ("LINEAGE_HMAC_INVALID", "lineage.hmac", "<mac>", ""),
    ),
    "the-scheduler-seal-key-is-no-producer-key": (
        {"signer": SIGNER},
        ("LINEAGE_KEY_NOT_PINNED", "lineage.key_id", SIGNER.key_id, ""),
    ),
    "unknown-key": ({"signer": OUTSIDER}, ("LINEAGE_KEY_NOT_PINNED", "lineage.key_id", OUTSIDER.key_id, "")),
    "another-producers-key": (
        {"signer": producer_signer("coder@test")},
        ("PRODUCER_MISMATCH", "producer.id", "navigator@test", "coder@test"),
    ),
    "retired-key": (
        {"signer": producer_signer("retired@test"), "worker": "retired@test"},
        ("PRODUCER_KEY_NOT_VALID", "lineage.key_id", str(BASE_TS), f"[0, {BASE_TS})"),
    ),
    "not-granted-browser": (
        {"signer": producer_signer("scout@test"), "worker": "scout@test"},
        ("PRODUCER_ROLE_NOT_ALLOWED", "kind", "browser", "research"),
    ),
}


@pytest.mark.parametrize("name", sorted(LINEAGE_CASES))
def test_a_computer_use_action_is_signed_by_a_registered_producer_key(name: str) -> None:
    """The lineage signature is the producer's: registered key, its own producer, valid now, granted browser."""
    changes, expected = LINEAGE_CASES[name]
    d = Driver()
    value = cu_action(**changes)
    outs = d.feed(value)
    if expected is None:
        assert [o.what for o in outs] == ["journal-entry", "audit"]
        return
    code, field, declared, recomputed = expected
    fields = _refusal_fields(outs[0])
    lineage_hmac_value = codec.decode(value).record["lineage"]["hmac"]
    assert (fields["code"], fields["field"], fields["declared"], fields["recomputed"]) == (
        code,
        field,
        lineage_hmac_value if declared == "<mac>" else declared,
        recomputed,
    )
    assert d.state.runs == {}


def test_run_closes_are_signed_like_submissions() -> None:
    d = Driver()
    d.feed(enc_sub(stage_id="s0", pages=[b"zero"]))
    unsigned = d.feed(codec.encode(codec.RUN_CLOSE, run_close()))
    assert (
        _refusal_fields(unsigned[0])["code"],
        unsigned[0].record["field"],
        unsigned[0].record["declared"],
        unsigned[0].record["recomputed"],
    ) == ("SUBMISSION_UNSIGNED", "producer_signature", codec.RUN_CLOSE, codec.RUN_CLOSE_V2)
    forged = d.feed(codec.encode(codec.RUN_CLOSE_V2, {**signed_close(run_close()), "run_id": "run-1", "occurred_at_ms": 5}))
    assert (forged[0].record["code"], forged[0].record["field"]) == ("SUBMISSION_SIGNATURE_INVALID", "producer_signature")
    outsider = d.feed(encode_signed_close(run_close(), OUTSIDER))
    assert (outsider[0].record["code"], outsider[0].record["declared"]) == ("PRODUCER_KEY_UNKNOWN", OUTSIDER.key_id)
    assert not d.state.runs["run-1"].closed
    outs = d.feed(enc_close())
    assert [o.what for o in outs] == ["seal", "audit", "checkpoint"]
    assert outs[0].inner["closed_by"]["key_id"] == producer_signer("unit@test").key_id
    closed = d.state.run("run-1")
    assert closed is not None and closed.closed
    assert d.rebuilt() == d.state


# ---------------------------------------------------------------------------
# key rotation: the key of each output follows its input's timestamp
# ---------------------------------------------------------------------------


def test_outputs_are_signed_and_maced_with_the_key_valid_at_their_inputs_timestamp() -> None:
    d = rotated_driver()
    seen: list[tuple[int, str, str]] = []
    for i in range(6):
        for out in d.feed(enc_sub(stage_id=f"s{i}", pages=[b"%d" % i]) if i < 5 else enc_close()):
            if out.what in ("audit", "seal", "checkpoint"):
                seen.append((i, out.what, out.record["key_id"]))
                if out.what == "audit":
                    secret = OLD_AUDIT if i < 3 else NEW_AUDIT
                    assert out.record["mac"] == audit_record_mac(secret, out.record["key_id"], out.record["payload"])
                else:
                    signer = OLD_SEAL if i < 3 else NEW_SEAL
                    signing = seal_signing_input if out.what == "seal" else checkpoint_signing_input
                    assert verify_signature(signer.public_key_raw, out.record["signature"], signing(out.record["payload"]))
    old_a, new_a = hmac_key_id(OLD_AUDIT), hmac_key_id(NEW_AUDIT)
    assert seen == [
        (0, "audit", old_a),
        (1, "audit", old_a),
        (1, "seal", OLD_SEAL.key_id),
        (1, "audit", old_a),
        (2, "audit", old_a),
        (3, "audit", new_a),
        (3, "seal", NEW_SEAL.key_id),
        (3, "audit", new_a),
        (4, "audit", new_a),
        (5, "seal", NEW_SEAL.key_id),
        (5, "audit", new_a),
        (5, "checkpoint", NEW_SEAL.key_id),
    ]
    # the chain runs on across the rotation: the first record under the new key follows the last under the old
    audits = [decode_out(o) for o in d.outputs if o.stream is Stream.AUDIT]
    assert audits[0].inner["prev_mac"] == audit_genesis(OLD_AUDIT, PARTITION)
    assert all(b.inner["prev_mac"] == a.record["mac"] for a, b in zip(audits, audits[1:], strict=False))
    # a replay picks the same keys: byte-identical outputs
    again = rotated_driver()
    for i in range(6):
        again.feed(enc_sub(stage_id=f"s{i}", pages=[b"%d" % i]) if i < 5 else enc_close())
    assert again.outputs == d.outputs


def test_a_partitions_audit_genesis_uses_the_key_of_its_first_audit_record() -> None:
    d = rotated_driver()
    d.offset = 5  # the partition's first input is stamped after the rotation
    outs = d.feed(enc_sub())
    assert outs[1].record["key_id"] == hmac_key_id(NEW_AUDIT)
    assert outs[1].inner["prev_mac"] == audit_genesis(NEW_AUDIT, PARTITION)
    assert d.rebuilt() == d.state


def test_the_scheduler_restarts_across_a_rotation() -> None:
    """Rebuild checks records MACed and signed before the rotation under the retired keys of the ring."""
    d = rotated_driver()
    for i in range(6):
        d.feed(enc_sub(stage_id=f"s{i}", pages=[b"%d" % i]) if i < 5 else enc_close())
    assert d.state.checkpoint_seq == 1
    assert d.rebuilt() == d.state
    # a scheduler that lost the retired keys cannot vouch for the records they MACed
    newest_only = dataclasses.replace(d.config, seal_keys=(d.config.seal_keys[1],), audit_keys=(d.config.audit_keys[1],))
    with pytest.raises(StateCorrupted, match=r"none of the \d+ audit records verifies"):
        rebuild_state(newest_only, PARTITION, d.journal_values(), d.audit_values(), checkpoint_values=d.checkpoint_values())
    # the restarted scheduler goes on with the new keys, byte for byte what the live one writes
    live = copy.deepcopy(d.state)
    restarted = d.rebuilt()
    value = enc_sub(stage_id="after-restart", pages=[b"r"])
    rec = record(d.offset, value)
    assert d.core.step(restarted, rec)[1] == d.core.step(live, rec)[1]


def test_a_browser_stage_document_with_a_huge_head_anchor_is_refused_with_a_bounded_message() -> None:
    d = Driver()
    artifact = canonical_json(
        {"format": BROWSER_SESSION_FORMAT, "session_id": "b0", "head_anchor": "h" * 400_000, "action_count": 0}
    )
    outs = d.feed(enc_sub(role="navigator", kind="browser", stage_id="b0", artifact=artifact))
    assert outs[0].record["code"] == "BROWSER_SESSION_MISMATCH"
    assert len(outs[0].record["message"]) < 400


# ---------------------------------------------------------------------------
# the rebuild names what it cannot vouch for
# ---------------------------------------------------------------------------


def test_rebuild_errors_name_the_topic_partition_and_offset_and_what_to_do() -> None:
    d = run_all(mixed_inputs())
    journal = list(enumerate(d.journal_values(), start=100))
    audits = d.audit_values()
    forged = codec.encode(codec.JOURNAL_RECORD, {**codec.decode(journal[1][1]).record, "entry_hash": sha256_digest(b"forged")})
    with pytest.raises(StateCorrupted) as caught:
        rebuild_state(d.config, PARTITION, [journal[0], (101, forged), *journal[2:]], audits, journal_topic="p.activity.journal")
    error = caught.value
    assert (error.topic, error.partition, error.offset) == ("p.activity.journal", PARTITION, 101)
    assert str(error).startswith(
        f"p.activity.journal[{PARTITION}]@101: journal entry seq 0 of run 'run-b' does not recompute its entry_hash. "
    )
    assert f"kcat -C -t p.activity.journal -p {PARTITION} -o 101 -c 1" in str(error)
    assert f"--partition {PARTITION} --quarantine 101" in str(error)
    # without offsets the record's index is named instead
    with pytest.raises(StateCorrupted, match=r"record #1 \(offset not given\)"):
        rebuild_state(d.config, PARTITION, [journal[0][1], forged], audits)
    # garbage, a tombstone: no audit record mirrors them; named, not adopted, no stop
    for bad in (b"", b"garbage"):
        skipped: list[Skipped] = []
        assert rebuild_state(d.config, PARTITION, [(7, bad)], [], report=skipped.append) == initial_state(d.config, PARTITION)
        assert [(s.topic, s.offset) for s in skipped] == [("journal", 7)]
        assert str(skipped[0]).startswith(f"journal[{PARTITION}]@7: the journal record does not decode")
    # an operator who quarantined the edited record gets the state back
    assert rebuild_state(
        d.config,
        PARTITION,
        [*journal[:1], (555, forged), *journal[1:]],
        audits,
        quarantined={555},
        checkpoint_values=d.checkpoint_values(),
    ) == (d.state)


def test_rebuild_checks_every_seals_signature() -> None:
    d = run_all(mixed_inputs())
    journal, audits = d.journal_values(), d.audit_values()
    seal_index = next(i for i, v in enumerate(journal) if codec.decode(v).schema.name == codec.SEAL_RECORD)
    envelope = codec.decode(journal[seal_index]).record
    forged = codec.encode(codec.SEAL_RECORD, {**envelope, "signature": bytes(64)})
    other = Ed25519Signer.from_seed(bytes(range(1, 33)))
    payload = envelope["payload"]
    resigned = codec.encode(
        codec.SEAL_RECORD, {"payload": payload, "key_id": other.key_id, "signature": other.sign(seal_signing_input(payload))}
    )
    for bad in (forged, resigned):
        # appended next to the genuine seal: not mirrored, named, not adopted
        skipped: list[Skipped] = []
        rebuilt = rebuild_state(
            d.config,
            PARTITION,
            [*journal[: seal_index + 1], bad, *journal[seal_index + 1 :]],
            audits,
            checkpoint_values=d.checkpoint_values(),
            report=skipped.append,
        )
        assert rebuilt == d.state
        assert [(s.topic, s.index) for s in skipped] == [("journal", seal_index + 1)]
        assert "no audit record this scheduler wrote mirrors it" in skipped[0].problem
        # in place of the genuine seal: the audit record that mirrors the seal names the loss
        with pytest.raises(StateCorrupted, match="that the journal does not hold"):
            rebuild_state(d.config, PARTITION, [*journal[:seal_index], bad, *journal[seal_index + 1 :]], audits)
    # a changed signing key: the genuine seal the audit mirrors is not this scheduler's
    with pytest.raises(StateCorrupted, match="not by this scheduler's key") as caught:
        rebuild_state(dataclasses.replace(d.config, signer=other), PARTITION, journal, audits)
    assert caught.value.index == seal_index


def _forged_entry(run_id: str, stage_id: str, submission_id: str, pages: list[bytes]) -> bytes:
    """A journal entry anyone can compute: the right hash and chain link after stage s0, but this scheduler never wrote it."""
    attacker = Driver()
    attacker.feed(enc_sub(run_id=run_id, stage_id="s0", pages=[b"p0"]), key=run_id.encode())
    attacker.feed(enc_sub(run_id=run_id, stage_id=stage_id, pages=pages, submission_id=submission_id), key=run_id.encode())
    return attacker.journal_values()[-1]


def test_a_forged_journal_entry_is_not_adopted_and_the_genuine_submission_is_journalled() -> None:
    """Review H: an entry's hash and chain link are not keyed; only an audit record's MAC vouches for it."""
    forged = _forged_entry("run-1", "s1", "sub-s1", [b"forged", b"x" * 100])
    genuine_s1 = enc_sub(run_id="run-1", stage_id="s1", pages=[b"genuine"], submission_id="sub-s1")
    # appended after the scheduler's records: named, not adopted; the genuine submission then is journalled
    d = Driver()
    d.feed(enc_sub(run_id="run-1", stage_id="s0", pages=[b"p0"]))
    skipped: list[Skipped] = []
    journal = [*enumerate(d.journal_values()), (1, forged)]
    rebuilt = rebuild_state(d.config, PARTITION, journal, list(enumerate(d.audit_values())), report=skipped.append)
    assert rebuilt == d.state
    assert [str(s).split(":")[0] for s in skipped] == [f"journal[{PARTITION}]@1"]
    assert "no audit record this scheduler wrote mirrors it (run 'run-1', seq 1, sha256:" in skipped[0].problem
    # the native core loads the same rebuilt state and writes the same bytes for the genuine submission
    native = NativeSchedulerCore(d.config, PARTITION, self_check=False)
    _, native_outs = native.step(copy.deepcopy(rebuilt), record(d.offset, genuine_s1))
    d.state = rebuilt
    outs = d.feed(genuine_s1)
    assert [o.value for o in native_outs] == [o.raw.value for o in outs]
    assert [o.what for o in outs] == ["journal-entry", "audit"]
    assert outs[0].inner is not None and (outs[0].inner["seq"], outs[0].inner["submission_id"]) == (1, "sub-s1")
    # the concurrent variant: forged at seq 1 first, the scheduler's genuine seq 1 written after it
    live = Driver()
    live.feed(enc_sub(run_id="run-1", stage_id="s0", pages=[b"p0"]))
    live.feed(genuine_s1)
    j0, j1 = live.journal_values()
    skipped = []
    rebuilt = rebuild_state(
        live.config, PARTITION, [(0, j0), (1, forged), (2, j1)], list(enumerate(live.audit_values())), report=skipped.append
    )
    assert rebuilt == live.state
    assert [(s.topic, s.offset) for s in skipped] == [("journal", 1)]


def test_garbage_and_forgeries_after_the_audit_and_checkpoint_chains_are_named_and_the_rebuild_goes_on() -> None:
    """Review M12: the last record of a topic is not what the rebuild trusts; the last one that verifies is."""
    d = run_all(mixed_inputs())
    audits = list(enumerate(d.audit_values()))
    checkpoints = list(enumerate(d.checkpoint_values()))
    assert len(checkpoints) >= 2
    n, m = len(audits), len(checkpoints)
    last_audit = codec.decode(audits[-1][1]).record
    bad_mac = codec.encode(codec.AUDIT_RECORD_V2, {**last_audit, "mac": "hmac-sha256:" + "0" * 64})
    other = Ed25519Signer.from_seed(bytes(range(1, 33)))
    payload = codec.decode(checkpoints[-1][1]).record["payload"]
    foreign = codec.encode(
        codec.CHECKPOINT_RECORD,
        {"payload": payload, "key_id": other.key_id, "signature": other.sign(checkpoint_signing_input(payload))},
    )
    skipped: list[Skipped] = []
    rebuilt = rebuild_state(
        d.config,
        PARTITION,
        d.journal_values(),
        [*audits, (n, b"garbage"), (n + 1, bad_mac), (n + 2, audits[0][1]), (n + 3, b"")],
        checkpoint_values=[*checkpoints, (m, foreign), (m + 1, checkpoints[0][1]), (m + 2, b"junk")],
        audit_topic="p.audit",
        checkpoints_topic="p.checkpoints",
        report=skipped.append,
    )
    assert rebuilt == d.state
    assert [(s.topic, s.offset) for s in skipped] == [
        ("p.audit", n),
        ("p.audit", n + 1),
        ("p.audit", n + 2),
        ("p.audit", n + 3),
        ("p.checkpoints", m),
        ("p.checkpoints", m + 1),
        ("p.checkpoints", m + 2),
    ]
    assert "does not decode" in skipped[0].problem and "fails its MAC" in skipped[1].problem
    assert "does not extend partition" in skipped[2].problem and "not signed by this scheduler's key" in skipped[4].problem
    assert "does not extend partition" in skipped[5].problem
    assert str(skipped[0]).startswith(f"p.audit[{PARTITION}]@{n}: the audit record does not decode")
    # the scheduler goes on from the last good records: the next outputs equal never having seen the garbage
    clean = run_all(mixed_inputs())
    d.state = rebuilt
    for driver in (d, clean):
        driver.offset = 100
        driver.outputs = []
        driver.feed(enc_sub(run_id="run-z", stage_id="s0", pages=[b"z"]), key=b"run-z")
    assert d.outputs == clean.outputs
    # garbage alone, before the scheduler wrote anything: named, and the chains start from genesis
    skipped = []
    fresh = initial_state(d.config, PARTITION)
    assert (
        rebuild_state(d.config, PARTITION, [], [(0, b"garbage")], checkpoint_values=[(0, b"junk")], report=skipped.append)
        == fresh
    )
    assert [(s.topic, s.offset) for s in skipped] == [("audit", 0), ("checkpoints", 0)]
    # records of the scheduler's formats none of which verifies look like a changed key: the rebuild stops
    with pytest.raises(StateCorrupted, match=r"none of the 1 audit records verifies") as caught:
        rebuild_state(d.config, PARTITION, [], [(0, bad_mac)], audit_topic="p.audit")
    assert "bernstein scheduler run" not in str(caught.value) and "kcat -C -t p.audit" in str(caught.value)
    with pytest.raises(StateCorrupted, match=r"none of the 1 checkpoints verifies") as caught:
        rebuild_state(d.config, PARTITION, [], [], checkpoint_values=[(0, foreign)], checkpoints_topic="p.checkpoints")
    assert "bernstein scheduler run" not in str(caught.value)


# ---------------------------------------------------------------------------
# fuzz: step never raises and always accounts for its input
# ---------------------------------------------------------------------------

_values = fuzz.record_values(
    fuzz.seed_values(enc_sub, enc_close),
    key_id=SIGNER.key_id,
    close=lambda run_id: encode_signed_close(run_close(run_id)),
)


@fuzz.FUZZ_SETTINGS
@given(fuzz.keyed(_values), st.integers(1, 4))
def test_fuzz_step_never_raises_and_accounts_for_every_input(
    inputs: list[tuple[bytes | None, bytes | None]], seal_every: int
) -> None:
    d = Driver(seal_every=seal_every)
    for key, value in inputs:
        seq_before, head_before = d.state.audit_seq, d.state.audit_head
        outs = d.feed(value, key=key)
        audits = [o for o in outs if o.what == "audit"]
        seals = [o for o in outs if o.what == "seal"]
        final_seals = [o for o in seals if o.inner is not None and o.inner["final"]]
        crossings = [o for o in outs if o.what in ("journal-entry", "refusal", "deadletter")] + final_seals
        assert outs, "every input produces outputs"
        # exactly one of: a journal entry, a refusal, a dead letter, or (a run close) a final seal
        assert len(crossings) == 1, [o.what for o in outs]
        if final_seals:
            assert [o.what for o in outs] == ["seal", "audit", "checkpoint"]
        elif seals:
            assert [o.what for o in outs] == ["journal-entry", "audit", "seal", "audit"]
        # the step's last output is a checkpoint after a final seal (and when one is due), nowhere else
        checkpoints = [o for o in outs if o.what == "checkpoint"]
        assert len(checkpoints) <= 1 and (not checkpoints or outs[-1] is checkpoints[0])
        if final_seals:
            assert checkpoints
        # one audit record per non-audit output, and the audit sequence advances by exactly that many
        assert len(audits) == len(outs) - len(audits) - len(checkpoints)
        assert d.state.audit_seq == seq_before + len(audits)
        prev = head_before
        for audit in audits:
            assert audit.inner is not None and audit.inner["prev_mac"] == prev
            prev = audit.record["mac"]
        assert d.state.audit_head == prev
        for out in outs:
            if out.what == "deadletter":
                assert out.record["code"] != DeadLetterCode.SCHEDULER_ERROR.value, out.record["detail"]
    assert d.rebuilt() == d.state


# ---------------------------------------------------------------------------
# purity of the core
# ---------------------------------------------------------------------------

FORBIDDEN_MODULES = frozenset(
    {
        "time",
        "datetime",
        "random",
        "uuid",
        "os",
        "socket",
        "confluent_kafka",
        "minio",
        "httpx",
        "subprocess",
        "threading",
        "secrets",
    }
)


def _impurities(source: str, filename: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif isinstance(node, ast.Call):
            target = ast.unparse(node.func)
            if target.endswith(("datetime.now", "datetime.utcnow")) or target in ("now", "utcnow"):
                found.append(f"{filename}:{node.lineno}: calls {target}()")
            if target in ("__import__", "importlib.import_module"):
                found.append(f"{filename}:{node.lineno}: imports dynamically ({target})")
            names = []
            if target.endswith("modules.get") and node.args and isinstance(node.args[0], ast.Constant):
                names = [str(node.args[0].value)]  # sys.modules.get("os") is an import of os
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("modules"):
            # sys.modules["os"] reaches a module without an import statement: the same dependency
            names = [str(node.slice.value)] if isinstance(node.slice, ast.Constant) else []
        else:
            continue
        for name in names:
            if name.split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"{filename}:{node.lineno}: imports {name}")
    return found


def test_the_core_imports_no_clock_randomness_or_io() -> None:
    core = sorted((REPO / "consumers" / "core").glob("*.py"))
    assert {p.name for p in core} >= {"model.py", "step.py", "rebuild.py"}
    problems = [
        problem for path in core for problem in _impurities(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert problems == []


@pytest.mark.parametrize(
    "source",
    [
        "import time",
        "import os.path",
        "from datetime import datetime",
        "from confluent_kafka import Producer",
        "import random as r",
        "import threading, json",
        "x = datetime.now()",
        "x = dt.datetime.now(tz)",
        "m = __import__('socket')",
        "environ = sys.modules['os'].environ",
        "clock = sys.modules.get('time')",
    ],
)
def test_the_import_scan_catches_what_it_forbids(source: str) -> None:
    assert _impurities(source, "probe.py")


def test_the_import_scan_allows_pure_imports() -> None:
    assert _impurities("import hashlib\nfrom schemas import codec\nfrom dataclasses import dataclass\n", "probe.py") == []


def test_quarantine_takes_journal_and_input_offsets(capsys: pytest.CaptureFixture[str]) -> None:
    """``--quarantine OFFSET`` and ``journal:OFFSET`` name journal offsets, ``submissions:OFFSET`` input offsets;
    another topic is refused."""
    from bernstein.cli import EXIT_USAGE, build_parser

    parser = build_parser()
    args = parser.parse_args(
        [
            "scheduler",
            "run",
            "--partition",
            "0",
            "--quarantine",
            "journal:12",
            "--quarantine",
            "7",
            "--quarantine",
            "submissions:3066",
        ]
    )
    assert args.quarantine == [("journal", 12), ("journal", 7), ("submissions", 3066)]
    for bad, said in (
        ("audit:5", "--quarantine names journal or submissions offsets, not 'audit'"),
        ("checkpoints:0", "--quarantine names journal or submissions offsets, not 'checkpoints'"),
        ("journal:x", "--quarantine takes OFFSET, journal:OFFSET or submissions:OFFSET, not 'journal:x'"),
        ("-3", "--quarantine takes a non-negative offset, not '-3'"),
        ("submissions:-1", "--quarantine takes a non-negative offset, not 'submissions:-1'"),
    ):
        with pytest.raises(SystemExit) as caught:
            parser.parse_args(["scheduler", "run", "--partition", "0", f"--quarantine={bad}"])
        assert caught.value.code == EXIT_USAGE
        assert said in capsys.readouterr().err
