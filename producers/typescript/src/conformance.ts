#!/usr/bin/env node
/**
 * Conformance runner (docs/producing.md, "Vectors, SDKs and tools"):
 * `node dist/conformance.js [VECTORS_DIR]` reads EVERY `*.json` file of the vectors directory
 * (default: the repository's `schemas/vectors`) and recomputes every stated value from its stated
 * inputs with this SDK's own code: Avro single-object bytes and fingerprints, canonical JSON (and
 * its refusals), digests, PAE, chain hashes, MACs, Ed25519 signatures, murmur2 partitions (with
 * kafkajs' DefaultPartitioner, the one the emitter uses) and the scheduler-step inputs and outputs,
 * and the transparency log's Merkle trees, proofs and signed checkpoints (with ./tlog). A file or a
 * section it does not know is a failure ("not covered"), so 100% stays enforced as the vectors
 * grow. The last line is `conformance: N/N vectors reproduced`; the exit status is 1 on any miss.
 */

import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";

import { Codec, defaultCodec } from "./avro";
import { parseJson } from "./json";
import { auditWalksFile } from "./conformance/audit_walks";
import { browserFile } from "./conformance/browser";
import { chainFile, checkpointsFile } from "./conformance/chains";
import { Obj, Tally, obj } from "./conformance/check";
import { avroFile, canonicalFile, digestsFile, modalitiesFile, partitionsFile } from "./conformance/formats";
import { ed25519File, signaturesFile } from "./conformance/signatures";
import { stepsFile } from "./conformance/steps";
import { tlogFile } from "./conformance/tlog";

export { Tally, unhex } from "./conformance/check";

// ---------------------------------------------------------------------------
// one handler per file (one module per family, under conformance/)
// ---------------------------------------------------------------------------

const HANDLERS: Record<string, (t: Tally, doc: Obj, codec: Codec) => void | Promise<void>> = {
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
  "browser.json": browserFile,
  "tlog.json": (t, d) => tlogFile(t, d),
};

/** Run every vector file of `dir`; the tally (asynchronous: browser.json records a session through its publisher). */
export async function runConformance(dir: string, codec: Codec = defaultCodec()): Promise<Tally> {
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
      await handler(t, doc, codec);
    } catch (exc) {
      t.total++;
      t.failures.push(`${file}: ${(exc as Error).message}`);
    }
  }
  return t;
}

async function main(argv: string[]): Promise<number> {
  const dir = resolve(argv[0] ?? join(__dirname, "..", "..", "..", "schemas", "vectors"));
  let tally: Tally;
  try {
    tally = await runConformance(dir);
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

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => (process.exitCode = code),
    (exc: unknown) => {
      process.stderr.write(`conformance: ${(exc as Error).message}\n`);
      process.exitCode = 1;
    },
  );
}
