/**
 * The conformance family of audit walks (audit_walks.json): every record the system writes reads
 * back with this SDK's codec, every key id derives from its key, every base's audit MAC recomputes.
 */

import { Codec, Decoded } from "../avro";
import * as c from "../canonical";
import { DecodeError } from "../errors";
import { JsonValue } from "../json";
import { Mismatch, Obj, Tally, eq, hex, num, obj, sections, str } from "./check";

/**
 * audit_walks.json: audit chains, altered the ways an attacker or an insider could, with what the
 * system's judges conclude (the scheduler's rebuild, the verifier, `audit follow`). A producer SDK
 * judges no chain: `expect`, `judgements`, `resume_after` and `tick_late_ms` are the judges' to
 * reproduce (tests/unit/differential/test_audit_walks.py). What it can check is that it reads every record the
 * system writes: every record of every base (journal, refusals, audit, dead letters, checkpoints)
 * decodes with this SDK's codec and re-encodes to the same bytes, an envelope's payload too (an
 * AuditRecord.v2's is an AuditEntry); every record a case puts on the audit stream does the same and is an audit record,
 * except in the cases made of bytes that are no audit record by design ("garbage" in the name),
 * whose records may instead be refused with DecodeError (and one at least is no audit record);
 * every key id is the one its secret or public key derives; and every audit record of a base
 * carries the key id of one of the base's audit keys and its MAC recomputes under that key
 * (AuditRecord.v2: HMAC-SHA256 over PAE(audit-record/v2, PAE(key_id, payload)), `c.auditRecordMac`).
 */
export function auditWalksFile(t: Tally, doc: Obj, codec: Codec): void {
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
