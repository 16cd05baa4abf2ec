package bernstein

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPublishErrorsAreTyped(t *testing.T) {
	value := []byte("v")
	cases := []struct {
		err       error
		code      string
		retriable bool
		says      string
	}{
		{kerr.UnknownTopicOrPartition, "E_TOPIC_MISSING", false, "producers never create topics"},
		{kerr.TopicAuthorizationFailed, "E_KAFKA_NOT_AUTHORIZED", false, "needs Write and Describe on p.activity.submissions"},
		{fmt.Errorf("wrapped: %w", kerr.SaslAuthenticationFailed), "E_KAFKA_NOT_AUTHORIZED", false, "refused this client's login"},
		{kgo.ErrRecordTimeout, "E_PUBLISH_FAILED", true, "Emitter.Retry publishes the same submission_id"},
		{context.DeadlineExceeded, "E_PUBLISH_FAILED", true, "was not acknowledged within 30s"},
		{kerr.MessageTooLarge, "E_PUBLISH_FAILED", false, "MESSAGE_TOO_LARGE"},
		{kerr.NotEnoughReplicas, "E_PUBLISH_FAILED", true, "NOT_ENOUGH_REPLICAS"},
	}
	for _, c := range cases {
		pf := publishError(c.err, "p.activity.submissions", "run-1", "s-1", value, 30*time.Second)
		if pf.Code() != c.code || pf.Retriable != c.retriable || !strings.Contains(pf.Error(), c.says) || string(pf.Value) != "v" || pf.RunID != "run-1" {
			t.Errorf("%v: got %s retriable=%v %q", c.err, pf.Code(), pf.Retriable, pf.Error())
		}
		if !errors.Is(pf, c.err) {
			t.Errorf("%v: the cause is not reachable with errors.Is", c.err)
		}
	}
}

func TestKafkaOptionsRefuseUnusableTLSAndSASL(t *testing.T) {
	cfg := &Config{KafkaBootstrap: "127.0.0.1:9", KafkaSecurity: map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.ca.location": "/nonexistent/ca.pem", "sasl.username": "u", "sasl.password": "p"}}
	if _, err := KafkaOptions(cfg, time.Second); err == nil || !strings.Contains(err.Error(), "ssl.ca.location") {
		t.Errorf("got %v", err)
	}
	cfg.KafkaSecurity = map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512"}
	if _, err := KafkaOptions(cfg, time.Second); err == nil || !strings.Contains(err.Error(), "needs sasl.username") {
		t.Errorf("got %v", err)
	}
	cfg.KafkaSecurity = map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": "p"}
	if opts, err := KafkaOptions(cfg, time.Second); err != nil || len(opts) < 9 {
		t.Errorf("got %v", err)
	}
}
