/** The closed sets and bounds of the wire contract (as `schemas/records.py`). */

export const ACTIVITY_KINDS = ["coding", "research", "browser", "data", "ops"] as const;
export type ActivityKind = (typeof ACTIVITY_KINDS)[number];

export const TERMINAL_STATES = ["completed", "refused", "failed", "timed_out"] as const;
export type TerminalState = (typeof TERMINAL_STATES)[number];

/** Artifacts travel inline so the scheduler can recompute their hash without I/O. */
export const MAX_INLINE_ARTIFACT_BYTES = 512 * 1024;
export const MAX_OBSERVATIONS = 4096;
export const MAX_ID_LENGTH = 128;
export const MAX_REF_LENGTH = 4096;
export const MAX_REASON_CODE_LENGTH = 128;
export const MAX_KIND_LENGTH = 64;
/** submission_id, producer.id and producer.sdk: 1-256 characters without control characters. */
export const MAX_LABEL_LENGTH = 256;
/** occurred_at_ms is 0 (1970-01-01) to this (9999-12-31T23:59:59.999Z). */
export const MAX_OCCURRED_AT_MS = 253_402_300_799_999;
/** The topics' max.message.bytes. */
export const MAX_MESSAGE_BYTES = 2 * 1024 * 1024;
/** The per-run evidence cap: declared sizes of a run's distinct blobs add up to at most this. */
export const MAX_RUN_EVIDENCE_BYTES = 64 * 1024 * 1024;

export const ID_RULE = "must be 1-128 characters of A-Z a-z 0-9 _ . : @ + = -";
export const LABEL_RULE = "must be 1-256 characters without control characters";

const ID_RE = /^[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,127}$/;
const CONTROL_RE = /[\u0000-\u001f\u007f]/;

/** Run, stage and role ids: 1-128 of `A-Z a-z 0-9 _ . : @ + = -`, not starting with a dot or dash. */
export function isValidId(value: unknown): value is string {
  return typeof value === "string" && ID_RE.test(value);
}

/** Non-empty after trimming, at most 128 characters, no control characters. */
export function isValidReasonCode(value: unknown): value is string {
  return (
    typeof value === "string" &&
    value.trim() !== "" &&
    [...value].length <= MAX_REASON_CODE_LENGTH &&
    !CONTROL_RE.test(value)
  );
}

/** submission_id, producer.id, producer.sdk: 1-256 characters, none of them a control character. */
export function isValidLabel(value: unknown): value is string {
  if (typeof value !== "string") return false;
  const length = [...value].length;
  return length > 0 && length <= MAX_LABEL_LENGTH && !CONTROL_RE.test(value);
}

export function hasControl(value: string): boolean {
  return CONTROL_RE.test(value);
}

export function isActivityKind(value: unknown): value is ActivityKind {
  return typeof value === "string" && (ACTIVITY_KINDS as readonly string[]).includes(value);
}

export function isTerminalState(value: unknown): value is TerminalState {
  return typeof value === "string" && (TERMINAL_STATES as readonly string[]).includes(value);
}

/** Bytes an agent saw behind a decision, by content hash; `ref` is provenance only. */
export interface Observation {
  readonly kind: string;
  readonly ref: string;
  readonly content_hash: string;
  /** The blob's byte length (declared on the wire for the per-run evidence cap). */
  readonly size: number;
}
