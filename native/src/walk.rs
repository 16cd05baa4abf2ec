//! The plain path of the verifier's chain and audit walks (`verifier/walks/`), in Rust.
//!
//! The walks check every record in Python. Almost every record of an intact partition is
//! plain: it links to its predecessor, its MAC or producer signature verifies under a pinned
//! key in force at its timestamp, and it joins with its crossing on the other stream. What
//! the Python checks conclude for such a record is a handful of counter and head updates.
//! `AuditPlain.advance` and `ChainPlain.advance` make those updates for the plain records of
//! a chunk, on the walk objects themselves, and stop at the first record that is not plain
//! (or not of the exact types they read); the Python walk checks that one in full and calls
//! them again. The Python walk stays the reference: a record is taken here only under the
//! conditions its own short path states, and the reports are compared with and without this
//! module (`tests/unit/differential/test_verifier_facts.py`).

use std::collections::{BTreeMap, VecDeque};

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PySet, PyString, PyTuple};

use crate::facts::verifier_kinds::{A_RECORD, J_ENTRY, P_LEGACY, P_OTHER, P_SIGNED};
use crate::facts::{
    audit_record as ar, journal_entry as je, producer_legacy, producer_other, producer_signed as ps,
};

fn exact_str<'a>(item: &'a Bound<'_, PyAny>) -> Option<&'a str> {
    if !item.is_exact_instance_of::<PyString>() {
        return None;
    }
    item.cast::<PyString>().ok()?.to_str().ok()
}

fn exact_int(item: &Bound<'_, PyAny>) -> Option<i64> {
    if !item.is_exact_instance_of::<PyInt>() {
        return None;
    }
    item.extract::<i64>().ok()
}

/// `obj.name += add` on a Python object's integer attribute.
fn add_to_attr(obj: &Bound<'_, PyAny>, name: &str, add: i64) -> PyResult<()> {
    let before: i64 = obj.getattr(name)?.extract()?;
    obj.setattr(name, before + add)
}

/// `counts[key] = counts.get(key, 0) + add`.
fn add_to_count<'py>(
    counts: &Bound<'py, PyDict>,
    key: Bound<'py, PyAny>,
    add: i64,
) -> PyResult<()> {
    let before: i64 = match counts.get_item(&key)? {
        Some(before) => before.extract()?,
        None => 0,
    };
    counts.set_item(key, before + add)
}

/// One result or seal crossing of a run, queued by the audit walk for the run's journal walk
/// (the fields of `verifier.walks.partition._AuditEvent`, in its constructor's order).
#[derive(Clone)]
struct Event {
    seq: i64,
    offset: i64,
    event: String,
    journal_seq: i64,
    record_hash: String,
    prev_mac: String,
    tainted: bool,
    version: i64,
    position: i64,
    checkpoints_seen: i64,
}

/// A run's queued crossings: a deque of `_AuditEvent`s to Python (`append`, `popleft`, `len`),
/// plain structs to the walks here.
#[pyclass(module = "bernstein_native")]
pub struct EventQueue {
    events: VecDeque<Event>,
    make: Py<PyAny>,
}

#[pymethods]
impl EventQueue {
    /// `make`: the event class `popleft` builds (`_AuditEvent`).
    #[new]
    fn new(make: Py<PyAny>) -> Self {
        EventQueue {
            events: VecDeque::new(),
            make,
        }
    }

    fn append(&mut self, event: &Bound<'_, PyAny>) -> PyResult<()> {
        self.events.push_back(Event {
            seq: event.getattr("seq")?.extract()?,
            offset: event.getattr("offset")?.extract()?,
            event: event.getattr("event")?.extract()?,
            journal_seq: event.getattr("journal_seq")?.extract()?,
            record_hash: event.getattr("record_hash")?.extract()?,
            prev_mac: event.getattr("prev_mac")?.extract()?,
            tainted: event.getattr("tainted")?.extract()?,
            version: event.getattr("version")?.extract()?,
            position: event.getattr("position")?.extract()?,
            checkpoints_seen: event.getattr("checkpoints_seen")?.extract()?,
        });
        Ok(())
    }

    fn popleft<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let Some(e) = self.events.pop_front() else {
            return Err(PyIndexError::new_err("pop from an empty EventQueue"));
        };
        self.make.bind(py).call1((
            e.seq,
            e.offset,
            e.event,
            e.journal_seq,
            e.record_hash,
            e.prev_mac,
            e.tainted,
            e.version,
            e.position,
            e.checkpoints_seen,
        ))
    }

    fn __len__(&self) -> usize {
        self.events.len()
    }
}

/// The pinned keys a walk's records may use: key id -> (owner, valid from, valid until), the
/// owner a producer key's registered producer (`verifier.keyuse.KeysInForce.windows`).
struct Windows(BTreeMap<String, (Option<String>, i64, Option<i64>)>);

impl Windows {
    /// `KeysInForce.fits(key_id, timestamp, producer)`.
    fn fits(&self, key_id: &str, timestamp: i64, producer: Option<&str>) -> bool {
        let Some((owner, start, until)) = self.0.get(key_id) else {
            return false;
        };
        if let (Some(owner), Some(producer)) = (owner, producer) {
            if owner != producer {
                return false;
            }
        }
        timestamp >= *start && until.is_none_or(|until| timestamp < until)
    }
}

/// The audit event names the walks compare with (`verifier.walks.partition`'s `RESULT`, ...).
struct EventNames {
    result: String,
    entry_events: Vec<String>,
    join_events: Vec<String>,
    refused: String,
    deadletter: String,
}

/// A run's crossings counted while advancing, written to its `_RunCrossings` at the end.
struct RunTally<'py> {
    crossings: Bound<'py, PyAny>,
    queue: Bound<'py, EventQueue>,
    records: i64,
    refusals: i64,
    refusal_hashes: Vec<(i64, i64, Bound<'py, PyAny>)>,
}

/// The plain path of `_PartitionAudit._check`, for one partition's audit chain.
#[pyclass(module = "bernstein_native", frozen)]
pub struct AuditPlain {
    partition: i64,
    keys: Windows,
    names: EventNames,
}

#[pymethods]
impl AuditPlain {
    /// `keys`: the pinned audit keys (`KeysInForce.windows`); `result`, `entry_events`,
    /// `join_events`, `refused`, `deadletter`: the audit event names of `verifier.walks.partition`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        partition: i64,
        keys: BTreeMap<String, (Option<String>, i64, Option<i64>)>,
        result: String,
        entry_events: Vec<String>,
        join_events: Vec<String>,
        refused: String,
        deadletter: String,
    ) -> Self {
        AuditPlain {
            partition,
            keys: Windows(keys),
            names: EventNames {
                result,
                entry_events,
                join_events,
                refused,
                deadletter,
            },
        }
    }

    /// Check the plain records of `chunk` (`AuditRow`s) from `start` on `part` (a
    /// `_PartitionAudit`) and return the index of the first one that is not plain.
    ///
    /// `due` is the audit seq of the next checkpoint to merge (None: none is left): a record
    /// that reaches it is the Python walk's. `seen` is the checkpoint walk's `last_seen`.
    fn advance<'py>(
        &self,
        part: &Bound<'py, PyAny>,
        chunk: &Bound<'py, PyList>,
        start: usize,
        due: Option<i64>,
        seen: i64,
    ) -> PyResult<usize> {
        let n = chunk.len();
        if start >= n || !part.getattr("genesis_checked")?.is_truthy()? {
            return Ok(start);
        }
        let Some(mut last_input) = exact_int(&part.getattr("last_input")?) else {
            return Ok(start); // None: accounting restarts with the Python walk
        };
        let mut last_mac = part.getattr("last_mac")?;
        if exact_str(&last_mac).is_none() {
            return Ok(start);
        }
        let mut expected_seq: i64 = part.getattr("expected_seq")?.extract()?;
        let mut count: i64 = part.getattr("count")?.extract()?;
        let mut v2_records: i64 = part.getattr("v2_records")?.extract()?;
        let mut last_version: i64 = part.getattr("last_version")?.extract()?;
        let wanted = part.getattr("wanted")?;
        let wanted = if wanted.is_none() { None } else { Some(wanted) };
        let mut last_event: Option<Bound<'py, PyAny>> = None;
        let mut key_ids: Vec<(String, Bound<'py, PyAny>)> = Vec::new();
        let mut mentions: Vec<(String, Bound<'py, PyAny>, i64)> = Vec::new();
        let mut crossing_runs: Vec<(String, Bound<'py, PyAny>)> = Vec::new();
        let mut runs: BTreeMap<String, RunTally<'py>> = BTreeMap::new();
        let mut at = start;
        while at < n {
            let row = chunk.get_item(at)?;
            let Ok(row) = row.cast::<PyTuple>() else {
                break;
            };
            if row.len() != 5 {
                break;
            }
            let fact = row.get_item(1)?;
            let Ok(fact) = fact.cast::<PyTuple>() else {
                break;
            };
            if fact.len() != ar::LEN || exact_int(&fact.get_item(ar::KIND)?) != Some(A_RECORD) {
                break;
            }
            let (Some(offset), Some(version), Some(timestamp)) = (
                exact_int(&row.get_item(0)?),
                exact_int(&row.get_item(2)?),
                exact_int(&row.get_item(3)?),
            ) else {
                break;
            };
            let (key_id_obj, mac_obj, recomputed_obj) = (
                fact.get_item(ar::KEY_ID)?,
                fact.get_item(ar::MAC)?,
                fact.get_item(ar::RECOMPUTED)?,
            );
            let (prev_obj, event_obj, run_obj, hash_obj) = (
                fact.get_item(ar::PREV_MAC)?,
                fact.get_item(ar::EVENT)?,
                fact.get_item(ar::RUN_ID)?,
                fact.get_item(ar::RECORD_HASH)?,
            );
            let (
                Some(key_id),
                Some(mac),
                Some(recomputed),
                Some(prev_mac),
                Some(event),
                Some(run_id),
            ) = (
                exact_str(&key_id_obj),
                exact_str(&mac_obj),
                exact_str(&recomputed_obj),
                exact_str(&prev_obj),
                exact_str(&event_obj),
                exact_str(&run_obj),
            )
            else {
                break;
            };
            let Some(record_hash) = exact_str(&hash_obj) else {
                break;
            };
            let (
                Some(partition),
                Some(seq),
                Some(journal_seq),
                Some(input_partition),
                Some(input_offset),
            ) = (
                exact_int(&fact.get_item(ar::PARTITION)?),
                exact_int(&fact.get_item(ar::SEQ)?),
                exact_int(&fact.get_item(ar::JOURNAL_SEQ)?),
                exact_int(&fact.get_item(ar::INPUT_PARTITION)?),
                exact_int(&fact.get_item(ar::INPUT_OFFSET)?),
            )
            else {
                break;
            };
            let plain = due.is_none_or(|due| seq.checked_add(1).is_some_and(|next| next < due))
                && recomputed == mac
                && seq == expected_seq
                && exact_str(&last_mac) == Some(prev_mac)
                && partition == self.partition
                && input_partition == self.partition
                && self.keys.fits(key_id, timestamp, None)
                && last_input.checked_add(1) == Some(input_offset)
                && event != self.names.deadletter;
            if !plain {
                break;
            }
            // what `_check` does for a plain record
            count += 1;
            last_version = version;
            if version == 2 {
                v2_records += 1;
            }
            if !key_ids.iter().any(|(k, _)| k == key_id) {
                key_ids.push((key_id.to_owned(), key_id_obj.clone()));
            }
            last_input = input_offset;
            last_event = Some(event_obj.clone());
            expected_seq = seq + 1;
            last_mac = mac_obj.clone();
            // a refusal mirrors no journal record: only journal crossings count (`_PartitionAudit._record`)
            let joins = self.names.join_events.iter().any(|e| e == event);
            if joins {
                match mentions.iter_mut().find(|(r, _, _)| r == run_id) {
                    Some(found) => found.2 += 1,
                    None => mentions.push((run_id.to_owned(), run_obj.clone(), 1)),
                }
                if !crossing_runs.iter().any(|(r, _)| r == run_id) {
                    crossing_runs.push((run_id.to_owned(), run_obj.clone()));
                }
            }
            at += 1;
            if let Some(wanted) = &wanted {
                if !wanted.contains(&run_obj)? {
                    continue;
                }
            }
            if !runs.contains_key(run_id) {
                let crossings = part.call_method1("run", (&run_obj,))?;
                let queue = crossings.getattr("events")?.cast_into::<EventQueue>()?;
                runs.insert(
                    run_id.to_owned(),
                    RunTally {
                        crossings,
                        queue,
                        records: 0,
                        refusals: 0,
                        refusal_hashes: Vec::new(),
                    },
                );
            }
            let tally = runs.get_mut(run_id).expect("inserted above");
            tally.records += 1;
            if event == self.names.refused {
                tally.refusals += 1;
                tally.refusal_hashes.push((seq, offset, hash_obj.clone()));
                continue;
            }
            if !joins {
                continue;
            }
            let kind = if self.names.entry_events.iter().any(|e| e == event) {
                self.names.result.clone()
            } else {
                event.to_owned()
            };
            tally.queue.borrow_mut().events.push_back(Event {
                seq,
                offset,
                event: kind,
                journal_seq,
                record_hash: record_hash.to_owned(),
                prev_mac: prev_mac.to_owned(),
                tainted: false,
                version,
                position: count,
                checkpoints_seen: seen,
            });
        }
        if at == start {
            return Ok(start);
        }
        part.setattr("count", count)?;
        part.setattr("v2_records", v2_records)?;
        part.setattr("last_version", last_version)?;
        part.setattr("last_input", last_input)?;
        if let Some(event) = last_event {
            part.setattr("last_event", event)?;
        }
        part.setattr("started", true)?;
        part.setattr("expected_seq", expected_seq)?;
        part.setattr("last_mac", last_mac)?;
        let known = part.getattr("key_ids")?.cast_into::<PySet>()?;
        for (_, key_id) in key_ids {
            known.add(key_id)?;
        }
        let counted = part.getattr("mentions")?.cast_into::<PyDict>()?;
        for (_, run, add) in mentions {
            add_to_count(&counted, run, add)?;
        }
        let crossed = part.getattr("crossing_runs")?.cast_into::<PySet>()?;
        for (_, run) in crossing_runs {
            crossed.add(run)?;
        }
        for tally in runs.into_values() {
            add_to_attr(&tally.crossings, "records", tally.records)?;
            if tally.refusals > 0 {
                add_to_attr(&tally.crossings, "refusals", tally.refusals)?;
                let hashes = tally
                    .crossings
                    .getattr("refusal_hashes")?
                    .cast_into::<PyList>()?;
                for (seq, offset, hash) in tally.refusal_hashes {
                    hashes.append((seq, offset, hash))?;
                }
            }
        }
        Ok(at)
    }
}

/// The plain path of `_ChainWalk.feed_many` (`_entry`, `expect_result`, `_producer_entry`) for one run.
#[pyclass(module = "bernstein_native", frozen)]
pub struct ChainPlain {
    run_id: String,
    keys: Windows,
    result: String,
    activity_result: String,
    signed_types: Vec<String>,
}

#[pymethods]
impl ChainPlain {
    /// `keys`: the pinned producer keys (`KeysInForce.windows`); `result`: the audit event of a
    /// result crossing; `activity_result`: the entry type counted as a result; `signed_types`:
    /// the entry types that carry a producer signature.
    #[new]
    fn new(
        run_id: String,
        keys: BTreeMap<String, (Option<String>, i64, Option<i64>)>,
        result: String,
        activity_result: String,
        signed_types: Vec<String>,
    ) -> Self {
        ChainPlain {
            run_id,
            keys: Windows(keys),
            result,
            activity_result,
            signed_types,
        }
    }

    /// Walk the plain journal records from `start` on `walk` (a `_ChainWalk`): `timestamps`,
    /// `journal` and `producers` are `feed_many`'s Kafka timestamps, journal facts and
    /// producer facts. Returns the index of the first record that is not plain.
    fn advance<'py>(
        &self,
        py: Python<'py>,
        walk: &Bound<'py, PyAny>,
        timestamps: &Bound<'py, PyList>,
        journal: &Bound<'py, PyList>,
        producers: &Bound<'py, PyList>,
        start: usize,
    ) -> PyResult<usize> {
        let n = journal.len();
        if start >= n
            || timestamps.len() != n
            || producers.len() != n
            || !walk.getattr("final_seal_offset")?.is_none()
        {
            return Ok(start);
        }
        let audit = walk.getattr("audit")?;
        if !audit.getattr("pending")?.is_none() {
            return Ok(start);
        }
        let part = audit.getattr("part")?;
        let flushed: usize = audit.getattr("flushed")?.extract()?;
        if part.getattr("found")?.len()? != flushed {
            return Ok(start); // the chain's findings are joined in order by the Python walk
        }
        let mut head = walk.getattr("head")?;
        let alt = walk.getattr("alt_head")?;
        if exact_str(&head).is_none() || !(alt.is_none() || exact_str(&alt).is_some()) {
            return Ok(start);
        }
        let mut alt = exact_str(&alt).map(str::to_owned); // the recomputed hash of a broken entry: gone after one link
        let mut expected_seq: i64 = walk.getattr("expected_seq")?.extract()?;
        let crossings = part.call_method1("run", (self.run_id.as_str(),))?;
        let queue = crossings.getattr("events")?.cast_into::<EventQueue>()?;
        let mut queue = queue.borrow_mut();
        let (mut records, mut results, mut signed, mut legacy) = (0i64, 0i64, 0i64, 0i64);
        // (key id, producer) -> entries signed, as `KeyLedger.signed_by_producer` counts them
        let mut ledger: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>, i64)> = Vec::new();
        let mut at = start;
        while at < n {
            let fact = journal.get_item(at)?;
            let Ok(fact) = fact.cast::<PyTuple>() else {
                break;
            };
            if fact.len() != je::LEN || exact_int(&fact.get_item(je::KIND)?) != Some(J_ENTRY) {
                break;
            }
            let (stored_obj, recomputed_obj, run_obj, prev_obj, type_obj) = (
                fact.get_item(je::STORED)?,
                fact.get_item(je::RECOMPUTED)?,
                fact.get_item(je::RUN_ID)?,
                fact.get_item(je::PREV_HASH)?,
                fact.get_item(je::ENTRY_TYPE)?,
            );
            let (
                Some(stored),
                Some(recomputed),
                Some(run_id),
                Some(prev_hash),
                Some(entry_type),
                Some(seq),
            ) = (
                exact_str(&stored_obj),
                exact_str(&recomputed_obj),
                exact_str(&run_obj),
                exact_str(&prev_obj),
                exact_str(&type_obj),
                exact_int(&fact.get_item(je::SEQ)?),
            )
            else {
                break;
            };
            if !(recomputed == stored
                && seq == expected_seq
                && run_id == self.run_id
                && (exact_str(&head) == Some(prev_hash) || alt.as_deref() == Some(prev_hash)))
            {
                break;
            }
            let Some(event) = queue.events.front() else {
                break; // the audit chain is read further by the Python walk
            };
            if !(event.event == self.result
                && event.journal_seq == seq
                && (event.record_hash == stored || event.tainted))
            {
                break;
            }
            let mut signer: Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)> = None;
            let mut is_legacy = false;
            if self.signed_types.iter().any(|t| t == entry_type) {
                let producer = producers.get_item(at)?;
                let Ok(producer) = producer.cast::<PyTuple>() else {
                    break;
                };
                match exact_int(&producer.get_item(ps::KIND)?) {
                    Some(P_OTHER) if producer.len() == producer_other::LEN => {}
                    Some(P_LEGACY) if producer.len() == producer_legacy::LEN => is_legacy = true,
                    Some(P_SIGNED) if producer.len() == ps::LEN => {
                        let (key_obj, name_obj, verified) = (
                            producer.get_item(ps::KEY_ID)?,
                            producer.get_item(ps::PRODUCER_ID)?,
                            producer.get_item(ps::VERIFIED)?,
                        );
                        let (Some(key_id), Some(name), Some(timestamp)) = (
                            exact_str(&key_obj),
                            exact_str(&name_obj),
                            exact_int(&timestamps.get_item(at)?),
                        ) else {
                            break;
                        };
                        let verified =
                            verified.is_exact_instance_of::<PyBool>() && verified.is_truthy()?;
                        if !(verified && self.keys.fits(key_id, timestamp, Some(name))) {
                            break;
                        }
                        signer = Some((key_obj.clone(), name_obj.clone()));
                    }
                    _ => break,
                }
            }
            // what the walk does for a plain entry
            queue.events.pop_front();
            records += 1;
            if entry_type == self.activity_result {
                results += 1;
            }
            if is_legacy {
                legacy += 1;
            }
            if let Some((key_obj, name_obj)) = signer {
                signed += 1;
                let same = |k: &Bound<'py, PyAny>, p: &Bound<'py, PyAny>| {
                    exact_str(k) == exact_str(&key_obj) && exact_str(p) == exact_str(&name_obj)
                };
                match ledger.iter_mut().find(|(k, p, _)| same(k, p)) {
                    Some(found) => found.2 += 1,
                    None => ledger.push((key_obj, name_obj, 1)),
                }
            }
            expected_seq = seq + 1;
            head = stored_obj.clone();
            alt = None;
            at += 1;
        }
        drop(queue);
        if at == start {
            return Ok(start);
        }
        for (name, add) in [
            ("records", records),
            ("results", results),
            ("signed", signed),
            ("legacy", legacy),
        ] {
            if add > 0 {
                add_to_attr(walk, name, add)?;
            }
        }
        walk.setattr("expected_seq", expected_seq)?;
        walk.setattr("head", head)?;
        walk.setattr("alt_head", py.None())?;
        let counted = walk
            .getattr("ledger")?
            .getattr("producer")?
            .cast_into::<PyDict>()?;
        for (key_id, producer, add) in ledger {
            add_to_count(
                &counted,
                PyTuple::new(py, [key_id, producer])?.into_any(),
                add,
            )?;
        }
        Ok(at)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<EventQueue>()?;
    m.add_class::<AuditPlain>()?;
    m.add_class::<ChainPlain>()?;
    Ok(())
}
