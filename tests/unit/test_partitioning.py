"""The partitioner: Kafka's murmur2, and the scheduler's WRONG_PARTITION refusal in both cores.

``bernstein.schemas.partitioning`` against the Java client's own test values and a line-by-line
transcription of Java's signed-int arithmetic; the Python SDK's librdkafka setting; the refusal
of a submission, a run close and a computer-use action on the wrong partition, byte for byte in
the Python reference and the Rust core, at its place in the order of checks; the shell taking
the count from the topic; and ``schemas/vectors/partitions.json``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell, SubmissionPartitionsMismatch
from bernstein.consumers.shell import preflight as shell_mod
from bernstein.schemas import codec
from bernstein.schemas.canonical import computer_use_genesis, evidence_set_hash, sha256_digest
from bernstein.schemas.partitioning import SEED, murmur2, partition_for
from bernstein.schemas.records import RefusalCode, is_valid_id
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import emitter_producer_config
from tests.support.cores import PARTITION, TOPIC, UNIT, Pair, cu_action, enc_close, enc_sub, kinds, make_config, sub
from tests.vectors import generate

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "schemas" / "vectors" / "partitions.json"

KAFKA_UTILS_TEST = {
    # org.apache.kafka.common.utils.UtilsTest.testMurmur2 (the Java client's own expectations)
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def _java_murmur2(data: bytes) -> int:
    """Java's ``Utils.murmur2`` transcribed with 32-bit signed ints (``>>>`` as an unsigned shift)."""

    def i32(x: int) -> int:
        return ctypes.c_int32(x).value

    def ushr(x: int, n: int) -> int:
        return i32((x & 0xFFFFFFFF) >> n)

    length = len(data)
    m, r = i32(0x5BD1E995), 24
    h = i32(i32(0x9747B28C) ^ length)
    for i in range(length // 4):
        i4 = i * 4
        k = i32(data[i4] + (data[i4 + 1] << 8) + (data[i4 + 2] << 16) + (data[i4 + 3] << 24))
        k = i32(k * m)
        k ^= ushr(k, r)
        k = i32(k * m)
        h = i32(h * m)
        h ^= k
    rest = length % 4
    base = length & ~3
    if rest == 3:
        h ^= data[base + 2] << 16
    if rest >= 2:
        h ^= data[base + 1] << 8
    if rest >= 1:
        h ^= data[base]
        h = i32(h * m)
    h ^= ushr(h, 13)
    h = i32(h * m)
    h ^= ushr(h, 15)
    return h


# ---------------------------------------------------------------------------
# murmur2 and partition_for
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "expected"), sorted(KAFKA_UTILS_TEST.items()))
def test_murmur2_is_the_java_clients(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert _java_murmur2(key) == expected  # the transcription the property test trusts


def test_the_seed_and_the_example_of_the_docs() -> None:
    assert SEED == 0x9747B28C
    assert murmur2(b"") == 275646681  # seed ^ 0, mixed: no block, no tail
    assert (murmur2(b"run-42"), partition_for(b"run-42", 6)) == (1115905536, 0)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_murmur2_agrees_with_the_java_transcription(key: bytes, partitions: int) -> None:
    expected = _java_murmur2(key)
    assert murmur2(key) == expected
    assert -(2**31) <= expected < 2**31
    assert partition_for(key, partitions) == (expected & 0x7FFFFFFF) % partitions


def test_partition_for_masks_the_sign_bit_instead_of_abs() -> None:
    # murmur2("21") is negative: Kafka's toPositive keeps the low 31 bits, abs() would give another partition
    assert murmur2(b"21") == -973932308
    assert partition_for(b"21", 100) == 40
    assert abs(murmur2(b"21")) % 100 == 8


@pytest.mark.parametrize("partitions", [0, -1])
def test_partition_for_needs_a_partition(partitions: int) -> None:
    with pytest.raises(ValueError, match="at least 1 partition"):
        partition_for(b"run-1", partitions)


def test_the_python_sdk_uses_librdkafkas_murmur2_partitioner() -> None:
    # librdkafka's default (consistent_random) is CRC-32; murmur2_random is Java's murmur2 for keyed records
    assert emitter_producer_config("127.0.0.1:9092")["partitioner"] == "murmur2_random"


# ---------------------------------------------------------------------------
# the scheduler: WRONG_PARTITION in both cores
# ---------------------------------------------------------------------------

N = 6
"""The submissions topic's partition count in these tests; the Pair's records sit on PARTITION (3)."""
HOME_RUN = "run-3"
"""partition_for(b"run-3", 6) == 3: a run at home on PARTITION."""
AWAY_RUN = "run-1"
"""partition_for(b"run-1", 6) == 1: its records on PARTITION are refused."""


def checked_pair(partitions: int | None = N) -> Pair:
    return Pair(dataclasses.replace(make_config(), submission_partitions=partitions))


def test_the_chosen_runs_sit_where_the_tests_say() -> None:
    assert partition_for(HOME_RUN.encode(), N) == PARTITION
    assert partition_for(AWAY_RUN.encode(), N) == 1


def _refusal(outputs: list[Any]) -> dict[str, Any]:
    assert kinds(outputs) == [codec.REFUSAL_V2, codec.AUDIT_RECORD_V2]
    record: dict[str, Any] = codec.decode(outputs[0].value).record
    return record


def _wrong_partition_message(run_id: str) -> str:
    return (
        f"the record of run '{run_id}' is on partition {PARTITION} of {N}, but its key belongs on partition "
        f"{partition_for(run_id.encode(), N)}: produce with Kafka's murmur2 partitioner, (murmur2(key) & 0x7fffffff) % {N}"
    )


def test_a_submission_on_the_wrong_partition_is_refused_with_the_evidence() -> None:
    pair = checked_pair()
    record = sub(run_id=AWAY_RUN, stage_id="stage-0")
    outs = pair.feed(enc_sub(run_id=AWAY_RUN, stage_id="stage-0"), key=AWAY_RUN.encode(), offset=17)
    assert _refusal(outs) == {
        "exception": "ActivityRejected",
        "code": "WRONG_PARTITION",
        "message": _wrong_partition_message(AWAY_RUN),
        "run_id": AWAY_RUN,
        "stage_id": "stage-0",
        "role": "developer",
        "kind": "coding",
        "submission_id": record["submission_id"],
        "field": "partition",
        "declared": str(PARTITION),
        "recomputed": "1",
        "earlier_stage_id": None,
        "input": {"topic": TOPIC, "partition": PARTITION, "offset": 17},
        "occurred_at_ms": record["occurred_at_ms"],
        # the envelope is checked before the signature: the sender is only claimed
        "producer": "unit@test",
        "key_id": UNIT.key_id,
        "authenticated": False,
    }
    assert outs[0].key == AWAY_RUN.encode()
    assert AWAY_RUN not in pair.py_state.runs  # nothing of the run is kept on the wrong partition
    assert pair.native.fallbacks == 0


def test_a_submission_on_its_partition_is_journalled() -> None:
    pair = checked_pair()
    outs = pair.feed(enc_sub(run_id=HOME_RUN), key=HOME_RUN.encode())
    assert kinds(outs)[0] == codec.JOURNAL_RECORD
    assert pair.py_state.runs[HOME_RUN].entry_count == 1
    assert pair.native.fallbacks == 0


def test_unchecked_without_a_partition_count() -> None:
    pair = checked_pair(None)
    outs = pair.feed(enc_sub(run_id=AWAY_RUN), key=AWAY_RUN.encode())
    assert kinds(outs)[0] == codec.JOURNAL_RECORD


def test_a_run_close_on_the_wrong_partition_is_refused_and_leaves_the_run_open() -> None:
    pair = checked_pair()
    # the run is at home on partition 1; a close produced with another partitioner lands on 3
    outs = pair.feed(enc_close(AWAY_RUN), key=AWAY_RUN.encode())
    refusal = _refusal(outs)
    assert (refusal["code"], refusal["field"], refusal["declared"], refusal["recomputed"]) == (
        "WRONG_PARTITION",
        "partition",
        "3",
        "1",
    )
    assert refusal["message"] == _wrong_partition_message(AWAY_RUN)
    assert AWAY_RUN not in pair.py_state.runs
    assert pair.native.fallbacks == 0
    # the same close on its partition closes the run (once it has a stage: a close of an empty run is RUN_EMPTY)
    assert kinds(pair.feed(enc_sub(run_id=HOME_RUN, pages=[b"home"]), key=HOME_RUN.encode()))[0] == codec.JOURNAL_RECORD
    home = pair.feed(enc_close(HOME_RUN), key=HOME_RUN.encode())
    assert kinds(home) == [codec.SEAL_RECORD, codec.AUDIT_RECORD_V2, codec.CHECKPOINT_RECORD]


def test_a_computer_use_action_on_the_wrong_partition_is_refused() -> None:
    pair = checked_pair()
    value, _ = cu_action(AWAY_RUN, "browser-0", 0, computer_use_genesis(AWAY_RUN, "browser-0"))
    refusal = _refusal(pair.feed(value, key=AWAY_RUN.encode()))
    assert (refusal["code"], refusal["stage_id"], refusal["kind"], refusal["declared"], refusal["recomputed"]) == (
        "WRONG_PARTITION",
        "browser-0",
        "browser",
        "3",
        "1",
    )
    home, _ = cu_action(HOME_RUN, "browser-0", 0, computer_use_genesis(HOME_RUN, "browser-0"))
    assert kinds(pair.feed(home, key=HOME_RUN.encode()))[0] == codec.JOURNAL_RECORD


ORDER: dict[str, tuple[str, Any]] = {
    # earlier checks win over the partition
    "invalid run id": ("INVALID_RUN_ID", lambda: (enc_sub(run_id="bad id"), b"bad id")),
    "invalid submission id": (
        "INVALID_SUBMISSION_ID",
        lambda: (enc_sub(run_id=AWAY_RUN, submission_id="\n"), AWAY_RUN.encode()),
    ),
    "occurred_at out of range": (
        "INVALID_OCCURRED_AT",
        lambda: (enc_sub(run_id=AWAY_RUN, occurred_at_ms=-1), AWAY_RUN.encode()),
    ),
    # the key is checked first: a record keyed by another run is about its key, whatever its partition
    "key of another run": ("RUN_KEY_MISMATCH", lambda: (enc_sub(run_id=AWAY_RUN), HOME_RUN.encode())),
    "no key": ("RUN_KEY_MISMATCH", lambda: (enc_sub(run_id=AWAY_RUN), None)),
    # the partition is checked before the producer's signature and every later rule
    "unsigned": (
        "WRONG_PARTITION",
        lambda: (codec.encode(codec.ACTIVITY_SUBMISSION_V2, sub(run_id=AWAY_RUN)), AWAY_RUN.encode()),
    ),
    "bad signature": (
        "WRONG_PARTITION",
        lambda: (
            codec.decode(enc_sub(run_id=AWAY_RUN)).record | {"producer_signature": bytes(64)},
            AWAY_RUN.encode(),
        ),
    ),
    "artifact hash": (
        "WRONG_PARTITION",
        lambda: (enc_sub(run_id=AWAY_RUN, artifact_hash=sha256_digest(b"other")), AWAY_RUN.encode()),
    ),
    "evidence": (
        "WRONG_PARTITION",
        lambda: (enc_sub(run_id=AWAY_RUN, evidence_set_hash=evidence_set_hash([])), AWAY_RUN.encode()),
    ),
}


@pytest.mark.parametrize("name", sorted(ORDER))
def test_the_partition_check_follows_the_key_check(name: str) -> None:
    code, make = ORDER[name]
    value, key = make()
    if isinstance(value, dict):
        value = codec.encode(codec.ACTIVITY_SUBMISSION_V3, value)
    pair = checked_pair()
    assert _refusal(pair.feed(value, key=key))["code"] == code


def test_the_count_can_be_set_on_a_running_core_in_both_cores() -> None:
    pair = checked_pair(None)
    assert kinds(pair.feed(enc_sub(run_id=AWAY_RUN, stage_id="a"), key=AWAY_RUN.encode()))[0] == codec.JOURNAL_RECORD
    pair.py.set_submission_partitions(N)
    pair.native.set_submission_partitions(N)
    assert pair.py.config.submission_partitions == pair.native.config.submission_partitions == N
    assert _refusal(pair.feed(enc_sub(run_id=AWAY_RUN, stage_id="b"), key=AWAY_RUN.encode()))["code"] == "WRONG_PARTITION"


@pytest.mark.parametrize("bad", [0, -3])
def test_a_partition_count_below_one_is_refused_by_both_cores(bad: int) -> None:
    config = dataclasses.replace(make_config(), submission_partitions=bad)
    with pytest.raises(ValueError, match="submission_partitions must be None or at least 1"):
        SchedulerCore(config)
    with pytest.raises(ValueError, match="submission_partitions must be None or at least 1"):
        NativeSchedulerCore(
            dataclasses.replace(config, submission_partitions=None), PARTITION, self_check=False
        ).set_submission_partitions(bad)
    with pytest.raises(ValueError, match="submission_partitions must be None or at least 1"):
        SchedulerCore(make_config()).set_submission_partitions(bad)


RUN_IDS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:@+=-", min_size=1, max_size=40
).filter(is_valid_id)


@settings(max_examples=60, deadline=None)
@given(RUN_IDS, st.integers(min_value=1, max_value=12), st.integers(min_value=0, max_value=11))
def test_both_cores_refuse_exactly_the_records_off_their_partition(run_id: str, partitions: int, partition: int) -> None:
    pair = Pair(dataclasses.replace(make_config(), submission_partitions=partitions), partition=partition)
    outs = pair.feed(enc_sub(run_id=run_id), key=run_id.encode())  # the Pair compares both cores byte for byte
    record = codec.decode(outs[0].value).record
    if partition == partition_for(run_id.encode(), partitions):
        assert kinds(outs)[0] == codec.JOURNAL_RECORD
    else:
        assert (record["code"], record["declared"], record["recomputed"]) == (
            RefusalCode.WRONG_PARTITION.value,
            str(partition),
            str(partition_for(run_id.encode(), partitions)),
        )
    assert pair.native.fallbacks == 0


# ---------------------------------------------------------------------------
# the shell reads the count from the topic
# ---------------------------------------------------------------------------


def _shell(core: Any, monkeypatch: pytest.MonkeyPatch, count: int) -> SchedulerShell:
    asked: list[str] = []

    def fake_count(bootstrap: str, topic: str, timeout: float = 10.0) -> int:
        asked.append(topic)
        return count

    monkeypatch.setattr(shell_mod, "partition_count", fake_count)
    shell = SchedulerShell(bootstrap="127.0.0.1:9", topics=Topics("unit"), partition=0, core=core, progress=None)
    shell._check_partitioning()
    assert asked == ["unit.activity.submissions"]
    return shell


def test_the_shell_sets_the_count_of_the_input_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    core = SchedulerCore(make_config())
    _shell(core, monkeypatch, 6)
    assert core.config.submission_partitions == 6
    native = NativeSchedulerCore(make_config(), 0, self_check=False)
    _shell(native, monkeypatch, 6)
    assert native.config.submission_partitions == native.reference.config.submission_partitions == 6


def test_the_shell_refuses_a_core_configured_for_another_count(monkeypatch: pytest.MonkeyPatch) -> None:
    core = SchedulerCore(dataclasses.replace(make_config(), submission_partitions=4))
    with pytest.raises(
        SubmissionPartitionsMismatch, match=r"checks records against 4 partition\(s\), but unit.activity.submissions has 6"
    ):
        _shell(core, monkeypatch, 6)
    same = SchedulerCore(dataclasses.replace(make_config(), submission_partitions=6))
    _shell(same, monkeypatch, 6)
    assert same.config.submission_partitions == 6


# ---------------------------------------------------------------------------
# vectors
# ---------------------------------------------------------------------------


def test_the_partition_vectors_are_generated_and_hold() -> None:
    stored = json.loads(VECTORS.read_text())
    assert stored == json.loads(json.dumps(generate.partitions())), "make vectors: partitions.json is stale"
    assert stored["seed"] == "0x9747b28c"
    tails = set()
    for case in stored["cases"]:
        key = bytes.fromhex(case["key_hex"])
        assert key == case["key_utf8"].encode()
        assert case["murmur2"] == murmur2(key) == _java_murmur2(key)
        assert case["partitions"] == {str(n): partition_for(key, n) for n in (1, 2, 3, 4, 6, 12, 100)}
        tails.add(len(key) % 4)
    keys = [bytes.fromhex(c["key_hex"]) for c in stored["cases"]]
    assert b"" in keys, "the empty key"
    assert any(not k.isascii() for k in keys), "a non-ASCII key"
    assert {len(k) for k in keys} >= set(range(1, 10)), "keys of 1 to 9 bytes (every tail, one and two blocks)"
    assert any(c["murmur2"] < 0 for c in stored["cases"]), "a negative hash (the mask, not abs)"
