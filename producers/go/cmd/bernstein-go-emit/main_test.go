package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func keyDir(t *testing.T) string {
	dir := t.TempDir()
	pem := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJ\n-----END PRIVATE KEY-----\n"
	if err := os.WriteFile(filepath.Join(dir, "producer.ed25519.key"), []byte(pem), 0o600); err != nil {
		t.Fatal(err)
	}
	ring := `{"format": "bernstein.keyring/v1", "producer": "go@test", "keys": [{"purpose": "producer", "file": "producer.ed25519.key", "status": "active"}]}`
	if err := os.WriteFile(filepath.Join(dir, "keyring.json"), []byte(ring), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func env(t *testing.T, keys string) {
	t.Setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "127.0.0.1:1")
	t.Setenv("BERNSTEIN_KAFKA_CONFIG_FILE", "")
	t.Setenv("BERNSTEIN_S3_ENDPOINT", "http://127.0.0.1:1") // refused at once: nothing listens on port 1
	t.Setenv("BERNSTEIN_PRODUCER_KEYS_DIR", keys)
	t.Setenv("BERNSTEIN_TOPIC_PREFIX", "gotest")
}

func emit(stdin string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(nil, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

const good = `{"run_id": "run-1", "stage_id": "s-0", "role": "developer", "kind": "coding", "artifact": "x"}`

func TestBadDescriptionIsExit2NamingTheLine(t *testing.T) {
	env(t, keyDir(t))
	code, out, errOut := emit("\n" + `{"run_id": "run-1", "stage_id": "s-0", "role": "developer", "kind": "coding", "artifact": 2.5}` + "\n")
	if code != 2 || out != "" || errOut != "bernstein-go-emit: E_DESCRIPTION: line 2, field artifact: has no RFC 8785 canonical JSON form: floats are not allowed in hashed documents (got 2.5); use an integer or a string\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = emit(`{"run_id": "run 1", "stage_id": "s-0", "role": "developer", "kind": "coding", "artifact": "x"}`)
	if code != 2 || !strings.Contains(errOut, "line 1, field run_id: run_id \"run 1\" must be 1-128 characters") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = emit(`{"close_run": "run 1"}`)
	if code != 2 || !strings.Contains(errOut, "line 1, field close_run: run_id \"run 1\"") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestConfigErrorsAreExit2(t *testing.T) {
	env(t, t.TempDir())
	code, _, errOut := emit(good)
	if code != 2 || !strings.Contains(errOut, "E_CONFIG: no producer keys in") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	env(t, keyDir(t))
	t.Setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "")
	if code, _, errOut := emit(good); code != 2 || !strings.Contains(errOut, "BERNSTEIN_KAFKA_BOOTSTRAP") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestStoreUnavailableIsExit3AndNothingPublished(t *testing.T) {
	env(t, keyDir(t))
	code, out, errOut := emit(good + "\n")
	if code != 3 || out != "" || !strings.HasPrefix(errOut, "bernstein-go-emit: E_CAS: S3 content store: cannot look up blob sha256:") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if strings.Contains(errOut, "goroutine") || strings.Contains(errOut, "panic") {
		t.Fatalf("a traceback: %s", errOut)
	}
}
