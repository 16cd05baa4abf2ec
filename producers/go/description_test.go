package bernstein

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseDescriptionStage(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "page.html"), []byte("<p>hi</p>"), 0o644))
	line := `{"run_id": "run-42", "stage_id": "r-0", "role": "scout", "kind": "coding", "artifact": {"b": [1, "x"], "a": null},
	  "observations": [{"kind": "page", "ref": "https://a", "file": "page.html"}, {"kind": "note", "ref": "n", "text": "é"},
	  {"kind": "bin", "ref": "b", "base64": "AAE="}], "occurred_at_ms": 0, "submission_id": "s-1"}`
	d, err := ParseDescription([]byte(line), 3, dir)
	must(t, err)
	if string(d.Artifact) != `{"a":null,"b":[1,"x"]}` || d.TerminalState != Completed || d.ReasonCode != "ok" || *d.OccurredAtMS != 0 || d.SubmissionID != "s-1" {
		t.Fatalf("%+v", d)
	}
	if len(d.Observations) != 3 || string(d.Observations[0].Data) != "<p>hi</p>" || string(d.Observations[1].Data) != "é" || string(d.Observations[2].Data) != "\x00\x01" {
		t.Fatalf("observations %+v", d.Observations)
	}
	r, err := d.Result()
	must(t, err)
	if r.Kind != KindCoding || r.ArtifactHash != ArtifactHash(d.Artifact) || len(r.Observations) != 3 || r.Observations[2].Size != 2 {
		t.Fatalf("result %+v", r)
	}
	blobs := d.Blobs()
	if len(blobs) != 4 || string(blobs[3]) != string(d.Artifact) {
		t.Fatalf("blobs %q", blobs)
	}
}

func TestParseDescriptionClose(t *testing.T) {
	d, err := ParseDescription([]byte(`{"close_run": "run-42"}`), 1, ".")
	must(t, err)
	if !d.Close || d.RunID != "run-42" || d.SubmissionID != "" {
		t.Fatalf("%+v", d)
	}
}

func TestArtifactHashOverride(t *testing.T) {
	d, err := ParseDescription([]byte(`{"run_id": "r", "stage_id": "s", "role": "developer", "kind": "coding", "artifact_base64": "aGk=", "artifact_hash": "sha256:`+strings.Repeat("0", 64)+`"}`), 1, ".")
	must(t, err)
	r, err := d.Result()
	must(t, err)
	if r.ArtifactHash != "sha256:"+strings.Repeat("0", 64) || string(r.Artifact) != "hi" {
		t.Fatalf("%+v", r)
	}
}

// Every mistake names the line and the field, as producers/description.py does.
func TestDescriptionErrors(t *testing.T) {
	stage := `"run_id": "r", "stage_id": "s", "role": "developer", "kind": "coding"`
	cases := map[string]string{
		`not json`:                   "line 7: not JSON",
		`[1]`:                        "line 7: a description is a JSON object, not a list",
		`{"close_run": "r", "x": 1}`: "line 7, field x: a run close takes only close_run and submission_id",
		`{"close_run": 5}`:           "line 7, field close_run: must be a string, not a number",
		`{` + stage + `}`:            "line 7, field artifact: give exactly one of artifact, artifact_file, artifact_base64",
		`{` + stage + `, "artifact": 1, "artifact_base64": "aA=="}`:                                        "line 7, field artifact_base64: give exactly one of",
		`{` + stage + `, "artifact": 1.5}`:                                                                 "line 7, field artifact: has no RFC 8785 canonical JSON form: floats are not allowed",
		`{` + stage + `, "artifact": 1, "extra": 1}`:                                                       "line 7, field extra: unknown field",
		`{` + stage + `, "artifact": 1, "run_id": "x"}`:                                                    "line 7, field run_id: is given twice",
		`{` + stage + `, "artifact": {"a": 1, "a": 2}}`:                                                    "line 7, field a: is given twice",
		`{` + stage + `, "artifact_base64": "a"}`:                                                          "line 7, field artifact_base64: is not standard base64",
		`{` + stage + `, "artifact_file": "nope.bin"}`:                                                     "line 7, field artifact_file: no such file",
		`{` + stage + `, "artifact": 1, "observations": {}}`:                                               "line 7, field observations: must be a list, not an object",
		`{` + stage + `, "artifact": 1, "observations": [{"kind": "k", "ref": "r"}]}`:                      "line 7, field observations[0]: give exactly one of file, text, base64",
		`{` + stage + `, "artifact": 1, "observations": [{"kind": "k", "ref": "r", "text": "t", "x": 1}]}`: "line 7, field observations[0].x: unknown field",
		`{` + stage + `, "artifact": 1, "occurred_at_ms": 1.0}`:                                            "line 7, field occurred_at_ms: must be an integer",
		`{` + stage + `, "artifact": 1, "occurred_at_ms": -1}`:                                             "line 7, field occurred_at_ms: must be an integer",
		`{"run_id": "r", "stage_id": "s", "role": "developer", "artifact": 1}`:                             "line 7, field kind: is required",
	}
	for line, want := range cases {
		_, err := ParseDescription([]byte(line), 7, t.TempDir())
		if err == nil || !strings.HasPrefix(err.Error(), want) || CodeOf(err) != "E_DESCRIPTION" {
			t.Errorf("%s:\n got  %v\n want %s...", line, err, want)
		}
	}
	for line, want := range map[string]string{
		`{"run_id": "bad id", "stage_id": "s", "role": "developer", "kind": "coding", "artifact": 1}`:                      "line 7, field run_id: run_id \"bad id\" must be 1-128 characters",
		`{"run_id": "r", "stage_id": "s", "role": "developer", "kind": "poetry", "artifact": 1}`:                           "line 7, field kind: unknown activity kind \"poetry\" (UNKNOWN_KIND)",
		`{"run_id": "r", "stage_id": "s", "role": "developer", "kind": "coding", "artifact": 1, "terminal_state": "done"}`: "line 7, field terminal_state: unknown terminal state",
		`{"run_id": "r", "stage_id": "s", "role": "developer", "kind": "coding", "artifact": 1, "reason_code": " \t"}`:     "line 7, field reason_code: reason_code must not be empty (EMPTY_REASON_CODE)",
		`{"run_id": "r", "stage_id": "s", "role": "developer", "kind": "coding", "artifact": 1, "reason_code": "a\u0001"}`: "line 7, field reason_code: reason_code must be at most 128 characters without control characters (INVALID_REASON_CODE)",
	} {
		d, err := ParseDescription([]byte(line), 7, ".")
		must(t, err)
		if _, err := d.Result(); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s:\n got  %v\n want %s...", line, err, want)
		}
	}
}
