/**
 * The conformance family of browser.json: one browser session's computer-use action records, built
 * through this SDK's own `ComputerUseSession` from the raw frames, proposals and keys the vector
 * states, byte for byte (snapshots, actions, anchors, lineage HMACs and signatures, submission ids,
 * ComputerUseAction.v2 bytes, the action log, the session document and the signed browser result);
 * the same again for pointer_session, a session whose targets are all pointer targets; plus the
 * snapshot normalisation cases, the pointer targets' canonical texts (both ways) and the proposals the
 * boundary refuses.
 */

import { Codec } from "../avro";
import { ActionPublisher, ComputerUseSession, SESSION_TERMINAL_STATES } from "../browser_session";
import * as c from "../canonical";
import { ACTION_KINDS, InvalidAction, MIN_SCRUB_CHARS, ProposedAction, SCRUBBED_KINDS, VALUE_KINDS, normaliseSnapshot, validateProposal } from "../computer_use";
import { Published, SubmissionOptions, signedSubmissionRecord } from "../emitter";
import { Ed25519Signer, SigningProducer } from "../identity";
import { JsonValue } from "../json";
import { Point, PointerTarget, parsePointerTarget } from "../pointer";
import { Mismatch, Obj, Tally, eq, hex, num, obj, roundTrip, sections, str } from "./check";

/** The session's publisher: keeps what would be stored and published. */
class Recorder implements ActionPublisher {
  readonly blobs = new Map<string, Buffer>();
  readonly actions: Buffer[] = [];
  result: Buffer | undefined;
  record: Record<string, unknown> | undefined;

  constructor(
    private readonly codec: Codec,
    private readonly producer: SigningProducer,
    private readonly sdk: string,
  ) {}

  async storeBlobs(...blobs: Uint8Array[]): Promise<void> {
    for (const b of blobs) this.blobs.set(c.contentHash(b), Buffer.from(b));
  }

  async publishRaw(runId: string, value: Buffer, submissionId: string): Promise<Published> {
    this.actions.push(value);
    return { runId, submissionId, topic: "", partition: 0, offset: this.actions.length - 1, value };
  }

  async publish(options: SubmissionOptions): Promise<Published> {
    for (const o of options.result.observations) {
      const held = this.blobs.get(o.content_hash);
      if (held === undefined || held.length !== o.size) throw new Mismatch(`observation ${o.ref} was not stored before the result`);
    }
    this.record = signedSubmissionRecord({ ...options, producerId: this.producer.name, signer: this.producer.signer, sdk: this.sdk });
    this.result = this.codec.encode("ActivitySubmission.v3", this.record);
    return { runId: options.runId, submissionId: String(this.record["submission_id"]), topic: "", partition: 0, offset: 0, value: this.result };
  }
}

function proposal(p: Obj): ProposedAction {
  const value = p["value"];
  if (value !== null && typeof value !== "string") throw new Mismatch("proposed.value is neither null nor a string");
  return { kind: str(p, "kind"), target: str(p, "target"), value };
}

function frame(f: Obj): { screenshot: Buffer; ariaSnapshot: string; url: string } {
  return { screenshot: hex(f, "screenshot_hex"), ariaSnapshot: str(f, "aria_snapshot"), url: str(f, "url") };
}

function strings(value: JsonValue | undefined, where: string): string[] {
  if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) throw new Mismatch(`${where} is not a list of strings`);
  return value as string[];
}

/** browser.json (asynchronous: the session publishes through promises). */
export async function browserFile(t: Tally, doc: Obj, codec: Codec): Promise<void> {
  sections(t, doc, ["description", "keys", "rules", "session", "pointer_session", "pointer_targets", "snapshots", "invalid_proposals"], "browser");
  t.check("browser.description", () => eq(typeof doc["description"], "string"));
  const k = obj(doc["keys"], "keys");
  sections(t, k, ["producer_id", "ed25519_seed_hex", "key_id", "lineage_hmac_key_hex", "lineage_hmac_key_id", "redaction_hmac_key_hex"], "browser.keys");
  const signer = Ed25519Signer.fromSeed(hex(k, "ed25519_seed_hex"));
  const keys: SigningProducer = { name: str(k, "producer_id"), signer, lineageKey: hex(k, "lineage_hmac_key_hex"), redactionKey: hex(k, "redaction_hmac_key_hex") };
  t.check("browser.keys.key_id", () => eq(signer.keyId, str(k, "key_id")));
  t.check("browser.keys.lineage_hmac_key_id", () => eq(c.hmacKeyId(hex(k, "lineage_hmac_key_hex")), str(k, "lineage_hmac_key_id")));

  const rules = obj(doc["rules"], "rules");
  sections(t, rules, ["action_kinds", "value_kinds", "scrubbed_kinds", "min_scrub_chars", "terminal_states"], "browser.rules");
  t.check("browser.rules.action_kinds", () => eq([...ACTION_KINDS], rules["action_kinds"]));
  t.check("browser.rules.value_kinds", () => eq([...VALUE_KINDS], rules["value_kinds"]));
  t.check("browser.rules.scrubbed_kinds", () => eq([...SCRUBBED_KINDS], rules["scrubbed_kinds"]));
  t.check("browser.rules.min_scrub_chars", () => eq(MIN_SCRUB_CHARS, num(rules, "min_scrub_chars")));
  t.check("browser.rules.terminal_states", () => eq(SESSION_TERMINAL_STATES, rules["terminal_states"]));

  for (const item of (doc["snapshots"] ?? []) as JsonValue[]) {
    const s = obj(item, "snapshot case");
    sections(t, s, ["name", "raw", "typed_values", "normalised"], `browser.snapshots.${str(s, "name")}`);
    t.check(`browser.snapshots.${str(s, "name")}`, () =>
      eq(normaliseSnapshot(str(s, "raw"), keys.redactionKey as Buffer, strings(s["typed_values"], "typed_values")), str(s, "normalised")),
    );
  }
  for (const item of (doc["invalid_proposals"] ?? []) as JsonValue[]) {
    const p = obj(item, "invalid proposal");
    sections(t, p, ["name", "proposed", "code", "field"], `browser.invalid_proposals.${str(p, "name")}`);
    t.check(`browser.invalid_proposals.${str(p, "name")}`, () => {
      try {
        validateProposal(proposal(obj(p["proposed"], "proposed")), 0);
      } catch (exc) {
        if (!(exc instanceof InvalidAction)) throw exc;
        eq([exc.code, exc.field], [str(p, "code"), str(p, "field")], "refusal");
        return;
      }
      throw new Mismatch("the SDK accepts a proposal the boundary refuses");
    });
  }
  for (const item of (doc["pointer_targets"] ?? []) as JsonValue[]) pointerTargetCase(t, obj(item, "pointer target case"));
  await session(t, "browser.session", obj(doc["session"], "session"), keys, codec);
  await session(t, "browser.pointer_session", obj(doc["pointer_session"], "pointer_session"), keys, codec);
}

/**
 * One pointer_targets case, both ways: its fields give exactly its text (`PointerTarget.text`), and its
 * text parses, for every kind that takes its shape, to exactly its fields.
 */
function pointerTargetCase(t: Tally, p: Obj): void {
  const n = `browser.pointer_targets.${str(p, "name")}`;
  sections(t, p, ["name", "fields", "text"], n);
  const fields = obj(p["fields"], "fields");
  sections(t, fields, ["at", "element", "to", "to_element", "focused"], `${n}.fields`);
  const stated = (): PointerTarget => {
    const focused = fields["focused"];
    if (focused !== undefined && focused !== true) throw new Mismatch("fields.focused is written only as true");
    const toElement = fields["to_element"];
    if (toElement !== undefined && typeof toElement !== "string") throw new Mismatch("fields.to_element is not a string");
    return new PointerTarget({ element: str(fields, "element"), at: point(fields, "at"), to: point(fields, "to"), toElement, focused: focused === true });
  };
  t.check(`${n}.text`, () => eq(stated().text(), str(p, "text")));
  t.check(`${n}.parse`, () => {
    const target = stated();
    const kinds = target.focused
      ? ["type"]
      : target.toElement !== undefined
        ? ["drag"]
        : target.at !== undefined && target.to === undefined
          ? ["click", "double_click", "hover", "right_click", "scroll"]
          : [];
    if (kinds.length === 0) throw new Mismatch("no action kind takes this shape");
    for (const kind of kinds) eq(shown(parsePointerTarget(str(p, "text"), kind)), shown(target), `the ${kind} target's fields`);
  });
}

function point(fields: Obj, key: string): Point | undefined {
  const v = fields[key];
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || v.length !== 2 || !v.every((x) => typeof x === "number")) throw new Mismatch(`fields.${key} is not a point [x, y]`);
  return [v[0] as number, v[1] as number];
}

/** Every field of a pointer target, absent ones as null, for comparison. */
function shown(target: PointerTarget): unknown {
  return { element: target.element, at: target.at ?? null, to: target.to ?? null, to_element: target.toElement ?? null, focused: target.focused };
}

async function session(t: Tally, w: string, s: Obj, keys: SigningProducer, codec: Codec): Promise<void> {
  sections(t, s, ["run_id", "session_id", "role", "adapter", "sdk", "genesis", "steps", "final", "action_log_canonical_utf8", "action_log_hash", "document", "document_canonical_utf8", "result"], w);
  const pub = new Recorder(codec, keys, str(s, "sdk"));
  const session = new ComputerUseSession(str(s, "run_id"), str(s, "session_id"), keys, pub, { role: str(s, "role"), adapter: str(s, "adapter"), sdk: str(s, "sdk"), codec });
  t.check(`${w}.genesis`, () => eq(session.genesis, str(s, "genesis")));
  const steps = s["steps"];
  if (!Array.isArray(steps)) throw new Mismatch("session.steps is not a list");
  for (const [i, item] of steps.entries()) {
    const step = obj(item, "step");
    const n = `${w}.steps[${i}]`;
    sections(t, step, ["frame", "proposed", "occurred_at_ms", "snapshot_normalised", "screenshot_hash", "dom_digest", "observation_hash", "action", "prev_anchor", "anchor", "lineage_entry_canonical_utf8", "lineage_hmac", "lineage_signature_hex", "lineage_entry_hash", "submission_id", "record", "value_hex"], n);
    const pending = session.observe(frame(obj(step["frame"], "frame")));
    t.check(`${n}.snapshot_normalised`, () => eq(pending.snapshot.toString("utf8"), str(step, "snapshot_normalised")));
    t.check(`${n}.hashes`, () => eq(pending.hashes, { screenshot_hash: str(step, "screenshot_hash"), dom_digest: str(step, "dom_digest"), observation_hash: str(step, "observation_hash") }));
    const occurred = num(step, "occurred_at_ms");
    session.now = () => occurred;
    const rec = await session.record(pending, proposal(obj(step["proposed"], "proposed")));
    t.check(`${n}.action`, () => eq(rec.record.action, step["action"]));
    t.check(`${n}.anchors`, () => eq([rec.record.prevAnchor, rec.record.anchor], [str(step, "prev_anchor"), str(step, "anchor")]));
    t.check(`${n}.lineage_entry`, () => eq(rec.record.lineage.entry.toString("utf8"), str(step, "lineage_entry_canonical_utf8")));
    t.check(`${n}.lineage_hmac`, () => eq(rec.record.lineage.hmac, str(step, "lineage_hmac")));
    t.check(`${n}.lineage_signature`, () => eq(rec.record.lineage.signature.toString("hex"), str(step, "lineage_signature_hex")));
    t.check(`${n}.lineage_entry_hash`, () => eq(c.sha256Digest(rec.record.lineage.entry), str(step, "lineage_entry_hash")));
    t.check(`${n}.submission_id`, () => eq(rec.wire["submission_id"], str(step, "submission_id")));
    t.check(`${n}.value`, () => eq(rec.value.toString("hex"), str(step, "value_hex")));
    t.check(`${n}.record`, () => roundTrip(codec, "ComputerUseAction.v2", step["record"], hex(step, "value_hex")));
    t.check(`${n}.blobs_first`, () => {
      if (!pub.blobs.has(pending.hashes.screenshot_hash) || !pub.blobs.has(pending.hashes.dom_digest) || pub.actions.length !== i + 1) {
        throw new Mismatch("the frame's blobs were not stored with the action");
      }
    });
  }
  const f = obj(s["final"], "final");
  sections(t, f, ["frame", "snapshot_normalised", "screenshot_hash", "dom_digest", "observation_hash"], `${w}.final`);
  const final = session.observe(frame(obj(f["frame"], "frame")));
  t.check(`${w}.final.snapshot_normalised`, () => eq(final.snapshot.toString("utf8"), str(f, "snapshot_normalised")));
  t.check(`${w}.final.hashes`, () => eq(final.hashes, { screenshot_hash: str(f, "screenshot_hash"), dom_digest: str(f, "dom_digest"), observation_hash: str(f, "observation_hash") }));
  await session.recordFinal(final);
  const res = obj(s["result"], "result");
  sections(t, res, ["submission_id", "occurred_at_ms", "statement", "record", "value_hex"], `${w}.result`);
  session.resultSubmissionId = str(res, "submission_id");
  session.resultOccurredAtMs = num(res, "occurred_at_ms");
  const outcome = await session.finish();
  t.check(`${w}.action_log`, () => eq(outcome.actionLog.toString("utf8"), str(s, "action_log_canonical_utf8")));
  t.check(`${w}.action_log_hash`, () => eq(c.contentHash(outcome.actionLog), str(s, "action_log_hash")));
  t.check(`${w}.document`, () => eq(outcome.document, s["document"]));
  t.check(`${w}.document_canonical`, () => eq(outcome.result.artifact.toString("utf8"), str(s, "document_canonical_utf8")));
  t.check(`${w}.result.statement`, () => {
    const record = pub.record as unknown as Parameters<typeof c.submissionStatement>[0];
    eq(c.submissionStatement(record, keys.signer.keyId), res["statement"], "statement");
  });
  t.check(`${w}.result.value`, () => eq(pub.result?.toString("hex"), str(res, "value_hex")));
  t.check(`${w}.result.record`, () => roundTrip(codec, "ActivitySubmission.v3", res["record"], hex(res, "value_hex")));
}
