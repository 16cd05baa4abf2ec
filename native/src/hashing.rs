//! The hashes, MACs and signing inputs of `schemas.canonical`, byte for byte.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

pub const DOMAIN_JOURNAL_GENESIS: &str = "bernstein/journal-genesis/v1";
pub const DOMAIN_JOURNAL_ENTRY: &str = "bernstein/journal-entry/v1";
pub const DOMAIN_AUDIT_GENESIS: &str = "bernstein/audit-genesis/v1";
pub const DOMAIN_AUDIT_ENTRY: &str = "bernstein/audit-entry/v1";
pub const DOMAIN_RUN_SEAL: &str = "bernstein/run-seal/v1";
pub const DOMAIN_AUDIT_RECORD_V2: &str = "bernstein/audit-record/v2";
pub const DOMAIN_CHECKPOINT_GENESIS: &str = "bernstein/checkpoint-genesis/v1";
pub const DOMAIN_PARTITION_CHECKPOINT: &str = "bernstein/partition-checkpoint/v1";

type HmacSha256 = Hmac<Sha256>;

/// `DSSEv1 <len(type)> <type> <len(body)> ` (the body follows).
fn pae_prefix(payload_type: &str, body_len: usize) -> Vec<u8> {
    format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        body_len
    )
    .into_bytes()
}

/// `schemas.canonical.pae`
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = pae_prefix(payload_type, body.len());
    out.extend_from_slice(body);
    out
}

fn hex_into(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0x0F) as usize] as char);
    }
}

pub fn hex_string(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    hex_into(&mut out, bytes);
    out
}

pub(crate) fn digest_string(prefix: &str, digest: &[u8]) -> String {
    let mut out = String::with_capacity(prefix.len() + 2 * digest.len());
    out.push_str(prefix);
    hex_into(&mut out, digest);
    out
}

/// `sha256:<hex>` of raw bytes.
pub fn sha256_digest(data: &[u8]) -> String {
    digest_string("sha256:", &Sha256::digest(data))
}

/// `sha256:<hex>` of `pae(type, body)` without copying the body.
fn pae_digest(payload_type: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(pae_prefix(payload_type, body.len()));
    h.update(body);
    digest_string("sha256:", &h.finalize())
}

pub fn journal_genesis(run_id: &str) -> String {
    pae_digest(DOMAIN_JOURNAL_GENESIS, run_id.as_bytes())
}

pub fn journal_entry_hash(payload: &[u8]) -> String {
    pae_digest(DOMAIN_JOURNAL_ENTRY, payload)
}

pub fn seal_signing_input(payload: &[u8]) -> Vec<u8> {
    pae(DOMAIN_RUN_SEAL, payload)
}

/// `schemas.canonical.checkpoint_genesis`
pub fn checkpoint_genesis(partition: i64) -> String {
    pae_digest(DOMAIN_CHECKPOINT_GENESIS, partition.to_string().as_bytes())
}

/// `schemas.canonical.checkpoint_signing_input`
pub fn checkpoint_signing_input(payload: &[u8]) -> Vec<u8> {
    pae(DOMAIN_PARTITION_CHECKPOINT, payload)
}

/// `schemas.canonical.checkpoint_hash`
pub fn checkpoint_hash(payload: &[u8]) -> String {
    pae_digest(DOMAIN_PARTITION_CHECKPOINT, payload)
}

/// `schemas.canonical.evidence_set_hash` over members that are already known to be digests.
pub fn evidence_set_hash_of_digests<'a>(members: impl Iterator<Item = &'a str>) -> String {
    let mut unique: Vec<&str> = members.collect();
    unique.sort_unstable();
    unique.dedup();
    let mut h = Sha256::new();
    if unique.is_empty() {
        h.update(b"[]");
    } else {
        h.update(b"[\"");
        for (i, m) in unique.iter().enumerate() {
            if i > 0 {
                h.update(b"\",\"");
            }
            h.update(m.as_bytes());
        }
        h.update(b"\"]");
    }
    digest_string("sha256:", &h.finalize())
}

/// HMAC-SHA256 with the audit key, keyed once.
#[derive(Clone)]
pub struct AuditMac {
    keyed: HmacSha256,
}

impl AuditMac {
    pub fn new(key: &[u8]) -> Self {
        AuditMac {
            keyed: HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length"),
        }
    }

    fn mac_pae(&self, payload_type: &str, body: &[u8]) -> String {
        let mut m = self.keyed.clone();
        m.update(&pae_prefix(payload_type, body.len()));
        m.update(body);
        digest_string("hmac-sha256:", &m.finalize().into_bytes())
    }

    /// `schemas.canonical.audit_mac`
    pub fn audit_mac(&self, payload: &[u8]) -> String {
        self.mac_pae(DOMAIN_AUDIT_ENTRY, payload)
    }

    /// `schemas.canonical.audit_record_mac`: the MAC of an AuditRecord.v2,
    /// `PAE(audit-record/v2, PAE(key_id, payload))`, without copying the payload.
    pub fn audit_record_mac(&self, key_id: &str, payload: &[u8]) -> String {
        let inner = pae_prefix(key_id, payload.len());
        let mut m = self.keyed.clone();
        m.update(&pae_prefix(
            DOMAIN_AUDIT_RECORD_V2,
            inner.len() + payload.len(),
        ));
        m.update(&inner);
        m.update(payload);
        digest_string("hmac-sha256:", &m.finalize().into_bytes())
    }

    /// `schemas.canonical.audit_genesis`
    pub fn audit_genesis(&self, partition: i64) -> String {
        self.mac_pae(DOMAIN_AUDIT_GENESIS, partition.to_string().as_bytes())
    }

    /// Raw HMAC of a label: used to derive the (secret, deterministic) hash-table keys.
    pub fn raw(&self, label: &[u8]) -> [u8; 32] {
        let mut m = self.keyed.clone();
        m.update(label);
        m.finalize().into_bytes().into()
    }
}
