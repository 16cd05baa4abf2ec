//! `FoldReader`: the restart fold's facts (`crate::fold`) as the tuples `consumers/core/rebuild.py`
//! reads, laid out by the shapes of `crate::facts` (`fold_*`).

use ed25519_dalek::SigningKey;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::{flag, int, none, s, tuple, untrack};
use crate::facts::{
    fold_action, fold_audit, fold_checkpoint, fold_entry, fold_odd_entry, fold_seal,
    fold_walk_mirror, fold_walk_undecided,
};
use crate::fold::{
    AuditFact, CheckpointFact, EntryLink, FoldKeys, JournalFact, WalkEvent, FOLD_LAYOUTS,
};
use crate::hashing::AuditMac;
use crate::records::schema_list;

/// The fold's facts of batches of records, under the scheduler's keys (see `crate::fold`).
#[pyclass(module = "bernstein_native", frozen)]
pub struct FoldReader {
    keys: FoldKeys,
}

/// `((digest, size), ...)`
fn charges<'py>(py: Python<'py>, items: Option<&[(&str, i64)]>) -> PyResult<Bound<'py, PyAny>> {
    let Some(items) = items else {
        return Ok(none(py));
    };
    let mut pairs = Vec::with_capacity(items.len());
    for (digest, size) in items {
        pairs.push(tuple(py, [s(py, digest), int(py, *size)])?);
    }
    let t = PyTuple::new(py, pairs)?;
    untrack(&t);
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

/// The five items every entry fact starts with after its kind.
fn link_items<'py>(py: Python<'py>, link: &EntryLink<'_>) -> [Bound<'py, PyAny>; 5] {
    [
        s(py, link.run_id),
        int(py, link.seq),
        s(py, &link.entry_hash),
        s(py, link.prev_hash),
        flag(py, link.stored_hash_ok),
    ]
}

fn journal_object<'py>(py: Python<'py>, fact: JournalFact<'_>) -> PyResult<Bound<'py, PyAny>> {
    match fact {
        JournalFact::Seal {
            run_id,
            entry_count,
            identity,
            key_id,
            signed,
            last,
            head_hash,
            last_input_offset,
            audit_head,
        } => {
            let items: [_; fold_seal::LEN] = [
                int(py, fold_seal::TAG.expect("tagged")),
                s(py, run_id),
                int(py, entry_count),
                s(py, &identity),
                s(py, key_id),
                flag(py, signed),
                flag(py, last),
                s(py, head_hash),
                int(py, last_input_offset),
                s(py, audit_head),
            ];
            tuple(py, items)
        }
        JournalFact::OddEntry {
            link,
            schema,
            entry_type,
        } => {
            let [run_id, seq, hash, prev_hash, ok] = link_items(py, &link);
            let items: [_; fold_odd_entry::LEN] = [
                int(py, fold_odd_entry::TAG.expect("tagged")),
                run_id,
                seq,
                hash,
                prev_hash,
                ok,
                s(py, schema),
                s(py, entry_type),
            ];
            tuple(py, items)
        }
        JournalFact::Entry {
            link,
            submission_id,
            stage_id,
            evidence_set_hash,
            observed,
            charges: sized,
            browser,
            producer_id,
        } => {
            let [run_id, seq, hash, prev_hash, ok] = link_items(py, &link);
            let items: [_; fold_entry::LEN] = [
                int(py, fold_entry::TAG.expect("tagged")),
                run_id,
                seq,
                hash,
                prev_hash,
                ok,
                s(py, submission_id),
                s(py, stage_id),
                s(py, evidence_set_hash),
                flag(py, observed),
                charges(py, sized.as_deref())?,
                flag(py, browser),
                s(py, producer_id),
            ];
            tuple(py, items)
        }
        JournalFact::Action {
            link,
            submission_id,
            session_id,
            action_index,
            anchor,
            charges: sized,
            producer_id,
        } => {
            let [run_id, seq, hash, prev_hash, ok] = link_items(py, &link);
            let items: [_; fold_action::LEN] = [
                int(py, fold_action::TAG.expect("tagged")),
                run_id,
                seq,
                hash,
                prev_hash,
                ok,
                s(py, submission_id),
                s(py, session_id),
                int(py, action_index),
                s(py, anchor),
                charges(py, sized.as_ref().map(|pairs| &pairs[..]))?,
                s(py, producer_id),
            ];
            tuple(py, items)
        }
    }
}

fn audit_object<'py>(py: Python<'py>, fact: AuditFact<'_>) -> PyResult<Bound<'py, PyAny>> {
    let entry = fact.entry;
    let items: [_; fold_audit::LEN] = [
        int(py, entry.partition),
        int(py, entry.seq),
        s(py, entry.prev_mac),
        s(py, fact.mac),
        match fact.v2_key_id {
            Some(key_id) => s(py, key_id),
            None => none(py),
        },
        s(py, entry.event),
        s(py, entry.run_id),
        int(py, entry.journal_seq),
        s(py, entry.record_hash),
    ];
    tuple(py, items)
}

fn checkpoint_object<'py>(
    py: Python<'py>,
    fact: CheckpointFact<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    let checkpoint = fact.checkpoint;
    let items: [_; fold_checkpoint::LEN] = [
        int(py, checkpoint.partition),
        int(py, checkpoint.seq),
        s(py, checkpoint.prev_hash),
        int(py, checkpoint.audit_seq),
        s(py, checkpoint.audit_head),
        s(py, &fact.hash),
        flag(py, fact.signed),
    ];
    tuple(py, items)
}

fn walk_event_object<'py>(py: Python<'py>, event: WalkEvent<'_>) -> PyResult<Bound<'py, PyAny>> {
    match event {
        WalkEvent::Undecided { index, seq, head } => {
            let items: [_; fold_walk_undecided::LEN] = [
                int(py, index as i64),
                flag(py, false),
                int(py, seq),
                s(py, &head),
            ];
            tuple(py, items)
        }
        WalkEvent::Mirror {
            index,
            run_id,
            journal_seq,
            record_hash,
            seq,
            head,
        } => {
            let items: [_; fold_walk_mirror::LEN] = [
                int(py, index as i64),
                flag(py, true),
                s(py, run_id),
                int(py, journal_seq),
                s(py, record_hash),
                int(py, seq),
                s(py, &head),
            ];
            tuple(py, items)
        }
    }
}

impl FoldReader {
    /// `compute` over the values (None for an item that is not bytes) on every core without
    /// the GIL, then `convert` each result to its Python tuple (None stays None), in order.
    fn facts<'py, 'v, F: Send>(
        &self,
        py: Python<'py>,
        values: &[Option<&'v [u8]>],
        compute: impl Fn(&FoldKeys, &'v [u8]) -> Option<F> + Sync,
        convert: impl Fn(Python<'py>, F) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let keys = &self.keys;
        let computed = py.detach(|| {
            crate::parallel::filter_map(values, crate::parallel::cores(), |value| {
                Some(value.and_then(|v| compute(keys, v)))
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
            keys: FoldKeys {
                audit_keys: audit_keys
                    .into_iter()
                    .map(|(key_id, secret)| (key_id, AuditMac::new(&secret)))
                    .collect(),
                audit_key: AuditMac::new(&audit_key),
                seal_keys: seeded,
                mirror_events,
            },
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
        self.facts(py, &slices, FoldKeys::journal_fact, journal_object)
    }

    /// Audit record values -> one fact or None each (see `rebuild.py`, `_audit_fact`).
    fn audit<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<Bound<'py, PyAny>> = values.iter().collect();
        let slices: Vec<Option<&[u8]>> = items.iter().map(value_bytes).collect();
        self.facts(py, &slices, FoldKeys::audit_fact, audit_object)
    }

    /// The audit chain walked over `values[start..]` from `seq` and `head` (the state's
    /// `audit_seq` and `audit_head`) for partition `partition` (`FoldKeys::audit_walk`).
    /// Returns `(events, seq, head)`, the chain after the last record, with one event for each
    /// adopted record that mirrors a journal record, `(k, True, run_id, journal_seq,
    /// record_hash, seq, head)` (the chain after it), and one for each record this walk does not
    /// decide, `(k, False, seq, head)` (the chain before it): the Python functions decide it,
    /// and the walk went on as if it was not adopted (when it is, the caller walks the rest
    /// again). `k` indexes `values`.
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
        let keys = &self.keys;
        let computed = py.detach(|| {
            crate::parallel::filter_map(&slices, crate::parallel::cores(), |value| {
                Some(value.and_then(|v| keys.audit_fact(v)))
            })
        });
        let (walked, seq, head) = keys.audit_walk(computed, start, partition, seq, head);
        let events = PyList::empty(py);
        for event in walked {
            events.append(walk_event_object(py, event)?)?;
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
        self.facts(py, &slices, FoldKeys::checkpoint_fact, checkpoint_object)
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
