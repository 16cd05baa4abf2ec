"""The scheduler refuses research and data/ops submissions that break their document rules: both cores.

Every case of tests/unit/test_documents_rules.py goes through
``SchedulerCore.step`` (the reference) and the native core; the refusal
record must be exactly the one the rule names, byte-identical in both cores,
and the state must not change. The native core hands these records to the
reference (``Fallback``), which the fallback counter shows.
"""

from __future__ import annotations

from typing import Any

import pytest

from consumers.core.model import InputRecord, OutputRecord, SchedulerConfig, SchedulerState, Stream
from consumers.core.native import NativeSchedulerCore, NativeState
from consumers.core.step import SchedulerCore, initial_state
from schemas import codec
from schemas.canonical import hmac_key_id
from schemas.documents.common import Violation
from substrate.keys import Ed25519Signer
from tests.modality_kit import MODALITY_ROLES, dataops_submission, research_submission
from tests.unit.test_documents_rules import DATAOPS, RESEARCH, VALID

SIGNER = Ed25519Signer.from_seed(b"\x07" * 32)
AUDIT_KEY = b"modality-rules-audit-key-0123456"
TOPIC = "t.activity.submissions"
CONFIG = SchedulerConfig(
    roles=MODALITY_ROLES, signer=SIGNER, audit_key=AUDIT_KEY, audit_key_id=hmac_key_id(AUDIT_KEY), seal_every=1000
)
CASES: dict[str, tuple[dict[str, Any], Violation]] = {
    **{f"research/{k}": v for k, v in RESEARCH.items()},
    **{f"dataops/{k}": v for k, v in DATAOPS.items()},
}


def record_of(sub: dict[str, Any], offset: int = 0) -> InputRecord:
    value = codec.encode(codec.ACTIVITY_SUBMISSION, sub)
    return InputRecord(TOPIC, 0, offset, 1_700_000_000_500 + offset, sub["run_id"].encode(), value)


def expected_refusal(sub: dict[str, Any], violation: Violation, offset: int = 0) -> dict[str, Any]:
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
        "input": {"topic": TOPIC, "partition": 0, "offset": offset},
        "occurred_at_ms": sub["occurred_at_ms"],
    }


def both_cores(sub: dict[str, Any]) -> tuple[list[OutputRecord], SchedulerState, NativeSchedulerCore]:
    """Step one record through the reference and the native core; their outputs must be byte-identical."""
    record = record_of(sub)
    state, expected = SchedulerCore(CONFIG).step(initial_state(CONFIG, 0), record)
    native = NativeSchedulerCore(CONFIG, 0, self_check=False)
    native_state: SchedulerState | NativeState = initial_state(CONFIG, 0)
    native_state, got = native.step(native_state, record)
    assert [(o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in got] == [
        (o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in expected
    ]
    assert native.to_scheduler_state() == state
    return expected, state, native


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_broken_rule_is_refused_with_its_exact_record_by_both_cores(name: str) -> None:
    sub, violation = CASES[name]
    outputs, state, native = both_cores(sub)
    assert [o.stream for o in outputs] == [Stream.REFUSALS, Stream.AUDIT]
    refusal = codec.decode(outputs[0].value or b"")
    assert refusal.schema.name == codec.REFUSAL
    assert refusal.record == expected_refusal(sub, violation)
    assert outputs[0].key == sub["run_id"].encode()
    audit = codec.decode(codec.decode(outputs[1].value or b"").record["payload"]).record
    assert (audit["event"], audit["reason_code"], audit["journal_seq"]) == ("activity.refused", violation.code.value, -1)
    assert state.runs == {}  # a refusal changes no run state
    assert native.fallbacks == 1  # decided by the reference, so both cores agree by construction


@pytest.mark.parametrize("name", sorted(VALID))
def test_documents_the_sdk_builds_are_journalled_by_both_cores(name: str) -> None:
    sub = VALID[name]()
    outputs, state, native = both_cores(sub)
    assert [o.stream for o in outputs] == [Stream.JOURNAL, Stream.AUDIT]
    entry = codec.decode(codec.decode(outputs[0].value or b"").record["payload"]).record
    assert (entry["kind"], entry["terminal_state"], entry["artifact_hash"]) == (
        sub["kind"],
        sub["terminal_state"],
        sub["artifact_hash"],
    )
    assert state.runs["run-1"].entry_count == 1
    assert native.fallbacks == (0 if sub["kind"] == "coding" else 1)


def test_document_rules_run_after_the_generic_checks() -> None:
    """A broken report whose artifact hash is also wrong is refused for the hash (the generic check comes first)."""
    sub = research_submission(lambda d: d["claims"][0].update(citations=[]))
    sub["artifact_hash"] = "sha256:" + "00" * 32
    outputs, _, native = both_cores(sub)
    assert codec.decode(outputs[0].value or b"").record["code"] == "ARTIFACT_HASH_MISMATCH"
    assert native.fallbacks == 0  # the native core decides generic refusals itself


def test_a_refused_stage_can_be_resubmitted_correctly() -> None:
    """Refusals change no state: the same stage id, fixed, is journalled next."""
    core = SchedulerCore(CONFIG)
    state = initial_state(CONFIG, 0)
    bad = dataops_submission(lambda d: d["plan"].update(steps=["other"]), stage_id="rollup")
    state, outs = core.step(state, record_of(bad, 0))
    assert codec.decode(outs[0].value or b"").record["code"] == "DATAOPS_PLAN_HASH_MISMATCH"
    good = dataops_submission(stage_id="rollup", submission_id="sub-run-1-rollup-2")
    state, outs = core.step(state, record_of(good, 1))
    assert [o.stream for o in outs] == [Stream.JOURNAL, Stream.AUDIT]
    assert list(state.runs["run-1"].stages) == ["rollup"]
