"""Hand-built research and data/ops submissions for the modality-rule tests (unit and integration).

Every builder returns a valid ActivitySubmission record (a dict, before
encoding) whose hashes recompute; tests break one rule by editing the
artifact document or the observations and calling ``rehash``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from bernstein.producers.dataops import DataOpsActivity, EffectBeforePlan
from bernstein.schemas.canonical import canonical_json, evidence_set_hash, sha256_digest
from bernstein.schemas.documents.common import Violation
from bernstein.substrate.keys import Ed25519Signer
from tests.support.producers import producer_signer
from tests.vectors.step_vectors import HASH_A, HASH_B, PAGE_A, PAGE_B, SOURCE_A, SOURCE_B, report

HTML = "text/html; charset=utf-8"
SIGNER = Ed25519Signer.from_seed(b"\x05" * 32)
ORDERS = b"order_id,amount\n1,100\n2,250\n"
SUMMARY = b"total\n350\n"
STEPS = ["sum amount"]
MODALITY_ROLES = {"developer": "coding", "scout": "research", "operator": "ops", "analyst": "data"}
"""role -> kind for the configs of these tests."""


def report_document() -> dict[str, Any]:
    """A valid ``bernstein.research.report/v1`` document: two claims, each citing one fetched page (the
    scheduler-step vectors' own, ``tests.vectors.step_vectors.report``)."""
    return report()


def page_observations() -> list[dict[str, Any]]:
    """The two fetched pages, with their sizes (published as ActivitySubmission.v2)."""
    return [
        {"kind": "page", "ref": SOURCE_A, "content_hash": HASH_A, "size": len(PAGE_A)},
        {"kind": "page", "ref": SOURCE_B, "content_hash": HASH_B, "size": len(PAGE_B)},
    ]


def abort_document(fmt: str = "bernstein.research.refusal/v1") -> dict[str, Any]:
    """A budget refusal (or, with the failure format, a fetch failure) after fetching page A."""
    member = "refusal" if fmt.endswith("refusal/v1") else "failure"
    outcome: dict[str, Any] = (
        {"code": "BUDGET_EXCEEDED", "cap": "max_fetches", "limit": 1, "attempted": 2, "source": SOURCE_B}
        if member == "refusal"
        else {"code": "HTTP_ERROR", "source": SOURCE_B, "message": "HTTP 500", "status": 500}
    )
    return {
        "format": fmt,
        "query": "what changed in quill 2.0?",
        "plan": [SOURCE_A, SOURCE_B],
        member: outcome,
        "fetched": [{"source_ref": SOURCE_A, "page_content_hash": HASH_A}],
    }


def submission(
    artifact: bytes | dict[str, Any],
    observations: list[dict[str, Any]],
    *,
    kind: str,
    role: str,
    run_id: str = "run-1",
    stage_id: str = "stage-0",
    terminal_state: str = "completed",
    reason_code: str = "ok",
    submission_id: str | None = None,
) -> dict[str, Any]:
    """An ActivitySubmission record whose artifact and evidence-set hashes recompute."""
    data = artifact if isinstance(artifact, bytes) else canonical_json(artifact)
    return {
        "submission_id": submission_id or f"sub-{run_id}-{stage_id}",
        "run_id": run_id,
        "stage_id": stage_id,
        "role": role,
        "producer": {"id": "unit@test", "sdk": "other-sdk/1.0"},
        "kind": kind,
        "artifact": data,
        "artifact_hash": sha256_digest(data),
        "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in observations),
        "observations": observations,
        "terminal_state": terminal_state,
        "reason_code": reason_code,
        "occurred_at_ms": 1_700_000_000_123,
    }


def research_submission(
    edit: Callable[[dict[str, Any]], object] | None = None,
    *,
    document: dict[str, Any] | None = None,
    observations: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A research result (the report by default); ``edit`` changes the document in place first."""
    doc = copy.deepcopy(document if document is not None else report_document())
    if edit is not None:
        edit(doc)
    obs = page_observations() if observations is None else observations
    return submission(doc, obs, kind="research", role="scout", **fields)


class MemoryStore:
    """An in-memory BlobStore: enough for DataOpsActivity, no disk."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        digest = sha256_digest(data)
        self.blobs[digest] = bytes(data)
        return digest

    def get(self, digest: str) -> bytes:
        return self.blobs[digest]

    def has(self, digest: str) -> bool:
        return digest in self.blobs

    def describe(self) -> str:
        return "memory"


def receipt_parts(
    *, kind: str = "ops", run_id: str = "run-1", stage_id: str = "stage-0"
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A signed receipt document (one input, the plan, one output) and its observations, from the SDK."""
    activity = DataOpsActivity(kind, run_id, stage_id, store=MemoryStore(), signer=SIGNER)
    activity.add_input("orders.csv", ORDERS)
    activity.plan(STEPS)
    activity.add_output("summary.csv", SUMMARY)
    result, receipt = activity.finish()
    return receipt.document(), [o.to_record() for o in result.observations]


def refusal_parts(
    *, kind: str = "ops", run_id: str = "run-1", stage_id: str = "stage-0"
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The SDK's refusal record of an effect attempted before the plan, and its observations."""
    activity = DataOpsActivity(kind, run_id, stage_id, store=MemoryStore(), signer=SIGNER)
    activity.add_input("orders.csv", ORDERS)
    try:
        activity.add_output("summary.csv", SUMMARY)
    except EffectBeforePlan:
        pass
    result = activity.refused_result()
    return canonical_json_document(result.artifact), [o.to_record() for o in result.observations]


def canonical_json_document(data: bytes) -> dict[str, Any]:
    import json

    document = json.loads(data)
    assert isinstance(document, dict) and canonical_json(document) == data
    return document


def dataops_submission(
    edit: Callable[[dict[str, Any]], object] | None = None,
    *,
    refusal: bool = False,
    kind: str = "ops",
    observations: list[dict[str, Any]] | None = None,
    run_id: str = "run-1",
    stage_id: str = "stage-0",
    **fields: Any,
) -> dict[str, Any]:
    """A data/ops result (a signed receipt, or with ``refusal`` the SDK's refusal record)."""
    build = refusal_parts if refusal else receipt_parts
    doc, obs = build(kind=kind, run_id=run_id, stage_id=stage_id)
    if edit is not None:
        edit(doc)
    if refusal:
        fields.setdefault("terminal_state", "refused")
        fields.setdefault("reason_code", "effect_before_plan")
    role = "operator" if kind == "ops" else "analyst"
    return submission(
        doc, obs if observations is None else observations, kind=kind, role=role, run_id=run_id, stage_id=stage_id, **fields
    )


def refusal_record(sub: dict[str, Any], violation: Violation, topic: str, offset: int) -> dict[str, Any]:
    """The Refusal.v2 record both cores write for ``sub`` (read from partition 0 of ``topic``, signed by its
    producer's test key) breaking ``violation``: a document rule is checked after the signature verified."""

    def clip(text: str) -> str:
        return text if len(text) <= 256 else text[:253] + "..."

    return {
        "exception": "ActivityRejected",
        "code": violation.code.value,
        "message": violation.message,
        "run_id": sub["run_id"],
        "stage_id": sub["stage_id"],
        "role": sub["role"],
        "kind": sub["kind"],
        "submission_id": sub["submission_id"],
        "field": violation.field,
        "declared": clip(violation.declared),
        "recomputed": clip(violation.recomputed),
        "earlier_stage_id": None,
        "input": {"topic": topic, "partition": 0, "offset": offset},
        "occurred_at_ms": sub["occurred_at_ms"],
        "producer": sub["producer"]["id"],
        "key_id": producer_signer(sub["producer"]["id"]).key_id,
        "authenticated": True,
    }
