//! `NativeCore`: the scheduler core of one input partition (`crate::core`) for Python.
//!
//! `NativeCore` holds the configuration and the state of one input partition
//! and runs `consumers.core.step.SchedulerCore.step` over batches of records,
//! byte for byte. The pure logic lives in `crate::core` (no Python there beyond the
//! `Host` trait); this module and `core_args`, `core_io` only convert between Python
//! objects and it. `consumers/core/native.py` is the adapter that gives it the Python
//! core's interface and runs the reference for the records `core` hands back.

use std::collections::BTreeMap;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

use super::batch::{HeaderPairs, Plan};
use super::core_args::*;
use super::core_io::*;
use crate::core::{
    AuditChain, CeType, CheckpointChain, Core, Map, Outcome, RunState, Set, State, CE_TYPES,
};
use crate::merkle::Frontier;
use crate::undo::Change;

/// The scheduler core of one input partition: configuration plus state.
#[pyclass(module = "bernstein_native")]
pub struct NativeCore {
    pub(super) core: Core,
    pub(super) factory: Factory,
    pub(super) streams: Vec<Py<PyAny>>,
    pub(super) headers: Headers,
    /// The shell's batch: outputs waiting for `produce_planned` (see `batch`).
    pub(super) plan: Plan,
    /// `ce_type` of a seal, as the reference's headers carry it.
    pub(super) sealed_type: Py<PyBytes>,
    /// Threads that verify a batch's producer signatures ahead of its steps (`Core::preverify`).
    pub(super) verify_threads: usize,
}

#[pymethods]
impl NativeCore {
    /// `roles`: role -> agent_kind (the manifest); `known_schemas`: every
    /// (fingerprint, name) of the codec; `input_schemas`: the reference's
    /// `_INPUT_SCHEMAS`. The state starts as `initial_state(config, partition)`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (roles, signing_seed, audit_key, audit_key_id, seal_every, partition, signer_key_id, known_schemas, input_schemas, max_output_bytes = 2_080_768, checkpoint_every = 1000, accept_undeclared_sizes = false, seal_keys = Vec::new(), audit_keys = Vec::new(), producers = Vec::new(), submission_partitions = None, log_name = crate::tlog::DEFAULT_LOG_NAME.to_owned(), log_epoch = 1))]
    fn new(
        py: Python<'_>,
        roles: &Bound<'_, PyDict>,
        signing_seed: &[u8],
        audit_key: &[u8],
        audit_key_id: String,
        seal_every: i64,
        partition: i64,
        signer_key_id: String,
        known_schemas: Vec<(Vec<u8>, String)>,
        input_schemas: Vec<String>,
        max_output_bytes: usize,
        checkpoint_every: i64,
        accept_undeclared_sizes: bool,
        seal_keys: Vec<KeyEntry>,
        audit_keys: Vec<KeyEntry>,
        producers: Vec<ProducerEntry>,
        submission_partitions: Option<i64>,
        log_name: String,
        log_epoch: i64,
    ) -> PyResult<Self> {
        let core = build_core(
            roles,
            signing_seed,
            audit_key,
            audit_key_id,
            seal_every,
            partition,
            signer_key_id,
            known_schemas,
            input_schemas,
            max_output_bytes,
            checkpoint_every,
            accept_undeclared_sizes,
            seal_keys,
            audit_keys,
            producers,
            submission_partitions,
            log_name,
            log_epoch,
        )?;

        let pair = |name: &str, value: &[u8]| -> PyResult<Py<PyTuple>> {
            Ok(PyTuple::new(
                py,
                [
                    PyString::new(py, name).into_any(),
                    PyBytes::new(py, value).into_any(),
                ],
            )?
            .unbind())
        };
        let headers = Headers {
            spec: pair("ce_specversion", b"1.0")?,
            source: pair("ce_source", b"bernstein/scheduler")?,
            ce_types: CE_TYPES
                .iter()
                .map(|t| pair("ce_type", t.as_bytes()))
                .collect::<PyResult<_>>()?,
            ce_id: PyString::new(py, "ce_id").unbind(),
        };
        let streams = ["journal", "refusals", "audit", "deadletter", "checkpoints"]
            .iter()
            .map(|s| PyString::new(py, s).into_any().unbind())
            .collect();
        Ok(NativeCore {
            core,
            factory: Factory::Tuple,
            streams,
            headers,
            plan: Plan::default(),
            sealed_type: PyBytes::new(py, CE_TYPES[CeType::RunSealed as usize].as_bytes()).unbind(),
            verify_threads: crate::parallel::cores(),
        })
    }

    /// Outputs become `factory(stream, key, value, headers, timestamp_ms)` with
    /// `streams[i]` for journal, refusals, audit, deadletter, checkpoints (default: tuples and
    /// str). With `slots` (the five attribute names, in that order) `factory`
    /// must be a class whose instances are just those slots: they are then
    /// filled directly, as a frozen slots dataclass's `__init__` would.
    #[pyo3(signature = (factory, streams, slots = None))]
    fn set_output_factory(
        &mut self,
        py: Python<'_>,
        factory: Option<Bound<'_, PyAny>>,
        streams: Vec<Py<PyAny>>,
        slots: Option<Vec<String>>,
    ) -> PyResult<()> {
        if streams.len() != 5 {
            return Err(value_error(
                "streams must name journal, refusals, audit, deadletter and checkpoints".into(),
            ));
        }
        self.factory = match (factory, slots) {
            (None, _) => Factory::Tuple,
            (Some(f), None) => Factory::Call(f.unbind()),
            (Some(f), Some(names)) => {
                if names.len() != 5 {
                    return Err(value_error("slots must name the five output fields".into()));
                }
                let cls = f
                    .cast_into::<PyType>()
                    .map_err(|_| PyTypeError::new_err("a slots factory must be a class"))?;
                Factory::Slots(
                    cls.unbind(),
                    names
                        .iter()
                        .map(|n| PyString::intern(py, n).unbind())
                        .collect(),
                )
            }
        };
        self.streams = streams;
        Ok(())
    }

    /// `SchedulerCore.set_submission_partitions`: later inputs must sit on their key's partition of `partitions`.
    fn set_submission_partitions(&mut self, partitions: i64) -> PyResult<()> {
        check_partitions(Some(partitions))?;
        self.core.cfg.submission_partitions = Some(partitions);
        Ok(())
    }

    /// `initial_state(config, partition)`
    fn reset(&mut self, partition: i64) -> PyResult<()> {
        let partition = i32::try_from(partition)
            .map_err(|_| value_error(format!("partition {partition} does not fit an Avro int")))?;
        self.core.reset(partition);
        Ok(())
    }

    /// Replaces the whole state. `runs`: iterable of (run_id, head, entry_count,
    /// stages dict, evidence dict, closed, sealed_count, sessions list of
    /// (session_id, next_index, last_anchor, closed), submissions dict,
    /// evidence_bytes, blobs iterable of digests[, opened_by]).
    /// `checkpoint`: (checkpoint_seq, checkpoint_head, checkpoint_audit_seq),
    /// or None for the partition's checkpoint genesis. `tree`: the Merkle log's frontier
    /// (`Frontier.encode`), or None for the empty log.
    #[pyo3(signature = (partition, audit_seq, audit_head, runs, checkpoint = None, tree = None))]
    fn load_state(
        &mut self,
        partition: i64,
        audit_seq: i64,
        audit_head: String,
        runs: &Bound<'_, PyAny>,
        checkpoint: Option<(i64, String, i64)>,
        tree: Option<&[u8]>,
    ) -> PyResult<()> {
        let partition = i32::try_from(partition)
            .map_err(|_| value_error(format!("partition {partition} does not fit an Avro int")))?;
        let tree = match tree {
            Some(data) => Frontier::decode(data).map_err(value_error)?,
            None => Frontier::new(),
        };
        let hasher = self.core.cfg.hasher;
        let mut map = Map::with_hasher(hasher);
        for item in runs.try_iter()? {
            let item = item?;
            let t = item
                .cast::<PyTuple>()
                .map_err(|_| PyTypeError::new_err("each run must be a tuple"))?;
            if t.len() != 11 && t.len() != 12 {
                return Err(PyTypeError::new_err("each run must be an 11- or 12-tuple"));
            }
            let opened_by: String = if t.len() == 12 {
                t.get_item(11)?.extract()?
            } else {
                String::new()
            };
            let mut blobs = Set::with_hasher(hasher);
            for digest in t.get_item(10)?.try_iter()? {
                let digest: String = digest?.extract()?;
                blobs.insert(digest.into_boxed_str());
            }
            let run_id: String = t.get_item(0)?.extract()?;
            let run = RunState {
                head: t.get_item(1)?.extract()?,
                entry_count: t.get_item(2)?.extract()?,
                stages: str_map(&t.get_item(3)?, hasher, "stages")?,
                evidence: str_map(&t.get_item(4)?, hasher, "evidence")?,
                closed: t.get_item(5)?.extract()?,
                sealed_count: t.get_item(6)?.extract()?,
                sessions: sessions_from(t.get_item(7)?.extract()?),
                submissions: str_map(&t.get_item(8)?, hasher, "submissions")?,
                evidence_bytes: t.get_item(9)?.extract()?,
                blobs,
                opened_by: opened_by.into_boxed_str(),
            };
            map.insert(run_id.into_boxed_str(), run);
        }
        self.core.undo.clear();
        let open_runs = crate::core::count_open_runs(&map);
        self.core.state = State {
            open_runs,
            partition,
            audit: AuditChain {
                seq: audit_seq,
                head: audit_head,
            },
            runs: map,
            checkpoint: match checkpoint {
                Some((seq, head, audit_seq)) => CheckpointChain {
                    seq,
                    head,
                    audit_seq,
                },
                None => CheckpointChain::genesis(partition),
            },
            tree,
        };
        Ok(())
    }

    /// The whole state as (partition, audit_seq, audit_head, runs, checkpoint, tree) in `load_state`'s shape.
    fn export_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let s = &self.core.state;
        let runs = PyList::empty(py);
        for (run_id, run) in &s.runs {
            let item = (
                &**run_id,
                run.head.as_str(),
                run.entry_count,
                map_to_dict(py, &run.stages)?,
                map_to_dict(py, &run.evidence)?,
                run.closed,
                run.sealed_count,
                sessions_to(&run.sessions),
                map_to_dict(py, &run.submissions)?,
                run.evidence_bytes,
                run.blobs.iter().map(|d| &**d).collect::<Vec<&str>>(),
                &*run.opened_by,
            );
            runs.append(item)?;
        }
        PyTuple::new(
            py,
            [
                s.partition.into_pyobject(py)?.into_any(),
                s.audit.seq.into_pyobject(py)?.into_any(),
                PyString::new(py, &s.audit.head).into_any(),
                runs.into_any(),
                (
                    s.checkpoint.seq,
                    s.checkpoint.head.as_str(),
                    s.checkpoint.audit_seq,
                )
                    .into_pyobject(py)?
                    .into_any(),
                PyBytes::new(py, &s.tree.encode()).into_any(),
            ],
        )
    }

    /// For `bench.tlog`'s same-run baseline only: stop appending journal records to the
    /// partition's Merkle log (its checkpoints then sign a tree that is not the journal's).
    fn disable_merkle_log_for_benchmark(&mut self) {
        self.core.cfg.keep_log = false;
    }

    /// The partition's Merkle log: its frontier's bytes (`Frontier.encode`).
    fn tree_position<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.core.state.tree.encode())
    }

    /// Replaces the Merkle log (the reference's, after it stepped a record on the lazy view):
    /// `Frontier.encode`'s bytes; ValueError for anything else.
    fn set_tree(&mut self, tree: &[u8]) -> PyResult<()> {
        self.core.state.tree = Frontier::decode(tree).map_err(value_error)?;
        Ok(())
    }

    /// (checkpoint_seq, checkpoint_head, checkpoint_audit_seq)
    fn checkpoint_position(&self) -> (i64, String, i64) {
        let c = &self.core.state.checkpoint;
        (c.seq, c.head.clone(), c.audit_seq)
    }

    fn set_checkpoint(&mut self, seq: i64, head: String, audit_seq: i64) {
        self.core.state.checkpoint = CheckpointChain {
            seq,
            head,
            audit_seq,
        };
    }

    /// (partition, audit_seq, audit_head)
    fn audit_position(&self) -> (i32, i64, String) {
        let s = &self.core.state;
        (s.partition, s.audit.seq, s.audit.head.clone())
    }

    fn run_count(&self) -> usize {
        self.core.state.runs.len()
    }

    /// True when `digest` is counted in the run's evidence total (the lazy view's ``blobs``).
    fn blob_has(&self, run_id: &str, digest: &str) -> bool {
        self.core
            .state
            .runs
            .get(run_id)
            .is_some_and(|r| r.blobs.contains(digest))
    }

    /// The run's declared evidence bytes (0 for an unknown run).
    fn evidence_bytes(&self, run_id: &str) -> i64 {
        self.core
            .state
            .runs
            .get(run_id)
            .map_or(0, |r| r.evidence_bytes)
    }

    /// (head, entry_count, closed, sealed_count, sessions, opened_by) of a run, or None.
    fn run_header(&self, run_id: &str) -> Option<RunHeader> {
        self.core.state.runs.get(run_id).map(|r| {
            (
                r.head.clone(),
                r.entry_count,
                r.closed,
                r.sealed_count,
                sessions_to(&r.sessions),
                r.opened_by.to_string(),
            )
        })
    }

    /// `SchedulerState.open_runs`: producer -> its open runs.
    fn open_runs(&self) -> BTreeMap<String, i64> {
        self.core
            .state
            .open_runs
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect()
    }

    /// Replaces the open-run counts (the reference's, after it stepped a record on the lazy view).
    fn set_open_runs(&mut self, counts: BTreeMap<String, i64>) {
        self.core.state.open_runs = counts
            .into_iter()
            .map(|(k, v)| (k.into_boxed_str(), v))
            .collect();
    }

    fn stage_get(&self, run_id: &str, stage_id: &str) -> Option<String> {
        self.core
            .state
            .runs
            .get(run_id)
            .and_then(|r| r.stages.get(stage_id))
            .map(|v| v.to_string())
    }

    fn submission_get(&self, run_id: &str, submission_id: &str) -> Option<String> {
        self.core
            .state
            .runs
            .get(run_id)
            .and_then(|r| r.submissions.get(submission_id))
            .map(|v| v.to_string())
    }

    fn evidence_get(&self, run_id: &str, evidence_set_hash: &str) -> Option<String> {
        self.core
            .state
            .runs
            .get(run_id)
            .and_then(|r| r.evidence.get(evidence_set_hash))
            .map(|v| v.to_string())
    }

    /// (stages dict, evidence dict) of a run, or None.
    fn run_maps<'py>(
        &self,
        py: Python<'py>,
        run_id: &str,
    ) -> PyResult<Option<(Bound<'py, PyDict>, Bound<'py, PyDict>)>> {
        match self.core.state.runs.get(run_id) {
            None => Ok(None),
            Some(r) => Ok(Some((
                map_to_dict(py, &r.stages)?,
                map_to_dict(py, &r.evidence)?,
            ))),
        }
    }

    /// Writes back one run after the reference processed a record: scalars and
    /// sessions are replaced; `stages` / `evidence` / `submissions` either replace
    /// the map (`*_replace`) or are assignments applied in order.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (run_id, head, entry_count, closed, sealed_count, sessions, stages_replace, stages, evidence_replace, evidence, submissions_replace = false, submissions = Vec::new(), evidence_bytes = None, blobs_replace = false, blobs = Vec::new(), opened_by = None))]
    fn apply_run(
        &mut self,
        run_id: &str,
        head: String,
        entry_count: i64,
        closed: bool,
        sealed_count: i64,
        sessions: Vec<SessionTuple>,
        stages_replace: bool,
        stages: Vec<(String, String)>,
        evidence_replace: bool,
        evidence: Vec<(String, String)>,
        submissions_replace: bool,
        submissions: Vec<(String, String)>,
        evidence_bytes: Option<i64>,
        blobs_replace: bool,
        blobs: Vec<String>,
        opened_by: Option<String>,
    ) {
        let hasher = self.core.cfg.hasher;
        let runs = &mut self.core.state.runs;
        if self.core.undo.recording() {
            let change = match runs.get_full(run_id) {
                Some((index, _, run)) => Change::Replaced(index, Some(Box::new(run.clone()))),
                None => Change::Replaced(runs.len(), None),
            };
            self.core.undo.record(change);
        }
        if !runs.contains_key(run_id) {
            runs.insert(run_id.into(), RunState::empty(head.clone(), hasher));
        }
        let run = runs.get_mut(run_id).expect("inserted above");
        run.head = head;
        run.entry_count = entry_count;
        run.closed = closed;
        run.sealed_count = sealed_count;
        run.sessions = sessions_from(sessions);
        if stages_replace {
            run.stages = Map::with_hasher(hasher); // frees what a closed run dropped
        }
        for (k, v) in stages {
            run.stages.insert(k.into_boxed_str(), v.into_boxed_str());
        }
        if evidence_replace {
            run.evidence = Map::with_hasher(hasher); // frees what a closed run dropped
        }
        for (k, v) in evidence {
            run.evidence.insert(k.into_boxed_str(), v.into_boxed_str());
        }
        if submissions_replace {
            run.submissions = Map::with_hasher(hasher); // frees what a closed run dropped
        }
        for (k, v) in submissions {
            run.submissions
                .insert(k.into_boxed_str(), v.into_boxed_str());
        }
        if let Some(total) = evidence_bytes {
            run.evidence_bytes = total;
        }
        if blobs_replace {
            run.blobs = Set::with_hasher(hasher); // frees what a closed run dropped
        }
        for digest in blobs {
            run.blobs.insert(digest.into_boxed_str());
        }
        if let Some(producer) = opened_by {
            run.opened_by = producer.into_boxed_str();
        }
    }

    /// The state's canonical JSON (`consumers.core.snapshot.state_bytes`), for a snapshot.
    fn state_json<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &crate::state_json::state_json(&self.core.state))
    }

    /// Opens an undo epoch at the current state (`undo.rs`) and returns its id.
    fn undo_mark(&mut self) -> u64 {
        self.core.undo.mark(&self.core.state)
    }

    /// Forgets the undo epochs up to and including `through` (committed).
    fn undo_forget(&mut self, through: u64) {
        self.core.undo.forget(through);
    }

    /// The open undo epochs' ids, oldest first.
    fn undo_open(&self) -> Vec<u64> {
        self.core.undo.open()
    }

    /// Puts the state back as it was when epoch `to` was marked; False (nothing changed) when it is not open.
    fn undo_rewind(&mut self, to: u64) -> bool {
        self.core.undo.rewind(&mut self.core.state, to)
    }

    fn set_audit(&mut self, seq: i64, head: String) {
        self.core.state.audit = AuditChain { seq, head };
    }

    /// Runs the step over `records[start:]` (InputRecord objects or 6-tuples
    /// (topic, partition, offset, timestamp_ms, key, value)) and returns one
    /// list of outputs per record. It stops early at a record the native core
    /// does not reproduce: then the result is shorter than `records[start:]`
    /// and `records[start + len(result)]` must go to the reference (the state
    /// is exactly as after the records before it).
    #[pyo3(signature = (records, start = 0))]
    fn step_batch<'py>(
        &mut self,
        py: Python<'py>,
        records: &Bound<'py, PyAny>,
        start: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let list = records
            .cast::<PyList>()
            .map_err(|_| PyTypeError::new_err("records must be a list"))?;
        let result = PyList::empty(py);
        let n = list.len();
        let mut i = start;
        while i < n {
            match self.step_item(py, &list.get_item(i)?)? {
                Some(outputs) => result.append(outputs)?,
                None => break,
            }
            i += 1;
        }
        Ok(result)
    }

    /// One record: its list of outputs, or None when it must go to the reference.
    fn step_one<'py>(
        &mut self,
        py: Python<'py>,
        record: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        self.step_item(py, record)
    }

    /// `SchedulerCore.reject(state, record, code, detail)`: the outputs that
    /// dead-letter `record` with `code` and `detail`, or None when the record
    /// must go to the reference (the state is then untouched).
    fn reject<'py>(
        &mut self,
        py: Python<'py>,
        record: &Bound<'py, PyAny>,
        code: &str,
        detail: &str,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(rec) = read_input(record)? else {
            return Ok(None);
        };
        let Some(input) = rec.as_input() else {
            return Ok(None);
        };
        match self.core.reject(&input, code, detail) {
            Outcome::Done(outputs) => self.convert(py, &rec, &input, &outputs).map(Some),
            Outcome::Fallback(_) => Ok(None),
        }
    }

    // -- the shell's batch path (src/batch.rs) ------------------------------------

    /// Forgets the planned outputs: the start of a batch.
    fn plan_clear(&mut self) {
        self.plan.clear();
    }

    /// Steps `messages[start:]` (`confluent_kafka.Message` objects without an
    /// error, or anything with those methods) read from input partition
    /// `partition`, appending their outputs to the plan. Returns the index of
    /// the first message the native core hands back (the state is exactly as
    /// after the messages before it: run it through the reference, append its
    /// outputs with `plan_outputs`, and continue from the next index), or
    /// `len(messages)` when every message was planned.
    fn plan_messages(
        &mut self,
        py: Python<'_>,
        messages: &Bound<'_, PyList>,
        partition: i64,
        start: usize,
    ) -> PyResult<usize> {
        let result = self.plan_messages_inner(py, messages, partition, start);
        // the verdicts name signatures by their address in this batch's buffers: never keep them
        self.core.clear_presigned();
        result
    }

    /// How many threads verify a batch's producer signatures ahead of its steps (default: the
    /// machine's cores; 1 verifies them inside the steps, in order).
    fn set_verify_threads(&mut self, threads: usize) {
        self.verify_threads = threads.max(1);
    }

    /// Appends the reference's outputs of one record (a list of `OutputRecord`) to the plan.
    fn plan_outputs(&mut self, outputs: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = outputs.py();
        super::batch::push_foreign(
            &mut self.plan,
            &self.streams,
            self.sealed_type.bind(py).as_any(),
            outputs,
        )
    }

    /// The plan's refusals and dead letters by code: `([(code, count)], [(code, count)])`, in
    /// first-seen order (the code as written in each record; the shell's metrics).
    #[allow(clippy::type_complexity)]
    fn plan_codes(&self) -> (Vec<(String, u64)>, Vec<(String, u64)>) {
        (
            self.plan.codes.refused.clone(),
            self.plan.codes.dead_letters.clone(),
        )
    }

    /// Number of planned outputs, and how many of them were produced.
    fn plan_progress(&self) -> (usize, usize) {
        (self.plan.outputs.len(), self.plan.cursor)
    }

    /// Calls `produce(topic, value, key, partition, None, None, timestamp,
    /// headers)` for every planned output not produced yet, in order, with
    /// `topics[i]` for journal, refusals, audit, deadletter, checkpoints. Returns
    /// (journalled, seals, refused, dead_letters) of the whole plan, or None
    /// when `produce` raised BufferError (poll, then call again: it resumes at
    /// that output). Other exceptions propagate.
    fn produce_planned(
        &mut self,
        produce: &Bound<'_, PyAny>,
        topics: &Bound<'_, PyAny>,
        partition: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(u64, u64, u64, u64)>> {
        let pairs = HeaderPairs {
            spec: &self.headers.spec,
            source: &self.headers.source,
            ce_types: &self.headers.ce_types,
        };
        let done =
            super::batch::produce_planned(&mut self.plan, &pairs, produce, topics, partition)?;
        Ok(done.map(|t| (t.journalled, t.seals, t.refused, t.dead_letters)))
    }
}
