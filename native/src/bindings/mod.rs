//! The Python bindings (PyO3): every conversion between Python objects and the pure modules
//! (`core`, `fold`, `verify`, `records`, ...), and the registration of the extension's classes,
//! functions and constants (`register`).

pub mod batch;
pub mod core;
pub mod core_args;
pub mod core_io;
pub mod dump;
pub mod fold;
pub mod primitives;
pub mod verify_facts;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::core::{
    CE_TYPES, KINDS, MAX_DEAD_LETTER_RAW, MAX_DETAIL_CHARS, MAX_EVIDENCE_CHARS,
    MAX_INLINE_ARTIFACT_BYTES, MAX_KEPT_KEY_BYTES, MAX_KIND_LENGTH, MAX_LABEL_LENGTH,
    MAX_OBSERVATIONS, MAX_OCCURRED_AT_MS, MAX_REASON_CODE_LENGTH, MAX_REF_LENGTH,
    MAX_RUN_EVIDENCE_BYTES, TERMINAL_STATES,
};
use crate::schemas::NATIVE_SCHEMAS;

#[inline]
pub(crate) fn int(py: Python<'_>, v: i64) -> Bound<'_, PyAny> {
    v.into_pyobject(py).expect("infallible").into_any()
}

#[inline]
pub(crate) fn s<'py>(py: Python<'py>, v: &str) -> Bound<'py, PyAny> {
    PyString::new(py, v).into_any()
}

#[inline]
pub(crate) fn flag(py: Python<'_>, v: bool) -> Bound<'_, PyAny> {
    PyBool::new(py, v).to_owned().into_any()
}

#[inline]
pub(crate) fn none(py: Python<'_>) -> Bound<'_, PyAny> {
    py.None().into_bound(py)
}

/// Marks a tuple of atomic objects (str, bytes, or such tuples) as not needing
/// the cycle collector, as CPython itself does lazily.
pub(crate) fn untrack(t: &Bound<'_, PyTuple>) {
    // SAFETY: the tuple is alive; untracking an object that holds only atomic
    // objects cannot hide a reference cycle.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(t.as_ptr().cast()) }
}

/// A tuple of atomic objects (str, int, bool, None, or such tuples), untracked by the cycle
/// collector (a fold allocates a few per record; tracked, they would trigger its collections).
pub(crate) fn tuple<'py, const N: usize>(
    py: Python<'py>,
    items: [Bound<'py, PyAny>; N],
) -> PyResult<Bound<'py, PyAny>> {
    let t = PyTuple::new(py, items)?;
    untrack(&t);
    Ok(t.into_any())
}

/// A Python int of up to 70 bits (`schemas.codec`'s varints).
#[inline]
pub(crate) fn big_int(py: Python<'_>, v: i128) -> Bound<'_, PyAny> {
    match i64::try_from(v) {
        Ok(small) => small.into_pyobject(py).expect("infallible").into_any(),
        Err(_) => v.into_pyobject(py).expect("infallible").into_any(),
    }
}

#[inline]
pub(crate) fn b<'py>(py: Python<'py>, v: &[u8]) -> Bound<'py, PyAny> {
    PyBytes::new(py, v).into_any()
}

/// A tuple the cycle collector tracks (as the Python functions' tuples are).
pub(crate) fn tracked_tuple<'py, const N: usize>(
    py: Python<'py>,
    items: [Bound<'py, PyAny>; N],
) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyTuple::new(py, items)?.into_any())
}

/// A string object reused while consecutive items carry the same text (topics, key ids, ...).
pub(crate) struct Reuse<'py> {
    text: String,
    obj: Option<Bound<'py, PyAny>>,
}

impl<'py> Reuse<'py> {
    pub fn new() -> Self {
        Reuse {
            text: String::new(),
            obj: None,
        }
    }

    #[inline]
    pub fn cached(&self, v: &str) -> Option<Bound<'py, PyAny>> {
        match &self.obj {
            Some(obj) if self.text == v => Some(obj.clone()),
            _ => None,
        }
    }

    #[inline]
    pub fn put(&mut self, v: &str, obj: Bound<'py, PyAny>) -> Bound<'py, PyAny> {
        self.text.clear();
        self.text.push_str(v);
        self.obj = Some(obj.clone());
        obj
    }

    #[inline]
    pub fn get(&mut self, py: Python<'py>, v: &str) -> Bound<'py, PyAny> {
        match self.cached(v) {
            Some(obj) => obj,
            None => self.put(v, s(py, v)),
        }
    }
}

/// `FACT_SHAPES`: shape name -> (kind tag or None, field names in tuple order); `FACT_KINDS`:
/// family ("fold", "verifier") -> {tag name: tag} (see `crate::facts`).
pub fn register_facts(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let shapes = PyDict::new(py);
    for (name, tag, fields) in crate::facts::SHAPES {
        shapes.set_item(*name, (*tag, PyTuple::new(py, fields.iter())?))?;
    }
    m.add("FACT_SHAPES", shapes)?;
    let kinds = PyDict::new(py);
    for (family, tags) in crate::facts::KINDS {
        let named = PyDict::new(py);
        for (name, tag) in *tags {
            named.set_item(*name, *tag)?;
        }
        kinds.set_item(*family, named)?;
    }
    m.add("FACT_KINDS", kinds)?;
    Ok(())
}

/// `NATIVE_SCHEMAS`, `CONSTANTS` (the limits and closed sets of `schemas.records` /
/// `consumers.core.step` the extension was built with) and `VERSION`.
pub fn register_constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
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
    Ok(())
}
