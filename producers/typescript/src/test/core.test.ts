import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Partitioners } from "kafkajs";

import { Codec, SCHEMA_DIR, crc64Avro, defaultCodec } from "../avro";
import * as c from "../canonical";
import { loadSettings, parseClientProperties } from "../config";
import { kafkaClientConfig } from "../emitter";
import { Ed25519Signer, loadProducer, resolveProducerId } from "../identity";
import { DuplicateKey, JsonFloat, parseJson } from "../json";
import { murmur2, partitionFor } from "../partitioning";

const REPO_SCHEMAS = join(__dirname, "..", "..", "..", "..", "schemas", "avro");

test("the shipped .avsc copies equal the repository's schemas/avro byte for byte", () => {
  const ours = readdirSync(SCHEMA_DIR).filter((f) => f.endsWith(".avsc")).sort();
  const repo = readdirSync(REPO_SCHEMAS).filter((f) => f.endsWith(".avsc")).sort();
  assert.deepEqual(ours, repo, "same schema files (copy them: cp ../../schemas/avro/*.avsc schemas/)");
  for (const file of repo) {
    assert.ok(readFileSync(join(SCHEMA_DIR, file)).equals(readFileSync(join(REPO_SCHEMAS, file))), `${file} differs from ../../schemas/avro/${file}`);
  }
});

test("canonical JSON: sorted by UTF-16 code units, RFC 8785 escapes, integers only", () => {
  assert.equal(c.canonicalJson({ b: 1, a: [true, null, "x"] }).toString(), '{"a":[true,null,"x"],"b":1}');
  // U+E000 sorts after U+1F600 (surrogates D83D...) in UTF-16 order, before it in code point order.
  assert.equal(c.canonicalJson({ "\ue000": 2, "\u{1F600}": 1, a: 3 }).toString(), '{"a":3,"\u{1F600}":1,"\ue000":2}');
  assert.equal(c.canonicalJson("\u0000\b\t\n\f\r\u001f\u007f\u2028\"\\/").toString(), '"\\u0000\\b\\t\\n\\f\\r\\u001f\u007f\u2028\\"\\\\/"');
  assert.equal(c.canonicalJson(-0).toString(), "0");
  assert.equal(c.canonicalJson(9007199254740991n).toString(), "9007199254740991");
  for (const bad of [1.5, NaN, Infinity, 2 ** 53, -(2 ** 53), 9007199254740992n, new JsonFloat("1.0"), "\ud800", { "\udc00": 1 }, undefined, Buffer.from("x"), new Map()]) {
    assert.throws(() => c.canonicalJson(bad), { code: "E_CANONICAL" }, `refuses ${String(bad)}`);
  }
  let deep: unknown = [];
  for (let i = 1; i < 64; i++) deep = [deep];
  assert.equal(c.canonicalJson(deep).length, 128);
  assert.throws(() => c.canonicalJson([deep]), /deeper than 64/);
  const cyclic: unknown[] = [];
  cyclic.push(cyclic);
  assert.throws(() => c.canonicalJson(cyclic), { code: "E_CANONICAL" });
});

test("the lossless JSON parser keeps 1.0 a float, big integers exact, __proto__ as data, and can refuse repeated keys", () => {
  const value = parseJson('{"a": 1.0, "b": 12345678901234567890, "c": -3, "__proto__": {"x": 1}}') as Record<string, unknown>;
  assert.ok(value["a"] instanceof JsonFloat);
  assert.equal(value["b"], 12345678901234567890n);
  assert.equal(value["c"], -3);
  assert.deepEqual(Object.keys(value), ["a", "b", "c", "__proto__"]);
  assert.equal(Object.getPrototypeOf(value), Object.prototype);
  assert.deepEqual(parseJson('{"k": 1, "k": 2}'), { k: 2 });
  assert.throws(() => parseJson('{"k": 1, "k": 2}', { uniqueKeys: true }), DuplicateKey);
  for (const bad of ["", "[1,]", "{'a': 1}", "NaN", "01", '"\\x"', "[1] 2", '"a\nb"']) {
    assert.throws(() => parseJson(bad), { code: "E_JSON_SYNTAX" }, bad);
  }
});

test("digests, evidence set hash and PAE", () => {
  assert.equal(c.sha256Digest(Buffer.from("")), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const alpha = c.contentHash(Buffer.from("alpha"));
  const beta = c.contentHash(Buffer.from("beta"));
  assert.equal(c.evidenceSetHash([beta, alpha, beta]), c.evidenceSetHash([alpha, beta]));
  assert.equal(c.evidenceSetHash([]), c.sha256Digest(Buffer.from("[]")));
  assert.throws(() => c.evidenceSetHash(["sha256:ABC"]), { code: "E_MALFORMED_DIGEST" });
  assert.equal(c.pae("t", Buffer.from("hello")).toString(), "DSSEv1 1 t 5 hello");
  assert.equal(c.pae("é", Buffer.alloc(0)).toString(), "DSSEv1 2 é 0 ");
});

test("CRC-64-AVRO: the empty input gives the initial value, and every shipped schema has a distinct fingerprint", () => {
  assert.equal(crc64Avro(Buffer.alloc(0)).toString("hex"), Buffer.from("95a7d7a43a215dc1", "hex").toString("hex"));
  const codec = defaultCodec();
  assert.equal(new Set(codec.schemas.map((s) => s.fingerprint.toString("hex"))).size, codec.schemas.length);
});

test("Avro: round trip, and every malformed value is a typed DecodeError", () => {
  const codec = new Codec();
  const record = { payload: Buffer.from("c301", "hex"), entry_hash: c.sha256Digest(Buffer.from("x")) };
  const bytes = codec.encode("JournalRecord.v1", record);
  assert.equal(bytes.subarray(0, 2).toString("hex"), "c301");
  assert.deepEqual(codec.decode(bytes).record, record);
  assert.throws(() => codec.decode(Buffer.from("not avro")), { code: "NOT_AVRO_SINGLE_OBJECT" });
  assert.throws(() => codec.decode(Buffer.from("c3010000000000000000aa", "hex")), { code: "UNKNOWN_SCHEMA_FINGERPRINT" });
  assert.throws(() => codec.decode(bytes.subarray(0, bytes.length - 3)), { code: "TRUNCATED_OR_MALFORMED_BODY" });
  assert.throws(() => codec.decode(Buffer.concat([bytes, Buffer.from([0])])), { code: "TRUNCATED_OR_MALFORMED_BODY" });
  assert.throws(() => codec.decode(bytes, new Set(["RunClose.v2"])), { code: "UNKNOWN_SCHEMA_FINGERPRINT" });
  assert.throws(() => codec.encode("JournalRecord.v1", { payload: "not bytes", entry_hash: "x" }), { code: "E_ENCODE" });
  assert.throws(() => codec.encode("Nope.v1", {}), { code: "E_ENCODE" });
});

test("murmur2 is the Java client's (Kafka's UtilsTest values) and kafkajs' DefaultPartitioner agrees", () => {
  const java: [string, number][] = [
    ["21", -973932308],
    ["foobar", -790332482],
    ["a-little-bit-long-string", -985981536],
    ["a-little-bit-longer-string", -1486304829],
    ["lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971],
    ["abc", 479470107],
  ];
  for (const [key, expected] of java) assert.equal(murmur2(Buffer.from(key)), expected, key);
  const kafkajs = Partitioners.DefaultPartitioner();
  for (const n of [1, 2, 3, 4, 6, 12, 100]) {
    const partitionMetadata = Array.from({ length: n }, (_, p) => ({ partitionId: p, leader: 0, partitionErrorCode: 0, replicas: [0], isr: [0] }));
    for (let i = 0; i < 500; i++) {
      const key = Buffer.from(`run-${i}${"é".repeat(i % 3)}${"x".repeat(i % 9)}`);
      assert.equal(kafkajs({ topic: "t", partitionMetadata, message: { key, value: null } }), partitionFor(key, n));
    }
  }
  assert.throws(() => partitionFor(Buffer.from("k"), 0), RangeError);
});

function producerDir(name = "ts-test"): { dir: string; signer: Ed25519Signer } {
  const dir = mkdtempSync(join(tmpdir(), "ts-keys-"));
  const { privateKey } = generateKeyPairSync("ed25519");
  const pem = privateKey.export({ format: "pem", type: "pkcs8" });
  writeFileSync(join(dir, "producer.ed25519.key"), pem);
  const signer = Ed25519Signer.fromPem(pem);
  const ring = {
    format: "bernstein.keyring/v1",
    keys: [{ key_id: signer.keyId, purpose: "producer", file: "producer.ed25519.key", status: "active" }],
    producer: name,
  };
  writeFileSync(join(dir, "keyring.json"), JSON.stringify(ring));
  return { dir, signer };
}

test("a producer key directory: its name and current key; every problem typed", () => {
  const { dir, signer } = producerDir("agents@ts");
  const producer = loadProducer(dir);
  assert.equal(producer.name, "agents@ts");
  assert.equal(producer.signer.keyId, signer.keyId);
  assert.equal(resolveProducerId(producer, "agents@ts"), "agents@ts");
  assert.throws(() => resolveProducerId(producer, "other"), { code: "E_PRODUCER_ID" });
  assert.throws(() => loadProducer(join(dir, "missing")), { code: "E_PRODUCER_KEYS", message: /bernstein keys init --producer/ });
  const ring = JSON.parse(readFileSync(join(dir, "keyring.json"), "utf8")) as Record<string, unknown>;
  delete ring["producer"];
  writeFileSync(join(dir, "keyring.json"), JSON.stringify(ring));
  assert.throws(() => loadProducer(dir), { code: "E_PRODUCER_KEYS", message: /scheduler's keys/ });
  writeFileSync(join(dir, "keyring.json"), JSON.stringify({ ...ring, producer: "p", keys: [{ key_id: "sha256:" + "0".repeat(64), purpose: "producer", file: "producer.ed25519.key" }] }));
  assert.throws(() => loadProducer(dir), { code: "E_PRODUCER_KEYS", message: /names it/ });
  const seeded = Ed25519Signer.fromSeed(Buffer.alloc(32, 7));
  assert.ok(seeded.verify(Buffer.from("m"), seeded.sign(Buffer.from("m"))));
  assert.deepEqual(seeded.sign(Buffer.from("m")), seeded.sign(Buffer.from("m")), "Ed25519 is deterministic");
});

test("client properties: substrate/kafka.py's allow-list and checks; kafkajs options from them", () => {
  const props = parseClientProperties(
    "# comment\nsecurity.protocol=sasl_ssl\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=producer\nsasl.password=s3cret\nssl.ca.location=ca.pem\n",
    "p.properties",
    "/etc/x",
  );
  assert.deepEqual(props, {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "producer",
    "sasl.password": "s3cret",
    "ssl.ca.location": "/etc/x/ca.pem",
  });
  assert.throws(() => parseClientProperties("acks=all\n", "p"), { code: "E_KAFKA_CONFIG", message: /p:1: unknown key 'acks'/ });
  assert.throws(() => parseClientProperties("sasl.username=a\nsasl.username=b\n", "p"), /set twice/);
  assert.throws(() => parseClientProperties("sasl.username=a\nsasl.password=b\n", "p"), /need security.protocol SASL_SSL/);
  assert.throws(() => parseClientProperties("security.protocol=SASL_SSL\nsasl.username=a\n", "p"), /sasl.password is not/);
  assert.throws(() => parseClientProperties("security.protocol=TLS\n", "p"), /must be one of/);
  assert.throws(() => parseClientProperties("security.protocol=SSL\nsasl.password=hunter2\n", "p"), (e: Error) => !e.message.includes("hunter2"));
  const config = kafkaClientConfig("h1:9093, h2:9093", {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "u",
    "sasl.password": "p",
  });
  assert.deepEqual(config.brokers, ["h1:9093", "h2:9093"]);
  assert.deepEqual(config.sasl, { mechanism: "scram-sha-512", username: "u", password: "p" });
  assert.equal(config.ssl, undefined);
  assert.throws(() => kafkaClientConfig("h:1", { "security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI" }), { code: "E_KAFKA_CONFIG" });
  assert.throws(() => kafkaClientConfig("h:1", { "security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem" }), /ENOENT/);
  assert.throws(() => kafkaClientConfig(" , ", {}), { code: "E_NO_BOOTSTRAP" });
});

test("settings come from the environment with the Python SDK's defaults", () => {
  const none = loadSettings({});
  assert.equal(none.kafkaBootstrap, undefined);
  assert.equal(none.s3, undefined);
  assert.equal(none.topics.submissions, "bernstein.activity.submissions");
  assert.deepEqual(none.kafkaSecurity, {});
  const some = loadSettings({ BERNSTEIN_S3_ENDPOINT: "http://h:9000", BERNSTEIN_TOPIC_PREFIX: "p1", BERNSTEIN_KAFKA_BOOTSTRAP: "k:1", BERNSTEIN_PRODUCER_KEYS_DIR: "/keys" });
  assert.deepEqual(some.s3, { endpoint: "http://h:9000", accessKey: "bernstein", secretKey: "bernstein-secret-key", bucket: "bernstein-cas", region: "us-east-1" });
  assert.equal(some.topics.submissions, "p1.activity.submissions");
  assert.equal(some.kafkaBootstrap, "k:1");
  assert.equal(some.producerKeysDir, "/keys");
  assert.throws(() => loadSettings({ BERNSTEIN_KAFKA_CONFIG_FILE: "/nonexistent.properties" }), { code: "E_KAFKA_CONFIG", message: /ENOENT/ });
});
