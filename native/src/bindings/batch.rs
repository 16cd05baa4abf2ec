//! The shell's batch path: step a consumer batch of `confluent_kafka.Message`
//! objects and produce their outputs, without a Python object per output.
//!
//! `NativeCore::plan_messages` reads each message (`topic()`, `offset()`,
//! `timestamp()`, `key()`, `value()`), runs the step and keeps the outputs
//! here, as the bytes objects and header pairs `produce` is given; it stops at
//! a record the native core hands back, which the adapter runs through the
//! reference and appends with `plan_outputs`, in order. Once the previous
//! transaction committed, `produce_planned` calls the producer's bound
//! `produce` once per output, positionally
//! (`topic, value, key, partition, None, None, timestamp, headers`), with one
//! header list reused from call to call (librdkafka copies the headers during
//! the call; a callee that keeps the list gets a fresh one for the next call).
//! A `BufferError` stops it at that output, so that the caller can poll and
//! call again; any other exception propagates, and the next batch discards the plan.
//! The shell then aborts the transaction. A produce error about one record
//! (`MSG_SIZE_TOO_LARGE`, ...) or any failure that is not Kafka's (a panic
//! here is a `BaseException`) makes it redo that batch with the Python
//! reference, which knows which input each output belongs to and dead-letters
//! the one Kafka refused (`consumers/shell/produce.py`).
//!
//! What is produced is exactly what the shell's Python loop produced from the
//! `OutputRecord`s of `step`: the same topic, value, key, partition, timestamp
//! and headers (`list(out.headers)`), in the same order.

use std::fmt::Write as _;

use pyo3::exceptions::{PyBufferError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString, PyTuple};

use super::core_io::{exact_int, opt_bytes, PyInput};
use crate::avro::Reader;
use crate::core::{CeType, Input, Output, Stream};
use crate::schemas::HEADER_SIZE;

/// What `produce` is given for one output, besides the topic and partition.
pub(crate) struct Planned {
    /// `Stream as usize`: the index into the caller's topics.
    pub stream: usize,
    pub key: Py<PyAny>,
    pub value: Py<PyAny>,
    pub timestamp: Py<PyAny>,
    pub headers: PlannedHeaders,
}

pub(crate) enum PlannedHeaders {
    /// The native core's four CloudEvents headers: only `ce_id` and `ce_type` vary.
    Native { ce_id: Py<PyTuple>, ce_type: CeType },
    /// The reference's `OutputRecord.headers`, given as `list(headers)`.
    Foreign(Py<PyAny>),
}

/// The counters the shell keeps per batch: journalled, seals, refused, dead letters.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Tallies {
    pub journalled: u64,
    pub seals: u64,
    pub refused: u64,
    pub dead_letters: u64,
}

impl Tallies {
    pub fn count(&mut self, stream: Stream, sealed: bool) {
        match stream {
            Stream::Journal if sealed => self.seals += 1,
            Stream::Journal => self.journalled += 1,
            Stream::Refusals => self.refused += 1,
            Stream::Deadletter => self.dead_letters += 1,
            Stream::Audit | Stream::Checkpoints => {}
        }
    }
}

/// The refusals and dead letters of one plan by code, for the shell's metrics (`plan_codes`).
///
/// The code is read back from the record's value, as it is written: a refusal's second
/// string (after `exception`), a dead letter's first. Reading it changes no output.
#[derive(Default, Debug)]
pub(crate) struct Codes {
    pub refused: Vec<(String, u64)>,
    pub dead_letters: Vec<(String, u64)>,
}

impl Codes {
    pub fn count(&mut self, stream: Stream, value: &[u8]) {
        let (list, skip) = match stream {
            Stream::Refusals => (&mut self.refused, 1),
            Stream::Deadletter => (&mut self.dead_letters, 0),
            _ => return,
        };
        let code = code_of(value, skip).unwrap_or("UNKNOWN");
        match list.iter_mut().find(|(c, _)| c == code) {
            Some(entry) => entry.1 += 1,
            None => list.push((code.to_owned(), 1)),
        }
    }

    pub fn clear(&mut self) {
        self.refused.clear();
        self.dead_letters.clear();
    }
}

/// The string after `skip` strings of a single-object-encoded record's body.
fn code_of(value: &[u8], skip: usize) -> Option<&str> {
    let mut reader = Reader::new(value.get(HEADER_SIZE..)?);
    for _ in 0..skip {
        reader.string().ok()?;
    }
    reader.string().ok()
}

/// One batch's outputs, in produce order, and how far `produce_planned` got.
#[derive(Default)]
pub(crate) struct Plan {
    pub outputs: Vec<Planned>,
    pub cursor: usize,
    pub tallies: Tallies,
    pub codes: Codes,
    /// Every message of the batch has been planned (`plan_messages` reached the end).
    pub complete: bool,
    /// Reused for the `ce_id` of every output.
    pub scratch: String,
}

impl Plan {
    pub fn clear(&mut self) {
        self.outputs.clear();
        self.cursor = 0;
        self.tallies = Tallies::default();
        self.codes.clear();
        self.complete = false;
    }

    /// Appends the native core's outputs of one record.
    pub fn push_native(
        &mut self,
        py: Python<'_>,
        outputs: &[Output<'_>],
        input: &Input<'_>,
        timestamp: &Bound<'_, PyAny>,
        ce_id_name: &Py<PyString>,
    ) {
        let (topic, partition, offset) = (input.topic, input.partition, input.offset);
        let mut last_key: Option<(&[u8], Bound<'_, PyBytes>)> = None;
        for (index, o) in outputs.iter().enumerate() {
            self.scratch.clear();
            let _ = write!(self.scratch, "{topic}:{partition}:{offset}:{index}");
            let ce_id = ce_id_pair(py, ce_id_name, self.scratch.as_bytes());
            let key = match &last_key {
                Some((bytes, obj)) if *bytes == &*o.key => obj.clone(),
                _ => {
                    let obj = PyBytes::new(py, &o.key);
                    last_key = Some((&*o.key, obj.clone()));
                    obj
                }
            };
            self.tallies.count(o.stream, o.ce_type == CeType::RunSealed);
            self.codes.count(o.stream, &o.value);
            self.outputs.push(Planned {
                stream: o.stream as usize,
                key: key.into_any().unbind(),
                value: PyBytes::new(py, &o.value).into_any().unbind(),
                timestamp: timestamp.clone().unbind(),
                headers: PlannedHeaders::Native {
                    ce_id: ce_id.unbind(),
                    ce_type: o.ce_type,
                },
            });
        }
    }
}

/// `("ce_id", value)`, untracked by the cycle collector (it holds only atomic objects).
pub(crate) fn ce_id_pair<'py>(
    py: Python<'py>,
    name: &Py<PyString>,
    value: &[u8],
) -> Bound<'py, PyTuple> {
    let pair = PyTuple::new(
        py,
        [
            name.bind(py).clone().into_any(),
            PyBytes::new(py, value).into_any(),
        ],
    )
    .expect("a 2-tuple");
    super::untrack(&pair);
    pair
}

/// The fields of a `confluent_kafka.Message` read from input partition
/// `partition`, as the shell's `InputRecord` takes them, or None when it is not
/// the shape the native core reads (exact str topic, exact int offset and
/// timestamp, bytes or None key and value); such a message goes to the reference.
pub(crate) fn read_message<'py>(
    message: &Bound<'py, PyAny>,
    partition: i64,
) -> PyResult<Option<PyInput<'py>>> {
    let py = message.py();
    let topic = message.call_method0(pyo3::intern!(py, "topic"))?;
    let offset = message.call_method0(pyo3::intern!(py, "offset"))?;
    let timestamp = message.call_method0(pyo3::intern!(py, "timestamp"))?;
    let key = message.call_method0(pyo3::intern!(py, "key"))?;
    let value = message.call_method0(pyo3::intern!(py, "value"))?;
    let Ok(topic) = topic.cast_into_exact::<PyString>() else {
        return Ok(None);
    };
    let Some(offset) = exact_int(&offset) else {
        return Ok(None);
    };
    // (ts_type, ts); the shell's `ts if ts_type != 0 else 0`
    let Ok(timestamp) = timestamp.cast_into_exact::<PyTuple>() else {
        return Ok(None);
    };
    if timestamp.len() != 2 {
        return Ok(None);
    }
    let ts_type = timestamp.get_item(0)?;
    let ts = timestamp.get_item(1)?;
    let Some(ts_type) = exact_int(&ts_type) else {
        return Ok(None);
    };
    let (timestamp_ms, timestamp_obj) = if ts_type != 0 {
        match exact_int(&ts) {
            Some(t) => (t, ts),
            None => return Ok(None),
        }
    } else {
        (0, 0i64.into_pyobject(py)?.into_any())
    };
    let (Some(key), Some(value)) = (opt_bytes(key), opt_bytes(value)) else {
        return Ok(None);
    };
    Ok(Some(PyInput {
        topic,
        partition,
        offset,
        timestamp_ms,
        timestamp_obj,
        key,
        value,
    }))
}

/// The reference's outputs of one record (`OutputRecord`s, or anything with
/// those five attributes), appended to the plan.
pub(crate) fn push_foreign(
    plan: &mut Plan,
    streams: &[Py<PyAny>],
    sealed_type: &Bound<'_, PyAny>,
    outputs: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let py = outputs.py();
    for out in outputs.try_iter()? {
        let out = out?;
        let stream_obj = out.getattr(pyo3::intern!(py, "stream"))?;
        let mut stream = None;
        for (i, s) in streams.iter().enumerate() {
            if s.bind(py).is(&stream_obj) {
                stream = Some(i);
                break;
            }
        }
        if stream.is_none() {
            for (i, s) in streams.iter().enumerate() {
                if s.bind(py).eq(&stream_obj)? {
                    stream = Some(i);
                    break;
                }
            }
        }
        let Some(stream) = stream else {
            return Err(PyTypeError::new_err(format!(
                "an output of an unknown stream: {}",
                stream_obj.repr()?
            )));
        };
        let headers = out.getattr(pyo3::intern!(py, "headers"))?;
        let kind = [
            Stream::Journal,
            Stream::Refusals,
            Stream::Audit,
            Stream::Deadletter,
            Stream::Checkpoints,
        ][stream];
        // the shell's `out.headers[3][1] == b"bernstein.run.sealed"`, for journal records only
        let sealed =
            kind == Stream::Journal && headers.get_item(3)?.get_item(1)?.eq(sealed_type)?;
        plan.tallies.count(kind, sealed);
        let value = out.getattr(pyo3::intern!(py, "value"))?;
        if matches!(kind, Stream::Refusals | Stream::Deadletter) {
            let bytes = value.cast::<PyBytes>().map(|b| b.as_bytes()).unwrap_or(b"");
            plan.codes.count(kind, bytes);
        }
        plan.outputs.push(Planned {
            stream,
            key: out.getattr(pyo3::intern!(py, "key"))?.unbind(),
            value: value.unbind(),
            timestamp: out.getattr(pyo3::intern!(py, "timestamp_ms"))?.unbind(),
            headers: PlannedHeaders::Foreign(headers.unbind()),
        });
    }
    Ok(())
}

/// The constant header pairs, shared with the per-record path.
pub(crate) struct HeaderPairs<'a> {
    pub spec: &'a Py<PyTuple>,
    pub source: &'a Py<PyTuple>,
    pub ce_types: &'a [Py<PyTuple>],
}

/// Produces the plan from its cursor on. `Ok(Some(tallies))` when every output
/// was produced; `Ok(None)` when `produce` raised `BufferError` (the cursor
/// stays at that output: poll, then call again).
pub(crate) fn produce_planned<'py>(
    plan: &mut Plan,
    pairs: &HeaderPairs<'_>,
    produce: &Bound<'py, PyAny>,
    topics: &Bound<'py, PyAny>,
    partition: &Bound<'py, PyAny>,
) -> PyResult<Option<Tallies>> {
    let py = produce.py();
    if !plan.complete {
        return Err(PyRuntimeError::new_err(
            "produce_planned: the batch was not completely planned",
        ));
    }
    let topics: Vec<Bound<'py, PyAny>> = topics.try_iter()?.collect::<PyResult<_>>()?;
    if topics.len() != 5 || !topics.iter().all(|t| t.is_exact_instance_of::<PyString>()) {
        return Err(PyTypeError::new_err(
            "topics must be the five topic names (journal, refusals, audit, deadletter, checkpoints)",
        ));
    }
    if !partition.is_exact_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err("partition must be an int"));
    }
    let none = py.None().into_bound(py);
    let mut list = native_headers(py, pairs)?;
    while plan.cursor < plan.outputs.len() {
        let o = &plan.outputs[plan.cursor];
        let headers = match &o.headers {
            PlannedHeaders::Native { ce_id, ce_type } => {
                // SAFETY: `list` is alive; reading its reference count has no effect.
                if unsafe { pyo3::ffi::Py_REFCNT(list.as_ptr()) } > 1 {
                    // someone kept the previous call's list: do not change it under them
                    list = native_headers(py, pairs)?;
                }
                list.set_item(1, ce_id.bind(py))?;
                list.set_item(3, pairs.ce_types[*ce_type as usize].bind(py))?;
                list.clone().into_any()
            }
            PlannedHeaders::Foreign(h) => {
                PyList::new(py, h.bind(py).try_iter()?.collect::<PyResult<Vec<_>>>()?)?.into_any()
            }
        };
        let args = PyTuple::new(
            py,
            [
                topics[o.stream].clone(),
                o.value.bind(py).clone(),
                o.key.bind(py).clone(),
                partition.clone(),
                none.clone(),
                none.clone(),
                o.timestamp.bind(py).clone(),
                headers,
            ],
        )?;
        match produce.call1(args) {
            Ok(_) => plan.cursor += 1,
            Err(e) if e.is_instance_of::<PyBufferError>(py) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some(plan.tallies))
}

fn native_headers<'py>(py: Python<'py>, pairs: &HeaderPairs<'_>) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        [
            pairs.spec.bind(py).clone().into_any(),
            py.None().into_bound(py),
            pairs.source.bind(py).clone().into_any(),
            py.None().into_bound(py),
        ],
    )
}
