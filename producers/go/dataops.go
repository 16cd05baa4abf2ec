package bernstein

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// Data and ops activities (docs/dataops.md): signed inputs, a plan derived from all of them before
// any effect, signed outputs, and a signed bernstein.dataops.receipt/v1 as the artifact. The
// scheduler refuses a receipt or refusal that breaks the structure, the plan projection or the
// plan-before-effect order (DATAOPS_*); this builder cannot produce one.

// Data/ops document formats.
const (
	DataOpsReceiptFormat = "bernstein.dataops.receipt/v1"
	DataOpsRefusalFormat = "bernstein.dataops.refusal/v1"
)

type dataOpsItem struct {
	role        string
	index       int
	ref         string
	contentHash string
	size        int64
	signature   string
}

func (i dataOpsItem) document() map[string]any {
	return map[string]any{"role": i.role, "index": i.index, "ref": i.ref, "content_hash": i.contentHash, "signature": i.signature}
}

// DataOpsActivity records one data or ops activity in phase order:
// AddInput* -> Plan (once) -> AddOutput* -> Finish, or Refused at any point. A call out of order is
// refused (EFFECT_BEFORE_PLAN, INPUT_AFTER_PLAN, PLAN_ALREADY_DERIVED, NO_PLAN, ACTIVITY_FINISHED),
// stores and signs nothing, and sticks: Finish then returns it again; record the activity with Refused.
type DataOpsActivity struct {
	RunID, StageID, Kind string
	signer               *Signer
	inputs, outputs      []dataOpsItem
	blobs                [][]byte
	planHash             string
	steps                []string
	planned, finished    bool
	violation            *ActivityRejected
}

// NewDataOpsActivity starts a data ("data") or ops ("ops") activity signed by signer (the
// producer's own key: ProducerKeys.Signer).
func NewDataOpsActivity(runID, stageID, kind string, signer *Signer) (*DataOpsActivity, error) {
	if kind != KindData && kind != KindOps {
		return nil, &ActivityRejected{Reason: "UNKNOWN_KIND", Msg: fmt.Sprintf("a data/ops activity has kind data or ops, not %q", kind)}
	}
	if err := RequireValidIDs([2]string{"run_id", runID}, [2]string{"stage_id", stageID}); err != nil {
		return nil, err
	}
	return &DataOpsActivity{RunID: runID, StageID: stageID, Kind: kind, signer: signer}, nil
}

func (a *DataOpsActivity) refuse(code, msg string) error {
	err := &ActivityRejected{Reason: code, Msg: msg}
	if a.violation == nil {
		a.violation = err
	}
	return err
}

func (a *DataOpsActivity) sign(role string, index int, ref, contentHash string, planHash any) (string, error) {
	input, err := SigningInput(DomainDataOpsArtifact, map[string]any{
		"run_id": a.RunID, "stage_id": a.StageID, "kind": a.Kind, "role": role, "index": index,
		"ref": ref, "content_hash": contentHash, "plan_hash": planHash,
	})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(a.signer.Sign(input)), nil
}

// AddInput signs one input (its bytes are returned by Blobs, to be stored before publishing).
func (a *DataOpsActivity) AddInput(ref string, data []byte) error {
	if a.finished {
		return a.refuse("ACTIVITY_FINISHED", "the activity already produced its receipt or refusal")
	}
	if a.planned {
		return a.refuse("INPUT_AFTER_PLAN", fmt.Sprintf("inputs are frozen once the plan is derived; input %s arrived after plan %s", pyRepr(ref), a.planHash))
	}
	item := dataOpsItem{role: "input", index: len(a.inputs), ref: ref, contentHash: ContentHash(data), size: int64(len(data))}
	sig, err := a.sign(item.role, item.index, ref, item.contentHash, nil)
	if err != nil {
		return err
	}
	item.signature = sig
	a.inputs = append(a.inputs, item)
	a.blobs = append(a.blobs, data)
	return nil
}

// Plan derives the plan from every input and the ordered steps, once; it returns the plan hash.
func (a *DataOpsActivity) Plan(steps []string) (string, error) {
	if a.finished {
		return "", a.refuse("ACTIVITY_FINISHED", "the activity already produced its receipt or refusal")
	}
	if a.planned {
		return "", a.refuse("PLAN_ALREADY_DERIVED", fmt.Sprintf("a plan was already derived (%s); an activity has exactly one plan", a.planHash))
	}
	hashes := make([]string, 0, len(a.inputs))
	for _, in := range a.inputs {
		hashes = append(hashes, in.contentHash)
	}
	h, err := PlanHash(hashes, steps)
	if err != nil {
		return "", err
	}
	a.planHash, a.steps, a.planned = h, append([]string{}, steps...), true
	return h, nil
}

// AddOutput signs one output (an effect): only after the plan.
func (a *DataOpsActivity) AddOutput(ref string, data []byte) error {
	if a.finished {
		return a.refuse("ACTIVITY_FINISHED", "the activity already produced its receipt or refusal")
	}
	if !a.planned {
		return a.refuse("EFFECT_BEFORE_PLAN", fmt.Sprintf("cannot record a side effect before the plan is derived (output %s)", pyRepr(ref)))
	}
	item := dataOpsItem{role: "output", index: len(a.outputs), ref: ref, contentHash: ContentHash(data), size: int64(len(data))}
	sig, err := a.sign(item.role, item.index, ref, item.contentHash, a.planHash)
	if err != nil {
		return err
	}
	item.signature = sig
	a.outputs = append(a.outputs, item)
	a.blobs = append(a.blobs, data)
	return nil
}

// Blobs are the input and output bytes: store them (Emitter.StoreBlobs) before publishing.
func (a *DataOpsActivity) Blobs() [][]byte { return a.blobs }

func (a *DataOpsActivity) observations() []Observation {
	var out []Observation
	for _, group := range [][]dataOpsItem{a.inputs, a.outputs} {
		for _, item := range group {
			out = append(out, Observation{Kind: item.role, Ref: item.ref, ContentHash: item.contentHash, Size: item.size})
		}
	}
	return out
}

// Finish signs the receipt and returns the completed result (its artifact is the receipt's
// canonical JSON; its observations the inputs then the outputs, in order).
func (a *DataOpsActivity) Finish() (*ActivityResult, error) {
	if a.violation != nil {
		return nil, a.violation
	}
	if a.finished {
		return nil, a.refuse("ACTIVITY_FINISHED", "the activity already produced its receipt or refusal")
	}
	if !a.planned {
		return nil, a.refuse("NO_PLAN", "no plan was derived: call Plan(steps) before Finish()")
	}
	hashes := make([]string, 0, len(a.inputs))
	for _, in := range a.inputs {
		hashes = append(hashes, in.contentHash)
	}
	planDoc, err := PlanDocument(hashes, a.steps)
	if err != nil {
		return nil, err
	}
	planDoc["plan_hash"] = a.planHash
	items := func(group []dataOpsItem) []any {
		out := []any{}
		for _, item := range group {
			out = append(out, item.document())
		}
		return out
	}
	body := map[string]any{
		"format": DataOpsReceiptFormat, "run_id": a.RunID, "stage_id": a.StageID, "kind": a.Kind,
		"plan": planDoc, "inputs": items(a.inputs), "outputs": items(a.outputs), "signer_key_id": a.signer.KeyID(),
	}
	input, err := SigningInput(DomainDataOpsReceipt, body)
	if err != nil {
		return nil, err
	}
	body["receipt_signature"] = base64.RawURLEncoding.EncodeToString(a.signer.Sign(input))
	a.finished = true
	return BuildResult(a.Kind, body, a.observations(), Outcome{TerminalState: Completed, ReasonCode: "ok"})
}

// Refused records the activity as refused: a bernstein.dataops.refusal/v1 artifact (unsigned; it
// claims no effect) with the code, the inputs so far and the plan hash (or null), terminal state
// refused and reason code = the code lower-cased. err's code is used when it is an ActivityRejected.
func (a *DataOpsActivity) Refused(code, message string) (*ActivityResult, error) {
	if code == "" && a.violation != nil {
		code, message = a.violation.Reason, a.violation.Msg
	}
	if code == "" {
		return nil, &ActivityRejected{Reason: "EMPTY_REASON_CODE", Msg: "a refusal needs a code"}
	}
	inputs := []any{}
	for _, in := range a.inputs {
		inputs = append(inputs, in.contentHash)
	}
	var planHash any
	if a.planned {
		planHash = a.planHash
	}
	doc := map[string]any{
		"format": DataOpsRefusalFormat, "run_id": a.RunID, "stage_id": a.StageID, "kind": a.Kind,
		"code": code, "message": message, "inputs": inputs, "plan_hash": planHash,
	}
	a.finished = true
	return BuildResult(a.Kind, doc, a.observations(), Outcome{TerminalState: Refused, ReasonCode: strings.ToLower(code)})
}

// pyRepr quotes s as Python's repr does for a plain string (single quotes unless s holds one), so
// that refusal messages read the same as the Python SDK's.
func pyRepr(s string) string {
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
