package bernstein

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type memPublisher struct {
	blobs   map[string][]byte
	values  [][]byte
	results []*ActivityResult
	signer  *Signer
}

func (p *memPublisher) StoreBlobs(_ context.Context, blobs ...[]byte) error {
	for _, b := range blobs {
		p.blobs[ContentHash(b)] = b
	}
	return nil
}

func (p *memPublisher) PublishRaw(_ context.Context, runID string, value []byte, sid string) (*Published, error) {
	p.values = append(p.values, value)
	return &Published{RunID: runID, SubmissionID: sid, Offset: int64(len(p.values) - 1)}, nil
}

func (p *memPublisher) Publish(_ context.Context, runID, stageID, role string, result *ActivityResult, opts PublishOptions) (*Published, error) {
	for _, o := range result.Observations {
		if _, ok := p.blobs[o.ContentHash]; !ok {
			return nil, &EvidenceNotStoredError{Ref: o.Ref, ContentHash: o.ContentHash}
		}
	}
	p.results = append(p.results, result)
	sub, err := NewSubmission(result, NewSubmissionID(), runID, stageID, role, "go@test", 1)
	if err != nil {
		return nil, err
	}
	if err := sub.Sign(p.signer); err != nil {
		return nil, err
	}
	value, err := sub.Encode()
	p.values = append(p.values, value)
	return &Published{RunID: runID, SubmissionID: sub.SubmissionID}, err
}

type fakeBrowser struct {
	frames  []Frame
	actions []ProposedAction
	at      int
	fail    error
}

func (f *fakeBrowser) Observe(context.Context) (Frame, error) { return f.frames[f.at], nil }
func (f *fakeBrowser) Perform(context.Context, ProposedAction) error {
	if f.fail != nil {
		return f.fail
	}
	f.at++
	return nil
}
func (f *fakeBrowser) Close() error { return nil }
func (f *fakeBrowser) NextAction(_ context.Context, v AgentView) (*ProposedAction, error) {
	if v.Index >= len(f.actions) {
		return nil, nil
	}
	return &f.actions[v.Index], nil
}

func testSession(t *testing.T) (*ComputerUseSession, *memPublisher) {
	signer, _ := NewSigner(bytes.Repeat([]byte{7}, 32))
	keys := &ProducerKeys{Name: "go@test", Signer: signer, Lineage: bytes.Repeat([]byte{1}, 32), Redaction: bytes.Repeat([]byte{2}, 32)}
	pub := &memPublisher{blobs: map[string][]byte{}, signer: signer}
	s, err := NewComputerUseSession("run-1", "browser-0", keys, pub)
	must(t, err)
	return s, pub
}

func TestSessionRunAnchorsSignsAndNeverLeaksTheTypedValue(t *testing.T) {
	s, pub := testSession(t)
	secret := "correct horse battery"
	browser := &fakeBrowser{
		frames: []Frame{
			{Screenshot: []byte("png 0"), AriaSnapshot: "- textbox \"Password\" [ref=e1]"},
			{Screenshot: []byte("png 1"), AriaSnapshot: "- textbox \"Password\": " + secret},
			{Screenshot: []byte("png 2"), AriaSnapshot: "- text: you typed " + secret},
		},
		actions: []ProposedAction{Propose("type", "#password", secret), {Kind: "click", Target: "#go"}},
	}
	outcome, err := s.Run(context.Background(), browser, browser)
	must(t, err)
	if outcome.State != "ok" || len(outcome.Records) != 2 || outcome.HeadAnchor != outcome.Records[1].Anchor {
		t.Fatalf("%+v", outcome)
	}
	if outcome.Records[1].PrevAnchor != outcome.Records[0].Anchor || outcome.Records[0].PrevAnchor != s.Genesis() {
		t.Fatal("the anchors do not chain")
	}
	for _, v := range append(pub.values, outcome.ActionLog, outcome.Result.Artifact) {
		if bytes.Contains(v, []byte(secret)) {
			t.Fatal("the typed value reached a published record")
		}
	}
	for _, b := range pub.blobs {
		if bytes.Contains(b, []byte(secret)) {
			t.Fatal("the typed value reached a stored blob")
		}
	}
	var action ComputerUseAction
	c, _ := DefaultCodec()
	_, err = c.Decode(pub.values[0], &action)
	must(t, err)
	if !bytes.Equal(action.Lineage.Signature, s.Keys.Signer.Sign(LineageSigningInput(action.Lineage.Entry))) ||
		action.Lineage.HMAC != LineageHMAC(s.Keys.Lineage, action.Lineage.Entry) || action.ScreenshotSize != 5 {
		t.Fatalf("%+v", action)
	}
	var doc map[string]any
	must(t, json.Unmarshal(outcome.Result.Artifact, &doc))
	if doc["action_count"] != float64(2) || doc["final_observation"] == nil || outcome.Result.TerminalState != Completed {
		t.Fatalf("%v", doc)
	}
}

func TestSessionEndsRefusedOnAnInvalidActionAndFailedOnADriverError(t *testing.T) {
	s, pub := testSession(t)
	browser := &fakeBrowser{frames: []Frame{{Screenshot: []byte("png")}}, actions: []ProposedAction{{Kind: "triple_click", Target: "#a"}}}
	outcome, err := s.Run(context.Background(), browser, browser)
	must(t, err)
	if outcome.State != "refused" || outcome.ReasonCode != "invalid_action" || len(pub.values) != 1 ||
		outcome.Document["refusal"].(map[string]any)["field"] != "kind" || outcome.Result.TerminalState != Refused {
		t.Fatalf("%+v", outcome)
	}
	s, _ = testSession(t)
	browser = &fakeBrowser{frames: []Frame{{Screenshot: []byte("png")}}, actions: []ProposedAction{{Kind: "click", Target: "#a"}}, fail: errors.New("boom")}
	outcome, err = s.Run(context.Background(), browser, browser)
	must(t, err)
	fault := outcome.Document["fault"].(map[string]any)
	if outcome.State != "driver_failure" || outcome.ReasonCode != "action_failed" || fault["phase"] != "perform" || fault["action_index"] != 0 {
		t.Fatalf("%+v", outcome)
	}
	if _, err := s.Record(context.Background(), PendingObservation{Index: 1}, ProposedAction{Kind: "wait"}); err == nil {
		t.Fatal("an action after the end was recorded")
	}
}

func TestLoadProducerKeysReadsTheLineageAndRedactionKeys(t *testing.T) {
	dir := t.TempDir()
	pem := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJ\n-----END PRIVATE KEY-----\n"
	must(t, os.WriteFile(filepath.Join(dir, "producer.ed25519.key"), []byte(pem), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "lineage.hmac.key"), []byte(strings.Repeat("b1", 32)+"\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "redaction.hmac.key"), []byte(strings.Repeat("c2", 32)+"\n"), 0o600))
	ring := `{"format": "bernstein.keyring/v1", "producer": "go@test", "keys": [
	  {"purpose": "producer", "file": "producer.ed25519.key", "status": "active"},
	  {"key_id": "` + HMACKeyID(bytes.Repeat([]byte{0xb1}, 32)) + `", "purpose": "lineage", "file": "lineage.hmac.key", "status": "active"},
	  {"purpose": "redaction", "file": "redaction.hmac.key", "status": "active"}]}`
	must(t, os.WriteFile(filepath.Join(dir, "keyring.json"), []byte(ring), 0o600))
	keys, err := LoadProducerKeys(dir)
	must(t, err)
	if !bytes.Equal(keys.Lineage, bytes.Repeat([]byte{0xb1}, 32)) || !bytes.Equal(keys.Redaction, bytes.Repeat([]byte{0xc2}, 32)) {
		t.Fatalf("%+v", keys)
	}
	must(t, os.WriteFile(filepath.Join(dir, "lineage.hmac.key"), []byte("not hex\n"), 0o600))
	if _, err := LoadProducerKeys(dir); err == nil || !strings.Contains(err.Error(), "hex") {
		t.Fatalf("got %v", err)
	}
}

func TestNormaliseSnapshotRedactsFieldsAndScrubsTypedValues(t *testing.T) {
	key := []byte("k")
	got := NormaliseSnapshot("- textbox \"E\" [ref=e1]: \"ada\"  \r\n- text: hi ada@x.org\r\n\r\n", key, []string{"ada@x.org", "ab"})
	want := "- textbox \"E\": [redacted " + TypedValueDigest(key, "ada") + "]\n- text: hi [redacted " + TypedValueDigest(key, "ada@x.org") + "]\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if ProposedAction(Propose("type", "#p", "secret")).String() != `ProposedAction{Kind: "type", Target: "#p", Value: <redacted>}` {
		t.Fatal("a proposal prints its value")
	}
}
