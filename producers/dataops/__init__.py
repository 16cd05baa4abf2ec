"""Data and ops activities: signed inputs, one deterministic plan, signed outputs, one signed receipt.

    activity = DataActivity("run-1", "rollup", store=store, signer=keys.signer)
    activity.add_input("orders.csv", csv_bytes)          # stored + signed
    activity.plan(["filter status == shipped", "group by region", "sum amount_cents"])
    activity.add_output("summary.csv", summary_bytes)    # only after the plan
    result, receipt = activity.finish()                  # artifact = signed receipt

``verify_receipt`` checks a stored receipt offline against pinned keys only
(``bernstein.substrate.dataops_receipts``, re-exported here).
See ``docs/dataops.md`` for the phase rules, the receipt format and the trust model.
"""

from __future__ import annotations

from bernstein.producers.dataops.activity import (
    ActivityFinished,
    DataActivity,
    DataOpsActivity,
    DataOpsPhaseError,
    EffectBeforePlan,
    InputAfterPlan,
    NoPlan,
    OpsActivity,
    Phase,
    PlanAlreadyDerived,
)
from bernstein.schemas.documents.dataops import (
    RECEIPT_FORMAT,
    REFUSAL_FORMAT,
    DataOpsPlan,
    DataOpsReceipt,
    MalformedReceipt,
    SignedArtifact,
    artifact_signing_input,
    receipt_signing_input,
)
from bernstein.substrate.dataops_receipts import DataOpsVerdict, ReceiptFailure, verify_artifact, verify_receipt, verify_refusal

__all__ = [
    "RECEIPT_FORMAT",
    "REFUSAL_FORMAT",
    "ActivityFinished",
    "DataActivity",
    "DataOpsActivity",
    "DataOpsPhaseError",
    "DataOpsPlan",
    "DataOpsReceipt",
    "DataOpsVerdict",
    "EffectBeforePlan",
    "InputAfterPlan",
    "MalformedReceipt",
    "NoPlan",
    "OpsActivity",
    "Phase",
    "PlanAlreadyDerived",
    "ReceiptFailure",
    "SignedArtifact",
    "artifact_signing_input",
    "receipt_signing_input",
    "verify_artifact",
    "verify_receipt",
    "verify_refusal",
]
