"""Verify a data/ops receipt offline, with pinned keys only; returns a frozen verdict.

The verification side of the data/ops modality: the receipt and refusal
formats, what is signed and the plan and order rules are
``bernstein.schemas.documents.dataops``'s; this module adds what needs pinned keys and
the content store. The verifier's data/ops check (``bernstein.verifier.checks.dataops``)
calls it and the SDK re-exports it (``bernstein.producers.dataops.verify_receipt``), so it
lives below both (neither the SDK nor the verifier imports the other).

``verify_receipt`` runs every check and collects every failure (the first is
the ``reason``), in this order:

1. Parse: JSON object, canonical RFC 8785 bytes, the v1 shape.
2. Context: run_id / stage_id / kind equal the journal entry's.
3. Plan: re-derive the projection from the receipt's input content hashes and
   steps; both ``input_hashes`` and ``plan_hash`` must match.
4. Signatures: ``signer_key_id`` must be a pinned key; every input and output
   signature (bound to run, stage, kind, role, index, ref, hash and, for
   outputs, the plan hash) and the receipt's own signature must verify with it.
5. Journal: the receipt bytes hash to the entry's ``artifact_hash``, the entry
   is ``completed``, and its inputs/outputs equal the entry's
   ``input``/``output`` observations.
6. Store: every input and output blob is reattached and re-hashed; a missing
   blob and a changed blob are different failures.

Nothing raises for bad data: a malformed receipt is a failed verdict. The only
I/O is reading blobs through the ``BlobStore`` port.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bernstein.schemas.canonical import sha256_digest
from bernstein.schemas.documents.dataops import (
    PLAN_HASH_MISMATCH,
    PLAN_INPUTS_MISMATCH,
    RECEIPT_FORMAT,
    REFUSAL_FORMAT,
    DataOpsReceipt,
    MalformedReceipt,
    SignedArtifact,
    artifact_signing_input,
    decode_signature,
    is_canonical,
    load_document,
    observations_problems,
    order_problem,
    parse_refusal_document,
    plan_problems,
    receipt_signing_input,
)
from bernstein.schemas.errors import MalformedDigest
from bernstein.substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, CasError
from bernstein.substrate.keys import TrustedKeys, verify_signature

# Stable failure codes (appended to, never renamed).
RECEIPT_MALFORMED: Final = "RECEIPT_MALFORMED"
RECEIPT_NOT_CANONICAL: Final = "RECEIPT_NOT_CANONICAL"
CONTEXT_MISMATCH: Final = "CONTEXT_MISMATCH"
SIGNER_NOT_PINNED: Final = "SIGNER_NOT_PINNED"
SIGNATURE_MISSING: Final = "SIGNATURE_MISSING"
SIGNATURE_MALFORMED: Final = "SIGNATURE_MALFORMED"
SIGNATURE_INVALID: Final = "SIGNATURE_INVALID"
RECEIPT_SIGNATURE_MISSING: Final = "RECEIPT_SIGNATURE_MISSING"
RECEIPT_SIGNATURE_INVALID: Final = "RECEIPT_SIGNATURE_INVALID"
ARTIFACT_HASH_MISMATCH: Final = "ARTIFACT_HASH_MISMATCH"
OBSERVATIONS_MISMATCH: Final = "OBSERVATIONS_MISMATCH"
BLOB_MISSING: Final = "BLOB_MISSING"
BLOB_CHANGED: Final = "BLOB_CHANGED"
STORE_UNREADABLE: Final = "STORE_UNREADABLE"
REFUSAL_MALFORMED: Final = "REFUSAL_MALFORMED"
REFUSAL_MISMATCH: Final = "REFUSAL_MISMATCH"
NOT_A_DATAOPS_ARTIFACT: Final = "NOT_A_DATAOPS_ARTIFACT"
RECEIPT_STATE_MISMATCH: Final = "RECEIPT_STATE_MISMATCH"
EFFECT_BEFORE_PLAN: Final = "EFFECT_BEFORE_PLAN"
"""The stage's observations record an output before an input, or an output with no plan."""
__all__ = [
    "ARTIFACT_HASH_MISMATCH",
    "BLOB_CHANGED",
    "BLOB_MISSING",
    "CONTEXT_MISMATCH",
    "EFFECT_BEFORE_PLAN",
    "NOT_A_DATAOPS_ARTIFACT",
    "OBSERVATIONS_MISMATCH",
    "PLAN_HASH_MISMATCH",
    "PLAN_INPUTS_MISMATCH",
    "RECEIPT_MALFORMED",
    "RECEIPT_NOT_CANONICAL",
    "RECEIPT_SIGNATURE_INVALID",
    "RECEIPT_SIGNATURE_MISSING",
    "RECEIPT_STATE_MISMATCH",
    "REFUSAL_MALFORMED",
    "REFUSAL_MISMATCH",
    "SIGNATURE_INVALID",
    "SIGNATURE_MALFORMED",
    "SIGNATURE_MISSING",
    "SIGNER_NOT_PINNED",
    "STORE_UNREADABLE",
    "DataOpsVerdict",
    "ReceiptFailure",
    "verify_artifact",
    "verify_receipt",
    "verify_refusal",
]


@dataclass(frozen=True)
class ReceiptFailure:
    """One failed check: a stable code, which step failed, and a sentence naming what."""

    code: str
    check: str
    """parse | context | plan | signature | journal | store | refusal"""
    reason: str
    evidence: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "check": self.check, "reason": self.reason, "evidence": dict(self.evidence)}


@dataclass(frozen=True)
class DataOpsVerdict:
    """The outcome of verifying one data/ops artifact (a receipt or a recorded refusal)."""

    ok: bool
    plan_ok: bool
    signatures_ok: bool
    evidence_reattached: bool
    """True only when a store was given and every input/output blob re-hashed."""
    reason: str
    """The first failure ("" when ok)."""
    failures: tuple[ReceiptFailure, ...] = ()
    format: str = RECEIPT_FORMAT
    plan_hash: str = ""
    signer_key_id: str = ""
    inputs: int = 0
    outputs: int = 0
    refusal_code: str = ""
    """For a recorded refusal: the refused code (e.g. EFFECT_BEFORE_PLAN)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "format": self.format,
            "plan_ok": self.plan_ok,
            "signatures_ok": self.signatures_ok,
            "evidence_reattached": self.evidence_reattached,
            "plan_hash": self.plan_hash,
            "signer_key_id": self.signer_key_id,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "refusal_code": self.refusal_code,
            "reason": self.reason,
            "failures": [f.to_json() for f in self.failures],
        }


def verify_artifact(
    document_bytes: bytes,
    *,
    trusted: TrustedKeys,
    cas: BlobStore | None,
    entry: Mapping[str, Any] | None,
) -> DataOpsVerdict:
    """Verify a data/ops artifact of either format: a receipt, or a recorded refusal.

    A completed stage must carry a receipt; a refusal document is accepted
    only for a stage journalled as refused.
    """
    try:
        fmt = load_document(document_bytes, what="artifact").get("format")
    except MalformedReceipt:
        fmt = None
    if fmt == REFUSAL_FORMAT:
        return verify_refusal(document_bytes, entry=entry)
    if fmt != RECEIPT_FORMAT and entry is not None and entry.get("terminal_state") in ("failed", "timed_out"):
        # A failed or timed-out data/ops activity may have nothing to sign; a refused one
        # must carry its refusal record (checked above), and a completed one its receipt.
        return DataOpsVerdict(
            ok=True, plan_ok=False, signatures_ok=False, evidence_reattached=False, reason="", format=str(fmt or "")
        )
    return verify_receipt(document_bytes, trusted=trusted, cas=cas, entry=entry)


def verify_receipt(
    document_bytes: bytes,
    *,
    trusted: TrustedKeys,
    cas: BlobStore | None = None,
    entry: Mapping[str, Any] | None = None,
) -> DataOpsVerdict:
    """Verify a stored receipt's plan projection, signatures, journal binding and blobs.

    Args:
        document_bytes: the receipt bytes as stored (the artifact).
        trusted: pinned keys; the receipt's ``signer_key_id`` must be one of them.
        cas: the content store to reattach inputs/outputs from (None: skip step 6).
        entry: the decoded journal entry (None: skip steps 2 and 5).

    Returns:
        A frozen ``DataOpsVerdict``; never raises for bad data.
    """
    failures: list[ReceiptFailure] = []

    # (1) Parse.
    try:
        document = load_document(document_bytes, what="receipt")
        receipt = DataOpsReceipt.from_document(document)
    except (MalformedReceipt, MalformedDigest) as exc:
        failure = ReceiptFailure(RECEIPT_MALFORMED, "parse", f"receipt is malformed: {exc.message}")
        return DataOpsVerdict(False, False, False, False, failure.reason, (failure,))
    if not is_canonical(document_bytes, document):
        failures.append(
            ReceiptFailure(
                RECEIPT_NOT_CANONICAL,
                "parse",
                "receipt bytes are not canonical JSON (RFC 8785): they are not the bytes that were signed and anchored",
            )
        )

    # (2) Context.
    if entry is not None:
        failures.extend(_check_context(receipt, entry))

    # (3) Plan.
    plan_failures = _check_plan(receipt)
    failures.extend(plan_failures)

    # (4) Signatures.
    signature_failures = _check_signatures(receipt, document, trusted)
    failures.extend(signature_failures)

    # (5) Journal.
    if entry is not None:
        failures.extend(_check_journal(receipt, document_bytes, entry))

    # (6) Store.
    reattached = False
    if cas is not None:
        store_failures = _check_store(receipt, cas)
        failures.extend(store_failures)
        reattached = not store_failures

    return DataOpsVerdict(
        ok=not failures,
        plan_ok=not plan_failures,
        signatures_ok=not signature_failures,
        evidence_reattached=reattached,
        reason=failures[0].reason if failures else "",
        failures=tuple(failures),
        plan_hash=receipt.plan.plan_hash,
        signer_key_id=receipt.signer_key_id,
        inputs=len(receipt.inputs),
        outputs=len(receipt.outputs),
    )


def verify_refusal(document_bytes: bytes, *, entry: Mapping[str, Any] | None = None) -> DataOpsVerdict:
    """Check a recorded refusal (``bernstein.dataops.refusal/v1``) against its journal entry.

    A refusal claims no effect, so it carries no signatures; what must hold is
    that it is the refusal of this stage, journalled as refused under its own
    code, over exactly the inputs the entry observed.
    """
    try:
        document = load_document(document_bytes, what="refusal")
        refusal = parse_refusal_document(document)
    except MalformedReceipt as exc:
        failure = ReceiptFailure(REFUSAL_MALFORMED, "parse", f"refusal is malformed: {exc.message}")
        return DataOpsVerdict(False, False, False, False, failure.reason, (failure,), format=REFUSAL_FORMAT)
    failures: list[ReceiptFailure] = []
    if not is_canonical(document_bytes, document):
        failures.append(ReceiptFailure(RECEIPT_NOT_CANONICAL, "parse", "refusal bytes are not canonical JSON (RFC 8785)"))
    if entry is not None:
        failures.extend(_check_context_fields("refusal", refusal["run_id"], refusal["stage_id"], refusal["kind"], entry))
        state = entry.get("terminal_state")
        if state is not None and state != "refused":
            failures.append(
                ReceiptFailure(
                    REFUSAL_MISMATCH,
                    "refusal",
                    f"artifact is a refusal ({refusal['code']}) but the journal entry's terminal_state is {state!r}",
                    {"terminal_state": str(state)},
                )
            )
        reason_code = entry.get("reason_code")
        if reason_code is not None and reason_code != refusal["code"].lower():
            failures.append(
                ReceiptFailure(
                    REFUSAL_MISMATCH,
                    "refusal",
                    f"refusal code {refusal['code']} does not match the journal entry's reason_code {reason_code!r}",
                    {"code": refusal["code"], "reason_code": str(reason_code)},
                )
            )
        order = order_problem([o.get("kind") for o in _observations(entry)], plan_hash=refusal["plan_hash"])
        if order is not None:
            failures.append(ReceiptFailure(EFFECT_BEFORE_PLAN, "journal", order.message, {"where": order.where}))
        journal_inputs = [o.get("content_hash") for o in _observations(entry) if o.get("kind") == "input"]
        if journal_inputs != refusal["inputs"]:
            failures.append(
                ReceiptFailure(
                    OBSERVATIONS_MISMATCH,
                    "journal",
                    f"refusal lists inputs {refusal['inputs']}, the journal entry observed {journal_inputs}",
                )
            )
        failures.extend(_check_anchor("refusal", document_bytes, entry))
    return DataOpsVerdict(
        ok=not failures,
        plan_ok=True,
        signatures_ok=True,
        evidence_reattached=False,
        reason=failures[0].reason if failures else "",
        failures=tuple(failures),
        format=REFUSAL_FORMAT,
        plan_hash=refusal["plan_hash"] or "",
        inputs=len(refusal["inputs"]),
        refusal_code=refusal["code"],
    )


# --------------------------------------------------------------------------
# The steps, each testable on its own
# --------------------------------------------------------------------------


def _check_context(receipt: DataOpsReceipt, entry: Mapping[str, Any]) -> list[ReceiptFailure]:
    return _check_context_fields("receipt", receipt.run_id, receipt.stage_id, receipt.kind, entry)


def _check_context_fields(what: str, run_id: str, stage_id: str, kind: str, entry: Mapping[str, Any]) -> list[ReceiptFailure]:
    failures = []
    for name, mine in (("run_id", run_id), ("stage_id", stage_id), ("kind", kind)):
        anchored = entry.get(name)
        if anchored is not None and anchored != mine:
            failures.append(
                ReceiptFailure(
                    CONTEXT_MISMATCH,
                    "context",
                    f"{what} {name} {mine!r} does not match the journal entry's {anchored!r}",
                    {"field": name, what: mine, "journal": str(anchored)},
                )
            )
    return failures


def _check_plan(receipt: DataOpsReceipt) -> list[ReceiptFailure]:
    return [
        ReceiptFailure(p.code, "plan", p.message, {"anchored": p.declared, "recomputed": p.recomputed})
        for p in plan_problems(receipt)
    ]


def _check_signatures(receipt: DataOpsReceipt, document: Mapping[str, Any], trusted: TrustedKeys) -> list[ReceiptFailure]:
    key_id = receipt.signer_key_id
    public_key = trusted.public_key(key_id)
    if public_key is None:
        # Never fall back to a key found in the receipt: an unpinned signer proves nothing.
        return [
            ReceiptFailure(
                SIGNER_NOT_PINNED,
                "signature",
                f"receipt signer {key_id} is not a pinned key",
                {"signer_key_id": key_id},
            )
        ]
    failures = []
    for item in (*receipt.inputs, *receipt.outputs):
        signed = artifact_signing_input(
            **item.statement(
                run_id=receipt.run_id, stage_id=receipt.stage_id, kind=receipt.kind, plan_hash=receipt.plan.plan_hash
            )
        )
        code = _signature_problem(item.signature, public_key, signed)
        if code is not None:
            failures.append(
                ReceiptFailure(
                    code,
                    "signature",
                    f"{item.label} {_SIGNATURE_PROBLEMS[code].format(key_id=key_id)}",
                    {"role": item.role, "index": str(item.index), "ref": item.ref, "signer_key_id": key_id},
                )
            )
    # The receipt signature covers the document as stored (minus the signature itself).
    code = _signature_problem(receipt.receipt_signature, public_key, receipt_signing_input(document))
    if code == SIGNATURE_MISSING:
        failures.append(ReceiptFailure(RECEIPT_SIGNATURE_MISSING, "signature", "receipt has no receipt_signature"))
    elif code is not None:
        failures.append(
            ReceiptFailure(
                RECEIPT_SIGNATURE_INVALID,
                "signature",
                f"receipt signature {_SIGNATURE_PROBLEMS[code].removeprefix('signature ').format(key_id=key_id)}",
                {"signer_key_id": key_id},
            )
        )
    return failures


_SIGNATURE_PROBLEMS: Final = {
    SIGNATURE_MISSING: "has no signature",
    SIGNATURE_MALFORMED: "signature is not base64url without padding",
    SIGNATURE_INVALID: "signature does not verify with pinned key {key_id}",
}


def _signature_problem(signature: str, public_key: bytes, signed: bytes) -> str | None:
    """The failure code of one signature, or None when it verifies."""
    if signature == "":
        return SIGNATURE_MISSING
    try:
        raw = decode_signature(signature)
    except ValueError:
        return SIGNATURE_MALFORMED
    if not verify_signature(public_key, raw, signed):
        return SIGNATURE_INVALID
    return None


def _check_journal(receipt: DataOpsReceipt, document_bytes: bytes, entry: Mapping[str, Any]) -> list[ReceiptFailure]:
    failures = _check_anchor("receipt", document_bytes, entry)
    state = entry.get("terminal_state")
    if state is not None and state != "completed":
        # Only ``finish()`` makes a receipt, and it proves the effects ran: a refused/failed stage cannot carry one.
        failures.append(
            ReceiptFailure(
                RECEIPT_STATE_MISMATCH,
                "journal",
                f"artifact is a signed receipt but the journal entry's terminal_state is {state!r}; "
                "a receipt is anchored as 'completed'",
                {"terminal_state": str(state)},
            )
        )
    observations = _observations(entry)
    order = order_problem([o.get("kind") for o in observations], plan_hash=receipt.plan.plan_hash)
    if order is not None:
        failures.append(ReceiptFailure(EFFECT_BEFORE_PLAN, "journal", order.message, {"where": order.where}))
    for problem in observations_problems(receipt, observations):
        evidence = {"kinds": problem.declared} if problem.where == "observations" else {"role": problem.where}
        failures.append(ReceiptFailure(OBSERVATIONS_MISMATCH, "journal", problem.message, evidence))
    return failures


def _check_anchor(what: str, document_bytes: bytes, entry: Mapping[str, Any]) -> list[ReceiptFailure]:
    anchored = entry.get("artifact_hash")
    if anchored is None:
        return []
    recomputed = sha256_digest(document_bytes)
    if recomputed == anchored:
        return []
    return [
        ReceiptFailure(
            ARTIFACT_HASH_MISMATCH,
            "journal",
            f"{what} bytes hash to {recomputed}, but the journal entry anchors artifact_hash {anchored}",
            {"anchored": str(anchored), "recomputed": recomputed},
        )
    ]


def _check_store(receipt: DataOpsReceipt, cas: BlobStore) -> list[ReceiptFailure]:
    failures = []
    for item in (*receipt.inputs, *receipt.outputs):
        evidence = {"role": item.role, "index": str(item.index), "ref": item.ref, "content_hash": item.content_hash}
        try:
            data = cas.get(item.content_hash)
        except BlobNotFound:
            failures.append(
                ReceiptFailure(BLOB_MISSING, "store", f"{item.label} bytes missing from store ({item.content_hash})", evidence)
            )
            continue
        except BlobIntegrityError as exc:
            failures.append(_changed(item, exc.actual, evidence))
            continue
        except CasError as exc:
            failures.append(
                ReceiptFailure(STORE_UNREADABLE, "store", f"{item.label} could not be read from store: {exc.message}", evidence)
            )
            continue
        actual = sha256_digest(data)
        if actual != item.content_hash:  # an adapter that forgot to re-hash
            failures.append(_changed(item, actual, evidence))
    return failures


def _changed(item: SignedArtifact, actual: str, evidence: Mapping[str, str]) -> ReceiptFailure:
    return ReceiptFailure(
        BLOB_CHANGED,
        "store",
        f"{item.label} content hash mismatch (pinned '{item.content_hash}', recomputed '{actual}')",
        {**evidence, "recomputed": actual},
    )


def _observations(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = entry.get("observations") or []
    return [o if isinstance(o, Mapping) else getattr(o, "to_record", dict)() for o in raw]
