/**
 * SDK configuration from the environment, the same variables as the Python SDK
 * (docs/producing.md, "Kafka and S3 settings"):
 *
 * | variable | meaning |
 * |---|---|
 * | BERNSTEIN_KAFKA_BOOTSTRAP | `host:port[,host:port]` (required to publish) |
 * | BERNSTEIN_KAFKA_CONFIG_FILE | librdkafka-style client properties (security settings only) |
 * | BERNSTEIN_TOPIC_PREFIX | default `bernstein`; submissions go to `<prefix>.activity.submissions` |
 * | BERNSTEIN_S3_ENDPOINT | `http(s)://host:port` (required to publish) |
 * | BERNSTEIN_S3_ACCESS_KEY, BERNSTEIN_S3_SECRET_KEY | credentials (default `bernstein` / `bernstein-secret-key`) |
 * | BERNSTEIN_S3_BUCKET | default `bernstein-cas` |
 * | BERNSTEIN_PRODUCER_KEYS_DIR | the producer key directory (`bernstein keys init --producer NAME`) |
 *
 * The properties file accepts exactly the keys `substrate/kafka.py` accepts and refuses the rest
 * with the file, line and key named (never a value: it may be a password).
 */

import { readFileSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";

import { ConfigError, KafkaConfigError } from "./errors";

export const DEFAULT_PREFIX = "bernstein";
export const CONFIG_FILE_SETTING = "BERNSTEIN_KAFKA_CONFIG_FILE";

export const SECURITY_KEYS: ReadonlySet<string> = new Set([
  "security.protocol",
  "sasl.mechanism",
  "sasl.mechanisms",
  "sasl.username",
  "sasl.password",
  "ssl.ca.location",
  "ssl.certificate.location",
  "ssl.key.location",
  "ssl.key.password",
  "ssl.endpoint.identification.algorithm",
]);
const PATH_KEYS = ["ssl.ca.location", "ssl.certificate.location", "ssl.key.location"];
const PROTOCOLS = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];
const MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"];
const ENDPOINT_CHECKS = ["https", "none"];

/** Topic names under one prefix. */
export class Topics {
  constructor(readonly prefix: string = DEFAULT_PREFIX) {}

  get submissions(): string {
    return `${this.prefix}.activity.submissions`;
  }

  get journal(): string {
    return `${this.prefix}.activity.journal`;
  }

  get refusals(): string {
    return `${this.prefix}.activity.refusals`;
  }
}

export interface S3Settings {
  endpoint: string;
  accessKey: string;
  secretKey: string;
  bucket: string;
  region: string;
}

export interface Settings {
  kafkaBootstrap: string | undefined;
  /** The checked security settings of BERNSTEIN_KAFKA_CONFIG_FILE ({} when unset). */
  kafkaSecurity: Record<string, string>;
  s3: S3Settings | undefined;
  topics: Topics;
  producerKeysDir: string | undefined;
}

/** The settings of `env` (default: this process's environment). */
export function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const get = (name: string): string | undefined => {
    const value = env[name];
    return value === undefined || value === "" ? undefined : value;
  };
  const endpoint = get("BERNSTEIN_S3_ENDPOINT");
  const configFile = get(CONFIG_FILE_SETTING);
  return {
    kafkaBootstrap: get("BERNSTEIN_KAFKA_BOOTSTRAP"),
    kafkaSecurity: configFile === undefined ? {} : loadClientProperties(configFile),
    s3:
      endpoint === undefined
        ? undefined
        : {
            endpoint,
            accessKey: get("BERNSTEIN_S3_ACCESS_KEY") ?? "bernstein",
            secretKey: get("BERNSTEIN_S3_SECRET_KEY") ?? "bernstein-secret-key",
            bucket: get("BERNSTEIN_S3_BUCKET") ?? "bernstein-cas",
            region: get("BERNSTEIN_S3_REGION") ?? "us-east-1",
          },
    topics: new Topics(get("BERNSTEIN_TOPIC_PREFIX") ?? DEFAULT_PREFIX),
    producerKeysDir: get("BERNSTEIN_PRODUCER_KEYS_DIR"),
  };
}

/** Read and check one client properties file (relative `ssl.*.location` paths are relative to it). */
export function loadClientProperties(path: string): Record<string, string> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (exc) {
    const code = (exc as NodeJS.ErrnoException).code ?? "unreadable";
    throw new KafkaConfigError(`cannot read the Kafka client properties file ${path} (${CONFIG_FILE_SETTING}): ${code}`);
  }
  return parseClientProperties(text, path, dirname(resolve(path)));
}

/** The security settings of a client properties file (`key=value` lines, `#`/`!` comments). */
export function parseClientProperties(text: string, source: string, base?: string): Record<string, string> {
  const values: Record<string, string> = {};
  text.split(/\r?\n/).forEach((raw, i) => {
    const number = i + 1;
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith("!")) return;
    const eq = line.indexOf("=");
    if (eq < 0) throw new KafkaConfigError(`${source}:${number}: expected key=value`);
    const key = line.slice(0, eq).trim();
    const value = line.slice(eq + 1).trim();
    if (!SECURITY_KEYS.has(key)) {
      throw new KafkaConfigError(
        `${source}:${number}: unknown key '${key}'; a Kafka client properties file may set only ${[...SECURITY_KEYS].sort().join(", ")}`,
      );
    }
    if (key in values) throw new KafkaConfigError(`${source}:${number}: ${key} is set twice`);
    if (value === "") throw new KafkaConfigError(`${source}:${number}: ${key} has no value`);
    values[key] = value;
  });
  if ("sasl.mechanism" in values && "sasl.mechanisms" in values) {
    throw new KafkaConfigError(`${source}: set sasl.mechanism or sasl.mechanisms, not both`);
  }
  checkChoice(values, "security.protocol", PROTOCOLS, source, (v) => v.toUpperCase());
  checkChoice(values, "sasl.mechanism", MECHANISMS, source, (v) => v.toUpperCase());
  checkChoice(values, "sasl.mechanisms", MECHANISMS, source, (v) => v.toUpperCase());
  checkChoice(values, "ssl.endpoint.identification.algorithm", ENDPOINT_CHECKS, source, (v) => v.toLowerCase());
  const protocol = values["security.protocol"] ?? "PLAINTEXT";
  if (protocol.startsWith("SASL_") && "sasl.username" in values && !("sasl.password" in values)) {
    throw new KafkaConfigError(`${source}: sasl.username is set but sasl.password is not`);
  }
  if (!protocol.startsWith("SASL_") && Object.keys(values).some((k) => k.startsWith("sasl."))) {
    throw new KafkaConfigError(`${source}: sasl.* settings need security.protocol SASL_SSL or SASL_PLAINTEXT`);
  }
  if (base !== undefined) {
    for (const key of PATH_KEYS) {
      const value = values[key];
      if (value !== undefined && !isAbsolute(value)) values[key] = join(base, value);
    }
  }
  return values;
}

function checkChoice(values: Record<string, string>, key: string, choices: string[], source: string, norm: (v: string) => string): void {
  const value = values[key];
  if (value === undefined) return;
  const normalised = norm(value);
  if (!choices.includes(normalised)) throw new KafkaConfigError(`${source}: ${key} must be one of ${choices.join(", ")}`);
  values[key] = normalised;
}

/** The bootstrap servers as a list (ConfigError when unset or empty). */
export function requireBootstrap(bootstrap: string | undefined): string[] {
  const brokers = (bootstrap ?? "")
    .split(",")
    .map((b) => b.trim())
    .filter((b) => b !== "");
  if (brokers.length === 0) {
    throw new ConfigError("no Kafka bootstrap servers: set BERNSTEIN_KAFKA_BOOTSTRAP (host:port)", "E_NO_BOOTSTRAP");
  }
  return brokers;
}
