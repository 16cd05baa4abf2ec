//! Audit entries: AuditEntry.v1/v2, the payloads of AuditRecords.

use super::{decode, union_index, FieldReader, Layout};
use crate::avro::{ReadResult, Reader};

/// The fields of an audit entry the readers keep (`schemas.codec.read_audit_head`), up to its
/// input position.
pub struct AuditHead<'a, N> {
    pub partition: N,
    pub seq: N,
    pub prev_mac: &'a str,
    pub event: &'a str,
    pub run_id: &'a str,
    pub record_hash: &'a str,
    pub journal_seq: N,
    pub input_partition: N,
    pub input_offset: N,
}

pub fn read_audit_head<'a, R: FieldReader<'a>>(
    r: &mut R,
) -> Result<AuditHead<'a, R::Int>, R::Error> {
    let partition = r.long()?;
    let seq = r.long()?;
    let prev_mac = r.string()?;
    let event = r.string()?;
    let run_id = r.string()?;
    for _ in 0..6 {
        // stage_id, kind, terminal_state, reason_code, artifact_hash, evidence_set_hash
        r.skip_string()?;
    }
    let record_hash = r.string()?;
    let journal_seq = r.long()?;
    r.string()?; // input.topic
    let input_partition = r.long()?;
    let input_offset = r.long()?;
    Ok(AuditHead {
        partition,
        seq,
        prev_mac,
        event,
        run_id,
        record_hash,
        journal_seq,
        input_partition,
        input_offset,
    })
}

/// An AuditEntry.v1/v2 payload, decoded in full, strictly.
pub fn decode_audit_entry(payload: &[u8]) -> Option<AuditHead<'_, i64>> {
    decode(payload, |r, layout| {
        layout
            .is_audit_entry()
            .then(|| read_audit_entry(r, layout == Layout::AuditEntryV2))
    })
}

fn read_audit_entry<'a>(r: &mut Reader<'a>, v2: bool) -> ReadResult<AuditHead<'a, i64>> {
    let head = read_audit_head(r)?;
    if v2 && union_index(r)? {
        r.string()?; // session_id
        r.long()?; // action_index
        for _ in 0..9 {
            // anchor, prev_anchor, screenshot_hash, dom_digest, observation_hash, action_kind,
            // action_digest, lineage_entry_hash, worker_id
            r.string()?;
        }
    }
    Ok(head)
}
