//! Facts for the offline verifier (`verifier/facts.py`): the per-record byte
//! work of `verifier/verify.py` and `verifier/sources.py`, in batches.
//!
//! Every decision stays in Python. These functions only turn raw records into
//! small named facts (split envelopes, entry and audit heads, recomputed hashes and
//! MACs, decoded stage fields; `dump`: parsed dump lines), exactly what the pure
//! Python functions of `verifier/facts.py` return, including the text of every
//! decode error (the messages of `schemas.codec`'s fast readers are
//! reproduced here byte for byte, `records::CodecReader`). `bindings::verify`
//! lays them out as the tuples Python reads (`facts::journal_entry`, ...).
//!
//! What this module does not reproduce it hands back: each batch call returns
//! `(facts, fallback)`, where `fallback` lists the indices whose fact is `None`
//! and must be computed by the Python function for that one item:
//!
//! * a dump line outside the strict subset this parser accepts (blank lines,
//!   escapes, floats, unknown or duplicate keys, non-canonical base64, ...):
//!   orjson and `binascii` decide, and name the error;
//! * a journal entry whose body the strict Avro reader does not accept in
//!   full (fastavro decides whether it decodes);
//! * a JournalRecord on the audit topic (the Python code raises on it);
//! * an item that is not `bytes` / `None`, or a secret that is not `bytes`.
//!
//! No I/O, no clock, no randomness.

pub mod dump;

use std::collections::BTreeMap;

use crate::facts::verifier_kinds as vk;
use crate::hashing::{evidence_set_hash_of_digests, journal_entry_hash, AuditMac};
use crate::producers::{submission_signing_input, ProducerKey};
use crate::records::audit::{read_audit_head, AuditHead};
use crate::records::envelope::{read_envelope, Envelope};
use crate::records::journal::{decode_entry_as, read_entry_head, Body, EntryHead};
use crate::records::submission::Submission;
use crate::records::{fingerprint_of, trailing_bytes, unknown_fingerprint, CodecReader, Layout};
use crate::schemas::HEADER_SIZE;
use crate::text::is_digest;

const ENTRY_ACTIVITY_RESULT: &str = "activity.result";

/// The layouts read here (the adapter checks them against the codec before using this module;
/// exported as `VERIFIER_SCHEMAS`).
pub const VERIFIER_LAYOUTS: [Layout; 12] = [
    Layout::JournalRecord,
    Layout::SealRecord,
    Layout::AuditRecordV1,
    Layout::AuditRecordV2,
    Layout::CheckpointRecord,
    Layout::JournalEntryV1,
    Layout::ComputerUseEntryV1,
    Layout::JournalEntryV2,
    Layout::JournalEntryV3,
    Layout::ComputerUseEntryV2,
    Layout::AuditEntryV1,
    Layout::AuditEntryV2,
];

pub struct SchemaInfo {
    pub name: String,
    /// None: a schema of the codec this module does not read.
    pub layout: Option<Layout>,
}

/// The codec's schema table: fingerprint -> (name, layout).
pub struct Schemas {
    by_fp: BTreeMap<[u8; 8], SchemaInfo>,
}

impl Schemas {
    pub fn new(known: Vec<(Vec<u8>, String)>) -> Result<Self, String> {
        let mut by_fp = BTreeMap::new();
        for (fp, name) in known {
            let fp: [u8; 8] = fp
                .as_slice()
                .try_into()
                .map_err(|_| format!("fingerprint of {name} is not 8 bytes"))?;
            let layout = Layout::by_name(&name);
            by_fp.insert(fp, SchemaInfo { name, layout });
        }
        Ok(Schemas { by_fp })
    }

    /// `Codec.schema_of`, with its messages.
    pub fn schema_of(&self, data: &[u8]) -> Result<&SchemaInfo, String> {
        let fp = fingerprint_of(data)?;
        self.by_fp.get(&fp).ok_or_else(|| unknown_fingerprint(&fp))
    }
}

/// `schemas.codec.split_envelope`
pub fn split_envelope<'a>(schemas: &Schemas, value: &'a [u8]) -> Result<Envelope<'a>, String> {
    let schema = schemas.schema_of(value)?;
    let mut r = CodecReader::new(value, HEADER_SIZE);
    let Some(read) = schema
        .layout
        .and_then(|layout| read_envelope(&mut r, layout))
    else {
        return Err(format!(
            "value is a {} record, expected a journal, seal or audit envelope",
            schema.name
        ));
    };
    let envelope = read?;
    if r.position() != value.len() {
        return Err(trailing_bytes(&schema.name, value.len() - r.position()));
    }
    Ok(envelope)
}

/// `schemas.codec.read_entry_head`, and the entry's layout.
pub fn entry_head<'a>(
    schemas: &Schemas,
    payload: &'a [u8],
) -> Result<(Layout, EntryHead<'a, i128>), String> {
    let schema = schemas.schema_of(payload)?;
    let Some(layout) = schema.layout.filter(|l| l.is_journal_entry()) else {
        return Err(format!(
            "payload is a {} record, expected a journal entry",
            schema.name
        ));
    };
    let mut r = CodecReader::new(payload, HEADER_SIZE);
    Ok((layout, read_entry_head(&mut r)?))
}

/// `schemas.codec.read_audit_head`
pub fn audit_head<'a>(schemas: &Schemas, payload: &'a [u8]) -> Result<AuditHead<'a, i128>, String> {
    let schema = schemas.schema_of(payload)?;
    if !schema.layout.is_some_and(Layout::is_audit_entry) {
        return Err(format!(
            "payload is a {} record, expected an audit entry",
            schema.name
        ));
    }
    let mut r = CodecReader::new(payload, HEADER_SIZE);
    Ok(read_audit_head(&mut r)?)
}

/// A JournalEntry.v1/v2/v3 payload as fastavro decodes it, when the strict reader accepts all of it.
pub struct FullEntry<'a> {
    pub run_id: &'a str,
    pub seq: i64,
    pub stage_id: &'a str,
    pub kind: &'a str,
    pub terminal_state: &'a str,
    pub artifact_hash: &'a str,
    pub evidence_set_hash: &'a str,
    pub observations: Vec<(&'a str, &'a str, &'a str)>,
    /// The observations' declared sizes (JournalEntry.v2 and v3); None for v1, which declares none.
    pub sizes: Option<Vec<i64>>,
    /// Who the entry says made the stage: its producer, and (JournalEntry.v3) the key id that signed it ("" before).
    pub producer_id: &'a str,
    pub key_id: &'a str,
}

/// The stage pass's view of an activity entry read as `layout` (v1, v2 or v3).
pub fn decode_full_entry(payload: &[u8], layout: Layout) -> Option<FullEntry<'_>> {
    let entry = decode_entry_as(payload, layout)?;
    let Body::Activity(activity) = entry.body else {
        return None;
    };
    let observations: Vec<(&str, &str, &str)> = activity
        .observations
        .iter()
        .map(|o| (o.kind, o.reference, o.content_hash))
        .collect();
    let sizes = if layout == Layout::JournalEntryV1 {
        // none declared (an empty list when there is nothing to declare, as the reference reads it)
        observations.is_empty().then(Vec::new)
    } else {
        Some(activity.observations.iter().map(|o| o.size).collect())
    };
    Some(FullEntry {
        run_id: entry.head.run_id,
        seq: entry.head.seq,
        stage_id: activity.stage_id,
        kind: activity.kind,
        terminal_state: activity.terminal_state,
        artifact_hash: activity.artifact_hash,
        evidence_set_hash: activity.evidence_set_hash,
        observations,
        sizes,
        producer_id: entry.producer_id,
        key_id: activity.producer.map_or("", |(key_id, _)| key_id),
    })
}

/// A JournalEntry.v3 payload as fastavro decodes it (when the strict reader accepts all of it): the
/// submission statement's fields, and the producer's key id and signature.
pub struct SignedEntry<'a> {
    pub seq: i64,
    pub submission: Submission<'a>,
    pub key_id: &'a str,
    pub signature: &'a [u8],
}

pub fn decode_signed_entry(payload: &[u8]) -> Option<SignedEntry<'_>> {
    let entry = decode_entry_as(payload, Layout::JournalEntryV3)?;
    let Body::Activity(activity) = entry.body else {
        return None;
    };
    let (key_id, signature) = activity.producer?;
    Some(SignedEntry {
        seq: entry.head.seq,
        submission: Submission {
            submission_id: entry.submission_id,
            run_id: entry.head.run_id,
            stage_id: activity.stage_id,
            role: activity.role,
            producer_id: entry.producer_id,
            producer_sdk: "",
            kind: activity.kind,
            artifact: &[],
            artifact_hash: activity.artifact_hash,
            evidence_set_hash: activity.evidence_set_hash,
            observations: activity.observations,
            terminal_state: activity.terminal_state,
            reason_code: activity.reason_code,
            occurred_at_ms: activity.occurred_at_ms,
            sized: true,
            schema: "ActivitySubmission.v3",
            producer: Some((key_id, signature)),
        },
        key_id,
        signature,
    })
}

/// What `producer_facts` decides for one journal record value before any signature is verified.
pub enum ProducerItem<'a> {
    /// `facts::producer_other`, `producer_legacy` or `producer_action` (the tag).
    Plain(i64),
    /// A JournalEntry.v3: verified (or not) below.
    Signed(Box<SignedEntry<'a>>),
    /// Handed back to the reference.
    Fallback,
}

// ---------------------------------------------------------------------------
// the facts, before any Python object is built
// ---------------------------------------------------------------------------

/// What one journal record value is (`facts::journal_*`).
pub enum JournalFact<'a> {
    /// The envelope does not decode (or is not a journal topic's).
    Undecodable(String),
    /// An entry: the stored and the recomputed entry hash, and its head.
    Entry {
        stored: &'a str,
        recomputed: String,
        head: EntryHead<'a, i128>,
    },
    /// An entry whose head does not decode.
    EntryUndecodable {
        stored: &'a str,
        recomputed: String,
        message: String,
    },
    Seal {
        payload: &'a [u8],
        key_id: &'a str,
        signature: &'a [u8],
    },
}

/// `facts.journal_fact`
pub fn journal_fact<'a>(schemas: &Schemas, value: &'a [u8]) -> JournalFact<'a> {
    match split_envelope(schemas, value) {
        Err(message) => JournalFact::Undecodable(message),
        Ok(Envelope::Audit { .. }) => {
            JournalFact::Undecodable("an audit record on the journal topic".to_owned())
        }
        Ok(Envelope::Checkpoint { .. }) => {
            JournalFact::Undecodable("a checkpoint record on the journal topic".to_owned())
        }
        Ok(Envelope::Journal { payload, stored }) => {
            let recomputed = journal_entry_hash(payload);
            match entry_head(schemas, payload) {
                Ok((_, head)) => JournalFact::Entry {
                    stored,
                    recomputed,
                    head,
                },
                Err(message) => JournalFact::EntryUndecodable {
                    stored,
                    recomputed,
                    message,
                },
            }
        }
        Ok(Envelope::Seal {
            payload,
            key_id,
            signature,
        }) => JournalFact::Seal {
            payload,
            key_id,
            signature,
        },
    }
}

/// An audit record that decodes, before its MAC is recomputed.
pub struct AuditRecord<'a> {
    pub payload: &'a [u8],
    pub key_id: &'a str,
    pub mac: &'a str,
    /// AuditRecord.v2: the MAC covers the key id too.
    pub v2: bool,
    pub head: AuditHead<'a, i128>,
}

impl AuditRecord<'_> {
    /// The record's MAC recomputed under `keyed`.
    pub fn recompute(&self, keyed: &AuditMac) -> String {
        if self.v2 {
            keyed.audit_record_mac(self.key_id, self.payload)
        } else {
            keyed.audit_mac(self.payload)
        }
    }
}

/// What one audit record value is, before its key is looked up.
pub enum AuditParse<'a> {
    /// A JournalRecord on the audit topic (`name, (payload, key_id, mac) = ...` raises there):
    /// the reference decides.
    Fallback,
    /// `facts::audit_undecodable`
    Undecodable(String),
    Record(AuditRecord<'a>),
}

/// `facts.audit_fact` up to the key lookup.
pub fn audit_parse<'a>(schemas: &Schemas, value: &'a [u8]) -> AuditParse<'a> {
    let parsed = match split_envelope(schemas, value) {
        Err(message) => Err(message),
        Ok(Envelope::Journal { .. }) => return AuditParse::Fallback,
        Ok(Envelope::Seal { .. }) => Err("a SealRecord.v1 record on the audit topic".to_owned()),
        Ok(Envelope::Checkpoint { .. }) => {
            Err("a CheckpointRecord.v1 record on the audit topic".to_owned())
        }
        Ok(Envelope::Audit {
            payload,
            key_id,
            mac,
            v2,
        }) => audit_head(schemas, payload).map(|head| AuditRecord {
            payload,
            key_id,
            mac,
            v2,
            head,
        }),
    };
    match parsed {
        Ok(record) => AuditParse::Record(record),
        Err(message) => AuditParse::Undecodable(message),
    }
}

/// `facts::audit_record`: a record and its MAC recomputed under the pinned secret (None: its
/// key id is not pinned).
pub struct AuditRecordFact<'a> {
    pub record: AuditRecord<'a>,
    pub recomputed: Option<String>,
}

/// `facts.producer_fact` up to the key lookup: what one journal record value is.
pub fn producer_item<'a>(schemas: &Schemas, value: Option<&'a [u8]>) -> ProducerItem<'a> {
    let Some(value) = value else {
        return ProducerItem::Fallback;
    };
    let Ok(Envelope::Journal { payload, .. }) = split_envelope(schemas, value) else {
        return ProducerItem::Plain(vk::P_OTHER);
    };
    let Ok(schema) = schemas.schema_of(payload) else {
        return ProducerItem::Plain(vk::P_OTHER);
    };
    match schema.name.as_str() {
        "JournalEntry.v1" | "JournalEntry.v2" => ProducerItem::Plain(vk::P_LEGACY),
        "ComputerUseEntry.v1" | "ComputerUseEntry.v2" => ProducerItem::Plain(vk::P_ACTION),
        "JournalEntry.v3" => match decode_signed_entry(payload) {
            Some(entry) => ProducerItem::Signed(Box::new(entry)),
            None => ProducerItem::Fallback,
        },
        _ => ProducerItem::Plain(vk::P_OTHER),
    }
}

/// The pinned key of a key id: Some(key) pinned (None inside: not an Ed25519 key), None not
/// pinned.
pub type PinnedKey = Option<Option<ProducerKey>>;

/// The signed entries `jobs` names (`(item index, key slot)`) verified: their statements
/// rebuilt and their signatures checked many to one equation, in order.
pub fn verify_producers(
    items: &[ProducerItem<'_>],
    jobs: &[(usize, usize)],
    keys: &[(String, PinnedKey)],
) -> Vec<(usize, bool)> {
    // None: an integer canonical JSON cannot carry: no signature verifies
    let messages: Vec<Option<Vec<u8>>> = jobs
        .iter()
        .map(|&(index, _)| match &items[index] {
            ProducerItem::Signed(entry) => {
                submission_signing_input(&entry.submission, entry.key_id).filter(|m| !m.is_empty())
            }
            _ => None,
        })
        .collect();
    let checked: Vec<Option<crate::ed25519::Item<'_>>> = jobs
        .iter()
        .zip(&messages)
        .map(|(&(index, slot), message)| {
            let ProducerItem::Signed(entry) = &items[index] else {
                return None;
            };
            let Some(Some(key)) = &keys[slot].1 else {
                return None;
            };
            Some(crate::ed25519::Item {
                key: key.key.as_ref()?,
                signature: entry.signature,
                message: message.as_deref()?,
            })
        })
        .collect();
    let ok = crate::ed25519::verify_each(&checked);
    jobs.iter().map(|&(index, _)| index).zip(ok).collect()
}

/// What `stage_facts` finds in one value, before any Python object is built.
#[allow(clippy::large_enum_variant)] // nearly every item of a stage pass is a `Result`: boxing would only add allocations
pub enum StageItem<'a> {
    /// Not bytes, or an entry the strict reader refuses: the reference decides.
    Fallback,
    /// Not a decodable JournalRecord.
    Skip,
    /// A journal record that is not a decodable `activity.result` entry (its stored hash).
    NotResult(&'a str),
    Result {
        entry: FullEntry<'a>,
        stored: &'a str,
        recomputed: String,
        /// None when an observation hash is malformed (the reference names it).
        recomputed_set: Option<String>,
        payload: &'a [u8],
    },
}

/// `facts.stage_fact` up to its Python objects.
pub fn stage_item<'a>(schemas: &Schemas, value: Option<&'a [u8]>) -> StageItem<'a> {
    let Some(value) = value else {
        return StageItem::Fallback;
    };
    let Ok(Envelope::Journal { payload, stored }) = split_envelope(schemas, value) else {
        return StageItem::Skip;
    };
    let layout = match entry_head(schemas, payload) {
        Ok((layout, head))
            if head.entry_type == ENTRY_ACTIVITY_RESULT && layout.is_activity_entry() =>
        {
            layout
        }
        _ => return StageItem::NotResult(stored),
    };
    // JournalEntry.v2 or v3: the sizes (and v3's signature) are read and not part of the fact
    let Some(entry) = decode_full_entry(payload, layout) else {
        return StageItem::Fallback;
    };
    let recomputed_set = entry
        .observations
        .iter()
        .all(|o| is_digest(o.2))
        .then(|| evidence_set_hash_of_digests(entry.observations.iter().map(|o| o.2)));
    StageItem::Result {
        recomputed: journal_entry_hash(payload),
        recomputed_set,
        stored,
        payload,
        entry,
    }
}
