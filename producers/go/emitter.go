package bernstein

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Emitter publishes activity submissions for one producer identity, each signed with its producer
// key (producers/emitter.py). Order is enforced: every observation's bytes and the artifact bytes
// are in the content store before the submission that names them is produced, so a journalled hash
// can always be reattached. Publishing waits for the broker's acknowledgement; a failure is a typed
// error, never a silent loss. Retries reuse the same bytes (same submission_id, same
// occurred_at_ms and, Ed25519 being deterministic, the same signature): the scheduler journals a
// submission_id once and refuses a repeat as DUPLICATE_SUBMISSION. Safe for concurrent use
// (set Timeout and Retries before the first publish).
type Emitter struct {
	Store      *BlobStore
	ProducerID string
	Signer     *Signer
	Keys       *ProducerKeys // the whole identity (its lineage and redaction keys sign computer-use actions)
	Topic      string
	Timeout    time.Duration // how long one attempt waits for its acknowledgement (default 30 s; the client's record delivery timeout is fixed at NewEmitter)
	Retries    int           // extra attempts of a retriable failure (default 2)
	client     *kgo.Client
	pingOnce   sync.Once
	pingErr    error
}

// Published says where a record landed.
type Published struct {
	SubmissionID string `json:"submission_id"`
	RunID        string `json:"run_id"`
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	Offset       int64  `json:"offset"`
	Value        []byte `json:"-"`
}

// NewEmitter connects to Kafka and S3 as cfg says and loads the producer keys of
// cfg.ProducerKeysDir. Nothing is sent until the first publish.
func NewEmitter(cfg *Config) (*Emitter, error) {
	keys, err := LoadProducerKeys(cfg.ProducerKeysDir)
	if err != nil {
		return nil, err
	}
	store, err := NewBlobStore(cfg)
	if err != nil {
		return nil, err
	}
	e := &Emitter{Store: store, ProducerID: keys.Name, Signer: keys.Signer, Keys: keys, Topic: cfg.SubmissionsTopic(), Timeout: 30 * time.Second, Retries: 2}
	opts, err := KafkaOptions(cfg, e.Timeout)
	if err != nil {
		return nil, err
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, &ConfigError{Msg: "Kafka client: " + err.Error()}
	}
	e.client = client
	return e, nil
}

// Close flushes and closes the Kafka client.
func (e *Emitter) Close() {
	if e.client != nil {
		e.client.Close()
	}
}

// NewSubmissionID is a fresh random id (32 hex digits, as the Python SDK's uuid4().hex).
func NewSubmissionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// NowMS is the wall clock in milliseconds since the epoch.
func NowMS() int64 { return time.Now().UnixMilli() }

// Capture stores data now and returns its Observation (content hash and size).
func (e *Emitter) Capture(ctx context.Context, kind, ref string, data []byte) (Observation, error) {
	if _, err := e.Store.Put(ctx, data); err != nil {
		return Observation{}, err
	}
	return Observe(kind, ref, data), nil
}

// StoreBlobs stores extra blobs (bytes a modality's artifact names) before publishing.
func (e *Emitter) StoreBlobs(ctx context.Context, blobs ...[]byte) error {
	for _, b := range blobs {
		if _, err := e.Store.Put(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// PublishOptions are a submission's optional identity: its id (default: fresh) and its
// occurred_at_ms (default: now). Give both to make a publish reproducible.
type PublishOptions struct {
	SubmissionID string
	OccurredAtMS *int64
}

// SubmissionValue is the signed, encoded ActivitySubmission.v3 of result (nothing is published).
func (e *Emitter) SubmissionValue(runID, stageID, role string, result *ActivityResult, opts PublishOptions) (string, []byte, error) {
	sid := opts.SubmissionID
	if sid == "" {
		sid = NewSubmissionID()
	}
	occurred := NowMS()
	if opts.OccurredAtMS != nil {
		occurred = *opts.OccurredAtMS
	}
	sub, err := NewSubmission(result, sid, runID, stageID, role, e.ProducerID, occurred)
	if err != nil {
		return "", nil, err
	}
	if err := sub.Sign(e.Signer); err != nil {
		return "", nil, err
	}
	value, err := sub.Encode()
	return sid, value, err
}

// Publish stores the artifact, checks every observation is stored with its declared size, then
// publishes the signed submission keyed by run id and waits for the acknowledgement.
func (e *Emitter) Publish(ctx context.Context, runID, stageID, role string, result *ActivityResult, opts PublishOptions) (*Published, error) {
	sid, value, err := e.SubmissionValue(runID, stageID, role, result, opts)
	if err != nil {
		return nil, err
	}
	if err := e.requireEvidence(ctx, result); err != nil {
		return nil, err
	}
	return e.produce(ctx, runID, sid, value)
}

// CloseRun asks the scheduler to seal the run for good (a signed RunClose.v2).
func (e *Emitter) CloseRun(ctx context.Context, runID string, opts PublishOptions) (*Published, error) {
	if err := RequireValidIDs([2]string{"run_id", runID}); err != nil {
		return nil, err
	}
	rc := &RunClose{SubmissionID: opts.SubmissionID, RunID: runID, Producer: Producer{ID: e.ProducerID, SDK: SDK}, OccurredAtMS: NowMS()}
	if rc.SubmissionID == "" {
		rc.SubmissionID = NewSubmissionID()
	}
	if opts.OccurredAtMS != nil {
		rc.OccurredAtMS = *opts.OccurredAtMS
	}
	if !IsValidLabel(rc.SubmissionID) {
		return nil, &ActivityRejected{Reason: "INVALID_SUBMISSION_ID", Msg: fmt.Sprintf("submission_id %q must be 1-256 characters without control characters", rc.SubmissionID)}
	}
	if err := rc.Sign(e.Signer); err != nil {
		return nil, err
	}
	value, err := rc.Encode()
	if err != nil {
		return nil, err
	}
	return e.produce(ctx, runID, rc.SubmissionID, value)
}

// Retry publishes again exactly what failed did not get acknowledged (same bytes, same submission_id).
func (e *Emitter) Retry(ctx context.Context, failed *PublishFailed) (*Published, error) {
	if failed == nil || len(failed.Value) == 0 || failed.RunID == "" {
		return nil, &ConfigError{Msg: "this PublishFailed carries nothing to retry"}
	}
	return e.produce(ctx, failed.RunID, failed.SubmissionID, failed.Value)
}

// PublishRaw publishes pre-encoded bytes as they are (tests and tools that send malformed input).
func (e *Emitter) PublishRaw(ctx context.Context, runID string, value []byte, submissionID string) (*Published, error) {
	return e.produce(ctx, runID, submissionID, value)
}

func (e *Emitter) requireEvidence(ctx context.Context, result *ActivityResult) error {
	if _, err := e.Store.Put(ctx, result.Artifact); err != nil {
		return err
	}
	for _, o := range result.Observations {
		// stored with its checksum (Holds), not merely present: bytes someone else placed at the address first
		// are not this observation's evidence
		held, err := e.Store.Holds(ctx, o.ContentHash)
		if err != nil {
			return err
		}
		if !held {
			return &EvidenceNotStoredError{Ref: o.Ref, ContentHash: o.ContentHash}
		}
		size, _, err := e.Store.Stat(ctx, o.ContentHash)
		if err != nil {
			return err
		}
		if size != o.Size {
			return &ActivityRejected{Reason: "INVALID_EVIDENCE_SIZE", Msg: fmt.Sprintf(
				"observation %q declares %d bytes but the stored blob %s has %d", o.Ref, o.Size, o.ContentHash, size)}
		}
	}
	return nil
}

func (e *Emitter) produce(ctx context.Context, runID, submissionID string, value []byte) (*Published, error) {
	// The first publish pings the cluster: a refused login or an untrusted broker certificate fails
	// within seconds instead of after the whole delivery timeout; anything else is left to the
	// produce and its retries.
	e.pingOnce.Do(func() {
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		e.pingErr = e.client.Ping(pingCtx)
	})
	if e.pingErr != nil {
		if failed := publishError(e.pingErr, e.Topic, runID, submissionID, value, e.Timeout); !failed.Retriable && failed.Reason != "" {
			return nil, failed
		}
	}
	attempt := 0
	for {
		published, err := e.produceOnce(ctx, runID, submissionID, value)
		if err == nil {
			return published, nil
		}
		attempt++
		if attempt > e.Retries || !err.Retriable || ctx.Err() != nil {
			return nil, err
		}
	}
}

func (e *Emitter) produceOnce(ctx context.Context, runID, submissionID string, value []byte) (*Published, *PublishFailed) {
	attemptCtx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	record := &kgo.Record{Topic: e.Topic, Key: []byte(runID), Value: value}
	if err := e.client.ProduceSync(attemptCtx, record).FirstErr(); err != nil {
		return nil, publishError(err, e.Topic, runID, submissionID, value, e.Timeout)
	}
	return &Published{SubmissionID: submissionID, RunID: runID, Topic: record.Topic, Partition: record.Partition, Offset: record.Offset, Value: value}, nil
}
