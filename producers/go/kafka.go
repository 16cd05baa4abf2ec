package bernstein

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// KafkaOptions are the franz-go options of the SDK's producer: the bootstrap, TLS and SASL of the
// client properties file, an idempotent producer (franz-go's default) with acks from every in-sync
// replica, records up to the topics' 2 MiB, and Kafka's murmur2 partitioning of the record key
// (the run id). The caller waits for each acknowledgement (ProduceSync).
func KafkaOptions(cfg *Config, deliveryTimeout time.Duration) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(cfg.KafkaBootstrap, ",")...),
		kgo.ClientID("bernstein-go"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(FranzPartitioner()),
		kgo.ProducerBatchMaxBytes(MaxMessageBytes),
		kgo.ProducerLinger(2 * time.Millisecond),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
		kgo.DialTimeout(5 * time.Second),
		kgo.UnknownTopicRetries(2),
	}
	security := cfg.KafkaSecurity
	protocol := security["security.protocol"]
	if protocol == "" {
		protocol = "PLAINTEXT"
	}
	if protocol == "SSL" || protocol == "SASL_SSL" {
		tlsConfig, err := tlsConfigOf(security)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tlsConfig))
	}
	if strings.HasPrefix(protocol, "SASL_") {
		mechanism, err := saslOf(security)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(mechanism))
	}
	return opts, nil
}

func tlsConfigOf(security map[string]string) (*tls.Config, error) {
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca := security["ssl.ca.location"]; ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, &ConfigError{Msg: fmt.Sprintf("ssl.ca.location: cannot read %s: %v", ca, err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &ConfigError{Msg: fmt.Sprintf("ssl.ca.location: %s holds no PEM certificate", ca)}
		}
		config.RootCAs = pool
	}
	cert, key := security["ssl.certificate.location"], security["ssl.key.location"]
	if (cert == "") != (key == "") {
		return nil, &ConfigError{Msg: "ssl.certificate.location and ssl.key.location go together (mutual TLS)"}
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, &ConfigError{Msg: fmt.Sprintf("ssl.certificate.location/ssl.key.location: %v", err)}
		}
		config.Certificates = []tls.Certificate{pair}
	}
	if security["ssl.endpoint.identification.algorithm"] == "none" {
		// librdkafka's "none": the chain is still verified against the CA, only the host name is not.
		roots := config.RootCAs
		config.InsecureSkipVerify = true
		config.VerifyConnection = func(state tls.ConnectionState) error {
			if len(state.PeerCertificates) == 0 {
				return errors.New("the broker sent no certificate")
			}
			intermediates := x509.NewCertPool()
			for _, c := range state.PeerCertificates[1:] {
				intermediates.AddCert(c)
			}
			_, err := state.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates})
			return err
		}
	}
	return config, nil
}

func saslOf(security map[string]string) (sasl.Mechanism, error) {
	user, pass := security["sasl.username"], security["sasl.password"]
	if user == "" {
		return nil, &ConfigError{Msg: "security.protocol " + security["security.protocol"] + " needs sasl.username and sasl.password"}
	}
	switch security["sasl.mechanism"] {
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "PLAIN", "":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	}
	return nil, &ConfigError{Msg: "sasl.mechanism " + security["sasl.mechanism"] + " is not supported by the Go SDK"}
}

// publishError translates a produce error into a PublishFailed (retriable or not).
func publishError(err error, topic, runID, submissionID string, value []byte, timeout time.Duration) *PublishFailed {
	pf := &PublishFailed{RunID: runID, SubmissionID: submissionID, Topic: topic, Value: value, Err: err}
	var kafkaErr *kerr.Error
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		pf.Reason = "E_TOPIC_MISSING"
		pf.Msg = fmt.Sprintf("topic %s does not exist: producers never create topics, the admin does (`bernstein topic create`)", topic)
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.IllegalSaslState), errors.Is(err, kerr.UnsupportedSaslMechanism):
		pf.Reason = "E_KAFKA_NOT_AUTHORIZED"
		pf.Msg = fmt.Sprintf("the broker refused this client's login: check sasl.mechanism, sasl.username and sasl.password in BERNSTEIN_KAFKA_CONFIG_FILE: %v", err)
	case errors.As(err, new(*tls.CertificateVerificationError)):
		pf.Reason = "E_KAFKA_TLS"
		pf.Msg = fmt.Sprintf("TLS with Kafka failed: check ssl.ca.location (and the broker's certificate) in BERNSTEIN_KAFKA_CONFIG_FILE: %v", err)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		pf.Reason = "E_KAFKA_NOT_AUTHORIZED"
		pf.Msg = fmt.Sprintf("the broker refused submission %q for run %q: %v (the producer's principal needs Write and Describe on %s: `bernstein kafka acls`)", submissionID, runID, err, topic)
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		pf.Msg = fmt.Sprintf("the broker refused submission %q for run %q: %v", submissionID, runID, err)
	case errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, kgo.ErrRecordRetries):
		pf.Retriable = true
		pf.Msg = fmt.Sprintf("submission %q for run %q was not acknowledged within %s (is Kafka reachable at the bootstrap?); it may still be delivered: Emitter.Retry publishes the same submission_id, which is journalled once: %v", submissionID, runID, timeout, err)
	case errors.As(err, &kafkaErr):
		pf.Retriable = kafkaErr.Retriable
		pf.Msg = fmt.Sprintf("the broker refused submission %q for run %q: %v", submissionID, runID, err)
	default:
		var netErr net.Error
		var tlsErr *tls.CertificateVerificationError
		switch {
		case errors.As(err, &tlsErr):
			pf.Msg = fmt.Sprintf("TLS with Kafka failed: check ssl.ca.location (and the broker's certificate) in BERNSTEIN_KAFKA_CONFIG_FILE: %v", err)
		case errors.As(err, &netErr):
			pf.Retriable = true
			pf.Msg = fmt.Sprintf("cannot reach Kafka: %v", err)
		default:
			pf.Msg = fmt.Sprintf("cannot publish submission %q for run %q: %v", submissionID, runID, err)
		}
	}
	return pf
}
