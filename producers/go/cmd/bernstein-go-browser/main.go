// Command bernstein-go-browser records one browser session from a session script on stdin and
// publishes it: every action anchored, its lineage entry HMAC-enveloped and signed, its screenshot
// and snapshot stored in S3 before its ComputerUseAction.v2 is produced, then the session's browser
// result (stage id = session id). The script replays what a driver saw and what an agent decided:
//
//	{"run_id": "run-42", "session_id": "browser-0", "role": "navigator", "adapter": "scripted",
//	 "steps": [{"frame": {"screenshot_base64": "...", "aria_snapshot": "- textbox \"Email\"", "url": "..."},
//	            "action": {"kind": "type", "target": "#email", "value": "..."}}, ...],
//	 "final": {"screenshot_base64": "...", "aria_snapshot": "...", "url": "..."}}
//
// An action's value may come from the environment instead ("value_env": "NAME"), so a secret never
// sits in the script; a frame's screenshot may be a file ("screenshot_file", relative to the working
// directory). One JSON line per published record goes to stdout (actions with "action_index" and
// "anchor", then the result with "stage_id", "terminal_state", "head_anchor", "action_count").
// Configuration is the emitter's (BERNSTEIN_* environment, producers/go/README.md); the producer key
// directory must hold the lineage and redaction keys (`bernstein keys init --producer`).
//
// Exit status: 0 the session ended ok and everything was published; 1 it ended otherwise (an invalid
// action: refused, invalid_action), its result published; 2 a bad script or configuration (nothing
// published); 3 Kafka or S3 unavailable or refusing.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

type scriptFrame struct {
	ScreenshotBase64 *string `json:"screenshot_base64"`
	ScreenshotFile   *string `json:"screenshot_file"`
	AriaSnapshot     string  `json:"aria_snapshot"`
	URL              string  `json:"url"`
}

type scriptAction struct {
	Kind     string  `json:"kind"`
	Target   string  `json:"target"`
	Value    *string `json:"value"`
	ValueEnv *string `json:"value_env"`
}

type script struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
	Role      string `json:"role"`
	Adapter   string `json:"adapter"`
	Steps     []struct {
		Frame  scriptFrame  `json:"frame"`
		Action scriptAction `json:"action"`
	} `json:"steps"`
	Final *scriptFrame `json:"final"`
}

type line struct {
	RunID         string `json:"run_id"`
	SubmissionID  string `json:"submission_id"`
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	Offset        int64  `json:"offset"`
	ActionIndex   *int   `json:"action_index,omitempty"`
	Anchor        string `json:"anchor,omitempty"`
	StageID       string `json:"stage_id,omitempty"`
	TerminalState string `json:"terminal_state,omitempty"`
	ReasonCode    string `json:"reason_code,omitempty"`
	HeadAnchor    string `json:"head_anchor,omitempty"`
	ActionCount   *int   `json:"action_count,omitempty"`
}

// replay is the scripted driver and agent: the frames in order, then the final frame and "done".
type replay struct {
	frames  []bernstein.Frame
	actions []bernstein.ProposedAction
	at      int
}

func (r *replay) Observe(context.Context) (bernstein.Frame, error) {
	if r.at >= len(r.frames) {
		return bernstein.Frame{}, &bernstein.DriverError{Fault: bernstein.FaultObserveFailed, Msg: "the script has no further frame"}
	}
	return r.frames[r.at], nil
}

func (r *replay) Perform(context.Context, bernstein.ProposedAction) error { r.at++; return nil }
func (r *replay) Close() error                                            { return nil }

func (r *replay) NextAction(_ context.Context, view bernstein.AgentView) (*bernstein.ProposedAction, error) {
	if view.Index >= len(r.actions) {
		return nil, nil
	}
	return &r.actions[view.Index], nil
}

func main() { os.Exit(run(os.Stdin, os.Stdout, os.Stderr)) }

func run(stdin io.Reader, stdout, stderr io.Writer) int {
	data, err := io.ReadAll(stdin)
	if err != nil {
		return fail(stderr, 2, err)
	}
	cwd, _ := os.Getwd()
	s, driver, err := parse(data, cwd)
	if err != nil {
		return fail(stderr, 2, err)
	}
	cfg, err := bernstein.ConfigFromEnv()
	if err != nil {
		return fail(stderr, 2, err)
	}
	emitter, err := bernstein.NewEmitter(cfg)
	if err != nil {
		return fail(stderr, 2, err)
	}
	defer emitter.Close()
	emitter.Retries = 0
	session, err := bernstein.NewComputerUseSession(s.RunID, s.SessionID, emitter.Keys, emitter)
	if err != nil {
		return fail(stderr, 2, err)
	}
	if s.Role != "" {
		session.Role = s.Role
	}
	if s.Adapter != "" {
		session.Adapter = s.Adapter
	}
	outcome, err := session.Run(context.Background(), driver, driver)
	encoder := json.NewEncoder(stdout)
	if outcome == nil { // the result could not be published
		return fail(stderr, 3, err)
	}
	for i, p := range outcome.ActionsPublished {
		index := i
		_ = encoder.Encode(line{RunID: p.RunID, SubmissionID: p.SubmissionID, Topic: p.Topic, Partition: p.Partition, Offset: p.Offset, ActionIndex: &index, Anchor: outcome.Records[i].Anchor})
	}
	count := len(outcome.Records)
	p := outcome.Published
	_ = encoder.Encode(line{RunID: p.RunID, SubmissionID: p.SubmissionID, Topic: p.Topic, Partition: p.Partition, Offset: p.Offset,
		StageID: s.SessionID, TerminalState: outcome.State, ReasonCode: outcome.ReasonCode, HeadAnchor: outcome.HeadAnchor, ActionCount: &count})
	if outcome.State != "ok" {
		fmt.Fprintf(stderr, "bernstein-go-browser: the session ended %s (%s); its result is published\n", outcome.State, outcome.ReasonCode)
		return 1
	}
	return 0
}

func parse(data []byte, cwd string) (*script, *replay, error) {
	var s script
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, nil, fmt.Errorf("the session script is not one JSON object of the documented shape: %v", err)
	}
	if s.Final == nil {
		return nil, nil, errors.New(`the session script needs "final": the frame the agent saw when it was done`)
	}
	r := &replay{}
	for i, step := range s.Steps {
		f, err := frameOf(step.Frame, cwd, fmt.Sprintf("steps[%d].frame", i))
		if err != nil {
			return nil, nil, err
		}
		a := bernstein.ProposedAction{Kind: step.Action.Kind, Target: step.Action.Target, Value: step.Action.Value}
		if step.Action.ValueEnv != nil {
			v, ok := os.LookupEnv(*step.Action.ValueEnv)
			if !ok || step.Action.Value != nil {
				return nil, nil, fmt.Errorf("steps[%d].action: value_env %s is not set (or value is given too)", i, *step.Action.ValueEnv)
			}
			a.Value = &v
		}
		r.frames, r.actions = append(r.frames, f), append(r.actions, a)
	}
	f, err := frameOf(*s.Final, cwd, "final")
	if err != nil {
		return nil, nil, err
	}
	r.frames = append(r.frames, f)
	return &s, r, nil
}

func frameOf(f scriptFrame, cwd, where string) (bernstein.Frame, error) {
	out := bernstein.Frame{AriaSnapshot: f.AriaSnapshot, URL: f.URL}
	switch {
	case (f.ScreenshotBase64 == nil) == (f.ScreenshotFile == nil):
		return out, fmt.Errorf("%s: give exactly one of screenshot_base64 and screenshot_file", where)
	case f.ScreenshotBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*f.ScreenshotBase64)
		if err != nil {
			return out, fmt.Errorf("%s.screenshot_base64: %v", where, err)
		}
		out.Screenshot = b
	default:
		path := *f.ScreenshotFile
		if !filepath.IsAbs(path) {
			path = filepath.Join(cwd, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return out, fmt.Errorf("%s.screenshot_file: %v", where, err)
		}
		out.Screenshot = b
	}
	return out, nil
}

func fail(stderr io.Writer, code int, err error) int {
	var config *bernstein.ConfigError
	var rejected *bernstein.ActivityRejected
	if errors.As(err, &config) || errors.As(err, &rejected) {
		code = 2
	}
	name := bernstein.CodeOf(err)
	if name == "" {
		name = "E_BROWSER_SCRIPT"
		if code == 3 {
			name = "E_PUBLISH_FAILED"
		}
	}
	fmt.Fprintf(stderr, "bernstein-go-browser: %s: %v\n", name, err)
	return code
}
