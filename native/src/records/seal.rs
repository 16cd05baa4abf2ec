//! Run seals (RunSeal.v1/v2) and partition checkpoints (PartitionCheckpoint.v1/v2), the payloads
//! of SealRecords and CheckpointRecords.

use super::{boolean, decode, union_index, Layout};
use crate::avro::{ReadResult, Reader};

pub struct Seal<'a> {
    pub run_id: &'a str,
    pub entry_count: i64,
    pub head_hash: &'a str,
    pub last_input_offset: i64,
    pub last: bool,
    pub audit_head: &'a str,
}

/// A RunSeal.v1/v2 payload, decoded in full.
pub fn decode_seal(payload: &[u8]) -> Option<Seal<'_>> {
    decode(payload, |r, layout| match layout {
        Layout::RunSealV1 | Layout::RunSealV2 => Some(read_seal(r, layout == Layout::RunSealV2)),
        _ => None,
    })
}

fn read_seal<'a>(r: &mut Reader<'a>, v2: bool) -> ReadResult<Seal<'a>> {
    let run_id = r.string()?;
    r.long()?; // partition
    let entry_count = r.long()?;
    let head_hash = r.string()?;
    let last_input_offset = r.long()?;
    let last = boolean(r)?;
    r.long()?; // audit_seq
    let audit_head = r.string()?;
    r.long()?; // sealed_at_ms
    if v2 && union_index(r)? {
        r.string()?; // closed_by.submission_id
        r.string()?; // closed_by.producer_id
        r.long()?; // closed_by.occurred_at_ms
        r.string()?; // closed_by.key_id
        r.bytes()?; // closed_by.signature
    }
    Ok(Seal {
        run_id,
        entry_count,
        head_hash,
        last_input_offset,
        last,
        audit_head,
    })
}

pub struct Checkpoint<'a> {
    pub partition: i64,
    pub seq: i64,
    pub prev_hash: &'a str,
    pub audit_seq: i64,
    pub audit_head: &'a str,
}

/// A PartitionCheckpoint.v1 or v2 payload, decoded in full.
pub fn decode_checkpoint(payload: &[u8]) -> Option<Checkpoint<'_>> {
    decode(payload, |r, layout| match layout {
        Layout::PartitionCheckpoint => Some(read_checkpoint(r, false)),
        Layout::PartitionCheckpointV2 => Some(read_checkpoint(r, true)),
        _ => None,
    })
}

fn read_checkpoint<'a>(r: &mut Reader<'a>, v2: bool) -> ReadResult<Checkpoint<'a>> {
    let partition = r.long()?;
    let seq = r.long()?;
    let prev_hash = r.string()?;
    r.string()?; // input_topic
    r.long()?; // next_offset
    let audit_seq = r.long()?;
    let audit_head = r.string()?;
    r.string()?; // reason
    r.long()?; // checkpoint_every
    r.long()?; // checkpointed_at_ms
    if v2 {
        r.long()?; // tree_size
        r.string()?; // tree_root
        r.string()?; // note
    }
    Ok(Checkpoint {
        partition,
        seq,
        prev_hash,
        audit_seq,
        audit_head,
    })
}
