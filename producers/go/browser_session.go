package bernstein

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A recorded browser session (producers/computer_use/session.py): every action anchored, signed and
// published before the driver performs it, then exactly one browser result whose stage id is the
// session id and whose artifact is the session document. Drive it step by step (Observe, Record,
// RecordFinal, Finish) or hand Run a BrowserDriver (chromedp, a remote browser, a replayed
// recording) and an ExternalAgent.

// Frame is what the driver saw before an action: screenshot bytes and the raw accessibility snapshot
// (Playwright's ARIA snapshot text).
type Frame struct {
	Screenshot   []byte
	AriaSnapshot string
	URL          string
}

// AgentView is what the agent is shown before deciding action Index: the recorded observation.
type AgentView struct {
	Index      int
	Screenshot []byte
	Snapshot   string // the normalised, redacted snapshot: exactly the bytes whose digest is the DOM digest
	URL        string
}

// BrowserDriver carries out actions in one browser. Return a *DriverError to say how it failed.
type BrowserDriver interface {
	Observe(ctx context.Context) (Frame, error)
	Perform(ctx context.Context, action ProposedAction) error
	Close() error
}

// ExternalAgent decides its own actions; nil means done.
type ExternalAgent interface {
	NextAction(ctx context.Context, view AgentView) (*ProposedAction, error)
}

// Driver fault codes (docs/computer_use.md, "Terminal states"); the reason code is the lower case.
const (
	FaultObserveFailed  = "OBSERVE_FAILED"
	FaultActionFailed   = "ACTION_FAILED"
	FaultActionTimeout  = "ACTION_TIMEOUT"
	FaultBrowserClosed  = "BROWSER_CLOSED"
	FaultAgentFailed    = "AGENT_FAILED"
	FaultNavigation     = "NAVIGATION_FAILED"
	FaultSessionTimeout = "SESSION_TIMEOUT"
)

// DriverError is a driver's (or the agent's) failure: driver_failure, or timeout when Timeout is set.
type DriverError struct {
	Fault   string
	Timeout bool
	Msg     string
}

func (e *DriverError) Error() string { return e.Msg }
func (e *DriverError) Code() string  { return "DRIVER_FAILURE" }

// SessionRefusal ends a session refused (the action limit, the byte cap), with its evidence.
type SessionRefusal struct {
	Refusal string // ACTION_LIMIT_EXCEEDED, BYTE_CAP_EXCEEDED, ...
	Msg     string
	Facts   map[string]any
}

func (e *SessionRefusal) Error() string            { return e.Msg }
func (e *SessionRefusal) Code() string             { return e.Refusal }
func (e *SessionRefusal) Evidence() map[string]any { return e.Facts }

// ActionPublisher is where a session's blobs and records go; *Emitter is one.
type ActionPublisher interface {
	StoreBlobs(ctx context.Context, blobs ...[]byte) error
	PublishRaw(ctx context.Context, runID string, value []byte, submissionID string) (*Published, error)
	Publish(ctx context.Context, runID, stageID, role string, result *ActivityResult, opts PublishOptions) (*Published, error)
}

// PendingObservation is a normalised pre-action frame, not yet anchored.
type PendingObservation struct {
	Index      int
	Screenshot []byte
	Snapshot   []byte
	URL        string
	Hashes     ObservationHashes
}

// View is what the agent is shown.
func (p PendingObservation) View() AgentView {
	return AgentView{Index: p.Index, Screenshot: p.Screenshot, Snapshot: string(p.Snapshot), URL: p.URL}
}

// RecordedAction is a published action: its record, its wire record and where it landed.
type RecordedAction struct {
	Record    ActionRecord
	Wire      *ComputerUseAction
	Value     []byte
	Published *Published
}

// ComputerUseSession records one session. Set the exported options before the first action.
type ComputerUseSession struct {
	RunID, SessionID string
	Role             string // the browser result's role (default navigator; its agent_kind must be browser)
	Adapter          string // named in the session document (default "go")
	SDK              string // producer.sdk of every record
	MaxActions       int
	ByteCap          int64          // distinct screenshot bytes per session (the scheduler's per-run cap is what holds)
	Now              func() int64   // occurred_at_ms of each action (default: the wall clock)
	ResultOptions    PublishOptions // the browser result's submission id and time (default: fresh, now)
	Keys             *ProducerKeys
	Publisher        ActionPublisher
	genesis          string
	records          []ActionRecord
	landed           []*Published
	typed            []string
	sizes            map[string]int64
	shotBytes        int64
	final            *PendingObservation
	outcome          *SessionOutcome
}

// SessionOutcome is how the session ended and what was published.
type SessionOutcome struct {
	State, ReasonCode string
	Records           []ActionRecord
	HeadAnchor        string
	Document          map[string]any
	ActionLog         []byte
	Result            *ActivityResult
	Published         *Published
	ActionsPublished  []*Published
	Err               error // what ended the session (nil when ok)
}

// NewComputerUseSession starts recording session sessionID of run runID under keys (which must hold
// the lineage and redaction keys: `bernstein keys init --producer` makes them).
func NewComputerUseSession(runID, sessionID string, keys *ProducerKeys, publisher ActionPublisher) (*ComputerUseSession, error) {
	if err := RequireValidIDs([2]string{"run_id", runID}, [2]string{"session_id", sessionID}, [2]string{"worker_id", keys.Name}); err != nil {
		return nil, err
	}
	if len(keys.Lineage) == 0 || len(keys.Redaction) == 0 {
		return nil, &ConfigError{Msg: fmt.Sprintf("the producer keys of %s hold no lineage or redaction key; `bernstein keys init --producer` makes both", keys.Name)}
	}
	genesis, err := ComputerUseGenesis(runID, sessionID)
	if err != nil {
		return nil, err
	}
	return &ComputerUseSession{
		RunID: runID, SessionID: sessionID, Role: "navigator", Adapter: "go", SDK: ComputerUseSessionSDK,
		MaxActions: DefaultMaxActions, ByteCap: DefaultRunByteCap, Now: NowMS, Keys: keys, Publisher: publisher,
		genesis: genesis, sizes: map[string]int64{},
	}, nil
}

// Genesis is the prev_anchor of action 0.
func (s *ComputerUseSession) Genesis() string { return s.genesis }

// Head is the last anchor (the genesis before the first action).
func (s *ComputerUseSession) Head() string {
	if len(s.records) == 0 {
		return s.genesis
	}
	return s.records[len(s.records)-1].Anchor
}

// Records are the actions recorded so far.
func (s *ComputerUseSession) Records() []ActionRecord { return slices.Clone(s.records) }

// Observe normalises and hashes a pre-action frame (nothing is stored yet).
func (s *ComputerUseSession) Observe(frame Frame) PendingObservation {
	snapshot := []byte(NormaliseSnapshot(frame.AriaSnapshot, s.Keys.Redaction, s.typed))
	return PendingObservation{Index: len(s.records), Screenshot: frame.Screenshot, Snapshot: snapshot, URL: frame.URL, Hashes: HashObservation(frame.Screenshot, snapshot)}
}

func (s *ComputerUseSession) charge(p PendingObservation) error {
	if _, seen := s.sizes[p.Hashes.ScreenshotHash]; seen {
		return nil
	}
	would := s.shotBytes + int64(len(p.Screenshot))
	if would > s.ByteCap {
		return &SessionRefusal{Refusal: "BYTE_CAP_EXCEEDED", Msg: fmt.Sprintf("session %s would store %d screenshot bytes; the cap is %d", s.SessionID, would, s.ByteCap),
			Facts: map[string]any{"code": "BYTE_CAP_EXCEEDED", "cap_bytes": s.ByteCap, "would_be_bytes": would, "at_action": p.Index}}
	}
	s.shotBytes = would
	return nil
}

func (s *ComputerUseSession) store(ctx context.Context, p PendingObservation) error {
	if err := s.Publisher.StoreBlobs(ctx, p.Screenshot, p.Snapshot); err != nil {
		return err
	}
	if _, ok := s.sizes[p.Hashes.ScreenshotHash]; !ok {
		s.sizes[p.Hashes.ScreenshotHash] = int64(len(p.Screenshot))
	}
	if _, ok := s.sizes[p.Hashes.DOMDigest]; !ok {
		s.sizes[p.Hashes.DOMDigest] = int64(len(p.Snapshot))
	}
	return nil
}

// Record anchors, signs and publishes one action (blobs first, then the record). The driver performs
// it only after this returns. An *InvalidActionError or a *SessionRefusal means the session must end
// refused (Finish with the error); nothing was stored or published for it.
func (s *ComputerUseSession) Record(ctx context.Context, pending PendingObservation, proposed ProposedAction) (*RecordedAction, error) {
	index := len(s.records)
	if s.outcome != nil {
		return nil, fmt.Errorf("browser session %s has ended; no action may follow", s.SessionID)
	}
	if pending.Index != index {
		return nil, fmt.Errorf("observation %d is stale: the session is at action %d", pending.Index, index)
	}
	if index >= s.MaxActions {
		return nil, &SessionRefusal{Refusal: "ACTION_LIMIT_EXCEEDED", Msg: fmt.Sprintf("browser session %s reached its limit of %d actions", s.SessionID, s.MaxActions),
			Facts: map[string]any{"code": "ACTION_LIMIT_EXCEEDED", "limit": s.MaxActions, "at_action": s.MaxActions}}
	}
	action, err := CanonicalAction(proposed, s.Keys.Redaction, index)
	if err != nil {
		return nil, err
	}
	if err := s.charge(pending); err != nil {
		return nil, err
	}
	record, wire, err := BuildAction(ActionInput{
		RunID: s.RunID, SessionID: s.SessionID, Index: index, PrevAnchor: s.Head(), Screenshot: pending.Screenshot,
		Snapshot: pending.Snapshot, Action: action, ProducerID: s.Keys.Name, SDK: s.SDK, OccurredAtMS: s.Now(),
	}, s.Keys)
	if err != nil {
		return nil, err
	}
	value, err := wire.Encode()
	if err != nil {
		return nil, err
	}
	if err := s.store(ctx, pending); err != nil {
		return nil, err
	}
	published, err := s.Publisher.PublishRaw(ctx, s.RunID, value, wire.SubmissionID)
	if err != nil {
		return nil, err
	}
	s.records = append(s.records, *record)
	s.landed = append(s.landed, published)
	if slices.Contains(ScrubbedKinds, proposed.Kind) && proposed.Value != nil && *proposed.Value != "" {
		s.typed = append(s.typed, *proposed.Value) // scrubbed from every later snapshot
	}
	return &RecordedAction{Record: *record, Wire: wire, Value: value, Published: published}, nil
}

// RecordFinal stores the frame the agent saw when it declared itself done (no anchor; the session
// document names its hashes).
func (s *ComputerUseSession) RecordFinal(ctx context.Context, pending PendingObservation) error {
	if err := s.charge(pending); err != nil {
		return err
	}
	if err := s.store(ctx, pending); err != nil {
		return err
	}
	s.final = &pending
	return nil
}

// SessionEnd classifies how a session ended: nil is ok; an *InvalidActionError or *SessionRefusal is
// refused; a *DriverError is driver_failure or timeout; anything else is driver_failure.
func SessionEnd(err error, phase string, actions int) (state, reason string, fault, refusal map[string]any) {
	var invalid *InvalidActionError
	var refused *SessionRefusal
	var driver *DriverError
	switch {
	case err == nil:
		return "ok", "ok", nil, nil
	case errors.As(err, &invalid):
		return "refused", InvalidActionReason, nil, invalid.Evidence()
	case errors.As(err, &refused):
		return "refused", strings.ToLower(refused.Refusal), nil, refused.Facts
	case errors.As(err, &driver):
		state = "driver_failure"
		if driver.Timeout {
			state = "timeout"
		}
		at := actions
		if phase == "perform" {
			at = actions - 1
		}
		if phase == "" {
			phase = "unknown"
		}
		return state, strings.ToLower(driver.Fault), map[string]any{"code": driver.Fault, "phase": phase, "action_index": at}, nil
	default:
		return "driver_failure", "driver_failure", nil, nil
	}
}

// Finish records how the session ended (see SessionEnd): stores the action log and the session
// document, publishes the browser result and returns the outcome. A second call returns the first outcome.
func (s *ComputerUseSession) Finish(ctx context.Context, cause error, phase string) (*SessionOutcome, error) {
	if s.outcome != nil {
		return s.outcome, nil
	}
	state, reason, fault, refusal := SessionEnd(cause, phase, len(s.records))
	var final *ObservationHashes
	if s.final != nil {
		final = &s.final.Hashes
	}
	doc, log, err := SessionDocument(s.RunID, s.SessionID, s.records, state, reason, s.Adapter, s.Keys.Name, fault, refusal, final)
	if err != nil {
		return nil, err
	}
	result, err := BuildResult(KindBrowser, doc, s.observations(log), Outcome{TerminalState: sessionStates[state], ReasonCode: reason})
	if err != nil {
		return nil, err
	}
	if err := s.Publisher.StoreBlobs(ctx, log); err != nil {
		return nil, err
	}
	published, err := s.Publisher.Publish(ctx, s.RunID, s.SessionID, s.Role, result, s.ResultOptions)
	if err != nil {
		return nil, err
	}
	s.outcome = &SessionOutcome{State: state, ReasonCode: reason, Records: s.Records(), HeadAnchor: s.Head(), Document: doc,
		ActionLog: log, Result: result, Published: published, ActionsPublished: slices.Clone(s.landed), Err: cause}
	return s.outcome, nil
}

func (s *ComputerUseSession) observations(log []byte) []Observation {
	seen := map[string]bool{}
	var out []Observation
	add := func(kind, ref, digest string) {
		if !seen[digest] {
			seen[digest] = true
			out = append(out, Observation{Kind: kind, Ref: ref, ContentHash: digest, Size: s.sizes[digest]})
		}
	}
	for _, r := range s.records {
		ref := fmt.Sprintf("action-%06d", r.Index)
		add("screenshot", ref, r.Hashes.ScreenshotHash)
		add("snapshot", ref, r.Hashes.DOMDigest)
	}
	if s.final != nil {
		add("screenshot", "final", s.final.Hashes.ScreenshotHash)
		add("snapshot", "final", s.final.Hashes.DOMDigest)
	}
	return append(out, Observe("action_log", "session:"+s.SessionID, log))
}

// SessionDocument is the bernstein.browser.session/v1 document of a session that anchored records
// and ended in state, and its action log blob (whose hash the document names).
func SessionDocument(runID, sessionID string, records []ActionRecord, state, reason, adapter, workerID string, fault, refusal map[string]any, final *ObservationHashes) (map[string]any, []byte, error) {
	if _, ok := sessionStates[state]; !ok {
		return nil, nil, &ActivityRejected{Reason: "UNKNOWN_TERMINAL_STATE", Msg: fmt.Sprintf("session terminal state %q is not one of ok, driver_failure, timeout, refused", state)}
	}
	genesis, err := ComputerUseGenesis(runID, sessionID)
	if err != nil {
		return nil, nil, err
	}
	items, anchors, head := make([]any, 0, len(records)), make([]any, 0, len(records)), genesis
	for _, r := range records {
		items = append(items, r.JSON())
		anchors = append(anchors, r.Anchor)
		head = r.Anchor
	}
	log, err := CanonicalJSON(map[string]any{"format": BrowserActionLogFormat, "run_id": runID, "session_id": sessionID, "actions": items})
	if err != nil {
		return nil, nil, err
	}
	doc := map[string]any{
		"format": BrowserSessionFormat, "session_id": sessionID, "run_id": runID, "head_anchor": head,
		"action_count": len(records), "genesis": genesis, "anchors": anchors, "action_log": ContentHash(log),
		"terminal_state": state, "reason_code": reason, "adapter": adapter, "worker_id": workerID,
	}
	if fault != nil {
		doc["fault"] = fault
	}
	if refusal != nil {
		doc["refusal"] = refusal
	}
	if final != nil {
		doc["final_observation"] = map[string]any{"screenshot_hash": final.ScreenshotHash, "dom_digest": final.DOMDigest, "observation_hash": final.ObservationHash}
	}
	return doc, log, nil
}

// Run drives a whole session: observe, ask the agent, record, perform, until the agent is done or
// something fails; the end is always published (Finish). The driver is closed before it returns.
func (s *ComputerUseSession) Run(ctx context.Context, agent ExternalAgent, driver BrowserDriver) (*SessionOutcome, error) {
	cause, phase := s.loop(ctx, agent, driver)
	_ = driver.Close() // closing a broken browser must not mask how the session ended
	return s.Finish(ctx, cause, phase)
}

func (s *ComputerUseSession) loop(ctx context.Context, agent ExternalAgent, driver BrowserDriver) (error, string) {
	for {
		frame, err := driver.Observe(ctx)
		if err != nil {
			return asDriverError(err, FaultObserveFailed), "observe"
		}
		pending := s.Observe(frame)
		proposed, err := agent.NextAction(ctx, pending.View())
		if err != nil {
			return asDriverError(err, FaultAgentFailed), "agent"
		}
		if proposed == nil {
			if err := s.RecordFinal(ctx, pending); err != nil {
				return err, "final"
			}
			return nil, ""
		}
		if _, err := s.Record(ctx, pending, *proposed); err != nil {
			return err, "record"
		}
		if err := driver.Perform(ctx, *proposed); err != nil {
			return asDriverError(err, FaultActionFailed), "perform"
		}
	}
}

func asDriverError(err error, fault string) error {
	var driver *DriverError
	if errors.As(err, &driver) {
		return err
	}
	return &DriverError{Fault: fault, Msg: fmt.Sprintf("%s: %T", strings.ToLower(fault), err)} // the type only: a message may quote a value
}
