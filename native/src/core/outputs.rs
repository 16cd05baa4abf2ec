//! What a step writes besides its journal record: dead letters, seals, audit records and
//! partition checkpoints (PartitionCheckpoint.v2: with the partition's Merkle log).

use super::*;

impl Core {
    // -- dead letters -------------------------------------------------------------

    /// `SchedulerCore.reject`: dead-letter `rec` with `code` and `detail`
    /// instead of stepping it (the shell's per-record produce errors).
    pub fn reject<'a>(&mut self, rec: &Input<'a>, code: &str, detail: &str) -> Outcome<'a> {
        let pos = match self.begin(rec) {
            Ok(pos) => pos,
            Err(f) => return Outcome::Fallback(f),
        };
        let mut out: Vec<Output<'a>> = Vec::with_capacity(2);
        self.dead_letter(rec, pos, &mut out, code, detail);
        self.checkpoint_if_due(rec, pos, &mut out);
        Outcome::Done(out)
    }

    /// `SchedulerCore._checkpoint_if_due`: the step's last output, a signed
    /// partition checkpoint, after a final seal or every `checkpoint_every` audit records.
    pub(crate) fn checkpoint_if_due<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        out: &mut Vec<Output<'a>>,
    ) {
        let state = &mut self.state;
        let reason = if self.final_sealed {
            "final"
        } else if state.audit.seq - state.checkpoint.audit_seq >= self.cfg.checkpoint_every {
            "periodic"
        } else {
            return;
        };
        let signer = self.cfg.seal_key_at(rec.timestamp_ms);
        let tree_size = state.tree.size();
        let root = state.tree.root();
        let origin = tlog::origin(
            &self.cfg.log_name,
            pos.topic,
            state.partition,
            self.cfg.log_epoch,
        );
        let note = tlog::checkpoint_note(&origin, tree_size, &root, &signer.signing_key);
        let mut payload = soe_buffer(
            &FP_PARTITION_CHECKPOINT_V2,
            320 + pos.topic.len() + note.len(),
        );
        put_int(&mut payload, state.partition);
        put_long(&mut payload, state.checkpoint.seq);
        put_str(&mut payload, &state.checkpoint.head);
        put_str(&mut payload, pos.topic);
        put_long(&mut payload, rec.offset + 1);
        put_long(&mut payload, state.audit.seq);
        put_str(&mut payload, &state.audit.head);
        put_str(&mut payload, reason);
        put_long(&mut payload, self.cfg.checkpoint_every);
        put_long(&mut payload, rec.timestamp_ms);
        // `begin` refuses a log beyond the long range
        put_long(&mut payload, tree_size as i64);
        put_str(&mut payload, &digest_string("sha256:", &root));
        put_str(&mut payload, &note);
        let signature = signer
            .signing_key
            .sign(&checkpoint_signing_input(&payload))
            .to_bytes();
        let mut value = soe_buffer(&FP_CHECKPOINT_RECORD, payload.len() + 160);
        put_bytes(&mut value, &payload);
        put_str(&mut value, &signer.key_id);
        put_bytes(&mut value, &signature);
        out.push(Output {
            stream: Stream::Checkpoints,
            key: Cow::Owned(state.partition.to_string().into_bytes()),
            value,
            ce_type: CeType::PartitionCheckpoint,
        });
        state.checkpoint.seq += 1;
        state.checkpoint.head = checkpoint_hash(&payload);
        state.checkpoint.audit_seq = state.audit.seq;
    }

    pub(crate) fn dead_letter<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        out: &mut Vec<Output<'a>>,
        code: &str,
        detail: &str,
    ) {
        let raw: &[u8] = rec.value.unwrap_or(b"");
        let raw_sha256 = sha256_digest(raw);
        let kept: &[u8] = if raw.len() <= MAX_DEAD_LETTER_RAW {
            raw
        } else {
            b""
        };
        let detail = clip(detail, MAX_DETAIL_CHARS);
        let key = rec.key;
        let kept_key = key.map(|k| &k[..k.len().min(MAX_KEPT_KEY_BYTES)]);
        let key_sha256 = key.map_or_else(String::new, sha256_digest);
        // keyed by the input key while it is small, else by nothing
        let out_key: &'a [u8] = match key {
            Some(k) if k.len() <= MAX_KEPT_KEY_BYTES => k,
            _ => b"",
        };
        let encode = |raw_kept: &[u8]| {
            let mut value = soe_buffer(
                &FP_DEAD_LETTER_V2,
                240 + detail.len() + raw_kept.len() + kept_key.map_or(0, <[u8]>::len),
            );
            put_str(&mut value, code);
            put_str(&mut value, &detail);
            put_str(&mut value, &raw_sha256);
            put_long(&mut value, raw.len() as i64);
            put_bytes(&mut value, raw_kept);
            put_opt_bytes(&mut value, kept_key);
            put_str(&mut value, &key_sha256);
            put_long(&mut value, key.map_or(0, |k| k.len() as i64));
            pos.put(&mut value);
            put_long(&mut value, rec.timestamp_ms);
            value
        };
        let mut value = encode(kept);
        if !kept.is_empty()
            && output_size(
                &pos,
                out.len(),
                out_key.len(),
                value.len(),
                CeType::InputDeadletter,
            ) > self.cfg.max_output_bytes
        {
            value = encode(b""); // by digest and size only
        }
        out.push(Output {
            stream: Stream::Deadletter,
            key: Cow::Borrowed(out_key),
            value,
            ce_type: CeType::InputDeadletter,
        });
        audit(
            &self.cfg,
            &mut self.state.audit,
            self.state.partition,
            rec.timestamp_ms,
            pos,
            out,
            Event::InputDeadletter,
            "",
            ["", "", "", code, "", "", &raw_sha256],
            -1,
        );
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn seal<'a>(
    cfg: &Config,
    chain: &mut AuditChain,
    tree: &mut Frontier,
    partition: i32,
    rec: &Input<'a>,
    pos: Position<'a>,
    out: &mut Vec<Output<'a>>,
    run_id: &'a str,
    run: &mut RunState,
    final_: bool,
    closed_by: Option<(&RunClose<'_>, &str, &[u8])>,
) -> Option<Dropped> {
    let mut payload = soe_buffer(&FP_RUN_SEAL_V2, 360 + run_id.len());
    put_str(&mut payload, run_id);
    put_int(&mut payload, partition);
    put_long(&mut payload, run.entry_count);
    put_str(&mut payload, &run.head);
    put_long(&mut payload, rec.offset);
    put_bool(&mut payload, final_);
    put_long(&mut payload, chain.seq);
    put_str(&mut payload, &chain.head);
    put_long(&mut payload, rec.timestamp_ms);
    match closed_by {
        None => put_long(&mut payload, 0),
        Some((close, key_id, signature)) => {
            put_long(&mut payload, 1);
            put_str(&mut payload, close.submission_id);
            put_str(&mut payload, close.producer_id);
            put_long(&mut payload, close.occurred_at_ms);
            put_str(&mut payload, key_id);
            put_bytes(&mut payload, signature);
        }
    }
    let signer = cfg.seal_key_at(rec.timestamp_ms);
    let signature = signer
        .signing_key
        .sign(&seal_signing_input(&payload))
        .to_bytes();
    let mut value = soe_buffer(&FP_SEAL_RECORD, payload.len() + 160);
    put_bytes(&mut value, &payload);
    put_str(&mut value, &signer.key_id);
    put_bytes(&mut value, &signature);
    let record_hash = sha256_digest(&value);
    out.push(Output {
        stream: Stream::Journal,
        key: Cow::Borrowed(run_id.as_bytes()),
        value,
        ce_type: CeType::RunSealed,
    });
    if cfg.keep_log {
        let leaf = tlog::seal_leaf_hash(
            run_id,
            run.entry_count,
            &run.head,
            rec.offset,
            final_,
            &chain.head,
        );
        tree.append(leaf).expect("begin leaves room in the log");
    }
    run.sealed_count = run.entry_count;
    let dropped = final_.then(|| run.close());
    audit(
        cfg,
        chain,
        partition,
        rec.timestamp_ms,
        pos,
        out,
        Event::RunSealed,
        run_id,
        [
            "",
            "",
            "",
            if final_ { "final" } else { "periodic" },
            "",
            "",
            &record_hash,
        ],
        run.entry_count,
    );
    dropped
}

/// Appends one AuditEntry.v1, in an AuditRecord.v2 envelope, to the partition's HMAC chain. `fields` are
/// stage_id, kind, terminal_state, reason_code, artifact_hash,
/// evidence_set_hash and record_hash.
#[allow(clippy::too_many_arguments)]
pub(crate) fn audit<'a>(
    cfg: &Config,
    chain: &mut AuditChain,
    partition: i32,
    timestamp_ms: i64,
    pos: Position<'a>,
    out: &mut Vec<Output<'a>>,
    event: Event,
    run_id: &'a str,
    fields: [&str; 7],
    journal_seq: i64,
) {
    let mut payload = soe_buffer(&FP_AUDIT_ENTRY, 420 + run_id.len() + pos.topic.len());
    put_int(&mut payload, partition);
    put_long(&mut payload, chain.seq);
    put_str(&mut payload, &chain.head);
    put_str(&mut payload, event.value());
    put_str(&mut payload, run_id);
    for f in fields {
        put_str(&mut payload, f);
    }
    put_long(&mut payload, journal_seq);
    pos.put(&mut payload);
    let key = cfg.audit_key_at(timestamp_ms);
    let mac = key.mac.audit_record_mac(&key.key_id, &payload);
    let mut value = soe_buffer(&FP_AUDIT_RECORD_V2, payload.len() + 160);
    put_str(&mut value, &key.key_id);
    put_bytes(&mut value, &payload);
    put_str(&mut value, &mac);
    out.push(Output {
        stream: Stream::Audit,
        key: Cow::Borrowed(run_id.as_bytes()),
        value,
        ce_type: event.ce_type(),
    });
    chain.seq += 1;
    chain.head = mac;
}
