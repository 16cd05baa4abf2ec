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
//! ends with a signed partition checkpoint when it wrote a final seal or left
//! `checkpoint_every` audit records uncovered (`_checkpoint_if_due`).
//!
//! No I/O, no clock, no randomness: time comes from the input record,
//! Ed25519 (RFC 8032) is deterministic, and the hash tables are keyed from the
//! audit key (secret, so not floodable; fixed, so runs are reproducible).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use ed25519_dalek::{Signer as _, SigningKey};
use indexmap::IndexMap;
use siphasher::sip::SipHasher13;

use crate::avro::{put_bool, put_bytes, put_int, put_long, put_opt_bytes, put_opt_str, put_str};
use crate::hashing::{
    checkpoint_genesis, checkpoint_hash, checkpoint_signing_input, evidence_set_hash_of_digests,
    hex_string, journal_entry_hash, journal_genesis, seal_signing_input, sha256_digest, AuditMac,
};
use crate::producers::{
    run_close_signing_input, run_owner, submission_signing_input, Producer, ProducerKey,
};
use crate::records::submission::{decode_run_close, decode_submission, RunClose, Submission};
use crate::records::{fingerprint_of, trailing_bytes, unknown_fingerprint};
use crate::schemas::*;
use crate::text::{char_len, clip, has_control, is_blank, is_digest, is_valid_id, repr_ascii};
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
// configuration and state
// ---------------------------------------------------------------------------

/// What `config.roles.get(role)` returns, prepared by the host.
pub struct RoleKind {
    /// The string value (None when the manifest value is not a string).
    pub text: Option<String>,
    /// `_clip`'s source: the string, or `repr(value)` for a non-string.
    pub clip_source: String,
    /// `repr(value)` as the running interpreter prints it.
    pub repr: String,
}

/// One of the scheduler's seal keys (`SealKey`): signs seals and checkpoints for inputs stamped in its range.
pub struct SealKey {
    pub signing_key: SigningKey,
    pub key_id: String,
    pub valid_from_ms: i64,
    pub valid_until_ms: Option<i64>,
}

/// One of the scheduler's audit keys (`AuditKeyVersion`).
pub struct AuditKey {
    pub mac: AuditMac,
    pub key_id: String,
    pub valid_from_ms: i64,
    pub valid_until_ms: Option<i64>,
}

fn in_range(timestamp_ms: i64, from: i64, until: Option<i64>) -> bool {
    timestamp_ms >= from && until.is_none_or(|u| timestamp_ms < u)
}

/// `model.key_for`: the newest key whose range contains the timestamp, else the newest.
fn key_for<T>(keys: &[T], timestamp_ms: i64, range: impl Fn(&T) -> (i64, Option<i64>)) -> &T {
    keys.iter()
        .rev()
        .find(|k| {
            let (from, until) = range(k);
            in_range(timestamp_ms, from, until)
        })
        .unwrap_or_else(|| keys.last().expect("a key ring is never empty"))
}

pub struct Config {
    pub roles: HashMap<String, RoleKind, KeyedHasher>,
    /// The seal key ring, oldest first (`config.seal_keys`, or the one `config.signer`).
    pub seal_keys: Vec<SealKey>,
    /// The current audit key (`config.audit_key`): `initial_state`'s genesis and the table keys.
    pub audit: AuditMac,
    /// The audit key ring, oldest first (`config.audit_keys`, or the one current key).
    pub audit_keys: Vec<AuditKey>,
    /// `config.producers`: the registered producers and their keys by key id.
    pub producers: Vec<Producer>,
    pub producer_keys: HashMap<String, ProducerKey, KeyedHasher>,
    pub seal_every: i64,
    /// `config.checkpoint_every`: a checkpoint after a step that leaves this many audit records uncovered.
    pub checkpoint_every: i64,
    /// `config.max_output_bytes`: no output is larger (key + value + headers).
    pub max_output_bytes: usize,
    /// `config.accept_undeclared_sizes`: a v1 submission with observations is accepted (counted as nothing).
    pub accept_undeclared_sizes: bool,
    /// `config.submission_partitions`: an input must sit on `partition_for(key, n)` (None: not checked).
    pub submission_partitions: Option<i64>,
    /// Every schema the codec knows: fingerprint -> name.
    pub known: Vec<([u8; 8], String)>,
    /// The reference's `_INPUT_SCHEMAS`.
    pub expected: Vec<String>,
    /// `', '.join(sorted(_INPUT_SCHEMAS))`
    pub expected_joined: String,
    pub hasher: KeyedHasher,
}

impl Config {
    /// `config.seal_key_at(timestamp_ms)`
    pub fn seal_key_at(&self, timestamp_ms: i64) -> &SealKey {
        key_for(&self.seal_keys, timestamp_ms, |k| {
            (k.valid_from_ms, k.valid_until_ms)
        })
    }

    /// `config.audit_key_at(timestamp_ms)`
    pub fn audit_key_at(&self, timestamp_ms: i64) -> &AuditKey {
        key_for(&self.audit_keys, timestamp_ms, |k| {
            (k.valid_from_ms, k.valid_until_ms)
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub next_index: i128,
    pub last_anchor: String,
    pub closed: bool,
}

#[derive(Clone, Debug)]
pub struct RunState {
    pub head: String,
    pub entry_count: i64,
    pub stages: Map<Box<str>, Box<str>>,
    pub evidence: Map<Box<str>, Box<str>>,
    pub closed: bool,
    pub sealed_count: i64,
    /// Computer-use sessions: kept for the reference (this port never reads them).
    pub sessions: Vec<(String, Session)>,
    /// submission_id -> stage (or session) of every journalled entry.
    pub submissions: Map<Box<str>, Box<str>>,
    /// Declared bytes of the run's distinct evidence blobs (ActivitySubmission.v2, ComputerUseAction.v2).
    pub evidence_bytes: i64,
    /// The digests counted in `evidence_bytes` (each once).
    pub blobs: Set<Box<str>>,
    /// The producer whose accepted record opened the run ("" in states from before open-run limits).
    pub opened_by: Box<str>,
}

impl RunState {
    pub fn empty(head: String, hasher: KeyedHasher) -> Self {
        RunState {
            head,
            entry_count: 0,
            stages: Map::with_hasher(hasher),
            evidence: Map::with_hasher(hasher),
            closed: false,
            sealed_count: 0,
            sessions: Vec::new(),
            submissions: Map::with_hasher(hasher),
            evidence_bytes: 0,
            blobs: Set::with_hasher(hasher),
            opened_by: "".into(),
        }
    }

    /// `RunState.close`: the final seal keeps only what a later input to the closed run can
    /// produce. DUPLICATE_SUBMISSION (checked before RUN_CLOSED) reads `submissions`; RUN_CLOSED
    /// names only the run id; `head`, `entry_count` and `sealed_count` stay. Stages, evidence
    /// sets, sessions and blob digests are only read after the closed check: they are dropped,
    /// with their allocations.
    /// Returns what it dropped (the undo log keeps it while the seal is uncommitted).
    pub fn close(&mut self) -> Dropped {
        let hasher = *self.stages.hasher();
        self.closed = true;
        self.evidence_bytes = 0;
        self.submissions.shrink_to_fit(); // what stays for good: no spare capacity
        Dropped {
            stages: std::mem::replace(&mut self.stages, Map::with_hasher(hasher)),
            evidence: std::mem::replace(&mut self.evidence, Map::with_hasher(hasher)),
            sessions: std::mem::take(&mut self.sessions),
            blobs: std::mem::replace(&mut self.blobs, Set::with_hasher(hasher)),
        }
    }
}

pub struct AuditChain {
    pub seq: i64,
    pub head: String,
}

/// The partition's checkpoint chain: `checkpoint_seq`, `checkpoint_head`, `checkpoint_audit_seq`.
pub struct CheckpointChain {
    pub seq: i64,
    pub head: String,
    pub audit_seq: i64,
}

impl CheckpointChain {
    pub fn genesis(partition: i32) -> Self {
        CheckpointChain {
            seq: 0,
            head: checkpoint_genesis(i64::from(partition)),
            audit_seq: 0,
        }
    }
}

pub struct State {
    pub partition: i32,
    pub audit: AuditChain,
    pub runs: Map<Box<str>, RunState>,
    pub checkpoint: CheckpointChain,
    /// `SchedulerState.open_runs`: producer -> its open runs (`opened_by` of runs not closed).
    pub open_runs: BTreeMap<Box<str>, i64>,
}

/// `count_open_runs`: each producer's open runs, counted from the runs.
pub fn count_open_runs(runs: &Map<Box<str>, RunState>) -> BTreeMap<Box<str>, i64> {
    let mut counts: BTreeMap<Box<str>, i64> = BTreeMap::new();
    for run in runs.values() {
        if !run.opened_by.is_empty() && !run.closed {
            *counts.entry(run.opened_by.clone()).or_insert(0) += 1;
        }
    }
    counts
}

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

fn py_repr(s: &str, host: &mut dyn Host) -> Result<String, Fallback> {
    match repr_ascii(s) {
        Some(r) => Ok(r),
        None => host
            .repr_non_ascii(s)
            .ok_or(Fallback("repr of a non-ASCII string")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    ActivityResult,
    ActivityRefused,
    InputDeadletter,
    RunSealed,
}

impl Event {
    fn value(self) -> &'static str {
        match self {
            Event::ActivityResult => "activity.result",
            Event::ActivityRefused => "activity.refused",
            Event::InputDeadletter => "input.deadletter",
            Event::RunSealed => "run.sealed",
        }
    }
    fn ce_type(self) -> CeType {
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
struct Position<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
}

impl Position<'_> {
    #[inline]
    fn put(&self, buf: &mut Vec<u8>) {
        put_str(buf, self.topic);
        put_int(buf, self.partition);
        put_long(buf, self.offset);
    }
}

struct Refusal<'a> {
    code: &'static str,
    message: String,
    field: Cow<'a, str>,
    declared: Cow<'a, str>,
    recomputed: Cow<'a, str>,
    earlier_stage_id: Option<String>,
    exception: &'static str,
    /// Reached after the producer's signature verified (Refusal.v2 `authenticated`).
    authenticated: bool,
}

impl<'a> Refusal<'a> {
    fn new(
        code: &'static str,
        message: String,
        field: impl Into<Cow<'a, str>>,
        declared: impl Into<Cow<'a, str>>,
    ) -> Self {
        Refusal {
            code,
            message,
            field: field.into(),
            declared: declared.into(),
            recomputed: Cow::Borrowed(""),
            earlier_stage_id: None,
            exception: "ActivityRejected",
            authenticated: false,
        }
    }
    fn recomputed(mut self, value: impl Into<Cow<'a, str>>) -> Self {
        self.recomputed = value.into();
        self
    }
    fn authenticated(mut self) -> Self {
        self.authenticated = true;
        self
    }
}

/// The submission fields `_refuse` reads (`sub.get(name, "")`).
struct RefusedFields<'a> {
    run_id: &'a str,
    stage_id: &'a str,
    role: &'a str,
    kind: &'a str,
    submission_id: &'a str,
    terminal_state: &'a str,
    artifact_hash: &'a str,
    evidence_set_hash: &'a str,
    occurred_at_ms: i64,
    /// The producer.id and the signing key id the record names (empty: unsigned).
    producer: &'a str,
    key_id: &'a str,
}

fn malformed_digest<'a>(field: impl Into<Cow<'a, str>>, value: &'a str) -> Refusal<'a> {
    let field = field.into();
    Refusal::new(
        "MALFORMED_DIGEST",
        format!("{field} is not of the form sha256:<64 lowercase hex>"),
        field,
        clip(value, MAX_EVIDENCE_CHARS),
    )
}

/// `schemas.partitioning.murmur2`: Kafka's `Utils.murmur2` (seed 0x9747b28c), as Java's signed int.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = blocks.remainder();
    if tail.len() == 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// `schemas.partitioning.partition_for`: `(murmur2(key) & 0x7fffffff) % partitions` (`partitions` >= 1).
pub fn partition_for(key: &[u8], partitions: i64) -> i64 {
    i64::from(murmur2(key) & 0x7fff_ffff) % partitions
}

/// `step._partition_refusal`: the record keyed by its run id sits on its key's murmur2 partition.
fn partition_refusal<'a>(run_id: &str, partition: i64, partitions: i64) -> Option<Refusal<'a>> {
    let wanted = partition_for(run_id.as_bytes(), partitions);
    if partition == wanted {
        return None;
    }
    Some(
        Refusal::new(
            "WRONG_PARTITION",
            format!(
                "the record of run '{run_id}' is on partition {partition} of {partitions}, but its key belongs on partition \
                 {wanted}: produce with Kafka's murmur2 partitioner, (murmur2(key) & 0x7fffffff) % {partitions}"
            ),
            "partition",
            partition.to_string(),
        )
        .recomputed(wanted.to_string()),
    )
}

/// `step._envelope_refusal`: submission_id, producer id and sdk, occurred_at_ms,
/// the record key, which must be the run id's bytes (`run_id` is valid), and the
/// record's partition (`partition`), which must be the key's when `partitions` is set.
fn envelope_refusal<'a>(
    key: Option<&[u8]>,
    run_id: &'a str,
    submission_id: &'a str,
    producer: [&'a str; 2],
    occurred_at_ms: i64,
    partition: i64,
    partitions: Option<i64>,
) -> Option<Refusal<'a>> {
    if !is_valid_label(submission_id) {
        return Some(Refusal::new(
            "INVALID_SUBMISSION_ID",
            format!("submission_id {LABEL_RULE}"),
            "submission_id",
            clip(submission_id, MAX_EVIDENCE_CHARS),
        ));
    }
    for (name, value) in [("producer.id", producer[0]), ("producer.sdk", producer[1])] {
        if !is_valid_label(value) {
            return Some(Refusal::new(
                "INVALID_PRODUCER",
                format!("{name} {LABEL_RULE}"),
                name,
                clip(value, MAX_EVIDENCE_CHARS),
            ));
        }
    }
    if !(0..=MAX_OCCURRED_AT_MS).contains(&occurred_at_ms) {
        return Some(
            Refusal::new(
                "INVALID_OCCURRED_AT",
                format!(
                    "occurred_at_ms must be 0 to {MAX_OCCURRED_AT_MS} (1970-01-01 to 9999-12-31 UTC), got {occurred_at_ms}"
                ),
                "occurred_at_ms",
                occurred_at_ms.to_string(),
            )
            .recomputed(MAX_OCCURRED_AT_MS.to_string()),
        );
    }
    if key != Some(run_id.as_bytes()) {
        let run_digest = sha256_digest(run_id.as_bytes());
        let (message, declared) = match key {
            None => (
                format!("the record has no key; a record of run '{run_id}' ({run_digest}) must be keyed by its run id"),
                String::new(),
            ),
            Some(k) => {
                let d = sha256_digest(k);
                (
                    format!(
                        "the record key ({} bytes, {d}) is not the run id '{run_id}' ({run_digest}): a record must be keyed by its run id",
                        k.len()
                    ),
                    d,
                )
            }
        };
        return Some(
            Refusal::new("RUN_KEY_MISMATCH", message, "key", declared).recomputed(run_digest),
        );
    }
    partitions.and_then(|n| partition_refusal(run_id, partition, n))
}

fn digest_or_empty(value: &str) -> &str {
    if is_digest(value) {
        value
    } else {
        ""
    }
}

// ---------------------------------------------------------------------------
// the core
// ---------------------------------------------------------------------------

pub struct Core {
    pub cfg: Config,
    pub state: State,
    /// The current step wrote a final seal (`_Emitter.final_sealed`): it ends with a checkpoint.
    pub final_sealed: bool,
    /// Signature verdicts computed ahead of the steps of a batch (`preverify`), by the address and
    /// length of the signature bytes inside the batch's inputs. Empty outside a batch.
    pub presigned: HashMap<(usize, usize), bool, KeyedHasher>,
    /// The inverse of every change since the oldest open mark (`undo.rs`): the shell rewinds
    /// to its last commit after an aborted transaction instead of re-reading Kafka.
    pub undo: UndoLog,
}

/// The producer signature an input carries, with its key and the signed bytes: what `preverify`
/// checks, keyed by the address and length of the signature inside the batch's inputs.
type SignedInput<'a, 'c> = ((usize, usize), &'c ProducerKey, &'a [u8], Vec<u8>);

fn signed_input<'a, 'c>(cfg: &'c Config, rec: &Input<'a>) -> Option<SignedInput<'a, 'c>> {
    let value = rec.value?;
    let fp = fingerprint_of(value).ok()?;
    let body = &value[HEADER_SIZE..];
    let (key_id, signature, message) = if fp == FP_ACTIVITY_SUBMISSION_V3 {
        let (sub, _) = decode_submission(body, fp).ok()?;
        let (key_id, signature) = sub.producer?;
        (key_id, signature, submission_signing_input(&sub, key_id))
    } else if fp == FP_RUN_CLOSE_V2 {
        let (close, _) = decode_run_close(body, true).ok()?;
        let (key_id, signature) = close.producer?;
        (key_id, signature, run_close_signing_input(&close, key_id))
    } else {
        return None;
    };
    let key = cfg.producer_keys.get(key_id)?;
    if !key.contains(rec.timestamp_ms) {
        return None; // refused before its signature matters
    }
    Some((
        (signature.as_ptr() as usize, signature.len()),
        key,
        signature,
        message?,
    ))
}

/// The verdicts of a part of a batch's inputs, many signatures to one equation (`ed25519::verify_many`).
fn verify_signed(cfg: &Config, inputs: &[Input<'_>]) -> Vec<((usize, usize), bool)> {
    let signed: Vec<SignedInput<'_, '_>> = inputs
        .iter()
        .filter_map(|rec| signed_input(cfg, rec))
        .collect();
    let items: Vec<Option<crate::ed25519::Item<'_>>> = signed
        .iter()
        .map(|(_, key, signature, message)| {
            // a registered key that names no curve point: nothing verifies under it
            key.key.as_ref().map(|key| crate::ed25519::Item {
                key,
                signature,
                message,
            })
        })
        .collect();
    let verdicts = crate::ed25519::verify_each(&items);
    signed.iter().map(|(at, ..)| *at).zip(verdicts).collect()
}

pub enum Outcome<'a> {
    Done(Vec<Output<'a>>),
    Fallback(Fallback),
}

impl Core {
    /// Verifies the producer signatures of `inputs` ahead of their steps, on every core of the
    /// machine (`threads`), and keeps the verdicts for `producer_refusal`. Each verdict is the very
    /// check the step would make (same key, signature and signed bytes), so outputs do not change;
    /// only the Ed25519 work moves out of the sequential step. `clear_presigned` ends the batch.
    pub fn preverify(&mut self, inputs: &[Input<'_>], threads: usize) {
        self.presigned.clear();
        let cfg = &self.cfg;
        let verdicts =
            crate::parallel::map_chunks(inputs, threads, |part| verify_signed(cfg, part));
        self.presigned.extend(verdicts);
    }

    /// Forgets the verdicts of `preverify` (the batch's input buffers may be freed after it).
    pub fn clear_presigned(&mut self) {
        self.presigned.clear();
    }

    pub fn new_run(&self, run_id: &str) -> RunState {
        RunState::empty(journal_genesis(run_id), self.cfg.hasher)
    }

    /// The run `run_id` is about to change (its first journal entry or seal creates it): an empty run
    /// unless it is there already, and, inside an undo epoch, its creation and its scalars recorded.
    /// Returns the run's index in the state's runs.
    /// `SchedulerCore._opened`: the run an accepted record changes; a run it opens counts toward its
    /// producer's open runs.
    fn open_run(&mut self, run_id: &str, producer_id: &str) -> usize {
        let created = !self.state.runs.contains_key(run_id);
        let index = self.touch_run(run_id);
        if created {
            self.state.runs[index].opened_by = producer_id.into();
            *self.state.open_runs.entry(producer_id.into()).or_insert(0) += 1;
        }
        index
    }

    fn touch_run(&mut self, run_id: &str) -> usize {
        let (index, created) = match self.state.runs.get_index_of(run_id) {
            Some(index) => (index, false),
            None => {
                let run = self.new_run(run_id);
                (self.state.runs.insert_full(run_id.into(), run).0, true)
            }
        };
        if self.undo.recording() {
            self.undo.touch(index, &self.state.runs[index], created);
        }
        index
    }

    /// `initial_state(config, partition)`
    pub fn reset(&mut self, partition: i32) {
        self.undo.clear();
        self.state = State {
            partition,
            audit: AuditChain {
                seq: 0,
                head: self.cfg.audit.audit_genesis(i64::from(partition)),
            },
            runs: Map::with_hasher(self.cfg.hasher),
            checkpoint: CheckpointChain::genesis(partition),
            open_runs: BTreeMap::new(),
        };
    }

    /// `SchedulerCore.step` for one record.
    pub fn step<'a>(&mut self, rec: &Input<'a>, host: &mut dyn Host) -> Outcome<'a> {
        let pos = match self.begin(rec) {
            Ok(pos) => pos,
            Err(f) => return Outcome::Fallback(f),
        };
        let mut out: Vec<Output<'a>> = Vec::with_capacity(4);
        match self.dispatch(rec, pos, &mut out, host) {
            Ok(()) => {
                self.checkpoint_if_due(rec, pos, &mut out);
                Outcome::Done(out)
            }
            Err(f) => Outcome::Fallback(f),
        }
    }

    /// What `step` and `reject` share before their outputs: the input's position,
    /// or the record classes the reference must handle (and `final_sealed` reset).
    fn begin<'a>(&mut self, rec: &Input<'a>) -> Result<Position<'a>, Fallback> {
        let Ok(partition) = i32::try_from(rec.partition) else {
            return Err(Fallback("input partition does not fit an Avro int"));
        };
        if self.state.audit.seq > i64::MAX - 8 {
            // Python's integers would outgrow an Avro long here; let the reference fail its way.
            return Err(Fallback("audit sequence at the end of the long range"));
        }
        self.final_sealed = false;
        if self.state.audit.seq == 0 {
            // `_start`: the partition's audit genesis under the audit key chosen for this input
            let key = self.cfg.audit_key_at(rec.timestamp_ms);
            self.state.audit.head = key.mac.audit_genesis(i64::from(self.state.partition));
        }
        Ok(Position {
            topic: rec.topic,
            partition,
            offset: rec.offset,
        })
    }

    fn dispatch<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        out: &mut Vec<Output<'a>>,
        host: &mut dyn Host,
    ) -> Result<(), Fallback> {
        let value = match rec.value {
            Some(v) if !v.is_empty() => v,
            _ => {
                self.dead_letter(
                    rec,
                    pos,
                    out,
                    "EMPTY_VALUE",
                    "record has no value (tombstone or empty)",
                );
                return Ok(());
            }
        };
        let fp = match fingerprint_of(value) {
            Ok(fp) => fp,
            Err(detail) => {
                self.dead_letter(rec, pos, out, "NOT_AVRO_SINGLE_OBJECT", &detail);
                return Ok(());
            }
        };
        let Some(name) = self
            .cfg
            .known
            .iter()
            .find(|(f, _)| *f == fp)
            .map(|(_, n)| n.clone())
        else {
            let detail = unknown_fingerprint(&fp);
            self.dead_letter(rec, pos, out, "UNKNOWN_SCHEMA_FINGERPRINT", &detail);
            return Ok(());
        };
        if !self.cfg.expected.contains(&name) {
            let detail = format!(
                "value is a {name} record, expected one of {}",
                self.cfg.expected_joined
            );
            self.dead_letter(rec, pos, out, "UNKNOWN_SCHEMA_FINGERPRINT", &detail);
            return Ok(());
        }
        let body = &value[HEADER_SIZE..];
        if fp == FP_ACTIVITY_SUBMISSION
            || fp == FP_ACTIVITY_SUBMISSION_V2
            || fp == FP_ACTIVITY_SUBMISSION_V3
        {
            let (sub, used) = decode_submission(body, fp)
                .map_err(|_| Fallback("body not decoded by the strict reader"))?;
            if used != body.len() {
                self.trailing(rec, pos, out, &name, body.len() - used);
                return Ok(());
            }
            self.submission(rec, pos, &sub, out, host)
        } else if fp == FP_RUN_CLOSE || fp == FP_RUN_CLOSE_V2 {
            let (close, used) = decode_run_close(body, fp == FP_RUN_CLOSE_V2)
                .map_err(|_| Fallback("body not decoded by the strict reader"))?;
            if used != body.len() {
                self.trailing(rec, pos, out, &name, body.len() - used);
                return Ok(());
            }
            self.run_close(rec, pos, &close, out, host)
        } else {
            Err(Fallback("input schema handled by the reference only"))
        }
    }

    fn trailing<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        out: &mut Vec<Output<'a>>,
        name: &str,
        extra: usize,
    ) {
        let detail = trailing_bytes(name, extra);
        self.dead_letter(rec, pos, out, "TRUNCATED_OR_MALFORMED_BODY", &detail);
    }

    // -- submissions ----------------------------------------------------------

    fn submission<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        sub: &Submission<'a>,
        out: &mut Vec<Output<'a>>,
        host: &mut dyn Host,
    ) -> Result<(), Fallback> {
        if let Some(refusal) = self.validate(sub, rec, host)? {
            let fields = RefusedFields {
                run_id: sub.run_id,
                stage_id: sub.stage_id,
                role: sub.role,
                kind: sub.kind,
                submission_id: sub.submission_id,
                terminal_state: sub.terminal_state,
                artifact_hash: sub.artifact_hash,
                evidence_set_hash: sub.evidence_set_hash,
                occurred_at_ms: sub.occurred_at_ms,
                producer: sub.producer_id,
                key_id: sub.producer.map_or("", |(key_id, _)| key_id),
            };
            self.refuse(rec, pos, &fields, refusal, out);
            return Ok(());
        }
        let run_id = sub.run_id;
        // nothing changes before the journal record is known to fit
        let genesis;
        let (seq, head): (i64, &str) = match self.state.runs.get(run_id) {
            Some(run) => (run.entry_count, run.head.as_str()),
            None => {
                genesis = journal_genesis(run_id);
                (0, genesis.as_str())
            }
        };

        let obs_len: usize = sub
            .observations
            .iter()
            .map(|o| o.kind.len() + o.reference.len() + o.content_hash.len() + 16)
            .sum();
        // only a signed ActivitySubmission.v3 gets here (JournalEntry.v3 keeps its key id and signature)
        let Some((producer_key_id, producer_signature)) = sub.producer else {
            return Err(Fallback(
                "an unsigned submission passed the producer checks",
            ));
        };
        let mut payload = soe_buffer(
            &FP_JOURNAL_ENTRY_V3,
            500 + obs_len + run_id.len() + rec.topic.len() + producer_signature.len(),
        );
        put_str(&mut payload, run_id);
        put_long(&mut payload, seq);
        put_str(&mut payload, head);
        put_str(&mut payload, ENTRY_ACTIVITY_RESULT);
        put_str(&mut payload, sub.stage_id);
        put_str(&mut payload, sub.role);
        put_str(&mut payload, sub.kind);
        put_str(&mut payload, sub.producer_id);
        put_str(&mut payload, sub.submission_id);
        put_str(&mut payload, sub.artifact_hash);
        put_str(&mut payload, sub.evidence_set_hash);
        if !sub.observations.is_empty() {
            put_long(&mut payload, sub.observations.len() as i64);
            for o in &sub.observations {
                put_str(&mut payload, o.kind);
                put_str(&mut payload, o.reference);
                put_str(&mut payload, o.content_hash);
                put_long(&mut payload, o.size);
            }
        }
        payload.push(0);
        put_str(&mut payload, sub.terminal_state);
        put_str(&mut payload, sub.reason_code);
        pos.put(&mut payload);
        put_long(&mut payload, sub.occurred_at_ms);
        put_str(&mut payload, producer_key_id);
        put_bytes(&mut payload, producer_signature);

        let entry_hash = journal_entry_hash(&payload);
        let mut value = soe_buffer(&FP_JOURNAL_RECORD, payload.len() + 80);
        put_bytes(&mut value, &payload);
        put_str(&mut value, &entry_hash);
        let size = output_size(
            &pos,
            out.len(),
            run_id.len(),
            value.len(),
            CeType::ActivityResult,
        );
        if size > self.cfg.max_output_bytes {
            let detail = format!(
                "the journal record would be {size} bytes with its key and headers; the limit (max_output_bytes) is {}",
                self.cfg.max_output_bytes
            );
            self.dead_letter(rec, pos, out, "OUTPUT_TOO_LARGE", &detail);
            return Ok(());
        }
        out.push(Output {
            stream: Stream::Journal,
            key: Cow::Borrowed(run_id.as_bytes()),
            value,
            ce_type: CeType::ActivityResult,
        });

        let index = self.open_run(run_id, sub.producer_id);
        let cfg = &self.cfg;
        let state = &mut self.state;
        let undo = &mut self.undo;
        let recording = undo.recording();
        let run = &mut state.runs[index];
        run.entry_count = seq + 1;
        let mut set = |map: &mut Map<Box<str>, Box<str>>, field: Field, key: &str, value: &str| {
            let old = map.insert(key.into(), value.into());
            if recording {
                undo.record(Change::MapSet {
                    run: index,
                    field,
                    key: key.into(),
                    old,
                });
            }
        };
        set(
            &mut run.submissions,
            Field::Submissions,
            sub.submission_id,
            sub.stage_id,
        );
        set(
            &mut run.stages,
            Field::Stages,
            sub.stage_id,
            sub.evidence_set_hash,
        );
        if !sub.observations.is_empty() && !run.evidence.contains_key(sub.evidence_set_hash) {
            set(
                &mut run.evidence,
                Field::Evidence,
                sub.evidence_set_hash,
                sub.stage_id,
            );
        }
        if sub.sized {
            for o in &sub.observations {
                if !run.blobs.contains(o.content_hash) {
                    run.blobs.insert(o.content_hash.into());
                    run.evidence_bytes += o.size;
                    if recording {
                        undo.record(Change::BlobAdded(index, o.content_hash.into()));
                    }
                }
            }
        }
        audit(
            cfg,
            &mut state.audit,
            state.partition,
            rec.timestamp_ms,
            pos,
            out,
            Event::ActivityResult,
            run_id,
            [
                sub.stage_id,
                sub.kind,
                sub.terminal_state,
                sub.reason_code,
                sub.artifact_hash,
                sub.evidence_set_hash,
                &entry_hash,
            ],
            seq,
        );
        run.head = entry_hash;
        if run.entry_count - run.sealed_count >= cfg.seal_every {
            seal(
                cfg,
                &mut state.audit,
                state.partition,
                rec,
                pos,
                out,
                run_id,
                run,
                false,
                None,
            );
        }
        Ok(())
    }

    fn validate<'a>(
        &self,
        sub: &Submission<'a>,
        rec: &Input<'_>,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        let key = rec.key;
        let (run_id, stage_id, role) = (sub.run_id, sub.stage_id, sub.role);
        let ids = [
            ("INVALID_RUN_ID", "run_id", run_id),
            ("INVALID_STAGE_ID", "stage_id", stage_id),
            ("INVALID_ROLE", "role", role),
        ];
        for (code, field, value) in ids {
            if !is_valid_id(value) {
                return Ok(Some(Refusal::new(
                    code,
                    format!("{field} {ID_RULE}"),
                    field,
                    clip(value, MAX_EVIDENCE_CHARS),
                )));
            }
        }
        let producer = [sub.producer_id, sub.producer_sdk];
        if let Some(r) = envelope_refusal(
            key,
            run_id,
            sub.submission_id,
            producer,
            sub.occurred_at_ms,
            rec.partition,
            self.cfg.submission_partitions,
        ) {
            return Ok(Some(r));
        }
        let signed = self.producer_refusal(
            sub.schema,
            sub.producer,
            sub.producer_id,
            Some(role),
            rec.timestamp_ms,
            |key_id| submission_signing_input(sub, key_id),
            host,
        )?;
        if let Some(r) = signed {
            return Ok(Some(r));
        }
        Ok(self.validate_signed(sub, host)?.map(Refusal::authenticated))
    }

    /// `_validate_signed`: the stage rules, once the producer's signature verified.
    fn validate_signed<'a>(
        &self,
        sub: &Submission<'a>,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        let (run_id, stage_id, role, kind) = (sub.run_id, sub.stage_id, sub.role, sub.kind);
        if let Some(r) = self.owner_refusal(run_id, sub.producer_id, host)? {
            return Ok(Some(r));
        }
        if let Some(earlier) = self
            .state
            .runs
            .get(run_id)
            .and_then(|run| run.submissions.get(sub.submission_id))
        {
            let shown = py_repr(sub.submission_id, host)?;
            let earlier_shown = py_repr(earlier, host)?;
            let mut r = Refusal::new(
                "DUPLICATE_SUBMISSION",
                format!(
                    "submission_id {shown} was already journalled in run '{run_id}' (stage {earlier_shown}); a repeated submission is journalled once"
                ),
                "submission_id",
                sub.submission_id,
            );
            r.earlier_stage_id = Some(earlier.to_string());
            return Ok(Some(r));
        }
        if !KINDS.contains(&kind) {
            let shown = py_repr(&clip(kind, 64), host)?;
            return Ok(Some(Refusal::new(
                "UNKNOWN_KIND",
                format!("kind {shown} is not one of {}", KINDS.join(", ")),
                "kind",
                clip(kind, MAX_EVIDENCE_CHARS),
            )));
        }
        let Some(allowed) = self.cfg.roles.get(role) else {
            return Ok(Some(Refusal::new(
                "UNKNOWN_ROLE",
                format!("role '{role}' is not declared in the roles manifest"),
                "role",
                role,
            )));
        };
        if allowed.text.as_deref() != Some(kind) {
            return Ok(Some(
                Refusal::new(
                    "KIND_NOT_ALLOWED_FOR_ROLE",
                    format!("role '{role}' declares agent_kind {}, but the submission is of kind '{kind}'", allowed.repr),
                    "kind",
                    kind,
                )
                .recomputed(clip(&allowed.clip_source, MAX_EVIDENCE_CHARS).into_owned()),
            ));
        }
        let terminal_state = sub.terminal_state;
        if !TERMINAL_STATES.contains(&terminal_state) {
            let shown = py_repr(&clip(terminal_state, 64), host)?;
            return Ok(Some(Refusal::new(
                "UNKNOWN_TERMINAL_STATE",
                format!(
                    "terminal_state {shown} is not one of {}",
                    TERMINAL_STATES.join(", ")
                ),
                "terminal_state",
                clip(terminal_state, MAX_EVIDENCE_CHARS),
            )));
        }
        let reason_code = sub.reason_code;
        if is_blank(reason_code) {
            return Ok(Some(Refusal::new(
                "EMPTY_REASON_CODE",
                "reason_code is empty".into(),
                "reason_code",
                reason_code,
            )));
        }
        if char_len(reason_code) > MAX_REASON_CODE_LENGTH || has_control(reason_code) {
            return Ok(Some(Refusal::new(
                "INVALID_REASON_CODE",
                "reason_code must be at most 128 characters without control characters".into(),
                "reason_code",
                clip(reason_code, MAX_EVIDENCE_CHARS),
            )));
        }
        let artifact = sub.artifact;
        if artifact.len() > MAX_INLINE_ARTIFACT_BYTES {
            return Ok(Some(
                Refusal::new(
                    "ARTIFACT_TOO_LARGE",
                    format!(
                        "inline artifact has {} bytes; the limit is {MAX_INLINE_ARTIFACT_BYTES}",
                        artifact.len()
                    ),
                    "artifact",
                    artifact.len().to_string(),
                )
                .recomputed(MAX_INLINE_ARTIFACT_BYTES.to_string()),
            ));
        }
        let declared_artifact = sub.artifact_hash;
        if !is_digest(declared_artifact) {
            return Ok(Some(malformed_digest("artifact_hash", declared_artifact)));
        }
        let recomputed_artifact = sha256_digest(artifact);
        if recomputed_artifact != declared_artifact {
            return Ok(Some(
                Refusal::new(
                    "ARTIFACT_HASH_MISMATCH",
                    format!("artifact_hash mismatch: declared {declared_artifact}, recomputed {recomputed_artifact}"),
                    "artifact_hash",
                    declared_artifact,
                )
                .recomputed(recomputed_artifact),
            ));
        }
        let observations = &sub.observations;
        if observations.len() > MAX_OBSERVATIONS {
            return Ok(Some(
                Refusal::new(
                    "TOO_MANY_OBSERVATIONS",
                    format!(
                        "{} observations; the limit is {MAX_OBSERVATIONS}",
                        observations.len()
                    ),
                    "observations",
                    observations.len().to_string(),
                )
                .recomputed(MAX_OBSERVATIONS.to_string()),
            ));
        }
        for (index, o) in observations.iter().enumerate() {
            if !is_digest(o.content_hash) {
                return Ok(Some(malformed_digest(
                    format!("observations[{index}].content_hash"),
                    o.content_hash,
                )));
            }
            if is_blank(o.kind)
                || char_len(o.kind) > MAX_KIND_LENGTH
                || char_len(o.reference) > MAX_REF_LENGTH
                || has_control(o.kind)
                || has_control(o.reference)
            {
                return Ok(Some(Refusal::new(
                    "INVALID_OBSERVATION",
                    format!(
                        "observations[{index}] needs a kind of 1-{MAX_KIND_LENGTH} characters and a ref of at most {MAX_REF_LENGTH}, without control characters"
                    ),
                    format!("observations[{index}]"),
                    clip(o.kind, MAX_EVIDENCE_CHARS),
                )));
            }
            if sub.sized && !(0..=MAX_RUN_EVIDENCE_BYTES).contains(&o.size) {
                let field = format!("observations[{index}].size");
                return Ok(Some(
                    Refusal::new(
                        "INVALID_EVIDENCE_SIZE",
                        format!(
                            "{field} must be 0 to {MAX_RUN_EVIDENCE_BYTES} bytes (the per-run evidence cap), got {}",
                            o.size
                        ),
                        field,
                        o.size.to_string(),
                    )
                    .recomputed(MAX_RUN_EVIDENCE_BYTES.to_string()),
                ));
            }
        }
        let declared_evidence = sub.evidence_set_hash;
        if !is_digest(declared_evidence) {
            return Ok(Some(malformed_digest(
                "evidence_set_hash",
                declared_evidence,
            )));
        }
        let recomputed_evidence =
            evidence_set_hash_of_digests(observations.iter().map(|o| o.content_hash));
        if recomputed_evidence != declared_evidence {
            return Ok(Some(
                Refusal::new(
                    "EVIDENCE_SET_HASH_MISMATCH",
                    format!("evidence_set_hash mismatch: declared {declared_evidence}, recomputed {recomputed_evidence}"),
                    "evidence_set_hash",
                    declared_evidence,
                )
                .recomputed(recomputed_evidence),
            ));
        }
        if let Some(run) = self.state.runs.get(run_id) {
            if run.closed {
                return Ok(Some(Refusal::new(
                    "RUN_CLOSED",
                    format!("run '{run_id}' is closed and sealed; no stage may follow"),
                    "run_id",
                    run_id,
                )));
            }
            if run.stages.contains_key(stage_id) {
                let mut r = Refusal::new(
                    "DUPLICATE_STAGE",
                    format!("stage '{stage_id}' was already accepted in run '{run_id}'"),
                    "stage_id",
                    stage_id,
                );
                r.earlier_stage_id = Some(stage_id.to_owned());
                return Ok(Some(r));
            }
            if !observations.is_empty() {
                if let Some(earlier) = run.evidence.get(declared_evidence) {
                    let shown = py_repr(earlier, host)?;
                    let mut r = Refusal::new(
                        "REDUNDANT_STAGE",
                        format!(
                            "stage '{stage_id}' introduces no new evidence (evidence_set_hash already contributed by stage {shown})"
                        ),
                        "evidence_set_hash",
                        declared_evidence,
                    )
                    .recomputed(declared_evidence);
                    r.earlier_stage_id = Some(earlier.to_string());
                    r.exception = "RedundantStage";
                    return Ok(Some(r));
                }
            }
        }
        if kind == "browser" {
            return Err(Fallback("browser session check"));
        }
        if (kind == "research" || kind == "data" || kind == "ops")
            && !crate::documents::accepts(sub)
        {
            // The modality document rules (schemas/documents/): accepted here only when they certainly
            // pass (native/src/documents.rs); a breach, or anything unusual, is the reference's to word.
            return Err(Fallback("modality document rules"));
        }
        if sub.sized {
            // The per-run evidence cap, the last check: distinct digests, each counted once (its first size).
            let run = self.state.runs.get(run_id);
            let before = run.map_or(0, |r| r.evidence_bytes);
            let mut seen: Vec<&str> = Vec::new();
            let (mut added, mut count) = (0i128, 0usize);
            for o in observations {
                if seen.contains(&o.content_hash)
                    || run.is_some_and(|r| r.blobs.contains(o.content_hash))
                {
                    continue;
                }
                seen.push(o.content_hash);
                added += i128::from(o.size);
                count += 1;
            }
            let total = i128::from(before) + added;
            if total > i128::from(MAX_RUN_EVIDENCE_BYTES) {
                return Ok(Some(
                    Refusal::new(
                        "EVIDENCE_CAP_EXCEEDED",
                        format!(
                            "run '{run_id}' would hold {total} bytes of evidence ({before} already, {added} in {count} new blobs); the per-run cap is {MAX_RUN_EVIDENCE_BYTES}"
                        ),
                        "evidence",
                        total.to_string(),
                    )
                    .recomputed(MAX_RUN_EVIDENCE_BYTES.to_string()),
                ));
            }
        } else if !observations.is_empty() && !self.cfg.accept_undeclared_sizes {
            // A v1 submission carries evidence the cap cannot count: refused at the same last check.
            return Ok(Some(
                Refusal::new(
                    "EVIDENCE_SIZES_UNDECLARED",
                    format!(
                        "this {ACTIVITY_SUBMISSION} carries {} observations without byte sizes, so the per-run evidence cap of {MAX_RUN_EVIDENCE_BYTES} bytes cannot count them; publish {ACTIVITY_SUBMISSION_V2} with each blob's size",
                        observations.len()
                    ),
                    "observations",
                    ACTIVITY_SUBMISSION.to_string(),
                )
                .recomputed(ACTIVITY_SUBMISSION_V2.to_string()),
            ));
        }
        if let Some(r) = self.open_runs_refusal(run_id, sub.producer_id, host)? {
            return Ok(Some(r));
        }
        if let Some(run) = self.state.runs.get(run_id) {
            // Counters at the end of the long range (only a forged state has them): the reference's integers decide.
            if run.entry_count == i64::MAX
                || run.entry_count.checked_sub(run.sealed_count).is_none()
            {
                return Err(Fallback("run counters at the end of the long range"));
            }
        }
        Ok(None)
    }

    /// `_open_runs_refusal`: a record that would open a run while its producer has `max_open_runs` open.
    fn open_runs_refusal<'a>(
        &self,
        run_id: &'a str,
        producer_id: &str,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        if self.state.runs.contains_key(run_id) {
            return Ok(None);
        }
        let Some(producer) = self.cfg.producers.iter().find(|p| p.name == producer_id) else {
            return Ok(None);
        };
        let count = self.state.open_runs.get(producer_id).copied().unwrap_or(0);
        if count < producer.max_open_runs {
            return Ok(None);
        }
        let name = py_repr(producer_id, host)?;
        Ok(Some(
            Refusal::new(
                "OPEN_RUNS_EXCEEDED",
                format!(
                    "producer {name} already has {count} open runs, its limit (max_open_runs in the roles manifest); close one before opening run '{run_id}'"
                ),
                "run_id",
                run_id,
            )
            .recomputed(producer.max_open_runs.to_string()),
        ))
    }

    /// `_owner_refusal`: a run id in another producer's run prefixes takes records only from its owner and the
    /// owner's collaborators; an id in nobody's prefixes is open to all.
    fn owner_refusal<'a>(
        &self,
        run_id: &'a str,
        producer_id: &'a str,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        let Some((owner, prefix)) = run_owner(&self.cfg.producers, run_id) else {
            return Ok(None);
        };
        if owner.admits(producer_id) {
            return Ok(None);
        }
        let name = py_repr(&owner.name, host)?;
        let shown = py_repr(&clip(producer_id, 80), host)?;
        let prefix = py_repr(prefix, host)?;
        Ok(Some(
            Refusal::new(
                "RUN_NOT_OWNED",
                format!(
                    "run '{run_id}' belongs to {name} (run prefix {prefix} in the roles manifest); {shown} is not one of its collaborators"
                ),
                "run_id",
                run_id,
            )
            .recomputed(clip(&owner.name, MAX_EVIDENCE_CHARS).into_owned()),
        ))
    }

    /// `_producer_refusal`: unsigned -> key unknown -> producer mismatch -> key not valid at
    /// the input's timestamp -> signature -> role not granted (`role` None: a run close).
    #[allow(clippy::too_many_arguments)]
    fn producer_refusal<'a>(
        &self,
        schema: &'static str,
        signed: Option<(&'a str, &'a [u8])>,
        producer_id: &'a str,
        role: Option<&'a str>,
        timestamp_ms: i64,
        signing_input: impl FnOnce(&str) -> Option<Vec<u8>>,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        let Some((key_id, signature)) = signed else {
            let signed_schema = if schema == RUN_CLOSE {
                RUN_CLOSE_V2
            } else {
                ACTIVITY_SUBMISSION_V3
            };
            return Ok(Some(
                Refusal::new(
                    "SUBMISSION_UNSIGNED",
                    format!(
                        "this {schema} carries no producer signature; publish {signed_schema}, signed by a producer key registered in the roles manifest"
                    ),
                    "producer_signature",
                    schema,
                )
                .recomputed(signed_schema),
            ));
        };
        let Some(key) = self.cfg.producer_keys.get(key_id) else {
            return Ok(Some(Refusal::new(
                "PRODUCER_KEY_UNKNOWN",
                format!(
                    "the signing key {} is not registered to any producer in the roles manifest ([[producers]])",
                    clip(key_id, 80)
                ),
                "producer_key_id",
                clip(key_id, MAX_EVIDENCE_CHARS),
            )));
        };
        let producer = &self.cfg.producers[key.producer];
        if producer_id != producer.name {
            let shown = py_repr(producer_id, host)?;
            let name = py_repr(&producer.name, host)?;
            return Ok(Some(
                Refusal::new(
                    "PRODUCER_MISMATCH",
                    format!("producer.id {shown} is not {name}, the producer key {key_id} is registered to"),
                    "producer.id",
                    producer_id,
                )
                .recomputed(clip(&producer.name, MAX_EVIDENCE_CHARS).into_owned()),
            ));
        }
        if !key.contains(timestamp_ms) {
            let valid = key.lifetime_text();
            let name = py_repr(&producer.name, host)?;
            return Ok(Some(
                Refusal::new(
                    "PRODUCER_KEY_NOT_VALID",
                    format!(
                        "producer key {key_id} of {name} signs inputs stamped {valid}; this input is stamped {timestamp_ms} (retired, revoked or not yet valid)"
                    ),
                    "producer_key_id",
                    timestamp_ms.to_string(),
                )
                .recomputed(valid),
            ));
        }
        let shown = hex_string(&signature[..signature.len().min(128)]);
        let Some(message) = signing_input(key_id) else {
            return Ok(Some(Refusal::new(
                "SUBMISSION_SIGNATURE_INVALID",
                "the submission statement has no canonical JSON form (an integer beyond 2**53 - 1): no signature can verify over it".into(),
                "producer_signature",
                shown,
            )));
        };
        let verdict = match self
            .presigned
            .get(&(signature.as_ptr() as usize, signature.len()))
        {
            Some(&verdict) => verdict,
            None => key.verifies(signature, &message),
        };
        if !verdict {
            let digest = sha256_digest(&message);
            return Ok(Some(
                Refusal::new(
                    "SUBMISSION_SIGNATURE_INVALID",
                    format!(
                        "the producer signature does not verify under key {key_id} over the {schema} statement (signed bytes {digest})"
                    ),
                    "producer_signature",
                    shown,
                )
                .recomputed(digest),
            ));
        }
        if let Some(role) = role {
            // An undeclared role is the stage rule's UNKNOWN_ROLE, not a missing grant.
            if self.cfg.roles.contains_key(role) && !producer.may_take(role) {
                let name = py_repr(&producer.name, host)?;
                let shown_role = py_repr(role, host)?;
                return Ok(Some(
                    Refusal::new(
                        "PRODUCER_ROLE_NOT_ALLOWED",
                        format!("producer {name} is not granted role {shown_role} in the roles manifest"),
                        "role",
                        role,
                    )
                    .recomputed(clip(&producer.roles.join(", "), MAX_EVIDENCE_CHARS).into_owned())
                    .authenticated(),
                ));
            }
        }
        Ok(None)
    }

    fn refuse<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        f: &RefusedFields<'a>,
        r: Refusal<'_>,
        out: &mut Vec<Output<'a>>,
    ) {
        let c = |s: &'a str| clip(s, MAX_EVIDENCE_CHARS);
        let mut value = soe_buffer(
            &FP_REFUSAL_V2,
            300 + r.message.len() + r.declared.len() + r.recomputed.len(),
        );
        put_str(&mut value, r.exception);
        put_str(&mut value, r.code);
        put_str(&mut value, &r.message);
        put_str(&mut value, &c(f.run_id));
        put_str(&mut value, &c(f.stage_id));
        put_str(&mut value, &c(f.role));
        put_str(&mut value, &c(f.kind));
        put_str(&mut value, &c(f.submission_id));
        put_str(&mut value, &r.field);
        put_str(&mut value, &clip(&r.declared, MAX_EVIDENCE_CHARS));
        put_str(&mut value, &clip(&r.recomputed, MAX_EVIDENCE_CHARS));
        put_opt_str(&mut value, r.earlier_stage_id.as_deref());
        pos.put(&mut value);
        let occurred_at_ms = if (0..=MAX_OCCURRED_AT_MS).contains(&f.occurred_at_ms) {
            f.occurred_at_ms
        } else {
            rec.timestamp_ms
        };
        put_long(&mut value, occurred_at_ms);
        put_str(&mut value, &c(f.producer));
        put_str(&mut value, &c(f.key_id));
        value.push(u8::from(r.authenticated));

        // keyed by the run id when it is one, else by nothing: never by an unbounded input key
        let valid_run = is_valid_id(f.run_id);
        let key: &'a [u8] = if valid_run { f.run_id.as_bytes() } else { b"" };
        let record_hash = sha256_digest(&value);
        out.push(Output {
            stream: Stream::Refusals,
            key: Cow::Borrowed(key),
            value,
            ce_type: CeType::ActivityRefused,
        });
        audit(
            &self.cfg,
            &mut self.state.audit,
            self.state.partition,
            rec.timestamp_ms,
            pos,
            out,
            Event::ActivityRefused,
            if valid_run { f.run_id } else { "" },
            [
                if is_valid_id(f.stage_id) {
                    f.stage_id
                } else {
                    ""
                },
                if KINDS.contains(&f.kind) { f.kind } else { "" },
                if TERMINAL_STATES.contains(&f.terminal_state) {
                    f.terminal_state
                } else {
                    ""
                },
                r.code,
                digest_or_empty(f.artifact_hash),
                digest_or_empty(f.evidence_set_hash),
                &record_hash,
            ],
            -1,
        );
    }

    // -- run close and seals ----------------------------------------------------

    fn run_close<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        close: &RunClose<'a>,
        out: &mut Vec<Output<'a>>,
        host: &mut dyn Host,
    ) -> Result<(), Fallback> {
        let run_id = close.run_id;
        let fields = RefusedFields {
            run_id,
            stage_id: "",
            role: "",
            kind: "",
            submission_id: close.submission_id,
            terminal_state: "",
            artifact_hash: "",
            evidence_set_hash: "",
            occurred_at_ms: close.occurred_at_ms,
            producer: close.producer_id,
            key_id: close.producer.map_or("", |(key_id, _)| key_id),
        };
        if !is_valid_id(run_id) {
            let r = Refusal::new(
                "INVALID_RUN_ID",
                format!("run_id {ID_RULE}"),
                "run_id",
                clip(run_id, MAX_EVIDENCE_CHARS),
            );
            self.refuse(rec, pos, &fields, r, out);
            return Ok(());
        }
        let producer = [close.producer_id, close.producer_sdk];
        let envelope = match envelope_refusal(
            rec.key,
            run_id,
            close.submission_id,
            producer,
            close.occurred_at_ms,
            rec.partition,
            self.cfg.submission_partitions,
        ) {
            Some(r) => Some(r),
            None => match self.producer_refusal(
                if close.producer.is_some() {
                    RUN_CLOSE_V2
                } else {
                    RUN_CLOSE
                },
                close.producer,
                close.producer_id,
                None,
                rec.timestamp_ms,
                |key_id| run_close_signing_input(close, key_id),
                host,
            )? {
                Some(r) => Some(r),
                None => self
                    .owner_refusal(run_id, close.producer_id, host)?
                    .map(Refusal::authenticated),
            },
        };
        if let Some(r) = envelope {
            self.refuse(rec, pos, &fields, r, out);
            return Ok(());
        }
        if self.state.runs.get(run_id).is_some_and(|run| run.closed) {
            let r = Refusal::new(
                "RUN_CLOSED",
                format!("run '{run_id}' is already closed and sealed"),
                "run_id",
                run_id,
            )
            .authenticated();
            self.refuse(rec, pos, &fields, r, out);
            return Ok(());
        }
        if self
            .state
            .runs
            .get(run_id)
            .is_none_or(|run| run.entry_count == 0)
        {
            // `_run_close`: nothing to seal; a close must not make state (or a seal) out of nothing
            let r = Refusal::new(
                "RUN_EMPTY",
                format!("run '{run_id}' has no journal entry to seal; close a run after its first stage"),
                "run_id",
                run_id,
            )
            .authenticated();
            self.refuse(rec, pos, &fields, r, out);
            return Ok(());
        }
        let index = self.touch_run(run_id);
        let cfg = &self.cfg;
        let state = &mut self.state;
        let run = &mut state.runs[index];
        let dropped = seal(
            cfg,
            &mut state.audit,
            state.partition,
            rec,
            pos,
            out,
            run_id,
            run,
            true,
            close
                .producer
                .map(|(key_id, signature)| (close, key_id, signature)),
        );
        if let Some(dropped) = dropped {
            self.undo.record(Change::Closed(index, Box::new(dropped)));
        }
        let opened_by = &self.state.runs[index].opened_by;
        if let Some(count) = self.state.open_runs.get_mut(opened_by) {
            *count -= 1;
            if *count == 0 {
                self.state.open_runs.remove(opened_by); // a producer without open runs takes no room
            }
        }
        self.final_sealed = true;
        Ok(())
    }

    // -- dead letters -------------------------------------------------------------

    /// `SchedulerCore.reject`: dead-letter `rec` with `code` and `detail`
    /// instead of stepping it (the shell's per-record produce errors).
    pub fn reject<'a>(&mut self, rec: &Input<'a>, code: &str, detail: &str) -> Outcome<'a> {
        let pos = match self.begin(rec) {
            Ok(pos) => pos,
            Err(f) => return Outcome::Fallback(f),
        };
        let mut out: Vec<Output<'a>> = Vec::with_capacity(2);
        self.dead_letter(rec, pos, &mut out, code, detail);
        self.checkpoint_if_due(rec, pos, &mut out);
        Outcome::Done(out)
    }

    /// `SchedulerCore._checkpoint_if_due`: the step's last output, a signed
    /// partition checkpoint, after a final seal or every `checkpoint_every` audit records.
    fn checkpoint_if_due<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        out: &mut Vec<Output<'a>>,
    ) {
        let state = &mut self.state;
        let reason = if self.final_sealed {
            "final"
        } else if state.audit.seq - state.checkpoint.audit_seq >= self.cfg.checkpoint_every {
            "periodic"
        } else {
            return;
        };
        let mut payload = soe_buffer(&FP_PARTITION_CHECKPOINT, 240 + pos.topic.len());
        put_int(&mut payload, state.partition);
        put_long(&mut payload, state.checkpoint.seq);
        put_str(&mut payload, &state.checkpoint.head);
        put_str(&mut payload, pos.topic);
        put_long(&mut payload, rec.offset + 1);
        put_long(&mut payload, state.audit.seq);
        put_str(&mut payload, &state.audit.head);
        put_str(&mut payload, reason);
        put_long(&mut payload, self.cfg.checkpoint_every);
        put_long(&mut payload, rec.timestamp_ms);
        let signer = self.cfg.seal_key_at(rec.timestamp_ms);
        let signature = signer
            .signing_key
            .sign(&checkpoint_signing_input(&payload))
            .to_bytes();
        let mut value = soe_buffer(&FP_CHECKPOINT_RECORD, payload.len() + 160);
        put_bytes(&mut value, &payload);
        put_str(&mut value, &signer.key_id);
        put_bytes(&mut value, &signature);
        out.push(Output {
            stream: Stream::Checkpoints,
            key: Cow::Owned(state.partition.to_string().into_bytes()),
            value,
            ce_type: CeType::PartitionCheckpoint,
        });
        state.checkpoint.seq += 1;
        state.checkpoint.head = checkpoint_hash(&payload);
        state.checkpoint.audit_seq = state.audit.seq;
    }

    fn dead_letter<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        out: &mut Vec<Output<'a>>,
        code: &str,
        detail: &str,
    ) {
        let raw: &[u8] = rec.value.unwrap_or(b"");
        let raw_sha256 = sha256_digest(raw);
        let kept: &[u8] = if raw.len() <= MAX_DEAD_LETTER_RAW {
            raw
        } else {
            b""
        };
        let detail = clip(detail, MAX_DETAIL_CHARS);
        let key = rec.key;
        let kept_key = key.map(|k| &k[..k.len().min(MAX_KEPT_KEY_BYTES)]);
        let key_sha256 = key.map_or_else(String::new, sha256_digest);
        // keyed by the input key while it is small, else by nothing
        let out_key: &'a [u8] = match key {
            Some(k) if k.len() <= MAX_KEPT_KEY_BYTES => k,
            _ => b"",
        };
        let encode = |raw_kept: &[u8]| {
            let mut value = soe_buffer(
                &FP_DEAD_LETTER_V2,
                240 + detail.len() + raw_kept.len() + kept_key.map_or(0, <[u8]>::len),
            );
            put_str(&mut value, code);
            put_str(&mut value, &detail);
            put_str(&mut value, &raw_sha256);
            put_long(&mut value, raw.len() as i64);
            put_bytes(&mut value, raw_kept);
            put_opt_bytes(&mut value, kept_key);
            put_str(&mut value, &key_sha256);
            put_long(&mut value, key.map_or(0, |k| k.len() as i64));
            pos.put(&mut value);
            put_long(&mut value, rec.timestamp_ms);
            value
        };
        let mut value = encode(kept);
        if !kept.is_empty()
            && output_size(
                &pos,
                out.len(),
                out_key.len(),
                value.len(),
                CeType::InputDeadletter,
            ) > self.cfg.max_output_bytes
        {
            value = encode(b""); // by digest and size only
        }
        out.push(Output {
            stream: Stream::Deadletter,
            key: Cow::Borrowed(out_key),
            value,
            ce_type: CeType::InputDeadletter,
        });
        audit(
            &self.cfg,
            &mut self.state.audit,
            self.state.partition,
            rec.timestamp_ms,
            pos,
            out,
            Event::InputDeadletter,
            "",
            ["", "", "", code, "", "", &raw_sha256],
            -1,
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn seal<'a>(
    cfg: &Config,
    chain: &mut AuditChain,
    partition: i32,
    rec: &Input<'a>,
    pos: Position<'a>,
    out: &mut Vec<Output<'a>>,
    run_id: &'a str,
    run: &mut RunState,
    final_: bool,
    closed_by: Option<(&RunClose<'_>, &str, &[u8])>,
) -> Option<Dropped> {
    let mut payload = soe_buffer(&FP_RUN_SEAL_V2, 360 + run_id.len());
    put_str(&mut payload, run_id);
    put_int(&mut payload, partition);
    put_long(&mut payload, run.entry_count);
    put_str(&mut payload, &run.head);
    put_long(&mut payload, rec.offset);
    put_bool(&mut payload, final_);
    put_long(&mut payload, chain.seq);
    put_str(&mut payload, &chain.head);
    put_long(&mut payload, rec.timestamp_ms);
    match closed_by {
        None => put_long(&mut payload, 0),
        Some((close, key_id, signature)) => {
            put_long(&mut payload, 1);
            put_str(&mut payload, close.submission_id);
            put_str(&mut payload, close.producer_id);
            put_long(&mut payload, close.occurred_at_ms);
            put_str(&mut payload, key_id);
            put_bytes(&mut payload, signature);
        }
    }
    let signer = cfg.seal_key_at(rec.timestamp_ms);
    let signature = signer
        .signing_key
        .sign(&seal_signing_input(&payload))
        .to_bytes();
    let mut value = soe_buffer(&FP_SEAL_RECORD, payload.len() + 160);
    put_bytes(&mut value, &payload);
    put_str(&mut value, &signer.key_id);
    put_bytes(&mut value, &signature);
    let record_hash = sha256_digest(&value);
    out.push(Output {
        stream: Stream::Journal,
        key: Cow::Borrowed(run_id.as_bytes()),
        value,
        ce_type: CeType::RunSealed,
    });
    run.sealed_count = run.entry_count;
    let dropped = final_.then(|| run.close());
    audit(
        cfg,
        chain,
        partition,
        rec.timestamp_ms,
        pos,
        out,
        Event::RunSealed,
        run_id,
        [
            "",
            "",
            "",
            if final_ { "final" } else { "periodic" },
            "",
            "",
            &record_hash,
        ],
        run.entry_count,
    );
    dropped
}

/// Appends one AuditEntry.v1, in an AuditRecord.v2 envelope, to the partition's HMAC chain. `fields` are
/// stage_id, kind, terminal_state, reason_code, artifact_hash,
/// evidence_set_hash and record_hash.
#[allow(clippy::too_many_arguments)]
fn audit<'a>(
    cfg: &Config,
    chain: &mut AuditChain,
    partition: i32,
    timestamp_ms: i64,
    pos: Position<'a>,
    out: &mut Vec<Output<'a>>,
    event: Event,
    run_id: &'a str,
    fields: [&str; 7],
    journal_seq: i64,
) {
    let mut payload = soe_buffer(&FP_AUDIT_ENTRY, 420 + run_id.len() + pos.topic.len());
    put_int(&mut payload, partition);
    put_long(&mut payload, chain.seq);
    put_str(&mut payload, &chain.head);
    put_str(&mut payload, event.value());
    put_str(&mut payload, run_id);
    for f in fields {
        put_str(&mut payload, f);
    }
    put_long(&mut payload, journal_seq);
    pos.put(&mut payload);
    let key = cfg.audit_key_at(timestamp_ms);
    let mac = key.mac.audit_record_mac(&key.key_id, &payload);
    let mut value = soe_buffer(&FP_AUDIT_RECORD_V2, payload.len() + 160);
    put_str(&mut value, &key.key_id);
    put_bytes(&mut value, &payload);
    put_str(&mut value, &mac);
    out.push(Output {
        stream: Stream::Audit,
        key: Cow::Borrowed(run_id.as_bytes()),
        value,
        ce_type: event.ce_type(),
    });
    chain.seq += 1;
    chain.head = mac;
}
