//! The undo log: what the core changed since a mark, so the state can go back to it.
//!
//! The shell plans the next batch while the previous one commits, so when a transaction
//! aborts the state has moved past the last commit by one or two batches. Instead of
//! re-reading the committed outputs from Kafka (seconds), the shell rewinds: every mark
//! opens an epoch, every change the step makes inside an epoch records its inverse, and
//! `rewind(epoch)` undoes the newest epochs back to the start of that one, newest change
//! first. The maps are insertion-ordered, so undoing the newest insertion first leaves every
//! map exactly as it was, order included: a rewound state's bytes equal a full fold's.
//!
//! What each change records is small (the keys it inserted, a run's scalars, the maps a
//! final seal dropped, which it keeps instead of freeing): one record costs a few short
//! string copies. Outside an epoch nothing is recorded. Replacing the whole state (a load
//! or a reset) forgets every epoch: a rewind to one of them then fails and the shell
//! rebuilds from Kafka.

use crate::core::{AuditChain, CheckpointChain, Map, RunState, Session, Set, State};
use crate::merkle::Frontier;
use std::collections::BTreeMap;

/// Which of a run's string maps a `MapSet` changed.
#[derive(Clone, Copy, Debug)]
pub enum Field {
    Stages,
    Evidence,
    Submissions,
}

/// A run's scalar fields, as they were before a step changed them.
#[derive(Clone, Debug)]
pub struct Scalars {
    pub head: String,
    pub entry_count: i64,
    pub sealed_count: i64,
    pub closed: bool,
    pub evidence_bytes: i64,
}

impl Scalars {
    pub fn of(run: &RunState) -> Self {
        Scalars {
            head: run.head.clone(),
            entry_count: run.entry_count,
            sealed_count: run.sealed_count,
            closed: run.closed,
            evidence_bytes: run.evidence_bytes,
        }
    }
}

/// What a final seal dropped from a run (`RunState::close`).
#[derive(Debug)]
pub struct Dropped {
    pub stages: Map<Box<str>, Box<str>>,
    pub evidence: Map<Box<str>, Box<str>>,
    pub sessions: Vec<(String, Session)>,
    pub blobs: Set<Box<str>>,
}

/// One change, by its inverse. Runs are named by their index in the state's runs: runs are only
/// ever appended (and removed only by undoing their creation, newest first), so indices hold.
#[derive(Debug)]
pub enum Change {
    /// A run was created: undone by removing the newest run.
    RunAdded,
    /// The run's scalars before the epoch first changed them.
    Scalars(usize, Scalars),
    /// A key was set in one of the run's maps; `old` is what it held before (None: it was new).
    MapSet {
        run: usize,
        field: Field,
        key: Box<str>,
        old: Option<Box<str>>,
    },
    /// A blob digest was counted in the run's evidence.
    BlobAdded(usize, Box<str>),
    /// A final seal dropped these maps.
    Closed(usize, Box<Dropped>),
    /// The whole run was replaced (the Python reference's write-back): what it was (None: it was new, the newest run).
    Replaced(usize, Option<Box<RunState>>),
}

struct Epoch {
    id: u64,
    audit: (i64, String),
    checkpoint: (i64, String, i64),
    /// The partition's Merkle log at the mark (a frontier: at most 64 hashes, copied whole).
    tree: Frontier,
    /// Each producer's open runs at the mark (one count per producer: copied whole).
    open_runs: BTreeMap<Box<str>, i64>,
    changes: Vec<Change>,
}

/// The open epochs, oldest first.
#[derive(Default)]
pub struct UndoLog {
    epochs: Vec<Epoch>,
    next_id: u64,
    /// By run index: the epoch that last saved the run's scalars (each epoch saves a run's once).
    saved: Vec<u64>,
}

impl UndoLog {
    /// True while an epoch is open: changes must be recorded.
    #[inline]
    pub fn recording(&self) -> bool {
        !self.epochs.is_empty()
    }

    /// Opens an epoch at the current state and returns its id (ids only grow).
    pub fn mark(&mut self, state: &State) -> u64 {
        self.next_id += 1;
        self.epochs.push(Epoch {
            id: self.next_id,
            audit: (state.audit.seq, state.audit.head.clone()),
            checkpoint: (
                state.checkpoint.seq,
                state.checkpoint.head.clone(),
                state.checkpoint.audit_seq,
            ),
            tree: state.tree.clone(),
            open_runs: state.open_runs.clone(),
            changes: Vec::new(),
        });
        self.next_id
    }

    /// A step is about to change run `index` (just created when `created`): records its creation, or
    /// its scalars the first time the newest epoch changes it.
    pub fn touch(&mut self, index: usize, run: &RunState, created: bool) {
        let Some(epoch) = self.epochs.last_mut() else {
            return;
        };
        if created {
            epoch.changes.push(Change::RunAdded);
        } else {
            if self.saved.len() <= index {
                self.saved.resize(index + 1, 0);
            }
            if self.saved[index] != epoch.id {
                self.saved[index] = epoch.id;
                epoch.changes.push(Change::Scalars(index, Scalars::of(run)));
            }
        }
    }

    /// Records a change in the newest epoch (nothing when none is open).
    #[inline]
    pub fn record(&mut self, change: Change) {
        if let Some(epoch) = self.epochs.last_mut() {
            epoch.changes.push(change);
        }
    }

    /// Forgets the epochs up to and including `through` (their changes were committed).
    pub fn forget(&mut self, through: u64) {
        self.epochs.retain(|e| e.id > through);
    }

    /// Forgets every epoch (the state was replaced as a whole).
    pub fn clear(&mut self) {
        self.epochs.clear();
        self.saved.clear();
    }

    /// The ids of the open epochs, oldest first.
    pub fn open(&self) -> Vec<u64> {
        self.epochs.iter().map(|e| e.id).collect()
    }

    /// Puts `state` back as it was when epoch `to` was marked, and closes it and every later
    /// epoch. False (and nothing changed) when `to` is not open.
    pub fn rewind(&mut self, state: &mut State, to: u64) -> bool {
        let Some(index) = self.epochs.iter().position(|e| e.id == to) else {
            return false;
        };
        for epoch in self.epochs.drain(index..).rev() {
            for change in epoch.changes.into_iter().rev() {
                undo(state, change);
            }
            state.audit = AuditChain {
                seq: epoch.audit.0,
                head: epoch.audit.1,
            };
            state.checkpoint = CheckpointChain {
                seq: epoch.checkpoint.0,
                head: epoch.checkpoint.1,
                audit_seq: epoch.checkpoint.2,
            };
            state.tree = epoch.tree;
            state.open_runs = epoch.open_runs;
        }
        true
    }
}

/// Removes `key`, keeping the order of the rest (it is the newest key when undone in order: O(1)).
fn remove_keeping_order(map: &mut Map<Box<str>, Box<str>>, key: &str) {
    if map.last().is_some_and(|(k, _)| &**k == key) {
        map.pop();
    } else {
        map.shift_remove(key);
    }
}

fn undo(state: &mut State, change: Change) {
    match change {
        Change::RunAdded | Change::Replaced(_, None) => {
            state.runs.pop();
        }
        Change::Replaced(index, Some(old)) => {
            if let Some((_, run)) = state.runs.get_index_mut(index) {
                *run = *old;
            }
        }
        Change::Scalars(index, s) => {
            if let Some((_, run)) = state.runs.get_index_mut(index) {
                run.head = s.head;
                run.entry_count = s.entry_count;
                run.sealed_count = s.sealed_count;
                run.closed = s.closed;
                run.evidence_bytes = s.evidence_bytes;
            }
        }
        Change::MapSet {
            run,
            field,
            key,
            old,
        } => {
            if let Some((_, run)) = state.runs.get_index_mut(run) {
                let map = match field {
                    Field::Stages => &mut run.stages,
                    Field::Evidence => &mut run.evidence,
                    Field::Submissions => &mut run.submissions,
                };
                match old {
                    Some(value) => {
                        map.insert(key, value);
                    }
                    None => remove_keeping_order(map, &key),
                }
            }
        }
        Change::BlobAdded(index, digest) => {
            if let Some((_, run)) = state.runs.get_index_mut(index) {
                if run.blobs.last().is_some_and(|d| *d == digest) {
                    run.blobs.pop();
                } else {
                    run.blobs.shift_remove(&*digest);
                }
            }
        }
        Change::Closed(index, dropped) => {
            if let Some((_, run)) = state.runs.get_index_mut(index) {
                let Dropped {
                    stages,
                    evidence,
                    sessions,
                    blobs,
                } = *dropped;
                run.stages = stages;
                run.evidence = evidence;
                run.sessions = sessions;
                run.blobs = blobs;
            }
        }
    }
}
