package conformance

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const repoVectors = "../../../schemas/vectors"

func TestRepositoryVectorsAllReproduce(t *testing.T) {
	var out bytes.Buffer
	r, err := Run(repoVectors, &out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Passed() != len(r.Results) || len(r.Results) < 200 {
		t.Fatalf("%d/%d reproduced:\n%s", r.Passed(), len(r.Results), out.String())
	}
}

// A changed byte, an unknown file and an unknown section are each a miss, never a skip.
func TestMutatedVectorsMiss(t *testing.T) {
	dir := t.TempDir()
	files, _ := filepath.Glob(filepath.Join(repoVectors, "*.json"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if filepath.Base(f) == "digests.json" {
			var doc map[string]any
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			doc["content_hash"].([]any)[1].(map[string]any)["digest"] = "sha256:" + strings.Repeat("0", 64)
			doc["surprise"] = true
			data, _ = json.Marshal(doc)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "unheard_of.json"), []byte(`{"x": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r, err := Run(dir, &out)
	if err != nil {
		t.Fatal(err)
	}
	misses := out.String()
	requireMisses(t, misses,
		"MISS digests/content_hash[1]: got sha256:8ed3f6ad",
		"MISS digests.json/surprise: not covered: unknown section",
		"MISS unheard_of.json: not covered",
	)
	if got := len(r.Results) - r.Passed(); got != 3 {
		t.Errorf("%d misses, want 3:\n%s", got, misses)
	}
}

// The inputs steps.json states for its derived values are used: another lineage key, receipt
// signer, blob byte or header rule each make the values computed from them misses, and an
// unknown field of headers_rule is not covered.
func TestMutatedStepInputsMiss(t *testing.T) {
	misses := mutatedMisses(t, "steps.json", func(doc map[string]any) {
		keys := doc["keys"].(map[string]any)
		keys["producers"].(map[string]any)["worker@host"].(map[string]any)["lineage_hmac_key_hex"] = strings.Repeat("00", 20)
		keys["receipt_signer"].(map[string]any)["ed25519_seed_hex"] = strings.Repeat("11", 32)
		blobs := doc["blobs"].(map[string]any)
		for digest, value := range blobs {
			if text := value.(string); strings.HasPrefix(text, hex.EncodeToString([]byte("dom 0"))) {
				blobs[digest] = hex.EncodeToString([]byte("dom 10"))
			}
		}
		rule := doc["headers_rule"].(map[string]any)
		rule["ce_source"] = "elsewhere"
		rule["ce_subject"] = "new"
	})
	requireMisses(t, misses,
		"MISS steps/keys/producers/worker@host/lineage_hmac_key_id: got",
		"MISS steps/accepted_computer_use_action/inputs[0]/lineage_hmac: got",
		"MISS steps/keys/receipt_signer/key_id: got",
		"MISS steps/accepted_ops_receipt/inputs[0]/receipt: got",
		"MISS steps/accepted_data_receipt/inputs[0]/receipt: got",
		"MISS steps/accepted_computer_use_action/inputs[0]/dom_digest: got",
		"MISS steps/accepted_computer_use_action/inputs[0]/sizes: got",
		"MISS steps/accepted_coding_stage/outputs[0]/headers: got",
		"MISS steps/headers_rule/ce_subject: not covered: unknown field",
	)
}

// audit_walks.json: a base audit record's MAC or its key's secret changed, a non-garbage case's
// record replaced by bytes that are no record, a garbage case whose garbage decodes, and an unknown
// stream or case field are each a miss.
func TestMutatedAuditWalksMiss(t *testing.T) {
	misses := mutatedMisses(t, "audit_walks.json", func(doc map[string]any) {
		bases := doc["bases"].(map[string]any)
		single := bases["single"].(map[string]any)
		audit := single["records"].(map[string]any)["audit"].([]any)
		// Record 2's MAC (its last field) ends in another hex digit: the record still round-trips,
		// its MAC no longer recomputes.
		value := audit[2].([]any)[3].(string)
		digit := map[bool]string{true: "30", false: "31"}[value[len(value)-2:] != "30"] // "0" or "1"
		audit[2].([]any)[3] = value[:len(value)-2] + digit
		rotated := bases["rotated"].(map[string]any)
		rotated["scheduler_audit_keys"].([]any)[1].(map[string]any)["secret_hex"] = strings.Repeat("c3", 32)
		single["records"].(map[string]any)["gossip"] = []any{}
		for _, c := range doc["cases"].([]any) {
			c := c.(map[string]any)
			switch c["name"] {
			case "mac_flipped":
				c["audit"].([]any)[0].([]any)[3] = "00016e6f"
			case "garbage_in_place":
				c["audit"].([]any)[7] = c["audit"].([]any)[6]
			case "valid":
				c["surprise"] = true
			}
		}
	})
	requireMisses(t, misses,
		"MISS audit_walks/bases/single/records/audit[2]/mac: got",
		"MISS audit_walks/bases/rotated/scheduler_audit_keys[1]/key_id: got",
		"MISS audit_walks/bases/rotated/records/audit[4]/mac: got",
		"MISS audit_walks/bases/single/records/gossip: not covered: unknown stream",
		"MISS audit_walks/cases/mac_flipped/audit[0]: not decodable",
		"MISS audit_walks/cases/garbage_in_place/refused: a garbage case whose records all decode",
		"MISS audit_walks/cases/garbage_in_place/undecodable_offsets: got [], want [7]",
		"MISS audit_walks/cases[0]/surprise: not covered: unknown field",
	)
}

// tlog.json: a leaf, a root, the witness's vkey, a cosignature's timestamp, a refused proof that
// is the accepted one and a refused note that is no note at all are each a miss (a refusal must be
// for a signature or a proof, never for being garbage).
func TestMutatedTlogMiss(t *testing.T) {
	misses := mutatedMisses(t, "tlog.json", func(doc map[string]any) {
		doc["leaves_hex"].([]any)[3] = hex.EncodeToString([]byte("leaf 33"))
		doc["roots_hex"].([]any)[5] = strings.Repeat("00", 32)
		witness := doc["witness"].(map[string]any)
		witness["vkey"] = strings.Replace(witness["vkey"].(string), "+17a9ed04+", "+17a9ed05+", 1)
		last := doc["accepted"].(map[string]any)["checkpoints"].([]any)[4].(map[string]any)
		refused := doc["refused"].(map[string]any)
		last["cosigned"] = refused["cosigned"].([]any)[0].(map[string]any)["note"]
		accepted := doc["accepted"].(map[string]any)["consistency"].([]any)[9].(map[string]any)
		refused["consistency"].([]any)[0].(map[string]any)["proof_hex"] = accepted["proof_hex"]
		refused["notes"].([]any)[0].(map[string]any)["note"] = "not a note\n"
	})
	requireMisses(t, misses,
		"MISS tlog/leaf_hashes_hex[3]: got",
		"MISS tlog/roots_hex[5]: got",
		"MISS tlog/accepted/consistency[8]: a root is not the stated tree's",
		"MISS tlog/witness/vkey: the verifier is witness.bernstein.example+17a9ed04",
		"MISS tlog/accepted/checkpoints[4]/cosigned: invalid signature for key witness.bernstein.example+17a9ed04",
		"MISS tlog/accepted/checkpoints[4]/cosigned/from_seed: got",
		"MISS tlog/refused/consistency[0]: not refused",
		"MISS tlog/refused/notes[0]: not refused",
	)
}

// mutatedMisses copies the repository's vectors with one file's document changed by mutate, runs
// the conformance runner over the copy and returns what it printed (its misses).
func mutatedMisses(t *testing.T, name string, mutate func(doc map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	files, _ := filepath.Glob(filepath.Join(repoVectors, "*.json"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if filepath.Base(f) == name {
			var doc map[string]any
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			mutate(doc)
			data, _ = json.Marshal(doc)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if _, err := Run(dir, &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// requireMisses fails the test for each wanted miss the runner's output does not contain.
func requireMisses(t *testing.T, misses string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(misses, want) {
			t.Errorf("missing %q in:\n%s", want, misses)
		}
	}
}
