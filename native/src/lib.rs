//! `bernstein_native`: the scheduler's pure step function in Rust, for Python.
//!
//! `NativeCore` holds the configuration and the state of one input partition
//! and runs `consumers.core.step.SchedulerCore.step` over batches of records,
//! byte for byte. The pure logic lives in `core` (no Python there beyond the
//! `Host` trait); this file only converts between Python objects and it.
//! `consumers/core/native.py` is the adapter that gives it the Python core's
//! interface and runs the reference for the records `core` hands back.

mod alloc;
pub mod avro;
mod batch;
mod bindings;
pub mod blob_files;
pub mod core;
mod documents;
pub mod ed25519;
pub mod facts;
pub mod fold;
pub mod hashing;
mod parallel;
pub mod producers;
pub mod records;
pub mod schemas;
pub mod state_json;
pub mod text;
pub mod undo;
pub mod verify;

/// The step allocates a few dozen small strings and buffers per record; mimalloc serves
/// them faster than the system allocator (Python objects keep using Python's allocator).
/// Large transient buffers are mapped and reused instead (`alloc`): flat resident memory.
#[global_allocator]
static GLOBAL: alloc::Allocator = alloc::Allocator;

/// mimalloc v3's `mi_option_arena_eager_commit` (its `mi_option_e`; the Rust bindings name the v2 options).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Commit mimalloc's arenas page by page, as they are used. By default on Linux an arena is
/// committed whole, and with transparent huge pages the first allocations then cost several MiB
/// of resident memory at once, a step that lands in one process and not another. Still needed
/// beside `alloc`'s mapped large buffers: without it the verifier's growth was 10-12 MiB and
/// varied by up to 2.3 MiB between runs of 2,000 and 20,000 entries.
fn commit_arenas_lazily() {
    // SAFETY: sets a process-wide allocator option; reads and writes of options are atomic.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) };
}

use std::collections::{BTreeMap, HashMap};

use ed25519_dalek::{Signer as _, SigningKey};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple, PyType};

use crate::batch::{HeaderPairs, Plan};
use crate::core::{
    AuditChain, AuditKey, CeType, CheckpointChain, Config, Core, Host, Input, KeyedHasher, Map,
    NoHost, Outcome, RoleKind, RunState, SealKey, Session, Set, State, CE_TYPES, KINDS,
    MAX_DEAD_LETTER_RAW, MAX_DETAIL_CHARS, MAX_EVIDENCE_CHARS, MAX_INLINE_ARTIFACT_BYTES,
    MAX_KEPT_KEY_BYTES, MAX_KIND_LENGTH, MAX_LABEL_LENGTH, MAX_OBSERVATIONS, MAX_OCCURRED_AT_MS,
    MAX_REASON_CODE_LENGTH, MAX_REF_LENGTH, MAX_RUN_EVIDENCE_BYTES, TERMINAL_STATES,
};
use crate::hashing::AuditMac;
use crate::schemas::NATIVE_SCHEMAS;
use crate::undo::{Change, UndoLog};

/// Python's `repr()` for the strings the pure core cannot print itself.
struct PyHost<'py> {
    py: Python<'py>,
}

impl Host for PyHost<'_> {
    fn repr_non_ascii(&mut self, s: &str) -> Option<String> {
        let repr = PyString::new(self.py, s).repr().ok()?;
        repr.to_str().ok().map(str::to_owned)
    }
}

type SessionTuple = (String, i128, String, bool);
/// A key of a ring: (seed or secret, key id, valid_from_ms, valid_until_ms).
type KeyEntry = (Vec<u8>, String, i64, Option<i64>);
/// A registered producer: (name, roles, [(key id, raw public key, valid_from_ms, valid_until_ms)],
/// run prefixes, collaborators, max open runs).
type ProducerEntry = (
    String,
    Vec<String>,
    Vec<(String, Vec<u8>, i64, Option<i64>)>,
    Vec<String>,
    Vec<String>,
    i64,
);
type RunHeader = (String, i64, bool, i64, Vec<SessionTuple>, String);

struct Headers {
    spec: Py<PyTuple>,
    source: Py<PyTuple>,
    ce_types: Vec<Py<PyTuple>>,
    ce_id: Py<PyString>,
}

/// How an output becomes a Python object.
enum Factory {
    /// `(stream, key, value, headers, timestamp_ms)`
    Tuple,
    /// `factory(stream, key, value, headers, timestamp_ms)`
    Call(Py<PyAny>),
    /// `cls.__new__(cls)` then `object.__setattr__` of the five slots in order:
    /// what a frozen slots dataclass's generated `__init__` does, without the
    /// interpreter (the adapter only asks for it when that is all `__init__` does).
    Slots(Py<PyType>, Vec<Py<PyString>>),
}

/// The scheduler core of one input partition: configuration plus state.
#[pyclass(module = "bernstein_native")]
struct NativeCore {
    core: Core,
    factory: Factory,
    streams: Vec<Py<PyAny>>,
    headers: Headers,
    /// The shell's batch: outputs waiting for `produce_planned` (see `batch`).
    plan: Plan,
    /// `ce_type` of a seal, as the reference's headers carry it.
    sealed_type: Py<PyBytes>,
    /// Threads that verify a batch's producer signatures ahead of its steps (`Core::preverify`).
    verify_threads: usize,
}

fn build_slots<'py>(
    py: Python<'py>,
    cls: &Py<PyType>,
    names: &[Py<PyString>],
    values: [Bound<'py, PyAny>; 5],
) -> PyResult<Bound<'py, PyAny>> {
    let empty = PyTuple::empty(py);
    // SAFETY: PyType_GenericNew returns a new reference (or NULL with an exception
    // set); GenericSetAttr borrows its arguments. `cls` is a type object.
    unsafe {
        let raw = pyo3::ffi::PyType_GenericNew(
            cls.as_ptr().cast::<pyo3::ffi::PyTypeObject>(),
            empty.as_ptr(),
            std::ptr::null_mut(),
        );
        if raw.is_null() {
            return Err(PyErr::fetch(py));
        }
        let obj = Bound::from_owned_ptr(py, raw);
        for (name, value) in names.iter().zip(values.iter()) {
            if pyo3::ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr()) < 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(obj)
    }
}

fn value_error(message: String) -> PyErr {
    PyValueError::new_err(message)
}

fn sessions_from(items: Vec<SessionTuple>) -> Vec<(String, Session)> {
    items
        .into_iter()
        .map(|(id, next_index, last_anchor, closed)| {
            (
                id,
                Session {
                    next_index,
                    last_anchor,
                    closed,
                },
            )
        })
        .collect()
}

fn sessions_to(sessions: &[(String, Session)]) -> Vec<SessionTuple> {
    sessions
        .iter()
        .map(|(id, s)| (id.clone(), s.next_index, s.last_anchor.clone(), s.closed))
        .collect()
}

fn str_map(
    dict: &Bound<'_, PyAny>,
    hasher: KeyedHasher,
    what: &str,
) -> PyResult<Map<Box<str>, Box<str>>> {
    let dict = dict
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a dict")))?;
    let mut map = Map::with_capacity_and_hasher(dict.len(), hasher);
    for (k, v) in dict.iter() {
        let k: String = k.extract()?;
        let v: String = v.extract()?;
        map.insert(k.into_boxed_str(), v.into_boxed_str());
    }
    Ok(map)
}

fn map_to_dict<'py>(
    py: Python<'py>,
    map: &Map<Box<str>, Box<str>>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (k, v) in map {
        dict.set_item(&**k, &**v)?;
    }
    Ok(dict)
}

/// The fields of one input record, or None when it is not the plain shape
/// (exact str topic, exact ints, bytes or None key and value) the native core
/// reads; such records go to the reference.
pub(crate) struct PyInput<'py> {
    pub topic: Bound<'py, PyString>,
    pub partition: i64,
    pub offset: i64,
    pub timestamp_ms: i64,
    /// The timestamp as the object the outputs carry (and `produce` is given).
    pub timestamp_obj: Bound<'py, PyAny>,
    pub key: Option<Bound<'py, PyBytes>>,
    pub value: Option<Bound<'py, PyBytes>>,
}

impl PyInput<'_> {
    /// The core's view of the record; None when the topic is not valid UTF-8
    /// (such a record goes to the reference).
    pub fn as_input(&self) -> Option<Input<'_>> {
        Some(Input {
            topic: self.topic.to_str().ok()?,
            partition: self.partition,
            offset: self.offset,
            timestamp_ms: self.timestamp_ms,
            key: self.key.as_ref().map(|b| b.as_bytes()),
            value: self.value.as_ref().map(|b| b.as_bytes()),
        })
    }
}

pub(crate) fn exact_int(obj: &Bound<'_, PyAny>) -> Option<i64> {
    if obj.is_exact_instance_of::<PyInt>() {
        obj.extract::<i64>().ok()
    } else {
        None
    }
}

pub(crate) fn opt_bytes<'py>(obj: Bound<'py, PyAny>) -> Option<Option<Bound<'py, PyBytes>>> {
    if obj.is_none() {
        Some(None)
    } else if obj.is_exact_instance_of::<PyBytes>() {
        obj.cast_into::<PyBytes>().ok().map(Some)
    } else {
        None
    }
}

fn read_input<'py>(item: &Bound<'py, PyAny>) -> PyResult<Option<PyInput<'py>>> {
    let fields: [Bound<'py, PyAny>; 6] = if let Ok(t) = item.cast::<PyTuple>() {
        if t.len() != 6 {
            return Ok(None);
        }
        [
            t.get_item(0)?,
            t.get_item(1)?,
            t.get_item(2)?,
            t.get_item(3)?,
            t.get_item(4)?,
            t.get_item(5)?,
        ]
    } else {
        let py = item.py();
        let get = |name: &Bound<'py, PyString>| item.getattr(name);
        match (
            get(pyo3::intern!(py, "topic")),
            get(pyo3::intern!(py, "partition")),
            get(pyo3::intern!(py, "offset")),
            get(pyo3::intern!(py, "timestamp_ms")),
            get(pyo3::intern!(py, "key")),
            get(pyo3::intern!(py, "value")),
        ) {
            (Ok(a), Ok(b), Ok(c), Ok(d), Ok(e), Ok(f)) => [a, b, c, d, e, f],
            _ => return Ok(None),
        }
    };
    let [topic, partition, offset, timestamp, key, value] = fields;
    if !topic.is_exact_instance_of::<PyString>() {
        return Ok(None);
    }
    let (Some(partition), Some(offset), Some(timestamp_ms)) = (
        exact_int(&partition),
        exact_int(&offset),
        exact_int(&timestamp),
    ) else {
        return Ok(None);
    };
    let (Some(key), Some(value)) = (opt_bytes(key), opt_bytes(value)) else {
        return Ok(None);
    };
    let Ok(topic) = topic.cast_into::<PyString>() else {
        return Ok(None);
    };
    Ok(Some(PyInput {
        topic,
        partition,
        offset,
        timestamp_ms,
        timestamp_obj: timestamp,
        key,
        value,
    }))
}

/// `step._check_partitions`: a partition count is at least 1.
fn check_partitions(partitions: Option<i64>) -> PyResult<()> {
    match partitions {
        Some(n) if n < 1 => Err(value_error(format!(
            "submission_partitions must be None or at least 1, not {n}"
        ))),
        _ => Ok(()),
    }
}

#[pymethods]
impl NativeCore {
    /// `roles`: role -> agent_kind (the manifest); `known_schemas`: every
    /// (fingerprint, name) of the codec; `input_schemas`: the reference's
    /// `_INPUT_SCHEMAS`. The state starts as `initial_state(config, partition)`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (roles, signing_seed, audit_key, audit_key_id, seal_every, partition, signer_key_id, known_schemas, input_schemas, max_output_bytes = 2_080_768, checkpoint_every = 1000, accept_undeclared_sizes = false, seal_keys = Vec::new(), audit_keys = Vec::new(), producers = Vec::new(), submission_partitions = None))]
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
    ) -> PyResult<Self> {
        let seed: [u8; 32] = signing_seed.try_into().map_err(|_| {
            value_error(format!(
                "an Ed25519 seed has 32 bytes, got {}",
                signing_seed.len()
            ))
        })?;
        if seal_every < 1 {
            return Err(value_error("seal_every must be at least 1".into()));
        }
        if !(1..=1000).contains(&checkpoint_every) {
            return Err(value_error("checkpoint_every must be 1 to 1000".into()));
        }
        check_partitions(submission_partitions)?;
        if max_output_bytes < 64 * 1024 {
            return Err(value_error(
                "max_output_bytes must be at least 65536".into(),
            ));
        }
        let partition = i32::try_from(partition)
            .map_err(|_| value_error(format!("partition {partition} does not fit an Avro int")))?;
        let mut known = Vec::with_capacity(known_schemas.len());
        for (fp, name) in known_schemas {
            let fp: [u8; 8] = fp
                .as_slice()
                .try_into()
                .map_err(|_| value_error(format!("fingerprint of {name} is not 8 bytes")))?;
            known.push((fp, name));
        }
        for (name, fp) in NATIVE_SCHEMAS {
            match known.iter().find(|(_, n)| n == name) {
                Some((f, _)) if *f == fp => {}
                Some((f, _)) => {
                    return Err(value_error(format!(
                        "schema {name} has fingerprint {} in the codec but {} in bernstein_native: the native encoders need updating",
                        hashing::hex_string(f),
                        hashing::hex_string(&fp)
                    )))
                }
                None => return Err(value_error(format!("the codec has no schema {name}"))),
            }
        }
        let mut sorted_inputs = input_schemas.clone();
        sorted_inputs.sort();
        let audit = AuditMac::new(audit_key);
        let hasher = KeyedHasher::from_seed(audit.raw(b"bernstein/native-table-keys/v1"));
        let mut role_map = HashMap::with_hasher(hasher);
        for (k, v) in roles.iter() {
            let k = k
                .cast_into::<PyString>()
                .map_err(|_| PyTypeError::new_err("roles must map str to str"))?;
            if v.is_none() {
                continue; // config.roles.get(role) is None: an unknown role
            }
            let repr = v.repr()?.to_str()?.to_owned();
            let (text, clip_source) = match v.cast::<PyString>() {
                Ok(s) => {
                    let s = s.to_str()?.to_owned();
                    (Some(s.clone()), s)
                }
                Err(_) => (None, repr.clone()),
            };
            role_map.insert(
                k.to_str()?.to_owned(),
                RoleKind {
                    text,
                    clip_source,
                    repr,
                },
            );
        }
        let seal_ring = if seal_keys.is_empty() {
            vec![SealKey {
                signing_key: SigningKey::from_bytes(&seed),
                key_id: signer_key_id,
                valid_from_ms: 0,
                valid_until_ms: None,
            }]
        } else {
            seal_keys
                .into_iter()
                .map(|(seed, key_id, from, until)| {
                    let seed: [u8; 32] = seed.as_slice().try_into().map_err(|_| {
                        value_error(format!("the seed of seal key {key_id} is not 32 bytes"))
                    })?;
                    Ok(SealKey {
                        signing_key: SigningKey::from_bytes(&seed),
                        key_id,
                        valid_from_ms: from,
                        valid_until_ms: until,
                    })
                })
                .collect::<PyResult<Vec<_>>>()?
        };
        let audit_ring = if audit_keys.is_empty() {
            vec![AuditKey {
                mac: audit.clone(),
                key_id: audit_key_id,
                valid_from_ms: 0,
                valid_until_ms: None,
            }]
        } else {
            audit_keys
                .into_iter()
                .map(|(secret, key_id, from, until)| AuditKey {
                    mac: AuditMac::new(&secret),
                    key_id,
                    valid_from_ms: from,
                    valid_until_ms: until,
                })
                .collect()
        };
        let mut registered = Vec::with_capacity(producers.len());
        let mut producer_keys = HashMap::with_hasher(hasher);
        for (index, (name, mut granted, keys, run_prefixes, collaborators, max_open_runs)) in
            producers.into_iter().enumerate()
        {
            granted.sort();
            for (key_id, public, from, until) in keys {
                let key = crate::ed25519::PublicKey::from_bytes(public.as_slice());
                let entry = crate::producers::ProducerKey {
                    producer: index,
                    key,
                    valid_from_ms: from,
                    valid_until_ms: until,
                };
                if producer_keys.insert(key_id.clone(), entry).is_some() {
                    return Err(value_error(format!("key {key_id} is registered twice")));
                }
            }
            registered.push(crate::producers::Producer {
                name,
                roles: granted,
                run_prefixes,
                collaborators,
                max_open_runs,
            });
        }
        let cfg = Config {
            roles: role_map,
            seal_keys: seal_ring,
            audit,
            audit_keys: audit_ring,
            producers: registered,
            producer_keys,
            seal_every,
            checkpoint_every,
            max_output_bytes,
            accept_undeclared_sizes,
            submission_partitions,
            known,
            expected: input_schemas,
            expected_joined: sorted_inputs.join(", "),
            hasher,
        };
        let state = State {
            partition,
            audit: AuditChain {
                seq: 0,
                head: String::new(),
            },
            runs: Map::with_hasher(hasher),
            checkpoint: CheckpointChain::genesis(partition),
            open_runs: BTreeMap::new(),
        };
        let mut core = Core {
            cfg,
            state,
            final_sealed: false,
            presigned: HashMap::with_hasher(hasher),
            undo: UndoLog::default(),
        };
        core.reset(partition);

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
    /// or None for the partition's checkpoint genesis.
    #[pyo3(signature = (partition, audit_seq, audit_head, runs, checkpoint = None))]
    fn load_state(
        &mut self,
        partition: i64,
        audit_seq: i64,
        audit_head: String,
        runs: &Bound<'_, PyAny>,
        checkpoint: Option<(i64, String, i64)>,
    ) -> PyResult<()> {
        let partition = i32::try_from(partition)
            .map_err(|_| value_error(format!("partition {partition} does not fit an Avro int")))?;
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
        };
        Ok(())
    }

    /// The whole state as (partition, audit_seq, audit_head, runs, checkpoint) in `load_state`'s shape.
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
            ],
        )
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
        PyBytes::new(py, &state_json::state_json(&self.core.state))
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
        batch::push_foreign(
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
        let done = batch::produce_planned(&mut self.plan, &pairs, produce, topics, partition)?;
        Ok(done.map(|t| (t.journalled, t.seals, t.refused, t.dead_letters)))
    }
}

impl NativeCore {
    fn plan_messages_inner(
        &mut self,
        py: Python<'_>,
        messages: &Bound<'_, PyList>,
        partition: i64,
        start: usize,
    ) -> PyResult<usize> {
        let n = messages.len();
        // 1. Read the messages (with the interpreter), up to one of an unusual shape.
        let mut fields = Vec::with_capacity(n.saturating_sub(start));
        let mut read_up_to = n;
        for i in start..n {
            match batch::read_message(&messages.get_item(i)?, partition)? {
                Some(m) if m.as_input().is_some() => fields.push(m),
                _ => {
                    read_up_to = i;
                    break;
                }
            }
        }
        let inputs: Vec<Input<'_>> = fields.iter().filter_map(PyInput::as_input).collect();
        // 2a. Verify the batch's producer signatures on every core, still without the GIL (the
        // verdicts are the steps' own checks, done ahead; cleared before the inputs go away).
        {
            let core = &mut self.core;
            let threads = self.verify_threads;
            let batch = &inputs[..];
            py.detach(move || core.preverify(batch, threads));
        }
        // 2. Step them without holding the GIL, so that the thread committing the
        // previous batch is not held up; then turn the outputs into what produce takes.
        let mut done = 0;
        while done < inputs.len() {
            let core = &mut self.core;
            let rest = &inputs[done..];
            let (results, stopped) = py.detach(move || {
                let mut results = Vec::with_capacity(rest.len());
                for input in rest {
                    match core.step(input, &mut NoHost) {
                        Outcome::Done(outputs) => results.push(outputs),
                        Outcome::Fallback(_) => return (results, true),
                    }
                }
                (results, false)
            });
            for outputs in &results {
                self.plan.push_native(
                    py,
                    outputs,
                    &inputs[done],
                    &fields[done].timestamp_obj,
                    &self.headers.ce_id,
                );
                done += 1;
            }
            if stopped {
                // A fallback leaves the state untouched: try again with the interpreter at
                // hand (repr of non-ASCII text); what still falls back goes to the reference.
                let mut host = PyHost { py };
                let Outcome::Done(outputs) = self.core.step(&inputs[done], &mut host) else {
                    return Ok(start + done);
                };
                self.plan.push_native(
                    py,
                    &outputs,
                    &inputs[done],
                    &fields[done].timestamp_obj,
                    &self.headers.ce_id,
                );
                done += 1;
            }
        }
        if read_up_to < n {
            return Ok(read_up_to);
        }
        self.plan.complete = true;
        Ok(n)
    }
}

/// True when no message of the list has an error (`message.error() is None` for each).
#[pyfunction]
fn messages_ok(messages: &Bound<'_, PyList>) -> PyResult<bool> {
    let py = messages.py();
    for message in messages.iter() {
        if !message.call_method0(pyo3::intern!(py, "error"))?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

impl NativeCore {
    fn step_item<'py>(
        &mut self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(rec) = read_input(item)? else {
            return Ok(None);
        };
        let Some(input) = rec.as_input() else {
            return Ok(None);
        };
        let mut host = PyHost { py };
        let outputs = match self.core.step(&input, &mut host) {
            Outcome::Done(outputs) => outputs,
            Outcome::Fallback(_) => return Ok(None),
        };
        self.convert(py, &rec, &input, &outputs).map(Some)
    }

    /// The core's outputs of one record as the configured Python objects.
    fn convert<'py>(
        &self,
        py: Python<'py>,
        rec: &PyInput<'py>,
        input: &Input<'_>,
        outputs: &[core::Output<'_>],
    ) -> PyResult<Bound<'py, PyList>> {
        let converted = PyList::empty(py);
        let prefix = format!("{}:{}:{}:", input.topic, input.partition, input.offset);
        for (index, o) in outputs.iter().enumerate() {
            let ce_id = format!("{prefix}{index}");
            let ce_id = batch::ce_id_pair(py, &self.headers.ce_id, ce_id.as_bytes());
            let headers = PyTuple::new(
                py,
                [
                    self.headers.spec.bind(py).clone().into_any(),
                    ce_id.into_any(),
                    self.headers.source.bind(py).clone().into_any(),
                    self.headers.ce_types[o.ce_type as usize]
                        .bind(py)
                        .clone()
                        .into_any(),
                ],
            )?;
            bindings::untrack(&headers);
            let stream = self.streams[o.stream as usize].bind(py).clone();
            let key = PyBytes::new(py, &o.key).into_any();
            let value = PyBytes::new(py, &o.value).into_any();
            let ts = rec.timestamp_obj.clone();
            let out = match &self.factory {
                Factory::Tuple => {
                    PyTuple::new(py, [stream, key, value, headers.into_any(), ts])?.into_any()
                }
                Factory::Call(f) => f.bind(py).call1((stream, key, value, headers, ts))?,
                Factory::Slots(cls, names) => {
                    build_slots(py, cls, names, [stream, key, value, headers.into_any(), ts])?
                }
            };
            converted.append(out)?;
        }
        Ok(converted)
    }
}

// ---------------------------------------------------------------------------
// module-level functions: the primitives, for the golden-vector tests
// ---------------------------------------------------------------------------

#[pyfunction]
fn sha256_digest(data: &[u8]) -> String {
    hashing::sha256_digest(data)
}

#[pyfunction]
fn pae<'py>(py: Python<'py>, payload_type: &str, body: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &hashing::pae(payload_type, body))
}

#[pyfunction]
fn journal_genesis(run_id: &str) -> String {
    hashing::journal_genesis(run_id)
}

#[pyfunction]
fn journal_entry_hash(payload: &[u8]) -> String {
    hashing::journal_entry_hash(payload)
}

#[pyfunction]
fn audit_genesis(key: &[u8], partition: i64) -> String {
    AuditMac::new(key).audit_genesis(partition)
}

#[pyfunction]
fn audit_mac(key: &[u8], payload: &[u8]) -> String {
    AuditMac::new(key).audit_mac(payload)
}

#[pyfunction]
fn audit_record_mac(key: &[u8], key_id: &str, payload: &[u8]) -> String {
    AuditMac::new(key).audit_record_mac(key_id, payload)
}

#[pyfunction]
fn checkpoint_genesis(partition: i64) -> String {
    hashing::checkpoint_genesis(partition)
}

#[pyfunction]
fn checkpoint_hash(payload: &[u8]) -> String {
    hashing::checkpoint_hash(payload)
}

/// Like `schemas.canonical.evidence_set_hash`, for well-formed members only.
#[pyfunction]
fn evidence_set_hash(members: Vec<String>) -> PyResult<String> {
    if let Some(bad) = members.iter().find(|m| !text::is_digest(m)) {
        return Err(value_error(format!("not a digest: {bad:?}")));
    }
    Ok(hashing::evidence_set_hash_of_digests(
        members.iter().map(String::as_str),
    ))
}

#[pyfunction]
fn ed25519_sign<'py>(py: Python<'py>, seed: &[u8], data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let seed: [u8; 32] = seed
        .try_into()
        .map_err(|_| value_error("an Ed25519 seed has 32 bytes".into()))?;
    Ok(PyBytes::new(
        py,
        &SigningKey::from_bytes(&seed).sign(data).to_bytes(),
    ))
}

#[pyfunction]
fn ed25519_public_key<'py>(py: Python<'py>, seed: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let seed: [u8; 32] = seed
        .try_into()
        .map_err(|_| value_error("an Ed25519 seed has 32 bytes".into()))?;
    Ok(PyBytes::new(
        py,
        &SigningKey::from_bytes(&seed).verifying_key().to_bytes(),
    ))
}

/// ZIP 215 verification (`ed25519.rs`): the rule `schemas.ed25519` is the reference of.
#[pyfunction]
fn ed25519_verify(py: Python<'_>, public: &[u8], signature: &[u8], message: &[u8]) -> bool {
    py.detach(|| {
        ed25519::PublicKey::from_bytes(public).is_some_and(|key| key.verifies(signature, message))
    })
}

/// `[(public, signature, message)]` verified many to one equation (`ed25519::verify_each`), in order.
#[pyfunction]
fn ed25519_verify_many(py: Python<'_>, items: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>) -> Vec<bool> {
    py.detach(|| {
        let keys = ed25519_keys(&items);
        ed25519::verify_each(&ed25519_items(&items, &keys))
    })
}

/// Test hook: whether one batch equation holds over all of `items` (False when a key names no point).
#[pyfunction]
fn ed25519_batch_equation(py: Python<'_>, items: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>) -> bool {
    py.detach(|| {
        let keys = ed25519_keys(&items);
        let batch: Option<Vec<ed25519::Item<'_>>> =
            ed25519_items(&items, &keys).into_iter().collect();
        batch.is_some_and(|batch| ed25519::batch_holds(&batch))
    })
}

fn ed25519_keys(items: &[(Vec<u8>, Vec<u8>, Vec<u8>)]) -> Vec<Option<ed25519::PublicKey>> {
    items
        .iter()
        .map(|(public, _, _)| ed25519::PublicKey::from_bytes(public))
        .collect()
}

/// Each item with its decoded key (None: the key names no point).
fn ed25519_items<'a>(
    items: &'a [(Vec<u8>, Vec<u8>, Vec<u8>)],
    keys: &'a [Option<ed25519::PublicKey>],
) -> Vec<Option<ed25519::Item<'a>>> {
    items
        .iter()
        .zip(keys)
        .map(|((_, signature, message), key)| {
            Some(ed25519::Item {
                key: key.as_ref()?,
                signature,
                message,
            })
        })
        .collect()
}

// test hooks for the Python-semantics string helpers

#[pyfunction]
fn py_isspace_chars() -> Vec<u32> {
    (0..=0x10FFFFu32)
        .filter_map(char::from_u32)
        .filter(|&c| text::py_isspace(c))
        .map(u32::from)
        .collect()
}

#[pyfunction]
fn repr_ascii(s: &str) -> Option<String> {
    text::repr_ascii(s)
}

#[pyfunction]
fn clip_text(s: &str, limit: usize) -> String {
    text::clip(s, limit).into_owned()
}

#[pyfunction]
fn is_valid_id(s: &str) -> bool {
    text::is_valid_id(s)
}

#[pyfunction]
fn is_digest(s: &str) -> bool {
    text::is_digest(s)
}

#[pymodule]
fn bernstein_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    commit_arenas_lazily();
    let py = m.py();
    m.add_class::<NativeCore>()?;
    for f in [
        wrap_pyfunction!(sha256_digest, m)?,
        wrap_pyfunction!(pae, m)?,
        wrap_pyfunction!(journal_genesis, m)?,
        wrap_pyfunction!(journal_entry_hash, m)?,
        wrap_pyfunction!(audit_genesis, m)?,
        wrap_pyfunction!(audit_mac, m)?,
        wrap_pyfunction!(audit_record_mac, m)?,
        wrap_pyfunction!(checkpoint_genesis, m)?,
        wrap_pyfunction!(checkpoint_hash, m)?,
        wrap_pyfunction!(evidence_set_hash, m)?,
        wrap_pyfunction!(ed25519_sign, m)?,
        wrap_pyfunction!(ed25519_public_key, m)?,
        wrap_pyfunction!(ed25519_verify, m)?,
        wrap_pyfunction!(ed25519_verify_many, m)?,
        wrap_pyfunction!(ed25519_batch_equation, m)?,
        wrap_pyfunction!(py_isspace_chars, m)?,
        wrap_pyfunction!(repr_ascii, m)?,
        wrap_pyfunction!(clip_text, m)?,
        wrap_pyfunction!(is_valid_id, m)?,
        wrap_pyfunction!(is_digest, m)?,
        wrap_pyfunction!(messages_ok, m)?,
    ] {
        m.add_function(f)?;
    }
    let schemas = PyList::empty(py);
    for (name, fp) in NATIVE_SCHEMAS {
        schemas.append((name, PyBytes::new(py, &fp)))?;
    }
    m.add("NATIVE_SCHEMAS", schemas)?;
    let constants = PyDict::new(py);
    constants.set_item("KINDS", KINDS.to_vec())?;
    constants.set_item("TERMINAL_STATES", TERMINAL_STATES.to_vec())?;
    constants.set_item("MAX_INLINE_ARTIFACT_BYTES", MAX_INLINE_ARTIFACT_BYTES)?;
    constants.set_item("MAX_OBSERVATIONS", MAX_OBSERVATIONS)?;
    constants.set_item("MAX_REF_LENGTH", MAX_REF_LENGTH)?;
    constants.set_item("MAX_REASON_CODE_LENGTH", MAX_REASON_CODE_LENGTH)?;
    constants.set_item("MAX_KIND_LENGTH", MAX_KIND_LENGTH)?;
    constants.set_item("MAX_EVIDENCE_CHARS", MAX_EVIDENCE_CHARS)?;
    constants.set_item("MAX_DEAD_LETTER_RAW", MAX_DEAD_LETTER_RAW)?;
    constants.set_item("MAX_DETAIL_CHARS", MAX_DETAIL_CHARS)?;
    constants.set_item("MAX_LABEL_LENGTH", MAX_LABEL_LENGTH)?;
    constants.set_item("MAX_OCCURRED_AT_MS", MAX_OCCURRED_AT_MS)?;
    constants.set_item("MAX_KEPT_KEY_BYTES", MAX_KEPT_KEY_BYTES)?;
    constants.set_item("MAX_RUN_EVIDENCE_BYTES", MAX_RUN_EVIDENCE_BYTES)?;
    constants.set_item("CE_TYPES", CE_TYPES.to_vec())?;
    m.add("CONSTANTS", constants)?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    bindings::verify_facts::register(m)?;
    bindings::register_facts(m)?;
    bindings::fold::register(m)?;
    bindings::walk::register(m)?;
    Ok(())
}
