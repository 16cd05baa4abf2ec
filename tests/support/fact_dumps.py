"""A dump of several runs for the verifier's differential tests, the keys that trust it, and the tampers made to it."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bernstein.consumers.core.model import InputRecord, SchedulerConfig
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import codec
from bernstein.schemas.canonical import canonical_json, evidence_set_hash, hmac_key_id, journal_entry_hash, sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import Ed25519Signer, TrustedKeys
from bernstein.verifier import facts
from bernstein.verifier.facts import NATIVE, Facts
from bernstein.verifier.sources import DUMP_FORMAT, StoredRecord, encode_dump_line
from tests.support.producers import TEST_PRODUCERS, encode_signed_close, encode_signed_submission, producer_trust

SIGNER = Ed25519Signer.from_seed(hashlib.sha256(b"facts-signer").digest())
SECRET = hashlib.sha256(b"facts-audit").digest()
KEY_ID = hmac_key_id(SECRET)
TRUSTED = TrustedKeys(ed25519={SIGNER.key_id: SIGNER.public_key_raw}, hmac={KEY_ID: SECRET}).merged(producer_trust())
ROLES = {"developer": "coding", "scout": "research", "analyst": "data", "operator": "ops"}
PREFIX = "facts"
TOPICS = {
    s: f"{PREFIX}.{n}"
    for s, n in (
        ("journal", "activity.journal"),
        ("refusals", "activity.refusals"),
        ("audit", "audit"),
        ("deadletter", "activity.deadletter"),
        ("checkpoints", "checkpoints"),
    )
}
C = codec.default_codec()


def native() -> Facts:
    assert NATIVE is not None, facts.native_status()[1]
    return NATIVE


def submission(run_id: str, i: int, *, kind: str = "coding", role: str = "developer", pages: int = 2, **changes: Any) -> bytes:
    artifact = f"artifact {run_id} {i}\n".encode()
    observations: list[dict[str, Any]] = [
        {
            "kind": "page",
            "ref": f"https://example.test/{run_id}/{i}/{j}",
            "content_hash": sha256_digest(f"{run_id} {i} {j}".encode()),
            "size": len(f"{run_id} {i} {j}".encode()),  # published as ActivitySubmission.v2
        }
        for j in range(pages)
    ]
    record = {
        "submission_id": f"sub-{run_id}-{i}",
        "run_id": run_id,
        "stage_id": f"stage-{i}",
        "role": role,
        "producer": {"id": "facts@test", "sdk": "bernstein-python/0.1.0"},
        "kind": kind,
        "artifact": artifact,
        "artifact_hash": sha256_digest(artifact),
        "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in observations),
        "observations": observations,
        "terminal_state": "completed",
        "reason_code": "ok",
        "occurred_at_ms": 1_700_000_000_000 + i,
    }
    if kind == "research" and role == "scout":
        # The scheduler refuses a research artifact that is no report or abort record (docs/modality_rules.md):
        # a fetch failure after fetching these pages is the smallest valid one.
        fetched = [{"source_ref": o["ref"], "page_content_hash": o["content_hash"]} for o in observations]
        failure = {"code": "HTTP_ERROR", "source": "https://example.test/down", "message": "HTTP 500"}
        document = {"format": "bernstein.research.failure/v1", "query": "q", "plan": [], "failure": failure, "fetched": fetched}
        artifact = canonical_json(document)
        record.update(
            artifact=artifact, artifact_hash=sha256_digest(artifact), terminal_state="failed", reason_code="fetch_failed"
        )
    elif kind in ("data", "ops"):
        # A failed data/ops stage may carry no receipt; a completed one must carry a valid one (docs/modality_rules.md).
        record.update(terminal_state="failed", reason_code="job_failed")
    record.update(changes)
    return encode_signed_submission(record)


def close(run_id: str) -> bytes:
    return encode_signed_close(
        {"submission_id": f"close-{run_id}", "run_id": run_id, "producer": {"id": "facts@test", "sdk": "x"}, "occurred_at_ms": 1}
    )


def run_inputs() -> list[tuple[str, bytes]]:
    """Two interleaved runs with results of every kind, refusals and periodic and final seals."""
    inputs: list[tuple[str, bytes]] = []
    kinds = [("coding", "developer"), ("research", "scout"), ("data", "analyst"), ("ops", "operator")]
    for i in range(24):
        kind, role = kinds[i % 4]
        inputs.append(("run-a", submission("run-a", i, kind=kind, role=role, pages=i % 3)))
        if i % 3 == 0:
            inputs.append(("run-b", submission("run-b", i)))
        if i % 7 == 3:
            inputs.append(("run-a", submission("run-a", 1000 + i, role="nobody")))  # refused: unknown role
        if i == 10:
            inputs.append(("run-a", submission("run-a", i)))  # refused: duplicate stage
    inputs.append(("run-a", close("run-a")))
    inputs.append(("run-b", close("run-b")))
    return inputs


def write_dump(root: Path, cas: bool = True) -> None:
    config = SchedulerConfig(
        roles=ROLES, signer=SIGNER, audit_key=SECRET, audit_key_id=KEY_ID, seal_every=5, producers=TEST_PRODUCERS
    )
    core = SchedulerCore(config)
    state = initial_state(config, 0)
    offsets = dict.fromkeys(TOPICS, 0)
    lines: dict[str, list[bytes]] = {s: [] for s in TOPICS}
    store = DirBlobStore(root / "cas") if cas else None
    for i, (run_id, value) in enumerate(run_inputs()):
        if store is not None and value.startswith(C.schema(codec.ACTIVITY_SUBMISSION_V3).header):
            record = C.decode(value).record
            store.put(record["artifact"])
            for j, o in enumerate(record["observations"]):
                parts = o["ref"].rsplit("/", 3)
                store.put(f"{parts[1]} {parts[2]} {parts[3]}".encode())
                assert sha256_digest(f"{parts[1]} {parts[2]} {parts[3]}".encode()) == o["content_hash"], j
        state, outputs = core.step(state, InputRecord(f"{PREFIX}.activity.submissions", 0, i, 1_000 + i, run_id.encode(), value))
        for out in outputs:
            stream = out.stream.value
            lines[stream].append(
                encode_dump_line(
                    StoredRecord(stream, TOPICS[stream], 0, offsets[stream], out.timestamp_ms, out.key, out.value, out.headers)
                )
            )
            offsets[stream] += 1
    for stream, items in lines.items():
        (root / "topics" / stream).mkdir(parents=True, exist_ok=True)
        (root / "topics" / stream / "0.jsonl").write_bytes(b"".join(items))
    (root / "manifest.json").write_text(json.dumps({"format": DUMP_FORMAT, "runs": ["run-a", "run-b"]}))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def edit_lines(path: Path, edit: Callable[[list[bytes]], list[bytes]]) -> None:
    path.write_bytes(b"".join(edit(path.read_bytes().splitlines(keepends=True))))


def edit_value(line: bytes, change: Callable[[bytes], bytes]) -> bytes:
    item = orjson.loads(line)
    item["value"] = b64(change(base64.b64decode(item["value"])))
    return orjson.dumps(item) + b"\n"


def flip_payload_byte(value: bytes, at: int = -40) -> bytes:
    name, fields = codec.split_envelope(value)
    if name != codec.JOURNAL_RECORD:
        return value
    payload = bytearray(fields[0])
    payload[at] ^= 0x01
    return C.encode(codec.JOURNAL_RECORD, {"payload": bytes(payload), "entry_hash": fields[1]})


def restamp(value: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    """Re-encode a journal entry with ``change`` applied and a recomputed entry hash."""
    name, fields = codec.split_envelope(value)
    entry = C.decode(fields[0]).record
    change(entry)
    payload = C.encode(codec.JOURNAL_ENTRY, entry)
    return C.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": journal_entry_hash(payload)})


def set_observation_hash(entry: dict[str, Any]) -> None:
    entry["observations"] = [{"kind": "page", "ref": "r", "content_hash": "sha256:" + "Z" * 64}]


TAMPERS: dict[str, tuple[str, Callable[[list[bytes]], list[bytes]]]] = {
    "pristine": ("journal", lambda ls: ls),
    "entry-byte": ("journal", lambda ls: [*ls[:3], edit_value(ls[3], flip_payload_byte), *ls[4:]]),
    "entry-head-byte": ("journal", lambda ls: [*ls[:3], edit_value(ls[3], lambda v: flip_payload_byte(v, 12)), *ls[4:]]),
    "entry-deleted": ("journal", lambda ls: ls[:4] + ls[5:]),
    "entry-duplicated": ("journal", lambda ls: ls[:5] + ls[4:]),
    "entries-swapped": ("journal", lambda ls: [ls[2], ls[1], ls[0], *ls[3:]]),  # run-a's first two entries
    "tail-truncated": ("journal", lambda ls: ls[: len(ls) // 2]),
    "torn-last-line": ("journal", lambda ls: [*ls[:-1], ls[-1][:50]]),
    "bad-line": ("journal", lambda ls: [*ls[:6], b"{not json\n", *ls[6:]]),
    "blank-lines": ("journal", lambda ls: [b"\n", *ls[:6], b"   \n", *ls[6:]]),
    "not-avro": ("journal", lambda ls: [*ls[:2], edit_value(ls[2], lambda v: b"junk" + v), *ls[3:]]),
    "audit-in-journal": ("journal", lambda ls: ls),  # see below
    "malformed-observation": (
        "journal",
        lambda ls: [*ls[:1], edit_value(ls[1], lambda v: restamp(v, set_observation_hash)), *ls[2:]],
    ),
    "wrong-run-entry": (
        "journal",
        lambda ls: [*ls[:1], edit_value(ls[1], lambda v: restamp(v, lambda e: e.update(run_id="run-a"))), *ls[2:]],
    ),
    "seal-signature": (
        "journal",
        lambda ls: [
            edit_value(line, lambda v: v[:-3] + b"\x00\x00\x00") if b"ce_type" in line and line is ls[-1] else line for line in ls
        ],
    ),
    "audit-mac": ("audit", lambda ls: [*ls[:3], edit_value(ls[3], lambda v: v[:-5] + b"00000"), *ls[4:]]),
    "audit-deleted": ("audit", lambda ls: ls[:7] + ls[8:]),
    "audit-torn": ("audit", lambda ls: [*ls[:-1], ls[-1][:30]]),
    "audit-journal-record": ("audit", lambda ls: ls),  # see below
    "refusal-deleted": ("refusals", lambda ls: ls[1:]),
    "refusal-edited": ("refusals", lambda ls: [edit_value(ls[0], lambda v: v + b"\x00"), *ls[1:]]),
}
