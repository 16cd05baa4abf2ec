//! Journal entries: JournalEntry.v1/v2/v3 (a stage's activity) and ComputerUseEntry.v1/v2
//! (a browser action), the payloads of JournalRecords.

use super::submission::{read_observations, Observation};
use super::{decode, decode_body, FieldReader, Layout};
use crate::avro::{ReadResult, Reader};

/// The four fields every journal entry starts with (`schemas.codec.read_entry_head`).
pub struct EntryHead<'a, N> {
    pub run_id: &'a str,
    pub seq: N,
    pub prev_hash: &'a str,
    pub entry_type: &'a str,
}

pub fn read_entry_head<'a, R: FieldReader<'a>>(
    r: &mut R,
) -> Result<EntryHead<'a, R::Int>, R::Error> {
    Ok(EntryHead {
        run_id: r.string()?,
        seq: r.long()?,
        prev_hash: r.string()?,
        entry_type: r.string()?,
    })
}

/// A journal entry, decoded in full.
pub struct Entry<'a> {
    pub layout: Layout,
    pub head: EntryHead<'a, i64>,
    pub submission_id: &'a str,
    /// The producer.id the entry names: the run's opener when it is the run's first entry.
    pub producer_id: &'a str,
    pub body: Body<'a>,
}

pub enum Body<'a> {
    /// JournalEntry.v1/v2/v3.
    Activity(Activity<'a>),
    /// ComputerUseEntry.v1/v2.
    Action(Action<'a>),
}

pub struct Activity<'a> {
    pub stage_id: &'a str,
    pub role: &'a str,
    pub kind: &'a str,
    pub artifact_hash: &'a str,
    pub evidence_set_hash: &'a str,
    /// With their declared sizes for JournalEntry.v2 and v3 (0 for v1, which declares none).
    pub observations: Vec<Observation<'a>>,
    pub terminal_state: &'a str,
    pub reason_code: &'a str,
    pub occurred_at_ms: i64,
    /// JournalEntry.v3: the producer's key id and signature.
    pub producer: Option<(&'a str, &'a [u8])>,
}

impl Activity<'_> {
    /// The observations carry sizes (JournalEntry.v2, v3).
    pub fn sized(layout: Layout) -> bool {
        matches!(layout, Layout::JournalEntryV2 | Layout::JournalEntryV3)
    }
}

pub struct Action<'a> {
    pub session_id: &'a str,
    pub action_index: i64,
    pub anchor: &'a str,
    /// The screenshot's and the DOM snapshot's digests and sizes (ComputerUseEntry.v2; 0 for v1).
    pub screenshot: (&'a str, i64),
    pub dom: (&'a str, i64),
}

/// A journal entry payload, decoded in full (None: the Python codec decides).
pub fn decode_entry(payload: &[u8]) -> Option<Entry<'_>> {
    decode(payload, read_entry)
}

/// `decode_entry` of a payload whose layout the caller read from its own schema table.
pub fn decode_entry_as(payload: &[u8], layout: Layout) -> Option<Entry<'_>> {
    decode_body(payload, layout, read_entry)
}

/// The entry of `layout` (None: not a journal entry).
pub fn read_entry<'a>(r: &mut Reader<'a>, layout: Layout) -> Option<ReadResult<Entry<'a>>> {
    if layout.is_activity_entry() {
        Some(read_activity(r, layout))
    } else if layout.is_action_entry() {
        Some(read_action(r, layout))
    } else {
        None
    }
}

/// `Position {topic: string, partition: int, offset: long}` (fastavro reads an int as a long).
#[inline]
pub fn skip_position(r: &mut Reader<'_>) -> ReadResult<()> {
    r.string()?;
    r.long()?;
    r.long()?;
    Ok(())
}

fn read_activity<'a>(r: &mut Reader<'a>, layout: Layout) -> ReadResult<Entry<'a>> {
    let sized = Activity::sized(layout);
    let head = read_entry_head(r)?;
    let stage_id = r.string()?;
    let role = r.string()?;
    let kind = r.string()?;
    let producer_id = r.string()?;
    let submission_id = r.string()?;
    let artifact_hash = r.string()?;
    let evidence_set_hash = r.string()?;
    let observations = read_observations(r, sized)?;
    let terminal_state = r.string()?;
    let reason_code = r.string()?;
    skip_position(r)?;
    let occurred_at_ms = r.long()?;
    let producer = if layout == Layout::JournalEntryV3 {
        let key_id = r.string()?;
        Some((key_id, r.bytes()?))
    } else {
        None
    };
    Ok(Entry {
        layout,
        head,
        submission_id,
        producer_id,
        body: Body::Activity(Activity {
            stage_id,
            role,
            kind,
            artifact_hash,
            evidence_set_hash,
            observations,
            terminal_state,
            reason_code,
            occurred_at_ms,
            producer,
        }),
    })
}

fn read_action<'a>(r: &mut Reader<'a>, layout: Layout) -> ReadResult<Entry<'a>> {
    let sized = layout == Layout::ComputerUseEntryV2;
    let head = read_entry_head(r)?;
    let session_id = r.string()?;
    let action_index = r.long()?;
    let producer_id = r.string()?;
    let submission_id = r.string()?;
    r.string()?; // prev_anchor
    let anchor = r.string()?;
    let screenshot_hash = r.string()?;
    let screenshot_size = if sized { r.long()? } else { 0 };
    let dom_digest = r.string()?;
    let dom_size = if sized { r.long()? } else { 0 };
    r.string()?; // observation_hash
    r.string()?; // action.kind
    r.string()?; // action.target
    r.string()?; // action.value_digest
    r.string()?; // lineage_entry_hash
    r.string()?; // lineage_key_id
    r.bytes()?; // lineage_signature
    r.string()?; // lineage_hmac
    r.bytes()?; // lineage_entry
    skip_position(r)?;
    r.long()?; // occurred_at_ms
    Ok(Entry {
        layout,
        head,
        submission_id,
        producer_id,
        body: Body::Action(Action {
            session_id,
            action_index,
            anchor,
            screenshot: (screenshot_hash, screenshot_size),
            dom: (dom_digest, dom_size),
        }),
    })
}
