package conformance

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// --- browser.json: a browser session's action records, built through the SDK's own session ------

// recorder is the session's publisher: it keeps what would be stored and published.
type recorder struct {
	blobs   map[string][]byte
	actions [][]byte
	signer  *bernstein.Signer
	name    string
	sdk     string
	result  []byte
	sub     *bernstein.ActivitySubmission
}

func (p *recorder) StoreBlobs(_ context.Context, blobs ...[]byte) error {
	for _, b := range blobs {
		p.blobs[bernstein.ContentHash(b)] = b
	}
	return nil
}

func (p *recorder) PublishRaw(_ context.Context, runID string, value []byte, submissionID string) (*bernstein.Published, error) {
	p.actions = append(p.actions, value)
	return &bernstein.Published{SubmissionID: submissionID, RunID: runID, Value: value}, nil
}

func (p *recorder) Publish(_ context.Context, runID, stageID, role string, result *bernstein.ActivityResult, opts bernstein.PublishOptions) (*bernstein.Published, error) {
	for _, o := range result.Observations { // blobs first, as the emitter requires
		if held, ok := p.blobs[o.ContentHash]; !ok || int64(len(held)) != o.Size {
			return nil, &bernstein.EvidenceNotStoredError{Ref: o.Ref, ContentHash: o.ContentHash}
		}
	}
	if opts.OccurredAtMS == nil {
		return nil, errors.New("the vector's result states its occurred_at_ms")
	}
	sub, err := bernstein.NewSubmission(result, opts.SubmissionID, runID, stageID, role, p.name, *opts.OccurredAtMS)
	if err != nil {
		return nil, err
	}
	sub.Producer.SDK = p.sdk // the vector's (unsigned) sdk label
	if err := sub.Sign(p.signer); err != nil {
		return nil, err
	}
	value, err := sub.Encode()
	if err != nil {
		return nil, err
	}
	p.result, p.sub = value, sub
	return &bernstein.Published{SubmissionID: sub.SubmissionID, RunID: sub.RunID, Value: value}, nil
}

func runBrowser(r *Runner, doc obj) {
	if doc.str("description") == "" {
		r.miss("browser/description", "empty")
	}
	k := doc.obj("keys")
	k.onlyKeys("producer_id", "ed25519_seed_hex", "key_id", "lineage_hmac_key_hex", "lineage_hmac_key_id", "redaction_hmac_key_hex")
	signer := seedSigner(r, "browser/keys", k.hex("ed25519_seed_hex"))
	if signer == nil {
		return
	}
	r.same("browser/keys/key_id", signer.KeyID(), k.str("key_id"))
	r.same("browser/keys/lineage_hmac_key_id", bernstein.HMACKeyID(k.hex("lineage_hmac_key_hex")), k.str("lineage_hmac_key_id"))
	keys := &bernstein.ProducerKeys{Name: k.str("producer_id"), Signer: signer, Lineage: k.hex("lineage_hmac_key_hex"), Redaction: k.hex("redaction_hmac_key_hex")}

	rules := doc.obj("rules")
	rules.onlyKeys("action_kinds", "value_kinds", "scrubbed_kinds", "min_scrub_chars", "terminal_states")
	r.same("browser/rules/action_kinds", fmt.Sprint(bernstein.ActionKinds), fmt.Sprint(rules.strs("action_kinds")))
	r.same("browser/rules/value_kinds", fmt.Sprint(bernstein.ValueKinds), fmt.Sprint(rules.strs("value_kinds")))
	r.same("browser/rules/scrubbed_kinds", fmt.Sprint(bernstein.ScrubbedKinds), fmt.Sprint(rules.strs("scrubbed_kinds")))
	r.same("browser/rules/min_scrub_chars", fmt.Sprint(bernstein.MinScrubChars), fmt.Sprint(rules.int("min_scrub_chars")))
	states := rules.obj("terminal_states")
	want := map[string]string{}
	for s, v := range states.m {
		want[s] = fmt.Sprint(v)
	}
	r.same("browser/rules/terminal_states", fmt.Sprint(bernstein.SessionTerminalStates()), fmt.Sprint(want))

	for _, c := range doc.objs("snapshots") {
		c.onlyKeys("name", "raw", "typed_values", "normalised")
		got := bernstein.NormaliseSnapshot(c.str("raw"), keys.Redaction, c.strs("typed_values"))
		r.same("browser/snapshots/"+c.str("name"), got, c.str("normalised"))
	}
	for _, c := range doc.objs("invalid_proposals") {
		c.onlyKeys("name", "proposed", "code", "field")
		name := "browser/invalid_proposals/" + c.str("name")
		err := bernstein.ValidateProposal(proposal(c.obj("proposed")), 0)
		var invalid *bernstein.InvalidActionError
		switch {
		case !errors.As(err, &invalid):
			r.miss(name, "the SDK accepts a proposal the boundary refuses (%v)", err)
		case invalid.Code() != c.str("code") || invalid.Field != c.str("field"):
			r.miss(name, "refused as %s on %s, want %s on %s", invalid.Code(), invalid.Field, c.str("code"), c.str("field"))
		default:
			r.pass(name)
		}
	}
	for _, c := range doc.objs("pointer_targets") {
		pointerTargetCase(r, c)
	}
	browserSession(r, "browser/session", doc.obj("session"), keys)
	browserSession(r, "browser/pointer_session", doc.obj("pointer_session"), keys)
}

// pointerTargetCase checks one pointer_targets case both ways: its fields give exactly its text
// (PointerTarget.Text), and its text parses, for every kind that takes its shape, to exactly its fields.
func pointerTargetCase(r *Runner, c obj) {
	c.onlyKeys("name", "fields", "text")
	name := "browser/pointer_targets/" + c.str("name")
	want := c.str("text")
	target, err := pointerTargetFields(c.obj("fields"))
	if !r.ok(name, err) {
		return
	}
	text, err := target.Text()
	if r.ok(name+"/text", err) {
		r.same(name+"/text", text, want)
	}
	var kinds []string
	switch {
	case target.Focused:
		kinds = []string{"type"}
	case target.ToElement != nil:
		kinds = []string{"drag"}
	case target.At != nil && target.To == nil:
		kinds = []string{"click", "double_click", "hover", "right_click", "scroll"}
	default:
		r.miss(name+"/parse", "no action kind takes this shape")
		return
	}
	for _, kind := range kinds {
		parsed, err := bernstein.ParsePointerTarget(want, kind)
		if err != nil {
			r.miss(name+"/parse", "as a %s target: %v", kind, err)
			return
		}
		if got, stated := showPointer(parsed), showPointer(target); got != stated {
			r.miss(name+"/parse", "as a %s target: got %s, want %s", kind, got, stated)
			return
		}
	}
	r.pass(name + "/parse")
}

// pointerTargetFields is a pointer_targets case's fields as a PointerTarget (absent fields stay nil).
func pointerTargetFields(f obj) (bernstein.PointerTarget, error) {
	f.onlyKeys("at", "element", "to", "to_element", "focused")
	t := bernstein.PointerTarget{Element: f.str("element")}
	point := func(k string) (*bernstein.Point, error) {
		if !f.has(k) {
			return nil, nil
		}
		items := f.list(k)
		if len(items) != 2 {
			return nil, fmt.Errorf("fields.%s is not a point [x, y]", k)
		}
		var xy [2]int
		for i, item := range items {
			n, isNumber := item.(json.Number)
			v, err := n.Int64()
			if !isNumber || err != nil {
				return nil, fmt.Errorf("fields.%s is not a point of integers", k)
			}
			xy[i] = int(v)
		}
		return &bernstein.Point{X: xy[0], Y: xy[1]}, nil
	}
	var err error
	if t.At, err = point("at"); err != nil {
		return t, err
	}
	if t.To, err = point("to"); err != nil {
		return t, err
	}
	if f.has("to_element") {
		s := f.str("to_element")
		t.ToElement = &s
	}
	if f.has("focused") {
		if v, _ := f.raw("focused"); v != true {
			return t, errors.New("fields.focused is written only as true")
		}
		t.Focused = true
	}
	return t, nil
}

// showPointer spells out every field of a pointer target (absent ones as nil) for comparison.
func showPointer(t bernstein.PointerTarget) string {
	show := func(p *bernstein.Point) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprintf("[%d %d]", p.X, p.Y)
	}
	to := "nil"
	if t.ToElement != nil {
		to = fmt.Sprintf("%q", *t.ToElement)
	}
	return fmt.Sprintf("{element %q at %s to %s to_element %s focused %t}", t.Element, show(t.At), show(t.To), to, t.Focused)
}

func proposal(p obj) bernstein.ProposedAction {
	p.onlyKeys("kind", "target", "value")
	out := bernstein.ProposedAction{Kind: p.str("kind"), Target: p.str("target")}
	if v, _ := p.raw("value"); v != nil {
		s := fmt.Sprint(v)
		out.Value = &s
	}
	return out
}

func frame(f obj) bernstein.Frame {
	f.onlyKeys("screenshot_hex", "aria_snapshot", "url")
	return bernstein.Frame{Screenshot: f.hex("screenshot_hex"), AriaSnapshot: f.str("aria_snapshot"), URL: f.str("url")}
}

// browserSession reproduces one session section (session, pointer_session) under the result names w/...
func browserSession(r *Runner, w string, s obj, keys *bernstein.ProducerKeys) {
	s.onlyKeys("run_id", "session_id", "role", "adapter", "sdk", "genesis", "steps", "final", "action_log_canonical_utf8",
		"action_log_hash", "document", "document_canonical_utf8", "result")
	ctx := context.Background()
	pub := &recorder{blobs: map[string][]byte{}, signer: keys.Signer, name: keys.Name, sdk: s.str("sdk")}
	session, err := bernstein.NewComputerUseSession(s.str("run_id"), s.str("session_id"), keys, pub)
	if !r.ok(w, err) {
		return
	}
	session.Role, session.Adapter, session.SDK = s.str("role"), s.str("adapter"), s.str("sdk")
	r.same(w+"/genesis", session.Genesis(), s.str("genesis"))
	for i, step := range s.objs("steps") {
		step.onlyKeys("frame", "proposed", "occurred_at_ms", "snapshot_normalised", "screenshot_hash", "dom_digest",
			"observation_hash", "action", "prev_anchor", "anchor", "lineage_entry_canonical_utf8", "lineage_hmac",
			"lineage_signature_hex", "lineage_entry_hash", "submission_id", "record", "value_hex")
		name := fmt.Sprintf("%s/steps[%d]", w, i)
		pending := session.Observe(frame(step.obj("frame")))
		r.same(name+"/snapshot_normalised", string(pending.Snapshot), step.str("snapshot_normalised"))
		r.same(name+"/screenshot_hash", pending.Hashes.ScreenshotHash, step.str("screenshot_hash"))
		r.same(name+"/dom_digest", pending.Hashes.DOMDigest, step.str("dom_digest"))
		r.same(name+"/observation_hash", pending.Hashes.ObservationHash, step.str("observation_hash"))
		occurred := step.int("occurred_at_ms")
		session.Now = func() int64 { return occurred }
		rec, err := session.Record(ctx, pending, proposal(step.obj("proposed")))
		if !r.ok(name+"/record", err) {
			return
		}
		a := step.obj("action")
		r.same(name+"/action", fmt.Sprint(rec.Record.Action.Record()), fmt.Sprint(map[string]any{"kind": a.str("kind"), "target": a.str("target"), "value_digest": a.str("value_digest")}))
		r.same(name+"/prev_anchor", rec.Record.PrevAnchor, step.str("prev_anchor"))
		r.same(name+"/anchor", rec.Record.Anchor, step.str("anchor"))
		r.same(name+"/lineage_entry", string(rec.Record.Lineage.Entry), step.str("lineage_entry_canonical_utf8"))
		r.same(name+"/lineage_hmac", rec.Record.Lineage.HMAC, step.str("lineage_hmac"))
		r.same(name+"/lineage_signature", hexs(rec.Record.Lineage.Signature), step.str("lineage_signature_hex"))
		r.same(name+"/lineage_entry_hash", rec.Record.Lineage.EntryHash(), step.str("lineage_entry_hash"))
		r.same(name+"/submission_id", rec.Wire.SubmissionID, step.str("submission_id"))
		want := step.hex("value_hex")
		r.same(name+"/value", hexs(rec.Value), hexs(want))
		record, _ := step.raw("record")
		r.reproduceRecord(name+"/record", bernstein.SchemaComputerUseV2, record, want)
		stored := pub.blobs[pending.Hashes.ScreenshotHash] != nil && pub.blobs[pending.Hashes.DOMDigest] != nil
		if !stored || len(pub.actions) != i+1 {
			r.miss(name+"/blobs_first", "the frame's blobs were not stored with the action")
		} else {
			r.pass(name + "/blobs_first")
		}
	}
	f := s.obj("final")
	f.onlyKeys("frame", "snapshot_normalised", "screenshot_hash", "dom_digest", "observation_hash")
	final := session.Observe(frame(f.obj("frame")))
	r.same(w+"/final/snapshot_normalised", string(final.Snapshot), f.str("snapshot_normalised"))
	r.same(w+"/final/observation_hash", final.Hashes.ObservationHash, f.str("observation_hash"))
	r.same(w+"/final/hashes", final.Hashes.ScreenshotHash+final.Hashes.DOMDigest, f.str("screenshot_hash")+f.str("dom_digest"))
	if !r.ok(w+"/final", session.RecordFinal(ctx, final)) {
		return
	}
	res := s.obj("result")
	res.onlyKeys("submission_id", "occurred_at_ms", "statement", "record", "value_hex")
	occurred := res.int("occurred_at_ms")
	session.ResultOptions = bernstein.PublishOptions{SubmissionID: res.str("submission_id"), OccurredAtMS: &occurred}
	outcome, err := session.Finish(ctx, nil, "")
	if !r.ok(w+"/finish", err) {
		return
	}
	r.same(w+"/action_log", string(outcome.ActionLog), s.str("action_log_canonical_utf8"))
	r.same(w+"/action_log_hash", bernstein.ContentHash(outcome.ActionLog), s.str("action_log_hash"))
	docText, err := bernstein.CanonicalJSON(outcome.Document)
	if r.ok(w+"/document", err) {
		stated, _ := s.raw("document")
		statedText, err := bernstein.CanonicalJSON(stated)
		if r.ok(w+"/document", err) {
			r.same(w+"/document", string(docText), string(statedText))
		}
	}
	r.same(w+"/document_canonical", string(outcome.Result.Artifact), s.str("document_canonical_utf8"))
	statement, err := bernstein.CanonicalJSON(bernstein.SubmissionStatement(pub.sub, keys.Signer.KeyID()))
	if r.ok(w+"/result/statement", err) {
		stated, _ := res.raw("statement")
		statedText, err := bernstein.CanonicalJSON(stated)
		if r.ok(w+"/result/statement", err) {
			r.same(w+"/result/statement", string(statement), string(statedText))
		}
	}
	want := res.hex("value_hex")
	r.same(w+"/result/value", hex.EncodeToString(pub.result), hexs(want))
	record, _ := res.raw("record")
	r.reproduceRecord(w+"/result/record", bernstein.SchemaActivitySubmissionV3, record, want)
	if slices.ContainsFunc(pub.actions, func(v []byte) bool { return len(v) == 0 }) {
		r.miss(w+"/actions", "an empty action value was published")
	}
}
