package bernstein

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

// steps.json's accepted research report and budget refusal, rebuilt byte for byte by
// ResearchReport / ResearchAbort from the pages of tests/vectors/step_vectors.py (PAGE_A, PAGE_B: the
// vectors state only their hashes and sizes).
func TestResearchHelpersRebuildTheStepVectors(t *testing.T) {
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
					Artifact struct {
						Hex string `json:"hex"`
					} `json:"artifact"`
					TerminalState string `json:"terminal_state"`
					ReasonCode    string `json:"reason_code"`
				} `json:"record"`
			} `json:"inputs"`
		} `json:"cases"`
	}
	must(t, json.Unmarshal(raw, &doc))
	pageA := []byte("<html><body><p>Quill 2.0 ships a <strong>stable</strong> module system.</p></body></html>")
	pageB := []byte("<html><body><p>Rebuilds take 6 seconds instead of 41.</p></body></html>")
	srcA, obsA := FetchedPage("https://a.test/notes", "https://a.test/notes", 200, "text/html; charset=utf-8", pageA)
	srcB, obsB := FetchedPage("https://b.test/perf", "https://b.test/perf", 200, "text/html; charset=utf-8", pageB)
	plan := []string{srcA.SourceRef, srcB.SourceRef}
	report := &ResearchReport{Query: "what changed in quill 2.0?", Plan: plan, Sources: []ResearchSource{srcA, srcB}, Claims: []Claim{
		{ClaimID: "c1", Statement: "Modules are stable", Citations: []Citation{{ClaimID: "c1", SourceRef: srcA.SourceRef, PageContentHash: srcA.PageContentHash, Quote: "ships a stable module system"}}},
		{ClaimID: "c2", Statement: "Rebuilds are faster", Citations: []Citation{{ClaimID: "c2", SourceRef: srcB.SourceRef, PageContentHash: srcB.PageContentHash, Quote: "6 seconds instead of 41"}}},
	}}
	built := map[string]func() (*ActivityResult, error){
		"accepted_research_report": func() (*ActivityResult, error) { return report.Result([]Observation{obsA, obsB}) },
		"accepted_research_refusal": func() (*ActivityResult, error) {
			return ResearchAbort(true, "what changed in quill 2.0?", plan,
				map[string]any{"attempted": 2, "cap": "max_fetches", "code": "BUDGET_EXCEEDED", "limit": 1, "source": srcB.SourceRef},
				[]FetchedRef{{SourceRef: srcA.SourceRef, PageContentHash: srcA.PageContentHash}}, []Observation{obsA})
		},
	}
	found := 0
	for _, c := range doc.Cases {
		build, ok := built[c.Name]
		if !ok {
			continue
		}
		found++
		want := c.Inputs[len(c.Inputs)-1].Record
		got, err := build()
		must(t, err)
		if hex.EncodeToString(got.Artifact) != want.Artifact.Hex {
			t.Errorf("%s:\n got  %s\n want %s", c.Name, got.Artifact, mustHex(want.Artifact.Hex))
		}
		if got.TerminalState != want.TerminalState || got.ReasonCode != want.ReasonCode {
			t.Errorf("%s: %s/%s, want %s/%s", c.Name, got.TerminalState, got.ReasonCode, want.TerminalState, want.ReasonCode)
		}
	}
	if found != len(built) {
		t.Errorf("steps.json has %d of the %d research cases", found, len(built))
	}
}
