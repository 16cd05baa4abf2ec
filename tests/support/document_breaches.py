"""Research and data/ops submissions the document rules accept (``VALID``), and one breach per rule with its exact
Violation (``RESEARCH``, ``DATAOPS``): checked on the rules alone and on both scheduler cores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bernstein.schemas.canonical import plan_hash, sha256_digest
from bernstein.schemas.documents.common import Violation
from bernstein.schemas.records import RefusalCode
from tests.support.modality import (
    HASH_A,
    HASH_B,
    ORDERS,
    SOURCE_A,
    SUMMARY,
    abort_document,
    dataops_submission,
    page_observations,
    research_submission,
    submission,
)

C = RefusalCode
ORDERS_HASH = sha256_digest(ORDERS)
SUMMARY_HASH = sha256_digest(SUMMARY)
OTHER = "sha256:" + "ab" * 32


def citation(doc: dict[str, Any], claim: int = 0, index: int = 0) -> dict[str, Any]:
    cited: dict[str, Any] = doc["claims"][claim]["citations"][index]
    return cited


def set_in(path: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        path(doc)[key] = value

    return edit


VALID: dict[str, Callable[[], dict[str, Any]]] = {
    "research-report": lambda: research_submission(),
    "research-budget-refusal": lambda: research_submission(
        document=abort_document(), observations=page_observations()[:1], terminal_state="refused", reason_code="budget_exhausted"
    ),
    "research-fetch-failure": lambda: research_submission(
        document=abort_document("bernstein.research.failure/v1"),
        observations=page_observations()[:1],
        terminal_state="failed",
        reason_code="fetch_failed",
    ),
    "ops-receipt": lambda: dataops_submission(),
    "data-receipt": lambda: dataops_submission(kind="data"),
    "ops-refusal": lambda: dataops_submission(refusal=True),
    "ops-failed-without-receipt": lambda: submission(b"worker crashed", [], kind="ops", role="operator", terminal_state="failed"),
    "data-timed-out-without-receipt": lambda: submission(b"", [], kind="data", role="analyst", terminal_state="timed_out"),
    "coding-is-opaque": lambda: submission(b"anything", [], kind="coding", role="developer"),
}


def _drop_claims(doc: dict[str, Any]) -> None:
    doc["claims"] = []


def uncite(doc: dict[str, Any]) -> None:
    doc["claims"][1]["citations"] = []


def _duplicate_claim(doc: dict[str, Any]) -> None:
    doc["claims"][1]["claim_id"] = "c1"
    citation(doc, 1)["claim_id"] = "c1"


RESEARCH: dict[str, tuple[dict[str, Any], Violation]] = {
    "not-json": (
        research_submission(document=None) | {"artifact": b"{not json", "artifact_hash": sha256_digest(b"{not json")},
        Violation(C.RESEARCH_ARTIFACT_MALFORMED, "research artifact is not JSON (UTF-8, RFC 8259)"),
    ),
    "not-canonical": (
        research_submission() | {"artifact": b'{"format": 1}', "artifact_hash": sha256_digest(b'{"format": 1}')},
        Violation(C.RESEARCH_ARTIFACT_MALFORMED, "research artifact is not RFC 8785 canonical JSON"),
    ),
    "unknown-field": (
        research_submission(set_in(lambda d: d, "extra", 1)),
        Violation(C.RESEARCH_ARTIFACT_MALFORMED, "research report is malformed: report: unexpected field(s) extra", "artifact"),
    ),
    "wrong-format": (
        research_submission(set_in(lambda d: d, "format", "bernstein.research.report/v9")),
        Violation(
            C.RESEARCH_ARTIFACT_MALFORMED,
            "research report is malformed: report.format: is 'bernstein.research.report/v9', "
            "expected 'bernstein.research.report/v1'",
            "artifact.format",
        ),
    ),
    "report-not-completed": (
        research_submission(terminal_state="failed"),
        Violation(
            C.RESEARCH_OUTCOME_MISMATCH,
            "a research report is anchored as 'completed', not 'failed'",
            "terminal_state",
            "failed",
            "completed",
        ),
    ),
    "no-claims": (
        research_submission(_drop_claims),
        Violation(C.RESEARCH_NO_CLAIMS, "research report holds no claims", "artifact.claims", "0"),
    ),
    "invalid-claim-id": (
        research_submission(lambda d: (d["claims"][0].update(claim_id="-c"), citation(d).update(claim_id="-c"))),
        Violation(
            C.RESEARCH_INVALID_CLAIM_ID,
            "claim 1 has an invalid claim_id '-c' (1-64 of A-Z a-z 0-9 _ . : -)",
            "artifact.claims[0].claim_id",
            "-c",
        ),
    ),
    "duplicate-claim-id": (
        research_submission(_duplicate_claim),
        Violation(
            C.RESEARCH_DUPLICATE_CLAIM_ID, "claim_id 'c1' is used by more than one claim", "artifact.claims[1].claim_id", "c1"
        ),
    ),
    "empty-statement": (
        research_submission(lambda d: d["claims"][0].update(statement=" \n ")),
        Violation(C.RESEARCH_EMPTY_STATEMENT, "claim 'c1' has an empty statement", "artifact.claims[0].statement", " \n "),
    ),
    "uncited-claim": (
        research_submission(uncite),
        Violation(
            C.RESEARCH_UNCITED_CLAIM,
            "claim 'c2' has no citation; every claim must quote a fetched page",
            "artifact.claims[1].citations",
            "c2",
        ),
    ),
    "citation-names-another-claim": (
        research_submission(lambda d: citation(d).update(claim_id="c2")),
        Violation(
            C.RESEARCH_CITATION_CLAIM_MISMATCH,
            "claim 'c1' citation 0: citation names claim 'c2'",
            "artifact.claims[0].citations[0].claim_id",
            "c2",
            "c1",
        ),
    ),
    "empty-quote": (
        research_submission(lambda d: citation(d, 1).update(quote="\u00a0 \t")),
        Violation(
            C.RESEARCH_EMPTY_QUOTE,
            "claim 'c2' citation 0: quoted span is empty",
            "artifact.claims[1].citations[0].quote",
            "\u00a0 \t",
        ),
    ),
    "malformed-page-hash": (
        research_submission(lambda d: citation(d).update(page_content_hash="sha256:ABC")),
        Violation(
            C.RESEARCH_MALFORMED_PAGE_HASH,
            "claim 'c1' citation 0: page content hash 'sha256:ABC' is not 'sha256:<64 hex>'",
            "artifact.claims[0].citations[0].page_content_hash",
            "sha256:ABC",
        ),
    ),
    "source-not-fetched": (
        research_submission(lambda d: citation(d).update(source_ref="https://never.test/")),
        Violation(
            C.RESEARCH_SOURCE_NOT_FETCHED,
            "claim 'c1' citation 0: cites source 'https://never.test/' that the run did not fetch",
            "artifact.claims[0].citations[0].source_ref",
            "https://never.test/",
        ),
    ),
    "citation-hash-is-not-the-fetched-page": (
        research_submission(lambda d: citation(d).update(page_content_hash=HASH_B)),
        Violation(
            C.RESEARCH_CITATION_SOURCE_MISMATCH,
            f"claim 'c1' citation 0: cites page '{HASH_B}' but source '{SOURCE_A}' was fetched as '{HASH_A}'",
            "artifact.claims[0].citations[0].page_content_hash",
            HASH_B,
            HASH_A,
        ),
    ),
    "cited-page-not-observed": (
        research_submission(observations=page_observations()[:1]),
        Violation(
            C.RESEARCH_CITATION_NOT_OBSERVED,
            f"claim 'c2' citation 0: cited page '{HASH_B}' is not among the stage's observations",
            "artifact.claims[1].citations[0].page_content_hash",
            HASH_B,
        ),
    ),
    "abort-malformed": (
        research_submission(
            lambda d: d.pop("fetched"), document=abort_document(), terminal_state="refused", reason_code="budget_exhausted"
        ),
        Violation(
            C.RESEARCH_ARTIFACT_MALFORMED,
            "research abort record is malformed: bernstein.research.refusal/v1: "
            "fields must be exactly fetched, format, plan, query, refusal",
        ),
    ),
    "abort-with-the-wrong-state": (
        research_submission(document=abort_document(), terminal_state="failed", reason_code="budget_exhausted"),
        Violation(
            C.RESEARCH_OUTCOME_MISMATCH,
            "a bernstein.research.refusal/v1 record is anchored with terminal_state 'refused', not 'failed'",
            "terminal_state",
            "failed",
            "refused",
        ),
    ),
    "abort-with-the-wrong-reason": (
        research_submission(document=abort_document(), terminal_state="refused", reason_code="fetch_failed"),
        Violation(
            C.RESEARCH_OUTCOME_MISMATCH,
            "a bernstein.research.refusal/v1 record is anchored with reason_code 'budget_exhausted', not 'fetch_failed'",
            "reason_code",
            "fetch_failed",
            "budget_exhausted",
        ),
    ),
    "abort-page-not-observed": (
        research_submission(document=abort_document(), observations=[], terminal_state="refused", reason_code="budget_exhausted"),
        Violation(
            C.RESEARCH_PAGE_NOT_OBSERVED,
            f"fetched page '{HASH_A}' of source '{SOURCE_A}' is not among the stage's observations",
            "artifact.fetched[0].page_content_hash",
            HASH_A,
        ),
    ),
    "free-text-research-result": (
        submission(b"three pages, all good", page_observations(), kind="research", role="scout", terminal_state="timed_out"),
        Violation(C.RESEARCH_ARTIFACT_MALFORMED, "research artifact is not JSON (UTF-8, RFC 8259)"),
    ),
}


def _output_first(sub: dict[str, Any]) -> dict[str, Any]:
    observations = list(reversed(sub["observations"]))
    return sub | {"observations": observations}


def _add_input(doc: dict[str, Any]) -> None:
    doc["inputs"].append({"role": "input", "index": 1, "ref": "late.csv", "content_hash": OTHER, "signature": ""})


PLAN = plan_hash([ORDERS_HASH], ["sum amount"])
DATAOPS: dict[str, tuple[dict[str, Any], Violation]] = {
    "receipt-not-json": (
        submission(b"\xff", [], kind="ops", role="operator"),
        Violation(
            C.DATAOPS_RECEIPT_MALFORMED,
            "receipt is malformed: receipt is not JSON (UTF-8, RFC 8259)",
        ),
    ),
    "receipt-wrong-format": (
        dataops_submission(set_in(lambda d: d, "format", "bernstein.dataops.receipt/v0")),
        Violation(
            C.DATAOPS_RECEIPT_MALFORMED,
            "receipt is malformed: receipt format is 'bernstein.dataops.receipt/v0', expected 'bernstein.dataops.receipt/v1'",
        ),
    ),
    "receipt-item-out-of-place": (
        dataops_submission(lambda d: d["outputs"][0].update(index=3)),
        Violation(C.DATAOPS_RECEIPT_MALFORMED, "receipt is malformed: receipt outputs[0] has index 3, expected 0"),
    ),
    "receipt-not-canonical": (
        dataops_submission()
        | {
            "artifact": (raw := dataops_submission()["artifact"].replace(b'{"format"', b'{ "format"', 1)),
            "artifact_hash": sha256_digest(raw),
        },
        Violation(
            C.DATAOPS_RECEIPT_MALFORMED,
            "receipt bytes are not canonical JSON (RFC 8785): they are not the bytes that were signed and anchored",
        ),
    ),
    "receipt-of-another-stage": (
        dataops_submission(set_in(lambda d: d, "stage_id", "elsewhere")),
        Violation(
            C.DATAOPS_CONTEXT_MISMATCH,
            "receipt stage_id 'elsewhere' does not match the submission's 'stage-0'",
            "artifact.stage_id",
            "elsewhere",
            "stage-0",
        ),
    ),
    "receipt-of-another-kind": (
        dataops_submission(kind="data", edit=set_in(lambda d: d, "kind", "ops")),
        Violation(
            C.DATAOPS_CONTEXT_MISMATCH,
            "receipt kind 'ops' does not match the submission's 'data'",
            "artifact.kind",
            "ops",
            "data",
        ),
    ),
    "plan-does-not-cover-a-late-input": (
        dataops_submission(
            _add_input,
            observations=[
                {"kind": "input", "ref": "orders.csv", "content_hash": ORDERS_HASH},
                {"kind": "input", "ref": "late.csv", "content_hash": OTHER},
                {"kind": "output", "ref": "summary.csv", "content_hash": SUMMARY_HASH},
            ],
        ),
        Violation(
            C.DATAOPS_PLAN_INPUTS_MISMATCH,
            f"plan input_hashes mismatch: anchored ['{ORDERS_HASH}'], recomputed {sorted([ORDERS_HASH, OTHER])}",
            "artifact.plan.input_hashes",
            ORDERS_HASH,
            ",".join(sorted([ORDERS_HASH, OTHER])),
        ),
    ),
    "plan-hash-does-not-recompute": (
        dataops_submission(lambda d: d["plan"].update(steps=["sum amount", "then delete the table"])),
        Violation(
            C.DATAOPS_PLAN_HASH_MISMATCH,
            f"plan_hash mismatch: anchored {PLAN}, recomputed {plan_hash([ORDERS_HASH], ['sum amount', 'then delete the table'])}",
            "artifact.plan.plan_hash",
            PLAN,
            plan_hash([ORDERS_HASH], ["sum amount", "then delete the table"]),
        ),
    ),
    "receipt-not-completed": (
        dataops_submission(terminal_state="refused", reason_code="nope"),
        Violation(
            C.DATAOPS_OUTCOME_MISMATCH,
            "artifact is a receipt, which is anchored as 'completed', not 'refused'",
            "terminal_state",
            "refused",
            "completed",
        ),
    ),
    "effect-observed-before-an-input": (
        _output_first(dataops_submission()),
        Violation(
            C.DATAOPS_EFFECT_BEFORE_PLAN,
            "observations[1] is an input recorded after output observations[0]: "
            "an effect before the plan (inputs are frozen once the plan is derived)",
            "observations[1]",
            "input",
        ),
    ),
    "receipt-and-observations-differ": (
        dataops_submission(
            observations=[
                {"kind": "input", "ref": "orders.csv", "content_hash": ORDERS_HASH},
                {"kind": "output", "ref": "summary.csv", "content_hash": OTHER},
            ]
        ),
        Violation(
            C.DATAOPS_OBSERVATIONS_MISMATCH,
            f"output 0 differs between receipt and journal entry: receipt 'summary.csv' {SUMMARY_HASH}, "
            f"journal 'summary.csv' {OTHER}",
            "observations",
            f"summary.csv {OTHER}",
            f"summary.csv {SUMMARY_HASH}",
        ),
    ),
    "observation-of-a-foreign-kind": (
        dataops_submission(
            observations=[
                {"kind": "input", "ref": "orders.csv", "content_hash": ORDERS_HASH},
                {"kind": "output", "ref": "summary.csv", "content_hash": SUMMARY_HASH},
                {"kind": "page", "ref": "x", "content_hash": OTHER},
            ]
        ),
        Violation(
            C.DATAOPS_OBSERVATIONS_MISMATCH,
            "journal entry has observations of kind ['page'] that the receipt does not list",
            "observations",
            "page",
        ),
    ),
    "refusal-malformed": (
        dataops_submission(lambda d: d.pop("message"), refusal=True),
        Violation(
            C.DATAOPS_REFUSAL_MALFORMED,
            "refusal is malformed: refusal fields are ['code', 'format', 'inputs', 'kind', 'plan_hash', 'run_id', "
            "'stage_id'], expected ['code', 'format', 'inputs', 'kind', 'message', 'plan_hash', 'run_id', 'stage_id']",
        ),
    ),
    "refusal-of-another-run": (
        dataops_submission(set_in(lambda d: d, "run_id", "run-2"), refusal=True),
        Violation(
            C.DATAOPS_CONTEXT_MISMATCH,
            "refusal run_id 'run-2' does not match the submission's 'run-1'",
            "artifact.run_id",
            "run-2",
            "run-1",
        ),
    ),
    "refusal-anchored-as-completed": (
        dataops_submission(refusal=True, terminal_state="completed"),
        Violation(
            C.DATAOPS_OUTCOME_MISMATCH,
            "artifact is a refusal ('EFFECT_BEFORE_PLAN'), anchored with terminal_state 'refused', not 'completed'",
            "terminal_state",
            "completed",
            "refused",
        ),
    ),
    "refusal-with-another-reason-code": (
        dataops_submission(refusal=True, reason_code="ok"),
        Violation(
            C.DATAOPS_OUTCOME_MISMATCH,
            "artifact is a refusal ('EFFECT_BEFORE_PLAN'), anchored with reason_code 'effect_before_plan', not 'ok'",
            "reason_code",
            "ok",
            "effect_before_plan",
        ),
    ),
    "refusal-without-plan-but-with-an-effect": (
        dataops_submission(
            refusal=True,
            observations=[
                {"kind": "input", "ref": "orders.csv", "content_hash": ORDERS_HASH},
                {"kind": "output", "ref": "summary.csv", "content_hash": SUMMARY_HASH},
            ],
        ),
        Violation(
            C.DATAOPS_EFFECT_BEFORE_PLAN,
            "observations[1] is an output, but no plan was derived (plan_hash is null): an effect before the plan",
            "observations[1]",
            "output",
        ),
    ),
    "refusal-inputs-differ-from-observations": (
        dataops_submission(refusal=True, observations=[]),
        Violation(
            C.DATAOPS_OBSERVATIONS_MISMATCH,
            f"refusal lists inputs ['{ORDERS_HASH}'], the journal entry observed []",
            "observations",
            "",
            ORDERS_HASH,
        ),
    ),
    "completed-stage-without-a-receipt": (
        submission(b"done", [], kind="data", role="analyst"),
        Violation(
            C.DATAOPS_RECEIPT_MALFORMED,
            "receipt is malformed: receipt is not JSON (UTF-8, RFC 8259)",
        ),
    ),
}
