/**
 * tlog.json's scheduler log, checked with this SDK's own code: `scheduler_checkpoints` (a run the
 * reference scheduler core journalled: every leaf recomputed from the journal record's bytes with
 * the Avro codec, canonical JSON and PAE; every CheckpointRecord's seal-key signature and chain
 * link; every checkpoint's note opened with the vkey of its origin and the seal key, its size and
 * root those of the recomputed leaves; every refused note refused for the stated reason) and
 * `activity_proofs` (C2SP tlog-proofs of one activity: parsed strictly, the note opened with the
 * pinned seal key under its origin, the extra JournalRecord decoded, its entry hash, leaf and
 * inclusion path recomputed, the producer's signature checked; the problem codes verify_proof gives,
 * none for an accepted proof and exactly the stated ones for a refused one).
 */

import { createPublicKey, verify as edVerify } from "node:crypto";

import { Codec } from "../avro";
import * as c from "../canonical";
import { JsonValue } from "../json";
import {
  Checkpoint,
  InvalidNoteSignature,
  SIG_ED25519,
  UnverifiedNote,
  leafHash,
  openNote,
  parseCheckpoint,
  parseNote,
  parseTlogProof,
  parseVerifierKey,
  rootHash,
  tlogEntryLeaf,
  tlogOrigin,
  tlogSealLeaf,
  verifierKey,
  verifyInclusion,
} from "../tlog";
import { Mismatch, Obj, Tally, eq, hex, num, obj, sections, str } from "./check";

const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

function ed25519Verify(publicKey: Buffer, message: Uint8Array, signature: Uint8Array): boolean {
  try {
    return edVerify(null, message, createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, publicKey]), format: "der", type: "spki" }), signature);
  } catch {
    return false;
  }
}

function objs(o: Obj, key: string): Obj[] {
  const v = o[key];
  if (!Array.isArray(v)) throw new Mismatch(`${key} is not an array`);
  return v.map((item, i) => obj(item, `${key}[${i}]`));
}

function decodeAs(codec: Codec, data: Uint8Array, prefix: string): { name: string; record: Record<string, unknown> } {
  const d = codec.decode(data);
  if (!d.schema.name.startsWith(prefix)) throw new Mismatch(`a ${d.schema.name} record, expected ${prefix}*`);
  return { name: d.schema.name, record: d.record };
}

/** The log leaf of one journal record: an entry (its stored hash the payload's) or a seal (signed by the seal key). */
function journalLeaf(codec: Codec, value: Buffer, sealKey: Buffer): { schema: string; leaf: Buffer } {
  const outer = codec.decode(value);
  const rec = outer.record;
  if (outer.schema.name === "JournalRecord.v1") {
    const payload = rec["payload"] as Buffer;
    const entry = decodeAs(codec, payload, "JournalEntry.").record;
    const entryHash = c.journalEntryHash(payload);
    eq(rec["entry_hash"], entryHash, "stored entry_hash (the payload's)");
    return { schema: outer.schema.name, leaf: tlogEntryLeaf(entry["run_id"] as string, entry["seq"] as number, entryHash) };
  }
  if (outer.schema.name === "SealRecord.v1") {
    const payload = rec["payload"] as Buffer;
    if (!ed25519Verify(sealKey, c.sealSigningInput(payload), rec["signature"] as Buffer)) throw new Mismatch("the seal's signature does not verify");
    const s = decodeAs(codec, payload, "RunSeal.").record;
    const leaf = tlogSealLeaf(
      s["run_id"] as string,
      s["entry_count"] as number,
      s["head_hash"] as string,
      s["last_input_offset"] as number,
      s["final"] as boolean,
      s["audit_head"] as string,
    );
    return { schema: outer.schema.name, leaf };
  }
  throw new Mismatch(`a ${outer.schema.name} record is no journal entry or seal`);
}

/** The signed size and root are those of the journal's first `size` leaves. */
function headMatches(cp: Checkpoint, leaves: (Buffer | undefined)[]): void {
  if (cp.size > BigInt(leaves.length)) throw new Mismatch(`the note signs ${cp.size} leaves, the journal holds ${leaves.length}`);
  const first = leaves.slice(0, Number(cp.size));
  if (first.some((h) => h === undefined)) throw new Mismatch("a leaf before it was not recomputed");
  const root = rootHash(first as Buffer[]);
  if (!root.equals(cp.root)) throw new Mismatch(`the note signs root ${cp.root.toString("hex")}, the journal's leaves give ${root.toString("hex")}`);
}

export function schedulerCheckpoints(t: Tally, s: Obj, codec: Codec): void {
  const where = "tlog.scheduler_checkpoints";
  sections(t, s, ["about", "log_name", "epoch", "input_topic", "partition", "origin", "seal_key", "journal", "checkpoints", "refused"], where);
  t.check(`${where}.about`, () => {
    if (str(s, "about") === "") throw new Mismatch("empty");
  });
  const origin = str(s, "origin");
  const topic = str(s, "input_topic");
  const partition = num(s, "partition");
  t.check(`${where}.origin`, () => eq(tlogOrigin(str(s, "log_name"), topic, partition, num(s, "epoch")), origin, "origin"));
  const k = obj(s["seal_key"], "seal_key");
  sections(t, k, ["public_key_hex", "key_id", "vkey"], `${where}.seal_key`);
  const sealKey = hex(k, "public_key_hex");
  const verifier = parseVerifierKey(verifierKey(origin, SIG_ED25519, sealKey));
  t.check(`${where}.seal_key`, () => {
    eq(c.publicKeyId(sealKey), str(k, "key_id"), "key id");
    eq(verifierKey(origin, SIG_ED25519, sealKey), str(k, "vkey"), "vkey (origin and seal key)");
  });

  const leaves: (Buffer | undefined)[] = objs(s, "journal").map((j, i) => {
    sections(t, j, ["schema", "value_hex", "leaf_hash_hex"], `${where}.journal[${i}]`);
    let hash: Buffer | undefined;
    t.check(`${where}.journal[${i}]`, () => {
      const { schema, leaf } = journalLeaf(codec, hex(j, "value_hex"), sealKey);
      hash = leafHash(leaf); // the tree is of the recomputed leaves, whatever the vector states
      eq(schema, str(j, "schema"), "schema");
      eq(hash.toString("hex"), str(j, "leaf_hash_hex"), "leaf hash");
    });
    return hash;
  });

  let prevHash = c.checkpointGenesis(partition);
  objs(s, "checkpoints").forEach((cp, i) => {
    const at = `${where}.checkpoints[${i}]`;
    sections(t, cp, ["seq", "reason", "tree_size", "tree_root", "note", "value_hex"], at);
    t.check(`${at}.value_hex`, () => {
      const env = codec.decode(hex(cp, "value_hex"));
      eq([env.schema.name, env.record["key_id"]], ["CheckpointRecord.v1", str(k, "key_id")], "record and key id");
      const payload = env.record["payload"] as Buffer;
      if (!ed25519Verify(sealKey, c.checkpointSigningInput(payload), env.record["signature"] as Buffer)) {
        throw new Mismatch("the checkpoint's signature does not verify with the seal key");
      }
      const f = decodeAs(codec, payload, "PartitionCheckpoint.v2").record;
      const expected = [prevHash, num(cp, "seq"), str(cp, "reason"), num(cp, "tree_size"), str(cp, "tree_root"), str(cp, "note"), topic, partition];
      prevHash = c.checkpointHash(payload);
      eq([f["prev_hash"], f["seq"], f["reason"], f["tree_size"], f["tree_root"], f["note"], f["input_topic"], f["partition"]], expected, "fields");
    });
    t.check(`${at}.note`, () => {
      const opened = openNote(str(cp, "note"), [verifier]);
      eq([opened.verified.length, opened.unknown.length], [1, 0], "verified and unknown signatures");
      const head = parseCheckpoint(opened.text);
      eq([head.origin, head.size, `sha256:${head.root.toString("hex")}`, head.extensions], [origin, BigInt(num(cp, "tree_size")), str(cp, "tree_root"), []], "tree head");
      headMatches(head, leaves);
    });
  });

  objs(s, "refused").forEach((r, i) => {
    sections(t, r, ["why", "refused_for", "note"], `${where}.refused[${i}]`);
    t.check(`${where}.refused[${i}]`, () => {
      if (str(r, "why") === "") throw new Mismatch("no why");
      let got = "accepted";
      try {
        const head = parseCheckpoint(openNote(str(r, "note"), [verifier]).text);
        try {
          headMatches(head, leaves);
        } catch {
          got = "tree";
        }
      } catch (exc) {
        if (!(exc instanceof InvalidNoteSignature || exc instanceof UnverifiedNote)) throw exc;
        got = "signature";
      }
      eq(got, str(r, "refused_for"), "refused for");
    });
  });
}

interface Pins {
  seal: Buffer[];
  producers: Map<string, { name: string; key: Buffer }>;
}

interface Facts {
  runId?: string;
  stageId?: string;
  entryHash?: string;
  index?: bigint;
  size?: bigint;
  root?: string;
}

/** A proof checked with the pinned keys alone, as verify_proof does: its facts and sorted problem codes. */
function checkProof(codec: Codec, text: string, pins: Pins): { facts: Facts; problems: string[] } {
  const facts: Facts = {};
  let proof;
  try {
    proof = parseTlogProof(text);
  } catch {
    return { facts, problems: ["PROOF_MALFORMED"] };
  }
  facts.index = proof.index;
  const problems: string[] = [];
  let payload: Buffer | undefined;
  let stored: unknown;
  let entry: Record<string, unknown> | undefined;
  try {
    const rec = codec.decode(proof.record);
    if (rec.schema.name !== "JournalRecord.v1") throw new Mismatch(`a ${rec.schema.name} record`);
    payload = rec.record["payload"] as Buffer;
    stored = rec.record["entry_hash"];
    entry = decodeAs(codec, payload, "JournalEntry.").record;
  } catch {
    problems.push("PROOF_ENTRY_UNDECODABLE");
    entry = undefined;
  }
  let head: Checkpoint | undefined;
  let origin: string | undefined;
  try {
    origin = parseCheckpoint(parseNote(proof.note).text).origin;
  } catch {
    problems.push("PROOF_CHECKPOINT_UNDECODABLE");
  }
  if (origin !== undefined) {
    for (const key of pins.seal) {
      try {
        head = parseCheckpoint(openNote(proof.note, [parseVerifierKey(verifierKey(origin, SIG_ED25519, key))]).text);
        break;
      } catch {
        continue;
      }
    }
    if (head === undefined) problems.push("PROOF_CHECKPOINT_NOT_SIGNED");
  }
  if (entry === undefined || payload === undefined) return { facts, problems: problems.sort() };

  const entryHash = c.journalEntryHash(payload);
  Object.assign(facts, { runId: entry["run_id"], stageId: entry["stage_id"], entryHash });
  if (entryHash !== stored) problems.push("PROOF_ENTRY_HASH_MISMATCH");
  const keyId = entry["producer_key_id"];
  if (typeof keyId === "string" && keyId !== "") {
    const pinned = pins.producers.get(keyId);
    if (pinned === undefined || pinned.name !== entry["producer_id"]) {
      problems.push("PROOF_PRODUCER_KEY_NOT_PINNED");
    } else {
      const statement = c.submissionStatement(entry as unknown as c.StatementSource, keyId);
      if (!ed25519Verify(pinned.key, c.submissionSigningInput(statement), entry["producer_signature"] as Buffer)) {
        problems.push("PROOF_PRODUCER_SIGNATURE_INVALID");
      }
    }
  }
  if (head !== undefined) {
    Object.assign(facts, { size: head.size, root: `sha256:${head.root.toString("hex")}` });
    const input = entry["input"] as { topic: string; partition: number };
    const tail = `/${input.topic}/${input.partition}/e`;
    const at = head.origin.lastIndexOf(tail);
    if (at <= 0 || !/^[0-9]+$/.test(head.origin.slice(at + tail.length))) problems.push("PROOF_ORIGIN_MISMATCH");
    const leaf = leafHash(tlogEntryLeaf(entry["run_id"] as string, entry["seq"] as number, entryHash));
    if (!verifyInclusion(leaf, proof.index, head.size, proof.path, head.root)) problems.push("PROOF_INCLUSION_FAILED");
  }
  return { facts, problems: problems.sort() };
}

export function activityProofs(t: Tally, s: Obj, codec: Codec): void {
  const where = "tlog.activity_proofs";
  sections(t, s, ["about", "pinned", "accepted", "refused"], where);
  t.check(`${where}.about`, () => {
    if (str(s, "about") === "") throw new Mismatch("empty");
  });
  const p = obj(s["pinned"], "pinned");
  sections(t, p, ["seal", "producers"], `${where}.pinned`);
  const pins: Pins = { seal: [], producers: new Map() };
  const pinned = (at: string, k: Obj, known: string[]): Buffer => {
    sections(t, k, known, at);
    const key = hex(k, "public_key_hex");
    t.check(at, () => eq(c.publicKeyId(key), str(k, "key_id"), "key id"));
    return key;
  };
  pins.seal.push(pinned(`${where}.pinned.seal`, obj(p["seal"], "seal"), ["public_key_hex", "key_id"]));
  objs(p, "producers").forEach((k, i) => {
    const key = pinned(`${where}.pinned.producers[${i}]`, k, ["producer", "public_key_hex", "key_id"]);
    pins.producers.set(str(k, "key_id"), { name: str(k, "producer"), key });
  });

  objs(s, "accepted").forEach((a, i) => {
    sections(t, a, ["run_id", "stage_id", "index", "tree_size", "root", "entry_hash", "proof"], `${where}.accepted[${i}]`);
    t.check(`${where}.accepted[${i}]`, () => {
      const { facts, problems } = checkProof(codec, str(a, "proof"), pins);
      eq(problems, [], "problems");
      eq(
        [facts.runId, facts.stageId, facts.index, facts.size, facts.root, facts.entryHash],
        [str(a, "run_id"), str(a, "stage_id"), BigInt(num(a, "index")), BigInt(num(a, "tree_size")), str(a, "root"), str(a, "entry_hash")],
        "run, stage, index, tree size, root and entry hash",
      );
    });
  });
  objs(s, "refused").forEach((r, i) => {
    sections(t, r, ["why", "proof", "problems"], `${where}.refused[${i}]`);
    t.check(`${where}.refused[${i}]`, () => {
      const want = r["problems"] as JsonValue;
      if (str(r, "why") === "" || !Array.isArray(want) || want.length === 0) throw new Mismatch("no why or no problems");
      eq(checkProof(codec, str(r, "proof"), pins).problems, want, "problems");
    });
  });
}
