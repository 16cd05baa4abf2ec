/**
 * Every byte string this SDK hashes, MACs or signs is produced here, exactly as
 * `schemas/canonical.py`: RFC 8785 canonical JSON (integers only), `sha256:<hex>` digests, and
 * DSSE pre-authentication encoding (PAE) around every signed or MACed byte string.
 * No I/O, no clock, no randomness.
 */

import { createHash, createHmac } from "node:crypto";

import { CanonicalizationError, MalformedDigest } from "./errors";
import { JsonFloat } from "./json";

export const CANONICALIZATION = "rfc8785";
export const DIGEST_PREFIX = "sha256:";
export const MAC_PREFIX = "hmac-sha256:";
/** How deeply a hashed document may nest arrays and objects (`{}` and `[]` are depth 1). */
export const MAX_JSON_DEPTH = 64;

export const DOMAIN_JOURNAL_GENESIS = "bernstein/journal-genesis/v1";
export const DOMAIN_JOURNAL_ENTRY = "bernstein/journal-entry/v1";
export const DOMAIN_AUDIT_GENESIS = "bernstein/audit-genesis/v1";
export const DOMAIN_AUDIT_ENTRY = "bernstein/audit-entry/v1";
export const DOMAIN_RUN_SEAL = "bernstein/run-seal/v1";
export const DOMAIN_HMAC_KEY_ID = "bernstein/hmac-key-id/v1";
export const DOMAIN_DATAOPS_ARTIFACT = "bernstein/dataops-artifact/v1";
export const DOMAIN_DATAOPS_RECEIPT = "bernstein/dataops-receipt/v1";
export const DOMAIN_COMPUTER_USE_GENESIS = "bernstein/computer-use-genesis/v1";
export const DOMAIN_TYPED_VALUE = "bernstein/typed-value/v1";
export const DOMAIN_LINEAGE_ENTRY = "bernstein/lineage-entry/v1";
export const DOMAIN_AUDIT_RECORD_V2 = "bernstein/audit-record/v2";
export const DOMAIN_CHECKPOINT_GENESIS = "bernstein/checkpoint-genesis/v1";
export const DOMAIN_PARTITION_CHECKPOINT = "bernstein/partition-checkpoint/v1";
export const DOMAIN_SUBMISSION = "bernstein/submission/v1";

const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;
const MAC_RE = /^hmac-sha256:[0-9a-f]{64}$/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

// --------------------------------------------------------------------------
// Canonical JSON (RFC 8785)
// --------------------------------------------------------------------------

/**
 * The RFC 8785 canonical JSON bytes of `value`.
 *
 * Accepted: null, booleans, safe integers (`number` or `bigint` within +/-(2**53-1)), strings
 * without lone surrogates, arrays and plain objects nested at most MAX_JSON_DEPTH deep. Refused
 * with CanonicalizationError, as the Python reference refuses them: any non-integer number
 * (`1.5`, NaN, a `JsonFloat` such as `1.0` from `parseJson`), integers beyond the safe range,
 * undefined, functions, symbols, Buffers, Maps, class instances, deeper nesting and cycles.
 * Object keys sort by UTF-16 code units (JavaScript's own string order).
 */
export function canonicalJson(value: unknown): Buffer {
  return Buffer.from(canonicalText(value, 0), "utf8");
}

/** `canonicalJson` as a string. */
export function canonicalText(value: unknown, depth = 0): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isInteger(value)) {
        throw new CanonicalizationError(`floats are not allowed in hashed documents (got ${String(value)}); use an integer or a string`);
      }
      if (!Number.isSafeInteger(value)) {
        throw new CanonicalizationError(`integer ${String(value)} is outside the RFC 8785 safe range +/-(2**53-1)`);
      }
      return String(value === 0 ? 0 : value);
    case "bigint":
      if (value > MAX_SAFE || value < -MAX_SAFE) {
        throw new CanonicalizationError(`integer ${value.toString()} is outside the RFC 8785 safe range +/-(2**53-1)`);
      }
      return value.toString();
    case "string":
      return quote(value);
    case "object":
      break;
    default:
      throw new CanonicalizationError(`type ${typeof value} has no canonical JSON form`);
  }
  if (value instanceof JsonFloat) {
    throw new CanonicalizationError(`floats are not allowed in hashed documents (got ${value.lexeme}); use an integer or a string`);
  }
  if (depth >= MAX_JSON_DEPTH) {
    throw new CanonicalizationError(`value nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels (or is cyclic)`);
  }
  if (Array.isArray(value)) {
    return "[" + value.map((item) => canonicalText(item, depth + 1)).join(",") + "]";
  }
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== Object.prototype && proto !== null) {
    const name = (value as object).constructor?.name ?? "object";
    throw new CanonicalizationError(`type ${name} has no canonical JSON form`);
  }
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return "{" + keys.map((key) => quote(key) + ":" + canonicalText(record[key], depth + 1)).join(",") + "}";
}

function quote(text: string): string {
  if (LONE_SURROGATE.test(text)) {
    throw new CanonicalizationError("value has no canonical JSON form: a string holds a lone surrogate");
  }
  // For well-formed strings JSON.stringify escapes exactly as RFC 8785 requires: \b \t \n \f \r \" \\
  // and the other controls below U+0020 as \u00xx (lowercase), nothing else.
  return JSON.stringify(text);
}

// --------------------------------------------------------------------------
// Digests
// --------------------------------------------------------------------------

/** `sha256:<hex>` of raw bytes: the content hash of a blob or observation. */
export function sha256Digest(data: Uint8Array): string {
  return DIGEST_PREFIX + createHash("sha256").update(data).digest("hex");
}

export function isDigest(value: unknown): value is string {
  return typeof value === "string" && DIGEST_RE.test(value);
}

export function isMac(value: unknown): value is string {
  return typeof value === "string" && MAC_RE.test(value);
}

export function requireDigest(value: unknown, field = "digest"): string {
  if (!isDigest(value)) throw new MalformedDigest(value, field);
  return value;
}

/** The 64 hex digits of a well-formed digest. */
export function digestHex(digest: string): string {
  return requireDigest(digest).slice(DIGEST_PREFIX.length);
}

/** Content hash of an observation's raw bytes (the ref is never hashed). */
export const contentHash = sha256Digest;

/** Hash of an artifact's bytes; structured artifacts are canonical JSON first. */
export const artifactHash = sha256Digest;

/** Hash of the sorted, de-duplicated observation content hashes (canonical JSON array); `[]` when empty. */
export function evidenceSetHash(contentHashes: Iterable<string>): string {
  const unique = [...new Set(contentHashes)];
  for (const member of unique) requireDigest(member, "observation content_hash");
  unique.sort();
  return sha256Digest(canonicalJson(unique));
}

/** `sha256:` of a document's canonical JSON bytes. */
export function documentHash(document: unknown): string {
  return sha256Digest(canonicalJson(document));
}

// --------------------------------------------------------------------------
// PAE, chains, MACs
// --------------------------------------------------------------------------

/** DSSE v1 pre-authentication encoding: `DSSEv1 <len(type)> <type> <len(body)> <body>`. */
export function pae(payloadType: string, body: Uint8Array): Buffer {
  const type = Buffer.from(payloadType, "utf8");
  return Buffer.concat([
    Buffer.from(`DSSEv1 ${type.length} `, "ascii"),
    type,
    Buffer.from(` ${body.length} `, "ascii"),
    body,
  ]);
}

export function hmacSha256(key: Uint8Array, message: Uint8Array): string {
  return MAC_PREFIX + createHmac("sha256", key).update(message).digest("hex");
}

export function journalGenesis(runId: string): string {
  return sha256Digest(pae(DOMAIN_JOURNAL_GENESIS, Buffer.from(runId, "utf8")));
}

export function journalEntryHash(payload: Uint8Array): string {
  return sha256Digest(pae(DOMAIN_JOURNAL_ENTRY, payload));
}

export function auditGenesis(key: Uint8Array, partition: number): string {
  return hmacSha256(key, pae(DOMAIN_AUDIT_GENESIS, Buffer.from(String(partition), "ascii")));
}

export function auditMac(key: Uint8Array, payload: Uint8Array): string {
  return hmacSha256(key, pae(DOMAIN_AUDIT_ENTRY, payload));
}

/** AuditRecord.v2: HMAC over `PAE(audit-record/v2, PAE(key_id, payload))`. */
export function auditRecordMacInput(keyId: string, payload: Uint8Array): Buffer {
  return pae(DOMAIN_AUDIT_RECORD_V2, pae(keyId, payload));
}

export function auditRecordMac(key: Uint8Array, keyId: string, payload: Uint8Array): string {
  return hmacSha256(key, auditRecordMacInput(keyId, payload));
}

export function sealSigningInput(payload: Uint8Array): Buffer {
  return pae(DOMAIN_RUN_SEAL, payload);
}

export function checkpointGenesis(partition: number): string {
  return sha256Digest(pae(DOMAIN_CHECKPOINT_GENESIS, Buffer.from(String(partition), "ascii")));
}

export function checkpointSigningInput(payload: Uint8Array): Buffer {
  return pae(DOMAIN_PARTITION_CHECKPOINT, payload);
}

export function checkpointHash(payload: Uint8Array): string {
  return sha256Digest(checkpointSigningInput(payload));
}

/** The exact bytes signed (or MACed) for a structured document: PAE over its canonical JSON. */
export function signingInput(domain: string, document: unknown): Buffer {
  return pae(domain, canonicalJson(document));
}

// --------------------------------------------------------------------------
// Producer signatures (ActivitySubmission.v3, RunClose.v2)
// --------------------------------------------------------------------------

export interface StatementObservation {
  kind: string;
  ref: string;
  content_hash: string;
  size?: number | null;
}

/** The fields of an ActivitySubmission (or a JournalEntry) a statement covers. */
export interface StatementSource {
  submission_id: string;
  run_id: string;
  stage_id: string;
  role: string;
  producer?: { id: string; sdk?: string };
  producer_id?: string;
  kind: string;
  artifact_hash: string;
  evidence_set_hash: string;
  observations: readonly StatementObservation[];
  terminal_state: string;
  reason_code: string;
  occurred_at_ms: number;
}

/** What a producer signs for an activity submission: every field the journal also keeps. */
export function submissionStatement(record: StatementSource, keyId: string): Record<string, unknown> {
  const producerId = record.producer !== undefined ? record.producer.id : record.producer_id;
  return {
    type: "activity",
    submission_id: record.submission_id,
    run_id: record.run_id,
    stage_id: record.stage_id,
    role: record.role,
    producer_id: producerId,
    kind: record.kind,
    artifact_hash: record.artifact_hash,
    evidence_set_hash: record.evidence_set_hash,
    observations: record.observations.map((o) => ({
      kind: o.kind,
      ref: o.ref,
      content_hash: o.content_hash,
      size: o.size ?? 0,
    })),
    terminal_state: record.terminal_state,
    reason_code: record.reason_code,
    occurred_at_ms: record.occurred_at_ms,
    key_id: keyId,
  };
}

/** What a producer signs to close a run (RunClose.v2). */
export function runCloseStatement(
  submissionId: string,
  runId: string,
  producerId: string,
  occurredAtMs: number,
  keyId: string,
): Record<string, unknown> {
  return {
    type: "run_close",
    submission_id: submissionId,
    run_id: runId,
    producer_id: producerId,
    occurred_at_ms: occurredAtMs,
    key_id: keyId,
  };
}

/** `PAE(bernstein/submission/v1, canonical JSON of the statement)`: what the producer key signs. */
export function submissionSigningInput(statement: Record<string, unknown>): Buffer {
  return signingInput(DOMAIN_SUBMISSION, statement);
}

// --------------------------------------------------------------------------
// Modalities
// --------------------------------------------------------------------------

/** The data/ops plan projection: sorted, de-duplicated input hashes and the ordered steps. */
export function planDocument(inputHashes: Iterable<string>, steps: readonly string[]): { input_hashes: string[]; steps: string[] } {
  const unique = [...new Set([...inputHashes].map((h) => requireDigest(h, "input content_hash")))].sort();
  return { input_hashes: unique, steps: [...steps] };
}

export function planHash(inputHashes: Iterable<string>, steps: readonly string[]): string {
  return documentHash(planDocument(inputHashes, steps));
}

/** Computer-use observation: sha256(screenshot bytes || DOM digest string). */
export function observationHash(screenshot: Uint8Array, domDigest: string): string {
  return sha256Digest(Buffer.concat([screenshot, Buffer.from(requireDigest(domDigest, "dom_digest"), "ascii")]));
}

export function computerUseGenesis(runId: string, sessionId: string): string {
  return sha256Digest(pae(DOMAIN_COMPUTER_USE_GENESIS, canonicalJson([runId, sessionId])));
}

export function actionAnchor(prevAnchor: string, observation: string, action: Record<string, unknown>): string {
  return documentHash({ prev_anchor: prevAnchor, observation_hash: observation, action });
}

export function lineageSigningInput(entry: Uint8Array): Buffer {
  return pae(DOMAIN_LINEAGE_ENTRY, entry);
}

export function lineageHmac(key: Uint8Array, entry: Uint8Array): string {
  return hmacSha256(key, lineageSigningInput(entry));
}

export function actionDigest(action: Record<string, unknown>): string {
  return documentHash(action);
}

export function typedValueDigest(key: Uint8Array, value: string): string {
  return hmacSha256(key, pae(DOMAIN_TYPED_VALUE, Buffer.from(value, "utf8")));
}

// --------------------------------------------------------------------------
// Key identifiers
// --------------------------------------------------------------------------

/** Key id of an Ed25519 public key: the digest of its 32 raw bytes. */
export function publicKeyId(rawPublicKey: Uint8Array): string {
  if (rawPublicKey.length !== 32) {
    throw new CanonicalizationError(`an Ed25519 public key has 32 bytes, got ${rawPublicKey.length}`);
  }
  return sha256Digest(rawPublicKey);
}

/** Key id of an HMAC key: a domain-separated digest. */
export function hmacKeyId(key: Uint8Array): string {
  return sha256Digest(pae(DOMAIN_HMAC_KEY_ID, key));
}
