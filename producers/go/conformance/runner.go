// Package conformance reproduces the repository's golden vectors (schemas/vectors/*.json) with the
// Go SDK: every file and every top-level section must be handled, so an unknown one is a miss
// ("not covered") and 100% stays enforced as vectors grow.
package conformance

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// Result is one reproduced (or missed) vector.
type Result struct {
	Name   string
	OK     bool
	Detail string
}

// Runner holds the loaded vector files and the results so far.
type Runner struct {
	codec   *bernstein.Codec
	files   map[string]map[string]any
	Results []Result
	Notes   []string // what a file's run reports besides its results (counts), printed after the misses
}

type handler struct {
	sections []string
	run      func(r *Runner, doc obj)
}

var handlers = map[string]handler{
	"avro.json":           {[]string{"encoding", "schemas"}, runAvro},
	"canonical_json.json": {[]string{"rule", "cases", "refused"}, runCanonical},
	"chain.json":          {[]string{"pae", "journal", "seal", "audit"}, runChain},
	"checkpoints.json":    {[]string{"audit_record_v2", "checkpoints"}, runCheckpoints},
	"digests.json":        {[]string{"content_hash", "artifact_hash", "evidence_set_hash", "malformed_digests"}, runDigests},
	"modalities.json":     {[]string{"dataops_plan", "computer_use"}, runModalities},
	"signatures.json":     {[]string{"producer", "activity_submission", "run_close", "lineage", "typed_value"}, runSignatures},
	"partitions.json":     {[]string{"algorithm", "seed", "cases"}, runPartitions},
	"steps.json":          {[]string{"description", "keys", "manifest_toml", "submission_partitions", "cases", "blobs", "headers_rule"}, runSteps},
	"ed25519.json":        {[]string{"rule", "cases"}, runEd25519},
	"browser.json":        {[]string{"description", "keys", "rules", "session", "pointer_session", "pointer_targets", "snapshots", "invalid_proposals"}, runBrowser},
	"audit_walks.json":    {[]string{"format", "about", "judgements", "submissions_topic", "tick_late_ms", "bases", "cases"}, runAuditWalks},
	"tlog.json":           {[]string{"description", "log", "witness", "origin", "cosigned_at", "leaves_hex", "leaf_hashes_hex", "roots_hex", "accepted", "refused", "scheduler_checkpoints", "activity_proofs"}, runTlog},
}

// Run reproduces every *.json file of dir and writes one line per miss and a summary to out.
func Run(dir string, out io.Writer) (*Runner, error) {
	codec, err := bernstein.DefaultCodec()
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no *.json vector files in %s", dir)
	}
	slices.Sort(paths)
	r := &Runner{codec: codec, files: map[string]map[string]any{}}
	for _, path := range paths {
		name := filepath.Base(path)
		data, err := os.ReadFile(path)
		if err != nil {
			r.miss(name, "cannot read: %v", err)
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			r.miss(name, "not a JSON object: %v", err)
			continue
		}
		r.files[name] = doc
	}
	for _, path := range paths {
		name := filepath.Base(path)
		doc, ok := r.files[name]
		if !ok {
			continue
		}
		h, known := handlers[name]
		if !known {
			r.miss(name, "not covered: no reproduction for this vector file")
			continue
		}
		keys := make([]string, 0, len(doc))
		for k := range doc {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !slices.Contains(h.sections, k) {
				r.miss(name+"/"+k, "not covered: unknown section")
			}
		}
		h.run(r, obj{r: r, path: strings.TrimSuffix(name, ".json"), m: doc})
	}
	for _, res := range r.Results {
		if !res.OK {
			fmt.Fprintf(out, "MISS %s: %s\n", res.Name, res.Detail)
		}
	}
	for _, note := range r.Notes {
		fmt.Fprintln(out, note)
	}
	return r, nil
}

// Passed counts the reproduced vectors.
func (r *Runner) Passed() int {
	n := 0
	for _, res := range r.Results {
		if res.OK {
			n++
		}
	}
	return n
}

func (r *Runner) miss(name, format string, args ...any) {
	r.Results = append(r.Results, Result{Name: name, OK: false, Detail: fmt.Sprintf(format, args...)})
}

func (r *Runner) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *Runner) pass(name string) { r.Results = append(r.Results, Result{Name: name, OK: true}) }

// same records a vector that reproduces when got equals want.
func (r *Runner) same(name string, got, want string) {
	if got == want {
		r.pass(name)
	} else {
		r.miss(name, "got %s, want %s", clip(got), clip(want))
	}
}

// ok records a vector whose reproduction failed when err is non-nil.
func (r *Runner) ok(name string, err error) bool {
	if err != nil {
		r.miss(name, "%v", err)
		return false
	}
	return true
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:197] + "..."
	}
	return s
}

// obj is a JSON object of a vector file with accessors that record a miss for a missing or
// mistyped key (so a vector that does not state what it should is never silently skipped).
type obj struct {
	r    *Runner
	path string
	m    map[string]any
}

func (o obj) at(k string) string { return o.path + "/" + k }

func (o obj) has(k string) bool { _, ok := o.m[k]; return ok }

func (o obj) raw(k string) (any, bool) {
	v, ok := o.m[k]
	if !ok {
		o.r.miss(o.at(k), "not stated: the vector has no %q", k)
	}
	return v, ok
}

func (o obj) str(k string) string {
	v, ok := o.raw(k)
	if !ok {
		return ""
	}
	s, isStr := v.(string)
	if !isStr {
		o.r.miss(o.at(k), "expected a string, got %T", v)
	}
	return s
}

func (o obj) hex(k string) []byte {
	s := o.str(k)
	b, err := hex.DecodeString(s)
	if err != nil {
		o.r.miss(o.at(k), "not hex: %v", err)
	}
	return b
}

func (o obj) int(k string) int64 {
	v, ok := o.raw(k)
	if !ok {
		return 0
	}
	n, isNum := v.(json.Number)
	i, err := n.Int64()
	if !isNum || err != nil {
		o.r.miss(o.at(k), "expected an integer, got %v", v)
	}
	return i
}

func (o obj) obj(k string) obj {
	v, _ := o.raw(k)
	m, isMap := v.(map[string]any)
	if !isMap && v != nil {
		o.r.miss(o.at(k), "expected an object, got %T", v)
	}
	return obj{r: o.r, path: o.at(k), m: m}
}

func (o obj) list(k string) []any {
	v, _ := o.raw(k)
	l, isList := v.([]any)
	if !isList && v != nil {
		o.r.miss(o.at(k), "expected an array, got %T", v)
	}
	return l
}

func (o obj) objs(k string) []obj {
	var out []obj
	for i, item := range o.list(k) {
		m, isMap := item.(map[string]any)
		if !isMap {
			o.r.miss(fmt.Sprintf("%s[%d]", o.at(k), i), "expected an object")
			continue
		}
		out = append(out, obj{r: o.r, path: fmt.Sprintf("%s[%d]", o.at(k), i), m: m})
	}
	return out
}

func (o obj) strs(k string) []string {
	var out []string
	for _, item := range o.list(k) {
		s, isStr := item.(string)
		if !isStr {
			o.r.miss(o.at(k), "expected strings")
			return nil
		}
		out = append(out, s)
	}
	return out
}

// onlyKeys records a miss for every key of o not in known: a field no reproduction reads.
func (o obj) onlyKeys(known ...string) {
	for k := range o.m {
		if !slices.Contains(known, k) {
			o.r.miss(o.at(k), "not covered: unknown field")
		}
	}
}
