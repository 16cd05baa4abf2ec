// Command bernstein-go-emit publishes activity descriptions read as JSON lines on stdin (the
// format of `bernstein submit`: docs/producing.md, "Vectors, SDKs and tools"), one at a time:
// each stage's blobs (every observation's bytes and the artifact) are stored in S3 first, then its
// signed ActivitySubmission.v3 (a close: RunClose.v2) is produced, keyed by run id, and acknowledged.
// One JSON line per published record goes to stdout:
//
//	{"run_id": .., "submission_id": .., "topic": .., "partition": .., "offset": ..}
//
// Configuration comes from the environment (docs/producing.md, "Kafka and S3 settings"):
// BERNSTEIN_KAFKA_BOOTSTRAP, BERNSTEIN_KAFKA_CONFIG_FILE, BERNSTEIN_TOPIC_PREFIX, BERNSTEIN_S3_ENDPOINT,
// BERNSTEIN_S3_ACCESS_KEY, BERNSTEIN_S3_SECRET_KEY, BERNSTEIN_S3_BUCKET, BERNSTEIN_PRODUCER_KEYS_DIR.
//
// Exit status: 0 all published; 2 a bad description (the line is named; nothing is published for
// it) or unusable configuration; 3 Kafka or S3 unavailable or refusing (nothing acknowledged for
// that line). Earlier lines stay published. Errors are one typed message on stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

const (
	exitBadInput    = 2
	exitUnavailable = 3
)

type output struct {
	RunID        string `json:"run_id"`
	SubmissionID string `json:"submission_id"`
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	Offset       int64  `json:"offset"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "bernstein-go-emit: internal error (a bug, please report it): %v\n", p)
			code = 1
		}
	}()
	for _, arg := range args {
		if arg == "-h" || arg == "--help" {
			fmt.Fprintln(stdout, "usage: bernstein-go-emit < descriptions.jsonl  (activity descriptions as JSON lines; see producers/go/README.md)")
			return 0
		}
		fmt.Fprintf(stderr, "bernstein-go-emit: takes no arguments (got %q); descriptions come on stdin\n", arg)
		return exitBadInput
	}
	cfg, err := bernstein.ConfigFromEnv()
	if err != nil {
		return fail(stderr, err)
	}
	emitter, err := bernstein.NewEmitter(cfg)
	if err != nil {
		return fail(stderr, err)
	}
	defer emitter.Close()
	// franz-go already retries within the 30 s delivery timeout; a command should not wait 90 s
	// before saying Kafka is unreachable (a library caller keeps Emitter.Retries = 2).
	emitter.Retries = 0
	cwd, _ := os.Getwd()
	ctx := context.Background()
	reader := bufio.NewReaderSize(stdin, 1<<20)
	encoder := json.NewEncoder(stdout)
	for number := 1; ; number++ {
		line, readErr := reader.ReadBytes('\n')
		if len(trimSpace(line)) > 0 {
			published, err := publish(ctx, emitter, line, number, cwd)
			if err != nil {
				return fail(stderr, err)
			}
			_ = encoder.Encode(output{published.RunID, published.SubmissionID, published.Topic, published.Partition, published.Offset})
		}
		if readErr == io.EOF {
			return 0
		}
		if readErr != nil {
			fmt.Fprintf(stderr, "bernstein-go-emit: cannot read stdin: %v\n", readErr)
			return exitBadInput
		}
	}
}

func publish(ctx context.Context, e *bernstein.Emitter, line []byte, number int, cwd string) (*bernstein.Published, error) {
	d, err := bernstein.ParseDescription(line, number, cwd)
	if err != nil {
		return nil, err
	}
	if d.Close {
		published, err := e.CloseRun(ctx, d.RunID, bernstein.PublishOptions{SubmissionID: d.SubmissionID})
		return published, lineError(err, number, "close_run")
	}
	result, err := d.Result()
	if err != nil {
		return nil, err
	}
	opts := bernstein.PublishOptions{SubmissionID: d.SubmissionID, OccurredAtMS: d.OccurredAtMS}
	// Everything that can be refused without the network is checked before anything is stored.
	if _, _, err := e.SubmissionValue(d.RunID, d.StageID, d.Role, result, opts); err != nil {
		return nil, lineError(err, number, "")
	}
	if err := e.StoreBlobs(ctx, d.Blobs()...); err != nil {
		return nil, err
	}
	published, err := e.Publish(ctx, d.RunID, d.StageID, d.Role, result, opts)
	return published, lineError(err, number, "")
}

// lineError names the line of a refusal made before publishing (an ActivityRejected).
func lineError(err error, number int, field string) error {
	var rejected *bernstein.ActivityRejected
	if errors.As(err, &rejected) {
		return &bernstein.DescriptionError{Line: number, Field: field, Reason: fmt.Sprintf("%s (%s)", rejected.Msg, rejected.Reason)}
	}
	return err
}

func fail(stderr io.Writer, err error) int {
	code := exitUnavailable
	var description *bernstein.DescriptionError
	var config *bernstein.ConfigError
	var rejected *bernstein.ActivityRejected
	var notStored *bernstein.EvidenceNotStoredError
	switch {
	case errors.As(err, &description), errors.As(err, &config), errors.As(err, &rejected):
		code = exitBadInput
	case errors.As(err, &notStored):
		code = exitUnavailable
	}
	name := bernstein.CodeOf(err)
	if name == "" {
		name = "E_EMIT"
	}
	fmt.Fprintf(stderr, "bernstein-go-emit: %s: %v\n", name, err)
	return code
}

func trimSpace(b []byte) []byte {
	start, end := 0, len(b)
	for start < end && (b[start] == ' ' || b[start] == '\t' || b[start] == '\r' || b[start] == '\n') {
		start++
	}
	for end > start && (b[end-1] == ' ' || b[end-1] == '\t' || b[end-1] == '\r' || b[end-1] == '\n') {
		end--
	}
	return b[start:end]
}
