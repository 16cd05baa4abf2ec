package bernstein

import (
	"errors"
	"fmt"
)

// Every error this package returns on purpose has a stable machine-readable Code (as the Python
// SDK's BernsteinError.code) and a message that says what to do next. Foreign errors (Kafka, S3,
// Avro) are wrapped at the edge and reachable through errors.Unwrap.

// Coded is implemented by every typed error of this package.
type Coded interface {
	error
	Code() string
}

// CodeOf is err's stable code, or "" when err is not one of this package's typed errors.
func CodeOf(err error) string {
	var c Coded
	if errors.As(err, &c) {
		return c.Code()
	}
	return ""
}

// CanonicalizationError: a value that RFC 8785 canonical JSON cannot represent exactly.
type CanonicalizationError struct{ Msg string }

func (e *CanonicalizationError) Error() string { return e.Msg }
func (e *CanonicalizationError) Code() string  { return "E_CANONICALIZATION" }

// MalformedDigestError: a digest that is not "sha256:<64 lowercase hex>".
type MalformedDigestError struct {
	Field string
	Value string
}

func (e *MalformedDigestError) Error() string {
	shown := e.Value
	if len(shown) > 80 {
		shown = shown[:77] + "..."
	}
	return fmt.Sprintf("%s is not a digest of the form 'sha256:<64 lowercase hex>': %q", e.Field, shown)
}
func (e *MalformedDigestError) Code() string { return "E_MALFORMED_DIGEST" }

// Decode error codes (the scheduler dead-letters such inputs under the same codes).
const (
	CodeNotSingleObject    = "NOT_AVRO_SINGLE_OBJECT"
	CodeUnknownFingerprint = "UNKNOWN_SCHEMA_FINGERPRINT"
	CodeTruncatedBody      = "TRUNCATED_OR_MALFORMED_BODY"
)

// DecodeError: wire bytes that are not a record of one of our schemas.
type DecodeError struct {
	Kind string // CodeNotSingleObject, CodeUnknownFingerprint or CodeTruncatedBody
	Msg  string
}

func (e *DecodeError) Error() string { return e.Msg }
func (e *DecodeError) Code() string  { return e.Kind }

// EncodeError: a record that does not fit its schema (a programming error in the caller).
type EncodeError struct {
	Schema string
	Err    error
}

func (e *EncodeError) Error() string {
	return fmt.Sprintf("record does not fit schema %s: %v", e.Schema, e.Err)
}
func (e *EncodeError) Code() string  { return "E_ENCODE" }
func (e *EncodeError) Unwrap() error { return e.Err }

// ConfigError: the environment, the Kafka client properties file or the producer key directory is
// unusable. It names the setting or file, never a secret value.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }
func (e *ConfigError) Code() string  { return "E_CONFIG" }

// ActivityRejected: a result that may not cross the activity boundary, refused before anything is
// stored or published. Reason is one of the scheduler's refusal codes (INVALID_RUN_ID, ...) or a
// modality's own; Evidence holds what was declared and what was found.
type ActivityRejected struct {
	Reason   string
	Msg      string
	Evidence map[string]string
}

func (e *ActivityRejected) Error() string { return e.Msg }
func (e *ActivityRejected) Code() string  { return e.Reason }

// ErrEvidenceNotStored is matched (errors.Is) by an EvidenceNotStoredError.
var ErrEvidenceNotStored = errors.New("evidence not stored")

// EvidenceNotStoredError: an observation names bytes the CAS does not hold, so it may not be published.
type EvidenceNotStoredError struct {
	Ref         string
	ContentHash string
}

func (e *EvidenceNotStoredError) Error() string {
	return fmt.Sprintf("observation %q (%s) is not in the CAS; store it with Emitter.Capture or Emitter.StoreBlobs before publishing", e.Ref, e.ContentHash)
}
func (e *EvidenceNotStoredError) Code() string         { return "E_EVIDENCE_NOT_STORED" }
func (e *EvidenceNotStoredError) Is(target error) bool { return target == ErrEvidenceNotStored }

// StoreError: the S3 content store could not be reached or refused an operation.
type StoreError struct {
	Op  string
	Err error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("S3 content store: cannot %s: %v", e.Op, e.Err)
}
func (e *StoreError) Code() string  { return "E_CAS" }
func (e *StoreError) Unwrap() error { return e.Err }

// PublishFailed: a submission was not acknowledged by the broker. Value is the exact record value:
// Emitter.Retry publishes the same bytes again (same submission_id, same signature), which the
// scheduler journals at most once. Retriable is true when trying again may succeed (a timeout, a
// retriable broker error); false for a refusal (not authorized, topic missing, record too large).
type PublishFailed struct {
	RunID        string
	SubmissionID string
	Topic        string
	Value        []byte
	Retriable    bool
	Reason       string // E_PUBLISH_FAILED, E_KAFKA_NOT_AUTHORIZED or E_TOPIC_MISSING
	Msg          string
	Err          error
}

func (e *PublishFailed) Error() string { return e.Msg }
func (e *PublishFailed) Code() string {
	if e.Reason != "" {
		return e.Reason
	}
	return "E_PUBLISH_FAILED"
}
func (e *PublishFailed) Unwrap() error { return e.Err }
