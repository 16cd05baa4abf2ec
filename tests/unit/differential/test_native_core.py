"""The native (Rust) scheduler core against the Python reference, byte for byte.

Every test feeds the same input records to ``bernstein.consumers.core.step.SchedulerCore``
and to ``bernstein.consumers.core.native.NativeSchedulerCore`` and requires identical
outputs (stream, key, value, headers, timestamp) and identical state. Covered:
every refusal rule, dead letters of every kind, hostile strings, seals, runs
closed, the records the native core hands to the reference (malformed bodies,
browser results, computer-use actions, unusual record shapes), batches,
resuming from a rebuilt state, a 10k-record stream, a hypothesis fuzz, the
golden vectors, the Python string semantics the port relies on, the purity of
the Rust sources and ``make_core``'s selection.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import sys
import unicodedata
from enum import StrEnum
from pathlib import Path
from typing import Any

import bernstein_native as bn  # built by `uv sync` (cargo): a missing build must fail these tests, not skip them
import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from hypothesis import given, settings
from hypothesis import strategies as st

from bernstein.consumers.core import native as native_mod
from bernstein.consumers.core import step as step_mod
from bernstein.consumers.core.model import (
    AuditKeyVersion,
    InputRecord,
    Lifetime,
    OutputRecord,
    SchedulerConfig,
    SchedulerState,
    SealKey,
    Stream,
)
from bernstein.consumers.core.native import (
    NativeSchedulerCore,
    NativeState,
    NativeUnavailable,
    StaleState,
    make_core,
    native_status,
)
from bernstein.consumers.core.rebuild import rebuild_state
from bernstein.consumers.core.step import SchedulerCore, _clip, initial_state
from bernstein.consumers.shell import SchedulerShell, _TxnCaller
from bernstein.schemas import canonical, codec
from bernstein.schemas.canonical import computer_use_genesis, evidence_set_hash, hmac_key_id, sha256_digest
from bernstein.schemas.records import MAX_INLINE_ARTIFACT_BYTES, MAX_OBSERVATIONS, MAX_OCCURRED_AT_MS, DeadLetterCode, is_valid_id
from bernstein.substrate.kafka import client_config
from bernstein.substrate.keys import Ed25519Signer
from tests.support import fuzz
from tests.support.cores import (
    AUDIT_KEY,
    BASE_TS,
    PARTITION,
    ROLES,
    SEED,
    SIGNER,
    TOPIC,
    TRUNCATED,
    UNIT,
    VALID,
    Pair,
    assert_same_outputs,
    browser_artifact,
    close_record,
    cu_action,
    enc,
    enc_close,
    enc_sub,
    encode_v3,
    kinds,
    make_config,
    mixed_inputs,
    observations,
    sub,
)
from tests.support.producers import encode_signed_close, producer_seed, producer_signer, signed_close, signed_submission
from tests.support.shells import SHELL_TOPICS, SHELL_TOPICS_BY_STREAM, RecordingProducer, batch_messages
from tests.vectors.ed25519_cases import sign_with_torsion

REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------------------
# the extension itself
# ---------------------------------------------------------------------------


def test_the_extension_is_built_for_this_tree() -> None:
    ok, reason = native_status()
    assert ok, reason
    fingerprints = {s.name: s.fingerprint for s in codec.default_codec().schemas}
    assert {name: fp for name, fp in bn.NATIVE_SCHEMAS} == {name: fingerprints[name] for name, _ in bn.NATIVE_SCHEMAS}


FORBIDDEN_RUST = re.compile(
    r"\bstd::(fs|net|time|env|process|thread|io)\b|\b(rand|rand_core|getrandom|OsRng|thread_rng|RandomState|SystemTime|Instant)\b"
    r"|\b(HashMap|HashSet|IndexMap|IndexSet)::(new|with_capacity)\b"
)


PARALLEL_RS_THREADS = re.compile(r"\bstd::thread::(scope|available_parallelism)\b")


BLOB_FILES_IO = re.compile(r"\bstd::(fs|io|os::unix::fs)\b")


def _allowed_thread_use(path: Path, line: str) -> bool:
    """The two exceptions: parallel.rs maps a pure function over a batch on several cores (results in input
    order), and blob_files.rs, the verifier's blob re-hash, reads files (never used by the step)."""
    code = line.split("//")[0]
    if path.name == "blob_files.rs":
        return bool(BLOB_FILES_IO.search(code)) and not FORBIDDEN_RUST.search(BLOB_FILES_IO.sub("", code))
    return (
        path.name == "parallel.rs"
        and bool(PARALLEL_RS_THREADS.search(code))
        and not FORBIDDEN_RUST.search(PARALLEL_RS_THREADS.sub("", code))
    )


def test_only_the_verifiers_fact_reader_uses_the_file_reader() -> None:
    sources = sorted((REPO / "native" / "src").rglob("*.rs"))
    users = {p.name for p in sources if "blob_files::" in p.read_text(encoding="utf-8")}
    assert users == {"verify_facts.rs"}
    assert not _allowed_thread_use(REPO / "native" / "src" / "blob_files.rs", "let t = std::time::Instant::now();")
    assert not _allowed_thread_use(REPO / "native" / "src" / "core.rs", "use std::io::Read;")


def test_threads_are_used_only_by_parallel_rs() -> None:
    sources = sorted((REPO / "native" / "src").rglob("*.rs"))
    users = {p.name for p in sources if "std::thread" in p.read_text(encoding="utf-8")}
    assert users == {"parallel.rs"}
    assert not _allowed_thread_use(REPO / "native" / "src" / "core.rs", "std::thread::scope(|s| {")
    assert not _allowed_thread_use(REPO / "native" / "src" / "parallel.rs", "std::thread::sleep(d)")


def test_the_native_sources_have_no_io_clock_or_randomness() -> None:
    sources = sorted((REPO / "native" / "src").rglob("*.rs"))
    assert {p.name for p in sources} >= {"lib.rs", "core.rs", "avro.rs", "hashing.rs", "text.rs", "schemas.rs"}
    problems = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FORBIDDEN_RUST.search(line.split("//")[0]) and not _allowed_thread_use(path, line)
    ]
    assert problems == []
    cargo = (REPO / "native" / "Cargo.toml").read_text(encoding="utf-8")
    assert not re.search(r"^\s*(rand|getrandom)\b", cargo, re.MULTILINE)
    assert (REPO / "native" / "Cargo.lock").is_file()


@pytest.mark.parametrize(
    "line", ["use std::fs::File;", "let t = std::time::Instant::now();", "use rand::Rng;", "let m = HashMap::new();"]
)
def test_the_rust_scan_catches_what_it_forbids(line: str) -> None:
    assert FORBIDDEN_RUST.search(line)


def test_python_isspace_is_reproduced_for_every_code_point() -> None:
    assert unicodedata.unidata_version  # the interpreter's database decides; the port must match it
    assert bn.py_isspace_chars() == [i for i in range(sys.maxunicode + 1) if chr(i).isspace()]


def test_repr_of_ascii_strings_is_pythons() -> None:
    for i in range(128):
        for s in (chr(i), f"a{chr(i)}b", f"'{chr(i)}\"", f"'{chr(i)}"):
            assert bn.repr_ascii(s) == repr(s), s
    assert bn.repr_ascii("caf\u00e9") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.integers(3, 30))
def test_string_helpers_match_python(text: str, limit: int) -> None:
    assert bn.clip_text(text, limit) == _clip(text, limit)
    assert bn.is_valid_id(text) == is_valid_id(text)
    assert bn.is_digest(text) == canonical.is_digest(text)
    if text.isascii():
        assert bn.repr_ascii(text) == repr(text)


@pytest.mark.parametrize(
    "text", ["a" * 128, "a" * 129, "_x", ".x", "-x", "x.y:z@w+v=u-t", "r\u00fcn", "x\n", "sha256:" + "a" * 64]
)
def test_id_and_digest_predicates_on_edges(text: str) -> None:
    assert bn.is_valid_id(text) == is_valid_id(text)
    assert bn.is_digest(text) == canonical.is_digest(text)


def test_golden_vectors() -> None:
    vectors = REPO / "schemas" / "vectors"
    chain = json.loads((vectors / "chain.json").read_text(encoding="utf-8"))
    journal = chain["journal"]
    assert bn.journal_genesis(journal["run_id"]) == journal["genesis"]
    assert bn.journal_entry_hash(bytes.fromhex(journal["entry_payload_hex"])) == journal["entry_hash"]
    seal = chain["seal"]
    seed = bytes.fromhex(seal["ed25519_seed_hex"])
    assert bn.ed25519_public_key(seed).hex() == seal["public_key_hex"]
    payload = bytes.fromhex(seal["seal_payload_hex"])
    assert bn.pae("bernstein/run-seal/v1", payload).hex() == seal["signing_input_hex"]
    assert bn.ed25519_sign(seed, bytes.fromhex(seal["signing_input_hex"])).hex() == seal["signature_hex"]
    audit = chain["audit"]
    key = bytes.fromhex(audit["hmac_key_hex"])
    assert bn.audit_genesis(key, 0) == audit["genesis_partition_0"]
    assert bn.audit_mac(key, bytes.fromhex(audit["entry_payload_hex"])) == audit["mac"]
    for case in chain["pae"]:
        assert bn.pae(case["type"], bytes.fromhex(case["body_hex"])).hex() == case["pae_hex"]
    digests = json.loads((vectors / "digests.json").read_text(encoding="utf-8"))
    for case in digests["content_hash"]:
        assert bn.sha256_digest(bytes.fromhex(case["bytes_hex"])) == case["digest"]
    for case in digests["evidence_set_hash"]:
        assert bn.evidence_set_hash(case["members"]) == case["digest"]


def test_seal_signatures_equal_pythons_for_the_same_seed() -> None:
    pair = Pair(make_config(seal_every=1))
    outs = pair.feed(enc_sub())
    seal = codec.decode(outs[2].value).record
    assert SIGNER.sign(canonical.seal_signing_input(seal["payload"])) == seal["signature"]
    assert seal["key_id"] == SIGNER.key_id


# ---------------------------------------------------------------------------
# refusals, acceptance, seals
# ---------------------------------------------------------------------------

BIG = b"x" * (MAX_INLINE_ARTIFACT_BYTES + 1)
MANY = [{"kind": "page", "ref": f"r{i}", "content_hash": sha256_digest(b"%d" % i)} for i in range(MAX_OBSERVATIONS + 1)]
OTHER_EVIDENCE = evidence_set_hash([sha256_digest(b"something else")])

REFUSALS: dict[str, dict[str, Any]] = {
    "invalid-run-id": {"run_id": "-run"},
    "empty-run-id": {"run_id": ""},
    "run-id-too-long": {"run_id": "r" * 129},
    "run-id-non-ascii": {"run_id": "r\u00fcn-1"},
    "huge-run-id": {"run_id": "\u00e9" * 5000},
    "invalid-stage-id": {"stage_id": "stage 1"},
    "invalid-role": {"role": "scout/../x"},
    "unknown-kind": {"kind": "poetry"},
    "unknown-kind-quotes": {"kind": "it's"},
    "unknown-kind-both-quotes": {"kind": 'it\'s "x" \\ \t\x01\x7f'},
    "unknown-kind-non-ascii": {"kind": "po\u00e9sie \u2603 \U0001f600 \u200b\u0301"},
    "unknown-kind-huge": {"kind": "\u00e9\u4e2d" * 3000},
    "unknown-kind-empty": {"kind": ""},
    "unknown-role": {"role": "ghost"},
    "kind-not-allowed": {"role": "scout", "kind": "coding"},
    "unknown-terminal-state": {"terminal_state": "exploded"},
    "terminal-state-wrong-case": {"terminal_state": "Completed"},
    "terminal-state-non-ascii": {"terminal_state": "fertig \u2713\n" * 20},
    "empty-reason-code": {"reason_code": ""},
    "blank-reason-code": {"reason_code": " \t "},
    "unicode-blank-reason-code": {"reason_code": "\u3000\x1c\x85\u2029"},
    "reason-code-control-char": {"reason_code": "ok\n"},
    "reason-code-del": {"reason_code": "ok\x7f"},
    "reason-code-too-long": {"reason_code": "r" * 129},
    "reason-code-too-long-non-ascii": {"reason_code": "\u00e9" * 129},
    "artifact-too-large": {"artifact": BIG, "artifact_hash": sha256_digest(BIG)},
    "artifact-hash-malformed": {"artifact_hash": "sha256:" + "AB" * 32},
    "artifact-hash-not-sha256": {"artifact_hash": "md5:" + "0" * 32},
    "artifact-hash-huge": {"artifact_hash": "\u00fc" * 1000},
    "artifact-hash-mismatch": {"artifact_hash": sha256_digest(b"tampered")},
    "too-many-observations": {"observations": MANY, "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in MANY)},
    "observation-digest-malformed": {
        "observations": [*observations([b"a"]), {"kind": "page", "ref": "r", "content_hash": "sha256:xyz"}]
    },
    "observation-kind-empty": {"observations": [{"kind": "", "ref": "r", "content_hash": sha256_digest(b"a")}]},
    "observation-kind-blank-unicode": {"observations": [{"kind": "\u2003", "ref": "r", "content_hash": sha256_digest(b"a")}]},
    "observation-kind-65": {"observations": [{"kind": "\u00e9" * 65, "ref": "r", "content_hash": sha256_digest(b"a")}]},
    "observation-ref-control": {"observations": [{"kind": "page", "ref": "r\x1b[2J", "content_hash": sha256_digest(b"a")}]},
    "observation-kind-del": {"observations": [{"kind": "page\x7f", "ref": "r", "content_hash": sha256_digest(b"a")}]},
    "observation-ref-4097": {"observations": [{"kind": "page", "ref": "\u00e9" * 4097, "content_hash": sha256_digest(b"a")}]},
    "evidence-set-hash-malformed": {"evidence_set_hash": "sha256:" + "0" * 63},
    "evidence-set-hash-mismatch": {"evidence_set_hash": OTHER_EVIDENCE},
    "evidence-of-dropped-observation": {"observations": observations([b"page one"])},
    "several-rules-first-wins": {"kind": "poetry", "terminal_state": "exploded", "reason_code": "", "artifact": b"changed"},
    # bounded labels, time and the key: each is refused before the kind
    "submission-id-empty": {"submission_id": ""},
    "submission-id-257": {"submission_id": "s" * 257},
    "submission-id-control": {"submission_id": "sub\x00id"},
    "submission-id-del": {"submission_id": "sub\x7f"},
    "submission-id-huge-non-ascii": {"submission_id": "\u4e2d\U0001f600" * 50_000},
    "producer-id-empty": {"producer": {"id": "", "sdk": "sdk"}},
    "producer-id-newline": {"producer": {"id": "worker\n", "sdk": "sdk"}},
    "producer-id-257-non-ascii": {"producer": {"id": "\u00f6" * 257, "sdk": "sdk"}},
    "producer-sdk-empty": {"producer": {"id": "worker", "sdk": ""}},
    "producer-sdk-huge": {"producer": {"id": "worker", "sdk": "v" * 100_000}},
    "occurred-at-negative": {"occurred_at_ms": -1},
    "occurred-at-min-long": {"occurred_at_ms": -(2**63)},
    "occurred-at-max-long": {"occurred_at_ms": 2**63 - 1},
    "occurred-at-after-9999": {"occurred_at_ms": MAX_OCCURRED_AT_MS + 1},
    "labels-before-kind": {"submission_id": "", "kind": "poetry", "occurred_at_ms": -5},
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_each_refusal_is_byte_identical(name: str) -> None:
    pair = Pair()
    pair.feed(enc_sub(stage_id="accepted-0", pages=[b"first"]))
    record = {**sub(stage_id="stage-9"), **REFUSALS[name]}
    outs = pair.feed(enc(record), key=record["run_id"].encode())
    assert kinds(outs) == [codec.REFUSAL_V2, codec.AUDIT_RECORD_V2]
    assert codec.decode(outs[0].value).record["code"] != "RUN_KEY_MISMATCH"


OUTSIDER = Ed25519Signer.from_seed(bytes(range(7, 39)))
HOSTILE_REF = 'q"uote \\ back \x01\x08\t\n\x0c\r\x1f \x7f \u2028 \u00e9 \U0001f600 </script>'
"""A ref every JSON escape rule applies to: the signature only verifies when both cores write the same statement."""


def _unsignable(record: dict[str, Any]) -> bytes:
    obs = [{**o, "size": 2**53} for o in record["observations"]]
    key_id = producer_signer("unit@test").key_id
    return codec.encode(
        codec.ACTIVITY_SUBMISSION_V3,
        {**record, "observations": obs, "producer_key_id": key_id, "producer_signature": b"\x02" * 200},
    )


PRODUCER_REFUSALS: dict[str, tuple[str, Any]] = {
    "unsigned-v2": ("SUBMISSION_UNSIGNED", lambda r: codec.encode(codec.ACTIVITY_SUBMISSION_V2, r)),
    "unsigned-v1": (
        "SUBMISSION_UNSIGNED",
        lambda r: codec.encode(codec.ACTIVITY_SUBMISSION, {**r, "observations": [], "evidence_set_hash": evidence_set_hash([])}),
    ),
    "key-unknown": ("PRODUCER_KEY_UNKNOWN", lambda r: enc_with(r, OUTSIDER)),
    "key-id-hostile": ("PRODUCER_KEY_UNKNOWN", lambda r: encode_v3(r, producer_key_id="k\u00e9y \n" * 100)),
    "mismatch": ("PRODUCER_MISMATCH", lambda r: enc_with({**r, "producer": {"id": "coder@test", "sdk": "x"}}, UNIT)),
    "mismatch-non-ascii": (
        "PRODUCER_MISMATCH",
        lambda r: enc_with({**r, "producer": {"id": "w\u00f6rker'\"", "sdk": "x"}}, producer_signer("\u4e2d" * 256)),
    ),
    "retired": ("PRODUCER_KEY_NOT_VALID", lambda r: encode_v3({**r, "producer": {"id": "retired@test", "sdk": "x"}})),
    "not-yet-valid": ("PRODUCER_KEY_NOT_VALID", lambda r: encode_v3({**r, "producer": {"id": "future@test", "sdk": "x"}})),
    "signature-zero": ("SUBMISSION_SIGNATURE_INVALID", lambda r: encode_v3(r, producer_signature=bytes(64))),
    "signature-short": ("SUBMISSION_SIGNATURE_INVALID", lambda r: encode_v3(r, producer_signature=b"\x01" * 63)),
    "signature-empty": ("SUBMISSION_SIGNATURE_INVALID", lambda r: encode_v3(r, producer_signature=b"")),
    "signature-huge": ("SUBMISSION_SIGNATURE_INVALID", lambda r: encode_v3(r, producer_signature=b"\xff" * 5000)),
    "signature-of-another-stage": (
        "SUBMISSION_SIGNATURE_INVALID",
        lambda r: encode_v3(r, producer_signature=signed_submission({**r, "stage_id": "other"})["producer_signature"]),
    ),
    "signature-over-other-sizes": (
        "SUBMISSION_SIGNATURE_INVALID",
        lambda r: encode_v3(
            r,
            observations=[{**o, "size": o["size"] + 1} for o in r["observations"]],
        ),
    ),
    "signature-by-another-registered-key": (
        "SUBMISSION_SIGNATURE_INVALID",
        lambda r: encode_v3(r, producer_signature=signed_submission(r, producer_signer("coder@test"))["producer_signature"]),
    ),
    "statement-not-canonical": ("SUBMISSION_SIGNATURE_INVALID", _unsignable),
    "role-not-granted": ("PRODUCER_ROLE_NOT_ALLOWED", lambda r: encode_v3({**r, "producer": {"id": "scout@test", "sdk": "x"}})),
    "role-not-granted-non-ascii": (
        "PRODUCER_ROLE_NOT_ALLOWED",
        lambda r: encode_v3({**r, "producer": {"id": "sc\u00f6ut \u2603", "sdk": "x"}}),
    ),
    "hostile-ref-verifies-then-refused": (
        "INVALID_OBSERVATION",
        lambda r: encode_v3({**r, "observations": [{**r["observations"][0], "ref": HOSTILE_REF}, *r["observations"][1:]]}),
    ),
}


def enc_with(record: dict[str, Any], signer: Ed25519Signer) -> bytes:
    return codec.encode(codec.ACTIVITY_SUBMISSION_V3, signed_submission(record, signer))


@pytest.mark.parametrize("name", sorted(PRODUCER_REFUSALS))
def test_each_producer_refusal_is_byte_identical(name: str) -> None:
    code, encode = PRODUCER_REFUSALS[name]
    pair = Pair()
    pair.feed(enc_sub(stage_id="accepted-0", pages=[b"first"]))
    outs = pair.feed(encode(sub(stage_id="stage-9")))
    assert kinds(outs) == [codec.REFUSAL_V2, codec.AUDIT_RECORD_V2]
    assert codec.decode(outs[0].value).record["code"] == code
    assert pair.native.fallbacks == 0  # every producer check is native (no fallback), byte for byte


CLOSES: dict[str, tuple[str, Any]] = {
    "unsigned-v1": ("SUBMISSION_UNSIGNED", lambda r: codec.encode(codec.RUN_CLOSE, r)),
    "key-unknown": ("PRODUCER_KEY_UNKNOWN", lambda r: encode_signed_close(r, OUTSIDER)),
    "mismatch": ("PRODUCER_MISMATCH", lambda r: encode_signed_close({**r, "producer": {"id": "p@test", "sdk": "x"}}, UNIT)),
    "retired": ("PRODUCER_KEY_NOT_VALID", lambda r: encode_signed_close({**r, "producer": {"id": "retired@test", "sdk": "x"}})),
    "signature": (
        "SUBMISSION_SIGNATURE_INVALID",
        lambda r: codec.encode(codec.RUN_CLOSE_V2, {**signed_close(r), "occurred_at_ms": r["occurred_at_ms"] + 1}),
    ),
    "any-registered-producer-closes": ("", lambda r: encode_signed_close({**r, "producer": {"id": "scout@test", "sdk": "x"}})),
}


@pytest.mark.parametrize("name", sorted(CLOSES))
def test_run_closes_are_checked_alike(name: str) -> None:
    code, encode = CLOSES[name]
    pair = Pair()
    pair.feed(enc_sub(stage_id="s0", pages=[b"zero"]))
    outs = pair.feed(encode(close_record()))
    if code:
        assert kinds(outs) == [codec.REFUSAL_V2, codec.AUDIT_RECORD_V2]
        assert codec.decode(outs[0].value).record["code"] == code
        assert not pair.py_state.runs["run-1"].closed
    else:
        assert kinds(outs) == [codec.SEAL_RECORD, codec.AUDIT_RECORD_V2, codec.CHECKPOINT_RECORD]
        seal = codec.decode(codec.decode(outs[0].value).record["payload"])
        assert seal.schema.name == codec.RUN_SEAL_V2
        assert seal.record["closed_by"]["producer_id"] == "scout@test"
    assert pair.native.fallbacks == 0


def test_signed_statements_with_every_json_escape_verify_alike() -> None:
    """Both cores write the statement's canonical JSON byte for byte: a hostile ref, label and reason verify natively."""
    pair = Pair()
    record = sub(
        stage_id="hostile",
        submission_id='s\u00fcb "\\ \U0001f600',
        reason_code='ok \u2028 \u00e9 " \\',
        producer={"id": "w\u00f6rker", "sdk": "x"},
    )
    record["observations"][0]["ref"] = HOSTILE_REF.replace("\x01", "").replace("\x08", "").replace("\t", "")
    record["observations"][0]["ref"] = "".join(ch for ch in HOSTILE_REF if ch >= " " and ch != "\x7f")
    outs = pair.feed(encode_v3(record))
    assert kinds(outs) == [codec.JOURNAL_RECORD, codec.AUDIT_RECORD_V2]
    entry = codec.decode(codec.decode(outs[0].value).record["payload"])
    assert entry.schema.name == codec.JOURNAL_ENTRY_V3
    assert pair.native.fallbacks == 0


def _ring_config() -> SchedulerConfig:
    """Seal and audit keys rotated at ROTATION_TS (input offset 3 of a Pair)."""
    old_seal, new_seal = Ed25519Signer.from_seed(bytes(range(1, 33))), Ed25519Signer.from_seed(bytes(range(2, 34)))
    old_audit, new_audit = b"old audit key" * 3, b"new audit key" * 3
    return dataclasses.replace(
        make_config(seal_every=2),
        seal_keys=(SealKey(old_seal, Lifetime(0, ROTATION_TS)), SealKey(new_seal, Lifetime(ROTATION_TS))),
        audit_keys=(
            AuditKeyVersion(old_audit, hmac_key_id(old_audit), Lifetime(0, ROTATION_TS)),
            AuditKeyVersion(new_audit, hmac_key_id(new_audit), Lifetime(ROTATION_TS)),
        ),
        signer=new_seal,
        audit_key=new_audit,
        audit_key_id=hmac_key_id(new_audit),
    )


ROTATION_TS = BASE_TS + 7 * 3


def test_key_rings_pick_the_same_keys_in_both_cores() -> None:
    config = _ring_config()
    pair = Pair(config)
    keys: list[tuple[int, str, str]] = []  # (input offset, stream, key id)
    for i in range(7):
        outs = pair.feed(enc_sub(stage_id=f"s{i}", pages=[b"%d" % i]) if i < 6 else enc_close())
        keys += [(i, o.stream.value, codec.decode(o.value).record["key_id"]) for o in outs if o.stream is not Stream.JOURNAL]
        keys += [(i, "seal", codec.decode(o.value).record["key_id"]) for o in outs if kinds([o]) == [codec.SEAL_RECORD]]
    old_audit, new_audit = (k.key_id for k in config.audit_keys)
    old_seal, new_seal = (k.signer.key_id for k in config.seal_keys)
    # inputs 0-2 are stamped before the rotation, 3-6 after it
    assert keys == [
        (0, "audit", old_audit),
        (1, "audit", old_audit),
        (1, "audit", old_audit),
        (1, "seal", old_seal),
        (2, "audit", old_audit),
        (3, "audit", new_audit),
        (3, "audit", new_audit),
        (3, "seal", new_seal),
        (4, "audit", new_audit),
        (5, "audit", new_audit),
        (5, "audit", new_audit),
        (5, "seal", new_seal),
        (6, "audit", new_audit),
        (6, "checkpoints", new_seal),
        (6, "seal", new_seal),
    ]
    assert pair.native.fallbacks == 0


def test_the_audit_genesis_follows_the_first_inputs_key_alike() -> None:
    config = _ring_config()
    late = Pair(config)
    late.feed(enc_sub(), offset=10)  # after the rotation: the genesis is the new key's
    first = codec.decode(codec.decode(late.outputs[1].value).record["payload"]).record
    assert first["prev_mac"] == canonical.audit_genesis(config.audit_keys[1].secret, PARTITION)
    early = Pair(config)
    early.feed(enc_sub(), offset=0)
    first = codec.decode(codec.decode(early.outputs[1].value).record["payload"]).record
    assert first["prev_mac"] == canonical.audit_genesis(config.audit_keys[0].secret, PARTITION)


ACCEPTED: dict[str, dict[str, Any]] = {
    "plain": {},
    "no-observations": {"pages": []},
    "duplicate-observations": {"pages": [b"a", b"b", b"a"]},
    "observation-kind-64-non-ascii": {
        "observations": [{"kind": "\u00e9" * 64, "ref": "\u4e2d" * 4096, "content_hash": sha256_digest(b"a"), "size": 1}],
        "evidence_set_hash": evidence_set_hash([sha256_digest(b"a")]),
    },
    "reason-code-128-non-ascii": {"reason_code": "\u00e9" * 128},
    "reason-code-zero-width": {"reason_code": "\u200b"},
    "non-ascii-everywhere": {"submission_id": "s\u00fcb \U0001f600", "producer": {"id": "w\u00f6rker", "sdk": "\u2603"}},
    "artifact-at-limit": {
        "artifact": b"y" * MAX_INLINE_ARTIFACT_BYTES,
        "artifact_hash": sha256_digest(b"y" * MAX_INLINE_ARTIFACT_BYTES),
    },
    "occurred-at-zero": {"occurred_at_ms": 0},
    "occurred-at-9999": {"occurred_at_ms": MAX_OCCURRED_AT_MS},
    "labels-at-256": {"submission_id": "\u00e9" * 256, "producer": {"id": "\u4e2d" * 256, "sdk": "s" * 256}},
    "every-kind-coding": {"role": "developer", "kind": "coding"},
    # research, data and ops results that pass the generic checks go to the reference for their
    # document rules (Fallback): tests/unit/test_scheduler_modality_rules.py
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_submissions_are_byte_identical(name: str) -> None:
    pair = Pair()
    outs = pair.feed(enc({**sub(), **ACCEPTED[name]}) if "pages" not in ACCEPTED[name] else enc_sub(**ACCEPTED[name]))
    assert kinds(outs) == [codec.JOURNAL_RECORD, codec.AUDIT_RECORD_V2]
    assert pair.native.fallbacks == 0


def test_run_memory_rules_duplicate_redundant_closed() -> None:
    pair = Pair()
    pair.feed(enc_sub(stage_id="fetch-1", pages=[b"a", b"b"]))
    pair.feed(enc_sub(stage_id="fetch-2", pages=[b"c"]))
    assert (
        kinds(pair.feed(enc_sub(stage_id="fetch-3", pages=[b"b", b"a", b"b"], artifact=b"other")))[0] == codec.REFUSAL_V2
    )  # redundant
    assert (
        kinds(pair.feed(enc_sub(stage_id="fetch-1", pages=[b"new"], submission_id="again")))[0] == codec.REFUSAL_V2
    )  # duplicate
    pair.feed(enc_sub(stage_id="plan-1", pages=[]))
    pair.feed(enc_sub(stage_id="plan-2", pages=[]))  # empty evidence is never redundant
    pair.feed(enc_sub(run_id="run-2", stage_id="fetch-9", pages=[b"a", b"b"]), key=b"run-2")  # per run
    assert kinds(pair.feed(enc_close()))[0] == codec.SEAL_RECORD
    assert kinds(pair.feed(enc_sub(stage_id="late", pages=[b"late"])))[0] == codec.REFUSAL_V2  # run closed
    assert kinds(pair.feed(enc_close()))[0] == codec.REFUSAL_V2  # second close
    pair.feed(enc_close("bad id"), key=b"k")
    pair.feed(enc_close("\u00e9" * 300), key=None)
    pair.feed(enc_close("never-started"), key=b"never-started")
    assert pair.native.fallbacks == 0


KEYS: dict[str, bytes | None] = {
    "none": None,
    "empty": b"",
    "other-run": b"run-2",
    "case": b"RUN-1",
    "trailing-space": b"run-1 ",
    "nul": b"run-1\x00",
    "not-utf8": b"\xff\xfe",
    "kilobyte": b"k" * 1025,
    "megabyte": b"k" * 1_100_000,
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_a_key_that_is_not_the_run_id_is_refused_alike(name: str) -> None:
    pair = Pair()
    pair.feed(enc_sub(stage_id="s0", pages=[b"zero"]))
    for value in (enc_sub(stage_id="s1", pages=[b"one"]), enc_close(), enc_close("bad id")):
        outs = pair.feed(value, key=KEYS[name])
        assert kinds(outs) == [codec.REFUSAL_V2, codec.AUDIT_RECORD_V2]
        assert len(outs[0].key) <= 128
    assert pair.native.fallbacks == 0


def test_repeated_submission_ids_are_refused_alike() -> None:
    pair = Pair()
    pair.feed(enc_sub(stage_id="s0", pages=[b"zero"], submission_id="retry-me"))
    pair.feed(enc_sub(stage_id="s0", pages=[b"zero"], submission_id="retry-me"))  # the retried publish itself
    pair.feed(enc_sub(stage_id="s1", pages=[b"one"], submission_id="retry-me"))  # another stage, same id
    pair.feed(enc_sub(stage_id="s2", pages=[b"two"], submission_id="it's \u00e9 \U0001f600"))
    pair.feed(enc_sub(stage_id="s3", pages=[b"three"], submission_id="it's \u00e9 \U0001f600"))  # repr needs the host
    pair.feed(enc_sub(run_id="run-2", stage_id="s0", pages=[b"zero"], submission_id="retry-me"), key=b"run-2")  # per run
    pair.feed(enc_sub(stage_id="s4", pages=[b"four"], submission_id="close-run-1"))  # a close's id is not remembered
    refusals = [codec.decode(o.value).record for o in pair.outputs if o.stream is Stream.REFUSALS]
    assert [(r["code"], r["stage_id"], r["earlier_stage_id"]) for r in refusals] == [
        ("DUPLICATE_SUBMISSION", "s0", "s0"),
        ("DUPLICATE_SUBMISSION", "s1", "s0"),
        ("DUPLICATE_SUBMISSION", "s3", "s2"),
    ]
    assert pair.py_state.runs["run-1"].submissions == {"retry-me": "s0", "it's \u00e9 \U0001f600": "s2", "close-run-1": "s4"}
    assert pair.native.fallbacks == 0


DL_KEYS: dict[str, bytes | None] = {
    "none": None,
    "kept-1024": b"k" * 1024,
    "prefix-1025": b"k" * 1025,
    "megabyte": bytes(range(256)) * 4400,
}


@pytest.mark.parametrize("name", sorted(DL_KEYS))
def test_dead_letters_bound_the_key_alike(name: str) -> None:
    pair = Pair()
    for value in (b"junk", b"X" * (600 * 1024), VALID[:-3]):
        outs = pair.feed(value, key=DL_KEYS[name])
        dead = codec.decode(outs[0].value).record
        key = DL_KEYS[name]
        assert dead["key"] == (None if key is None else key[:1024])
        assert (dead["key_sha256"], dead["key_size"]) == (("", 0) if key is None else (sha256_digest(key), len(key)))
        assert outs[0].key == (key if key is not None and len(key) <= 1024 else b"")


def test_outputs_over_the_limit_are_dead_lettered_alike() -> None:
    limit = 64 * 1024
    pair = Pair(dataclasses.replace(make_config(), max_output_bytes=limit))
    many: list[dict[str, Any]] = [
        {"kind": "page", "ref": "r" * 4000, "content_hash": sha256_digest(b"%d" % i), "size": len(b"%d" % i)} for i in range(20)
    ]
    big = sub(stage_id="big", observations=many, evidence_set_hash=evidence_set_hash(o["content_hash"] for o in many))
    outs = pair.feed(enc(big))
    dead = codec.decode(outs[0].value).record
    assert (dead["code"], dead["raw"]) == ("OUTPUT_TOO_LARGE", b"")  # the input itself is over the limit too
    assert all(len(o.key) + len(o.value) + sum(len(n) + len(v) for n, v in o.headers) <= limit for o in pair.outputs)
    fits = many[:14]
    pair.feed(enc(sub(stage_id="fits", observations=fits, evidence_set_hash=evidence_set_hash(o["content_hash"] for o in fits))))
    outs = pair.feed(b"J" * (100 * 1024))  # a dead letter keeps its raw value only while it fits
    assert codec.decode(outs[0].value).record["raw"] == b""
    outs = pair.feed(b"J" * (40 * 1024))
    assert codec.decode(outs[0].value).record["raw"] == b"J" * (40 * 1024)
    pair.feed(enc_sub(stage_id="after", pages=[b"after"]))
    assert pair.py_state.runs["run-1"].entry_count == 2
    assert pair.native.fallbacks == 0


def test_reject_dead_letters_one_record_alike() -> None:
    pair = Pair()
    pair.feed(enc_sub(stage_id="s0", pages=[b"zero"]))
    record = pair.record(enc_sub(stage_id="s1", pages=[b"one"]), key=b"x" * 5000)
    pair.py_state, expected = pair.py.reject(
        pair.py_state, record, DeadLetterCode.PRODUCE_REJECTED, "Broker: Message size too large"
    )
    pair.state, got = pair.native.reject(pair.state, record, DeadLetterCode.PRODUCE_REJECTED, "Broker: Message size too large")
    assert_same_outputs(got, expected)
    pair.check_state()
    dead = codec.decode(got[0].value).record
    assert (dead["code"], dead["detail"], dead["key_size"]) == ("PRODUCE_REJECTED", "Broker: Message size too large", 5000)
    pair.feed(enc_sub(stage_id="s1", pages=[b"one"]))  # the rejected record left no trace in the run
    assert pair.py_state.runs["run-1"].entry_count == 2


@pytest.mark.parametrize("seal_every", [1, 2, 3, 1000])
def test_periodic_and_final_seals(seal_every: int) -> None:
    pair = Pair(make_config(seal_every=seal_every))
    for i in range(9):
        run_id = ("run-a", "run-b")[i % 2]
        pair.feed(enc_sub(run_id=run_id, stage_id=f"s{i}", pages=[f"p{i}".encode()]), key=run_id.encode())
    pair.feed(enc_close("run-a"), key=b"run-a")
    pair.feed(enc_sub(run_id="run-b", stage_id="s-dup", pages=[b"p1"]), key=b"run-b")
    pair.feed(enc_close("run-b"), key=b"run-b")
    pair.feed(enc_close("run-c"), key=b"run-c")


# ---------------------------------------------------------------------------
# dead letters
# ---------------------------------------------------------------------------

HUGE_JUNK = b"\x00" * (600 * 1024)
DEAD_LETTERS: dict[str, bytes | None] = {
    "tombstone": None,
    "empty": b"",
    "text": b"hello, not avro",
    "json": b'{"run_id": "run-1"}',
    "one-byte": b"\xc3",
    "short-header": codec.MAGIC + b"\x00\x01\x02",
    "unknown-fingerprint": codec.MAGIC + bytes.fromhex("0123456789abcdef") + VALID[codec.HEADER_SIZE :],
    "journal-record-on-input": codec.encode(codec.JOURNAL_RECORD, {"payload": b"x", "entry_hash": "h"}),
    "audit-record-on-input": codec.encode(codec.AUDIT_RECORD, {"payload": b"x", "key_id": "k", "mac": "m"}),
    "trailing-byte": VALID + b"\x00",
    "trailing-bytes": VALID + b"garbage",
    "close-trailing": enc_close() + b"\x01\x02",
    "huge-trailing": VALID + HUGE_JUNK,
    "huge-garbage": b"X" * (600 * 1024),
    "huge-unknown-fingerprint": codec.MAGIC + b"\xff" * 8 + HUGE_JUNK,
}


@pytest.mark.parametrize("name", sorted(DEAD_LETTERS))
def test_dead_letters_are_byte_identical_without_the_reference(name: str) -> None:
    pair = Pair()
    pair.feed(enc_sub(stage_id="s0", pages=[b"zero"]))
    outs = pair.feed(DEAD_LETTERS[name], key=b"some-key")
    assert kinds(outs) == [codec.DEAD_LETTER_V2, codec.AUDIT_RECORD_V2]
    outs = pair.feed(DEAD_LETTERS[name], key=None)
    assert pair.native.fallbacks == 0
    pair.feed(enc_sub(stage_id="s1", pages=[b"one"]))


@pytest.mark.parametrize("name", sorted(TRUNCATED))
def test_malformed_bodies_go_to_the_reference_and_match(name: str) -> None:
    pair = Pair()
    pair.feed(enc_sub(stage_id="s0", pages=[b"zero"]))
    pair.feed(TRUNCATED[name], key=b"some-key")
    assert pair.native.fallbacks == 1
    pair.feed(enc_sub(stage_id="s1", pages=[b"one"]))
    pair.feed(enc_sub(stage_id="s0", pages=[b"again"]))  # the run's memory survived the reference's step


def _submission_body(record: dict[str, Any], observations_bytes: bytes) -> bytes:
    s, b = codec._string, codec._bytes
    return b"".join(
        [
            *(s(record[name]) for name in ("submission_id", "run_id", "stage_id", "role")),
            s(record["producer"]["id"]),
            s(record["producer"]["sdk"]),
            s(record["kind"]),
            b(record["artifact"]),
            s(record["artifact_hash"]),
            s(record["evidence_set_hash"]),
            observations_bytes,
            s(record["terminal_state"]),
            s(record["reason_code"]),
            codec._long(record["occurred_at_ms"]),
            s(record["producer_key_id"]),
            b(record["producer_signature"]),
        ]
    )


def test_a_negative_block_count_is_left_to_the_reference() -> None:
    """Valid Avro our encoders never write (a block with a byte size): the reference decodes it."""
    record = signed_submission(sub(stage_id="blocked", pages=[b"a", b"b"]))
    header = codec.default_codec().schema(codec.ACTIVITY_SUBMISSION_V3).header
    items = b"".join(
        codec._string(o["kind"]) + codec._string(o["ref"]) + codec._string(o["content_hash"]) + codec._long(o["size"])
        for o in record["observations"]
    )
    assert header + _submission_body(record, codec._long(2) + items + b"\x00") == enc(record)
    value = header + _submission_body(record, codec._long(-2) + codec._long(len(items)) + items + b"\x00")
    assert codec.decode(value).record["observations"] == record["observations"]
    pair = Pair()
    outs = pair.feed(value)
    assert kinds(outs) == [codec.JOURNAL_RECORD, codec.AUDIT_RECORD_V2]
    assert pair.native.fallbacks == 1
    # two positive blocks are read natively
    split = codec._long(1) + items[: len(items) // 2] + codec._long(1) + items[len(items) // 2 :] + b"\x00"
    pair.feed(header + _submission_body(signed_submission({**record, "stage_id": "split"}), split))
    assert pair.native.fallbacks == 1


# ---------------------------------------------------------------------------
# roles, browser results and computer-use actions
# ---------------------------------------------------------------------------


class Kind(StrEnum):
    CODING = "coding"


@pytest.mark.parametrize(
    "roles",
    [
        {"developer": Kind.CODING, "scout": "research"},
        {"developer": None, "scout": "research"},
        {"developer": 7, "scout": "research"},
        {"developer": "c\u00f6ding \u2603" * 40, "scout": "research"},
        {"developer": "it's", "scout": "research"},
    ],
    ids=["str-enum", "none", "int", "non-ascii-long", "quote"],
)
def test_unusual_manifest_values(roles: dict[str, Any]) -> None:
    pair = Pair(make_config(roles=roles))
    pair.feed(enc_sub(role="developer", kind="coding", stage_id="a"))
    pair.feed(enc_sub(role="developer", kind="research", stage_id="b"))
    pair.feed(enc_sub(role="scout", kind="research", stage_id="c"))


def test_browser_results_go_to_the_reference_and_keep_sessions() -> None:
    pair = Pair()
    art = browser_artifact("run-1", "browser-0")
    pair.feed(enc_sub(role="navigator", kind="browser", stage_id="browser-0", artifact=art))  # accepted by the reference
    assert pair.native.fallbacks == 1
    assert pair.py_state.runs["run-1"].sessions["browser-0"].closed
    pair.feed(
        enc_sub(role="navigator", kind="browser", stage_id="browser-1", artifact=b"not json", pages=[b"other"])
    )  # refused by the reference
    pair.feed(
        enc_sub(role="navigator", kind="browser", stage_id="bad id", artifact=art)
    )  # refused natively (before the session check)
    assert pair.native.fallbacks == 2
    pair.feed(enc_sub(stage_id="s1", pages=[b"after"]))
    pair.feed(enc_close())


def test_computer_use_actions_go_through_the_reference() -> None:
    pair = Pair(make_config(seal_every=2))
    run = "run-cu"
    pair.feed(enc_sub(run_id=run, role="developer", kind="coding", stage_id="code-0"), key=run.encode())
    anchor = computer_use_genesis(run, "browser-0")
    actions = []
    for index in range(3):
        value, anchor = cu_action(run, "browser-0", index, anchor)
        actions.append(value)
        assert kinds(pair.feed(value, key=run.encode()))[0] == codec.JOURNAL_RECORD
    pair.feed(actions[0], key=run.encode())  # replayed: refused by the reference
    pair.feed(cu_action(run, "bad id", 0, anchor)[0], key=run.encode())
    art = browser_artifact(run, "browser-0", anchor, 3)
    assert kinds(
        pair.feed(
            enc_sub(run_id=run, role="navigator", kind="browser", stage_id="browser-0", artifact=art, pages=[b"shots"]),
            key=run.encode(),
        )
    )[0] == (codec.JOURNAL_RECORD)
    assert pair.py_state.runs[run].sessions["browser-0"].closed
    pair.feed(cu_action(run, "browser-0", 3, anchor)[0], key=run.encode())  # after the session ended
    pair.feed(enc_sub(run_id=run, role="developer", kind="coding", stage_id="code-1", pages=[b"x"]), key=run.encode())
    pair.feed(enc_close(run), key=run.encode())
    pair.feed(cu_action(run, "browser-1", 0, computer_use_genesis(run, "browser-1"))[0], key=run.encode())  # run closed
    assert pair.py_state.runs[run].entry_count == 6
    assert pair.native.fallbacks == 8


# ---------------------------------------------------------------------------
# record shapes
# ---------------------------------------------------------------------------


def test_unusual_but_valid_record_fields() -> None:
    pair = Pair()
    pair.feed(enc_sub(stage_id="a"), topic="t\u00f6pic \U0001f600")
    pair.feed(enc_sub(stage_id="b"), key=None, offset=2**63 - 1, timestamp_ms=-(2**63))
    pair.feed(b"junk", key=b"", offset=-5, timestamp_ms=2**63 - 1)
    pair.feed(enc_sub(stage_id="c"), partition=-(2**31))
    pair.feed(enc_sub(stage_id="d"), partition=2**31 - 1)
    assert pair.native.fallbacks == 0


def test_record_shapes_the_extension_does_not_read_go_to_the_reference() -> None:
    pair = Pair()
    pair.feed(bytearray(enc_sub(stage_id="a")))  # type: ignore[arg-type]
    pair.feed(enc_sub(stage_id="b"), partition=True)
    pair.feed(enc_sub(stage_id="c"), key=bytearray(b"k"))  # type: ignore[arg-type]
    assert pair.native.fallbacks == 3
    pair.feed(enc_sub(stage_id="d"))


def test_an_input_partition_beyond_an_avro_int_raises_like_the_reference() -> None:
    pair = Pair()
    pair.feed(enc_sub(stage_id="a"))
    record = pair.record(enc_sub(stage_id="b"), partition=2**31)
    with pytest.raises(Exception) as expected:
        pair.py.step(pair.py_state, record)
    with pytest.raises(type(expected.value)):
        pair.native.step(pair.state, record)
    with pytest.raises(StaleState):  # after an exception only a reload is safe
        pair.native.step(pair.state, pair.record(enc_sub(stage_id="c")))


# ---------------------------------------------------------------------------
# handles, batches, resuming
# ---------------------------------------------------------------------------


def python_run(
    inputs: list[tuple[bytes | None, bytes | None]], config: SchedulerConfig
) -> tuple[SchedulerState, list[OutputRecord]]:
    core = SchedulerCore(config)
    state = initial_state(config, PARTITION)
    outputs: list[OutputRecord] = []
    for offset, (key, value) in enumerate(inputs):
        state, outs = core.step(state, InputRecord(TOPIC, PARTITION, offset, BASE_TS + offset, key, value))
        outputs.extend(outs)
    return state, outputs


@pytest.mark.parametrize("batch", [1, 3, 7, 500])
def test_step_many_equals_the_reference(batch: int) -> None:
    config = make_config(seal_every=4)
    inputs = mixed_inputs()
    expected_state, expected = python_run(inputs, config)
    records = [InputRecord(TOPIC, PARTITION, offset, BASE_TS + offset, key, value) for offset, (key, value) in enumerate(inputs)]
    core = NativeSchedulerCore(config, PARTITION, self_check=False)
    state: SchedulerState | NativeState = initial_state(config, PARTITION)
    got: list[OutputRecord] = []
    for start in range(0, len(records), batch):
        chunk: Any = records[start : start + batch]
        if batch == 3:  # tuples are accepted too
            chunk = [dataclasses.astuple(r) for r in chunk]
        state, outs = core.step_many(state, chunk)
        assert len(outs) == len(chunk)
        for o in outs:
            got.extend(o)
    assert_same_outputs(got, expected)
    assert core.to_scheduler_state() == expected_state
    assert core.fallbacks == 2


def test_batched_signature_checks_decide_as_the_reference() -> None:
    """Honest, edited and ZIP-215-only signatures (a signer's small-order R, which OpenSSL refuses), stepped in
    batches whose signatures are verified many to one equation ahead of the steps: the reference's outputs."""
    config = make_config()
    seed = producer_seed("unit@test")
    inputs: list[tuple[bytes | None, bytes | None]] = []
    for i in range(40):
        record = signed_submission(sub(run_id="run-z", stage_id=f"s{i}", pages=[f"p{i}".encode()]))
        if i % 5 == 1:
            fields = {k: v for k, v in record.items() if k not in ("producer_key_id", "producer_signature")}
            statement = canonical.submission_statement(fields, record["producer_key_id"])
            record["producer_signature"] = sign_with_torsion(seed, canonical.submission_signing_input(statement))
        elif i % 5 == 3 and i >= 20:  # the first 20 hold as one equation; a batch with these is checked one by one
            edited = bytearray(record["producer_signature"])
            edited[40] ^= 1
            record["producer_signature"] = bytes(edited)
        inputs.append((b"run-z", codec.encode(codec.ACTIVITY_SUBMISSION_V3, record)))
    _, expected = python_run(inputs, config)
    refused = [codec.decode(o.value).record for o in expected if o.stream is Stream.REFUSALS]
    assert [(r["code"], r["stage_id"]) for r in refused] == [("SUBMISSION_SIGNATURE_INVALID", f"s{i}") for i in range(23, 40, 5)]
    records = [InputRecord(TOPIC, PARTITION, offset, BASE_TS + offset, key, value) for offset, (key, value) in enumerate(inputs)]
    for batch in (1, 7, 40):
        core = NativeSchedulerCore(config, PARTITION, self_check=False)
        state: SchedulerState | NativeState = initial_state(config, PARTITION)
        got: list[OutputRecord] = []
        for start in range(0, len(records), batch):
            state, outs = core.step_many(state, records[start : start + batch])
            got.extend(o for out in outs for o in out)
        assert_same_outputs(got, expected)


def test_stale_handles_are_refused_and_a_scheduler_state_reloads() -> None:
    config = make_config()
    core = NativeSchedulerCore(config, PARTITION, self_check=False)
    first = core.initial_state()
    second, _ = core.step(first, InputRecord(TOPIC, PARTITION, 0, 1, b"run-1", enc_sub()))
    with pytest.raises(StaleState):
        core.step(first, InputRecord(TOPIC, PARTITION, 1, 2, b"run-1", enc_sub(stage_id="x")))
    other = NativeSchedulerCore(config, PARTITION, self_check=False).initial_state()
    with pytest.raises(StaleState):
        core.step(other, InputRecord(TOPIC, PARTITION, 1, 2, b"run-1", enc_sub(stage_id="x")))
    snapshot = second.to_scheduler_state()
    third, outs = core.step(second, InputRecord(TOPIC, PARTITION, 1, 2, b"run-1", enc_sub(stage_id="x")))
    # reloading the snapshot rewinds: the same record gives the same outputs again
    _, again = core.step(snapshot, InputRecord(TOPIC, PARTITION, 1, 2, b"run-1", enc_sub(stage_id="x")))
    assert again == outs
    with pytest.raises(StaleState):
        third.to_scheduler_state()
    with pytest.raises(TypeError):
        core.step(object(), InputRecord(TOPIC, PARTITION, 1, 2, b"run-1", None))  # type: ignore[arg-type]


def test_resuming_from_a_rebuilt_state_after_any_record() -> None:
    config = make_config(seal_every=4)
    inputs = mixed_inputs()
    _, whole = python_run(inputs, config)
    for cut in range(0, len(inputs) + 1, 3):
        _, before = python_run(inputs[:cut], config)
        journal = [o.value for o in before if o.stream is Stream.JOURNAL]
        audits = [o.value for o in before if o.stream is Stream.AUDIT]
        checkpoints = [o.value for o in before if o.stream is Stream.CHECKPOINTS]
        state = rebuild_state(
            config,
            PARTITION,
            journal,
            audits,
            checkpoint_values=checkpoints,
        )
        core = NativeSchedulerCore(config, PARTITION, self_check=False)
        resumed: list[OutputRecord] = []
        handle: SchedulerState | NativeState = state
        for offset in range(cut, len(inputs)):
            key, value = inputs[offset]
            handle, outs = core.step(handle, InputRecord(TOPIC, PARTITION, offset, BASE_TS + offset, key, value))
            resumed.extend(outs)
        assert_same_outputs(before + resumed, whole)


class _IteratingReference(SchedulerCore):
    """A reference that looks at every run first (which the lazy state view does not model)."""

    def step(self, state: SchedulerState, record: InputRecord) -> tuple[SchedulerState, list[OutputRecord]]:
        assert len(state.runs) >= 0
        return super().step(state, record)


class _CopyingReference(SchedulerCore):
    """A reference whose dispatch copies the runs dict (a failure inside step on the lazy view)."""

    def _dispatch(self, state: SchedulerState, record: InputRecord, emit: Any) -> None:
        state.runs.copy()
        super()._dispatch(state, record, emit)


@pytest.mark.parametrize("reference", [_IteratingReference, _CopyingReference])
def test_the_reference_is_rerun_on_a_full_state_when_the_lazy_view_does_not_fit(reference: type[SchedulerCore]) -> None:
    pair = Pair()
    pair.native._reference = reference(pair.config)
    pair.feed(enc_sub(stage_id="s0", pages=[b"zero"]))
    pair.feed(VALID[:-2])
    pair.feed(enc_sub(role="navigator", kind="browser", stage_id="b0", artifact=browser_artifact("run-1", "b0")))
    pair.feed(enc_sub(stage_id="s1", pages=[b"one"]))
    assert pair.native.fallbacks == 2


def test_a_ten_thousand_record_stream() -> None:
    rng = random.Random(20261201)
    pair = Pair(make_config(seal_every=7))
    runs = [f"run-{i}" for i in range(25)]
    closed: set[str] = set()
    for i in range(10_000):
        run_id = rng.choice(runs)
        roll = rng.random()
        if roll < 0.80:
            value = enc_sub(run_id=run_id, stage_id=f"s{i}", pages=[f"p{i}".encode(), f"p{i // 3}".encode()])
        elif roll < 0.85:
            stage = f"s{rng.randrange(max(i, 1))}"
            # a duplicate stage under a new id, or (every other time) a repeated submission_id
            renamed = {"submission_id": f"d{i}"} if i % 2 else {}
            value = enc_sub(run_id=run_id, stage_id=stage, pages=[f"p{i}".encode()], **renamed)
        elif roll < 0.88:
            value = enc_sub(run_id=run_id, stage_id=f"r{i}", pages=[f"p{i - 1}".encode(), f"p{(i - 1) // 3}".encode()])
        elif roll < 0.90:
            value = enc_sub(run_id=run_id, stage_id=f"k{i}", kind=rng.choice(["poetry", "ops", "caf\u00e9"]))
        elif roll < 0.92:
            closed.add(run_id)
            value = enc_close(run_id)
        elif roll < 0.95:
            value = rng.randbytes(rng.randrange(0, 40))
        elif roll < 0.97:
            value = (
                codec.MAGIC
                + rng.choice([b"\x7c\x81\xba\xfe\x11\x54\x6d\x64", rng.randbytes(8)])
                + rng.randbytes(rng.randrange(0, 60))
            )
        elif roll < 0.985:
            valid = enc_sub(run_id=run_id, stage_id=f"t{i}")
            value = valid[: rng.randrange(codec.HEADER_SIZE, len(valid))]
        else:
            value = None
        key = rng.choices([run_id.encode(), None, b"", b"run-0"], weights=[90, 3, 3, 4])[0]
        pair.feed(value, key, check_state=i % 1000 == 999)
    pair.check_state()
    assert len(closed) > 0 and pair.native.fallbacks > 0


# ---------------------------------------------------------------------------
# fuzz: mutated and hostile submissions
# ---------------------------------------------------------------------------

_SEEDS = fuzz.seed_values(enc_sub, enc_close)


def _valid_actions(run_id: str, count: int) -> list[bytes]:
    anchor = computer_use_genesis(run_id, "fuzz-session")
    values = []
    for index in range(count):
        value, anchor = cu_action(run_id, "fuzz-session", index, anchor)
        values.append(value)
    return values


_values = fuzz.record_values(
    _SEEDS, key_id=SIGNER.key_id, close=enc_close, extra=_valid_actions("run-1", 3) + _valid_actions("run-2", 2)
)


@fuzz.FUZZ_SETTINGS
@given(fuzz.keyed(_values), st.integers(1, 4))
def test_fuzz_native_equals_the_reference(inputs: list[tuple[bytes | None, bytes | None]], seal_every: int) -> None:
    pair = Pair(make_config(seal_every=seal_every))
    for key, value in inputs:
        pair.feed(value, key)


# ---------------------------------------------------------------------------
# the shell's batch path: plan / produce_planned
# ---------------------------------------------------------------------------


def reference_batches(
    config: SchedulerConfig, batches: list[list[Message]]
) -> tuple[list[tuple[Any, ...]], list[tuple[int, int, int, int]], SchedulerState]:
    """What the shell's loop produces for ``batches`` with the Python reference core."""
    shell = SchedulerShell(
        bootstrap="unused:9", topics=SHELL_TOPICS, partition=PARTITION, core=SchedulerCore(config), progress=None
    )
    state: Any = initial_state(config, PARTITION)
    producer = RecordingProducer()
    tallies = []
    for messages in batches:
        state, planned = shell._step_all(state, messages)
        tallies.append(shell._produce_all(producer, planned))
    return producer.calls, tallies, state


def native_batches(
    core: NativeSchedulerCore, batches: list[list[Message]], producer: RecordingProducer
) -> tuple[list[tuple[int, int, int, int]], NativeState]:
    state: SchedulerState | NativeState = initial_state(core.config, PARTITION)
    tallies = []
    for messages in batches:
        state = core.plan(state, messages, PARTITION)
        tallies.append(core.produce_planned(producer, SHELL_TOPICS_BY_STREAM, PARTITION))
        assert core._native.plan_progress()[0] == core._native.plan_progress()[1]
    assert isinstance(state, NativeState)
    return tallies, state


@pytest.mark.parametrize("batch", [1, 4, 500])
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("threads", [1, 3])
def test_planned_batches_produce_what_the_shell_loop_produces_from_the_reference(batch: int, keep: bool, threads: int) -> None:
    """Also with the batch's signatures verified ahead on several threads (``threads``), or inside the steps (1)."""
    config = make_config(seal_every=4)
    messages = batch_messages()
    batches = [messages[i : i + batch] for i in range(0, len(messages), batch)]
    expected, expected_tallies, expected_state = reference_batches(config, batches)
    core = NativeSchedulerCore(config, PARTITION, self_check=False)
    core._native.set_verify_threads(threads)
    producer = RecordingProducer(keep=keep)
    tallies, _ = native_batches(core, batches, producer)
    assert producer.calls == expected
    assert [type(v) for call in producer.calls for v in call] == [type(v) for call in expected for v in call]
    assert tallies == expected_tallies
    assert sum(t[1] for t in tallies) > 0 and sum(t[2] for t in tallies) > 0 and sum(t[3] for t in tallies) > 0
    assert core.to_scheduler_state() == expected_state
    assert core.fallbacks == 4  # str key, truncated body, browser result, truncated tail
    for kept, seen in producer.kept:  # a caller that keeps a headers list never sees it change
        assert kept == seen


def test_buffer_errors_poll_and_retry_the_same_output() -> None:
    config = make_config(seal_every=4)
    messages = batch_messages()
    expected, expected_tallies, _ = reference_batches(config, [messages])
    core = NativeSchedulerCore(config, PARTITION, self_check=False)
    producer = RecordingProducer(buffer_errors=[1, 2, 7, 20, 21, 22, len(expected) + 6])
    tallies, _ = native_batches(core, [messages], producer)
    assert producer.calls == expected
    assert tallies == expected_tallies
    assert producer.polls == [0.05] * 7


def test_a_failing_plan_or_produce_leaves_nothing_to_produce() -> None:
    config = make_config()
    core = NativeSchedulerCore(config, PARTITION, self_check=False)
    messages = batch_messages()
    state = core.plan(initial_state(config, PARTITION), messages[:3], PARTITION)
    with pytest.raises(Exception) as expected:
        SchedulerCore(config).step(initial_state(config, PARTITION), InputRecord(TOPIC, 2**31, 0, 0, b"k", enc_sub()))
    with pytest.raises(type(expected.value)):  # like the reference: the input partition does not fit an Avro int
        core.plan(state, messages[3:], 2**31)
    with pytest.raises(RuntimeError, match="not completely planned"):
        core.produce_planned(RecordingProducer(), SHELL_TOPICS_BY_STREAM, PARTITION)
    with pytest.raises(StaleState):
        core.plan(state, messages[3:], PARTITION)

    class Broken(RecordingProducer):
        def produce(self, *args: Any, **kwargs: Any) -> None:
            if self.attempts == 2:  # the third call
                raise KafkaException(KafkaError(KafkaError._FATAL))
            super().produce(*args, **kwargs)

    state = core.plan(initial_state(config, PARTITION), messages, PARTITION)
    broken = Broken()
    with pytest.raises(KafkaException):
        core.produce_planned(broken, SHELL_TOPICS_BY_STREAM, PARTITION)
    assert len(broken.calls) == 2 and core._native.plan_progress()[1] == 2
    for bad_topics in [SHELL_TOPICS_BY_STREAM[:4], (1, 2, 3, 4, 5)]:
        with pytest.raises(TypeError):
            core.produce_planned(RecordingProducer(), bad_topics, PARTITION)  # type: ignore[arg-type]


def test_messages_ok_sees_consumer_errors() -> None:
    messages = batch_messages()[:3]
    assert NativeSchedulerCore.messages_ok(messages) and NativeSchedulerCore.messages_ok([])
    eof = Message(topic=TOPIC, partition=PARTITION, offset=3, error=KafkaError(KafkaError._PARTITION_EOF))
    assert not NativeSchedulerCore.messages_ok([*messages, eof])


def test_a_real_producer_takes_the_positional_produce_call() -> None:
    """The C binding's argument order (topic, value, key, partition, callback, on_delivery, timestamp, headers)."""
    config = make_config()
    core = NativeSchedulerCore(config, PARTITION, self_check=False)
    producer = Producer(client_config("127.0.0.1:9", **{"message.timeout.ms": 1000}))
    core.plan(initial_state(config, PARTITION), batch_messages(), PARTITION)
    assert core.produce_planned(producer, SHELL_TOPICS_BY_STREAM, PARTITION)[0] > 0
    assert len(producer) >= core._native.plan_progress()[0]  # queued (with the client's own requests)
    producer.purge()
    producer.flush(0)


class _FakeConsumer:
    def __init__(self, batches: list[list[Message]]) -> None:
        self.batches = [list(batch) for batch in batches]

    def poll(self, timeout: float) -> Message | None:
        """The first message of the next batch (the shell's ``take`` then consumes the rest of it)."""
        while self.batches and not self.batches[0]:
            self.batches.pop(0)
        return self.batches[0].pop(0) if self.batches else None

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return self.batches.pop(0)[:num_messages] if self.batches else []

    def consumer_group_metadata(self) -> str:
        return "group-metadata"


def _run_shell(core: Any, batches: list[list[Message]], producer: RecordingProducer) -> SchedulerShell:
    shell = SchedulerShell(bootstrap="unused:9", topics=SHELL_TOPICS, partition=PARTITION, core=core, progress=None)
    shell._producer = producer
    shell._consumer = _FakeConsumer(batches)
    shell._txn = _TxnCaller()
    shell._state = initial_state(core.config, PARTITION)
    while shell._consumer.batches:
        shell._one_batch()
    shell._settle()
    return shell


def test_the_shell_produces_the_same_records_with_either_core() -> None:
    config = make_config(seal_every=4)
    messages = batch_messages()
    eof = Message(topic=TOPIC, partition=PARTITION, offset=len(messages), error=KafkaError(KafkaError._PARTITION_EOF))
    batches = [messages[:9], [*messages[9:20], eof], [eof], messages[20:]]
    reference, native = RecordingProducer(), RecordingProducer(buffer_errors=[3, 30])
    python_shell = _run_shell(SchedulerCore(config), batches, reference)
    native_shell = _run_shell(NativeSchedulerCore(config, PARTITION, self_check=False), batches, native)
    assert native_shell._native is not None and python_shell._native is None
    assert native.calls == reference.calls and len(native.calls) > 2 * len(messages)
    assert native.log == reference.log and reference.log[-2:] == [f"offsets {[(TOPIC, PARTITION, len(messages))]}", "commit"]
    counters = [dataclasses.replace(shell.counters, started=0.0) for shell in (python_shell, native_shell)]
    assert counters[0] == counters[1] and counters[0].consumed == len(messages) and counters[0].transactions == 3


# ---------------------------------------------------------------------------
# choosing a core
# ---------------------------------------------------------------------------


def test_make_core_prefers_and_env_overrides() -> None:
    config = make_config()
    assert isinstance(make_core(config, 0, "python", environ={}), SchedulerCore)
    assert isinstance(make_core(config, 0, "native", environ={}), NativeSchedulerCore)
    assert isinstance(make_core(config, 0, environ={}), NativeSchedulerCore)  # auto, and the extension is built
    assert isinstance(make_core(config, 0, "native", environ={"BERNSTEIN_CORE": "python"}), SchedulerCore)
    assert isinstance(make_core(config, 0, "python", environ={"BERNSTEIN_CORE": "Native "}), NativeSchedulerCore)
    assert isinstance(make_core(config, 0, "python", environ={"BERNSTEIN_CORE": ""}), SchedulerCore)
    with pytest.raises(ValueError, match="BERNSTEIN_CORE"):
        make_core(config, 0, environ={"BERNSTEIN_CORE": "rust"})


def test_make_core_reads_the_environment_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERNSTEIN_CORE", "python")
    assert isinstance(make_core(make_config(), 0, "native", environ=os.environ), SchedulerCore)
    assert isinstance(make_core(make_config(), 0, "native"), NativeSchedulerCore)  # the core package reads no environment
    monkeypatch.setenv("BERNSTEIN_CORE", "native")
    assert isinstance(make_core(make_config(), 0, "python", environ=os.environ), NativeSchedulerCore)


def test_make_core_without_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_mod, "_native", None)
    assert not native_status()[0]
    assert isinstance(make_core(make_config(), 0, environ={}), SchedulerCore)
    with pytest.raises(NativeUnavailable, match="not installed"):
        make_core(make_config(), 0, "native", environ={})


class _OpaqueSigner:
    key_id = SIGNER.key_id

    def sign(self, data: bytes) -> bytes:
        return SIGNER.sign(data)


def test_a_signer_without_a_seed_keeps_the_python_core() -> None:
    config = make_config(signer=_OpaqueSigner())
    assert isinstance(make_core(config, 0, environ={}), SchedulerCore)
    with pytest.raises(NativeUnavailable, match="seed"):
        make_core(config, 0, "native", environ={})


def test_drift_from_the_reference_disables_the_native_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_mod, "_MAX_EVIDENCE_CHARS", 255)  # a changed constant
    assert not native_status()[0]
    assert isinstance(make_core(make_config(), 0, environ={}), SchedulerCore)
    monkeypatch.undo()
    monkeypatch.setattr(step_mod, "_CE_SOURCE", b"bernstein/other")  # changed behaviour: caught by the self-check
    assert native_status()[0]
    with pytest.raises(NativeUnavailable, match="self-check"):
        NativeSchedulerCore(make_config(), 0)
    assert isinstance(make_core(make_config(), 0, environ={}), SchedulerCore)


def test_a_changed_schema_is_refused_by_the_extension() -> None:
    known = [(s.fingerprint, s.name) for s in codec.default_codec().schemas]
    altered = [(b"\x00" * 8 if name == codec.JOURNAL_ENTRY else fp, name) for fp, name in known]
    with pytest.raises(ValueError, match="JournalEntry.v1"):
        bn.NativeCore(ROLES, SEED, AUDIT_KEY, "k", 1000, 0, SIGNER.key_id, altered, sorted(step_mod._INPUT_SCHEMAS))
