package bernstein

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
)

// TestLiveEmitter runs against a real deployment when BERNSTEIN_GO_LIVE=1 and the BERNSTEIN_*
// settings name a broker, a bucket, a producer key directory and a prefix whose topics exist and
// whose submissions topic the principal may write (see README "Setup"). It publishes a stage whose
// evidence is not stored (refused locally, nothing published), then a stored one, and publishes
// the same bytes again with Retry: both land, and the scheduler will journal the submission once
// (the repeat is DUPLICATE_SUBMISSION). It prints the run id so the caller can check the outcome.
func TestLiveEmitter(t *testing.T) {
	if os.Getenv("BERNSTEIN_GO_LIVE") != "1" {
		t.Skip("BERNSTEIN_GO_LIVE=1 runs it against the deployment of the BERNSTEIN_* settings")
	}
	ctx := context.Background()
	cfg, err := ConfigFromEnv()
	must(t, err)
	e, err := NewEmitter(cfg)
	must(t, err)
	defer e.Close()
	runID := "run-go-live-" + NewSubmissionID()[:8]

	missing := []byte("never stored " + runID)
	result, err := BuildResult(KindCoding, []byte("diff"), []Observation{Observe("file", "x", missing)}, Outcome{})
	must(t, err)
	if _, err := e.Publish(ctx, runID, "s-0", "developer", result, PublishOptions{}); !errors.Is(err, ErrEvidenceNotStored) {
		t.Fatalf("unstored evidence: got %v", err)
	}

	page, err := e.Capture(ctx, "page", "https://example.test/"+runID, []byte("page of "+runID))
	must(t, err)
	result, err = BuildResult(KindCoding, map[string]any{"diff": "+1", "run": runID}, []Observation{page}, Outcome{})
	must(t, err)
	first, err := e.Publish(ctx, runID, "s-0", "developer", result, PublishOptions{})
	must(t, err)
	again, err := e.Retry(ctx, &PublishFailed{RunID: runID, SubmissionID: first.SubmissionID, Value: first.Value})
	must(t, err)
	if !bytes.Equal(again.Value, first.Value) || again.Partition != first.Partition || again.Offset <= first.Offset {
		t.Fatalf("retry: %+v after %+v", again, first)
	}
	closed, err := e.CloseRun(ctx, runID, PublishOptions{})
	must(t, err)
	t.Logf("run %s: stage %s at %s[%d]@%d, repeated @%d, closed @%d", runID, first.SubmissionID, first.Topic, first.Partition, first.Offset, again.Offset, closed.Offset)
}
