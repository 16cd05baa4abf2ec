//! Module-level functions: the primitives (hashes, MACs, Ed25519, the Python-semantics string
//! helpers), for the golden-vector tests, and `messages_ok` for the shell.

use ed25519_dalek::{Signer as _, SigningKey};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::core_args::value_error;
use crate::hashing::{self, AuditMac};
use crate::{ed25519, text};

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

/// Registers the module-level functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
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
    Ok(())
}
