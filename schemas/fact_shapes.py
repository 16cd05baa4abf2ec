"""The fact tuples of the two readers, named: their kind tags and their fields, stated once for Python.

The scheduler's restart fold (``bernstein.consumers.core.rebuild``) and the verifier (``bernstein.verifier.facts``)
read records into flat tuples, in Python or in the Rust extension (``native/src/facts.rs``, which turns its named
structs into these tuples through one table). A tuple stays a tuple on the hot paths (no object per record), but
its layout is no longer a convention kept in three places: each shape is a ``NamedTuple`` here, code reads a field
by name (``AuditRecordFact._make(fact).run_id``) or by the index this module gives it (``AUDIT_RECORD.index("mac")``
at import time), and the extension exports its own table (``bernstein_native.FACT_SHAPES``, ``FACT_KINDS``), which
``tests/unit/differential/test_fact_shapes.py`` holds equal to ``SHAPES`` and ``KINDS``, so a field added on one
side fails until the other side has it.

A shape with a kind tag is one of several a reader may return for the same input; its first field is the tag.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple


class FoldEntry(NamedTuple):
    """``fold.journal.ENTRY`` (kind tag 0)."""

    kind: Any
    run_id: Any
    seq: Any
    entry_hash: Any
    prev_hash: Any
    stored_hash_ok: Any
    submission_id: Any
    stage_id: Any
    evidence_set_hash: Any
    observed: Any
    charges: Any
    browser: Any
    producer_id: Any


class FoldAction(NamedTuple):
    """``fold.journal.ACTION`` (kind tag 1)."""

    kind: Any
    run_id: Any
    seq: Any
    entry_hash: Any
    prev_hash: Any
    stored_hash_ok: Any
    submission_id: Any
    session_id: Any
    action_index: Any
    anchor: Any
    charges: Any
    producer_id: Any


class FoldOddEntry(NamedTuple):
    """``fold.journal.ODD_ENTRY`` (kind tag 2)."""

    kind: Any
    run_id: Any
    seq: Any
    entry_hash: Any
    prev_hash: Any
    stored_hash_ok: Any
    schema: Any
    entry_type: Any


class FoldSeal(NamedTuple):
    """``fold.journal.SEAL`` (kind tag 3)."""

    kind: Any
    run_id: Any
    entry_count: Any
    identity: Any
    key_id: Any
    signed: Any
    final: Any
    head_hash: Any
    last_input_offset: Any
    audit_head: Any


class FoldAudit(NamedTuple):
    """``fold.audit``."""

    partition: Any
    seq: Any
    prev_mac: Any
    mac: Any
    key_id: Any
    event: Any
    run_id: Any
    journal_seq: Any
    record_hash: Any


class FoldCheckpoint(NamedTuple):
    """``fold.checkpoints``."""

    partition: Any
    seq: Any
    prev_hash: Any
    audit_seq: Any
    audit_head: Any
    checkpoint_hash: Any
    signed: Any


class AuditWalkMirror(NamedTuple):
    """``fold.audit_walk.MIRROR``."""

    index: Any
    adopted: Any
    run_id: Any
    journal_seq: Any
    record_hash: Any
    seq: Any
    head: Any


class AuditWalkUndecided(NamedTuple):
    """``fold.audit_walk.UNDECIDED``."""

    index: Any
    adopted: Any
    seq: Any
    head: Any


class JournalUndecodable(NamedTuple):
    """``verifier.journal.J_UNDECODABLE`` (kind tag 0)."""

    kind: Any
    message: Any


class JournalEntryFact(NamedTuple):
    """``verifier.journal.J_ENTRY`` (kind tag 1)."""

    kind: Any
    stored: Any
    recomputed: Any
    run_id: Any
    seq: Any
    prev_hash: Any
    entry_type: Any


class JournalEntryUndecodable(NamedTuple):
    """``verifier.journal.J_ENTRY_UNDECODABLE`` (kind tag 2)."""

    kind: Any
    stored: Any
    recomputed: Any
    message: Any


class SealFact(NamedTuple):
    """``verifier.journal.J_SEAL`` (kind tag 3)."""

    kind: Any
    payload: Any
    key_id: Any
    signature: Any


class AuditUndecodable(NamedTuple):
    """``verifier.audit.A_UNDECODABLE`` (kind tag 0)."""

    kind: Any
    message: Any


class AuditRecordFact(NamedTuple):
    """``verifier.audit.A_RECORD`` (kind tag 1)."""

    kind: Any
    key_id: Any
    mac: Any
    recomputed: Any
    partition: Any
    seq: Any
    prev_mac: Any
    event: Any
    run_id: Any
    record_hash: Any
    journal_seq: Any
    input_partition: Any
    input_offset: Any


class StageSkip(NamedTuple):
    """``verifier.stage.S_SKIP`` (kind tag 0)."""

    kind: Any


class StageNotResult(NamedTuple):
    """``verifier.stage.S_NOT_RESULT`` (kind tag 1)."""

    kind: Any
    stored: Any


class StageResultFact(NamedTuple):
    """``verifier.stage.S_RESULT`` (kind tag 2)."""

    kind: Any
    stored: Any
    recomputed: Any
    run_id: Any
    seq: Any
    stage_id: Any
    stage_kind: Any
    terminal_state: Any
    artifact_hash: Any
    evidence_set_hash: Any
    observations: Any
    recomputed_set: Any
    payload: Any
    sizes: Any
    producer_id: Any
    key_id: Any


class ProducerOther(NamedTuple):
    """``verifier.producer.P_OTHER`` (kind tag 0)."""

    kind: Any


class ProducerLegacy(NamedTuple):
    """``verifier.producer.P_LEGACY`` (kind tag 1)."""

    kind: Any


class ProducerAction(NamedTuple):
    """``verifier.producer.P_ACTION`` (kind tag 2)."""

    kind: Any


class ProducerSigned(NamedTuple):
    """``verifier.producer.P_SIGNED`` (kind tag 3)."""

    kind: Any
    seq: Any
    key_id: Any
    producer_id: Any
    verified: Any


class DumpRow(NamedTuple):
    """``verifier.dump_row``."""

    offset: Any
    timestamp: Any
    key: Any
    value: Any
    topic: Any
    partition: Any
    headers: Any


KINDS: Final[dict[str, dict[str, int]]] = {
    "fold": {"ENTRY": 0, "ACTION": 1, "ODD_ENTRY": 2, "SEAL": 3},
    "verifier": {
        "J_UNDECODABLE": 0,
        "J_ENTRY": 1,
        "J_ENTRY_UNDECODABLE": 2,
        "J_SEAL": 3,
        "A_UNDECODABLE": 0,
        "A_RECORD": 1,
        "S_SKIP": 0,
        "S_NOT_RESULT": 1,
        "S_RESULT": 2,
        "P_OTHER": 0,
        "P_LEGACY": 1,
        "P_ACTION": 2,
        "P_SIGNED": 3,
    },
}
"""The kind tags, by reader (``fold``, ``verifier``), as the extension exports them."""

SHAPES: Final[dict[str, tuple[int | None, tuple[str, ...]]]] = {
    "fold.journal.ENTRY": (0, FoldEntry._fields),
    "fold.journal.ACTION": (1, FoldAction._fields),
    "fold.journal.ODD_ENTRY": (2, FoldOddEntry._fields),
    "fold.journal.SEAL": (3, FoldSeal._fields),
    "fold.audit": (None, FoldAudit._fields),
    "fold.checkpoints": (None, FoldCheckpoint._fields),
    "fold.audit_walk.MIRROR": (None, AuditWalkMirror._fields),
    "fold.audit_walk.UNDECIDED": (None, AuditWalkUndecided._fields),
    "verifier.journal.J_UNDECODABLE": (0, JournalUndecodable._fields),
    "verifier.journal.J_ENTRY": (1, JournalEntryFact._fields),
    "verifier.journal.J_ENTRY_UNDECODABLE": (2, JournalEntryUndecodable._fields),
    "verifier.journal.J_SEAL": (3, SealFact._fields),
    "verifier.audit.A_UNDECODABLE": (0, AuditUndecodable._fields),
    "verifier.audit.A_RECORD": (1, AuditRecordFact._fields),
    "verifier.stage.S_SKIP": (0, StageSkip._fields),
    "verifier.stage.S_NOT_RESULT": (1, StageNotResult._fields),
    "verifier.stage.S_RESULT": (2, StageResultFact._fields),
    "verifier.producer.P_OTHER": (0, ProducerOther._fields),
    "verifier.producer.P_LEGACY": (1, ProducerLegacy._fields),
    "verifier.producer.P_ACTION": (2, ProducerAction._fields),
    "verifier.producer.P_SIGNED": (3, ProducerSigned._fields),
    "verifier.dump_row": (None, DumpRow._fields),
}
"""Each shape by its dotted name: (kind tag or None, field names), as the extension exports them."""

AUDIT_RECORD_AT: Final = AuditRecordFact(*range(len(AuditRecordFact._fields)))
"""Where each field of an audit record's fact sits (``fact[AUDIT_RECORD_AT.mac]``), for the loops that keep the tuple."""
