/**
 * Computer-use action records (docs/computer_use.md; the Python SDK's producers/computer_use/
 * boundary.py, snapshot.py, lineage.py and session.py; the formats of schemas/documents/browser.py).
 * Per action: the driver's frame is normalised (`normaliseSnapshot`), the agent's proposal becomes
 * the canonical action (`canonicalAction`: a typed value only as its keyed digest), the observation is
 * hashed, the anchor chains it to the previous action, and the lineage entry binding it all is sealed
 * with the producer's lineage HMAC and signed with its Ed25519 producer key (`sealLineage`). The
 * ComputerUseAction.v2 record carries all of it (`buildAction`). schemas/vectors/browser.json pins
 * every step.
 */

import { createHash } from "node:crypto";

import { actionAnchor, canonicalJson, hmacKeyId, lineageHmac, lineageSigningInput, observationHash, sha256Digest, typedValueDigest } from "./canonical";
import { ActivityRejected, BernsteinError, ProducerKeysError } from "./errors";
import { Ed25519Signer } from "./identity";
import { MalformedPointerTarget, isPointerTarget, parsePointerTarget } from "./pointer";
import { MAX_REF_LENGTH, isValidId, ID_RULE } from "./records";

export const COMPUTER_USE_ACTION_V2 = "ComputerUseAction.v2";
export const LINEAGE_FORMAT = "bernstein.lineage-entry/v1";
export const LINEAGE_ARTEFACT_KIND = "computer_use.action";
export const MAX_LINEAGE_ENTRY_BYTES = 32 * 1024;
/** Typed values shorter than this are not scrubbed from free text (their fields always are). */
export const MIN_SCRUB_CHARS = 4;
/**
 * What a computer-use action may be (UNKNOWN_ACTION_KIND otherwise). The pointer kinds (double_click,
 * drag, hover, right_click) came with the model computer-use formats; their targets may be pointer
 * targets (`PointerTarget`, src/pointer.ts), a drag's must be.
 */
export const ACTION_KINDS = ["check", "click", "double_click", "drag", "hover", "navigate", "press", "right_click", "scroll", "select", "submit", "type", "wait"] as const;
/** Kinds whose proposal may carry a value (digested before it leaves the boundary). */
export const VALUE_KINDS = ["check", "press", "scroll", "select", "type", "wait"] as const;
/** Kinds whose values are scrubbed from later snapshots (press values are key names). */
export const SCRUBBED_KINDS = ["select", "type"] as const;
/** Kinds that act on a target (a URL for navigate, a selector or a pointer target otherwise). */
const TARGET_REQUIRED = ["check", "click", "double_click", "drag", "hover", "navigate", "right_click", "select", "submit", "type"];

/** An action as the agent decided it. `value` may be a secret: it goes to the driver, and only as a keyed digest anywhere else. */
export interface ProposedAction {
  readonly kind: string;
  readonly target?: string;
  readonly value?: string | null;
}

/** The canonical action: what is anchored, signed, published and journalled. */
export interface Action {
  readonly kind: string;
  readonly target: string;
  /** `hmac-sha256:<hex>` of the typed value under the producer's redaction key, or "". */
  readonly value_digest: string;
}

/** A proposal the boundary cannot anchor; the session ends refused (`invalid_action`). */
export class InvalidAction extends BernsteinError {
  constructor(
    message: string,
    readonly field: string,
    readonly index?: number,
  ) {
    super(message, "INVALID_ACTION");
  }

  /** The session document's refusal object. */
  evidence(): Record<string, string | number> {
    const facts: Record<string, string | number> = { code: this.code, field: this.field };
    if (this.index !== undefined) facts["at_action"] = this.index;
    return facts;
  }
}

/** Python's `\s` (str.isspace), so every SDK normalises a snapshot alike. */
const PY_SPACE = "[\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const TRAILING_SPACE = new RegExp(`${PY_SPACE}+$`);
const ONLY_SPACE = new RegExp(`^${PY_SPACE}*$`);
const VOLATILE = new RegExp(`${PY_SPACE}*\\[(?:ref|cursor)=[^\\]]*\\]`, "g");
const VALUE_LINE = new RegExp(
  `^(${PY_SPACE}*- (?:textbox|searchbox|combobox|spinbutton)(?: "(?:[^"\\\\]|\\\\[^\\n])*")?(?: \\[[^\\]]*\\])*): ([^\\n]+)$`,
);

function codePoints(s: string): number {
  return [...s].length;
}

/** Refuse a proposal the scheduler would refuse (before any value is digested). */
export function validateProposal(p: ProposedAction, index?: number): void {
  const target = p.target ?? "";
  if (!(ACTION_KINDS as readonly string[]).includes(p.kind)) {
    throw new InvalidAction(`action kind ${JSON.stringify(p.kind)} is not one of ${ACTION_KINDS.join(", ")}`, "kind", index);
  }
  if (typeof target !== "string" || codePoints(target) > MAX_REF_LENGTH) {
    throw new InvalidAction(`action target must be a string of at most ${MAX_REF_LENGTH} characters`, "target", index);
  }
  if (TARGET_REQUIRED.includes(p.kind) && ONLY_SPACE.test(target)) {
    throw new InvalidAction(`a ${p.kind} action needs a target`, "target", index);
  }
  if (isPointerTarget(target)) {
    try {
      parsePointerTarget(target, p.kind);
    } catch (exc) {
      if (!(exc instanceof MalformedPointerTarget)) throw exc;
      throw new InvalidAction(exc.message, "target", index);
    }
  } else if (p.kind === "drag") {
    throw new InvalidAction("a drag action's target is a pointer target naming both ends (PointerTarget, src/pointer.ts)", "target", index);
  }
  const hasValue = p.value !== undefined && p.value !== null;
  if (hasValue && typeof p.value !== "string") throw new InvalidAction("an action value must be a string", "value", index);
  if (hasValue && !(VALUE_KINDS as readonly string[]).includes(p.kind)) {
    throw new InvalidAction(`a ${p.kind} action takes no value`, "value", index);
  }
  if ((p.kind === "type" || p.kind === "select" || p.kind === "press") && !hasValue) {
    throw new InvalidAction(`a ${p.kind} action needs a value`, "value", index);
  }
}

/** Validate a proposal and digest its value with the producer's redaction key. */
export function canonicalAction(p: ProposedAction, redactionKey: Uint8Array, index?: number): Action {
  validateProposal(p, index);
  const value = p.value ?? null;
  return { kind: p.kind, target: p.target ?? "", value_digest: value === null ? "" : typedValueDigest(redactionKey, value) };
}

function marker(key: Uint8Array, value: string): string {
  return `[redacted ${typedValueDigest(key, value)}]`;
}

/** A YAML scalar's value: a JSON-style double-quoted string stands for the string it quotes. */
function scalar(text: string): string {
  if (text.length >= 2 && text.startsWith('"') && text.endsWith('"')) {
    try {
      const value: unknown = JSON.parse(text);
      if (typeof value === "string") return value;
    } catch {
      // not JSON: the text itself
    }
  }
  return text;
}

/**
 * The normalised, redacted accessibility snapshot (producers/computer_use/snapshot.py): newlines
 * become \n, [ref=..] and [cursor=..] tokens and trailing whitespace go, one final newline; the value
 * of every textbox, searchbox, combobox and spinbutton line becomes `[redacted hmac-sha256:<hex>]` (the
 * typed-value digest under `key`), and so does every occurrence of a typed value of at least
 * MIN_SCRUB_CHARS characters, longest first. Its UTF-8 bytes are what the DOM digest hashes and the
 * content store keeps.
 */
export function normaliseSnapshot(raw: string, key: Uint8Array, typedValues: Iterable<string> = []): string {
  const lines = raw
    .replace(/\r\n/g, "\n")
    .replace(/\r/g, "\n")
    .split("\n")
    .map((line) => {
      const cleaned = line.replace(VOLATILE, "").replace(TRAILING_SPACE, "");
      const m = VALUE_LINE.exec(cleaned);
      return m === null ? cleaned : `${m[1]}: ${marker(key, scalar(m[2] as string))}`;
    });
  while (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();
  let out = lines.join("\n") + "\n";
  const values = [...new Set([...typedValues].filter((v) => codePoints(v) >= MIN_SCRUB_CHARS))].sort(
    (a, b) => codePoints(b) - codePoints(a) || (a < b ? -1 : a > b ? 1 : 0),
  );
  for (const value of values) if (out.includes(value)) out = out.split(value).join(marker(key, value));
  return out;
}

/** The three hashes of one pre-action observation. */
export interface ObservationHashes {
  readonly screenshot_hash: string;
  readonly dom_digest: string;
  readonly observation_hash: string;
}

/** Hash a frame: screenshot bytes and normalised snapshot bytes. */
export function hashObservation(screenshot: Uint8Array, snapshot: Uint8Array): ObservationHashes {
  const dom = sha256Digest(snapshot);
  return { screenshot_hash: sha256Digest(screenshot), dom_digest: dom, observation_hash: observationHash(screenshot, dom) };
}

/** What a lineage entry binds: the action it is the lineage of. */
export interface LineageBinding {
  readonly runId: string;
  readonly sessionId: string;
  readonly actionIndex: number;
  readonly anchor: string;
  readonly prevAnchor: string;
  readonly workerId: string;
}

/** The lineage entry document of one action (schemas/documents/browser.py). */
export function lineageEntry(b: LineageBinding, keyId: string, hmacKeyIdValue: string, hashes: ObservationHashes, action: Action): Record<string, unknown> {
  return {
    run_id: b.runId,
    session_id: b.sessionId,
    action_index: b.actionIndex,
    content_hash: b.anchor,
    parent_hashes: [b.prevAnchor],
    worker_id: b.workerId,
    key_id: keyId,
    format: LINEAGE_FORMAT,
    artefact_kind: LINEAGE_ARTEFACT_KIND,
    hmac_key_id: hmacKeyIdValue,
    observation_hash: hashes.observation_hash,
    screenshot_hash: hashes.screenshot_hash,
    dom_digest: hashes.dom_digest,
    action: { kind: action.kind, target: action.target, value_digest: action.value_digest },
  };
}

/** The stored entry bytes with their HMAC envelope and signature (the Avro LineageEnvelope). */
export interface LineageEnvelope {
  readonly entry: Buffer;
  readonly hmac: string;
  readonly key_id: string;
  readonly signature: Buffer;
}

/**
 * Canonicalise an entry, envelope it with the producer's lineage key (HMAC) and sign it with the
 * producer key, both over PAE("bernstein/lineage-entry/v1", entry). No clock: the same action
 * always seals to the same bytes and signature.
 */
export function sealLineage(entry: Record<string, unknown>, signer: Ed25519Signer, lineageKey: Uint8Array): LineageEnvelope {
  const data = canonicalJson(entry);
  if (data.length > MAX_LINEAGE_ENTRY_BYTES) {
    throw new ActivityRejected(`the lineage entry has ${data.length} bytes; at most ${MAX_LINEAGE_ENTRY_BYTES}`, "LINEAGE_TOO_LARGE");
  }
  return { entry: data, hmac: lineageHmac(lineageKey, data), key_id: signer.keyId, signature: signer.sign(lineageSigningInput(data)) };
}

/** The action log's JSON form of an envelope: the entry as its exact text, the signature as base64. */
export function envelopeJson(l: LineageEnvelope): Record<string, string> {
  return { entry: l.entry.toString("utf8"), hmac: l.hmac, key_id: l.key_id, signature: l.signature.toString("base64") };
}

/** An action's submission id: the first 32 hex digits of sha256(run_id NUL session_id NUL index NUL anchor). */
export function actionSubmissionId(runId: string, sessionId: string, index: number, anchor: string): string {
  return createHash("sha256").update(`${runId}\0${sessionId}\0${index}\0${anchor}`, "utf8").digest("hex").slice(0, 32);
}

/** Everything needed to replay one action (an action log item). */
export interface ActionRecord {
  readonly index: number;
  readonly prevAnchor: string;
  readonly anchor: string;
  readonly hashes: ObservationHashes;
  readonly action: Action;
  readonly lineage: LineageEnvelope;
}

/** The record as the action log holds it. */
export function actionRecordJson(r: ActionRecord): Record<string, unknown> {
  return {
    index: r.index,
    prev_anchor: r.prevAnchor,
    anchor: r.anchor,
    screenshot_hash: r.hashes.screenshot_hash,
    dom_digest: r.hashes.dom_digest,
    observation_hash: r.hashes.observation_hash,
    action: { kind: r.action.kind, target: r.action.target, value_digest: r.action.value_digest },
    lineage_entry_hash: sha256Digest(r.lineage.entry),
    lineage: envelopeJson(r.lineage),
  };
}

/** A producer's computer-use keys: its name, its signing key, its lineage and redaction HMAC keys. */
export interface ComputerUseKeys {
  readonly name: string;
  readonly signer: Ed25519Signer;
  readonly lineageKey?: Buffer;
  readonly redactionKey?: Buffer;
}

export interface ActionInput {
  readonly runId: string;
  readonly sessionId: string;
  readonly index: number;
  /** The previous action's anchor; the session's genesis for action 0. */
  readonly prevAnchor: string;
  readonly screenshot: Uint8Array;
  /** The normalised snapshot bytes (`normaliseSnapshot`). */
  readonly snapshot: Uint8Array;
  /** The canonical action (`canonicalAction`). */
  readonly action: Action;
  readonly sdk: string;
  readonly occurredAtMs: number;
}

/** Anchor, seal and sign one action: its record and its ComputerUseAction.v2 (as the codec takes it). */
export function buildAction(input: ActionInput, keys: ComputerUseKeys): { record: ActionRecord; wire: Record<string, unknown> } {
  for (const [name, value] of [["run_id", input.runId], ["session_id", input.sessionId]] as const) {
    if (!isValidId(value)) throw new ActivityRejected(`${name} ${JSON.stringify(value)} ${ID_RULE}`, `INVALID_${name.toUpperCase()}`);
  }
  if (keys.lineageKey === undefined) {
    throw new ProducerKeysError("the producer keys hold no lineage key (lineage.hmac.key): computer-use actions need one");
  }
  const hashes = hashObservation(input.screenshot, input.snapshot);
  const action = { kind: input.action.kind, target: input.action.target, value_digest: input.action.value_digest };
  const anchor = actionAnchor(input.prevAnchor, hashes.observation_hash, action);
  const binding = { runId: input.runId, sessionId: input.sessionId, actionIndex: input.index, anchor, prevAnchor: input.prevAnchor, workerId: keys.name };
  const lineage = sealLineage(lineageEntry(binding, keys.signer.keyId, hmacKeyId(keys.lineageKey), hashes, action), keys.signer, keys.lineageKey);
  const record: ActionRecord = { index: input.index, prevAnchor: input.prevAnchor, anchor, hashes, action, lineage };
  const wire = {
    submission_id: actionSubmissionId(input.runId, input.sessionId, input.index, anchor),
    run_id: input.runId,
    session_id: input.sessionId,
    action_index: input.index,
    producer: { id: keys.name, sdk: input.sdk },
    prev_anchor: input.prevAnchor,
    screenshot_hash: hashes.screenshot_hash,
    screenshot_size: input.screenshot.length,
    dom_digest: hashes.dom_digest,
    dom_size: input.snapshot.length,
    observation_hash: hashes.observation_hash,
    action,
    anchor,
    lineage: { entry: lineage.entry, hmac: lineage.hmac, key_id: lineage.key_id, signature: lineage.signature },
    occurred_at_ms: input.occurredAtMs,
  };
  return { record, wire };
}
