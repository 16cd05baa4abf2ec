//! Facts for the scheduler's restart fold (`consumers/core/rebuild.py`): the
//! per-record byte work of `rebuild_state`, in batches.
//!
//! The fold decides nothing here. `FoldReader` turns the raw values of the
//! journal, audit and checkpoints partitions into exactly the tuples that
//! `rebuild.py`'s Python fact functions (`_journal_fact`, `_audit_fact`,
//! `_checkpoint_fact`) return for them: the records fully decoded, the entry
//! hash recomputed and compared with the stored one, the seal's and the
//! checkpoint's Ed25519 signatures re-made with the scheduler's seed and
//! compared, the audit MAC recomputed under the key its record names. The
//! Python fold applies the tuples to the `SchedulerState` (the chain links,
//! the mirror matching, the run maps), so both paths share every decision.
//! `audit_walk` goes one step further for the audit partition, whose records
//! only extend a chain: it walks the chain itself (the same checks as
//! `_AuditWalk._extend`) and hands out only the records that mirror a journal
//! record and those it leaves to the Python functions.
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
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyString, PyTuple};

use crate::hashing::{
    checkpoint_hash, checkpoint_signing_input, journal_entry_hash, seal_signing_input,
    sha256_digest, AuditMac,
};
use crate::records::audit::{decode_audit_entry, AuditHead};
use crate::records::envelope::{decode_envelope, Envelope};
use crate::records::journal::{decode_entry, Activity, Body, Entry};
use crate::records::seal::{decode_checkpoint, decode_seal, Checkpoint, Seal};
use crate::records::{schema_list, Layout};

const ENTRY_COMPUTER_USE_ACTION: &str = "computer_use.action";

/// The layouts read here (`FoldReader::new` refuses a codec whose fingerprint for one of these
/// names differs; exported as `FOLD_SCHEMAS`).
pub const FOLD_LAYOUTS: [Layout; 15] = [
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
];

/// The kinds of journal facts (the first item of each tuple; `rebuild.py` names them).
const J_ENTRY: i64 = 0;
const J_ACTION: i64 = 1;
const J_ODD_ENTRY: i64 = 2;
const J_SEAL: i64 = 3;

// ---------------------------------------------------------------------------
// the Python class
// ---------------------------------------------------------------------------

#[inline]
fn int(py: Python<'_>, v: i64) -> Bound<'_, PyAny> {
    v.into_pyobject(py).expect("infallible").into_any()
}

#[inline]
fn s<'py>(py: Python<'py>, v: &str) -> Bound<'py, PyAny> {
    PyString::new(py, v).into_any()
}

#[inline]
fn flag(py: Python<'_>, v: bool) -> Bound<'_, PyAny> {
    PyBool::new(py, v).to_owned().into_any()
}

/// A tuple of atomic objects (str, int, bool, None, or such tuples), untracked by the cycle
/// collector (a fold allocates a few per record; tracked, they would trigger its collections).
fn tuple<'py, const N: usize>(
    py: Python<'py>,
    items: [Bound<'py, PyAny>; N],
) -> PyResult<Bound<'py, PyAny>> {
    let t = PyTuple::new(py, items)?;
    crate::untrack(&t);
    Ok(t.into_any())
}

/// `((digest, size), ...)`
fn charges<'py>(py: Python<'py>, items: &[(&str, i64)]) -> PyResult<Bound<'py, PyAny>> {
    let mut pairs = Vec::with_capacity(items.len());
    for (digest, size) in items {
        pairs.push(tuple(py, [s(py, digest), int(py, *size)])?);
    }
    let t = PyTuple::new(py, pairs)?;
    crate::untrack(&t);
    Ok(t.into_any())
}

/// Exactly `bytes` (a subclass or anything else goes to the Python fact function).
#[inline]
fn value_bytes<'a>(item: &'a Bound<'_, PyAny>) -> Option<&'a [u8]> {
    if item.is_exact_instance_of::<PyBytes>() {
        item.cast::<PyBytes>().ok().map(|v| v.as_bytes())
    } else {
        None
    }
}

/// The fold's facts of batches of records, under the scheduler's keys (see the module doc).
#[pyclass(module = "bernstein_native", frozen)]
pub struct FoldReader {
    /// The audit key ring by key id, in the order of `SchedulerConfig.audit_secret` (first match wins).
    audit_keys: Vec<(String, AuditMac)>,
    /// `SchedulerConfig.audit_key`: MACs AuditRecord.v1.
    audit_key: AuditMac,
    /// The seal keys by key id whose seeds the caller has (first match wins, as `_seal_signer`).
    seal_keys: Vec<(String, SigningKey)>,
    /// The audit events whose record mirrors one journal record (`rebuild._MIRRORS_JOURNAL`).
    mirror_events: Vec<String>,
}

/// What the fold needs of one journal record, computed without the GIL.
#[allow(clippy::large_enum_variant)] // nearly every journal record is an entry: boxing would only add allocations
enum JournalFacts<'a> {
    Entry {
        entry: Entry<'a>,
        record_hash: String,
        stored_ok: bool,
    },
    Seal {
        seal: Seal<'a>,
        identity: String,
        key_id: &'a str,
        signed: bool,
    },
}

/// An audit record whose MAC verifies (`v2_key_id`: None for an AuditRecord.v1).
struct AuditFacts<'a> {
    entry: AuditHead<'a, i64>,
    mac: &'a str,
    v2_key_id: Option<&'a str>,
}

struct CheckpointFacts<'a> {
    checkpoint: Checkpoint<'a>,
    hash: String,
    signed: bool,
}

impl FoldReader {
    fn seal_key(&self, key_id: &str) -> Option<&SigningKey> {
        self.seal_keys
            .iter()
            .find(|(k, _)| k == key_id)
            .map(|(_, key)| key)
    }

    fn journal_facts<'a>(&self, value: &'a [u8]) -> Option<JournalFacts<'a>> {
        match decode_envelope(value)? {
            Envelope::Journal { payload, stored } => {
                let entry = decode_entry(payload)?;
                let record_hash = journal_entry_hash(payload);
                let stored_ok = record_hash == stored;
                Some(JournalFacts::Entry {
                    entry,
                    record_hash,
                    stored_ok,
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
                Some(JournalFacts::Seal {
                    seal,
                    identity: sha256_digest(value),
                    key_id,
                    signed,
                })
            }
            _ => None,
        }
    }

    fn audit_facts<'a>(&self, value: &'a [u8]) -> Option<AuditFacts<'a>> {
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
        Some(AuditFacts {
            entry,
            mac,
            v2_key_id: v2.then_some(key_id),
        })
    }

    fn checkpoint_facts<'a>(&self, value: &'a [u8]) -> Option<CheckpointFacts<'a>> {
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
        Some(CheckpointFacts {
            checkpoint,
            hash: checkpoint_hash(payload),
            signed,
        })
    }

    /// `compute` over the values (None for an item that is not bytes) on every core without
    /// the GIL, then `convert` each result to its Python tuple (None stays None), in order.
    fn facts<'py, 'v, F: Send>(
        &self,
        py: Python<'py>,
        values: &[Option<&'v [u8]>],
        compute: impl Fn(&Self, &'v [u8]) -> Option<F> + Sync,
        convert: impl Fn(Python<'py>, F) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let computed = py.detach(|| {
            crate::parallel::filter_map(values, crate::parallel::cores(), |value| {
                Some(value.and_then(|v| compute(self, v)))
            })
        });
        let out = PyList::empty(py);
        for found in computed {
            match found {
                Some(facts) => out.append(convert(py, facts)?)?,
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }
}

fn journal_object<'py>(py: Python<'py>, facts: JournalFacts<'_>) -> PyResult<Bound<'py, PyAny>> {
    match facts {
        JournalFacts::Seal {
            seal,
            identity,
            key_id,
            signed,
        } => tuple(
            py,
            [
                int(py, J_SEAL),
                s(py, seal.run_id),
                int(py, seal.entry_count),
                s(py, &identity),
                s(py, key_id),
                flag(py, signed),
                flag(py, seal.last),
            ],
        ),
        JournalFacts::Entry {
            entry,
            record_hash,
            stored_ok,
        } => {
            let [run_id, seq, hash, prev_hash, stored_ok] = [
                s(py, entry.head.run_id),
                int(py, entry.head.seq),
                s(py, &record_hash),
                s(py, entry.head.prev_hash),
                flag(py, stored_ok),
            ];
            if entry.layout.is_action_entry()
                != (entry.head.entry_type == ENTRY_COMPUTER_USE_ACTION)
            {
                return tuple(
                    py,
                    [
                        int(py, J_ODD_ENTRY),
                        run_id,
                        seq,
                        hash,
                        prev_hash,
                        stored_ok,
                        s(py, entry.layout.name()),
                        s(py, entry.head.entry_type),
                    ],
                );
            }
            match entry.body {
                Body::Activity(activity) => {
                    let observed = !activity.observations.is_empty();
                    let sized: Option<Vec<(&str, i64)>> =
                        (Activity::sized(entry.layout) && observed).then(|| {
                            activity
                                .observations
                                .iter()
                                .map(|o| (o.content_hash, o.size))
                                .collect()
                        });
                    tuple(
                        py,
                        [
                            int(py, J_ENTRY),
                            run_id,
                            seq,
                            hash,
                            prev_hash,
                            stored_ok,
                            s(py, entry.submission_id),
                            s(py, activity.stage_id),
                            s(py, activity.evidence_set_hash),
                            flag(py, observed),
                            match sized {
                                Some(items) => charges(py, &items)?,
                                None => py.None().into_bound(py),
                            },
                            flag(py, activity.kind == "browser"),
                            s(py, entry.producer_id),
                        ],
                    )
                }
                Body::Action(action) => {
                    let sized = (entry.layout == Layout::ComputerUseEntryV2)
                        .then_some([action.screenshot, action.dom]);
                    tuple(
                        py,
                        [
                            int(py, J_ACTION),
                            run_id,
                            seq,
                            hash,
                            prev_hash,
                            stored_ok,
                            s(py, entry.submission_id),
                            s(py, action.session_id),
                            int(py, action.action_index),
                            s(py, action.anchor),
                            match sized {
                                Some(items) => charges(py, &items)?,
                                None => py.None().into_bound(py),
                            },
                            s(py, entry.producer_id),
                        ],
                    )
                }
            }
        }
    }
}

fn audit_object<'py>(py: Python<'py>, facts: AuditFacts<'_>) -> PyResult<Bound<'py, PyAny>> {
    let entry = facts.entry;
    tuple(
        py,
        [
            int(py, entry.partition),
            int(py, entry.seq),
            s(py, entry.prev_mac),
            s(py, facts.mac),
            match facts.v2_key_id {
                Some(key_id) => s(py, key_id),
                None => py.None().into_bound(py),
            },
            s(py, entry.event),
            s(py, entry.run_id),
            int(py, entry.journal_seq),
            s(py, entry.record_hash),
        ],
    )
}

fn checkpoint_object<'py>(
    py: Python<'py>,
    facts: CheckpointFacts<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    let checkpoint = facts.checkpoint;
    tuple(
        py,
        [
            int(py, checkpoint.partition),
            int(py, checkpoint.seq),
            s(py, checkpoint.prev_hash),
            int(py, checkpoint.audit_seq),
            s(py, checkpoint.audit_head),
            s(py, &facts.hash),
            flag(py, facts.signed),
        ],
    )
}

#[pymethods]
impl FoldReader {
    /// `known_schemas`: every (fingerprint, name) of the codec (each layout of `FOLD_SCHEMAS`
    /// must be among them unchanged); `audit_keys`: the audit key ring as (key_id, secret), in
    /// `SchedulerConfig.audit_secret`'s order; `audit_key`: the key of AuditRecord.v1;
    /// `seal_keys`: (key_id, Ed25519 seed) of the seal keys, in `_seal_signer`'s order;
    /// `mirror_events`: the audit events that mirror a journal record.
    #[new]
    fn new(
        known_schemas: Vec<(Vec<u8>, String)>,
        audit_keys: Vec<(String, Vec<u8>)>,
        audit_key: Vec<u8>,
        seal_keys: Vec<(String, Vec<u8>)>,
        mirror_events: Vec<String>,
    ) -> PyResult<Self> {
        for (name, fp) in schema_list(&FOLD_LAYOUTS) {
            if !known_schemas
                .iter()
                .any(|(known_fp, known)| known == name && known_fp[..] == fp)
            {
                return Err(PyValueError::new_err(format!(
                    "schema {name} changed (the fold reader follows the old one)"
                )));
            }
        }
        let mut seeded = Vec::with_capacity(seal_keys.len());
        for (key_id, seed) in seal_keys {
            let seed: [u8; 32] = seed
                .as_slice()
                .try_into()
                .map_err(|_| PyValueError::new_err("an Ed25519 seed has 32 bytes"))?;
            seeded.push((key_id, SigningKey::from_bytes(&seed)));
        }
        Ok(FoldReader {
            audit_keys: audit_keys
                .into_iter()
                .map(|(key_id, secret)| (key_id, AuditMac::new(&secret)))
                .collect(),
            audit_key: AuditMac::new(&audit_key),
            seal_keys: seeded,
            mirror_events,
        })
    }

    /// Journal record values -> one fact or None each (see `rebuild.py`, `_journal_fact`).
    fn journal<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<Bound<'py, PyAny>> = values.iter().collect();
        let slices: Vec<Option<&[u8]>> = items.iter().map(value_bytes).collect();
        self.facts(py, &slices, Self::journal_facts, journal_object)
    }

    /// Audit record values -> one fact or None each (see `rebuild.py`, `_audit_fact`).
    fn audit<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<Bound<'py, PyAny>> = values.iter().collect();
        let slices: Vec<Option<&[u8]>> = items.iter().map(value_bytes).collect();
        self.facts(py, &slices, Self::audit_facts, audit_object)
    }

    /// The audit chain walked over `values[start..]` from `seq` and `head` (the state's
    /// `audit_seq` and `audit_head`) for partition `partition`: a record whose MAC verifies
    /// under the key it names and that extends the chain (partition, seq, prev_mac: the head,
    /// or at seq 0 the genesis under that key) is adopted. Returns `(events, seq, head)`, the
    /// chain after the last record, with one event for each adopted record that mirrors a
    /// journal record, `(k, True, run_id, journal_seq, record_hash, seq, head)` (the chain after
    /// it), and one for each record this walk does not decide, `(k, False, seq, head)` (the
    /// chain before it): the Python functions decide it, and the walk went on as if it was not
    /// adopted (when it is, the caller walks the rest again). `k` indexes `values`.
    fn audit_walk<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
        start: usize,
        partition: i64,
        seq: i64,
        head: String,
    ) -> PyResult<(Bound<'py, PyList>, i64, String)> {
        let items: Vec<Bound<'py, PyAny>> = values.iter().skip(start).collect();
        let slices: Vec<Option<&[u8]>> = items.iter().map(value_bytes).collect();
        let computed = py.detach(|| {
            crate::parallel::filter_map(&slices, crate::parallel::cores(), |value| {
                Some(value.and_then(|v| self.audit_facts(v)))
            })
        });
        let events = PyList::empty(py);
        let (mut seq, mut head) = (seq, head);
        for (k, found) in computed.into_iter().enumerate() {
            let k = k + start;
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
                events.append(tuple(
                    py,
                    [
                        int(py, k as i64),
                        flag(py, false),
                        int(py, seq),
                        s(py, &head),
                    ],
                )?)?;
                continue;
            };
            seq += 1;
            head.clear();
            head.push_str(f.mac);
            if self.mirror_events.iter().any(|e| e == f.entry.event) {
                events.append(tuple(
                    py,
                    [
                        int(py, k as i64),
                        flag(py, true),
                        s(py, f.entry.run_id),
                        int(py, f.entry.journal_seq),
                        s(py, f.entry.record_hash),
                        int(py, seq),
                        s(py, &head),
                    ],
                )?)?;
            }
        }
        Ok((events, seq, head))
    }

    /// Checkpoint record values -> one fact or None each (see `rebuild.py`, `_checkpoint_fact`).
    fn checkpoints<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<Bound<'py, PyAny>> = values.iter().collect();
        let slices: Vec<Option<&[u8]>> = items.iter().map(value_bytes).collect();
        self.facts(py, &slices, Self::checkpoint_facts, checkpoint_object)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<FoldReader>()?;
    let schemas = PyList::empty(py);
    for (name, fp) in schema_list(&FOLD_LAYOUTS) {
        schemas.append((name, PyBytes::new(py, &fp)))?;
    }
    m.add("FOLD_SCHEMAS", schemas)?;
    Ok(())
}
