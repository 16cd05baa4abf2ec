//! Facts for the offline verifier (`verifier/facts.py`): the per-record byte
//! work of `verifier/verify.py` and `verifier/sources.py`, in batches.
//!
//! Every decision stays in Python. These functions only turn raw records into
//! small tuples (split envelopes, entry and audit heads, recomputed hashes and
//! MACs, decoded stage fields, parsed dump lines), exactly the tuples the pure
//! Python functions of `verifier/facts.py` return, including the text of every
//! decode error (the messages of `schemas.codec`'s fast readers are
//! reproduced here byte for byte).
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

use std::collections::BTreeMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::hashing::{evidence_set_hash_of_digests, journal_entry_hash, AuditMac};
use crate::producers::{submission_signing_input, ProducerKey};
use crate::records::audit::{read_audit_head, AuditHead};
use crate::records::envelope::{read_envelope, Envelope};
use crate::records::journal::{decode_entry_as, read_entry_head, Body, EntryHead};
use crate::records::submission::Submission;
use crate::records::{
    fingerprint_of, schema_list, trailing_bytes, unknown_fingerprint, CodecReader, Layout,
};
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

// Fact kinds (the first item of each tuple; `verifier/facts.py` names them).
const J_UNDECODABLE: i64 = 0;
const J_ENTRY: i64 = 1;
const J_ENTRY_UNDECODABLE: i64 = 2;
const J_SEAL: i64 = 3;
const A_UNDECODABLE: i64 = 0;
const A_RECORD: i64 = 1;
const S_SKIP: i64 = 0;
const S_NOT_RESULT: i64 = 1;
const S_RESULT: i64 = 2;
const P_OTHER: i64 = 0;
const P_LEGACY: i64 = 1;
const P_ACTION: i64 = 2;
const P_SIGNED: i64 = 3;

struct SchemaInfo {
    name: String,
    /// None: a schema of the codec this module does not read.
    layout: Option<Layout>,
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
    fn schema_of(&self, data: &[u8]) -> Result<&SchemaInfo, String> {
        let fp = fingerprint_of(data)?;
        self.by_fp.get(&fp).ok_or_else(|| unknown_fingerprint(&fp))
    }
}

/// `schemas.codec.split_envelope`
fn split_envelope<'a>(schemas: &Schemas, value: &'a [u8]) -> Result<Envelope<'a>, String> {
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
fn entry_head<'a>(
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
fn audit_head<'a>(schemas: &Schemas, payload: &'a [u8]) -> Result<AuditHead<'a, i128>, String> {
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
struct FullEntry<'a> {
    run_id: &'a str,
    seq: i64,
    stage_id: &'a str,
    kind: &'a str,
    terminal_state: &'a str,
    artifact_hash: &'a str,
    evidence_set_hash: &'a str,
    observations: Vec<(&'a str, &'a str, &'a str)>,
    /// The observations' declared sizes (JournalEntry.v2 and v3); None for v1, which declares none.
    sizes: Option<Vec<i64>>,
    /// Who the entry says made the stage: its producer, and (JournalEntry.v3) the key id that signed it ("" before).
    producer_id: &'a str,
    key_id: &'a str,
}

/// The stage pass's view of an activity entry read as `layout` (v1, v2 or v3).
fn decode_full_entry(payload: &[u8], layout: Layout) -> Option<FullEntry<'_>> {
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
struct SignedEntry<'a> {
    seq: i64,
    submission: Submission<'a>,
    key_id: &'a str,
    signature: &'a [u8],
}

fn decode_signed_entry(payload: &[u8]) -> Option<SignedEntry<'_>> {
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

/// What `producer_fact` decides for one journal record value before any signature is verified.
enum ProducerItem<'a> {
    /// `(P_OTHER,)`, `(P_LEGACY,)` or `(P_ACTION,)`.
    Plain(i64),
    /// A JournalEntry.v3: verified (or not) below.
    Signed(Box<SignedEntry<'a>>),
    /// Handed back to the reference.
    Fallback,
}

// ---------------------------------------------------------------------------
// dump lines: a strict subset of JSON, and canonical base64
// ---------------------------------------------------------------------------

/// A parsed dump line, borrowed from the line.
struct DumpLine<'a> {
    topic: &'a str,
    partition: i64,
    offset: i64,
    timestamp: i64,
    key: Option<&'a str>,
    value: Option<&'a str>,
    headers: Vec<(&'a str, Option<&'a str>)>,
}

struct Json<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

const MAX_DEPTH: usize = 64;

#[inline]
fn has_control(bytes: &[u8]) -> bool {
    bytes.iter().fold(false, |acc, &c| acc | (c < 0x20))
}

impl<'a> Json<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.s.get(self.i) {
            if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    /// The raw text of a string up to its closing quote, with no escapes;
    /// control characters are NOT checked (the caller checks, or decodes the
    /// text as base64, which refuses them).
    #[inline]
    fn raw_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let end = start + memchr::memchr2(b'"', b'\\', &self.s[start..])?;
        if self.s[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        Some(&self.text[start..end])
    }

    /// A string without escapes or control characters (its text, borrowed).
    #[inline]
    fn plain_string(&mut self) -> Option<&'a str> {
        let text = self.raw_string()?;
        if has_control(text.as_bytes()) {
            return None;
        }
        Some(text)
    }

    /// Any string with the short escapes (not \u), skipped.
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let start = self.i;
            let at = start + memchr::memchr2(b'"', b'\\', &self.s[start..])?;
            if has_control(&self.s[start..at]) {
                return None;
            }
            self.i = at + 1;
            if self.s[at] == b'"' {
                return Some(());
            }
            let e = *self.s.get(self.i)?;
            if !matches!(e, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') {
                return None;
            }
            self.i += 1;
        }
    }

    /// `-?(0|[1-9][0-9]*)` with at most 18 digits, not followed by a fraction or exponent.
    #[inline]
    fn int(&mut self) -> Option<i64> {
        let negative = self.eat(b'-').is_some();
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        let digits = &self.s[start..self.i];
        if digits.is_empty() || digits.len() > 18 || (digits[0] == b'0' && digits.len() > 1) {
            return None;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        if negative && digits == b"0" {
            return None;
        }
        let mut n: i64 = 0;
        for &d in digits {
            n = n * 10 + i64::from(d - b'0');
        }
        Some(if negative { -n } else { n })
    }

    #[inline]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.s.get(self.i..self.i + word.len())? == word {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    #[inline]
    fn null_or<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            Some(None)
        } else {
            f(self).map(Some)
        }
    }

    /// Any JSON value in the subset (no \u escapes, no floats, bounded depth), skipped.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.skip_string(),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.int().map(|_| ()),
            b'[' => {
                self.i += 1;
                self.ws();
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    self.ws();
                    if self.eat(b',').is_some() {
                        self.ws();
                        continue;
                    }
                    return self.eat(b']');
                }
            }
            b'{' => {
                self.i += 1;
                self.ws();
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.skip_string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.skip_value(depth + 1)?;
                    self.ws();
                    if self.eat(b',').is_some() {
                        self.ws();
                        continue;
                    }
                    return self.eat(b'}');
                }
            }
            _ => None,
        }
    }

    /// `[[name, value-or-null], ...]` (the headers of our dumps).
    fn header_pairs(&mut self) -> Option<Vec<(&'a str, Option<&'a str>)>> {
        self.eat(b'[')?;
        let mut out = Vec::new();
        self.ws();
        if self.eat(b']').is_some() {
            return Some(out);
        }
        loop {
            self.eat(b'[')?;
            self.ws();
            let name = self.plain_string()?;
            self.ws();
            self.eat(b',')?;
            self.ws();
            let value = self.null_or(Self::raw_string)?;
            self.ws();
            self.eat(b']')?;
            out.push((name, value));
            self.ws();
            if self.eat(b',').is_some() {
                self.ws();
                continue;
            }
            self.eat(b']')?;
            return Some(out);
        }
    }
}

/// One dump line, when it is in the subset whose meaning is certain; else None.
fn parse_line(line: &[u8], with_headers: bool) -> Option<DumpLine<'_>> {
    let text = std::str::from_utf8(line).ok()?;
    let mut j = Json {
        s: line,
        text,
        i: 0,
    };
    j.ws();
    j.eat(b'{')?;
    let mut topic = None;
    let mut partition = None;
    let mut offset = None;
    let mut timestamp: Option<Option<i64>> = None;
    let mut key: Option<Option<&str>> = None;
    let mut value: Option<Option<&str>> = None;
    let mut headers: Option<Vec<(&str, Option<&str>)>> = None;
    let mut seen_headers = false;
    j.ws();
    if j.eat(b'}').is_none() {
        loop {
            let name = j.plain_string()?;
            j.ws();
            j.eat(b':')?;
            j.ws();
            match name {
                "topic" if topic.is_none() => topic = Some(j.plain_string()?),
                "partition" if partition.is_none() => partition = Some(j.int()?),
                "offset" if offset.is_none() => offset = Some(j.int()?),
                "timestamp" if timestamp.is_none() => timestamp = Some(j.null_or(Json::int)?),
                // base64 text: the decoder refuses control characters itself
                "key" if key.is_none() => key = Some(j.null_or(Json::raw_string)?),
                "value" if value.is_none() => value = Some(j.null_or(Json::raw_string)?),
                "headers" if !seen_headers => {
                    seen_headers = true;
                    if with_headers {
                        headers = j.null_or(Json::header_pairs)?;
                    } else {
                        j.skip_value(0)?;
                    }
                }
                _ => return None,
            }
            j.ws();
            if j.eat(b',').is_some() {
                j.ws();
                continue;
            }
            j.eat(b'}')?;
            break;
        }
    }
    j.ws();
    if j.i != line.len() {
        return None;
    }
    Some(DumpLine {
        topic: topic?,
        partition: partition?,
        offset: offset?,
        timestamp: timestamp.flatten().unwrap_or(0),
        key: key.flatten(),
        value: value.flatten(),
        headers: headers.unwrap_or_default(),
    })
}

const fn b64_table() -> [u8; 256] {
    let mut t = [0xFFu8; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        t[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    t
}

static B64: [u8; 256] = b64_table();

/// The decoded length of what may be canonical base64 (groups of four, `=`
/// only as the last one or two characters); `b64_decode_into` confirms it.
fn b64_len(s: &[u8]) -> Option<usize> {
    if s.len() % 4 != 0 {
        return None;
    }
    let pad = if s.ends_with(b"==") {
        2
    } else if s.ends_with(b"=") {
        1
    } else {
        0
    };
    Some(s.len() / 4 * 3 - pad)
}

/// Decode canonical base64 into `out` (`b64_len(s)` bytes); false when a
/// character is outside the alphabet. Leftover bits are ignored, as binascii does.
fn b64_decode_into(s: &[u8], out: &mut [u8]) -> bool {
    let full = if s.ends_with(b"=") {
        s.len() - 4
    } else {
        s.len()
    };
    let mut bad = 0u8;
    let o = full / 4 * 3;
    // eight characters to six bytes a step, four to three for the rest (no bounds checks in the loops)
    let (wide, narrow) = s[..full].split_at(full / 8 * 8);
    let (out_wide, out_narrow) = out[..o].split_at_mut(wide.len() / 8 * 6);
    for (chunk, dst) in wide.chunks_exact(8).zip(out_wide.chunks_exact_mut(6)) {
        let mut n = 0u64;
        for &c in chunk {
            let v = B64[c as usize];
            bad |= v;
            n = (n << 6) | u64::from(v);
        }
        dst.copy_from_slice(&n.to_be_bytes()[2..]);
    }
    for (chunk, dst) in narrow.chunks_exact(4).zip(out_narrow.chunks_exact_mut(3)) {
        let a = B64[chunk[0] as usize];
        let b = B64[chunk[1] as usize];
        let c = B64[chunk[2] as usize];
        let d = B64[chunk[3] as usize];
        bad |= a | b | c | d;
        let n = (u32::from(a) << 18) | (u32::from(b) << 12) | (u32::from(c) << 6) | u32::from(d);
        dst[0] = (n >> 16) as u8;
        dst[1] = (n >> 8) as u8;
        dst[2] = n as u8;
    }
    if full < s.len() {
        let chunk = &s[full..];
        let a = B64[chunk[0] as usize];
        let b = B64[chunk[1] as usize];
        bad |= a | b;
        out[o] = (a << 2) | (b >> 4);
        if chunk[2] != b'=' {
            let c = B64[chunk[2] as usize];
            bad |= c;
            out[o + 1] = ((b & 0x0F) << 4) | (c >> 2);
        }
    }
    bad & 0x80 == 0
}

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

// ---------------------------------------------------------------------------
// Python objects
// ---------------------------------------------------------------------------

#[inline]
fn int<'py>(py: Python<'py>, v: i128) -> Bound<'py, PyAny> {
    match i64::try_from(v) {
        Ok(small) => small.into_pyobject(py).expect("infallible").into_any(),
        Err(_) => v.into_pyobject(py).expect("infallible").into_any(),
    }
}

#[inline]
fn s<'py>(py: Python<'py>, v: &str) -> Bound<'py, PyAny> {
    PyString::new(py, v).into_any()
}

#[inline]
fn b<'py>(py: Python<'py>, v: &[u8]) -> Bound<'py, PyAny> {
    PyBytes::new(py, v).into_any()
}

fn tuple<'py, const N: usize>(
    py: Python<'py>,
    items: [Bound<'py, PyAny>; N],
) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyTuple::new(py, items)?.into_any())
}

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

/// A string object reused while consecutive items carry the same text (topics, key ids, ...).
struct Reuse<'py> {
    text: String,
    obj: Option<Bound<'py, PyAny>>,
}

impl<'py> Reuse<'py> {
    fn new() -> Self {
        Reuse {
            text: String::new(),
            obj: None,
        }
    }

    #[inline]
    fn cached(&self, v: &str) -> Option<Bound<'py, PyAny>> {
        match &self.obj {
            Some(obj) if self.text == v => Some(obj.clone()),
            _ => None,
        }
    }

    #[inline]
    fn put(&mut self, v: &str, obj: Bound<'py, PyAny>) -> Bound<'py, PyAny> {
        self.text.clear();
        self.text.push_str(v);
        self.obj = Some(obj.clone());
        obj
    }

    #[inline]
    fn get(&mut self, py: Python<'py>, v: &str) -> Bound<'py, PyAny> {
        match self.cached(v) {
            Some(obj) => obj,
            None => self.put(v, s(py, v)),
        }
    }
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

    /// Re-hash stored blobs, many files a call, on every core: for each path `(digest, size,
    /// bytes or None)` (bytes when its `keep` is true), or None when the caller must read that
    /// file itself (``crate::blob_files::hash_file``). The GIL is released while files are read.
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
    /// signature)` a seal.
    fn journal_facts<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let out = PyList::empty(py);
        let mut fallback = Vec::new();
        let mut run_ids = Reuse::new();
        let mut types = Reuse::new();
        for (index, item) in values.iter().enumerate() {
            let Some(value) = value_bytes(&item) else {
                fallback.push(index);
                out.append(py.None())?;
                continue;
            };
            let fact = match split_envelope(&self.schemas, value) {
                Err(message) => tuple(py, [int(py, J_UNDECODABLE.into()), s(py, &message)])?,
                Ok(Envelope::Audit { .. }) => tuple(
                    py,
                    [
                        int(py, J_UNDECODABLE.into()),
                        s(py, "an audit record on the journal topic"),
                    ],
                )?,
                Ok(Envelope::Checkpoint { .. }) => tuple(
                    py,
                    [
                        int(py, J_UNDECODABLE.into()),
                        s(py, "a checkpoint record on the journal topic"),
                    ],
                )?,
                Ok(Envelope::Journal { payload, stored }) => {
                    let recomputed = journal_entry_hash(payload);
                    match entry_head(&self.schemas, payload) {
                        Ok((_, head)) => tuple(
                            py,
                            [
                                int(py, J_ENTRY.into()),
                                s(py, stored),
                                s(py, &recomputed),
                                run_ids.get(py, head.run_id),
                                int(py, head.seq),
                                s(py, head.prev_hash),
                                types.get(py, head.entry_type),
                            ],
                        )?,
                        Err(message) => tuple(
                            py,
                            [
                                int(py, J_ENTRY_UNDECODABLE.into()),
                                s(py, stored),
                                s(py, &recomputed),
                                s(py, &message),
                            ],
                        )?,
                    }
                }
                Ok(Envelope::Seal {
                    payload,
                    key_id,
                    signature,
                }) => tuple(
                    py,
                    [
                        int(py, J_SEAL.into()),
                        b(py, payload),
                        s(py, key_id),
                        b(py, signature),
                    ],
                )?,
            };
            out.append(fact)?;
        }
        Ok((out, fallback))
    }

    /// Audit record values -> (facts, fallback indices); `secret_for(key_id)`
    /// gives the pinned secret (bytes) or None.
    ///
    /// `(0, message)` the record does not decode; `(1, key_id, mac,
    /// recomputed mac or None, partition, seq, prev_mac, event, run_id,
    /// record_hash, journal_seq, input partition, input offset)`.
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
        let mut key_ids = Reuse::new();
        let mut events = Reuse::new();
        let mut run_ids = Reuse::new();
        for (index, item) in values.iter().enumerate() {
            let Some(value) = value_bytes(&item) else {
                fallback.push(index);
                out.append(py.None())?;
                continue;
            };
            let parsed = match split_envelope(&self.schemas, value) {
                Err(message) => Err(message),
                Ok(Envelope::Journal { .. }) => {
                    // `name, (payload, key_id, mac) = ...` raises ValueError there.
                    fallback.push(index);
                    out.append(py.None())?;
                    continue;
                }
                Ok(Envelope::Seal { .. }) => {
                    Err("a SealRecord.v1 record on the audit topic".to_owned())
                }
                Ok(Envelope::Checkpoint { .. }) => {
                    Err("a CheckpointRecord.v1 record on the audit topic".to_owned())
                }
                Ok(Envelope::Audit {
                    payload,
                    key_id,
                    mac,
                    v2,
                }) => {
                    audit_head(&self.schemas, payload).map(|head| (payload, key_id, mac, v2, head))
                }
            };
            let (payload, key_id, mac, v2, head) = match parsed {
                Ok(parts) => parts,
                Err(message) => {
                    out.append(tuple(py, [int(py, A_UNDECODABLE.into()), s(py, &message)])?)?;
                    continue;
                }
            };
            let slot = match secrets.iter().position(|(k, _)| k == key_id) {
                Some(i) => i,
                None => {
                    let secret = secret_for.call1((key_id,))?;
                    let keyed = if secret.is_none() {
                        Some(None)
                    } else if secret.is_exact_instance_of::<PyBytes>() {
                        let raw = secret.cast::<PyBytes>()?.as_bytes();
                        Some(Some(AuditMac::new(raw)))
                    } else {
                        None
                    };
                    secrets.push((key_id.to_owned(), keyed));
                    secrets.len() - 1
                }
            };
            let recomputed = match &secrets[slot].1 {
                None => {
                    fallback.push(index);
                    out.append(py.None())?;
                    continue;
                }
                Some(None) => py.None().into_bound(py),
                Some(Some(keyed)) if v2 => s(py, &keyed.audit_record_mac(key_id, payload)),
                Some(Some(keyed)) => s(py, &keyed.audit_mac(payload)),
            };
            out.append(tuple(
                py,
                [
                    int(py, A_RECORD.into()),
                    key_ids.get(py, key_id),
                    s(py, mac),
                    recomputed,
                    int(py, head.partition),
                    int(py, head.seq),
                    s(py, head.prev_mac),
                    events.get(py, head.event),
                    run_ids.get(py, head.run_id),
                    s(py, head.record_hash),
                    int(py, head.journal_seq),
                    int(py, head.input_partition),
                    int(py, head.input_offset),
                ],
            )?)?;
        }
        Ok((out, fallback))
    }

    /// Journal record values -> (facts, fallback indices) of their producer signatures;
    /// `public_for(key_id)` gives the pinned raw Ed25519 key (bytes) or None.
    ///
    /// `(0,)` no entry with a producer signature, `(1,)` a JournalEntry.v1/v2, `(2,)` a
    /// computer-use entry, `(3, seq, key_id, producer_id, verified)` a JournalEntry.v3 with
    /// `verified` None when no key is pinned for its key id. The signatures are verified
    /// without the GIL, in batches (`crate::ed25519::verify_many`), on the calling thread.
    fn producer_facts<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
        public_for: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let mut items: Vec<ProducerItem<'_>> = Vec::with_capacity(values.len());
        let mut held: Vec<Bound<'py, PyAny>> = Vec::with_capacity(values.len());
        for item in values.iter() {
            held.push(item);
        }
        for item in &held {
            let Some(value) = value_bytes(item) else {
                items.push(ProducerItem::Fallback);
                continue;
            };
            let Ok(Envelope::Journal { payload, .. }) = split_envelope(&self.schemas, value) else {
                items.push(ProducerItem::Plain(P_OTHER));
                continue;
            };
            let name = match self.schemas.schema_of(payload) {
                Ok(schema) => schema.name.as_str(),
                Err(_) => {
                    items.push(ProducerItem::Plain(P_OTHER));
                    continue;
                }
            };
            items.push(match name {
                "JournalEntry.v1" | "JournalEntry.v2" => ProducerItem::Plain(P_LEGACY),
                "ComputerUseEntry.v1" | "ComputerUseEntry.v2" => ProducerItem::Plain(P_ACTION),
                "JournalEntry.v3" => match decode_signed_entry(payload) {
                    Some(entry) => ProducerItem::Signed(Box::new(entry)),
                    None => ProducerItem::Fallback,
                },
                _ => ProducerItem::Plain(P_OTHER),
            });
        }
        // key id -> Some(key) pinned (None inside: not an Ed25519 key), None not pinned; a
        // value that is not bytes goes to the reference.
        let mut keys: Vec<(String, Option<Option<ProducerKey>>)> = Vec::new();
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
        let verdicts: Vec<(usize, bool)> = py.detach(|| {
            // None: an integer canonical JSON cannot carry: no signature verifies
            let messages: Vec<Option<Vec<u8>>> = jobs
                .iter()
                .map(|&(index, _)| match &items[index] {
                    ProducerItem::Signed(entry) => {
                        submission_signing_input(&entry.submission, entry.key_id)
                            .filter(|m| !m.is_empty())
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
        });
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
                ProducerItem::Signed(entry) => Some(tuple(
                    py,
                    [
                        int(py, P_SIGNED.into()),
                        int(py, entry.seq.into()),
                        s(py, entry.key_id),
                        s(py, entry.submission.producer_id),
                        match verified[index] {
                            None => py.None().into_bound(py),
                            Some(ok) => pyo3::types::PyBool::new(py, ok).to_owned().into_any(),
                        },
                    ],
                )?),
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
    /// tuple of ints (JournalEntry.v2, v3), or None (v1 declares none).
    fn stage_facts<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let held: Vec<Bound<'py, PyAny>> = values.iter().collect();
        let raw: Vec<Option<&[u8]>> = held.iter().map(|item| value_bytes(item)).collect();
        // decoded and hashed without the GIL (the verifier reads the next chunk meanwhile)
        let items: Vec<StageItem<'_>> =
            py.detach(|| raw.iter().map(|value| self.stage_item(*value)).collect());
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
                    out.append(tuple(py, [int(py, S_SKIP.into())])?)?;
                    continue;
                }
                StageItem::NotResult(stored) => {
                    out.append(tuple(py, [int(py, S_NOT_RESULT.into()), s(py, stored)])?)?;
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
            out.append(tuple(
                py,
                [
                    int(py, S_RESULT.into()),
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
                        None => py.None().into_bound(py),
                    },
                    b(py, payload),
                    match &entry.sizes {
                        None => py.None().into_bound(py),
                        Some(sizes) => {
                            PyTuple::new(py, sizes.iter().map(|&n| int(py, n.into())))?.into_any()
                        }
                    },
                    producers.get(py, entry.producer_id),
                    key_ids.get(py, entry.key_id),
                ],
            )?)?;
        }
        Ok((out, fallback))
    }
}

/// What `stage_facts` finds in one value, before any Python object is built.
#[allow(clippy::large_enum_variant)] // nearly every item of a stage pass is a `Result`: boxing would only add allocations
enum StageItem<'a> {
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

impl FactReader {
    fn stage_item<'a>(&self, value: Option<&'a [u8]>) -> StageItem<'a> {
        let Some(value) = value else {
            return StageItem::Fallback;
        };
        let Ok(Envelope::Journal { payload, stored }) = split_envelope(&self.schemas, value) else {
            return StageItem::Skip;
        };
        let layout = match entry_head(&self.schemas, payload) {
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

/// A block's line, parsed (None: outside the strict subset) with its value decoded into the arena
/// (None: not canonical base64; `Some(None)`: a null value).
type ScannedLine<'a> = (
    &'a [u8],
    Option<(DumpLine<'a>, Option<Option<std::ops::Range<usize>>>)>,
);

/// The lines of `block` (as `parse_dump_block` counts them), each parsed, the values decoded into one
/// arena; and where the lines end.
fn scan_block(
    block: &[u8],
    with_headers: bool,
    eof: bool,
) -> (Vec<ScannedLine<'_>>, Vec<u8>, usize) {
    let mut lines = Vec::new();
    let mut arena = Vec::with_capacity(block.len() / 4 * 3);
    let mut start = 0;
    while start < block.len() {
        let end = match memchr::memchr(b'\n', &block[start..]) {
            Some(at) => start + at + 1,
            None if eof => block.len(),
            None => break,
        };
        let line = &block[start..end];
        let scanned = parse_line(line, with_headers).map(|parsed| {
            let value = match parsed.value {
                None => Some(None),
                Some(text) => b64_len(text.as_bytes()).and_then(|len| {
                    let at = arena.len();
                    arena.resize(at + len, 0);
                    if b64_decode_into(text.as_bytes(), &mut arena[at..]) {
                        Some(Some(at..at + len))
                    } else {
                        arena.truncate(at);
                        None
                    }
                }),
            };
            (parsed, value)
        });
        lines.push((line, scanned));
        start = end;
    }
    (lines, arena, start)
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
    Ok(Some(tuple(
        py,
        [
            int(py, line.offset.into()),
            int(py, line.timestamp.into()),
            key,
            value.unwrap_or_else(|| py.None().into_bound(py)),
            b.topics.get(py, line.topic),
            int(py, line.partition.into()),
            headers,
        ],
    )?))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<FactReader>()?;
    m.add_function(wrap_pyfunction!(parse_dump_lines, m)?)?;
    m.add_function(wrap_pyfunction!(parse_dump_block, m)?)?;
    let schemas = PyList::empty(py);
    for (name, fp) in schema_list(&VERIFIER_LAYOUTS) {
        schemas.append((name, PyBytes::new(py, &fp)))?;
    }
    m.add("VERIFIER_SCHEMAS", schemas)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_canonical_only() {
        assert_eq!(b64_len(b""), Some(0));
        assert_eq!(b64_len(b"QQ=="), Some(1));
        assert_eq!(b64_len(b"QUI="), Some(2));
        assert_eq!(b64_len(b"QUJD"), Some(3));
        assert_eq!(b64_len(b"QUJ"), None);
        let decodes = |s: &[u8]| {
            let mut out = vec![0u8; b64_len(s)?];
            b64_decode_into(s, &mut out).then_some(out)
        };
        assert_eq!(decodes(b"Q==="), None);
        assert_eq!(decodes(b"=QQ="), None);
        assert_eq!(decodes(b"QQ==QQ=="), None);
        assert_eq!(decodes(b"QU\nJ"), None);
        assert_eq!(decodes(b"QR==").as_deref(), Some(&b"A"[..]));
        assert_eq!(decodes(b"QUJDRA==").as_deref(), Some(&b"ABCD"[..]));
        // every length through the eight- and four-character loops and the padded tail
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for len in 0..64usize {
            let raw: Vec<u8> = (0..len).map(|i| (i * 37 + len * 11) as u8).collect();
            let mut text = Vec::new();
            for group in raw.chunks(3) {
                let n = group
                    .iter()
                    .enumerate()
                    .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
                for i in 0..4 {
                    text.push(if i <= group.len() {
                        alphabet[(n >> (18 - 6 * i) & 63) as usize]
                    } else {
                        b'='
                    });
                }
            }
            assert_eq!(decodes(&text).as_deref(), Some(&raw[..]), "length {len}");
            if !text.is_empty() {
                let mut bad = text.clone();
                bad[len % text.len().max(1) / 2] = b'*';
                assert_eq!(decodes(&bad), None, "length {len}");
            }
        }
    }

    #[test]
    fn dump_line_subset() {
        let line = br#"{"topic":"t","partition":0,"offset":5,"timestamp":null,"key":null,"value":"QQ==","headers":[["a","QQ=="]]}"#;
        let parsed = parse_line(line, true).unwrap();
        assert_eq!(parsed.offset, 5);
        assert_eq!(parsed.timestamp, 0);
        assert_eq!(parsed.headers, vec![("a", Some("QQ=="))]);
        assert!(parse_line(br#"{"topic":"t","partition":0}"#, false).is_none());
        assert!(parse_line(br#"{"topic":"t","partition":0,"offset":1.5}"#, false).is_none());
        assert!(parse_line(
            br#"{"topic":"t","partition":0,"offset":1,"offset":2}"#,
            false
        )
        .is_none());
        assert!(parse_line(
            br#"{"topic":"t","partition":0,"offset":1,"headers":{"a":[1,2,"\n"]}}"#,
            false
        )
        .is_some());
        assert!(parse_line(
            br#"{"topic":"t","partition":0,"offset":1,"headers":"\u0041"}"#,
            false
        )
        .is_none());
    }
}
