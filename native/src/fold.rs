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

use crate::avro::{Malformed, ReadResult, Reader};
use crate::hashing::{
    checkpoint_hash, checkpoint_signing_input, journal_entry_hash, seal_signing_input,
    sha256_digest, AuditMac,
};

use crate::schemas::{
    FP_AUDIT_ENTRY, FP_AUDIT_ENTRY_V2, FP_AUDIT_RECORD, FP_AUDIT_RECORD_V2, FP_CHECKPOINT_RECORD,
    FP_COMPUTER_USE_ENTRY, FP_COMPUTER_USE_ENTRY_V2, FP_JOURNAL_ENTRY, FP_JOURNAL_ENTRY_V2,
    FP_JOURNAL_ENTRY_V3, FP_JOURNAL_RECORD, FP_PARTITION_CHECKPOINT, FP_RUN_SEAL, FP_RUN_SEAL_V2,
    FP_SEAL_RECORD, HEADER_SIZE, MAGIC,
};
const ENTRY_COMPUTER_USE_ACTION: &str = "computer_use.action";

/// The layouts read here, by `.avsc` stem and fingerprint (`FoldReader::new`
/// refuses a codec whose fingerprint for one of these names differs).
pub const FOLD_SCHEMAS: [(&str, [u8; 8]); 15] = [
    ("JournalRecord.v1", FP_JOURNAL_RECORD),
    ("SealRecord.v1", FP_SEAL_RECORD),
    ("JournalEntry.v1", FP_JOURNAL_ENTRY),
    ("JournalEntry.v2", FP_JOURNAL_ENTRY_V2),
    ("JournalEntry.v3", FP_JOURNAL_ENTRY_V3),
    ("ComputerUseEntry.v1", FP_COMPUTER_USE_ENTRY),
    ("ComputerUseEntry.v2", FP_COMPUTER_USE_ENTRY_V2),
    ("RunSeal.v1", FP_RUN_SEAL),
    ("RunSeal.v2", FP_RUN_SEAL_V2),
    ("AuditRecord.v1", FP_AUDIT_RECORD),
    ("AuditRecord.v2", FP_AUDIT_RECORD_V2),
    ("AuditEntry.v1", FP_AUDIT_ENTRY),
    ("AuditEntry.v2", FP_AUDIT_ENTRY_V2),
    ("CheckpointRecord.v1", FP_CHECKPOINT_RECORD),
    ("PartitionCheckpoint.v1", FP_PARTITION_CHECKPOINT),
];

/// The kinds of journal facts (the first item of each tuple; `rebuild.py` names them).
const J_ENTRY: i64 = 0;
const J_ACTION: i64 = 1;
const J_ODD_ENTRY: i64 = 2;
const J_SEAL: i64 = 3;

/// A layout of `FOLD_SCHEMAS`, by its index there.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layout {
    JournalRecord,
    SealRecord,
    JournalEntryV1,
    JournalEntryV2,
    JournalEntryV3,
    ComputerUseEntryV1,
    ComputerUseEntryV2,
    RunSealV1,
    RunSealV2,
    AuditRecordV1,
    AuditRecordV2,
    AuditEntryV1,
    AuditEntryV2,
    CheckpointRecord,
    PartitionCheckpoint,
}

const LAYOUTS: [Layout; 15] = [
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

impl Layout {
    fn name(self) -> &'static str {
        FOLD_SCHEMAS[LAYOUTS
            .iter()
            .position(|l| *l == self)
            .expect("every layout is listed")]
        .0
    }
}

/// The layout a single-object value names and a reader over its body (None: not one of ours).
#[inline]
fn open(value: &[u8]) -> Option<(Layout, Reader<'_>)> {
    if value.len() < HEADER_SIZE || value[..2] != MAGIC {
        return None;
    }
    let fp = &value[2..HEADER_SIZE];
    let index = FOLD_SCHEMAS.iter().position(|(_, known)| known == fp)?;
    Some((LAYOUTS[index], Reader::new(&value[HEADER_SIZE..])))
}

/// fastavro reads any non-zero byte as true; only the two bytes our encoders write are accepted
/// here. A boolean is one raw byte: read as a varint, 0x00 is 0 and 0x01 is -1, and anything
/// longer than one byte is refused.
#[inline]
fn boolean(r: &mut Reader<'_>) -> ReadResult<bool> {
    let at = r.position();
    let value = r.long()?;
    if r.position() != at + 1 {
        return Err(Malformed);
    }
    match value {
        0 => Ok(false),
        -1 => Ok(true),
        _ => Err(Malformed),
    }
}

/// An Avro union `["null", T]`: whether the value is the T branch.
#[inline]
fn union_index(r: &mut Reader<'_>) -> ReadResult<bool> {
    match r.long()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Malformed),
    }
}

/// `Position {topic: string, partition: int, offset: long}` (fastavro reads an int as a long).
#[inline]
fn position(r: &mut Reader<'_>) -> ReadResult<()> {
    r.string()?;
    r.long()?;
    r.long()?;
    Ok(())
}

/// A whole single-object value read by `read`, which returns None for a layout it does not take:
/// None too when the body is malformed or does not end exactly where `read` stopped (our codec
/// refuses trailing bytes), and the Python codec then decides.
#[inline]
fn decode<'a, T>(
    value: &'a [u8],
    read: impl FnOnce(&mut Reader<'a>, Layout) -> Option<ReadResult<T>>,
) -> Option<T> {
    let (layout, mut r) = open(value)?;
    let decoded = read(&mut r, layout)?.ok()?;
    (r.position() == value.len() - HEADER_SIZE).then_some(decoded)
}

// ---------------------------------------------------------------------------
// journal entries
// ---------------------------------------------------------------------------

enum Body<'a> {
    /// JournalEntry.v1/v2/v3 (`charges` for v2 and v3, which declare sizes, when it has observations).
    Activity {
        stage_id: &'a str,
        kind: &'a str,
        evidence_set_hash: &'a str,
        observed: bool,
        charges: Option<Vec<(&'a str, i64)>>,
    },
    /// ComputerUseEntry.v1/v2 (`charges` for v2: its screenshot and DOM snapshot).
    Action {
        session_id: &'a str,
        action_index: i64,
        anchor: &'a str,
        charges: Option<[(&'a str, i64); 2]>,
    },
}

struct Entry<'a> {
    layout: Layout,
    run_id: &'a str,
    seq: i64,
    prev_hash: &'a str,
    entry_type: &'a str,
    submission_id: &'a str,
    /// The producer.id the entry names: the run's opener when it is the run's first entry.
    producer_id: &'a str,
    body: Body<'a>,
}

/// A journal entry payload, decoded in full (None: the Python codec decides).
fn decode_entry(payload: &[u8]) -> Option<Entry<'_>> {
    decode(payload, |r, layout| match layout {
        Layout::JournalEntryV1 | Layout::JournalEntryV2 | Layout::JournalEntryV3 => {
            Some(decode_activity(r, layout))
        }
        Layout::ComputerUseEntryV1 | Layout::ComputerUseEntryV2 => Some(decode_action(r, layout)),
        _ => None,
    })
}

fn decode_activity<'a>(r: &mut Reader<'a>, layout: Layout) -> ReadResult<Entry<'a>> {
    let sized = layout != Layout::JournalEntryV1;
    let run_id = r.string()?;
    let seq = r.long()?;
    let prev_hash = r.string()?;
    let entry_type = r.string()?;
    let stage_id = r.string()?;
    r.string()?; // role
    let kind = r.string()?;
    let producer_id = r.string()?;
    let submission_id = r.string()?;
    r.string()?; // artifact_hash
    let evidence_set_hash = r.string()?;
    let mut observed = false;
    let mut charges = Vec::new();
    loop {
        let count = r.block_count()?;
        if count == 0 {
            break;
        }
        observed = true;
        for _ in 0..count {
            r.string()?; // kind
            r.string()?; // ref
            let content_hash = r.string()?;
            if sized {
                charges.push((content_hash, r.long()?));
            }
        }
    }
    r.string()?; // terminal_state
    r.string()?; // reason_code
    position(r)?;
    r.long()?; // occurred_at_ms
    if layout == Layout::JournalEntryV3 {
        r.string()?; // producer_key_id
        r.bytes()?; // producer_signature
    }
    Ok(Entry {
        layout,
        run_id,
        seq,
        prev_hash,
        entry_type,
        submission_id,
        producer_id,
        body: Body::Activity {
            stage_id,
            kind,
            evidence_set_hash,
            observed,
            charges: (sized && observed).then_some(charges),
        },
    })
}

fn decode_action<'a>(r: &mut Reader<'a>, layout: Layout) -> ReadResult<Entry<'a>> {
    let sized = layout == Layout::ComputerUseEntryV2;
    let run_id = r.string()?;
    let seq = r.long()?;
    let prev_hash = r.string()?;
    let entry_type = r.string()?;
    let session_id = r.string()?;
    let action_index = r.long()?;
    let producer_id = r.string()?;
    let submission_id = r.string()?;
    r.string()?; // prev_anchor
    let anchor = r.string()?;
    let screenshot_hash = r.string()?;
    let screenshot_size = if sized { r.long()? } else { 0 };
    let dom_digest = r.string()?;
    let dom_size = if sized { r.long()? } else { 0 };
    r.string()?; // observation_hash
    r.string()?; // action.kind
    r.string()?; // action.target
    r.string()?; // action.value_digest
    r.string()?; // lineage_entry_hash
    r.string()?; // lineage_key_id
    r.bytes()?; // lineage_signature
    r.string()?; // lineage_hmac
    r.bytes()?; // lineage_entry
    position(r)?;
    r.long()?; // occurred_at_ms
    Ok(Entry {
        layout,
        run_id,
        seq,
        prev_hash,
        entry_type,
        submission_id,
        producer_id,
        body: Body::Action {
            session_id,
            action_index,
            anchor,
            charges: sized.then_some([(screenshot_hash, screenshot_size), (dom_digest, dom_size)]),
        },
    })
}

// ---------------------------------------------------------------------------
// seals, audit entries, checkpoints
// ---------------------------------------------------------------------------

struct Seal<'a> {
    run_id: &'a str,
    entry_count: i64,
    last: bool,
}

/// A RunSeal.v1/v2 payload, decoded in full.
fn decode_seal(payload: &[u8]) -> Option<Seal<'_>> {
    decode(payload, |r, layout| match layout {
        Layout::RunSealV1 | Layout::RunSealV2 => Some(read_seal(r, layout == Layout::RunSealV2)),
        _ => None,
    })
}

fn read_seal<'a>(r: &mut Reader<'a>, v2: bool) -> ReadResult<Seal<'a>> {
    let run_id = r.string()?;
    r.long()?; // partition
    let entry_count = r.long()?;
    r.string()?; // head_hash
    r.long()?; // last_input_offset
    let last = boolean(r)?;
    r.long()?; // audit_seq
    r.string()?; // audit_head
    r.long()?; // sealed_at_ms
    if v2 && union_index(r)? {
        r.string()?; // closed_by.submission_id
        r.string()?; // closed_by.producer_id
        r.long()?; // closed_by.occurred_at_ms
        r.string()?; // closed_by.key_id
        r.bytes()?; // closed_by.signature
    }
    Ok(Seal {
        run_id,
        entry_count,
        last,
    })
}

/// The three fields of a SealRecord or CheckpointRecord envelope, or of an AuditRecord
/// (`(payload, key_id, mac)`, whichever order its version stores them in).
struct Envelope<'a> {
    layout: Layout,
    payload: &'a [u8],
    key_id: &'a str,
    /// A seal's or checkpoint's signature; an audit record's MAC.
    proof: &'a [u8],
    /// A journal record's stored entry_hash.
    stored: &'a str,
}

/// A JournalRecord, SealRecord, AuditRecord (v1, v2) or CheckpointRecord value, in full.
fn decode_envelope(value: &[u8]) -> Option<Envelope<'_>> {
    decode(value, |r, layout| Some(read_envelope(r, layout)))
}

fn read_envelope<'a>(r: &mut Reader<'a>, layout: Layout) -> ReadResult<Envelope<'a>> {
    let (payload, key_id, proof, stored) = match layout {
        Layout::JournalRecord => {
            let payload = r.bytes()?;
            (payload, "", &b""[..], r.string()?)
        }
        Layout::SealRecord | Layout::CheckpointRecord => {
            let payload = r.bytes()?;
            let key_id = r.string()?;
            (payload, key_id, r.bytes()?, "")
        }
        Layout::AuditRecordV1 => {
            let payload = r.bytes()?;
            let key_id = r.string()?;
            (payload, key_id, r.string()?.as_bytes(), "")
        }
        Layout::AuditRecordV2 => {
            let key_id = r.string()?;
            let payload = r.bytes()?;
            (payload, key_id, r.string()?.as_bytes(), "")
        }
        _ => return Err(Malformed),
    };
    Ok(Envelope {
        layout,
        payload,
        key_id,
        proof,
        stored,
    })
}

struct AuditEntry<'a> {
    partition: i64,
    seq: i64,
    prev_mac: &'a str,
    event: &'a str,
    run_id: &'a str,
    record_hash: &'a str,
    journal_seq: i64,
}

/// An AuditEntry.v1/v2 payload, decoded in full.
fn decode_audit_entry(payload: &[u8]) -> Option<AuditEntry<'_>> {
    decode(payload, |r, layout| match layout {
        Layout::AuditEntryV1 | Layout::AuditEntryV2 => {
            Some(read_audit_entry(r, layout == Layout::AuditEntryV2))
        }
        _ => None,
    })
}

fn read_audit_entry<'a>(r: &mut Reader<'a>, v2: bool) -> ReadResult<AuditEntry<'a>> {
    let partition = r.long()?;
    let seq = r.long()?;
    let prev_mac = r.string()?;
    let event = r.string()?;
    let run_id = r.string()?;
    for _ in 0..6 {
        // stage_id, kind, terminal_state, reason_code, artifact_hash, evidence_set_hash
        r.string()?;
    }
    let record_hash = r.string()?;
    let journal_seq = r.long()?;
    position(r)?;
    if v2 && union_index(r)? {
        r.string()?; // session_id
        r.long()?; // action_index
        for _ in 0..9 {
            // anchor, prev_anchor, screenshot_hash, dom_digest, observation_hash, action_kind,
            // action_digest, lineage_entry_hash, worker_id
            r.string()?;
        }
    }
    Ok(AuditEntry {
        partition,
        seq,
        prev_mac,
        event,
        run_id,
        record_hash,
        journal_seq,
    })
}

struct Checkpoint<'a> {
    partition: i64,
    seq: i64,
    prev_hash: &'a str,
    audit_seq: i64,
    audit_head: &'a str,
}

/// A PartitionCheckpoint.v1 payload, decoded in full.
fn decode_checkpoint(payload: &[u8]) -> Option<Checkpoint<'_>> {
    decode(payload, |r, layout| {
        (layout == Layout::PartitionCheckpoint).then(|| read_checkpoint(r))
    })
}

fn read_checkpoint<'a>(r: &mut Reader<'a>) -> ReadResult<Checkpoint<'a>> {
    let partition = r.long()?;
    let seq = r.long()?;
    let prev_hash = r.string()?;
    r.string()?; // input_topic
    r.long()?; // next_offset
    let audit_seq = r.long()?;
    let audit_head = r.string()?;
    r.string()?; // reason
    r.long()?; // checkpoint_every
    r.long()?; // checkpointed_at_ms
    Ok(Checkpoint {
        partition,
        seq,
        prev_hash,
        audit_seq,
        audit_head,
    })
}

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
    entry: AuditEntry<'a>,
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
        let envelope = decode_envelope(value)?;
        match envelope.layout {
            Layout::JournalRecord => {
                let entry = decode_entry(envelope.payload)?;
                let record_hash = journal_entry_hash(envelope.payload);
                let stored_ok = record_hash == envelope.stored;
                Some(JournalFacts::Entry {
                    entry,
                    record_hash,
                    stored_ok,
                })
            }
            Layout::SealRecord => {
                let seal = decode_seal(envelope.payload)?;
                let key = self.seal_key(envelope.key_id)?;
                // Ed25519 is deterministic (RFC 8032): our key signs these bytes to exactly one signature.
                let signed = key.sign(&seal_signing_input(envelope.payload)).to_bytes()[..]
                    == *envelope.proof;
                Some(JournalFacts::Seal {
                    seal,
                    identity: sha256_digest(value),
                    key_id: envelope.key_id,
                    signed,
                })
            }
            _ => None,
        }
    }

    fn audit_facts<'a>(&self, value: &'a [u8]) -> Option<AuditFacts<'a>> {
        let envelope = decode_envelope(value)?;
        let v2 = match envelope.layout {
            Layout::AuditRecordV1 => false,
            Layout::AuditRecordV2 => true,
            _ => return None,
        };
        let entry = decode_audit_entry(envelope.payload)?;
        let recomputed = if v2 {
            let (_, keyed) = self.audit_keys.iter().find(|(k, _)| k == envelope.key_id)?;
            keyed.audit_record_mac(envelope.key_id, envelope.payload)
        } else {
            self.audit_key.audit_mac(envelope.payload)
        };
        // `macs_equal(recomputed, mac)`: the recomputed MAC is ASCII without '?', so only the
        // identical string compares equal (the Python function words any other outcome).
        if recomputed.as_bytes() != envelope.proof {
            return None;
        }
        Some(AuditFacts {
            entry,
            mac: std::str::from_utf8(envelope.proof).ok()?,
            v2_key_id: v2.then_some(envelope.key_id),
        })
    }

    fn checkpoint_facts<'a>(&self, value: &'a [u8]) -> Option<CheckpointFacts<'a>> {
        let envelope = decode_envelope(value)?;
        if envelope.layout != Layout::CheckpointRecord {
            return None;
        }
        let checkpoint = decode_checkpoint(envelope.payload)?;
        let key = self.seal_key(envelope.key_id)?;
        let signed = key
            .sign(&checkpoint_signing_input(envelope.payload))
            .to_bytes()[..]
            == *envelope.proof;
        Some(CheckpointFacts {
            checkpoint,
            hash: checkpoint_hash(envelope.payload),
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
                s(py, entry.run_id),
                int(py, entry.seq),
                s(py, &record_hash),
                s(py, entry.prev_hash),
                flag(py, stored_ok),
            ];
            let action_layout = matches!(
                entry.layout,
                Layout::ComputerUseEntryV1 | Layout::ComputerUseEntryV2
            );
            if action_layout != (entry.entry_type == ENTRY_COMPUTER_USE_ACTION) {
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
                        s(py, entry.entry_type),
                    ],
                );
            }
            match entry.body {
                Body::Activity {
                    stage_id,
                    kind,
                    evidence_set_hash,
                    observed,
                    charges: sized,
                } => tuple(
                    py,
                    [
                        int(py, J_ENTRY),
                        run_id,
                        seq,
                        hash,
                        prev_hash,
                        stored_ok,
                        s(py, entry.submission_id),
                        s(py, stage_id),
                        s(py, evidence_set_hash),
                        flag(py, observed),
                        match sized {
                            Some(items) => charges(py, &items)?,
                            None => py.None().into_bound(py),
                        },
                        flag(py, kind == "browser"),
                        s(py, entry.producer_id),
                    ],
                ),
                Body::Action {
                    session_id,
                    action_index,
                    anchor,
                    charges: sized,
                } => tuple(
                    py,
                    [
                        int(py, J_ACTION),
                        run_id,
                        seq,
                        hash,
                        prev_hash,
                        stored_ok,
                        s(py, entry.submission_id),
                        s(py, session_id),
                        int(py, action_index),
                        s(py, anchor),
                        match sized {
                            Some(items) => charges(py, &items)?,
                            None => py.None().into_bound(py),
                        },
                        s(py, entry.producer_id),
                    ],
                ),
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
        for (name, fp) in FOLD_SCHEMAS {
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
    for (name, fp) in FOLD_SCHEMAS {
        schemas.append((name, PyBytes::new(py, &fp)))?;
    }
    m.add("FOLD_SCHEMAS", schemas)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_is_named_once() {
        for (index, layout) in LAYOUTS.iter().enumerate() {
            assert_eq!(layout.name(), FOLD_SCHEMAS[index].0);
        }
        let mut fingerprints: Vec<[u8; 8]> = FOLD_SCHEMAS.iter().map(|(_, fp)| *fp).collect();
        fingerprints.sort_unstable();
        fingerprints.dedup();
        assert_eq!(fingerprints.len(), FOLD_SCHEMAS.len());
    }

    #[test]
    fn booleans_are_one_byte_0_or_1() {
        let read = |data: &[u8]| {
            let mut r = Reader::new(data);
            boolean(&mut r).map(|b| (b, r.position()))
        };
        assert_eq!(read(&[0]), Ok((false, 1)));
        assert_eq!(read(&[1]), Ok((true, 1)));
        assert_eq!(read(&[2]), Err(Malformed)); // fastavro: true
        assert_eq!(read(&[0x80, 0]), Err(Malformed)); // fastavro: true, then a misaligned body
        assert_eq!(read(&[]), Err(Malformed));
    }

    #[test]
    fn unions_take_branch_0_or_1() {
        for (data, expected) in [
            (&[0u8][..], Ok(false)),
            (&[2], Ok(true)),
            (&[4], Err(Malformed)),
            (&[1], Err(Malformed)),
        ] {
            assert_eq!(union_index(&mut Reader::new(data)), expected);
        }
    }

    #[test]
    fn a_value_is_one_of_ours_only_with_the_magic_and_a_known_fingerprint() {
        let (name, fp) = FOLD_SCHEMAS[13];
        assert_eq!(name, "CheckpointRecord.v1");
        let mut value = vec![0xC3, 0x01];
        value.extend_from_slice(&fp);
        assert_eq!(
            open(&value).map(|(layout, _)| layout),
            Some(Layout::CheckpointRecord)
        );
        value[0] = 0xC4;
        assert!(open(&value).is_none());
        assert!(open(&[0xC3, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]).is_none());
        assert!(open(&[0xC3, 0x01]).is_none());
        // trailing bytes: the envelope reads, the value does not end there
        let mut envelope = value.clone();
        envelope[0] = 0xC3;
        envelope.extend_from_slice(&[0, 0, 0]); // empty payload, key id and signature
        assert!(decode_envelope(&envelope).is_some());
        envelope.push(0);
        assert!(decode_envelope(&envelope).is_none());
    }
}
