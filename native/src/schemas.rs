//! The wire layouts this crate reads and writes, pinned by fingerprint.
//!
//! Field order and types follow `schemas/avro/*.avsc`; the Python adapter
//! refuses to use this core unless the codec's fingerprints for these names are
//! exactly the ones below (a changed schema needs a changed encoder here).

pub const MAGIC: [u8; 2] = [0xC3, 0x01];
pub const HEADER_SIZE: usize = 10;

pub const ACTIVITY_SUBMISSION: &str = "ActivitySubmission.v1";
pub const ACTIVITY_SUBMISSION_V2: &str = "ActivitySubmission.v2";
pub const ACTIVITY_SUBMISSION_V3: &str = "ActivitySubmission.v3";
pub const RUN_CLOSE: &str = "RunClose.v1";
pub const RUN_CLOSE_V2: &str = "RunClose.v2";

pub const FP_ACTIVITY_SUBMISSION: [u8; 8] = [0x7c, 0x81, 0xba, 0xfe, 0x11, 0x54, 0x6d, 0x64];
pub const FP_ACTIVITY_SUBMISSION_V2: [u8; 8] = [0xb4, 0xd8, 0x38, 0xcb, 0xf0, 0x9c, 0x7c, 0x8f];
pub const FP_ACTIVITY_SUBMISSION_V3: [u8; 8] = [0xaf, 0xea, 0xfc, 0xd0, 0x89, 0x59, 0xb9, 0x29];
pub const FP_RUN_CLOSE: [u8; 8] = [0x8a, 0x1e, 0xaa, 0x68, 0x0c, 0x6f, 0x79, 0x14];
pub const FP_RUN_CLOSE_V2: [u8; 8] = [0xdb, 0x9e, 0xc4, 0xc6, 0x2c, 0xd7, 0x86, 0xed];
pub const FP_JOURNAL_ENTRY_V3: [u8; 8] = [0x40, 0x4d, 0x2b, 0x9e, 0x8a, 0x1d, 0x10, 0x61];
pub const FP_RUN_SEAL_V2: [u8; 8] = [0x61, 0x59, 0x6a, 0xad, 0x25, 0x67, 0x11, 0x1a];
pub const FP_JOURNAL_ENTRY: [u8; 8] = [0x95, 0x01, 0x95, 0x83, 0x4f, 0xfc, 0xdf, 0xf2];
pub const FP_JOURNAL_ENTRY_V2: [u8; 8] = [0xef, 0xf1, 0x8c, 0x93, 0x90, 0xbe, 0x7e, 0xca];
pub const FP_JOURNAL_RECORD: [u8; 8] = [0xb6, 0xd2, 0x02, 0x83, 0x42, 0x51, 0x5c, 0x4d];
pub const FP_REFUSAL: [u8; 8] = [0xee, 0x9b, 0xe0, 0x52, 0xed, 0x5c, 0xf7, 0x7b];
pub const FP_REFUSAL_V2: [u8; 8] = [0x13, 0x2f, 0xa1, 0xda, 0x73, 0xb1, 0x8c, 0xe1];
pub const FP_DEAD_LETTER: [u8; 8] = [0x6d, 0x54, 0x57, 0x61, 0x54, 0xc4, 0xac, 0x34];
pub const FP_DEAD_LETTER_V2: [u8; 8] = [0x06, 0xb1, 0x48, 0x42, 0x91, 0xf3, 0x6d, 0x55];
pub const FP_RUN_SEAL: [u8; 8] = [0x3e, 0x25, 0x04, 0xa5, 0xa2, 0x85, 0x4e, 0xda];
pub const FP_SEAL_RECORD: [u8; 8] = [0x07, 0x49, 0x08, 0x8f, 0x09, 0x83, 0x77, 0x40];
pub const FP_AUDIT_ENTRY: [u8; 8] = [0x47, 0xa8, 0x48, 0x7d, 0x9e, 0x81, 0x6a, 0x71];
pub const FP_AUDIT_RECORD: [u8; 8] = [0xeb, 0xd7, 0x0f, 0x04, 0x32, 0xd4, 0xf3, 0x2c];
pub const FP_AUDIT_RECORD_V2: [u8; 8] = [0x90, 0xff, 0x97, 0x85, 0x64, 0xf7, 0xfe, 0x6f];
pub const FP_PARTITION_CHECKPOINT: [u8; 8] = [0x9f, 0x14, 0x74, 0x13, 0x72, 0x72, 0xa8, 0x76];
/// PartitionCheckpoint.v2: v1 and the partition's Merkle log (tree_size, tree_root, note); what the step writes.
pub const FP_PARTITION_CHECKPOINT_V2: [u8; 8] = [0x6b, 0x95, 0x56, 0xaa, 0x8b, 0x55, 0x37, 0x7b];
pub const FP_CHECKPOINT_RECORD: [u8; 8] = [0x34, 0x21, 0x95, 0x2b, 0x0e, 0x26, 0x87, 0xda];
pub const FP_AUDIT_ENTRY_V2: [u8; 8] = [0x8a, 0x97, 0xd3, 0xcd, 0x2d, 0x37, 0x92, 0x99];
pub const FP_COMPUTER_USE_ENTRY: [u8; 8] = [0xf4, 0x26, 0x4e, 0x24, 0xce, 0x46, 0xd3, 0xc6];
pub const FP_COMPUTER_USE_ENTRY_V2: [u8; 8] = [0xed, 0xd7, 0x93, 0xb0, 0xeb, 0xb5, 0x33, 0xe6];

/// Every schema whose layout is hard-coded here, by its `.avsc` stem.
pub const NATIVE_SCHEMAS: [(&str, [u8; 8]); 22] = [
    (ACTIVITY_SUBMISSION, FP_ACTIVITY_SUBMISSION),
    (ACTIVITY_SUBMISSION_V2, FP_ACTIVITY_SUBMISSION_V2),
    (ACTIVITY_SUBMISSION_V3, FP_ACTIVITY_SUBMISSION_V3),
    ("JournalEntry.v2", FP_JOURNAL_ENTRY_V2),
    ("JournalEntry.v3", FP_JOURNAL_ENTRY_V3),
    (RUN_CLOSE, FP_RUN_CLOSE),
    (RUN_CLOSE_V2, FP_RUN_CLOSE_V2),
    ("RunSeal.v2", FP_RUN_SEAL_V2),
    ("JournalEntry.v1", FP_JOURNAL_ENTRY),
    ("JournalRecord.v1", FP_JOURNAL_RECORD),
    ("Refusal.v1", FP_REFUSAL),
    ("Refusal.v2", FP_REFUSAL_V2),
    ("DeadLetter.v1", FP_DEAD_LETTER),
    ("DeadLetter.v2", FP_DEAD_LETTER_V2),
    ("RunSeal.v1", FP_RUN_SEAL),
    ("SealRecord.v1", FP_SEAL_RECORD),
    ("AuditEntry.v1", FP_AUDIT_ENTRY),
    ("AuditRecord.v1", FP_AUDIT_RECORD),
    ("AuditRecord.v2", FP_AUDIT_RECORD_V2),
    ("PartitionCheckpoint.v1", FP_PARTITION_CHECKPOINT),
    ("PartitionCheckpoint.v2", FP_PARTITION_CHECKPOINT_V2),
    ("CheckpointRecord.v1", FP_CHECKPOINT_RECORD),
];

/// A buffer that starts with the single-object header of `fingerprint`.
#[inline]
pub fn soe_buffer(fingerprint: &[u8; 8], capacity: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(capacity + HEADER_SIZE);
    buf.extend_from_slice(&MAGIC);
    buf.extend_from_slice(fingerprint);
    buf
}
