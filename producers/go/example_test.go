package bernstein_test

import (
	"context"
	"fmt"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// The README's ten lines (compiled by go vet/test; not run: it needs Kafka and S3).
func Example() {
	ctx, body := context.Background(), []byte("<html>...</html>")
	cfg, err := bernstein.ConfigFromEnv() // BERNSTEIN_* settings
	if err != nil {
		panic(err)
	}
	e, err := bernstein.NewEmitter(cfg) // producer keys from $BERNSTEIN_PRODUCER_KEYS_DIR
	if err != nil {
		panic(err)
	}
	defer e.Close()
	page, err := e.Capture(ctx, "page", "https://example.test/a", body) // stored in S3 now
	if err != nil {
		panic(err)
	}
	result, err := bernstein.BuildResult(bernstein.KindCoding, map[string]any{"diff": "+1 line"},
		[]bernstein.Observation{page}, bernstein.Outcome{}) // completed / ok
	if err != nil {
		panic(err)
	}
	published, err := e.Publish(ctx, "run-42", "stage-0", "developer", result, bernstein.PublishOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(published.Topic, published.Partition, published.Offset)
	if _, err := e.CloseRun(ctx, "run-42", bernstein.PublishOptions{}); err != nil { // signed RunClose.v2
		panic(err)
	}
}
