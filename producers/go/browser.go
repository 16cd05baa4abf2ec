package bernstein

import (
	"fmt"
	"maps"
)

// Browser results (docs/computer_use.md): the artifact is the canonical bernstein.browser.session/v1
// document of its session, and the scheduler requires its session_id (= the stage id), head_anchor and
// action_count to match the ComputerUseAction records it accepted for that stage
// (BROWSER_SESSION_MISMATCH). A session that anchors actions is recorded by ComputerUseSession
// (browser_session.go); BrowserSessionResult is the session document of a browser stage that anchored
// no action (head = the session's genesis, 0 actions), e.g. a session refused or failed before its
// first action. Its action log (an empty one) is an observation: store ActionLog with
// Emitter.StoreBlobs before publishing.

// Browser document formats.
const (
	BrowserSessionFormat   = "bernstein.browser.session/v1"
	BrowserActionLogFormat = "bernstein.browser.action-log/v1"
)

var sessionStates = map[string]string{"ok": Completed, "driver_failure": Failed, "timeout": TimedOut, "refused": Refused}

// SessionTerminalStates maps a session's own terminal state onto its browser result's.
func SessionTerminalStates() map[string]string { return maps.Clone(sessionStates) }

// BrowserSession is the result of a zero-action browser stage and its action log blob.
type BrowserSession struct {
	Result    *ActivityResult
	ActionLog []byte
}

// BrowserSessionResult builds it. state is the session's own terminal state (ok, driver_failure,
// timeout, refused: mapped onto completed, failed, timed_out, refused); fault or refusal (may be nil)
// record why it stopped.
func BrowserSessionResult(runID, stageID, state, reasonCode, adapter, workerID string, fault, refusal map[string]any) (*BrowserSession, error) {
	activityState, ok := sessionStates[state]
	if !ok {
		return nil, &ActivityRejected{Reason: "UNKNOWN_TERMINAL_STATE", Msg: fmt.Sprintf("session terminal state %q is not one of ok, driver_failure, timeout, refused", state)}
	}
	if err := RequireValidIDs([2]string{"run_id", runID}, [2]string{"stage_id", stageID}); err != nil {
		return nil, err
	}
	genesis, err := ComputerUseGenesis(runID, stageID)
	if err != nil {
		return nil, err
	}
	log, err := CanonicalJSON(map[string]any{"format": BrowserActionLogFormat, "run_id": runID, "session_id": stageID, "actions": []any{}})
	if err != nil {
		return nil, err
	}
	doc := map[string]any{
		"format": BrowserSessionFormat, "session_id": stageID, "run_id": runID,
		"head_anchor": genesis, "action_count": 0, "genesis": genesis, "anchors": []any{},
		"action_log": ContentHash(log), "terminal_state": state, "reason_code": reasonCode,
		"adapter": adapter, "worker_id": workerID,
	}
	if fault != nil {
		doc["fault"] = fault
	}
	if refusal != nil {
		doc["refusal"] = refusal
	}
	observations := []Observation{Observe("action_log", "session:"+stageID, log)}
	result, err := BuildResult(KindBrowser, doc, observations, Outcome{TerminalState: activityState, ReasonCode: reasonCode})
	if err != nil {
		return nil, err
	}
	return &BrowserSession{Result: result, ActionLog: log}, nil
}

// CodingResult is a coding activity's result: the artifact (conventionally the unified diff of what
// the spawn changed, producers/coding.py) and one "file" observation per written file (ref = its
// path), as Observe gives them. Coding artifacts are opaque to the scheduler.
func CodingResult(artifact any, files map[string][]byte, outcome Outcome) (*ActivityResult, error) {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sortStrings(paths)
	observations := make([]Observation, 0, len(paths))
	for _, p := range paths {
		observations = append(observations, Observe("file", p, files[p]))
	}
	return BuildResult(KindCoding, artifact, observations, outcome)
}
