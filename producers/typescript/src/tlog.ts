/**
 * Transparency-log checks an auditor can run with Node's own crypto: RFC 6962 / 9162 Merkle tree
 * hashes and roots, inclusion and consistency proof verification (RFC 9162 2.1.3.2 and 2.1.4.2),
 * C2SP signed notes with Ed25519 keys (https://c2sp.org/signed-note), `tlog-checkpoint` bodies
 * (https://c2sp.org/tlog-checkpoint) and `cosignature/v1` witness cosignatures
 * (https://c2sp.org/tlog-cosignature), as the journal's log writes them (schemas/merkle.py,
 * schemas/notes.py) and as `golang.org/x/mod/sumdb/note` and `github.com/transparency-dev/formats`
 * read them. schemas/vectors/tlog.json pins all of it (the conformance runner checks it here).
 *
 * Tree sizes and indices are `bigint` or safe-integer `number`s (a log may grow past 2**53).
 * Proof verifiers return `false` for anything that does not verify, malformed input included;
 * note and checkpoint parsers throw a typed `TlogError` subclass. The journal's own log adds its
 * leaf encodings and origins (docs/checkpoints.md, "The Merkle log") and the C2SP tlog-proof of
 * one activity that `bernstein activity prove` writes (docs/verifier.md, "A proof of one activity").
 */

import { KeyObject, createHash, createPublicKey, verify as edVerify } from "node:crypto";

import { canonicalJson, pae } from "./canonical";
import { BernsteinError } from "./errors";

/** Bytes of a SHA-256 tree hash. */
export const HASH_SIZE = 32;
/** The largest tree size (and index bound) there is: sizes are unsigned 64-bit. */
export const MAX_TREE_SIZE = (1n << 64n) - 1n;

/** `SHA-256()`: the root of the empty tree (RFC 6962 2.1). */
export const EMPTY_ROOT: Buffer = createHash("sha256").digest();

/** Signature type of a plain Ed25519 note signature (c2sp.org/signed-note). */
export const SIG_ED25519 = 0x01;
/** Signature type of a timestamped Ed25519 checkpoint cosignature (c2sp.org/tlog-cosignature). */
export const SIG_COSIGNATURE_V1 = 0x04;

const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const SIGNATURE_PREFIX = "\u2014 "; // an em dash and a space
const MAX_SIGNATURES = 100; // what golang.org/x/mod/sumdb/note reads; the spec asks for at least 16

// ---------------------------------------------------------------------------
// Merkle trees (RFC 6962 2.1, RFC 9162 2.1.1)
// ---------------------------------------------------------------------------

/** `SHA-256(0x00 || leaf)`: the hash of a leaf's bytes. */
export function leafHash(leaf: Uint8Array): Buffer {
  return createHash("sha256").update(Buffer.of(0)).update(leaf).digest();
}

/** `SHA-256(0x01 || left || right)`: the hash of an inner node. */
export function nodeHash(left: Uint8Array, right: Uint8Array): Buffer {
  return createHash("sha256").update(Buffer.of(1)).update(left).update(right).digest();
}

/**
 * The root (Merkle tree hash) of the tree whose leaf hashes are `leafHashes`, in order:
 * `EMPTY_ROOT` for none; otherwise the left subtree is the largest power of two below the size.
 * Computed as a compact range (one hash per perfect subtree), in one pass.
 */
export function rootHash(leafHashes: readonly Uint8Array[]): Buffer {
  if (leafHashes.length === 0) return EMPTY_ROOT;
  const stack: Buffer[] = []; // roots of perfect subtrees, largest first
  leafHashes.forEach((h, i) => {
    let node: Buffer = Buffer.from(h);
    // leaf i completes one perfect subtree per trailing one bit of i
    for (let n = i; n & 1; n >>= 1) node = nodeHash(stack.pop()!, node);
    stack.push(node);
  });
  let root = stack.pop()!;
  while (stack.length > 0) root = nodeHash(stack.pop()!, root);
  return root;
}

function toSize(value: number | bigint): bigint | undefined {
  if (typeof value === "number" && !Number.isSafeInteger(value)) return undefined;
  const v = BigInt(value);
  return v < 0n || v > MAX_TREE_SIZE ? undefined : v;
}

function isHash(h: unknown): h is Uint8Array {
  return h instanceof Uint8Array && h.length === HASH_SIZE;
}

function sameHash(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b);
}

/**
 * True when `proof` shows the leaf hash `leaf` at `index` in the tree of `size` leaves whose root
 * is `root`: RFC 9162 2.1.3.2 step by step (a path of the wrong length fails in its loop).
 */
export function verifyInclusion(
  leaf: Uint8Array,
  index: number | bigint,
  size: number | bigint,
  proof: readonly Uint8Array[],
  root: Uint8Array,
): boolean {
  const i = toSize(index);
  const n = toSize(size);
  if (i === undefined || n === undefined || !isHash(leaf) || !isHash(root) || !proof.every(isHash)) return false;
  if (i >= n) return false; // step 1
  let fn = i; // step 2
  let sn = n - 1n;
  let r: Buffer = Buffer.from(leaf); // step 3
  for (const p of proof) {
    // step 4
    if (sn === 0n) return false; // 4a
    if ((fn & 1n) === 1n || fn === sn) {
      // 4b
      r = nodeHash(p, r);
      if ((fn & 1n) === 0n) {
        while ((fn & 1n) === 0n && fn !== 0n) {
          fn >>= 1n;
          sn >>= 1n;
        }
      }
    } else {
      r = nodeHash(r, p);
    }
    fn >>= 1n; // 4c
    sn >>= 1n;
  }
  return sn === 0n && sameHash(r, root); // step 5
}

/**
 * True when `proof` shows the tree of `size1` leaves with root `root1` is a prefix of the tree of
 * `size2` leaves with root `root2`: RFC 9162 2.1.4.2 for `0 < size1 < size2`. The RFC defines no
 * proof for the other sizes; as the journal's log and transparency-dev/merkle hold, equal sizes
 * need an empty proof and equal roots, and `size1 == 0` an empty proof and `root1 == EMPTY_ROOT`.
 */
export function verifyConsistency(
  size1: number | bigint,
  size2: number | bigint,
  proof: readonly Uint8Array[],
  root1: Uint8Array,
  root2: Uint8Array,
): boolean {
  const first = toSize(size1);
  const second = toSize(size2);
  if (first === undefined || second === undefined || !isHash(root1) || !isHash(root2) || !proof.every(isHash)) return false;
  if (first > second) return false;
  if (first === second) return proof.length === 0 && sameHash(root1, root2);
  if (first === 0n) return proof.length === 0 && sameHash(root1, EMPTY_ROOT);
  if (proof.length === 0) return false; // step 1
  // step 2: a power-of-two first tree is a node of the second one: its root starts the path
  const path = (first & (first - 1n)) === 0n ? [root1, ...proof] : [...proof];
  let fn = first - 1n; // step 3
  let sn = second - 1n;
  while ((fn & 1n) === 1n) {
    // step 4
    fn >>= 1n;
    sn >>= 1n;
  }
  let fr: Buffer = Buffer.from(path[0]!); // step 5
  let sr: Buffer = Buffer.from(path[0]!);
  for (const c of path.slice(1)) {
    // step 6
    if (sn === 0n) return false; // 6a
    if ((fn & 1n) === 1n || fn === sn) {
      // 6b
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      if ((fn & 1n) === 0n) {
        while ((fn & 1n) === 0n && fn !== 0n) {
          fn >>= 1n;
          sn >>= 1n;
        }
      }
    } else {
      sr = nodeHash(sr, c);
    }
    fn >>= 1n; // 6c
    sn >>= 1n;
  }
  return sameHash(fr, root1) && sameHash(sr, root2) && sn === 0n; // step 7
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/** Any refusal of this module. */
export class TlogError extends BernsteinError {}

/** Bytes that are not a signed note (encoding, layout, a signature line), or a bad vkey. */
export class MalformedNote extends TlogError {
  constructor(message: string, code = "E_MALFORMED_NOTE") {
    super(message, code);
  }
}

/** A note text that is not a `tlog-checkpoint` body. */
export class MalformedCheckpoint extends MalformedNote {
  constructor(message: string) {
    super(message, "E_MALFORMED_CHECKPOINT");
  }
}

/** A signature by a known key (name and key id match) that does not verify: the whole note is refused. */
export class InvalidNoteSignature extends TlogError {
  constructor(
    readonly keyName: string,
    readonly keyId: number,
  ) {
    super(`the signature of known key ${keyName}+${hex8(keyId)} does not verify: the note is refused`, "E_NOTE_BAD_SIGNATURE");
  }
}

/** A well-formed note that no known key signed. */
export class UnverifiedNote extends TlogError {
  constructor(readonly note: Note) {
    super(`no known key signed this note (${note.signatures.length} signatures by unknown keys)`, "E_NOTE_UNVERIFIED");
  }
}

// ---------------------------------------------------------------------------
// Signed notes (c2sp.org/signed-note)
// ---------------------------------------------------------------------------

/** A signature line: the key's name, its key id, and the signature bytes after the key id. */
export interface NoteSignature {
  name: string;
  keyId: number;
  signature: Buffer;
}

/** A parsed, unverified note: its text (ending in a newline) and its signature lines in order. */
export interface Note {
  text: string;
  signatures: NoteSignature[];
}

/** What `openNote` returns: the text, the signatures known keys verified, and those of unknown keys. */
export interface OpenedNote {
  text: string;
  verified: NoteSignature[];
  unknown: NoteSignature[];
}

/** A public key that checks one kind of note signature. */
export interface NoteVerifier {
  readonly name: string;
  readonly keyId: number;
  readonly type: number;
  readonly publicKey: Buffer;
  /** True when `signature` (the line's bytes after the key id) signs `text`. */
  verify(text: Uint8Array, signature: Uint8Array): boolean;
}

function hex8(id: number): string {
  return id.toString(16).padStart(8, "0");
}

/** Non-empty, without Unicode spaces, `+` or control characters. */
export function isValidKeyName(name: string): boolean {
  return name !== "" && !name.includes("+") && !/[\s\u0000-\u001f\u007f]/u.test(name) && wellFormed(name);
}

function wellFormed(text: string): boolean {
  return !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(text);
}

/** Standard base64 with padding, only in its canonical spelling (what Go writes); else undefined. */
function base64Strict(text: string): Buffer | undefined {
  const b = Buffer.from(text, "base64");
  return b.toString("base64") === text ? b : undefined;
}

/** `SHA-256(name || 0x0A || type || publicKey)[:4]` as an unsigned big-endian integer. */
export function keyId(name: string, type: number, publicKey: Uint8Array): number {
  return createHash("sha256").update(name, "utf8").update("\n").update(Buffer.of(type)).update(publicKey).digest().readUInt32BE(0);
}

/** The vkey text `<name>+<8 hex key id>+base64(type || publicKey)`. */
export function verifierKey(name: string, type: number, publicKey: Uint8Array): string {
  return `${name}+${hex8(keyId(name, type, publicKey))}+${Buffer.concat([Buffer.of(type), publicKey]).toString("base64")}`;
}

/** The message a cosignature/v1 signs: `cosignature/v1\ntime <timestamp>\n` and the checkpoint body. */
export function cosignatureV1Message(timestamp: bigint | number, body: Uint8Array | string): Buffer {
  return Buffer.concat([Buffer.from(`cosignature/v1\ntime ${BigInt(timestamp)}\n`), Buffer.from(body)]);
}

/** The timestamp (seconds) of a cosignature/v1 signature (the line's bytes after the key id). */
export function cosignatureTimestamp(signature: Uint8Array): bigint {
  if (signature.length !== 8 + 64) throw new MalformedNote(`a cosignature/v1 has 72 bytes after the key id, got ${signature.length}`);
  return Buffer.from(signature).readBigUInt64BE(0);
}

/** A signature line `— <name> base64(keyId || signature)` with its newline. */
export function signatureLine(name: string, id: number, signature: Uint8Array): string {
  const payload = Buffer.alloc(4);
  payload.writeUInt32BE(id >>> 0);
  return `${SIGNATURE_PREFIX}${name} ${Buffer.concat([payload, signature]).toString("base64")}\n`;
}

function ed25519Key(raw: Buffer): KeyObject {
  return createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: "der", type: "spki" });
}

/**
 * A verifier from a vkey: type 0x01 checks plain Ed25519 note signatures, type 0x04
 * cosignature/v1 ones (`timestamp (u64 big endian) || Ed25519 signature` over
 * `cosignatureV1Message`). The key id must be the one the name, type and key give.
 */
export function parseVerifierKey(vkey: string): NoteVerifier {
  const parts = /^([^+]*)\+([^+]*)\+(.*)$/s.exec(vkey); // base64 may hold a "+" too
  const [, name, idHex, keyB64] = parts ?? [];
  if (parts === null || !isValidKeyName(name!) || !/^[0-9a-f]{8}$/.test(idHex!)) {
    throw new MalformedNote(`not a vkey <name>+<8 hex key id>+<base64 key>: ${JSON.stringify(vkey)}`, "E_MALFORMED_VKEY");
  }
  const material = base64Strict(keyB64!);
  if (material === undefined || material.length !== 33 || (material[0] !== SIG_ED25519 && material[0] !== SIG_COSIGNATURE_V1)) {
    throw new MalformedNote(`the vkey of ${name} is not an Ed25519 key of type 0x01 or 0x04`, "E_MALFORMED_VKEY");
  }
  const type = material[0]!;
  const publicKey = material.subarray(1);
  const id = keyId(name!, type, publicKey);
  if (hex8(id) !== idHex) throw new MalformedNote(`the vkey of ${name} states key id ${idHex}, its key gives ${hex8(id)}`, "E_MALFORMED_VKEY");
  let key: KeyObject;
  try {
    key = ed25519Key(publicKey);
  } catch {
    throw new MalformedNote(`the vkey of ${name} holds no Ed25519 public key`, "E_MALFORMED_VKEY");
  }
  const verify =
    type === SIG_ED25519
      ? (text: Uint8Array, sig: Uint8Array): boolean => sig.length === 64 && edVerify(null, text, key, sig)
      : (text: Uint8Array, sig: Uint8Array): boolean =>
          sig.length === 72 && edVerify(null, cosignatureV1Message(Buffer.from(sig).readBigUInt64BE(0), text), key, sig.subarray(8));
  return { name: name!, keyId: id, type, publicKey, verify };
}

/**
 * Parse a signed note without verifying it: UTF-8 without control characters other than newline,
 * the text (up to and including the newline before the last blank line), then one or more lines
 * `— <name> base64(4-byte key id || signature)`.
 */
export function parseNote(message: Uint8Array | string): Note {
  let msg: string;
  if (typeof message === "string") {
    if (!wellFormed(message)) throw new MalformedNote("the note is not valid UTF-8 (a lone surrogate)");
    msg = message;
  } else {
    try {
      msg = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(message);
    } catch {
      throw new MalformedNote("the note is not valid UTF-8");
    }
  }
  if (/[\u0000-\u0009\u000b-\u001f]/.test(msg)) throw new MalformedNote("the note has a control character other than newline");
  const split = msg.lastIndexOf("\n\n");
  if (split < 0) throw new MalformedNote("the note has no blank line before its signatures");
  const text = msg.slice(0, split + 1);
  const block = msg.slice(split + 2);
  if (block === "" || !block.endsWith("\n")) throw new MalformedNote("the note's signature block is empty or does not end in a newline");
  const lines = block.slice(0, -1).split("\n");
  if (lines.length > MAX_SIGNATURES) throw new MalformedNote(`more than ${MAX_SIGNATURES} signature lines`);
  const signatures = lines.map((line) => {
    if (!line.startsWith(SIGNATURE_PREFIX)) throw new MalformedNote(`a signature line does not begin with an em dash and a space: ${JSON.stringify(line)}`);
    const rest = line.slice(SIGNATURE_PREFIX.length);
    const space = rest.indexOf(" ");
    const name = space < 0 ? rest : rest.slice(0, space);
    const payload = space < 0 ? undefined : base64Strict(rest.slice(space + 1));
    if (!isValidKeyName(name) || payload === undefined || payload.length < 5) {
      throw new MalformedNote(`not a signature line: ${JSON.stringify(line)}`);
    }
    return { name, keyId: payload.readUInt32BE(0), signature: payload.subarray(4) };
  });
  return { text, signatures };
}

/**
 * Open a signed note with the known verifiers, as the signed-note spec (and Go's `note.Open`)
 * does: a line whose name and key id no verifier has is kept in `unknown`; a known key's line that
 * does not verify refuses the whole note (`InvalidNoteSignature`); a note no known key signed is
 * refused (`UnverifiedNote`). A key's repeated lines are checked once.
 */
export function openNote(message: Uint8Array | string, verifiers: readonly NoteVerifier[]): OpenedNote {
  const note = parseNote(message);
  const text = Buffer.from(note.text, "utf8");
  const verified: NoteSignature[] = [];
  const unknown: NoteSignature[] = [];
  const seen = new Set<string>();
  for (const sig of note.signatures) {
    const known = verifiers.filter((v) => v.name === sig.name && v.keyId === sig.keyId);
    const key = `${sig.name}+${hex8(sig.keyId)}`;
    if (known.length === 0) {
      if (!unknown.some((u) => u.name === sig.name && u.keyId === sig.keyId && u.signature.equals(sig.signature))) unknown.push(sig);
      continue;
    }
    if (known.length > 1) throw new TlogError(`two verifiers are ${key}`, "E_NOTE_AMBIGUOUS_VERIFIERS");
    if (seen.has(key)) continue;
    seen.add(key);
    if (!known[0]!.verify(text, sig.signature)) throw new InvalidNoteSignature(sig.name, sig.keyId);
    verified.push(sig);
  }
  if (verified.length === 0) throw new UnverifiedNote(note);
  return { text: note.text, verified, unknown };
}

// ---------------------------------------------------------------------------
// Checkpoints (c2sp.org/tlog-checkpoint)
// ---------------------------------------------------------------------------

/** A checkpoint body: the log's origin, its size, its root, and any extension lines. */
export interface Checkpoint {
  origin: string;
  size: bigint;
  root: Buffer;
  extensions: string[];
}

/**
 * Parse a checkpoint body: the origin line, the size in decimal (no leading zeros, below 2**64),
 * the base64 root (32 bytes), then optional non-empty extension lines, each ending in a newline.
 * A size-0 checkpoint must carry `EMPTY_ROOT`.
 */
export function parseCheckpoint(body: string): Checkpoint {
  if (!body.endsWith("\n")) throw new MalformedCheckpoint("a checkpoint ends in a newline");
  const lines = body.slice(0, -1).split("\n");
  if (lines.length < 3) throw new MalformedCheckpoint("a checkpoint has an origin, a size and a root line");
  const [origin, sizeText, rootText, ...extensions] = lines as [string, string, string, ...string[]];
  if (origin === "") throw new MalformedCheckpoint("the checkpoint's origin is empty");
  if (!/^(0|[1-9][0-9]*)$/.test(sizeText) || BigInt(sizeText) > MAX_TREE_SIZE) {
    throw new MalformedCheckpoint(`the checkpoint's size is not a decimal below 2**64: ${JSON.stringify(sizeText)}`);
  }
  const root = base64Strict(rootText);
  if (root === undefined || root.length !== HASH_SIZE) throw new MalformedCheckpoint(`the checkpoint's root is not base64 of ${HASH_SIZE} bytes`);
  if (extensions.some((line) => line === "")) throw new MalformedCheckpoint("a checkpoint's extension line is empty");
  const size = BigInt(sizeText);
  if (size === 0n && !root.equals(EMPTY_ROOT)) throw new MalformedCheckpoint("a size-0 checkpoint's root is not the empty tree's");
  return { origin, size, root, extensions };
}

/** The body text of a checkpoint (the inverse of `parseCheckpoint`). */
export function checkpointBody(checkpoint: Checkpoint): string {
  return [checkpoint.origin, checkpoint.size.toString(), checkpoint.root.toString("base64"), ...checkpoint.extensions].join("\n") + "\n";
}

// ---------------------------------------------------------------------------
// The journal's partition log (docs/checkpoints.md, "The Merkle log")
// ---------------------------------------------------------------------------

/** The PAE type of a partition log's leaves. */
export const DOMAIN_TLOG_LEAF = "bernstein/tlog-leaf/v1";

/** The leaf a journal entry adds: `PAE(DOMAIN_TLOG_LEAF, JCS(["entry", runId, seq, entryHash]))`. */
export function tlogEntryLeaf(runId: string, seq: number | bigint, entryHash: string): Buffer {
  return pae(DOMAIN_TLOG_LEAF, canonicalJson(["entry", runId, seq, entryHash]));
}

/** The leaf a run seal adds: `PAE(DOMAIN_TLOG_LEAF, JCS(["seal", runId, entryCount, headHash, lastInputOffset, final, auditHead]))`. */
export function tlogSealLeaf(
  runId: string,
  entryCount: number | bigint,
  headHash: string,
  lastInputOffset: number | bigint,
  final: boolean,
  auditHead: string,
): Buffer {
  return pae(DOMAIN_TLOG_LEAF, canonicalJson(["seal", runId, entryCount, headHash, lastInputOffset, final, auditHead]));
}

/** A partition log's checkpoint origin: `<log name>/<input topic>/<partition>/e<epoch>`. */
export function tlogOrigin(logName: string, inputTopic: string, partition: number, epoch: number): string {
  return `${logName}/${inputTopic}/${partition}/e${epoch}`;
}

// ---------------------------------------------------------------------------
// A proof of one activity (c2sp.org/tlog-proof)
// ---------------------------------------------------------------------------

/** The first line of a C2SP tlog-proof. */
export const TLOG_PROOF_HEADER = "c2sp.org/tlog-proof@v1";
/** A proof holds one journal record (at most the scheduler's 2 MiB output cap), 64 hashes and a note. */
export const MAX_TLOG_PROOF_BYTES = 4 * 1024 * 1024;

/** Text that is no C2SP tlog-proof of a journal entry. */
export class MalformedTlogProof extends TlogError {
  constructor(message: string) {
    super(message, "E_MALFORMED_TLOG_PROOF");
  }
}

/** A parsed proof: the extra data (a JournalRecord's bytes), the leaf index, the inclusion path and the signed note. */
export interface TlogProof {
  record: Buffer;
  index: bigint;
  path: Buffer[];
  note: string;
}

/**
 * Parse a tlog-proof strictly, verifying nothing: the header line, `extra <base64>`, `index <decimal
 * without leading zeros>`, at most 64 base64 hashes of 32 bytes, an empty line, then the note
 * (everything after it, verbatim). Base64 only in its canonical padded spelling.
 */
export function parseTlogProof(text: Uint8Array | string): TlogProof {
  let msg: string;
  try {
    msg = typeof text === "string" ? text : new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(text);
  } catch {
    throw new MalformedTlogProof("a proof is UTF-8 text");
  }
  if (Buffer.byteLength(msg, "utf8") > MAX_TLOG_PROOF_BYTES) throw new MalformedTlogProof(`a proof has at most ${MAX_TLOG_PROOF_BYTES} bytes`);
  const split = msg.indexOf("\n\n");
  if (split < 0) throw new MalformedTlogProof("a proof's inclusion path ends with an empty line before the checkpoint");
  const lines = msg.slice(0, split).split("\n");
  if (lines[0] !== TLOG_PROOF_HEADER) throw new MalformedTlogProof(`a proof starts with ${JSON.stringify(TLOG_PROOF_HEADER)}`);
  if (lines.length < 3 || !lines[1]!.startsWith("extra ")) throw new MalformedTlogProof("a proof of an activity carries its journal record as the 'extra' line");
  const record = base64Strict(lines[1]!.slice("extra ".length));
  if (record === undefined) throw new MalformedTlogProof("the extra data is not canonical base64");
  const index = /^index (0|[1-9][0-9]*)$/.exec(lines[2]!);
  if (index === null || BigInt(index[1]!) > MAX_TREE_SIZE) throw new MalformedTlogProof(`the third line is 'index <decimal>', got ${JSON.stringify(lines[2]!.slice(0, 80))}`);
  const path = lines.slice(3).map((line) => {
    const hash = base64Strict(line);
    if (hash === undefined || hash.length !== HASH_SIZE) throw new MalformedTlogProof("an inclusion path hash is not canonical base64 of 32 bytes");
    return hash;
  });
  if (path.length > 64) throw new MalformedTlogProof("an inclusion path is at most 64 hashes");
  return { record, index: BigInt(index[1]!), path, note: msg.slice(split + 2) };
}

/** The text of a proof (the inverse of `parseTlogProof`). */
export function tlogProofText(proof: TlogProof): string {
  const lines = [TLOG_PROOF_HEADER, `extra ${proof.record.toString("base64")}`, `index ${proof.index}`, ...proof.path.map((h) => h.toString("base64"))];
  return lines.join("\n") + "\n\n" + proof.note;
}
