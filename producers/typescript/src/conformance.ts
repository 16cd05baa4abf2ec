#!/usr/bin/env node
/**
 * Conformance runner (D5): `node dist/conformance.js [VECTORS_DIR]` reads EVERY `*.json` file of
 * the vectors directory (default: the repository's `schemas/vectors`) and recomputes every
 * stated value from its stated inputs with this SDK's own code: Avro single-object bytes and
 * fingerprints, canonical JSON (and its refusals), digests, PAE, chain hashes, MACs, Ed25519
 * signatures, murmur2 partitions (with kafkajs' DefaultPartitioner, the one the emitter uses) and
 * the scheduler-step inputs and outputs. A file or a section it does not know is a failure ("not
 * covered"), so 100% stays enforced as the vectors grow. The last line is
 * `conformance: N/N vectors reproduced`; the exit status is 1 on any miss.
 */

import { createPublicKey, verify as edVerify } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";

import { Partitioners } from "kafkajs";

import { DataOpsActivity } from "./activity";
import { Codec, Decoded, defaultCodec } from "./avro";
import * as c from "./canonical";
import { parseDescription, stageResult } from "./description";
import { signedSubmissionRecord } from "./emitter";
import { DecodeError } from "./errors";
import { Ed25519Signer } from "./identity";
import { JsonFloat, JsonValue, parseJson } from "./json";
import { murmur2, partitionFor } from "./partitioning";

type Obj = { [key: string]: JsonValue };

class Mismatch extends Error {}

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

function eq(actual: unknown, expected: unknown, what = "value"): void {
  const a = stable(actual);
  const e = stable(expected);
  if (a !== e) throw new Mismatch(`${what} differs: got ${clip(a)}, expected ${clip(e)}`);
}

function clip(text: string): string {
  return text.length > 160 ? `${text.slice(0, 160)}...` : text;
}

function stable(value: unknown): string {
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

function obj(value: JsonValue | undefined, where: string): Obj {
  if (value === null || value === undefined || typeof value !== "object" || Array.isArray(value) || value instanceof JsonFloat) {
    throw new Mismatch(`${where} is not an object`);
  }
  return value as Obj;
}

function str(o: Obj, key: string): string {
  const v = o[key];
  if (typeof v !== "string") throw new Mismatch(`${key} is not a string`);
  return v;
}

function num(o: Obj, key: string): number {
  const v = o[key];
  if (typeof v !== "number") throw new Mismatch(`${key} is not an integer`);
  return v;
}

function hex(o: Obj, key: string): Buffer {
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
function sections(t: Tally, o: Obj, known: readonly string[], where: string): void {
  for (const key of Object.keys(o)) if (!known.includes(key)) t.notCovered(`${where}.${key}`);
}

/** Encode `record` with `schema`, compare with `expected`, decode back to `record`. */
function roundTrip(codec: Codec, schema: string, record: JsonValue | undefined, expected: Buffer): void {
  const encoded = codec.encode(schema, unhex(record) as Record<string, unknown>);
  eq(encoded.toString("hex"), expected.toString("hex"), `${schema} bytes`);
  const decoded = codec.decode(expected);
  eq(decoded.schema.name, schema, "decoded schema");
  eq(decoded.record, unhex(record), `${schema} decoded record`);
}

// ---------------------------------------------------------------------------
// one handler per file
// ---------------------------------------------------------------------------

function avroFile(t: Tally, doc: Obj, codec: Codec): void {
  sections(t, doc, ["encoding", "schemas"], "avro");
  t.check("avro.encoding", () => eq(str(doc, "encoding").startsWith("avro single-object (c3 01 + 8-byte LE CRC-64-AVRO"), true, "encoding"));
  const seen = new Set<string>();
  for (const item of doc["schemas"] as JsonValue[]) {
    const s = obj(item, "avro.schemas[]");
    const name = str(s, "schema");
    seen.add(name);
    for (const key of Object.keys(s)) {
      if (!["schema", "parsing_canonical_form", "fingerprint_crc64_avro_le", "record", "single_object_hex"].includes(key)) {
        t.notCovered(`avro.${name}.${key}`);
      }
    }
    t.check(`avro.${name}.fingerprint`, () => {
      const schema = codec.schema(name);
      eq(schema.canonicalForm, str(s, "parsing_canonical_form"), "parsing canonical form");
      eq(schema.fingerprint.toString("hex"), str(s, "fingerprint_crc64_avro_le"), "fingerprint");
    });
    // Every schema has a sample record and its bytes: a missing one fails ("not stated").
    t.check(`avro.${name}.record`, () => {
      if (!("record" in s) || !("single_object_hex" in s)) throw new Mismatch("no sample record -> single_object_hex stated");
      roundTrip(codec, name, s["record"], hex(s, "single_object_hex"));
    });
  }
  t.check("avro.every_shipped_schema_has_a_vector", () =>
    eq(codec.schemas.map((s) => s.name).filter((n) => !seen.has(n)), [], "schemas without a vector"),
  );
}

function parseRepr(repr: string): unknown {
  const special: Record<string, number> = { nan: NaN, inf: Infinity, "-inf": -Infinity };
  if (repr in special) return special[repr];
  return parseJson(repr);
}

function canonicalFile(t: Tally, doc: Obj): void {
  sections(t, doc, ["rule", "cases", "refused"], "canonical_json");
  t.check("canonical_json.rule", () => eq(str(doc, "rule"), c.CANONICALIZATION, "rule"));
  for (const item of doc["cases"] as JsonValue[]) {
    const k = obj(item, "case");
    t.check(`canonical_json.${str(k, "name")}`, () => {
      const bytes = c.canonicalJson(k["input"]);
      eq(bytes.toString("hex"), str(k, "canonical_hex"), "canonical bytes");
      eq(bytes.toString("utf8"), str(k, "canonical_utf8"), "canonical text");
      eq(c.sha256Digest(bytes), str(k, "sha256"), "sha256");
    });
  }
  for (const item of doc["refused"] as JsonValue[]) {
    const k = obj(item, "refused");
    t.check(`canonical_json.refused.${str(k, "name")}`, () => {
      eq(k["refused"], true, "refused flag");
      const input = parseRepr(str(k, "input_repr"));
      let refused = false;
      try {
        c.canonicalJson(input);
      } catch (exc) {
        refused = (exc as { code?: string }).code === "E_CANONICAL";
      }
      eq(refused, true, `refusal of ${str(k, "input_repr").slice(0, 40)}`);
    });
  }
}

function digestsFile(t: Tally, doc: Obj): void {
  sections(t, doc, ["content_hash", "artifact_hash", "evidence_set_hash", "malformed_digests"], "digests");
  (doc["content_hash"] as JsonValue[]).forEach((item, i) => {
    const k = obj(item, "content_hash");
    t.check(`digests.content_hash[${i}]`, () => eq(c.contentHash(hex(k, "bytes_hex")), str(k, "digest")));
  });
  (doc["artifact_hash"] as JsonValue[]).forEach((item, i) => {
    const k = obj(item, "artifact_hash");
    t.check(`digests.artifact_hash[${i}]`, () => eq(c.artifactHash(hex(k, "artifact_hex")), str(k, "digest")));
  });
  (doc["evidence_set_hash"] as JsonValue[]).forEach((item, i) => {
    const k = obj(item, "evidence_set_hash");
    t.check(`digests.evidence_set_hash[${i}]`, () => eq(c.evidenceSetHash(k["members"] as string[]), str(k, "digest")));
  });
  (doc["malformed_digests"] as JsonValue[]).forEach((item, i) => {
    t.check(`digests.malformed_digests[${i}]`, () => {
      eq(c.isDigest(item), false, "is_digest");
      let refused = false;
      try {
        c.evidenceSetHash([item as string]);
      } catch {
        refused = true;
      }
      eq(refused, true, "evidence_set_hash refuses it");
    });
  });
}

function chainFile(t: Tally, doc: Obj, codec: Codec): void {
  sections(t, doc, ["pae", "journal", "seal", "audit"], "chain");
  (doc["pae"] as JsonValue[]).forEach((item, i) => {
    const k = obj(item, "pae");
    t.check(`chain.pae[${i}]`, () => eq(c.pae(str(k, "type"), hex(k, "body_hex")).toString("hex"), str(k, "pae_hex")));
  });
  const j = obj(doc["journal"], "chain.journal");
  sections(t, j, ["run_id", "genesis", "entry", "entry_schema", "entry_payload_hex", "entry_hash"], "chain.journal");
  t.check("chain.journal.genesis", () => eq(c.journalGenesis(str(j, "run_id")), str(j, "genesis")));
  t.check("chain.journal.entry_prev_hash", () => eq(obj(j["entry"], "entry")["prev_hash"], str(j, "genesis")));
  t.check("chain.journal.entry_payload", () => roundTrip(codec, str(j, "entry_schema"), j["entry"], hex(j, "entry_payload_hex")));
  t.check("chain.journal.entry_hash", () => eq(c.journalEntryHash(hex(j, "entry_payload_hex")), str(j, "entry_hash")));
  const s = obj(doc["seal"], "chain.seal");
  sections(t, s, ["ed25519_seed_hex", "public_key_hex", "key_id", "seal", "seal_schema", "seal_payload_hex", "signing_input_hex", "signature_hex"], "chain.seal");
  ed25519Key(t, "chain.seal", s);
  t.check("chain.seal.payload", () => roundTrip(codec, str(s, "seal_schema"), s["seal"], hex(s, "seal_payload_hex")));
  t.check("chain.seal.signing_input", () => eq(c.sealSigningInput(hex(s, "seal_payload_hex")).toString("hex"), str(s, "signing_input_hex")));
  t.check("chain.seal.signature", () =>
    eq(Ed25519Signer.fromSeed(hex(s, "ed25519_seed_hex")).sign(hex(s, "signing_input_hex")).toString("hex"), str(s, "signature_hex")),
  );
  const a = obj(doc["audit"], "chain.audit");
  sections(t, a, ["hmac_key_hex", "hmac_key_id", "genesis_partition_0", "entry", "entry_schema", "entry_payload_hex", "mac"], "chain.audit");
  t.check("chain.audit.hmac_key_id", () => eq(c.hmacKeyId(hex(a, "hmac_key_hex")), str(a, "hmac_key_id")));
  t.check("chain.audit.genesis_partition_0", () => eq(c.auditGenesis(hex(a, "hmac_key_hex"), 0), str(a, "genesis_partition_0")));
  t.check("chain.audit.entry_payload", () => roundTrip(codec, str(a, "entry_schema"), a["entry"], hex(a, "entry_payload_hex")));
  t.check("chain.audit.mac", () => eq(c.auditMac(hex(a, "hmac_key_hex"), hex(a, "entry_payload_hex")), str(a, "mac")));
}

function ed25519Key(t: Tally, where: string, k: Obj): void {
  t.check(`${where}.public_key`, () => {
    const signer = Ed25519Signer.fromSeed(hex(k, "ed25519_seed_hex"));
    eq(signer.publicKeyRaw.toString("hex"), str(k, "public_key_hex"), "public key");
    eq(c.publicKeyId(signer.publicKeyRaw), str(k, "key_id"), "key id");
  });
}

function checkpointsFile(t: Tally, doc: Obj, codec: Codec): void {
  sections(t, doc, ["audit_record_v2", "checkpoints"], "checkpoints");
  const a = obj(doc["audit_record_v2"], "audit_record_v2");
  sections(
    t,
    a,
    ["hmac_key_hex", "key_id", "entry", "entry_schema", "entry_payload_hex", "mac_input_hex", "mac", "mac_v1_of_same_payload", "record_schema", "record_hex"],
    "checkpoints.audit_record_v2",
  );
  const key = (): Buffer => hex(a, "hmac_key_hex");
  t.check("checkpoints.audit_record_v2.key_id", () => eq(c.hmacKeyId(key()), str(a, "key_id")));
  t.check("checkpoints.audit_record_v2.entry_payload", () => roundTrip(codec, str(a, "entry_schema"), a["entry"], hex(a, "entry_payload_hex")));
  t.check("checkpoints.audit_record_v2.mac_input", () =>
    eq(c.auditRecordMacInput(str(a, "key_id"), hex(a, "entry_payload_hex")).toString("hex"), str(a, "mac_input_hex")),
  );
  t.check("checkpoints.audit_record_v2.mac", () => eq(c.auditRecordMac(key(), str(a, "key_id"), hex(a, "entry_payload_hex")), str(a, "mac")));
  t.check("checkpoints.audit_record_v2.mac_v1_of_same_payload", () =>
    eq(c.auditMac(key(), hex(a, "entry_payload_hex")), str(a, "mac_v1_of_same_payload")),
  );
  t.check("checkpoints.audit_record_v2.record", () =>
    roundTrip(codec, str(a, "record_schema"), { key_id: str(a, "key_id"), payload: { hex: str(a, "entry_payload_hex") }, mac: str(a, "mac") }, hex(a, "record_hex")),
  );
  const k = obj(doc["checkpoints"], "checkpoints.checkpoints");
  sections(t, k, ["ed25519_seed_hex", "public_key_hex", "key_id", "genesis_partition_0", "chain"], "checkpoints.checkpoints");
  ed25519Key(t, "checkpoints.checkpoints", k);
  t.check("checkpoints.checkpoints.genesis_partition_0", () => eq(c.checkpointGenesis(0), str(k, "genesis_partition_0")));
  let prev = str(k, "genesis_partition_0");
  (k["chain"] as JsonValue[]).forEach((item, i) => {
    const p = obj(item, "chain[]");
    const where = `checkpoints.checkpoints.chain[${i}]`;
    sections(t, p, ["checkpoint", "payload_schema", "payload_hex", "signing_input_hex", "signature_hex", "record_schema", "record_hex", "checkpoint_hash"], where);
    const expectedPrev = prev;
    t.check(`${where}.prev_hash`, () => eq(obj(p["checkpoint"], "checkpoint")["prev_hash"], expectedPrev, "prev_hash"));
    t.check(`${where}.payload`, () => roundTrip(codec, str(p, "payload_schema"), p["checkpoint"], hex(p, "payload_hex")));
    t.check(`${where}.signing_input`, () => eq(c.checkpointSigningInput(hex(p, "payload_hex")).toString("hex"), str(p, "signing_input_hex")));
    t.check(`${where}.signature`, () =>
      eq(Ed25519Signer.fromSeed(hex(k, "ed25519_seed_hex")).sign(hex(p, "signing_input_hex")).toString("hex"), str(p, "signature_hex")),
    );
    t.check(`${where}.record`, () =>
      roundTrip(
        codec,
        str(p, "record_schema"),
        { payload: { hex: str(p, "payload_hex") }, key_id: str(k, "key_id"), signature: { hex: str(p, "signature_hex") } },
        hex(p, "record_hex"),
      ),
    );
    t.check(`${where}.checkpoint_hash`, () => eq(c.checkpointHash(hex(p, "payload_hex")), str(p, "checkpoint_hash")));
    prev = typeof p["checkpoint_hash"] === "string" ? p["checkpoint_hash"] : "";
  });
}

function modalitiesFile(t: Tally, doc: Obj): void {
  sections(t, doc, ["dataops_plan", "computer_use"], "modalities");
  const d = obj(doc["dataops_plan"], "dataops_plan");
  sections(t, d, ["input_hashes", "steps", "plan_document_canonical", "plan_hash"], "modalities.dataops_plan");
  t.check("modalities.dataops_plan.plan_document", () =>
    eq(c.canonicalJson(c.planDocument(d["input_hashes"] as string[], d["steps"] as string[])).toString("utf8"), str(d, "plan_document_canonical")),
  );
  t.check("modalities.dataops_plan.plan_hash", () => eq(c.planHash(d["input_hashes"] as string[], d["steps"] as string[]), str(d, "plan_hash")));
  const u = obj(doc["computer_use"], "computer_use");
  sections(
    t,
    u,
    [
      "hmac_key_hex",
      "typed_value",
      "typed_value_digest",
      "session_genesis",
      "session_id",
      "run_id",
      "screenshot_hex",
      "dom_digest",
      "observation_hash",
      "action",
      "action_anchor",
    ],
    "modalities.computer_use",
  );
  t.check("modalities.computer_use.typed_value_digest", () => {
    eq(c.typedValueDigest(hex(u, "hmac_key_hex"), str(u, "typed_value")), str(u, "typed_value_digest"));
    eq(obj(u["action"], "action")["value_digest"], str(u, "typed_value_digest"), "action.value_digest");
  });
  t.check("modalities.computer_use.session_genesis", () =>
    eq(c.computerUseGenesis(str(u, "run_id"), str(u, "session_id")), str(u, "session_genesis"), "genesis of the stated run and session"),
  );
  t.check("modalities.computer_use.observation_hash", () => eq(c.observationHash(hex(u, "screenshot_hex"), str(u, "dom_digest")), str(u, "observation_hash")));
  t.check("modalities.computer_use.action_anchor", () =>
    eq(c.actionAnchor(str(u, "session_genesis"), str(u, "observation_hash"), obj(u["action"], "action")), str(u, "action_anchor")),
  );
}

function signaturesFile(t: Tally, doc: Obj, codec: Codec): void {
  sections(t, doc, ["producer", "activity_submission", "run_close", "lineage", "typed_value"], "signatures");
  const p = obj(doc["producer"], "producer");
  sections(t, p, ["ed25519_seed_hex", "public_key_hex", "key_id", "signing_domain", "rule"], "signatures.producer");
  ed25519Key(t, "signatures.producer", p);
  t.check("signatures.producer.signing_domain", () => {
    eq(str(p, "signing_domain"), c.DOMAIN_SUBMISSION, "signing domain");
    eq(typeof p["rule"], "string", "rule");
  });
  const signer = (): Ed25519Signer => Ed25519Signer.fromSeed(hex(p, "ed25519_seed_hex"));
  for (const name of ["activity_submission", "run_close"]) {
    const k = obj(doc[name], name);
    const where = `signatures.${name}`;
    sections(t, k, ["schema", "record", "statement", "statement_canonical_utf8", "signing_input_hex", "signature_hex"], where);
    const record = obj(k["record"], "record");
    t.check(`${where}.statement`, () => {
      const rec = unhex(record) as Record<string, unknown> & Parameters<typeof c.submissionStatement>[0];
      const statement =
        name === "activity_submission"
          ? c.submissionStatement(rec, str(p, "key_id"))
          : c.runCloseStatement(rec.submission_id, rec.run_id, (rec.producer as { id: string }).id, rec.occurred_at_ms, str(p, "key_id"));
      eq(statement, k["statement"], "statement");
      eq(c.canonicalJson(statement).toString("utf8"), str(k, "statement_canonical_utf8"), "statement canonical JSON");
    });
    t.check(`${where}.signing_input`, () =>
      eq(c.submissionSigningInput(obj(k["statement"], "statement")).toString("hex"), str(k, "signing_input_hex")),
    );
    t.check(`${where}.signature`, () => {
      const signature = signer().sign(hex(k, "signing_input_hex")).toString("hex");
      eq(signature, str(k, "signature_hex"), "signature");
      eq(unhex(record["producer_signature"]), Buffer.from(signature, "hex"), "record's producer_signature");
      eq(record["producer_key_id"], str(p, "key_id"), "record's producer_key_id");
    });
    t.check(`${where}.record`, () => {
      const encoded = codec.encode(str(k, "schema"), unhex(record) as Record<string, unknown>);
      eq(codec.decode(encoded).record, unhex(record), "record round trip");
    });
  }
  const l = obj(doc["lineage"], "lineage");
  sections(t, l, ["lineage_key_hex", "lineage_key_id", "entry_canonical_utf8", "signing_input_hex", "hmac", "signature_hex", "entry_hash"], "signatures.lineage");
  const entry = (): Buffer => Buffer.from(str(l, "entry_canonical_utf8"), "utf8");
  t.check("signatures.lineage.lineage_key_id", () => eq(c.hmacKeyId(hex(l, "lineage_key_hex")), str(l, "lineage_key_id")));
  t.check("signatures.lineage.entry_canonical", () =>
    eq(c.canonicalJson(parseJson(str(l, "entry_canonical_utf8"))).toString("utf8"), str(l, "entry_canonical_utf8"), "entry is canonical"),
  );
  t.check("signatures.lineage.signing_input", () => eq(c.lineageSigningInput(entry()).toString("hex"), str(l, "signing_input_hex")));
  t.check("signatures.lineage.hmac", () => eq(c.lineageHmac(hex(l, "lineage_key_hex"), entry()), str(l, "hmac")));
  t.check("signatures.lineage.signature", () => eq(signer().sign(c.lineageSigningInput(entry())).toString("hex"), str(l, "signature_hex")));
  t.check("signatures.lineage.entry_hash", () => eq(c.sha256Digest(entry()), str(l, "entry_hash")));
  const v = obj(doc["typed_value"], "typed_value");
  sections(t, v, ["redaction_key_hex", "value", "digest"], "signatures.typed_value");
  t.check("signatures.typed_value.digest", () => eq(c.typedValueDigest(hex(v, "redaction_key_hex"), str(v, "value")), str(v, "digest")));
}

function partitionsFile(t: Tally, doc: Obj): void {
  sections(t, doc, ["algorithm", "seed", "cases", "description", "formula"], "partitions");
  t.check("partitions.seed", () => {
    eq(String(doc["seed"]).toLowerCase(), "0x9747b28c", "seed");
    eq(typeof doc["algorithm"], "string", "algorithm");
  });
  const kafkajs = Partitioners.DefaultPartitioner();
  (doc["cases"] as JsonValue[]).forEach((item, i) => {
    const k = obj(item, "case");
    const where = `partitions.cases[${i}](${JSON.stringify(k["key_utf8"] ?? k["key_hex"])})`;
    sections(t, k, ["key_utf8", "key_hex", "murmur2", "partitions"], where);
    const key = hex(k, "key_hex");
    t.check(`${where}.murmur2`, () => {
      if (typeof k["key_utf8"] === "string") eq(Buffer.from(k["key_utf8"], "utf8").toString("hex"), str(k, "key_hex"), "key bytes");
      eq(murmur2(key), num(k, "murmur2"), "murmur2");
    });
    for (const [count, expected] of Object.entries(obj(k["partitions"], "partitions"))) {
      t.check(`${where}.partitions[${count}]`, () => {
        const n = Number(count);
        eq(partitionFor(key, n), expected, "partition_for");
        const partitionMetadata = Array.from({ length: n }, (_, p) => ({ partitionId: p, leader: 0, partitionErrorCode: 0, replicas: [0], isr: [0] }));
        eq(kafkajs({ topic: "t", partitionMetadata, message: { key, value: null } }), expected, "kafkajs DefaultPartitioner");
      });
    }
  });
}

function stepsFile(t: Tally, doc: Obj, codec: Codec): void {
  sections(t, doc, ["description", "keys", "manifest_toml", "submission_partitions", "cases", "blobs", "headers_rule"], "steps");
  const keys = obj(doc["keys"], "steps.keys");
  sections(t, keys, ["seal_ed25519_seed_hex", "seal_key_id", "audit_hmac_key_hex", "audit_key_id", "producers", "receipt_signer"], "steps.keys");
  t.check("steps.keys.seal", () => eq(c.publicKeyId(Ed25519Signer.fromSeed(hex(keys, "seal_ed25519_seed_hex")).publicKeyRaw), str(keys, "seal_key_id")));
  t.check("steps.keys.audit", () => eq(c.hmacKeyId(hex(keys, "audit_hmac_key_hex")), str(keys, "audit_key_id")));
  const producers = obj(keys["producers"], "producers");
  for (const [name, value] of Object.entries(producers)) {
    const p = obj(value, name);
    sections(t, p, ["ed25519_seed_hex", "public_key_hex", "key_id", "registered", "lineage_hmac_key_hex", "lineage_hmac_key_id"], `steps.keys.producers.${name}`);
    ed25519Key(t, `steps.keys.producers.${name}`, p);
    t.check(`steps.keys.producers.${name}.lineage_hmac_key_id`, () => eq(c.hmacKeyId(hex(p, "lineage_hmac_key_hex")), str(p, "lineage_hmac_key_id")));
  }
  const receiptSigner = obj(keys["receipt_signer"], "steps.keys.receipt_signer");
  sections(t, receiptSigner, ["ed25519_seed_hex", "public_key_hex", "key_id"], "steps.keys.receipt_signer");
  ed25519Key(t, "steps.keys.receipt_signer", receiptSigner);
  const blobs = new Map<string, Buffer>();
  for (const [digest, value] of Object.entries(obj(doc["blobs"], "steps.blobs"))) {
    const data = Buffer.from(String(value), "hex");
    blobs.set(digest, data);
    t.check(`steps.blobs.${digest}`, () => eq(c.contentHash(data), digest, "content hash of the stated bytes"));
  }
  const rule = obj(doc["headers_rule"], "steps.headers_rule");
  sections(t, rule, ["rule", "order", "ce_specversion", "ce_id", "ce_id_rule", "ce_source", "ce_type", "ce_type_rule"], "steps.headers_rule");
  t.check("steps.headers_rule", () => {
    eq(rule["order"], ["ce_specversion", "ce_id", "ce_source", "ce_type"], "order");
    eq(str(rule, "ce_id"), "{topic}:{partition}:{offset}:{n}", "ce_id");
    for (const text of ["rule", "ce_id_rule", "ce_type_rule"]) if (str(rule, text) === "") throw new Mismatch(`${text} is empty`);
  });
  t.check("steps.manifest_toml", () => eq(typeof doc["manifest_toml"] === "string" && typeof doc["submission_partitions"] === "number", true));
  for (const item of doc["cases"] as JsonValue[]) {
    const k = obj(item, "case");
    const name = `steps.${str(k, "name")}`;
    sections(t, k, ["name", "expect", "note", "inputs", "outputs", "submission_partitions"], name);
    const partitions = typeof k["submission_partitions"] === "number" ? k["submission_partitions"] : doc["submission_partitions"];
    if (typeof partitions === "number") {
      t.check(`${name}.partition`, () => {
        // Every input sits on partition_for(key, n) (murmur2, as the emitter's partitioner), except
        // the last input of a WRONG_PARTITION case, which the scheduler refuses for sitting elsewhere.
        const inputs = (k["inputs"] as JsonValue[]).map((x) => obj(x, "input"));
        inputs.forEach((input, i) => {
          const right = partitionFor(hex(input, "key_hex"), partitions) === input["partition"];
          const last = i === inputs.length - 1;
          eq(right, !(last && k["expect"] === "WRONG_PARTITION"), `input ${i} on partition_for(key, ${partitions})`);
        });
      });
    }
    (k["inputs"] as JsonValue[]).forEach((inputItem, i) => {
      const input = obj(inputItem, "input");
      const where = `${name}.inputs[${i}]`;
      sections(t, input, ["topic", "partition", "offset", "timestamp_ms", "key_utf8", "key_hex", "value_hex", "schema", "record", "stage"], where);
      t.check(where, () => {
        if (typeof input["key_utf8"] === "string") eq(Buffer.from(input["key_utf8"], "utf8").toString("hex"), str(input, "key_hex"), "key bytes");
        const value = hex(input, "value_hex");
        if (input["schema"] === null) {
          // Raw bytes that are no record: this SDK's codec must refuse them too.
          let refused = false;
          try {
            codec.decode(value);
          } catch (exc) {
            refused = exc instanceof DecodeError;
          }
          eq(refused, true, "decoding refused");
          return;
        }
        roundTrip(codec, str(input, "schema"), input["record"], value);
      });
      if ("stage" in input) {
        t.check(`${where}.stage`, () => {
          // The D3 description an SDK publishes: this SDK's own description parser, builder and
          // signer, with the record's submission_id, occurred_at_ms and sdk, give the same bytes.
          const record = obj(input["record"], "record");
          const producer = obj(record["producer"], "producer");
          const seed = hex(obj(producers[str(producer, "id")], "producer keys"), "ed25519_seed_hex");
          const stage = parseDescription(stableJson(input["stage"]), 1);
          if (stage.type !== "stage") throw new Mismatch("stage is a run close");
          const signed = signedSubmissionRecord({
            runId: stage.runId,
            stageId: stage.stageId,
            role: stage.role,
            result: stageResult(stage),
            submissionId: str(record, "submission_id"),
            occurredAtMs: num(record, "occurred_at_ms"),
            producerId: str(producer, "id"),
            sdk: str(producer, "sdk"),
            signer: Ed25519Signer.fromSeed(seed),
          });
          eq(codec.encode(str(input, "schema"), signed).toString("hex"), str(input, "value_hex"), "published bytes");
        });
      }
    });
    (k["outputs"] as JsonValue[]).forEach((outputItem, i) => {
      const output = obj(outputItem, "output");
      const where = `${name}.outputs[${i}]`;
      sections(
        t,
        output,
        ["stream", "input_index", "partition", "key_hex", "timestamp_ms", "value_hex", "schema", "record", "headers", "payload_schema", "payload_record"],
        where,
      );
      t.check(where, () => {
        const value = hex(output, "value_hex");
        roundTrip(codec, str(output, "schema"), output["record"], value);
        if ("payload_record" in output || "payload_schema" in output) {
          const payload = unhex(obj(output["record"], "record")["payload"]);
          if (!Buffer.isBuffer(payload)) throw new Mismatch("envelope has no payload bytes");
          roundTrip(codec, str(output, "payload_schema"), output["payload_record"], payload);
        }
      });
    });
    t.check(`${name}.derived`, () => derivedValues(k, keys));
    t.check(`${name}.headers`, () => headersByRule(k, rule));
    blobValues(t, name, k, producers, receiptSigner, blobs);
    submissionHashes(t, name, k, producers);
  }
}

/**
 * Every value the scheduler derives in a case's outputs, recomputed from the case's keys and the
 * earlier outputs: journal entry hashes and their chain from the run's genesis, seal and checkpoint
 * signatures (seal key), audit MACs (AuditRecord.v2 over the key id) and their chain from the
 * partition's genesis, checkpoint hashes and their chain, each audit record's record_hash (an
 * entry hash, or the sha256 of an output or input value), and dead letters' digests and sizes.
 */
function derivedValues(k: Obj, keys: Obj): void {
  const sealer = Ed25519Signer.fromSeed(hex(keys, "seal_ed25519_seed_hex"));
  const auditKey = hex(keys, "audit_hmac_key_hex");
  const inputs = (k["inputs"] as JsonValue[]).map((x) => obj(x, "input"));
  const outputs = (k["outputs"] as JsonValue[]).map((x) => obj(x, "output"));
  const heads = new Map<string, string>();
  const macs = new Map<number, string>();
  const checkpoints = new Map<number, string>();
  const hashes = new Set<string>(inputs.map((x) => c.sha256Digest(hex(x, "value_hex"))));
  for (const output of outputs) hashes.add(c.sha256Digest(hex(output, "value_hex")));
  outputs.forEach((output, i) => {
    const at = `outputs[${i}] ${str(output, "schema")}`;
    const record = unhex(output["record"]) as Record<string, unknown>;
    const payload = record["payload"] as Buffer;
    const inner = (unhex(output["payload_record"]) ?? {}) as Record<string, unknown>;
    switch (str(output, "schema")) {
      case "JournalRecord.v1": {
        const entryHash = c.journalEntryHash(payload);
        eq(entryHash, record["entry_hash"], `${at} entry_hash`);
        const run = String(inner["run_id"]);
        eq(heads.get(run) ?? c.journalGenesis(run), inner["prev_hash"], `${at} prev_hash`);
        heads.set(run, entryHash);
        hashes.add(entryHash);
        break;
      }
      case "SealRecord.v1":
        eq(sealer.keyId, record["key_id"], `${at} key_id`);
        eq(sealer.sign(c.sealSigningInput(payload)), record["signature"], `${at} signature`);
        eq(heads.get(String(inner["run_id"])) ?? inner["head_hash"], inner["head_hash"], `${at} head_hash`);
        eq(macs.get(Number(inner["partition"])) ?? c.auditGenesis(auditKey, Number(inner["partition"])), inner["audit_head"], `${at} audit_head`);
        break;
      case "AuditRecord.v2": {
        eq(c.hmacKeyId(auditKey), record["key_id"], `${at} key_id`);
        const mac = c.auditRecordMac(auditKey, String(record["key_id"]), payload);
        eq(mac, record["mac"], `${at} mac`);
        const partition = Number(inner["partition"]);
        eq(macs.get(partition) ?? c.auditGenesis(auditKey, partition), inner["prev_mac"], `${at} prev_mac`);
        macs.set(partition, mac);
        if (!hashes.has(String(inner["record_hash"]))) throw new Mismatch(`${at} record_hash names no entry, output or input of the case`);
        break;
      }
      case "CheckpointRecord.v1": {
        eq(sealer.keyId, record["key_id"], `${at} key_id`);
        eq(sealer.sign(c.checkpointSigningInput(payload)), record["signature"], `${at} signature`);
        const partition = Number(inner["partition"]);
        eq(checkpoints.get(partition) ?? c.checkpointGenesis(partition), inner["prev_hash"], `${at} prev_hash`);
        eq(macs.get(partition), inner["audit_head"], `${at} audit_head`);
        checkpoints.set(partition, c.checkpointHash(payload));
        break;
      }
      case "DeadLetter.v2": {
        const input = inputs[Number(output["input_index"])] as Obj;
        const raw = hex(input, "value_hex");
        const key = hex(input, "key_hex");
        eq(c.sha256Digest(raw), record["raw_sha256"], `${at} raw_sha256`);
        eq(raw.length, record["raw_size"], `${at} raw_size`);
        eq(c.sha256Digest(key), record["key_sha256"], `${at} key_sha256`);
        eq(key.length, record["key_size"], `${at} key_size`);
        break;
      }
      default:
        break;
    }
  });
}

/**
 * Every output's headers recomputed by headers_rule: ce_id from its input's topic, partition and
 * offset and its place n among that input's outputs, ce_type from its stream and payload; an
 * output's timestamp is its input's.
 */
function headersByRule(k: Obj, rule: Obj): void {
  const inputs = (k["inputs"] as JsonValue[]).map((x) => obj(x, "input"));
  const types = obj(rule["ce_type"], "ce_type");
  const seen = new Map<number, number>();
  (k["outputs"] as JsonValue[]).forEach((item, i) => {
    const output = obj(item, "output");
    const index = num(output, "input_index");
    const input = inputs[index];
    if (input === undefined) throw new Mismatch(`outputs[${i}] names no input`);
    const n = seen.get(index) ?? 0;
    seen.set(index, n + 1);
    const stream = str(output, "stream");
    let ceType: JsonValue | undefined;
    if (stream === "journal") ceType = types[`journal ${str(output, "payload_schema").split(".")[0]}`];
    else if (stream === "audit") ceType = String(types["audit"]).replace("{event}", String(obj(output["payload_record"], "payload_record")["event"]));
    else ceType = types[stream];
    if (typeof ceType !== "string") throw new Mismatch(`outputs[${i}]: headers_rule names no ce_type for ${stream}`);
    const values: Record<string, string> = {
      ce_specversion: str(rule, "ce_specversion"),
      ce_id: str(rule, "ce_id")
        .replace("{topic}", str(input, "topic"))
        .replace("{partition}", String(num(input, "partition")))
        .replace("{offset}", String(num(input, "offset")))
        .replace("{n}", String(n)),
      ce_source: str(rule, "ce_source"),
      ce_type: ceType,
    };
    const expected = (rule["order"] as string[]).map((name) => ({ name, value_utf8: values[name] }));
    eq(output["headers"], expected, `outputs[${i}] headers`);
    eq(output["timestamp_ms"], input["timestamp_ms"], `outputs[${i}] timestamp_ms`);
  });
}

/**
 * What an input derives from blob bytes: the content hash and size of every observation of a
 * journalled input (only evidence_cap_exceeded's declared 32 MiB blobs are not stated), a
 * computer-use action's screenshot and DOM hashes, sizes, observation hash and lineage HMAC (the
 * producer's lineage key), and a journalled data/ops receipt rebuilt through DataOpsActivity from
 * the receipt signer's seed and the input/output bytes (a refusal's input hashes from the blobs),
 * and a journalled research document's page hashes and sizes.
 */
function blobValues(t: Tally, name: string, k: Obj, producers: Obj, receiptSigner: Obj, blobs: Map<string, Buffer>): void {
  const inputs = (k["inputs"] as JsonValue[]).map((x) => obj(x, "input"));
  const journalled = new Set((k["outputs"] as JsonValue[]).map((x) => obj(x, "output")).filter((o) => o["stream"] === "journal").map((o) => o["input_index"]));
  const bytesOf = (digest: unknown): Buffer => {
    const data = blobs.get(String(digest));
    if (data === undefined) throw new Mismatch(`not stated: blobs has no bytes for ${String(digest)}`);
    return data;
  };
  inputs.forEach((input, i) => {
    if (input["record"] === null) return;
    const record = unhex(input["record"]) as Record<string, unknown>;
    const where = `${name}.inputs[${i}]`;
    const last = i === inputs.length - 1;
    const schema = String(input["schema"]);
    if (schema.startsWith("ComputerUseAction.")) {
      t.check(`${where}.blobs`, () => {
        const lineage = record["lineage"] as { entry: Buffer; hmac: string };
        const key = hex(obj(producers[String((record["producer"] as { id: string }).id)], "producer"), "lineage_hmac_key_hex");
        const broken = last && (k["expect"] === "LINEAGE_HMAC_INVALID" || k["expect"] === "LINEAGE_MALFORMED");
        eq(c.lineageHmac(key, lineage.entry) === lineage.hmac, !broken, "lineage HMAC recomputed with the producer's lineage key");
        const shot = bytesOf(record["screenshot_hash"]);
        const dom = bytesOf(record["dom_digest"]);
        eq(c.sha256Digest(shot), record["screenshot_hash"], "screenshot_hash");
        eq(c.sha256Digest(dom), record["dom_digest"], "dom_digest");
        eq(c.observationHash(shot, c.sha256Digest(dom)), record["observation_hash"], "observation_hash");
        if ("screenshot_size" in record) eq([record["screenshot_size"], record["dom_size"]], [shot.length, dom.length], "sizes");
      });
      return;
    }
    if (!journalled.has(i) || !Array.isArray(record["observations"])) return;
    t.check(`${where}.blobs`, () => {
      for (const o of record["observations"] as { content_hash: string; size: number }[]) {
        if (k["expect"] === "EVIDENCE_CAP_EXCEEDED" && !blobs.has(o.content_hash)) continue; // declared-only 32 MiB blobs (its note)
        const data = bytesOf(o.content_hash);
        eq(c.contentHash(data), o.content_hash, "content_hash");
        eq(data.length, o.size, `size of ${o.content_hash}`);
      }
      if (record["kind"] === "research") {
        // A research document's pages: each source's hash and size, each fetched page's hash.
        const doc = obj(parseJson((record["artifact"] as Buffer).toString("utf8")), "artifact");
        for (const field of ["sources", "fetched"]) {
          for (const item of (doc[field] ?? []) as JsonValue[]) {
            const page = obj(item, field);
            const data = bytesOf(page["page_content_hash"]);
            eq(c.contentHash(data), page["page_content_hash"], `${field} page_content_hash`);
            if ("size" in page) eq(data.length, page["size"], `${field} size`);
          }
        }
        return;
      }
      if (record["kind"] !== "ops" && record["kind"] !== "data") return;
      const doc = obj(parseJson((record["artifact"] as Buffer).toString("utf8")), "artifact");
      if (doc["format"] === "bernstein.dataops.refusal/v1") {
        for (const digest of doc["inputs"] as JsonValue[]) eq(c.contentHash(bytesOf(digest)), digest, "refusal input hash");
        return;
      }
      const activity = new DataOpsActivity(str(doc, "run_id"), str(doc, "stage_id"), Ed25519Signer.fromSeed(hex(receiptSigner, "ed25519_seed_hex")), str(doc, "kind") as "data" | "ops");
      for (const item of doc["inputs"] as JsonValue[]) activity.addInput(str(obj(item, "input"), "ref"), bytesOf(obj(item, "input")["content_hash"]));
      activity.plan(obj(doc["plan"], "plan")["steps"] as string[]);
      for (const item of doc["outputs"] as JsonValue[]) activity.addOutput(str(obj(item, "output"), "ref"), bytesOf(obj(item, "output")["content_hash"]));
      eq(activity.finish().artifact.toString("utf8"), (record["artifact"] as Buffer).toString("utf8"), "receipt rebuilt from the signer's seed and the blobs");
    });
  });
}

/**
 * Each submission input's artifact_hash and evidence_set_hash recomputed from its artifact and
 * observations, and each signed input's signature recomputed from the producer's seed: a case the
 * scheduler journals has them all right; the ARTIFACT_HASH_MISMATCH, EVIDENCE_SET_HASH_MISMATCH and
 * SUBMISSION_SIGNATURE_INVALID cases have the one they are named for wrong (other refusal cases
 * may carry anything: an earlier check refuses them first).
 */
function submissionHashes(t: Tally, name: string, k: Obj, producers: Obj): void {
  const inputs = (k["inputs"] as JsonValue[]).map((x) => obj(x, "input"));
  const expect = k["expect"];
  const anchors = new Map<string, string>();
  inputs.forEach((input, i) => {
    const schema = input["schema"];
    if (typeof schema === "string" && schema.startsWith("ComputerUseAction.")) {
      computerUseAction(t, `${name}.inputs[${i}]`, unhex(input["record"]) as Record<string, unknown>, i === inputs.length - 1, expect, anchors, producers);
      return;
    }
    if (typeof schema !== "string" || !(schema.startsWith("ActivitySubmission.") || schema.startsWith("RunClose."))) return;
    const record = unhex(input["record"]) as Record<string, unknown> & Parameters<typeof c.submissionStatement>[0];
    const last = i === inputs.length - 1;
    t.check(`${name}.inputs[${i}].hashes_and_signature`, () => {
      const verdicts: Record<string, boolean> = {};
      if (schema.startsWith("ActivitySubmission.")) {
        verdicts["ARTIFACT_HASH_MISMATCH"] = c.artifactHash(record["artifact"] as Buffer) === record.artifact_hash;
        let evidence = false;
        try {
          evidence = c.evidenceSetHash(record.observations.map((o) => o.content_hash)) === record.evidence_set_hash;
        } catch {
          evidence = false;
        }
        verdicts["EVIDENCE_SET_HASH_MISMATCH"] = evidence;
      }
      const keyId = record["producer_key_id"];
      const producer = Object.values(producers).find((p) => obj(p, "producer")["key_id"] === keyId);
      if (typeof keyId === "string" && producer !== undefined) {
        const signer = Ed25519Signer.fromSeed(hex(obj(producer, "producer"), "ed25519_seed_hex"));
        let statement: Record<string, unknown> | undefined;
        try {
          statement = schema.startsWith("RunClose.")
            ? c.runCloseStatement(record.submission_id, record.run_id, (record.producer as { id: string }).id, record.occurred_at_ms, keyId)
            : c.submissionStatement(record, keyId);
          verdicts["SUBMISSION_SIGNATURE_INVALID"] = signer.sign(c.submissionSigningInput(statement)).equals(record["producer_signature"] as Buffer);
        } catch {
          verdicts["SUBMISSION_SIGNATURE_INVALID"] = false;
        }
      }
      for (const [code, right] of Object.entries(verdicts)) {
        if (last && expect === code) eq(right, false, `${code}: the value the case is named for is wrong`);
        else if (expect === "journal" || !last) eq(right, true, `${code} check of an input the scheduler takes`);
      }
    });
  });
}

/**
 * A computer-use action input: its anchor recomputed from prev_anchor, observation_hash and the
 * action; prev_anchor from the session's genesis or the previous action's anchor; the lineage
 * entry's Ed25519 signature from the producer's seed (its HMAC: blobValues).
 */
function computerUseAction(
  t: Tally,
  where: string,
  record: Record<string, unknown>,
  last: boolean,
  expect: JsonValue | undefined,
  anchors: Map<string, string>,
  producers: Obj,
): void {
  t.check(`${where}.anchor_and_lineage`, () => {
    const session = `${String(record["run_id"])}\u0000${String(record["session_id"])}`;
    const prev = anchors.get(session) ?? c.computerUseGenesis(String(record["run_id"]), String(record["session_id"]));
    const verdicts: Record<string, boolean> = {
      ANCHOR_MISMATCH:
        c.actionAnchor(String(record["prev_anchor"]), String(record["observation_hash"]), record["action"] as Record<string, unknown>) === record["anchor"],
      ANCHOR_DOES_NOT_FOLLOW: record["prev_anchor"] === prev,
    };
    const lineage = record["lineage"] as { key_id: string; entry: Buffer; signature: Buffer };
    const producer = Object.values(producers).find((p) => obj(p, "producer")["key_id"] === lineage.key_id);
    if (producer !== undefined) {
      const signer = Ed25519Signer.fromSeed(hex(obj(producer, "producer"), "ed25519_seed_hex"));
      verdicts["LINEAGE_SIGNATURE_INVALID"] = signer.sign(c.lineageSigningInput(lineage.entry)).equals(lineage.signature);
    }
    for (const [code, right] of Object.entries(verdicts)) {
      if (last && expect === code) eq(right, false, `${code}: the value the case is named for is wrong`);
      else if (expect === "journal" || !last) eq(right, true, `${code} check of an action the scheduler takes`);
    }
    if (!last || expect === "journal") anchors.set(session, String(record["anchor"]));
  });
}

function stableJson(value: JsonValue | undefined): string {
  return stable(value);
}

/** The SPKI DER prefix of a raw Ed25519 public key (RFC 8410). */
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/** Node's (OpenSSL's) RFC 8032 verdict; a key it cannot load verifies nothing. */
function rfc8032Accepts(publicKey: Buffer, message: Buffer, signature: Buffer): boolean {
  try {
    const key = createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, publicKey]), format: "der", type: "spki" });
    return edVerify(null, message, key, signature);
  } catch {
    return false;
  }
}

/**
 * ed25519.json: the system verifies under ZIP 215, which accepts every signature an RFC 8032
 * verifier accepts. A producer SDK only signs, so it reproduces that promise: every case Node's
 * verifier accepts is `valid`, and the honest case verifies here. Cases Node refuses (small-order
 * and non-canonical points the cofactored rule accepts) contradict nothing.
 */
function ed25519File(t: Tally, doc: Obj): void {
  sections(t, doc, ["rule", "cases"], "ed25519");
  t.check("ed25519.rule", () => {
    if (!str(doc, "rule").includes("ZIP 215")) throw new Mismatch(`the rule changed: ${str(doc, "rule")}`);
  });
  const cases = doc["cases"];
  if (!Array.isArray(cases)) throw new Mismatch("ed25519.cases is not a list");
  let honest = false;
  for (const item of cases) {
    const k = obj(item, "ed25519 case");
    sections(t, k, ["name", "public_key_hex", "signature_hex", "message_hex", "valid", "why"], `ed25519.${str(k, "name")}`);
    t.check(`ed25519.${str(k, "name")}`, () => {
      if (typeof k["valid"] !== "boolean") throw new Mismatch("valid is not a boolean");
      const accepts = rfc8032Accepts(hex(k, "public_key_hex"), hex(k, "message_hex"), hex(k, "signature_hex"));
      if (accepts && !k["valid"]) throw new Mismatch("Node's Ed25519 accepts a signature the system's rule refuses");
      if (str(k, "name") === "honest") {
        if (!accepts) throw new Mismatch("Node's Ed25519 refuses the honest signature");
        honest = true;
      }
    });
  }
  t.check("ed25519.honest", () => {
    if (!honest) throw new Mismatch("no honest case verified");
  });
}

/**
 * audit_walks.json: audit chains, altered the ways an attacker or an insider could, with what the
 * system's judges conclude (the scheduler's rebuild, the verifier, `audit follow`). A producer SDK
 * judges no chain: `expect`, `judgements`, `resume_after` and `tick_late_ms` are the judges' to
 * reproduce (tests/unit/test_audit_walks.py). What it can check is that it reads every record the
 * system writes: every record of every base (journal, refusals, audit, dead letters, checkpoints)
 * decodes with this SDK's codec and re-encodes to the same bytes, an envelope's payload too (an
 * AuditRecord.v2's is an AuditEntry); every record a case puts on the audit stream does the same and is an audit record,
 * except in the cases made of bytes that are no audit record by design ("garbage" in the name),
 * whose records may instead be refused with DecodeError (and one at least is no audit record);
 * every key id is the one its secret or public key derives; and every audit record of a base
 * carries the key id of one of the base's audit keys and its MAC recomputes under that key
 * (AuditRecord.v2: HMAC-SHA256 over PAE(audit-record/v2, PAE(key_id, payload)), `c.auditRecordMac`).
 */
function auditWalksFile(t: Tally, doc: Obj, codec: Codec): void {
  sections(t, doc, ["format", "about", "judgements", "submissions_topic", "tick_late_ms", "bases", "cases"], "audit_walks");
  t.check("audit_walks.format", () => {
    eq(str(doc, "format"), "bernstein.audit-walks/1", "format");
    if (str(doc, "about") === "" || str(doc, "submissions_topic") === "") throw new Mismatch("about or submissions_topic is empty");
    num(doc, "tick_late_ms");
    for (const [code, judged] of Object.entries(obj(doc["judgements"], "judgements"))) str(obj(judged, `judgements.${code}`), "follow");
  });
  const bases = obj(doc["bases"], "audit_walks.bases");
  for (const [baseName, value] of Object.entries(bases)) {
    const base = obj(value, baseName);
    const where = `audit_walks.bases.${baseName}`;
    sections(t, base, ["partition", "records", "scheduler_audit_keys"], where);
    const secrets = new Map<string, Buffer>();
    (base["scheduler_audit_keys"] as JsonValue[]).forEach((item, i) => {
      const key = obj(item, "scheduler_audit_keys[]");
      sections(t, key, ["key_id", "secret_hex", "valid_from_ms", "valid_until_ms"], `${where}.scheduler_audit_keys[${i}]`);
      t.check(`${where}.scheduler_audit_keys[${i}].key_id`, () => eq(c.hmacKeyId(hex(key, "secret_hex")), str(key, "key_id"), "key id of the secret"));
      secrets.set(str(key, "key_id"), hex(key, "secret_hex"));
    });
    if (baseName === "single") t.check(`${where}.one_audit_key`, () => eq(secrets.size, 1, "audit keys of the single-key base"));
    for (const [stream, records] of Object.entries(obj(base["records"], `${where}.records`))) {
      (records as JsonValue[]).forEach((item, i) => {
        const at = `${where}.${stream}[${i}]`;
        t.check(at, () => {
          const decoded = readsBack(codec, auditWalkRecord(item));
          if (stream === "audit" && decoded.schema.name !== "AuditRecord.v2") throw new Mismatch(`the scheduler's audit record is a ${decoded.schema.name}`);
        });
        if (stream !== "audit") return;
        t.check(`${at}.mac`, () => {
          const record = codec.decode(auditWalkRecord(item)).record;
          const keyId = String(record["key_id"]);
          const secret = secrets.get(keyId);
          if (secret === undefined) throw new Mismatch(`key_id ${keyId} is none of the base's scheduler_audit_keys`);
          eq(c.auditRecordMac(secret, keyId, record["payload"] as Buffer), record["mac"], "mac recomputed with the audit key");
        });
      });
    }
  }
  for (const item of doc["cases"] as JsonValue[]) {
    const k = obj(item, "case");
    const name = `audit_walks.cases.${str(k, "name")}`;
    sections(t, k, ["name", "about", "base", "audit", "expect", "resume_after", "trusted_keys"], name);
    t.check(`${name}.base`, () => {
      if (!(str(k, "base") in bases)) throw new Mismatch(`base ${str(k, "base")} is none of the file's bases`);
    });
    const trusted = obj(k["trusted_keys"], `${name}.trusted_keys`);
    sections(t, trusted, ["format", "keys"], `${name}.trusted_keys`);
    (trusted["keys"] as JsonValue[]).forEach((keyItem, i) => {
      const key = obj(keyItem, "trusted key");
      const at = `${name}.trusted_keys.keys[${i}]`;
      sections(t, key, ["key_id", "purpose", "producer", "public_key", "secret", "valid_from_ms", "valid_until_ms"], at);
      t.check(at, () => {
        // An HMAC secret's id (audit keys), or an Ed25519 public key's (producers, seals).
        const derived = "secret" in key ? c.hmacKeyId(hex(key, "secret")) : c.publicKeyId(hex(key, "public_key"));
        eq(derived, str(key, "key_id"), `${str(key, "purpose")} key id`);
      });
    });
    if (k["audit"] === null) continue; // the base's audit stream, read above
    const garbage = str(k, "name").includes("garbage");
    const schemas: string[] = [];
    (k["audit"] as JsonValue[]).forEach((record, i) => {
      t.check(`${name}.audit[${i}]`, () => {
        const value = auditWalkRecord(record);
        let decoded: Decoded;
        try {
          decoded = readsBack(codec, value);
        } catch (exc) {
          if (garbage && exc instanceof DecodeError) {
            schemas.push("(refused)");
            return;
          }
          throw exc;
        }
        schemas.push(decoded.schema.name);
        if (!garbage && !decoded.schema.name.startsWith("AuditRecord.")) throw new Mismatch(`a ${decoded.schema.name} on the audit stream`);
      });
    });
    if (garbage) {
      t.check(`${name}.no_audit_record`, () => {
        if (schemas.every((s) => s.startsWith("AuditRecord."))) throw new Mismatch("every record of a garbage case is an audit record");
      });
    }
  }
}

/** A record of audit_walks.json, [offset, timestamp_ms, key_hex or null, value_hex]: its value bytes. */
function auditWalkRecord(item: JsonValue | undefined): Buffer {
  if (!Array.isArray(item) || item.length !== 4) throw new Mismatch("a record is not [offset, timestamp_ms, key_hex, value_hex]");
  const [offset, timestamp, key, value] = item;
  if (typeof offset !== "number" || typeof timestamp !== "number") throw new Mismatch("offset or timestamp_ms is not an integer");
  if ((key !== null && typeof key !== "string") || typeof value !== "string") throw new Mismatch("key_hex or value_hex is not a string");
  return Buffer.from(value, "hex");
}

/** The envelopes: records whose `payload` is itself a single-object record. */
const ENVELOPES: readonly string[] = ["AuditRecord.v1", "AuditRecord.v2", "CheckpointRecord.v1", "JournalRecord.v1", "SealRecord.v1"];

/**
 * Decode `value` by its schema fingerprint and re-encode the record: the same bytes, or a Mismatch
 * (DecodeError when the codec refuses it). An envelope's payload likewise (an AuditRecord.v2's is
 * an AuditEntry).
 */
function readsBack(codec: Codec, value: Buffer): Decoded {
  const decoded = codec.decode(value);
  const name = decoded.schema.name;
  eq(codec.encode(name, decoded.record).toString("hex"), value.toString("hex"), `${name} re-encoded bytes`);
  if (ENVELOPES.includes(name)) {
    const payload = decoded.record["payload"];
    if (!Buffer.isBuffer(payload)) throw new Mismatch(`${name} has no payload bytes`);
    const inner = codec.decode(payload);
    if (name.startsWith("AuditRecord.") && !inner.schema.name.startsWith("AuditEntry.")) throw new Mismatch(`${name} payload is a ${inner.schema.name}`);
    eq(codec.encode(inner.schema.name, inner.record).toString("hex"), payload.toString("hex"), `${name} payload (${inner.schema.name}) re-encoded bytes`);
  }
  return decoded;
}

const HANDLERS: Record<string, (t: Tally, doc: Obj, codec: Codec) => void> = {
  "avro.json": avroFile,
  "canonical_json.json": (t, d) => canonicalFile(t, d),
  "chain.json": chainFile,
  "checkpoints.json": checkpointsFile,
  "digests.json": (t, d) => digestsFile(t, d),
  "modalities.json": (t, d) => modalitiesFile(t, d),
  "signatures.json": signaturesFile,
  "partitions.json": (t, d) => partitionsFile(t, d),
  "steps.json": stepsFile,
  "ed25519.json": (t, d) => ed25519File(t, d),
  "audit_walks.json": auditWalksFile,
};

/** Run every vector file of `dir`; the tally. */
export function runConformance(dir: string, codec: Codec = defaultCodec()): Tally {
  const t = new Tally();
  const files = readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort();
  if (files.length === 0) t.notCovered(`${dir}: no *.json vector files`);
  for (const file of files) {
    const handler = HANDLERS[file];
    if (handler === undefined) {
      t.notCovered(file);
      continue;
    }
    let doc: Obj;
    try {
      doc = obj(parseJson(readFileSync(join(dir, file), "utf8")), file);
    } catch (exc) {
      t.total++;
      t.failures.push(`${file}: unreadable: ${(exc as Error).message}`);
      continue;
    }
    try {
      handler(t, doc, codec);
    } catch (exc) {
      t.total++;
      t.failures.push(`${file}: ${(exc as Error).message}`);
    }
  }
  return t;
}

function main(argv: string[]): number {
  const dir = resolve(argv[0] ?? join(__dirname, "..", "..", "..", "schemas", "vectors"));
  let tally: Tally;
  try {
    tally = runConformance(dir);
  } catch (exc) {
    process.stderr.write(`conformance: cannot read ${dir}: ${(exc as Error).message}\n`);
    process.stdout.write("conformance: 0/1 vectors reproduced\n");
    return 1;
  }
  for (const note of tally.notes) process.stdout.write(`note: ${note}\n`);
  for (const failure of tally.failures) process.stdout.write(`FAIL ${failure}\n`);
  process.stdout.write(`conformance: ${tally.reproduced}/${tally.total} vectors reproduced\n`);
  return tally.failures.length === 0 && tally.reproduced === tally.total ? 0 : 1;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));
