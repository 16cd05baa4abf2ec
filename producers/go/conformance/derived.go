package conformance

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// stepContext is what steps.json states beyond the scheduler's keys: each producer's lineage HMAC
// key, the data/ops receipt signer and the bytes of every blob a derived value is computed from.
type stepContext struct {
	signers       map[string]*bernstein.Signer
	lineageKeys   map[string][]byte
	receiptSigner *bernstein.Signer
	blobs         map[string][]byte
}

// headerRule is steps.json's headers_rule: the four CloudEvents headers of every output.
type headerRule struct {
	order                      []string
	specVersion, source, idFmt string
	types                      map[string]string
}

// headersRule reads headers_rule; its constants must be the ones this SDK documents.
func (r *Runner) headersRule(o obj) headerRule {
	o.onlyKeys("rule", "order", "ce_specversion", "ce_id", "ce_id_rule", "ce_source", "ce_type", "ce_type_rule")
	rule := headerRule{order: o.strs("order"), specVersion: o.str("ce_specversion"), source: o.str("ce_source"),
		idFmt: o.str("ce_id"), types: map[string]string{}}
	for _, text := range []string{"rule", "ce_id_rule", "ce_type_rule"} {
		if o.str(text) == "" {
			r.miss(o.at(text), "empty")
		}
	}
	r.same("steps/headers_rule/order", strings.Join(rule.order, ","), "ce_specversion,ce_id,ce_source,ce_type")
	r.same("steps/headers_rule/ce_id", rule.idFmt, "{topic}:{partition}:{offset}:{n}")
	types := o.obj("ce_type")
	for k, v := range types.m {
		s, _ := v.(string)
		rule.types[k] = s
	}
	return rule
}

// headers recomputes one output's headers by the rule: ce_id from its input's position and its
// place n among that input's outputs, ce_type from its stream and payload.
func (r *Runner) headers(name string, rule headerRule, out, in obj, n int) {
	var ceType string
	switch stream := out.str("stream"); stream {
	case "journal":
		payload, _ := out.m["payload_schema"].(string)
		base, _, _ := strings.Cut(payload, ".")
		ceType = rule.types["journal "+base]
	case "audit":
		payload, _ := out.m["payload_record"].(map[string]any)
		ceType = strings.ReplaceAll(rule.types["audit"], "{event}", fmt.Sprint(payload["event"]))
	default:
		ceType = rule.types[stream]
	}
	if ceType == "" {
		r.miss(name, "headers_rule names no ce_type for stream %s", out.str("stream"))
		return
	}
	id := strings.NewReplacer("{topic}", in.str("topic"), "{partition}", strconv.FormatInt(in.int("partition"), 10),
		"{offset}", strconv.FormatInt(in.int("offset"), 10), "{n}", strconv.Itoa(n)).Replace(rule.idFmt)
	values := map[string]string{"ce_specversion": rule.specVersion, "ce_id": id, "ce_source": rule.source, "ce_type": ceType}
	var want, got []string
	for _, h := range rule.order {
		want = append(want, h+"="+values[h])
	}
	for _, h := range out.objs("headers") {
		got = append(got, h.str("name")+"="+h.str("value_utf8"))
	}
	r.same(name, strings.Join(got, " "), strings.Join(want, " "))
	r.same(name+"/timestamp_ms", strconv.FormatInt(out.int("timestamp_ms"), 10), strconv.FormatInt(in.int("timestamp_ms"), 10))
}

// stepInputBlobs recomputes what an input derives from blob bytes: the content hash and size of
// every observation of a journalled input (only evidence_cap_exceeded's declared 32 MiB blobs are
// not stated), a computer-use action's screenshot and DOM hashes, sizes, observation hash and
// lineage HMAC (producer's lineage key), a data/ops receipt rebuilt through DataOpsActivity
// from the receipt signer's seed and the input/output bytes, and a research document's pages.
func (r *Runner) stepInputBlobs(name string, in obj, expect string, last, journalled bool, ctx *stepContext) {
	rec, _ := in.m["record"].(map[string]any)
	if rec == nil {
		return
	}
	switch in.m["schema"] {
	case "ComputerUseAction.v2", "ComputerUseAction.v1":
		r.actionBlobs(name, rec, expect, last, journalled, ctx)
		return
	}
	observations, _ := rec["observations"].([]any)
	if !journalled {
		return
	}
	for i, item := range observations {
		o, _ := item.(map[string]any)
		digest := fmt.Sprint(o["content_hash"])
		oname := fmt.Sprintf("%s/observations[%d]", name, i)
		data, ok := ctx.blobs[digest]
		switch {
		case !ok && expect == "EVIDENCE_CAP_EXCEEDED":
			r.pass(oname) // declared-only 32 MiB blobs (the case's note)
		case !ok:
			r.miss(oname, "not stated: blobs has no bytes for %s", digest)
		default:
			r.same(oname+"/content_hash", bernstein.ContentHash(data), digest)
			r.same(oname+"/size", strconv.Itoa(len(data)), fmt.Sprint(o["size"]))
		}
	}
	switch kind := fmt.Sprint(rec["kind"]); kind {
	case bernstein.KindOps, bernstein.KindData:
		r.receipt(name+"/receipt", rec, ctx)
	case bernstein.KindResearch:
		r.researchPages(name+"/research", rec, ctx)
	}
}

// researchPages recomputes a journalled research document's page hashes (and a report's page
// sizes) from the page bytes in blobs.
func (r *Runner) researchPages(name string, rec map[string]any, ctx *stepContext) {
	parsed, err := bernstein.ParseJSON(hexField(rec["artifact"]))
	doc, isMap := parsed.(map[string]any)
	if err != nil || !isMap {
		r.miss(name, "the artifact is not a JSON object: %v", err)
		return
	}
	for _, field := range []string{"sources", "fetched"} {
		list, _ := doc[field].([]any)
		for i, item := range list {
			page, _ := item.(map[string]any)
			where := fmt.Sprintf("%s/%s[%d]", name, field, i)
			data, ok := ctx.blobs[fmt.Sprint(page["page_content_hash"])]
			if !ok {
				r.miss(where, "not stated: blobs has no bytes for %v", page["page_content_hash"])
				continue
			}
			r.same(where+"/page_content_hash", bernstein.ContentHash(data), fmt.Sprint(page["page_content_hash"]))
			if size, has := page["size"]; has {
				r.same(where+"/size", strconv.Itoa(len(data)), fmt.Sprint(size))
			}
		}
	}
}

func (r *Runner) actionBlobs(name string, rec map[string]any, expect string, last, journalled bool, ctx *stepContext) {
	lineage, _ := rec["lineage"].(map[string]any)
	entry := hexField(lineage["entry"])
	producer, _ := rec["producer"].(map[string]any)
	key, ok := ctx.lineageKeys[fmt.Sprint(producer["id"])]
	if !ok {
		r.miss(name+"/lineage_hmac", "keys.producers states no lineage key for %v", producer["id"])
	} else {
		broken := last && (expect == "LINEAGE_HMAC_INVALID" || expect == "LINEAGE_MALFORMED")
		r.expectSame(name+"/lineage_hmac", bernstein.LineageHMAC(key, entry), fmt.Sprint(lineage["hmac"]), broken)
	}
	shot, okShot := ctx.blobs[fmt.Sprint(rec["screenshot_hash"])]
	dom, okDom := ctx.blobs[fmt.Sprint(rec["dom_digest"])]
	if !okShot || !okDom {
		r.miss(name+"/observation_hash", "not stated: blobs has no screenshot or DOM bytes")
		return
	}
	r.same(name+"/screenshot_hash", bernstein.SHA256Digest(shot), fmt.Sprint(rec["screenshot_hash"]))
	r.same(name+"/dom_digest", bernstein.SHA256Digest(dom), fmt.Sprint(rec["dom_digest"]))
	obs, err := bernstein.ObservationHash(shot, bernstein.SHA256Digest(dom))
	if r.ok(name+"/observation_hash", err) {
		r.same(name+"/observation_hash", obs, fmt.Sprint(rec["observation_hash"]))
	}
	if _, v2 := rec["screenshot_size"]; v2 {
		r.same(name+"/sizes", fmt.Sprintf("%d %d", len(shot), len(dom)), fmt.Sprintf("%v %v", rec["screenshot_size"], rec["dom_size"]))
	}
}

// receipt rebuilds a journalled data/ops receipt (inputs, plan, outputs, each signed, then the
// receipt signed) from the stated refs and steps, the blobs' bytes and the receipt signer; a
// refusal document's input hashes are recomputed from the blobs.
func (r *Runner) receipt(name string, rec map[string]any, ctx *stepContext) {
	artifact := hexField(rec["artifact"])
	parsed, err := bernstein.ParseJSON(artifact)
	doc, isMap := parsed.(map[string]any)
	if err != nil || !isMap {
		r.miss(name, "the artifact is not a JSON object: %v", err)
		return
	}
	bytesOf := func(digest any) ([]byte, bool) {
		data, ok := ctx.blobs[fmt.Sprint(digest)]
		if !ok {
			r.miss(name, "not stated: blobs has no bytes for %v", digest)
		}
		return data, ok
	}
	if doc["format"] == "bernstein.dataops.refusal/v1" {
		inputs, _ := doc["inputs"].([]any)
		for i, digest := range inputs {
			if data, ok := bytesOf(digest); ok {
				r.same(fmt.Sprintf("%s/inputs[%d]", name, i), bernstein.ContentHash(data), fmt.Sprint(digest))
			}
		}
		return
	}
	if ctx.receiptSigner == nil {
		r.miss(name, "no receipt signer")
		return
	}
	a, err := bernstein.NewDataOpsActivity(fmt.Sprint(doc["run_id"]), fmt.Sprint(doc["stage_id"]), fmt.Sprint(doc["kind"]), ctx.receiptSigner)
	if !r.ok(name, err) {
		return
	}
	items := func(field string) []map[string]any {
		list, _ := doc[field].([]any)
		out := make([]map[string]any, 0, len(list))
		for _, item := range list {
			m, _ := item.(map[string]any)
			out = append(out, m)
		}
		return out
	}
	for _, item := range items("inputs") {
		data, ok := bytesOf(item["content_hash"])
		if !ok || !r.ok(name, a.AddInput(fmt.Sprint(item["ref"]), data)) {
			return
		}
	}
	plan, _ := doc["plan"].(map[string]any)
	stepList, _ := plan["steps"].([]any)
	steps := make([]string, 0, len(stepList))
	for _, step := range stepList {
		steps = append(steps, fmt.Sprint(step))
	}
	if _, err := a.Plan(steps); !r.ok(name, err) {
		return
	}
	for _, item := range items("outputs") {
		data, ok := bytesOf(item["content_hash"])
		if !ok || !r.ok(name, a.AddOutput(fmt.Sprint(item["ref"]), data)) {
			return
		}
	}
	result, err := a.Finish()
	if r.ok(name, err) {
		r.same(name, string(result.Artifact), string(artifact))
	}
}

// hexField is the bytes of a record field written as {"hex": "..."}.
func hexField(v any) []byte {
	m, _ := v.(map[string]any)
	b, _ := hex.DecodeString(fmt.Sprint(m["hex"]))
	return b
}
