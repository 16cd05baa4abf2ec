"""Keys by purpose and lifetime, and producer signatures, as the verifier checks them.

Runs are written by the real scheduler core with a rotated key ring (two seal keys and two audit
keys with lifetimes, chosen per input timestamp) and signed submissions, then verified with full,
old-only and new-only trusted-keys files, and with records tampered the way an attacker holding
the journal (but not a producer's key) or a producer host holding only its own key could.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bernstein.commands.common import UsageError, trusted_from
from bernstein.consumers.core.model import AuditKeyVersion, Lifetime, SchedulerConfig, SealKey
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.producers.dataops import DataOpsActivity
from bernstein.schemas import codec
from bernstein.schemas.canonical import canonical_json, hmac_key_id, journal_entry_hash, journal_genesis, seal_signing_input
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import Ed25519Signer, KeyPurpose, KeyStatus, TrustedKey, TrustedKeys, Validity, init_keys
from bernstein.verifier.export import export_dump
from bernstein.verifier.keyuse import KeysInForce, KeyUse, key_problem
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_VERIFIED, RunReport
from bernstein.verifier.sources import StoredRecord
from tests.support.modality import ORDERS, STEPS, SUMMARY, submission
from tests.support.producers import NAMES, TEST_PRODUCERS, encode_signed_submission, producer_signer, producer_trust
from tests.support.verdicts import RUN, Built, C, LegacyCodec, Writer, assert_exit, json_of, kind_of, session_script, text_of

BASE = 1_700_000_000_000
"""The Writer stamps input offset n with BASE + n."""
ROTATED = BASE + 3
"""Both the seal and the audit key are rotated here: inputs 0..2 use the old keys, 3.. the new ones."""
PRODUCER = "verdicts@test"
OLD_SEAL = Ed25519Signer.from_seed(b"o" * 32)
NEW_SEAL = Ed25519Signer.from_seed(b"n" * 32)
OLD_AUDIT = b"old audit secret".ljust(32, b"!")
NEW_AUDIT = b"new audit secret".ljust(32, b"!")


def seal_trust(signer: Ed25519Signer, validity: Validity, status: KeyStatus = KeyStatus.ACTIVE) -> TrustedKey:
    return TrustedKey(signer.key_id, KeyPurpose.SEAL, signer.public_key_raw, validity, None, status)


def audit_trust(secret: bytes, validity: Validity, status: KeyStatus = KeyStatus.ACTIVE) -> TrustedKey:
    return TrustedKey(hmac_key_id(secret), KeyPurpose.AUDIT, secret, validity, None, status)


OLD_SEAL_T = seal_trust(OLD_SEAL, Validity(0, ROTATED), KeyStatus.RETIRED)
NEW_SEAL_T = seal_trust(NEW_SEAL, Validity(ROTATED))
OLD_AUDIT_T = audit_trust(OLD_AUDIT, Validity(0, ROTATED), KeyStatus.RETIRED)
NEW_AUDIT_T = audit_trust(NEW_AUDIT, Validity(ROTATED))


def trust(*keys: TrustedKey, producers: TrustedKeys | None = None) -> TrustedKeys:
    return TrustedKeys.of(keys).merged(producer_trust() if producers is None else producers)


FULL = trust(OLD_SEAL_T, NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T)


def rotated_run(w: Writer) -> None:
    """run-a: three stages under the old keys (a periodic seal after 2), then two more and the close under the new ones."""
    for i in range(5):
        w.stage(RUN, f"stage-{i}")
    w.close(RUN)


def build(tmp_path: Path, script: Callable[[Writer], None] = rotated_run) -> Built:
    keys = init_keys(tmp_path / "keys")  # unused by the ring below: the core signs with OLD_*/NEW_*
    store = DirBlobStore(tmp_path / "cas")
    writer = Writer(keys, store)
    config = SchedulerConfig(
        roles=writer.core.config.roles,
        signer=NEW_SEAL,
        audit_key=NEW_AUDIT,
        audit_key_id=hmac_key_id(NEW_AUDIT),
        seal_every=2,
        producers=TEST_PRODUCERS,
        seal_keys=(SealKey(OLD_SEAL, Lifetime(0, ROTATED)), SealKey(NEW_SEAL, Lifetime(ROTATED))),
        audit_keys=(
            AuditKeyVersion(OLD_AUDIT, hmac_key_id(OLD_AUDIT), Lifetime(0, ROTATED)),
            AuditKeyVersion(NEW_AUDIT, hmac_key_id(NEW_AUDIT), Lifetime(ROTATED)),
        ),
    )
    writer.core = SchedulerCore(config)
    writer.state = initial_state(config, 0)
    script(writer)
    return Built(writer.source, store, keys, FULL)


@pytest.fixture
def built(tmp_path: Path) -> Built:
    return build(tmp_path)


def journal(b: Built) -> list[StoredRecord]:
    return [r for r in b.records("journal") if r.key == RUN.encode()]


def seal_records(b: Built) -> list[tuple[dict[str, Any], StoredRecord]]:
    out = []
    for r in journal(b):
        if kind_of(r.value) == codec.SEAL_RECORD:
            out.append((dict(C.decode(r.value or b"").record), r))
    return out


def problem_of(report: RunReport, section: str) -> tuple[str, str, int | None, str, str]:
    verdict = getattr(report.header, section)
    assert verdict is not None and verdict.problem is not None, (section, report.header)
    p = verdict.problem
    return p.code, p.stream, p.offset, p.expected, p.recomputed


# ---------------------------------------------------------------------------
# a rotated run verifies with the full file, and names its keys
# ---------------------------------------------------------------------------


def test_a_run_across_a_rotation_verifies_with_every_key_and_names_them(built: Built) -> None:
    seals = seal_records(built)
    assert [s["key_id"] for s, _ in seals] == [OLD_SEAL.key_id, NEW_SEAL.key_id, NEW_SEAL.key_id]  # the core rotated
    report = built.verify()
    lines = assert_exit(report, EXIT_VERIFIED)
    keys = report.header.keys
    assert keys is not None
    assert keys.seal == tuple(sorted((OLD_SEAL.key_id, NEW_SEAL.key_id)))
    assert keys.checkpoint == (NEW_SEAL.key_id,)
    assert keys.audit == tuple(sorted((OLD_AUDIT_T.key_id, NEW_AUDIT_T.key_id)))
    signer = producer_signer(PRODUCER)
    closer = producer_signer("t")
    document = json_of(report)
    assert document["keys"]["producer"] == sorted(
        [
            {"key_id": signer.key_id, "producer": PRODUCER, "records": 5},
            {"key_id": closer.key_id, "producer": "t", "records": 1},
        ],
        key=lambda k: str(k["key_id"]),
    )
    assert document["producers"]["ok"] is True
    assert (document["producers"]["signed"], document["producers"]["legacy"]) == (6, 0)
    (line,) = [line for line in lines if line.startswith("  OK producers")]
    producer_keys = ", ".join(f"{k['key_id']} ({k['producer']})" for k in document["keys"]["producer"])
    assert line == (
        "  OK producers (6 producer signatures verified with pinned producer keys; keys: "
        f"seal {', '.join(keys.seal)}; checkpoint {NEW_SEAL.key_id}; audit {', '.join(keys.audit)}; "
        f"producer {producer_keys})"
    )


# ---------------------------------------------------------------------------
# only the old or only the new key after a rotation
# ---------------------------------------------------------------------------


def test_only_the_old_seal_key_names_the_first_seal_of_the_new_one(built: Built) -> None:
    report = built.verify(trusted=trust(OLD_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T))
    assert_exit(report, EXIT_MISMATCH)
    (_, first_new) = seal_records(built)[1]
    assert problem_of(report, "seal") == (
        "SEAL_KEY_NOT_PINNED",
        "journal",
        first_new.offset,
        OLD_SEAL.key_id,
        NEW_SEAL.key_id,
    )
    audit = report.header.audit
    assert audit is not None and audit.problem is not None
    assert (audit.problem.code, audit.problem.stream, audit.problem.recomputed) == (
        "CHECKPOINT_KEY_NOT_PINNED",
        "checkpoints",
        NEW_SEAL.key_id,
    )


def test_only_the_new_seal_key_names_the_seal_of_the_old_one(built: Built) -> None:
    report = built.verify(trusted=trust(NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T))
    assert_exit(report, EXIT_MISMATCH)
    (_, first_old) = seal_records(built)[0]
    assert problem_of(report, "seal") == (
        "SEAL_KEY_NOT_PINNED",
        "journal",
        first_old.offset,
        NEW_SEAL.key_id,
        OLD_SEAL.key_id,
    )
    assert report.header.audit is not None and report.header.audit.ok  # the checkpoint is the new key's


def audit_key_ids(b: Built) -> list[str]:
    return [str(C.decode(r.value or b"").record["key_id"]) for r in b.records("audit")]


def test_only_the_old_audit_key_names_the_first_record_of_the_new_one(built: Built) -> None:
    ids = audit_key_ids(built)
    first_new = ids.index(NEW_AUDIT_T.key_id)
    assert set(ids[:first_new]) == {OLD_AUDIT_T.key_id} and first_new > 0
    report = built.verify(trusted=trust(OLD_SEAL_T, NEW_SEAL_T, OLD_AUDIT_T))
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "audit") == (
        "AUDIT_KEY_NOT_PINNED",
        "audit",
        built.records("audit")[first_new].offset,
        OLD_AUDIT_T.key_id,
        NEW_AUDIT_T.key_id,
    )


def test_only_the_new_audit_key_names_the_first_record_of_the_chain(built: Built) -> None:
    report = built.verify(trusted=trust(OLD_SEAL_T, NEW_SEAL_T, NEW_AUDIT_T))
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "audit") == (
        "AUDIT_KEY_NOT_PINNED",
        "audit",
        built.records("audit")[0].offset,
        NEW_AUDIT_T.key_id,
        OLD_AUDIT_T.key_id,
    )


# ---------------------------------------------------------------------------
# lifetimes and purposes
# ---------------------------------------------------------------------------


def test_a_seal_key_whose_lifetime_ends_before_the_seal_is_outside_its_validity(built: Built) -> None:
    (seal, record), *_ = seal_records(built)
    sealed_at = C.decode(seal["payload"]).record["sealed_at_ms"]
    assert sealed_at == BASE + 1
    short = seal_trust(OLD_SEAL, Validity(0, BASE + 1), KeyStatus.REVOKED)  # revoked just before it
    report = built.verify(trusted=trust(short, NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T))
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "seal") == ("KEY_OUTSIDE_VALIDITY", "journal", record.offset, f"[0, {BASE + 1})", str(BASE + 1))


def test_an_audit_key_whose_lifetime_ends_before_a_record_is_outside_its_validity(built: Built) -> None:
    short = audit_trust(OLD_AUDIT, Validity(0, BASE + 1), KeyStatus.REVOKED)
    report = built.verify(trusted=trust(OLD_SEAL_T, NEW_SEAL_T, short, NEW_AUDIT_T))
    assert_exit(report, EXIT_MISMATCH)
    first_late = next(r for r in built.records("audit") if r.timestamp_ms >= BASE + 1)
    assert problem_of(report, "audit") == (
        "KEY_OUTSIDE_VALIDITY",
        "audit",
        first_late.offset,
        f"[0, {BASE + 1})",
        str(first_late.timestamp_ms),
    )


def test_a_producer_key_whose_lifetime_ends_before_the_entry_is_outside_its_validity(built: Built) -> None:
    signer = producer_signer(PRODUCER)
    revoked = TrustedKey(signer.key_id, KeyPurpose.PRODUCER, signer.public_key_raw, Validity(0, BASE + 2), PRODUCER)
    others = producer_trust(*(n for n in ("t",)))
    report = built.verify(
        trusted=trust(OLD_SEAL_T, NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T, producers=others.merged(TrustedKeys.of([revoked])))
    )
    assert_exit(report, EXIT_MISMATCH)
    entry_2 = [r for r in journal(built) if kind_of(r.value) == codec.JOURNAL_RECORD][2]
    assert entry_2.timestamp_ms == BASE + 2
    assert problem_of(report, "producers") == (
        "KEY_OUTSIDE_VALIDITY",
        "journal",
        entry_2.offset,
        f"[0, {BASE + 2})",
        str(BASE + 2),
    )


def resigned_seal(record: StoredRecord, signer: Ed25519Signer) -> StoredRecord:
    envelope = C.decode(record.value or b"").record
    payload = envelope["payload"]
    value = C.encode(
        codec.SEAL_RECORD, {"payload": payload, "key_id": signer.key_id, "signature": signer.sign(seal_signing_input(payload))}
    )
    return replace(record, value=value)


def test_a_seal_signed_with_a_producer_key_is_a_purpose_mismatch(built: Built) -> None:
    """A producer host holds its own key only: a seal it signs names a pinned key, of the wrong purpose."""
    (_, record), *_ = seal_records(built)
    forger = producer_signer(PRODUCER)
    source = built.source.replaced("journal", [resigned_seal(r, forger) if r is record else r for r in built.records("journal")])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "seal") == ("KEY_PURPOSE_MISMATCH", "journal", record.offset, "seal", "producer")


def test_a_submission_signed_by_a_key_pinned_as_a_seal_key_is_a_purpose_mismatch(built: Built) -> None:
    signer = producer_signer(PRODUCER)
    as_seal = TrustedKey(signer.key_id, KeyPurpose.SEAL, signer.public_key_raw)
    report = built.verify(
        trusted=trust(
            OLD_SEAL_T, NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T, producers=producer_trust("t").merged(TrustedKeys.of([as_seal]))
        )
    )
    assert_exit(report, EXIT_MISMATCH)
    first = [r for r in journal(built) if kind_of(r.value) == codec.JOURNAL_RECORD][0]
    assert problem_of(report, "producers") == ("KEY_PURPOSE_MISMATCH", "journal", first.offset, "producer", "seal")


def test_a_producer_key_registered_to_another_producer_is_a_name_mismatch(built: Built) -> None:
    signer = producer_signer(PRODUCER)
    elsewhere = TrustedKey(signer.key_id, KeyPurpose.PRODUCER, signer.public_key_raw, producer="someone-else")
    report = built.verify(
        trusted=trust(
            OLD_SEAL_T, NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T, producers=producer_trust("t").merged(TrustedKeys.of([elsewhere]))
        )
    )
    assert_exit(report, EXIT_MISMATCH)
    first = [r for r in journal(built) if kind_of(r.value) == codec.JOURNAL_RECORD][0]
    assert problem_of(report, "producers") == ("PRODUCER_NAME_MISMATCH", "journal", first.offset, "someone-else", PRODUCER)


def test_a_producer_key_that_is_not_pinned_is_named(built: Built) -> None:
    report = built.verify(trusted=trust(OLD_SEAL_T, NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T, producers=producer_trust("t")))
    assert_exit(report, EXIT_MISMATCH)
    first = [r for r in journal(built) if kind_of(r.value) == codec.JOURNAL_RECORD][0]
    code, stream, offset, _, recomputed = problem_of(report, "producers")
    assert (code, stream, offset, recomputed) == (
        "PRODUCER_KEY_NOT_PINNED",
        "journal",
        first.offset,
        producer_signer(PRODUCER).key_id,
    )
    assert report.header.producers is not None and report.header.producers.further_problems == 4  # the other 4 entries


# ---------------------------------------------------------------------------
# tampered bytes
# ---------------------------------------------------------------------------


def test_a_flipped_byte_of_a_producer_signature_does_not_verify(built: Built) -> None:
    entries = [r for r in journal(built) if kind_of(r.value) == codec.JOURNAL_RECORD]
    target = entries[1]
    payload = C.decode(target.value or b"").record["payload"]
    signature = C.decode(payload).record["producer_signature"]
    value = target.value or b""
    at = value.index(signature) + 10
    flipped = value[:at] + bytes([value[at] ^ 0x01]) + value[at + 1 :]
    source = built.source.replaced("journal", [replace(r, value=flipped) if r is target else r for r in built.records("journal")])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "producers")[:3] == ("PRODUCER_SIGNATURE_INVALID", "journal", target.offset)


def rechained(records: list[StoredRecord], seq: int, **changes: Any) -> list[StoredRecord]:
    """The run's journal with entry ``seq`` edited and every later entry re-linked and re-hashed: what an attacker
    holding the journal (but no producer key) can make of it; the hash chain verifies again."""
    head = journal_genesis(RUN)
    out = []
    for r in records:
        if r.key != RUN.encode() or kind_of(r.value) != codec.JOURNAL_RECORD:
            out.append(r)
            continue
        decoded = C.decode(C.decode(r.value or b"").record["payload"])
        entry = dict(decoded.record)
        if entry["seq"] == seq:
            entry.update(changes)
        entry["prev_hash"] = head
        payload = C.encode(decoded.schema.name, entry)
        head = journal_entry_hash(payload)
        out.append(replace(r, value=C.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": head})))
    return out


def test_an_edited_signed_field_with_the_chain_recomputed_is_named_by_the_producer_signature(built: Built) -> None:
    source = built.source.replaced("journal", rechained(built.records("journal"), 3, terminal_state="failed"))
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert report.header.chain is not None and report.header.chain.ok  # the chain itself was recomputed
    entry_3 = [r for r in journal(built) if kind_of(r.value) == codec.JOURNAL_RECORD][3]
    assert problem_of(report, "producers")[:3] == ("PRODUCER_SIGNATURE_INVALID", "journal", entry_3.offset)
    _, lines = text_of(report)
    assert any(line.startswith("  MISMATCH producers -- journal entry seq 3 at offset") for line in lines)


def test_an_edited_run_close_in_the_final_seal_is_named(built: Built) -> None:
    """An insider holding the seal key re-signs a final seal whose closed_by names another submission id."""
    (seal, record) = seal_records(built)[-1]
    payload = dict(C.decode(seal["payload"]).record)
    assert payload["final"] and payload["closed_by"] is not None
    payload["closed_by"] = {**payload["closed_by"], "submission_id": "close-forged"}
    body = C.encode(codec.RUN_SEAL_V2, payload)
    value = C.encode(
        codec.SEAL_RECORD, {"payload": body, "key_id": NEW_SEAL.key_id, "signature": NEW_SEAL.sign(seal_signing_input(body))}
    )
    source = built.source.replaced("journal", [replace(r, value=value) if r is record else r for r in built.records("journal")])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "producers")[:3] == ("PRODUCER_SIGNATURE_INVALID", "journal", record.offset)


# ---------------------------------------------------------------------------
# old trust files
# ---------------------------------------------------------------------------


def test_a_v1_trust_file_still_verifies_a_run_without_lifetimes(built: Built, tmp_path: Path) -> None:
    """A v1 file: Ed25519 keys of any purpose, HMAC keys for audit, nothing expires."""
    ed25519 = {s.key_id: s.public_key_raw for s in (OLD_SEAL, NEW_SEAL, producer_signer(PRODUCER), producer_signer("t"))}
    hmac = {hmac_key_id(s): s for s in (OLD_AUDIT, NEW_AUDIT)}
    path = tmp_path / "trusted-v1.json"
    path.write_text(
        json.dumps(
            {
                "format": "bernstein.trusted-keys/v1",
                "ed25519": [{"key_id": k, "public_key": v.hex()} for k, v in ed25519.items()],
                "hmac": [{"key_id": k, "secret": v.hex()} for k, v in hmac.items()],
            }
        )
    )
    loaded = TrustedKeys.load(path)
    assert {e.purpose for e in loaded.entries.values()} == {KeyPurpose.ANY, KeyPurpose.AUDIT}
    assert_exit(built.verify(trusted=loaded), EXIT_VERIFIED)


# ---------------------------------------------------------------------------
# entries that predate producer signatures
# ---------------------------------------------------------------------------


def legacy_then_signed(w: Writer) -> None:
    """run-a: two stages and a periodic seal by an older scheduler (v1 and v2 entries), then signed ones, closed by
    the older scheduler (RunSeal.v1)."""
    core = w.core
    core._codec = LegacyCodec(codec.JOURNAL_ENTRY)  # type: ignore[assignment]
    w.stage(RUN, "stage-0")
    core._codec = LegacyCodec(codec.JOURNAL_ENTRY_V2)  # type: ignore[assignment]
    w.stage(RUN, "stage-1")
    core._codec = codec.default_codec()
    w.stage(RUN, "stage-2")
    w.stage(RUN, "stage-3")
    core._codec = LegacyCodec()  # type: ignore[assignment]
    w.close(RUN)


def test_entries_that_predate_producer_signatures_are_counted_not_reported(tmp_path: Path) -> None:
    b = build(tmp_path, legacy_then_signed)
    payloads = [C.decode(r.value or b"").record["payload"] for r in journal(b)]
    layouts = [C.schema_of(p).name for p in payloads]
    assert layouts == [
        codec.JOURNAL_ENTRY,
        codec.JOURNAL_ENTRY_V2,
        codec.RUN_SEAL,
        codec.JOURNAL_ENTRY_V3,
        codec.JOURNAL_ENTRY_V3,
        codec.RUN_SEAL_V2,
        codec.RUN_SEAL,
    ]
    report = b.verify()
    lines = assert_exit(report, EXIT_VERIFIED)
    producers = report.header.producers
    assert producers is not None and (producers.signed, producers.legacy) == (2, 3)  # two entries and the close
    (line,) = [line for line in lines if line.startswith("  OK producers")]
    assert line.startswith(
        "  OK producers (2 producer signatures verified with pinned producer keys, 3 entries predate producer signatures; keys: "
    )
    assert json_of(report)["producers"]["legacy"] == 3


# ---------------------------------------------------------------------------
# data/ops receipts and computer-use lineage: producer keys too
# ---------------------------------------------------------------------------


def ops_stage(w: Writer, stage_id: str, receipt_signer: Ed25519Signer) -> None:
    """An ops stage whose receipt (plan, input and output signatures) is signed by ``receipt_signer``."""
    activity = DataOpsActivity("ops", RUN, stage_id, store=w.store, signer=receipt_signer)
    activity.add_input("orders.csv", ORDERS)
    activity.plan(STEPS)
    activity.add_output("summary.csv", SUMMARY)
    result, receipt = activity.finish()
    document = receipt.document()
    w.store.put(canonical_json(document))
    record = submission(
        document, [o.to_record() for o in result.observations], kind="ops", role="operator", run_id=RUN, stage_id=stage_id
    )
    record["producer"] = {"id": PRODUCER, "sdk": "test"}
    w.feed(RUN, encode_signed_submission(record))


RECEIPTS = Ed25519Signer.from_seed(b"r" * 32)
"""A second producer key of PRODUCER, used for its receipts."""


def ops_run(signer: Ed25519Signer) -> Callable[[Writer], None]:
    def script(w: Writer) -> None:
        w.core = SchedulerCore(replace(w.core.config, roles={**w.core.config.roles, "operator": "ops"}))
        w.stage(RUN, "stage-0")
        ops_stage(w, "ops-0", signer)
        w.close(RUN)

    return script


def receipt_key(validity: Validity = Validity(), producer: str = PRODUCER) -> TrustedKeys:
    return TrustedKeys.of([TrustedKey(RECEIPTS.key_id, KeyPurpose.PRODUCER, RECEIPTS.public_key_raw, validity, producer)])


def test_a_receipt_signed_by_a_pinned_producer_key_of_its_producer_verifies(tmp_path: Path) -> None:
    b = build(tmp_path, ops_run(RECEIPTS))
    report = b.verify(trusted=FULL.merged(receipt_key()))
    assert_exit(report, EXIT_VERIFIED)
    assert report.stages[1].kind == "ops" and report.stages[1].data["signer_key_id"] == RECEIPTS.key_id


def test_a_receipt_key_registered_to_another_producer_is_a_stage_problem(tmp_path: Path) -> None:
    b = build(tmp_path, ops_run(RECEIPTS))
    report = b.verify(trusted=FULL.merged(receipt_key(producer="someone-else")))
    assert_exit(report, EXIT_MISMATCH)
    ops = report.stages[1]
    assert [(p.code, p.stream, p.expected, p.recomputed) for p in ops.findings] == [
        ("PRODUCER_NAME_MISMATCH", "journal", "someone-else", PRODUCER)
    ]
    assert ops.reason == ops.findings[0].message


def test_a_receipt_key_out_of_its_lifetime_is_a_stage_problem(tmp_path: Path) -> None:
    b = build(tmp_path, ops_run(RECEIPTS))
    report = b.verify(trusted=FULL.merged(receipt_key(Validity(0, BASE + 1))))
    assert_exit(report, EXIT_MISMATCH)
    (finding,) = report.stages[1].findings
    assert (finding.code, finding.expected, finding.recomputed, finding.seq) == (
        "KEY_OUTSIDE_VALIDITY",
        f"[0, {BASE + 1})",
        str(BASE + 1),
        1,
    )


def test_a_receipt_signed_with_a_seal_key_is_a_purpose_mismatch(tmp_path: Path) -> None:
    b = build(tmp_path, ops_run(NEW_SEAL))  # the scheduler's own seal key, pinned as such
    report = b.verify()
    assert_exit(report, EXIT_MISMATCH)
    (finding,) = report.stages[1].findings
    assert (finding.code, finding.expected, finding.recomputed) == ("KEY_PURPOSE_MISMATCH", "producer", "seal")


NAVIGATOR = "navigator@test"


def session_run(tmp_path: Path) -> Built:
    script, _ = session_script(init_keys(tmp_path / "session-keys"), tmp_path)
    return build(tmp_path, script)


def action_records(b: Built) -> list[StoredRecord]:
    return [
        r
        for r in journal(b)
        if kind_of(r.value) == codec.JOURNAL_RECORD
        and C.schema_of(C.decode(r.value or b"").record["payload"]).name in codec.COMPUTER_USE_ENTRIES
    ]


def navigator_key(
    validity: Validity = Validity(), producer: str | None = NAVIGATOR, purpose: KeyPurpose = KeyPurpose.PRODUCER
) -> TrustedKeys:
    signer = producer_signer(NAVIGATOR)
    others = producer_trust(*(n for n in NAMES if n != NAVIGATOR))
    return others.merged(TrustedKeys.of([TrustedKey(signer.key_id, purpose, signer.public_key_raw, validity, producer)]))


def test_lineage_signatures_count_as_producer_signatures(tmp_path: Path) -> None:
    b = session_run(tmp_path)
    assert len(action_records(b)) == 3
    report = b.verify()
    assert_exit(report, EXIT_VERIFIED)
    assert report.header.keys is not None
    navigator = [k for k in report.header.keys.producer if k.producer == NAVIGATOR]
    assert [(k.key_id, k.records) for k in navigator] == [(producer_signer(NAVIGATOR).key_id, 3)]


def test_a_lineage_key_out_of_its_lifetime_is_named(tmp_path: Path) -> None:
    b = session_run(tmp_path)
    second = action_records(b)[1]
    report = b.verify(
        trusted=trust(OLD_SEAL_T, NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T, producers=navigator_key(Validity(0, second.timestamp_ms)))
    )
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "producers") == (
        "KEY_OUTSIDE_VALIDITY",
        "journal",
        second.offset,
        f"[0, {second.timestamp_ms})",
        str(second.timestamp_ms),
    )


def test_a_lineage_key_of_another_producer_or_purpose_is_named(tmp_path: Path) -> None:
    b = session_run(tmp_path)
    first = action_records(b)[0]
    report = b.verify(
        trusted=trust(OLD_SEAL_T, NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T, producers=navigator_key(producer="someone-else"))
    )
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "producers") == ("PRODUCER_NAME_MISMATCH", "journal", first.offset, "someone-else", NAVIGATOR)
    session = report.stages[1]  # the replay itself refuses the key too (as `bernstein browser replay` does)
    assert session.stage_id == "browser-0" and not session.ok
    assert "registered to 'someone-else'" in session.reason and "producer_name_mismatch" in str(session.data)
    report = b.verify(
        trusted=trust(
            OLD_SEAL_T, NEW_SEAL_T, OLD_AUDIT_T, NEW_AUDIT_T, producers=navigator_key(producer=None, purpose=KeyPurpose.SEAL)
        )
    )
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "producers") == ("KEY_PURPOSE_MISMATCH", "journal", first.offset, "producer", "seal")
    assert "pinned as a seal key, not a producer key" in report.stages[1].reason


# ---------------------------------------------------------------------------
# the CLI's default trust: the local ring and the manifest's producers
# ---------------------------------------------------------------------------


def test_without_a_trust_file_the_local_ring_and_the_manifests_producers_are_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = init_keys(tmp_path / "keys")
    signer = producer_signer(PRODUCER)
    manifest = tmp_path / "roles.toml"
    manifest.write_text(
        '[[roles]]\nrole = "developer"\n\n'
        f'[[producers]]\nname = "{PRODUCER}"\nroles = ["developer"]\n  [[producers.keys]]\n'
        f'  public_key = "{signer.public_key_raw.hex()}"\n  valid_from_ms = 5\n  valid_until_ms = 9\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)  # no config/roles.toml here
    monkeypatch.delenv("BERNSTEIN_ROLES", raising=False)
    assert trusted_from(None, tmp_path / "keys").entry(signer.key_id) is None
    for trusted in (trusted_from(None, tmp_path / "keys", manifest), _with_env(monkeypatch, manifest, tmp_path / "keys")):
        pinned = trusted.entry(signer.key_id)
        assert pinned is not None
        assert (pinned.purpose, pinned.producer, pinned.validity) == (KeyPurpose.PRODUCER, PRODUCER, Validity(5, 9))
        assert trusted.entry(keys.signer.key_id) is not None and trusted.entry(keys.audit.key_id) is not None
    broken = tmp_path / "broken.toml"
    broken.write_text("[[producers]]\nname = 1\n", encoding="utf-8")
    with pytest.raises(UsageError, match="cannot read the producers to trust from"):
        trusted_from(None, tmp_path / "keys", broken)


def _with_env(monkeypatch: pytest.MonkeyPatch, manifest: Path, keys_dir: Path) -> TrustedKeys:
    monkeypatch.setenv("BERNSTEIN_ROLES", str(manifest))
    return trusted_from(None, keys_dir)


def test_a_checkpoint_key_out_of_its_lifetime_is_named(built: Built) -> None:
    """The new seal key pinned as if revoked at the close: the final seal and the checkpoint after it are named."""
    revoked = seal_trust(NEW_SEAL, Validity(ROTATED, BASE + 5), KeyStatus.REVOKED)
    report = built.verify(trusted=trust(OLD_SEAL_T, revoked, OLD_AUDIT_T, NEW_AUDIT_T))
    assert_exit(report, EXIT_MISMATCH)
    (_, final) = seal_records(built)[-1]
    assert problem_of(report, "seal") == (
        "KEY_OUTSIDE_VALIDITY",
        "journal",
        final.offset,
        f"[{ROTATED}, {BASE + 5})",
        str(BASE + 5),
    )
    (checkpoint,) = built.records("checkpoints")
    assert problem_of(report, "audit") == (
        "KEY_OUTSIDE_VALIDITY",
        "checkpoints",
        checkpoint.offset,
        f"[{ROTATED}, {BASE + 5})",
        str(BASE + 5),
    )


def test_an_audit_record_naming_a_producer_key_is_a_purpose_mismatch(built: Built) -> None:
    """The audit record's key id (covered by its AuditRecord.v2 MAC) replaced by a pinned producer key's id."""
    first = built.records("audit")[0]
    envelope = dict(C.decode(first.value or b"").record)
    envelope["key_id"] = producer_signer(PRODUCER).key_id
    forged = replace(first, value=C.encode(codec.AUDIT_RECORD_V2, envelope))
    source = built.source.replaced("audit", [forged, *built.records("audit")[1:]])
    report = built.verify(source)
    assert_exit(report, EXIT_MISMATCH)
    assert problem_of(report, "audit") == ("KEY_PURPOSE_MISMATCH", "audit", first.offset, "audit", "producer")


def test_an_export_carries_the_public_keys_with_their_purposes_and_lifetimes_and_no_audit_secret(
    built: Built, tmp_path: Path
) -> None:
    export_dump(built.source, tmp_path / "dump", cas=built.store, runs=[RUN], trusted=FULL)
    exported = TrustedKeys.load(tmp_path / "dump" / "keys" / "public-keys.json")
    assert exported.hmac == {}
    assert exported.entry(OLD_SEAL.key_id) == OLD_SEAL_T and exported.entry(NEW_SEAL.key_id) == NEW_SEAL_T
    pinned = exported.entry(producer_signer(PRODUCER).key_id)
    assert pinned is not None and (pinned.purpose, pinned.producer) == (KeyPurpose.PRODUCER, PRODUCER)


def test_keys_in_force_decide_as_key_problem_does() -> None:
    """The walks' per-key cache (``KeysInForce``) answers as ``key_problem`` for every pin, use, owner and time."""
    window = Validity(1_000, 2_000)
    producer_key = Ed25519Signer.from_seed(b"\x31" * 32)
    keys = TrustedKeys.of(
        [
            seal_trust(Ed25519Signer.from_seed(b"\x30" * 32), window),
            audit_trust(b"k" * 32, window, KeyStatus.RETIRED),
            TrustedKey(producer_key.key_id, KeyPurpose.PRODUCER, producer_key.public_key_raw, window, producer="ada"),
            TrustedKey(
                Ed25519Signer.from_seed(b"\x32" * 32).key_id, KeyPurpose.ANY, Ed25519Signer.from_seed(b"\x32" * 32).public_key_raw
            ),
        ]
    )
    ids = [*keys.entries, "not-pinned"]
    for use in KeyUse:
        cache = KeysInForce(keys, use)
        for key_id in ids:
            for producer in (None, "ada", "bob"):
                for timestamp in (0, 999, 1_000, 1_999, 2_000, 5_000):
                    entry = keys.entry(key_id)
                    expected = (
                        entry is not None
                        and entry.is_hmac == (use == KeyUse.AUDIT)
                        and key_problem(entry, use, "r", timestamp, producer=producer) is None
                    )
                    assert cache.fits(key_id, timestamp, producer) is expected, (use, key_id, producer, timestamp)
                    assert cache.fits(key_id, timestamp, producer) is expected  # and again, from the cache
