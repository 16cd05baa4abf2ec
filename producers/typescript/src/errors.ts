/**
 * Typed errors: every failure a caller can act on is a subclass of `BernsteinError` with a
 * stable `code` (the same codes as the Python SDK where both have the error). Library errors
 * (avsc, kafkajs, minio, node:crypto) never escape the SDK untranslated.
 */

export class BernsteinError extends Error {
  /** A stable, machine-readable code. */
  readonly code: string;

  constructor(message: string, code = "E_BERNSTEIN") {
    super(message);
    this.code = code;
    this.name = new.target.name;
  }
}

/** A value with no RFC 8785 canonical JSON form (a float, an unsafe integer, a lone surrogate, ...). */
export class CanonicalizationError extends BernsteinError {
  constructor(message: string) {
    super(message, "E_CANONICAL");
  }
}

/** A string that is not `sha256:` plus 64 lowercase hex digits. */
export class MalformedDigest extends BernsteinError {
  constructor(value: unknown, field = "digest") {
    super(`${field} ${JSON.stringify(String(value))} is not 'sha256:<64 lowercase hex>'`, "E_MALFORMED_DIGEST");
  }
}

/** A record that does not fit its schema (a programming error in the caller). */
export class EncodeError extends BernsteinError {
  constructor(message: string) {
    super(message, "E_ENCODE");
  }
}

/** Wire bytes that are not a record of one of our schemas. */
export class DecodeError extends BernsteinError {
  constructor(message: string, code = "E_DECODE") {
    super(message, code);
  }
}

export class NotSingleObjectEncoded extends DecodeError {
  constructor(message: string) {
    super(message, "NOT_AVRO_SINGLE_OBJECT");
  }
}

export class UnknownFingerprint extends DecodeError {
  readonly fingerprintHex: string;

  constructor(message: string, fingerprintHex: string) {
    super(message, "UNKNOWN_SCHEMA_FINGERPRINT");
    this.fingerprintHex = fingerprintHex;
  }
}

export class TruncatedRecord extends DecodeError {
  constructor(message: string) {
    super(message, "TRUNCATED_OR_MALFORMED_BODY");
  }
}

/**
 * A result that may not cross the activity boundary, refused before anything is published.
 * `code` is one of the scheduler's refusal codes (INVALID_RUN_ID, ARTIFACT_TOO_LARGE, ...) or a
 * modality's own (UNCITED_CLAIM, EFFECT_BEFORE_PLAN, ...); `evidence` says what was found.
 */
export class ActivityRejected extends BernsteinError {
  readonly evidence: Record<string, string>;

  constructor(message: string, code = "ACTIVITY_REJECTED", evidence: Record<string, string> = {}) {
    super(message, code);
    this.evidence = { ...evidence };
  }
}

/** The artifact exceeds the inline bound the scheduler accepts. */
export class ArtifactTooLarge extends ActivityRejected {
  constructor(message: string, evidence: Record<string, string>) {
    super(message, "ARTIFACT_TOO_LARGE", evidence);
  }
}

/** The SDK's configuration (environment, properties file) is unusable. Names keys, never secrets. */
export class ConfigError extends BernsteinError {
  constructor(message: string, code = "E_CONFIG") {
    super(message, code);
  }
}

/** The Kafka client properties file is unusable. */
export class KafkaConfigError extends ConfigError {
  constructor(message: string) {
    super(message, "E_KAFKA_CONFIG");
  }
}

/** The producer key directory is missing or unreadable. */
export class ProducerKeysError extends ConfigError {
  constructor(message: string) {
    super(message, "E_PRODUCER_KEYS");
  }
}

/** An explicit producer id that is not the name of the producer's key ring. */
export class ProducerIdMismatch extends BernsteinError {
  constructor(message: string) {
    super(message, "E_PRODUCER_ID");
  }
}

/** The blob store failed or could not be reached. */
export class CasError extends BernsteinError {
  constructor(message: string, code = "E_CAS") {
    super(message, code);
  }
}

export class CasUnavailable extends CasError {
  constructor(message: string) {
    super(message, "E_CAS_UNAVAILABLE");
  }
}

/** Publishing failed; nothing was acknowledged by the broker. */
export class EmitError extends BernsteinError {
  constructor(message: string, code = "E_EMIT") {
    super(message, code);
  }
}

/** An observation names bytes the CAS does not hold, so it may not be published. */
export class EvidenceNotStored extends EmitError {
  constructor(message: string) {
    super(message, "E_EVIDENCE_NOT_STORED");
  }
}

/** The submissions topic does not exist (producers never create topics: the admin does). */
export class TopicMissing extends EmitError {
  constructor(message: string) {
    super(message, "E_TOPIC_MISSING");
  }
}

/** The broker refused this client's principal (authentication failed or an ACL denies the write). */
export class KafkaNotAuthorized extends EmitError {
  constructor(message: string) {
    super(message, "E_KAFKA_NOT_AUTHORIZED");
  }
}

/** Not acknowledged. `runId`, `submissionId` and `value` say what to retry (`Emitter.retry`). */
export class PublishFailed extends EmitError {
  readonly runId: string;
  readonly submissionId: string;
  readonly value: Buffer;
  /** True when trying the same bytes again may succeed (a timeout, a retriable broker error). */
  readonly retriable: boolean;

  constructor(
    message: string,
    opts: { runId?: string; submissionId?: string; value?: Buffer; retriable?: boolean } = {},
  ) {
    super(message, "E_PUBLISH_FAILED");
    this.runId = opts.runId ?? "";
    this.submissionId = opts.submissionId ?? "";
    this.value = opts.value ?? Buffer.alloc(0);
    this.retriable = opts.retriable ?? false;
  }
}
