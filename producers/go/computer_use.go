package bernstein

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Computer-use action records (docs/computer_use.md; the Python SDK's producers/computer_use/
// boundary.py, snapshot.py, lineage.py and session.py; the formats of schemas/documents/browser.py).
// Per action: the driver's frame is normalised (NormaliseSnapshot), the agent's proposal becomes the
// canonical action (CanonicalAction: a typed value only as its keyed digest), the observation is
// hashed, the anchor chains it to the previous action, and the lineage entry binding it all is sealed
// with the producer's lineage HMAC and signed with its Ed25519 producer key (SealLineage). The
// ComputerUseAction.v2 record carries all of it. schemas/vectors/browser.json pins every step.

// Computer-use formats and kinds.
const (
	LineageFormat         = "bernstein.lineage-entry/v1"
	LineageArtefactKind   = "computer_use.action"
	SchemaComputerUseV2   = "ComputerUseAction.v2"
	MinScrubChars         = 4 // typed values shorter than this are not scrubbed from free text (fields always are)
	ComputerUseSDKSuffix  = " computer-use"
	InvalidActionCode     = "INVALID_ACTION"
	InvalidActionReason   = "invalid_action"
	DefaultMaxActions     = 500
	MaxActionsLimit       = 2000 // two observations per action plus the action log stay under 4096
	DefaultRunByteCap     = 64 << 20
	ComputerUseSessionSDK = SDK + ComputerUseSDKSuffix
)

// ActionKinds are the action kinds the scheduler accepts (UNKNOWN_ACTION_KIND otherwise). The pointer
// kinds (double_click, drag, hover, right_click) came with the model computer-use formats; their
// targets may be pointer targets (PointerTarget), a drag's must be.
var ActionKinds = []string{"check", "click", "double_click", "drag", "hover", "navigate", "press", "right_click", "scroll", "select", "submit", "type", "wait"}

// ValueKinds may carry a value (digested before it leaves the boundary).
var ValueKinds = []string{"check", "press", "scroll", "select", "type", "wait"}

// ScrubbedKinds: their values are scrubbed from later snapshots (press values are key names).
var ScrubbedKinds = []string{"select", "type"}

// targetRequired: kinds that act on a target (a URL for navigate, a selector or a pointer target otherwise).
var targetRequired = []string{"check", "click", "double_click", "drag", "hover", "navigate", "right_click", "select", "submit", "type"}

// ProposedAction is an action as the agent decided it. Value may be a secret (nil: no value); it goes
// to the driver and, as a keyed digest, into the record; String never shows it.
type ProposedAction struct {
	Kind   string
	Target string
	Value  *string
}

// Propose is a ProposedAction with a value.
func Propose(kind, target, value string) ProposedAction {
	return ProposedAction{Kind: kind, Target: target, Value: &value}
}

func (p ProposedAction) String() string {
	shown := "nil"
	if p.Value != nil {
		shown = "<redacted>"
	}
	return fmt.Sprintf("ProposedAction{Kind: %q, Target: %q, Value: %s}", p.Kind, p.Target, shown)
}

// Action is the canonical action: what is anchored, signed, published and journalled.
type Action struct {
	Kind        string `avro:"kind" json:"kind"`
	Target      string `avro:"target" json:"target"`
	ValueDigest string `avro:"value_digest" json:"value_digest"`
}

// Record is the action as a JSON object (anchor, lineage entry, action log).
func (a Action) Record() map[string]any {
	return map[string]any{"kind": a.Kind, "target": a.Target, "value_digest": a.ValueDigest}
}

// InvalidActionError is a proposal the boundary cannot anchor (the session ends refused, invalid_action).
type InvalidActionError struct {
	Field string
	Index int // the action's index, -1 when unknown
	Msg   string
}

func (e *InvalidActionError) Error() string { return e.Msg }
func (e *InvalidActionError) Code() string  { return InvalidActionCode }

// Evidence is the session document's refusal object.
func (e *InvalidActionError) Evidence() map[string]any {
	facts := map[string]any{"code": InvalidActionCode, "field": e.Field}
	if e.Index >= 0 {
		facts["at_action"] = e.Index
	}
	return facts
}

// ValidateProposal refuses a proposal the scheduler would refuse (before any value is digested).
func ValidateProposal(p ProposedAction, index int) error {
	bad := func(field, format string, args ...any) error {
		return &InvalidActionError{Field: field, Index: index, Msg: fmt.Sprintf(format, args...)}
	}
	if !slices.Contains(ActionKinds, p.Kind) {
		return bad("kind", "action kind %q is not one of %s", p.Kind, strings.Join(ActionKinds, ", "))
	}
	if !utf8.ValidString(p.Target) || utf8.RuneCountInString(p.Target) > MaxRefLength {
		return bad("target", "action target must be a string of at most %d characters", MaxRefLength)
	}
	if slices.Contains(targetRequired, p.Kind) && strings.TrimFunc(p.Target, isPySpace) == "" {
		return bad("target", "a %s action needs a target", p.Kind)
	}
	if IsPointerTarget(p.Target) {
		if _, err := ParsePointerTarget(p.Target, p.Kind); err != nil {
			return bad("target", "%s", err.Error())
		}
	} else if p.Kind == "drag" {
		return bad("target", "a drag action's target is a pointer target naming both ends (PointerTarget)")
	}
	if p.Value != nil && !slices.Contains(ValueKinds, p.Kind) {
		return bad("value", "a %s action takes no value", p.Kind)
	}
	if (p.Kind == "type" || p.Kind == "select" || p.Kind == "press") && p.Value == nil {
		return bad("value", "a %s action needs a value", p.Kind)
	}
	return nil
}

// CanonicalAction validates a proposal and digests its value with the producer's redaction key.
func CanonicalAction(p ProposedAction, redactionKey []byte, index int) (Action, error) {
	if err := ValidateProposal(p, index); err != nil {
		return Action{}, err
	}
	digest := ""
	if p.Value != nil {
		digest = TypedValueDigest(redactionKey, *p.Value)
	}
	return Action{Kind: p.Kind, Target: p.Target, ValueDigest: digest}, nil
}

// Python's \s (str.isspace) as a class, so snapshots normalise alike in every SDK.
const pySpace = `[\t\n\v\f\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`

var (
	volatileRE  = regexp.MustCompile(pySpace + `*\[(?:ref|cursor)=[^\]]*\]`)
	valueLineRE = regexp.MustCompile(`^(` + pySpace + `*- (?:textbox|searchbox|combobox|spinbutton)(?: "(?:[^"\\]|\\.)*")?(?: \[[^\]]*\])*): (.+)$`)
)

// NormaliseSnapshot is the normalised, redacted accessibility snapshot (producers/computer_use/
// snapshot.py): newlines become \n, [ref=..] and [cursor=..] tokens and trailing whitespace go, one
// final newline; the value of every textbox, searchbox, combobox and spinbutton line becomes
// "[redacted hmac-sha256:<hex>]" (the typed-value digest under key), and so does every occurrence of a
// typed value of at least MinScrubChars characters (longest first). Its UTF-8 bytes are what the DOM
// digest hashes and the content store keeps.
func NormaliseSnapshot(raw string, key []byte, typedValues []string) string {
	text := strings.ReplaceAll(strings.ReplaceAll(raw, "\r\n", "\n"), "\r", "\n")
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		lines[i] = redactField(strings.TrimRightFunc(volatileRE.ReplaceAllString(line, ""), isPySpace), key)
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	out := strings.Join(lines, "\n") + "\n"
	for _, value := range scrubOrder(typedValues) {
		if strings.Contains(out, value) {
			out = strings.ReplaceAll(out, value, redactionMarker(key, value))
		}
	}
	return out
}

func scrubOrder(values []string) []string {
	var kept []string
	for _, v := range values {
		if utf8.RuneCountInString(v) >= MinScrubChars && !slices.Contains(kept, v) {
			kept = append(kept, v)
		}
	}
	slices.SortStableFunc(kept, func(a, b string) int {
		if d := utf8.RuneCountInString(b) - utf8.RuneCountInString(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return kept
}

func redactField(line string, key []byte) string {
	m := valueLineRE.FindStringSubmatch(line)
	if m == nil {
		return line
	}
	return m[1] + ": " + redactionMarker(key, yamlScalar(m[2]))
}

// yamlScalar: a JSON-style double-quoted value stands for the string it quotes.
func yamlScalar(text string) string {
	if len(text) >= 2 && text[0] == '"' && text[len(text)-1] == '"' {
		var v any
		if err := json.Unmarshal([]byte(text), &v); err == nil {
			if s, ok := v.(string); ok {
				return s
			}
		}
	}
	return text
}

func redactionMarker(key []byte, value string) string {
	return "[redacted " + TypedValueDigest(key, value) + "]"
}

// ObservationHashes are the three hashes of one pre-action observation.
type ObservationHashes struct {
	ScreenshotHash  string `json:"screenshot_hash"`
	DOMDigest       string `json:"dom_digest"`
	ObservationHash string `json:"observation_hash"`
}

// HashObservation hashes a frame: screenshot bytes and normalised snapshot bytes.
func HashObservation(screenshot, snapshot []byte) ObservationHashes {
	dom := SHA256Digest(snapshot)
	obs, _ := ObservationHash(screenshot, dom) // dom is a digest
	return ObservationHashes{ScreenshotHash: SHA256Digest(screenshot), DOMDigest: dom, ObservationHash: obs}
}

// LineageBinding is what a lineage entry must bind: the action it is the lineage of.
type LineageBinding struct {
	RunID       string
	SessionID   string
	ActionIndex int
	Anchor      string
	PrevAnchor  string
	WorkerID    string
}

// LineageEntry is the lineage entry document of one action (schemas/documents/browser.py).
func LineageEntry(b LineageBinding, keyID, hmacKeyID string, hashes ObservationHashes, action Action) map[string]any {
	return map[string]any{
		"run_id": b.RunID, "session_id": b.SessionID, "action_index": b.ActionIndex,
		"content_hash": b.Anchor, "parent_hashes": []any{b.PrevAnchor}, "worker_id": b.WorkerID, "key_id": keyID,
		"format": LineageFormat, "artefact_kind": LineageArtefactKind, "hmac_key_id": hmacKeyID,
		"observation_hash": hashes.ObservationHash, "screenshot_hash": hashes.ScreenshotHash,
		"dom_digest": hashes.DOMDigest, "action": action.Record(),
	}
}

// LineageEnvelope is the stored entry bytes with their HMAC envelope and Ed25519 signature.
type LineageEnvelope struct {
	Entry     []byte `avro:"entry"`
	HMAC      string `avro:"hmac"`
	KeyID     string `avro:"key_id"`
	Signature []byte `avro:"signature"`
}

// EntryHash is sha256 of the entry bytes.
func (l LineageEnvelope) EntryHash() string { return SHA256Digest(l.Entry) }

// JSON is the action log's form: the entry as its exact text, the signature as base64.
func (l LineageEnvelope) JSON() map[string]any {
	return map[string]any{"entry": string(l.Entry), "hmac": l.HMAC, "key_id": l.KeyID, "signature": base64.StdEncoding.EncodeToString(l.Signature)}
}

// SealLineage canonicalises an entry, envelopes it with the producer's lineage key (HMAC) and signs it
// with the producer key, both over PAE("bernstein/lineage-entry/v1", entry). No clock is involved: the
// same action always seals to the same bytes and signature.
func SealLineage(entry map[string]any, signer *Signer, lineageKey []byte) (LineageEnvelope, error) {
	data, err := CanonicalJSON(entry)
	if err != nil {
		return LineageEnvelope{}, err
	}
	if len(data) > MaxLineageEntryBytes {
		return LineageEnvelope{}, &ActivityRejected{Reason: "LINEAGE_TOO_LARGE", Msg: fmt.Sprintf("the lineage entry has %d bytes; at most %d", len(data), MaxLineageEntryBytes)}
	}
	return LineageEnvelope{Entry: data, HMAC: LineageHMAC(lineageKey, data), KeyID: signer.KeyID(), Signature: signer.Sign(LineageSigningInput(data))}, nil
}

// MaxLineageEntryBytes bounds a lineage entry (LINEAGE_TOO_LARGE).
const MaxLineageEntryBytes = 32 * 1024

// ActionSubmissionID is an action's submission id: the first 32 hex digits of
// sha256(run_id NUL session_id NUL index NUL anchor), so a retry of the same action has the same id.
func ActionSubmissionID(runID, sessionID string, index int, anchor string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d\x00%s", runID, sessionID, index, anchor)))
	return hex.EncodeToString(sum[:])[:32]
}

// ComputerUseAction is a ComputerUseAction.v2 record (schemas/avro/ComputerUseAction.v2.avsc).
type ComputerUseAction struct {
	SubmissionID    string          `avro:"submission_id"`
	RunID           string          `avro:"run_id"`
	SessionID       string          `avro:"session_id"`
	ActionIndex     int64           `avro:"action_index"`
	Producer        Producer        `avro:"producer"`
	PrevAnchor      string          `avro:"prev_anchor"`
	ScreenshotHash  string          `avro:"screenshot_hash"`
	ScreenshotSize  int64           `avro:"screenshot_size"`
	DOMDigest       string          `avro:"dom_digest"`
	DOMSize         int64           `avro:"dom_size"`
	ObservationHash string          `avro:"observation_hash"`
	Action          Action          `avro:"action"`
	Anchor          string          `avro:"anchor"`
	Lineage         LineageEnvelope `avro:"lineage"`
	OccurredAtMS    int64           `avro:"occurred_at_ms"`
}

// Encode single-object encodes the action as ComputerUseAction.v2.
func (a *ComputerUseAction) Encode() ([]byte, error) {
	c, err := DefaultCodec()
	if err != nil {
		return nil, err
	}
	return c.Encode(SchemaComputerUseV2, a)
}

// ActionRecord is everything needed to replay one action (an action log item).
type ActionRecord struct {
	Index      int
	PrevAnchor string
	Anchor     string
	Hashes     ObservationHashes
	Action     Action
	Lineage    LineageEnvelope
}

// JSON is the record as the action log holds it.
func (r ActionRecord) JSON() map[string]any {
	return map[string]any{
		"index": r.Index, "prev_anchor": r.PrevAnchor, "anchor": r.Anchor,
		"screenshot_hash": r.Hashes.ScreenshotHash, "dom_digest": r.Hashes.DOMDigest, "observation_hash": r.Hashes.ObservationHash,
		"action": r.Action.Record(), "lineage_entry_hash": r.Lineage.EntryHash(), "lineage": r.Lineage.JSON(),
	}
}

// ActionInput is what one action record is built from.
type ActionInput struct {
	RunID, SessionID string
	Index            int
	PrevAnchor       string // the previous action's anchor; the session's genesis for action 0
	Screenshot       []byte // the pre-action screenshot bytes
	Snapshot         []byte // the normalised snapshot bytes (NormaliseSnapshot)
	Action           Action // the canonical action (CanonicalAction)
	ProducerID, SDK  string
	OccurredAtMS     int64
}

// BuildAction anchors, seals and signs one action: its ActionRecord and its ComputerUseAction.v2.
func BuildAction(in ActionInput, keys *ProducerKeys) (*ActionRecord, *ComputerUseAction, error) {
	if err := RequireValidIDs([2]string{"run_id", in.RunID}, [2]string{"session_id", in.SessionID}); err != nil {
		return nil, nil, err
	}
	if len(keys.Lineage) == 0 {
		return nil, nil, &ConfigError{Msg: "the producer keys hold no lineage key (lineage.hmac.key): computer-use actions need one"}
	}
	hashes := HashObservation(in.Screenshot, in.Snapshot)
	anchor, err := ActionAnchor(in.PrevAnchor, hashes.ObservationHash, in.Action.Record())
	if err != nil {
		return nil, nil, err
	}
	binding := LineageBinding{in.RunID, in.SessionID, in.Index, anchor, in.PrevAnchor, in.ProducerID}
	envelope, err := SealLineage(LineageEntry(binding, keys.Signer.KeyID(), HMACKeyID(keys.Lineage), hashes, in.Action), keys.Signer, keys.Lineage)
	if err != nil {
		return nil, nil, err
	}
	record := &ActionRecord{Index: in.Index, PrevAnchor: in.PrevAnchor, Anchor: anchor, Hashes: hashes, Action: in.Action, Lineage: envelope}
	wire := &ComputerUseAction{
		SubmissionID: ActionSubmissionID(in.RunID, in.SessionID, in.Index, anchor), RunID: in.RunID, SessionID: in.SessionID,
		ActionIndex: int64(in.Index), Producer: Producer{ID: in.ProducerID, SDK: in.SDK}, PrevAnchor: in.PrevAnchor,
		ScreenshotHash: hashes.ScreenshotHash, ScreenshotSize: int64(len(in.Screenshot)), DOMDigest: hashes.DOMDigest,
		DOMSize: int64(len(in.Snapshot)), ObservationHash: hashes.ObservationHash, Action: in.Action, Anchor: anchor,
		Lineage: envelope, OccurredAtMS: in.OccurredAtMS,
	}
	return record, wire, nil
}
