/**
 * What every vector family of the conformance runner (`../conformance.ts`) checks with: the tally,
 * the `Mismatch` a vector that is not reproduced throws, the typed readers of a vector file's JSON,
 * and the checks several families share (an Avro round trip, an Ed25519 key's public key and id).
 */

import { Codec } from "../avro";
import * as c from "../canonical";
import { Ed25519Signer } from "../identity";
import { JsonFloat, JsonValue } from "../json";

export type Obj = { [key: string]: JsonValue };

export class Mismatch extends Error {}

export class Tally {
  total = 0;
  reproduced = 0;
  readonly failures: string[] = [];
  readonly notes: string[] = [];

  /** One vector: `fn` throws (Mismatch or any error) when it is not reproduced. */
  check(name: string, fn: () => void): void {
    this.total++;
    try {
      fn();
      this.reproduced++;
    } catch (exc) {
      this.failures.push(`${name}: ${(exc as Error).message}`);
    }
  }

  /** A file or section this runner does not know: a failure, never a skip. */
  notCovered(name: string): void {
    this.total++;
    this.failures.push(`${name}: not covered by this runner`);
  }
}

export function eq(actual: unknown, expected: unknown, what = "value"): void {
  const a = stable(actual);
  const e = stable(expected);
  if (a !== e) throw new Mismatch(`${what} differs: got ${clip(a)}, expected ${clip(e)}`);
}

function clip(text: string): string {
  return text.length > 160 ? `${text.slice(0, 160)}...` : text;
}

export function stable(value: unknown): string {
  if (Buffer.isBuffer(value)) return JSON.stringify({ hex: value.toString("hex") });
  if (value instanceof JsonFloat) return value.lexeme;
  if (typeof value === "bigint") return value.toString();
  if (Array.isArray(value)) return "[" + value.map(stable).join(",") + "]";
  if (value !== null && typeof value === "object") {
    const o = value as Record<string, unknown>;
    return "{" + Object.keys(o).sort().map((k) => JSON.stringify(k) + ":" + stable(o[k])).join(",") + "}";
  }
  return JSON.stringify(value) ?? "undefined";
}

export function obj(value: JsonValue | undefined, where: string): Obj {
  if (value === null || value === undefined || typeof value !== "object" || Array.isArray(value) || value instanceof JsonFloat) {
    throw new Mismatch(`${where} is not an object`);
  }
  return value as Obj;
}

export function str(o: Obj, key: string): string {
  const v = o[key];
  if (typeof v !== "string") throw new Mismatch(`${key} is not a string`);
  return v;
}

export function num(o: Obj, key: string): number {
  const v = o[key];
  if (typeof v !== "number") throw new Mismatch(`${key} is not an integer`);
  return v;
}

export function hex(o: Obj, key: string): Buffer {
  return Buffer.from(str(o, key), "hex");
}

/** A record of the vectors (bytes as {"hex": ...}) as the codec takes it (Buffers). */
export function unhex(value: JsonValue | undefined): unknown {
  if (Array.isArray(value)) return value.map(unhex);
  if (value !== null && typeof value === "object" && !(value instanceof JsonFloat)) {
    const o = value as Obj;
    const keys = Object.keys(o);
    if (keys.length === 1 && keys[0] === "hex" && typeof o["hex"] === "string") return Buffer.from(o["hex"], "hex");
    const out: Record<string, unknown> = {};
    for (const k of keys) out[k] = unhex(o[k]);
    return out;
  }
  return value;
}

/** Report every key of `o` outside `known` as not covered (sections the runner would otherwise ignore). */
export function sections(t: Tally, o: Obj, known: readonly string[], where: string): void {
  for (const key of Object.keys(o)) if (!known.includes(key)) t.notCovered(`${where}.${key}`);
}

/** Encode `record` with `schema`, compare with `expected`, decode back to `record`. */
export function roundTrip(codec: Codec, schema: string, record: JsonValue | undefined, expected: Buffer): void {
  const encoded = codec.encode(schema, unhex(record) as Record<string, unknown>);
  eq(encoded.toString("hex"), expected.toString("hex"), `${schema} bytes`);
  const decoded = codec.decode(expected);
  eq(decoded.schema.name, schema, "decoded schema");
  eq(decoded.record, unhex(record), `${schema} decoded record`);
}

export function ed25519Key(t: Tally, where: string, k: Obj): void {
  t.check(`${where}.public_key`, () => {
    const signer = Ed25519Signer.fromSeed(hex(k, "ed25519_seed_hex"));
    eq(signer.publicKeyRaw.toString("hex"), str(k, "public_key_hex"), "public key");
    eq(c.publicKeyId(signer.publicKeyRaw), str(k, "key_id"), "key id");
  });
}
