//! The shapes of the fact tuples the extension hands to Python, defined once: each shape's
//! kind tag (the tuple's first item, where it has one) and its field names, in tuple order.
//!
//! Inside Rust the facts are named structs (`fold`, `verify`); only the bindings lay them
//! out as tuples, through these shapes, and the native walks (`walk`) read the
//! verifier's tuples back by these indices. The extension exports every shape (`FACT_SHAPES`,
//! `FACT_KINDS`); Python states the same shapes once (`schemas/fact_shapes.py`, a `NamedTuple`
//! per shape and the kind tags), and `tests/unit/differential/test_fact_shapes.py` holds the two
//! tables equal. The Python readers take their kind tags from that table, and the verifier's
//! audit-record readers read fields by name (`AuditRecordFact`, `AUDIT_RECORD_AT`); the fold
//! (`consumers/core/rebuild.py`) and the verifier's journal and stage walks still unpack most
//! tuples by position, so a field's place in `FIELDS` is part of its contract.

/// One tuple layout: `TAG` (None: the tuple has no kind tag), `FIELDS` in order, `LEN`, and
/// one `usize` constant per field, its index.
macro_rules! shape {
    ($(#[$doc:meta])* $module:ident, $name:literal, $kind:expr, [$($at:ident: $field:literal),+ $(,)?]) => {
        $(#[$doc])*
        pub mod $module {
            #[allow(unused_imports)]
            use super::{fk, vk};
            /// The name `FACT_SHAPES` lists this shape under.
            pub const NAME: &str = $name;
            /// The kind tag, the tuple's first item (None: the tuple has none).
            pub const TAG: Option<i64> = $kind;
            pub const FIELDS: &[&str] = &[$($field),+];
            pub const LEN: usize = FIELDS.len();
            #[allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]
            #[repr(usize)]
            enum At { $($at),+ }
            $(#[allow(dead_code)] pub const $at: usize = At::$at as usize;)+
        }
    };
}

/// The kind tags of the fold's journal facts (`consumers/core/rebuild.py`: `_ENTRY`, ...).
pub mod fold_kinds {
    pub const ENTRY: i64 = 0;
    pub const ACTION: i64 = 1;
    pub const ODD_ENTRY: i64 = 2;
    pub const SEAL: i64 = 3;
}

/// The kind tags of the verifier's facts (`verifier/facts.py`: `J_ENTRY`, ...).
pub mod verifier_kinds {
    pub const J_UNDECODABLE: i64 = 0;
    pub const J_ENTRY: i64 = 1;
    pub const J_ENTRY_UNDECODABLE: i64 = 2;
    pub const J_SEAL: i64 = 3;
    pub const A_UNDECODABLE: i64 = 0;
    pub const A_RECORD: i64 = 1;
    pub const S_SKIP: i64 = 0;
    pub const S_NOT_RESULT: i64 = 1;
    pub const S_RESULT: i64 = 2;
    pub const P_OTHER: i64 = 0;
    pub const P_LEGACY: i64 = 1;
    pub const P_ACTION: i64 = 2;
    pub const P_SIGNED: i64 = 3;
}

use fold_kinds as fk;
use verifier_kinds as vk;

// -- the restart fold (`FoldReader`) -------------------------------------------------------

shape!(
    /// `FoldReader.journal`: an activity entry (`charges`: its sized observations' (digest, size)
    /// pairs, or None).
    fold_entry, "fold.journal.ENTRY", Some(fk::ENTRY),
    [KIND: "kind", RUN_ID: "run_id", SEQ: "seq", ENTRY_HASH: "entry_hash", PREV_HASH: "prev_hash",
     STORED_HASH_OK: "stored_hash_ok", SUBMISSION_ID: "submission_id", STAGE_ID: "stage_id",
     EVIDENCE_SET_HASH: "evidence_set_hash", OBSERVED: "observed", CHARGES: "charges",
     BROWSER: "browser", PRODUCER_ID: "producer_id"]
);
shape!(
    /// `FoldReader.journal`: a computer-use action entry.
    fold_action, "fold.journal.ACTION", Some(fk::ACTION),
    [KIND: "kind", RUN_ID: "run_id", SEQ: "seq", ENTRY_HASH: "entry_hash", PREV_HASH: "prev_hash",
     STORED_HASH_OK: "stored_hash_ok", SUBMISSION_ID: "submission_id", SESSION_ID: "session_id",
     ACTION_INDEX: "action_index", ANCHOR: "anchor", CHARGES: "charges", PRODUCER_ID: "producer_id"]
);
shape!(
    /// `FoldReader.journal`: an entry whose entry_type its layout does not carry.
    fold_odd_entry, "fold.journal.ODD_ENTRY", Some(fk::ODD_ENTRY),
    [KIND: "kind", RUN_ID: "run_id", SEQ: "seq", ENTRY_HASH: "entry_hash", PREV_HASH: "prev_hash",
     STORED_HASH_OK: "stored_hash_ok", SCHEMA: "schema", ENTRY_TYPE: "entry_type"]
);
shape!(
    /// `FoldReader.journal`: a seal under one of the scheduler's keys (`head_hash`,
    /// `last_input_offset`, `audit_head`: what its Merkle log leaf names besides the run).
    fold_seal, "fold.journal.SEAL", Some(fk::SEAL),
    [KIND: "kind", RUN_ID: "run_id", ENTRY_COUNT: "entry_count", IDENTITY: "identity",
     KEY_ID: "key_id", SIGNED: "signed", FINAL: "final", HEAD_HASH: "head_hash",
     LAST_INPUT_OFFSET: "last_input_offset", AUDIT_HEAD: "audit_head"]
);
shape!(
    /// `FoldReader.audit`: an audit record whose MAC verifies (`key_id` None for AuditRecord.v1).
    fold_audit, "fold.audit", None,
    [PARTITION: "partition", SEQ: "seq", PREV_MAC: "prev_mac", MAC: "mac", KEY_ID: "key_id",
     EVENT: "event", RUN_ID: "run_id", JOURNAL_SEQ: "journal_seq", RECORD_HASH: "record_hash"]
);
shape!(
    /// `FoldReader.checkpoints`: a checkpoint under one of the scheduler's keys.
    fold_checkpoint, "fold.checkpoints", None,
    [PARTITION: "partition", SEQ: "seq", PREV_HASH: "prev_hash", AUDIT_SEQ: "audit_seq",
     AUDIT_HEAD: "audit_head", CHECKPOINT_HASH: "checkpoint_hash", SIGNED: "signed"]
);
shape!(
    /// `FoldReader.audit_walk`: an adopted record that mirrors a journal record (`adopted` True;
    /// the chain after it).
    fold_walk_mirror, "fold.audit_walk.MIRROR", None,
    [INDEX: "index", ADOPTED: "adopted", RUN_ID: "run_id", JOURNAL_SEQ: "journal_seq",
     RECORD_HASH: "record_hash", SEQ: "seq", HEAD: "head"]
);
shape!(
    /// `FoldReader.audit_walk`: a record the walk leaves to Python (`adopted` False; the chain
    /// before it).
    fold_walk_undecided, "fold.audit_walk.UNDECIDED", None,
    [INDEX: "index", ADOPTED: "adopted", SEQ: "seq", HEAD: "head"]
);

// -- the verifier (`FactReader`, `parse_dump_*`) --------------------------------------------

shape!(
    /// `FactReader.journal_facts`: the envelope does not decode.
    journal_undecodable, "verifier.journal.J_UNDECODABLE", Some(vk::J_UNDECODABLE),
    [KIND: "kind", MESSAGE: "message"]
);
shape!(
    /// `FactReader.journal_facts`: an entry and its head.
    journal_entry, "verifier.journal.J_ENTRY", Some(vk::J_ENTRY),
    [KIND: "kind", STORED: "stored", RECOMPUTED: "recomputed", RUN_ID: "run_id", SEQ: "seq",
     PREV_HASH: "prev_hash", ENTRY_TYPE: "entry_type"]
);
shape!(
    /// `FactReader.journal_facts`: an entry whose head does not decode.
    journal_entry_undecodable, "verifier.journal.J_ENTRY_UNDECODABLE", Some(vk::J_ENTRY_UNDECODABLE),
    [KIND: "kind", STORED: "stored", RECOMPUTED: "recomputed", MESSAGE: "message"]
);
shape!(
    /// `FactReader.journal_facts`: a seal.
    journal_seal, "verifier.journal.J_SEAL", Some(vk::J_SEAL),
    [KIND: "kind", PAYLOAD: "payload", KEY_ID: "key_id", SIGNATURE: "signature"]
);
shape!(
    /// `FactReader.audit_facts`: the record does not decode.
    audit_undecodable, "verifier.audit.A_UNDECODABLE", Some(vk::A_UNDECODABLE),
    [KIND: "kind", MESSAGE: "message"]
);
shape!(
    /// `FactReader.audit_facts`: a record, its MAC recomputed (None: its key id is not pinned).
    audit_record, "verifier.audit.A_RECORD", Some(vk::A_RECORD),
    [KIND: "kind", KEY_ID: "key_id", MAC: "mac", RECOMPUTED: "recomputed", PARTITION: "partition",
     SEQ: "seq", PREV_MAC: "prev_mac", EVENT: "event", RUN_ID: "run_id", RECORD_HASH: "record_hash",
     JOURNAL_SEQ: "journal_seq", INPUT_PARTITION: "input_partition", INPUT_OFFSET: "input_offset"]
);
shape!(
    /// `FactReader.stage_facts`: not a decodable JournalRecord.
    stage_skip, "verifier.stage.S_SKIP", Some(vk::S_SKIP),
    [KIND: "kind"]
);
shape!(
    /// `FactReader.stage_facts`: a journal record that is not a decodable activity.result entry.
    stage_not_result, "verifier.stage.S_NOT_RESULT", Some(vk::S_NOT_RESULT),
    [KIND: "kind", STORED: "stored"]
);
shape!(
    /// `FactReader.stage_facts`: an activity.result entry (`observations`: ((kind, ref,
    /// content_hash), ...); `recomputed_set` None when a member is malformed; `sizes` None for
    /// JournalEntry.v1; `key_id` "" before JournalEntry.v3).
    stage_result, "verifier.stage.S_RESULT", Some(vk::S_RESULT),
    [KIND: "kind", STORED: "stored", RECOMPUTED: "recomputed", RUN_ID: "run_id", SEQ: "seq",
     STAGE_ID: "stage_id", STAGE_KIND: "stage_kind", TERMINAL_STATE: "terminal_state",
     ARTIFACT_HASH: "artifact_hash", EVIDENCE_SET_HASH: "evidence_set_hash",
     OBSERVATIONS: "observations", RECOMPUTED_SET: "recomputed_set", PAYLOAD: "payload",
     SIZES: "sizes", PRODUCER_ID: "producer_id", KEY_ID: "key_id"]
);
shape!(
    /// `FactReader.producer_facts`: no entry with a producer signature.
    producer_other, "verifier.producer.P_OTHER", Some(vk::P_OTHER),
    [KIND: "kind"]
);
shape!(
    /// `FactReader.producer_facts`: a JournalEntry.v1/v2.
    producer_legacy, "verifier.producer.P_LEGACY", Some(vk::P_LEGACY),
    [KIND: "kind"]
);
shape!(
    /// `FactReader.producer_facts`: a computer-use entry.
    producer_action, "verifier.producer.P_ACTION", Some(vk::P_ACTION),
    [KIND: "kind"]
);
shape!(
    /// `FactReader.producer_facts`: a JournalEntry.v3 (`verified` None: no key pinned).
    producer_signed, "verifier.producer.P_SIGNED", Some(vk::P_SIGNED),
    [KIND: "kind", SEQ: "seq", KEY_ID: "key_id", PRODUCER_ID: "producer_id", VERIFIED: "verified"]
);
shape!(
    /// `parse_dump_lines` / `parse_dump_block`: one record of a dump (`verifier.sources`).
    dump_row, "verifier.dump_row", None,
    [OFFSET: "offset", TIMESTAMP: "timestamp", KEY: "key", VALUE: "value", TOPIC: "topic",
     PARTITION: "partition", HEADERS: "headers"]
);

/// Every shape: (name, kind, fields), in the order above.
pub const SHAPES: &[(&str, Option<i64>, &[&str])] = &[
    (fold_entry::NAME, fold_entry::TAG, fold_entry::FIELDS),
    (fold_action::NAME, fold_action::TAG, fold_action::FIELDS),
    (
        fold_odd_entry::NAME,
        fold_odd_entry::TAG,
        fold_odd_entry::FIELDS,
    ),
    (fold_seal::NAME, fold_seal::TAG, fold_seal::FIELDS),
    (fold_audit::NAME, fold_audit::TAG, fold_audit::FIELDS),
    (
        fold_checkpoint::NAME,
        fold_checkpoint::TAG,
        fold_checkpoint::FIELDS,
    ),
    (
        fold_walk_mirror::NAME,
        fold_walk_mirror::TAG,
        fold_walk_mirror::FIELDS,
    ),
    (
        fold_walk_undecided::NAME,
        fold_walk_undecided::TAG,
        fold_walk_undecided::FIELDS,
    ),
    (
        journal_undecodable::NAME,
        journal_undecodable::TAG,
        journal_undecodable::FIELDS,
    ),
    (
        journal_entry::NAME,
        journal_entry::TAG,
        journal_entry::FIELDS,
    ),
    (
        journal_entry_undecodable::NAME,
        journal_entry_undecodable::TAG,
        journal_entry_undecodable::FIELDS,
    ),
    (journal_seal::NAME, journal_seal::TAG, journal_seal::FIELDS),
    (
        audit_undecodable::NAME,
        audit_undecodable::TAG,
        audit_undecodable::FIELDS,
    ),
    (audit_record::NAME, audit_record::TAG, audit_record::FIELDS),
    (stage_skip::NAME, stage_skip::TAG, stage_skip::FIELDS),
    (
        stage_not_result::NAME,
        stage_not_result::TAG,
        stage_not_result::FIELDS,
    ),
    (stage_result::NAME, stage_result::TAG, stage_result::FIELDS),
    (
        producer_other::NAME,
        producer_other::TAG,
        producer_other::FIELDS,
    ),
    (
        producer_legacy::NAME,
        producer_legacy::TAG,
        producer_legacy::FIELDS,
    ),
    (
        producer_action::NAME,
        producer_action::TAG,
        producer_action::FIELDS,
    ),
    (
        producer_signed::NAME,
        producer_signed::TAG,
        producer_signed::FIELDS,
    ),
    (dump_row::NAME, dump_row::TAG, dump_row::FIELDS),
];

/// The kind tags by the names the Python modules give them: (family, [(name, tag)]).
pub const KINDS: &[(&str, &[(&str, i64)])] = &[
    (
        "fold",
        &[
            ("ENTRY", fk::ENTRY),
            ("ACTION", fk::ACTION),
            ("ODD_ENTRY", fk::ODD_ENTRY),
            ("SEAL", fk::SEAL),
        ],
    ),
    (
        "verifier",
        &[
            ("J_UNDECODABLE", vk::J_UNDECODABLE),
            ("J_ENTRY", vk::J_ENTRY),
            ("J_ENTRY_UNDECODABLE", vk::J_ENTRY_UNDECODABLE),
            ("J_SEAL", vk::J_SEAL),
            ("A_UNDECODABLE", vk::A_UNDECODABLE),
            ("A_RECORD", vk::A_RECORD),
            ("S_SKIP", vk::S_SKIP),
            ("S_NOT_RESULT", vk::S_NOT_RESULT),
            ("S_RESULT", vk::S_RESULT),
            ("P_OTHER", vk::P_OTHER),
            ("P_LEGACY", vk::P_LEGACY),
            ("P_ACTION", vk::P_ACTION),
            ("P_SIGNED", vk::P_SIGNED),
        ],
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_is_named_once_and_starts_with_its_kind() {
        let mut names: Vec<&str> = SHAPES.iter().map(|s| s.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SHAPES.len());
        for (name, kind, fields) in SHAPES {
            let mut unique = fields.to_vec();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), fields.len(), "{name}");
            assert_eq!(kind.is_some(), fields[0] == "kind", "{name}");
        }
    }

    #[test]
    fn the_indices_follow_the_field_order() {
        assert_eq!(
            audit_record::FIELDS[audit_record::INPUT_OFFSET],
            "input_offset"
        );
        assert_eq!(audit_record::LEN, 13);
        assert_eq!(
            journal_entry::FIELDS[journal_entry::ENTRY_TYPE],
            "entry_type"
        );
        assert_eq!(stage_result::LEN, 16);
        assert_eq!(fold_entry::LEN, 13);
        assert_eq!(fold_seal::FIELDS[fold_seal::AUDIT_HEAD], "audit_head");
        assert_eq!(fold_seal::LEN, 10);
        assert_eq!(
            producer_signed::FIELDS[producer_signed::VERIFIED],
            "verified"
        );
    }
}
