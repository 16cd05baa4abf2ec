"""The named tamper suite: each case changes real bytes of a pristine dump and pins the exact verdict.

One realistic run (``tests.support.tamper.build_realistic_run``: six coding stages of
run-main with file, screenshot and page observations, an interleaved run-side
on the same partition, a refused redundant stage, periodic seals every 3
entries and a final seal) is exported once; every case copies the dump,
changes bytes the way an attacker with write access to the files would, runs
``bernstein activity verify run-main --from <dump> --json`` offline (no
BERNSTEIN_* endpoint set) and asserts:

- the exit code (2 for every tamper; 5 for the one tamper that leaves an
  open-looking run, never 0; 0 only for the untouched dump and for a swapped
  informational key file);
- the exact Problem of each header check (chain, seal, audit, dump): code,
  journal or audit seq, Kafka offset, expected and recomputed value, and how
  many further problems it hides;
- the exact verdict of every stage (which stage fails and with which reason;
  all others OK);
- the same verdicts in the human report, line by line.

Expected values are computed from the pristine dump (offsets and hashes differ
from session to session), never copied from the verifier's output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas import codec
from bernstein.schemas.canonical import audit_record_mac, evidence_set_hash, journal_entry_hash, sha256_digest
from bernstein.substrate.keys import Ed25519Signer, TrustedKeys
from bernstein.verifier.render import escape
from tests.support import tamper as kit
from tests.support.producers import producer_trust

pytestmark = pytest.mark.integration

JOURNAL_ENTRY_FAILS = "journal entry seq {seq} at offset {offset} does not recompute to its stored entry hash (see chain): its fields are not the journalled ones"


# ---------------------------------------------------------------------------
# expected verdicts
# ---------------------------------------------------------------------------


def problem(
    code: str,
    *,
    journal: int | None = None,
    audit: int | None = None,
    checkpoints: int | None = None,
    seq: int | None = None,
    audit_seq: int | None = None,
    expected: str = "",
    recomputed: str = "",
) -> dict[str, Any]:
    """A Problem as ``--json`` prints it, without its message (fields that are unset are absent).

    ``journal`` / ``audit`` / ``checkpoints``: the offset of the record the problem names, in that stream.
    """
    assert [journal, audit, checkpoints].count(None) >= 2
    out: dict[str, Any] = {"code": code}
    if journal is not None:
        out.update(stream="journal", offset=journal)
    if audit is not None:
        out.update(stream="audit", offset=audit)
    if checkpoints is not None:
        out.update(stream="checkpoints", offset=checkpoints)
    if seq is not None:
        out["seq"] = seq
    if audit_seq is not None:
        out["audit_seq"] = audit_seq
    if expected:
        out["expected"] = expected
    if recomputed:
        out["recomputed"] = recomputed
    return out


@dataclass
class Section:
    """The expected verdict of one header check."""

    problem: dict[str, Any]
    further: int = 0
    message_has: tuple[str, ...] = ()
    """Substrings the human message must contain (the named step, in words)."""


@dataclass
class Expect:
    exit_code: int = 2
    chain: Section | None = None
    seal: Section | None = None
    audit: Section | None = None
    producers: Section | None = None
    """Producer signatures (JournalEntry.v3, a final seal's closed_by)."""
    dump_problems: list[dict[str, str]] = field(default_factory=list)
    """Exact, including messages."""
    stages: dict[str, str] = field(default_factory=dict)
    """stage id -> exact MISMATCH reason; every other stage must be OK with its evidence reattached."""
    stage_order: tuple[str, ...] = kit.MAIN_STAGES
    header_found: bool = True
    sections_present: bool = True
    """False when the verifier stops before chain/seal/audit (no journal records at all)."""
    stages_unchecked: str = ""
    """When set, every stage not in ``stages`` is NOT CHECKED with this reason (instead of OK)."""
    unchecked: list[str] = field(default_factory=list)
    """Codes of the checks that could not be run (exact, in order)."""
    open: bool = False


def _final_seal_disagrees(v: kit.DumpView, seal: kit.JournalLine, old: bytes, new: bytes) -> Section:
    """The audit mirror of run-main's final seal, edited from ``old`` to ``new``, no longer hashes to it."""
    return Section(
        problem(
            "AUDIT_DISAGREES",
            seq=len(kit.MAIN_STAGES),
            audit_seq=v.audit_seal(seal).entry["seq"],
            journal=seal.offset,
            expected=sha256_digest(old),
            recomputed=sha256_digest(new),
        )
    )


Case = Callable[[Path, kit.DumpView, kit.RealisticRun], Expect]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


def edit_journal_value(dump: Path, index: int, change: Callable[[bytes], bytes]) -> tuple[bytes, bytes]:
    """Apply ``change`` to the decoded value of journal line ``index``; (old value, new value)."""
    path = kit.topic_file(dump, "journal")
    items = kit.load_lines(path)
    old = kit.value_of(items[index])
    new = change(old)
    assert new != old and len(new) == len(old)
    kit.set_value(items[index], new)
    kit.save_lines(path, items)
    return old, new


def payload_of(value: bytes) -> bytes:
    return bytes(codec.decode(value).record["payload"])


def flip_inside(value: bytes, needle: str, at: int) -> bytes:
    """Change the character ``at`` positions into the only occurrence of ``needle`` in ``value``."""
    assert value.count(needle.encode()) == 1, needle
    flipped, old, new = kit.flip_char(value, value.index(needle.encode()) + at)
    assert old != new
    return flipped


def entry_fields_changed(v: kit.DumpView, line: kit.JournalLine, new: bytes, *, stage: str, message: str, **more: Any) -> Expect:
    """Journal entry ``line`` now holds the value ``new`` (payload fields edited, stored entry hash kept): the chain
    names that entry's hash mismatch once and ``stage`` (the id the entry now carries) fails for it. Every field
    edited here is one the producer signed (JournalEntry.v3), so its signature no longer verifies either."""
    seq = line.record["seq"]
    more.setdefault("producers", Section(problem("PRODUCER_SIGNATURE_INVALID", journal=line.offset, seq=seq)))
    return Expect(
        chain=Section(
            problem(
                "ENTRY_HASH_MISMATCH",
                seq=seq,
                journal=line.offset,
                expected=v.entry_hash(seq),
                recomputed=journal_entry_hash(payload_of(new)),
            ),
            message_has=(message,),
        ),
        stages={stage: JOURNAL_ENTRY_FAILS.format(seq=seq, offset=line.offset)},
        **more,
    )


# ---------------------------------------------------------------------------
# the cases
# ---------------------------------------------------------------------------


@case
def flip_journal_value_byte(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """One hex digit of an observation content hash inside stage-1's journalled entry."""
    line = v.entry(1)
    observation_hash = line.record["observations"][0]["content_hash"]
    _, new = edit_journal_value(dump, line.index, lambda value: flip_inside(value, observation_hash, 7 + 30))
    tampered = codec.decode(payload_of(new)).record
    assert tampered["observations"][0]["content_hash"] != observation_hash
    assert tampered["stage_id"] == "stage-1"
    return entry_fields_changed(v, line, new, stage="stage-1", message=f"seq 1 at offset {line.offset}: entry hash mismatch")


@case
def flip_journal_stage_id(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """stage-4's stage_id field (Avro string, length byte 0x0e) becomes stage-7."""
    line = v.entry(4)
    _, new = edit_journal_value(dump, line.index, lambda value: kit.replace_once(value, b"\x0estage-4", b"\x0estage-7"))
    # The forged id is what the entry now says; the stage is reported under it, as a mismatch.
    return entry_fields_changed(
        v,
        line,
        new,
        stage="stage-7",
        message=f"seq 4 at offset {line.offset}",
        stage_order=("stage-0", "stage-1", "stage-2", "stage-3", "stage-7", "stage-5"),
    )


@case
def flip_journal_entry_hash_field(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """The stored entry_hash of seq 2 (the envelope, not the payload) loses one hex digit."""
    line = v.entry(2)
    stored = v.entry_hash(2)
    flipped, _, _ = kit.flip_char(stored.encode(), 7 + 12)
    edit_journal_value(dump, line.index, lambda value: kit.replace_once(value, stored.encode(), flipped))
    return Expect(
        # One chain problem: seq 3 and the seal still link to the hash the payload recomputes to,
        # and the audit mirrored that same hash.
        chain=Section(
            problem("ENTRY_HASH_MISMATCH", seq=2, journal=line.offset, expected=flipped.decode(), recomputed=stored),
            message_has=(f"seq 2 at offset {line.offset}",),
        ),
        stages={"stage-2": JOURNAL_ENTRY_FAILS.format(seq=2, offset=line.offset)},
    )


@case
def edit_observation_ref(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """The page observation's ref (provenance only, not in the evidence set) points elsewhere."""
    line = v.entry(3)
    _, new = edit_journal_value(dump, line.index, lambda value: kit.replace_once(value, b"docs.example.org", b"docs.evilcorp.io"))
    tampered = codec.decode(payload_of(new)).record
    assert "https://docs.evilcorp.io/api/handlers" in [o["ref"] for o in tampered["observations"]]
    # The ref is not hashed into the evidence set: only the chain can catch this edit.
    assert evidence_set_hash(o["content_hash"] for o in tampered["observations"]) == tampered["evidence_set_hash"]
    return entry_fields_changed(v, line, new, stage="stage-3", message=f"seq 3 at offset {line.offset}")


@case
def flip_stored_page_byte(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    page = v.observation(kit.PAGE_STAGE, kind="page")
    path = kit.blob_path(dump, page["content_hash"])
    data = path.read_bytes()
    changed = kit.replace_once(data, b"API docs", b"APT docs")
    path.write_bytes(changed)
    return Expect(
        stages={
            kit.PAGE_STAGE: f"content hash mismatch reattaching '{page['ref']}' (pinned '{page['content_hash']}', recomputed '{sha256_digest(changed)}')"
        }
    )


@case
def flip_screenshot_byte(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    shot = v.observation(kit.SCREENSHOT_STAGE, kind="screenshot", ref_suffix="after.png")
    path = kit.blob_path(dump, shot["content_hash"])
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    changed = kit.xor_byte(data, 4096, 0x80)
    path.write_bytes(changed)
    return Expect(
        stages={
            kit.SCREENSHOT_STAGE: f"content hash mismatch reattaching '{shot['ref']}' (pinned '{shot['content_hash']}', recomputed '{sha256_digest(changed)}')"
        }
    )


@case
def flip_artifact_byte(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    artifact = v.stage("stage-5").record["artifact_hash"]
    path = kit.blob_path(dump, artifact)
    changed = kit.xor_byte(path.read_bytes(), 5)
    path.write_bytes(changed)
    return Expect(
        stages={
            "stage-5": f"artifact hash mismatch reattaching the artifact (pinned '{artifact}', recomputed '{sha256_digest(changed)}')"
        }
    )


@case
def flip_audit_record_byte(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """One hex digit of the record_hash inside the audit entry that mirrors run-main seq 2."""
    target = v.audit_result(2)
    path = kit.topic_file(dump, "audit")
    items = kit.load_lines(path)
    value = kit.value_of(items[target.index])
    new = flip_inside(value, target.entry["record_hash"], 7 + 40)
    kit.set_value(items[target.index], new)
    kit.save_lines(path, items)
    new_payload = bytes(codec.decode(new).record["payload"])
    seq = target.entry["seq"]
    return Expect(
        audit=Section(
            problem(
                "AUDIT_MAC_MISMATCH",
                audit_seq=seq,
                audit=target.offset,
                expected=target.envelope["mac"],
                recomputed=audit_record_mac(run.keys.audit.secret, target.envelope["key_id"], new_payload),
            ),
            message_has=(f"audit seq {seq} at offset {target.offset}: MAC mismatch",),
        )
    )


@case
def flip_seal_signature_byte(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """One bit of the first periodic seal's Ed25519 signature."""
    seal = v.seals()[0]
    assert seal.record["entry_count"] == kit.SEAL_EVERY and not seal.record["final"]
    signature = bytes(seal.envelope["signature"])
    old, new = edit_journal_value(dump, seal.index, lambda value: kit.xor_byte(value, value.index(signature) + 10))
    return Expect(
        seal=Section(
            problem("SEAL_SIGNATURE_INVALID", journal=seal.offset),
            message_has=(f"seal at offset {seal.offset}: signature does not verify against pinned key {run.keys.signer.key_id}",),
        ),
        # The audit chain mirrored the seal record's hash: it independently disagrees with the changed record.
        audit=Section(
            problem(
                "AUDIT_DISAGREES",
                seq=kit.SEAL_EVERY,
                audit_seq=v.audit_seal(seal).entry["seq"],
                journal=seal.offset,
                expected=sha256_digest(old),
                recomputed=sha256_digest(new),
            ),
            message_has=(f"audit seq {v.audit_seal(seal).entry['seq']} recorded",),
        ),
    )


@case
def flip_seal_payload_byte(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """One hex digit of the head hash the final seal commits to (the signature no longer covers it)."""
    seal = v.seals()[-1]
    assert seal.record["final"] and seal.record["entry_count"] == len(kit.MAIN_STAGES)
    old, new = edit_journal_value(dump, seal.index, lambda value: flip_inside(value, seal.record["head_hash"], 7 + 5))
    return Expect(
        # An unverifiable final seal seals nothing: the run then also counts as not sealed (+1).
        seal=Section(
            problem("SEAL_SIGNATURE_INVALID", journal=seal.offset), further=1, message_has=(f"seal at offset {seal.offset}",)
        ),
        audit=_final_seal_disagrees(v, seal, old, new),
    )


@case
def delete_journal_record(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    path = kit.topic_file(dump, "journal")
    items = kit.load_lines(path)
    del items[v.entry(2).index]
    kit.save_lines(path, items)
    first_seal = v.seals()[0]
    mirror = v.audit_result(2)
    return Expect(
        chain=Section(
            problem("ENTRY_MISSING", seq=3, journal=v.entry(3).offset, expected=v.entry_hash(1), recomputed=v.entry_hash(2)),
            message_has=(f"seq 3 at offset {v.entry(3).offset} follows seq 1: seq 2 missing",),
        ),
        seal=Section(
            problem("SEAL_MISMATCH", seq=3, journal=first_seal.offset, expected=v.entry_hash(2), recomputed=v.entry_hash(1)),
            message_has=(f"seal at offset {first_seal.offset} covers 3 entries but the journal holds 2 before it",),
        ),
        audit=Section(
            problem("JOURNAL_MISSING_ENTRY", seq=2, audit_seq=mirror.entry["seq"], audit=mirror.offset),
            message_has=(
                f"audit seq {mirror.entry['seq']} (offset {mirror.offset}) mirrors journal seq 2, which the journal lacks",
            ),
        ),
        stage_order=("stage-0", "stage-1", "stage-3", "stage-4", "stage-5"),
    )


@case
def drop_journal_tail(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """Every run-main record from seq 4 on (two entries, a periodic and the final seal) is gone."""
    path = kit.topic_file(dump, "journal")
    items = kit.load_lines(path)
    cut = v.entry(4).index
    kept = [item for i, item in enumerate(items) if i < cut or kit.key_of(item) != kit.MAIN_RUN.encode()]
    assert len(items) - len(kept) == 4
    kit.save_lines(path, kept)
    mirror = v.audit_result(4)
    return Expect(
        seal=Section(
            problem("RUN_NOT_SEALED", seq=4, expected="final seal"),
            message_has=("no final seal: the last valid seal covers 3 of 4 entries (1 unsealed",),
        ),
        audit=Section(
            problem("JOURNAL_TRUNCATED", seq=4, audit_seq=mirror.entry["seq"], audit=mirror.offset),
            message_has=(
                f"the audit chain mirrors 4 crossing(s) of this run after journal seq 3, starting with journal seq 4 (audit seq {mirror.entry['seq']})",
            ),
        ),
        stage_order=kit.MAIN_STAGES[:4],
    )


@case
def reorder_two_journal_records(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """seq 3 and seq 4 trade places (values swapped, offsets stay in order)."""
    path = kit.topic_file(dump, "journal")
    items = kit.load_lines(path)
    a, b = v.entry(3).index, v.entry(4).index
    items[a]["value"], items[b]["value"] = items[b]["value"], items[a]["value"]
    kit.save_lines(path, items)
    mirror = v.audit_result(3)
    return Expect(
        # Streaming, the verifier first sees seq 4 where seq 3 belongs (a gap), then seq 3 late (out of order).
        chain=Section(
            problem("ENTRY_MISSING", seq=4, journal=v.entry(3).offset, expected=v.entry_hash(2), recomputed=v.entry_hash(3)),
            further=1,
            message_has=(f"seq 4 at offset {v.entry(3).offset} follows seq 2: seq 3 missing (deleted or moved)",),
        ),
        audit=Section(problem("JOURNAL_MISSING_ENTRY", seq=3, audit_seq=mirror.entry["seq"], audit=mirror.offset), further=1),
        stage_order=("stage-0", "stage-1", "stage-2", "stage-4", "stage-3", "stage-5"),
    )


@case
def duplicate_journal_record(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """seq 2 is delivered twice: a copy at the next offset, later records shifted by one."""
    path = kit.topic_file(dump, "journal")
    items = kit.load_lines(path)
    index = v.entry(2).index
    copy = dict(items[index])
    for item in items[index + 1 :]:
        item["offset"] += 1
    copy["offset"] += 1
    items.insert(index + 1, copy)
    kit.save_lines(path, items)
    at = v.entry(2).offset + 1
    return Expect(
        chain=Section(
            problem("ENTRY_DUPLICATED", seq=2, journal=at, expected=v.entry_hash(2), recomputed=v.entry_hash(1)),
            message_has=(f"seq 2 at offset {at} repeats the previous entry (duplicate record)",),
        ),
        audit=Section(
            problem("AUDIT_MISSING_ENTRY", seq=2, journal=at),
            message_has=(f"journal entry seq 2 (offset {at}) has no audit record",),
        ),
    )


@case
def truncate_dump_file(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """The journal file is cut in the middle of its last line (run-main's final seal)."""
    final = v.seals()[-1]
    assert final.record["final"] and final.index == len(v.journal_items) - 1
    path = kit.topic_file(dump, "journal")
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rindex(b"\n") + 1
    path.write_bytes(data[: last_start + (len(data) - last_start) // 2])
    return Expect(
        dump_problems=[
            {
                "code": "DUMP_TRUNCATED",
                "message": f"{path} ends in a torn line at line {final.index + 1}: the dump file was truncated",
            }
        ],
        seal=Section(problem("RUN_NOT_SEALED", seq=6, expected="final seal"), message_has=("no final seal",)),
        audit=Section(
            problem("JOURNAL_TRUNCATED", seq=6, audit_seq=v.audit_seal(final).entry["seq"], audit=v.audit_seal(final).offset),
            message_has=("starting with a seal",),
        ),
    )


@case
def delete_audit_record(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    target = v.audit_result(2)
    follower = v.audit[target.index + 1]
    path = kit.topic_file(dump, "audit")
    items = kit.load_lines(path)
    del items[target.index]
    kit.save_lines(path, items)
    seq = target.entry["seq"]
    return Expect(
        # +1: journal seq 2 then has no audit record to agree with.
        audit=Section(
            problem("AUDIT_GAP", audit_seq=seq + 1, audit=follower.offset),
            further=1,
            message_has=(f"audit seq jumps from {seq - 1} to {seq + 1} at offset {follower.offset}: records deleted",),
        )
    )


@case
def delete_blob(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    observation = v.observation("stage-5", ref_suffix="test_handler.py")
    kit.blob_path(dump, observation["content_hash"]).unlink()
    return Expect(
        stages={"stage-5": f"evidence bytes for '{observation['ref']}' missing from store ({observation['content_hash']})"}
    )


@case
def swap_blob_for_other_valid_blob(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """stage-4's handler.py blob now holds stage-1's handler.py: valid bytes, another digest."""
    victim = v.observation("stage-4", ref_suffix="/handler.py")
    other = v.observation("stage-1", ref_suffix="/handler.py")
    replacement = kit.blob_path(dump, other["content_hash"]).read_bytes()
    assert sha256_digest(replacement) == other["content_hash"] != victim["content_hash"]
    kit.blob_path(dump, victim["content_hash"]).write_bytes(replacement)
    return Expect(
        stages={
            "stage-4": f"content hash mismatch reattaching '{victim['ref']}' (pinned '{victim['content_hash']}', recomputed '{other['content_hash']}')"
        }
    )


@case
def replace_public_key(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """The final seal re-signed by an attacker whose key replaces the dump's keys/public-keys.json."""
    attacker = Ed25519Signer.from_seed(b"attacker-seed-for-tamper-suite!!")
    final = v.seals()[-1]
    old, new = edit_journal_value(dump, final.index, lambda value: kit.resign_seal(value, attacker))
    kit.write_public_keys(dump, attacker)
    return Expect(
        seal=Section(
            problem("SEAL_KEY_NOT_PINNED", journal=final.offset, expected=run.keys.signer.key_id, recomputed=attacker.key_id),
            further=1,  # and therefore no valid final seal
            message_has=(
                f"seal at offset {final.offset} is signed by key {attacker.key_id}, which is not among the pinned keys",
            ),
        ),
        audit=_final_seal_disagrees(v, final, old, new),
    )


@case
def swap_public_key_file_only(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """Only the dump's informational key file changes: the verdict does not (it is never read)."""
    kit.write_public_keys(dump, Ed25519Signer.from_seed(b"attacker-seed-for-tamper-suite!!"))
    return Expect(exit_code=0)


def _journal_missing(crossings: int) -> Expect:
    """run-main's journal records are gone, its ``crossings`` audit records are not."""
    return Expect(
        exit_code=2,  # records deleted, not "no such run"
        dump_problems=[
            {
                "code": "JOURNAL_MISSING",
                "message": f"the journal holds no records of run '{kit.MAIN_RUN}', but the audit chain mirrors {crossings} crossings of it "
                "(journal records deleted)",
            }
        ],
        stage_order=(),
        sections_present=False,
    )


@case
def delete_all_run_records(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    path = kit.topic_file(dump, "journal")
    items = kit.load_lines(path)
    kept = [item for item in items if kit.key_of(item) != kit.MAIN_RUN.encode()]
    assert len(items) - len(kept) == len(kit.MAIN_STAGES) + 3
    kit.save_lines(path, kept)
    crossings = v.journal_crossings()  # its refusal mirrors no journal record
    assert crossings == len(kit.MAIN_STAGES) + 3  # results and seals (not the refusal)
    return _journal_missing(crossings)


@case
def delete_cas_directory(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """H4: the content store deleted from the dump, whose manifest still lists its blobs."""
    import json
    import shutil

    blobs = json.loads((dump / "manifest.json").read_text(encoding="utf-8"))["blobs"]
    assert blobs == sum(1 for path in (dump / "cas" / "sha256").rglob("*") if path.is_file()) > len(run.blobs)
    shutil.rmtree(dump / "cas")
    return Expect(
        dump_problems=[
            {
                "code": "CAS_MISSING",
                "message": f"the dump's manifest lists {blobs} evidence blobs but {dump / 'cas'} is missing (content store deleted)",
            }
        ],
        stages_unchecked="evidence not reattached (no content store)",
    )


@case
def delete_refusals_file(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """M4: the refusals stream is gone while the audit chain mirrors run-main's refusal."""
    kit.topic_file(dump, "refusals").unlink()
    mirror = v.audit_refusal()
    return Expect(
        audit=Section(
            problem(
                "REFUSALS_STREAM_MISSING",
                audit=mirror.offset,
                audit_seq=mirror.entry["seq"],
                expected=mirror.entry["record_hash"],
            ),
            message_has=("has no refusals stream (deleted)",),
        )
    )


@case
def forge_refusal_behind_an_unpinned_audit_key_id(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """H3: the refusal edited, its audit mirror's record_hash made to match, and the envelope key id (outside
    the MAC) changed by one digit so that the MAC check would be skipped. The audit key is pinned."""
    forged, _ = kit.forge_main_refusal(dump)
    mirror = v.audit_refusal()
    audit_path = kit.topic_file(dump, "audit")
    audit_items = kit.load_lines(audit_path)
    value = kit.value_of(audit_items[mirror.index])
    value = kit.replace_once(value, mirror.entry["record_hash"].encode(), sha256_digest(forged).encode())
    key_id = mirror.envelope["key_id"]
    other_key, _, _ = kit.flip_char(key_id.encode(), len(key_id) - 1)
    value = kit.replace_once(value, key_id.encode(), other_key)
    kit.set_value(audit_items[mirror.index], value)
    kit.save_lines(audit_path, audit_items)
    return Expect(
        audit=Section(
            problem(
                "AUDIT_KEY_NOT_PINNED",
                audit=mirror.offset,
                audit_seq=mirror.entry["seq"],
                expected=run.keys.audit.key_id,
                recomputed=other_key.decode(),
            ),
            further=1,  # and the edited refusal is mirrored by nothing that authenticates: REFUSAL_NOT_AUDITED
            message_has=("which is not among the pinned audit keys",),
        )
    )


@case
def delete_journal_and_blank_audit_keys(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """M7: run-main's journal records deleted and the Kafka keys of every audit record blanked."""
    path = kit.topic_file(dump, "journal")
    kit.save_lines(path, [item for item in kit.load_lines(path) if kit.key_of(item) != kit.MAIN_RUN.encode()])
    audit_path = kit.topic_file(dump, "audit")
    audit_items = kit.load_lines(audit_path)
    for item in audit_items:
        item["key"] = None
    kit.save_lines(audit_path, audit_items)
    crossings = v.journal_crossings()
    return _journal_missing(crossings)


def _drop_final_seal_and_its_audit_record(dump: Path, v: kit.DumpView) -> None:
    final = v.seals()[-1]
    mirror = v.audit_seal(final)
    assert final.index == len(v.journal_items) - 1 and mirror.index == len(v.audit_items) - 1
    for stream, index in (("journal", final.index), ("audit", mirror.index)):
        path = kit.topic_file(dump, stream)
        items = kit.load_lines(path)
        del items[index]
        kit.save_lines(path, items)


@case
def drop_final_seal_and_its_audit_record(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """Both tails cut at the end of the partition. Before checkpoints this read as a run still open (exit 5); the
    checkpoint the scheduler signed in the seal's transaction still counts the deleted audit record."""
    _drop_final_seal_and_its_audit_record(dump, v)
    checkpoint = v.checkpoints()[-1]  # written with the final seal, the partition's last record
    offset = kit.load_lines(kit.topic_file(dump, "checkpoints"))[-1]["offset"]
    length = checkpoint["audit_seq"]
    assert length == len(v.audit)
    return Expect(
        audit=Section(
            problem(
                "AUDIT_TRUNCATED_BEFORE_CHECKPOINT",
                checkpoints=offset,
                audit_seq=length,
                expected=str(length),
                recomputed=str(length - 1),
            ),
            message_has=(f"but the audit chain holds {length - 1}: 1 record of its tail deleted",),
        ),
        open=True,
    )


@case
def drop_final_seal_its_audit_record_and_the_checkpoint(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """All three tails cut together: one copy of the data cannot tell this from a run still open (that needs
    checkpoints anchored outside Kafka), so the verdict is "open" (exit 5), never "verified"."""
    _drop_final_seal_and_its_audit_record(dump, v)
    path = kit.topic_file(dump, "checkpoints")
    kit.save_lines(path, kit.load_lines(path)[:-1])
    return Expect(exit_code=5, open=True)


@case
def flip_checkpoint_byte(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """One hex digit of the audit head a signed checkpoint commits to."""
    path = kit.topic_file(dump, "checkpoints")
    items = kit.load_lines(path)
    checkpoint = v.checkpoints()[-1]
    kit.set_value(items[-1], flip_inside(kit.value_of(items[-1]), checkpoint["audit_head"], len("hmac-sha256:") + 5))
    kit.save_lines(path, items)
    return Expect(
        audit=Section(
            problem("CHECKPOINT_SIGNATURE_INVALID", checkpoints=items[-1]["offset"], audit_seq=checkpoint["audit_seq"]),
            message_has=("signature does not verify against pinned key",),
        )
    )


@case
def hostile_seal_key_id(dump: Path, v: kit.DumpView, run: kit.RealisticRun) -> Expect:
    """L1: the final seal names a key id made of terminal escapes and a forged verdict line."""
    final = v.seals()[-1]
    hostile = "k\x1b[1A\x1b[2K\nverified -- every activity reconstructs from the journal.\u202e"
    old, new = _replace_seal_key_id(dump, final.index, hostile)
    return Expect(
        seal=Section(
            problem("SEAL_KEY_NOT_PINNED", journal=final.offset, expected=run.keys.signer.key_id, recomputed=hostile),
            further=1,  # and therefore no valid final seal
        ),
        audit=_final_seal_disagrees(v, final, old, new),
    )


def _replace_seal_key_id(dump: Path, index: int, key_id: str) -> tuple[bytes, bytes]:
    """The seal at journal line ``index`` re-encoded with another key id (its length changes)."""
    path = kit.topic_file(dump, "journal")
    items = kit.load_lines(path)
    old = kit.value_of(items[index])
    new = codec.encode(codec.SEAL_RECORD, {**codec.decode(old).record, "key_id": key_id})
    kit.set_value(items[index], new)
    kit.save_lines(path, items)
    return old, new


# ---------------------------------------------------------------------------
# running a case
# ---------------------------------------------------------------------------


def _further(n: int) -> str:
    return f" (+{n} further problem{'s' if n != 1 else ''})" if n else ""


def check_json(document: dict[str, Any], expect: Expect) -> None:
    assert document["exit_code"] == expect.exit_code
    assert document["found"] is expect.header_found
    assert document["ok"] is (expect.exit_code == 0)
    assert document["verdict"] == {0: "verified", 2: "mismatch", 5: "open", 6: "not_fully_verified"}[expect.exit_code]
    assert document["open"] is expect.open
    assert [p["code"] for p in document["unchecked"]] == expect.unchecked
    assert document["dump_problems"] == expect.dump_problems
    for name in ("chain", "seal", "audit", "producers"):
        section = document[name]
        wanted: Section | None = getattr(expect, name)
        if not expect.sections_present:
            assert section is None, name
            continue
        assert section is not None, name
        if wanted is None:
            assert section["ok"] is True and section["problem"] is None, (name, section["problem"])
            continue
        got = dict(section["problem"] or {})
        message = got.pop("message", "")
        assert got == wanted.problem, name
        assert section["further_problems"] == wanted.further, (name, message)
        assert section["ok"] is False
        for text in wanted.message_has:
            assert text in message, (name, message)
    stages = document["stages"]
    assert [s["stage_id"] for s in stages] == list(expect.stage_order)
    for stage in stages:
        reason = expect.stages.get(stage["stage_id"])
        if reason is None and expect.stages_unchecked:
            assert (stage["ok"], stage["unchecked"], stage["evidence_reattached"]) == (False, expect.stages_unchecked, False)
        elif reason is None:
            assert stage["ok"] is True, stage
            assert stage["evidence_reattached"] is True
            assert stage["notes"] == ["evidence reattached"]
        else:
            assert stage["ok"] is False
            assert stage["reason"] == reason
    assert set(expect.stages) <= {s["stage_id"] for s in stages}


def _refusal_line(r: dict[str, Any]) -> str:
    """The text report's line of one refusal of the JSON document's ``refusals`` (docs/verifier.md)."""
    where = f"(refusals partition {r['partition']}, offset {r['offset']})"
    assert r["authenticated"], "the suite's refusal comes after its producer's signature verified"
    return f"  REFUSED {r['code']} stage {r['stage_id']} [{r['kind']}] {where} -- by {r['producer']} (key {r['key_id']})"


def check_text(text: str, document: dict[str, Any], expect: Expect) -> None:
    """The human report says the same thing, in the seed's grammar, line by line."""
    lines = text.splitlines()
    wanted = [f"Activity verify run={kit.MAIN_RUN}"]
    wanted += [f"  MISMATCH dump -- {p['message']}" for p in expect.dump_problems]
    failed = len(expect.dump_problems)
    if expect.sections_present:
        for name in ("chain", "seal", "audit", "producers"):
            section = document[name]
            if section["problem"] is None:
                wanted.append(f"  {'OPEN' if name == 'seal' and expect.open else 'OK'} {name} (")
            else:
                failed += 1
                wanted.append(f"  MISMATCH {name} -- {section['problem']['message']}{_further(section['further_problems'])}")
    wanted += [_refusal_line(r) for r in document["refusals"]]
    wanted += [f"  NOT CHECKED {p['code']} -- {p['message']}" for p in document["unchecked"]]
    authors = {s["stage_id"]: f"    by {s['producer']} (key {s['key_id']})" for s in document["stages"] if s["key_id"]}
    for stage_id in expect.stage_order:
        if stage_id in expect.stages:
            failed += 1
            wanted.append(f"  MISMATCH {stage_id} [coding] -- {expect.stages[stage_id]}")
        elif expect.stages_unchecked:
            wanted.append(f"  NOT CHECKED {stage_id} [coding] -- {expect.stages_unchecked}")
        else:
            wanted.append(f"  OK {stage_id} [coding] (evidence reattached)")
        if stage_id in authors:
            wanted.append(authors[stage_id])
    if expect.exit_code == 0:
        wanted.append("verified -- every activity reconstructs from the journal.")
    elif expect.exit_code == 5:
        wanted.append(f"open -- run is not sealed yet; {document['chain']['entries']} entries verified so far.")
    else:
        wanted.append(f"mismatch -- {failed} check{'s' if failed != 1 else ''} failed; the run does not reconstruct.")
    # the text report escapes what the data controls (JSON keeps it exact)
    wanted = [escape(line) for line in wanted]
    assert len(lines) == len(wanted), text
    for got, want in zip(lines, wanted, strict=True):
        if want.endswith("("):
            assert got.startswith(want), (got, want)
        else:
            assert got == want


def test_pristine_dump_verifies(run: kit.RealisticRun) -> None:
    code, document, stderr = kit.verify_dump(run, run.dump)
    assert code == 0, stderr
    check_json(document, Expect(exit_code=0))
    code, text, _ = kit.verify_dump(run, run.dump, json_output=False)
    assert code == 0
    check_text(text, document, Expect(exit_code=0))


@pytest.mark.parametrize("name", sorted(CASES))
def test_tamper_case(name: str, run: kit.RealisticRun, view: kit.DumpView, tmp_path: Path) -> None:
    dump = kit.copy_dump(run.dump, tmp_path)
    expect = CASES[name](dump, view, run)
    code, document, stderr = kit.verify_dump(run, dump)
    assert "Traceback" not in stderr
    assert code == expect.exit_code, (document, stderr)
    check_json(document, expect)
    text_code, text, _ = kit.verify_dump(run, dump, json_output=False)
    assert text_code == code
    check_text(text, document, expect)


def test_suite_names_the_required_cases() -> None:
    required = {
        "flip_journal_value_byte",
        "flip_stored_page_byte",
        "flip_screenshot_byte",
        "flip_audit_record_byte",
        "flip_seal_signature_byte",
        "delete_journal_record",
        "drop_journal_tail",
        "reorder_two_journal_records",
        "swap_blob_for_other_valid_blob",
        "replace_public_key",
        "duplicate_journal_record",
        "truncate_dump_file",
        "delete_audit_record",
        "delete_blob",
        "edit_observation_ref",
        "delete_all_run_records",
        "delete_cas_directory",
        "delete_refusals_file",
        "forge_refusal_behind_an_unpinned_audit_key_id",
        "delete_journal_and_blank_audit_keys",
        "drop_final_seal_and_its_audit_record",
        "drop_final_seal_its_audit_record_and_the_checkpoint",
        "flip_checkpoint_byte",
        "hostile_seal_key_id",
    }
    assert required <= set(CASES)


# ---------------------------------------------------------------------------
# reported once, not smeared
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seq", range(len(kit.MAIN_STAGES)))
def test_one_flipped_entry_is_one_chain_problem(seq: int, run: kit.RealisticRun, view: kit.DumpView, tmp_path: Path) -> None:
    """Whichever entry is flipped, the chain names it once and every other stage stays OK."""
    dump = kit.copy_dump(run.dump, tmp_path)
    line = view.entry(seq)
    observation_hash = line.record["observations"][-1]["content_hash"]
    _, new = edit_journal_value(dump, line.index, lambda value: flip_inside(value, observation_hash, 7 + 63))
    code, document, _ = kit.verify_dump(run, dump)
    assert code == 2
    assert document["chain"]["problem"]["code"] == "ENTRY_HASH_MISMATCH"
    assert document["chain"]["problem"]["seq"] == seq
    assert (document["chain"]["problem"]["stream"], document["chain"]["problem"]["offset"]) == ("journal", line.offset)
    assert document["chain"]["problem"]["recomputed"] == journal_entry_hash(payload_of(new))
    assert document["chain"]["further_problems"] == 0
    assert document["seal"]["problem"] is None
    assert document["audit"]["problem"] is None
    verdicts = {s["stage_id"]: s for s in document["stages"]}
    assert list(verdicts) == list(kit.MAIN_STAGES)
    assert [sid for sid, s in verdicts.items() if not s["ok"]] == [kit.MAIN_STAGES[seq]]
    assert verdicts[kit.MAIN_STAGES[seq]]["reason"] == JOURNAL_ENTRY_FAILS.format(seq=seq, offset=line.offset)


# ---------------------------------------------------------------------------
# keys: pinned only
# ---------------------------------------------------------------------------


def test_dump_key_file_is_never_a_fallback(run: kit.RealisticRun, tmp_path: Path) -> None:
    """Without --trusted-keys the verifier uses the local install keys, never the dump's key file.

    The dump carries keys/public-keys.json with the very key that signed its
    seals; with no install keys around, verify must refuse to run (exit 3)
    rather than trust it.
    """
    dump = kit.copy_dump(run.dump, tmp_path)
    assert run.keys.signer.key_id in (dump / "keys" / "public-keys.json").read_text(encoding="utf-8")
    env = kit.offline_env()
    env["BERNSTEIN_KEYS_DIR"] = str(tmp_path / "no-keys-here")
    result = kit.bernstein(["activity", "verify", kit.MAIN_RUN, "--from", str(dump)], env, cwd=tmp_path)
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.startswith("bernstein: error: no keys to trust: pass --trusted-keys FILE")
    assert "Traceback" not in result.stderr


def test_dump_key_file_as_trusted_keys_cannot_verify_audit(run: kit.RealisticRun, tmp_path: Path) -> None:
    """Handing the dump's own key file as --trusted-keys pins no audit key: MACs are not verified.

    The export deliberately omits the HMAC secret, so a dump cannot vouch for its own audit chain.
    """
    dump = kit.copy_dump(run.dump, tmp_path)
    # the producers' keys come from the roles manifest (keys trust --manifest), never from a dump
    own_keys = tmp_path / "dump-keys-and-producers.json"
    TrustedKeys.load(dump / "keys" / "public-keys.json").merged(producer_trust("coder@tamper-suite")).write(own_keys)
    code, document, stderr = kit.verify_dump(run, dump, trust_file=own_keys)
    assert document["audit"]["macs_verified"] is False
    assert document["audit"]["note"] == (
        f"MACs not verified: audit key {run.keys.audit.key_id} is not pinned (add it to --trusted-keys)"
    )
    assert document["audit"]["key_ids"] == []
    # The seals' key is the dump's (and the real) one here, so seals verify; but unverified MACs are no pass (M5).
    assert document["seal"]["ok"] is True
    assert (code, document["exit_code"], document["verdict"]) == (6, 6, "not_fully_verified")
    assert [p["code"] for p in document["unchecked"]] == ["AUDIT_MACS_NOT_VERIFIED"]
    assert stderr == ""


def test_without_the_audit_key_a_forged_refusal_is_not_verified(run: kit.RealisticRun, tmp_path: Path) -> None:
    """M5: the refusal and its audit record_hash edited (the MAC left alone). Without the audit key nothing can tell;
    the verdict says the MACs were not verified (exit 6), never exit 0. With the key it is a mismatch."""
    dump = kit.copy_dump(run.dump, tmp_path)
    forged, _ = kit.forge_main_refusal(dump)
    view = kit.DumpView(run.dump)
    mirror = view.audit_refusal()
    audit_path = kit.topic_file(dump, "audit")
    audit_items = kit.load_lines(audit_path)
    value = kit.replace_once(
        kit.value_of(audit_items[mirror.index]), mirror.entry["record_hash"].encode(), sha256_digest(forged).encode()
    )
    kit.set_value(audit_items[mirror.index], value)
    kit.save_lines(audit_path, audit_items)
    public_only = tmp_path / "public-only.json"
    TrustedKeys(ed25519={run.keys.signer.key_id: run.keys.signer.public_key_raw}).merged(
        producer_trust("coder@tamper-suite")
    ).write(public_only)
    code, text, _ = kit.verify_dump(run, dump, json_output=False, trust_file=public_only)
    assert code == 6
    lines = text.splitlines()
    assert lines[-1] == (
        "not fully verified -- not checked: AUDIT_MACS_NOT_VERIFIED; nothing that was checked failed, but this is not a pass."
    )
    assert lines[-2 - 2 * len(kit.MAIN_STAGES)].startswith("  NOT CHECKED AUDIT_MACS_NOT_VERIFIED -- no audit key is pinned:")
    code, document, _ = kit.verify_dump(run, dump)
    assert code == 2
    assert document["audit"]["problem"]["code"] == "AUDIT_MAC_MISMATCH"
    assert (document["audit"]["problem"]["offset"], document["audit"]["problem"]["audit_seq"]) == (
        mirror.offset,
        mirror.entry["seq"],
    )


@pytest.mark.parametrize("flag", [["--records-only"], ["--cas", "none"]], ids=["records-only", "cas-none"])
def test_records_only_is_asked_for_by_name_and_never_exit_0(flag: list[str], run: kit.RealisticRun, tmp_path: Path) -> None:
    dump = kit.copy_dump(run.dump, tmp_path)
    args = ["activity", "verify", kit.MAIN_RUN, "--from", str(dump), "--trusted-keys", str(run.trust_file), *flag]
    result = kit.bernstein(args, kit.offline_env(), cwd=tmp_path)
    assert result.returncode == 6, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[5].startswith("  REFUSED REDUNDANT_STAGE stage stage-0-again [coding] ")  # the run's one refusal
    assert lines[6] == (
        "  NOT CHECKED RECORDS_ONLY -- --records-only: the records were checked, the evidence was NOT "
        "(no blob reattached or re-hashed)"
    )
    assert lines[7:-1:2] == [
        f"  NOT CHECKED {stage} [coding] -- evidence not reattached (--records-only)" for stage in kit.MAIN_STAGES
    ]
    assert all(line.startswith("    by coder@tamper-suite (key sha256:") for line in lines[8:-1:2])
    assert lines[-1] == (
        "records verified -- evidence NOT checked (--records-only): no blob was reattached or re-hashed; not a pass."
    )
    # ... and a tampered blob goes unnoticed there, which is exactly why it is not a pass
    page = kit.DumpView(run.dump).observation(kit.PAGE_STAGE, kind="page")
    blob = kit.blob_path(dump, page["content_hash"])
    blob.write_bytes(blob.read_bytes().replace(b"API docs", b"APT docs"))
    assert kit.bernstein(args, kit.offline_env(), cwd=tmp_path).returncode == 6
    assert kit.bernstein(args[: -len(flag)], kit.offline_env(), cwd=tmp_path).returncode == 2


# ---------------------------------------------------------------------------
# refusals are joined with the audit chain
# ---------------------------------------------------------------------------


def test_flip_refusal_record_byte(run: kit.RealisticRun, tmp_path: Path) -> None:
    """An edited refusal record no longer hashes to what the audit mirrors: named at its offset, exit 2."""
    dump = kit.copy_dump(run.dump, tmp_path)
    edited, refusal_offset = kit.forge_main_refusal(dump)
    code, document, _ = kit.verify_dump(run, dump)
    assert code == 2
    problem = document["audit"]["problem"]
    assert problem["code"] == "REFUSAL_NOT_AUDITED"
    assert (problem["stream"], problem["offset"]) == ("refusals", refusal_offset)
    assert problem["recomputed"] == kit.digest_of(edited)
    # ... and the refusal the audit does mirror is reported missing, once.
    assert document["audit"]["further_problems"] == 1
    assert document["chain"]["problem"] is None and document["seal"]["problem"] is None
    assert all(stage["ok"] for stage in document["stages"])


def test_delete_refusal_record(run: kit.RealisticRun, tmp_path: Path) -> None:
    dump = kit.copy_dump(run.dump, tmp_path)
    path = kit.topic_file(dump, "refusals")
    items = kit.load_lines(path)
    (index,) = [i for i, item in enumerate(items) if kit.key_of(item) == kit.MAIN_RUN.encode()]
    digest = kit.digest_of(kit.value_of(items[index]))
    del items[index]
    kit.save_lines(path, items)
    code, document, _ = kit.verify_dump(run, dump)
    assert code == 2
    problem = document["audit"]["problem"]
    pristine_audit = kit.audit_lines(kit.load_lines(kit.topic_file(run.dump, "audit")))
    (mirror,) = [a for a in pristine_audit if a.entry["record_hash"] == digest]
    assert problem == {
        "code": "REFUSAL_MISSING",
        "message": problem["message"],
        "stream": "audit",
        "offset": mirror.offset,
        "audit_seq": mirror.entry["seq"],
        "expected": digest,
    }
    assert document["audit"]["further_problems"] == 0
