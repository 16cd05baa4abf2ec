//! `_validate` and `_validate_signed`: the checks of a submission, in the reference's order.

use super::*;

impl Core {
    pub(crate) fn validate<'a>(
        &self,
        sub: &Submission<'a>,
        rec: &Input<'_>,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        let key = rec.key;
        let (run_id, stage_id, role) = (sub.run_id, sub.stage_id, sub.role);
        let ids = [
            ("INVALID_RUN_ID", "run_id", run_id),
            ("INVALID_STAGE_ID", "stage_id", stage_id),
            ("INVALID_ROLE", "role", role),
        ];
        for (code, field, value) in ids {
            if !is_valid_id(value) {
                return Ok(Some(Refusal::new(
                    code,
                    format!("{field} {ID_RULE}"),
                    field,
                    clip(value, MAX_EVIDENCE_CHARS),
                )));
            }
        }
        let producer = [sub.producer_id, sub.producer_sdk];
        if let Some(r) = envelope_refusal(
            key,
            run_id,
            sub.submission_id,
            producer,
            sub.occurred_at_ms,
            rec.partition,
            self.cfg.submission_partitions,
        ) {
            return Ok(Some(r));
        }
        let signed = self.producer_refusal(
            sub.schema,
            sub.producer,
            sub.producer_id,
            Some(role),
            rec.timestamp_ms,
            |key_id| submission_signing_input(sub, key_id),
            host,
        )?;
        if let Some(r) = signed {
            return Ok(Some(r));
        }
        Ok(self.validate_signed(sub, host)?.map(Refusal::authenticated))
    }

    /// `_validate_signed`: the stage rules, once the producer's signature verified.
    pub(crate) fn validate_signed<'a>(
        &self,
        sub: &Submission<'a>,
        host: &mut dyn Host,
    ) -> Result<Option<Refusal<'a>>, Fallback> {
        let (run_id, stage_id, role, kind) = (sub.run_id, sub.stage_id, sub.role, sub.kind);
        if let Some(r) = self.owner_refusal(run_id, sub.producer_id, host)? {
            return Ok(Some(r));
        }
        if let Some(earlier) = self
            .state
            .runs
            .get(run_id)
            .and_then(|run| run.submissions.get(sub.submission_id))
        {
            let shown = py_repr(sub.submission_id, host)?;
            let earlier_shown = py_repr(earlier, host)?;
            let mut r = Refusal::new(
                "DUPLICATE_SUBMISSION",
                format!(
                    "submission_id {shown} was already journalled in run '{run_id}' (stage {earlier_shown}); a repeated submission is journalled once"
                ),
                "submission_id",
                sub.submission_id,
            );
            r.earlier_stage_id = Some(earlier.to_string());
            return Ok(Some(r));
        }
        if !KINDS.contains(&kind) {
            let shown = py_repr(&clip(kind, 64), host)?;
            return Ok(Some(Refusal::new(
                "UNKNOWN_KIND",
                format!("kind {shown} is not one of {}", KINDS.join(", ")),
                "kind",
                clip(kind, MAX_EVIDENCE_CHARS),
            )));
        }
        let Some(allowed) = self.cfg.roles.get(role) else {
            return Ok(Some(Refusal::new(
                "UNKNOWN_ROLE",
                format!("role '{role}' is not declared in the roles manifest"),
                "role",
                role,
            )));
        };
        if allowed.text.as_deref() != Some(kind) {
            return Ok(Some(
                Refusal::new(
                    "KIND_NOT_ALLOWED_FOR_ROLE",
                    format!("role '{role}' declares agent_kind {}, but the submission is of kind '{kind}'", allowed.repr),
                    "kind",
                    kind,
                )
                .recomputed(clip(&allowed.clip_source, MAX_EVIDENCE_CHARS).into_owned()),
            ));
        }
        let terminal_state = sub.terminal_state;
        if !TERMINAL_STATES.contains(&terminal_state) {
            let shown = py_repr(&clip(terminal_state, 64), host)?;
            return Ok(Some(Refusal::new(
                "UNKNOWN_TERMINAL_STATE",
                format!(
                    "terminal_state {shown} is not one of {}",
                    TERMINAL_STATES.join(", ")
                ),
                "terminal_state",
                clip(terminal_state, MAX_EVIDENCE_CHARS),
            )));
        }
        let reason_code = sub.reason_code;
        if is_blank(reason_code) {
            return Ok(Some(Refusal::new(
                "EMPTY_REASON_CODE",
                "reason_code is empty".into(),
                "reason_code",
                reason_code,
            )));
        }
        if char_len(reason_code) > MAX_REASON_CODE_LENGTH || has_control(reason_code) {
            return Ok(Some(Refusal::new(
                "INVALID_REASON_CODE",
                "reason_code must be at most 128 characters without control characters".into(),
                "reason_code",
                clip(reason_code, MAX_EVIDENCE_CHARS),
            )));
        }
        let artifact = sub.artifact;
        if artifact.len() > MAX_INLINE_ARTIFACT_BYTES {
            return Ok(Some(
                Refusal::new(
                    "ARTIFACT_TOO_LARGE",
                    format!(
                        "inline artifact has {} bytes; the limit is {MAX_INLINE_ARTIFACT_BYTES}",
                        artifact.len()
                    ),
                    "artifact",
                    artifact.len().to_string(),
                )
                .recomputed(MAX_INLINE_ARTIFACT_BYTES.to_string()),
            ));
        }
        let declared_artifact = sub.artifact_hash;
        if !is_digest(declared_artifact) {
            return Ok(Some(malformed_digest("artifact_hash", declared_artifact)));
        }
        let recomputed_artifact = sha256_digest(artifact);
        if recomputed_artifact != declared_artifact {
            return Ok(Some(
                Refusal::new(
                    "ARTIFACT_HASH_MISMATCH",
                    format!("artifact_hash mismatch: declared {declared_artifact}, recomputed {recomputed_artifact}"),
                    "artifact_hash",
                    declared_artifact,
                )
                .recomputed(recomputed_artifact),
            ));
        }
        let observations = &sub.observations;
        if observations.len() > MAX_OBSERVATIONS {
            return Ok(Some(
                Refusal::new(
                    "TOO_MANY_OBSERVATIONS",
                    format!(
                        "{} observations; the limit is {MAX_OBSERVATIONS}",
                        observations.len()
                    ),
                    "observations",
                    observations.len().to_string(),
                )
                .recomputed(MAX_OBSERVATIONS.to_string()),
            ));
        }
        for (index, o) in observations.iter().enumerate() {
            if !is_digest(o.content_hash) {
                return Ok(Some(malformed_digest(
                    format!("observations[{index}].content_hash"),
                    o.content_hash,
                )));
            }
            if is_blank(o.kind)
                || char_len(o.kind) > MAX_KIND_LENGTH
                || char_len(o.reference) > MAX_REF_LENGTH
                || has_control(o.kind)
                || has_control(o.reference)
            {
                return Ok(Some(Refusal::new(
                    "INVALID_OBSERVATION",
                    format!(
                        "observations[{index}] needs a kind of 1-{MAX_KIND_LENGTH} characters and a ref of at most {MAX_REF_LENGTH}, without control characters"
                    ),
                    format!("observations[{index}]"),
                    clip(o.kind, MAX_EVIDENCE_CHARS),
                )));
            }
            if sub.sized && !(0..=MAX_RUN_EVIDENCE_BYTES).contains(&o.size) {
                let field = format!("observations[{index}].size");
                return Ok(Some(
                    Refusal::new(
                        "INVALID_EVIDENCE_SIZE",
                        format!(
                            "{field} must be 0 to {MAX_RUN_EVIDENCE_BYTES} bytes (the per-run evidence cap), got {}",
                            o.size
                        ),
                        field,
                        o.size.to_string(),
                    )
                    .recomputed(MAX_RUN_EVIDENCE_BYTES.to_string()),
                ));
            }
        }
        let declared_evidence = sub.evidence_set_hash;
        if !is_digest(declared_evidence) {
            return Ok(Some(malformed_digest(
                "evidence_set_hash",
                declared_evidence,
            )));
        }
        let recomputed_evidence =
            evidence_set_hash_of_digests(observations.iter().map(|o| o.content_hash));
        if recomputed_evidence != declared_evidence {
            return Ok(Some(
                Refusal::new(
                    "EVIDENCE_SET_HASH_MISMATCH",
                    format!("evidence_set_hash mismatch: declared {declared_evidence}, recomputed {recomputed_evidence}"),
                    "evidence_set_hash",
                    declared_evidence,
                )
                .recomputed(recomputed_evidence),
            ));
        }
        if let Some(run) = self.state.runs.get(run_id) {
            if run.closed {
                return Ok(Some(Refusal::new(
                    "RUN_CLOSED",
                    format!("run '{run_id}' is closed and sealed; no stage may follow"),
                    "run_id",
                    run_id,
                )));
            }
            if run.stages.contains_key(stage_id) {
                let mut r = Refusal::new(
                    "DUPLICATE_STAGE",
                    format!("stage '{stage_id}' was already accepted in run '{run_id}'"),
                    "stage_id",
                    stage_id,
                );
                r.earlier_stage_id = Some(stage_id.to_owned());
                return Ok(Some(r));
            }
            if !observations.is_empty() {
                if let Some(earlier) = run.evidence.get(declared_evidence) {
                    let shown = py_repr(earlier, host)?;
                    let mut r = Refusal::new(
                        "REDUNDANT_STAGE",
                        format!(
                            "stage '{stage_id}' introduces no new evidence (evidence_set_hash already contributed by stage {shown})"
                        ),
                        "evidence_set_hash",
                        declared_evidence,
                    )
                    .recomputed(declared_evidence);
                    r.earlier_stage_id = Some(earlier.to_string());
                    r.exception = "RedundantStage";
                    return Ok(Some(r));
                }
            }
        }
        if kind == "browser" {
            return Err(Fallback("browser session check"));
        }
        if (kind == "research" || kind == "data" || kind == "ops")
            && !crate::documents::accepts(sub)
        {
            // The modality document rules (schemas/documents/): accepted here only when they certainly
            // pass (native/src/documents.rs); a breach, or anything unusual, is the reference's to word.
            return Err(Fallback("modality document rules"));
        }
        if sub.sized {
            // The per-run evidence cap, the last check: distinct digests, each counted once (its first size).
            let run = self.state.runs.get(run_id);
            let before = run.map_or(0, |r| r.evidence_bytes);
            let mut seen: Vec<&str> = Vec::new();
            let (mut added, mut count) = (0i128, 0usize);
            for o in observations {
                if seen.contains(&o.content_hash)
                    || run.is_some_and(|r| r.blobs.contains(o.content_hash))
                {
                    continue;
                }
                seen.push(o.content_hash);
                added += i128::from(o.size);
                count += 1;
            }
            let total = i128::from(before) + added;
            if total > i128::from(MAX_RUN_EVIDENCE_BYTES) {
                return Ok(Some(
                    Refusal::new(
                        "EVIDENCE_CAP_EXCEEDED",
                        format!(
                            "run '{run_id}' would hold {total} bytes of evidence ({before} already, {added} in {count} new blobs); the per-run cap is {MAX_RUN_EVIDENCE_BYTES}"
                        ),
                        "evidence",
                        total.to_string(),
                    )
                    .recomputed(MAX_RUN_EVIDENCE_BYTES.to_string()),
                ));
            }
        } else if !observations.is_empty() && !self.cfg.accept_undeclared_sizes {
            // A v1 submission carries evidence the cap cannot count: refused at the same last check.
            return Ok(Some(
                Refusal::new(
                    "EVIDENCE_SIZES_UNDECLARED",
                    format!(
                        "this {ACTIVITY_SUBMISSION} carries {} observations without byte sizes, so the per-run evidence cap of {MAX_RUN_EVIDENCE_BYTES} bytes cannot count them; publish {ACTIVITY_SUBMISSION_V2} with each blob's size",
                        observations.len()
                    ),
                    "observations",
                    ACTIVITY_SUBMISSION.to_string(),
                )
                .recomputed(ACTIVITY_SUBMISSION_V2.to_string()),
            ));
        }
        if let Some(r) = self.open_runs_refusal(run_id, sub.producer_id, host)? {
            return Ok(Some(r));
        }
        if let Some(run) = self.state.runs.get(run_id) {
            // Counters at the end of the long range (only a forged state has them): the reference's integers decide.
            if run.entry_count == i64::MAX
                || run.entry_count.checked_sub(run.sealed_count).is_none()
            {
                return Err(Fallback("run counters at the end of the long range"));
            }
        }
        Ok(None)
    }
}
