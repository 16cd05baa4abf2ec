package bernstein

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"testing"
)

// sampleResults builds one result of every kind through the SDK's typed helpers (what
// TestModalityResults checks, and what BERNSTEIN_GO_SAMPLES=FILE writes as activity descriptions for
// `bernstein submission check FILE`, which runs the scheduler's pure core on them).
func sampleResults(t *testing.T) (map[string]*ActivityResult, map[string][][]byte) {
	t.Helper()
	signer, _ := NewSigner(bytes.Repeat([]byte{9}, 32))
	results := map[string]*ActivityResult{}
	blobs := map[string][][]byte{}

	coding, err := CodingResult([]byte("--- a/x.go\n+++ b/x.go\n@@ -0,0 +1 @@\n+package x\n"), map[string][]byte{"x.go": []byte("package x\n")}, Outcome{})
	must(t, err)
	results["coding"], blobs["coding"] = coding, [][]byte{[]byte("package x\n")}

	pageA := []byte("<html><p>Quill 2.0 ships a stable module system.</p></html>")
	srcA, obsA := FetchedPage("https://a.test/notes", "https://a.test/notes", 200, "text/html; charset=utf-8", pageA)
	report := &ResearchReport{
		Query: "what changed in quill 2.0?", Plan: []string{"https://a.test/notes"}, Sources: []ResearchSource{srcA},
		Claims: []Claim{{ClaimID: "c1", Statement: "Modules are stable", Citations: []Citation{{ClaimID: "c1", SourceRef: srcA.SourceRef, PageContentHash: srcA.PageContentHash, Quote: "ships a stable module system"}}}},
	}
	research, err := report.Result([]Observation{obsA})
	must(t, err)
	results["research"], blobs["research"] = research, [][]byte{pageA}

	abort, err := ResearchAbort(true, "q", []string{"https://a.test/notes", "https://b.test/x"},
		map[string]any{"code": "BUDGET_EXCEEDED", "source": "https://b.test/x", "cap": "max_fetches", "limit": 1, "attempted": 2},
		[]FetchedRef{{SourceRef: srcA.SourceRef, PageContentHash: srcA.PageContentHash}}, []Observation{obsA})
	must(t, err)
	results["research_refusal"], blobs["research_refusal"] = abort, [][]byte{pageA}

	for _, kind := range []string{KindData, KindOps} {
		a, err := NewDataOpsActivity("run-go-m", kind+"-0", kind, signer)
		must(t, err)
		must(t, a.AddInput("orders.csv", []byte("id,amount,"+kind+"\n1,5\n2,7\n")))
		_, err = a.Plan([]string{"sum amount"})
		must(t, err)
		must(t, a.AddOutput("summary.csv", []byte("total\n12\n")))
		r, err := a.Finish()
		must(t, err)
		results[kind], blobs[kind] = r, a.Blobs()
	}
	refusedOps, _ := NewDataOpsActivity("run-go-m", "ops-refused", KindOps, signer)
	must(t, refusedOps.AddInput("orders.csv", []byte("id,amount\n1,5\n")))
	if err := refusedOps.AddOutput("summary.csv", []byte("x")); CodeOf(err) != "EFFECT_BEFORE_PLAN" {
		t.Fatalf("output before plan: %v", err)
	}
	if _, err := refusedOps.Finish(); CodeOf(err) != "EFFECT_BEFORE_PLAN" {
		t.Fatalf("a violation must stick: %v", err)
	}
	refused, err := refusedOps.Refused("", "")
	must(t, err)
	results["ops_refusal"], blobs["ops_refusal"] = refused, refusedOps.Blobs()

	session, err := BrowserSessionResult("run-go-m", "browser-0", "refused", "blocked_domain", "go-sdk", "worker@go", nil, map[string]any{"code": "BLOCKED_DOMAIN"})
	must(t, err)
	results["browser"], blobs["browser"] = session.Result, [][]byte{session.ActionLog}
	return results, blobs
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestModalityResults(t *testing.T) {
	results, _ := sampleResults(t)
	want := map[string][2]string{
		"coding": {Completed, "ok"}, "research": {Completed, "ok"}, "research_refusal": {Refused, "budget_exhausted"},
		"data": {Completed, "ok"}, "ops": {Completed, "ok"}, "ops_refusal": {Refused, "effect_before_plan"}, "browser": {Refused, "blocked_domain"},
	}
	for name, r := range results {
		if got := [2]string{r.TerminalState, r.ReasonCode}; got != want[name] {
			t.Errorf("%s: outcome %v, want %v", name, got, want[name])
		}
		canon, err := CanonicalizeJSONText(r.Artifact)
		if name != "coding" && (err != nil || !bytes.Equal(canon, r.Artifact)) {
			t.Errorf("%s: the artifact is not canonical JSON: %v", name, err)
		}
		if r.ArtifactHash != ArtifactHash(r.Artifact) {
			t.Errorf("%s: artifact hash", name)
		}
	}
	// The refusal document is exactly what the Python SDK writes for the same violation.
	if got := string(results["ops_refusal"].Artifact); !bytes.Contains([]byte(got), []byte(`"message":"cannot record a side effect before the plan is derived (output 'summary.csv')","plan_hash":null`)) {
		t.Errorf("ops refusal document: %s", got)
	}
	// Data receipt: the plan hash recomputes and observations are inputs then outputs.
	var receipt map[string]any
	must(t, json.Unmarshal(results["data"].Artifact, &receipt))
	plan := receipt["plan"].(map[string]any)
	h, _ := PlanHash([]string{ContentHash([]byte("id,amount,data\n1,5\n2,7\n"))}, []string{"sum amount"})
	if plan["plan_hash"] != h {
		t.Errorf("plan hash %v, want %s", plan["plan_hash"], h)
	}
	if obs := results["data"].Observations; len(obs) != 2 || obs[0].Kind != "input" || obs[1].Kind != "output" {
		t.Errorf("observations %+v", obs)
	}
}

func TestResearchReportRefusesWhatTheSchedulerRefuses(t *testing.T) {
	page := []byte("page")
	src, obs := FetchedPage("https://a", "https://a", 200, "text/plain", page)
	base := func() *ResearchReport {
		return &ResearchReport{Query: "q", Plan: []string{"https://a"}, Sources: []ResearchSource{src},
			Claims: []Claim{{ClaimID: "c1", Statement: "s", Citations: []Citation{{ClaimID: "c1", SourceRef: "https://a", PageContentHash: src.PageContentHash, Quote: "page"}}}}}
	}
	cases := map[string]func(r *ResearchReport) []Observation{
		"RESEARCH_NO_CLAIMS":     func(r *ResearchReport) []Observation { r.Claims = nil; return []Observation{obs} },
		"RESEARCH_UNCITED_CLAIM": func(r *ResearchReport) []Observation { r.Claims[0].Citations = nil; return []Observation{obs} },
		"RESEARCH_EMPTY_QUOTE": func(r *ResearchReport) []Observation {
			r.Claims[0].Citations[0].Quote = " \u00a0 "
			return []Observation{obs}
		},
		"RESEARCH_INVALID_CLAIM_ID": func(r *ResearchReport) []Observation { r.Claims[0].ClaimID = "-x"; return []Observation{obs} },
		"RESEARCH_SOURCE_NOT_FETCHED": func(r *ResearchReport) []Observation {
			r.Claims[0].Citations[0].SourceRef = "https://b"
			return []Observation{obs}
		},
		"RESEARCH_CITATION_NOT_OBSERVED": func(r *ResearchReport) []Observation { return nil },
		"RESEARCH_CITATION_CLAIM_MISMATCH": func(r *ResearchReport) []Observation {
			r.Claims[0].Citations[0].ClaimID = "c2"
			return []Observation{obs}
		},
	}
	for code, mutate := range cases {
		r := base()
		observations := mutate(r)
		if _, err := r.Result(observations); CodeOf(err) != code {
			t.Errorf("%s: got %v", code, err)
		}
	}
	if _, err := base().Result([]Observation{obs}); err != nil {
		t.Errorf("a valid report: %v", err)
	}
}

// BERNSTEIN_GO_SAMPLES=FILE writes the samples as activity descriptions (for `bernstein submission check`).
func TestWriteSamplesForSubmissionCheck(t *testing.T) {
	path := os.Getenv("BERNSTEIN_GO_SAMPLES")
	if path == "" {
		t.Skip("set BERNSTEIN_GO_SAMPLES=FILE to write the samples as activity descriptions")
	}
	results, blobs := sampleResults(t)
	roles := map[string]string{"coding": "developer", "research": "scout", "research_refusal": "scout", "data": "analyst", "ops": "operator", "ops_refusal": "operator", "browser": "navigator"}
	stages := map[string]string{"data": "data-0", "ops": "ops-0", "ops_refusal": "ops-refused", "browser": "browser-0"}
	var out bytes.Buffer
	for _, name := range []string{"coding", "research", "research_refusal", "data", "ops", "ops_refusal", "browser"} {
		r := results[name]
		stage := stages[name]
		if stage == "" {
			stage = name + "-0"
		}
		observations := []map[string]string{}
		for i, o := range r.Observations {
			observations = append(observations, map[string]string{"kind": o.Kind, "ref": o.Ref, "base64": base64.StdEncoding.EncodeToString(blobs[name][i])})
		}
		run := "run-go-m"
		if name == "research_refusal" {
			run = "run-go-r" // its evidence is the report's: in one run it would be REDUNDANT_STAGE
		}
		line, _ := json.Marshal(map[string]any{"run_id": run, "stage_id": stage, "role": roles[name], "kind": r.Kind,
			"artifact_base64": base64.StdEncoding.EncodeToString(r.Artifact), "observations": observations,
			"terminal_state": r.TerminalState, "reason_code": r.ReasonCode})
		out.Write(append(line, '\n'))
	}
	must(t, os.WriteFile(path, out.Bytes(), 0o644))
}
