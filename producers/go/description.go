package bernstein

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Activity descriptions (docs/producing.md, "Vectors, SDKs and tools"): one JSON object per line,
// shared with `bernstein submit` (producers/description.py) and the TypeScript SDK's emit. A line
// is a stage
//
//	{"run_id", "stage_id", "role", "kind",
//	 "artifact": <JSON value> | "artifact_file": "path" | "artifact_base64": "...",
//	 "observations": [{"kind", "ref", "file" | "text" | "base64"}],
//	 "terminal_state", "reason_code", "submission_id", "occurred_at_ms",
//	 "artifact_hash" (TESTING ONLY: published instead of the computed hash)}
//
// or a run close {"close_run": "run-42", "submission_id": "..."}.

// DescriptionError is a description line that cannot be published; it names the line and field.
type DescriptionError struct {
	Line   int
	Field  string
	Reason string
}

func (e *DescriptionError) Error() string {
	where := fmt.Sprintf("line %d", e.Line)
	if e.Field != "" {
		where += ", field " + e.Field
	}
	return where + ": " + e.Reason
}
func (e *DescriptionError) Code() string { return "E_DESCRIPTION" }

// ObservedBytes is one observation of a stage description: kind, ref and the bytes behind it.
type ObservedBytes struct {
	Kind string
	Ref  string
	Data []byte
}

// Description is a parsed line: a stage (Close == false) or a run close.
type Description struct {
	Line          int
	Close         bool
	RunID         string
	StageID       string
	Role          string
	Kind          string
	Artifact      []byte
	Observations  []ObservedBytes
	TerminalState string
	ReasonCode    string
	SubmissionID  string // "" = a fresh one
	OccurredAtMS  *int64 // nil = now
	ArtifactHash  string // TESTING ONLY override, "" = computed
}

var stageFields = []string{"run_id", "stage_id", "role", "kind", "artifact", "artifact_file", "artifact_base64",
	"observations", "terminal_state", "reason_code", "submission_id", "occurred_at_ms", "artifact_hash"}

// ParseDescription parses one line (numbered line); files are read relative to cwd.
func ParseDescription(text []byte, line int, cwd string) (*Description, error) {
	fail := func(field, format string, args ...any) error {
		return &DescriptionError{Line: line, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if hasLoneSurrogateEscape(text) {
		// Go's JSON decoder would turn it into U+FFFD, silently publishing other bytes than described.
		return nil, fail("", "a string holds a lone UTF-16 surrogate escape (\\uD800-\\uDFFF without its pair): it has no UTF-8 form")
	}
	if field, err := duplicateKey(text); err != nil {
		return nil, fail("", "not JSON: %v", err)
	} else if field != "" {
		return nil, fail(field, "is given twice")
	}
	var top any
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil {
		return nil, fail("", "not JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fail("", "not JSON: data after the object")
	}
	if _, ok := top.(map[string]any); !ok {
		return nil, fail("", "a description is a JSON object, not %s", jsonType(top))
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(text, &raw)
	doc := top.(map[string]any)
	if _, isClose := doc["close_run"]; isClose {
		for k := range doc {
			if k != "close_run" && k != "submission_id" {
				return nil, fail(k, "a run close takes only close_run and submission_id; unknown: %s", k)
			}
		}
		runID, err := requiredString(doc, "close_run", "", line)
		if err != nil {
			return nil, err
		}
		sid, err := optionalString(doc, "submission_id", line)
		if err != nil {
			return nil, err
		}
		return &Description{Line: line, Close: true, RunID: runID, SubmissionID: sid}, nil
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(stageFields, k) {
			sorted := append([]string{}, stageFields...)
			slices.Sort(sorted)
			return nil, fail(k, "unknown field; a stage takes %s (a run close: close_run, submission_id)", strings.Join(sorted, ", "))
		}
	}
	d := &Description{Line: line}
	var err error
	for _, f := range []struct {
		name string
		dst  *string
	}{{"run_id", &d.RunID}, {"stage_id", &d.StageID}, {"role", &d.Role}, {"kind", &d.Kind}} {
		if *f.dst, err = requiredString(doc, f.name, "", line); err != nil {
			return nil, err
		}
	}
	var given []string
	for _, name := range []string{"artifact", "artifact_file", "artifact_base64"} {
		if _, ok := doc[name]; ok {
			given = append(given, name)
		}
	}
	if len(given) != 1 {
		field, suffix := "artifact", ""
		if len(given) > 1 {
			field, suffix = given[1], " (got "+strings.Join(given, ", ")+")"
		}
		return nil, fail(field, "give exactly one of artifact, artifact_file, artifact_base64%s", suffix)
	}
	switch given[0] {
	case "artifact":
		d.Artifact, err = CanonicalizeJSONText(raw["artifact"])
		if err != nil {
			return nil, fail("artifact", "has no RFC 8785 canonical JSON form: %v", err)
		}
	case "artifact_file":
		path, err := requiredString(doc, "artifact_file", "", line)
		if err != nil {
			return nil, err
		}
		if d.Artifact, err = readDescribedFile(path, cwd, line, "artifact_file"); err != nil {
			return nil, err
		}
	default:
		text, err := requiredString(doc, "artifact_base64", "", line)
		if err != nil {
			return nil, err
		}
		if d.Artifact, err = decodeBase64(text, line, "artifact_base64"); err != nil {
			return nil, err
		}
	}
	observations, present := doc["observations"]
	if present {
		list, ok := observations.([]any)
		if !ok {
			return nil, fail("observations", "must be a list, not %s", jsonType(observations))
		}
		for i, item := range list {
			o, err := parseObserved(item, i, line, cwd)
			if err != nil {
				return nil, err
			}
			d.Observations = append(d.Observations, o)
		}
	}
	if occurred, ok := doc["occurred_at_ms"]; ok && occurred != nil {
		n, isNum := occurred.(json.Number)
		v, convErr := strconv.ParseInt(string(n), 10, 64)
		if !isNum || convErr != nil || v < 0 || v > maxSafeInt {
			shown, _ := json.Marshal(occurred)
			return nil, fail("occurred_at_ms", "must be an integer of milliseconds since the epoch (0 to %d), not %s", int64(maxSafeInt), shown)
		}
		d.OccurredAtMS = &v
	}
	if d.TerminalState, err = optionalString(doc, "terminal_state", line); err != nil {
		return nil, err
	}
	if d.ReasonCode, err = optionalString(doc, "reason_code", line); err != nil {
		return nil, err
	}
	if d.SubmissionID, err = optionalString(doc, "submission_id", line); err != nil {
		return nil, err
	}
	if d.ArtifactHash, err = optionalString(doc, "artifact_hash", line); err != nil {
		return nil, err
	}
	if d.TerminalState == "" {
		d.TerminalState = Completed
	}
	if d.ReasonCode == "" {
		d.ReasonCode = "ok"
	}
	return d, nil
}

func parseObserved(item any, index, line int, cwd string) (ObservedBytes, error) {
	where := fmt.Sprintf("observations[%d]", index)
	m, ok := item.(map[string]any)
	if !ok {
		return ObservedBytes{}, &DescriptionError{Line: line, Field: where, Reason: "an observation is a JSON object, not " + jsonType(item)}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains([]string{"kind", "ref", "file", "text", "base64"}, k) {
			return ObservedBytes{}, &DescriptionError{Line: line, Field: where + "." + k, Reason: "unknown field; an observation takes kind, ref and one of file, text, base64"}
		}
	}
	var given []string
	for _, k := range []string{"file", "text", "base64"} {
		if _, ok := m[k]; ok {
			given = append(given, k)
		}
	}
	if len(given) != 1 {
		return ObservedBytes{}, &DescriptionError{Line: line, Field: where, Reason: "give exactly one of file, text, base64 (the observed bytes)"}
	}
	kind, err := requiredString(m, "kind", where, line)
	if err != nil {
		return ObservedBytes{}, err
	}
	ref, err := requiredString(m, "ref", where, line)
	if err != nil {
		return ObservedBytes{}, err
	}
	value, err := requiredString(m, given[0], where, line)
	if err != nil {
		return ObservedBytes{}, err
	}
	var data []byte
	switch given[0] {
	case "file":
		data, err = readDescribedFile(value, cwd, line, where+".file")
	case "text":
		data = []byte(value)
	default:
		data, err = decodeBase64(value, line, where+".base64")
	}
	return ObservedBytes{Kind: kind, Ref: ref, Data: data}, err
}

// Result is the stage's ActivityResult, checked as the SDK checks one; with the ArtifactHash
// override it carries that hash instead of the computed one (testing refusals).
func (d *Description) Result() (*ActivityResult, error) {
	if err := RequireValidIDs([2]string{"run_id", d.RunID}, [2]string{"stage_id", d.StageID}, [2]string{"role", d.Role}); err != nil {
		return nil, d.rejected(err)
	}
	observations := make([]Observation, 0, len(d.Observations))
	for _, o := range d.Observations {
		observations = append(observations, Observe(o.Kind, o.Ref, o.Data))
	}
	result, err := BuildResult(d.Kind, d.Artifact, observations, Outcome{TerminalState: d.TerminalState, ReasonCode: d.ReasonCode})
	if err != nil {
		return nil, d.rejected(err)
	}
	if d.ArtifactHash != "" {
		result.ArtifactHash = d.ArtifactHash
	}
	return result, nil
}

// Blobs are every byte string to store before publishing: the observations' and the artifact.
func (d *Description) Blobs() [][]byte {
	blobs := make([][]byte, 0, len(d.Observations)+1)
	for _, o := range d.Observations {
		blobs = append(blobs, o.Data)
	}
	return append(blobs, d.Artifact)
}

func (d *Description) rejected(err error) error {
	var rejected *ActivityRejected
	if !errors.As(err, &rejected) {
		return &DescriptionError{Line: d.Line, Reason: err.Error()}
	}
	fields := map[string]string{
		"INVALID_RUN_ID": "run_id", "INVALID_STAGE_ID": "stage_id", "INVALID_ROLE": "role", "UNKNOWN_KIND": "kind",
		"UNKNOWN_TERMINAL_STATE": "terminal_state", "EMPTY_REASON_CODE": "reason_code", "INVALID_REASON_CODE": "reason_code",
		"ARTIFACT_TOO_LARGE": "artifact", "INVALID_SUBMISSION_ID": "submission_id", "INVALID_OCCURRED_AT": "occurred_at_ms",
	}
	return &DescriptionError{Line: d.Line, Field: fields[rejected.Reason], Reason: fmt.Sprintf("%s (%s)", rejected.Msg, rejected.Reason)}
}

func requiredString(doc map[string]any, name, parent string, line int) (string, error) {
	field := name
	if parent != "" {
		field = parent + "." + name
	}
	v, ok := doc[name]
	if !ok {
		return "", &DescriptionError{Line: line, Field: field, Reason: "is required"}
	}
	s, ok := v.(string)
	if !ok {
		return "", &DescriptionError{Line: line, Field: field, Reason: "must be a string, not " + jsonType(v)}
	}
	return s, nil
}

func optionalString(doc map[string]any, name string, line int) (string, error) {
	if v, ok := doc[name]; !ok || v == nil {
		return "", nil
	}
	return requiredString(doc, name, "", line)
}

func readDescribedFile(path, cwd string, line int, field string) ([]byte, error) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(cwd, path)
	}
	info, err := os.Stat(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, &DescriptionError{Line: line, Field: field, Reason: "no such file: " + path}
		}
		return nil, &DescriptionError{Line: line, Field: field, Reason: fmt.Sprintf("cannot read %s: %v", path, err)}
	}
	if info.IsDir() {
		return nil, &DescriptionError{Line: line, Field: field, Reason: "is a directory, not a file: " + path}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &DescriptionError{Line: line, Field: field, Reason: fmt.Sprintf("cannot read %s: %v", path, err)}
	}
	return data, nil
}

func decodeBase64(text string, line int, field string) ([]byte, error) {
	data, err := base64.StdEncoding.Strict().DecodeString(text)
	if err != nil {
		return nil, &DescriptionError{Line: line, Field: field, Reason: "is not standard base64 (RFC 4648, with padding)"}
	}
	return data, nil
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	}
	return "an object"
}

// duplicateKey is the first key given twice in any object of the JSON text ("" if none).
func duplicateKey(text []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	type frame struct {
		object  bool
		seen    map[string]bool
		wantKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantKey {
			if key, ok := tok.(string); ok {
				if top.seen[key] {
					return key, nil
				}
				top.seen[key] = true
				top.wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, seen: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].wantKey = true
		}
	}
}
