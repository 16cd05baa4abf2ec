//! The configuration and the state of one input partition (`SchedulerConfig`, `SchedulerState`).

use super::*;

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

pub(crate) fn in_range(timestamp_ms: i64, from: i64, until: Option<i64>) -> bool {
    timestamp_ms >= from && until.is_none_or(|u| timestamp_ms < u)
}

/// `model.key_for`: the newest key whose range contains the timestamp, else the newest.
pub(crate) fn key_for<T>(
    keys: &[T],
    timestamp_ms: i64,
    range: impl Fn(&T) -> (i64, Option<i64>),
) -> &T {
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
    /// `config.log_name`: the deployment's name in every partition log's checkpoint origin.
    pub log_name: String,
    /// `config.log_epoch`: the logs' epoch in the origin (1 to 2**31 - 1).
    pub log_epoch: i64,
    /// Whether journal records are appended to the partition's Merkle log: always, but for
    /// `bench.tlog`'s same-run baseline (`NativeCore.disable_merkle_log_for_benchmark`), whose
    /// checkpoints then sign a tree that is not the journal's.
    pub keep_log: bool,
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
    /// `SchedulerState.tree`: the partition's Merkle log (every journal entry and seal written,
    /// in order) as its frontier.
    pub tree: Frontier,
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
