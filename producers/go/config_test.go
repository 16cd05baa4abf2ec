package bernstein

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClientProperties(t *testing.T) {
	got, err := ParseClientProperties("# c\n! c\nsecurity.protocol = sasl_ssl\nsasl.mechanisms=scram-sha-512\nsasl.username=producer\nsasl.password=s3cr3t\nssl.ca.location=tls/ca.pem\n", "p", "/etc/b")
	must(t, err)
	want := map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "producer", "sasl.password": "s3cr3t", "ssl.ca.location": "/etc/b/tls/ca.pem"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for text, msg := range map[string]string{
		"bootstrap.servers=x\n":                          "p:1: unknown key \"bootstrap.servers\"",
		"security.protocol=SSL\nsecurity.protocol=SSL\n": "p:2: security.protocol is set twice",
		"security.protocol=\n":                           "p:1: security.protocol has no value",
		"garbage\n":                                      "p:1: expected key=value",
		"security.protocol=TLS\n":                        "p: security.protocol must be one of",
		"security.protocol=SSL\nsasl.username=u\n":       "p: sasl.* settings need security.protocol SASL_SSL or SASL_PLAINTEXT",
		"security.protocol=SASL_SSL\nsasl.username=u\n":  "p: sasl.username is set but sasl.password is not",
		"security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.username=u\nsasl.password=p\n": "is not supported by the Go SDK",
		"security.protocol=SSL\nssl.key.password=hunter2\n":                                     "ssl.key.password (an encrypted client key) is not supported",
	} {
		_, err := ParseClientProperties(text, "p", "")
		if err == nil || !strings.Contains(err.Error(), msg) || CodeOf(err) != "E_CONFIG" {
			t.Errorf("%q: got %v, want %q", text, err, msg)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("a secret value leaked into the error: %v", err)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "")
	t.Setenv("BERNSTEIN_S3_ENDPOINT", "http://127.0.0.1:9")
	if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "BERNSTEIN_KAFKA_BOOTSTRAP") {
		t.Fatalf("got %v", err)
	}
	t.Setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "127.0.0.1:9")
	t.Setenv("BERNSTEIN_TOPIC_PREFIX", "")
	t.Setenv("BERNSTEIN_S3_BUCKET", "")
	t.Setenv("BERNSTEIN_KAFKA_CONFIG_FILE", "")
	c, err := ConfigFromEnv()
	must(t, err)
	if c.SubmissionsTopic() != "bernstein.activity.submissions" || c.S3Bucket != "bernstein-cas" {
		t.Fatalf("%+v", c)
	}
	t.Setenv("BERNSTEIN_KAFKA_CONFIG_FILE", filepath.Join(t.TempDir(), "missing.properties"))
	if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "BERNSTEIN_KAFKA_CONFIG_FILE") {
		t.Fatalf("got %v", err)
	}
}

// A key directory written as `bernstein keys init --producer NAME` writes it.
func TestLoadProducerKeys(t *testing.T) {
	dir := t.TempDir()
	pem := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJ\n-----END PRIVATE KEY-----\n"
	must(t, os.WriteFile(filepath.Join(dir, "producer.ed25519.key"), []byte(pem), 0o600))
	signer, _ := NewSigner([]byte(strings.Repeat("\x09", 32)))
	ring := `{"format": "bernstein.keyring/v1", "producer": "go@test", "keys": [{"key_id": "` + signer.KeyID() + `", "purpose": "producer", "file": "producer.ed25519.key", "status": "active"}]}`
	must(t, os.WriteFile(filepath.Join(dir, "keyring.json"), []byte(ring), 0o600))
	keys, err := LoadProducerKeys(dir)
	must(t, err)
	if keys.Name != "go@test" || keys.Signer.KeyID() != signer.KeyID() {
		t.Fatalf("%+v", keys)
	}
	must(t, os.WriteFile(filepath.Join(dir, "keyring.json"), []byte(strings.Replace(ring, signer.KeyID(), "sha256:"+strings.Repeat("1", 64), 1)), 0o600))
	if _, err := LoadProducerKeys(dir); err == nil || !strings.Contains(err.Error(), "does not match the key") {
		t.Fatalf("got %v", err)
	}
	if _, err := LoadProducerKeys(t.TempDir()); err == nil || !strings.Contains(err.Error(), "bernstein keys init --producer") {
		t.Fatalf("got %v", err)
	}
}
