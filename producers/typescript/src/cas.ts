/**
 * The content-addressed blob store, S3 adapter (as `substrate/cas.py`): every blob lives under
 * `sha256/<first two hex>/<64 hex>` of its own bytes; `put` is idempotent (a blob already
 * present is not rewritten). Errors are `CasError`s, never the client's own.
 *
 * A shared bucket may hold bytes someone else put at an address first. So every upload carries
 * `x-amz-checksum-sha256` equal to its address (the store refuses other bytes), and an upload is
 * skipped only when the object there carries that checksum (`holds`), never merely because one exists.
 */

import { Client } from "minio";

import { digestHex, sha256Digest } from "./canonical";
import { CasError, CasUnavailable } from "./errors";
import type { S3Settings } from "./config";

/** Object key of a blob: `sha256/<aa>/<hex>`. */
export function blobKey(digest: string): string {
  const hex = digestHex(digest);
  return `sha256/${hex.slice(0, 2)}/${hex}`;
}

/** The `x-amz-checksum-sha256` of the bytes whose address is `digest` (base64 of the raw SHA-256). */
export function checksumSha256(digest: string): string {
  return Buffer.from(digestHex(digest), "hex").toString("base64");
}

/** What the emitter needs of a blob store. */
export interface BlobStore {
  /** Store `data` under its digest (no-op when it provably holds them); return the digest. */
  put(data: Uint8Array): Promise<string>;
  /** An object (any bytes) is at the digest's address. */
  has(digest: string): Promise<boolean>;
  /** The object at the digest's address provably holds its bytes (its stored checksum is the address's). */
  holds(digest: string): Promise<boolean>;
  describe(): string;
}

const MISSING = new Set(["NoSuchKey", "NoSuchObject", "NotFound", "ResourceNotFound"]);

export class S3BlobStore implements BlobStore {
  private readonly client: Client;

  constructor(readonly settings: S3Settings) {
    let url: URL;
    try {
      url = new URL(settings.endpoint);
    } catch {
      throw new CasError(`BERNSTEIN_S3_ENDPOINT ${JSON.stringify(settings.endpoint)} is not a URL (http://host:port)`, "E_CAS_CONFIG");
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new CasError(`BERNSTEIN_S3_ENDPOINT must be http:// or https://, not ${url.protocol}`, "E_CAS_CONFIG");
    }
    const useSSL = url.protocol === "https:";
    this.client = new Client({
      endPoint: url.hostname.replace(/^\[|\]$/g, ""),
      port: url.port === "" ? (useSSL ? 443 : 80) : Number(url.port),
      useSSL,
      accessKey: settings.accessKey,
      secretKey: settings.secretKey,
      region: settings.region,
      pathStyle: true,
    });
  }

  describe(): string {
    return `s3 bucket ${this.settings.bucket} at ${this.settings.endpoint}`;
  }

  async has(digest: string): Promise<boolean> {
    try {
      await this.client.statObject(this.settings.bucket, blobKey(digest));
      return true;
    } catch (exc) {
      if (MISSING.has(String((exc as { code?: unknown }).code))) return false;
      throw this.translate(exc, `look up blob ${digest}`);
    }
  }

  async holds(digest: string): Promise<boolean> {
    try {
      // minio-js has no checksum mode on statObject: the same HEAD, asking for the stored checksum
      const res = await this.client.makeRequestAsync(
        { method: "HEAD", bucketName: this.settings.bucket, objectName: blobKey(digest), headers: { "x-amz-checksum-mode": "ENABLED" } },
        "",
        [200],
      );
      res.resume();
      return res.headers["x-amz-checksum-sha256"] === checksumSha256(digest);
    } catch (exc) {
      if (MISSING.has(String((exc as { code?: unknown }).code))) return false;
      throw this.translate(exc, `look up blob ${digest}`);
    }
  }

  async put(data: Uint8Array): Promise<string> {
    const bytes = Buffer.from(data);
    const digest = sha256Digest(bytes);
    if (await this.holds(digest)) return digest;
    try {
      // putObject would rename x-amz-checksum-sha256 to user metadata: the PUT itself, with the checksum the store checks
      const res = await this.client.makeRequestAsync(
        {
          method: "PUT",
          bucketName: this.settings.bucket,
          objectName: blobKey(digest),
          headers: {
            "Content-Type": "application/octet-stream",
            "Content-Length": String(bytes.length),
            "x-amz-checksum-sha256": checksumSha256(digest),
          },
        },
        bytes,
        [200],
      );
      res.resume();
    } catch (exc) {
      throw this.translate(exc, `store blob ${digest}`);
    }
    return digest;
  }

  private translate(exc: unknown, action: string): CasError {
    const code = (exc as { code?: unknown }).code;
    // S3 error codes are CamelCase (AccessDenied, NoSuchBucket); Node's socket errors are E-UPPER (ECONNREFUSED).
    if (typeof code === "string" && /^[A-Z][a-z][A-Za-z]*$/.test(code)) {
      return new CasUnavailable(`S3 refused to ${action} in ${this.describe()}: ${code}: ${(exc as Error).message}`);
    }
    return new CasUnavailable(
      `cannot ${action}: ${this.describe()} is unreachable (${String(code ?? (exc as Error).name)}: ${(exc as Error).message}); is the S3 server running?`,
    );
  }
}

/** An in-memory store (tests, dry runs). */
export class MemoryBlobStore implements BlobStore {
  readonly blobs = new Map<string, Buffer>();

  async put(data: Uint8Array): Promise<string> {
    const digest = sha256Digest(data);
    if (!this.blobs.has(digest)) this.blobs.set(digest, Buffer.from(data));
    return digest;
  }

  async has(digest: string): Promise<boolean> {
    return this.blobs.has(digest);
  }

  async holds(digest: string): Promise<boolean> {
    return this.blobs.has(digest); // keyed by the digest of the bytes it was given
  }

  describe(): string {
    return "memory";
  }
}
