/**
 * Avro single-object encoding for every record on bernstein's topics, as `schemas/codec.py`:
 * `C3 01` + the 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing
 * Canonical Form + the Avro binary body (encoded by avsc). The `.avsc` files shipped in this
 * package (`schemas/`, copies of the repository's `schemas/avro/`) are the contract; the
 * fingerprint is derived from the schema itself, so no registry is needed.
 */

import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";

import * as avro from "avsc";

import { DecodeError, EncodeError, NotSingleObjectEncoded, TruncatedRecord, UnknownFingerprint } from "./errors";

export const MAGIC = Buffer.from([0xc3, 0x01]);
export const HEADER_SIZE = 10;
/** The schemas shipped with this package (`<package>/schemas/*.avsc`). */
export const SCHEMA_DIR = join(__dirname, "..", "schemas");

export const ACTIVITY_SUBMISSION_V3 = "ActivitySubmission.v3";
export const RUN_CLOSE_V2 = "RunClose.v2";

// --------------------------------------------------------------------------
// CRC-64-AVRO and the Parsing Canonical Form
// --------------------------------------------------------------------------

const EMPTY64 = 0xc15d213aa4d7a795n;
const MASK64 = 0xffffffffffffffffn;
const CRC_TABLE: bigint[] = (() => {
  const table: bigint[] = [];
  for (let i = 0; i < 256; i++) {
    let fp = BigInt(i);
    for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY64 & -(fp & 1n) & MASK64);
    table.push(fp);
  }
  return table;
})();

/** The Avro spec's 64-bit Rabin fingerprint (CRC-64-AVRO) of `data`, as 8 little-endian bytes. */
export function crc64Avro(data: Uint8Array): Buffer {
  let fp = EMPTY64;
  for (const byte of data) fp = (fp >> 8n) ^ (CRC_TABLE[Number((fp ^ BigInt(byte)) & 0xffn)] as bigint);
  const out = Buffer.alloc(8);
  out.writeBigUInt64LE(fp);
  return out;
}

const PRIMITIVES = new Set(["null", "boolean", "int", "long", "float", "double", "bytes", "string"]);

/** The Parsing Canonical Form of a schema (Avro specification, "Transforming into Parsing Canonical Form"). */
export function parsingCanonicalForm(schema: unknown): string {
  return pcf(schema, "", new Set());
}

function fullName(name: string, namespace: string): string {
  return name.includes(".") || namespace === "" ? name : `${namespace}.${name}`;
}

function pcf(schema: unknown, namespace: string, defined: Set<string>): string {
  if (typeof schema === "string") {
    if (PRIMITIVES.has(schema)) return JSON.stringify(schema);
    return JSON.stringify(fullName(schema, namespace));
  }
  if (Array.isArray(schema)) return "[" + schema.map((s) => pcf(s, namespace, defined)).join(",") + "]";
  if (schema === null || typeof schema !== "object") throw new EncodeError(`not an Avro schema: ${String(schema)}`);
  const s = schema as Record<string, unknown>;
  const type = s["type"];
  if (typeof type !== "string") return pcf(type, namespace, defined);
  if (PRIMITIVES.has(type)) return JSON.stringify(type);
  if (type === "record" || type === "error" || type === "enum" || type === "fixed") {
    const name = String(s["name"]);
    const ns = name.includes(".")
      ? name.slice(0, name.lastIndexOf("."))
      : typeof s["namespace"] === "string"
        ? (s["namespace"] as string)
        : namespace;
    const full = fullName(name, ns);
    if (defined.has(full)) return JSON.stringify(full);
    defined.add(full);
    const parts = [`"name":${JSON.stringify(full)}`, `"type":${JSON.stringify(type)}`];
    if (type === "enum") parts.push(`"symbols":${JSON.stringify(s["symbols"])}`);
    else if (type === "fixed") parts.push(`"size":${String(s["size"])}`);
    else {
      const fields = (s["fields"] as Record<string, unknown>[]).map(
        (f) => `{"name":${JSON.stringify(f["name"])},"type":${pcf(f["type"], ns, defined)}}`,
      );
      parts.push(`"fields":[${fields.join(",")}]`);
    }
    return "{" + parts.join(",") + "}";
  }
  if (type === "array") return `{"type":"array","items":${pcf(s["items"], namespace, defined)}}`;
  if (type === "map") return `{"type":"map","values":${pcf(s["values"], namespace, defined)}}`;
  return JSON.stringify(fullName(type, namespace));
}

// --------------------------------------------------------------------------
// The codec
// --------------------------------------------------------------------------

export interface Schema {
  /** The file stem, `<Record>.v<N>`. */
  readonly name: string;
  readonly canonicalForm: string;
  /** 8 bytes, little-endian CRC-64-AVRO of the canonical form. */
  readonly fingerprint: Buffer;
  readonly header: Buffer;
  readonly type: avro.Type;
}

export interface Decoded {
  schema: Schema;
  record: Record<string, unknown>;
}

/** Encodes and decodes single-object Avro records for the schemas of one directory. */
export class Codec {
  private readonly byName = new Map<string, Schema>();
  private readonly byFingerprint = new Map<string, Schema>();

  constructor(schemaDir: string = SCHEMA_DIR) {
    const files = readdirSync(schemaDir)
      .filter((f) => f.endsWith(".avsc"))
      .sort();
    if (files.length === 0) throw new EncodeError(`no .avsc schemas in ${schemaDir}`);
    for (const file of files) {
      const raw = JSON.parse(readFileSync(join(schemaDir, file), "utf8")) as avro.Schema;
      const canonicalForm = parsingCanonicalForm(raw);
      const fingerprint = crc64Avro(Buffer.from(canonicalForm, "utf8"));
      // A fresh registry per file: every file defines its nested types inline.
      const type = avro.Type.forSchema(raw, { registry: {}, wrapUnions: "auto" });
      const schema: Schema = {
        name: file.slice(0, -".avsc".length),
        canonicalForm,
        fingerprint,
        header: Buffer.concat([MAGIC, fingerprint]),
        type,
      };
      const other = this.byFingerprint.get(fingerprint.toString("hex"));
      if (other !== undefined) throw new EncodeError(`schemas ${other.name} and ${schema.name} have the same fingerprint`);
      this.byName.set(schema.name, schema);
      this.byFingerprint.set(fingerprint.toString("hex"), schema);
    }
  }

  get schemas(): Schema[] {
    return [...this.byName.keys()].sort().map((n) => this.byName.get(n) as Schema);
  }

  schema(name: string): Schema {
    const schema = this.byName.get(name);
    if (schema === undefined) {
      throw new EncodeError(`no schema named ${JSON.stringify(name)}; known: ${[...this.byName.keys()].sort().join(", ")}`);
    }
    return schema;
  }

  /** Single-object encode `record` with the schema `name` (EncodeError when it does not fit). */
  encode(name: string, record: Record<string, unknown>): Buffer {
    const schema = this.schema(name);
    let body: Buffer;
    try {
      body = schema.type.toBuffer(record);
    } catch (exc) {
      throw new EncodeError(`record does not fit schema ${name}: ${(exc as Error).message}`);
    }
    return Buffer.concat([schema.header, body]);
  }

  /** The schema named by the header of `data` (DecodeError otherwise). */
  schemaOf(data: Uint8Array): Schema {
    if (data.length < HEADER_SIZE || data[0] !== 0xc3 || data[1] !== 0x01) {
      throw new NotSingleObjectEncoded(
        `value is not an Avro single-object record (expected it to start with c301, got '${Buffer.from(data.subarray(0, 12)).toString("hex")}', ${data.length} bytes)`,
      );
    }
    const fp = Buffer.from(data.subarray(2, HEADER_SIZE)).toString("hex");
    const schema = this.byFingerprint.get(fp);
    if (schema === undefined) {
      throw new UnknownFingerprint(
        `value names schema fingerprint ${fp} which is not one of our schemas (a newer producer, or a foreign record on our topic)`,
        fp,
      );
    }
    return schema;
  }

  /** Decode a single-object record (as plain objects; bytes as Buffers), optionally insisting on one of `expect`. */
  decode(data: Uint8Array, expect?: ReadonlySet<string>): Decoded {
    const schema = this.schemaOf(data);
    if (expect !== undefined && !expect.has(schema.name)) {
      throw new UnknownFingerprint(
        `value is a ${schema.name} record, expected one of ${[...expect].sort().join(", ")}`,
        schema.fingerprint.toString("hex"),
      );
    }
    const body = Buffer.from(data.buffer, data.byteOffset + HEADER_SIZE, data.length - HEADER_SIZE);
    let value: unknown;
    try {
      value = schema.type.fromBuffer(body);
    } catch (exc) {
      throw new TruncatedRecord(`${schema.name} body is truncated or malformed: ${(exc as Error).message}`);
    }
    const record = plain(value);
    if (record === null || typeof record !== "object" || Array.isArray(record) || Buffer.isBuffer(record)) {
      throw new DecodeError(`${schema.name} body did not decode to a record`);
    }
    return { schema, record: record as Record<string, unknown> };
  }
}

/** avsc's record instances as plain objects (Buffers kept). */
function plain(value: unknown): unknown {
  if (value === null || typeof value !== "object" || Buffer.isBuffer(value)) return value;
  if (Array.isArray(value)) return value.map(plain);
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value as Record<string, unknown>)) out[key] = plain(item);
  return out;
}

let defaultCodecInstance: Codec | undefined;

/** The codec over the schemas shipped with this package. */
export function defaultCodec(): Codec {
  defaultCodecInstance ??= new Codec();
  return defaultCodecInstance;
}
