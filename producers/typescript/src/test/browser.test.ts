import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { defaultCodec } from "../avro";
import { ActionPublisher, BrowserDriver, ComputerUseSession, ExternalAgent, Frame } from "../browser_session";
import { contentHash, hmacKeyId, lineageHmac, lineageSigningInput, typedValueDigest } from "../canonical";
import { InvalidAction, ProposedAction, normaliseSnapshot, validateProposal } from "../computer_use";
import { Published, SubmissionOptions, signedSubmissionRecord } from "../emitter";
import { CanonicalizationError } from "../errors";
import { Ed25519Signer, SigningProducer, loadProducer } from "../identity";
import { MAX_COORDINATE, MalformedPointerTarget, PointerTarget, isPointerTarget, parsePointerTarget } from "../pointer";

const signer = Ed25519Signer.fromSeed(Buffer.alloc(32, 7));
const keys: SigningProducer = { name: "ts@test", signer, lineageKey: Buffer.alloc(32, 1), redactionKey: Buffer.alloc(32, 2) };

class Memory implements ActionPublisher {
  readonly blobs = new Map<string, Buffer>();
  readonly values: Buffer[] = [];
  async storeBlobs(...blobs: Uint8Array[]): Promise<void> {
    for (const b of blobs) this.blobs.set(contentHash(b), Buffer.from(b));
  }
  async publishRaw(runId: string, value: Buffer, submissionId: string): Promise<Published> {
    this.values.push(value);
    return { runId, submissionId, topic: "t", partition: 0, offset: this.values.length - 1, value };
  }
  async publish(options: SubmissionOptions): Promise<Published> {
    for (const o of options.result.observations) assert.ok(this.blobs.has(o.content_hash), `${o.ref} stored first`);
    const value = defaultCodec().encode("ActivitySubmission.v3", signedSubmissionRecord({ ...options, producerId: keys.name, signer }));
    this.values.push(value);
    return { runId: options.runId, submissionId: "r", topic: "t", partition: 0, offset: 0, value };
  }
}

class Browser implements BrowserDriver, ExternalAgent {
  at = 0;
  constructor(
    readonly frames: Frame[],
    readonly actions: ProposedAction[],
    readonly failure?: Error,
  ) {}
  async observe(): Promise<Frame> {
    return this.frames[this.at] as Frame;
  }
  async perform(): Promise<void> {
    if (this.failure !== undefined) throw this.failure;
    this.at++;
  }
  async close(): Promise<void> {}
  async nextAction(view: { index: number }): Promise<ProposedAction | null> {
    return this.actions[view.index] ?? null;
  }
}

test("a session anchors, signs and publishes every action, and the typed value appears nowhere", async () => {
  const secret = "correct horse battery";
  const pub = new Memory();
  const session = new ComputerUseSession("run-1", "browser-0", keys, pub);
  const browser = new Browser(
    [
      { screenshot: Buffer.from("png 0"), ariaSnapshot: '- textbox "Password" [ref=e1]' },
      { screenshot: Buffer.from("png 1"), ariaSnapshot: `- textbox "Password": ${secret}` },
      { screenshot: Buffer.from("png 2"), ariaSnapshot: `- text: you typed ${secret}` },
    ],
    [{ kind: "type", target: "#password", value: secret }, { kind: "click", target: "#go" }],
  );
  const outcome = await session.run(browser, browser);
  assert.equal(outcome.state, "ok");
  assert.equal(outcome.records.length, 2);
  assert.equal(outcome.records[0]?.prevAnchor, session.genesis);
  assert.equal(outcome.records[1]?.prevAnchor, outcome.records[0]?.anchor);
  assert.equal(outcome.headAnchor, outcome.records[1]?.anchor);
  for (const v of [...pub.values, ...pub.blobs.values(), outcome.actionLog, outcome.result.artifact]) assert.ok(!v.includes(secret));
  const action = defaultCodec().decode(pub.values[0] as Buffer).record as { lineage: { entry: Buffer; hmac: string; signature: Buffer }; screenshot_size: number };
  assert.equal(action.lineage.hmac, lineageHmac(keys.lineageKey as Buffer, action.lineage.entry));
  assert.ok(signer.verify(lineageSigningInput(action.lineage.entry), action.lineage.signature));
  assert.equal(action.screenshot_size, 5);
  assert.equal(outcome.result.terminal_state, "completed");
  assert.ok("final_observation" in outcome.document);
});

test("an invalid action ends the session refused; a failing driver ends it failed", async () => {
  let pub = new Memory();
  let browser = new Browser([{ screenshot: Buffer.from("png"), ariaSnapshot: "" }], [{ kind: "triple_click", target: "#a" }]);
  let outcome = await new ComputerUseSession("run-1", "browser-0", keys, pub).run(browser, browser);
  assert.deepEqual([outcome.state, outcome.reasonCode, pub.values.length], ["refused", "invalid_action", 1]);
  assert.deepEqual(outcome.document["refusal"], { code: "INVALID_ACTION", field: "kind", at_action: 0 });
  pub = new Memory();
  browser = new Browser([{ screenshot: Buffer.from("png"), ariaSnapshot: "" }], [{ kind: "click", target: "#a" }], new Error("boom"));
  outcome = await new ComputerUseSession("run-1", "browser-0", keys, pub).run(browser, browser);
  assert.deepEqual([outcome.state, outcome.reasonCode, outcome.result.terminal_state], ["driver_failure", "action_failed", "failed"]);
  assert.deepEqual(outcome.document["fault"], { code: "ACTION_FAILED", phase: "perform", action_index: 0 });
});

test("snapshots are normalised and redacted; the key directory's HMAC keys are loaded", () => {
  const key = Buffer.from("k");
  assert.equal(
    normaliseSnapshot('- textbox "E" [ref=e1]: "ada"  \r\n- text: hi ada@x.org\r\n\r\n', key, ["ada@x.org", "ab"]),
    `- textbox "E": [redacted ${typedValueDigest(key, "ada")}]\n- text: hi [redacted ${typedValueDigest(key, "ada@x.org")}]\n`,
  );
  const dir = mkdtempSync(join(tmpdir(), "ts-keys-"));
  writeFileSync(join(dir, "producer.ed25519.key"), "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJ\n-----END PRIVATE KEY-----\n");
  writeFileSync(join(dir, "lineage.hmac.key"), "b1".repeat(32) + "\n");
  writeFileSync(join(dir, "redaction.hmac.key"), "c2".repeat(32) + "\n");
  const lineageId = hmacKeyId(Buffer.alloc(32, 0xb1));
  writeFileSync(
    join(dir, "keyring.json"),
    JSON.stringify({
      format: "bernstein.keyring/v1",
      producer: "ts@test",
      keys: [
        { purpose: "producer", file: "producer.ed25519.key", status: "active" },
        { purpose: "lineage", file: "lineage.hmac.key", status: "active", key_id: lineageId },
        { purpose: "redaction", file: "redaction.hmac.key", status: "active" },
      ],
    }),
  );
  const loaded = loadProducer(dir);
  assert.deepEqual([loaded.lineageKey, loaded.redactionKey], [Buffer.alloc(32, 0xb1), Buffer.alloc(32, 0xc2)]);
});

test("a pointer target's text is its canonical JSON, and it parses back for the kinds that take its shape", () => {
  const cases: [string, PointerTarget, string][] = [
    ["click", new PointerTarget({ element: 'internal:role=button[name="Go"i]', at: [412, 230] }), '{"at":[412,230],"element":"internal:role=button[name=\\"Go\\"i]"}'],
    ["hover", new PointerTarget({ element: "", at: [0, MAX_COORDINATE] }), '{"at":[0,100000],"element":""}'],
    ["drag", new PointerTarget({ element: "#card", at: [1, 2], to: [3, 4], toElement: "#done" }), '{"at":[1,2],"element":"#card","to":[3,4],"to_element":"#done"}'],
    ["drag", new PointerTarget({ element: "#card", toElement: "" }), '{"element":"#card","to_element":""}'],
    ["type", new PointerTarget({ element: "#code", focused: true }), '{"element":"#code","focused":true}'],
  ];
  for (const [kind, target, text] of cases) {
    assert.equal(target.text(), text);
    assert.deepEqual(parsePointerTarget(text, kind), target);
    assert.doesNotThrow(() => validateProposal({ kind, target: text, value: kind === "type" ? "Quarterly report" : null }));
  }
  assert.ok(isPointerTarget(cases[0]![2]) && !isPointerTarget("#a"));
  assert.throws(() => new PointerTarget({ element: "\ud800", at: [1, 2] }).text(), CanonicalizationError);
});

test("a pointer target in any other spelling or shape is refused, and so is its proposal (INVALID_ACTION on target)", () => {
  const refused: [string, string][] = [
    ["click", '{"at": [1, 2], "element": "#a"}'], // spaces
    ["click", '{"element":"#a","at":[1,2]}'], // key order
    ["click", '{"at":[1,2],"element":"\\u0023a"}'], // an escape
    ["click", '{"at":[1,2],"element":"#a","x":1}'], // unknown field
    ["click", '{"at":[1.0,2],"element":"#a"}'], // not an integer
    ["click", '{"at":[true,2],"element":"#a"}'], // a bool is no coordinate
    ["click", '{"at":[-1,2],"element":"#a"}'],
    ["click", '{"at":[100001,2],"element":"#a"}'],
    ["click", '{"at":[1,2,3],"element":"#a"}'],
    ["click", '{"at":null,"element":"#a"}'],
    ["click", '{"at":[1,2],"element":null}'],
    ["click", '{"element":"#a"}'], // no point
    ["click", '{"at":[1,2],"element":"\\ud800"}'], // lone surrogate
    ["click", '{"__proto__":1,"at":[1,2],"element":"#a"}'],
    ["click", "{#a"], // not JSON
    ["scroll", '{"element":"#a","focused":true}'], // focused is for type
    ["type", '{"element":"#a","focused":false}'],
    ["type", '{"at":[1,2],"element":"#a"}'],
    ["drag", '{"at":[1,2],"element":"#a","to_element":"#b"}'], // one point only
    ["hover", '{"at":[1,2],"element":"#a","to_element":"#b"}'],
    ["navigate", '{"at":[1,2],"element":"#a"}'],
  ];
  for (const [kind, text] of refused) {
    assert.throws(() => parsePointerTarget(text, kind), MalformedPointerTarget, `${kind} ${text}`);
    assert.throws(() => validateProposal({ kind, target: text, value: "x" }, 3), (exc: unknown) => exc instanceof InvalidAction && exc.field === "target" && exc.index === 3);
  }
  assert.throws(() => validateProposal({ kind: "drag", target: "#a" }), (exc: unknown) => exc instanceof InvalidAction && exc.field === "target");
});
