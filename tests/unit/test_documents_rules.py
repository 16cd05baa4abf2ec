"""The modality document rules (schemas/documents/): one hand-built breach per rule, the exact Violation.

These are the rules the scheduler enforces from a submission's own bytes. The cases are in
tests/support/document_breaches.py; tests/unit/test_scheduler_modality_rules.py checks the
refusal records both cores write for them.
"""

from __future__ import annotations

from typing import Any

import pytest

from bernstein.schemas.canonical import canonical_json, plan_hash, sha256_digest
from bernstein.schemas.documents.rules import DOCUMENT_KINDS
from bernstein.schemas.documents.rules import record_violation as violation_of
from bernstein.schemas.records import RefusalCode
from tests.support.document_breaches import DATAOPS, ORDERS_HASH, OTHER, RESEARCH, VALID, C, citation, uncite
from tests.support.modality import SOURCE_B, dataops_submission, research_submission

# ---------------------------------------------------------------------------
# accepted
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALID))
def test_documents_the_sdk_builds_pass_every_rule(name: str) -> None:
    assert violation_of(VALID[name]()) is None


def test_rules_exist_for_research_data_and_ops_only() -> None:
    assert DOCUMENT_KINDS == {"research", "data", "ops"}


# ---------------------------------------------------------------------------
# research
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RESEARCH))
def test_each_research_rule_names_its_exact_violation(name: str) -> None:
    sub, expected = RESEARCH[name]
    assert violation_of(sub) == expected


def test_the_first_broken_claim_wins_in_report_order() -> None:
    def two_faults(doc: dict[str, Any]) -> None:
        doc["claims"][0]["citations"] = []
        citation(doc, 1).update(quote="")

    found = violation_of(research_submission(two_faults))
    assert found is not None and (found.code, found.field) == (C.RESEARCH_UNCITED_CLAIM, "artifact.claims[0].citations")


def test_messages_stay_bounded_for_hostile_values() -> None:
    huge = "x" * 100_000
    found = violation_of(research_submission(lambda d: citation(d).update(source_ref=huge)))
    assert found is not None and found.code is C.RESEARCH_SOURCE_NOT_FETCHED
    assert len(found.message) < 400
    deep = b"[" * 5000 + b"]" * 5000
    found = violation_of(research_submission() | {"artifact": deep, "artifact_hash": sha256_digest(deep)})
    assert found is not None and found.code is C.RESEARCH_ARTIFACT_MALFORMED


# ---------------------------------------------------------------------------
# data / ops
# ---------------------------------------------------------------------------


RECOMPUTED_WITH_LATE = plan_hash([ORDERS_HASH, OTHER], ["sum amount"])


@pytest.mark.parametrize("name", sorted(DATAOPS))
def test_each_dataops_rule_names_its_exact_violation(name: str) -> None:
    sub, expected = DATAOPS[name]
    assert violation_of(sub) == expected


def test_every_modality_refusal_code_has_a_case_here() -> None:
    covered = {v.code for _, v in (*RESEARCH.values(), *DATAOPS.values())}
    assert covered == {c for c in RefusalCode if c.value.startswith(("RESEARCH_", "DATAOPS_"))}


def test_signatures_are_not_the_schedulers_business() -> None:
    """A receipt whose signatures were stripped passes the byte rules: pinned-key checks are the verifier's."""

    def strip(doc: dict[str, Any]) -> None:
        doc["receipt_signature"] = ""
        for item in (*doc["inputs"], *doc["outputs"]):
            item["signature"] = ""

    assert violation_of(dataops_submission(strip)) is None


def test_the_sdk_refuses_what_the_scheduler_refuses() -> None:
    """The worker's boundary (validate_report) and the scheduler share report_problem: same code, same sentence."""
    from bernstein.producers.activity import ActivityRejected
    from bernstein.producers.research import parse_report, validate_report

    sub = research_submission(uncite)
    with pytest.raises(ActivityRejected) as caught:
        validate_report(parse_report(sub["artifact"]))
    found = violation_of(sub)
    assert found is not None
    assert (f"RESEARCH_{caught.value.code}", caught.value.message) == (found.code.value, found.message)
    assert canonical_json(parse_report(sub["artifact"]).to_document()) == sub["artifact"]
    assert SOURCE_B in sub["artifact"].decode()
