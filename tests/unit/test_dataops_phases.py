"""The data/ops phase machine: inputs -> one plan -> outputs -> finish, each violation typed and recordable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bernstein.producers.activity import ActivityRejected
from bernstein.producers.dataops import (
    REFUSAL_FORMAT,
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
from bernstein.schemas.canonical import canonical_json, plan_hash, sha256_digest
from bernstein.schemas.records import ActivityKind, TerminalState
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import Ed25519Signer

SIGNER = Ed25519Signer.from_seed(bytes(range(32)))
STEPS = ["filter status == shipped", "group by region", "sum amount_cents"]


@pytest.fixture
def store(tmp_path: Path) -> DirBlobStore:
    return DirBlobStore(tmp_path / "cas")


def _activity(store: DirBlobStore, kind: str = "data") -> DataOpsActivity:
    return DataOpsActivity(kind, "run-1", "stage-1", store=store, signer=SIGNER)


def _effect_before_plan(a: DataOpsActivity) -> None:
    a.add_input("orders.csv", b"a,b\n1,2\n")
    a.add_output("summary.csv", b"x\n")


def _input_after_plan(a: DataOpsActivity) -> None:
    a.add_input("orders.csv", b"a,b\n1,2\n")
    a.plan(STEPS)
    a.add_input("late.csv", b"late\n")


def _second_plan(a: DataOpsActivity) -> None:
    a.add_input("orders.csv", b"a,b\n1,2\n")
    a.plan(STEPS)
    a.add_output("summary.csv", b"x\n")
    a.plan(STEPS)


def _finish_before_plan(a: DataOpsActivity) -> None:
    a.add_input("orders.csv", b"a,b\n1,2\n")
    a.finish()


VIOLATIONS = [
    pytest.param(_effect_before_plan, EffectBeforePlan, "EFFECT_BEFORE_PLAN", id="effect_before_plan"),
    pytest.param(_input_after_plan, InputAfterPlan, "INPUT_AFTER_PLAN", id="input_after_plan"),
    pytest.param(_second_plan, PlanAlreadyDerived, "PLAN_ALREADY_DERIVED", id="second_plan"),
    pytest.param(_finish_before_plan, NoPlan, "NO_PLAN", id="finish_before_plan"),
]


@pytest.mark.parametrize(("run", "error_type", "code"), VIOLATIONS)
def test_each_violation_is_refused_with_its_code(store: DirBlobStore, run, error_type, code) -> None:
    activity = _activity(store)
    with pytest.raises(error_type) as caught:
        run(activity)
    assert isinstance(caught.value, DataOpsPhaseError)
    assert isinstance(caught.value, ActivityRejected)
    assert caught.value.code == code
    assert activity.violation is caught.value


@pytest.mark.parametrize(("run", "error_type", "code"), VIOLATIONS)
def test_each_violation_is_recordable_as_a_refused_result(store: DirBlobStore, run, error_type, code) -> None:
    activity = _activity(store)
    with pytest.raises(error_type) as caught:
        run(activity)
    result = activity.refused_result(caught.value)

    assert result.kind is ActivityKind.DATA
    assert result.terminal_state is TerminalState.REFUSED
    assert result.reason_code == code.lower()
    assert result.artifact_hash == sha256_digest(result.artifact)
    assert store.get(result.artifact_hash) == result.artifact  # stored before anything names it
    document = json.loads(result.artifact)
    assert result.artifact == canonical_json(document)
    assert document["format"] == REFUSAL_FORMAT
    assert (document["run_id"], document["stage_id"], document["kind"], document["code"]) == ("run-1", "stage-1", "data", code)
    assert document["message"] == caught.value.message
    assert document["inputs"] == [sha256_digest(b"a,b\n1,2\n")]
    assert document["plan_hash"] == activity.plan_hash
    assert [o.kind for o in result.observations][0] == "input"
    assert activity.phase is Phase.FINISHED


def test_refusal_plan_hash_is_null_before_the_plan_and_set_after(store: DirBlobStore) -> None:
    before = _activity(store)
    with pytest.raises(EffectBeforePlan):
        _effect_before_plan(before)
    assert json.loads(before.refused_result().artifact)["plan_hash"] is None

    after = _activity(store)
    with pytest.raises(InputAfterPlan):
        _input_after_plan(after)
    assert json.loads(after.refused_result().artifact)["plan_hash"] == plan_hash([sha256_digest(b"a,b\n1,2\n")], STEPS)


def test_a_refused_effect_stores_and_signs_nothing(store: DirBlobStore) -> None:
    activity = _activity(store)
    with pytest.raises(EffectBeforePlan) as caught:
        _effect_before_plan(activity)
    assert not store.has(sha256_digest(b"x\n"))
    assert caught.value.evidence == {"ref": "summary.csv", "content_hash": sha256_digest(b"x\n")}
    assert [o.kind for o in activity.observations()] == ["input"]


def test_a_violation_is_sticky_finish_never_yields_a_receipt(store: DirBlobStore) -> None:
    activity = _activity(store)
    with pytest.raises(EffectBeforePlan):
        _effect_before_plan(activity)
    activity.plan(STEPS)  # carrying on as if nothing happened
    activity.add_output("summary.csv", b"x\n")
    with pytest.raises(EffectBeforePlan, match="can only be recorded as refused"):
        activity.finish()
    assert activity.refused_result().reason_code == "effect_before_plan"


def test_the_happy_path_and_nothing_after_finish(store: DirBlobStore) -> None:
    activity = DataActivity("run-1", "stage-1", store=store, signer=SIGNER)
    assert activity.phase is Phase.INPUTS
    activity.add_input("orders.csv", b"in")
    assert activity.plan(STEPS) == plan_hash([sha256_digest(b"in")], STEPS)
    assert activity.phase is Phase.EFFECTS
    activity.add_output("summary.csv", b"out")
    result, receipt = activity.finish()
    assert activity.phase is Phase.FINISHED
    assert result.terminal_state is TerminalState.COMPLETED
    assert result.artifact == receipt.canonical_bytes()
    assert [(o.kind, o.ref) for o in result.observations] == [("input", "orders.csv"), ("output", "summary.csv")]
    for call in (lambda: activity.add_input("x", b"x"), lambda: activity.add_output("y", b"y"), activity.finish):
        with pytest.raises(ActivityFinished):
            call()


def test_a_plan_with_zero_inputs_is_allowed(store: DirBlobStore) -> None:
    activity = OpsActivity("run-1", "stage-1", store=store, signer=SIGNER)
    activity.plan(["set x = 1"])
    activity.add_output("x.conf", b"x = 1\n")
    result, receipt = activity.finish()
    assert receipt.kind == "ops" and receipt.plan.input_hashes == ()
    assert result.kind is ActivityKind.OPS


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"kind": "coding"}, "UNKNOWN_KIND"),
        ({"run_id": "bad run"}, "INVALID_RUN_ID"),
        ({"stage_id": ""}, "INVALID_STAGE_ID"),
    ],
)
def test_construction_refuses_bad_context(store: DirBlobStore, kwargs: dict[str, str], code: str) -> None:
    args = {"kind": "data", "run_id": "run-1", "stage_id": "s", **kwargs}
    with pytest.raises(ActivityRejected) as caught:
        DataOpsActivity(args["kind"], args["run_id"], args["stage_id"], store=store, signer=SIGNER)
    assert caught.value.code == code


@pytest.mark.parametrize("steps", ["one string", ["ok", ""], ["ok", 3]])
def test_plan_refuses_malformed_steps_without_deriving(store: DirBlobStore, steps) -> None:
    activity = _activity(store)
    with pytest.raises(ActivityRejected) as caught:
        activity.plan(steps)
    assert caught.value.code == "INVALID_PLAN"
    assert activity.phase is Phase.INPUTS


def test_refs_and_content_are_checked(store: DirBlobStore) -> None:
    activity = _activity(store)
    with pytest.raises(ActivityRejected) as caught:
        activity.add_input("", b"x")
    assert caught.value.code == "INVALID_REF"
    with pytest.raises(ActivityRejected) as caught:
        activity.add_input("x", "not bytes")  # type: ignore[arg-type]
    assert caught.value.code == "INVALID_CONTENT"


def test_refused_result_needs_a_refusal(store: DirBlobStore) -> None:
    with pytest.raises(ValueError, match="nothing was refused"):
        _activity(store).refused_result()
