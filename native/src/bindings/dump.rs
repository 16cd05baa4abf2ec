//! `parse_dump_lines`, `parse_dump_block`: dump lines (`crate::verify::dump`) as the rows
//! `verifier.sources` builds (`facts::dump_row`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::{big_int as int, tracked_tuple as tuple, Reuse};
use crate::facts::dump_row;
use crate::verify::dump::{b64_decode_into, b64_len, parse_line, scan_block, DumpLine};

fn b64_bytes<'py>(py: Python<'py>, s: Option<&str>) -> PyResult<Option<Option<Bound<'py, PyAny>>>> {
    let Some(s) = s else {
        return Ok(Some(None));
    };
    let Some(len) = b64_len(s.as_bytes()) else {
        return Ok(None);
    };
    let mut valid = true;
    let bytes = PyBytes::new_with(py, len, |out| {
        valid = b64_decode_into(s.as_bytes(), out);
        Ok(())
    })?;
    Ok(valid.then(|| Some(bytes.into_any())))
}

/// Dump lines (bytes, as read from the file) -> (rows, fallback indices).
///
/// A row is `(offset, timestamp, key, value, topic, partition, headers)` as
/// `verifier.sources` builds it (headers `()` unless `with_headers`); a line
/// outside the strict subset (including blank and unparseable lines) is None
/// and listed in the fallback indices.
#[pyfunction]
pub fn parse_dump_lines<'py>(
    py: Python<'py>,
    lines: &Bound<'py, PyList>,
    with_headers: bool,
) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
    let out = PyList::empty(py);
    let mut fallback = Vec::new();
    let mut rows = RowBuilder::new(py, with_headers);
    for (index, item) in lines.iter().enumerate() {
        let row = match item.cast::<PyBytes>() {
            Ok(line) if item.is_exact_instance_of::<PyBytes>() => rows.row(line.as_bytes())?,
            _ => None,
        };
        match row {
            Some(row) => out.append(row)?,
            None => {
                fallback.push(index);
                out.append(py.None())?;
            }
        }
    }
    Ok((out, fallback))
}

/// `(rows, fallback (index, line) pairs, count, end)`
type BlockRows<'py> = (
    Bound<'py, PyList>,
    Vec<(usize, Bound<'py, PyBytes>)>,
    usize,
    usize,
);

/// The lines of a block read from a dump file -> (rows, fallback, count, end).
///
/// Lines end with `\n` (the newline belongs to the line); unless `eof`, bytes
/// after the last newline are not a line yet and are left out: `end` is where
/// they start (`len(block)` when `eof`). `count` lines were parsed; `rows` and
/// the fallback `(index, line)` pairs are as in `parse_dump_lines`.
#[pyfunction]
pub fn parse_dump_block<'py>(
    py: Python<'py>,
    block: &[u8],
    with_headers: bool,
    eof: bool,
) -> PyResult<BlockRows<'py>> {
    // the lines parsed and their values decoded without the GIL (another thread's Python runs meanwhile)
    let (lines, arena, end) = py.detach(|| scan_block(block, with_headers, eof));
    let out = PyList::empty(py);
    let mut fallback = Vec::new();
    let mut rows = RowBuilder::new(py, with_headers);
    for (index, (line, scanned)) in lines.iter().enumerate() {
        let row = match scanned {
            Some((parsed, Some(value))) => {
                let value = value
                    .as_ref()
                    .map(|range| PyBytes::new(py, &arena[range.clone()]).into_any());
                build_row(py, parsed, value, &mut rows)?
            }
            _ => None,
        };
        match row {
            Some(row) => out.append(row)?,
            None => {
                fallback.push((index, PyBytes::new(py, line)));
                out.append(py.None())?;
            }
        }
    }
    Ok((out, fallback, lines.len(), end))
}

/// Builds rows, sharing the objects consecutive lines have in common.
struct RowBuilder<'py> {
    py: Python<'py>,
    with_headers: bool,
    topics: Reuse<'py>,
    keys: Reuse<'py>,
    header_names: Reuse<'py>,
    empty: Bound<'py, PyAny>,
}

impl<'py> RowBuilder<'py> {
    fn new(py: Python<'py>, with_headers: bool) -> Self {
        RowBuilder {
            py,
            with_headers,
            topics: Reuse::new(),
            keys: Reuse::new(),
            header_names: Reuse::new(),
            empty: PyTuple::empty(py).into_any(),
        }
    }

    #[inline]
    fn row(&mut self, line: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(parsed) = parse_line(line, self.with_headers) else {
            return Ok(None);
        };
        let Some(value) = b64_bytes(self.py, parsed.value)? else {
            return Ok(None);
        };
        build_row(self.py, &parsed, value, self)
    }
}

/// The row of a parsed line whose value (None: a null value) is decoded already.
fn build_row<'py>(
    py: Python<'py>,
    line: &DumpLine<'_>,
    value: Option<Bound<'py, PyAny>>,
    b: &mut RowBuilder<'py>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    // The key of a run's records repeats line after line: decode it once.
    let key = match line.key {
        None => py.None().into_bound(py),
        Some(text) => match b.keys.cached(text) {
            Some(obj) => obj,
            None => match b64_bytes(py, Some(text))? {
                Some(Some(obj)) => b.keys.put(text, obj),
                _ => return Ok(None),
            },
        },
    };
    let headers = if line.headers.is_empty() {
        b.empty.clone()
    } else {
        let mut pairs = Vec::with_capacity(line.headers.len());
        for &(name, raw) in &line.headers {
            let Some(decoded) = b64_bytes(py, raw)? else {
                return Ok(None);
            };
            let decoded = decoded.unwrap_or_else(|| PyBytes::new(py, b"").into_any());
            pairs.push(PyTuple::new(py, [b.header_names.get(py, name), decoded])?.into_any());
        }
        PyTuple::new(py, pairs)?.into_any()
    };
    let items: [_; dump_row::LEN] = [
        int(py, line.offset.into()),
        int(py, line.timestamp.into()),
        key,
        value.unwrap_or_else(|| py.None().into_bound(py)),
        b.topics.get(py, line.topic),
        int(py, line.partition.into()),
        headers,
    ];
    Ok(Some(tuple(py, items)?))
}
