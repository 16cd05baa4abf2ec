/**
 * The conformance families of signatures: signatures.json (a producer's submission and run-close
 * statements, lineage and typed values) and ed25519.json (the verification rule, against Node's
 * RFC 8032 verifier).
 */

import { createPublicKey, verify as edVerify } from "node:crypto";

import { Codec } from "../avro";
import * as c from "../canonical";
import { Ed25519Signer } from "../identity";
import { parseJson } from "../json";
import { Mismatch, Obj, Tally, ed25519Key, eq, hex, obj, sections, str, unhex } from "./check";

export function signaturesFile(t: Tally, doc: Obj, codec: Codec): void {
  sections(t, doc, ["producer", "activity_submission", "run_close", "lineage", "typed_value"], "signatures");
  const p = obj(doc["producer"], "producer");
  sections(t, p, ["ed25519_seed_hex", "public_key_hex", "key_id", "signing_domain", "rule"], "signatures.producer");
  ed25519Key(t, "signatures.producer", p);
  t.check("signatures.producer.signing_domain", () => {
    eq(str(p, "signing_domain"), c.DOMAIN_SUBMISSION, "signing domain");
    eq(typeof p["rule"], "string", "rule");
  });
  const signer = (): Ed25519Signer => Ed25519Signer.fromSeed(hex(p, "ed25519_seed_hex"));
  for (const name of ["activity_submission", "run_close"]) {
    const k = obj(doc[name], name);
    const where = `signatures.${name}`;
    sections(t, k, ["schema", "record", "statement", "statement_canonical_utf8", "signing_input_hex", "signature_hex"], where);
    const record = obj(k["record"], "record");
    t.check(`${where}.statement`, () => {
      const rec = unhex(record) as Record<string, unknown> & Parameters<typeof c.submissionStatement>[0];
      const statement =
        name === "activity_submission"
          ? c.submissionStatement(rec, str(p, "key_id"))
          : c.runCloseStatement(rec.submission_id, rec.run_id, (rec.producer as { id: string }).id, rec.occurred_at_ms, str(p, "key_id"));
      eq(statement, k["statement"], "statement");
      eq(c.canonicalJson(statement).toString("utf8"), str(k, "statement_canonical_utf8"), "statement canonical JSON");
    });
    t.check(`${where}.signing_input`, () =>
      eq(c.submissionSigningInput(obj(k["statement"], "statement")).toString("hex"), str(k, "signing_input_hex")),
    );
    t.check(`${where}.signature`, () => {
      const signature = signer().sign(hex(k, "signing_input_hex")).toString("hex");
      eq(signature, str(k, "signature_hex"), "signature");
      eq(unhex(record["producer_signature"]), Buffer.from(signature, "hex"), "record's producer_signature");
      eq(record["producer_key_id"], str(p, "key_id"), "record's producer_key_id");
    });
    t.check(`${where}.record`, () => {
      const encoded = codec.encode(str(k, "schema"), unhex(record) as Record<string, unknown>);
      eq(codec.decode(encoded).record, unhex(record), "record round trip");
    });
  }
  const l = obj(doc["lineage"], "lineage");
  sections(t, l, ["lineage_key_hex", "lineage_key_id", "entry_canonical_utf8", "signing_input_hex", "hmac", "signature_hex", "entry_hash"], "signatures.lineage");
  const entry = (): Buffer => Buffer.from(str(l, "entry_canonical_utf8"), "utf8");
  t.check("signatures.lineage.lineage_key_id", () => eq(c.hmacKeyId(hex(l, "lineage_key_hex")), str(l, "lineage_key_id")));
  t.check("signatures.lineage.entry_canonical", () =>
    eq(c.canonicalJson(parseJson(str(l, "entry_canonical_utf8"))).toString("utf8"), str(l, "entry_canonical_utf8"), "entry is canonical"),
  );
  t.check("signatures.lineage.signing_input", () => eq(c.lineageSigningInput(entry()).toString("hex"), str(l, "signing_input_hex")));
  t.check("signatures.lineage.hmac", () => eq(c.lineageHmac(hex(l, "lineage_key_hex"), entry()), str(l, "hmac")));
  t.check("signatures.lineage.signature", () => eq(signer().sign(c.lineageSigningInput(entry())).toString("hex"), str(l, "signature_hex")));
  t.check("signatures.lineage.entry_hash", () => eq(c.sha256Digest(entry()), str(l, "entry_hash")));
  const v = obj(doc["typed_value"], "typed_value");
  sections(t, v, ["redaction_key_hex", "value", "digest"], "signatures.typed_value");
  t.check("signatures.typed_value.digest", () => eq(c.typedValueDigest(hex(v, "redaction_key_hex"), str(v, "value")), str(v, "digest")));
}

/** The SPKI DER prefix of a raw Ed25519 public key (RFC 8410). */
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/** Node's (OpenSSL's) RFC 8032 verdict; a key it cannot load verifies nothing. */
function rfc8032Accepts(publicKey: Buffer, message: Buffer, signature: Buffer): boolean {
  try {
    const key = createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, publicKey]), format: "der", type: "spki" });
    return edVerify(null, message, key, signature);
  } catch {
    return false;
  }
}

/**
 * ed25519.json: the system verifies under ZIP 215, which accepts every signature an RFC 8032
 * verifier accepts. A producer SDK only signs, so it reproduces that promise: every case Node's
 * verifier accepts is `valid`, and the honest case verifies here. Cases Node refuses (small-order
 * and non-canonical points the cofactored rule accepts) contradict nothing.
 */
export function ed25519File(t: Tally, doc: Obj): void {
  sections(t, doc, ["rule", "cases"], "ed25519");
  t.check("ed25519.rule", () => {
    if (!str(doc, "rule").includes("ZIP 215")) throw new Mismatch(`the rule changed: ${str(doc, "rule")}`);
  });
  const cases = doc["cases"];
  if (!Array.isArray(cases)) throw new Mismatch("ed25519.cases is not a list");
  let honest = false;
  for (const item of cases) {
    const k = obj(item, "ed25519 case");
    sections(t, k, ["name", "public_key_hex", "signature_hex", "message_hex", "valid", "why"], `ed25519.${str(k, "name")}`);
    t.check(`ed25519.${str(k, "name")}`, () => {
      if (typeof k["valid"] !== "boolean") throw new Mismatch("valid is not a boolean");
      const accepts = rfc8032Accepts(hex(k, "public_key_hex"), hex(k, "message_hex"), hex(k, "signature_hex"));
      if (accepts && !k["valid"]) throw new Mismatch("Node's Ed25519 accepts a signature the system's rule refuses");
      if (str(k, "name") === "honest") {
        if (!accepts) throw new Mismatch("Node's Ed25519 refuses the honest signature");
        honest = true;
      }
    });
  }
  t.check("ed25519.honest", () => {
    if (!honest) throw new Mismatch("no honest case verified");
  });
}
