/**
 * tlog.json: the journal's RFC 6962 / 9162 Merkle trees and C2SP signed checkpoints, checked with
 * this SDK's `tlog` module (Node's crypto only): every leaf hash and root recomputed, every
 * accepted inclusion and consistency proof verified and every refused one refused, every
 * checkpoint body parsed, every note opened with the log's vkey (and the cosigned ones with the
 * witness's too, at the stated cosignature time), every refused note refused for a signature
 * (never as malformed). Ed25519 is deterministic, so each note and cosignature line is also
 * re-signed from the stated seeds and must be the stated one byte for byte. The scheduler's own log
 * (scheduler_checkpoints, activity_proofs) is checked in ./tlog_journal.
 */

import { Codec, defaultCodec } from "../avro";
import { Ed25519Signer } from "../identity";
import { JsonValue } from "../json";
import {
  InvalidNoteSignature,
  NoteVerifier,
  SIG_COSIGNATURE_V1,
  SIG_ED25519,
  UnverifiedNote,
  checkpointBody,
  cosignatureTimestamp,
  cosignatureV1Message,
  leafHash,
  openNote,
  parseCheckpoint,
  parseVerifierKey,
  rootHash,
  signatureLine,
  verifierKey,
  verifyConsistency,
  verifyInclusion,
} from "../tlog";
import { Mismatch, Obj, Tally, eq, num, obj, sections, str } from "./check";
import { activityProofs, schedulerCheckpoints } from "./tlog_journal";

function list(value: JsonValue | undefined, where: string): JsonValue[] {
  if (!Array.isArray(value)) throw new Mismatch(`${where} is not an array`);
  return value;
}

function strs(o: Obj, key: string): string[] {
  return list(o[key], key).map((v, i) => {
    if (typeof v !== "string") throw new Mismatch(`${key}[${i}] is not a string`);
    return v;
  });
}

function objs(o: Obj, key: string): Obj[] {
  return list(o[key], key).map((v, i) => obj(v, `${key}[${i}]`));
}

/** Lowercase hex, strictly (Buffer.from(text, "hex") stops quietly at the first bad digit). */
function unhexStrict(text: string, where: string): Buffer {
  if (!/^(?:[0-9a-f]{2})*$/.test(text)) throw new Mismatch(`${where} is not lowercase hex`);
  return Buffer.from(text, "hex");
}

function hex(o: Obj, key: string): Buffer {
  return unhexStrict(str(o, key), key);
}

function proof(o: Obj): Buffer[] {
  return strs(o, "proof_hex").map((h, i) => unhexStrict(h, `proof_hex[${i}]`));
}

interface Key {
  verifier: NoteVerifier;
  signer: Ed25519Signer;
}

/** A vkey, checked against its name and seed (the seed's public key gives that very vkey). */
function loadKey(t: Tally, where: string, k: Obj, type: number): Key | undefined {
  sections(t, k, ["name", "vkey", "ed25519_seed_hex"], where);
  let key: Key | undefined;
  t.check(`${where}.vkey`, () => {
    const verifier = parseVerifierKey(str(k, "vkey"));
    const signer = Ed25519Signer.fromSeed(hex(k, "ed25519_seed_hex"));
    eq(verifier.name, str(k, "name"), "vkey name");
    eq(verifier.type, type, "vkey type");
    eq(verifierKey(str(k, "name"), type, signer.publicKeyRaw), str(k, "vkey"), "vkey from the seed");
    key = { verifier, signer };
  });
  return key;
}

export function tlogFile(t: Tally, doc: Obj, codec: Codec = defaultCodec()): void {
  sections(
    t,
    doc,
    ["description", "log", "witness", "origin", "cosigned_at", "leaves_hex", "leaf_hashes_hex", "roots_hex", "accepted", "refused", "scheduler_checkpoints", "activity_proofs"],
    "tlog",
  );
  t.check("tlog.description", () => {
    if (str(doc, "description") === "") throw new Mismatch("empty");
  });
  const origin = str(doc, "origin");
  const cosignedAt = num(doc, "cosigned_at");
  const log = loadKey(t, "tlog.log", obj(doc["log"], "log"), SIG_ED25519);
  const witness = loadKey(t, "tlog.witness", obj(doc["witness"], "witness"), SIG_COSIGNATURE_V1);

  const leaves = strs(doc, "leaves_hex").map((h, i) => unhexStrict(h, `leaves_hex[${i}]`));
  const leafHashes = strs(doc, "leaf_hashes_hex");
  const roots = strs(doc, "roots_hex");
  t.check("tlog.leaves_hex", () => {
    eq([leafHashes.length, roots.length], [leaves.length, leaves.length + 1], "leaf hashes and roots for the leaves");
  });
  leaves.forEach((leaf, i) => t.check(`tlog.leaf_hashes_hex[${i}]`, () => eq(leafHash(leaf).toString("hex"), leafHashes[i], "leaf hash")));
  const hashes = leafHashes.map((h, i) => unhexStrict(h, `leaf_hashes_hex[${i}]`));
  roots.forEach((root, n) => t.check(`tlog.roots_hex[${n}]`, () => eq(rootHash(hashes.slice(0, n)).toString("hex"), root, "root")));
  const rootOf = (size: number): string => {
    const root = roots[size];
    if (root === undefined) throw new Mismatch(`no stated root for size ${size}`);
    return root;
  };

  const accepted = obj(doc["accepted"], "accepted");
  sections(t, accepted, ["checkpoints", "inclusion", "consistency"], "tlog.accepted");
  objs(accepted, "checkpoints").forEach((c, i) => {
    const where = `tlog.accepted.checkpoints[${i}]`;
    sections(t, c, ["size", "root_hex", "body", "note", "cosigned"], where);
    const body = str(c, "body");
    t.check(`${where}.body`, () => {
      eq(str(c, "root_hex"), rootOf(num(c, "size")), "root_hex (roots_hex[size])");
      const cp = parseCheckpoint(body);
      eq([cp.origin, cp.size, cp.root.toString("hex"), cp.extensions], [origin, BigInt(num(c, "size")), str(c, "root_hex"), []], "checkpoint");
      eq(checkpointBody(cp), body, "the body written back");
    });
    t.check(`${where}.note`, () => {
      if (log === undefined) throw new Mismatch("no log key");
      const opened = openNote(str(c, "note"), [log.verifier]);
      eq([opened.text, opened.verified.length, opened.unknown.length], [body, 1, 0], "text, verified and unknown signatures");
      const line = signatureLine(log.verifier.name, log.verifier.keyId, log.signer.sign(Buffer.from(body)));
      eq(str(c, "note"), `${body}\n${line}`, "the note re-signed from the seed");
    });
    t.check(`${where}.cosigned`, () => {
      if (log === undefined || witness === undefined) throw new Mismatch("no log or witness key");
      const cosigned = str(c, "cosigned");
      const opened = openNote(cosigned, [log.verifier, witness.verifier]);
      eq([opened.text, opened.verified.length, opened.unknown.length], [body, 2, 0], "text, verified and unknown signatures");
      const byWitness = openNote(cosigned, [witness.verifier]);
      eq(cosignatureTimestamp(byWitness.verified[0]!.signature), BigInt(cosignedAt), "cosignature time (cosigned_at)");
      const timestamp = Buffer.alloc(8);
      timestamp.writeBigUInt64BE(BigInt(cosignedAt));
      const signature = Buffer.concat([timestamp, witness.signer.sign(cosignatureV1Message(cosignedAt, body))]);
      eq(cosigned, str(c, "note") + signatureLine(witness.verifier.name, witness.verifier.keyId, signature), "the cosigned note re-signed from the seeds");
    });
  });
  objs(accepted, "inclusion").forEach((c, i) => {
    const where = `tlog.accepted.inclusion[${i}]`;
    sections(t, c, ["index", "size", "leaf_hash_hex", "root_hex", "proof_hex"], where);
    t.check(where, () => {
      eq([str(c, "leaf_hash_hex"), str(c, "root_hex")], [leafHashes[num(c, "index")], rootOf(num(c, "size"))], "leaf hash and root (the stated tree's)");
      if (!verifyInclusion(hex(c, "leaf_hash_hex"), num(c, "index"), num(c, "size"), proof(c), hex(c, "root_hex"))) throw new Mismatch("the proof does not verify");
    });
  });
  objs(accepted, "consistency").forEach((c, i) => {
    const where = `tlog.accepted.consistency[${i}]`;
    sections(t, c, ["size1", "size2", "root1_hex", "root2_hex", "proof_hex"], where);
    t.check(where, () => {
      eq([str(c, "root1_hex"), str(c, "root2_hex")], [rootOf(num(c, "size1")), rootOf(num(c, "size2"))], "roots (the stated tree's)");
      if (!verifyConsistency(num(c, "size1"), num(c, "size2"), proof(c), hex(c, "root1_hex"), hex(c, "root2_hex"))) throw new Mismatch("the proof does not verify");
    });
  });

  const refused = obj(doc["refused"], "refused");
  sections(t, refused, ["notes", "cosigned", "inclusion", "consistency"], "tlog.refused");
  const refuse = (where: string, c: Obj, accepts: () => boolean): void =>
    t.check(where, () => {
      if (str(c, "why") === "") throw new Mismatch("no why");
      if (accepts()) throw new Mismatch(`accepted, but the vector refuses it: ${str(c, "why")}`);
    });
  /** A note refused for a signature: a malformed one is not the refusal the vector states. */
  const noteAccepted = (message: string, verifiers: NoteVerifier[]): boolean => {
    try {
      openNote(message, verifiers);
      return true;
    } catch (exc) {
      if (exc instanceof InvalidNoteSignature || exc instanceof UnverifiedNote) return false;
      throw new Mismatch(`refused as malformed, not for a signature: ${(exc as Error).message}`);
    }
  };
  for (const [name, keys] of [
    ["notes", [log]],
    ["cosigned", [log, witness]],
  ] as const) {
    objs(refused, name).forEach((c, i) => {
      sections(t, c, ["note", "why"], `tlog.refused.${name}[${i}]`);
      refuse(`tlog.refused.${name}[${i}]`, c, () => {
        if (keys.some((k) => k === undefined)) throw new Mismatch("no log or witness key");
        return noteAccepted(str(c, "note"), keys.map((k) => k!.verifier));
      });
    });
  }
  objs(refused, "inclusion").forEach((c, i) => {
    sections(t, c, ["index", "size", "leaf_hash_hex", "root_hex", "proof_hex", "why"], `tlog.refused.inclusion[${i}]`);
    refuse(`tlog.refused.inclusion[${i}]`, c, () => verifyInclusion(hex(c, "leaf_hash_hex"), num(c, "index"), num(c, "size"), proof(c), hex(c, "root_hex")));
  });
  objs(refused, "consistency").forEach((c, i) => {
    sections(t, c, ["size1", "size2", "root1_hex", "root2_hex", "proof_hex", "why"], `tlog.refused.consistency[${i}]`);
    refuse(`tlog.refused.consistency[${i}]`, c, () =>
      verifyConsistency(num(c, "size1"), num(c, "size2"), proof(c), hex(c, "root1_hex"), hex(c, "root2_hex")),
    );
  });

  schedulerCheckpoints(t, obj(doc["scheduler_checkpoints"], "scheduler_checkpoints"), codec);
  activityProofs(t, obj(doc["activity_proofs"], "activity_proofs"), codec);
}
