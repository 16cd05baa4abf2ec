#!/usr/bin/env node
/**
 * bernstein-ts-browser: record one browser session from a session script on stdin and publish it
 * (the same script as the Go SDK's bernstein-go-browser): every action anchored, its lineage entry
 * HMAC-enveloped and signed, its screenshot and snapshot stored in S3 before its ComputerUseAction.v2
 * is produced, then the session's browser result (stage id = session id).
 *
 *   {"run_id": "run-42", "session_id": "browser-0", "role": "navigator", "adapter": "scripted",
 *    "steps": [{"frame": {"screenshot_base64": "...", "aria_snapshot": "...", "url": "..."},
 *               "action": {"kind": "type", "target": "#email", "value": "..." | "value_env": "NAME"}}],
 *    "final": {"screenshot_base64": "...", "aria_snapshot": "...", "url": "..."}}
 *
 * A frame's screenshot may be a file ("screenshot_file", relative to the working directory). One JSON
 * line per published record goes to stdout. Exit 0 the session ended ok; 1 it ended otherwise (its
 * result published); 2 a bad script or producer keys (nothing published); 3 Kafka or S3 unavailable.
 */

import { readFileSync } from "node:fs";
import { resolve } from "node:path";

import { BrowserDriver, ComputerUseSession, ExternalAgent, Frame } from "../browser_session";
import { ProposedAction } from "../computer_use";
import { Emitter } from "../emitter";
import { ActivityRejected, BernsteinError, ConfigError } from "../errors";
import { defaultProducerKeysDir, loadProducer } from "../identity";

type Json = Record<string, unknown>;

class ScriptError extends Error {}

function frameOf(f: unknown, where: string): Frame {
  if (f === null || typeof f !== "object") throw new ScriptError(`${where} is not an object`);
  const o = f as Json;
  const b64 = o["screenshot_base64"];
  const file = o["screenshot_file"];
  if ((b64 === undefined) === (file === undefined)) throw new ScriptError(`${where}: give exactly one of screenshot_base64 and screenshot_file`);
  let screenshot: Buffer;
  if (typeof b64 === "string") screenshot = Buffer.from(b64, "base64");
  else if (typeof file === "string") {
    try {
      screenshot = readFileSync(resolve(file));
    } catch (exc) {
      throw new ScriptError(`${where}.screenshot_file: ${(exc as Error).message}`);
    }
  } else throw new ScriptError(`${where}: the screenshot must be a string`);
  const aria = o["aria_snapshot"] ?? "";
  const url = o["url"] ?? "";
  if (typeof aria !== "string" || typeof url !== "string") throw new ScriptError(`${where}: aria_snapshot and url are strings`);
  return { screenshot, ariaSnapshot: aria, url };
}

function actionOf(a: unknown, where: string): ProposedAction {
  if (a === null || typeof a !== "object") throw new ScriptError(`${where} is not an object`);
  const o = a as Json;
  let value = o["value"] as string | null | undefined;
  if (o["value_env"] !== undefined) {
    const name = String(o["value_env"]);
    if (value !== undefined || process.env[name] === undefined) throw new ScriptError(`${where}: value_env ${name} is not set (or value is given too)`);
    value = process.env[name];
  }
  return { kind: String(o["kind"]), target: typeof o["target"] === "string" ? o["target"] : "", value: value ?? null };
}

/** The scripted driver and agent: the frames in order, then the final frame and "done". */
class Replay implements BrowserDriver, ExternalAgent {
  private at = 0;
  constructor(
    private readonly frames: Frame[],
    private readonly actions: ProposedAction[],
  ) {}
  async observe(): Promise<Frame> {
    const frame = this.frames[this.at];
    if (frame === undefined) throw new Error("the script has no further frame");
    return frame;
  }
  async perform(): Promise<void> {
    this.at++;
  }
  async close(): Promise<void> {}
  async nextAction(view: { index: number }): Promise<ProposedAction | null> {
    return this.actions[view.index] ?? null;
  }
}

function fail(message: string, code: number): number {
  process.stderr.write(`bernstein-ts-browser: error: ${message}\n`);
  return code;
}

async function main(): Promise<number> {
  let script: Json;
  let replay: Replay;
  try {
    script = JSON.parse(readFileSync(0, "utf8")) as Json;
    if (script === null || typeof script !== "object" || !Array.isArray(script["steps"])) throw new ScriptError("the session script is not an object with steps");
    const steps = script["steps"] as Json[];
    const frames = steps.map((s, i) => frameOf(s?.["frame"], `steps[${i}].frame`));
    const actions = steps.map((s, i) => actionOf(s?.["action"], `steps[${i}].action`));
    if (script["final"] === undefined) throw new ScriptError('the session script needs "final": the frame the agent saw when it was done');
    frames.push(frameOf(script["final"], "final"));
    replay = new Replay(frames, actions);
  } catch (exc) {
    return fail(`bad session script: ${(exc as Error).message}`, 2);
  }
  let emitter: Emitter;
  let session: ComputerUseSession;
  try {
    const producer = loadProducer(defaultProducerKeysDir());
    emitter = new Emitter({ producer });
    session = new ComputerUseSession(String(script["run_id"]), String(script["session_id"]), producer, emitter, {
      role: typeof script["role"] === "string" ? script["role"] : undefined,
      adapter: typeof script["adapter"] === "string" ? script["adapter"] : undefined,
    });
  } catch (exc) {
    if (exc instanceof BernsteinError) return fail(exc.message, 2);
    throw exc;
  }
  try {
    const outcome = await session.run(replay, replay);
    outcome.actionsPublished.forEach((p, i) =>
      process.stdout.write(
        JSON.stringify({ run_id: p.runId, submission_id: p.submissionId, topic: p.topic, partition: p.partition, offset: p.offset, action_index: i, anchor: outcome.records[i]?.anchor }) + "\n",
      ),
    );
    const p = outcome.published;
    process.stdout.write(
      JSON.stringify({
        run_id: p.runId,
        submission_id: p.submissionId,
        topic: p.topic,
        partition: p.partition,
        offset: p.offset,
        stage_id: session.sessionId,
        terminal_state: outcome.state,
        reason_code: outcome.reasonCode,
        head_anchor: outcome.headAnchor,
        action_count: outcome.records.length,
      }) + "\n",
    );
    if (outcome.state !== "ok") return fail(`the session ended ${outcome.state} (${outcome.reasonCode}); its result is published`, 1);
    return 0;
  } catch (exc) {
    if (exc instanceof ConfigError || exc instanceof ActivityRejected) return fail(exc.message, 2);
    if (exc instanceof BernsteinError) return fail(exc.message, 3);
    throw exc;
  } finally {
    await emitter.close();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (exc: unknown) => {
    const detail = process.env["BERNSTEIN_DEBUG"] ? String((exc as Error).stack ?? exc) : String((exc as Error).message ?? exc);
    process.stderr.write(`bernstein-ts-browser: internal error: ${detail}\n`);
    process.exitCode = 1;
  },
);
