/**
 * `ActivityResult`: an artifact plus the hashes needed to replay it, built on the producer side
 * (as `producers/activity.py`), and typed builders for each activity kind that produce artifacts
 * the scheduler accepts (docs/modality_rules.md, docs/research.md, docs/dataops.md):
 *
 * - `codingResult`: an opaque artifact (e.g. a unified diff) and the `file` observations it wrote;
 * - `ResearchReportBuilder` / `researchAbort`: a `bernstein.research.report/v1` report whose every
 *   claim quotes a fetched page, or the abort record of a budget refusal or failed fetch;
 * - `DataOpsActivity`: plan before effects, every input and output and the receipt signed with the
 *   producer key (`bernstein.dataops.receipt/v1`), or the refusal record;
 * - `browserResult`: a browser stage's result (the scheduler checks it against the session state
 *   of the computer-use records; this SDK does not publish those);
 * - `buildResult`: any kind, any artifact (the generic builder the others use).
 *
 * Nothing here does I/O. Each result carries the bytes of the observations it was given
 * (`blobs`), which the emitter stores before publishing (blobs first).
 */

import { artifactHash, canonicalJson, contentHash, evidenceSetHash, isDigest, planHash, signingInput } from "./canonical";
import { DOMAIN_DATAOPS_ARTIFACT, DOMAIN_DATAOPS_RECEIPT } from "./canonical";
import { ActivityRejected, ArtifactTooLarge } from "./errors";
import type { Ed25519Signer } from "./identity";
import {
  ActivityKind,
  ID_RULE,
  MAX_INLINE_ARTIFACT_BYTES,
  Observation,
  TerminalState,
  isActivityKind,
  isTerminalState,
  isValidId,
  isValidReasonCode,
} from "./records";

/** What an activity returns: the artifact and the hashes needed to replay it. */
export interface ActivityResult {
  readonly kind: ActivityKind;
  readonly artifact: Buffer;
  readonly artifact_hash: string;
  readonly evidence_set_hash: string;
  readonly terminal_state: TerminalState;
  readonly reason_code: string;
  readonly observations: readonly Observation[];
  /** Bytes by content hash that must be in the CAS before the submission is published. */
  readonly blobs: ReadonlyMap<string, Buffer>;
}

/** Evidence: an observation and, when the caller has them, its bytes (stored before publishing). */
export interface Evidence {
  readonly observation: Observation;
  readonly data?: Buffer;
}

export interface ResultOptions {
  terminalState?: TerminalState | string;
  reasonCode?: string;
}

/** An Observation of `data`, content-addressed and sized now; `ref` is provenance only. */
export function observe(kind: string, ref: string, data: Uint8Array): Evidence {
  const bytes = Buffer.from(data);
  return { observation: { kind, ref, content_hash: contentHash(bytes), size: bytes.length }, data: bytes };
}

/** Artifact bytes: raw bytes as given, anything else as RFC 8785 canonical JSON. */
export function artifactBytes(artifact: unknown): Buffer {
  if (artifact instanceof Uint8Array) return Buffer.from(artifact);
  return canonicalJson(artifact);
}

/** Refuse the first `[name, value]` that is not a valid id, as `INVALID_<NAME>`. */
export function requireValidIds(...named: [string, unknown][]): void {
  for (const [name, value] of named) {
    if (!isValidId(value)) {
      throw new ActivityRejected(`${name} ${JSON.stringify(value)} ${ID_RULE}`, `INVALID_${name.toUpperCase()}`);
    }
  }
}

/** The generic builder: compute both hashes; refuse a result the scheduler would refuse anyway. */
export function buildResult(
  kind: ActivityKind | string,
  artifact: unknown,
  evidence: readonly (Evidence | Observation)[] = [],
  options: ResultOptions = {},
): ActivityResult {
  const terminalState = options.terminalState ?? "completed";
  const reasonCode = options.reasonCode ?? "ok";
  if (!isActivityKind(kind)) throw new ActivityRejected(`unknown activity kind ${JSON.stringify(kind)}`, "UNKNOWN_KIND");
  if (!isTerminalState(terminalState)) {
    throw new ActivityRejected(`unknown terminal state ${JSON.stringify(terminalState)}`, "UNKNOWN_TERMINAL_STATE");
  }
  if (typeof reasonCode !== "string" || reasonCode.trim() === "") {
    throw new ActivityRejected("reason_code must not be empty", "EMPTY_REASON_CODE");
  }
  if (!isValidReasonCode(reasonCode)) {
    throw new ActivityRejected("reason_code must be at most 128 characters without control characters", "INVALID_REASON_CODE");
  }
  const body = artifactBytes(artifact);
  if (body.length > MAX_INLINE_ARTIFACT_BYTES) {
    throw new ArtifactTooLarge(
      `artifact has ${body.length} bytes; the inline limit is ${MAX_INLINE_ARTIFACT_BYTES} (store large evidence as observations and keep the artifact a small manifest of their hashes)`,
      { size: String(body.length), limit: String(MAX_INLINE_ARTIFACT_BYTES) },
    );
  }
  const observations: Observation[] = [];
  const blobs = new Map<string, Buffer>();
  for (const item of evidence) {
    const observation = "observation" in item ? item.observation : item;
    if (!isDigest(observation.content_hash)) {
      throw new ActivityRejected(
        `observation ${JSON.stringify(observation.ref)} has a malformed content_hash`,
        "MALFORMED_CONTENT_HASH",
      );
    }
    if (!Number.isSafeInteger(observation.size) || observation.size < 0) {
      throw new ActivityRejected(`observation ${JSON.stringify(observation.ref)} has no valid size`, "INVALID_EVIDENCE_SIZE");
    }
    observations.push({ kind: observation.kind, ref: observation.ref, content_hash: observation.content_hash, size: observation.size });
    if ("observation" in item && item.data !== undefined) blobs.set(observation.content_hash, item.data);
  }
  return {
    kind,
    artifact: body,
    artifact_hash: artifactHash(body),
    evidence_set_hash: evidenceSetHash(observations.map((o) => o.content_hash)),
    terminal_state: terminalState,
    reason_code: reasonCode,
    observations,
    blobs,
  };
}

// --------------------------------------------------------------------------
// coding, browser
// --------------------------------------------------------------------------

/** A coding stage: the artifact (typically the unified diff, bytes or text) and the files it wrote. */
export function codingResult(
  artifact: Uint8Array | string,
  files: readonly { path: string; data: Uint8Array }[] = [],
  options: ResultOptions = {},
): ActivityResult {
  const body = typeof artifact === "string" ? Buffer.from(artifact, "utf8") : artifact;
  return buildResult("coding", body, files.map((f) => observe("file", f.path, f.data)), options);
}

/**
 * A browser stage's result. The scheduler accepts it only for a computer-use session whose
 * recorded state matches (BROWSER_SESSION_MISMATCH otherwise, docs/computer_use.md); a session
 * that records actions builds and publishes it itself (`ComputerUseSession.finish`).
 */
export function browserResult(
  sessionDocument: unknown,
  evidence: readonly (Evidence | Observation)[] = [],
  options: ResultOptions = {},
): ActivityResult {
  return buildResult("browser", sessionDocument, evidence, options);
}

// --------------------------------------------------------------------------
// research
// --------------------------------------------------------------------------

export const RESEARCH_REPORT_FORMAT = "bernstein.research.report/v1";
export const RESEARCH_REFUSAL_FORMAT = "bernstein.research.refusal/v1";
export const RESEARCH_FAILURE_FORMAT = "bernstein.research.failure/v1";
export const QUOTE_NORMALISATION = "bernstein.quote-normalisation/v1";

const CLAIM_ID_RE = /^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$/;
// Python's str.split() whitespace (what schemas/documents/quotes.py splits on), not JavaScript's \s.
const PY_WHITESPACE = /[\t\n\u000b\u000c\r\u001c-\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/g;

/** `bernstein.quote-normalisation/v1` step 3: NFC, whitespace runs to one space, trimmed. */
export function normaliseText(text: string): string {
  return text.normalize("NFC").split(PY_WHITESPACE).filter((part) => part !== "").join(" ");
}

export interface FetchedSource {
  /** The planned URL (what citations name). */
  sourceRef: string;
  /** The exact response bytes. */
  data: Uint8Array;
  finalUrl?: string;
  status?: number | null;
  contentType?: string | null;
  redirects?: readonly { status: number; url: string }[];
}

export interface ClaimInput {
  statement: string;
  /** Each citation: the source it quotes and the quoted span (normalised here). */
  citations: readonly { sourceRef: string; quote: string }[];
  /** Default: `c<position>`. */
  claimId?: string;
}

const HTML_TYPES = new Set(["text/html", "application/xhtml+xml"]);
const UTF8_LABELS = new Set(["utf-8", "utf8", "utf_8", "u8", "utf", "cp65001"]);
// Python's str.splitlines() boundaries.
const PY_LINE_BREAK = /\r\n|[\n\r\u000b\u000c\u001c\u001d\u001e\u0085\u2028\u2029]/;

/**
 * The normalised text of a page under `bernstein.quote-normalisation/v1` (schemas/documents/quotes.py),
 * for the pages this SDK can read exactly: not HTML, and UTF-8 (no charset, or a UTF-8 one). Undefined
 * for any other page (HTML needs Python's html.parser; other charsets its codec registry): the
 * verifier checks those quotes on the reattached bytes.
 */
export function plainPageText(data: Uint8Array, contentType?: string | null): string | undefined {
  const [media = "", ...params] = (contentType ?? "").split(";");
  const declared = media.trim().toLowerCase();
  if (declared !== "" ? HTML_TYPES.has(declared) : /^(<!doctype html|<html)/.test(Buffer.from(data.subarray(0, 512)).toString("latin1").replace(/^(\xef\xbb\xbf|[ \t\r\n\f])+/, "").toLowerCase())) {
    return undefined;
  }
  for (const param of params) {
    const eq = param.indexOf("=");
    if (eq >= 0 && param.slice(0, eq).trim().toLowerCase() === "charset") {
      const label = param.slice(eq + 1).trim().replace(/^["']|["']$/g, "").trim().toLowerCase();
      if (!UTF8_LABELS.has(label)) return undefined;
      break;
    }
  }
  let text = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true }).decode(data);
  if (text.startsWith("\ufeff")) text = text.slice(1);
  const blocks: string[] = [];
  let current: string[] = [];
  for (const line of text.split(PY_LINE_BREAK)) {
    if (normaliseText(line) !== "") current.push(line);
    else if (current.length > 0) {
      blocks.push(current.join("\n"));
      current = [];
    }
  }
  if (current.length > 0) blocks.push(current.join("\n"));
  return blocks
    .map(normaliseText)
    .filter((b) => b !== "")
    .join(" ");
}

/**
 * Builds a `bernstein.research.report/v1` report. Every rule the scheduler refuses
 * (RESEARCH_* codes) is refused here first with the same code without the prefix. The
 * quote-in-page rule (QUOTE_NOT_IN_PAGE) is checked here for plain-text UTF-8 pages
 * (`plainPageText`); for HTML pages it is left to the verifier, which checks it on the
 * reattached page bytes with Python's HTML text extraction.
 */
export class ResearchReportBuilder {
  private readonly plan: string[] = [];
  private readonly sources = new Map<string, { record: Record<string, unknown>; evidence: Evidence; text: string | undefined }>();
  private readonly claims: Record<string, unknown>[] = [];

  constructor(private readonly query: string) {
    if (query.trim() === "") throw new ActivityRejected("the research query is empty", "EMPTY_QUERY");
  }

  /** Plan a source (a planned source need not have been fetched). */
  planSource(sourceRef: string): this {
    if (!this.plan.includes(sourceRef)) this.plan.push(sourceRef);
    return this;
  }

  /** Record a fetched source: planned, observed as a `page`, and described in the report. */
  addSource(source: FetchedSource): this {
    if (this.sources.has(source.sourceRef)) {
      throw new ActivityRejected(`source ${JSON.stringify(source.sourceRef)} was already added`, "INVALID_SOURCE");
    }
    this.planSource(source.sourceRef);
    const evidence = observe("page", source.sourceRef, source.data);
    this.sources.set(source.sourceRef, {
      evidence,
      text: plainPageText(source.data, source.contentType),
      record: {
        source_ref: source.sourceRef,
        final_url: source.finalUrl ?? source.sourceRef,
        status: source.status ?? null,
        content_type: source.contentType ?? null,
        redirects: (source.redirects ?? []).map((r) => ({ status: r.status, url: r.url })),
        page_content_hash: evidence.observation.content_hash,
        size: evidence.observation.size,
      },
    });
    return this;
  }

  addClaim(claim: ClaimInput): this {
    const position = this.claims.length + 1;
    const claimId = claim.claimId ?? `c${position}`;
    if (!CLAIM_ID_RE.test(claimId)) {
      throw new ActivityRejected(
        `claim ${position} has an invalid claim_id ${JSON.stringify(claimId)} (1-64 of A-Z a-z 0-9 _ . : -)`,
        "INVALID_CLAIM_ID",
        { position: String(position), claim_id: claimId },
      );
    }
    if (this.claims.some((c) => c["claim_id"] === claimId)) {
      throw new ActivityRejected(`claim_id '${claimId}' is used by more than one claim`, "DUPLICATE_CLAIM_ID", { claim_id: claimId });
    }
    if (normaliseText(claim.statement) === "") {
      throw new ActivityRejected(`claim '${claimId}' has an empty statement`, "EMPTY_STATEMENT", { claim_id: claimId });
    }
    if (claim.citations.length === 0) {
      throw new ActivityRejected(`claim '${claimId}' has no citation; every claim must quote a fetched page`, "UNCITED_CLAIM", {
        claim_id: claimId,
      });
    }
    const citations = claim.citations.map((c, index) => {
      const quote = normaliseText(c.quote);
      if (quote === "") {
        throw new ActivityRejected(`claim '${claimId}' citation ${index}: quoted span is empty`, "EMPTY_QUOTE", { claim_id: claimId });
      }
      const source = this.sources.get(c.sourceRef);
      if (source === undefined) {
        throw new ActivityRejected(
          `claim '${claimId}' citation ${index}: cites source ${JSON.stringify(c.sourceRef)} that the run did not fetch`,
          "SOURCE_NOT_FETCHED",
          { claim_id: claimId, source_ref: c.sourceRef },
        );
      }
      if (source.text !== undefined && !source.text.includes(quote)) {
        throw new ActivityRejected(
          `claim '${claimId}' citation ${index}: quoted span ${JSON.stringify(quote.slice(0, 120))} does not occur in the page fetched from ${JSON.stringify(c.sourceRef)} (${source.evidence.observation.content_hash}) under ${QUOTE_NORMALISATION}`,
          "QUOTE_NOT_IN_PAGE",
          { claim_id: claimId, citation: String(index), source_ref: c.sourceRef, quote: quote.slice(0, 120) },
        );
      }
      return {
        claim_id: claimId,
        source_ref: c.sourceRef,
        page_content_hash: source.evidence.observation.content_hash,
        quote,
      };
    });
    this.claims.push({ claim_id: claimId, statement: claim.statement, citations });
    return this;
  }

  /** The report document (what `build` publishes as canonical JSON). */
  document(): Record<string, unknown> {
    return {
      format: RESEARCH_REPORT_FORMAT,
      query: this.query,
      plan: [...this.plan],
      sources: [...this.sources.values()].map((s) => s.record),
      claims: this.claims,
      quote_normalisation: QUOTE_NORMALISATION,
    };
  }

  /** A `completed` research result: the report and one `page` observation per fetched source. */
  build(): ActivityResult {
    if (this.claims.length === 0) throw new ActivityRejected("research report holds no claims", "NO_CLAIMS");
    return buildResult(
      "research",
      this.document(),
      [...this.sources.values()].map((s) => s.evidence),
    );
  }
}

/**
 * A research run that stopped before its report: a budget refusal (`refused` / `budget_exhausted`,
 * `outcome` = `{code, cap, limit, attempted, source}`) or a failed fetch (`failed` / `fetch_failed`,
 * `outcome` = `{code, source, message[, status]}`), with the pages fetched before the stop.
 */
export function researchAbort(
  kind: "refusal" | "failure",
  query: string,
  plan: readonly string[],
  outcome: Record<string, unknown> & { code: string; source: string },
  fetched: readonly FetchedSource[] = [],
): ActivityResult {
  const evidence = fetched.map((f) => observe("page", f.sourceRef, f.data));
  const document = {
    format: kind === "refusal" ? RESEARCH_REFUSAL_FORMAT : RESEARCH_FAILURE_FORMAT,
    query,
    plan: [...plan],
    [kind]: outcome,
    fetched: evidence.map((e) => ({ source_ref: e.observation.ref, page_content_hash: e.observation.content_hash })),
  };
  return buildResult("research", document, evidence, {
    terminalState: kind === "refusal" ? "refused" : "failed",
    reasonCode: kind === "refusal" ? "budget_exhausted" : "fetch_failed",
  });
}

// --------------------------------------------------------------------------
// data, ops
// --------------------------------------------------------------------------

export const DATAOPS_RECEIPT_FORMAT = "bernstein.dataops.receipt/v1";
export const DATAOPS_REFUSAL_FORMAT = "bernstein.dataops.refusal/v1";

interface SignedItem {
  role: "input" | "output";
  index: number;
  ref: string;
  content_hash: string;
  signature: string;
}

/**
 * A data or ops activity with the phase rules of docs/dataops.md: inputs, then exactly one plan,
 * then outputs, then `finish()` (a signed receipt) or `refusedResult(code, message)`. Every input
 * and output is signed with the producer key as it is recorded; a call out of order is refused
 * (EFFECT_BEFORE_PLAN, INPUT_AFTER_PLAN, PLAN_ALREADY_DERIVED, NO_PLAN, ACTIVITY_FINISHED) and
 * signs nothing.
 */
export class DataOpsActivity {
  private readonly inputs: { item: SignedItem; evidence: Evidence }[] = [];
  private readonly outputs: { item: SignedItem; evidence: Evidence }[] = [];
  private steps: string[] | undefined;
  private planHashValue: string | undefined;
  private finished = false;
  private violation: ActivityRejected | undefined;

  constructor(
    readonly runId: string,
    readonly stageId: string,
    readonly signer: Ed25519Signer,
    readonly kind: "data" | "ops" = "data",
  ) {
    requireValidIds(["run_id", runId], ["stage_id", stageId]);
    if (kind !== "data" && kind !== "ops") throw new ActivityRejected(`kind must be data or ops, not ${JSON.stringify(kind)}`, "UNKNOWN_KIND");
  }

  addInput(ref: string, data: Uint8Array): Observation {
    this.open();
    if (this.steps !== undefined) throw this.violated(new ActivityRejected("an input after the plan was derived", "INPUT_AFTER_PLAN"));
    return this.record("input", ref, data, this.inputs, null);
  }

  /** Derive the plan from the inputs and the declared steps; returns the plan hash. */
  plan(steps: readonly string[]): string {
    this.open();
    if (this.steps !== undefined) throw this.violated(new ActivityRejected("the plan was already derived", "PLAN_ALREADY_DERIVED"));
    this.steps = [...steps];
    this.planHashValue = planHash(
      this.inputs.map((i) => i.item.content_hash),
      this.steps,
    );
    return this.planHashValue;
  }

  addOutput(ref: string, data: Uint8Array): Observation {
    this.open();
    if (this.steps === undefined) throw this.violated(new ActivityRejected("an effect before the plan was derived", "EFFECT_BEFORE_PLAN"));
    return this.record("output", ref, data, this.outputs, this.planHashValue ?? null);
  }

  /**
   * The signed receipt as a `completed` result (observations: the inputs, then the outputs).
   * A broken phase rule is sticky: `finish` raises it again, and only `refusedResult` remains.
   */
  finish(): ActivityResult {
    this.open();
    if (this.violation !== undefined) throw this.violation;
    if (this.steps === undefined || this.planHashValue === undefined) throw new ActivityRejected("finish before a plan", "NO_PLAN");
    this.finished = true;
    const inputHashes = [...new Set(this.inputs.map((i) => i.item.content_hash))].sort();
    const receipt: Record<string, unknown> = {
      format: DATAOPS_RECEIPT_FORMAT,
      run_id: this.runId,
      stage_id: this.stageId,
      kind: this.kind,
      plan: { input_hashes: inputHashes, steps: this.steps, plan_hash: this.planHashValue },
      inputs: this.inputs.map((i) => i.item),
      outputs: this.outputs.map((o) => o.item),
      signer_key_id: this.signer.keyId,
    };
    receipt["receipt_signature"] = b64url(this.signer.sign(signingInput(DOMAIN_DATAOPS_RECEIPT, receipt)));
    return buildResult(this.kind, receipt, [...this.inputs, ...this.outputs].map((i) => i.evidence));
  }

  /** A `refused` result with the refusal record (`reason_code` = `code` lower-cased). */
  refusedResult(code: string, message: string): ActivityResult {
    if (!/^[A-Z][A-Z0-9_]*$/.test(code)) throw new ActivityRejected(`refusal code ${JSON.stringify(code)} is not UPPER_SNAKE`, "INVALID_REASON_CODE");
    this.finished = true;
    const document = {
      format: DATAOPS_REFUSAL_FORMAT,
      run_id: this.runId,
      stage_id: this.stageId,
      kind: this.kind,
      code,
      message,
      inputs: this.inputs.map((i) => i.item.content_hash),
      plan_hash: this.planHashValue ?? null,
    };
    return buildResult(this.kind, document, [...this.inputs, ...this.outputs].map((i) => i.evidence), {
      terminalState: "refused",
      reasonCode: code.toLowerCase(),
    });
  }

  private violated(error: ActivityRejected): ActivityRejected {
    this.violation ??= error;
    return error;
  }

  private open(): void {
    if (this.finished) throw new ActivityRejected("the activity is finished", "ACTIVITY_FINISHED");
  }

  private record(
    role: "input" | "output",
    ref: string,
    data: Uint8Array,
    into: { item: SignedItem; evidence: Evidence }[],
    plan: string | null,
  ): Observation {
    const evidence = observe(role, ref, data);
    const index = into.length;
    const signed = {
      run_id: this.runId,
      stage_id: this.stageId,
      kind: this.kind,
      role,
      index,
      ref,
      content_hash: evidence.observation.content_hash,
      plan_hash: plan,
    };
    const signature = b64url(this.signer.sign(signingInput(DOMAIN_DATAOPS_ARTIFACT, signed)));
    into.push({ item: { role, index, ref, content_hash: evidence.observation.content_hash, signature }, evidence });
    return evidence.observation;
  }
}

function b64url(data: Buffer): string {
  return data.toString("base64url");
}
