"""The verifier reports the plan-before-effect order the scheduler enforces (EFFECT_BEFORE_PLAN).

A journal edited after the fact (the scheduler would have refused these
submissions) must still fail offline, with the same rule from
``bernstein.schemas.documents.dataops.order_problem``.
"""

from __future__ import annotations

from typing import Any

from bernstein.substrate.dataops_receipts import EFFECT_BEFORE_PLAN, OBSERVATIONS_MISMATCH, verify_artifact
from bernstein.substrate.keys import TrustedKeys
from tests.support.modality import SIGNER, dataops_submission

TRUSTED = TrustedKeys(ed25519={SIGNER.key_id: SIGNER.public_key_raw})


def entry_of(sub: dict[str, Any]) -> dict[str, Any]:
    return {k: sub[k] for k in ("run_id", "stage_id", "kind", "artifact_hash", "observations", "terminal_state", "reason_code")}


def test_a_receipt_whose_entry_lists_an_output_before_an_input_fails_with_effect_before_plan() -> None:
    sub = dataops_submission()
    assert verify_artifact(sub["artifact"], trusted=TRUSTED, cas=None, entry=entry_of(sub)).ok
    entry = entry_of(sub) | {"observations": list(reversed(sub["observations"]))}
    verdict = verify_artifact(sub["artifact"], trusted=TRUSTED, cas=None, entry=entry)
    assert not verdict.ok
    assert [(f.code, f.check, f.reason) for f in verdict.failures] == [
        (
            EFFECT_BEFORE_PLAN,
            "journal",
            "observations[1] is an input recorded after output observations[0]: "
            "an effect before the plan (inputs are frozen once the plan is derived)",
        )
    ]
    assert verdict.failures[0].evidence == {"where": "observations[1]"}


def test_a_refusal_without_a_plan_whose_entry_observed_an_output_fails_with_effect_before_plan() -> None:
    sub = dataops_submission(refusal=True)
    assert verify_artifact(sub["artifact"], trusted=TRUSTED, cas=None, entry=entry_of(sub)).ok
    output = {"kind": "output", "ref": "summary.csv", "content_hash": "sha256:" + "cd" * 32}
    entry = entry_of(sub) | {"observations": [*sub["observations"], output]}
    verdict = verify_artifact(sub["artifact"], trusted=TRUSTED, cas=None, entry=entry)
    assert [(f.code, f.reason) for f in verdict.failures] == [
        (
            EFFECT_BEFORE_PLAN,
            "observations[1] is an output, but no plan was derived (plan_hash is null): an effect before the plan",
        )
    ]


def test_observation_mismatches_keep_their_code_and_evidence() -> None:
    sub = dataops_submission()
    entry = entry_of(sub) | {
        "observations": [*sub["observations"], {"kind": "page", "ref": "x", "content_hash": "sha256:" + "ee" * 32}]
    }
    verdict = verify_artifact(sub["artifact"], trusted=TRUSTED, cas=None, entry=entry)
    assert [(f.code, f.reason, dict(f.evidence)) for f in verdict.failures] == [
        (
            OBSERVATIONS_MISMATCH,
            "journal entry has observations of kind ['page'] that the receipt does not list",
            {"kinds": "page"},
        )
    ]
