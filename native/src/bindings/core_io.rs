//! `NativeCore`'s records in and outputs out: the input records read from Python (`read_input`),
//! a batch planned for the shell (`plan_messages_inner`), the outputs as Python objects
//! (`convert`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString, PyTuple, PyType};

use super::core::NativeCore;
use super::{batch, untrack};
use crate::core::{self, Host, Input, NoHost, Outcome};

/// Python's `repr()` for the strings the pure core cannot print itself.
pub(super) struct PyHost<'py> {
    pub py: Python<'py>,
}

impl Host for PyHost<'_> {
    fn repr_non_ascii(&mut self, s: &str) -> Option<String> {
        let repr = PyString::new(self.py, s).repr().ok()?;
        repr.to_str().ok().map(str::to_owned)
    }
}

pub(super) struct Headers {
    pub spec: Py<PyTuple>,
    pub source: Py<PyTuple>,
    pub ce_types: Vec<Py<PyTuple>>,
    pub ce_id: Py<PyString>,
}

/// How an output becomes a Python object.
pub(super) enum Factory {
    /// `(stream, key, value, headers, timestamp_ms)`
    Tuple,
    /// `factory(stream, key, value, headers, timestamp_ms)`
    Call(Py<PyAny>),
    /// `cls.__new__(cls)` then `object.__setattr__` of the five slots in order:
    /// what a frozen slots dataclass's generated `__init__` does, without the
    /// interpreter (the adapter only asks for it when that is all `__init__` does).
    Slots(Py<PyType>, Vec<Py<PyString>>),
}

pub(super) fn build_slots<'py>(
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

pub(super) fn read_input<'py>(item: &Bound<'py, PyAny>) -> PyResult<Option<PyInput<'py>>> {
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

impl NativeCore {
    pub(super) fn plan_messages_inner(
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

impl NativeCore {
    pub(super) fn step_item<'py>(
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
    pub(super) fn convert<'py>(
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
            untrack(&headers);
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
