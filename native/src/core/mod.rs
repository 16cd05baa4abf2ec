//! The scheduler's step, ported from `consumers/core/step.py` (the reference).
//!
//! Same order of checks, same messages, same fields, same outputs in the same
//! order, same state evolution. Whatever this port does not reproduce returns
//! `Outcome::Fallback` *before touching the state*, and the Python adapter runs
//! the reference for that one record:
//!
//! * a body the strict Avro reader does not accept (fastavro's error wording,
//!   and the rare encodings fastavro accepts but we do not: negative block
//!   counts, over-long varints);
//! * input schemas the reference handles but this port does not
//!   (ComputerUseAction.v1), and ActivitySubmissions of kind `browser` that
//!   pass every other check (their session check parses JSON);
//! * ActivitySubmissions of kind `research`, `data` or `ops` that pass every
//!   generic check but whose modality document rules (`schemas/documents/`,
//!   docs/modality_rules.md) this port cannot certify (`documents.rs` accepts
//!   only documents that certainly pass): every refusal of these rules is
//!   therefore written by the one reference, byte-identical in both cores;
//! * `repr()` of a non-ASCII string when the host cannot provide it;
//! * an input partition that does not fit an Avro int.
//!
//! The producer checks are native too (`producer_refusal`, `producers.rs`): the
//! statement's canonical JSON is written here byte for byte and its Ed25519
//! signature verified under the registered key. Seals, checkpoints and audit
//! records use the ring key valid at the input's timestamp (`Config::seal_key_at`,
//! `Config::audit_key_at`), and a partition's audit genesis the key of its
//! first audit record (`begin`).
//!
//! Audit records are AuditRecord.v2 (the MAC covers the key id), and a step
//! ends with a signed partition checkpoint (PartitionCheckpoint.v2) when it wrote a
//! final seal or left `checkpoint_every` audit records uncovered (`_checkpoint_if_due`).
//! Every journal record the step writes (an entry, a seal) appends its leaf to the
//! partition's Merkle log (`State::tree`, `crate::merkle`, `crate::tlog`), and the
//! checkpoint carries the log's size, root and signed note.
//!
//! No I/O, no clock, no randomness: time comes from the input record,
//! Ed25519 (RFC 8032) is deterministic, and the hash tables are keyed from the
//! audit key (secret, so not floodable; fixed, so runs are reproducible).
//!
//! Layout: this file (the constants, the keyed tables, inputs and outputs), `state`
//! (configuration and state), `step` (the step, its dispatch, submissions and run closes),
//! `validate` (a submission's checks), `refusal` (refusals and the envelope, partition and
//! producer checks), `outputs` (dead letters, seals, audit records, checkpoints). Records are
//! read by `crate::records`.

mod outputs;
mod refusal;
mod state;
mod step;
mod validate;

pub(crate) use outputs::*;
pub use refusal::*;
pub use state::*;
pub use step::*;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use ed25519_dalek::{Signer as _, SigningKey};
use indexmap::IndexMap;
use siphasher::sip::SipHasher13;

use crate::avro::{put_bool, put_bytes, put_int, put_long, put_opt_bytes, put_opt_str, put_str};
use crate::hashing::{
    checkpoint_genesis, checkpoint_hash, checkpoint_signing_input, digest_string,
    evidence_set_hash_of_digests, hex_string, journal_entry_hash, journal_genesis,
    seal_signing_input, sha256_digest, AuditMac,
};
use crate::merkle::Frontier;
use crate::producers::{
    run_close_signing_input, run_owner, submission_signing_input, Producer, ProducerKey,
};
use crate::records::submission::{decode_run_close, decode_submission, RunClose, Submission};
use crate::records::{fingerprint_of, trailing_bytes, unknown_fingerprint};
use crate::schemas::*;
use crate::text::{char_len, clip, has_control, is_blank, is_digest, is_valid_id, repr_ascii};
use crate::tlog;
use crate::undo::{Change, Dropped, Field, UndoLog};

// ---------------------------------------------------------------------------
// constants of schemas.records and consumers.core.step (checked by the adapter)
// ---------------------------------------------------------------------------

/// `sorted(KINDS)`
pub const KINDS: [&str; 5] = ["browser", "coding", "data", "ops", "research"];
/// `sorted(TERMINAL_STATES)`
pub const TERMINAL_STATES: [&str; 4] = ["completed", "failed", "refused", "timed_out"];
pub const MAX_INLINE_ARTIFACT_BYTES: usize = 512 * 1024;
pub const MAX_OBSERVATIONS: usize = 4096;
pub const MAX_REF_LENGTH: usize = 4096;
pub const MAX_REASON_CODE_LENGTH: usize = 128;
pub const MAX_KIND_LENGTH: usize = 64;
pub const MAX_EVIDENCE_CHARS: usize = 256;
pub const MAX_DEAD_LETTER_RAW: usize = 512 * 1024;
pub const MAX_DETAIL_CHARS: usize = 1024;
pub const MAX_LABEL_LENGTH: usize = 256;
pub const MAX_OCCURRED_AT_MS: i64 = 253_402_300_799_999;
pub const MAX_KEPT_KEY_BYTES: usize = 1024;
/// `schemas.records.MAX_RUN_EVIDENCE_BYTES`: the per-run evidence cap (declared bytes of distinct blobs).
pub const MAX_RUN_EVIDENCE_BYTES: i64 = 64 * 1024 * 1024;
pub const ENTRY_ACTIVITY_RESULT: &str = "activity.result";
/// `canonical._MAX_SAFE_INT`: canonical JSON (a Merkle log leaf) refuses larger integers.
pub const MAX_SAFE_INT: i64 = (1 << 53) - 1;

const ID_RULE: &str = "must be 1-128 characters of A-Z a-z 0-9 _ . : @ + = -";
const LABEL_RULE: &str = "must be 1-256 characters without control characters";

/// `schemas.records.is_valid_label`: 1-256 code points, no control characters.
fn is_valid_label(s: &str) -> bool {
    let n = char_len(s);
    n > 0 && n <= MAX_LABEL_LENGTH && !has_control(s)
}

/// Decimal length of an integer as Python's `str()` prints it.
fn dec_len(v: i64) -> usize {
    let mut n = if v < 0 { 2 } else { 1 };
    let mut u = v.unsigned_abs();
    while u >= 10 {
        u /= 10;
        n += 1;
    }
    n
}

/// `_Emitter.size`: an output's key + value + its four CloudEvents headers'
/// names and values, in bytes, when it is the `index`-th output of the step.
fn output_size(
    pos: &Position<'_>,
    index: usize,
    key_len: usize,
    value_len: usize,
    ce: CeType,
) -> usize {
    let ce_id = pos.topic.len()
        + dec_len(i64::from(pos.partition))
        + dec_len(pos.offset)
        + dec_len(index as i64)
        + 3;
    key_len
        + value_len
        + ("ce_specversion".len() + 3)
        + ("ce_id".len() + ce_id)
        + ("ce_source".len() + "bernstein/scheduler".len())
        + ("ce_type".len() + CE_TYPES[ce as usize].len())
}

// ---------------------------------------------------------------------------
// hashing of the state's tables
// ---------------------------------------------------------------------------

/// SipHash-1-3 with fixed keys derived from the audit key.
#[derive(Clone, Copy, Debug)]
pub struct KeyedHasher {
    k0: u64,
    k1: u64,
}

impl KeyedHasher {
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let k0 = u64::from_le_bytes(seed[0..8].try_into().unwrap());
        let k1 = u64::from_le_bytes(seed[8..16].try_into().unwrap());
        KeyedHasher { k0, k1 }
    }
}

impl BuildHasher for KeyedHasher {
    type Hasher = SipHasher13;
    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.k0, self.k1)
    }
}

pub type Map<K, V> = IndexMap<K, V, KeyedHasher>;
pub type Set<K> = indexmap::IndexSet<K, KeyedHasher>;

// ---------------------------------------------------------------------------
// inputs and outputs
// ---------------------------------------------------------------------------

pub struct Input<'a> {
    pub topic: &'a str,
    pub partition: i64,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Journal = 0,
    Refusals = 1,
    Audit = 2,
    Deadletter = 3,
    Checkpoints = 4,
}

/// The CloudEvents `ce_type` of an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CeType {
    ActivityResult = 0,
    RunSealed = 1,
    ActivityRefused = 2,
    InputDeadletter = 3,
    AuditActivityResult = 4,
    AuditActivityRefused = 5,
    AuditInputDeadletter = 6,
    AuditRunSealed = 7,
    PartitionCheckpoint = 8,
}

pub const CE_TYPES: [&str; 9] = [
    "bernstein.activity.result",
    "bernstein.run.sealed",
    "bernstein.activity.refused",
    "bernstein.input.deadletter",
    "bernstein.audit.activity.result",
    "bernstein.audit.activity.refused",
    "bernstein.audit.input.deadletter",
    "bernstein.audit.run.sealed",
    "bernstein.partition.checkpoint",
];

pub struct Output<'a> {
    pub stream: Stream,
    /// Borrowed from the input (run ids, input keys), or owned (a checkpoint's partition number).
    pub key: Cow<'a, [u8]>,
    pub value: Vec<u8>,
    pub ce_type: CeType,
}

/// The record must go to the reference; the state has not been touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback(pub &'static str);

/// What the embedding provides: Python's `repr()` of a non-ASCII string.
pub trait Host {
    fn repr_non_ascii(&mut self, s: &str) -> Option<String>;
}

/// A host without an interpreter: every non-ASCII repr falls back.
pub struct NoHost;

impl Host for NoHost {
    fn repr_non_ascii(&mut self, _s: &str) -> Option<String> {
        None
    }
}

pub(crate) fn py_repr(s: &str, host: &mut dyn Host) -> Result<String, Fallback> {
    match repr_ascii(s) {
        Some(r) => Ok(r),
        None => host
            .repr_non_ascii(s)
            .ok_or(Fallback("repr of a non-ASCII string")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    ActivityResult,
    ActivityRefused,
    InputDeadletter,
    RunSealed,
}

impl Event {
    pub(crate) fn value(self) -> &'static str {
        match self {
            Event::ActivityResult => "activity.result",
            Event::ActivityRefused => "activity.refused",
            Event::InputDeadletter => "input.deadletter",
            Event::RunSealed => "run.sealed",
        }
    }
    pub(crate) fn ce_type(self) -> CeType {
        match self {
            Event::ActivityResult => CeType::AuditActivityResult,
            Event::ActivityRefused => CeType::AuditActivityRefused,
            Event::InputDeadletter => CeType::AuditInputDeadletter,
            Event::RunSealed => CeType::AuditRunSealed,
        }
    }
}

/// `{"topic", "partition", "offset"}` of the input record.
#[derive(Clone, Copy)]
pub(crate) struct Position<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
}

impl Position<'_> {
    #[inline]
    pub(crate) fn put(&self, buf: &mut Vec<u8>) {
        put_str(buf, self.topic);
        put_int(buf, self.partition);
        put_long(buf, self.offset);
    }
}
