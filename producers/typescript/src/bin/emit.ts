#!/usr/bin/env node
/**
 * bernstein-ts-emit: publish activities described as JSON lines on stdin (the format of
 * `bernstein submit`: docs/producing.md, "Vectors, SDKs and tools").
 *
 * For each non-blank line, in order: check the description and sign it with the producer key
 * ($BERNSTEIN_PRODUCER_KEYS_DIR), store every blob it names in S3 (the observations' bytes and the
 * artifact), produce the ActivitySubmission.v3 or RunClose.v2 (idempotent, acks=all, keyed and
 * murmur2-partitioned by the run id), wait for the acknowledgement and print one JSON line
 * {"run_id", "submission_id", "topic", "partition", "offset"}. The first failing line stops the
 * command: lines before it were published and printed; nothing of the failing line was published.
 *
 * Exit codes: 0 every line published; 2 a bad description (line and field named) or unusable
 * producer keys; 3 Kafka or S3 unavailable, misconfigured or refusing (not authorized, topic
 * missing, not acknowledged). Errors are one line on stderr, never a stack trace.
 * Configuration: the environment (docs/producing.md, "Kafka and S3 settings"; see README.md).
 */


import { Emitter, Published, newSubmissionId } from "../emitter";
import { DescriptionError, checkClose, parseDescription, stageResult } from "../description";
import { ActivityRejected, BernsteinError, ProducerKeysError } from "../errors";
import { SigningProducer, defaultProducerKeysDir, loadProducer } from "../identity";

const EXIT_PUBLISHED = 0;
const EXIT_BAD_DESCRIPTION = 2;
const EXIT_UNAVAILABLE = 3;
const USAGE = `usage: bernstein-ts-emit [--timeout SECONDS] < descriptions.jsonl

Publish one activity per JSON line on stdin (a stage or {"close_run": RUN_ID}); print where each landed.
Environment: BERNSTEIN_KAFKA_BOOTSTRAP, BERNSTEIN_KAFKA_CONFIG_FILE, BERNSTEIN_TOPIC_PREFIX,
BERNSTEIN_S3_ENDPOINT, BERNSTEIN_S3_ACCESS_KEY, BERNSTEIN_S3_SECRET_KEY, BERNSTEIN_S3_BUCKET,
BERNSTEIN_PRODUCER_KEYS_DIR. --timeout: wait at most this long for each acknowledgement (default 30).
Exit 0 published, 2 bad description or producer keys, 3 Kafka/S3 unavailable or refusing (or bad flags).
`;

function fail(message: string, code: number): number {
  process.stderr.write(`bernstein-ts-emit: error: ${message}\n`);
  return code;
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/** stdin's lines as they arrive (a producer may stream them), decoded strictly: undefined for a line that is not UTF-8. */
async function* stdinLines(): AsyncGenerator<string | undefined> {
  let pending: Buffer = Buffer.alloc(0);
  const decode = (bytes: Buffer): string | undefined => {
    const line = bytes.length > 0 && bytes[bytes.length - 1] === 0x0d ? bytes.subarray(0, bytes.length - 1) : bytes;
    try {
      return UTF8.decode(line);
    } catch {
      return undefined;
    }
  };
  for await (const chunk of process.stdin as AsyncIterable<Buffer>) {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    let newline: number;
    while ((newline = pending.indexOf(0x0a)) >= 0) {
      yield decode(pending.subarray(0, newline));
      pending = pending.subarray(newline + 1);
    }
  }
  if (pending.length > 0) yield decode(pending);
}

async function main(argv: string[]): Promise<number> {
  if (argv.includes("-h") || argv.includes("--help")) {
    process.stdout.write(USAGE);
    return EXIT_PUBLISHED;
  }
  let ackTimeoutMs = 30000;
  const args = [...argv];
  while (args.length > 0) {
    const arg = args.shift() as string;
    const value = arg === "--timeout" ? args.shift() : arg.startsWith("--timeout=") ? arg.slice("--timeout=".length) : undefined;
    const seconds = Number(value);
    if (value === undefined || value.trim() === "" || !Number.isFinite(seconds) || seconds <= 0) {
      // As for `bernstein submit` (and every bernstein command), flags that do not parse exit 3.
      return fail(
        value === undefined && arg !== "--timeout" ? `unexpected argument ${JSON.stringify(arg)} (descriptions come on stdin; see --help)` : `--timeout needs a positive number of seconds`,
        EXIT_UNAVAILABLE,
      );
    }
    ackTimeoutMs = Math.round(seconds * 1000);
  }
  let producer: SigningProducer;
  try {
    producer = loadProducer(defaultProducerKeysDir());
  } catch (exc) {
    if (exc instanceof BernsteinError) return fail(exc.message, EXIT_BAD_DESCRIPTION);
    throw exc;
  }
  let emitter: Emitter | undefined;
  let number = 0;
  try {
    for await (const line of stdinLines()) {
      number++;
      if (line === undefined) return fail(`stdin is not UTF-8 text (line ${number})`, EXIT_BAD_DESCRIPTION);
      const text = line;
      if (text.trim() === "") continue;
      let description;
      let result;
      try {
        description = parseDescription(text, number);
        result = description.type === "stage" ? stageResult(description) : undefined;
        if (description.type === "close") checkClose(description);
      } catch (exc) {
        if (exc instanceof DescriptionError) return fail(exc.message, EXIT_BAD_DESCRIPTION);
        throw exc;
      }
      let published: Published;
      try {
        emitter ??= new Emitter({ producer, ackTimeoutMs });
        if (description.type === "close") {
          published = await emitter.closeRun(description.runId, { submissionId: description.submissionId || newSubmissionId() });
        } else {
          published = await emitter.publish({
            runId: description.runId,
            stageId: description.stageId,
            role: description.role,
            result: result!,
            submissionId: description.submissionId || newSubmissionId(),
            ...(description.occurredAtMs !== undefined ? { occurredAtMs: description.occurredAtMs } : {}),
          });
        }
      } catch (exc) {
        if (exc instanceof ProducerKeysError || exc instanceof ActivityRejected) return fail(`line ${number}: ${exc.message}`, EXIT_BAD_DESCRIPTION);
        if (exc instanceof BernsteinError) {
          return fail(`line ${number}: nothing published for this line: ${exc.message}`, EXIT_UNAVAILABLE);
        }
        throw exc;
      }
      process.stdout.write(
        JSON.stringify({
          run_id: published.runId,
          submission_id: published.submissionId,
          topic: published.topic,
          partition: published.partition,
          offset: published.offset,
        }) + "\n",
      );
    }
  } finally {
    if (emitter !== undefined) await emitter.close();
  }
  return EXIT_PUBLISHED;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (exc: unknown) => {
    // Not a user mistake: an SDK bug. Still one line, no stack unless BERNSTEIN_DEBUG.
    const detail = process.env["BERNSTEIN_DEBUG"] ? String((exc as Error).stack ?? exc) : String((exc as Error).message ?? exc);
    process.stderr.write(`bernstein-ts-emit: internal error: ${detail}\n`);
    process.exitCode = 1;
  },
);
