/**
 * A producer's identity: the name its submissions carry and the Ed25519 key that signs them,
 * read from a producer key directory made by `bernstein keys init --producer NAME`
 * (docs/producing.md, "Producer identity and registration"):
 * `keyring.json` names the producer and its keys; the current producer key is a PEM PKCS#8
 * Ed25519 private key (`producer.ed25519.key` until a rotation). The key id is `sha256:` + hex
 * sha256 of the raw 32-byte public key.
 */

import { KeyObject, createPrivateKey, createPublicKey, sign as edSign, verify as edVerify } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

import { hmacKeyId, publicKeyId } from "./canonical";
import { ProducerIdMismatch, ProducerKeysError } from "./errors";

export const PRODUCER_KEYS_ENV = "BERNSTEIN_PRODUCER_KEYS_DIR";
const KEYRING_FORMAT = "bernstein.keyring/v1";
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/** Signs with one Ed25519 key; Ed25519 is deterministic, so the same input always gives the same signature. */
export class Ed25519Signer {
  readonly publicKeyRaw: Buffer;
  readonly keyId: string;

  constructor(private readonly key: KeyObject) {
    if (key.type !== "private" || key.asymmetricKeyType !== "ed25519") {
      throw new ProducerKeysError("the producer key is not an Ed25519 private key");
    }
    const spki = createPublicKey(key).export({ format: "der", type: "spki" });
    this.publicKeyRaw = Buffer.from(spki.subarray(spki.length - 32));
    this.keyId = publicKeyId(this.publicKeyRaw);
  }

  /** A signer from a 32-byte seed (the vectors' fixed keys, tests). */
  static fromSeed(seed: Uint8Array): Ed25519Signer {
    if (seed.length !== 32) throw new ProducerKeysError(`an Ed25519 seed has 32 bytes, got ${seed.length}`);
    return new Ed25519Signer(createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: "der", type: "pkcs8" }));
  }

  /** A signer from a PEM PKCS#8 Ed25519 private key. */
  static fromPem(pem: string | Buffer): Ed25519Signer {
    let key: KeyObject;
    try {
      key = createPrivateKey({ key: pem, format: "pem" });
    } catch {
      throw new ProducerKeysError("the producer key is not a PEM PKCS#8 private key");
    }
    return new Ed25519Signer(key);
  }

  sign(data: Uint8Array): Buffer {
    return edSign(null, data, this.key);
  }

  verify(data: Uint8Array, signature: Uint8Array): boolean {
    return edVerify(null, data, createPublicKey(this.key), signature);
  }
}

/** A producer name and its signing key, and the HMAC keys that never leave its host (computer use). */
export interface SigningProducer {
  readonly name: string;
  readonly signer: Ed25519Signer;
  /** The lineage envelope key (`lineage.hmac.key`): HMACs computer-use lineage entries. */
  readonly lineageKey?: Buffer;
  /** The redaction key (`redaction.hmac.key`): typed-value digests. */
  readonly redactionKey?: Buffer;
}

/** `$BERNSTEIN_PRODUCER_KEYS_DIR`, else `$XDG_STATE_HOME/bernstein/producer-keys`, else `~/.local/state/...`. */
export function defaultProducerKeysDir(env: NodeJS.ProcessEnv = process.env): string {
  const explicit = env[PRODUCER_KEYS_ENV];
  if (explicit) return explicit;
  const state = env["XDG_STATE_HOME"] || join(homedir(), ".local", "state");
  return join(state, "bernstein", "producer-keys");
}

interface RingEntry {
  key_id?: unknown;
  purpose?: unknown;
  file?: unknown;
  status?: unknown;
}

/** The producer keys of `directory` (default: `defaultProducerKeysDir()`): its name and current signing key. */
export function loadProducer(directory: string = defaultProducerKeysDir()): SigningProducer {
  const ringPath = join(directory, "keyring.json");
  if (!existsSync(ringPath)) {
    throw new ProducerKeysError(
      `no producer keys in ${directory}; create them with \`bernstein keys init --producer NAME --dir ${directory}\` (or set ${PRODUCER_KEYS_ENV})`,
    );
  }
  let ring: { format?: unknown; keys?: unknown; producer?: unknown };
  try {
    ring = JSON.parse(readFileSync(ringPath, "utf8")) as typeof ring;
  } catch (exc) {
    throw new ProducerKeysError(`${ringPath} is not a readable key ring: ${(exc as Error).message}`);
  }
  if (ring === null || typeof ring !== "object" || ring.format !== KEYRING_FORMAT || !Array.isArray(ring.keys)) {
    throw new ProducerKeysError(`${ringPath} is not a ${KEYRING_FORMAT} document`);
  }
  if (typeof ring.producer !== "string" || ring.producer === "") {
    throw new ProducerKeysError(
      `${directory} holds a scheduler's keys, not a producer's: a producer host gets its own (\`bernstein keys init --producer NAME\`)`,
    );
  }
  const usable = (ring.keys as RingEntry[]).filter(
    (k) =>
      k !== null &&
      typeof k === "object" &&
      k.purpose === "producer" &&
      k.status !== "revoked" &&
      typeof k.file === "string" &&
      !k.file.includes("/") &&
      !k.file.startsWith(".") &&
      existsSync(join(directory, k.file)),
  );
  const current = usable[usable.length - 1];
  if (current === undefined) throw new ProducerKeysError(`no usable producer key in ${ringPath}`);
  const keyPath = join(directory, current.file as string);
  let pem: Buffer;
  try {
    pem = readFileSync(keyPath);
  } catch (exc) {
    throw new ProducerKeysError(`cannot read ${keyPath}: ${(exc as NodeJS.ErrnoException).code ?? (exc as Error).message}`);
  }
  const signer = Ed25519Signer.fromPem(pem);
  if (typeof current.key_id === "string" && current.key_id !== signer.keyId) {
    throw new ProducerKeysError(`${keyPath} holds key ${signer.keyId}, but ${ringPath} names it ${current.key_id}`);
  }
  return { name: ring.producer, signer, lineageKey: hmacKey(directory, ring.keys as RingEntry[], "lineage"), redactionKey: hmacKey(directory, ring.keys as RingEntry[], "redaction") };
}

/** The newest usable HMAC key of `purpose` in the ring (hex in its file, as `bernstein keys init` writes it), if any. */
function hmacKey(directory: string, keys: RingEntry[], purpose: string): Buffer | undefined {
  const usable = keys.filter(
    (k) =>
      k !== null &&
      typeof k === "object" &&
      k.purpose === purpose &&
      k.status !== "revoked" &&
      typeof k.file === "string" &&
      !k.file.includes("/") &&
      !k.file.startsWith(".") &&
      existsSync(join(directory, k.file)),
  );
  const current = usable[usable.length - 1];
  if (current === undefined) return undefined;
  const path = join(directory, current.file as string);
  const text = readFileSync(path, "utf8").trim();
  if (!/^(?:[0-9a-fA-F]{2}){16,}$/.test(text)) throw new ProducerKeysError(`${path} must hold the ${purpose} key as hex characters (at least 16 bytes)`);
  const secret = Buffer.from(text, "hex");
  if (typeof current.key_id === "string" && current.key_id !== hmacKeyId(secret)) {
    throw new ProducerKeysError(`${path} holds key ${hmacKeyId(secret)}, but the key ring names it ${current.key_id}`);
  }
  return secret;
}

/** The producer.id to publish under: the key ring's name; `explicit`, when given, must equal it. */
export function resolveProducerId(producer: SigningProducer, explicit?: string): string {
  if (explicit !== undefined && explicit !== producer.name) {
    throw new ProducerIdMismatch(
      `producer id ${JSON.stringify(explicit)} is not the name of the producer key (${JSON.stringify(producer.name)}, key ${producer.signer.keyId}): the scheduler refuses a producer.id other than the name the key is registered to`,
    );
  }
  return producer.name;
}
