"""Generate the golden vectors in ``schemas/vectors/*.json``.

    python -m tests.vectors.generate          # write the files
    python -m tests.vectors.generate --check  # exit 1 if a file would change

Every value is derived from fixed inputs (a fixed Ed25519 seed, a fixed HMAC
key), so the output is byte-identical on every machine; CI regenerates the
files and fails on any difference. Bytes appear as lowercase hex; a bytes
field inside an Avro record appears as ``{"hex": "..."}``. Vectors are
appended to, never rewritten: a changed vector means a changed wire format.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bernstein.schemas import canonical, codec, merkle, notes
from bernstein.schemas.errors import CanonicalizationError

HERE = Path(__file__).resolve().parents[2] / "schemas" / "vectors"
SEED = bytes(range(32))
HMAC_KEY = bytes.fromhex("a0" * 32)
PRODUCER_SEED = bytes(range(32, 64))
"""The producer identity of the signature vectors (a producer host's own key, never the seal key)."""
LINEAGE_KEY = bytes.fromhex("b1" * 32)
"""The producer's lineage envelope key (producer-held; the scheduler and verifier never see it)."""
REDACTION_KEY = bytes.fromhex("c2" * 32)
"""The producer's redaction key for typed-value digests (never exported)."""
H = {name: canonical.sha256_digest(name.encode()) for name in ("alpha", "beta", "gamma")}


def _hexify(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {k: _hexify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hexify(v) for v in value]
    return value


def _nested(depth: int) -> list[Any]:
    """``depth`` arrays, each the only member of the one around it."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def canonical_vectors() -> dict[str, Any]:
    ok_cases: dict[str, object] = {
        "empty_object": {},
        "empty_array": [],
        "sorted_keys": {"b": 1, "a": 2, "c": {"z": None, "y": True, "x": False}},
        "integers": [0, -1, 1, 9007199254740991, -9007199254740991],
        "strings_escapes": ["\u0000\b\t\n\f\r\u001f", 'quote" backslash\\ slash/', "\u007f"],
        "non_ascii_values": {"k": "caf\u00e9 \u2028 \u4e2d \U0001f600"},
        "bmp_keys": {"\u00e9": 1, "e": 2, "\uffff": 3, "\u4e2d": 4},
        "supplementary_plane_keys": {"\U0001f600": 1, "\ue000": 2, "a": 3},
        "nested": {"observations": [{"kind": "page", "ref": "https://a", "content_hash": H["alpha"]}]},
        "nested_64_levels": _nested(canonical.MAX_JSON_DEPTH),
    }
    refused: dict[str, object] = {
        "float": 1.5,
        "float_integral": 1.0,
        "nan": float("nan"),
        "int_above_safe_range": 9007199254740992,
        "int_below_safe_range": -9007199254740992,
        "nested_65_levels": _nested(canonical.MAX_JSON_DEPTH + 1),
    }
    cases = []
    for name, value in ok_cases.items():
        data = canonical.canonical_json(value)
        cases.append(
            {
                "name": name,
                "input": value,
                "canonical_hex": data.hex(),
                "canonical_utf8": data.decode(),
                "sha256": canonical.sha256_digest(data),
            }
        )
    refusals = []
    for name, bad in refused.items():
        try:
            canonical.canonical_json(bad)
        except CanonicalizationError:
            refusals.append({"name": name, "input_repr": repr(bad), "refused": True})
        else:  # pragma: no cover - a vector that stops refusing is a format change
            raise SystemExit(f"canonical_json accepted {name}")
    return {"rule": canonical.CANONICALIZATION, "cases": cases, "refused": refusals}


def digest_vectors() -> dict[str, Any]:
    return {
        "content_hash": [
            {"bytes_hex": s.encode().hex(), "digest": canonical.content_hash(s.encode())} for s in ("", "alpha", "beta")
        ],
        "artifact_hash": [
            {"artifact_hex": b'"report"'.hex(), "digest": canonical.artifact_hash(b'"report"')},
        ],
        "evidence_set_hash": [
            {"members": [], "digest": canonical.evidence_set_hash([])},
            {"members": [H["alpha"]], "digest": canonical.evidence_set_hash([H["alpha"]])},
            {"members": [H["alpha"], H["beta"]], "digest": canonical.evidence_set_hash([H["alpha"], H["beta"]])},
            {
                "members": [H["beta"], H["alpha"], H["beta"]],
                "digest": canonical.evidence_set_hash([H["beta"], H["alpha"], H["beta"]]),
            },
        ],
        "malformed_digests": ["sha256:" + "A" * 64, "sha256:" + "0" * 63, "sha1:" + "0" * 40, "", "sha256:" + "g" * 64],
    }


def _journal_entry_v1(run_id: str) -> dict[str, Any]:
    """The first entry of ``run_id`` as a ``JournalEntry.v1`` record (the chain vectors' and the v1 sample's)."""
    return {
        "run_id": run_id,
        "seq": 0,
        "prev_hash": canonical.journal_genesis(run_id),
        "entry_type": "activity.result",
        "stage_id": "research-0",
        "role": "scout",
        "kind": "research",
        "producer_id": "worker@host",
        "submission_id": "00000000000000000000000000000001",
        "artifact_hash": canonical.artifact_hash(b'"report"'),
        "evidence_set_hash": canonical.evidence_set_hash([H["alpha"]]),
        "observations": [{"kind": "page", "ref": "https://a", "content_hash": H["alpha"]}],
        "terminal_state": "completed",
        "reason_code": "ok",
        "input": {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 7},
        "occurred_at_ms": 1767225600000,
    }


def chain_vectors() -> dict[str, Any]:
    signer = Ed25519PrivateKey.from_private_bytes(SEED)
    public = signer.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    run_id = "run-42"
    genesis = canonical.journal_genesis(run_id)
    entry = _journal_entry_v1(run_id)
    payload = codec.encode(codec.JOURNAL_ENTRY, entry)
    entry_hash = canonical.journal_entry_hash(payload)
    seal = {
        "run_id": run_id,
        "partition": 0,
        "entry_count": 1,
        "head_hash": entry_hash,
        "last_input_offset": 8,
        "final": True,
        "audit_seq": 1,
        "audit_head": canonical.audit_mac(HMAC_KEY, b"example"),
        "sealed_at_ms": 1767225600001,
    }
    seal_payload = codec.encode(codec.RUN_SEAL, seal)
    audit_entry = {
        "partition": 0,
        "seq": 0,
        "prev_mac": canonical.audit_genesis(HMAC_KEY, 0),
        "event": "activity.result",
        "run_id": run_id,
        "stage_id": "research-0",
        "kind": "research",
        "terminal_state": "completed",
        "reason_code": "ok",
        "artifact_hash": entry["artifact_hash"],
        "evidence_set_hash": entry["evidence_set_hash"],
        "record_hash": entry_hash,
        "journal_seq": 0,
        "input": entry["input"],
    }
    audit_payload = codec.encode(codec.AUDIT_ENTRY, audit_entry)
    return {
        "pae": [
            {
                "type": "bernstein/example/v1",
                "body_hex": b"hello".hex(),
                "pae_hex": canonical.pae("bernstein/example/v1", b"hello").hex(),
            }
        ],
        "journal": {
            "run_id": run_id,
            "genesis": genesis,
            "entry": _hexify(entry),
            "entry_schema": codec.JOURNAL_ENTRY,
            "entry_payload_hex": payload.hex(),
            "entry_hash": entry_hash,
        },
        "seal": {
            "ed25519_seed_hex": SEED.hex(),
            "public_key_hex": public.hex(),
            "key_id": canonical.public_key_id(public),
            "seal": seal,
            "seal_schema": codec.RUN_SEAL,
            "seal_payload_hex": seal_payload.hex(),
            "signing_input_hex": canonical.seal_signing_input(seal_payload).hex(),
            "signature_hex": signer.sign(canonical.seal_signing_input(seal_payload)).hex(),
        },
        "audit": {
            "hmac_key_hex": HMAC_KEY.hex(),
            "hmac_key_id": canonical.hmac_key_id(HMAC_KEY),
            "genesis_partition_0": canonical.audit_genesis(HMAC_KEY, 0),
            "entry": audit_entry,
            "entry_schema": codec.AUDIT_ENTRY,
            "entry_payload_hex": audit_payload.hex(),
            "mac": canonical.audit_mac(HMAC_KEY, audit_payload),
        },
    }


def checkpoint_vectors() -> dict[str, Any]:
    """Audit records whose MAC covers the key id (AuditRecord.v2), and signed partition checkpoints.

    A file of its own (added with these formats) so that the earlier files stay byte-identical.
    """
    signer = Ed25519PrivateKey.from_private_bytes(SEED)
    public = signer.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    key_id = canonical.hmac_key_id(HMAC_KEY)
    audit_entry = {
        "partition": 0,
        "seq": 0,
        "prev_mac": canonical.audit_genesis(HMAC_KEY, 0),
        "event": "run.sealed",
        "run_id": "run-42",
        "stage_id": "",
        "kind": "",
        "terminal_state": "",
        "reason_code": "final",
        "artifact_hash": "",
        "evidence_set_hash": "",
        "record_hash": H["gamma"],
        "journal_seq": 1,
        "input": {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 8},
    }
    audit_payload = codec.encode(codec.AUDIT_ENTRY, audit_entry)
    audit_mac = canonical.audit_record_mac(HMAC_KEY, key_id, audit_payload)
    audit_record = {"key_id": key_id, "payload": audit_payload, "mac": audit_mac}
    checkpoints = []
    prev = canonical.checkpoint_genesis(0)
    for seq, (next_offset, audit_seq, head, reason) in enumerate(
        ((9, 1, audit_mac, "final"), (1009, 1001, canonical.audit_mac(HMAC_KEY, b"example"), "periodic"))
    ):
        checkpoint = {
            "partition": 0,
            "seq": seq,
            "prev_hash": prev,
            "input_topic": "bernstein.activity.submissions",
            "next_offset": next_offset,
            "audit_seq": audit_seq,
            "audit_head": head,
            "reason": reason,
            "checkpoint_every": 1000,
            "checkpointed_at_ms": 1767225600001 + seq,
        }
        payload = codec.encode(codec.PARTITION_CHECKPOINT, checkpoint)
        signature = signer.sign(canonical.checkpoint_signing_input(payload))
        record = codec.encode(
            codec.CHECKPOINT_RECORD, {"payload": payload, "key_id": canonical.public_key_id(public), "signature": signature}
        )
        checkpoints.append(
            {
                "checkpoint": checkpoint,
                "payload_schema": codec.PARTITION_CHECKPOINT,
                "payload_hex": payload.hex(),
                "signing_input_hex": canonical.checkpoint_signing_input(payload).hex(),
                "signature_hex": signature.hex(),
                "record_schema": codec.CHECKPOINT_RECORD,
                "record_hex": record.hex(),
                "checkpoint_hash": canonical.checkpoint_hash(payload),
            }
        )
        prev = canonical.checkpoint_hash(payload)
    return {
        "audit_record_v2": {
            "hmac_key_hex": HMAC_KEY.hex(),
            "key_id": key_id,
            "entry": audit_entry,
            "entry_schema": codec.AUDIT_ENTRY,
            "entry_payload_hex": audit_payload.hex(),
            "mac_input_hex": canonical.pae(canonical.DOMAIN_AUDIT_RECORD_V2, canonical.pae(key_id, audit_payload)).hex(),
            "mac": audit_mac,
            "mac_v1_of_same_payload": canonical.audit_mac(HMAC_KEY, audit_payload),
            "record_schema": codec.AUDIT_RECORD_V2,
            "record_hex": codec.encode(codec.AUDIT_RECORD_V2, audit_record).hex(),
        },
        "checkpoints": {
            "ed25519_seed_hex": SEED.hex(),
            "public_key_hex": public.hex(),
            "key_id": canonical.public_key_id(public),
            "genesis_partition_0": canonical.checkpoint_genesis(0),
            "chain": checkpoints,
        },
    }


def avro_vectors() -> dict[str, Any]:
    c = codec.default_codec()
    samples = _avro_samples()
    out = []
    for schema in c.schemas:
        item: dict[str, Any] = {
            "schema": schema.name,
            "parsing_canonical_form": schema.canonical_form,
            "fingerprint_crc64_avro_le": schema.fingerprint.hex(),
        }
        if schema.name in samples:
            record = samples[schema.name]
            item["record"] = _hexify(record)
            item["single_object_hex"] = c.encode(schema.name, record).hex()
        out.append(item)
    return {"encoding": "avro single-object (c3 01 + 8-byte LE CRC-64-AVRO fingerprint + body)", "schemas": out}


def _avro_samples() -> dict[str, dict[str, Any]]:
    obs = [{"kind": "page", "ref": "https://a", "content_hash": H["alpha"]}]
    return {
        codec.ACTIVITY_SUBMISSION: {
            "submission_id": "00000000000000000000000000000001",
            "run_id": "run-42",
            "stage_id": "research-0",
            "role": "scout",
            "producer": {"id": "worker@host", "sdk": "bernstein-python/0.1.0"},
            "kind": "research",
            "artifact": b'"report"',
            "artifact_hash": canonical.artifact_hash(b'"report"'),
            "evidence_set_hash": canonical.evidence_set_hash([H["alpha"]]),
            "observations": obs,
            "terminal_state": "completed",
            "reason_code": "ok",
            "occurred_at_ms": 1767225600000,
        },
        codec.ACTIVITY_SUBMISSION_V2: {
            "submission_id": "00000000000000000000000000000003",
            "run_id": "run-42",
            "stage_id": "research-1",
            "role": "scout",
            "producer": {"id": "worker@host", "sdk": "bernstein-python/0.1.0"},
            "kind": "research",
            "artifact": b'"report"',
            "artifact_hash": canonical.artifact_hash(b'"report"'),
            "evidence_set_hash": canonical.evidence_set_hash([H["alpha"]]),
            "observations": [{**obs[0], "size": len(b"alpha")}],
            "terminal_state": "completed",
            "reason_code": "ok",
            "occurred_at_ms": 1767225600003,
        },
        codec.JOURNAL_ENTRY_V2: {
            "run_id": "run-42",
            "seq": 1,
            "prev_hash": canonical.journal_genesis("run-42"),
            "entry_type": "activity.result",
            "stage_id": "research-1",
            "role": "scout",
            "kind": "research",
            "producer_id": "worker@host",
            "submission_id": "00000000000000000000000000000003",
            "artifact_hash": canonical.artifact_hash(b'"report"'),
            "evidence_set_hash": canonical.evidence_set_hash([H["alpha"]]),
            "observations": [{**obs[0], "size": len(b"alpha")}],
            "terminal_state": "completed",
            "reason_code": "ok",
            "input": {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 11},
            "occurred_at_ms": 1767225600003,
        },
        codec.ACTIVITY_SUBMISSION_V3: _signed_activity(),
        codec.JOURNAL_ENTRY_V3: _journal_entry_v3(),
        codec.RUN_CLOSE_V2: _signed_close(),
        codec.RUN_SEAL_V2: {
            "run_id": "run-42",
            "partition": 0,
            "entry_count": 1,
            "head_hash": canonical.sha256_digest(b"head"),
            "last_input_offset": 12,
            "final": True,
            "audit_seq": 2,
            "audit_head": "hmac-sha256:" + "ab" * 32,
            "sealed_at_ms": 1767225600005,
            "closed_by": {
                k: v
                for k, v in _signed_close().items()
                if k not in ("run_id", "producer", "producer_key_id", "producer_signature")
            }
            | {"producer_id": "worker@host", "key_id": _producer().key_id, "signature": _signed_close()["producer_signature"]},
        },
        codec.RUN_CLOSE: {
            "submission_id": "00000000000000000000000000000002",
            "run_id": "run-42",
            "producer": {"id": "worker@host", "sdk": "bernstein-python/0.1.0"},
            "occurred_at_ms": 1767225600001,
        },
        codec.JOURNAL_RECORD: {"payload": b"\xc3\x01payload", "entry_hash": canonical.sha256_digest(b"x")},
        codec.DEAD_LETTER_V2: {
            "code": "NOT_AVRO_SINGLE_OBJECT",
            "detail": "value is not an Avro single-object record",
            "raw_sha256": canonical.sha256_digest(b"junk"),
            "raw_size": 4,
            "raw": b"junk",
            "key": b"not-run-42",
            "key_sha256": canonical.sha256_digest(b"not-run-42"),
            "key_size": 10,
            "input": {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 9},
            "record_timestamp_ms": 1767225600002,
        },
        **_envelope_samples(),
        **_other_samples(),
    }


POSITION = {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 14}
SCREENSHOT = b"\x89PNG fake screenshot"
DOM = b'- heading "Sign up" [level=1]'


def _computer_use_action(*, sizes: bool) -> dict[str, Any]:
    """The typed action of signatures.json (run-42, session-1, action 0) as a ComputerUseAction record."""
    from bernstein.schemas.documents.browser import Action, LineageBinding, lineage_entry

    signer = _producer()
    genesis = canonical.computer_use_genesis("run-42", "session-1")
    dom_digest = canonical.sha256_digest(DOM)
    obs = canonical.observation_hash(SCREENSHOT, dom_digest)
    action = Action("type", "#email", canonical.typed_value_digest(REDACTION_KEY, "ada@example.org"))
    anchor = canonical.action_anchor(genesis, obs, action.to_record())
    entry = canonical.canonical_json(
        lineage_entry(
            LineageBinding("run-42", "session-1", 0, anchor, genesis, "worker@host"),
            key_id=signer.key_id,
            hmac_key_id=canonical.hmac_key_id(LINEAGE_KEY),
            observation_hash=obs,
            screenshot_hash=canonical.sha256_digest(SCREENSHOT),
            dom_digest=dom_digest,
            action=action,
        )
    )
    record: dict[str, Any] = {
        "submission_id": "session-1-0",
        "run_id": "run-42",
        "session_id": "session-1",
        "action_index": 0,
        "producer": {"id": "worker@host", "sdk": "bernstein-python/0.1.0"},
        "prev_anchor": genesis,
        "screenshot_hash": canonical.sha256_digest(SCREENSHOT),
        "dom_digest": dom_digest,
        "observation_hash": obs,
        "action": action.to_record(),
        "anchor": anchor,
        "lineage": {
            "entry": entry,
            "hmac": canonical.lineage_hmac(LINEAGE_KEY, entry),
            "key_id": signer.key_id,
            "signature": signer.sign(canonical.lineage_signing_input(entry)),
        },
        "occurred_at_ms": 1767225600006,
    }
    if sizes:
        record["screenshot_size"], record["dom_size"] = len(SCREENSHOT), len(DOM)
    return record


def _computer_use_entry(*, sizes: bool) -> dict[str, Any]:
    """The journal entry of ``_computer_use_action`` (the run's fourth entry)."""
    act = _computer_use_action(sizes=sizes)
    lineage = act["lineage"]
    entry: dict[str, Any] = {
        "run_id": act["run_id"],
        "seq": 3,
        "prev_hash": canonical.sha256_digest(b"previous entry"),
        "entry_type": "computer_use.action",
        "session_id": act["session_id"],
        "action_index": act["action_index"],
        "producer_id": act["producer"]["id"],
        "submission_id": act["submission_id"],
        "prev_anchor": act["prev_anchor"],
        "anchor": act["anchor"],
        "screenshot_hash": act["screenshot_hash"],
        "dom_digest": act["dom_digest"],
        "observation_hash": act["observation_hash"],
        "action": act["action"],
        "lineage_entry_hash": canonical.sha256_digest(lineage["entry"]),
        "lineage_key_id": lineage["key_id"],
        "lineage_signature": lineage["signature"],
        "lineage_hmac": lineage["hmac"],
        "lineage_entry": lineage["entry"],
        "input": POSITION,
        "occurred_at_ms": act["occurred_at_ms"],
    }
    if sizes:
        entry["screenshot_size"], entry["dom_size"] = act["screenshot_size"], act["dom_size"]
    return entry


def _audit_entries() -> tuple[dict[str, Any], dict[str, Any]]:
    """AuditEntry.v1 of the v3 journal entry, and AuditEntry.v2 of the computer-use entry (chained after it)."""
    journal = _journal_entry_v3()
    payload = codec.encode(codec.JOURNAL_ENTRY_V3, journal)
    v1 = {
        "partition": 0,
        "seq": 2,
        "prev_mac": canonical.audit_mac(HMAC_KEY, b"previous audit entry"),
        "event": "activity.result",
        "run_id": journal["run_id"],
        "stage_id": journal["stage_id"],
        "kind": journal["kind"],
        "terminal_state": journal["terminal_state"],
        "reason_code": journal["reason_code"],
        "artifact_hash": journal["artifact_hash"],
        "evidence_set_hash": journal["evidence_set_hash"],
        "record_hash": canonical.journal_entry_hash(payload),
        "journal_seq": journal["seq"],
        "input": journal["input"],
    }
    cu = _computer_use_entry(sizes=True)
    cu_payload = codec.encode(codec.COMPUTER_USE_ENTRY_V2, cu)
    v2 = {
        "partition": 0,
        "seq": 3,
        "prev_mac": canonical.audit_record_mac(HMAC_KEY, canonical.hmac_key_id(HMAC_KEY), codec.encode(codec.AUDIT_ENTRY, v1)),
        "event": "computer_use.action",
        "run_id": cu["run_id"],
        "stage_id": cu["session_id"],
        "kind": "browser",
        "terminal_state": "",
        "reason_code": "",
        "artifact_hash": "",
        "evidence_set_hash": "",
        "record_hash": canonical.journal_entry_hash(cu_payload),
        "journal_seq": cu["seq"],
        "input": cu["input"],
        "computer_use": {
            "session_id": cu["session_id"],
            "action_index": cu["action_index"],
            "anchor": cu["anchor"],
            "prev_anchor": cu["prev_anchor"],
            "screenshot_hash": cu["screenshot_hash"],
            "dom_digest": cu["dom_digest"],
            "observation_hash": cu["observation_hash"],
            "action_kind": cu["action"]["kind"],
            "action_digest": canonical.action_digest(cu["action"]),
            "lineage_entry_hash": cu["lineage_entry_hash"],
            "worker_id": cu["producer_id"],
        },
    }
    return v1, v2


def _envelope_samples() -> dict[str, dict[str, Any]]:
    """The envelopes (audit, seal, checkpoint records) around real payloads, with their MACs and signatures."""
    sealer = Ed25519PrivateKey.from_private_bytes(SEED)
    seal_key_id = canonical.public_key_id(
        sealer.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    audit_v1, audit_v2 = _audit_entries()
    audit_v1_payload = codec.encode(codec.AUDIT_ENTRY, audit_v1)
    audit_v2_payload = codec.encode(codec.AUDIT_ENTRY_V2, audit_v2)
    key_id = canonical.hmac_key_id(HMAC_KEY)
    seal = {
        "run_id": "run-42",
        "partition": 0,
        "entry_count": 4,
        "head_hash": canonical.journal_entry_hash(codec.encode(codec.COMPUTER_USE_ENTRY_V2, _computer_use_entry(sizes=True))),
        "last_input_offset": 15,
        "final": False,
        "audit_seq": 4,
        "audit_head": canonical.audit_record_mac(HMAC_KEY, key_id, audit_v2_payload),
        "sealed_at_ms": 1767225600007,
    }
    seal_payload = codec.encode(codec.RUN_SEAL, seal)
    checkpoint = {
        "partition": 0,
        "seq": 2,
        "prev_hash": canonical.checkpoint_hash(b"previous checkpoint"),
        "input_topic": "bernstein.activity.submissions",
        "next_offset": 16,
        "audit_seq": 4,
        "audit_head": seal["audit_head"],
        "reason": "periodic",
        "checkpoint_every": 1000,
        "checkpointed_at_ms": 1767225600008,
    }
    checkpoint_payload = codec.encode(codec.PARTITION_CHECKPOINT, checkpoint)
    # v2: the same checkpoint over a Merkle log of the seal's run: two entries and the seal
    leaves = [
        canonical.tlog_entry_leaf(seal["run_id"], 0, "sha256:" + "1" * 64),
        canonical.tlog_entry_leaf(seal["run_id"], 1, seal["head_hash"]),
        canonical.tlog_seal_leaf(
            seal["run_id"], seal["entry_count"], seal["head_hash"], seal["last_input_offset"], seal["final"], seal["audit_head"]
        ),
    ]
    tree_root = merkle.root([merkle.leaf_hash(leaf) for leaf in leaves])
    origin = canonical.tlog_origin("bernstein", checkpoint["input_topic"], checkpoint["partition"], 1)
    sealer_public = sealer.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    checkpoint_v2 = {
        **checkpoint,
        "tree_size": len(leaves),
        "tree_root": "sha256:" + tree_root.hex(),
        "note": notes.log_checkpoint_note(origin, len(leaves), tree_root, sealer_public, sealer.sign),
    }
    return {
        codec.AUDIT_ENTRY: audit_v1,
        codec.AUDIT_ENTRY_V2: audit_v2,
        codec.AUDIT_RECORD: {
            "payload": audit_v1_payload,
            "key_id": key_id,
            "mac": canonical.audit_mac(HMAC_KEY, audit_v1_payload),
        },
        codec.AUDIT_RECORD_V2: {
            "key_id": key_id,
            "payload": audit_v2_payload,
            "mac": canonical.audit_record_mac(HMAC_KEY, key_id, audit_v2_payload),
        },
        codec.RUN_SEAL: seal,
        codec.SEAL_RECORD: {
            "payload": seal_payload,
            "key_id": seal_key_id,
            "signature": sealer.sign(canonical.seal_signing_input(seal_payload)),
        },
        codec.PARTITION_CHECKPOINT: checkpoint,
        codec.PARTITION_CHECKPOINT_V2: checkpoint_v2,
        codec.CHECKPOINT_RECORD: {
            "payload": checkpoint_payload,
            "key_id": seal_key_id,
            "signature": sealer.sign(canonical.checkpoint_signing_input(checkpoint_payload)),
        },
    }


def _other_samples() -> dict[str, dict[str, Any]]:
    """The schemas no other sample covers: the first journal entry version, computer use, refusals, dead letters v1."""
    sub = _signed_activity()
    return {
        codec.JOURNAL_ENTRY: _journal_entry_v1("run-42"),
        codec.COMPUTER_USE_ACTION: _computer_use_action(sizes=False),
        codec.COMPUTER_USE_ACTION_V2: _computer_use_action(sizes=True),
        codec.COMPUTER_USE_ENTRY: _computer_use_entry(sizes=False),
        codec.COMPUTER_USE_ENTRY_V2: _computer_use_entry(sizes=True),
        codec.REFUSAL: {
            "exception": "RedundantStage",
            "code": "REDUNDANT_STAGE",
            "message": "stage 'research-3' introduces no new evidence (evidence_set_hash already contributed by stage "
            "'research-2')",
            "run_id": sub["run_id"],
            "stage_id": "research-3",
            "role": sub["role"],
            "kind": sub["kind"],
            "submission_id": "00000000000000000000000000000006",
            "field": "evidence_set_hash",
            "declared": sub["evidence_set_hash"],
            "recomputed": sub["evidence_set_hash"],
            "earlier_stage_id": sub["stage_id"],
            "input": {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 17},
            "occurred_at_ms": 1767225600009,
        },
        codec.REFUSAL_V2: {
            "exception": "ActivityRejected",
            "code": "RUN_NOT_OWNED",
            "message": "run 'scout-7' belongs to 'research-worker' (run prefix 'scout-' in the roles manifest); "
            "'browser-worker' is not one of its collaborators",
            "run_id": "scout-7",
            "stage_id": "fetch-1",
            "role": "navigator",
            "kind": "browser",
            "submission_id": "00000000000000000000000000000007",
            "field": "run_id",
            "declared": "scout-7",
            "recomputed": "research-worker",
            "earlier_stage_id": None,
            "input": {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 18},
            "occurred_at_ms": 1767225600010,
            "producer": "browser-worker",
            "key_id": canonical.public_key_id(bytes(range(32))),
            "authenticated": True,
        },
        codec.DEAD_LETTER: {
            "code": "NOT_AVRO_SINGLE_OBJECT",
            "detail": "value is not an Avro single-object record",
            "raw_sha256": canonical.sha256_digest(b"junk"),
            "raw_size": 4,
            "raw": b"junk",
            "key": b"run-42",
            "input": {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 9},
            "record_timestamp_ms": 1767225600002,
        },
    }


class _Producer:
    """The vectors' producer identity (an Ed25519 key from a fixed seed; schemas import no key store)."""

    def __init__(self, seed: bytes) -> None:
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.public_key_raw = self._key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = canonical.public_key_id(self.public_key_raw)

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)


def _producer() -> _Producer:
    return _Producer(PRODUCER_SEED)


def _activity_v2() -> dict[str, Any]:
    return {
        "submission_id": "00000000000000000000000000000004",
        "run_id": "run-42",
        "stage_id": "research-2",
        "role": "scout",
        "producer": {"id": "worker@host", "sdk": "bernstein-python/0.1.0"},
        "kind": "research",
        "artifact": b'"report"',
        "artifact_hash": canonical.artifact_hash(b'"report"'),
        "evidence_set_hash": canonical.evidence_set_hash([H["alpha"], H["beta"]]),
        "observations": [
            {"kind": "page", "ref": "https://a", "content_hash": H["alpha"], "size": 5},
            {"kind": "page", "ref": "https://b/caf\u00e9", "content_hash": H["beta"], "size": 4},
        ],
        "terminal_state": "completed",
        "reason_code": "ok",
        "occurred_at_ms": 1767225600004,
    }


def _signed_activity() -> dict[str, Any]:
    signer = _producer()
    record = _activity_v2()
    statement = canonical.submission_statement(record, signer.key_id)
    return {
        **record,
        "producer_key_id": signer.key_id,
        "producer_signature": signer.sign(canonical.submission_signing_input(statement)),
    }


def _journal_entry_v3() -> dict[str, Any]:
    sub = _signed_activity()
    return {
        "run_id": sub["run_id"],
        "seq": 2,
        "prev_hash": canonical.sha256_digest(b"previous entry"),
        "entry_type": "activity.result",
        "stage_id": sub["stage_id"],
        "role": sub["role"],
        "kind": sub["kind"],
        "producer_id": sub["producer"]["id"],
        "submission_id": sub["submission_id"],
        "artifact_hash": sub["artifact_hash"],
        "evidence_set_hash": sub["evidence_set_hash"],
        "observations": sub["observations"],
        "terminal_state": sub["terminal_state"],
        "reason_code": sub["reason_code"],
        "input": {"topic": "bernstein.activity.submissions", "partition": 0, "offset": 13},
        "occurred_at_ms": sub["occurred_at_ms"],
        "producer_key_id": sub["producer_key_id"],
        "producer_signature": sub["producer_signature"],
    }


def _signed_close() -> dict[str, Any]:
    signer = _producer()
    statement = canonical.run_close_statement(
        "00000000000000000000000000000005", "run-42", "worker@host", 1767225600005, signer.key_id
    )
    return {
        "submission_id": "00000000000000000000000000000005",
        "run_id": "run-42",
        "producer": {"id": "worker@host", "sdk": "bernstein-python/0.1.0"},
        "occurred_at_ms": 1767225600005,
        "producer_key_id": signer.key_id,
        "producer_signature": signer.sign(canonical.submission_signing_input(statement)),
    }


def signature_vectors() -> dict[str, Any]:
    """Every byte string a producer signs or MACs, from fixed keys: other languages reproduce these."""
    from bernstein.schemas.documents.browser import Action, LineageBinding, lineage_entry

    signer = _producer()
    activity = _signed_activity()
    activity_statement = canonical.submission_statement(activity, signer.key_id)
    close = _signed_close()
    close_statement = canonical.run_close_statement(
        close["submission_id"], close["run_id"], close["producer"]["id"], close["occurred_at_ms"], signer.key_id
    )
    genesis = canonical.computer_use_genesis("run-42", "session-1")
    obs = canonical.observation_hash(b"\x89PNG fake screenshot", canonical.sha256_digest(b'- heading "Sign up" [level=1]'))
    action = Action("type", "#email", canonical.typed_value_digest(REDACTION_KEY, "ada@example.org"))
    anchor = canonical.action_anchor(genesis, obs, action.to_record())
    entry = canonical.canonical_json(
        lineage_entry(
            LineageBinding("run-42", "session-1", 0, anchor, genesis, "worker@host"),
            key_id=signer.key_id,
            hmac_key_id=canonical.hmac_key_id(LINEAGE_KEY),
            observation_hash=obs,
            screenshot_hash=canonical.sha256_digest(b"\x89PNG fake screenshot"),
            dom_digest=canonical.sha256_digest(b'- heading "Sign up" [level=1]'),
            action=action,
        )
    )

    def statement_case(statement: dict[str, Any], record: dict[str, Any], schema: str) -> dict[str, Any]:
        signing_input = canonical.submission_signing_input(statement)
        return {
            "schema": schema,
            "record": _hexify(record),
            "statement": statement,
            "statement_canonical_utf8": canonical.canonical_json(statement).decode(),
            "signing_input_hex": signing_input.hex(),
            "signature_hex": signer.sign(signing_input).hex(),
        }

    return {
        "producer": {
            "ed25519_seed_hex": PRODUCER_SEED.hex(),
            "public_key_hex": signer.public_key_raw.hex(),
            "key_id": signer.key_id,
            "signing_domain": canonical.DOMAIN_SUBMISSION,
            "rule": "signature = Ed25519(seed, PAE(signing_domain, canonical_json(statement))); PAE as in chain.json",
        },
        "activity_submission": statement_case(activity_statement, activity, codec.ACTIVITY_SUBMISSION_V3),
        "run_close": statement_case(close_statement, close, codec.RUN_CLOSE_V2),
        "lineage": {
            "lineage_key_hex": LINEAGE_KEY.hex(),
            "lineage_key_id": canonical.hmac_key_id(LINEAGE_KEY),
            "entry_canonical_utf8": entry.decode(),
            "signing_input_hex": canonical.lineage_signing_input(entry).hex(),
            "hmac": canonical.lineage_hmac(LINEAGE_KEY, entry),
            "signature_hex": signer.sign(canonical.lineage_signing_input(entry)).hex(),
            "entry_hash": canonical.sha256_digest(entry),
        },
        "typed_value": {
            "redaction_key_hex": REDACTION_KEY.hex(),
            "value": "ada@example.org",
            "digest": canonical.typed_value_digest(REDACTION_KEY, "ada@example.org"),
        },
    }


def modality_vectors() -> dict[str, Any]:
    action = {"kind": "type", "target": "#email", "value_digest": canonical.typed_value_digest(HMAC_KEY, "ada@example.org")}
    genesis = canonical.computer_use_genesis("run-42", "session-1")
    obs = canonical.observation_hash(b"\x89PNG fake screenshot", canonical.sha256_digest(b'- heading "Sign up" [level=1]'))
    return {
        "dataops_plan": {
            "input_hashes": [H["beta"], H["alpha"], H["beta"]],
            "steps": ["filter status == shipped", "sum amount_cents"],
            "plan_document_canonical": canonical.canonical_json(
                canonical.plan_document([H["beta"], H["alpha"]], ["filter status == shipped", "sum amount_cents"])
            ).decode(),
            "plan_hash": canonical.plan_hash(
                [H["beta"], H["alpha"], H["beta"]], ["filter status == shipped", "sum amount_cents"]
            ),
        },
        "computer_use": {
            "hmac_key_hex": HMAC_KEY.hex(),
            "typed_value": "ada@example.org",
            "typed_value_digest": action["value_digest"],
            "run_id": "run-42",
            "session_id": "session-1",
            "session_genesis": genesis,
            "screenshot_hex": b"\x89PNG fake screenshot".hex(),
            "dom_digest": canonical.sha256_digest(b'- heading "Sign up" [level=1]'),
            "observation_hash": obs,
            "action": action,
            "action_anchor": canonical.action_anchor(genesis, obs, action),
        },
    }


def partitions() -> dict[str, Any]:
    """Record key -> Kafka's murmur2 and the partition for several partition counts (docs/producing.md)."""
    from bernstein.schemas.partitioning import SEED as MURMUR2_SEED
    from bernstein.schemas.partitioning import murmur2, partition_for

    keys = [
        "",  # no block, no tail
        *("a", "ab", "abc", "abcd"),  # each tail length, one block
        *("run-1", "run-42", "run-420", "run-4200", "run-42000"),  # 5 to 9 bytes: a block or two and every tail
        *("run-2", "run-3", "run-6", "run-10"),
        *("21", "foobar", "a-little-bit-long-string", "a-little-bit-longer-string"),  # Kafka's UtilsTest
        "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
        *("r\u00fcn-\u00e9", "\u8fd0\u884c-7", "run-\U0001f600"),  # non-ASCII: the UTF-8 bytes are hashed
    ]
    counts = (1, 2, 3, 4, 6, 12, 100)
    return {
        "algorithm": "Kafka's org.apache.kafka.common.utils.Utils.murmur2 (MurmurHash2, 32 bits, m 0x5bd1e995, r 24, "
        "little-endian blocks) over the record key's bytes, as a signed 32-bit int; partition = "
        "(murmur2 & 0x7fffffff) % partitions",
        "seed": f"{MURMUR2_SEED:#x}",
        "cases": [
            {
                "key_utf8": key,
                "key_hex": key.encode().hex(),
                "murmur2": murmur2(key.encode()),
                "partitions": {str(n): partition_for(key.encode(), n) for n in counts},
            }
            for key in keys
        ],
    }


def ed25519_vectors() -> dict[str, Any]:
    """The verification rule's cases (``bernstein.schemas.ed25519``): every verifier gives each its ``valid``."""
    from tests.vectors.ed25519_cases import cases

    return {
        "rule": "ZIP 215: A and R decode from any encoding whose y mod p is on the curve; S < L; "
        "[8]([S]B - R - [k]A) = 0 with k = SHA-512(R || A || M) mod L over the bytes as given",
        "cases": cases(),
    }


def browser_vectors() -> dict[str, Any]:
    """browser.json: a browser session's action records as a producer SDK builds them (tests/vectors/browser_vectors.py)."""
    from tests.vectors.browser_vectors import browser_vectors as build

    return build()


def tlog_vectors() -> dict[str, Any]:
    """tlog.json: Merkle trees, proofs and signed checkpoints for other implementations (tests/vectors/tlog_vectors.py)."""
    from tests.vectors.tlog_vectors import tlog_vectors as build

    return build()


FILES = {
    "canonical_json.json": canonical_vectors,
    "digests.json": digest_vectors,
    "chain.json": chain_vectors,
    "avro.json": avro_vectors,
    "modalities.json": modality_vectors,
    "checkpoints.json": checkpoint_vectors,
    "signatures.json": signature_vectors,
    "partitions.json": partitions,
    "ed25519.json": ed25519_vectors,
    "browser.json": browser_vectors,
    "tlog.json": tlog_vectors,
}


def render(name: str) -> str:
    return json.dumps(FILES[name](), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in FILES:
        text = render(name)
        path = HERE / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            stale.append(name)
            if not check:
                path.write_text(text, encoding="utf-8")
    if check and stale:
        print(f"golden vectors out of date: {', '.join(stale)} (run python -m tests.vectors.generate and review the diff)")
        return 1
    print("golden vectors " + ("up to date" if check else f"written ({len(FILES)} files)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
