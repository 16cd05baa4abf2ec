/**
 * The conformance families of chains: chain.json (PAE, the journal's entry hash, a seal and its
 * signature, the audit MAC) and checkpoints.json (AuditRecord.v2 and a signed checkpoint chain).
 */

import { Codec } from "../avro";
import * as c from "../canonical";
import { Ed25519Signer } from "../identity";
import { JsonValue } from "../json";
import { Obj, Tally, ed25519Key, eq, hex, obj, roundTrip, sections, str } from "./check";

export function chainFile(t: Tally, doc: Obj, codec: Codec): void {
  sections(t, doc, ["pae", "journal", "seal", "audit"], "chain");
  (doc["pae"] as JsonValue[]).forEach((item, i) => {
    const k = obj(item, "pae");
    t.check(`chain.pae[${i}]`, () => eq(c.pae(str(k, "type"), hex(k, "body_hex")).toString("hex"), str(k, "pae_hex")));
  });
  const j = obj(doc["journal"], "chain.journal");
  sections(t, j, ["run_id", "genesis", "entry", "entry_schema", "entry_payload_hex", "entry_hash"], "chain.journal");
  t.check("chain.journal.genesis", () => eq(c.journalGenesis(str(j, "run_id")), str(j, "genesis")));
  t.check("chain.journal.entry_prev_hash", () => eq(obj(j["entry"], "entry")["prev_hash"], str(j, "genesis")));
  t.check("chain.journal.entry_payload", () => roundTrip(codec, str(j, "entry_schema"), j["entry"], hex(j, "entry_payload_hex")));
  t.check("chain.journal.entry_hash", () => eq(c.journalEntryHash(hex(j, "entry_payload_hex")), str(j, "entry_hash")));
  const s = obj(doc["seal"], "chain.seal");
  sections(t, s, ["ed25519_seed_hex", "public_key_hex", "key_id", "seal", "seal_schema", "seal_payload_hex", "signing_input_hex", "signature_hex"], "chain.seal");
  ed25519Key(t, "chain.seal", s);
  t.check("chain.seal.payload", () => roundTrip(codec, str(s, "seal_schema"), s["seal"], hex(s, "seal_payload_hex")));
  t.check("chain.seal.signing_input", () => eq(c.sealSigningInput(hex(s, "seal_payload_hex")).toString("hex"), str(s, "signing_input_hex")));
  t.check("chain.seal.signature", () =>
    eq(Ed25519Signer.fromSeed(hex(s, "ed25519_seed_hex")).sign(hex(s, "signing_input_hex")).toString("hex"), str(s, "signature_hex")),
  );
  const a = obj(doc["audit"], "chain.audit");
  sections(t, a, ["hmac_key_hex", "hmac_key_id", "genesis_partition_0", "entry", "entry_schema", "entry_payload_hex", "mac"], "chain.audit");
  t.check("chain.audit.hmac_key_id", () => eq(c.hmacKeyId(hex(a, "hmac_key_hex")), str(a, "hmac_key_id")));
  t.check("chain.audit.genesis_partition_0", () => eq(c.auditGenesis(hex(a, "hmac_key_hex"), 0), str(a, "genesis_partition_0")));
  t.check("chain.audit.entry_payload", () => roundTrip(codec, str(a, "entry_schema"), a["entry"], hex(a, "entry_payload_hex")));
  t.check("chain.audit.mac", () => eq(c.auditMac(hex(a, "hmac_key_hex"), hex(a, "entry_payload_hex")), str(a, "mac")));
}

export function checkpointsFile(t: Tally, doc: Obj, codec: Codec): void {
  sections(t, doc, ["audit_record_v2", "checkpoints"], "checkpoints");
  const a = obj(doc["audit_record_v2"], "audit_record_v2");
  sections(
    t,
    a,
    ["hmac_key_hex", "key_id", "entry", "entry_schema", "entry_payload_hex", "mac_input_hex", "mac", "mac_v1_of_same_payload", "record_schema", "record_hex"],
    "checkpoints.audit_record_v2",
  );
  const key = (): Buffer => hex(a, "hmac_key_hex");
  t.check("checkpoints.audit_record_v2.key_id", () => eq(c.hmacKeyId(key()), str(a, "key_id")));
  t.check("checkpoints.audit_record_v2.entry_payload", () => roundTrip(codec, str(a, "entry_schema"), a["entry"], hex(a, "entry_payload_hex")));
  t.check("checkpoints.audit_record_v2.mac_input", () =>
    eq(c.auditRecordMacInput(str(a, "key_id"), hex(a, "entry_payload_hex")).toString("hex"), str(a, "mac_input_hex")),
  );
  t.check("checkpoints.audit_record_v2.mac", () => eq(c.auditRecordMac(key(), str(a, "key_id"), hex(a, "entry_payload_hex")), str(a, "mac")));
  t.check("checkpoints.audit_record_v2.mac_v1_of_same_payload", () =>
    eq(c.auditMac(key(), hex(a, "entry_payload_hex")), str(a, "mac_v1_of_same_payload")),
  );
  t.check("checkpoints.audit_record_v2.record", () =>
    roundTrip(codec, str(a, "record_schema"), { key_id: str(a, "key_id"), payload: { hex: str(a, "entry_payload_hex") }, mac: str(a, "mac") }, hex(a, "record_hex")),
  );
  const k = obj(doc["checkpoints"], "checkpoints.checkpoints");
  sections(t, k, ["ed25519_seed_hex", "public_key_hex", "key_id", "genesis_partition_0", "chain"], "checkpoints.checkpoints");
  ed25519Key(t, "checkpoints.checkpoints", k);
  t.check("checkpoints.checkpoints.genesis_partition_0", () => eq(c.checkpointGenesis(0), str(k, "genesis_partition_0")));
  let prev = str(k, "genesis_partition_0");
  (k["chain"] as JsonValue[]).forEach((item, i) => {
    const p = obj(item, "chain[]");
    const where = `checkpoints.checkpoints.chain[${i}]`;
    sections(t, p, ["checkpoint", "payload_schema", "payload_hex", "signing_input_hex", "signature_hex", "record_schema", "record_hex", "checkpoint_hash"], where);
    const expectedPrev = prev;
    t.check(`${where}.prev_hash`, () => eq(obj(p["checkpoint"], "checkpoint")["prev_hash"], expectedPrev, "prev_hash"));
    t.check(`${where}.payload`, () => roundTrip(codec, str(p, "payload_schema"), p["checkpoint"], hex(p, "payload_hex")));
    t.check(`${where}.signing_input`, () => eq(c.checkpointSigningInput(hex(p, "payload_hex")).toString("hex"), str(p, "signing_input_hex")));
    t.check(`${where}.signature`, () =>
      eq(Ed25519Signer.fromSeed(hex(k, "ed25519_seed_hex")).sign(hex(p, "signing_input_hex")).toString("hex"), str(p, "signature_hex")),
    );
    t.check(`${where}.record`, () =>
      roundTrip(
        codec,
        str(p, "record_schema"),
        { payload: { hex: str(p, "payload_hex") }, key_id: str(k, "key_id"), signature: { hex: str(p, "signature_hex") } },
        hex(p, "record_hex"),
      ),
    );
    t.check(`${where}.checkpoint_hash`, () => eq(c.checkpointHash(hex(p, "payload_hex")), str(p, "checkpoint_hash")));
    prev = typeof p["checkpoint_hash"] === "string" ? p["checkpoint_hash"] : "";
  });
}
