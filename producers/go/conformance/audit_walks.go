package conformance

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// --- audit_walks.json --------------------------------------------------------------------------
//
// Audit chains as the scheduler wrote them (bases) and altered (cases), with what the system's
// judges (rebuild, verifier, audit follow) conclude. A producer SDK judges no chain; what it can
// reproduce is that it reads every record the system writes: every base record decodes by its
// schema fingerprint to one of its stream's envelopes and re-encodes to exactly its bytes (and so
// does the envelope's payload); every record of a case's audit chain does the same, except that a
// case built of bytes that are no audit record ("garbage" in its name) must have them refused with
// the SDK's DecodeError, at exactly the offsets its verifier verdict calls AUDIT_UNDECODABLE; and
// every audit record of a base carries the MAC the scheduler computed, recomputed here from the
// base's audit key (AuditRecordMAC: HMAC-SHA256 over PAE(audit-record/v2, PAE(key_id, payload)), as
// schemas/canonical.py audit_record_mac) under the key its key_id names (HMACKeyID of the secret).
// The verdicts themselves (expect, judgements, trusted_keys, resume_after, tick_late_ms) are the
// judges' and are read, not reproduced.

const auditWalksFormat = "bernstein.audit-walks/1"

// auditStreams: the envelopes each stream of a partition holds, and the payload schema family of an
// envelope that wraps one (none: the envelope carries no single-object payload).
var auditStreams = map[string][]string{
	"journal":     {"JournalRecord.v1", "SealRecord.v1"},
	"audit":       {"AuditRecord.v2"},
	"checkpoints": {"CheckpointRecord.v1"},
	"refusals":    {"Refusal.v2"},
	"deadletter":  {"DeadLetter.v2"},
}

var envelopePayloads = map[string]string{
	"JournalRecord.v1":    "JournalEntry.",
	"SealRecord.v1":       "RunSeal.",
	"AuditRecord.v2":      "AuditEntry.",
	"CheckpointRecord.v1": "PartitionCheckpoint.",
}

// walkCounts is what the runner reports of the file (Runner.Notes).
type walkCounts struct {
	baseRecords, basePayloads, baseMACs        int
	caseRecords, casePayloads, refused, copies int
	refusedIn                                  []string
}

func runAuditWalks(r *Runner, doc obj) {
	r.same("audit_walks/format", doc.str("format"), auditWalksFormat)
	if doc.str("about") == "" {
		r.miss("audit_walks/about", "empty")
	}
	// The topic the SDK publishes submissions to by default (BERNSTEIN_TOPIC_PREFIX unset).
	r.same("audit_walks/submissions_topic", doc.str("submissions_topic"), (&bernstein.Config{TopicPrefix: "bernstein"}).SubmissionsTopic())
	// Judges' material: read (a malformed one is a miss), not reproduced.
	if doc.int("tick_late_ms") <= 0 {
		r.miss("audit_walks/tick_late_ms", "not a positive duration")
	}
	judgements := doc.obj("judgements")
	for _, code := range sortedKeys(judgements.m) {
		j := judgements.obj(code)
		j.onlyKeys("follow")
		if j.str("follow") == "" {
			r.miss(j.at("follow"), "empty")
		}
	}

	var counts walkCounts
	bases := doc.obj("bases")
	for _, name := range sortedKeys(bases.m) {
		r.auditWalkBase(name, bases.obj(name), &counts)
	}
	for _, c := range doc.objs("cases") {
		c.onlyKeys("name", "about", "base", "audit", "expect", "trusted_keys", "resume_after")
		r.auditWalkCase(c, bases, &counts)
	}
	r.note("audit_walks: %d base records decoded and re-encoded (%d payloads), %d base audit MACs recomputed",
		counts.baseRecords, counts.basePayloads, counts.baseMACs)
	r.note("audit_walks: %d case audit records decoded and re-encoded (%d payloads), %d refused with DecodeError (%s), %d cases state no audit (the base's)",
		counts.caseRecords, counts.casePayloads, counts.refused, strings.Join(counts.refusedIn, ", "), counts.copies)
}

func (r *Runner) auditWalkBase(name string, base obj, counts *walkCounts) {
	base.onlyKeys("partition", "records", "scheduler_audit_keys")
	path := "audit_walks/bases/" + name
	if base.int("partition") < 0 {
		r.miss(path+"/partition", "negative")
	}
	secrets := map[string][]byte{}
	for i, k := range base.objs("scheduler_audit_keys") {
		k.onlyKeys("key_id", "secret_hex", "valid_from_ms", "valid_until_ms")
		secret := k.hex("secret_hex")
		keyID := k.str("key_id")
		r.same(fmt.Sprintf("%s/scheduler_audit_keys[%d]/key_id", path, i), bernstein.HMACKeyID(secret), keyID)
		secrets[keyID] = secret
	}
	records := base.obj("records")
	for _, stream := range sortedKeys(records.m) {
		envelopes, known := auditStreams[stream]
		if !known {
			r.miss(records.at(stream), "not covered: unknown stream")
			continue
		}
		for i, item := range records.list(stream) {
			rec := fmt.Sprintf("%s/records/%s[%d]", path, stream, i)
			value, ok := r.walkRecord(rec, item)
			if !ok {
				continue
			}
			schemaName, form, payload, ok := r.roundTrip(rec, value, envelopes)
			if !ok {
				continue
			}
			counts.baseRecords++
			if payload != nil {
				counts.basePayloads++
			}
			if schemaName == "AuditRecord.v2" {
				keyID, _ := form["key_id"].(string)
				secret, named := secrets[keyID]
				if !named {
					r.miss(rec+"/key_id", "names %q, not a key of the base's scheduler_audit_keys", keyID)
					continue
				}
				r.same(rec+"/mac", bernstein.AuditRecordMAC(secret, keyID, payload), fmt.Sprint(form["mac"]))
				counts.baseMACs++
			}
		}
	}
}

func (r *Runner) auditWalkCase(c obj, bases obj, counts *walkCounts) {
	caseName := c.str("name")
	path := "audit_walks/cases/" + caseName
	if c.str("about") == "" {
		r.miss(path+"/about", "empty")
	}
	if _, known := bases.m[c.str("base")]; !known {
		r.miss(path+"/base", "names no base: %q", c.str("base"))
	}
	expect := c.obj("expect")
	expect.onlyKeys("verify", "follow", "rebuild")
	undecodable := map[int64]bool{}
	for i, item := range expect.list("verify") {
		v, ok := item.([]any)
		if !ok || len(v) != 3 {
			r.miss(fmt.Sprintf("%s/expect/verify[%d]", path, i), "expected [code, stream, offset]")
			continue
		}
		if n, isNum := v[2].(json.Number); isNum && v[0] == "AUDIT_UNDECODABLE" && v[1] == "audit" {
			offset, _ := n.Int64()
			undecodable[offset] = true
		}
	}
	raw, _ := c.raw("audit")
	if raw == nil {
		counts.copies++ // the base's audit records, round-tripped with the base
		if len(undecodable) > 0 {
			r.miss(path+"/audit", "the base's records are called AUDIT_UNDECODABLE")
		}
		return
	}
	garbage := strings.Contains(caseName, "garbage")
	refused := map[int64]bool{}
	for i, item := range c.list("audit") {
		rec := fmt.Sprintf("%s/audit[%d]", path, i)
		value, ok := r.walkRecord(rec, item)
		if !ok {
			continue
		}
		offset, _ := item.([]any)[0].(json.Number).Int64()
		if _, _, err := r.decodeJSON(value); err != nil {
			var decodeErr *bernstein.DecodeError
			switch {
			case !garbage:
				r.miss(rec, "not decodable in a case whose records are all audit records: %v", err)
			case !errors.As(err, &decodeErr):
				r.miss(rec, "refused, but not with the SDK's DecodeError: %v", err)
			default:
				refused[offset] = true
				counts.refused++
				r.pass(rec)
			}
			continue
		}
		if _, _, payload, ok := r.roundTrip(rec, value, auditStreams["audit"]); ok {
			counts.caseRecords++
			if payload != nil {
				counts.casePayloads++
			}
		}
	}
	if garbage && len(refused) == 0 {
		r.miss(path+"/refused", "a garbage case whose records all decode")
	}
	if len(refused) > 0 {
		counts.refusedIn = append(counts.refusedIn, caseName)
	}
	got, want := offsetList(refused), offsetList(undecodable)
	if len(got) > 0 || len(want) > 0 {
		r.same(path+"/undecodable_offsets", got, want)
	}
}

// walkRecord checks the shape [offset, timestamp_ms, key_hex or null, value_hex] and returns the value.
func (r *Runner) walkRecord(name string, item any) ([]byte, bool) {
	rec, isList := item.([]any)
	if !isList || len(rec) != 4 {
		r.miss(name, "expected [offset, timestamp_ms, key_hex or null, value_hex]")
		return nil, false
	}
	for i, field := range []string{"offset", "timestamp_ms"} {
		n, isNum := rec[i].(json.Number)
		if v, err := n.Int64(); !isNum || err != nil || v < 0 {
			r.miss(name+"/"+field, "expected a non-negative integer, got %v", rec[i])
			return nil, false
		}
	}
	if rec[2] != nil {
		key, isStr := rec[2].(string)
		if _, err := hex.DecodeString(key); !isStr || err != nil {
			r.miss(name+"/key", "expected hex or null, got %v", rec[2])
			return nil, false
		}
	}
	text, isStr := rec[3].(string)
	value, err := hex.DecodeString(text)
	if !isStr || err != nil {
		r.miss(name+"/value", "expected hex, got %v", rec[3])
		return nil, false
	}
	return value, true
}

// roundTrip decodes value by its fingerprint (one of envelopes) to the vectors' JSON form, encodes that
// form again and requires the same bytes; the envelope's payload, if it has one, the same way (its
// schema of the envelope's family). It returns the envelope's schema, its form and its payload bytes.
func (r *Runner) roundTrip(name string, value []byte, envelopes []string) (string, map[string]any, []byte, bool) {
	schemaName, form, ok := r.roundTripOne(name, value)
	if !ok {
		return "", nil, nil, false
	}
	if !slices.Contains(envelopes, schemaName) {
		r.miss(name, "decoded as %s, which this stream does not hold (%s)", schemaName, strings.Join(envelopes, ", "))
		return "", nil, nil, false
	}
	r.pass(name)
	record, _ := form.(map[string]any)
	family, wraps := envelopePayloads[schemaName]
	if !wraps {
		return schemaName, record, nil, true
	}
	hexForm, _ := record["payload"].(map[string]any)
	payload, err := hex.DecodeString(fmt.Sprint(hexForm["hex"]))
	if !r.ok(name+"/payload", err) {
		return "", nil, nil, false
	}
	payloadSchema, _, ok := r.roundTripOne(name+"/payload", payload)
	if !ok {
		return "", nil, nil, false
	}
	if !strings.HasPrefix(payloadSchema, family) {
		r.miss(name+"/payload", "a %s wraps a %s", schemaName, payloadSchema)
		return "", nil, nil, false
	}
	r.pass(name + "/payload")
	return schemaName, record, payload, true
}

// roundTripOne: value decodes (by its fingerprint) and its JSON form encodes to exactly value.
func (r *Runner) roundTripOne(name string, value []byte) (string, any, bool) {
	schemaName, form, err := r.decodeJSON(value)
	if !r.ok(name+"/decode", err) {
		return "", nil, false
	}
	again, err := r.encodeJSON(schemaName, form)
	if !r.ok(name+"/encode", err) {
		return "", nil, false
	}
	if hexs(again) != hexs(value) {
		r.miss(name+"/encode", "%s re-encodes to %s, want %s", schemaName, clip(hexs(again)), clip(hexs(value)))
		return "", nil, false
	}
	return schemaName, form, true
}

func offsetList(set map[int64]bool) string {
	offsets := make([]int64, 0, len(set))
	for o := range set {
		offsets = append(offsets, o)
	}
	slices.Sort(offsets)
	return fmt.Sprint(offsets)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
