package bernstein

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ActivityResult is what an activity returns: the artifact and the hashes needed to replay it
// (producers/activity.py). Build one with BuildResult or a kind's helper (CodingResult,
// ResearchReport.Result, DataOpsActivity.Finish, BrowserSession.Result).
type ActivityResult struct {
	Kind            string
	Artifact        []byte
	ArtifactHash    string
	EvidenceSetHash string
	TerminalState   string
	ReasonCode      string
	Observations    []Observation
}

// Outcome is a result's terminal state and reason code (each defaults: completed, "ok").
type Outcome struct {
	TerminalState string
	ReasonCode    string
}

// ArtifactBytes are an artifact's bytes: []byte as given, anything else as RFC 8785 canonical JSON.
func ArtifactBytes(artifact any) ([]byte, error) {
	switch a := artifact.(type) {
	case []byte:
		return a, nil
	default:
		return CanonicalJSON(a)
	}
}

// BuildResult is the generic builder: computes both hashes and refuses what the scheduler would
// refuse anyway (unknown kind or terminal state, empty or invalid reason code, an artifact over
// the inline limit, a malformed observation hash). artifact is []byte or a JSON value. A blank
// reason code (not empty) is refused as EMPTY_REASON_CODE.
func BuildResult(kind string, artifact any, observations []Observation, outcome Outcome) (*ActivityResult, error) {
	if outcome.TerminalState == "" {
		outcome.TerminalState = Completed
	}
	if outcome.ReasonCode == "" {
		outcome.ReasonCode = "ok" // as the Python SDK's ActivityResult.build and `bernstein submit` descriptions
	}
	if !kinds[kind] {
		return nil, &ActivityRejected{Reason: "UNKNOWN_KIND", Msg: fmt.Sprintf("unknown activity kind %q", kind)}
	}
	if !terminalStates[outcome.TerminalState] {
		return nil, &ActivityRejected{Reason: "UNKNOWN_TERMINAL_STATE", Msg: fmt.Sprintf("unknown terminal state %q", outcome.TerminalState)}
	}
	if strings.TrimFunc(outcome.ReasonCode, isPySpace) == "" {
		return nil, &ActivityRejected{Reason: "EMPTY_REASON_CODE", Msg: "reason_code must not be empty"}
	}
	if !IsValidReasonCode(outcome.ReasonCode) {
		return nil, &ActivityRejected{Reason: "INVALID_REASON_CODE", Msg: "reason_code must be at most 128 characters without control characters"}
	}
	body, err := ArtifactBytes(artifact)
	if err != nil {
		return nil, err
	}
	if len(body) > MaxInlineArtifactBytes {
		return nil, &ActivityRejected{
			Reason:   "ARTIFACT_TOO_LARGE",
			Msg:      fmt.Sprintf("artifact has %d bytes; the inline limit is %d (store large evidence as observations and keep the artifact a small manifest of their hashes)", len(body), MaxInlineArtifactBytes),
			Evidence: map[string]string{"size": fmt.Sprint(len(body)), "limit": fmt.Sprint(MaxInlineArtifactBytes)},
		}
	}
	if len(observations) > MaxObservations {
		return nil, &ActivityRejected{Reason: "TOO_MANY_OBSERVATIONS", Msg: fmt.Sprintf("%d observations; at most %d", len(observations), MaxObservations)}
	}
	hashes := make([]string, 0, len(observations))
	for i, o := range observations {
		kindLen, refLen := utf8.RuneCountInString(o.Kind), utf8.RuneCountInString(o.Ref)
		if kindLen == 0 || kindLen > MaxKindLength || refLen > MaxRefLength || controlRE.MatchString(o.Kind+o.Ref) {
			return nil, &ActivityRejected{Reason: "INVALID_OBSERVATION", Msg: fmt.Sprintf(
				"observations[%d] needs a kind of 1-%d characters and a ref of at most %d, without control characters", i, MaxKindLength, MaxRefLength)}
		}
		if o.Size < 0 || o.Size > MaxRunEvidenceBytes {
			return nil, &ActivityRejected{Reason: "INVALID_EVIDENCE_SIZE", Msg: fmt.Sprintf(
				"observations[%d].size must be 0 to %d bytes (the per-run evidence cap), got %d", i, MaxRunEvidenceBytes, o.Size)}
		}
		hashes = append(hashes, o.ContentHash)
	}
	evidence, err := EvidenceSetHash(hashes)
	if err != nil {
		return nil, &ActivityRejected{Reason: "MALFORMED_DIGEST", Msg: err.Error()}
	}
	return &ActivityResult{
		Kind:            kind,
		Artifact:        body,
		ArtifactHash:    ArtifactHash(body),
		EvidenceSetHash: evidence,
		TerminalState:   outcome.TerminalState,
		ReasonCode:      outcome.ReasonCode,
		Observations:    append([]Observation{}, observations...),
	}, nil
}
