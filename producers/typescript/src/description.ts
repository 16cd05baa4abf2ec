/**
 * Activity descriptions (docs/producing.md, "Vectors, SDKs and tools"): one JSON object per line,
 * shared with `bernstein submit` (producers/description.py) and the Go SDK's emit. A stage:
 *
 *     {"run_id", "stage_id", "role", "kind",
 *      "artifact": <any JSON> | "artifact_file": "path" | "artifact_base64": "...",   (exactly one)
 *      "observations": [{"kind", "ref", "file" | "text" | "base64"}],                 (default [])
 *      "terminal_state": "completed", "reason_code": "ok", "submission_id", "occurred_at_ms",
 *      "artifact_hash": "sha256:..."  (TESTING ONLY: published instead of the computed hash)}
 *
 * or a run close `{"close_run": "run-42", "submission_id": "..."}`. Every mistake is a
 * `DescriptionError` naming the line and the field, worded as the Python parser words it.
 */

import { readFileSync, statSync } from "node:fs";
import { isAbsolute, join } from "node:path";

import { ActivityResult, buildResult, observe, requireValidIds } from "./activity";
import { canonicalJson } from "./canonical";
import { ActivityRejected, BernsteinError, CanonicalizationError } from "./errors";
import { DuplicateKey, JsonFloat, JsonSyntaxError, JsonValue, parseJson } from "./json";

export class DescriptionError extends BernsteinError {
  readonly reason: string;

  constructor(
    message: string,
    readonly line: number,
    readonly field = "",
  ) {
    super(`line ${line}${field ? `, field ${field}` : ""}: ${message}`, "E_DESCRIPTION");
    this.reason = message;
  }
}

export interface StageDescription {
  type: "stage";
  line: number;
  runId: string;
  stageId: string;
  role: string;
  kind: string;
  artifact: Buffer;
  observations: { kind: string; ref: string; data: Buffer }[];
  terminalState: string;
  reasonCode: string;
  submissionId: string | undefined;
  occurredAtMs: number | undefined;
  /** TESTING ONLY: published instead of the artifact's computed hash. */
  artifactHash: string | undefined;
}

export interface CloseDescription {
  type: "close";
  line: number;
  runId: string;
  submissionId: string | undefined;
}

export type Description = StageDescription | CloseDescription;

const STAGE_FIELDS = [
  "artifact",
  "artifact_base64",
  "artifact_file",
  "artifact_hash",
  "kind",
  "observations",
  "occurred_at_ms",
  "reason_code",
  "role",
  "run_id",
  "stage_id",
  "submission_id",
  "terminal_state",
];
const CLOSE_FIELDS = ["close_run", "submission_id"];
const OBSERVATION_FIELDS = ["kind", "ref", "file", "text", "base64"];
const ARTIFACT_SOURCES = ["artifact", "artifact_file", "artifact_base64"];
const OBSERVATION_SOURCES = ["file", "text", "base64"];
const MAX_SAFE_INT = Number.MAX_SAFE_INTEGER;

type JsonObject = { [key: string]: JsonValue };

/** One description line (numbered from 1); files are read relative to `cwd`. */
export function parseDescription(text: string, line = 1, cwd: string = process.cwd()): Description {
  let document: JsonValue;
  try {
    document = parseJson(text, { uniqueKeys: true });
  } catch (exc) {
    if (exc instanceof DuplicateKey) throw new DescriptionError("is given twice", line, exc.key);
    if (exc instanceof JsonSyntaxError) throw new DescriptionError(`not JSON: ${exc.message}`, line);
    throw exc;
  }
  if (!isObject(document)) throw new DescriptionError(`a description is a JSON object, not ${jsonType(document)}`, line);
  if (has(document, "close_run")) return close(document, line);
  return stage(document, line, cwd);
}

function close(document: JsonObject, line: number): CloseDescription {
  const unknown = Object.keys(document)
    .filter((k) => !CLOSE_FIELDS.includes(k))
    .sort();
  if (unknown.length > 0) {
    throw new DescriptionError(`a run close takes only close_run and submission_id; unknown: ${unknown.join(", ")}`, line, unknown[0]);
  }
  return { type: "close", line, runId: string(document, "close_run", line), submissionId: optionalString(document, "submission_id", line) };
}

function stage(document: JsonObject, line: number, cwd: string): StageDescription {
  const unknown = Object.keys(document)
    .filter((k) => !STAGE_FIELDS.includes(k))
    .sort();
  if (unknown.length > 0) {
    throw new DescriptionError(
      `unknown field; a stage takes ${STAGE_FIELDS.join(", ")} (a run close: close_run, submission_id)`,
      line,
      unknown[0],
    );
  }
  const runId = string(document, "run_id", line);
  const stageId = string(document, "stage_id", line);
  const role = string(document, "role", line);
  const kind = string(document, "kind", line);
  const given = ARTIFACT_SOURCES.filter((name) => has(document, name));
  if (given.length !== 1) {
    throw new DescriptionError(
      "give exactly one of artifact, artifact_file, artifact_base64" + (given.length > 0 ? ` (got ${given.join(", ")})` : ""),
      line,
      given.length > 1 ? given[1] : "artifact",
    );
  }
  let artifact: Buffer;
  if (given[0] === "artifact") {
    try {
      artifact = canonicalJson(document["artifact"]);
    } catch (exc) {
      if (exc instanceof CanonicalizationError) throw new DescriptionError(`has no RFC 8785 canonical JSON form: ${exc.message}`, line, "artifact");
      throw exc;
    }
  } else if (given[0] === "artifact_file") {
    artifact = readFile(string(document, "artifact_file", line), cwd, line, "artifact_file");
  } else {
    artifact = base64(string(document, "artifact_base64", line), line, "artifact_base64");
  }
  const observations = has(document, "observations") ? document["observations"] : [];
  if (!Array.isArray(observations)) throw new DescriptionError(`must be a list, not ${jsonType(observations)}`, line, "observations");
  const occurred = has(document, "occurred_at_ms") ? document["occurred_at_ms"] : null;
  if (occurred !== null && (typeof occurred !== "number" || !Number.isInteger(occurred) || occurred < 0 || occurred > MAX_SAFE_INT)) {
    throw new DescriptionError(
      `must be an integer of milliseconds since the epoch (0 to ${MAX_SAFE_INT}), not ${occurred instanceof JsonFloat ? occurred.lexeme : typeof occurred === "bigint" ? occurred.toString() : JSON.stringify(occurred)}`,
      line,
      "occurred_at_ms",
    );
  }
  return {
    type: "stage",
    line,
    runId,
    stageId,
    role,
    kind,
    artifact,
    observations: observations.map((item, index) => observation(item, index, line, cwd)),
    terminalState: optionalString(document, "terminal_state", line) || "completed",
    reasonCode: optionalString(document, "reason_code", line) || "ok",
    submissionId: optionalString(document, "submission_id", line),
    occurredAtMs: occurred === null ? undefined : occurred,
    artifactHash: optionalString(document, "artifact_hash", line),
  };
}

function observation(item: JsonValue, index: number, line: number, cwd: string): { kind: string; ref: string; data: Buffer } {
  const where = `observations[${index}]`;
  if (!isObject(item)) throw new DescriptionError(`an observation is a JSON object, not ${jsonType(item)}`, line, where);
  const unknown = Object.keys(item)
    .filter((k) => !OBSERVATION_FIELDS.includes(k))
    .sort();
  if (unknown.length > 0) {
    throw new DescriptionError("unknown field; an observation takes kind, ref and one of file, text, base64", line, `${where}.${unknown[0]}`);
  }
  const given = OBSERVATION_SOURCES.filter((name) => has(item, name));
  if (given.length !== 1) throw new DescriptionError("give exactly one of file, text, base64 (the observed bytes)", line, where);
  const kind = string(item, "kind", line, where);
  const ref = string(item, "ref", line, where);
  const source = given[0] as string;
  const value = string(item, source, line, where);
  let data: Buffer;
  if (source === "file") data = readFile(value, cwd, line, `${where}.file`);
  else if (source === "text") data = Buffer.from(value, "utf8");
  else data = base64(value, line, `${where}.base64`);
  return { kind, ref, data };
}

/** The stage's ActivityResult, checked as the SDK checks one; `artifactHash` replaces the computed hash. */
export function stageResult(stage: StageDescription): ActivityResult {
  try {
    requireValidIds(["run_id", stage.runId], ["stage_id", stage.stageId], ["role", stage.role]);
    const result = buildResult(
      stage.kind,
      stage.artifact,
      stage.observations.map((o) => observe(o.kind, o.ref, o.data)),
      { terminalState: stage.terminalState, reasonCode: stage.reasonCode },
    );
    return stage.artifactHash === undefined ? result : { ...result, artifact_hash: stage.artifactHash };
  } catch (exc) {
    if (exc instanceof ActivityRejected) throw new DescriptionError(`${exc.message} (${exc.code})`, stage.line, FIELD_OF[exc.code] ?? "");
    throw exc;
  }
}

/** A run close's checks (the run id), as the SDK makes them before publishing. */
export function checkClose(close: CloseDescription): CloseDescription {
  try {
    requireValidIds(["run_id", close.runId]);
  } catch (exc) {
    if (exc instanceof ActivityRejected) throw new DescriptionError(`${exc.message} (${exc.code})`, close.line, "close_run");
    throw exc;
  }
  return close;
}

const FIELD_OF: Record<string, string> = {
  INVALID_RUN_ID: "run_id",
  INVALID_STAGE_ID: "stage_id",
  INVALID_ROLE: "role",
  UNKNOWN_KIND: "kind",
  UNKNOWN_TERMINAL_STATE: "terminal_state",
  EMPTY_REASON_CODE: "reason_code",
  INVALID_REASON_CODE: "reason_code",
  ARTIFACT_TOO_LARGE: "artifact",
};

function isObject(value: JsonValue): value is JsonObject {
  return value !== null && typeof value === "object" && !Array.isArray(value) && !(value instanceof JsonFloat);
}

function has(document: JsonObject, name: string): boolean {
  return Object.prototype.hasOwnProperty.call(document, name);
}

function string(document: JsonObject, name: string, line: number, parent = ""): string {
  const field = parent ? `${parent}.${name}` : name;
  if (!has(document, name)) throw new DescriptionError("is required", line, field);
  const value = document[name] as JsonValue;
  if (typeof value !== "string") throw new DescriptionError(`must be a string, not ${jsonType(value)}`, line, field);
  return value;
}

function optionalString(document: JsonObject, name: string, line: number): string | undefined {
  if (!has(document, name) || document[name] === null) return undefined;
  return string(document, name, line);
}

function readFile(pathText: string, cwd: string, line: number, field: string): Buffer {
  const path = isAbsolute(pathText) ? pathText : join(cwd, pathText);
  try {
    if (statSync(path).isDirectory()) throw new DescriptionError(`is a directory, not a file: ${path}`, line, field);
    return readFileSync(path);
  } catch (exc) {
    if (exc instanceof DescriptionError) throw exc;
    const code = (exc as NodeJS.ErrnoException).code;
    if (code === "ENOENT") throw new DescriptionError(`no such file: ${path}`, line, field);
    throw new DescriptionError(`cannot read ${path}: ${code ?? (exc as Error).message}`, line, field);
  }
}

const BASE64_RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function base64(text: string, line: number, field: string): Buffer {
  if (!BASE64_RE.test(text)) throw new DescriptionError("is not standard base64 (RFC 4648, with padding)", line, field);
  return Buffer.from(text, "base64");
}

function jsonType(value: JsonValue): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return "a boolean";
  if (typeof value === "number" || typeof value === "bigint" || value instanceof JsonFloat) return "a number";
  if (typeof value === "string") return "a string";
  if (Array.isArray(value)) return "a list";
  return "an object";
}
