"""Audit records built and forged by hand, for the ``audit follow`` tests and benchmark.

``genuine`` writes what the scheduler writes (``consumers/core/outputs.py`` ``_audit``: an
AuditEntry.v1 payload in an AuditRecord.v2 envelope MACed with ``audit_record_mac``);
``edited`` changes payload fields and keeps the stored key id and MAC (a forgery
without the key); ``remac`` MACs a payload with another key.
"""

from __future__ import annotations

from typing import Any

from bernstein.schemas import codec
from bernstein.schemas.canonical import audit_genesis, audit_record_mac


def entry(
    partition: int,
    seq: int,
    prev_mac: str,
    *,
    event: str = "activity.result",
    run_id: str = "run-1",
    input_offset: int | None = None,
) -> dict[str, Any]:
    return {
        "partition": partition,
        "seq": seq,
        "prev_mac": prev_mac,
        "event": event,
        "run_id": run_id,
        "stage_id": f"stage-{seq}",
        "kind": "coding",
        "terminal_state": "completed",
        "reason_code": "ok",
        "artifact_hash": "sha256:" + "a" * 64,
        "evidence_set_hash": "sha256:" + "b" * 64,
        "record_hash": "sha256:" + "c" * 64,
        "journal_seq": seq,
        "input": {
            "topic": "p.activity.submissions",
            "partition": partition,
            "offset": seq if input_offset is None else input_offset,
        },
    }


def envelope(payload: bytes, key_id: str, mac: str) -> bytes:
    return codec.encode(codec.AUDIT_RECORD_V2, {"key_id": key_id, "payload": payload, "mac": mac})


def genuine(secret: bytes, key_id: str, fields: dict[str, Any]) -> tuple[bytes, str]:
    """(value, mac) of the audit record the scheduler would write for ``fields``."""
    payload = codec.encode(codec.AUDIT_ENTRY, fields)
    mac = audit_record_mac(secret, key_id, payload)
    return envelope(payload, key_id, mac), mac


def chain(
    secret: bytes,
    key_id: str,
    partition: int,
    events: list[tuple[str, str]],
    *,
    start_seq: int = 0,
    head: str | None = None,
) -> list[tuple[bytes, str]]:
    """A run of genuine records (``(event, run_id)`` each) continuing a chain (from its genesis by default)."""
    prev = head if head is not None else audit_genesis(secret, partition)
    out = []
    for index, (event, run_id) in enumerate(events):
        value, mac = genuine(secret, key_id, entry(partition, start_seq + index, prev, event=event, run_id=run_id))
        out.append((value, mac))
        prev = mac
    return out


def parts(value: bytes) -> tuple[dict[str, Any], str, str]:
    """(decoded payload fields, key id, mac) of an AuditRecord."""
    _, (payload, key_id, mac) = codec.split_envelope(value)
    return dict(codec.decode(payload).record), key_id, mac


def edited(value: bytes, **changes: Any) -> bytes:
    """The record with payload fields changed and its stored key id and MAC kept (forged without the key)."""
    fields, key_id, mac = parts(value)
    return envelope(codec.encode(codec.AUDIT_ENTRY, {**fields, **changes}), key_id, mac)


def remac(value: bytes, secret: bytes, key_id: str | None = None) -> bytes:
    """The record MACed with ``secret`` (under ``key_id``, default the one it names)."""
    fields, stored_key, _ = parts(value)
    return genuine(secret, key_id or stored_key, fields)[0]
