"""Journal-record helpers for the computer-use replay tests (unit and browser integration alike)."""

from __future__ import annotations

from dataclasses import replace

from bernstein.schemas import codec
from bernstein.schemas.canonical import journal_entry_hash
from bernstein.verifier.sources import StoredRecord


def computer_use_positions(records: list[StoredRecord]) -> list[int]:
    """Positions (in the journal list) of the ComputerUseEntry records."""
    out = []
    for position, record in enumerate(records):
        envelope = codec.decode(record.value or b"")
        if (
            envelope.schema.name == codec.JOURNAL_RECORD
            and codec.decode(envelope.record["payload"]).schema.name in codec.COMPUTER_USE_ENTRIES
        ):
            out.append(position)
    return out


def edit_entry(record: StoredRecord, *, rehash: bool, **changes: object) -> StoredRecord:
    """Re-encode one ComputerUseEntry with ``changes``; ``rehash`` also fixes the envelope's entry hash."""
    envelope = codec.decode(record.value or b"").record
    decoded = codec.decode(envelope["payload"])
    entry = decoded.record
    entry.update(changes)
    payload = codec.encode(decoded.schema.name, entry)
    stored_hash = journal_entry_hash(payload) if rehash else envelope["entry_hash"]
    return replace(record, value=codec.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": stored_hash}))
