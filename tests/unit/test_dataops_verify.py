"""Offline receipt verification with pinned keys: a real receipt verifies, each tamper is named.

Each tamper edits stored bytes (the CAS blob, the receipt JSON, the journal
entry) the way an attacker or an accident would, then asserts the exact
first failure and its stable code.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bernstein.producers.dataops import DataActivity, EffectBeforePlan
from bernstein.producers.dataops.receipt import decode_signature, encode_signature
from bernstein.schemas.canonical import canonical_json, plan_hash, sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.dataops_receipts import (
    ARTIFACT_HASH_MISMATCH,
    BLOB_CHANGED,
    BLOB_MISSING,
    CONTEXT_MISMATCH,
    OBSERVATIONS_MISMATCH,
    PLAN_HASH_MISMATCH,
    PLAN_INPUTS_MISMATCH,
    RECEIPT_MALFORMED,
    RECEIPT_NOT_CANONICAL,
    RECEIPT_SIGNATURE_INVALID,
    RECEIPT_SIGNATURE_MISSING,
    REFUSAL_MISMATCH,
    SIGNATURE_INVALID,
    SIGNATURE_MALFORMED,
    SIGNATURE_MISSING,
    SIGNER_NOT_PINNED,
    DataOpsVerdict,
    verify_artifact,
    verify_receipt,
)
from bernstein.substrate.keys import Ed25519Signer, TrustedKeys
from bernstein.verifier.checks import check_for
from bernstein.verifier.checks.base import CheckContext, ModalityVerdict

PINNED = Ed25519Signer.from_seed(b"\x01" * 32)
OTHER = Ed25519Signer.from_seed(b"\x02" * 32)
TRUSTED = TrustedKeys(ed25519={PINNED.key_id: PINNED.public_key_raw})
ORDERS = b"order_id,region,status,amount_cents\n1,north,shipped,100\n2,south,shipped,250\n3,north,pending,75\n"
REGIONS = b"region,manager\nnorth,ada\nsouth,grace\n"
SUMMARY = b"region,amount_cents\nnorth,100\nsouth,250\n"
STEPS = ["filter status == shipped", "group by region", "sum amount_cents"]


@dataclass
class Built:
    store: DirBlobStore
    receipt_bytes: bytes
    entry: dict[str, Any]

    @property
    def document(self) -> dict[str, Any]:
        return json.loads(self.receipt_bytes)

    def restore(self, document: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        """Store an altered receipt and re-anchor it, as a tamperer who also rewrote the journal would."""
        altered = canonical_json(document)
        self.store.put(altered)
        return altered, {**self.entry, "artifact_hash": sha256_digest(altered)}


def build(tmp_path: Path, *, signer: Ed25519Signer = PINNED, stage: str = "rollup", summary: bytes = SUMMARY) -> Built:
    store = DirBlobStore(tmp_path / "cas")
    activity = DataActivity("run-1", stage, store=store, signer=signer)
    activity.add_input("orders.csv", ORDERS)
    activity.add_input("regions.csv", REGIONS)
    activity.plan(STEPS)
    activity.add_output("summary.csv", summary)
    result, _ = activity.finish()
    entry = {
        "run_id": "run-1",
        "seq": 0,
        "stage_id": stage,
        "role": "analyst",
        "kind": "data",
        "artifact_hash": result.artifact_hash,
        "evidence_set_hash": result.evidence_set_hash,
        "observations": [o.to_record() for o in result.observations],
        "terminal_state": result.terminal_state.value,
        "reason_code": result.reason_code,
    }
    return Built(store, result.artifact, entry)


def verify(built: Built, receipt_bytes: bytes | None = None, entry: dict[str, Any] | None = None) -> DataOpsVerdict:
    return verify_receipt(
        built.receipt_bytes if receipt_bytes is None else receipt_bytes,
        trusted=TRUSTED,
        cas=built.store,
        entry=built.entry if entry is None else entry,
    )


def check(
    built: Built, artifact: bytes | None, *, entry: dict[str, Any] | None = None, cas: Any = "same", problem: str = ""
) -> ModalityVerdict:
    entry = built.entry if entry is None else entry
    data_check = check_for("data")
    assert data_check is not None
    return data_check(
        CheckContext(
            run_id=entry["run_id"],
            stage_id=entry["stage_id"],
            kind=entry["kind"],
            entry=entry,
            artifact=artifact,
            artifact_problem=problem,
            cas=built.store if cas == "same" else cas,
            trusted=TRUSTED,
        )
    )


def assert_fails(verdict: DataOpsVerdict, code: str, reason: str) -> None:
    assert not verdict.ok
    assert verdict.reason == reason
    assert verdict.failures[0].code == code
    assert verdict.failures[0].reason == reason


def codes(verdict: DataOpsVerdict) -> list[str]:
    return [f.code for f in verdict.failures]


# --------------------------------------------------------------------------
# A real receipt
# --------------------------------------------------------------------------


def test_a_real_receipt_verifies(tmp_path: Path) -> None:
    built = build(tmp_path)
    verdict = verify(built)
    assert verdict.ok and verdict.plan_ok and verdict.signatures_ok and verdict.evidence_reattached
    assert verdict.failures == () and verdict.reason == ""
    assert (verdict.inputs, verdict.outputs, verdict.signer_key_id) == (2, 1, PINNED.key_id)
    assert verdict.plan_hash == plan_hash([sha256_digest(ORDERS), sha256_digest(REGIONS)], STEPS)


def test_the_check_notes_a_verified_signed_receipt(tmp_path: Path) -> None:
    built = build(tmp_path)
    verdict = check(built, built.receipt_bytes)
    assert verdict.ok
    assert verdict.notes == ("signed receipt verified",)
    expected_plan = plan_hash([sha256_digest(ORDERS), sha256_digest(REGIONS)], STEPS)
    assert [d.text for d in verdict.details] == [f"receipt OK plan {expected_plan} (2 inputs, 1 output signed)"]
    assert check(built, built.receipt_bytes) == verdict  # deterministic


def test_the_check_registers_for_data_and_ops() -> None:
    assert check_for("data") is check_for("ops") is not None


def test_the_receipt_names_its_signer_by_key_id_only(tmp_path: Path) -> None:
    built = build(tmp_path)
    document = built.document
    assert document["signer_key_id"] == PINNED.key_id
    assert PINNED.public_key_raw.hex().encode() not in built.receipt_bytes
    assert encode_signature(PINNED.public_key_raw).encode() not in built.receipt_bytes
    assert "receipt_signature" in document
    assert document["plan"]["input_hashes"] == sorted([sha256_digest(ORDERS), sha256_digest(REGIONS)])


def test_verification_uses_pinned_keys_only(tmp_path: Path) -> None:
    built = build(tmp_path)
    verdict = verify_receipt(built.receipt_bytes, trusted=TrustedKeys(), cas=built.store, entry=built.entry)
    assert_fails(verdict, SIGNER_NOT_PINNED, f"receipt signer {PINNED.key_id} is not a pinned key")


# --------------------------------------------------------------------------
# Tampers, one reason each
# --------------------------------------------------------------------------


def test_tamper_one_output_byte_in_the_store(tmp_path: Path) -> None:
    built = build(tmp_path)
    digest = sha256_digest(SUMMARY)
    path = built.store.path_of(digest)
    tampered = b"X" + SUMMARY[1:]
    path.write_bytes(tampered)

    verdict = verify(built)
    assert_fails(
        verdict,
        BLOB_CHANGED,
        f"output 'summary.csv' content hash mismatch (pinned '{digest}', recomputed '{sha256_digest(tampered)}')",
    )
    assert verdict.plan_ok and verdict.signatures_ok and not verdict.evidence_reattached
    modality = check(built, built.receipt_bytes)
    assert not modality.ok and modality.reason == verdict.reason
    assert [d.text for d in modality.details] == [f"receipt FAIL store -- {verdict.reason}"]


def test_tamper_a_step_in_the_stored_receipt(tmp_path: Path) -> None:
    built = build(tmp_path)
    document = built.document
    document["plan"]["steps"][1] = "group by status"
    altered, entry = built.restore(document)

    verdict = verify(built, altered, entry)
    recomputed = plan_hash([sha256_digest(ORDERS), sha256_digest(REGIONS)], document["plan"]["steps"])
    assert_fails(
        verdict, PLAN_HASH_MISMATCH, f"plan_hash mismatch: anchored {document['plan']['plan_hash']}, recomputed {recomputed}"
    )
    assert RECEIPT_SIGNATURE_INVALID in codes(verdict)
    assert not verdict.plan_ok and not verdict.signatures_ok
    # Without rewriting the journal too, the anchor is named as well.
    assert ARTIFACT_HASH_MISMATCH in codes(verify(built, altered))
    modality = check(built, altered, entry=entry)
    assert modality.reason == verdict.reason
    assert modality.details[0].text.startswith("receipt FAIL plan -- plan_hash mismatch")


def test_tamper_a_step_and_its_plan_hash_breaks_the_output_signatures(tmp_path: Path) -> None:
    built = build(tmp_path)
    document = built.document
    document["plan"]["steps"][0] = "filter status == pending"
    document["plan"]["plan_hash"] = plan_hash(document["plan"]["input_hashes"], document["plan"]["steps"])
    altered, entry = built.restore(document)

    verdict = verify(built, altered, entry)
    assert verdict.plan_ok  # consistent on its own...
    assert_fails(verdict, SIGNATURE_INVALID, f"output 'summary.csv' signature does not verify with pinned key {PINNED.key_id}")
    assert codes(verdict) == [SIGNATURE_INVALID, RECEIPT_SIGNATURE_INVALID]  # ...but outputs are bound to their plan


def test_tamper_sign_everything_with_another_key(tmp_path: Path) -> None:
    built = build(tmp_path, signer=OTHER)  # every artifact and the whole receipt re-signed
    verdict = verify(built)
    assert_fails(verdict, SIGNER_NOT_PINNED, f"receipt signer {OTHER.key_id} is not a pinned key")
    assert not verdict.signatures_ok and verdict.plan_ok


def test_tamper_claim_the_pinned_key_for_another_keys_signatures(tmp_path: Path) -> None:
    built = build(tmp_path, signer=OTHER)
    document = built.document
    document["signer_key_id"] = PINNED.key_id
    altered, entry = built.restore(document)

    verdict = verify(built, altered, entry)
    assert_fails(verdict, SIGNATURE_INVALID, f"input 'orders.csv' signature does not verify with pinned key {PINNED.key_id}")
    assert codes(verdict) == [SIGNATURE_INVALID] * 3 + [RECEIPT_SIGNATURE_INVALID]


@pytest.mark.parametrize("how", ["removed", "emptied"])
def test_tamper_drop_a_signature(tmp_path: Path, how: str) -> None:
    built = build(tmp_path)
    document = built.document
    if how == "removed":
        del document["inputs"][0]["signature"]
    else:
        document["inputs"][0]["signature"] = ""
    altered, entry = built.restore(document)

    verdict = verify(built, altered, entry)
    assert_fails(verdict, SIGNATURE_MISSING, "input 'orders.csv' has no signature")
    assert codes(verdict) == [SIGNATURE_MISSING, RECEIPT_SIGNATURE_INVALID]


def test_tamper_drop_the_receipt_signature(tmp_path: Path) -> None:
    built = build(tmp_path)
    document = built.document
    del document["receipt_signature"]
    altered, entry = built.restore(document)
    assert_fails(verify(built, altered, entry), RECEIPT_SIGNATURE_MISSING, "receipt has no receipt_signature")


def test_tamper_garbled_signature_text(tmp_path: Path) -> None:
    built = build(tmp_path)
    document = built.document
    document["outputs"][0]["signature"] += "="
    altered, entry = built.restore(document)
    assert_fails(
        verify(built, altered, entry), SIGNATURE_MALFORMED, "output 'summary.csv' signature is not base64url without padding"
    )


def test_tamper_store_stripped_one_blob_missing(tmp_path: Path) -> None:
    built = build(tmp_path)
    digest = sha256_digest(SUMMARY)
    built.store.path_of(digest).unlink()
    verdict = verify(built)
    assert_fails(verdict, BLOB_MISSING, f"output 'summary.csv' bytes missing from store ({digest})")


def test_tamper_store_stripped_entirely(tmp_path: Path) -> None:
    built = build(tmp_path)
    shutil.rmtree(built.store.root)
    verdict = verify(built)
    assert codes(verdict) == [BLOB_MISSING] * 3
    # The verifier could not reattach the receipt itself: the stage fails with its reason.
    problem = f"artifact bytes missing from store ({built.entry['artifact_hash']})"
    modality = check(built, None, problem=problem)
    assert not modality.ok and modality.reason == problem


def test_without_any_content_store_the_receipt_is_not_checked(tmp_path: Path) -> None:
    """Strip the store and the receipt stops verifying, not merely stops logging (seed 000)."""
    built = build(tmp_path)
    modality = check(built, None, cas=None)
    assert not modality.ok
    assert (modality.unchecked, modality.reason, modality.notes) == ("receipt not reattached", "", ())
    verdict = verify_receipt(built.receipt_bytes, trusted=TRUSTED, cas=None, entry=built.entry)
    assert verdict.ok and not verdict.evidence_reattached


def test_tamper_journal_observation_differs(tmp_path: Path) -> None:
    built = build(tmp_path)
    other = sha256_digest(b"something else")
    observations = [dict(o) for o in built.entry["observations"]]
    observations[2]["content_hash"] = other
    verdict = verify(built, entry={**built.entry, "observations": observations})
    assert_fails(
        verdict,
        OBSERVATIONS_MISMATCH,
        f"output 0 differs between receipt and journal entry: receipt 'summary.csv' {sha256_digest(SUMMARY)}, journal 'summary.csv' {other}",
    )


def test_tamper_journal_observation_dropped(tmp_path: Path) -> None:
    built = build(tmp_path)
    observations = [o for o in built.entry["observations"] if o["kind"] != "output"]
    verdict = verify(built, entry={**built.entry, "observations": observations})
    assert_fails(verdict, OBSERVATIONS_MISMATCH, "receipt lists 1 output, the journal entry observed 0")


@pytest.mark.parametrize(("field", "value"), [("run_id", "run-2"), ("stage_id", "other"), ("kind", "ops")])
def test_tamper_receipt_replayed_under_another_context(tmp_path: Path, field: str, value: str) -> None:
    built = build(tmp_path)
    verdict = verify(built, entry={**built.entry, field: value})
    assert_fails(
        verdict, CONTEXT_MISMATCH, f"receipt {field} {built.document[field]!r} does not match the journal entry's {value!r}"
    )


def test_tamper_move_a_signed_output_between_receipts_of_the_same_key(tmp_path: Path) -> None:
    first = build(tmp_path / "a", stage="stage-a")
    second = build(tmp_path / "b", stage="stage-b", summary=b"region,amount_cents\nnorth,1\n")
    document = first.document
    document["outputs"][0] = second.document["outputs"][0]  # a genuine signature, from another stage
    first.store.put(b"region,amount_cents\nnorth,1\n")
    altered, entry = first.restore(document)
    entry["observations"] = [
        *entry["observations"][:2],
        {**entry["observations"][2], "content_hash": document["outputs"][0]["content_hash"]},
    ]

    verdict = verify(first, altered, entry)
    assert_fails(verdict, SIGNATURE_INVALID, f"output 'summary.csv' signature does not verify with pinned key {PINNED.key_id}")


def test_tamper_reorder_inputs(tmp_path: Path) -> None:
    built = build(tmp_path)
    document = built.document
    document["inputs"].reverse()
    altered, entry = built.restore(document)
    verdict = verify(built, altered, entry)
    assert_fails(verdict, RECEIPT_MALFORMED, "receipt is malformed: receipt inputs[0] has index 1, expected 0")

    for position, item in enumerate(document["inputs"]):
        item["index"] = position  # renumbered: the signatures bound the old positions
    altered, entry = built.restore(document)
    assert codes(verify(built, altered, entry))[:2] == [SIGNATURE_INVALID, SIGNATURE_INVALID]


def test_tamper_plan_input_hashes(tmp_path: Path) -> None:
    built = build(tmp_path)
    document = built.document
    document["plan"]["input_hashes"] = document["plan"]["input_hashes"][:1]
    altered, entry = built.restore(document)
    verdict = verify(built, altered, entry)
    assert verdict.failures[0].code == PLAN_INPUTS_MISMATCH
    assert verdict.reason.startswith("plan input_hashes mismatch: anchored [")


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: b"not json", "is not JSON"),
        (lambda d: b"[1, 2]", "must be a JSON object"),
        (lambda d: canonical_json({k: v for k, v in d.items() if k != "plan"}), "receipt plan must be a JSON object"),
        (lambda d: canonical_json({**d, "format": "bernstein.dataops.receipt/v0"}), "receipt format is"),
        (lambda d: canonical_json({**d, "signer_public_key_pem": "-----BEGIN"}), "unknown fields ['signer_public_key_pem']"),
        (lambda d: canonical_json({**d, "signer_key_id": "ed25519:abc"}), "signer_key_id is not a digest"),
        (lambda d: json.dumps({**d, "run_id": 1.5}).encode(), "run_id"),
    ],
)
def test_malformed_receipts_fail_cleanly(tmp_path: Path, mutate: Any, fragment: str) -> None:
    built = build(tmp_path)
    verdict = verify(built, mutate(built.document))
    assert not verdict.ok and codes(verdict) == [RECEIPT_MALFORMED]
    assert fragment in verdict.reason
    assert not check(built, mutate(built.document)).ok


def test_non_canonical_receipt_bytes_are_named(tmp_path: Path) -> None:
    built = build(tmp_path)
    pretty = json.dumps(built.document, indent=2).encode()
    verdict = verify(built, pretty, {**built.entry, "artifact_hash": sha256_digest(pretty)})
    assert_fails(
        verdict,
        RECEIPT_NOT_CANONICAL,
        "receipt bytes are not canonical JSON (RFC 8785): they are not the bytes that were signed and anchored",
    )


# --------------------------------------------------------------------------
# Recorded refusals
# --------------------------------------------------------------------------


def _refused(tmp_path: Path) -> tuple[DirBlobStore, bytes, dict[str, Any]]:
    store = DirBlobStore(tmp_path / "cas")
    activity = DataActivity("run-1", "rollup", store=store, signer=PINNED)
    activity.add_input("orders.csv", ORDERS)
    with pytest.raises(EffectBeforePlan):
        activity.add_output("summary.csv", SUMMARY)
    result = activity.refused_result()
    entry = {
        "run_id": "run-1",
        "stage_id": "rollup",
        "kind": "data",
        "artifact_hash": result.artifact_hash,
        "observations": [o.to_record() for o in result.observations],
        "terminal_state": "refused",
        "reason_code": result.reason_code,
    }
    return store, result.artifact, entry


def test_a_recorded_refusal_verifies_as_a_refusal(tmp_path: Path) -> None:
    store, artifact, entry = _refused(tmp_path)
    built = Built(store, artifact, entry)
    modality = check(built, artifact)
    assert modality.ok
    assert modality.notes == ("refusal recorded (effect_before_plan)",)
    assert [d.text for d in modality.details] == ["refusal OK EFFECT_BEFORE_PLAN (1 input recorded)"]


def test_a_refusal_cannot_stand_in_for_a_completed_stage(tmp_path: Path) -> None:
    store, artifact, entry = _refused(tmp_path)
    verdict = verify_artifact(
        artifact, trusted=TRUSTED, cas=store, entry={**entry, "terminal_state": "completed", "reason_code": "ok"}
    )
    assert not verdict.ok and codes(verdict) == [REFUSAL_MISMATCH, REFUSAL_MISMATCH]


def test_a_completed_stage_needs_a_receipt(tmp_path: Path) -> None:
    built = build(tmp_path)
    verdict = verify_artifact(b'{"format":"something/else"}', trusted=TRUSTED, cas=built.store, entry=built.entry)
    assert not verdict.ok and codes(verdict) == [RECEIPT_MALFORMED]


# --------------------------------------------------------------------------
# Signature text form
# --------------------------------------------------------------------------


def test_signature_text_is_strict_base64url_without_padding() -> None:
    signature = PINNED.sign(b"x")
    text = encode_signature(signature)
    assert "=" not in text and len(text) == 86
    assert decode_signature(text) == signature
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    padding_bit_set = text[:-1] + alphabet[alphabet.index(text[-1]) | 1]  # 86 chars carry 4 unused bits
    for bad in (text + "=", "+" + text[1:], padding_bit_set, text[:-1]):
        with pytest.raises(ValueError):
            decode_signature(bad)


def test_a_refused_stage_must_carry_its_refusal_record(tmp_path: Path) -> None:
    """Only failed or timed-out stages may come without a signed document; a refused one needs its refusal record."""
    built = build(tmp_path)
    other = canonical_json({"format": "something.else/v1", "note": "not a refusal record"})
    for state, ok in (("refused", False), ("failed", True), ("timed_out", True)):
        entry = {**built.entry, "terminal_state": state, "artifact_hash": sha256_digest(other)}
        verdict = verify_artifact(other, trusted=TRUSTED, cas=built.store, entry=entry)
        assert verdict.ok is ok, state
