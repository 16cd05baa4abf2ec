//! Producer inputs: ActivitySubmission.v1/v2/v3 and RunClose.v1/v2, the records the step reads.

use crate::avro::{ReadResult, Reader};
use crate::schemas::{
    ACTIVITY_SUBMISSION, ACTIVITY_SUBMISSION_V2, ACTIVITY_SUBMISSION_V3, FP_ACTIVITY_SUBMISSION_V2,
    FP_ACTIVITY_SUBMISSION_V3,
};

pub struct Observation<'a> {
    pub kind: &'a str,
    pub reference: &'a str,
    pub content_hash: &'a str,
    /// The declared byte size (ActivitySubmission.v2); 0 for v1, which declares none.
    pub size: i64,
}

/// The `observations` array of a submission or a journal entry (Avro blocks of kind, reference,
/// content hash and, for the `sized` layouts, the declared size; 0 where none is declared).
pub fn read_observations<'a>(r: &mut Reader<'a>, sized: bool) -> ReadResult<Vec<Observation<'a>>> {
    let mut observations = Vec::new();
    loop {
        let count = r.block_count()?;
        if count == 0 {
            break;
        }
        for _ in 0..count {
            let kind = r.string()?;
            let reference = r.string()?;
            let content_hash = r.string()?;
            let size = if sized { r.long()? } else { 0 };
            observations.push(Observation {
                kind,
                reference,
                content_hash,
                size,
            });
        }
    }
    Ok(observations)
}

/// ActivitySubmission.v1 or .v2, borrowed from the input bytes.
pub struct Submission<'a> {
    pub submission_id: &'a str,
    pub run_id: &'a str,
    pub stage_id: &'a str,
    pub role: &'a str,
    pub producer_id: &'a str,
    pub producer_sdk: &'a str,
    pub kind: &'a str,
    pub artifact: &'a [u8],
    pub artifact_hash: &'a str,
    pub evidence_set_hash: &'a str,
    pub observations: Vec<Observation<'a>>,
    pub terminal_state: &'a str,
    pub reason_code: &'a str,
    pub occurred_at_ms: i64,
    /// ActivitySubmission.v2 or .v3: every observation declares its blob's size (the evidence cap).
    pub sized: bool,
    /// The schema it was read as (`ActivitySubmission.v1`, `.v2` or `.v3`).
    pub schema: &'static str,
    /// ActivitySubmission.v3: the producer's key id and signature (None: unsigned v1/v2).
    pub producer: Option<(&'a str, &'a [u8])>,
}

/// RunClose.v1 or .v2, borrowed from the input bytes.
pub struct RunClose<'a> {
    pub submission_id: &'a str,
    pub run_id: &'a str,
    pub producer_id: &'a str,
    pub producer_sdk: &'a str,
    pub occurred_at_ms: i64,
    /// RunClose.v2: the producer's key id and signature (None: an unsigned v1).
    pub producer: Option<(&'a str, &'a [u8])>,
}

/// Decodes an ActivitySubmission body of `fingerprint` (v1, v2 or v3); returns the record and the
/// number of body bytes it used.
pub fn decode_submission(body: &[u8], fingerprint: [u8; 8]) -> ReadResult<(Submission<'_>, usize)> {
    let (sized, signed, schema) = if fingerprint == FP_ACTIVITY_SUBMISSION_V3 {
        (true, true, ACTIVITY_SUBMISSION_V3)
    } else if fingerprint == FP_ACTIVITY_SUBMISSION_V2 {
        (true, false, ACTIVITY_SUBMISSION_V2)
    } else {
        (false, false, ACTIVITY_SUBMISSION)
    };
    let mut r = Reader::new(body);
    let submission_id = r.string()?;
    let run_id = r.string()?;
    let stage_id = r.string()?;
    let role = r.string()?;
    let producer_id = r.string()?;
    let producer_sdk = r.string()?;
    let kind = r.string()?;
    let artifact = r.bytes()?;
    let artifact_hash = r.string()?;
    let evidence_set_hash = r.string()?;
    let observations = read_observations(&mut r, sized)?;
    let terminal_state = r.string()?;
    let reason_code = r.string()?;
    let occurred_at_ms = r.long()?;
    let producer = if signed {
        let key_id = r.string()?;
        Some((key_id, r.bytes()?))
    } else {
        None
    };
    let used = r.position();
    Ok((
        Submission {
            submission_id,
            run_id,
            stage_id,
            role,
            producer_id,
            producer_sdk,
            kind,
            artifact,
            artifact_hash,
            evidence_set_hash,
            observations,
            terminal_state,
            reason_code,
            occurred_at_ms,
            sized,
            schema,
            producer,
        },
        used,
    ))
}

/// Decodes a RunClose body (`signed`: RunClose.v2).
pub fn decode_run_close(body: &[u8], signed: bool) -> ReadResult<(RunClose<'_>, usize)> {
    let mut r = Reader::new(body);
    let submission_id = r.string()?;
    let run_id = r.string()?;
    let producer_id = r.string()?;
    let producer_sdk = r.string()?;
    let occurred_at_ms = r.long()?;
    let producer = if signed {
        let key_id = r.string()?;
        Some((key_id, r.bytes()?))
    } else {
        None
    };
    let used = r.position();
    Ok((
        RunClose {
            submission_id,
            run_id,
            producer_id,
            producer_sdk,
            occurred_at_ms,
            producer,
        },
        used,
    ))
}
