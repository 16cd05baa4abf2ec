"""The demo jobs: a CSV rollup and a config change, run through the phase machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bernstein.producers.activity import ActivityRejected
from bernstein.producers.dataops import DataActivity, EffectBeforePlan, InputAfterPlan, NoPlan, OpsActivity, PlanAlreadyDerived
from bernstein.producers.dataops.examples import (
    VIOLATIONS,
    InputFile,
    JobSpec,
    apply_config,
    misordered_job,
    run_data_job,
    run_ops_job,
    transform_csv,
)
from bernstein.schemas.canonical import plan_hash, sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import Ed25519Signer

DEMO = Path(__file__).resolve().parents[2] / "demo" / "data"
SIGNER = Ed25519Signer.from_seed(b"\x42" * 32)


@pytest.fixture
def store(tmp_path: Path) -> DirBlobStore:
    return DirBlobStore(tmp_path / "cas")


def _orders() -> InputFile:
    return InputFile("orders.csv", (DEMO / "orders.csv").read_bytes())


def _spec(name: str) -> JobSpec:
    return JobSpec.parse((DEMO / name).read_bytes())


def test_the_data_job_writes_shipped_totals_per_region(tmp_path: Path, store: DirBlobStore) -> None:
    spec = _spec("orders.job.json")
    assert spec.kind == "data"
    output = tmp_path / "out" / "shipped_by_region.csv"
    outcome = run_data_job(DataActivity("run-1", "rollup", store=store, signer=SIGNER), [_orders()], spec.steps, output)

    assert output.read_text() == ("region,count,amount_cents\neast,3,44049\nnorth,4,26800\nsouth,3,21475\nwest,3,44249\n")
    receipt = outcome.receipt
    assert [i.ref for i in receipt.inputs] == ["orders.csv"]
    assert [o.ref for o in receipt.outputs] == ["shipped_by_region.csv"]
    assert receipt.outputs[0].content_hash == sha256_digest(output.read_bytes())
    assert receipt.plan.plan_hash == plan_hash([sha256_digest(_orders().content)], spec.steps)
    assert store.get(outcome.result.artifact_hash) == receipt.canonical_bytes()
    assert store.get(receipt.outputs[0].content_hash) == output.read_bytes()


def test_the_data_job_is_reproducible_byte_for_byte(tmp_path: Path, store: DirBlobStore) -> None:
    steps = _spec("orders.job.json").steps
    first = run_data_job(DataActivity("run-1", "a", store=store, signer=SIGNER), [_orders()], steps, tmp_path / "1" / "out.csv")
    second = run_data_job(DataActivity("run-1", "a", store=store, signer=SIGNER), [_orders()], steps, tmp_path / "2" / "out.csv")
    assert first.result.artifact == second.result.artifact  # Ed25519 is deterministic, refs are basenames


def test_csv_steps_combine_filters_groups_and_several_inputs() -> None:
    a = b"region,status,amount_cents\nnorth,shipped,5\nsouth,shipped,7\nnorth,pending,100\n"
    b = b"region,status,amount_cents\nnorth,shipped,-2\n"
    assert transform_csv([a, b], ["filter status != pending", "group by region", "sum amount_cents"]) == (
        b"region,amount_cents\nnorth,3\nsouth,7\n"
    )
    assert transform_csv([a], ["count"]) == b"count\n3\n"
    assert transform_csv([a], ["filter status == lost", "sum amount_cents"]) == b"amount_cents\n0\n"


@pytest.mark.parametrize(
    ("tables", "steps", "code"),
    [
        ([b"a,b\n1,2\n"], ["sort by a"], "INVALID_STEP"),
        ([b"a,b\n1,2\n"], ["group by a"], "INVALID_STEP"),
        ([b"a,b\n1,2\n"], ["sum a", "filter b == 2"], "INVALID_STEP"),
        ([b"a,b\n1,2\n"], ["sum c"], "UNKNOWN_COLUMN"),
        ([b"a,b\n1,2.50\n"], ["sum b"], "INVALID_DATA"),
        ([b"a,b\n1,2\n", b"a,c\n1,2\n"], ["count"], "INVALID_DATA"),
        ([b"a,b\n1\n"], ["count"], "INVALID_DATA"),
    ],
)
def test_csv_job_refuses_what_it_cannot_do_exactly(tables: list[bytes], steps: list[str], code: str) -> None:
    with pytest.raises(ActivityRejected) as caught:
        transform_csv(tables, steps)
    assert caught.value.code == code


def test_a_bad_step_is_refused_before_the_plan_and_is_recordable(tmp_path: Path, store: DirBlobStore) -> None:
    activity = DataActivity("run-1", "rollup", store=store, signer=SIGNER)
    with pytest.raises(ActivityRejected) as caught:
        run_data_job(activity, [_orders()], ["drop table orders"], tmp_path / "out.csv")
    assert activity.plan_hash is None
    assert not (tmp_path / "out.csv").exists()
    result = activity.refused_result(caught.value)
    assert result.reason_code == "invalid_step"
    assert json.loads(result.artifact)["inputs"] == [sha256_digest(_orders().content)]


def test_the_ops_job_changes_a_copy_and_records_before_and_after(tmp_path: Path, store: DirBlobStore) -> None:
    spec = _spec("service.job.json")
    assert spec.kind == "ops"
    original = (DEMO / "service.conf").read_bytes()
    output = tmp_path / "service.conf"
    outcome = run_ops_job(
        OpsActivity("run-1", "tune", store=store, signer=SIGNER), [InputFile("service.conf", original)], spec.steps, output
    )

    after = output.read_text()
    assert "max_connections = 200\n" in after and "max_connections = 100" not in after
    assert "log_level = info\n" in after and "log_level = debug" not in after
    # Everything else is byte-for-byte the same.
    changed = {"max_connections = 100": "max_connections = 200", "log_level = debug": "log_level = info"}
    expected = original.decode()
    for old, new in changed.items():
        expected = expected.replace(old, new)
    assert after == expected
    assert (DEMO / "service.conf").read_bytes() == original  # the input is untouched
    assert [(c.key, c.before, c.after) for c in outcome.changes] == [
        ("max_connections", "100", "200"),
        ("log_level", "debug", "info"),
    ]
    receipt = outcome.receipt
    assert receipt.inputs[0].content_hash == sha256_digest(original)  # before
    assert receipt.outputs[0].content_hash == sha256_digest(output.read_bytes())  # after
    assert store.get(receipt.inputs[0].content_hash) == original


def test_config_set_adds_keys_and_refuses_ambiguity() -> None:
    config = b"top = 1\n[a]\nx = 1\n\n[b]\nx = 2\n"
    out, changes = apply_config(config, ["set a.x = 10", "set b.y = 3", "set top = 0"])
    assert out == b"top = 0\n[a]\nx = 10\n\n[b]\nx = 2\ny = 3\n"
    assert [c.before for c in changes] == ["1", None, "1"]
    with pytest.raises(ActivityRejected) as caught:
        apply_config(config, ["set x = 5"])
    assert caught.value.code == "INVALID_STEP"
    with pytest.raises(ActivityRejected) as caught:
        apply_config(config, ["set nowhere = 5"])
    assert caught.value.code == "UNKNOWN_CONFIG_KEY"
    assert apply_config(b"k=v", ["set k = w"])[0] == b"k=w"  # spacing and missing final newline kept


def test_ops_job_takes_exactly_one_config(tmp_path: Path, store: DirBlobStore) -> None:
    with pytest.raises(ActivityRejected) as caught:
        run_ops_job(OpsActivity("run-1", "t", store=store, signer=SIGNER), [], ["set a = 1"], tmp_path / "x")
    assert caught.value.code == "INVALID_INPUTS"


@pytest.mark.parametrize(
    ("violation", "error_type"),
    list(zip(VIOLATIONS, (EffectBeforePlan, InputAfterPlan, PlanAlreadyDerived, NoPlan), strict=True)),
)
def test_misordered_jobs_are_refused_and_the_effect_never_happens(
    tmp_path: Path, store: DirBlobStore, violation: str, error_type: type
) -> None:
    activity = DataActivity("run-1", "rollup", store=store, signer=SIGNER)
    output = tmp_path / "out.csv"
    with pytest.raises(error_type):
        misordered_job(activity, violation, [_orders()], ["count"], output)
    assert not output.exists()
    assert activity.refused_result().terminal_state.value == "refused"


@pytest.mark.parametrize(
    "text",
    [b"not json", b"[]", b'{"format": "other"}', b'{"format": "bernstein.dataops.job/v1", "kind": "x", "steps": []}'],
)
def test_job_spec_refuses_malformed_files(text: bytes) -> None:
    from bernstein.schemas.errors import MalformedInput

    with pytest.raises(MalformedInput):
        JobSpec.parse(text)
