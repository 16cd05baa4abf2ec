package bernstein

import "fmt"

// SDK names this SDK in producer.sdk.
const SDK = "bernstein-go/0.1.0"

// Sign sets ProducerKeyID and ProducerSignature: the signer's Ed25519 signature over
// SubmissionSigningInput(SubmissionStatement(s, key id)).
func (s *ActivitySubmission) Sign(signer *Signer) error {
	input, err := SubmissionSigningInput(SubmissionStatement(s, signer.KeyID()))
	if err != nil {
		return err
	}
	s.ProducerKeyID = signer.KeyID()
	s.ProducerSignature = signer.Sign(input)
	return nil
}

// Encode single-object encodes the submission as ActivitySubmission.v3.
func (s *ActivitySubmission) Encode() ([]byte, error) {
	c, err := DefaultCodec()
	if err != nil {
		return nil, err
	}
	if s.Observations == nil {
		s.Observations = []Observation{}
	}
	return c.Encode(SchemaActivitySubmissionV3, s)
}

// Sign sets ProducerKeyID and ProducerSignature over RunCloseStatement.
func (r *RunClose) Sign(signer *Signer) error {
	input, err := SubmissionSigningInput(RunCloseStatement(r.SubmissionID, r.RunID, r.Producer.ID, r.OccurredAtMS, signer.KeyID()))
	if err != nil {
		return err
	}
	r.ProducerKeyID = signer.KeyID()
	r.ProducerSignature = signer.Sign(input)
	return nil
}

// Encode single-object encodes the close as RunClose.v2.
func (r *RunClose) Encode() ([]byte, error) {
	c, err := DefaultCodec()
	if err != nil {
		return nil, err
	}
	return c.Encode(SchemaRunCloseV2, r)
}

// NewSubmission is the unsigned ActivitySubmission.v3 of result (Sign it before encoding).
func NewSubmission(result *ActivityResult, submissionID, runID, stageID, role, producerID string, occurredAtMS int64) (*ActivitySubmission, error) {
	if err := RequireValidIDs([2]string{"run_id", runID}, [2]string{"stage_id", stageID}, [2]string{"role", role}); err != nil {
		return nil, err
	}
	if !IsValidLabel(submissionID) {
		return nil, &ActivityRejected{Reason: "INVALID_SUBMISSION_ID", Msg: fmt.Sprintf("submission_id %q must be 1-256 characters without control characters", submissionID)}
	}
	if occurredAtMS < 0 || occurredAtMS > MaxOccurredAtMS {
		return nil, &ActivityRejected{Reason: "INVALID_OCCURRED_AT", Msg: fmt.Sprintf("occurred_at_ms %d is outside 0..%d", occurredAtMS, int64(MaxOccurredAtMS))}
	}
	observations := append([]Observation{}, result.Observations...)
	return &ActivitySubmission{
		SubmissionID:    submissionID,
		RunID:           runID,
		StageID:         stageID,
		Role:            role,
		Producer:        Producer{ID: producerID, SDK: SDK},
		Kind:            result.Kind,
		Artifact:        result.Artifact,
		ArtifactHash:    result.ArtifactHash,
		EvidenceSetHash: result.EvidenceSetHash,
		Observations:    observations,
		TerminalState:   result.TerminalState,
		ReasonCode:      result.ReasonCode,
		OccurredAtMS:    occurredAtMS,
	}, nil
}
