//! Facts for the scheduler's restart fold (`consumers/core/rebuild.py`): the
//! per-record byte work of `rebuild_state`, in batches.
//!
//! The fold decides nothing here. `FoldKeys` turns the raw values of the
//! journal, audit and checkpoints partitions into exactly the facts that
//! `rebuild.py`'s Python fact functions (`_journal_fact`, `_audit_fact`,
//! `_checkpoint_fact`) return for them: the records fully decoded, the entry
//! hash recomputed and compared with the stored one, the seal's and the
//! checkpoint's Ed25519 signatures re-made with the scheduler's seed and
//! compared, the audit MAC recomputed under the key its record names. The
//! Python fold applies them to the `SchedulerState` (the chain links, the
//! mirror matching, the run maps), so both paths share every decision.
//! `audit_walk` goes one step further for the audit partition, whose records
//! only extend a chain: it walks the chain itself (the same checks as
//! `_AuditWalk._extend`) and hands out only the records that mirror a journal
//! record and those it leaves to the Python functions. `bindings::fold` lays
//! the facts out as the tuples Python reads (`facts::fold_*`).
//!
//! What this module does not reproduce it hands back as `None`, and the
//! Python fact function decides that one record:
//!
//! * anything the strict Avro reader (`crate::avro::Reader`) does not accept in
//!   full (fastavro decides and words the error), a schema this module does not
//!   read where the fold expects one of its own, a boolean byte other than 0 or 1;
//! * an audit record whose MAC does not verify, or that names an audit key
//!   this reader was not given (the Python function words the problem);
//! * a seal or checkpoint under a key id whose seed this reader was not given;
//! * an item that is not `bytes`.
//!
//! No I/O, no clock, no randomness.

use ed25519_dalek::{Signer as _, SigningKey};

use crate::hashing::{
    checkpoint_hash, checkpoint_signing_input, journal_entry_hash, seal_signing_input,
    sha256_digest, AuditMac,
};
use crate::records::audit::{decode_audit_entry, AuditHead};
use crate::records::envelope::{decode_envelope, Envelope};
use crate::records::journal::{decode_entry, Activity, Body};
use crate::records::seal::{decode_checkpoint, decode_seal, Checkpoint};
use crate::records::Layout;

const ENTRY_COMPUTER_USE_ACTION: &str = "computer_use.action";

/// The layouts read here (`FoldReader` refuses a codec whose fingerprint for one of these
/// names differs; exported as `FOLD_SCHEMAS`).
pub const FOLD_LAYOUTS: [Layout; 16] = [
    Layout::JournalRecord,
    Layout::SealRecord,
    Layout::JournalEntryV1,
    Layout::JournalEntryV2,
    Layout::JournalEntryV3,
    Layout::ComputerUseEntryV1,
    Layout::ComputerUseEntryV2,
    Layout::RunSealV1,
    Layout::RunSealV2,
    Layout::AuditRecordV1,
    Layout::AuditRecordV2,
    Layout::AuditEntryV1,
    Layout::AuditEntryV2,
    Layout::CheckpointRecord,
    Layout::PartitionCheckpoint,
    Layout::PartitionCheckpointV2,
];

/// What every journal entry fact carries: where the entry links in its run's chain.
pub struct EntryLink<'a> {
    pub run_id: &'a str,
    pub seq: i64,
    /// The entry hash recomputed from the payload.
    pub entry_hash: String,
    pub prev_hash: &'a str,
    /// The stored entry_hash equals the recomputed one.
    pub stored_hash_ok: bool,
}

/// What the fold needs of one journal record (`facts::fold_entry`, `fold_action`,
/// `fold_odd_entry`, `fold_seal`).
pub enum JournalFact<'a> {
    /// A JournalEntry.v1/v2/v3 of type `activity.result` (or any type but a computer-use action).
    Entry {
        link: EntryLink<'a>,
        submission_id: &'a str,
        stage_id: &'a str,
        evidence_set_hash: &'a str,
        observed: bool,
        /// The (digest, size) pairs of a sized entry's observations; None for JournalEntry.v1
        /// and for an entry without observations.
        charges: Option<Vec<(&'a str, i64)>>,
        browser: bool,
        producer_id: &'a str,
    },
    /// A ComputerUseEntry.v1/v2 of type `computer_use.action`.
    Action {
        link: EntryLink<'a>,
        submission_id: &'a str,
        session_id: &'a str,
        action_index: i64,
        anchor: &'a str,
        /// The screenshot's and the DOM snapshot's (digest, size) (ComputerUseEntry.v2 only).
        charges: Option<[(&'a str, i64); 2]>,
        producer_id: &'a str,
    },
    /// An entry whose entry_type its layout does not carry.
    OddEntry {
        link: EntryLink<'a>,
        schema: &'static str,
        entry_type: &'a str,
    },
    /// A seal under one of the scheduler's keys.
    Seal {
        run_id: &'a str,
        entry_count: i64,
        /// sha256 of the whole record value.
        identity: String,
        key_id: &'a str,
        signed: bool,
        last: bool,
        /// The seal's head_hash, last_input_offset and audit_head: its Merkle log leaf
        /// (`tlog_seal_leaf`), with `run_id`, `entry_count` and `last`.
        head_hash: &'a str,
        last_input_offset: i64,
        audit_head: &'a str,
    },
}

/// An audit record whose MAC verifies (`facts::fold_audit`; `v2_key_id`: None for an
/// AuditRecord.v1).
pub struct AuditFact<'a> {
    pub entry: AuditHead<'a, i64>,
    pub mac: &'a str,
    pub v2_key_id: Option<&'a str>,
}

/// A checkpoint under one of the scheduler's keys (`facts::fold_checkpoint`).
pub struct CheckpointFact<'a> {
    pub checkpoint: Checkpoint<'a>,
    pub hash: String,
    pub signed: bool,
}

/// One event of `FoldKeys::audit_walk` (`facts::fold_walk_mirror`, `fold_walk_undecided`).
pub enum WalkEvent<'a> {
    /// An adopted record that mirrors a journal record, and the chain after it.
    Mirror {
        index: usize,
        run_id: &'a str,
        journal_seq: i64,
        record_hash: &'a str,
        seq: i64,
        head: String,
    },
    /// A record the walk leaves to Python, and the chain before it.
    Undecided {
        index: usize,
        seq: i64,
        head: String,
    },
}

/// The scheduler's keys the fold checks records under.
pub struct FoldKeys {
    /// The audit key ring by key id, in the order of `SchedulerConfig.audit_secret` (first match wins).
    pub audit_keys: Vec<(String, AuditMac)>,
    /// `SchedulerConfig.audit_key`: MACs AuditRecord.v1.
    pub audit_key: AuditMac,
    /// The seal keys by key id whose seeds the caller has (first match wins, as `_seal_signer`).
    pub seal_keys: Vec<(String, SigningKey)>,
    /// The audit events whose record mirrors one journal record (`rebuild._MIRRORS_JOURNAL`).
    pub mirror_events: Vec<String>,
}

impl FoldKeys {
    fn seal_key(&self, key_id: &str) -> Option<&SigningKey> {
        self.seal_keys
            .iter()
            .find(|(k, _)| k == key_id)
            .map(|(_, key)| key)
    }

    /// `rebuild._journal_fact` (None: the Python function decides).
    pub fn journal_fact<'a>(&self, value: &'a [u8]) -> Option<JournalFact<'a>> {
        match decode_envelope(value)? {
            Envelope::Journal { payload, stored } => {
                let entry = decode_entry(payload)?;
                let entry_hash = journal_entry_hash(payload);
                let link = EntryLink {
                    run_id: entry.head.run_id,
                    seq: entry.head.seq,
                    stored_hash_ok: entry_hash == stored,
                    entry_hash,
                    prev_hash: entry.head.prev_hash,
                };
                let entry_type = entry.head.entry_type;
                if entry.layout.is_action_entry() != (entry_type == ENTRY_COMPUTER_USE_ACTION) {
                    return Some(JournalFact::OddEntry {
                        link,
                        schema: entry.layout.name(),
                        entry_type,
                    });
                }
                Some(match entry.body {
                    Body::Activity(activity) => {
                        let observed = !activity.observations.is_empty();
                        JournalFact::Entry {
                            link,
                            submission_id: entry.submission_id,
                            stage_id: activity.stage_id,
                            evidence_set_hash: activity.evidence_set_hash,
                            observed,
                            charges: (Activity::sized(entry.layout) && observed).then(|| {
                                activity
                                    .observations
                                    .iter()
                                    .map(|o| (o.content_hash, o.size))
                                    .collect()
                            }),
                            browser: activity.kind == "browser",
                            producer_id: entry.producer_id,
                        }
                    }
                    Body::Action(action) => JournalFact::Action {
                        link,
                        submission_id: entry.submission_id,
                        session_id: action.session_id,
                        action_index: action.action_index,
                        anchor: action.anchor,
                        charges: (entry.layout == Layout::ComputerUseEntryV2)
                            .then_some([action.screenshot, action.dom]),
                        producer_id: entry.producer_id,
                    },
                })
            }
            Envelope::Seal {
                payload,
                key_id,
                signature,
            } => {
                let seal = decode_seal(payload)?;
                let key = self.seal_key(key_id)?;
                // Ed25519 is deterministic (RFC 8032): our key signs these bytes to exactly one signature.
                let signed = key.sign(&seal_signing_input(payload)).to_bytes()[..] == *signature;
                Some(JournalFact::Seal {
                    run_id: seal.run_id,
                    entry_count: seal.entry_count,
                    identity: sha256_digest(value),
                    key_id,
                    signed,
                    last: seal.last,
                    head_hash: seal.head_hash,
                    last_input_offset: seal.last_input_offset,
                    audit_head: seal.audit_head,
                })
            }
            _ => None,
        }
    }

    /// `rebuild._audit_fact` for a record whose MAC verifies (None: the Python function decides).
    pub fn audit_fact<'a>(&self, value: &'a [u8]) -> Option<AuditFact<'a>> {
        let Envelope::Audit {
            payload,
            key_id,
            mac,
            v2,
        } = decode_envelope(value)?
        else {
            return None;
        };
        let entry = decode_audit_entry(payload)?;
        let recomputed = if v2 {
            let (_, keyed) = self.audit_keys.iter().find(|(k, _)| k == key_id)?;
            keyed.audit_record_mac(key_id, payload)
        } else {
            self.audit_key.audit_mac(payload)
        };
        // `macs_equal(recomputed, mac)`: the recomputed MAC is ASCII without '?', so only the
        // identical string compares equal (the Python function words any other outcome).
        if recomputed != mac {
            return None;
        }
        Some(AuditFact {
            entry,
            mac,
            v2_key_id: v2.then_some(key_id),
        })
    }

    /// `rebuild._checkpoint_fact` (None: the Python function decides).
    pub fn checkpoint_fact<'a>(&self, value: &'a [u8]) -> Option<CheckpointFact<'a>> {
        let Envelope::Checkpoint {
            payload,
            key_id,
            signature,
        } = decode_envelope(value)?
        else {
            return None;
        };
        let checkpoint = decode_checkpoint(payload)?;
        let key = self.seal_key(key_id)?;
        let signed = key.sign(&checkpoint_signing_input(payload)).to_bytes()[..] == *signature;
        Some(CheckpointFact {
            checkpoint,
            hash: checkpoint_hash(payload),
            signed,
        })
    }

    /// The audit chain of `partition` walked from `seq` and `head` over the facts of a chunk
    /// (`index` of the first: `start`): a record whose MAC verifies under the key it names and
    /// that extends the chain (partition, seq, prev_mac: the head, or at seq 0 the genesis under
    /// that key) is adopted. Returns the events (see `WalkEvent`) and the chain after the last
    /// record; a record left to Python is walked past as if it was not adopted.
    pub fn audit_walk<'a>(
        &self,
        facts: Vec<Option<AuditFact<'a>>>,
        start: usize,
        partition: i64,
        seq: i64,
        head: String,
    ) -> (Vec<WalkEvent<'a>>, i64, String) {
        let mut events = Vec::new();
        let (mut seq, mut head) = (seq, head);
        for (k, found) in facts.into_iter().enumerate() {
            let index = k + start;
            let adopted = found.filter(|f| {
                let genesis;
                let expected = if seq != 0 {
                    head.as_str()
                } else {
                    let keyed = match f.v2_key_id {
                        Some(key_id) => match self.audit_keys.iter().find(|(id, _)| id == key_id) {
                            Some((_, keyed)) => keyed,
                            None => return false,
                        },
                        None => &self.audit_key,
                    };
                    genesis = keyed.audit_genesis(partition);
                    genesis.as_str()
                };
                // `macs_equal(prev_mac, expected)` also holds for some unequal non-ASCII strings:
                // those are left to the Python functions.
                f.entry.partition == partition && f.entry.seq == seq && f.entry.prev_mac == expected
            });
            let Some(f) = adopted else {
                events.push(WalkEvent::Undecided {
                    index,
                    seq,
                    head: head.clone(),
                });
                continue;
            };
            seq += 1;
            head.clear();
            head.push_str(f.mac);
            if self.mirror_events.iter().any(|e| e == f.entry.event) {
                events.push(WalkEvent::Mirror {
                    index,
                    run_id: f.entry.run_id,
                    journal_seq: f.entry.journal_seq,
                    record_hash: f.entry.record_hash,
                    seq,
                    head: head.clone(),
                });
            }
        }
        (events, seq, head)
    }
}
