//! Refusals: the refused record's fields and reason, the envelope and partition checks, and the
//! producer checks (`_producer_refusal`, `_owner_refusal`, `_open_runs_refusal`, `refuse`).

use super::*;

pub(crate) struct Refusal<'a> {
    pub(crate) code: &'static str,
    pub(crate) message: String,
    pub(crate) field: Cow<'a, str>,
    pub(crate) declared: Cow<'a, str>,
    pub(crate) recomputed: Cow<'a, str>,
    pub(crate) earlier_stage_id: Option<String>,
    pub(crate) exception: &'static str,
    /// Reached after the producer's signature verified (Refusal.v2 `authenticated`).
    pub(crate) authenticated: bool,
}

impl<'a> Refusal<'a> {
    pub(crate) fn new(
        code: &'static str,
        message: String,
        field: impl Into<Cow<'a, str>>,
        declared: impl Into<Cow<'a, str>>,
    ) -> Self {
        Refusal {
            code,
            message,
            field: field.into(),
            declared: declared.into(),
            recomputed: Cow::Borrowed(""),
            earlier_stage_id: None,
            exception: "ActivityRejected",
            authenticated: false,
        }
    }
    pub(crate) fn recomputed(mut self, value: impl Into<Cow<'a, str>>) -> Self {
        self.recomputed = value.into();
        self
    }
    pub(crate) fn authenticated(mut self) -> Self {
        self.authenticated = true;
        self
    }
}

/// The submission fields `_refuse` reads (`sub.get(name, "")`).
pub(crate) struct RefusedFields<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) stage_id: &'a str,
    pub(crate) role: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) submission_id: &'a str,
    pub(crate) terminal_state: &'a str,
    pub(crate) artifact_hash: &'a str,
    pub(crate) evidence_set_hash: &'a str,
    pub(crate) occurred_at_ms: i64,
    /// The producer.id and the signing key id the record names (empty: unsigned).
    pub(crate) producer: &'a str,
    pub(crate) key_id: &'a str,
}

pub(crate) fn malformed_digest<'a>(field: impl Into<Cow<'a, str>>, value: &'a str) -> Refusal<'a> {
    let field = field.into();
    Refusal::new(
        "MALFORMED_DIGEST",
        format!("{field} is not of the form sha256:<64 lowercase hex>"),
        field,
        clip(value, MAX_EVIDENCE_CHARS),
    )
}

/// `schemas.partitioning.murmur2`: Kafka's `Utils.murmur2` (seed 0x9747b28c), as Java's signed int.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = blocks.remainder();
    if tail.len() == 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// `schemas.partitioning.partition_for`: `(murmur2(key) & 0x7fffffff) % partitions` (`partitions` >= 1).
pub fn partition_for(key: &[u8], partitions: i64) -> i64 {
    i64::from(murmur2(key) & 0x7fff_ffff) % partitions
}

/// `step._partition_refusal`: the record keyed by its run id sits on its key's murmur2 partition.
pub(crate) fn partition_refusal<'a>(
    run_id: &str,
    partition: i64,
    partitions: i64,
) -> Option<Refusal<'a>> {
    let wanted = partition_for(run_id.as_bytes(), partitions);
    if partition == wanted {
        return None;
    }
    Some(
        Refusal::new(
            "WRONG_PARTITION",
            format!(
                "the record of run '{run_id}' is on partition {partition} of {partitions}, but its key belongs on partition \
                 {wanted}: produce with Kafka's murmur2 partitioner, (murmur2(key) & 0x7fffffff) % {partitions}"
            ),
            "partition",
            partition.to_string(),
        )
        .recomputed(wanted.to_string()),
    )
}

/// `step._envelope_refusal`: submission_id, producer id and sdk, occurred_at_ms,
/// the record key, which must be the run id's bytes (`run_id` is valid), and the
/// record's partition (`partition`), which must be the key's when `partitions` is set.
pub(crate) fn envelope_refusal<'a>(
    key: Option<&[u8]>,
    run_id: &'a str,
    submission_id: &'a str,
    producer: [&'a str; 2],
    occurred_at_ms: i64,
    partition: i64,
    partitions: Option<i64>,
) -> Option<Refusal<'a>> {
    if !is_valid_label(submission_id) {
        return Some(Refusal::new(
            "INVALID_SUBMISSION_ID",
            format!("submission_id {LABEL_RULE}"),
            "submission_id",
            clip(submission_id, MAX_EVIDENCE_CHARS),
        ));
    }
    for (name, value) in [("producer.id", producer[0]), ("producer.sdk", producer[1])] {
        if !is_valid_label(value) {
            return Some(Refusal::new(
                "INVALID_PRODUCER",
                format!("{name} {LABEL_RULE}"),
                name,
                clip(value, MAX_EVIDENCE_CHARS),
            ));
        }
    }
    if !(0..=MAX_OCCURRED_AT_MS).contains(&occurred_at_ms) {
        return Some(
            Refusal::new(
                "INVALID_OCCURRED_AT",
                format!(
                    "occurred_at_ms must be 0 to {MAX_OCCURRED_AT_MS} (1970-01-01 to 9999-12-31 UTC), got {occurred_at_ms}"
                ),
                "occurred_at_ms",
                occurred_at_ms.to_string(),
            )
            .recomputed(MAX_OCCURRED_AT_MS.to_string()),
        );
    }
    if key != Some(run_id.as_bytes()) {
        let run_digest = sha256_digest(run_id.as_bytes());
        let (message, declared) = match key {
            None => (
                format!("the record has no key; a record of run '{run_id}' ({run_digest}) must be keyed by its run id"),
                String::new(),
            ),
            Some(k) => {
                let d = sha256_digest(k);
                (
                    format!(
                        "the record key ({} bytes, {d}) is not the run id '{run_id}' ({run_digest}): a record must be keyed by its run id",
                        k.len()
                    ),
                    d,
                )
            }
        };
        return Some(
            Refusal::new("RUN_KEY_MISMATCH", message, "key", declared).recomputed(run_digest),
        );
    }
    partitions.and_then(|n| partition_refusal(run_id, partition, n))
}

pub(crate) fn digest_or_empty(value: &str) -> &str {
    if is_digest(value) {
        value
    } else {
        ""
    }
}

impl Core {
    /// `_open_runs_refusal`: a record that would open a run while its producer has `max_open_runs` open.
    pub(crate) fn open_runs_refusal<'a>(
        &self,
        run_id: &'a str,
        producer_id: &str,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        if self.state.runs.contains_key(run_id) {
            return Ok(None);
        }
        let Some(producer) = self.cfg.producers.iter().find(|p| p.name == producer_id) else {
            return Ok(None);
        };
        let count = self.state.open_runs.get(producer_id).copied().unwrap_or(0);
        if count < producer.max_open_runs {
            return Ok(None);
        }
        let name = py_repr(producer_id, host)?;
        Ok(Some(
            Refusal::new(
                "OPEN_RUNS_EXCEEDED",
                format!(
                    "producer {name} already has {count} open runs, its limit (max_open_runs in the roles manifest); close one before opening run '{run_id}'"
                ),
                "run_id",
                run_id,
            )
            .recomputed(producer.max_open_runs.to_string()),
        ))
    }

    /// `_owner_refusal`: a run id in another producer's run prefixes takes records only from its owner and the
    /// owner's collaborators; an id in nobody's prefixes is open to all.
    pub(crate) fn owner_refusal<'a>(
        &self,
        run_id: &'a str,
        producer_id: &'a str,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        let Some((owner, prefix)) = run_owner(&self.cfg.producers, run_id) else {
            return Ok(None);
        };
        if owner.admits(producer_id) {
            return Ok(None);
        }
        let name = py_repr(&owner.name, host)?;
        let shown = py_repr(&clip(producer_id, 80), host)?;
        let prefix = py_repr(prefix, host)?;
        Ok(Some(
            Refusal::new(
                "RUN_NOT_OWNED",
                format!(
                    "run '{run_id}' belongs to {name} (run prefix {prefix} in the roles manifest); {shown} is not one of its collaborators"
                ),
                "run_id",
                run_id,
            )
            .recomputed(clip(&owner.name, MAX_EVIDENCE_CHARS).into_owned()),
        ))
    }

    /// `_producer_refusal`: unsigned -> key unknown -> producer mismatch -> key not valid at
    /// the input's timestamp -> signature -> role not granted (`role` None: a run close).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn producer_refusal<'a>(
        &self,
        schema: &'static str,
        signed: Option<(&'a str, &'a [u8])>,
        producer_id: &'a str,
        role: Option<&'a str>,
        timestamp_ms: i64,
        signing_input: impl FnOnce(&str) -> Option<Vec<u8>>,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        let Some((key_id, signature)) = signed else {
            let signed_schema = if schema == RUN_CLOSE {
                RUN_CLOSE_V2
            } else {
                ACTIVITY_SUBMISSION_V3
            };
            return Ok(Some(
                Refusal::new(
                    "SUBMISSION_UNSIGNED",
                    format!(
                        "this {schema} carries no producer signature; publish {signed_schema}, signed by a producer key registered in the roles manifest"
                    ),
                    "producer_signature",
                    schema,
                )
                .recomputed(signed_schema),
            ));
        };
        let Some(key) = self.cfg.producer_keys.get(key_id) else {
            return Ok(Some(Refusal::new(
                "PRODUCER_KEY_UNKNOWN",
                format!(
                    "the signing key {} is not registered to any producer in the roles manifest ([[producers]])",
                    clip(key_id, 80)
                ),
                "producer_key_id",
                clip(key_id, MAX_EVIDENCE_CHARS),
            )));
        };
        let producer = &self.cfg.producers[key.producer];
        if producer_id != producer.name {
            let shown = py_repr(producer_id, host)?;
            let name = py_repr(&producer.name, host)?;
            return Ok(Some(
                Refusal::new(
                    "PRODUCER_MISMATCH",
                    format!("producer.id {shown} is not {name}, the producer key {key_id} is registered to"),
                    "producer.id",
                    producer_id,
                )
                .recomputed(clip(&producer.name, MAX_EVIDENCE_CHARS).into_owned()),
            ));
        }
        if !key.contains(timestamp_ms) {
            let valid = key.lifetime_text();
            let name = py_repr(&producer.name, host)?;
            return Ok(Some(
                Refusal::new(
                    "PRODUCER_KEY_NOT_VALID",
                    format!(
                        "producer key {key_id} of {name} signs inputs stamped {valid}; this input is stamped {timestamp_ms} (retired, revoked or not yet valid)"
                    ),
                    "producer_key_id",
                    timestamp_ms.to_string(),
                )
                .recomputed(valid),
            ));
        }
        let shown = hex_string(&signature[..signature.len().min(128)]);
        let Some(message) = signing_input(key_id) else {
            return Ok(Some(Refusal::new(
                "SUBMISSION_SIGNATURE_INVALID",
                "the submission statement has no canonical JSON form (an integer beyond 2**53 - 1): no signature can verify over it".into(),
                "producer_signature",
                shown,
            )));
        };
        let verdict = match self
            .presigned
            .get(&(signature.as_ptr() as usize, signature.len()))
        {
            Some(&verdict) => verdict,
            None => key.verifies(signature, &message),
        };
        if !verdict {
            let digest = sha256_digest(&message);
            return Ok(Some(
                Refusal::new(
                    "SUBMISSION_SIGNATURE_INVALID",
                    format!(
                        "the producer signature does not verify under key {key_id} over the {schema} statement (signed bytes {digest})"
                    ),
                    "producer_signature",
                    shown,
                )
                .recomputed(digest),
            ));
        }
        if let Some(role) = role {
            // An undeclared role is the stage rule's UNKNOWN_ROLE, not a missing grant.
            if self.cfg.roles.contains_key(role) && !producer.may_take(role) {
                let name = py_repr(&producer.name, host)?;
                let shown_role = py_repr(role, host)?;
                return Ok(Some(
                    Refusal::new(
                        "PRODUCER_ROLE_NOT_ALLOWED",
                        format!("producer {name} is not granted role {shown_role} in the roles manifest"),
                        "role",
                        role,
                    )
                    .recomputed(clip(&producer.roles.join(", "), MAX_EVIDENCE_CHARS).into_owned())
                    .authenticated(),
                ));
            }
        }
        Ok(None)
    }

    pub(crate) fn refuse<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        f: &RefusedFields<'a>,
        r: Refusal<'_>,
        out: &mut Vec<Output<'a>>,
    ) {
        let c = |s: &'a str| clip(s, MAX_EVIDENCE_CHARS);
        let mut value = soe_buffer(
            &FP_REFUSAL_V2,
            300 + r.message.len() + r.declared.len() + r.recomputed.len(),
        );
        put_str(&mut value, r.exception);
        put_str(&mut value, r.code);
        put_str(&mut value, &r.message);
        put_str(&mut value, &c(f.run_id));
        put_str(&mut value, &c(f.stage_id));
        put_str(&mut value, &c(f.role));
        put_str(&mut value, &c(f.kind));
        put_str(&mut value, &c(f.submission_id));
        put_str(&mut value, &r.field);
        put_str(&mut value, &clip(&r.declared, MAX_EVIDENCE_CHARS));
        put_str(&mut value, &clip(&r.recomputed, MAX_EVIDENCE_CHARS));
        put_opt_str(&mut value, r.earlier_stage_id.as_deref());
        pos.put(&mut value);
        let occurred_at_ms = if (0..=MAX_OCCURRED_AT_MS).contains(&f.occurred_at_ms) {
            f.occurred_at_ms
        } else {
            rec.timestamp_ms
        };
        put_long(&mut value, occurred_at_ms);
        put_str(&mut value, &c(f.producer));
        put_str(&mut value, &c(f.key_id));
        value.push(u8::from(r.authenticated));

        // keyed by the run id when it is one, else by nothing: never by an unbounded input key
        let valid_run = is_valid_id(f.run_id);
        let key: &'a [u8] = if valid_run { f.run_id.as_bytes() } else { b"" };
        let record_hash = sha256_digest(&value);
        out.push(Output {
            stream: Stream::Refusals,
            key: Cow::Borrowed(key),
            value,
            ce_type: CeType::ActivityRefused,
        });
        audit(
            &self.cfg,
            &mut self.state.audit,
            self.state.partition,
            rec.timestamp_ms,
            pos,
            out,
            Event::ActivityRefused,
            if valid_run { f.run_id } else { "" },
            [
                if is_valid_id(f.stage_id) {
                    f.stage_id
                } else {
                    ""
                },
                if KINDS.contains(&f.kind) { f.kind } else { "" },
                if TERMINAL_STATES.contains(&f.terminal_state) {
                    f.terminal_state
                } else {
                    ""
                },
                r.code,
                digest_or_empty(f.artifact_hash),
                digest_or_empty(f.evidence_set_hash),
                &record_hash,
            ],
            -1,
        );
    }
}
