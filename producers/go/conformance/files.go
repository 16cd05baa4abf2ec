package conformance

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// encodeJSON encodes a record given in the vectors' JSON form with the schema name.
func (r *Runner) encodeJSON(schemaName string, record any) ([]byte, error) {
	s, err := r.codec.Schema(schemaName)
	if err != nil {
		return nil, err
	}
	native, err := toNative(s.Parsed, record, schemaName)
	if err != nil {
		return nil, err
	}
	return r.codec.Encode(schemaName, native)
}

// decodeJSON decodes single-object bytes into the vectors' JSON form.
func (r *Runner) decodeJSON(data []byte) (string, any, error) {
	var v any
	s, err := r.codec.Decode(data, &v)
	if err != nil {
		return "", nil, err
	}
	form, err := toJSONForm(s.Parsed, v)
	return s.Name, form, err
}

// reproduceRecord: encoding record gives want, and decoding want gives record (re-encoded to the same bytes).
func (r *Runner) reproduceRecord(name, schemaName string, record any, want []byte) {
	if schemaName == "" {
		r.miss(name, "the stated bytes name no known schema")
		return
	}
	got, err := r.encodeJSON(schemaName, record)
	if r.ok(name+"/encode", err) {
		r.same(name+"/encode", hex.EncodeToString(got), hex.EncodeToString(want))
	}
	decodedSchema, decoded, err := r.decodeJSON(want)
	if r.ok(name+"/decode", err) {
		if decodedSchema != schemaName {
			r.miss(name+"/decode", "decoded as %s, want %s", decodedSchema, schemaName)
		} else if !jsonEqual(decoded, record) {
			r.miss(name+"/decode", "decoded record differs from the stated record")
		} else {
			r.pass(name + "/decode")
		}
	}
}

func seedSigner(r *Runner, name string, seed []byte) *bernstein.Signer {
	s, err := bernstein.NewSigner(seed)
	if err != nil {
		r.miss(name, "%v", err)
		return nil
	}
	return s
}

func hexs(b []byte) string { return hex.EncodeToString(b) }

// --- avro.json -------------------------------------------------------------------

func runAvro(r *Runner, doc obj) {
	if !strings.Contains(doc.str("encoding"), "c3 01") {
		r.miss("avro/encoding", "does not describe the single-object form")
	} else {
		r.pass("avro/encoding")
	}
	seen := map[string]bool{}
	for _, item := range doc.objs("schemas") {
		item.onlyKeys("schema", "parsing_canonical_form", "fingerprint_crc64_avro_le", "record", "single_object_hex")
		name := item.str("schema")
		seen[name] = true
		base := "avro/" + name
		s, err := r.codec.Schema(name)
		if !r.ok(base, err) {
			continue
		}
		r.same(base+"/parsing_canonical_form", s.CanonicalForm, item.str("parsing_canonical_form"))
		r.same(base+"/fingerprint", hexs(s.Fingerprint[:]), item.str("fingerprint_crc64_avro_le"))
		// Every schema has a sample (a missing record or bytes is a miss: "not stated").
		record, stated := item.raw("record")
		want := item.hex("single_object_hex")
		if !stated {
			continue
		}
		r.reproduceRecord(base, name, record, want)
		// The SDK's own typed path for what it publishes.
		switch name {
		case bernstein.SchemaActivitySubmissionV3:
			r.sdkSubmission(base+"/sdk_struct", record, want)
		case bernstein.SchemaRunCloseV2:
			r.sdkRunClose(base+"/sdk_struct", record, want)
		case bernstein.SchemaComputerUseV2:
			r.sdkComputerUseAction(base+"/sdk_struct", want)
		}
	}
	for _, name := range r.codec.Names() {
		if !seen[name] {
			r.miss("avro/"+name, "the SDK embeds a schema the vectors do not pin")
		}
	}
}

func (r *Runner) sdkSubmission(name string, record any, want []byte) {
	var sub bernstein.ActivitySubmission
	if _, err := r.codec.Decode(want, &sub); !r.ok(name, err) {
		return
	}
	got, err := sub.Encode()
	if r.ok(name, err) {
		r.same(name, hexs(got), hexs(want))
	}
}

func (r *Runner) sdkComputerUseAction(name string, want []byte) {
	var a bernstein.ComputerUseAction
	if _, err := r.codec.Decode(want, &a); !r.ok(name, err) {
		return
	}
	got, err := a.Encode()
	if r.ok(name, err) {
		r.same(name, hexs(got), hexs(want))
	}
}

func (r *Runner) sdkRunClose(name string, record any, want []byte) {
	var rc bernstein.RunClose
	if _, err := r.codec.Decode(want, &rc); !r.ok(name, err) {
		return
	}
	got, err := rc.Encode()
	if r.ok(name, err) {
		r.same(name, hexs(got), hexs(want))
	}
}

// --- canonical_json.json -----------------------------------------------------------

func runCanonical(r *Runner, doc obj) {
	r.same("canonical_json/rule", doc.str("rule"), "rfc8785")
	for _, c := range doc.objs("cases") {
		c.onlyKeys("name", "input", "canonical_hex", "canonical_utf8", "sha256")
		name := "canonical_json/" + c.str("name")
		input, _ := c.raw("input")
		got, err := bernstein.CanonicalJSON(input)
		if !r.ok(name, err) {
			continue
		}
		r.same(name+"/canonical_hex", hexs(got), c.str("canonical_hex"))
		r.same(name+"/canonical_utf8", string(got), c.str("canonical_utf8"))
		r.same(name+"/sha256", bernstein.SHA256Digest(got), c.str("sha256"))
	}
	for _, c := range doc.objs("refused") {
		c.onlyKeys("name", "input_repr", "refused")
		name := "canonical_json/refused/" + c.str("name")
		repr := c.str("input_repr")
		var input any
		switch repr {
		case "nan":
			input = math.NaN()
		case "inf", "-inf":
			input = math.Inf(1)
		default:
			parsed, err := bernstein.ParseJSON([]byte(repr))
			if err != nil {
				// Python's repr of the value is not JSON: the input is not stated in a form we can read.
				r.miss(name, "input_repr %q is not JSON: cannot recompute", repr)
				continue
			}
			input = parsed
		}
		if refused, _ := c.raw("refused"); refused != true {
			r.miss(name, "refused is not true")
			continue
		}
		if _, err := bernstein.CanonicalJSON(input); err == nil {
			r.miss(name, "accepted a value the reference refuses")
		} else {
			r.pass(name)
		}
	}
}

// --- digests.json --------------------------------------------------------------------

func runDigests(r *Runner, doc obj) {
	for i, c := range doc.objs("content_hash") {
		c.onlyKeys("bytes_hex", "digest")
		r.same(fmt.Sprintf("digests/content_hash[%d]", i), bernstein.ContentHash(c.hex("bytes_hex")), c.str("digest"))
	}
	for i, c := range doc.objs("artifact_hash") {
		c.onlyKeys("artifact_hex", "digest")
		r.same(fmt.Sprintf("digests/artifact_hash[%d]", i), bernstein.ArtifactHash(c.hex("artifact_hex")), c.str("digest"))
	}
	for i, c := range doc.objs("evidence_set_hash") {
		c.onlyKeys("members", "digest")
		name := fmt.Sprintf("digests/evidence_set_hash[%d]", i)
		got, err := bernstein.EvidenceSetHash(c.strs("members"))
		if r.ok(name, err) {
			r.same(name, got, c.str("digest"))
		}
	}
	for i, item := range doc.list("malformed_digests") {
		name := fmt.Sprintf("digests/malformed_digests[%d]", i)
		s, _ := item.(string)
		_, err := bernstein.EvidenceSetHash([]string{s})
		if bernstein.IsDigest(s) || err == nil {
			r.miss(name, "accepted %q", s)
		} else {
			r.pass(name)
		}
	}
}

// --- chain.json ------------------------------------------------------------------------

func runChain(r *Runner, doc obj) {
	for i, p := range doc.objs("pae") {
		p.onlyKeys("type", "body_hex", "pae_hex")
		r.same(fmt.Sprintf("chain/pae[%d]", i), hexs(bernstein.PAE(p.str("type"), p.hex("body_hex"))), p.str("pae_hex"))
	}
	j := doc.obj("journal")
	j.onlyKeys("run_id", "genesis", "entry", "entry_schema", "entry_payload_hex", "entry_hash")
	r.same("chain/journal/genesis", bernstein.JournalGenesis(j.str("run_id")), j.str("genesis"))
	entry := j.obj("entry")
	r.same("chain/journal/entry.prev_hash", entry.str("prev_hash"), j.str("genesis"))
	payload := j.hex("entry_payload_hex")
	r.reproduceRecord("chain/journal/entry", j.str("entry_schema"), entry.m, payload)
	r.same("chain/journal/entry_hash", bernstein.JournalEntryHash(payload), j.str("entry_hash"))

	s := doc.obj("seal")
	s.onlyKeys("ed25519_seed_hex", "public_key_hex", "key_id", "seal", "seal_schema", "seal_payload_hex", "signing_input_hex", "signature_hex")
	if signer := seedSigner(r, "chain/seal", s.hex("ed25519_seed_hex")); signer != nil {
		r.same("chain/seal/public_key", hexs(signer.PublicKey()), s.str("public_key_hex"))
		r.same("chain/seal/key_id", signer.KeyID(), s.str("key_id"))
		sealPayload := s.hex("seal_payload_hex")
		r.reproduceRecord("chain/seal/seal", s.str("seal_schema"), s.obj("seal").m, sealPayload)
		input := bernstein.SealSigningInput(sealPayload)
		r.same("chain/seal/signing_input", hexs(input), s.str("signing_input_hex"))
		r.same("chain/seal/signature", hexs(signer.Sign(input)), s.str("signature_hex"))
		r.same("chain/seal/seal.head_hash", s.obj("seal").str("head_hash"), j.str("entry_hash"))
	}

	a := doc.obj("audit")
	a.onlyKeys("hmac_key_hex", "hmac_key_id", "genesis_partition_0", "entry", "entry_schema", "entry_payload_hex", "mac")
	key := a.hex("hmac_key_hex")
	r.same("chain/audit/hmac_key_id", bernstein.HMACKeyID(key), a.str("hmac_key_id"))
	r.same("chain/audit/genesis_partition_0", bernstein.AuditGenesis(key, 0), a.str("genesis_partition_0"))
	auditEntry := a.obj("entry")
	r.same("chain/audit/entry.prev_mac", auditEntry.str("prev_mac"), a.str("genesis_partition_0"))
	r.same("chain/audit/entry.record_hash", auditEntry.str("record_hash"), j.str("entry_hash"))
	auditPayload := a.hex("entry_payload_hex")
	r.reproduceRecord("chain/audit/entry", a.str("entry_schema"), auditEntry.m, auditPayload)
	r.same("chain/audit/mac", bernstein.AuditMAC(key, auditPayload), a.str("mac"))
}

// --- checkpoints.json -------------------------------------------------------------------

func runCheckpoints(r *Runner, doc obj) {
	a := doc.obj("audit_record_v2")
	a.onlyKeys("hmac_key_hex", "key_id", "entry", "entry_schema", "entry_payload_hex", "mac_input_hex", "mac", "mac_v1_of_same_payload",
		"record_schema", "record_hex")
	key := a.hex("hmac_key_hex")
	keyID := a.str("key_id")
	r.same("checkpoints/audit_record_v2/key_id", bernstein.HMACKeyID(key), keyID)
	payload := a.hex("entry_payload_hex")
	r.reproduceRecord("checkpoints/audit_record_v2/entry", a.str("entry_schema"), a.obj("entry").m, payload)
	r.same("checkpoints/audit_record_v2/mac_input", hexs(bernstein.AuditRecordMACInput(keyID, payload)), a.str("mac_input_hex"))
	mac := bernstein.AuditRecordMAC(key, keyID, payload)
	r.same("checkpoints/audit_record_v2/mac", mac, a.str("mac"))
	r.same("checkpoints/audit_record_v2/mac_v1_of_same_payload", bernstein.AuditMAC(key, payload), a.str("mac_v1_of_same_payload"))
	record := a.hex("record_hex")
	envelope := map[string]any{"key_id": keyID, "payload": map[string]any{"hex": hexs(payload)}, "mac": mac}
	r.reproduceRecord("checkpoints/audit_record_v2/record", a.str("record_schema"), envelope, record)

	c := doc.obj("checkpoints")
	c.onlyKeys("ed25519_seed_hex", "public_key_hex", "key_id", "genesis_partition_0", "chain")
	signer := seedSigner(r, "checkpoints/checkpoints", c.hex("ed25519_seed_hex"))
	if signer == nil {
		return
	}
	r.same("checkpoints/checkpoints/public_key", hexs(signer.PublicKey()), c.str("public_key_hex"))
	r.same("checkpoints/checkpoints/key_id", signer.KeyID(), c.str("key_id"))
	r.same("checkpoints/checkpoints/genesis_partition_0", bernstein.CheckpointGenesis(0), c.str("genesis_partition_0"))
	prev := bernstein.CheckpointGenesis(0)
	for i, link := range c.objs("chain") {
		link.onlyKeys("checkpoint", "payload_schema", "payload_hex", "signing_input_hex", "signature_hex", "record_schema", "record_hex",
			"checkpoint_hash")
		name := fmt.Sprintf("checkpoints/checkpoints/chain[%d]", i)
		cp := link.obj("checkpoint")
		r.same(name+"/checkpoint.prev_hash", cp.str("prev_hash"), prev)
		cpPayload := link.hex("payload_hex")
		r.reproduceRecord(name+"/checkpoint", link.str("payload_schema"), cp.m, cpPayload)
		input := bernstein.CheckpointSigningInput(cpPayload)
		r.same(name+"/signing_input", hexs(input), link.str("signing_input_hex"))
		sig := signer.Sign(input)
		r.same(name+"/signature", hexs(sig), link.str("signature_hex"))
		rec := link.hex("record_hex")
		env := map[string]any{"payload": map[string]any{"hex": hexs(cpPayload)}, "key_id": signer.KeyID(), "signature": map[string]any{"hex": hexs(sig)}}
		r.reproduceRecord(name+"/record", link.str("record_schema"), env, rec)
		prev = bernstein.CheckpointHash(cpPayload)
		r.same(name+"/checkpoint_hash", prev, link.str("checkpoint_hash"))
	}
}

// --- modalities.json ----------------------------------------------------------------------

func runModalities(r *Runner, doc obj) {
	p := doc.obj("dataops_plan")
	p.onlyKeys("input_hashes", "steps", "plan_document_canonical", "plan_hash")
	planDoc, err := bernstein.PlanDocument(p.strs("input_hashes"), p.strs("steps"))
	if r.ok("modalities/dataops_plan", err) {
		text, err := bernstein.CanonicalJSON(planDoc)
		if r.ok("modalities/dataops_plan/plan_document_canonical", err) {
			r.same("modalities/dataops_plan/plan_document_canonical", string(text), p.str("plan_document_canonical"))
		}
		h, _ := bernstein.PlanHash(p.strs("input_hashes"), p.strs("steps"))
		r.same("modalities/dataops_plan/plan_hash", h, p.str("plan_hash"))
	}

	c := doc.obj("computer_use")
	c.onlyKeys("hmac_key_hex", "typed_value", "typed_value_digest", "session_genesis", "screenshot_hex", "dom_digest",
		"observation_hash", "action", "action_anchor", "run_id", "session_id")
	key := c.hex("hmac_key_hex")
	digest := bernstein.TypedValueDigest(key, c.str("typed_value"))
	r.same("modalities/computer_use/typed_value_digest", digest, c.str("typed_value_digest"))
	action := c.obj("action")
	r.same("modalities/computer_use/action.value_digest", action.str("value_digest"), digest)
	obsHash, err := bernstein.ObservationHash(c.hex("screenshot_hex"), c.str("dom_digest"))
	if r.ok("modalities/computer_use/observation_hash", err) {
		r.same("modalities/computer_use/observation_hash", obsHash, c.str("observation_hash"))
	}
	// session_genesis = genesis(run_id, session_id), from the ids the vector states.
	genesis, err := bernstein.ComputerUseGenesis(c.str("run_id"), c.str("session_id"))
	if r.ok("modalities/computer_use/session_genesis", err) {
		r.same("modalities/computer_use/session_genesis", genesis, c.str("session_genesis"))
	}
	anchor, err := bernstein.ActionAnchor(c.str("session_genesis"), c.str("observation_hash"), action.m)
	if r.ok("modalities/computer_use/action_anchor", err) {
		r.same("modalities/computer_use/action_anchor", anchor, c.str("action_anchor"))
	}
}

func (r *Runner) lineageEntry() (map[string]any, bool) {
	sig, ok := r.files["signatures.json"]
	if !ok {
		return nil, false
	}
	lineage, _ := sig["lineage"].(map[string]any)
	text, _ := lineage["entry_canonical_utf8"].(string)
	v, err := bernstein.ParseJSON([]byte(text))
	m, isMap := v.(map[string]any)
	return m, err == nil && isMap
}

// --- signatures.json ------------------------------------------------------------------------

func runSignatures(r *Runner, doc obj) {
	p := doc.obj("producer")
	p.onlyKeys("ed25519_seed_hex", "public_key_hex", "key_id", "signing_domain", "rule")
	signer := seedSigner(r, "signatures/producer", p.hex("ed25519_seed_hex"))
	if signer == nil {
		return
	}
	r.same("signatures/producer/public_key", hexs(signer.PublicKey()), p.str("public_key_hex"))
	r.same("signatures/producer/key_id", signer.KeyID(), p.str("key_id"))
	r.same("signatures/producer/signing_domain", bernstein.DomainSubmission, p.str("signing_domain"))
	if !strings.Contains(p.str("rule"), "PAE(signing_domain, canonical_json(statement))") {
		r.miss("signatures/producer/rule", "the rule changed: %q", p.str("rule"))
	} else {
		r.pass("signatures/producer/rule")
	}

	// activity_submission: the SDK builds the statement from the record, signs it, and encodes the record.
	a := doc.obj("activity_submission")
	a.onlyKeys("schema", "record", "statement", "statement_canonical_utf8", "signing_input_hex", "signature_hex")
	r.same("signatures/activity_submission/schema", a.str("schema"), bernstein.SchemaActivitySubmissionV3)
	recordJSON, _ := a.raw("record")
	encoded, err := r.encodeJSON(bernstein.SchemaActivitySubmissionV3, recordJSON)
	var sub bernstein.ActivitySubmission
	if r.ok("signatures/activity_submission/record", err) {
		if _, err := r.codec.Decode(encoded, &sub); r.ok("signatures/activity_submission/record", err) {
			r.signedStatement("signatures/activity_submission", a, bernstein.SubmissionStatement(&sub, signer.KeyID()), signer)
			resigned := sub
			if r.ok("signatures/activity_submission/sdk_sign", resigned.Sign(signer)) {
				again, _ := resigned.Encode()
				r.same("signatures/activity_submission/sdk_sign", hexs(again), hexs(encoded))
			}
		}
	}

	c := doc.obj("run_close")
	c.onlyKeys("schema", "record", "statement", "statement_canonical_utf8", "signing_input_hex", "signature_hex")
	r.same("signatures/run_close/schema", c.str("schema"), bernstein.SchemaRunCloseV2)
	closeJSON, _ := c.raw("record")
	encodedClose, err := r.encodeJSON(bernstein.SchemaRunCloseV2, closeJSON)
	var rc bernstein.RunClose
	if r.ok("signatures/run_close/record", err) {
		if _, err := r.codec.Decode(encodedClose, &rc); r.ok("signatures/run_close/record", err) {
			st := bernstein.RunCloseStatement(rc.SubmissionID, rc.RunID, rc.Producer.ID, rc.OccurredAtMS, signer.KeyID())
			r.signedStatement("signatures/run_close", c, st, signer)
			resigned := rc
			if r.ok("signatures/run_close/sdk_sign", resigned.Sign(signer)) {
				again, _ := resigned.Encode()
				r.same("signatures/run_close/sdk_sign", hexs(again), hexs(encodedClose))
			}
		}
	}

	l := doc.obj("lineage")
	l.onlyKeys("lineage_key_hex", "lineage_key_id", "entry_canonical_utf8", "signing_input_hex", "hmac", "signature_hex", "entry_hash")
	lineageKey := l.hex("lineage_key_hex")
	r.same("signatures/lineage/lineage_key_id", bernstein.HMACKeyID(lineageKey), l.str("lineage_key_id"))
	entryText := l.str("entry_canonical_utf8")
	canon, err := bernstein.CanonicalizeJSONText([]byte(entryText))
	if r.ok("signatures/lineage/entry_canonical_utf8", err) {
		r.same("signatures/lineage/entry_canonical_utf8", string(canon), entryText)
	}
	entry := []byte(entryText)
	input := bernstein.LineageSigningInput(entry)
	r.same("signatures/lineage/signing_input", hexs(input), l.str("signing_input_hex"))
	r.same("signatures/lineage/hmac", bernstein.LineageHMAC(lineageKey, entry), l.str("hmac"))
	r.same("signatures/lineage/signature", hexs(signer.Sign(input)), l.str("signature_hex"))
	r.same("signatures/lineage/entry_hash", bernstein.SHA256Digest(entry), l.str("entry_hash"))
	if m, ok := r.lineageEntry(); ok {
		r.same("signatures/lineage/entry.key_id", fmt.Sprint(m["key_id"]), signer.KeyID())
		r.same("signatures/lineage/entry.hmac_key_id", fmt.Sprint(m["hmac_key_id"]), l.str("lineage_key_id"))
		genesis, _ := bernstein.ComputerUseGenesis(fmt.Sprint(m["run_id"]), fmt.Sprint(m["session_id"]))
		parents, _ := m["parent_hashes"].([]any)
		if len(parents) == 1 && parents[0] == genesis && m["action_index"] == json.Number("0") {
			r.pass("signatures/lineage/entry.parent_hashes")
		} else {
			r.miss("signatures/lineage/entry.parent_hashes", "the first action's parent is not its session's genesis %s", genesis)
		}
	}

	t := doc.obj("typed_value")
	t.onlyKeys("redaction_key_hex", "value", "digest")
	r.same("signatures/typed_value", bernstein.TypedValueDigest(t.hex("redaction_key_hex"), t.str("value")), t.str("digest"))
}

func (r *Runner) signedStatement(name string, v obj, statement map[string]any, signer *bernstein.Signer) {
	stated, _ := v.raw("statement")
	ours, err1 := bernstein.CanonicalJSON(statement)
	theirs, err2 := bernstein.CanonicalJSON(stated)
	if err1 != nil || err2 != nil {
		r.miss(name+"/statement", "cannot canonicalize: %v %v", err1, err2)
		return
	}
	r.same(name+"/statement", string(ours), string(theirs))
	r.same(name+"/statement_canonical_utf8", string(ours), v.str("statement_canonical_utf8"))
	input, err := bernstein.SubmissionSigningInput(statement)
	if !r.ok(name+"/signing_input", err) {
		return
	}
	r.same(name+"/signing_input", hexs(input), v.str("signing_input_hex"))
	sig := signer.Sign(input)
	r.same(name+"/signature", hexs(sig), v.str("signature_hex"))
	if !ed25519.Verify(signer.PublicKey(), input, v.hex("signature_hex")) {
		r.miss(name+"/signature_verifies", "the stated signature does not verify")
	} else {
		r.pass(name + "/signature_verifies")
	}
}
