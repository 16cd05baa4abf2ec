//! `FactReader`: the verifier's facts (`crate::verify`) as the tuples `verifier/facts.py`
//! returns, laid out by the shapes of `crate::facts` (`journal_*`, `audit_*`, `stage_*`,
//! `producer_*`).
//!
//! Each batch call returns `(facts, fallback)`, where `fallback` lists the indices whose fact is
//! `None` and must be computed by the Python function for that one item: besides what
//! `crate::verify` leaves to the reference, an item that is not `bytes` / `None`, or a secret
//! or key that is not `bytes`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::{b, big_int as int, flag, none, s, tracked_tuple as tuple, Reuse};
use crate::facts::{
    audit_record, audit_undecodable, journal_entry, journal_entry_undecodable, journal_seal,
    journal_undecodable, producer_signed, stage_not_result, stage_result, stage_skip,
};
use crate::hashing::AuditMac;
use crate::producers::ProducerKey;
use crate::records::schema_list;
use crate::verify::{
    audit_parse, journal_fact, producer_item, stage_item, verify_producers, AuditParse,
    AuditRecordFact, JournalFact, PinnedKey, ProducerItem, Schemas, StageItem, VERIFIER_LAYOUTS,
};

/// `record.value or b""` when the item is bytes or None; None for anything else.
#[inline]
fn value_bytes<'a>(item: &'a Bound<'_, PyAny>) -> Option<&'a [u8]> {
    if item.is_none() {
        Some(b"")
    } else {
        item.cast::<PyBytes>()
            .ok()
            .filter(|_| item.is_exact_instance_of::<PyBytes>())
            .map(|v| v.as_bytes())
    }
}

/// The tag of a tagged shape, as a Python int.
#[inline]
fn tag(py: Python<'_>, tag: Option<i64>) -> Bound<'_, PyAny> {
    int(py, tag.expect("a tagged shape").into())
}

/// Reused string objects of the journal facts.
struct JournalStrings<'py> {
    run_ids: Reuse<'py>,
    types: Reuse<'py>,
}

fn journal_object<'py>(
    py: Python<'py>,
    fact: JournalFact<'_>,
    reuse: &mut JournalStrings<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    match fact {
        JournalFact::Undecodable(message) => {
            let items: [_; journal_undecodable::LEN] =
                [tag(py, journal_undecodable::TAG), s(py, &message)];
            tuple(py, items)
        }
        JournalFact::Entry {
            stored,
            recomputed,
            head,
        } => {
            let items: [_; journal_entry::LEN] = [
                tag(py, journal_entry::TAG),
                s(py, stored),
                s(py, &recomputed),
                reuse.run_ids.get(py, head.run_id),
                int(py, head.seq),
                s(py, head.prev_hash),
                reuse.types.get(py, head.entry_type),
            ];
            tuple(py, items)
        }
        JournalFact::EntryUndecodable {
            stored,
            recomputed,
            message,
        } => {
            let items: [_; journal_entry_undecodable::LEN] = [
                tag(py, journal_entry_undecodable::TAG),
                s(py, stored),
                s(py, &recomputed),
                s(py, &message),
            ];
            tuple(py, items)
        }
        JournalFact::Seal {
            payload,
            key_id,
            signature,
        } => {
            let items: [_; journal_seal::LEN] = [
                tag(py, journal_seal::TAG),
                b(py, payload),
                s(py, key_id),
                b(py, signature),
            ];
            tuple(py, items)
        }
    }
}

/// Reused string objects of the audit facts.
struct AuditStrings<'py> {
    key_ids: Reuse<'py>,
    events: Reuse<'py>,
    run_ids: Reuse<'py>,
}

fn audit_object<'py>(
    py: Python<'py>,
    fact: &AuditRecordFact<'_>,
    reuse: &mut AuditStrings<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let record = &fact.record;
    let head = &record.head;
    let items: [_; audit_record::LEN] = [
        tag(py, audit_record::TAG),
        reuse.key_ids.get(py, record.key_id),
        s(py, record.mac),
        match &fact.recomputed {
            Some(mac) => s(py, mac),
            None => none(py),
        },
        int(py, head.partition),
        int(py, head.seq),
        s(py, head.prev_mac),
        reuse.events.get(py, head.event),
        reuse.run_ids.get(py, head.run_id),
        s(py, head.record_hash),
        int(py, head.journal_seq),
        int(py, head.input_partition),
        int(py, head.input_offset),
    ];
    tuple(py, items)
}

/// The facts of batches of records, over the codec's schema table.
#[pyclass(module = "bernstein_native", frozen)]
pub struct FactReader {
    schemas: Schemas,
}

#[pymethods]
impl FactReader {
    /// `known_schemas`: every (fingerprint, name) of the codec.
    #[new]
    fn new(known_schemas: Vec<(Vec<u8>, String)>) -> PyResult<Self> {
        Ok(FactReader {
            schemas: Schemas::new(known_schemas).map_err(PyValueError::new_err)?,
        })
    }

    fn hash_files<'py>(
        &self,
        py: Python<'py>,
        paths: Vec<String>,
        keep: Vec<bool>,
        max_bytes: u64,
    ) -> PyResult<Bound<'py, PyList>> {
        if keep.len() != paths.len() {
            return Err(PyValueError::new_err("hash_files: one keep flag per path"));
        }
        let items: Vec<(usize, &str, bool)> = paths
            .iter()
            .zip(&keep)
            .enumerate()
            .map(|(i, (p, k))| (i, p.as_str(), *k))
            .collect();
        let hashed: Vec<(usize, Option<crate::blob_files::HashedFile>)> = py.detach(|| {
            crate::parallel::filter_map(&items, crate::parallel::cores(), |(index, path, keep)| {
                thread_local! {
                    static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
                }
                let found = BUFFER.with(|b| crate::blob_files::hash_file(path, max_bytes, *keep, &mut b.borrow_mut()));
                Some((*index, found))
            })
        });
        let out = PyList::empty(py);
        for (_, found) in hashed {
            match found {
                None => out.append(py.None())?,
                Some((digest, size, data)) => {
                    let data = match data {
                        Some(bytes) => PyBytes::new(py, &bytes).into_any(),
                        None => py.None().into_bound(py),
                    };
                    out.append((digest, size, data))?;
                }
            }
        }
        Ok(out)
    }

    /// Journal record values (bytes or None) -> (facts, fallback indices).
    ///
    /// `(0, message)` the envelope does not decode; `(1, stored, recomputed,
    /// run_id, seq, prev_hash, entry_type)` an entry; `(2, stored, recomputed,
    /// message)` an entry whose head does not decode; `(3, payload, key_id,
    /// signature)` a seal (`facts::journal_*`).
    fn journal_facts<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let out = PyList::empty(py);
        let mut fallback = Vec::new();
        let mut reuse = JournalStrings {
            run_ids: Reuse::new(),
            types: Reuse::new(),
        };
        for (index, item) in values.iter().enumerate() {
            let Some(value) = value_bytes(&item) else {
                fallback.push(index);
                out.append(py.None())?;
                continue;
            };
            let fact = journal_fact(&self.schemas, value);
            out.append(journal_object(py, fact, &mut reuse)?)?;
        }
        Ok((out, fallback))
    }

    /// Audit record values -> (facts, fallback indices); `secret_for(key_id)`
    /// gives the pinned secret (bytes) or None.
    ///
    /// `(0, message)` the record does not decode; `(1, key_id, mac,
    /// recomputed mac or None, partition, seq, prev_mac, event, run_id,
    /// record_hash, journal_seq, input partition, input offset)` (`facts::audit_*`).
    fn audit_facts<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
        secret_for: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let out = PyList::empty(py);
        let mut fallback = Vec::new();
        // key_id -> Some(Some(mac)) pinned, Some(None) not pinned, None not bytes.
        let mut secrets: Vec<(String, Option<Option<AuditMac>>)> = Vec::new();
        let mut reuse = AuditStrings {
            key_ids: Reuse::new(),
            events: Reuse::new(),
            run_ids: Reuse::new(),
        };
        for (index, item) in values.iter().enumerate() {
            let Some(value) = value_bytes(&item) else {
                fallback.push(index);
                out.append(py.None())?;
                continue;
            };
            let record = match audit_parse(&self.schemas, value) {
                AuditParse::Fallback => {
                    fallback.push(index);
                    out.append(py.None())?;
                    continue;
                }
                AuditParse::Undecodable(message) => {
                    let items: [_; audit_undecodable::LEN] =
                        [tag(py, audit_undecodable::TAG), s(py, &message)];
                    out.append(tuple(py, items)?)?;
                    continue;
                }
                AuditParse::Record(record) => record,
            };
            let slot = match secrets.iter().position(|(k, _)| k == record.key_id) {
                Some(i) => i,
                None => {
                    let secret = secret_for.call1((record.key_id,))?;
                    let keyed = if secret.is_none() {
                        Some(None)
                    } else if secret.is_exact_instance_of::<PyBytes>() {
                        let raw = secret.cast::<PyBytes>()?.as_bytes();
                        Some(Some(AuditMac::new(raw)))
                    } else {
                        None
                    };
                    secrets.push((record.key_id.to_owned(), keyed));
                    secrets.len() - 1
                }
            };
            let recomputed = match &secrets[slot].1 {
                None => {
                    fallback.push(index);
                    out.append(py.None())?;
                    continue;
                }
                Some(None) => None,
                Some(Some(keyed)) => Some(record.recompute(keyed)),
            };
            let fact = AuditRecordFact { record, recomputed };
            out.append(audit_object(py, &fact, &mut reuse)?)?;
        }
        Ok((out, fallback))
    }

    /// Journal record values -> (facts, fallback indices) of their producer signatures;
    /// `public_for(key_id)` gives the pinned raw Ed25519 key (bytes) or None.
    ///
    /// `(0,)` no entry with a producer signature, `(1,)` a JournalEntry.v1/v2, `(2,)` a
    /// computer-use entry, `(3, seq, key_id, producer_id, verified)` a JournalEntry.v3 with
    /// `verified` None when no key is pinned for its key id (`facts::producer_*`). The
    /// signatures are verified without the GIL, in batches (`crate::ed25519::verify_each`), on
    /// the calling thread.
    fn producer_facts<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
        public_for: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let held: Vec<Bound<'py, PyAny>> = values.iter().collect();
        let items: Vec<ProducerItem<'_>> = held
            .iter()
            .map(|item| producer_item(&self.schemas, value_bytes(item)))
            .collect();
        let mut keys: Vec<(String, PinnedKey)> = Vec::new();
        let mut jobs: Vec<(usize, usize)> = Vec::new();
        let mut fallback = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let ProducerItem::Signed(entry) = item else {
                continue;
            };
            let slot = match keys.iter().position(|(k, _)| k == entry.key_id) {
                Some(i) => i,
                None => {
                    let public = public_for.call1((entry.key_id,))?;
                    let pinned = if public.is_none() {
                        None
                    } else if public.is_exact_instance_of::<PyBytes>() {
                        let raw = public.cast::<PyBytes>()?.as_bytes();
                        let key = crate::ed25519::PublicKey::from_bytes(raw);
                        Some(Some(ProducerKey {
                            producer: 0,
                            key,
                            valid_from_ms: 0,
                            valid_until_ms: None,
                        }))
                    } else {
                        Some(None)
                    };
                    keys.push((entry.key_id.to_owned(), pinned));
                    keys.len() - 1
                }
            };
            match &keys[slot].1 {
                None => {}
                Some(None) => fallback.push(index),
                Some(Some(_)) => jobs.push((index, slot)),
            }
        }
        // Statements rebuilt and signatures verified many to one equation, without the GIL, on
        // the calling thread: the verifier calls this from one long-lived thread beside its walk
        // (threads spawned per call each left their allocator's pages behind: peak RSS that grew
        // with the number of calls, not flat).
        let verdicts = py.detach(|| verify_producers(&items, &jobs, &keys));
        let mut verified: Vec<Option<bool>> = vec![None; items.len()];
        for (index, ok) in verdicts {
            verified[index] = Some(ok);
        }
        let out = PyList::empty(py);
        for (index, item) in items.iter().enumerate() {
            let fact = match item {
                ProducerItem::Fallback => None,
                _ if fallback.contains(&index) => None,
                ProducerItem::Plain(kind) => Some(tuple(py, [int(py, (*kind).into())])?),
                ProducerItem::Signed(entry) => {
                    let items: [_; producer_signed::LEN] = [
                        tag(py, producer_signed::TAG),
                        int(py, entry.seq.into()),
                        s(py, entry.key_id),
                        s(py, entry.submission.producer_id),
                        match verified[index] {
                            None => none(py),
                            Some(ok) => flag(py, ok),
                        },
                    ];
                    Some(tuple(py, items)?)
                }
            };
            match fact {
                Some(fact) => out.append(fact)?,
                None => {
                    if !fallback.contains(&index) {
                        fallback.push(index);
                    }
                    out.append(py.None())?;
                }
            }
        }
        fallback.sort_unstable();
        Ok((out, fallback))
    }

    /// Journal record values of one run -> (facts, fallback indices), for the stage pass.
    ///
    /// `(0,)` not a decodable JournalRecord; `(1, stored)` a journal record
    /// that is not a decodable activity.result entry; `(2, stored,
    /// recomputed entry hash, run_id, seq, stage_id, kind, terminal_state,
    /// artifact_hash, evidence_set_hash, observations, recomputed evidence set
    /// hash or None when a member is malformed, payload, declared sizes, producer_id,
    /// producer key id ("" before JournalEntry.v3))` with
    /// observations as ((kind, ref, content_hash), ...) and the sizes as a
    /// tuple of ints (JournalEntry.v2, v3), or None (v1 declares none) (`facts::stage_*`).
    fn stage_facts<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let held: Vec<Bound<'py, PyAny>> = values.iter().collect();
        let raw: Vec<Option<&[u8]>> = held.iter().map(|item| value_bytes(item)).collect();
        // decoded and hashed without the GIL (the verifier reads the next chunk meanwhile)
        let items: Vec<StageItem<'_>> = py.detach(|| {
            raw.iter()
                .map(|value| stage_item(&self.schemas, *value))
                .collect()
        });
        let out = PyList::empty(py);
        let mut fallback = Vec::new();
        let mut run_ids = Reuse::new();
        let mut kinds = Reuse::new();
        let mut states = Reuse::new();
        let mut observation_kinds = Reuse::new();
        let mut producers = Reuse::new();
        let mut key_ids = Reuse::new();
        for (index, item) in items.into_iter().enumerate() {
            let (entry, stored, recomputed, recomputed_set, payload) = match item {
                StageItem::Fallback => {
                    fallback.push(index);
                    out.append(py.None())?;
                    continue;
                }
                StageItem::Skip => {
                    let items: [_; stage_skip::LEN] = [tag(py, stage_skip::TAG)];
                    out.append(tuple(py, items)?)?;
                    continue;
                }
                StageItem::NotResult(stored) => {
                    let items: [_; stage_not_result::LEN] =
                        [tag(py, stage_not_result::TAG), s(py, stored)];
                    out.append(tuple(py, items)?)?;
                    continue;
                }
                StageItem::Result {
                    entry,
                    stored,
                    recomputed,
                    recomputed_set,
                    payload,
                } => (entry, stored, recomputed, recomputed_set, payload),
            };
            let mut observations = Vec::with_capacity(entry.observations.len());
            for &(okind, reference, content_hash) in &entry.observations {
                let t = PyTuple::new(
                    py,
                    [
                        observation_kinds.get(py, okind),
                        s(py, reference),
                        s(py, content_hash),
                    ],
                )?;
                observations.push(t.into_any());
            }
            let items: [_; stage_result::LEN] = [
                tag(py, stage_result::TAG),
                s(py, stored),
                s(py, &recomputed),
                run_ids.get(py, entry.run_id),
                int(py, entry.seq.into()),
                s(py, entry.stage_id),
                kinds.get(py, entry.kind),
                states.get(py, entry.terminal_state),
                s(py, entry.artifact_hash),
                s(py, entry.evidence_set_hash),
                PyTuple::new(py, observations)?.into_any(),
                match &recomputed_set {
                    Some(set) => s(py, set),
                    None => none(py),
                },
                b(py, payload),
                match &entry.sizes {
                    None => none(py),
                    Some(sizes) => {
                        PyTuple::new(py, sizes.iter().map(|&n| int(py, n.into())))?.into_any()
                    }
                },
                producers.get(py, entry.producer_id),
                key_ids.get(py, entry.key_id),
            ];
            out.append(tuple(py, items)?)?;
        }
        Ok((out, fallback))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<FactReader>()?;
    m.add_function(wrap_pyfunction!(super::dump::parse_dump_lines, m)?)?;
    m.add_function(wrap_pyfunction!(super::dump::parse_dump_block, m)?)?;
    let schemas = PyList::empty(py);
    for (name, fp) in schema_list(&VERIFIER_LAYOUTS) {
        schemas.append((name, PyBytes::new(py, &fp)))?;
    }
    m.add("VERIFIER_SCHEMAS", schemas)?;
    Ok(())
}
