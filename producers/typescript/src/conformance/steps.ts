/**
 * The conformance family of the scheduler's steps (steps.json): every input and output of every
 * case encodes to its bytes, the stage an SDK publishes is rebuilt from its activity description,
 * and every value the scheduler derives is recomputed from the case's keys and blobs.
 */

import { DataOpsActivity } from "../activity";
import { Codec } from "../avro";
import * as c from "../canonical";
import { parseDescription, stageResult } from "../description";
import { signedSubmissionRecord } from "../emitter";
import { DecodeError } from "../errors";
import { Ed25519Signer } from "../identity";
import { JsonValue, parseJson } from "../json";
import { partitionFor } from "../partitioning";
import { Mismatch, Obj, Tally, ed25519Key, eq, hex, num, obj, roundTrip, sections, stable, str, unhex } from "./check";

export function stepsFile(t: Tally, doc: Obj, codec: Codec): void {
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
          // The activity description an SDK publishes: this SDK's own description parser, builder and
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
