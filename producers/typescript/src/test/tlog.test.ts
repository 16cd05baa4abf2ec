import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { runConformance } from "../conformance";
import { Ed25519Signer } from "../identity";
import {
  EMPTY_ROOT,
  InvalidNoteSignature,
  MalformedCheckpoint,
  MalformedNote,
  MalformedTlogProof,
  SIG_COSIGNATURE_V1,
  SIG_ED25519,
  UnverifiedNote,
  checkpointBody,
  cosignatureTimestamp,
  cosignatureV1Message,
  keyId,
  leafHash,
  nodeHash,
  openNote,
  parseCheckpoint,
  parseNote,
  parseTlogProof,
  parseVerifierKey,
  rootHash,
  signatureLine,
  tlogProofText,
  verifierKey,
  verifyConsistency,
  verifyInclusion,
} from "../tlog";

const VECTORS = join(__dirname, "..", "..", "..", "..", "schemas", "vectors");
const N = 21;
const leaves = Array.from({ length: N }, (_, i) => leafHash(Buffer.from(`leaf ${i}`)));

// RFC 9162 2.1.1, 2.1.3.1 and 2.1.4.1 as written (recursive), to check the iterative code against.
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}
function mth(d: Buffer[]): Buffer {
  if (d.length === 0) return EMPTY_ROOT;
  if (d.length === 1) return d[0]!;
  const k = split(d.length);
  return nodeHash(mth(d.slice(0, k)), mth(d.slice(k)));
}
function path(m: number, d: Buffer[]): Buffer[] {
  if (d.length <= 1) return [];
  const k = split(d.length);
  return m < k ? [...path(m, d.slice(0, k)), mth(d.slice(k))] : [...path(m - k, d.slice(k)), mth(d.slice(0, k))];
}
function subproof(m: number, d: Buffer[], b: boolean): Buffer[] {
  if (m === d.length) return b ? [] : [mth(d)];
  const k = split(d.length);
  return m <= k ? [...subproof(m, d.slice(0, k), b), mth(d.slice(k))] : [...subproof(m - k, d.slice(k), false), mth(d.slice(0, k))];
}
function flip(h: Buffer): Buffer {
  const out = Buffer.from(h);
  out[0] ^= 1;
  return out;
}

test("RFC 6962 hashes: 0x00 leaves, 0x01 nodes, the empty root, and roots equal the recursive definition", () => {
  assert.equal(leafHash(Buffer.alloc(0)).toString("hex"), "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d");
  assert.equal(EMPTY_ROOT.toString("hex"), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const a = leaves[0]!;
  const b = leaves[1]!;
  assert.deepEqual(nodeHash(a, b), createHash("sha256").update(Buffer.concat([Buffer.of(1), a, b])).digest());
  for (let n = 0; n <= N; n++) assert.deepEqual(rootHash(leaves.slice(0, n)), mth(leaves.slice(0, n)), `root of ${n}`);
});

test("inclusion proofs (RFC 9162 2.1.3.2): every leaf of every size verifies; a flipped hash, another index, a short or long path does not", () => {
  for (let n = 1; n <= N; n++) {
    const d = leaves.slice(0, n);
    const root = mth(d);
    for (let m = 0; m < n; m++) {
      const p = path(m, d);
      assert.ok(verifyInclusion(d[m]!, m, n, p, root), `${m} of ${n}`);
      assert.ok(verifyInclusion(d[m]!, BigInt(m), BigInt(n), p, root), `${m} of ${n} (bigint)`);
      assert.ok(!verifyInclusion(flip(d[m]!), m, n, p, root));
      p.forEach((_, i) => assert.ok(!verifyInclusion(d[m]!, m, n, p.map((h, j) => (i === j ? flip(h) : h)), root)));
      if (n > 1) assert.ok(!verifyInclusion(d[m]!, (m + 1) % n, n, p, root), `${m} of ${n} as ${(m + 1) % n}`);
      assert.ok(!verifyInclusion(d[m]!, m, n, [...p, root], root));
      if (p.length > 0) assert.ok(!verifyInclusion(d[m]!, m, n, p.slice(0, -1), root));
    }
  }
  assert.ok(!verifyInclusion(leaves[0]!, 0, 4, [leaves[1]!], nodeHash(leaves[0]!, leaves[1]!)), "a path that stops at an inner node");
  assert.ok(!verifyInclusion(leaves[0]!, 1, 1, [], leaves[0]!), "index beyond the size");
  assert.ok(!verifyInclusion(leaves[0]!, -1, 1, [], leaves[0]!));
  assert.ok(!verifyInclusion(leaves[0]!, 0, 1, [], leaves[0]!.subarray(1)), "a root that is not 32 bytes");
  // A path does not bind the size beyond its shape: leaf 4's path is the same for every size from
  // 9 to 16, so the proof for 13 "verifies" for 14 against the same root. Only a signed checkpoint
  // (size and root together) pins the size.
  const d13 = leaves.slice(0, 13);
  assert.ok(verifyInclusion(d13[4]!, 4, 14, path(4, d13), mth(d13)));
  assert.ok(!verifyInclusion(d13[4]!, 4, 8, path(4, d13), mth(d13)));
});

test("consistency proofs (RFC 9162 2.1.4.2): every pair of sizes verifies; another root, size or hash does not", () => {
  for (let n = 1; n <= N; n++) {
    const d = leaves.slice(0, n);
    const root2 = mth(d);
    for (let m = 1; m < n; m++) {
      const root1 = mth(d.slice(0, m));
      const p = subproof(m, d, true);
      assert.ok(verifyConsistency(m, n, p, root1, root2), `${m} to ${n}`);
      assert.ok(!verifyConsistency(m, n, p, flip(root1), root2));
      assert.ok(!verifyConsistency(m, n, p, root1, flip(root2)));
      p.forEach((_, i) => assert.ok(!verifyConsistency(m, n, p.map((h, j) => (i === j ? flip(h) : h)), root1, root2), `${m} to ${n}, hash ${i}`));
      assert.ok(!verifyConsistency(m, n, p.slice(1), root1, root2));
      assert.ok(!verifyConsistency(m, n, [...p, root2], root1, root2));
      assert.ok(!verifyConsistency(n, m, p, root2, root1));
    }
    assert.ok(verifyConsistency(n, n, [], root2, root2));
    assert.ok(!verifyConsistency(n, n, [root2], root2, root2));
    assert.ok(verifyConsistency(0, n, [], EMPTY_ROOT, root2));
    assert.ok(!verifyConsistency(0, n, [], root2, root2));
  }
});

const logSigner = Ed25519Signer.fromSeed(Buffer.alloc(32, 1));
const witnessSigner = Ed25519Signer.fromSeed(Buffer.alloc(32, 2));
const LOG = "example.com/log";
const WITNESS = "witness.example";
const logVkey = verifierKey(LOG, SIG_ED25519, logSigner.publicKeyRaw);
const witnessVkey = verifierKey(WITNESS, SIG_COSIGNATURE_V1, witnessSigner.publicKeyRaw);
const body = checkpointBody({ origin: LOG, size: 13n, root: mth(leaves.slice(0, 13)), extensions: [] });
const logLine = signatureLine(LOG, keyId(LOG, SIG_ED25519, logSigner.publicKeyRaw), logSigner.sign(Buffer.from(body)));
function cosignature(at: bigint): string {
  const t = Buffer.alloc(8);
  t.writeBigUInt64BE(at);
  const sig = Buffer.concat([t, witnessSigner.sign(cosignatureV1Message(at, body))]);
  return signatureLine(WITNESS, keyId(WITNESS, SIG_COSIGNATURE_V1, witnessSigner.publicKeyRaw), sig);
}

test("signed notes: vkeys, Ed25519 signatures and cosignature/v1, opened as the signed-note spec says", () => {
  const log = parseVerifierKey(logVkey);
  const witness = parseVerifierKey(witnessVkey);
  assert.deepEqual([log.name, log.type, log.publicKey], [LOG, SIG_ED25519, logSigner.publicKeyRaw]);
  assert.equal(witness.type, SIG_COSIGNATURE_V1);
  const note = `${body}\n${logLine}`;
  const opened = openNote(note, [log, witness]);
  assert.equal(opened.text, body);
  assert.deepEqual(opened.verified.map((s) => s.name), [LOG]);

  const cosigned = note + cosignature(1767225600n);
  assert.deepEqual(openNote(cosigned, [log, witness]).verified.map((s) => s.name), [LOG, WITNESS]);
  const byWitness = openNote(cosigned, [witness]);
  assert.deepEqual(byWitness.unknown.map((s) => s.name), [LOG]);
  assert.equal(cosignatureTimestamp(byWitness.verified[0]!.signature), 1767225600n);
  // the timestamp is signed: another one in the line does not verify
  const moved = cosignature(1767225600n).replace(/ (\S+)\n$/, (_, b64: string) => {
    const payload = Buffer.from(b64, "base64");
    payload[11]! ^= 1;
    return ` ${payload.toString("base64")}\n`;
  });
  assert.throws(() => openNote(note + moved, [log, witness]), InvalidNoteSignature);
  assert.doesNotThrow(() => openNote(note + moved, [log]), "an unknown key's line is not checked");

  assert.throws(() => openNote(note.replace("\n13\n", "\n14\n"), [log]), InvalidNoteSignature);
  assert.throws(() => openNote(note, [witness]), UnverifiedNote);
  const stranger = Ed25519Signer.fromSeed(Buffer.alloc(32, 3));
  const strangerLine = signatureLine(LOG, keyId(LOG, SIG_ED25519, stranger.publicKeyRaw), stranger.sign(Buffer.from(body)));
  assert.throws(() => openNote(`${body}\n${strangerLine}`, [log]), UnverifiedNote);
  assert.equal(openNote(`${body}\n${strangerLine}${logLine}`, [log]).unknown.length, 1);

  for (const bad of [
    body + logLine, // no blank line
    `${body}\n`, // no signature
    `${body}\n${logLine.slice(0, -1)}`, // no final newline
    `${body}\n${logLine.replace("\u2014", "-")}`,
    `${body}\n${logLine.replace("=\n", "\n")}`, // unpadded base64
    `${body}\n\u2014 ${LOG} AAAA\n`, // shorter than a key id and a byte
    `x\ty\n\n${logLine}`, // a control character
    `\ud800\n\n${logLine}`,
  ]) {
    assert.throws(() => openNote(bad, [log]), MalformedNote, JSON.stringify(bad));
  }
  assert.throws(() => parseNote(Buffer.from([0xff, 0x0a, 0x0a])), MalformedNote);
  assert.throws(() => parseVerifierKey(logVkey.replace(/\+[0-9a-f]{8}\+/, "+00000000+")), { code: "E_MALFORMED_VKEY" });
  assert.throws(() => parseVerifierKey(`${LOG}+${logVkey.split("+")[1]}`), { code: "E_MALFORMED_VKEY" });
  assert.throws(() => parseVerifierKey(verifierKey(LOG, 0x02, logSigner.publicKeyRaw)), { code: "E_MALFORMED_VKEY" });
});

test("checkpoint bodies: origin, size, root and extensions; anything else is malformed", () => {
  const cp = parseCheckpoint(body);
  assert.deepEqual([cp.origin, cp.size, cp.root, cp.extensions], [LOG, 13n, mth(leaves.slice(0, 13)), []]);
  assert.equal(checkpointBody(cp), body);
  const extended = `${body}ext one\next two\n`;
  assert.deepEqual(parseCheckpoint(extended).extensions, ["ext one", "ext two"]);
  assert.equal(checkpointBody(parseCheckpoint(extended)), extended);
  assert.equal(parseCheckpoint(`${LOG}\n18446744073709551615\n${EMPTY_ROOT.toString("base64")}\n`).size, 18446744073709551615n);
  assert.equal(parseCheckpoint(`${LOG}\n0\n${EMPTY_ROOT.toString("base64")}\n`).size, 0n);
  for (const bad of [
    body.slice(0, -1),
    body.replace("\n13\n", "\n013\n"),
    body.replace("\n13\n", "\n-1\n"),
    body.replace("\n13\n", "\n18446744073709551616\n"),
    body.replace("\n13\n", "\n0\n"), // size 0 with a non-empty root
    body.replace(LOG, ""),
    `${LOG}\n1\n${Buffer.alloc(31).toString("base64")}\n`,
    `${LOG}\n1\n`,
    `${body}\n`, // an empty extension line
  ]) {
    assert.throws(() => parseCheckpoint(bad), MalformedCheckpoint, JSON.stringify(bad));
  }
});

test("tlog.json's log and witness vkeys are the ones their seeds give", () => {
  const doc = JSON.parse(readFileSync(join(VECTORS, "tlog.json"), "utf8")) as Record<string, { name: string; vkey: string; ed25519_seed_hex: string }>;
  for (const [role, type] of [["log", SIG_ED25519], ["witness", SIG_COSIGNATURE_V1]] as const) {
    const k = doc[role]!;
    const signer = Ed25519Signer.fromSeed(Buffer.from(k.ed25519_seed_hex, "hex"));
    assert.equal(verifierKey(k.name, type, signer.publicKeyRaw), k.vkey);
    assert.equal(parseVerifierKey(k.vkey).type, type);
  }
});

test("the tlog.json runner misses a changed leaf, root, vkey or cosignature, a refused proof that verifies and a refused note that is no note", async () => {
  const doc = JSON.parse(readFileSync(join(VECTORS, "tlog.json"), "utf8"));
  doc.leaves_hex[3] = Buffer.from("leaf 33").toString("hex");
  doc.roots_hex[5] = "00".repeat(32);
  doc.witness.vkey = doc.witness.vkey.replace(/\+[0-9a-f]{8}\+/, "+00000000+");
  doc.accepted.checkpoints[4].cosigned = doc.refused.cosigned[0].note;
  doc.refused.consistency[0].proof_hex = doc.accepted.consistency[9].proof_hex;
  doc.refused.notes[0].note = "not a note\n";
  const dir = mkdtempSync(join(tmpdir(), "ts-tlog-"));
  writeFileSync(join(dir, "tlog.json"), JSON.stringify(doc));
  const failures = (await runConformance(dir)).failures;
  for (const want of [
    /^tlog.leaf_hashes_hex\[3\]: leaf hash differs/,
    /^tlog.roots_hex\[5\]: root differs/,
    /^tlog.accepted.consistency\[8\]: roots \(the stated tree's\) differs/,
    /^tlog.witness.vkey: the vkey of witness.bernstein.example states key id 00000000/,
    /^tlog.accepted.checkpoints\[4\].cosigned: no log or witness key/,
    /^tlog.refused.consistency\[0\]: accepted, but the vector refuses it/,
    /^tlog.refused.notes\[0\]: refused as malformed, not for a signature/,
  ]) {
    assert.ok(failures.some((f) => want.test(f)), `${want} in:\n${failures.join("\n")}`);
  }
  doc.witness.vkey = JSON.parse(readFileSync(join(VECTORS, "tlog.json"), "utf8")).witness.vkey;
  writeFileSync(join(dir, "tlog.json"), JSON.stringify(doc));
  assert.ok((await runConformance(dir)).failures.some((f) => /^tlog.accepted.checkpoints\[4\].cosigned: the signature of known key witness.bernstein.example\+17a9ed04 does not verify/.test(f)));
});

test("tlog-proofs: tlog.json's accepted proofs parse and write back byte for byte; a loose base64, index or layout is malformed", () => {
  const doc = JSON.parse(readFileSync(join(VECTORS, "tlog.json"), "utf8"));
  for (const accepted of doc.activity_proofs.accepted as { proof: string; index: number }[]) {
    const proof = parseTlogProof(accepted.proof);
    assert.equal(proof.index, BigInt(accepted.index));
    assert.equal(tlogProofText(proof), accepted.proof);
  }
  const text: string = doc.activity_proofs.accepted[2].proof;
  const [head, note] = [text.slice(0, text.indexOf("\n\n")), text.slice(text.indexOf("\n\n") + 2)];
  const lines = head.split("\n");
  for (const bad of [
    text.replace("\n\n", "\n"), // no empty line before the note
    ["c2sp.org/tlog-proof@v2", ...lines.slice(1)].join("\n") + "\n\n" + note,
    [lines[0], lines[2], lines[1], ...lines.slice(3)].join("\n") + "\n\n" + note, // extra after index
    [...lines.slice(0, 2), "index 06", ...lines.slice(3)].join("\n") + "\n\n" + note,
    [...lines.slice(0, 2), "index -6", ...lines.slice(3)].join("\n") + "\n\n" + note,
    [...lines.slice(0, 3), lines[3]!.replace(/=$/, ""), ...lines.slice(4)].join("\n") + "\n\n" + note,
    [...lines, Buffer.alloc(31).toString("base64")].join("\n") + "\n\n" + note,
    [...lines.slice(0, 3), ...Array(65).fill(lines[3])].join("\n") + "\n\n" + note,
  ]) {
    assert.throws(() => parseTlogProof(bad), MalformedTlogProof, JSON.stringify(bad.slice(0, 120)));
  }
});

test("the tlog.json runner misses swapped journal records, a refused note as a checkpoint's, a refusal for another reason, a refused proof as an accepted one and other problems stated", async () => {
  const doc = JSON.parse(readFileSync(join(VECTORS, "tlog.json"), "utf8"));
  const log = doc.scheduler_checkpoints;
  const [a, b] = [log.journal[4], log.journal[5]];
  [a.value_hex, b.value_hex, a.schema, b.schema] = [b.value_hex, a.value_hex, b.schema, a.schema];
  log.checkpoints[0].note = log.refused[0].note;
  log.refused[4].refused_for = "signature";
  const proofs = doc.activity_proofs;
  proofs.accepted[1].proof = proofs.refused[0].proof;
  proofs.refused[6].problems = ["PROOF_ENTRY_HASH_MISMATCH"];
  const dir = mkdtempSync(join(tmpdir(), "ts-tlog-log-"));
  writeFileSync(join(dir, "tlog.json"), JSON.stringify(doc));
  const failures = (await runConformance(dir)).failures;
  for (const want of [
    /^tlog.scheduler_checkpoints.journal\[4\]: leaf hash differs/,
    /^tlog.scheduler_checkpoints.journal\[5\]: leaf hash differs/,
    /^tlog.scheduler_checkpoints.checkpoints\[0\].value_hex: fields differs/,
    /^tlog.scheduler_checkpoints.checkpoints\[0\].note: the signature of known key .* does not verify/,
    /^tlog.scheduler_checkpoints.checkpoints\[1\].note: the note signs root/,
    /^tlog.scheduler_checkpoints.checkpoints\[2\].note: the note signs root/,
    /^tlog.scheduler_checkpoints.refused\[4\]: refused for differs: got "tree", expected "signature"/,
    /^tlog.scheduler_checkpoints.refused\[3\]: refused for differs: got "accepted", expected "tree"/, // the swapped tree is now the journal's
    /^tlog.activity_proofs.accepted\[1\]: problems differs: got \["PROOF_INCLUSION_FAILED"\]/,
    /^tlog.activity_proofs.refused\[6\]: problems differs/,
  ]) {
    assert.ok(failures.some((f) => want.test(f)), `${want} in:\n${failures.join("\n")}`);
  }
  assert.equal(failures.length, 10, failures.join("\n"));
});
