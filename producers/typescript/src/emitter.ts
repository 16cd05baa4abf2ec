/**
 * The emitter: store the evidence, then publish one signed Avro submission (as
 * `producers/emitter.py`).
 *
 * Order is enforced: the artifact bytes and every observation's bytes are in the CAS before the
 * submission that names them is produced. Publishing uses an idempotent kafkajs producer (acks -1
 * = all, one request in flight) keyed by run id and partitioned by Kafka's murmur2
 * (`Partitioners.DefaultPartitioner`, the Java client's rule the scheduler checks), and waits for
 * the broker's acknowledgement. Every submission is an `ActivitySubmission.v3` (or a
 * `RunClose.v2`) signed with the producer's Ed25519 key.
 *
 * Retries reuse the submission: when an acknowledgement does not come, the very same bytes are
 * produced again (same submission_id, same occurred_at_ms, and, Ed25519 being deterministic, the
 * same signature); the scheduler journals a submission_id once (DUPLICATE_SUBMISSION otherwise).
 */

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import type { ConnectionOptions } from "node:tls";

import { Kafka, KafkaConfig, Partitioners, Producer, SASLOptions, logLevel } from "kafkajs";

import { ActivityResult, requireValidIds } from "./activity";
import { ACTIVITY_SUBMISSION_V3, Codec, RUN_CLOSE_V2, defaultCodec } from "./avro";
import { runCloseStatement, submissionSigningInput, submissionStatement } from "./canonical";
import { BlobStore, S3BlobStore } from "./cas";
import { Settings, Topics, loadSettings, requireBootstrap } from "./config";
import {
  ActivityRejected,
  BernsteinError,
  CasError,
  ConfigError,
  EmitError,
  EvidenceNotStored,
  KafkaConfigError,
  KafkaNotAuthorized,
  PublishFailed,
  TopicMissing,
} from "./errors";
import { Ed25519Signer, SigningProducer, loadProducer, resolveProducerId } from "./identity";
import { isValidId } from "./records";

export const SDK = "bernstein-typescript/0.1.0";

/** Where a submission landed. */
export interface Published {
  submissionId: string;
  runId: string;
  topic: string;
  partition: number;
  offset: number;
  value: Buffer;
}

export interface SubmissionOptions {
  runId: string;
  stageId: string;
  role: string;
  result: ActivityResult;
  /** Default: a fresh uuid4 (hex, no dashes). */
  submissionId?: string;
  /** Default: now. */
  occurredAtMs?: number;
  /** TESTING ONLY: publish this artifact_hash instead of the computed one (the scheduler refuses it). */
  artifactHashOverride?: string;
}

/** The ActivitySubmission.v3 record of `result`, signed with `signer` (no I/O). */
export function signedSubmissionRecord(
  options: SubmissionOptions & { producerId: string; signer: Ed25519Signer; sdk?: string },
): Record<string, unknown> {
  const { result } = options;
  const record: Record<string, unknown> & Parameters<typeof submissionStatement>[0] = {
    submission_id: options.submissionId ?? newSubmissionId(),
    run_id: options.runId,
    stage_id: options.stageId,
    role: options.role,
    producer: { id: options.producerId, sdk: options.sdk ?? SDK },
    kind: result.kind,
    artifact: result.artifact,
    artifact_hash: options.artifactHashOverride ?? result.artifact_hash,
    evidence_set_hash: result.evidence_set_hash,
    observations: result.observations.map((o) => ({ kind: o.kind, ref: o.ref, content_hash: o.content_hash, size: o.size })),
    terminal_state: result.terminal_state,
    reason_code: result.reason_code,
    occurred_at_ms: options.occurredAtMs ?? Date.now(),
  };
  const statement = submissionStatement(record, options.signer.keyId);
  return {
    ...record,
    producer_key_id: options.signer.keyId,
    producer_signature: options.signer.sign(submissionSigningInput(statement)),
  };
}

/** The RunClose.v2 record: the close signed over its run-close statement (no I/O). */
export function signedCloseRecord(options: {
  runId: string;
  producerId: string;
  signer: Ed25519Signer;
  submissionId?: string;
  occurredAtMs?: number;
  sdk?: string;
}): Record<string, unknown> {
  const submissionId = options.submissionId ?? newSubmissionId();
  const occurredAtMs = options.occurredAtMs ?? Date.now();
  const statement = runCloseStatement(submissionId, options.runId, options.producerId, occurredAtMs, options.signer.keyId);
  return {
    submission_id: submissionId,
    run_id: options.runId,
    producer: { id: options.producerId, sdk: options.sdk ?? SDK },
    occurred_at_ms: occurredAtMs,
    producer_key_id: options.signer.keyId,
    producer_signature: options.signer.sign(submissionSigningInput(statement)),
  };
}

export function newSubmissionId(): string {
  return randomUUID().replace(/-/g, "");
}

/**
 * kafkajs client options from the bootstrap and the checked properties (docs/producing.md,
 * "Kafka and S3 settings").
 */
export function kafkaClientConfig(bootstrap: string | undefined, security: Record<string, string>): KafkaConfig {
  const brokers = requireBootstrap(bootstrap);
  const protocol = security["security.protocol"] ?? "PLAINTEXT";
  const config: KafkaConfig = {
    clientId: "bernstein-ts",
    brokers,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 4, initialRetryTime: 250, maxRetryTime: 3000 },
    // kafkajs' own log lines (every failed connection attempt) are opt-in: our errors say what
    // went wrong. BERNSTEIN_DEBUG=1 shows them, as it shows librdkafka's in the Python SDK.
    logLevel: process.env["BERNSTEIN_DEBUG"] ? logLevel.DEBUG : logLevel.NOTHING,
  };
  if (protocol === "SSL" || protocol === "SASL_SSL") {
    const tls: ConnectionOptions = {};
    const read = (key: string): Buffer => {
      const path = security[key] as string;
      try {
        return readFileSync(path);
      } catch (exc) {
        throw new KafkaConfigError(`cannot read ${key} ${path}: ${(exc as NodeJS.ErrnoException).code ?? "unreadable"}`);
      }
    };
    if (security["ssl.ca.location"] !== undefined) tls.ca = [read("ssl.ca.location")];
    if (security["ssl.certificate.location"] !== undefined) tls.cert = read("ssl.certificate.location");
    if (security["ssl.key.location"] !== undefined) tls.key = read("ssl.key.location");
    if (security["ssl.key.password"] !== undefined) tls.passphrase = security["ssl.key.password"];
    if (security["ssl.endpoint.identification.algorithm"] === "none") tls.checkServerIdentity = () => undefined;
    config.ssl = tls;
  }
  if (protocol === "SASL_SSL" || protocol === "SASL_PLAINTEXT") {
    const mechanism = security["sasl.mechanism"] ?? security["sasl.mechanisms"] ?? "PLAIN";
    const username = security["sasl.username"] ?? "";
    const password = security["sasl.password"] ?? "";
    const sasl: Record<string, SASLOptions> = {
      PLAIN: { mechanism: "plain", username, password },
      "SCRAM-SHA-256": { mechanism: "scram-sha-256", username, password },
      "SCRAM-SHA-512": { mechanism: "scram-sha-512", username, password },
    };
    const chosen = sasl[mechanism];
    if (chosen === undefined) {
      throw new KafkaConfigError(`sasl.mechanism ${mechanism} is not supported by the TypeScript SDK (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)`);
    }
    config.sasl = chosen;
  }
  return config;
}

export interface EmitterOptions {
  settings?: Settings;
  /** Default: the keys of `keysDir` or $BERNSTEIN_PRODUCER_KEYS_DIR. */
  producer?: SigningProducer;
  keysDir?: string;
  /** Must equal the key ring's name when given. */
  producerId?: string;
  store?: BlobStore;
  codec?: Codec;
  /** How often the same bytes are produced again when not acknowledged (default 2). */
  retries?: number;
  /** Acknowledgement timeout per attempt in ms (default 30000). */
  ackTimeoutMs?: number;
}

/** Publishes activity submissions for one producer identity, each signed with its producer key. */
export class Emitter {
  readonly producerId: string;
  readonly signer: Ed25519Signer;
  /** The whole producer identity (its lineage and redaction keys record computer-use actions). */
  readonly identity: SigningProducer;
  readonly store: BlobStore;
  readonly topics: Topics;
  private readonly kafka: Kafka;
  private readonly codec: Codec;
  private readonly retries: number;
  private readonly ackTimeoutMs: number;
  private producer: Producer | undefined;
  private topicChecked = false;

  constructor(options: EmitterOptions = {}) {
    const settings = options.settings ?? loadSettings();
    const producer = options.producer ?? loadProducer(options.keysDir ?? settings.producerKeysDir);
    this.producerId = resolveProducerId(producer, options.producerId);
    this.signer = producer.signer;
    this.identity = producer;
    if (options.store !== undefined) this.store = options.store;
    else if (settings.s3 !== undefined) this.store = new S3BlobStore(settings.s3);
    else throw new ConfigError("no S3 endpoint: set BERNSTEIN_S3_ENDPOINT (http://host:port)", "E_NO_S3");
    this.topics = settings.topics;
    this.kafka = new Kafka(kafkaClientConfig(settings.kafkaBootstrap, settings.kafkaSecurity));
    this.codec = options.codec ?? defaultCodec();
    this.retries = options.retries ?? 2;
    this.ackTimeoutMs = options.ackTimeoutMs ?? 30000;
  }

  /** The encoded, signed ActivitySubmission.v3 (without publishing): its id and value bytes. */
  submissionValue(options: SubmissionOptions): { submissionId: string; value: Buffer } {
    requireValidIds(["run_id", options.runId], ["stage_id", options.stageId], ["role", options.role]);
    const submissionId = options.submissionId ?? newSubmissionId();
    const occurredAtMs = options.occurredAtMs ?? Date.now();
    const record = signedSubmissionRecord({
      ...options,
      submissionId,
      occurredAtMs,
      producerId: this.producerId,
      signer: this.signer,
    });
    return { submissionId, value: this.codec.encode(ACTIVITY_SUBMISSION_V3, record) };
  }

  /** Store the artifact and every observation's bytes, check every observation is stored, publish, wait for the ack. */
  async publish(options: SubmissionOptions): Promise<Published> {
    const { submissionId, value } = this.submissionValue(options);
    await this.storeEvidence(options.result);
    return this.produce(options.runId, submissionId, value);
  }

  /** Publish again exactly what `failed` did not get acknowledged (same bytes, same submission_id). */
  async retry(failed: PublishFailed): Promise<Published> {
    if (failed.value.length === 0 || failed.runId === "") {
      throw new EmitError("this PublishFailed carries nothing to retry (it was not raised by a publish)");
    }
    return this.produce(failed.runId, failed.submissionId, failed.value);
  }

  /** Ask the scheduler to seal the run for good (a signed RunClose.v2). */
  async closeRun(runId: string, options: { submissionId?: string; occurredAtMs?: number } = {}): Promise<Published> {
    if (!isValidId(runId)) throw new ActivityRejected(`run_id ${JSON.stringify(runId)} is not a valid id`, "INVALID_RUN_ID");
    const submissionId = options.submissionId ?? newSubmissionId();
    const record = signedCloseRecord({
      runId,
      producerId: this.producerId,
      signer: this.signer,
      submissionId,
      occurredAtMs: options.occurredAtMs ?? Date.now(),
    });
    return this.produce(runId, submissionId, this.codec.encode(RUN_CLOSE_V2, record));
  }

  /** Store blobs in the CAS now (bytes a record names, before it is published). */
  async storeBlobs(...blobs: Uint8Array[]): Promise<void> {
    try {
      for (const data of blobs) await this.store.put(Buffer.from(data));
    } catch (exc) {
      if (exc instanceof CasError) throw new EmitError(`cannot store blobs before publishing: ${exc.message}`, exc.code);
      throw exc;
    }
  }

  /** Publish pre-encoded bytes as they are (tests and tools that send malformed input). */
  async publishRaw(runId: string, value: Buffer, submissionId = ""): Promise<Published> {
    return this.produce(runId, submissionId, value);
  }

  async close(): Promise<void> {
    const producer = this.producer;
    this.producer = undefined;
    if (producer !== undefined) await producer.disconnect().catch(() => undefined);
  }

  /** Blobs first: the artifact and every blob the result carries, then a presence check of the rest. */
  async storeEvidence(result: ActivityResult): Promise<void> {
    try {
      await this.store.put(result.artifact);
      for (const data of result.blobs.values()) await this.store.put(data);
      for (const o of result.observations) {
        if (!result.blobs.has(o.content_hash) && !(await this.store.holds(o.content_hash))) {
          throw new EvidenceNotStored(
            `observation ${JSON.stringify(o.ref)} (${o.content_hash}) is not in the CAS; build it with observe(kind, ref, bytes) or store its bytes before publishing`,
          );
        }
      }
    } catch (exc) {
      if (exc instanceof EvidenceNotStored) throw exc;
      if (exc instanceof CasError) throw new EmitError(`cannot store evidence before publishing: ${exc.message}`, exc.code);
      throw exc;
    }
  }

  private async produce(runId: string, submissionId: string, value: Buffer): Promise<Published> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.produceOnce(runId, submissionId, value);
      } catch (exc) {
        if (!(exc instanceof PublishFailed) || !exc.retriable || attempt >= this.retries) throw exc;
      }
    }
  }

  private async connect(): Promise<Producer> {
    if (!this.topicChecked) {
      await this.checkTopic();
      this.topicChecked = true;
    }
    if (this.producer === undefined) {
      const producer = this.kafka.producer({
        idempotent: true,
        maxInFlightRequests: 1,
        allowAutoTopicCreation: false,
        // Kafka's murmur2 over the key (the run id), as the Java client: named explicitly, which is
        // also what keeps kafkajs from warning that its default changed in 2.0.
        createPartitioner: Partitioners.DefaultPartitioner,
        retry: { retries: 5, initialRetryTime: 250, maxRetryTime: 3000 },
      });
      try {
        await producer.connect();
      } catch (exc) {
        throw translateKafka(exc, `cannot connect to Kafka as a producer`);
      }
      this.producer = producer;
    }
    return this.producer;
  }

  /** A missing submissions topic is a typed error (producers never create topics). */
  private async checkTopic(): Promise<void> {
    const admin = this.kafka.admin();
    const topic = this.topics.submissions;
    try {
      await admin.connect();
      await admin.fetchTopicMetadata({ topics: [topic] });
    } catch (exc) {
      const type = (exc as { type?: unknown }).type;
      if (type === "UNKNOWN_TOPIC_OR_PARTITION") {
        throw new TopicMissing(
          `topic ${topic} does not exist; producers never create topics: the admin creates them (\`bernstein topic create\`)`,
        );
      }
      throw translateKafka(exc, `cannot describe topic ${topic}`);
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  }

  private async produceOnce(runId: string, submissionId: string, value: Buffer): Promise<Published> {
    const producer = await this.connect();
    const topic = this.topics.submissions;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new PublishFailed(
              `submission ${JSON.stringify(submissionId)} for run ${JSON.stringify(runId)} was not acknowledged within ${Math.round(this.ackTimeoutMs / 1000)}s (is Kafka reachable?); it may still be delivered: Emitter.retry(error) publishes the same submission_id, which is journalled once`,
              { runId, submissionId, value, retriable: true },
            ),
          ),
        this.ackTimeoutMs,
      );
    });
    try {
      const sent = await Promise.race([
        producer.send({ topic, acks: -1, timeout: this.ackTimeoutMs, messages: [{ key: Buffer.from(runId, "utf8"), value }] }),
        timeout,
      ]);
      const meta = sent[0];
      if (meta === undefined || meta.baseOffset === undefined) {
        throw new PublishFailed(`broker returned no offset for run ${JSON.stringify(runId)}`, { runId, submissionId, value });
      }
      return { submissionId, runId, topic: meta.topicName, partition: meta.partition, offset: Number(meta.baseOffset), value };
    } catch (exc) {
      if (exc instanceof BernsteinError) throw withRetry(exc, runId, submissionId, value);
      throw withRetry(translateKafka(exc, `broker refused submission for run ${JSON.stringify(runId)}`), runId, submissionId, value);
    } finally {
      clearTimeout(timer);
    }
  }
}

function withRetry(exc: BernsteinError, runId: string, submissionId: string, value: Buffer): BernsteinError {
  if (exc instanceof PublishFailed || exc instanceof KafkaNotAuthorized || exc instanceof TopicMissing) {
    if (exc instanceof PublishFailed && exc.value.length === 0) {
      return new PublishFailed(exc.message, { runId, submissionId, value, retriable: exc.retriable });
    }
    return exc;
  }
  return exc;
}

const AUTH_TYPES = new Set([
  "TOPIC_AUTHORIZATION_FAILED",
  "CLUSTER_AUTHORIZATION_FAILED",
  "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
  "SASL_AUTHENTICATION_FAILED",
  "ILLEGAL_SASL_STATE",
  "UNSUPPORTED_SASL_MECHANISM",
]);

/** kafkajs errors as typed SDK errors (what they mean, never a stack). */
export function translateKafka(exc: unknown, action: string): BernsteinError {
  if (exc instanceof BernsteinError) return exc;
  const chain: { name?: string; type?: string; message?: string; retriable?: boolean; cause?: unknown; originalError?: unknown }[] = [];
  let current: unknown = exc;
  for (let i = 0; i < 5 && current !== null && typeof current === "object"; i++) {
    const e = current as (typeof chain)[number];
    chain.push(e);
    current = e.originalError ?? e.cause;
  }
  const messages = chain.map((e) => e.message ?? "").filter((m) => m !== "");
  const detail = [...new Set(messages)].join(": ");
  if (chain.some((e) => (e.type !== undefined && AUTH_TYPES.has(e.type)) || e.name === "KafkaJSSASLAuthenticationError")) {
    return new KafkaNotAuthorized(
      `${action}: not authorized (${detail}); the producer's principal needs Write and Describe on the submissions topic (\`bernstein kafka acls\`) and a valid login (BERNSTEIN_KAFKA_CONFIG_FILE)`,
    );
  }
  const retriable = chain.some((e) => e.retriable === true) || chain.some((e) => e.name === "KafkaJSNumberOfRetriesExceeded");
  return new PublishFailed(`${action}: ${detail || String(exc)}; is Kafka reachable at BERNSTEIN_KAFKA_BOOTSTRAP, and does BERNSTEIN_KAFKA_CONFIG_FILE match its listener?`, { retriable });
}
