"""The scheduler through the real broker: refusal rules, dead letters, fuzz, replay determinism.

Every test publishes to its own topics (fresh prefix), runs the transaction
shell in-process until it has consumed what was published, and reads the
output topics back with read_committed.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bernstein.consumers.core.model import InputRecord, OutputRecord, SchedulerConfig, Stream
from bernstein.consumers.core.native import NativeSchedulerCore, SchedulerCoreLike
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.consumers.shell import Counters, SchedulerShell, ShellOptions
from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter
from bernstein.schemas import codec
from bernstein.schemas.canonical import audit_genesis, audit_record_mac, evidence_set_hash, journal_entry_hash, sha256_digest
from bernstein.schemas.records import DeadLetterCode, RefusalCode
from bernstein.substrate.cas import DirBlobStore, S3BlobStore
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.keys import InstallKeys, TrustedKeys
from bernstein.verifier.verify import verify
from tests.support.kafka import (
    CachedSource,
    Rec,
    crossings,
    encode_close,
    encode_submission,
    fold,
    fresh_topics,
    mutate,
    produce_all,
    read_outputs,
    read_partition,
    result,
    run_scheduler,
    scheduler_config,
    stored_form,
    submission_record,
)
from tests.support.producer_setup import identity
from tests.support.producers import encode_signed_submission

RUN = "run-rules"


@pytest.fixture
def emitter(settings: Settings, s3_store: S3BlobStore) -> Emitter:
    """An emitter on the test's topics, which the admin created first (producers never create topics)."""
    assert settings.kafka_bootstrap is not None
    fresh_topics(settings.kafka_bootstrap, settings.topics.prefix)
    return Emitter.from_settings(settings, producer=identity("tests@host"), store=s3_store)


def value_of(
    emitter: Emitter,
    stage_id: str,
    *,
    role: str = "developer",
    kind: str = "coding",
    pages: tuple[bytes, ...] = (b"page a", b"page b"),
    artifact: bytes = b"report",
) -> bytes:
    _, value = emitter.submission_value(
        run_id=RUN, stage_id=stage_id, role=role, result=result(kind, pages, artifact), submission_id=f"{RUN}/{stage_id}"
    )
    return value


def check_audit_chain(bootstrap: str, audit: list[Rec], keys: InstallKeys, partition: int = 0) -> None:
    """The partition's audit chain: seq from 0 without gaps, each MAC recomputes, each record links to the last."""
    prev = audit_genesis(keys.audit.secret, partition)
    for seq, rec in enumerate(audit):
        envelope = rec.record
        assert rec.inner["seq"] == seq
        assert rec.inner["prev_mac"] == prev
        assert envelope["mac"] == audit_record_mac(keys.audit.secret, envelope["key_id"], envelope["payload"])
        prev = envelope["mac"]


# ---------------------------------------------------------------------------
# (a) each refusal rule, through the broker
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """Accepted submissions first (by stage id), then the offending value and the refusal it must get."""

    prior: tuple[str, ...]
    offending: Callable[[Emitter], tuple[bytes, dict[str, Any]]]
    close_first: bool = False


def _artifact_hash_mismatch(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    good = value_of(e, "stage-x")
    declared = codec.decode(good).record["artifact_hash"]
    return mutate(good, artifact=b"report, edited after hashing"), {
        "code": "ARTIFACT_HASH_MISMATCH",
        "field": "artifact_hash",
        "declared": declared,
        "recomputed": sha256_digest(b"report, edited after hashing"),
    }


def _evidence_set_hash_mismatch(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    good = value_of(e, "stage-x", pages=(b"page c", b"page d"))
    record = codec.decode(good).record
    kept = record["observations"][:1]
    return mutate(good, observations=kept), {
        "code": "EVIDENCE_SET_HASH_MISMATCH",
        "field": "evidence_set_hash",
        "declared": record["evidence_set_hash"],
        "recomputed": evidence_set_hash([kept[0]["content_hash"]]),
    }


def _unknown_terminal_state(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    return mutate(value_of(e, "stage-x"), terminal_state="exploded"), {
        "code": "UNKNOWN_TERMINAL_STATE",
        "field": "terminal_state",
        "declared": "exploded",
        "recomputed": "",
    }


def _empty_reason_code(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    return mutate(value_of(e, "stage-x"), reason_code=""), {
        "code": "EMPTY_REASON_CODE",
        "field": "reason_code",
        "declared": "",
        "recomputed": "",
    }


def _malformed_artifact_digest(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    good = value_of(e, "stage-x")
    upper = codec.decode(good).record["artifact_hash"].upper().replace("SHA256:", "sha256:")
    return mutate(good, artifact_hash=upper), {
        "code": "MALFORMED_DIGEST",
        "field": "artifact_hash",
        "declared": upper,
        "recomputed": "",
    }


def _malformed_observation_digest(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    good = value_of(e, "stage-x")
    observations = codec.decode(good).record["observations"]
    observations[1] = {**observations[1], "content_hash": "sha256:not-hex"}
    return mutate(good, observations=observations), {
        "code": "MALFORMED_DIGEST",
        "field": "observations[1].content_hash",
        "declared": "sha256:not-hex",
        "recomputed": "",
    }


def _kind_not_allowed(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    # role "scout" declares agent_kind "research"; a coding result is not its kind
    return value_of(e, "stage-x", role="scout", kind="coding"), {
        "code": "KIND_NOT_ALLOWED_FOR_ROLE",
        "field": "kind",
        "declared": "coding",
        "recomputed": "research",
    }


def _kind_not_allowed_default(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    # role "developer" has no agent_kind in the manifest: it defaults to coding
    return value_of(e, "stage-x", kind="research"), {
        "code": "KIND_NOT_ALLOWED_FOR_ROLE",
        "field": "kind",
        "declared": "research",
        "recomputed": "coding",
    }


def _unknown_role(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    return value_of(e, "stage-x", role="ghost"), {"code": "UNKNOWN_ROLE", "field": "role", "declared": "ghost", "recomputed": ""}


def _redundant_stage(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    # the evidence of stage-1 (pages a and b) again, in another order, with another artifact
    value = value_of(e, "stage-x", pages=(b"page b", b"page a"), artifact=b"a rephrased report")
    esh = codec.decode(value).record["evidence_set_hash"]
    return value, {
        "exception": "RedundantStage",
        "code": "REDUNDANT_STAGE",
        "field": "evidence_set_hash",
        "declared": esh,
        "recomputed": esh,
        "earlier_stage_id": "stage-1",
    }


def _duplicate_stage(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    value = mutate(value_of(e, "stage-2", pages=(b"fresh page",)), submission_id="resubmitted")
    return value, {
        "code": "DUPLICATE_STAGE",
        "field": "stage_id",
        "declared": "stage-2",
        "recomputed": "",
        "earlier_stage_id": "stage-2",
    }


def _run_closed(e: Emitter) -> tuple[bytes, dict[str, Any]]:
    return value_of(e, "stage-x", pages=(b"late page",)), {
        "code": "RUN_CLOSED",
        "field": "run_id",
        "declared": RUN,
        "recomputed": "",
    }


CASES = {
    "artifact-hash-mismatch": Case(("stage-1",), _artifact_hash_mismatch),
    "evidence-set-hash-mismatch": Case(("stage-1",), _evidence_set_hash_mismatch),
    "unknown-terminal-state": Case(("stage-1",), _unknown_terminal_state),
    "empty-reason-code": Case(("stage-1",), _empty_reason_code),
    "malformed-artifact-digest": Case(("stage-1",), _malformed_artifact_digest),
    "malformed-observation-digest": Case(("stage-1",), _malformed_observation_digest),
    "kind-not-allowed-for-role": Case(("stage-1",), _kind_not_allowed),
    "kind-not-allowed-default-coding": Case(("stage-1",), _kind_not_allowed_default),
    "unknown-role": Case(("stage-1",), _unknown_role),
    "redundant-stage": Case(("stage-1", "stage-2"), _redundant_stage),
    "duplicate-stage": Case(("stage-1", "stage-2"), _duplicate_stage),
    "run-closed": Case(("stage-1",), _run_closed, close_first=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_refusal_rule_through_the_broker(
    name: str, emitter: Emitter, settings: Settings, install_keys: InstallKeys, trusted: TrustedKeys, s3_store: S3BlobStore
) -> None:
    case = CASES[name]
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = settings.topics
    pages = {"stage-1": (b"page a", b"page b"), "stage-2": (b"page c",)}
    prior = []
    for stage in case.prior:  # through the SDK: evidence into the CAS first, then the event
        observations = [emitter.capture("page", f"https://example.test/{i}", data) for i, data in enumerate(pages[stage])]
        accepted = ActivityResult.build("coding", f"diff of {stage}".encode(), observations)
        prior.append(emitter.publish(run_id=RUN, stage_id=stage, role="developer", result=accepted))
    if case.close_first:
        emitter.close_run(RUN)
    bad_value, expected = case.offending(emitter)
    bad = emitter.publish_raw(RUN, bad_value)
    emitter.flush()
    count = bad.offset + 1
    run_scheduler(bootstrap, topics, scheduler_config(install_keys), expect=count)

    out = read_outputs(bootstrap, topics)
    inputs = read_partition(bootstrap, topics, "submissions")
    assert len(inputs) == count
    bad_input = inputs[bad.offset]
    sent = codec.decode(bad_value).record

    # exactly one refusal, the exact record
    assert len(out["refusals"]) == 1
    refusal = out["refusals"][0]
    record = refusal.record
    message = record.pop("message")
    assert record == {
        "exception": expected.get("exception", "ActivityRejected"),
        "code": expected["code"],
        "run_id": RUN,
        "stage_id": sent["stage_id"],
        "role": sent["role"],
        "kind": sent["kind"],
        "submission_id": sent["submission_id"],
        "field": expected["field"],
        "declared": expected["declared"],
        "recomputed": expected["recomputed"],
        "earlier_stage_id": expected.get("earlier_stage_id"),
        "input": {"topic": topics.submissions, "partition": 0, "offset": bad.offset},
        "occurred_at_ms": sent["occurred_at_ms"],
        # every rule here is checked after the emitter's signature verified: the sender is proven
        "producer": sent["producer"]["id"],
        "key_id": sent["producer_key_id"],
        "authenticated": True,
    }
    assert RefusalCode(record["code"])  # a stable code of the contract
    assert message
    if expected.get("earlier_stage_id"):
        assert expected["earlier_stage_id"] in message
    assert refusal.key == RUN.encode()
    assert refusal.ce_type == b"bernstein.activity.refused"
    assert refusal.timestamp_ms == bad_input.timestamp_ms

    # the refused stage never reached the journal; the prior stages did, in order
    entries = [r.inner for r in out["journal"] if r.schema == codec.JOURNAL_RECORD]
    assert [(e["stage_id"], e["seq"], e["input"]["offset"]) for e in entries] == [
        (stage, i, p.offset) for i, (stage, p) in enumerate(zip(case.prior, prior, strict=True))
    ]
    assert sent["submission_id"] not in {e["submission_id"] for e in entries}

    # the refusal is mirrored, hash-only, into the audit chain
    check_audit_chain(bootstrap, out["audit"], install_keys)
    mirrored = [r.inner for r in out["audit"] if r.inner["input"]["offset"] == bad.offset]
    assert len(mirrored) == 1
    assert mirrored[0]["event"] == "activity.refused"
    assert mirrored[0]["reason_code"] == expected["code"]
    assert mirrored[0]["record_hash"] == sha256_digest(refusal.value or b"")
    assert mirrored[0]["journal_seq"] == -1
    assert mirrored[0]["run_id"] == RUN
    assert sent["artifact"] not in b"".join(r.value or b"" for r in out["audit"])
    assert out["deadletter"] == []

    # the accepted stages verify, evidence reattached from the CAS; an open run lacks only its final seal
    report = verify(RUN, CachedSource(bootstrap, topics), cas=s3_store, trusted=trusted)
    assert report.header.chain is not None and report.header.chain.ok
    assert report.header.chain.entries == len(case.prior)
    assert report.header.audit is not None and report.header.audit.ok, report.header.audit
    assert report.header.audit.refusals == 1
    assert [s.stage_id for s in report.stages] == list(case.prior)
    assert all(s.ok and s.evidence_reattached for s in report.stages), report.stages
    if case.close_first:
        assert report.exit_code == 0, report.header
    else:
        # no final seal and nothing says one was written: the open verdict (exit 5), not a mismatch
        assert report.header.seal is not None and report.header.seal.problem is None and not report.header.seal.final
        assert report.header.open and report.exit_code == 5


# ---------------------------------------------------------------------------
# (b) undecodable input
# ---------------------------------------------------------------------------


def test_undecodable_inputs_become_dead_letters_and_the_partition_moves_on(settings: Settings, install_keys: InstallKeys) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)
    valid = encode_submission(run_id="run-dl", stage_id="after-the-junk")
    junk: list[tuple[bytes | None, bytes | None, DeadLetterCode]] = [
        (b"run-dl", b"definitely not avro", DeadLetterCode.NOT_AVRO_SINGLE_OBJECT),
        (
            b"run-dl",
            codec.MAGIC + bytes.fromhex("00112233445566ff") + valid[codec.HEADER_SIZE :],
            DeadLetterCode.UNKNOWN_SCHEMA_FINGERPRINT,
        ),
        (b"run-dl", valid[: len(valid) // 2], DeadLetterCode.TRUNCATED_OR_MALFORMED_BODY),
        (None, valid + b"\x02", DeadLetterCode.TRUNCATED_OR_MALFORMED_BODY),
        (b"run-dl", b"", DeadLetterCode.EMPTY_VALUE),
        (b"run-dl", None, DeadLetterCode.EMPTY_VALUE),
    ]
    offsets = produce_all(bootstrap, topics.submissions, [(k, v) for k, v, _ in junk] + [(b"run-dl", valid)])
    assert offsets == list(range(len(junk) + 1))
    run_scheduler(bootstrap, topics, scheduler_config(install_keys), expect=len(offsets))

    out = read_outputs(bootstrap, topics)
    inputs = read_partition(bootstrap, topics, "submissions")
    assert len(out["deadletter"]) == len(junk)
    for (key, raw, code), dead, offset in zip(junk, out["deadletter"], offsets, strict=False):
        record = dead.record
        assert record.pop("detail")
        data = raw or b""
        assert record == {
            "code": code.value,
            "raw_sha256": sha256_digest(data),
            "raw_size": len(data),
            "raw": data,
            "key": key,
            "key_sha256": "" if key is None else sha256_digest(key),
            "key_size": len(key or b""),
            "input": {"topic": topics.submissions, "partition": 0, "offset": offset},
            "record_timestamp_ms": inputs[offset].timestamp_ms,
        }
        assert dead.ce_type == b"bernstein.input.deadletter"
        assert dead.timestamp_ms == inputs[offset].timestamp_ms
    # the valid submission after the junk is journalled as the run's first entry
    entries = [r.inner for r in out["journal"] if r.schema == codec.JOURNAL_RECORD]
    assert [(e["stage_id"], e["seq"], e["input"]["offset"]) for e in entries] == [("after-the-junk", 0, len(junk))]
    assert journal_entry_hash(out["journal"][0].record["payload"]) == out["journal"][0].record["entry_hash"]
    assert out["refusals"] == []
    # every dead letter is mirrored with its code and raw digest
    check_audit_chain(bootstrap, out["audit"], install_keys)
    assert [(a.inner["event"], a.inner["reason_code"], a.inner["record_hash"]) for a in out["audit"]] == [
        ("input.deadletter", code.value, sha256_digest(raw or b"")) for _, raw, code in junk
    ] + [("activity.result", "ok", out["journal"][0].record["entry_hash"])]


# ---------------------------------------------------------------------------
# (c) fuzz through the broker
# ---------------------------------------------------------------------------


def _fuzz_inputs(rng: random.Random, count: int) -> list[tuple[bytes | None, bytes | None]]:
    runs = [f"fz-{i}" for i in range(6)]
    valid: list[bytes] = []
    items: list[tuple[bytes | None, bytes | None]] = []
    for i in range(count):
        run_id = rng.choice(runs)
        key = run_id.encode()
        roll = rng.random()
        if roll < 0.3:
            pages = tuple(f"page {rng.randrange(40)}".encode() for _ in range(rng.randrange(0, 4)))
            value = encode_submission(run_id=run_id, stage_id=f"s{rng.randrange(60)}", pages=pages, submission_id=f"fz/{i}")
            valid.append(value)
        elif roll < 0.5 and valid:
            data = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            value = bytes(data)
        elif roll < 0.6 and valid:
            source = rng.choice(valid)
            value = source[: rng.randrange(len(source))]
        elif roll < 0.7:
            value = codec.MAGIC + rng.randbytes(8) + rng.randbytes(rng.randrange(0, 64))
        elif roll < 0.8:
            value = rng.randbytes(rng.randrange(0, 200))
        elif roll < 0.85:
            value = None
        elif roll < 0.9:
            value = encode_close(run_id, submission_id=f"fz/{i}")
        elif valid:
            value = rng.choice(valid)  # a replayed submission: duplicate or redundant
        else:
            value = b"\x00"
        if rng.random() < 0.05:
            key = rng.choice([None, b"", rng.randbytes(5)])
        items.append((key, value))
    return items


def test_fuzz_through_the_broker_every_input_offset_is_accounted_for_once(settings: Settings, install_keys: InstallKeys) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)
    rng = random.Random(20260314)
    items = _fuzz_inputs(rng, 400)
    offsets = produce_all(bootstrap, topics.submissions, items)
    config = scheduler_config(install_keys, seal_every=5)
    counters, _ = run_scheduler(bootstrap, topics, config, expect=len(items), options=ShellOptions(batch_max=37))
    assert counters.transactions >= len(items) // 37

    out = read_outputs(bootstrap, topics)
    found = crossings(out)
    assert [offset for offset, _ in found] == offsets, (
        "each input offset exactly once across journal, refusals, dead letters, closes"
    )
    kinds = {what for _, what in found}
    assert kinds == {"journal", "refusal", "deadletter", "close"}, kinds
    assert all(r.record["code"] != DeadLetterCode.SCHEDULER_ERROR.value for r in out["deadletter"])
    check_audit_chain(bootstrap, out["audit"], install_keys)
    assert (counters.journalled, counters.refused, counters.dead_letters) == (
        sum(1 for r in out["journal"] if r.schema == codec.JOURNAL_RECORD),
        len(out["refusals"]),
        len(out["deadletter"]),
    )
    # and the shell wrote exactly what the pure core computes over the same partition
    expected = fold(config, read_partition(bootstrap, topics, "submissions"))
    for stream, records in out.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream


# ---------------------------------------------------------------------------
# (d) replay determinism
# ---------------------------------------------------------------------------


def _mixed_inputs(store: DirBlobStore) -> list[tuple[bytes | None, bytes | None]]:
    items: list[tuple[bytes | None, bytes | None]] = []
    for i in range(30):
        run_id = f"rp-{i % 3}"
        pages = (f"p{i}".encode(), b"common")
        items.append((run_id.encode(), encode_submission(run_id=run_id, stage_id=f"s{i}", pages=pages, store=store)))
    items += [
        (b"rp-0", encode_submission(run_id="rp-0", stage_id="redo", pages=(b"common", b"p0"))),  # redundant with s0
        (b"rp-1", encode_submission(run_id="rp-1", stage_id="s1", pages=(b"other",), submission_id="again")),  # duplicate stage
        (b"rp-0", items[0][1]),  # a retried publish: a repeated submission_id
        (b"rp-2", mutate(encode_submission(run_id="rp-2", stage_id="bad"), reason_code="")),  # empty reason code
        (b"rp-2", mutate(encode_submission(run_id="rp-2", stage_id="bad2"), artifact=b"tampered")),  # hash mismatch
        (b"rp-0", b"not avro at all"),
        (b"rp-0", None),
        (b"rp-1", encode_close("rp-1")),
        (b"rp-1", encode_submission(run_id="rp-1", stage_id="late", pages=(b"late",))),  # run closed
        (b"rp-0", encode_close("rp-0")),
    ]
    items += [
        (b"rp-2", encode_submission(run_id="rp-2", stage_id=f"t{i}", pages=(f"q{i}".encode(),), store=store)) for i in range(12)
    ]
    items.append((b"rp-2", encode_close("rp-2")))
    return items


def test_replay_from_offset_zero_into_fresh_topics_is_byte_identical(
    settings: Settings, install_keys: InstallKeys, trusted: TrustedKeys, tmp_path: Path
) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    first = fresh_topics(bootstrap, settings.topics.prefix)
    store = DirBlobStore(tmp_path / "cas")
    items = _mixed_inputs(store)
    produce_all(bootstrap, first.submissions, items)
    config = scheduler_config(install_keys, seal_every=4)
    run_scheduler(bootstrap, first, config, expect=len(items))
    original = read_outputs(bootstrap, first)

    # the same input topic, read again from offset 0, into another deployment's output topics,
    # with another batch cadence and a freshly built core
    second = fresh_topics(bootstrap, f"{settings.topics.prefix}r")
    counters, _ = run_scheduler(
        bootstrap,
        second,
        scheduler_config(install_keys, seal_every=4),
        expect=len(items),
        input_topic=first.submissions,
        options=ShellOptions(batch_max=3),
    )
    assert counters.transactions >= len(items) // 3
    replayed = read_outputs(bootstrap, second)
    assert read_partition(bootstrap, second, "submissions") == []

    for stream in ("journal", "refusals", "audit", "deadletter", "checkpoints"):
        assert len(original[stream]) == len(replayed[stream]) > 0, stream
        assert [r.stored() for r in original[stream]] == [r.stored() for r in replayed[stream]], stream
    # the mix covers every kind of output
    assert {r.ce_type for r in original["journal"]} == {b"bernstein.activity.result", b"bernstein.run.sealed"}
    assert {r.record["code"] for r in original["refusals"]} == {
        "REDUNDANT_STAGE",
        "DUPLICATE_STAGE",
        "DUPLICATE_SUBMISSION",
        "EMPTY_REASON_CODE",
        "ARTIFACT_HASH_MISMATCH",
        "RUN_CLOSED",
    }
    assert all(r.inner["input"]["topic"] == first.submissions for r in replayed["audit"])
    # both equal the pure fold over the recorded partition
    expected = fold(config, read_partition(bootstrap, first, "submissions"))
    for stream, records in replayed.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream
    # and the replayed deployment verifies on its own
    for run_id in ("rp-0", "rp-1", "rp-2"):
        report = verify(run_id, CachedSource(bootstrap, second), cas=store, trusted=trusted)
        assert report.exit_code == 0, (run_id, report.header, [s for s in report.stages if not s.ok])
        assert all(s.evidence_reattached for s in report.stages)


# ---------------------------------------------------------------------------
# (e) bounds: no record stops the partition; keys and submission ids, both cores
# ---------------------------------------------------------------------------

CORES = ("python", "native")


def _run_with(
    core_name: str, bootstrap: str, topics: Topics, config: SchedulerConfig, *, expect: int
) -> tuple[Counters, SchedulerCoreLike]:
    """Run the shell in-process with the Python reference or the native core until it consumed ``expect`` records."""
    core: SchedulerCoreLike = SchedulerCore(config) if core_name == "python" else NativeSchedulerCore(config, 0)
    log = io.StringIO()
    shell = SchedulerShell(bootstrap=bootstrap, topics=topics, partition=0, core=core, progress=log)
    counters = shell.run(until=lambda c: c.consumed >= expect, idle_exit=60.0)
    assert counters.consumed == expect, f"scheduler consumed {counters.consumed} of {expect} records:\n{log.getvalue()}"
    return counters, core


def _wire_size(rec: Rec) -> int:
    return len(rec.key or b"") + len(rec.value or b"") + sum(len(n.encode()) + len(v) for n, v in rec.headers)


def _oversized_journal_submission(run_id: str, limit: int) -> bytes:
    """A valid submission under the topic's 2 MiB whose journal record would exceed ``limit``."""
    count = limit // 4080 + 1
    observations: list[dict[str, Any]] = [
        {
            "kind": "page",
            "ref": f"https://example.test/{i}/" + "r" * 3990,
            "content_hash": sha256_digest(b"big %d" % i),
            "size": len(b"big %d" % i),
        }
        for i in range(count)
    ]
    record = {
        **submission_record(run_id=run_id, stage_id="too-big", pages=()),
        "observations": observations,
        "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in observations),
    }
    value = encode_signed_submission(record)
    assert limit < len(value) < 2_097_152 - 4096, len(value)
    return value


@pytest.mark.parametrize("core_name", CORES)
def test_a_huge_key_a_huge_submission_id_and_an_oversized_output_do_not_stop_the_partition(
    core_name: str, settings: Settings, install_keys: InstallKeys, trusted: TrustedKeys, tmp_path: Path
) -> None:
    """Review H2: each of these once made an output larger than the topic allows; the scheduler then never committed."""
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, f"{settings.topics.prefix}{core_name[0]}")
    store = DirBlobStore(tmp_path / "cas")
    run_id = "run-bounds"
    key = run_id.encode()
    huge_key = bytes(range(256)) * 4300  # 1.1 MB
    huge_id = "s" * 2_000_000  # a 2 MB submission_id
    config = scheduler_config(install_keys)
    items: list[tuple[bytes | None, bytes | None]] = [
        (huge_key, b"x"),  # a dead letter that once carried the key twice
        (huge_key, encode_submission(run_id=run_id, stage_id="keyed-away", store=store)),  # refused: not keyed by its run
        (key, encode_submission(run_id=run_id, stage_id="huge-id", submission_id=huge_id, store=store)),
        (key, _oversized_journal_submission(run_id, config.max_output_bytes)),
    ]
    behind = [
        (key, encode_submission(run_id=run_id, stage_id=f"behind-{i}", pages=(b"behind %d" % i,), store=store)) for i in range(3)
    ]
    items += [*behind, (key, encode_close(run_id))]
    offsets = produce_all(bootstrap, topics.submissions, items)
    assert len(items[2][1] or b"") > 2_000_000
    counters, core = _run_with(core_name, bootstrap, topics, config, expect=len(items))
    if core_name == "native":
        assert isinstance(core, NativeSchedulerCore)

    out = read_outputs(bootstrap, topics)
    inputs = read_partition(bootstrap, topics, "submissions")
    # every output fits the topic, with room for Kafka's framing
    for stream, records in out.items():
        assert all(_wire_size(r) <= config.max_output_bytes for r in records), stream
    # the dead letters keep the key's digest and size and its first KiB, never the key itself
    dead = {r.record["input"]["offset"]: r for r in out["deadletter"]}
    assert sorted(dead) == [offsets[0], offsets[3]]
    first = dead[offsets[0]]
    assert first.key == b""
    assert first.record == {
        "code": "NOT_AVRO_SINGLE_OBJECT",
        "detail": first.record["detail"],
        "raw_sha256": sha256_digest(b"x"),
        "raw_size": 1,
        "raw": b"x",
        "key": huge_key[:1024],
        "key_sha256": sha256_digest(huge_key),
        "key_size": len(huge_key),
        "input": {"topic": topics.submissions, "partition": 0, "offset": offsets[0]},
        "record_timestamp_ms": inputs[offsets[0]].timestamp_ms,
    }
    too_big = dead[offsets[3]]
    big_value = items[3][1] or b""
    assert too_big.key == key
    assert too_big.record["code"] == "OUTPUT_TOO_LARGE"
    assert too_big.record["detail"].endswith(f"the limit (max_output_bytes) is {config.max_output_bytes}")
    assert (too_big.record["raw"], too_big.record["raw_sha256"], too_big.record["raw_size"]) == (
        b"",
        sha256_digest(big_value),
        len(big_value),
    )
    # the refusals: keyed by the run id, with the key's and the id's evidence bounded
    refusals = {r.record["input"]["offset"]: r for r in out["refusals"]}
    assert sorted(refusals) == [offsets[1], offsets[2]]
    away = refusals[offsets[1]]
    assert (away.key, away.record["code"], away.record["field"], away.record["declared"], away.record["recomputed"]) == (
        key,
        "RUN_KEY_MISMATCH",
        "key",
        sha256_digest(huge_key),
        sha256_digest(key),
    )
    huge = refusals[offsets[2]]
    assert (huge.key, huge.record["code"], huge.record["field"]) == (key, "INVALID_SUBMISSION_ID", "submission_id")
    assert huge.record["submission_id"] == huge.record["declared"] == "s" * 253 + "..."
    assert len(huge.value or b"") < 4096
    # the records behind them are journalled, and the run closes and verifies
    entries = [r.inner for r in out["journal"] if r.schema == codec.JOURNAL_RECORD]
    assert [(e["stage_id"], e["seq"], e["input"]["offset"]) for e in entries] == [
        (f"behind-{i}", i, offsets[4 + i]) for i in range(3)
    ]
    assert [offset for offset, _ in crossings(out)] == offsets  # every input accounted for exactly once
    assert counters.dead_letters == 2 and counters.refused == 2 and counters.journalled == 3
    check_audit_chain(bootstrap, out["audit"], install_keys)
    # both cores write what the pure reference computes over the same partition
    expected = fold(config, inputs)
    for stream, records in out.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream
    report = verify(run_id, CachedSource(bootstrap, topics), cas=store, trusted=trusted)
    assert report.exit_code == 0, (report.header, [s for s in report.stages if not s.ok])
    assert [s.stage_id for s in report.stages] == ["behind-0", "behind-1", "behind-2"]


@pytest.mark.parametrize("core_name", CORES)
def test_a_record_keyed_elsewhere_and_a_repeated_submission_id_get_their_exact_refusals(
    core_name: str, settings: Settings, install_keys: InstallKeys, trusted: TrustedKeys, tmp_path: Path
) -> None:
    """Rules moved into the scheduler: a hand-built record that breaks each, through the broker."""
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, f"{settings.topics.prefix}{core_name[0]}")
    store = DirBlobStore(tmp_path / "cas")
    run_id = "run-keys"
    key = run_id.encode()
    first = encode_submission(run_id=run_id, stage_id="s0", pages=(b"zero",), submission_id="publish-1", store=store)
    items: list[tuple[bytes | None, bytes | None]] = [
        (key, first),
        (key, first),  # a retried publish: the same bytes again
        (key, encode_submission(run_id=run_id, stage_id="s1", pages=(b"one",), submission_id="publish-1", store=store)),
        (b"run-other", encode_submission(run_id=run_id, stage_id="s2", pages=(b"two",), store=store)),
        (None, encode_close(run_id)),  # a close without a key closes nothing
        (key, encode_submission(run_id=run_id, stage_id="s1", pages=(b"one",), store=store)),
        (key, encode_close(run_id)),
    ]
    offsets = produce_all(bootstrap, topics.submissions, items)
    config = scheduler_config(install_keys)
    _run_with(core_name, bootstrap, topics, config, expect=len(items))

    out = read_outputs(bootstrap, topics)
    inputs = read_partition(bootstrap, topics, "submissions")
    refusals = [r.record for r in out["refusals"]]
    assert all(r.key == key for r in out["refusals"])
    sender = codec.decode(first).record  # every record here is sent by tests@host, signed with its test key
    common = {
        "exception": "ActivityRejected",
        "run_id": run_id,
        "role": "developer",
        "recomputed": "",
        "producer": sender["producer"]["id"],
        "key_id": sender["producer_key_id"],
    }
    run_digest = sha256_digest(key)
    other_digest = sha256_digest(b"run-other")
    assert refusals == [
        {
            **common,
            "code": "DUPLICATE_SUBMISSION",
            "message": "submission_id 'publish-1' was already journalled in run 'run-keys' (stage 's0'); "
            "a repeated submission is journalled once",
            "stage_id": "s0",
            "kind": "coding",
            "submission_id": "publish-1",
            "field": "submission_id",
            "declared": "publish-1",
            "earlier_stage_id": "s0",
            "input": {"topic": topics.submissions, "partition": 0, "offset": offsets[1]},
            "occurred_at_ms": 1_700_000_000_000,
            "authenticated": True,
        },
        {
            **common,
            "code": "DUPLICATE_SUBMISSION",
            "message": "submission_id 'publish-1' was already journalled in run 'run-keys' (stage 's0'); "
            "a repeated submission is journalled once",
            "stage_id": "s1",
            "kind": "coding",
            "submission_id": "publish-1",
            "field": "submission_id",
            "declared": "publish-1",
            "earlier_stage_id": "s0",
            "input": {"topic": topics.submissions, "partition": 0, "offset": offsets[2]},
            "occurred_at_ms": 1_700_000_000_000,
            "authenticated": True,
        },
        {
            **common,
            "code": "RUN_KEY_MISMATCH",
            "message": f"the record key (9 bytes, {other_digest}) is not the run id 'run-keys' ({run_digest}): "
            "a record must be keyed by its run id",
            "stage_id": "s2",
            "kind": "coding",
            "submission_id": "run-keys/s2",
            "field": "key",
            "declared": other_digest,
            "recomputed": run_digest,
            "earlier_stage_id": None,
            "input": {"topic": topics.submissions, "partition": 0, "offset": offsets[3]},
            "occurred_at_ms": 1_700_000_000_000,
            "authenticated": False,  # refused before the signature is checked
        },
        {
            **common,
            "code": "RUN_KEY_MISMATCH",
            "message": f"the record has no key; a record of run 'run-keys' ({run_digest}) must be keyed by its run id",
            "stage_id": "",
            "role": "",
            "kind": "",
            "submission_id": "close/run-keys",
            "field": "key",
            "declared": "",
            "recomputed": run_digest,
            "earlier_stage_id": None,
            "input": {"topic": topics.submissions, "partition": 0, "offset": offsets[4]},
            "occurred_at_ms": 1_700_000_000_000,
            "authenticated": False,  # refused before the signature is checked
        },
    ]
    entries = [r.inner for r in out["journal"] if r.schema == codec.JOURNAL_RECORD]
    assert [(e["stage_id"], e["submission_id"], e["input"]["offset"]) for e in entries] == [
        ("s0", "publish-1", offsets[0]),
        ("s1", "run-keys/s1", offsets[5]),
    ]
    assert [offset for offset, _ in crossings(out)] == offsets
    expected = fold(config, inputs)
    for stream, records in out.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream
    report = verify(run_id, CachedSource(bootstrap, topics), cas=store, trusted=trusted)
    assert report.exit_code == 0, (report.header, [s for s in report.stages if not s.ok])
    assert report.header.audit is not None and report.header.audit.refusals == 4


def test_records_the_scheduler_did_not_write_are_named_not_adopted_and_the_partition_keeps_journalling(
    settings: Settings, install_keys: InstallKeys, trusted: TrustedKeys, tmp_path: Path
) -> None:
    """Review M12: garbage and forgeries on the scheduler's topics neither stop it nor are adopted.

    Someone who can write to the journal, audit and checkpoints topics appends garbage to each, a
    well-formed journal entry at the next seq that claims the submission id of the stage the scheduler
    is about to journal (its hash and chain link are right: neither is keyed), and an unsigned final
    seal. The restarted scheduler names each record by topic[partition]@offset, adopts none of them,
    journals the genuine stage at that seq, and the verifier still names what was appended.
    """
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, f"{settings.topics.prefix}q")
    store = DirBlobStore(tmp_path / "cas")
    config = scheduler_config(install_keys)
    run_id = "run-quarantine"
    key = run_id.encode()
    s0 = encode_submission(run_id=run_id, stage_id="s0", store=store)
    s1 = encode_submission(run_id=run_id, stage_id="s1", pages=(b"new",), store=store)
    produce_all(bootstrap, topics.submissions, [(key, s0)])
    _run_with("python", bootstrap, topics, config, expect=1)
    # the forged entry: what a scheduler would write for another s1 with the same submission id, computed offline
    attacker = SchedulerCore(config)
    state = initial_state(config, 0)
    outs: list[OutputRecord] = []
    for offset, value in enumerate((s0, encode_submission(run_id=run_id, stage_id="s1", pages=(b"forged",)))):
        state, outs = attacker.step(state, InputRecord(topics.submissions, 0, offset, 1, key, value))
    forged_entry = next(o.value for o in outs if o.stream is Stream.JOURNAL)
    entry = read_partition(bootstrap, topics, "journal")[0]
    forged_seal = codec.encode(
        codec.SEAL_RECORD,
        {
            "payload": codec.encode(
                codec.RUN_SEAL,
                {
                    "run_id": run_id,
                    "partition": 0,
                    "entry_count": 1,
                    "head_hash": entry.record["entry_hash"],
                    "last_input_offset": 0,
                    "final": True,
                    "audit_seq": 1,
                    "audit_head": "hmac-sha256:" + "0" * 64,
                    "sealed_at_ms": 1,
                },
            ),
            "key_id": install_keys.signer.key_id,
            "signature": bytes(64),
        },
    )
    garbage, forged, seal = produce_all(bootstrap, topics.journal, [(key, b"garbage"), (key, forged_entry), (key, forged_seal)])
    (audit_garbage,) = produce_all(bootstrap, topics.audit, [(key, b"\xc3\x01 not an audit record")])
    (checkpoint_garbage,) = produce_all(bootstrap, topics.checkpoints, [(b"0", b"junk")])
    produce_all(bootstrap, topics.submissions, [(key, s1)])

    def warned(log: io.StringIO) -> list[str]:
        lines = [line.split("warning: ", 1)[1] for line in log.getvalue().splitlines() if "warning: " in line]
        assert all(line.endswith("not adopted (docs/scheduler.md, 'When the scheduler will not start')") for line in lines), lines
        return sorted(line.split(": ", 1)[0] for line in lines)  # the journal and audit are read side by side

    log = io.StringIO()
    shell = SchedulerShell(bootstrap=bootstrap, topics=topics, partition=0, core=SchedulerCore(config), progress=log)
    counters = shell.run(until=lambda c: c.consumed >= 1, idle_exit=60.0)
    assert (counters.consumed, counters.journalled, counters.refused) == (1, 1, 0), log.getvalue()
    named = sorted(
        [
            f"{topics.journal}[0]@{garbage}",
            f"{topics.journal}[0]@{forged}",
            f"{topics.journal}[0]@{seal}",
            f"{topics.audit}[0]@{audit_garbage}",
            f"{topics.checkpoints}[0]@{checkpoint_garbage}",
        ]
    )
    assert warned(log) == named, log.getvalue()
    journal = read_partition(bootstrap, topics, "journal")
    assert [r.offset for r in journal if r.offset in (garbage, forged, seal)] == [garbage, forged, seal]  # evidence
    genuine = [r for r in journal if r.offset not in (garbage, forged, seal) and r.schema == codec.JOURNAL_RECORD]
    assert [(r.inner["stage_id"], r.inner["seq"], r.inner["submission_id"]) for r in genuine] == [
        ("s0", 0, f"{run_id}/s0"),
        ("s1", 1, f"{run_id}/s1"),
    ]
    assert genuine[1].value != forged_entry and genuine[1].offset > seal
    # the audit chain went on from the scheduler's own last record, not from the garbage
    good = [r for r in read_partition(bootstrap, topics, "audit") if r.offset != audit_garbage]
    assert [r.inner["seq"] for r in good] == [0, 1]
    assert good[1].inner["prev_mac"] == good[0].record["mac"] and good[1].offset > audit_garbage
    # a restart over the same topics names the same records and adopts the genuine s1
    again = io.StringIO()
    restarted = SchedulerShell(bootstrap=bootstrap, topics=topics, partition=0, core=SchedulerCore(config), progress=again)
    assert restarted.run(idle_exit=2.0).consumed == 0
    assert warned(again) == named, again.getvalue()
    assert "state rebuilt from 5 journal records" in again.getvalue() and "audit seq 2" in again.getvalue()
    # the verifier still names what was appended (each verdict shows its first problem)
    report = verify(run_id, CachedSource(bootstrap, topics), cas=store, trusted=trusted)
    verdicts = (report.header.chain, report.header.seal, report.header.audit)
    firsts = {(v.problem.code, v.problem.stream, v.problem.offset) for v in verdicts if v is not None and v.problem is not None}
    assert report.exit_code == 2, firsts
    assert firsts == {
        ("RECORD_UNDECODABLE", "journal", garbage),
        ("SEAL_SIGNATURE_INVALID", "journal", seal),
        ("CHECKPOINT_UNDECODABLE", "checkpoints", checkpoint_garbage),
    }
    assert [(s.offset, s.ok) for s in report.stages if s.stage_id == "s1"] == [(forged, False), (genuine[1].offset, True)]


def test_a_garbage_audit_record_is_named_by_the_verifier_and_the_scheduler_keeps_journalling(
    settings: Settings, install_keys: InstallKeys, trusted: TrustedKeys, tmp_path: Path
) -> None:
    """Review M12: one record appended to the audit topic by a plain producer once stopped the partition for good."""
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, f"{settings.topics.prefix}g")
    store = DirBlobStore(tmp_path / "cas")
    config = scheduler_config(install_keys)
    run_id = "run-garbage"
    key = run_id.encode()
    produce_all(bootstrap, topics.submissions, [(key, encode_submission(run_id=run_id, stage_id="s0", store=store))])
    _run_with("python", bootstrap, topics, config, expect=1)
    (bad,) = produce_all(bootstrap, topics.audit, [(key, b"garbage")])
    produce_all(
        bootstrap, topics.submissions, [(key, encode_submission(run_id=run_id, stage_id="s1", pages=(b"more",), store=store))]
    )
    log = io.StringIO()
    shell = SchedulerShell(bootstrap=bootstrap, topics=topics, partition=0, core=SchedulerCore(config), progress=log)
    counters = shell.run(until=lambda c: c.consumed >= 1, idle_exit=60.0)
    assert (counters.consumed, counters.journalled) == (1, 1), log.getvalue()
    assert f"warning: {topics.audit}[0]@{bad}: the audit record does not decode" in log.getvalue()
    entries = [r.inner for r in read_partition(bootstrap, topics, "journal") if r.schema == codec.JOURNAL_RECORD]
    assert [(e["stage_id"], e["seq"]) for e in entries] == [("s0", 0), ("s1", 1)]
    report = verify(run_id, CachedSource(bootstrap, topics), cas=store, trusted=trusted)
    assert report.header.audit is not None and report.header.audit.problem is not None
    problem = report.header.audit.problem
    assert (report.exit_code, problem.code, problem.stream, problem.offset) == (2, "AUDIT_UNDECODABLE", "audit", bad)
    assert [s.ok for s in report.stages] == [True, True]
