import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import {
  DataOpsActivity,
  ResearchReportBuilder,
  buildResult,
  codingResult,
  normaliseText,
  observe,
  plainPageText,
  researchAbort,
} from "../activity";
import { ACTIVITY_SUBMISSION_V3, RUN_CLOSE_V2, defaultCodec } from "../avro";
import * as c from "../canonical";
import { MemoryBlobStore, blobKey } from "../cas";
import { Topics } from "../config";
import { runConformance } from "../conformance";
import { parseDescription, stageResult } from "../description";
import { Emitter, signedCloseRecord, signedSubmissionRecord } from "../emitter";
import { KafkaNotAuthorized, PublishFailed } from "../errors";
import { Ed25519Signer } from "../identity";
import { parseJson } from "../json";

const EMIT = join(__dirname, "..", "bin", "emit.js");
const VECTORS = join(__dirname, "..", "..", "..", "..", "schemas", "vectors");
const signer = Ed25519Signer.fromSeed(Buffer.alloc(32, 9));

test("buildResult: hashes, defaults, and the scheduler's refusals first", () => {
  const page = observe("page", "https://a", Buffer.from("alpha"));
  const result = buildResult("research", "report", [page]);
  assert.equal(result.artifact.toString(), '"report"');
  assert.equal(result.artifact_hash, "sha256:8d0ccb734a265b631becd953b550e449e730498de4ee931d4ada5a3ce3783ae1");
  assert.equal(result.evidence_set_hash, "sha256:e663ae92657613ddb4c9771d3841885011ef5db9544b1d5fb3ac44abcb8d832d");
  assert.deepEqual([result.terminal_state, result.reason_code], ["completed", "ok"]);
  assert.deepEqual(result.observations, [{ kind: "page", ref: "https://a", content_hash: page.observation.content_hash, size: 5 }]);
  assert.deepEqual([...result.blobs.keys()], [page.observation.content_hash]);
  assert.equal(buildResult("coding", Buffer.from([0, 1])).artifact.toString("hex"), "0001");
  assert.throws(() => buildResult("poetry", {}), { code: "UNKNOWN_KIND" });
  assert.throws(() => buildResult("coding", {}, [], { terminalState: "done" }), { code: "UNKNOWN_TERMINAL_STATE" });
  assert.throws(() => buildResult("coding", {}, [], { reasonCode: " " }), { code: "EMPTY_REASON_CODE" });
  assert.throws(() => buildResult("coding", {}, [], { reasonCode: "a\nb" }), { code: "INVALID_REASON_CODE" });
  assert.throws(() => buildResult("coding", Buffer.alloc(512 * 1024 + 1)), { code: "ARTIFACT_TOO_LARGE", evidence: { size: "524289", limit: "524288" } });
  assert.throws(() => buildResult("coding", { x: 0.5 }), { code: "E_CANONICAL" });
  assert.equal(codingResult("+line\n", [{ path: "a.py", data: Buffer.from("x") }]).observations[0]?.kind, "file");
});

test("research: the report builder writes the v1 report and refuses what the scheduler refuses", () => {
  const b = new ResearchReportBuilder("what changed?");
  b.addSource({ sourceRef: "https://a/notes", data: Buffer.from("<p>Quill 2.0 is  faster.</p>"), status: 200, contentType: "text/html" });
  b.planSource("https://a/unfetched");
  b.addClaim({ statement: "It is faster.", citations: [{ sourceRef: "https://a/notes", quote: "  Quill 2.0\n is faster. " }] });
  const result = b.build();
  const doc = JSON.parse(result.artifact.toString()) as Record<string, unknown>;
  assert.deepEqual(Object.keys(doc).sort(), ["claims", "format", "plan", "query", "quote_normalisation", "sources"]);
  assert.equal(doc["format"], "bernstein.research.report/v1");
  assert.deepEqual(doc["plan"], ["https://a/notes", "https://a/unfetched"]);
  const claims = doc["claims"] as { claim_id: string; citations: { quote: string; page_content_hash: string }[] }[];
  assert.equal(claims[0]?.claim_id, "c1");
  assert.equal(claims[0]?.citations[0]?.quote, "Quill 2.0 is faster.");
  assert.equal(claims[0]?.citations[0]?.page_content_hash, result.observations[0]?.content_hash);
  assert.equal(result.artifact.toString(), c.canonicalJson(doc).toString(), "canonical bytes");
  assert.throws(() => new ResearchReportBuilder("q").build(), { code: "NO_CLAIMS" });
  assert.throws(() => b.addClaim({ statement: "x", citations: [] }), { code: "UNCITED_CLAIM" });
  assert.throws(() => b.addClaim({ statement: " ", citations: [{ sourceRef: "https://a/notes", quote: "q" }] }), { code: "EMPTY_STATEMENT" });
  assert.throws(() => b.addClaim({ statement: "s", citations: [{ sourceRef: "https://a/unfetched", quote: "q" }] }), { code: "SOURCE_NOT_FETCHED" });
  assert.throws(() => b.addClaim({ statement: "s", citations: [{ sourceRef: "https://a/notes", quote: "\u00a0\t" }] }), { code: "EMPTY_QUOTE" });
  assert.throws(() => b.addClaim({ claimId: "c1", statement: "s", citations: [{ sourceRef: "https://a/notes", quote: "q" }] }), { code: "DUPLICATE_CLAIM_ID" });
  assert.throws(() => b.addClaim({ claimId: "-bad", statement: "s", citations: [{ sourceRef: "https://a/notes", quote: "q" }] }), { code: "INVALID_CLAIM_ID" });
  assert.equal(normaliseText("e\u0301  a\u001fb\u3000"), "\u00e9 a b");
  const plain = new ResearchReportBuilder("q").addSource({ sourceRef: "https://t/notes.txt", data: Buffer.from("\ufeffQuill 2.0\nis twice\n\nas fast."), contentType: "text/plain; charset=utf-8" });
  plain.addClaim({ statement: "fast", citations: [{ sourceRef: "https://t/notes.txt", quote: "2.0 is twice as fast." }] });
  assert.throws(
    () => plain.addClaim({ statement: "slow", citations: [{ sourceRef: "https://t/notes.txt", quote: "three times as fast" }] }),
    { code: "QUOTE_NOT_IN_PAGE", evidence: { claim_id: "c2", citation: "0", source_ref: "https://t/notes.txt", quote: "three times as fast" } },
  );
  assert.equal(plainPageText(Buffer.from("<html><p>x</p>"), null), undefined, "HTML is left to the verifier");
  assert.equal(plainPageText(Buffer.from("x"), "text/plain; charset=latin-1"), undefined, "other charsets too");
  const abort = researchAbort("refusal", "q", ["https://a"], { code: "BUDGET_EXCEEDED", cap: "max_fetches", limit: 0, attempted: 1, source: "https://a" });
  assert.deepEqual([abort.terminal_state, abort.reason_code], ["refused", "budget_exhausted"]);
});

test("data/ops: phase rules, signed items and a signed receipt that verifies", () => {
  assert.throws(() => new DataOpsActivity("run-1", "rollup", signer, "data").finish(), { code: "NO_PLAN" });
  const a = new DataOpsActivity("run-1", "rollup", signer, "data");
  a.addInput("orders.csv", Buffer.from("a,b\n"));
  const plan = a.plan(["sum b"]);
  assert.equal(plan, c.planHash([c.contentHash(Buffer.from("a,b\n"))], ["sum b"]));
  const v = new DataOpsActivity("run-1", "rollup", signer, "data");
  v.plan([]);
  assert.throws(() => v.addInput("late.csv", Buffer.from("y")), { code: "INPUT_AFTER_PLAN" });
  assert.throws(() => v.plan(["again"]), { code: "PLAN_ALREADY_DERIVED" });
  assert.throws(() => v.finish(), { code: "INPUT_AFTER_PLAN" }, "the first violation is the one finish raises");
  a.addOutput("sum.csv", Buffer.from("1\n"));
  const result = a.finish();
  assert.throws(() => a.addOutput("x", Buffer.from("x")), { code: "ACTIVITY_FINISHED" });
  assert.deepEqual(result.observations.map((o) => [o.kind, o.ref]), [["input", "orders.csv"], ["output", "sum.csv"]]);
  const receipt = JSON.parse(result.artifact.toString()) as Record<string, unknown>;
  const signature = Buffer.from(receipt["receipt_signature"] as string, "base64url");
  const { receipt_signature: _, ...unsigned } = receipt;
  assert.ok(signer.verify(c.signingInput(c.DOMAIN_DATAOPS_RECEIPT, unsigned), signature), "receipt signature verifies");
  const output = (receipt["outputs"] as Record<string, unknown>[])[0] as Record<string, unknown>;
  const signed = { run_id: "run-1", stage_id: "rollup", kind: "data", role: "output", index: 0, ref: "sum.csv", content_hash: output["content_hash"], plan_hash: plan };
  assert.ok(signer.verify(c.signingInput(c.DOMAIN_DATAOPS_ARTIFACT, signed), Buffer.from(output["signature"] as string, "base64url")));
  const refused = new DataOpsActivity("run-1", "rollup", signer, "ops");
  refused.addInput("cfg", Buffer.from("k=v"));
  const r = refused.refusedResult("UNSAFE_STEP", "no");
  assert.deepEqual([r.kind, r.terminal_state, r.reason_code], ["ops", "refused", "unsafe_step"]);
  assert.equal(JSON.parse(r.artifact.toString()).plan_hash, null);
  const sticky = new DataOpsActivity("run-1", "s", signer, "data");
  assert.throws(() => sticky.addOutput("early", Buffer.from("x")), { code: "EFFECT_BEFORE_PLAN" });
  sticky.plan([]);
  assert.throws(() => sticky.finish(), { code: "EFFECT_BEFORE_PLAN" }, "a violation is sticky");
  assert.equal(sticky.refusedResult("EFFECT_BEFORE_PLAN", "early output").reason_code, "effect_before_plan");
});

test("a signed submission: the statement signature verifies, and the same inputs give the same bytes (retries reuse them)", () => {
  const result = buildResult("coding", { diff: "+1" }, [observe("file", "a.py", Buffer.from("x"))]);
  const options = { runId: "run-1", stageId: "s-0", role: "developer", result, submissionId: "sub-1", occurredAtMs: 1767225600000, producerId: "p@h", signer };
  const record = signedSubmissionRecord(options);
  const statement = c.submissionStatement(record as unknown as Parameters<typeof c.submissionStatement>[0], signer.keyId);
  assert.ok(signer.verify(c.submissionSigningInput(statement), record["producer_signature"] as Buffer));
  const codec = defaultCodec();
  const bytes = codec.encode(ACTIVITY_SUBMISSION_V3, record);
  assert.ok(bytes.equals(codec.encode(ACTIVITY_SUBMISSION_V3, signedSubmissionRecord(options))));
  assert.equal(codec.decode(bytes).schema.name, ACTIVITY_SUBMISSION_V3);
  const override = signedSubmissionRecord({ ...options, artifactHashOverride: "sha256:" + "0".repeat(64) });
  assert.equal(override["artifact_hash"], "sha256:" + "0".repeat(64));
  const close = signedCloseRecord({ runId: "run-1", producerId: "p@h", signer, submissionId: "c-1", occurredAtMs: 5 });
  const closeStatement = c.runCloseStatement("c-1", "run-1", "p@h", 5, signer.keyId);
  assert.ok(signer.verify(c.submissionSigningInput(closeStatement), close["producer_signature"] as Buffer));
  assert.equal(codec.decode(codec.encode(RUN_CLOSE_V2, close)).schema.name, RUN_CLOSE_V2);
});

test("blobs first: the emitter stores the artifact and the observed bytes, and refuses evidence nobody stored", async () => {
  const store = new MemoryBlobStore();
  const settings = { kafkaBootstrap: "127.0.0.1:1", kafkaSecurity: {}, s3: undefined, topics: new Topics("t"), producerKeysDir: undefined };
  const emitter = new Emitter({ settings, producer: { name: "p@h", signer }, store });
  const page = observe("page", "https://a", Buffer.from("alpha"));
  const result = buildResult("research", "report", [page]);
  await emitter.storeEvidence(result);
  assert.deepEqual([...store.blobs.keys()].sort(), [c.contentHash(Buffer.from('"report"')), page.observation.content_hash].sort());
  const unstored = buildResult("coding", "x", [{ kind: "file", ref: "b", content_hash: c.contentHash(Buffer.from("never")), size: 5 }]);
  await assert.rejects(emitter.storeEvidence(unstored), { code: "E_EVIDENCE_NOT_STORED" });
  assert.throws(() => emitter.submissionValue({ runId: "bad id", stageId: "s", role: "r", result }), { code: "INVALID_RUN_ID" });
  assert.equal(blobKey(page.observation.content_hash), `sha256/${page.observation.content_hash.slice(7, 9)}/${page.observation.content_hash.slice(7)}`);
  await assert.rejects(emitter.closeRun("-bad"), { code: "INVALID_RUN_ID" });
});

test("retries produce the very same bytes again, only while the failure is retriable", async () => {
  const settings = { kafkaBootstrap: "127.0.0.1:1", kafkaSecurity: {}, s3: undefined, topics: new Topics("t"), producerKeysDir: undefined };
  const emitter = new Emitter({ settings, producer: { name: "p@h", signer }, store: new MemoryBlobStore(), retries: 2 });
  const sent: Buffer[] = [];
  let failures: Error[] = [];
  (emitter as unknown as { produceOnce: unknown }).produceOnce = async (runId: string, submissionId: string, value: Buffer) => {
    sent.push(value);
    const failure = failures.shift();
    if (failure !== undefined) throw failure;
    return { submissionId, runId, topic: "t.activity.submissions", partition: 0, offset: sent.length, value };
  };
  const result = buildResult("coding", { diff: "+1" });
  failures = [new PublishFailed("timeout", { retriable: true }), new PublishFailed("timeout", { retriable: true })];
  const landed = await emitter.publish({ runId: "run-1", stageId: "s", role: "developer", result, submissionId: "sub-1" });
  assert.equal(sent.length, 3);
  assert.ok(sent.every((v) => v.equals(landed.value)), "every attempt sent the same bytes");
  sent.length = 0;
  failures = [new PublishFailed("t", { retriable: true }), new PublishFailed("t", { retriable: true }), new PublishFailed("t", { retriable: true })];
  await assert.rejects(emitter.publish({ runId: "run-1", stageId: "s", role: "developer", result, submissionId: "sub-2" }), { code: "E_PUBLISH_FAILED" });
  assert.equal(sent.length, 3, "1 + 2 retries, then the error");
  sent.length = 0;
  failures = [new KafkaNotAuthorized("denied")];
  await assert.rejects(emitter.publish({ runId: "run-1", stageId: "s", role: "developer", result }), { code: "E_KAFKA_NOT_AUTHORIZED" });
  assert.equal(sent.length, 1, "not retried");
  const failed = new PublishFailed("later", { runId: "run-1", submissionId: "sub-3", value: Buffer.from("c301", "hex"), retriable: true });
  sent.length = 0;
  await emitter.retry(failed);
  assert.deepEqual(sent, [Buffer.from("c301", "hex")]);
  await assert.rejects(emitter.retry(new PublishFailed("x")), { code: "E_EMIT" });
});

test("activity descriptions: defaults, sources, and every mistake names its line and field", () => {
  const dir = mkdtempSync(join(tmpdir(), "ts-desc-"));
  writeFileSync(join(dir, "page.html"), "<p>hi</p>");
  const stage = parseDescription(
    '{"run_id":"run-1","stage_id":"s","role":"scout","kind":"coding","artifact":{"b":1,"a":[2]},"observations":[{"kind":"page","ref":"u","file":"page.html"},{"kind":"n","ref":"t","text":"é"},{"kind":"b","ref":"b","base64":"AAE="}]}',
    7,
    dir,
  );
  assert.equal(stage.type, "stage");
  if (stage.type !== "stage") return;
  assert.equal(stage.artifact.toString(), '{"a":[2],"b":1}');
  assert.deepEqual(stage.observations.map((o) => o.data.toString("hex")), ["3c703e68693c2f703e", "c3a9", "0001"]);
  assert.deepEqual([stage.terminalState, stage.reasonCode, stage.submissionId, stage.occurredAtMs], ["completed", "ok", undefined, undefined]);
  assert.equal(stageResult(stage).observations.length, 3);
  assert.deepEqual(parseDescription('{"close_run": "run-1"}', 1), { type: "close", line: 1, runId: "run-1", submissionId: undefined });
  const bad: [string, RegExp][] = [
    ["[1]", /^line 3: a description is a JSON object, not a list$/],
    ["{", /^line 3: not JSON/],
    ['{"close_run": "r", "x": 1}', /^line 3, field x: a run close takes only/],
    ['{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding"}', /^line 3, field artifact: give exactly one of/],
    ['{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding", "artifact": 1, "artifact_base64": "AA=="}', /field artifact_base64: give exactly one/],
    ['{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding", "artifact": 1.0}', /field artifact: has no RFC 8785 canonical JSON form/],
    ['{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding", "artifact_base64": "A"}', /field artifact_base64: is not standard base64/],
    ['{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding", "artifact_file": "nope"}', /field artifact_file: no such file/],
    ['{"run_id": 5, "stage_id": "s", "role": "x", "kind": "coding", "artifact": 1}', /field run_id: must be a string, not a number/],
    ['{"stage_id": "s", "role": "x", "kind": "coding", "artifact": 1}', /field run_id: is required/],
    ['{"run_id": "r", "run_id": "q"}', /field run_id: is given twice/],
    ['{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding", "artifact": 1, "occurred_at_ms": 1.5}', /field occurred_at_ms: must be an integer/],
    ['{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding", "artifact": 1, "observations": [{"kind": "k", "ref": "r"}]}', /field observations\[0\]: give exactly one of file, text, base64/],
    ['{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding", "artifact": 1, "bogus": 1}', /field bogus: unknown field/],
  ];
  for (const [text, pattern] of bad) assert.throws(() => parseDescription(text, 3, dir), (e: Error & { code?: string }) => e.code === "E_DESCRIPTION" && pattern.test(e.message), text);
  const badId = parseDescription('{"run_id": ".r", "stage_id": "s", "role": "x", "kind": "coding", "artifact": 1}', 4);
  if (badId.type === "stage") assert.throws(() => stageResult(badId), (e: Error) => /^line 4, field run_id: .*\(INVALID_RUN_ID\)$/.test(e.message));
  const override = parseDescription(`{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding", "artifact": 1, "artifact_hash": "sha256:${"0".repeat(64)}"}`, 1);
  if (override.type === "stage") assert.equal(stageResult(override).artifact_hash, "sha256:" + "0".repeat(64));
});

function runEmit(input: string, env: Record<string, string>): { status: number | null; stdout: string; stderr: string } {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("BERNSTEIN_")));
  const r = spawnSync(process.execPath, [EMIT], { input, env: { ...clean, ...env }, encoding: "utf8", timeout: 60000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function keysDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "ts-emit-keys-"));
  const { privateKey } = generateKeyPairSync("ed25519");
  writeFileSync(join(dir, "producer.ed25519.key"), privateKey.export({ format: "pem", type: "pkcs8" }));
  writeFileSync(join(dir, "keyring.json"), JSON.stringify({ format: "bernstein.keyring/v1", producer: "p", keys: [{ purpose: "producer", file: "producer.ed25519.key" }] }));
  return dir;
}

test("bernstein-ts-emit: exit 2 for a bad description or missing keys, exit 3 when S3 or Kafka is unreachable; one line, no stack", () => {
  const keys = keysDir();
  const env = { BERNSTEIN_PRODUCER_KEYS_DIR: keys, BERNSTEIN_KAFKA_BOOTSTRAP: "127.0.0.1:1", BERNSTEIN_S3_ENDPOINT: "http://127.0.0.1:1" };
  const bad = runEmit('\n{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding"}\n', env);
  assert.equal(bad.status, 2);
  assert.equal(bad.stdout, "");
  assert.equal(bad.stderr, "bernstein-ts-emit: error: line 2, field artifact: give exactly one of artifact, artifact_file, artifact_base64\n");
  const noKeys = runEmit("", { ...env, BERNSTEIN_PRODUCER_KEYS_DIR: join(keys, "missing") });
  assert.equal(noKeys.status, 2);
  assert.match(noKeys.stderr, /^bernstein-ts-emit: error: no producer keys in .*bernstein keys init --producer NAME/);
  const down = runEmit('{"run_id": "r", "stage_id": "s", "role": "x", "kind": "coding", "artifact": 1}\n', env);
  assert.equal(down.status, 3);
  assert.match(down.stderr, /^bernstein-ts-emit: error: line 1: nothing published for this line: cannot store evidence before publishing: .*unreachable/);
  assert.equal(down.stderr.split("\n").length, 2, "one line");
  assert.doesNotMatch(down.stderr, /\n\s+at /);
  const noS3 = runEmit('{"close_run": "r"}\n', { ...env, BERNSTEIN_S3_ENDPOINT: "" });
  assert.equal(noS3.status, 3);
  assert.match(noS3.stderr, /BERNSTEIN_S3_ENDPOINT/);
  const badProps = runEmit('{"close_run": "r"}\n', { ...env, BERNSTEIN_KAFKA_CONFIG_FILE: join(keys, "keyring.json") });
  assert.equal(badProps.status, 3);
  assert.match(badProps.stderr, /keyring.json:1: expected key=value/);
  assert.equal(runEmit("", env).status, 0, "no lines: nothing to publish");
  const flag = spawnSync(process.execPath, [EMIT, "--timeout", "0"], { input: "", env: { ...process.env, ...env }, encoding: "utf8" });
  assert.equal(flag.status, 3, "bad flags exit 3, as bernstein submit");
  assert.equal(flag.stderr, "bernstein-ts-emit: error: --timeout needs a positive number of seconds\n");
  assert.equal(spawnSync(process.execPath, [EMIT, "--timeout=2.5"], { input: "", env: { ...process.env, ...env } }).status, 0);
  const badClose = runEmit('{"close_run": ".r"}\n', env);
  assert.equal(badClose.status, 2);
  assert.match(badClose.stderr, /^bernstein-ts-emit: error: line 1, field close_run: run_id "\.r" must be .*\(INVALID_RUN_ID\)\n$/);
  const notUtf8 = spawnSync(process.execPath, [EMIT], { input: Buffer.from("\n\xff\n", "latin1"), env: { ...process.env, ...env }, encoding: "utf8" });
  assert.equal(notUtf8.status, 2);
  assert.equal(notUtf8.stderr, "bernstein-ts-emit: error: stdin is not UTF-8 text (line 2)\n");
});

test("the conformance runner reproduces the repository's vectors and fails on an unknown file, an unknown section or a changed value", async () => {
  const all = await runConformance(VECTORS);
  assert.deepEqual(all.failures, []);
  assert.ok(all.total > 600 && all.reproduced === all.total);
  const dir = mkdtempSync(join(tmpdir(), "ts-vectors-"));
  const digests = parseJson(readFileSync(join(VECTORS, "digests.json"), "utf8")) as Record<string, unknown>;
  writeFileSync(join(dir, "digests.json"), JSON.stringify(digests));
  assert.deepEqual((await runConformance(dir)).failures, []);
  writeFileSync(join(dir, "future.json"), "{}");
  writeFileSync(join(dir, "digests.json"), JSON.stringify({ ...digests, new_section: [] }));
  assert.deepEqual((await runConformance(dir)).failures.sort(), ["digests.new_section: not covered by this runner", "future.json: not covered by this runner"]);
  const changed = JSON.parse(JSON.stringify(digests)) as { content_hash: { digest: string }[] };
  (changed.content_hash[0] as { digest: string }).digest = "sha256:" + "1".repeat(64);
  const solo = mkdtempSync(join(tmpdir(), "ts-vectors-"));
  mkdirSync(solo, { recursive: true });
  writeFileSync(join(solo, "digests.json"), JSON.stringify(changed));
  const t = await runConformance(solo);
  assert.equal(t.failures.length, 1);
  assert.match(t.failures[0] as string, /^digests.content_hash\[0\]: value differs/);
  const cli = spawnSync(process.execPath, [join(__dirname, "..", "conformance.js"), solo], { encoding: "utf8" });
  assert.equal(cli.status, 1);
  assert.match(cli.stdout, /\nconformance: \d+\/\d+ vectors reproduced\n$/);
});

test("the audit_walks.json runner reads every record, refuses garbage only where it is meant, and recomputes the base's MACs", async () => {
  type Walks = {
    bases: { single: { records: { audit: [number, number, string | null, string][] } } };
    cases: { name: string; audit: [number, number, string | null, string][] | null }[];
  };
  const walks = JSON.parse(readFileSync(join(VECTORS, "audit_walks.json"), "utf8")) as Walks;
  const run = async (change: (w: Walks) => void): Promise<string[]> => {
    const w = JSON.parse(JSON.stringify(walks)) as Walks;
    change(w);
    const dir = mkdtempSync(join(tmpdir(), "ts-vectors-"));
    writeFileSync(join(dir, "audit_walks.json"), JSON.stringify(w));
    return (await runConformance(dir)).failures;
  };
  assert.deepEqual(await run(() => undefined), []);
  const codec = defaultCodec();
  // A MAC edited in the scheduler's own chain: the record still reads back, its MAC no longer recomputes.
  assert.deepEqual(
    (await run((w) => {
      const record = w.bases.single.records.audit[2] as [number, number, string | null, string];
      const decoded = codec.decode(Buffer.from(record[3], "hex")).record;
      decoded["mac"] = "hmac-sha256:" + "0".repeat(64);
      record[3] = codec.encode("AuditRecord.v2", decoded).toString("hex");
    })).map((f) => f.split(":")[0]),
    ["audit_walks.bases.single.audit[2].mac"],
  );
  // Bytes that are no record: refused in a garbage case, a failure anywhere else.
  const garbage = Buffer.from("not an audit record").toString("hex");
  assert.deepEqual(
    (await run((w) => {
      for (const k of w.cases) if (k.name === "garbage_in_place" || k.name === "mac_flipped") (k.audit as [number, number, string | null, string][])[0]![3] = garbage;
    })).map((f) => f.split(":")[0]),
    ["audit_walks.cases.mac_flipped.audit[0]"],
  );
  assert.deepEqual(
    (await run((w) => {
      const k = w.cases.find((x) => x.name === "garbage_appended") as { audit: unknown[] };
      k.audit.pop();
    })),
    ["audit_walks.cases.garbage_appended.no_audit_record: every record of a garbage case is an audit record"],
  );
});
