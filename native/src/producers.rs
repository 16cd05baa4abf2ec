//! Producer signatures: the statements of `schemas.canonical` (`submission_statement`,
//! `run_close_statement`) as RFC 8785 canonical JSON, their signing input, and Ed25519
//! verification under a registered producer key, byte for byte as the reference checks them.

use crate::hashing::pae;
use crate::records::submission::{Observation, RunClose, Submission};

/// `schemas.canonical.DOMAIN_SUBMISSION`
pub const DOMAIN_SUBMISSION: &str = "bernstein/submission/v1";
/// RFC 8785 integers: the reference refuses any beyond +/-(2**53 - 1) (CanonicalizationError).
const MAX_SAFE_INT: i64 = (1 << 53) - 1;

/// A key of the manifest's `[[producers]]`: whose it is, and when it may sign.
pub struct ProducerKey {
    /// Index of its producer in `Producers::producers`.
    pub producer: usize,
    /// None when the registered bytes are not a valid Ed25519 public key (nothing verifies under it).
    pub key: Option<crate::ed25519::PublicKey>,
    pub valid_from_ms: i64,
    pub valid_until_ms: Option<i64>,
}

impl ProducerKey {
    /// `Lifetime.contains`
    pub fn contains(&self, timestamp_ms: i64) -> bool {
        timestamp_ms >= self.valid_from_ms && self.valid_until_ms.is_none_or(|u| timestamp_ms < u)
    }

    /// `_lifetime_text`: `[from, until)`, `[from, )` when open-ended.
    pub fn lifetime_text(&self) -> String {
        match self.valid_until_ms {
            Some(u) => format!("[{}, {u})", self.valid_from_ms),
            None => format!("[{}, )", self.valid_from_ms),
        }
    }

    /// Ed25519 of `signature` over `message` under the system's one rule (ZIP 215, `ed25519.rs`).
    pub fn verifies(&self, signature: &[u8], message: &[u8]) -> bool {
        self.key
            .as_ref()
            .is_some_and(|key| key.verifies(signature, message))
    }
}

pub struct Producer {
    pub name: String,
    /// Granted roles, sorted (as `sorted(producer.roles)`).
    pub roles: Vec<String>,
    /// Run ids it owns (`Producer.run_prefixes`): no two producers' prefixes overlap.
    pub run_prefixes: Vec<String>,
    /// Producers that may add to its runs (`Producer.collaborators`).
    pub collaborators: Vec<String>,
    /// Runs it may have open at once (`Producer.max_open_runs`).
    pub max_open_runs: i64,
}

impl Producer {
    pub fn may_take(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }

    /// `producer_id` may add to this producer's runs: it is this producer or one of its collaborators.
    pub fn admits(&self, producer_id: &str) -> bool {
        self.name == producer_id || self.collaborators.iter().any(|c| c == producer_id)
    }
}

/// `ProducerRegistry.run_owner`: the producer whose run prefix `run_id` starts with, and that prefix.
pub fn run_owner<'p>(producers: &'p [Producer], run_id: &str) -> Option<(&'p Producer, &'p str)> {
    producers.iter().find_map(|p| {
        p.run_prefixes
            .iter()
            .find(|prefix| run_id.starts_with(prefix.as_str()))
            .map(|prefix| (p, prefix.as_str()))
    })
}

/// `JSON.stringify` of a string as RFC 8785 writes it (`"` and `\` escaped, `\b \t \n \f \r`,
/// other controls as `\u00xx`; everything else verbatim).
fn put_json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            0x08 => Some(b"\\b"),
            0x09 => Some(b"\\t"),
            0x0a => Some(b"\\n"),
            0x0c => Some(b"\\f"),
            0x0d => Some(b"\\r"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        match escape {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0x0f) as usize],
            ]),
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn put_key(out: &mut Vec<u8>, key: &str, first: bool) {
    if !first {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
}

fn put_int(out: &mut Vec<u8>, value: i64) -> Option<()> {
    if !(-MAX_SAFE_INT..=MAX_SAFE_INT).contains(&value) {
        return None;
    }
    out.extend_from_slice(value.to_string().as_bytes());
    Some(())
}

fn put_str_field(out: &mut Vec<u8>, key: &str, value: &str) {
    put_key(out, key, false);
    put_json_str(out, value);
}

fn put_observation(out: &mut Vec<u8>, o: &Observation<'_>) -> Option<()> {
    out.push(b'{');
    put_key(out, "content_hash", true);
    put_json_str(out, o.content_hash);
    put_str_field(out, "kind", o.kind);
    put_str_field(out, "ref", o.reference);
    put_key(out, "size", false);
    put_int(out, o.size)?;
    out.push(b'}');
    Some(())
}

/// `submission_signing_input(submission_statement(sub, key_id))`, or None where the reference
/// raises CanonicalizationError (an integer beyond 2**53 - 1).
pub fn submission_signing_input(sub: &Submission<'_>, key_id: &str) -> Option<Vec<u8>> {
    let obs_len: usize = sub
        .observations
        .iter()
        .map(|o| o.kind.len() + o.reference.len() + o.content_hash.len() + 64)
        .sum();
    let mut out = Vec::with_capacity(512 + obs_len + sub.run_id.len() + sub.stage_id.len());
    out.push(b'{');
    put_key(&mut out, "artifact_hash", true);
    put_json_str(&mut out, sub.artifact_hash);
    put_str_field(&mut out, "evidence_set_hash", sub.evidence_set_hash);
    put_str_field(&mut out, "key_id", key_id);
    put_str_field(&mut out, "kind", sub.kind);
    put_key(&mut out, "observations", false);
    out.push(b'[');
    for (i, o) in sub.observations.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_observation(&mut out, o)?;
    }
    out.push(b']');
    put_key(&mut out, "occurred_at_ms", false);
    put_int(&mut out, sub.occurred_at_ms)?;
    put_str_field(&mut out, "producer_id", sub.producer_id);
    put_str_field(&mut out, "reason_code", sub.reason_code);
    put_str_field(&mut out, "role", sub.role);
    put_str_field(&mut out, "run_id", sub.run_id);
    put_str_field(&mut out, "stage_id", sub.stage_id);
    put_str_field(&mut out, "submission_id", sub.submission_id);
    put_str_field(&mut out, "terminal_state", sub.terminal_state);
    put_str_field(&mut out, "type", "activity");
    out.push(b'}');
    Some(pae(DOMAIN_SUBMISSION, &out))
}

/// `submission_signing_input(run_close_statement(...))` of a run close.
pub fn run_close_signing_input(close: &RunClose<'_>, key_id: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(256 + close.run_id.len() + close.submission_id.len());
    out.push(b'{');
    put_key(&mut out, "key_id", true);
    put_json_str(&mut out, key_id);
    put_key(&mut out, "occurred_at_ms", false);
    put_int(&mut out, close.occurred_at_ms)?;
    put_str_field(&mut out, "producer_id", close.producer_id);
    put_str_field(&mut out, "run_id", close.run_id);
    put_str_field(&mut out, "submission_id", close.submission_id);
    put_str_field(&mut out, "type", "run_close");
    out.push(b'}');
    Some(pae(DOMAIN_SUBMISSION, &out))
}
