package bernstein

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

// The data/ops documents of steps.json's accepted cases, rebuilt byte for byte by DataOpsActivity
// from constants restated here: tests/vectors/step_vectors.py's RECEIPT_SIGNER (seed bytes 160..191),
// ORDERS and SUMMARY. steps.json states the same values (keys.receipt_signer, blobs), and the
// conformance runner rebuilds the receipts from those; this test pins the SDK's API on its own.
func TestDataOpsActivityRebuildsTheStepVectors(t *testing.T) {
	raw, err := os.ReadFile("../../schemas/vectors/steps.json")
	if os.IsNotExist(err) {
		t.Skip("no steps.json")
	}
	must(t, err)
	var doc struct {
		Cases []struct {
			Name   string `json:"name"`
			Inputs []struct {
				Record struct {
					RunID, StageID, Kind string `json:"-"`
					Artifact             struct {
						Hex string `json:"hex"`
					} `json:"artifact"`
					Observations []Observation `json:"observations"`
				} `json:"record"`
			} `json:"inputs"`
		} `json:"cases"`
	}
	must(t, json.Unmarshal(raw, &doc))
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(160 + i)
	}
	signer, _ := NewSigner(seed)
	orders, summary := []byte("order_id,amount\n1,100\n2,250\n"), []byte("total\n350\n")
	cases := map[string]func() (*ActivityResult, error){
		"accepted_ops_receipt":  func() (*ActivityResult, error) { return receipt(t, signer, KindOps, orders, summary) },
		"accepted_data_receipt": func() (*ActivityResult, error) { return receipt(t, signer, KindData, orders, summary) },
		"accepted_ops_refusal": func() (*ActivityResult, error) {
			a, _ := NewDataOpsActivity("run-1", "stage-0", KindOps, signer)
			must(t, a.AddInput("orders.csv", orders))
			if err := a.AddOutput("summary.csv", summary); CodeOf(err) != "EFFECT_BEFORE_PLAN" {
				t.Fatalf("got %v", err)
			}
			return a.Refused("", "")
		},
	}
	found := 0
	for _, c := range doc.Cases {
		build, ok := cases[c.Name]
		if !ok {
			continue
		}
		found++
		want := c.Inputs[len(c.Inputs)-1].Record
		got, err := build()
		must(t, err)
		if hex.EncodeToString(got.Artifact) != want.Artifact.Hex {
			t.Errorf("%s: artifact\n got  %s\n want %s", c.Name, got.Artifact, mustHex(want.Artifact.Hex))
		}
		if len(got.Observations) != len(want.Observations) {
			t.Fatalf("%s: observations %+v, want %+v", c.Name, got.Observations, want.Observations)
		}
		for i := range got.Observations {
			if got.Observations[i] != want.Observations[i] {
				t.Errorf("%s: observation %d %+v, want %+v", c.Name, i, got.Observations[i], want.Observations[i])
			}
		}
	}
	if found != len(cases) {
		t.Errorf("steps.json has %d of the %d data/ops cases", found, len(cases))
	}
}

func receipt(t *testing.T, signer *Signer, kind string, in, out []byte) (*ActivityResult, error) {
	a, err := NewDataOpsActivity("run-1", "stage-0", kind, signer)
	must(t, err)
	must(t, a.AddInput("orders.csv", in))
	_, err = a.Plan([]string{"sum amount"})
	must(t, err)
	must(t, a.AddOutput("summary.csv", out))
	return a.Finish()
}

func mustHex(s string) string {
	b, _ := hex.DecodeString(s)
	return string(b)
}
