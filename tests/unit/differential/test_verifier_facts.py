"""verifier/facts.py: the native facts are the Python reference's, item for item.

The reference (``facts.PYTHON``) is the per-record code the verifier ran
before; ``facts.NATIVE`` (``bernstein_native``) must return identical tuples
for every value, valid or not (random bytes, truncations, flipped bytes,
wrong schemas, invalid UTF-8, huge lengths, ...), and identical rows for
every dump line (bad base64, non-JSON, non-objects, missing fields, ...).
Then whole runs, pristine and tampered, must give byte-identical reports
(``render_text`` and ``render_json``) and exit codes with either.
"""

from __future__ import annotations

import io
import json
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bernstein_native  # built by `uv sync` (cargo): a missing build must fail these tests, not skip them
import orjson
import pytest

from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    audit_record_mac,
    evidence_set_hash,
    journal_entry_hash,
    sha256_digest,
    submission_signing_input,
    submission_statement,
)
from bernstein.schemas.ed25519 import verify_signature
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier import facts
from bernstein.verifier.facts import NATIVE, PYTHON, RAISE, Facts
from bernstein.verifier.render import render_json, render_text
from bernstein.verifier.sources import DUMP_FORMAT, DumpSource, StoredRecord, UnreadableInput
from bernstein.verifier.verify import verify_stream
from tests.support.fact_dumps import KEY_ID, SECRET, SIGNER, TAMPERS, TRUSTED, C, b64, edit_lines, native, write_dump
from tests.support.producers import producer_seed, producer_signer, producer_trust
from tests.vectors.ed25519_cases import sign_with_torsion


def test_native_facts_are_in_use() -> None:
    assert bernstein_native.VERIFIER_SCHEMAS
    assert hasattr(bernstein_native.FactReader, "producer_facts")
    assert facts.native_status()[0], facts.native_status()[1]
    assert facts.current() is NATIVE
    with facts.use(PYTHON):
        assert facts.current() is PYTHON
    assert facts.current() is NATIVE


def test_an_extension_that_predates_a_journal_entry_layout_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """It would read JournalEntry.v3 (signed submissions) as undecodable: the reference reads it instead."""
    pinned = [(name, fp) for name, fp in bernstein_native.VERIFIER_SCHEMAS if name != codec.JOURNAL_ENTRY_V3]
    assert len(pinned) == len(bernstein_native.VERIFIER_SCHEMAS) - 1
    monkeypatch.setattr(bernstein_native, "VERIFIER_SCHEMAS", pinned)
    assert facts.native_status() == (
        False,
        "bernstein_native predates JournalEntry.v3 (rebuild it with `uv sync`)",
    )


def comparable(items: list[Any]) -> list[Any]:
    """Facts with raised exceptions compared by type and text."""
    return [(RAISE, type(f[1]), str(f[1])) if f is not None and f[0] == RAISE else f for f in items]


# ---------------------------------------------------------------------------
# a real run, as the scheduler core writes it
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("facts") / "dump"
    write_dump(root)
    return root


def values_of(root: Path, stream: str) -> list[bytes | None]:
    return [r.value for r in DumpSource(root).records(stream, 0)]


# ---------------------------------------------------------------------------
# malformed values
# ---------------------------------------------------------------------------


def mutations(value: bytes, rng: random.Random, count: int = 12) -> Iterator[bytes]:
    """Truncations, flipped bytes, insertions and deletions of ``value``."""
    n = len(value)
    for cut in sorted({0, 1, 2, 9, 10, 11, n // 2, n - 2, n - 1} | {rng.randrange(n) for _ in range(4)}):
        if 0 <= cut < n:
            yield value[:cut]
    yield value + b"\x00"
    yield value + b"\x02ab"
    for _ in range(count):
        at = rng.randrange(n)
        yield value[:at] + bytes([value[at] ^ (1 << rng.randrange(8))]) + value[at + 1 :]
        at = rng.randrange(10, n) if n > 10 else 0
        yield value[:at] + bytes([rng.randrange(256)]) + value[at:]
        yield value[:at] + value[at + 1 :]
        yield value[:at] + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" + value[at:]  # an over-long number
        yield value[:at] + b"\x81\x80\x80\x80\x80\x80\x80\x80\x80\x01" + value[at:]  # 10 bytes, high bits set
        yield value[:at] + b"\xed\xa0\x80" + value[at:]  # a UTF-16 surrogate: not UTF-8


def entry_record(**changes: Any) -> dict[str, Any]:
    observations = [{"kind": "page", "ref": "https://example.test/x", "content_hash": sha256_digest(b"x")}]
    record = {
        "run_id": "run-a",
        "seq": 0,
        "prev_hash": "sha256:" + "0" * 64,
        "entry_type": "activity.result",
        "stage_id": "stage-x",
        "role": "developer",
        "kind": "coding",
        "producer_id": "p",
        "submission_id": "s",
        "artifact_hash": sha256_digest(b"a"),
        "evidence_set_hash": evidence_set_hash([sha256_digest(b"x")]),
        "observations": observations,
        "terminal_state": "completed",
        "reason_code": "ok",
        "input": {"topic": "t", "partition": 0, "offset": 1},
        "occurred_at_ms": 5,
    }
    record.update(changes)
    return record


def computer_use_record(**changes: Any) -> dict[str, Any]:
    record = {
        "run_id": "run-a",
        "seq": 3,
        "prev_hash": "h",
        "entry_type": "computer_use.action",
        "session_id": "s",
        "action_index": 0,
        "producer_id": "p",
        "submission_id": "s",
        "prev_anchor": "a",
        "anchor": "b",
        "screenshot_hash": "c",
        "dom_digest": "d",
        "observation_hash": "e",
        "action": {"kind": "click", "target": "#x", "value_digest": ""},
        "lineage_entry_hash": "f",
        "lineage_key_id": "k",
        "lineage_signature": b"sig",
        "lineage_hmac": "m",
        "lineage_entry": b"{}",
        "input": {"topic": "t", "partition": 0, "offset": 1},
        "occurred_at_ms": 5,
    }
    record.update(changes)
    return record


def crafted_payloads() -> list[bytes]:
    """Entry payloads the scheduler never writes, but an attacker or a bug could."""

    def obs(*hashes: str) -> list[dict[str, str]]:
        return [{"kind": "page", "ref": f"r{i}", "content_hash": h} for i, h in enumerate(hashes)]

    good = sha256_digest(b"x")
    records = [
        entry_record(),
        entry_record(observations=[]),
        entry_record(observations=obs(good, good, sha256_digest(b"y"))),
        entry_record(observations=obs("sha256:" + "A" * 64)),
        entry_record(observations=obs("not a digest", "sha256:" + "0" * 63)),
        entry_record(observations=obs(good, "x" * 200)),
        entry_record(observations=obs("sha256:" + "\u00e9" * 64)),
        entry_record(entry_type="computer_use.action"),
        entry_record(run_id="run-\u00fc\U0001f600", stage_id="st\u00e4ge", kind="r\u00e9search", terminal_state="\u2603"),
        entry_record(seq=2**62, input={"topic": "t", "partition": 2**31 - 1, "offset": -(2**63)}),
        entry_record(seq=-5, occurred_at_ms=2**63 - 1),
        entry_record(kind="research"),
        entry_record(kind="browser"),
        entry_record(run_id="run-b"),
    ]
    payloads = [C.encode(codec.JOURNAL_ENTRY, r) for r in records]
    payloads.append(C.encode(codec.COMPUTER_USE_ENTRY, computer_use_record()))
    payloads.append(C.encode(codec.COMPUTER_USE_ENTRY, computer_use_record(entry_type="activity.result")))
    # the v2 layouts (declared sizes): their heads read natively, a v2 stage fact is the reference's
    sized = [{**o, "size": 1} for o in entry_record()["observations"]]
    payloads.append(C.encode(codec.JOURNAL_ENTRY_V2, entry_record(observations=sized)))
    payloads.append(C.encode(codec.JOURNAL_ENTRY_V2, entry_record(observations=[], entry_type="computer_use.action")))
    payloads.append(C.encode(codec.COMPUTER_USE_ENTRY_V2, computer_use_record(screenshot_size=7, dom_size=-1)))
    # Valid Avro our encoders never write: a negative block count (with its byte size).
    header = C.schema(codec.JOURNAL_ENTRY).header
    body = C.encode(codec.JOURNAL_ENTRY, entry_record())[len(header) :]
    items = b"".join(codec._string(x) for x in ("page", "https://example.test/x", good))
    one = codec._long(1) + items + b"\x00"
    at = body.index(one)
    payloads.append(header + body[:at] + codec._long(-1) + codec._long(len(items)) + items + b"\x00" + body[at + len(one) :])
    return payloads


def envelopes(payload: bytes) -> list[bytes]:
    return [
        C.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": journal_entry_hash(payload)}),
        C.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": "sha256:" + "1" * 64}),
    ]


def journal_corpus(pristine: Path) -> list[bytes | None]:
    rng = random.Random(1)
    real = values_of(pristine, "journal")
    audit = values_of(pristine, "audit")
    out: list[bytes | None] = [None, b"", *real, *audit[:3]]
    payloads = crafted_payloads()
    for value in real[:3] + [v for v in real if v and v.startswith(C.schema(codec.SEAL_RECORD).header)][:2]:
        assert value is not None
        out.extend(mutations(value, rng))
        name, fields = codec.split_envelope(value)
        if name == codec.JOURNAL_RECORD:
            payloads.extend(mutations(fields[0], rng))
    for payload in payloads:
        out.extend(envelopes(payload))
    out.extend(payloads[:5])  # an entry payload where an envelope belongs
    out.append(C.encode(codec.SEAL_RECORD, {"payload": b"not a seal", "key_id": "k\u00e9y", "signature": b"\x00" * 64}))
    out.extend(audit_v2(audit)[:2])
    out.append(checkpoint_value())
    out.append(
        C.encode(codec.RUN_CLOSE, {"submission_id": "c", "run_id": "r", "producer": {"id": "p", "sdk": "s"}, "occurred_at_ms": 1})
    )
    out.append(C.schema(codec.JOURNAL_RECORD).header + codec._long(2**61) + b"xx")
    out.append(C.schema(codec.JOURNAL_RECORD).header + codec._long(-3) + b"xx")
    out.append(codec.MAGIC + b"\x00" * 8)
    out.append(b"\xc3")
    out.extend(bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(20))
    return out


def audit_entry(**changes: Any) -> dict[str, Any]:
    record = {
        "partition": 0,
        "seq": 7,
        "prev_mac": "hmac-sha256:" + "0" * 64,
        "event": "activity.result",
        "run_id": "run-a",
        "stage_id": "s",
        "kind": "coding",
        "terminal_state": "completed",
        "reason_code": "ok",
        "artifact_hash": "a",
        "evidence_set_hash": "e",
        "record_hash": "sha256:" + "2" * 64,
        "journal_seq": 3,
        "input": {"topic": "t", "partition": 0, "offset": 1},
    }
    record.update(changes)
    return record


def audit_corpus(pristine: Path) -> list[bytes | None]:
    rng = random.Random(2)
    real = values_of(pristine, "audit")
    out: list[bytes | None] = [None, b"", *real, *values_of(pristine, "journal")[:4]]
    payloads = [
        C.encode(codec.AUDIT_ENTRY, audit_entry()),
        C.encode(codec.AUDIT_ENTRY, audit_entry(partition=-1, seq=2**62, journal_seq=-1, event="r\u00e9fused", run_id="\u00fc")),
        C.encode(codec.AUDIT_ENTRY_V2, {**audit_entry(event="computer_use.action"), "computer_use": None}),
        C.encode(codec.JOURNAL_ENTRY, entry_record()),
    ]
    for value in real[:4]:
        assert value is not None
        out.extend(mutations(value, rng))
        payloads.extend(mutations(codec.split_envelope(value)[1][0], rng))
    for payload in payloads:
        for key_id in (KEY_ID, "hmac-unknown", "k\u00e9y"):
            out.append(C.encode(codec.AUDIT_RECORD, {"payload": payload, "key_id": key_id, "mac": "hmac-sha256:" + "3" * 64}))
    v2 = audit_v2(real)
    out.extend(v2)
    for value in v2[:2]:
        out.extend(mutations(value or b"", rng))
    out.append(C.encode(codec.SEAL_RECORD, {"payload": b"p", "key_id": "k", "signature": b"s"}))
    out.append(checkpoint_value())
    out.extend(bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(20))
    return out


def audit_v2(values: list[bytes | None]) -> list[bytes | None]:
    """The real audit records as AuditRecord.v2 (the MAC covers the key id), and one with its key id edited."""
    out: list[bytes | None] = []
    for value in values[:6]:
        payload, key_id, _ = codec.split_envelope(value or b"")[1]
        mac = audit_record_mac(SECRET, key_id, payload)
        out.append(C.encode(codec.AUDIT_RECORD_V2, {"key_id": key_id, "payload": payload, "mac": mac}))
    payload, key_id, _ = codec.split_envelope(values[0] or b"")[1]
    out.append(
        C.encode(
            codec.AUDIT_RECORD_V2,
            {"key_id": key_id[:-1] + "0", "payload": payload, "mac": audit_record_mac(SECRET, key_id, payload)},
        )
    )
    return out


def checkpoint_value() -> bytes:
    return C.encode(codec.CHECKPOINT_RECORD, {"payload": b"not a checkpoint", "key_id": "k", "signature": b"s"})


def test_audit_record_v2_macs_cover_the_key_id(pristine: Path) -> None:
    """AuditRecord.v2 (written by the scheduler once it switches): its MAC recomputes over the key id too, so an
    edited key id is a MAC mismatch under any pinned key, or an unpinned key (never a silent pass)."""
    real = values_of(pristine, "audit")
    *honest, edited = audit_v2(real)
    for facts_ in (PYTHON, native()):
        for fact in facts_.audit_facts(honest, TRUSTED.audit_secret):
            assert fact[0] == facts.A_RECORD and fact[3] == fact[2]  # recomputed == stored
        (fact,) = facts_.audit_facts([edited], lambda key_id: SECRET)
        assert fact[0] == facts.A_RECORD and fact[3] != fact[2]
        assert facts_.audit_facts([edited], TRUSTED.audit_secret)[0][3] is None  # its key id is not pinned
        assert facts_.audit_facts([checkpoint_value()], TRUSTED.audit_secret) == [
            (facts.A_UNDECODABLE, "a CheckpointRecord.v1 record on the audit topic")
        ]
        assert facts_.journal_facts([honest[0], checkpoint_value()]) == [
            (facts.J_UNDECODABLE, "an audit record on the journal topic"),
            (facts.J_UNDECODABLE, "a checkpoint record on the journal topic"),
        ]


def test_journal_facts_are_the_reference(pristine: Path) -> None:
    values = journal_corpus(pristine)
    assert len(values) > 1000
    expected = PYTHON.journal_facts(values)
    assert comparable(native().journal_facts(values)) == comparable(expected)
    kinds = {f[0] for f in expected}
    assert kinds == {facts.J_UNDECODABLE, facts.J_ENTRY, facts.J_ENTRY_UNDECODABLE, facts.J_SEAL}
    # one at a time as well (no state leaks from one item to the next)
    assert [comparable(native().journal_facts([v])) for v in values[:300]] == [comparable([f]) for f in expected[:300]]


def test_stage_facts_are_the_reference(pristine: Path) -> None:
    values = signed_corpus(pristine)  # v1, v2 and v3 entries, valid and malformed
    expected = PYTHON.stage_facts(values)
    assert comparable(native().stage_facts(values)) == comparable(expected)
    kinds = [f[0] for f in expected]
    assert {facts.S_SKIP, facts.S_NOT_RESULT, facts.S_RESULT} == set(kinds)
    results = [f for f in expected if f[0] == facts.S_RESULT]
    assert any(f[11] is None for f in results) and any(f[11] is not None for f in results)  # malformed and well-formed sets


def signed_corpus(pristine: Path) -> list[bytes | None]:
    """The journal corpus, plus v3 entries whose signature, statement or key id were changed, and the same
    entries as JournalEntry.v2 (written before producer signatures)."""
    values = journal_corpus(pristine)
    real = [v for v in values_of(pristine, "journal") if v and codec.split_envelope(v)[0] == codec.JOURNAL_RECORD]
    for value in real[:4]:
        payload = codec.split_envelope(value)[1][0]
        entry = dict(C.decode(payload).record)
        assert C.schema_of(payload).name == codec.JOURNAL_ENTRY_V3
        signed = submission_signing_input(submission_statement(entry, entry["producer_key_id"]))
        torsioned = sign_with_torsion(producer_seed(entry["producer_id"]), signed)
        assert verify_signature(producer_signer(entry["producer_id"]).public_key_raw, torsioned, signed)
        for change in (
            {"producer_signature": bytes([entry["producer_signature"][0] ^ 1]) + entry["producer_signature"][1:]},
            {"producer_signature": b"short"},
            {"reason_code": "edited"},
            {"occurred_at_ms": 2**60},  # no canonical JSON: no signature verifies
            {"producer_key_id": "sha256:" + "0" * 64},
            {"stage_id": 'st\u00e4ge \u2603 "q" \\ \n'},
            {"producer_signature": torsioned},  # a signer's small-order R: valid under ZIP 215 only
        ):
            body = C.encode(codec.JOURNAL_ENTRY_V3, {**entry, **change})
            values.append(C.encode(codec.JOURNAL_RECORD, {"payload": body, "entry_hash": journal_entry_hash(body)}))
        v2 = {k: v for k, v in entry.items() if k not in ("producer_key_id", "producer_signature")}
        for body in (C.encode(codec.JOURNAL_ENTRY_V2, v2), C.encode(codec.JOURNAL_ENTRY_V2, {**v2, "observations": []})):
            values.append(C.encode(codec.JOURNAL_RECORD, {"payload": body, "entry_hash": journal_entry_hash(body)}))
            for mutated in mutations(body, random.Random(len(values))):
                values.extend(envelopes(mutated))
    return values


@pytest.mark.parametrize("keys", ["pinned", "none", "wrong", "not-a-key", "bytearray"])
def test_producer_facts_are_the_reference(pristine: Path, keys: str) -> None:
    values = signed_corpus(pristine)
    pinned = producer_trust()
    public_for: Callable[[str], Any] = {
        "pinned": lambda key_id: pinned.public_key(key_id),
        "none": lambda key_id: None,
        "wrong": lambda key_id: SIGNER.public_key_raw,
        "not-a-key": lambda key_id: b"\x01" * 31,
        "bytearray": lambda key_id: bytearray(pinned.public_key(key_id) or b""),
    }[keys]
    expected = PYTHON.producer_facts(values, public_for)
    assert comparable(native().producer_facts(values, public_for)) == comparable(expected)
    signed = [f for f in expected if f[0] == facts.P_SIGNED]
    assert len(signed) > 20 and {f[0] for f in expected} >= {facts.P_OTHER, facts.P_LEGACY, facts.P_SIGNED}
    verdicts = {f[4] for f in signed}
    assert verdicts == ({True, False, None} if keys == "pinned" else {None} if keys == "none" else {False})


@pytest.mark.parametrize("secrets", ["pinned", "none", "bytearray"])
def test_audit_facts_are_the_reference(pristine: Path, secrets: str) -> None:
    values = audit_corpus(pristine)
    secret_for: Callable[[str], Any] = {
        "pinned": TRUSTED.audit_secret,
        "none": lambda key_id: None,
        "bytearray": lambda key_id: bytearray(SECRET) if key_id == KEY_ID else None,
    }[secrets]
    expected = PYTHON.audit_facts(values, secret_for)
    assert comparable(native().audit_facts(values, secret_for)) == comparable(expected)
    kinds = {f[0] for f in expected}
    assert kinds == {facts.A_UNDECODABLE, facts.A_RECORD}  # a JournalRecord on the audit topic is undecodable there


def test_facts_of_values_that_are_not_bytes() -> None:
    values: list[Any] = [bytearray(b"\xc3\x01"), memoryview(b"ab"), "text"]
    for method in ("journal_facts", "stage_facts"):
        expected = getattr(PYTHON, method)(values)
        assert comparable(getattr(native(), method)(values)) == comparable(expected)
    assert comparable(native().audit_facts(values, TRUSTED.audit_secret)) == comparable(
        PYTHON.audit_facts(values, TRUSTED.audit_secret)
    )


# ---------------------------------------------------------------------------
# dump lines
# ---------------------------------------------------------------------------


def line_corpus(pristine: Path) -> list[bytes]:
    real = [
        line
        for stream in ("journal", "audit")
        for line in (pristine / "topics" / stream / "0.jsonl").read_bytes().splitlines(keepends=True)[:5]
    ]
    base: dict[str, Any] = {
        "topic": "t",
        "partition": 0,
        "offset": 7,
        "timestamp": 12,
        "key": b64(b"run-a"),
        "value": b64(b"\xc3\x01abc"),
        "headers": [["ce_id", b64(b"x")], ["empty", None]],
    }
    variants: list[Any] = [
        base,
        {**base, "timestamp": None},
        {k: v for k, v in base.items() if k != "timestamp"},
        {**base, "timestamp": 0},
        {**base, "key": None, "value": None},
        {k: v for k, v in base.items() if k not in ("key", "value")},
        {**base, "headers": []},
        {**base, "headers": None},
        {k: v for k, v in base.items() if k != "headers"},
        {**base, "headers": [["a", ""]]},
        {**base, "headers": [["a"]]},
        {**base, "headers": [["a", "QQ==", "x"]]},
        {**base, "headers": "ab"},
        {**base, "headers": {}},
        {**base, "headers": {"a": [1, 2, {"b": None}]}},
        {**base, "headers": [[1, b64(b"x")]]},
        {**base, "headers": [["a", 5]]},
        {**base, "headers": [["a", "Q"]]},
        {**base, "headers": 0},
        {**base, "headers": 1},
        {**base, "headers": [["\u00e9", b64(b"x")]]},
        {**base, "value": "QQ"},
        {**base, "value": "Q==="},
        {**base, "value": "=QQ="},
        {**base, "value": "QR=="},
        {**base, "value": "QQ==QQ=="},
        {**base, "value": "QU JD"},
        {**base, "value": "QU\nJD"},
        {**base, "value": "QUJD\u00e9"},
        {**base, "value": ""},
        {**base, "key": ""},
        {**base, "value": 5},
        {**base, "value": ["QQ=="]},
        {**base, "key": "@@@@"},
        {**base, "value": "QUJ-"},
        {**base, "value": "QUJ_"},
        {**base, "value": "QUJD\t"},
        {**base, "partition": "3"},
        {**base, "partition": " 3 "},
        {**base, "partition": 3.0},
        {**base, "partition": 3.7},
        {**base, "partition": True},
        {**base, "partition": None},
        {**base, "partition": "x"},
        {**base, "offset": 2**63},
        {**base, "offset": -(2**63)},
        {**base, "offset": 10**18},
        {**base, "offset": -1},
        {**base, "offset": 2**64 - 1},
        {**base, "timestamp": "5"},
        {**base, "timestamp": []},
        {**base, "timestamp": [1]},
        {**base, "timestamp": False},
        {**base, "topic": 5},
        {**base, "topic": None},
        {**base, "topic": ["t"]},
        {**base, "topic": "t\u00e9\U0001f600"},
        {**base, "topic": "t\n"},
        {**base, "topic": 't"q'},
        {**base, "topic": ""},
        {k: v for k, v in base.items() if k != "topic"},
        {k: v for k, v in base.items() if k != "partition"},
        {k: v for k, v in base.items() if k != "offset"},
        {**base, "extra": 1},
        {**base, "extra": {"deep": [[[]]]}},
        [base],
        "string",
        5,
        None,
        [],
        {},
    ]
    lines = [orjson.dumps(v) + b"\n" for v in variants]
    text = orjson.dumps(base).decode()
    lines += [
        b"\n",
        b"   \n",
        b"\t\r\n",
        b"\x0b\x0c\n",
        b"",
        b"  ",
        b"not json\n",
        b"{\n",
        b"}\n",
        b"{}}\n",
        text.encode() + b" x\n",
        b" " + text.encode() + b" \t\r\n",
        text.encode(),
        text.encode()[:-3],
        text.encode()[:-3] + b"\n",
        b"\xef\xbb\xbf" + text.encode() + b"\n",
        text.replace('"t"', '"\\u0074"').encode() + b"\n",
        text.replace('"t"', '"\\ud800"').encode() + b"\n",
        text.replace('"t"', '"\xff"').encode("latin-1") + b"\n",
        text.replace('"t"', '"t\\n"').encode() + b"\n",
        text.replace('"t"', '"t\\/"').encode() + b"\n",
        text.replace('"t"', '"\x01"').encode() + b"\n",
        text.replace("7", "07").encode() + b"\n",
        text.replace("7", "-0").encode() + b"\n",
        text.replace("7", "7e0").encode() + b"\n",
        text.replace("7", "7.").encode() + b"\n",
        text.replace("7", "1" * 30).encode() + b"\n",
        text.replace("7", "-" + "9" * 19).encode() + b"\n",
        text.replace(',"offset":7', ',"offset":7,"offset":8').encode() + b"\n",
        text.replace(',"offset":7', ',"offset":7,"topic":"u"').encode() + b"\n",
        text.replace(',"partition":0', ',"partition":0,"partition":1').encode() + b"\n",
        text.replace(":", " : ").replace(",", " , ").encode() + b"\n",
        text.replace("}", ",}").encode() + b"\n",
        text.replace('"headers":', '"headers": ').replace("]]", "] ]").encode() + b"\n",
        text.replace('"headers":[', '"headers":[ ').encode() + b"\n",
        text.replace(b64(b"x"), "null").encode() + b"\n",
        text.replace("null", '"\\u0000"').encode() + b"\n",
        text.replace("null", '"a\\"b"').encode() + b"\n",
        b'{"topic":"t","partition":0,"offset":1,"headers":[1e5]}\n',
        b'{"topic":"t","partition":0,"offset":1,"headers":[' + b"[" * 300 + b"]" * 300 + b"]}\n",
        b'{"topic":"t","partition":0,"offset":1,"headers":"a\\u00e9"}\n',
        b'{"topic":"t","partition":0,"offset":1,"headers":tru}\n',
        b'{"topic":"t","partition":0,"offset":1,"headers":[true,false,null,-1,"x",{}]}\n',
    ]
    rng = random.Random(3)
    for line in real[:4]:
        for _ in range(25):
            at = rng.randrange(len(line))
            lines.append(line[:at] + bytes([rng.randrange(256)]) + line[at + 1 :])
            lines.append(line[:at] + line[at + 1 :])
        lines.append(line[: len(line) // 2])
    return real + lines


def test_dump_lines_parse_as_the_reference(pristine: Path) -> None:
    lines = line_corpus(pristine)
    for with_headers in (True, False):
        for line in lines:
            assert native().parse_dump_lines([line], with_headers) == PYTHON.parse_dump_lines([line], with_headers), (
                line,
                with_headers,
            )
        rng = random.Random(4)
        for _ in range(200):
            batch = rng.sample(lines, rng.randrange(1, 12))
            assert native().parse_dump_lines(batch, with_headers) == PYTHON.parse_dump_lines(batch, with_headers)


def test_dump_blocks_split_as_a_file_iterates(pristine: Path) -> None:
    lines = line_corpus(pristine)
    rng = random.Random(5)
    for _ in range(300):
        block = b"".join(rng.sample(lines, rng.randrange(0, 8)))
        if rng.random() < 0.3:
            block = block[: rng.randrange(len(block) + 1)]
        for with_headers in (True, False):
            for eof in (True, False):
                got = native().parse_dump_block(block, with_headers, eof)
                assert got == PYTHON.parse_dump_block(block, with_headers, eof), (block, with_headers, eof)
                rows, count, end, bad = got
                if bad is None:
                    # the lines the block holds are the ones a binary file would yield
                    assert count == len(io.BytesIO(block[:end]).readlines())
                    assert end == (len(block) if eof else block.rfind(b"\n") + 1)


def reference_records(path: Path, headers: bool) -> tuple[list[StoredRecord], list[int], str]:
    """What the per-line reader of the verifier (``_read_jsonl``) made of a dump file."""
    from bernstein.verifier.sources import TornLine, _read_jsonl

    torn: list[TornLine] = []
    parse = facts.item_row
    out: list[StoredRecord] = []
    error = ""
    try:
        for record in _read_jsonl(path, "journal", lambda stream, item: _stored(stream, parse(item, headers)), torn):
            out.append(record)
    except UnreadableInput as exc:
        error = str(exc)
    return out, [t.line for t in torn], error


def _stored(stream: str, row: Any) -> StoredRecord:
    offset, timestamp, key, value, topic, partition, headers = row
    return StoredRecord(stream, topic, partition, offset, timestamp, key, value, headers)


@pytest.mark.parametrize("impl", ["python", "native"])
def test_dump_files_read_as_the_line_reader_reads_them(
    tmp_path: Path, pristine: Path, impl: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bernstein.verifier.sources as sources

    monkeypatch.setattr(sources, "_CHUNK_BYTES", 700)  # many blocks, lines longer than a block
    good = (pristine / "topics" / "journal" / "0.jsonl").read_bytes().splitlines(keepends=True)[:12]
    files = {
        "pristine": b"".join(good),
        "torn": b"".join(good) + good[0][:40],
        "torn-after-blank": b"".join(good) + b"\n\n" + good[0][:40],
        "unterminated-good": b"".join(good) + good[0].rstrip(b"\n"),
        "bad-middle": b"".join(good[:5]) + b"garbage\n" + b"".join(good[5:]),
        "bad-last": b"".join(good) + b"garbage\n",
        "bad-last-then-blank": b"".join(good) + b"garbage\n\n",
        "blank-lines": b"\n" + b"".join(g + b"  \n" for g in good),
        "empty": b"",
        "only-blank": b"\n\n",
        "only-torn": b'{"topic"',
    }
    dump = tmp_path / "dump"
    (dump / "topics" / "journal").mkdir(parents=True)
    (dump / "manifest.json").write_text(json.dumps({"format": DUMP_FORMAT}))
    path = dump / "topics" / "journal" / "0.jsonl"
    with facts.use(PYTHON if impl == "python" else native()):
        for name, data in files.items():
            path.write_bytes(data)
            for headers in (True, False):
                expected = reference_records(path, headers)
                source = DumpSource(dump)
                got: list[StoredRecord] = []
                error = ""
                try:
                    got.extend(source.records("journal", 0, headers=headers))
                except UnreadableInput as exc:
                    error = str(exc)
                assert (got, [t.line for t in source.torn_lines], error) == expected, name


# ---------------------------------------------------------------------------
# whole runs: the same report with either implementation
# ---------------------------------------------------------------------------


def report(
    impl: Facts, run_id: str, root: Path, *, cas: bool, trusted: TrustedKeys = TRUSTED, generic: bool = False
) -> tuple[Any, ...]:
    with facts.use(impl):
        outputs: list[Any] = []
        for render in (render_text, render_json):
            out = io.StringIO()
            try:
                source: Any = DumpSource(root)
                if generic:
                    source = RecordsOnly(source)
                header, stages = verify_stream(run_id, source, cas=DirBlobStore(root / "cas") if cas else None, trusted=trusted)
                code = render(header, stages, out)
            except Exception as exc:  # compared, not hidden
                outputs.append((type(exc).__name__, str(exc)))
                continue
            outputs.append((code, out.getvalue()))
        return tuple(outputs)


class RecordsOnly:
    """A source that offers only ``records`` (as Kafka and kcat dumps do)."""

    def __init__(self, inner: DumpSource) -> None:
        self.inner = inner

    @property
    def torn_lines(self) -> Any:
        return self.inner.torn_lines

    @property
    def manifest(self) -> Any:
        """What the dump holds (its runs): a dump of selected runs has no whole journal partition to rebuild a log from."""
        return self.inner.manifest

    @property
    def dump_problems(self) -> Any:
        return self.inner.dump_problems

    def describe(self) -> str:
        return self.inner.describe()

    def partitions(self, stream: str) -> list[int]:
        return self.inner.partitions(stream)

    def records(self, stream: str, partition: int, *, headers: bool = True) -> Iterator[StoredRecord]:
        return self.inner.records(stream, partition, headers=headers)


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_reports_are_identical_with_native_and_python_facts(tmp_path: Path, pristine: Path, tamper: str) -> None:
    root = tmp_path / "dump"
    shutil.copytree(pristine, root)
    stream, edit = TAMPERS[tamper]
    edit_lines(root / "topics" / stream / "0.jsonl", edit)
    journal_line = (pristine / "topics" / "journal" / "0.jsonl").read_bytes().splitlines(keepends=True)[0]
    audit_line = (pristine / "topics" / "audit" / "0.jsonl").read_bytes().splitlines(keepends=True)[0]
    if tamper == "audit-journal-record":  # a journal record on the audit topic: AUDIT_UNDECODABLE at its offset
        edit_lines(root / "topics" / "audit" / "0.jsonl", lambda ls: [*ls[:4], journal_line, *ls[4:]])
    if tamper == "audit-in-journal":
        edit_lines(root / "topics" / "journal" / "0.jsonl", lambda ls: [*ls[:2], audit_line, *ls[2:]])
    for run_id in ("run-a", "run-b", "run-none"):
        for cas in (True, False):
            expected = report(PYTHON, run_id, root, cas=cas)
            assert report(native(), run_id, root, cas=cas) == expected, (run_id, cas)
            assert report(native(), run_id, root, cas=cas, generic=True) == expected, (run_id, cas)
    if tamper == "pristine":
        assert {r[0] for r in report(native(), "run-b", root, cas=True)} == {0}  # coding stages only
        text = report(native(), "run-a", root, cas=True)[0][1].splitlines()
        assert all(
            line.startswith("  OK ") for line in text[1:4]
        )  # chain, seal, audit (the modality checks fail on these artifacts)
        assert report(native(), "run-a", root, cas=False, trusted=TrustedKeys(ed25519=TRUSTED.ed25519)) == report(
            PYTHON, "run-a", root, cas=False, trusted=TrustedKeys(ed25519=TRUSTED.ed25519)
        )


def test_missing_and_changed_blobs_give_the_same_report(tmp_path: Path, pristine: Path) -> None:
    root = tmp_path / "dump"
    shutil.copytree(pristine, root)

    def blob(data: bytes) -> Path:
        digest = sha256_digest(data).removeprefix("sha256:")
        return root / "cas" / "sha256" / digest[:2] / digest

    # blobs of accepted stages (the first blobs by hash may belong to refused submissions, which nothing reattaches)
    blob(b"artifact run-a 0\n").unlink()  # stage-0's artifact
    blob(b"run-a 1 0").write_bytes(b"changed")  # the page stage-1 observed
    expected = report(PYTHON, "run-a", root, cas=True)
    assert expected[0][0] == 2
    assert report(native(), "run-a", root, cas=True) == expected


def test_a_journal_record_on_the_audit_topic_is_named_not_raised(tmp_path: Path, pristine: Path) -> None:
    root = tmp_path / "dump"
    shutil.copytree(pristine, root)
    journal_line = (pristine / "topics" / "journal" / "0.jsonl").read_bytes().splitlines(keepends=True)[0]
    edit_lines(root / "topics" / "audit" / "0.jsonl", lambda ls: [*ls[:4], journal_line, *ls[4:]])
    for implementation in (PYTHON, native()):
        code, text = report(implementation, "run-a", root, cas=False)[0]
        assert code == 2
        assert "  MISMATCH audit -- audit record at offset" in text
        assert "does not decode: a JournalRecord.v1 record on the audit topic" in text
