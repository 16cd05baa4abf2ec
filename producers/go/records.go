package bernstein

import (
	"fmt"
	"regexp"
	"slices"
	"unicode/utf8"
)

// The wire contract's closed sets and limits (schemas/records.py).

// Activity kinds.
const (
	KindCoding   = "coding"
	KindResearch = "research"
	KindBrowser  = "browser"
	KindData     = "data"
	KindOps      = "ops"
)

// Terminal states.
const (
	Completed = "completed"
	Refused   = "refused"
	Failed    = "failed"
	TimedOut  = "timed_out"
)

// Limits the scheduler enforces.
const (
	MaxInlineArtifactBytes = 512 * 1024
	MaxObservations        = 4096
	MaxIDLength            = 128
	MaxRefLength           = 4096
	MaxReasonCodeLength    = 128
	MaxKindLength          = 64
	MaxLabelLength         = 256
	MaxOccurredAtMS        = 253_402_300_799_999
	MaxMessageBytes        = 2 * 1024 * 1024
	MaxRunEvidenceBytes    = 64 * 1024 * 1024
)

// IDRule is how a refusal of a run, stage or role id words the rule IsValidID checks.
const IDRule = "must be 1-128 characters of A-Z a-z 0-9 _ . : @ + = -"

var (
	idRE      = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,127}$`)
	controlRE = regexp.MustCompile(`[\x00-\x1f\x7f]`)
)

var kinds = map[string]bool{KindCoding: true, KindResearch: true, KindBrowser: true, KindData: true, KindOps: true}
var terminalStates = map[string]bool{Completed: true, Refused: true, Failed: true, TimedOut: true}

// IsValidID: run, stage and role ids are 1-128 of A-Z a-z 0-9 _ . : @ + = -, not starting with . or -.
func IsValidID(s string) bool { return idRE.MatchString(s) }

// IsValidLabel: submission_id, producer.id, producer.sdk are 1-256 characters without control characters.
func IsValidLabel(s string) bool {
	n := utf8.RuneCountInString(s)
	return utf8.ValidString(s) && n > 0 && n <= MaxLabelLength && !controlRE.MatchString(s)
}

// IsValidReasonCode: non-empty after trimming, at most 128 characters, no control characters.
func IsValidReasonCode(s string) bool {
	trimmed := false
	for _, r := range s {
		if !isPySpace(r) {
			trimmed = true
			break
		}
	}
	return utf8.ValidString(s) && trimmed && utf8.RuneCountInString(s) <= MaxReasonCodeLength && !controlRE.MatchString(s)
}

func isPySpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// RequireValidIDs refuses the first (name, value) pair that is not a valid id, as INVALID_<NAME>.
func RequireValidIDs(pairs ...[2]string) error {
	for _, p := range pairs {
		if !IsValidID(p[1]) {
			return &ActivityRejected{Reason: "INVALID_" + upper(p[0]), Msg: fmt.Sprintf("%s %q %s", p[0], p[1], IDRule)}
		}
	}
	return nil
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

// Observation is bytes an agent saw behind a decision, by content hash; Ref is provenance only.
type Observation struct {
	Kind        string `avro:"kind" json:"kind"`
	Ref         string `avro:"ref" json:"ref"`
	ContentHash string `avro:"content_hash" json:"content_hash"`
	Size        int64  `avro:"size" json:"size"`
}

// Observe is the Observation of data, content-addressed and sized now (nothing is stored).
func Observe(kind, ref string, data []byte) Observation {
	return Observation{Kind: kind, Ref: ref, ContentHash: ContentHash(data), Size: int64(len(data))}
}

// Producer is a submission's producer identity: its key ring's name and the SDK that built it.
type Producer struct {
	ID  string `avro:"id"`
	SDK string `avro:"sdk"`
}

// ActivitySubmission is an ActivitySubmission.v3 record (schemas/avro/ActivitySubmission.v3.avsc).
type ActivitySubmission struct {
	SubmissionID      string        `avro:"submission_id"`
	RunID             string        `avro:"run_id"`
	StageID           string        `avro:"stage_id"`
	Role              string        `avro:"role"`
	Producer          Producer      `avro:"producer"`
	Kind              string        `avro:"kind"`
	Artifact          []byte        `avro:"artifact"`
	ArtifactHash      string        `avro:"artifact_hash"`
	EvidenceSetHash   string        `avro:"evidence_set_hash"`
	Observations      []Observation `avro:"observations"`
	TerminalState     string        `avro:"terminal_state"`
	ReasonCode        string        `avro:"reason_code"`
	OccurredAtMS      int64         `avro:"occurred_at_ms"`
	ProducerKeyID     string        `avro:"producer_key_id"`
	ProducerSignature []byte        `avro:"producer_signature"`
}

// RunClose is a RunClose.v2 record: asks the scheduler to seal the run for good.
type RunClose struct {
	SubmissionID      string   `avro:"submission_id"`
	RunID             string   `avro:"run_id"`
	Producer          Producer `avro:"producer"`
	OccurredAtMS      int64    `avro:"occurred_at_ms"`
	ProducerKeyID     string   `avro:"producer_key_id"`
	ProducerSignature []byte   `avro:"producer_signature"`
}

// Statement types.
const (
	StatementActivity = "activity"
	StatementRunClose = "run_close"
)

// SubmissionStatement is what a producer signs for an activity submission: every field the journal
// also keeps (the artifact is covered by artifact_hash; producer.sdk is not signed).
func SubmissionStatement(s *ActivitySubmission, keyID string) map[string]any {
	observations := make([]any, 0, len(s.Observations))
	for _, o := range s.Observations {
		observations = append(observations, map[string]any{"kind": o.Kind, "ref": o.Ref, "content_hash": o.ContentHash, "size": o.Size})
	}
	return map[string]any{
		"type":              StatementActivity,
		"submission_id":     s.SubmissionID,
		"run_id":            s.RunID,
		"stage_id":          s.StageID,
		"role":              s.Role,
		"producer_id":       s.Producer.ID,
		"kind":              s.Kind,
		"artifact_hash":     s.ArtifactHash,
		"evidence_set_hash": s.EvidenceSetHash,
		"observations":      observations,
		"terminal_state":    s.TerminalState,
		"reason_code":       s.ReasonCode,
		"occurred_at_ms":    s.OccurredAtMS,
		"key_id":            keyID,
	}
}

// RunCloseStatement is what a producer signs to close a run.
func RunCloseStatement(submissionID, runID, producerID string, occurredAtMS int64, keyID string) map[string]any {
	return map[string]any{
		"type":           StatementRunClose,
		"submission_id":  submissionID,
		"run_id":         runID,
		"producer_id":    producerID,
		"occurred_at_ms": occurredAtMS,
		"key_id":         keyID,
	}
}

// SubmissionSigningInput is the exact bytes a producer's key signs: PAE(bernstein/submission/v1, canonical JSON).
func SubmissionSigningInput(statement map[string]any) ([]byte, error) {
	return SigningInput(DomainSubmission, statement)
}

func sortStrings(s []string) { slices.Sort(s) }
