//! The state's canonical JSON, as `consumers.core.snapshot.state_bytes` writes it, straight from
//! the Rust state: a snapshot no longer exports the whole state into Python objects on the loop.
//!
//! Byte for byte what Python's `json.dumps(state_form(state), sort_keys=True,
//! separators=(",", ":"), ensure_ascii=True)` gives: object keys sorted (the orders below are
//! the sorted ones; `tree` is the hex of the Merkle log's frontier encoding), maps as lists of `[key, value]` pairs in insertion order, blob digests
//! sorted, and every character outside printable ASCII escaped as Python does (`\n`, `\r`,
//! `\t`, `\b`, `\f`, else `\u00XX`; beyond the BMP as a surrogate pair, lowercase hex).

use crate::core::{Map, RunState, State};

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{08}' => out.extend_from_slice(b"\\b"),
            '\u{0c}' => out.extend_from_slice(b"\\f"),
            ' '..='~' => out.push(c as u8),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.extend_from_slice(b"\\u");
                    for shift in [12, 8, 4, 0] {
                        out.push(b"0123456789abcdef"[usize::from((*unit >> shift) & 0xf)]);
                    }
                }
            }
        }
    }
    out.push(b'"');
}

fn put_int(out: &mut Vec<u8>, value: impl ToString) {
    out.extend_from_slice(value.to_string().as_bytes());
}

fn put_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

/// A JSON list of `items`, each written by `put`.
fn put_list<T>(
    out: &mut Vec<u8>,
    items: impl IntoIterator<Item = T>,
    mut put: impl FnMut(&mut Vec<u8>, T),
) {
    out.push(b'[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put(out, item);
    }
    out.push(b']');
}

/// A map as a list of `[key, value]` pairs, in insertion order.
fn put_pairs(out: &mut Vec<u8>, map: &Map<Box<str>, Box<str>>) {
    put_list(out, map, |out, (k, v)| {
        out.push(b'[');
        put_str(out, k);
        out.push(b',');
        put_str(out, v);
        out.push(b']');
    });
}

fn put_run(out: &mut Vec<u8>, run: &RunState) {
    out.extend_from_slice(b"{\"blobs\":");
    let mut blobs: Vec<&str> = run.blobs.iter().map(|d| &**d).collect();
    blobs.sort_unstable(); // UTF-8 byte order is code point order: Python's sorted()
    put_list(out, blobs, put_str);
    out.extend_from_slice(b",\"closed\":");
    put_bool(out, run.closed);
    out.extend_from_slice(b",\"entry_count\":");
    put_int(out, run.entry_count);
    out.extend_from_slice(b",\"evidence\":");
    put_pairs(out, &run.evidence);
    out.extend_from_slice(b",\"evidence_bytes\":");
    put_int(out, run.evidence_bytes);
    out.extend_from_slice(b",\"head\":");
    put_str(out, &run.head);
    out.extend_from_slice(b",\"opened_by\":");
    put_str(out, &run.opened_by);
    out.extend_from_slice(b",\"sealed_count\":");
    put_int(out, run.sealed_count);
    out.extend_from_slice(b",\"sessions\":");
    put_list(out, &run.sessions, |out, (id, session)| {
        out.push(b'[');
        put_str(out, id);
        out.push(b',');
        put_int(out, session.next_index);
        out.push(b',');
        put_str(out, &session.last_anchor);
        out.push(b',');
        put_bool(out, session.closed);
        out.push(b']');
    });
    out.extend_from_slice(b",\"stages\":");
    put_pairs(out, &run.stages);
    out.extend_from_slice(b",\"submissions\":");
    put_pairs(out, &run.submissions);
    out.push(b'}');
}

/// `_canonical(state_form(state))`.
pub fn state_json(state: &State) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + state.runs.len() * 512);
    out.extend_from_slice(b"{\"audit_head\":");
    put_str(&mut out, &state.audit.head);
    out.extend_from_slice(b",\"audit_seq\":");
    put_int(&mut out, state.audit.seq);
    out.extend_from_slice(b",\"checkpoint_audit_seq\":");
    put_int(&mut out, state.checkpoint.audit_seq);
    out.extend_from_slice(b",\"checkpoint_head\":");
    put_str(&mut out, &state.checkpoint.head);
    out.extend_from_slice(b",\"checkpoint_seq\":");
    put_int(&mut out, state.checkpoint.seq);
    out.extend_from_slice(b",\"partition\":");
    put_int(&mut out, state.partition);
    out.extend_from_slice(b",\"runs\":");
    put_list(&mut out, &state.runs, |out, (run_id, run)| {
        out.push(b'[');
        put_str(out, run_id);
        out.push(b',');
        put_run(out, run);
        out.push(b']');
    });
    out.extend_from_slice(b",\"tree\":");
    put_str(&mut out, &crate::hashing::hex_string(&state.tree.encode()));
    out.push(b'}');
    out
}
