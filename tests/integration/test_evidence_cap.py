"""The per-run 64 MiB evidence cap through the real broker and S3.

* A run whose hand-built ActivitySubmission.v2 records cross the cap gets the
  exact EVIDENCE_CAP_EXCEEDED refusal from both cores, a duplicate frame counts
  once, and the outputs equal the reference folded over the same partition.
* A producer that under-declares a blob's size gets past the cap, and
  ``bernstein activity verify`` names it: EVIDENCE_SIZE_MISMATCH, exit 2.
* A hand-built ActivitySubmission.v1 with observations (no sizes, nothing the cap
  could count) is refused with EVIDENCE_SIZES_UNDECLARED by both cores, unless the
  scheduler accepts undeclared sizes for a migration; one without observations is
  journalled. The SDK publishes v2 even for an observation built without a size.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.producers.activity import ActivityResult
from bernstein.schemas import codec
from bernstein.schemas.canonical import evidence_set_hash, sha256_digest
from bernstein.schemas.records import MAX_RUN_EVIDENCE_BYTES, Observation
from bernstein.substrate.config import Settings
from bernstein.substrate.keys import InstallKeys
from tests.support import pipeline as pk
from tests.support.kafka import (
    fold,
    fresh_topics,
    produce_all,
    read_outputs,
    read_partition,
    run_core,
    scheduler_config,
    stored_form,
)
from tests.support.producers import encode_signed_submission

MIB = 1024 * 1024
CAP = MAX_RUN_EVIDENCE_BYTES
RUN = "run-cap"


def digest(name: str) -> str:
    return sha256_digest(name.encode())


def sized(stage_id: str, blobs: list[tuple[str, int]]) -> dict[str, Any]:
    """A hand-built ActivitySubmission.v2 of RUN declaring ``blobs`` (name, size)."""
    observations = [
        {"kind": "screenshot", "ref": f"frame-{i}", "content_hash": digest(name), "size": size}
        for i, (name, size) in enumerate(blobs)
    ]
    artifact = f'{{"stage":"{stage_id}"}}'.encode()
    return {
        "submission_id": f"sub-{stage_id}",
        "run_id": RUN,
        "stage_id": stage_id,
        "role": "developer",
        "producer": {"id": "p@test", "sdk": "hand-built"},
        "kind": "coding",
        "artifact": artifact,
        "artifact_hash": sha256_digest(artifact),
        "evidence_set_hash": evidence_set_hash(digest(name) for name, _ in blobs),
        "observations": observations,
        "terminal_state": "completed",
        "reason_code": "ok",
        "occurred_at_ms": 1_767_225_600_000,
    }


@pytest.mark.parametrize("core_name", ["python", "native"])
def test_a_run_that_crosses_the_cap_gets_the_exact_refusal_from_both_cores(
    core_name: str, settings: Settings, install_keys: InstallKeys
) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, f"{settings.topics.prefix}{core_name[0]}")
    config = scheduler_config(install_keys, roles={"developer": "coding"})
    subs = [
        sized("s0", [("frame-a", 40 * MIB)]),
        sized("s1", [("frame-a", 40 * MIB), ("frame-b", 20 * MIB), ("frame-c", 4 * MIB + 1)]),  # crosses by one byte
        sized("s2", [("frame-a", 40 * MIB), ("frame-a", 40 * MIB), ("frame-d", 24 * MIB)]),  # duplicate frames: exactly the cap
        sized("s3", [("frame-d", 24 * MIB), ("frame-e", 1)]),  # one byte over a full run
    ]
    items: list[tuple[bytes | None, bytes | None]] = [(RUN.encode(), encode_signed_submission(s)) for s in subs]
    offsets = produce_all(bootstrap, topics.submissions, items)
    core = run_core(core_name, bootstrap, topics, config, len(items))

    out = read_outputs(bootstrap, topics)
    journalled = [r.inner for r in out["journal"] if r.schema == codec.JOURNAL_RECORD]
    assert [e["stage_id"] for e in journalled] == ["s0", "s2"]
    assert [r.record["input"]["offset"] for r in out["refusals"]] == [offsets[1], offsets[3]]
    first, second = (r.record for r in out["refusals"])
    common = {
        "exception": "ActivityRejected",
        "code": "EVIDENCE_CAP_EXCEEDED",
        "run_id": RUN,
        "role": "developer",
        "kind": "coding",
        "field": "evidence",
        "recomputed": str(CAP),
        "earlier_stage_id": None,
        "occurred_at_ms": 1_767_225_600_000,
        # the cap is the last rule, checked once the producer's signature verified
        "producer": subs[1]["producer"]["id"],
        "key_id": codec.decode(items[1][1] or b"").record["producer_key_id"],
        "authenticated": True,
    }
    assert first == {
        **common,
        "message": f"run '{RUN}' would hold {CAP + 1} bytes of evidence ({40 * MIB} already, {24 * MIB + 1} in 2 new blobs); "
        f"the per-run cap is {CAP}",
        "stage_id": "s1",
        "submission_id": "sub-s1",
        "declared": str(CAP + 1),
        "input": {"topic": topics.submissions, "partition": 0, "offset": offsets[1]},
    }
    assert second == {
        **common,
        "message": f"run '{RUN}' would hold {CAP + 1} bytes of evidence ({CAP} already, 1 in 1 new blobs); the per-run cap is {CAP}",
        "stage_id": "s3",
        "submission_id": "sub-s3",
        "declared": str(CAP + 1),
        "input": {"topic": topics.submissions, "partition": 0, "offset": offsets[3]},
    }
    assert out["deadletter"] == []
    # byte-identical to the Python reference folded over the same input partition
    expected = fold(config, read_partition(bootstrap, topics, "submissions"))
    for stream, records in out.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream
    if core_name == "native":
        assert isinstance(core, NativeSchedulerCore)
        assert core.fallbacks == 0  # v2 submissions and their cap are the native core's own


def test_a_producer_that_under_declares_a_size_is_caught_by_activity_verify(services: Any, tmp_path: Path) -> None:
    pipe = pk.Pipeline.create(services, tmp_path)
    run_id = "run-liar"
    honest_page = b"an honest page\n" * 100
    lying_page = b"a page whose size is misstated\n" * 4000  # 124000 bytes, declared as 1000
    with pipe.emitter() as emitter:
        page = emitter.capture("page", "https://example.test/honest", honest_page)
        assert page.size == len(honest_page)
        emitter.publish(run_id=run_id, stage_id="honest", role="developer", result=ActivityResult.build("coding", b"{}", [page]))
        stored = emitter.capture("page", "https://example.test/lie", lying_page)
        lie = Observation(kind=stored.kind, ref=stored.ref, content_hash=stored.content_hash, size=1000)
        published = emitter.publish(
            run_id=run_id, stage_id="liar", role="developer", result=ActivityResult.build("coding", b'{"x":1}', [lie])
        )
        assert codec.decode(published.value).schema.name == codec.ACTIVITY_SUBMISSION_V3
        emitter.close_run(run_id)
    pipe.schedule()
    journal = [r for r in pipe.records("journal") if r.key == run_id.encode()]
    entries = [
        codec.decode(codec.decode(r.value or b"").record["payload"])
        for r in journal
        if codec.split_envelope(r.value or b"")[0] == codec.JOURNAL_RECORD
    ]
    assert [(e.schema.name, e.record["stage_id"]) for e in entries] == [
        (codec.JOURNAL_ENTRY_V3, "honest"),
        (codec.JOURNAL_ENTRY_V3, "liar"),
    ]  # the scheduler cannot see the lie: it counts 1000 bytes
    liar_offset = next(
        r.offset
        for r in journal
        if codec.split_envelope(r.value or b"")[0] == codec.JOURNAL_RECORD
        and codec.decode(codec.decode(r.value or b"").record["payload"]).record["stage_id"] == "liar"
    )

    result = pipe.verify_live(run_id, json_output=True)
    assert result.returncode == 2, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["verdict"] == "mismatch"
    honest, liar = (pk.stage_json(document, s) for s in ("honest", "liar"))
    assert honest["ok"] and "problems" not in honest
    message = (
        f"evidence bytes for 'https://example.test/lie' ({sha256_digest(lying_page)}) are {len(lying_page)} bytes, "
        "but 1000 were declared: the producer misstated the size the run's evidence cap counts"
    )
    assert liar["problems"] == [
        {
            "code": "EVIDENCE_SIZE_MISMATCH",
            "message": message,
            "stream": "journal",
            "offset": liar_offset,
            "seq": 1,
            "expected": "1000",
            "recomputed": str(len(lying_page)),
        }
    ]
    assert (liar["ok"], liar["reason"]) == (False, message)
    text = pipe.verify_live(run_id)
    assert text.returncode == 2 and message in text.stdout


def v1(stage_id: str, blobs: list[str]) -> bytes:
    """A hand-built ActivitySubmission.v1 of RUN with observations of ``blobs`` (no sizes)."""
    record = sized(stage_id, [(name, 0) for name in blobs])
    for observation in record["observations"]:
        del observation["size"]
    return codec.encode(codec.ACTIVITY_SUBMISSION, record)


@pytest.mark.parametrize("core_name", ["python", "native"])
def test_a_hand_built_v1_submission_is_refused_unsigned_by_both_cores(
    core_name: str, settings: Settings, install_keys: InstallKeys
) -> None:
    """Producer signatures replace EVIDENCE_SIZES_UNDECLARED for ActivitySubmission.v1: a v1 carries no producer
    signature, so it is refused SUBMISSION_UNSIGNED before its sizes matter, with or without observations."""
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, f"{settings.topics.prefix}u{core_name[0]}")
    config = scheduler_config(install_keys, roles={"developer": "coding"})
    items: list[tuple[bytes | None, bytes | None]] = [
        (RUN.encode(), v1("v1-evidence", ["frame-a", "frame-b"])),
        (RUN.encode(), v1("v1-empty", [])),
        (RUN.encode(), encode_signed_submission(sized("v2", [("frame-a", 10), ("frame-b", 20)]))),
    ]
    offsets = produce_all(bootstrap, topics.submissions, items)
    core = run_core(core_name, bootstrap, topics, config, len(items))

    out = read_outputs(bootstrap, topics)
    journalled = [r.inner for r in out["journal"] if r.schema == codec.JOURNAL_RECORD]
    assert [e["stage_id"] for e in journalled] == ["v2"]
    refused = [r.record for r in out["refusals"]]
    assert [(r["stage_id"], r["input"]["offset"]) for r in refused] == [("v1-evidence", offsets[0]), ("v1-empty", offsets[1])]
    for refusal in refused:
        assert {k: refusal[k] for k in ("exception", "code", "field", "declared", "recomputed")} == {
            "exception": "ActivityRejected",
            "code": "SUBMISSION_UNSIGNED",
            "field": "producer_signature",
            "declared": "ActivitySubmission.v1",
            "recomputed": "ActivitySubmission.v3",
        }
    expected = fold(config, read_partition(bootstrap, topics, "submissions"))
    for stream, records in out.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream
    if core_name == "native":
        assert isinstance(core, NativeSchedulerCore)
        assert core.fallbacks == 0


def test_accept_undeclared_sizes_does_not_admit_an_unsigned_v1_submission(settings: Settings, install_keys: InstallKeys) -> None:
    """The migration flag admits undeclared sizes (ComputerUseAction.v1), never a missing producer signature."""
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, f"{settings.topics.prefix}um")
    config = dataclasses.replace(scheduler_config(install_keys, roles={"developer": "coding"}), accept_undeclared_sizes=True)
    items: list[tuple[bytes | None, bytes | None]] = [(RUN.encode(), v1("v1-evidence", ["frame-a", "frame-b"]))]
    produce_all(bootstrap, topics.submissions, items)
    core = run_core("native", bootstrap, topics, config, len(items))
    out = read_outputs(bootstrap, topics)
    assert [r.record["code"] for r in out["refusals"]] == ["SUBMISSION_UNSIGNED"]
    assert [r for r in out["journal"] if r.schema == codec.JOURNAL_RECORD] == []
    expected = fold(config, read_partition(bootstrap, topics, "submissions"))
    for stream, records in out.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream
    assert isinstance(core, NativeSchedulerCore) and core.fallbacks == 0


def test_the_sdk_publishes_v2_for_an_observation_built_without_a_size(services: Any, tmp_path: Path) -> None:
    """Sizes are known at capture; an Observation built by hand gets its stored blob's size, so the cap counts it."""
    pipe = pk.Pipeline.create(services, tmp_path)
    run_id = "run-unsized"
    page = b"a page stored before publishing\n" * 50
    with pipe.emitter() as emitter:
        emitter.store_blobs([page])
        unsized = Observation(kind="page", ref="https://example.test/p", content_hash=sha256_digest(page))
        published = emitter.publish(
            run_id=run_id, stage_id="s0", role="developer", result=ActivityResult.build("coding", b"{}", [unsized])
        )
        decoded = codec.decode(published.value)
        assert decoded.schema.name == codec.ACTIVITY_SUBMISSION_V3
        assert decoded.record["observations"][0]["size"] == len(page)
        emitter.close_run(run_id)
    pipe.schedule()
    entries = [
        codec.decode(codec.decode(r.value or b"").record["payload"])
        for r in pipe.records("journal")
        if r.key == run_id.encode() and codec.split_envelope(r.value or b"")[0] == codec.JOURNAL_RECORD
    ]
    assert [(e.schema.name, e.record["stage_id"]) for e in entries] == [(codec.JOURNAL_ENTRY_V3, "s0")]
    result = pipe.verify_live(run_id)
    assert result.returncode == 0, result.stdout + result.stderr
