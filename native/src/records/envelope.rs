//! The envelopes: JournalRecord, SealRecord, AuditRecord (v1, v2) and CheckpointRecord.

use super::{decode, FieldReader, Layout};

pub enum Envelope<'a> {
    /// A JournalRecord: the entry payload and its stored `entry_hash`.
    Journal { payload: &'a [u8], stored: &'a str },
    Seal {
        payload: &'a [u8],
        key_id: &'a str,
        signature: &'a [u8],
    },
    Audit {
        payload: &'a [u8],
        key_id: &'a str,
        mac: &'a str,
        /// AuditRecord.v2: the MAC covers the key id too (`audit_record_mac`).
        v2: bool,
    },
    Checkpoint {
        payload: &'a [u8],
        key_id: &'a str,
        signature: &'a [u8],
    },
}

/// The envelope of `layout` read from `r`; None when `layout` is not an envelope.
pub fn read_envelope<'a, R: FieldReader<'a>>(
    r: &mut R,
    layout: Layout,
) -> Option<Result<Envelope<'a>, R::Error>> {
    let read: fn(&mut R) -> Result<Envelope<'a>, R::Error> = match layout {
        Layout::JournalRecord => |r| {
            let payload = r.bytes()?;
            let stored = r.string()?;
            Ok(Envelope::Journal { payload, stored })
        },
        Layout::SealRecord => |r| {
            let payload = r.bytes()?;
            let key_id = r.string()?;
            let signature = r.bytes()?;
            Ok(Envelope::Seal {
                payload,
                key_id,
                signature,
            })
        },
        Layout::CheckpointRecord => |r| {
            let payload = r.bytes()?;
            let key_id = r.string()?;
            let signature = r.bytes()?;
            Ok(Envelope::Checkpoint {
                payload,
                key_id,
                signature,
            })
        },
        Layout::AuditRecordV1 => |r| {
            let payload = r.bytes()?;
            let key_id = r.string()?;
            let mac = r.string()?;
            Ok(Envelope::Audit {
                payload,
                key_id,
                mac,
                v2: false,
            })
        },
        Layout::AuditRecordV2 => |r| {
            let key_id = r.string()?;
            let payload = r.bytes()?;
            let mac = r.string()?;
            Ok(Envelope::Audit {
                payload,
                key_id,
                mac,
                v2: true,
            })
        },
        _ => return None,
    };
    Some(read(r))
}

/// An envelope value, in full, strictly (None: the Python codec decides).
pub fn decode_envelope(value: &[u8]) -> Option<Envelope<'_>> {
    decode(value, read_envelope)
}
