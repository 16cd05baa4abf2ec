/**
 * A recorded browser session (producers/computer_use/session.py): every action anchored, signed and
 * published before the driver performs it, then exactly one browser result whose stage id is the
 * session id and whose artifact is the session document. Drive it step by step (`observe`,
 * `record`, `recordFinal`, `finish`) or hand `run` a BrowserDriver (Playwright for Node, a remote
 * browser, a replayed recording) and an ExternalAgent.
 */

import { ActivityResult, buildResult, requireValidIds } from "./activity";
import { canonicalJson, computerUseGenesis, contentHash } from "./canonical";
import {
  ActionRecord,
  InvalidAction,
  ObservationHashes,
  ProposedAction,
  SCRUBBED_KINDS,
  actionRecordJson,
  buildAction,
  canonicalAction,
  hashObservation,
  normaliseSnapshot,
  COMPUTER_USE_ACTION_V2,
} from "./computer_use";
import { Codec, defaultCodec } from "./avro";
import { ActivityRejected, BernsteinError, ProducerKeysError } from "./errors";
import { Published, SDK, SubmissionOptions } from "./emitter";
import { SigningProducer } from "./identity";
import { Observation } from "./records";

export const BROWSER_SESSION_FORMAT = "bernstein.browser.session/v1";
export const BROWSER_ACTION_LOG_FORMAT = "bernstein.browser.action-log/v1";
export const COMPUTER_USE_SDK = `${SDK} computer-use`;
export const DEFAULT_MAX_ACTIONS = 500;
export const DEFAULT_RUN_BYTE_CAP = 64 * 1024 * 1024;
/** A session's own terminal state -> its browser result's. */
export const SESSION_TERMINAL_STATES: Readonly<Record<string, string>> = {
  ok: "completed",
  driver_failure: "failed",
  timeout: "timed_out",
  refused: "refused",
};

/** What the driver saw before an action: screenshot bytes and the raw accessibility snapshot. */
export interface Frame {
  readonly screenshot: Uint8Array;
  readonly ariaSnapshot: string;
  readonly url?: string;
}

/** What the agent is shown before deciding action `index`: the recorded (normalised, redacted) observation. */
export interface AgentView {
  readonly index: number;
  readonly screenshot: Buffer;
  readonly snapshot: string;
  readonly url: string;
}

export interface BrowserDriver {
  observe(): Promise<Frame>;
  perform(action: ProposedAction): Promise<void>;
  close(): Promise<void>;
}

export interface ExternalAgent {
  /** The next action, or null when done. */
  nextAction(view: AgentView): Promise<ProposedAction | null>;
}

/** A driver's (or the agent's) failure: driver_failure, or timeout when `timeout` is set. `fault` is e.g. ACTION_FAILED. */
export class DriverError extends BernsteinError {
  constructor(
    message: string,
    readonly fault: string,
    readonly timeout = false,
  ) {
    super(message, "DRIVER_FAILURE");
  }
}

/** The session stops refused (the action limit, the byte cap), with its evidence. */
export class SessionRefused extends BernsteinError {
  constructor(
    message: string,
    code: string,
    readonly facts: Record<string, string | number>,
  ) {
    super(message, code);
  }
}

/** Where a session's blobs and records go; the Emitter is one. */
export interface ActionPublisher {
  storeBlobs(...blobs: Uint8Array[]): Promise<void>;
  publishRaw(runId: string, value: Buffer, submissionId: string): Promise<Published>;
  publish(options: SubmissionOptions): Promise<Published>;
}

/** A normalised pre-action frame, not yet anchored. */
export interface PendingObservation {
  readonly index: number;
  readonly screenshot: Buffer;
  readonly snapshot: Buffer;
  readonly url: string;
  readonly hashes: ObservationHashes;
}

export interface RecordedAction {
  readonly record: ActionRecord;
  readonly wire: Record<string, unknown>;
  readonly value: Buffer;
  readonly published: Published;
}

export interface SessionOutcome {
  readonly state: string;
  readonly reasonCode: string;
  readonly records: readonly ActionRecord[];
  readonly headAnchor: string;
  readonly document: Record<string, unknown>;
  readonly actionLog: Buffer;
  readonly result: ActivityResult;
  readonly published: Published;
  readonly actionsPublished: readonly Published[];
  readonly error?: unknown;
}

export interface SessionOptions {
  role?: string;
  adapter?: string;
  sdk?: string;
  maxActions?: number;
  byteCap?: number;
  /** occurred_at_ms of each action (default: the wall clock). */
  now?: () => number;
  /** The browser result's submission id and time (default: fresh, now). */
  resultSubmissionId?: string;
  resultOccurredAtMs?: number;
  codec?: Codec;
}

/** Classify how a session ended: state, reason code, and the document's fault or refusal. */
export function sessionEnd(error: unknown, phase: string, actions: number): { state: string; reason: string; fault?: Record<string, unknown>; refusal?: Record<string, unknown> } {
  if (error === undefined || error === null) return { state: "ok", reason: "ok" };
  if (error instanceof InvalidAction) return { state: "refused", reason: "invalid_action", refusal: error.evidence() };
  if (error instanceof SessionRefused) return { state: "refused", reason: error.code.toLowerCase(), refusal: error.facts };
  if (error instanceof DriverError) {
    const at = phase === "perform" ? actions - 1 : actions;
    return {
      state: error.timeout ? "timeout" : "driver_failure",
      reason: error.fault.toLowerCase(),
      fault: { code: error.fault, phase: phase || "unknown", action_index: at },
    };
  }
  return { state: "driver_failure", reason: "driver_failure" };
}

/** The session document of a session that anchored `records`, and its action log blob. */
export function sessionDocument(options: {
  runId: string;
  sessionId: string;
  records: readonly ActionRecord[];
  state: string;
  reason: string;
  adapter: string;
  workerId: string;
  fault?: Record<string, unknown>;
  refusal?: Record<string, unknown>;
  final?: ObservationHashes;
}): { document: Record<string, unknown>; actionLog: Buffer } {
  if (!(options.state in SESSION_TERMINAL_STATES)) {
    throw new ActivityRejected(`session terminal state ${JSON.stringify(options.state)} is not one of ok, driver_failure, timeout, refused`, "UNKNOWN_TERMINAL_STATE");
  }
  const genesis = computerUseGenesis(options.runId, options.sessionId);
  const actionLog = canonicalJson({
    format: BROWSER_ACTION_LOG_FORMAT,
    run_id: options.runId,
    session_id: options.sessionId,
    actions: options.records.map(actionRecordJson),
  });
  const last = options.records[options.records.length - 1];
  const document: Record<string, unknown> = {
    format: BROWSER_SESSION_FORMAT,
    session_id: options.sessionId,
    run_id: options.runId,
    head_anchor: last === undefined ? genesis : last.anchor,
    action_count: options.records.length,
    genesis,
    anchors: options.records.map((r) => r.anchor),
    action_log: contentHash(actionLog),
    terminal_state: options.state,
    reason_code: options.reason,
    adapter: options.adapter,
    worker_id: options.workerId,
  };
  if (options.fault !== undefined) document["fault"] = options.fault;
  if (options.refusal !== undefined) document["refusal"] = options.refusal;
  if (options.final !== undefined) document["final_observation"] = { ...options.final };
  return { document, actionLog };
}

/** Records one browser session under a producer's keys (which must hold its lineage and redaction keys). */
export class ComputerUseSession {
  readonly genesis: string;
  role: string;
  adapter: string;
  sdk: string;
  maxActions: number;
  byteCap: number;
  now: () => number;
  resultSubmissionId?: string;
  resultOccurredAtMs?: number;
  private readonly codec: Codec;
  private readonly recorded: ActionRecord[] = [];
  private readonly landed: Published[] = [];
  private readonly typed: string[] = [];
  private readonly sizes = new Map<string, number>();
  private shotBytes = 0;
  private final: PendingObservation | undefined;
  private outcome: SessionOutcome | undefined;

  constructor(
    readonly runId: string,
    readonly sessionId: string,
    readonly keys: SigningProducer,
    readonly publisher: ActionPublisher,
    options: SessionOptions = {},
  ) {
    requireValidIds(["run_id", runId], ["session_id", sessionId], ["worker_id", keys.name]);
    if (keys.lineageKey === undefined || keys.redactionKey === undefined) {
      throw new ProducerKeysError(`the producer keys of ${keys.name} hold no lineage or redaction key; \`bernstein keys init --producer\` makes both`);
    }
    this.genesis = computerUseGenesis(runId, sessionId);
    this.role = options.role ?? "navigator";
    this.adapter = options.adapter ?? "typescript";
    this.sdk = options.sdk ?? COMPUTER_USE_SDK;
    this.maxActions = options.maxActions ?? DEFAULT_MAX_ACTIONS;
    this.byteCap = options.byteCap ?? DEFAULT_RUN_BYTE_CAP;
    this.now = options.now ?? Date.now;
    this.resultSubmissionId = options.resultSubmissionId;
    this.resultOccurredAtMs = options.resultOccurredAtMs;
    this.codec = options.codec ?? defaultCodec();
  }

  get records(): readonly ActionRecord[] {
    return [...this.recorded];
  }

  get head(): string {
    const last = this.recorded[this.recorded.length - 1];
    return last === undefined ? this.genesis : last.anchor;
  }

  /** Normalise and hash a pre-action frame (nothing is stored yet). */
  observe(frame: Frame): PendingObservation {
    const snapshot = Buffer.from(normaliseSnapshot(frame.ariaSnapshot, this.keys.redactionKey as Buffer, this.typed), "utf8");
    const screenshot = Buffer.from(frame.screenshot);
    return { index: this.recorded.length, screenshot, snapshot, url: frame.url ?? "", hashes: hashObservation(screenshot, snapshot) };
  }

  private charge(p: PendingObservation): void {
    if (this.sizes.has(p.hashes.screenshot_hash)) return;
    const would = this.shotBytes + p.screenshot.length;
    if (would > this.byteCap) {
      throw new SessionRefused(`session ${this.sessionId} would store ${would} screenshot bytes; the cap is ${this.byteCap}`, "BYTE_CAP_EXCEEDED", {
        code: "BYTE_CAP_EXCEEDED",
        cap_bytes: this.byteCap,
        would_be_bytes: would,
        at_action: p.index,
      });
    }
    this.shotBytes = would;
  }

  private async store(p: PendingObservation): Promise<void> {
    await this.publisher.storeBlobs(p.screenshot, p.snapshot);
    if (!this.sizes.has(p.hashes.screenshot_hash)) this.sizes.set(p.hashes.screenshot_hash, p.screenshot.length);
    if (!this.sizes.has(p.hashes.dom_digest)) this.sizes.set(p.hashes.dom_digest, p.snapshot.length);
  }

  /**
   * Anchor, sign and publish one action (blobs first, then the record); the driver performs it
   * only after this resolves. An InvalidAction or SessionRefused means the session must end
   * refused (`finish(error)`); nothing was stored or published for it.
   */
  async record(pending: PendingObservation, proposed: ProposedAction): Promise<RecordedAction> {
    const index = this.recorded.length;
    if (this.outcome !== undefined) throw new BernsteinError(`browser session ${this.sessionId} has ended; no action may follow`);
    if (pending.index !== index) throw new BernsteinError(`observation ${pending.index} is stale: the session is at action ${index}`);
    if (index >= this.maxActions) {
      throw new SessionRefused(`browser session ${this.sessionId} reached its limit of ${this.maxActions} actions`, "ACTION_LIMIT_EXCEEDED", {
        code: "ACTION_LIMIT_EXCEEDED",
        limit: this.maxActions,
        at_action: this.maxActions,
      });
    }
    const action = canonicalAction(proposed, this.keys.redactionKey as Buffer, index);
    this.charge(pending);
    const { record, wire } = buildAction(
      { runId: this.runId, sessionId: this.sessionId, index, prevAnchor: this.head, screenshot: pending.screenshot, snapshot: pending.snapshot, action, sdk: this.sdk, occurredAtMs: this.now() },
      this.keys,
    );
    const value = this.codec.encode(COMPUTER_USE_ACTION_V2, wire);
    await this.store(pending);
    const published = await this.publisher.publishRaw(this.runId, value, wire["submission_id"] as string);
    this.recorded.push(record);
    this.landed.push(published);
    if ((SCRUBBED_KINDS as readonly string[]).includes(proposed.kind) && typeof proposed.value === "string" && proposed.value !== "") {
      this.typed.push(proposed.value); // scrubbed from every later snapshot
    }
    return { record, wire, value, published };
  }

  /** Store the frame the agent saw when it declared itself done (no anchor; the document names its hashes). */
  async recordFinal(pending: PendingObservation): Promise<void> {
    this.charge(pending);
    await this.store(pending);
    this.final = pending;
  }

  /** Record how the session ended: store the action log, publish the browser result. Idempotent. */
  async finish(error?: unknown, phase = ""): Promise<SessionOutcome> {
    if (this.outcome !== undefined) return this.outcome;
    const end = sessionEnd(error, phase, this.recorded.length);
    const { document, actionLog } = sessionDocument({
      runId: this.runId,
      sessionId: this.sessionId,
      records: this.recorded,
      state: end.state,
      reason: end.reason,
      adapter: this.adapter,
      workerId: this.keys.name,
      fault: end.fault,
      refusal: end.refusal,
      final: this.final?.hashes,
    });
    const result = buildResult("browser", document, this.observations(actionLog), {
      terminalState: SESSION_TERMINAL_STATES[end.state],
      reasonCode: end.reason,
    });
    await this.publisher.storeBlobs(actionLog);
    const published = await this.publisher.publish({
      runId: this.runId,
      stageId: this.sessionId,
      role: this.role,
      result,
      submissionId: this.resultSubmissionId,
      occurredAtMs: this.resultOccurredAtMs,
    });
    this.outcome = {
      state: end.state,
      reasonCode: end.reason,
      records: this.records,
      headAnchor: this.head,
      document,
      actionLog,
      result,
      published,
      actionsPublished: [...this.landed],
      error,
    };
    return this.outcome;
  }

  private observations(actionLog: Buffer): Observation[] {
    const seen = new Set<string>();
    const out: Observation[] = [];
    const add = (kind: string, ref: string, digest: string): void => {
      if (seen.has(digest)) return;
      seen.add(digest);
      out.push({ kind, ref, content_hash: digest, size: this.sizes.get(digest) ?? 0 });
    };
    for (const r of this.recorded) {
      const ref = `action-${String(r.index).padStart(6, "0")}`;
      add("screenshot", ref, r.hashes.screenshot_hash);
      add("snapshot", ref, r.hashes.dom_digest);
    }
    if (this.final !== undefined) {
      add("screenshot", "final", this.final.hashes.screenshot_hash);
      add("snapshot", "final", this.final.hashes.dom_digest);
    }
    out.push({ kind: "action_log", ref: `session:${this.sessionId}`, content_hash: contentHash(actionLog), size: actionLog.length });
    return out;
  }

  /** Drive a whole session: observe, ask, record, perform, until the agent is done or something fails; the end is always published. */
  async run(agent: ExternalAgent, driver: BrowserDriver): Promise<SessionOutcome> {
    const [error, phase] = await this.loop(agent, driver);
    await driver.close().catch(() => undefined); // closing a broken browser must not mask how the session ended
    return this.finish(error, phase);
  }

  private async loop(agent: ExternalAgent, driver: BrowserDriver): Promise<[unknown, string]> {
    for (;;) {
      let pending: PendingObservation;
      try {
        pending = this.observe(await driver.observe());
      } catch (exc) {
        return [asDriverError(exc, "OBSERVE_FAILED"), "observe"];
      }
      let proposed: ProposedAction | null;
      try {
        proposed = await agent.nextAction({ index: pending.index, screenshot: pending.screenshot, snapshot: pending.snapshot.toString("utf8"), url: pending.url });
      } catch (exc) {
        return [asDriverError(exc, "AGENT_FAILED"), "agent"];
      }
      try {
        if (proposed === null) {
          await this.recordFinal(pending);
          return [undefined, ""];
        }
        await this.record(pending, proposed);
      } catch (exc) {
        return [exc, proposed === null ? "final" : "record"];
      }
      try {
        await driver.perform(proposed);
      } catch (exc) {
        return [asDriverError(exc, "ACTION_FAILED"), "perform"];
      }
    }
  }
}

function asDriverError(exc: unknown, fault: string): DriverError {
  if (exc instanceof DriverError) return exc;
  // the error's type only: a message may quote a typed value
  return new DriverError(`${fault.toLowerCase()}: ${exc instanceof Error ? exc.name : typeof exc}`, fault);
}
