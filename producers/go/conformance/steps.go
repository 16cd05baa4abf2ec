package conformance

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// runSteps reproduces schemas/vectors/steps.json (what the scheduler writes for given input bytes)
// from the producer's side: the keys from their seeds; every input's bytes from its record (or, for
// an input that is no record, the codec's refusal of it); every signed input's signature from its
// producer's seed; every accepted submission rebuilt byte for byte through the SDK's own builder,
// signer and encoder; the partition of every input by murmur2; and every output decoded to exactly its record (and payload), re-encoded to the same
// bytes, with its entry hash, audit MAC or seal/checkpoint signature recomputed.
func runSteps(r *Runner, doc obj) {
	if doc.str("description") == "" {
		r.miss("steps/description", "empty")
	} else {
		r.pass("steps/description")
	}
	if doc.str("manifest_toml") == "" {
		r.miss("steps/manifest_toml", "empty")
	} else {
		r.pass("steps/manifest_toml")
	}
	partitions := int(doc.int("submission_partitions"))
	keys := doc.obj("keys")
	keys.onlyKeys("audit_hmac_key_hex", "audit_key_id", "seal_ed25519_seed_hex", "seal_key_id", "producers", "receipt_signer")
	auditKey := keys.hex("audit_hmac_key_hex")
	r.same("steps/keys/audit_key_id", bernstein.HMACKeyID(auditKey), keys.str("audit_key_id"))
	seal := seedSigner(r, "steps/keys/seal", keys.hex("seal_ed25519_seed_hex"))
	if seal != nil {
		r.same("steps/keys/seal_key_id", seal.KeyID(), keys.str("seal_key_id"))
	}
	signers := map[string]*bernstein.Signer{}
	lineageKeys := map[string][]byte{}
	producers := keys.obj("producers")
	names := make([]string, 0, len(producers.m))
	for n := range producers.m {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := producers.obj(n)
		p.onlyKeys("ed25519_seed_hex", "key_id", "public_key_hex", "registered", "lineage_hmac_key_hex", "lineage_hmac_key_id")
		lineageKeys[n] = p.hex("lineage_hmac_key_hex")
		r.same("steps/keys/producers/"+n+"/lineage_hmac_key_id", bernstein.HMACKeyID(lineageKeys[n]), p.str("lineage_hmac_key_id"))
		s := seedSigner(r, "steps/keys/producers/"+n, p.hex("ed25519_seed_hex"))
		if s == nil {
			continue
		}
		r.same("steps/keys/producers/"+n+"/key_id", s.KeyID(), p.str("key_id"))
		r.same("steps/keys/producers/"+n+"/public_key", hexs(s.PublicKey()), p.str("public_key_hex"))
		signers[s.KeyID()] = s
	}
	rs := keys.obj("receipt_signer")
	rs.onlyKeys("ed25519_seed_hex", "public_key_hex", "key_id")
	receiptSigner := seedSigner(r, "steps/keys/receipt_signer", rs.hex("ed25519_seed_hex"))
	if receiptSigner != nil {
		r.same("steps/keys/receipt_signer/key_id", receiptSigner.KeyID(), rs.str("key_id"))
		r.same("steps/keys/receipt_signer/public_key", hexs(receiptSigner.PublicKey()), rs.str("public_key_hex"))
	}
	blobs := map[string][]byte{}
	blobDoc := doc.obj("blobs")
	blobNames := make([]string, 0, len(blobDoc.m))
	for digest := range blobDoc.m {
		blobNames = append(blobNames, digest)
	}
	slices.Sort(blobNames)
	for _, digest := range blobNames {
		data := blobDoc.hex(digest)
		blobs[digest] = data
		r.same("steps/blobs/"+digest, bernstein.ContentHash(data), digest)
	}
	rule := r.headersRule(doc.obj("headers_rule"))
	ctx := &stepContext{signers: signers, lineageKeys: lineageKeys, receiptSigner: receiptSigner, blobs: blobs}

	for _, c := range doc.objs("cases") {
		c.onlyKeys("name", "note", "expect", "inputs", "outputs", "submission_partitions")
		name := "steps/" + c.str("name")
		partitions := partitions
		if c.has("submission_partitions") {
			partitions = int(c.int("submission_partitions"))
		}
		expect := c.str("expect")
		inputs := c.objs("inputs")
		outputs := c.objs("outputs")
		journalled := map[int64]bool{}
		for _, out := range outputs {
			if out.str("stream") == "journal" {
				journalled[out.int("input_index")] = true
			}
		}
		for i, in := range inputs {
			last := i == len(inputs)-1
			r.stepInput(fmt.Sprintf("%s/inputs[%d]", name, i), in, expect, last, journalled[int64(i)], partitions, signers)
			r.stepInputBlobs(fmt.Sprintf("%s/inputs[%d]", name, i), in, expect, last, journalled[int64(i)], ctx)
		}
		seen := map[int64]int{}
		for i, out := range outputs {
			r.stepOutput(fmt.Sprintf("%s/outputs[%d]", name, i), out, auditKey, seal)
			index := out.int("input_index")
			if index < 0 || int(index) >= len(inputs) {
				r.miss(fmt.Sprintf("%s/outputs[%d]/input_index", name, i), "names no input")
				continue
			}
			r.headers(fmt.Sprintf("%s/outputs[%d]/headers", name, i), rule, out, inputs[index], seen[index])
			seen[index]++
		}
	}
}

func (r *Runner) stepInput(name string, in obj, expect string, last, journalled bool, partitions int, signers map[string]*bernstein.Signer) {
	in.onlyKeys("topic", "partition", "offset", "timestamp_ms", "key_utf8", "key_hex", "value_hex", "schema", "record", "stage")
	key := in.hex("key_hex")
	if utf8Key, ok := in.m["key_utf8"].(string); ok {
		r.same(name+"/key_utf8", hex.EncodeToString([]byte(utf8Key)), hex.EncodeToString(key))
	} else if in.m["key_utf8"] != nil || utf8.Valid(key) {
		r.miss(name+"/key_utf8", "key_utf8 must be the key's text when it is UTF-8")
	}
	wantPartition := strconv.Itoa(bernstein.PartitionFor(key, partitions))
	gotPartition := strconv.FormatInt(in.int("partition"), 10)
	if last && expect == "WRONG_PARTITION" {
		if gotPartition == wantPartition {
			r.miss(name+"/partition", "a WRONG_PARTITION case sits on murmur2's partition %s", wantPartition)
		} else {
			r.pass(name + "/partition")
		}
	} else {
		r.same(name+"/partition", gotPartition, wantPartition)
	}
	value := in.hex("value_hex")
	schemaName, _ := in.m["schema"].(string)
	record := in.m["record"]
	if schemaName == "" {
		var v any
		if _, err := r.codec.Decode(value, &v); err == nil {
			r.miss(name+"/value", "an input stated as no record decodes as one")
		} else if expect != "deadletter" || !last {
			r.miss(name+"/value", "an input that is no record must be the last input of a deadletter case")
		} else {
			r.pass(name + "/value")
		}
		return
	}
	r.reproduceRecord(name+"/value", schemaName, record, value)
	if stage, ok := in.m["stage"]; ok {
		r.describedStage(name+"/stage", stage, value, signers)
	}
	// The signature, recomputed from the producer's seed over the statement of the decoded record.
	var sig, wantSig []byte
	var keyID string
	switch schemaName {
	case bernstein.SchemaActivitySubmissionV3:
		var sub bernstein.ActivitySubmission
		if _, err := r.codec.Decode(value, &sub); !r.ok(name+"/signature", err) {
			return
		}
		keyID, wantSig = sub.ProducerKeyID, sub.ProducerSignature
		r.submissionHashes(name, &sub, expect, last)
		if s := signers[keyID]; s != nil {
			resigned := sub
			if r.ok(name+"/signature", resigned.Sign(s)) {
				sig = resigned.ProducerSignature
			}
		}
		if journalled {
			r.sdkRebuild(name+"/sdk_rebuild", &sub, signers[keyID], value)
		}
	case bernstein.SchemaRunCloseV2:
		var rc bernstein.RunClose
		if _, err := r.codec.Decode(value, &rc); !r.ok(name+"/signature", err) {
			return
		}
		keyID, wantSig = rc.ProducerKeyID, rc.ProducerSignature
		if s := signers[keyID]; s != nil {
			resigned := rc
			if r.ok(name+"/signature", resigned.Sign(s)) {
				sig = resigned.ProducerSignature
			}
		}
	case "ComputerUseAction.v2":
		r.computerUseAction(name, record, expect, last, signers)
		return
	default:
		return
	}
	switch {
	case signers[keyID] == nil:
		// Signed by a key the vectors do not list: only a refusal of that key may come of it.
		if !last || (expect != "PRODUCER_KEY_UNKNOWN" && expect != "SUBMISSION_SIGNATURE_INVALID") {
			r.miss(name+"/signature", "signed by key %s, which keys.producers does not list", keyID)
		} else {
			r.pass(name + "/signature")
		}
	case last && expect == "SUBMISSION_SIGNATURE_INVALID":
		if bytes.Equal(sig, wantSig) {
			r.miss(name+"/signature", "the signature of a SUBMISSION_SIGNATURE_INVALID case is valid")
		} else {
			r.pass(name + "/signature")
		}
	default:
		r.same(name+"/signature", hexs(sig), hexs(wantSig))
	}
}

// sdkRebuild builds an accepted submission again through the SDK's publishing path
// (BuildResult -> NewSubmission -> Sign -> Encode) and requires the same bytes.
func (r *Runner) sdkRebuild(name string, sub *bernstein.ActivitySubmission, signer *bernstein.Signer, want []byte) {
	if signer == nil {
		r.miss(name, "no seed for the signing key")
		return
	}
	result, err := bernstein.BuildResult(sub.Kind, sub.Artifact, sub.Observations, bernstein.Outcome{TerminalState: sub.TerminalState, ReasonCode: sub.ReasonCode})
	if !r.ok(name, err) {
		return
	}
	rebuilt, err := bernstein.NewSubmission(result, sub.SubmissionID, sub.RunID, sub.StageID, sub.Role, sub.Producer.ID, sub.OccurredAtMS)
	if !r.ok(name, err) {
		return
	}
	rebuilt.Producer.SDK = sub.Producer.SDK
	if !r.ok(name, rebuilt.Sign(signer)) {
		return
	}
	got, err := rebuilt.Encode()
	if r.ok(name, err) {
		r.same(name, hexs(got), hexs(want))
	}
}

func (r *Runner) stepOutput(name string, out obj, auditKey []byte, seal *bernstein.Signer) {
	out.onlyKeys("stream", "input_index", "partition", "key_hex", "timestamp_ms", "headers", "value_hex", "schema", "record",
		"payload_schema", "payload_record")
	for i, h := range out.objs("headers") {
		h.onlyKeys("name", "value_utf8", "value_hex")
		if h.str("name") == "" {
			r.miss(fmt.Sprintf("%s/headers[%d]", name, i), "header without a name")
		}
	}
	value := out.hex("value_hex")
	schemaName := out.str("schema")
	record := out.obj("record")
	r.reproduceRecord(name+"/value", schemaName, record.m, value)
	if !out.has("payload_schema") {
		return
	}
	payloadHex, _ := record.m["payload"].(map[string]any)
	text, _ := payloadHex["hex"].(string)
	payload, err := hex.DecodeString(text)
	if !r.ok(name+"/payload", err) {
		return
	}
	payloadRecord, _ := out.raw("payload_record")
	r.reproduceRecord(name+"/payload", out.str("payload_schema"), payloadRecord, payload)
	switch schemaName {
	case "JournalRecord.v1":
		r.same(name+"/entry_hash", bernstein.JournalEntryHash(payload), record.str("entry_hash"))
	case "AuditRecord.v2":
		r.same(name+"/mac", bernstein.AuditRecordMAC(auditKey, record.str("key_id"), payload), record.str("mac"))
	case "SealRecord.v1", "CheckpointRecord.v1":
		input := bernstein.SealSigningInput(payload)
		if schemaName == "CheckpointRecord.v1" {
			input = bernstein.CheckpointSigningInput(payload)
		}
		sigHex, _ := record.m["signature"].(map[string]any)
		if seal == nil {
			r.miss(name+"/signature", "no seal key")
		} else {
			r.same(name+"/signature", hexs(seal.Sign(input)), fmt.Sprint(sigHex["hex"]))
		}
	default:
		r.miss(name+"/payload", "not covered: an envelope of schema %s", schemaName)
	}
}

// describedStage publishes-without-Kafka an activity description (a `bernstein submit` line) the
// way bernstein-go-emit does (ParseDescription -> Result -> NewSubmission -> Sign -> Encode), with
// the submission id, occurred_at_ms and producer of the stated record, and requires the stated bytes.
func (r *Runner) describedStage(name string, stage any, want []byte, signers map[string]*bernstein.Signer) {
	var sub bernstein.ActivitySubmission
	if _, err := r.codec.Decode(want, &sub); !r.ok(name, err) {
		return
	}
	text, err := json.Marshal(stage)
	if !r.ok(name, err) {
		return
	}
	d, err := bernstein.ParseDescription(text, 1, ".")
	if !r.ok(name, err) {
		return
	}
	result, err := d.Result()
	if !r.ok(name, err) {
		return
	}
	built, err := bernstein.NewSubmission(result, sub.SubmissionID, d.RunID, d.StageID, d.Role, sub.Producer.ID, sub.OccurredAtMS)
	if !r.ok(name, err) {
		return
	}
	built.Producer.SDK = sub.Producer.SDK
	signer := signers[sub.ProducerKeyID]
	if signer == nil {
		r.miss(name, "no seed for the signing key %s", sub.ProducerKeyID)
		return
	}
	if !r.ok(name, built.Sign(signer)) {
		return
	}
	got, err := built.Encode()
	if r.ok(name, err) {
		r.same(name, hexs(got), hexs(want))
	}
}

// computerUseAction recomputes what a browser producer derives for an action: the anchor from
// prev_anchor, observation_hash and the action; and the Ed25519 signature of its lineage entry
// from the producer's seed. The case that breaks one of them must differ there (and only the last
// input of a case may be broken). The lineage HMAC is recomputed with the blobs (derived.go).
func (r *Runner) computerUseAction(name string, record any, expect string, last bool, signers map[string]*bernstein.Signer) {
	rec, _ := record.(map[string]any)
	action, _ := rec["action"].(map[string]any)
	anchor, err := bernstein.ActionAnchor(fmt.Sprint(rec["prev_anchor"]), fmt.Sprint(rec["observation_hash"]), action)
	if !r.ok(name+"/anchor", err) {
		return
	}
	r.expectSame(name+"/anchor", anchor, fmt.Sprint(rec["anchor"]), last && expect == "ANCHOR_MISMATCH")
	lineage, _ := rec["lineage"].(map[string]any)
	entryHex, _ := lineage["entry"].(map[string]any)
	entry, err := hex.DecodeString(fmt.Sprint(entryHex["hex"]))
	if !r.ok(name+"/lineage_signature", err) {
		return
	}
	sigHex, _ := lineage["signature"].(map[string]any)
	stated := fmt.Sprint(sigHex["hex"])
	signer := signers[fmt.Sprint(lineage["key_id"])]
	if signer == nil {
		if last && expect == "LINEAGE_KEY_NOT_PINNED" {
			r.pass(name + "/lineage_signature")
		} else {
			r.miss(name+"/lineage_signature", "signed by key %v, which keys.producers does not list", lineage["key_id"])
		}
		return
	}
	broken := last && (expect == "LINEAGE_SIGNATURE_INVALID" || expect == "LINEAGE_MALFORMED")
	r.expectSame(name+"/lineage_signature", hexs(signer.Sign(bernstein.LineageSigningInput(entry))), stated, broken)
}

// expectSame: got equals want, or (broken) must differ.
func (r *Runner) expectSame(name, got, want string, broken bool) {
	switch {
	case !broken:
		r.same(name, got, want)
	case got == want:
		r.miss(name, "the case that breaks this value states a correct one (%s)", clip(got))
	default:
		r.pass(name)
	}
}

// submissionHashes recomputes a submission's artifact_hash and evidence_set_hash. The last input of
// ARTIFACT_HASH_MISMATCH / EVIDENCE_SET_HASH_MISMATCH must state another; the last input of a case
// refused by a check made before the hashes are compared (malformed digests, observations,
// sizes, artifact size) may; every other input must state exactly the recomputed value.
func (r *Runner) submissionHashes(name string, sub *bernstein.ActivitySubmission, expect string, last bool) {
	earlier := last && slices.Contains([]string{"MALFORMED_DIGEST", "TOO_MANY_OBSERVATIONS", "INVALID_OBSERVATION",
		"INVALID_EVIDENCE_SIZE", "ARTIFACT_TOO_LARGE"}, expect)
	check := func(field, got, stated string, mustDiffer bool) {
		if earlier && got != stated {
			r.pass(name + "/" + field)
			return
		}
		r.expectSame(name+"/"+field, got, stated, mustDiffer)
	}
	check("artifact_hash", bernstein.ArtifactHash(sub.Artifact), sub.ArtifactHash, last && expect == "ARTIFACT_HASH_MISMATCH")
	hashes := make([]string, 0, len(sub.Observations))
	for _, o := range sub.Observations {
		hashes = append(hashes, o.ContentHash)
	}
	evidence, err := bernstein.EvidenceSetHash(hashes)
	if err != nil {
		if earlier {
			r.pass(name + "/evidence_set_hash")
		} else {
			r.miss(name+"/evidence_set_hash", "%v", err)
		}
		return
	}
	check("evidence_set_hash", evidence, sub.EvidenceSetHash, last && expect == "EVIDENCE_SET_HASH_MISMATCH")
}
