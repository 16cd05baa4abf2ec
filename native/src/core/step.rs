//! The step: the core of one input partition, `step` and its dispatch, submissions and run
//! closes (`SchedulerCore.step`).

use super::*;

pub struct Core {
    pub cfg: Config,
    pub state: State,
    /// The current step wrote a final seal (`_Emitter.final_sealed`): it ends with a checkpoint.
    pub final_sealed: bool,
    /// Signature verdicts computed ahead of the steps of a batch (`preverify`), by the address and
    /// length of the signature bytes inside the batch's inputs. Empty outside a batch.
    pub presigned: HashMap<(usize, usize), bool, KeyedHasher>,
    /// The inverse of every change since the oldest open mark (`undo.rs`): the shell rewinds
    /// to its last commit after an aborted transaction instead of re-reading Kafka.
    pub undo: UndoLog,
}

/// The producer signature an input carries, with its key and the signed bytes: what `preverify`
/// checks, keyed by the address and length of the signature inside the batch's inputs.
pub(crate) type SignedInput<'a, 'c> = ((usize, usize), &'c ProducerKey, &'a [u8], Vec<u8>);

pub(crate) fn signed_input<'a, 'c>(
    cfg: &'c Config,
    rec: &Input<'a>,
) -> Option<SignedInput<'a, 'c>> {
    let value = rec.value?;
    let fp = fingerprint_of(value).ok()?;
    let body = &value[HEADER_SIZE..];
    let (key_id, signature, message) = if fp == FP_ACTIVITY_SUBMISSION_V3 {
        let (sub, _) = decode_submission(body, fp).ok()?;
        let (key_id, signature) = sub.producer?;
        (key_id, signature, submission_signing_input(&sub, key_id))
    } else if fp == FP_RUN_CLOSE_V2 {
        let (close, _) = decode_run_close(body, true).ok()?;
        let (key_id, signature) = close.producer?;
        (key_id, signature, run_close_signing_input(&close, key_id))
    } else {
        return None;
    };
    let key = cfg.producer_keys.get(key_id)?;
    if !key.contains(rec.timestamp_ms) {
        return None; // refused before its signature matters
    }
    Some((
        (signature.as_ptr() as usize, signature.len()),
        key,
        signature,
        message?,
    ))
}

/// The verdicts of a part of a batch's inputs, many signatures to one equation (`ed25519::verify_many`).
pub(crate) fn verify_signed(cfg: &Config, inputs: &[Input<'_>]) -> Vec<((usize, usize), bool)> {
    let signed: Vec<SignedInput<'_, '_>> = inputs
        .iter()
        .filter_map(|rec| signed_input(cfg, rec))
        .collect();
    let items: Vec<Option<crate::ed25519::Item<'_>>> = signed
        .iter()
        .map(|(_, key, signature, message)| {
            // a registered key that names no curve point: nothing verifies under it
            key.key.as_ref().map(|key| crate::ed25519::Item {
                key,
                signature,
                message,
            })
        })
        .collect();
    let verdicts = crate::ed25519::verify_each(&items);
    signed.iter().map(|(at, ..)| *at).zip(verdicts).collect()
}

/// An integer canonical JSON writes (`canonical._MAX_SAFE_INT`).
fn json_safe(value: i64) -> bool {
    (-MAX_SAFE_INT..=MAX_SAFE_INT).contains(&value)
}

pub enum Outcome<'a> {
    Done(Vec<Output<'a>>),
    Fallback(Fallback),
}

impl Core {
    /// Verifies the producer signatures of `inputs` ahead of their steps, on every core of the
    /// machine (`threads`), and keeps the verdicts for `producer_refusal`. Each verdict is the very
    /// check the step would make (same key, signature and signed bytes), so outputs do not change;
    /// only the Ed25519 work moves out of the sequential step. `clear_presigned` ends the batch.
    pub fn preverify(&mut self, inputs: &[Input<'_>], threads: usize) {
        self.presigned.clear();
        let cfg = &self.cfg;
        let verdicts =
            crate::parallel::map_chunks(inputs, threads, |part| verify_signed(cfg, part));
        self.presigned.extend(verdicts);
    }

    /// Forgets the verdicts of `preverify` (the batch's input buffers may be freed after it).
    pub fn clear_presigned(&mut self) {
        self.presigned.clear();
    }

    pub fn new_run(&self, run_id: &str) -> RunState {
        RunState::empty(journal_genesis(run_id), self.cfg.hasher)
    }

    /// The run `run_id` is about to change (its first journal entry or seal creates it): an empty run
    /// unless it is there already, and, inside an undo epoch, its creation and its scalars recorded.
    /// Returns the run's index in the state's runs.
    /// `SchedulerCore._opened`: the run an accepted record changes; a run it opens counts toward its
    /// producer's open runs.
    pub(crate) fn open_run(&mut self, run_id: &str, producer_id: &str) -> usize {
        let created = !self.state.runs.contains_key(run_id);
        let index = self.touch_run(run_id);
        if created {
            self.state.runs[index].opened_by = producer_id.into();
            *self.state.open_runs.entry(producer_id.into()).or_insert(0) += 1;
        }
        index
    }

    pub(crate) fn touch_run(&mut self, run_id: &str) -> usize {
        let (index, created) = match self.state.runs.get_index_of(run_id) {
            Some(index) => (index, false),
            None => {
                let run = self.new_run(run_id);
                (self.state.runs.insert_full(run_id.into(), run).0, true)
            }
        };
        if self.undo.recording() {
            self.undo.touch(index, &self.state.runs[index], created);
        }
        index
    }

    /// `initial_state(config, partition)`
    pub fn reset(&mut self, partition: i32) {
        self.undo.clear();
        self.state = State {
            partition,
            audit: AuditChain {
                seq: 0,
                head: self.cfg.audit.audit_genesis(i64::from(partition)),
            },
            runs: Map::with_hasher(self.cfg.hasher),
            checkpoint: CheckpointChain::genesis(partition),
            open_runs: BTreeMap::new(),
            tree: Frontier::new(),
        };
    }

    /// `SchedulerCore.step` for one record.
    pub fn step<'a>(&mut self, rec: &Input<'a>, host: &mut dyn Host) -> Outcome<'a> {
        let pos = match self.begin(rec) {
            Ok(pos) => pos,
            Err(f) => return Outcome::Fallback(f),
        };
        let mut out: Vec<Output<'a>> = Vec::with_capacity(4);
        match self.dispatch(rec, pos, &mut out, host) {
            Ok(()) => {
                self.checkpoint_if_due(rec, pos, &mut out);
                Outcome::Done(out)
            }
            Err(f) => Outcome::Fallback(f),
        }
    }

    /// What `step` and `reject` share before their outputs: the input's position,
    /// or the record classes the reference must handle (and `final_sealed` reset).
    pub(crate) fn begin<'a>(&mut self, rec: &Input<'a>) -> Result<Position<'a>, Fallback> {
        let Ok(partition) = i32::try_from(rec.partition) else {
            return Err(Fallback("input partition does not fit an Avro int"));
        };
        if self.state.audit.seq > i64::MAX - 8 {
            // Python's integers would outgrow an Avro long here; let the reference fail its way.
            return Err(Fallback("audit sequence at the end of the long range"));
        }
        if self.state.tree.size() > i64::MAX as u64 - 8 {
            return Err(Fallback("Merkle log size at the end of the long range"));
        }
        // A step writes at most two audit records. A checkpoint's note names the topic in its
        // origin, a key name the reference refuses for some topics: those go to the reference
        // whenever a periodic checkpoint may be due (`run_close` checks before a final one).
        if (self.state.audit.seq + 2).saturating_sub(self.state.checkpoint.audit_seq)
            >= self.cfg.checkpoint_every
            && !tlog::origin_names(rec.topic)
        {
            return Err(Fallback(
                "input topic a checkpoint origin does not name as is",
            ));
        }
        self.final_sealed = false;
        if self.state.audit.seq == 0 {
            // `_start`: the partition's audit genesis under the audit key chosen for this input
            let key = self.cfg.audit_key_at(rec.timestamp_ms);
            self.state.audit.head = key.mac.audit_genesis(i64::from(self.state.partition));
        }
        Ok(Position {
            topic: rec.topic,
            partition,
            offset: rec.offset,
        })
    }

    pub(crate) fn dispatch<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        out: &mut Vec<Output<'a>>,
        host: &mut dyn Host,
    ) -> Result<(), Fallback> {
        let value = match rec.value {
            Some(v) if !v.is_empty() => v,
            _ => {
                self.dead_letter(
                    rec,
                    pos,
                    out,
                    "EMPTY_VALUE",
                    "record has no value (tombstone or empty)",
                );
                return Ok(());
            }
        };
        let fp = match fingerprint_of(value) {
            Ok(fp) => fp,
            Err(detail) => {
                self.dead_letter(rec, pos, out, "NOT_AVRO_SINGLE_OBJECT", &detail);
                return Ok(());
            }
        };
        let Some(name) = self
            .cfg
            .known
            .iter()
            .find(|(f, _)| *f == fp)
            .map(|(_, n)| n.clone())
        else {
            let detail = unknown_fingerprint(&fp);
            self.dead_letter(rec, pos, out, "UNKNOWN_SCHEMA_FINGERPRINT", &detail);
            return Ok(());
        };
        if !self.cfg.expected.contains(&name) {
            let detail = format!(
                "value is a {name} record, expected one of {}",
                self.cfg.expected_joined
            );
            self.dead_letter(rec, pos, out, "UNKNOWN_SCHEMA_FINGERPRINT", &detail);
            return Ok(());
        }
        let body = &value[HEADER_SIZE..];
        if fp == FP_ACTIVITY_SUBMISSION
            || fp == FP_ACTIVITY_SUBMISSION_V2
            || fp == FP_ACTIVITY_SUBMISSION_V3
        {
            let (sub, used) = decode_submission(body, fp)
                .map_err(|_| Fallback("body not decoded by the strict reader"))?;
            if used != body.len() {
                self.trailing(rec, pos, out, &name, body.len() - used);
                return Ok(());
            }
            self.submission(rec, pos, &sub, out, host)
        } else if fp == FP_RUN_CLOSE || fp == FP_RUN_CLOSE_V2 {
            let (close, used) = decode_run_close(body, fp == FP_RUN_CLOSE_V2)
                .map_err(|_| Fallback("body not decoded by the strict reader"))?;
            if used != body.len() {
                self.trailing(rec, pos, out, &name, body.len() - used);
                return Ok(());
            }
            self.run_close(rec, pos, &close, out, host)
        } else {
            Err(Fallback("input schema handled by the reference only"))
        }
    }

    pub(crate) fn trailing<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        out: &mut Vec<Output<'a>>,
        name: &str,
        extra: usize,
    ) {
        let detail = trailing_bytes(name, extra);
        self.dead_letter(rec, pos, out, "TRUNCATED_OR_MALFORMED_BODY", &detail);
    }

    // -- submissions ----------------------------------------------------------

    pub(crate) fn submission<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        sub: &Submission<'a>,
        out: &mut Vec<Output<'a>>,
        host: &mut dyn Host,
    ) -> Result<(), Fallback> {
        if let Some(refusal) = self.validate(sub, rec, host)? {
            let fields = RefusedFields {
                run_id: sub.run_id,
                stage_id: sub.stage_id,
                role: sub.role,
                kind: sub.kind,
                submission_id: sub.submission_id,
                terminal_state: sub.terminal_state,
                artifact_hash: sub.artifact_hash,
                evidence_set_hash: sub.evidence_set_hash,
                occurred_at_ms: sub.occurred_at_ms,
                producer: sub.producer_id,
                key_id: sub.producer.map_or("", |(key_id, _)| key_id),
            };
            self.refuse(rec, pos, &fields, refusal, out);
            return Ok(());
        }
        let run_id = sub.run_id;
        // nothing changes before the journal record is known to fit
        let genesis;
        let (seq, head): (i64, &str) = match self.state.runs.get(run_id) {
            Some(run) => (run.entry_count, run.head.as_str()),
            None => {
                genesis = journal_genesis(run_id);
                (0, genesis.as_str())
            }
        };
        let sealed_count = self
            .state
            .runs
            .get(run_id)
            .map_or(0, |run| run.sealed_count);
        let seals = seq + 1 - sealed_count >= self.cfg.seal_every;
        if seq >= MAX_SAFE_INT || (seals && !json_safe(rec.offset)) {
            // the entry's (and its seal's) Merkle log leaf names these in canonical JSON
            return Err(Fallback(
                "journal seq or offset outside canonical JSON's integers",
            ));
        }

        let obs_len: usize = sub
            .observations
            .iter()
            .map(|o| o.kind.len() + o.reference.len() + o.content_hash.len() + 16)
            .sum();
        // only a signed ActivitySubmission.v3 gets here (JournalEntry.v3 keeps its key id and signature)
        let Some((producer_key_id, producer_signature)) = sub.producer else {
            return Err(Fallback(
                "an unsigned submission passed the producer checks",
            ));
        };
        let mut payload = soe_buffer(
            &FP_JOURNAL_ENTRY_V3,
            500 + obs_len + run_id.len() + rec.topic.len() + producer_signature.len(),
        );
        put_str(&mut payload, run_id);
        put_long(&mut payload, seq);
        put_str(&mut payload, head);
        put_str(&mut payload, ENTRY_ACTIVITY_RESULT);
        put_str(&mut payload, sub.stage_id);
        put_str(&mut payload, sub.role);
        put_str(&mut payload, sub.kind);
        put_str(&mut payload, sub.producer_id);
        put_str(&mut payload, sub.submission_id);
        put_str(&mut payload, sub.artifact_hash);
        put_str(&mut payload, sub.evidence_set_hash);
        if !sub.observations.is_empty() {
            put_long(&mut payload, sub.observations.len() as i64);
            for o in &sub.observations {
                put_str(&mut payload, o.kind);
                put_str(&mut payload, o.reference);
                put_str(&mut payload, o.content_hash);
                put_long(&mut payload, o.size);
            }
        }
        payload.push(0);
        put_str(&mut payload, sub.terminal_state);
        put_str(&mut payload, sub.reason_code);
        pos.put(&mut payload);
        put_long(&mut payload, sub.occurred_at_ms);
        put_str(&mut payload, producer_key_id);
        put_bytes(&mut payload, producer_signature);

        let entry_hash = journal_entry_hash(&payload);
        let mut value = soe_buffer(&FP_JOURNAL_RECORD, payload.len() + 80);
        put_bytes(&mut value, &payload);
        put_str(&mut value, &entry_hash);
        let size = output_size(
            &pos,
            out.len(),
            run_id.len(),
            value.len(),
            CeType::ActivityResult,
        );
        if size > self.cfg.max_output_bytes {
            let detail = format!(
                "the journal record would be {size} bytes with its key and headers; the limit (max_output_bytes) is {}",
                self.cfg.max_output_bytes
            );
            self.dead_letter(rec, pos, out, "OUTPUT_TOO_LARGE", &detail);
            return Ok(());
        }
        out.push(Output {
            stream: Stream::Journal,
            key: Cow::Borrowed(run_id.as_bytes()),
            value,
            ce_type: CeType::ActivityResult,
        });
        if self.cfg.keep_log {
            self.state
                .tree
                .append(tlog::entry_leaf_hash(run_id, seq, &entry_hash))
                .expect("begin leaves room in the log");
        }

        let index = self.open_run(run_id, sub.producer_id);
        let cfg = &self.cfg;
        let state = &mut self.state;
        let undo = &mut self.undo;
        let recording = undo.recording();
        let run = &mut state.runs[index];
        run.entry_count = seq + 1;
        let mut set = |map: &mut Map<Box<str>, Box<str>>, field: Field, key: &str, value: &str| {
            let old = map.insert(key.into(), value.into());
            if recording {
                undo.record(Change::MapSet {
                    run: index,
                    field,
                    key: key.into(),
                    old,
                });
            }
        };
        set(
            &mut run.submissions,
            Field::Submissions,
            sub.submission_id,
            sub.stage_id,
        );
        set(
            &mut run.stages,
            Field::Stages,
            sub.stage_id,
            sub.evidence_set_hash,
        );
        if !sub.observations.is_empty() && !run.evidence.contains_key(sub.evidence_set_hash) {
            set(
                &mut run.evidence,
                Field::Evidence,
                sub.evidence_set_hash,
                sub.stage_id,
            );
        }
        if sub.sized {
            for o in &sub.observations {
                if !run.blobs.contains(o.content_hash) {
                    run.blobs.insert(o.content_hash.into());
                    run.evidence_bytes += o.size;
                    if recording {
                        undo.record(Change::BlobAdded(index, o.content_hash.into()));
                    }
                }
            }
        }
        audit(
            cfg,
            &mut state.audit,
            state.partition,
            rec.timestamp_ms,
            pos,
            out,
            Event::ActivityResult,
            run_id,
            [
                sub.stage_id,
                sub.kind,
                sub.terminal_state,
                sub.reason_code,
                sub.artifact_hash,
                sub.evidence_set_hash,
                &entry_hash,
            ],
            seq,
        );
        run.head = entry_hash;
        if run.entry_count - run.sealed_count >= cfg.seal_every {
            seal(
                cfg,
                &mut state.audit,
                &mut state.tree,
                state.partition,
                rec,
                pos,
                out,
                run_id,
                run,
                false,
                None,
            );
        }
        Ok(())
    }
}

impl Core {
    // -- run close and seals ----------------------------------------------------

    pub(crate) fn run_close<'a>(
        &mut self,
        rec: &Input<'a>,
        pos: Position<'a>,
        close: &RunClose<'a>,
        out: &mut Vec<Output<'a>>,
        host: &mut dyn Host,
    ) -> Result<(), Fallback> {
        let run_id = close.run_id;
        let fields = RefusedFields {
            run_id,
            stage_id: "",
            role: "",
            kind: "",
            submission_id: close.submission_id,
            terminal_state: "",
            artifact_hash: "",
            evidence_set_hash: "",
            occurred_at_ms: close.occurred_at_ms,
            producer: close.producer_id,
            key_id: close.producer.map_or("", |(key_id, _)| key_id),
        };
        if !is_valid_id(run_id) {
            let r = Refusal::new(
                "INVALID_RUN_ID",
                format!("run_id {ID_RULE}"),
                "run_id",
                clip(run_id, MAX_EVIDENCE_CHARS),
            );
            self.refuse(rec, pos, &fields, r, out);
            return Ok(());
        }
        let producer = [close.producer_id, close.producer_sdk];
        let envelope = match envelope_refusal(
            rec.key,
            run_id,
            close.submission_id,
            producer,
            close.occurred_at_ms,
            rec.partition,
            self.cfg.submission_partitions,
        ) {
            Some(r) => Some(r),
            None => match self.producer_refusal(
                if close.producer.is_some() {
                    RUN_CLOSE_V2
                } else {
                    RUN_CLOSE
                },
                close.producer,
                close.producer_id,
                None,
                rec.timestamp_ms,
                |key_id| run_close_signing_input(close, key_id),
                host,
            )? {
                Some(r) => Some(r),
                None => self
                    .owner_refusal(run_id, close.producer_id, host)?
                    .map(Refusal::authenticated),
            },
        };
        if let Some(r) = envelope {
            self.refuse(rec, pos, &fields, r, out);
            return Ok(());
        }
        if self.state.runs.get(run_id).is_some_and(|run| run.closed) {
            let r = Refusal::new(
                "RUN_CLOSED",
                format!("run '{run_id}' is already closed and sealed"),
                "run_id",
                run_id,
            )
            .authenticated();
            self.refuse(rec, pos, &fields, r, out);
            return Ok(());
        }
        if self
            .state
            .runs
            .get(run_id)
            .is_none_or(|run| run.entry_count == 0)
        {
            // `_run_close`: nothing to seal; a close must not make state (or a seal) out of nothing
            let r = Refusal::new(
                "RUN_EMPTY",
                format!("run '{run_id}' has no journal entry to seal; close a run after its first stage"),
                "run_id",
                run_id,
            )
            .authenticated();
            self.refuse(rec, pos, &fields, r, out);
            return Ok(());
        }
        if self
            .state
            .runs
            .get(run_id)
            .is_some_and(|run| run.entry_count > MAX_SAFE_INT)
            || !json_safe(rec.offset)
        {
            // the seal's Merkle log leaf names these in canonical JSON
            return Err(Fallback(
                "entry count or offset outside canonical JSON's integers",
            ));
        }
        if !tlog::origin_names(rec.topic) {
            // the final seal's checkpoint names the topic in its origin (see `begin`)
            return Err(Fallback(
                "input topic a checkpoint origin does not name as is",
            ));
        }
        let index = self.touch_run(run_id);
        let cfg = &self.cfg;
        let state = &mut self.state;
        let run = &mut state.runs[index];
        let dropped = seal(
            cfg,
            &mut state.audit,
            &mut state.tree,
            state.partition,
            rec,
            pos,
            out,
            run_id,
            run,
            true,
            close
                .producer
                .map(|(key_id, signature)| (close, key_id, signature)),
        );
        if let Some(dropped) = dropped {
            self.undo.record(Change::Closed(index, Box::new(dropped)));
        }
        let opened_by = &self.state.runs[index].opened_by;
        if let Some(count) = self.state.open_runs.get_mut(opened_by) {
            *count -= 1;
            if *count == 0 {
                self.state.open_runs.remove(opened_by); // a producer without open runs takes no room
            }
        }
        self.final_sealed = true;
        Ok(())
    }
}
