"""The data and ops modalities end to end: the real CLI, broker, S3 and scheduler, then offline verify.

One module-scoped deployment (fresh topics, its own scheduler and producer keys) is built once:

* ``bernstein data run`` (the CSV rollup of ``demo/data/orders.csv``) and
  ``bernstein ops run`` (the config change of ``demo/data/service.conf``)
  as stages ``data-0`` and ``ops-0`` of one run;
* ``--violate effect-before-plan`` (``ops-1``) and ``--violate
  input-after-plan`` (``data-1``): refused, and the refusals published;
* a data job run by another producer host (``--producer-keys`` of another
  producer key directory), registered in the scheduler's manifest but not pinned
  in the verifier's trusted-keys file, in a second run;
* a genuine signed receipt published through the SDK as ``failed`` in a
  third run (a journal entry contradicting its receipt);
* both runs closed, journalled by the real scheduler, exported with
  ``bernstein topic export`` and verified offline with ``bernstein activity verify``.

The tamper cases edit copies of the dump as an attacker with write access to
it could, and assert each verdict's exact reason from ``--json``. Expected
values (outputs, plan hashes, refusal records) are computed independently
(``csv``, ``hashlib``, the ``rfc8785`` package).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bernstein.substrate.keys import ProducerKeys, TrustedKeys, init_producer_keys
from tests.support import pipeline as pk
from tests.support import tamper as kit
from tests.support.producer_setup import write_manifest

pytestmark = pytest.mark.integration

RUN = "run-dataops"
FOREIGN = "run-dataops-foreign"
MISLABELLED = "run-dataops-mislabelled"
DATA_DIR = pk.REPO / "demo" / "data"
ORDERS = (DATA_DIR / "orders.csv").read_bytes()
CONFIG = (DATA_DIR / "service.conf").read_bytes()
DATA_STEPS = json.loads((DATA_DIR / "orders.job.json").read_bytes())["steps"]
OPS_STEPS = json.loads((DATA_DIR / "service.job.json").read_bytes())["steps"]


def plan_hash_of(input_hashes: list[str], steps: list[str]) -> str:
    """The plan projection re-derived independently: RFC 8785 of sorted unique input hashes and the steps."""
    return pk.sha256_of(pk.canonical({"input_hashes": sorted(set(input_hashes)), "steps": steps}))


def expected_regions() -> bytes:
    """Shipped orders per region, counted and summed: the rollup computed without the project's code."""
    totals: dict[str, tuple[int, int]] = {}
    for row in csv.DictReader(io.StringIO(ORDERS.decode())):
        if row["status"] == "shipped":
            count, cents = totals.get(row["region"], (0, 0))
            totals[row["region"]] = (count + 1, cents + int(row["amount_cents"]))
    lines = ["region,count,amount_cents", *(f"{r},{c},{s}" for r, (c, s) in sorted(totals.items()))]
    return ("\n".join(lines) + "\n").encode()


def expected_config() -> bytes:
    """The two ``set`` steps applied by hand; every other byte of the file is kept."""
    assert CONFIG.count(b"\nmax_connections = 100\n") == 1 and CONFIG.count(b"\nlog_level = debug\n") == 1
    return CONFIG.replace(b"\nmax_connections = 100\n", b"\nmax_connections = 200\n").replace(
        b"\nlog_level = debug\n", b"\nlog_level = info\n"
    )


H_ORDERS = pk.sha256_of(ORDERS)
H_CONFIG = pk.sha256_of(CONFIG)
H_REGIONS = pk.sha256_of(expected_regions())
H_NEW_CONFIG = pk.sha256_of(expected_config())
PLAN_DATA = plan_hash_of([H_ORDERS], DATA_STEPS)
PLAN_OPS = plan_hash_of([H_CONFIG], OPS_STEPS)
EFFECT_MESSAGE = "cannot record a side effect before the plan is derived (output 'never.conf')"
INPUT_MESSAGE = f"inputs are frozen once the plan is derived; input 'late-input' arrived after plan {PLAN_DATA}"


# ---------------------------------------------------------------------------
# the deployment, built once
# ---------------------------------------------------------------------------


@dataclass
class World:
    pipe: pk.Pipeline
    out: Path
    foreign_keys: ProducerKeys
    data: subprocess.CompletedProcess[str]
    ops: subprocess.CompletedProcess[str]
    effect_before_plan: subprocess.CompletedProcess[str]
    input_after_plan: subprocess.CompletedProcess[str]
    foreign: subprocess.CompletedProcess[str]
    submission_runs: list[str]
    dump: Path

    @property
    def key_id(self) -> str:
        """The producer key that signs the receipts and submissions of ``bernstein data|ops run``."""
        return self.pipe.producer.signer.key_id

    @property
    def seal_key_id(self) -> str:
        return self.pipe.keys.signer.key_id

    def published(self, stage_offset: int) -> str:
        return f"  published {self.pipe.prefix}.activity.submissions[0]@{stage_offset} (submission "


def job_args(kind: str, run_id: str, stage: str, output: Path, *extra: str) -> list[str]:
    data = kind == "data"
    source = DATA_DIR / ("orders.csv" if data else "service.conf")
    job = DATA_DIR / ("orders.job.json" if data else "service.job.json")
    return [
        kind,
        "run",
        "--run",
        run_id,
        "--stage",
        stage,
        "--input",
        str(source),
        "--output",
        str(output),
        "--job",
        str(job),
        *extra,
    ]


@pytest.fixture(scope="module")
def world(services: Any, tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("dataops-pipeline")
    pipe = pk.Pipeline.create(services, root)
    out = root / "out"
    foreign_keys = init_producer_keys(root / "foreign-keys", "foreign@test")
    write_manifest(pipe.manifest, pipe.producer, foreign_keys)  # the scheduler accepts it; the trust file does not pin it
    data = pipe.cli(job_args("data", RUN, "data-0", out / "regions.csv"))
    assert data.returncode == 0, data.stdout + data.stderr
    ops = pipe.cli(job_args("ops", RUN, "ops-0", out / "service.conf"))
    assert ops.returncode == 0, ops.stdout + ops.stderr
    effect = pipe.cli(job_args("ops", RUN, "ops-1", out / "never.conf", "--violate", "effect-before-plan"))
    late = pipe.cli(job_args("data", RUN, "data-1", out / "never.csv", "--violate", "input-after-plan"))
    foreign = pipe.cli(job_args("data", FOREIGN, "data-0", out / "foreign.csv", "--producer-keys", str(foreign_keys.directory)))
    assert foreign.returncode == 0, foreign.stdout + foreign.stderr
    publish_mislabelled(pipe, out / "mislabelled.csv")
    pipe.close_runs(RUN, FOREIGN, MISLABELLED)
    pipe.schedule()
    dump = pipe.export([RUN, FOREIGN, MISLABELLED], root / "dump")
    return World(
        pipe=pipe,
        out=out,
        foreign_keys=foreign_keys,
        data=data,
        ops=ops,
        effect_before_plan=effect,
        input_after_plan=late,
        foreign=foreign,
        submission_runs=pipe.submission_runs(),
        dump=dump,
    )


def publish_mislabelled(pipe: pk.Pipeline, output: Path) -> None:
    """A genuine signed receipt (the same job, in-process, the publishing producer's key), published as 'failed'."""
    from bernstein.producers.activity import ActivityResult
    from bernstein.producers.dataops import DataActivity
    from bernstein.producers.dataops.examples import InputFile, run_data_job

    with pipe.emitter() as emitter:
        activity = DataActivity(MISLABELLED, "data-0", store=emitter.store, signer=emitter.signer)
        done = run_data_job(activity, [InputFile("orders.csv", ORDERS)], DATA_STEPS, output)
        failed = ActivityResult.build(
            "data", done.result.artifact, done.result.observations, terminal_state="failed", reason_code="job_failed"
        )
        emitter.publish(run_id=MISLABELLED, stage_id="data-0", role="analyst", result=failed)


def receipt_hash(world: World, stage: str = "data-0", run_id: str = RUN) -> str:
    return str(pk.entry(world.dump, run_id, stage).record["artifact_hash"])


def receipt_document(world: World, stage: str = "data-0") -> dict[str, Any]:
    return dict(json.loads(pk.read_blob(world.dump, receipt_hash(world, stage))))


def ok_stage_lines(world: World) -> list[str]:
    return [
        "  OK data-0 [data] (evidence reattached, signed receipt verified)",
        f"    receipt OK plan {PLAN_DATA} (1 input, 1 output signed)",
        pk.by_line(world.dump, RUN, "data-0"),
        "  OK ops-0 [ops] (evidence reattached, signed receipt verified)",
        f"    receipt OK plan {PLAN_OPS} (1 input, 1 output signed)",
        pk.by_line(world.dump, RUN, "ops-0"),
        "  OK ops-1 [ops] (evidence reattached, refusal recorded (effect_before_plan))",
        "    refusal OK EFFECT_BEFORE_PLAN (1 input recorded)",
        pk.by_line(world.dump, RUN, "ops-1"),
        "  OK data-1 [data] (evidence reattached, refusal recorded (input_after_plan))",
        "    refusal OK INPUT_AFTER_PLAN (1 input recorded)",
        pk.by_line(world.dump, RUN, "data-1"),
    ]


def expected_report(world: World, *, live: bool = False) -> list[str]:
    merkle = world.pipe.live_merkle() if live else None
    return [*pk.expected_header(world.dump, RUN, world.pipe.keys, merkle=merkle), *ok_stage_lines(world), pk.VERIFIED]


# ---------------------------------------------------------------------------
# the runs verify
# ---------------------------------------------------------------------------


def test_data_and_ops_runs_verify_from_the_dump(world: World) -> None:
    result = pk.verify_dump(world.dump, RUN, world.pipe.trust_file)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == expected_report(world)
    assert result.stderr == ""


def test_data_and_ops_runs_verify_live_from_kafka_and_s3(world: World) -> None:
    result = world.pipe.verify_live(RUN)
    assert result.returncode == 0, result.stdout + result.stderr
    # the live topics hold the whole journal partition: the report also names its Merkle log
    assert result.stdout.splitlines() == expected_report(world, live=True)


def test_jobs_write_correct_outputs_and_sign_them(world: World, services: Any) -> None:
    from bernstein.substrate.cas import S3BlobStore

    assert (world.out / "regions.csv").read_bytes() == expected_regions()
    assert (world.out / "service.conf").read_bytes() == expected_config()
    store = S3BlobStore(services.s3)
    for digest, data in (
        (H_ORDERS, ORDERS),
        (H_REGIONS, expected_regions()),
        (H_CONFIG, CONFIG),
        (H_NEW_CONFIG, expected_config()),
    ):
        assert store.get(digest) == data
        assert pk.read_blob(world.dump, digest) == data

    data_receipt = receipt_hash(world, "data-0")
    assert world.data.returncode == 0
    assert world.data.stdout.splitlines()[:-1] == [
        f"data {RUN}/data-0 completed: 1 input, 1 output signed",
        f"  input    orders.csv {H_ORDERS}",
        f"  plan     {PLAN_DATA} (4 steps)",
        f"  output   regions.csv {H_REGIONS} -> {world.out / 'regions.csv'}",
        f"  receipt  {data_receipt} signed by {world.key_id}",
    ]
    assert world.data.stdout.splitlines()[-1].startswith(world.published(0))
    assert world.ops.stdout.splitlines()[:-1] == [
        f"ops {RUN}/ops-0 completed: 1 input, 1 output signed",
        f"  input    service.conf {H_CONFIG}",
        f"  plan     {PLAN_OPS} (2 steps)",
        f"  output   service.conf {H_NEW_CONFIG} -> {world.out / 'service.conf'}",
        "  change   max_connections: 100 -> 200",
        "  change   log_level: debug -> info",
        f"  receipt  {receipt_hash(world, 'ops-0')} signed by {world.key_id}",
    ]
    assert world.ops.stdout.splitlines()[-1].startswith(world.published(1))

    for stage, kind, ref_in, h_in, ref_out, h_out, plan, steps in (
        ("data-0", "data", "orders.csv", H_ORDERS, "regions.csv", H_REGIONS, PLAN_DATA, DATA_STEPS),
        ("ops-0", "ops", "service.conf", H_CONFIG, "service.conf", H_NEW_CONFIG, PLAN_OPS, OPS_STEPS),
    ):
        receipt_bytes = pk.read_blob(world.dump, receipt_hash(world, stage))
        assert pk.sha256_of(receipt_bytes) == receipt_hash(world, stage)
        receipt = json.loads(receipt_bytes)
        assert pk.canonical(receipt) == receipt_bytes, "the stored receipt is its canonical (signed) bytes"
        assert {k: v for k, v in receipt.items() if k not in ("inputs", "outputs", "receipt_signature")} == {
            "format": "bernstein.dataops.receipt/v1",
            "run_id": RUN,
            "stage_id": stage,
            "kind": kind,
            "plan": {"input_hashes": [h_in], "steps": steps, "plan_hash": plan},
            "signer_key_id": world.key_id,
        }
        assert [(i["role"], i["index"], i["ref"], i["content_hash"]) for i in receipt["inputs"]] == [("input", 0, ref_in, h_in)]
        assert [(o["role"], o["index"], o["ref"], o["content_hash"]) for o in receipt["outputs"]] == [
            ("output", 0, ref_out, h_out)
        ]
        journalled = pk.entry(world.dump, RUN, stage).record
        assert (journalled["kind"], journalled["terminal_state"], journalled["reason_code"]) == (kind, "completed", "ok")
        assert [dict(o) for o in journalled["observations"]] == [
            {"kind": "input", "ref": ref_in, "content_hash": h_in, "size": len(pk.read_blob(world.dump, h_in))},
            {"kind": "output", "ref": ref_out, "content_hash": h_out, "size": len(pk.read_blob(world.dump, h_out))},
        ]  # the SDK declares each blob's size: the stored bytes


# ---------------------------------------------------------------------------
# refusals are recorded
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "kind", "code", "message", "inputs", "plan", "never"),
    [
        ("ops-1", "ops", "EFFECT_BEFORE_PLAN", EFFECT_MESSAGE, [H_CONFIG], None, "never.conf"),
        ("data-1", "data", "INPUT_AFTER_PLAN", INPUT_MESSAGE, [H_ORDERS], PLAN_DATA, "never.csv"),
    ],
)
def test_phase_violation_is_refused_and_journalled(
    world: World, stage: str, kind: str, code: str, message: str, inputs: list[str], plan: str | None, never: str
) -> None:
    result = world.effect_before_plan if stage == "ops-1" else world.input_after_plan
    assert result.returncode == 3, result.stdout + result.stderr
    # The refusal record, built independently: what was refused, over which inputs, under which plan.
    refusal = {
        "format": "bernstein.dataops.refusal/v1",
        "run_id": RUN,
        "stage_id": stage,
        "kind": kind,
        "code": code,
        "message": message,
        "inputs": inputs,
        "plan_hash": plan,
    }
    refusal_hash = pk.sha256_of(pk.canonical(refusal))
    lines = result.stdout.splitlines()
    assert lines[:-1] == [f"{kind} {RUN}/{stage} refused: {code} -- {message}", f"  refusal  {refusal_hash} (1 input recorded)"]
    # Published in order: data-0, ops-0, ops-1, data-1, the foreign and mislabelled runs' data-0, then the closes.
    assert world.submission_runs == [RUN, RUN, RUN, RUN, FOREIGN, MISLABELLED, RUN, FOREIGN, MISLABELLED]
    assert lines[-1].startswith(world.published(2 if stage == "ops-1" else 3))
    # The refused effect never happened.
    assert not (world.out / never).exists()

    journalled = pk.entry(world.dump, RUN, stage).record
    assert (journalled["kind"], journalled["terminal_state"], journalled["reason_code"]) == (kind, "refused", code.lower())
    assert journalled["artifact_hash"] == refusal_hash
    ref = "service.conf" if kind == "ops" else "orders.csv"
    assert [dict(o) for o in journalled["observations"]] == [
        {"kind": "input", "ref": ref, "content_hash": inputs[0], "size": len(pk.read_blob(world.dump, inputs[0]))}
    ]
    assert pk.read_blob(world.dump, refusal_hash) == pk.canonical(refusal)

    code_, document = pk.verify_dump_json(world.dump, RUN, world.pipe.trust_file)
    assert code_ == 0
    verdict = pk.stage_json(document, stage)
    assert verdict["ok"] is True and verdict["terminal_state"] == "refused"
    assert verdict["notes"] == ["evidence reattached", f"refusal recorded ({code.lower()})"]
    assert [d["text"] for d in verdict["details"]] == [f"refusal OK {code} (1 input recorded)"]


# ---------------------------------------------------------------------------
# tamper: each its own verdict
# ---------------------------------------------------------------------------


def assert_only_stage_fails(document: dict[str, Any], stage: str, reason: str, details: list[str]) -> None:
    assert document["exit_code"] == 2
    verdict = pk.stage_json(document, stage)
    assert verdict["ok"] is False
    assert verdict["reason"] == reason
    assert [d["text"] for d in verdict["details"]] == details
    assert [s["stage_id"] for s in document["stages"] if not s["ok"]] == [stage]


def test_changed_output_byte(world: World, tmp_path: Path) -> None:
    dump = kit.copy_dump(world.dump, tmp_path)
    altered = kit.replace_once(expected_regions(), b"north,", b"nurth,")
    pk.overwrite_blob(dump, H_REGIONS, altered)
    code, document = pk.verify_dump_json(dump, RUN, world.pipe.trust_file)
    assert code == 2
    reason = f"output 'regions.csv' content hash mismatch (pinned '{H_REGIONS}', recomputed '{pk.sha256_of(altered)}')"
    assert_only_stage_fails(document, "data-0", reason, [f"receipt FAIL store -- {reason}"])
    assert document["chain"]["ok"] and document["seal"]["ok"] and document["audit"]["ok"]
    failures = pk.stage_json(document, "data-0")["data"]["failures"]
    assert [(f["code"], f["check"]) for f in failures] == [("BLOB_CHANGED", "store")]


def altered_steps_receipt(world: World, *, rederive_plan: bool) -> bytes:
    receipt = receipt_document(world)
    steps = ["filter status == pending", *receipt["plan"]["steps"][1:]]
    receipt["plan"]["steps"] = steps
    if rederive_plan:
        receipt["plan"]["plan_hash"] = plan_hash_of([H_ORDERS], steps)
    return pk.canonical(receipt)


def test_changed_step_in_the_stored_receipt_fails_its_artifact_hash(world: World, tmp_path: Path) -> None:
    """Rewriting the receipt blob in place: the bytes no longer hash to the journalled artifact_hash."""
    dump = kit.copy_dump(world.dump, tmp_path)
    forged = altered_steps_receipt(world, rederive_plan=False)
    pinned = receipt_hash(world)
    pk.overwrite_blob(dump, pinned, forged)
    code, document = pk.verify_dump_json(dump, RUN, world.pipe.trust_file)
    assert code == 2
    reason = f"artifact hash mismatch reattaching the artifact (pinned '{pinned}', recomputed '{pk.sha256_of(forged)}')"
    assert_only_stage_fails(document, "data-0", reason, [f"receipt FAIL artifact -- {reason}"])
    assert document["chain"]["ok"] and document["seal"]["ok"] and document["audit"]["ok"]


def assert_rejournalled(document: dict[str, Any], forged: pk.Rejournalled) -> None:
    """Repointing the entry at a re-stored receipt breaks the chain link and the audit mirror, each named once."""
    assert document["chain"]["problem"]["message"] == (
        f"seq {forged.seq + 1} at offset {forged.next_offset}: prev_hash does not name the previous entry "
        f"(stored '{forged.old_entry_hash}', expected '{forged.new_entry_hash}')"
    )
    assert document["chain"]["further_problems"] == 0
    assert document["audit"]["problem"]["message"] == (
        f"journal seq {forged.seq} (offset {forged.offset}) hashes to '{forged.new_entry_hash}' "
        f"but audit seq {forged.audit_seq} recorded '{forged.old_entry_hash}'"
    )
    assert document["seal"]["ok"] is True, "the seal covers the unchanged head; the break is the chain's to name"


@pytest.mark.parametrize("rederive_plan", [False, True], ids=["plan-hash-kept", "plan-hash-rederived"])
def test_changed_step_restored_and_rejournalled(world: World, tmp_path: Path, rederive_plan: bool) -> None:
    """The harder attack: re-store the altered receipt under its new hash AND repoint the journal entry at it."""
    dump = kit.copy_dump(world.dump, tmp_path)
    forged_bytes = altered_steps_receipt(world, rederive_plan=rederive_plan)
    forged = pk.rejournal_artifact(dump, RUN, "data-0", forged_bytes)
    code, document = pk.verify_dump_json(dump, RUN, world.pipe.trust_file)
    assert code == 2
    assert_rejournalled(document, forged)
    receipt_line = f"receipt FAIL signature -- receipt signature does not verify with pinned key {world.key_id}"
    if rederive_plan:
        # The plan is consistent again, but the output's signature is bound to the original plan hash.
        reason = f"output 'regions.csv' signature does not verify with pinned key {world.key_id}"
        details = [f"receipt FAIL signature -- {reason}", receipt_line]
        codes = [("SIGNATURE_INVALID", "signature"), ("RECEIPT_SIGNATURE_INVALID", "signature")]
    else:
        recomputed = plan_hash_of([H_ORDERS], ["filter status == pending", *DATA_STEPS[1:]])
        reason = f"plan_hash mismatch: anchored {PLAN_DATA}, recomputed {recomputed}"
        details = [f"receipt FAIL plan -- {reason}", receipt_line]
        codes = [("PLAN_HASH_MISMATCH", "plan"), ("RECEIPT_SIGNATURE_INVALID", "signature")]
    assert_only_stage_fails(document, "data-0", reason, details)
    failures = pk.stage_json(document, "data-0")["data"]["failures"]
    assert [(f["code"], f["check"]) for f in failures] == codes


def test_receipt_signed_by_another_key_fails_against_the_pinned_key(world: World) -> None:
    """A data job run by a producer the scheduler registers but the trust file does not pin: the run's chain and
    seal verify; its submission's producer signature and its receipt do not (the key is named in both)."""
    foreign_id = world.foreign_keys.signer.key_id
    assert foreign_id != world.key_id
    assert f"signed by {foreign_id}" in world.foreign.stdout
    code, document = pk.verify_dump_json(world.dump, FOREIGN, world.pipe.trust_file)
    assert code == 2
    reason = f"receipt signer {foreign_id} is not a pinned key"
    assert_only_stage_fails(document, "data-0", reason, [f"receipt FAIL signature -- {reason}"])
    assert document["chain"]["ok"] and document["seal"]["ok"] and document["audit"]["ok"]
    assert document["seal"]["key_ids"] == [world.seal_key_id]
    entry = pk.entry(world.dump, FOREIGN, "data-0")
    assert (entry.record["producer_id"], entry.record["producer_key_id"]) == ("foreign@test", foreign_id)
    problem = document["producers"]["problem"]
    assert (problem["code"], problem["recomputed"], problem["offset"]) == ("PRODUCER_KEY_NOT_PINNED", foreign_id, entry.offset)
    assert problem["message"] == (
        f"journal entry seq 0 at offset {entry.offset} is signed by producer key {foreign_id}, "
        "which is not among the pinned keys (--trusted-keys)"
    )


def test_receipt_resigned_with_another_key_restored_and_rejournalled(world: World, tmp_path: Path) -> None:
    """An attacker re-signs the whole receipt with an unpinned key, re-stores it and repoints the journal entry."""
    from bernstein.producers.dataops.receipt import DataOpsReceipt

    dump = kit.copy_dump(world.dump, tmp_path)
    original = DataOpsReceipt.parse(pk.read_blob(world.dump, receipt_hash(world)))
    resigned = original.signed(world.foreign_keys.signer)
    assert resigned.signer_key_id == world.foreign_keys.signer.key_id
    forged = pk.rejournal_artifact(dump, RUN, "data-0", resigned.canonical_bytes())
    code, document = pk.verify_dump_json(dump, RUN, world.pipe.trust_file)
    assert code == 2
    assert_rejournalled(document, forged)
    reason = f"receipt signer {world.foreign_keys.signer.key_id} is not a pinned key"
    assert_only_stage_fails(document, "data-0", reason, [f"receipt FAIL signature -- {reason}"])


def test_pinning_another_signing_key_fails_the_seal_and_the_receipts(world: World, tmp_path: Path) -> None:
    """The untampered run against a trusted-keys file that pins a different Ed25519 key: both signers are named."""
    other = world.foreign_keys.signer
    trust = tmp_path / "other-trusted-keys.json"
    TrustedKeys(
        ed25519={other.key_id: other.public_key_raw}, hmac={world.pipe.keys.audit.key_id: world.pipe.keys.audit.secret}
    ).write(trust)
    code, document = pk.verify_dump_json(world.dump, RUN, trust)
    assert code == 2
    (seal,) = kit.DumpView(world.dump).seals(RUN)
    assert document["seal"]["problem"]["message"] == (
        f"seal at offset {seal.offset} is signed by key {world.seal_key_id}, which is not among the pinned keys (--trusted-keys)"
    )
    assert document["chain"]["ok"]
    # the partition checkpoints are signed by the same scheduler key: not pinned either
    assert (document["audit"]["problem"]["code"], document["audit"]["problem"]["recomputed"]) == (
        "CHECKPOINT_KEY_NOT_PINNED",
        world.seal_key_id,
    )
    # the producer key that signed the submissions and the receipts is not pinned either
    assert (document["producers"]["problem"]["code"], document["producers"]["problem"]["recomputed"]) == (
        "PRODUCER_KEY_NOT_PINNED",
        world.key_id,
    )
    reason = f"receipt signer {world.key_id} is not a pinned key"
    for stage in ("data-0", "ops-0"):
        verdict = pk.stage_json(document, stage)
        assert verdict["reason"] == reason
        assert [d["text"] for d in verdict["details"]] == [f"receipt FAIL signature -- {reason}"]
    # Refusals carry no signature: they still check out.
    assert [s["stage_id"] for s in document["stages"] if s["ok"]] == ["ops-1", "data-1"]


def test_receipt_published_as_failed_is_refused_by_the_scheduler(world: World) -> None:
    """A valid signed receipt proves the effects completed: a submission that says 'failed' contradicts it.

    The scheduler refuses it from its own bytes (docs/modality_rules.md), so nothing is journalled; the
    verifier's RECEIPT_STATE_MISMATCH remains for a journal edited afterwards (tests/unit/test_dataops_verify.py).
    """
    refusal, close = pk.refusals(world.dump, MISLABELLED)
    assert close["code"] == "RUN_EMPTY"  # its only stage was refused: its close has nothing to seal
    assert {k: refusal[k] for k in ("code", "stage_id", "kind", "field", "declared", "recomputed", "message")} == {
        "code": "DATAOPS_OUTCOME_MISMATCH",
        "stage_id": "data-0",
        "kind": "data",
        "field": "terminal_state",
        "declared": "failed",
        "recomputed": "completed",
        "message": "artifact is a receipt, which is anchored as 'completed', not 'failed'",
    }
    assert pk.entries(world.dump, MISLABELLED) == []


def drop_signature(receipt: dict[str, Any], which: str) -> None:
    if which == "receipt":
        del receipt["receipt_signature"]
    else:
        del receipt[f"{which}s"][0]["signature"]


def test_dropped_signature_in_place_fails_its_artifact_hash(world: World, tmp_path: Path) -> None:
    dump = kit.copy_dump(world.dump, tmp_path)
    receipt = receipt_document(world)
    drop_signature(receipt, "output")
    forged = pk.canonical(receipt)
    pinned = receipt_hash(world)
    pk.overwrite_blob(dump, pinned, forged)
    code, document = pk.verify_dump_json(dump, RUN, world.pipe.trust_file)
    assert code == 2
    reason = f"artifact hash mismatch reattaching the artifact (pinned '{pinned}', recomputed '{pk.sha256_of(forged)}')"
    assert_only_stage_fails(document, "data-0", reason, [f"receipt FAIL artifact -- {reason}"])


@pytest.mark.parametrize("which", ["input", "output", "receipt"])
def test_dropped_signature_restored_and_rejournalled(world: World, tmp_path: Path, which: str) -> None:
    dump = kit.copy_dump(world.dump, tmp_path)
    receipt = receipt_document(world)
    drop_signature(receipt, which)
    forged = pk.rejournal_artifact(dump, RUN, "data-0", pk.canonical(receipt))
    code, document = pk.verify_dump_json(dump, RUN, world.pipe.trust_file)
    assert code == 2
    assert_rejournalled(document, forged)
    receipt_line = f"receipt FAIL signature -- receipt signature does not verify with pinned key {world.key_id}"
    if which == "receipt":
        reason = "receipt has no receipt_signature"
        details = [f"receipt FAIL signature -- {reason}"]
    else:
        reason = f"{which} '{'orders.csv' if which == 'input' else 'regions.csv'}' has no signature"
        details = [f"receipt FAIL signature -- {reason}", receipt_line]
    assert_only_stage_fails(document, "data-0", reason, details)
