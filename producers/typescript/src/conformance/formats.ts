/**
 * The conformance families of bytes and hashes: avro.json (single-object bytes and fingerprints),
 * canonical_json.json (and its refusals), digests.json, partitions.json (murmur2, and kafkajs'
 * DefaultPartitioner the emitter uses) and modalities.json (data/ops plan and computer-use hashes).
 */

import { Partitioners } from "kafkajs";

import { Codec } from "../avro";
import * as c from "../canonical";
import { JsonValue, parseJson } from "../json";
import { murmur2, partitionFor } from "../partitioning";
import { Mismatch, Obj, Tally, eq, hex, num, obj, roundTrip, sections, str } from "./check";

export function avroFile(t: Tally, doc: Obj, codec: Codec): void {
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

export function canonicalFile(t: Tally, doc: Obj): void {
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

export function digestsFile(t: Tally, doc: Obj): void {
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

export function partitionsFile(t: Tally, doc: Obj): void {
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

export function modalitiesFile(t: Tally, doc: Obj): void {
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
