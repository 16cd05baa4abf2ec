"""The data/ops modality check: reattach the signed receipt and verify it with pinned keys.

A thin wrapper: ``bernstein.substrate.dataops_receipts`` does the work and returns a
frozen verdict; this module only turns it into the verifier's stage note,
reason and detail lines. Output is deterministic (failures in check order).
"""

from __future__ import annotations

from typing import Any

from bernstein.schemas.documents.dataops import RECEIPT_FORMAT, REFUSAL_FORMAT
from bernstein.substrate.dataops_receipts import DataOpsVerdict, verify_artifact
from bernstein.substrate.text import plural
from bernstein.verifier.checks import register
from bernstein.verifier.checks.base import CheckContext, DetailLine, ModalityVerdict

NOTE_VERIFIED = "signed receipt verified"
NOT_REATTACHED = "receipt not reattached"


def check_dataops(ctx: CheckContext) -> ModalityVerdict:
    """Verify a data or ops stage's artifact (its signed receipt, or its recorded refusal)."""
    if ctx.cas is None:
        # Without the store the receipt stops verifying, not merely stops logging (seed 000).
        return ModalityVerdict(ok=False, unchecked=NOT_REATTACHED)
    if ctx.artifact is None:
        problem = ctx.artifact_problem or "receipt bytes are not available"
        return ModalityVerdict(
            ok=False,
            reason=problem,
            details=(DetailLine(f"receipt FAIL artifact -- {problem}", False, {"check": "artifact"}),),
        )
    entry: dict[str, Any] = {"run_id": ctx.run_id, "stage_id": ctx.stage_id, "kind": ctx.kind, **ctx.entry}
    verdict = verify_artifact(ctx.artifact, trusted=ctx.trusted, cas=ctx.cas, entry=entry)
    return to_modality_verdict(verdict)


def to_modality_verdict(verdict: DataOpsVerdict) -> ModalityVerdict:
    """Render a DataOpsVerdict as the stage's notes, reason and detail lines."""
    data = verdict.to_json()
    if verdict.format == REFUSAL_FORMAT:
        label, what = "refusal", f"refusal recorded ({verdict.refusal_code.lower()})"
    else:
        label, what = "receipt", NOTE_VERIFIED
    if not verdict.ok:
        details = tuple(DetailLine(f"{label} FAIL {f.check} -- {f.reason}", False, f.to_json()) for f in verdict.failures)
        return ModalityVerdict(ok=False, reason=verdict.reason, details=details, data=data)
    if verdict.format == REFUSAL_FORMAT:
        line = f"refusal OK {verdict.refusal_code} ({plural(verdict.inputs, 'input')} recorded)"
        facts = {"code": verdict.refusal_code, "inputs": verdict.inputs, "plan_hash": verdict.plan_hash}
        return ModalityVerdict(ok=True, notes=(what,), details=(DetailLine(line, True, facts),), data=data)
    if verdict.format != RECEIPT_FORMAT:
        # A failed/timed-out stage without a receipt: nothing signed to check.
        return ModalityVerdict(ok=True, notes=("no receipt (not completed)",), data=data)
    line = f"receipt OK plan {verdict.plan_hash} ({plural(verdict.inputs, 'input')}, {plural(verdict.outputs, 'output')} signed)"
    notes = (what,) if verdict.evidence_reattached else (what, "inputs/outputs not reattached")
    facts = {
        "plan_hash": verdict.plan_hash,
        "inputs": verdict.inputs,
        "outputs": verdict.outputs,
        "signer_key_id": verdict.signer_key_id,
    }
    return ModalityVerdict(ok=True, notes=notes, details=(DetailLine(line, True, facts),), data=data)


register("data", check_dataops)
register("ops", check_dataops)
