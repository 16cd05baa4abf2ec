//! The one reader of our Avro records: every layout this crate reads, by name and
//! fingerprint (`Layout`), and the decoders of each record kind, used by the scheduler's
//! step (`core`), the restart fold (`fold`) and the verifier's facts (`verify`).
//!
//! A record is read field by field through a `FieldReader`. Two readers implement it, and
//! each caller keeps the one whose accepted bytes and errors it must reproduce:
//!
//! * `crate::avro::Reader`, strict (`Malformed` for anything fastavro might read
//!   differently; the Python reference then decides): the step, the fold, the verifier's
//!   full journal entries;
//! * `CodecReader`, `schemas.codec`'s fast readers with their messages (10-byte varints
//!   with up to 70 bits, skipped strings not checked as UTF-8): the verifier's envelopes
//!   and heads.
//!
//! The record layouts (which field comes after which) are written once, in the submodules.

pub mod audit;
pub mod envelope;
pub mod journal;
pub mod seal;
pub mod submission;

use crate::avro::{Malformed, ReadResult, Reader};
use crate::hashing::hex_string;
use crate::schemas::*;

/// A record layout this crate reads, as named by its `.avsc` stem.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Layout {
    ActivitySubmissionV1,
    ActivitySubmissionV2,
    ActivitySubmissionV3,
    RunCloseV1,
    RunCloseV2,
    JournalRecord,
    SealRecord,
    JournalEntryV1,
    JournalEntryV2,
    JournalEntryV3,
    ComputerUseEntryV1,
    ComputerUseEntryV2,
    RunSealV1,
    RunSealV2,
    AuditRecordV1,
    AuditRecordV2,
    AuditEntryV1,
    AuditEntryV2,
    CheckpointRecord,
    PartitionCheckpoint,
    PartitionCheckpointV2,
}

/// Every layout with its `.avsc` stem and fingerprint (each name and fingerprint once).
pub const LAYOUTS: [(Layout, &str, [u8; 8]); 21] = [
    (
        Layout::ActivitySubmissionV1,
        ACTIVITY_SUBMISSION,
        FP_ACTIVITY_SUBMISSION,
    ),
    (
        Layout::ActivitySubmissionV2,
        ACTIVITY_SUBMISSION_V2,
        FP_ACTIVITY_SUBMISSION_V2,
    ),
    (
        Layout::ActivitySubmissionV3,
        ACTIVITY_SUBMISSION_V3,
        FP_ACTIVITY_SUBMISSION_V3,
    ),
    (Layout::RunCloseV1, RUN_CLOSE, FP_RUN_CLOSE),
    (Layout::RunCloseV2, RUN_CLOSE_V2, FP_RUN_CLOSE_V2),
    (Layout::JournalRecord, "JournalRecord.v1", FP_JOURNAL_RECORD),
    (Layout::SealRecord, "SealRecord.v1", FP_SEAL_RECORD),
    (Layout::JournalEntryV1, "JournalEntry.v1", FP_JOURNAL_ENTRY),
    (
        Layout::JournalEntryV2,
        "JournalEntry.v2",
        FP_JOURNAL_ENTRY_V2,
    ),
    (
        Layout::JournalEntryV3,
        "JournalEntry.v3",
        FP_JOURNAL_ENTRY_V3,
    ),
    (
        Layout::ComputerUseEntryV1,
        "ComputerUseEntry.v1",
        FP_COMPUTER_USE_ENTRY,
    ),
    (
        Layout::ComputerUseEntryV2,
        "ComputerUseEntry.v2",
        FP_COMPUTER_USE_ENTRY_V2,
    ),
    (Layout::RunSealV1, "RunSeal.v1", FP_RUN_SEAL),
    (Layout::RunSealV2, "RunSeal.v2", FP_RUN_SEAL_V2),
    (Layout::AuditRecordV1, "AuditRecord.v1", FP_AUDIT_RECORD),
    (Layout::AuditRecordV2, "AuditRecord.v2", FP_AUDIT_RECORD_V2),
    (Layout::AuditEntryV1, "AuditEntry.v1", FP_AUDIT_ENTRY),
    (Layout::AuditEntryV2, "AuditEntry.v2", FP_AUDIT_ENTRY_V2),
    (
        Layout::CheckpointRecord,
        "CheckpointRecord.v1",
        FP_CHECKPOINT_RECORD,
    ),
    (
        Layout::PartitionCheckpoint,
        "PartitionCheckpoint.v1",
        FP_PARTITION_CHECKPOINT,
    ),
    (
        Layout::PartitionCheckpointV2,
        "PartitionCheckpoint.v2",
        FP_PARTITION_CHECKPOINT_V2,
    ),
];

impl Layout {
    fn entry(self) -> &'static (Layout, &'static str, [u8; 8]) {
        LAYOUTS
            .iter()
            .find(|(layout, _, _)| *layout == self)
            .expect("every layout is listed")
    }

    /// The `.avsc` stem, e.g. `JournalEntry.v3`.
    pub fn name(self) -> &'static str {
        self.entry().1
    }

    pub fn fingerprint(self) -> [u8; 8] {
        self.entry().2
    }

    pub fn by_name(name: &str) -> Option<Layout> {
        LAYOUTS.iter().find(|(_, n, _)| *n == name).map(|e| e.0)
    }

    pub fn by_fingerprint(fp: &[u8]) -> Option<Layout> {
        LAYOUTS.iter().find(|(_, _, f)| f[..] == *fp).map(|e| e.0)
    }

    /// JournalEntry.v1, v2 or v3.
    pub fn is_activity_entry(self) -> bool {
        matches!(
            self,
            Layout::JournalEntryV1 | Layout::JournalEntryV2 | Layout::JournalEntryV3
        )
    }

    /// ComputerUseEntry.v1 or v2.
    pub fn is_action_entry(self) -> bool {
        matches!(
            self,
            Layout::ComputerUseEntryV1 | Layout::ComputerUseEntryV2
        )
    }

    /// Any journal entry (the payload of a JournalRecord).
    pub fn is_journal_entry(self) -> bool {
        self.is_activity_entry() || self.is_action_entry()
    }

    /// AuditEntry.v1 or v2.
    pub fn is_audit_entry(self) -> bool {
        matches!(self, Layout::AuditEntryV1 | Layout::AuditEntryV2)
    }
}

/// `(name, fingerprint)` of each layout, in order (the lists the extension exports).
pub fn schema_list(layouts: &[Layout]) -> Vec<(&'static str, [u8; 8])> {
    layouts
        .iter()
        .map(|l| (l.name(), l.fingerprint()))
        .collect()
}

// ---------------------------------------------------------------------------
// the single-object header, with `schemas.codec`'s messages
// ---------------------------------------------------------------------------

/// The fingerprint a single-object value names, or `Codec.schema_of`'s message when the
/// value does not start with the header.
pub fn fingerprint_of(value: &[u8]) -> Result<[u8; 8], String> {
    if value.len() < HEADER_SIZE || value[..2] != MAGIC {
        let shown = hex_string(&value[..value.len().min(12)]);
        return Err(format!(
            "value is not an Avro single-object record (expected it to start with c301, got '{shown}', {} bytes)",
            value.len()
        ));
    }
    Ok(value[2..HEADER_SIZE].try_into().expect("8 bytes"))
}

/// `Codec.schema_of`'s message for a fingerprint that is not one of the codec's.
pub fn unknown_fingerprint(fp: &[u8; 8]) -> String {
    format!(
        "value names schema fingerprint {} which is not one of our schemas \
         (a newer producer, or a foreign record on our topic)",
        hex_string(fp)
    )
}

/// `schemas.codec`'s message for a body that does not end where its record does.
pub fn trailing_bytes(name: &str, extra: usize) -> String {
    format!("{name} body has {extra} unexpected trailing bytes")
}

// ---------------------------------------------------------------------------
// the two field readers
// ---------------------------------------------------------------------------

/// Reads the fields of one record body, in order.
pub trait FieldReader<'a> {
    /// An Avro int or long as this reader holds it.
    type Int: Copy;
    type Error;
    fn long(&mut self) -> Result<Self::Int, Self::Error>;
    fn bytes(&mut self) -> Result<&'a [u8], Self::Error>;
    fn string(&mut self) -> Result<&'a str, Self::Error>;
    /// A string field whose value is not kept.
    fn skip_string(&mut self) -> Result<(), Self::Error>;
}

impl<'a> FieldReader<'a> for Reader<'a> {
    type Int = i64;
    type Error = Malformed;

    #[inline]
    fn long(&mut self) -> ReadResult<i64> {
        Reader::long(self)
    }

    #[inline]
    fn bytes(&mut self) -> ReadResult<&'a [u8]> {
        Reader::bytes(self)
    }

    #[inline]
    fn string(&mut self) -> ReadResult<&'a str> {
        Reader::string(self)
    }

    /// fastavro decodes every string field: a skipped one must be UTF-8 too.
    #[inline]
    fn skip_string(&mut self) -> ReadResult<()> {
        Reader::string(self).map(|_| ())
    }
}

const E_NUMBER_END: &str = "record ends inside a number";
const E_NUMBER_LONG: &str = "number longer than 10 bytes";
const E_BYTES_END: &str = "record ends inside a byte string";
const E_NOT_UTF8: &str = "string is not UTF-8";

/// `schemas.codec`'s fast readers (`_varint`, `_blob`, `_text`), with their messages.
pub struct CodecReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> CodecReader<'a> {
    pub fn new(data: &'a [u8], pos: usize) -> Self {
        CodecReader { data, pos }
    }

    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> FieldReader<'a> for CodecReader<'a> {
    type Int = i128;
    type Error = &'static str;

    /// `_varint`: at most 10 bytes; the value is Python's (up to 70 bits).
    #[inline]
    fn long(&mut self) -> Result<i128, &'static str> {
        let mut shift: u32 = 0;
        let mut result: u128 = 0;
        loop {
            let byte = *self.data.get(self.pos).ok_or(E_NUMBER_END)?;
            self.pos += 1;
            result |= u128::from(byte & 0x7F) << shift;
            if byte < 0x80 {
                return Ok(((result >> 1) as i128) ^ -((result & 1) as i128));
            }
            shift += 7;
            if shift > 63 {
                return Err(E_NUMBER_LONG);
            }
        }
    }

    /// `_blob`
    #[inline]
    fn bytes(&mut self) -> Result<&'a [u8], &'static str> {
        let size = self.long()?;
        let end = self.pos as i128 + size;
        if size < 0 || end > self.data.len() as i128 {
            return Err(E_BYTES_END);
        }
        let end = end as usize;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// `_text`
    #[inline]
    fn string(&mut self) -> Result<&'a str, &'static str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| E_NOT_UTF8)
    }

    /// The fast readers skip a string as a blob (not checked as UTF-8).
    #[inline]
    fn skip_string(&mut self) -> Result<(), &'static str> {
        self.bytes().map(|_| ())
    }
}

// ---------------------------------------------------------------------------
// strict helpers
// ---------------------------------------------------------------------------

/// fastavro reads any non-zero byte as true; only the two bytes our encoders write are accepted
/// here. A boolean is one raw byte: read as a varint, 0x00 is 0 and 0x01 is -1, and anything
/// longer than one byte is refused.
#[inline]
pub fn boolean(r: &mut Reader<'_>) -> ReadResult<bool> {
    let at = r.position();
    let value = r.long()?;
    if r.position() != at + 1 {
        return Err(Malformed);
    }
    match value {
        0 => Ok(false),
        -1 => Ok(true),
        _ => Err(Malformed),
    }
}

/// An Avro union `["null", T]`: whether the value is the T branch.
#[inline]
pub fn union_index(r: &mut Reader<'_>) -> ReadResult<bool> {
    match r.long()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Malformed),
    }
}

/// The layout a single-object value names and a strict reader over its body (None: not one of ours).
#[inline]
pub fn open(value: &[u8]) -> Option<(Layout, Reader<'_>)> {
    if value.len() < HEADER_SIZE || value[..2] != MAGIC {
        return None;
    }
    let layout = Layout::by_fingerprint(&value[2..HEADER_SIZE])?;
    Some((layout, Reader::new(&value[HEADER_SIZE..])))
}

/// A whole single-object value read strictly by `read`, which returns None for a layout it does
/// not take: None too when the body is malformed or does not end exactly where `read` stopped
/// (our codec refuses trailing bytes), and the Python codec then decides.
#[inline]
pub fn decode<'a, T>(
    value: &'a [u8],
    read: impl FnOnce(&mut Reader<'a>, Layout) -> Option<ReadResult<T>>,
) -> Option<T> {
    let (layout, r) = open(value)?;
    decode_as(value, layout, r, read)
}

/// `decode` of a value whose layout the caller determined (its header is not looked at).
#[inline]
pub fn decode_body<'a, T>(
    value: &'a [u8],
    layout: Layout,
    read: impl FnOnce(&mut Reader<'a>, Layout) -> Option<ReadResult<T>>,
) -> Option<T> {
    let body = value.get(HEADER_SIZE..)?;
    decode_as(value, layout, Reader::new(body), read)
}

#[inline]
fn decode_as<'a, T>(
    value: &'a [u8],
    layout: Layout,
    mut r: Reader<'a>,
    read: impl FnOnce(&mut Reader<'a>, Layout) -> Option<ReadResult<T>>,
) -> Option<T> {
    let decoded = read(&mut r, layout)?.ok()?;
    (r.position() == value.len() - HEADER_SIZE).then_some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_is_named_once() {
        let mut names: Vec<&str> = LAYOUTS.iter().map(|e| e.1).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), LAYOUTS.len());
        let mut fingerprints: Vec<[u8; 8]> = LAYOUTS.iter().map(|e| e.2).collect();
        fingerprints.sort_unstable();
        fingerprints.dedup();
        assert_eq!(fingerprints.len(), LAYOUTS.len());
        for (layout, name, fp) in LAYOUTS {
            assert_eq!(layout.name(), name);
            assert_eq!(Layout::by_name(name), Some(layout));
            assert_eq!(Layout::by_fingerprint(&fp), Some(layout));
        }
    }

    #[test]
    fn booleans_are_one_byte_0_or_1() {
        let read = |data: &[u8]| {
            let mut r = Reader::new(data);
            boolean(&mut r).map(|b| (b, r.position()))
        };
        assert_eq!(read(&[0]), Ok((false, 1)));
        assert_eq!(read(&[1]), Ok((true, 1)));
        assert_eq!(read(&[2]), Err(Malformed)); // fastavro: true
        assert_eq!(read(&[0x80, 0]), Err(Malformed)); // fastavro: true, then a misaligned body
        assert_eq!(read(&[]), Err(Malformed));
    }

    #[test]
    fn unions_take_branch_0_or_1() {
        for (data, expected) in [
            (&[0u8][..], Ok(false)),
            (&[2], Ok(true)),
            (&[4], Err(Malformed)),
            (&[1], Err(Malformed)),
        ] {
            assert_eq!(union_index(&mut Reader::new(data)), expected);
        }
    }

    #[test]
    fn a_value_is_one_of_ours_only_with_the_magic_and_a_known_fingerprint() {
        let mut value = vec![0xC3, 0x01];
        value.extend_from_slice(&FP_CHECKPOINT_RECORD);
        assert_eq!(
            open(&value).map(|(layout, _)| layout),
            Some(Layout::CheckpointRecord)
        );
        value[0] = 0xC4;
        assert!(open(&value).is_none());
        assert!(open(&[0xC3, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]).is_none());
        assert!(open(&[0xC3, 0x01]).is_none());
        // trailing bytes: the envelope reads, the value does not end there
        let mut envelope = value.clone();
        envelope[0] = 0xC3;
        envelope.extend_from_slice(&[0, 0, 0]); // empty payload, key id and signature
        assert!(envelope::decode_envelope(&envelope).is_some());
        envelope.push(0);
        assert!(envelope::decode_envelope(&envelope).is_none());
    }

    #[test]
    fn the_codec_reader_keeps_its_messages() {
        let mut r = CodecReader::new(&[0x80], 0);
        assert_eq!(r.long(), Err(E_NUMBER_END));
        let mut r = CodecReader::new(&[0xFF; 11], 0);
        assert_eq!(r.long(), Err(E_NUMBER_LONG));
        let mut r = CodecReader::new(&[4, b'a'], 0);
        assert_eq!(r.bytes(), Err(E_BYTES_END));
        let mut r = CodecReader::new(&[2, 0xFF], 0);
        assert_eq!(r.string(), Err(E_NOT_UTF8));
        let mut r = CodecReader::new(&[2, 0xFF], 0);
        assert_eq!(r.skip_string(), Ok(()));
        assert_eq!(r.position(), 2);
    }
}
