package bernstein

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Pointer targets (the Python SDK's schemas/documents/pointer.py): where an action given in screen
// coordinates landed, written as the action's target.
//
// The computer-use tools of model APIs act at a point of the screen ("click at (412, 230)"), not on a
// selector. Before such an action is anchored, the driver resolves the point to the element under it,
// and the action's target records both, as the canonical JSON (RFC 8785) of one object:
//
//	{"at": [x, y], "element": "<selector of the element under the point>"}
//	    click, double_click, right_click, hover, scroll
//	{"at": [x0, y0], "element": "...", "to": [x1, y1], "to_element": "..."}
//	    drag (from a point to a point)
//	{"element": "<selector>", "to_element": "<selector>"}
//	    drag (from an element to an element)
//	{"element": "<selector of the focused element>", "focused": true}
//	    type (keyboard input goes to whatever has the focus)
//
// A target that starts with "{" is a pointer target: a selector or a URL never does. Element is ""
// when nothing is under the point. Coordinates are the screenshot's pixels (the viewport's CSS
// pixels): integers from 0 to MaxCoordinate. There is exactly one spelling of each target (the
// canonical bytes), so the same action anchors to the same bytes in every SDK; ParsePointerTarget
// therefore refuses any other spelling. browser.json's pointer_targets and invalid_proposals pin it.

// MaxCoordinate is the largest coordinate a pointer target may name (a screen is far smaller; a bound
// keeps the bytes bounded).
const MaxCoordinate = 100_000

// PointerKinds are the action kinds whose target may be a pointer target (a drag's must be).
var PointerKinds = []string{"click", "double_click", "drag", "hover", "right_click", "scroll", "type"}

var atKinds = []string{"click", "double_click", "hover", "right_click", "scroll"}

var pointerKeys = []string{"at", "element", "focused", "to", "to_element"}

// Point is a point of the screenshot, in its pixels.
type Point struct{ X, Y int }

// PointerTarget is where a pointer or keyboard action landed: a point and the element under it, or the
// focused element. Nil At, To and ToElement are absent from the text (ToElement is a pointer because ""
// is a target element too: nothing was under the end point).
type PointerTarget struct {
	Element   string
	At        *Point
	To        *Point
	ToElement *string
	Focused   bool
}

// Text is the target as the action records it: canonical JSON, keys in RFC 8785 order. It is the
// action's Target, so the same pointer action always anchors to the same bytes. It fails only for a
// string that is not valid UTF-8 (which has no canonical form); it checks no shape (ParsePointerTarget
// does, for a kind).
func (t PointerTarget) Text() (string, error) {
	document := map[string]any{"element": t.Element}
	if t.At != nil {
		document["at"] = []any{t.At.X, t.At.Y}
	}
	if t.To != nil {
		document["to"] = []any{t.To.X, t.To.Y}
	}
	if t.ToElement != nil {
		document["to_element"] = *t.ToElement
	}
	if t.Focused {
		document["focused"] = true
	}
	data, err := CanonicalJSON(document)
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// MalformedPointerTargetError is an action target that starts with "{" but is not a pointer target its
// kind allows. ValidateProposal turns it into an InvalidActionError on field "target".
type MalformedPointerTargetError struct{ Msg string }

func (e *MalformedPointerTargetError) Error() string { return e.Msg }
func (e *MalformedPointerTargetError) Code() string  { return "E_MALFORMED_POINTER_TARGET" }

// IsPointerTarget reports whether target is written as a pointer target (it starts with "{").
func IsPointerTarget(target string) bool { return strings.HasPrefix(target, "{") }

// ParsePointerTarget is the pointer target text of an action of kind. It accepts exactly what the
// Python reference accepts: only the known keys, element a string, to_element a string, focused only
// true, points two integers from 0 to MaxCoordinate, a shape kind takes, and text equal to its
// canonical spelling (so no two texts name the same target); anything else is a
// *MalformedPointerTargetError saying what is wrong.
func ParsePointerTarget(text, kind string) (PointerTarget, error) {
	bad := func(format string, args ...any) (PointerTarget, error) {
		return PointerTarget{}, &MalformedPointerTargetError{Msg: fmt.Sprintf(format, args...)}
	}
	if !slices.Contains(PointerKinds, kind) {
		return bad("a %s action takes no pointer target", kind)
	}
	value, err := ParseJSON([]byte(text))
	if err != nil {
		return bad("a target that starts with '{' must be a JSON object (a pointer target)")
	}
	document, isObject := value.(map[string]any)
	if !isObject {
		return bad("a pointer target must be a JSON object")
	}
	var unknown []string
	for k := range document {
		if !slices.Contains(pointerKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return bad("a pointer target has no field %q (only %s)", unknown[0], strings.Join(pointerKeys, ", "))
	}
	element, isString := document["element"].(string)
	if !isString {
		return bad("a pointer target names its element: 'element' must be a string")
	}
	parsed := PointerTarget{Element: element}
	if raw := document["to_element"]; raw != nil { // null stands for absent (and is then not canonical)
		s, isString := raw.(string)
		if !isString {
			return bad("'to_element' must be a string")
		}
		parsed.ToElement = &s
	}
	if focused, present := document["focused"]; present {
		if focused != true {
			return bad("'focused' is written only as true")
		}
		parsed.Focused = true
	}
	if parsed.At, err = pointerPoint(document, "at"); err != nil {
		return PointerTarget{}, err
	}
	if parsed.To, err = pointerPoint(document, "to"); err != nil {
		return PointerTarget{}, err
	}
	if err := requirePointerShape(parsed, kind); err != nil {
		return PointerTarget{}, err
	}
	if canonical, err := parsed.Text(); err != nil || canonical != text {
		return bad("a pointer target must be written in canonical JSON (RFC 8785: sorted keys, no spaces)")
	}
	return parsed, nil
}

func pointerPoint(document map[string]any, name string) (*Point, error) {
	value, present := document[name]
	if !present {
		return nil, nil
	}
	if value == nil {
		return nil, &MalformedPointerTargetError{Msg: fmt.Sprintf("%q must be a point [x, y], not null", name)}
	}
	items, isList := value.([]any)
	var xy [2]int
	valid := isList && len(items) == 2
	for i := 0; valid && i < 2; i++ {
		n, isNumber := items[i].(json.Number) // a bool is not a number here, as Python's check refuses it
		v, err := n.Int64()                   // "1.5", "1e2" and "1.0" are not integers
		valid = isNumber && err == nil && v >= 0 && v <= MaxCoordinate
		xy[i] = int(v)
	}
	if !valid {
		return nil, &MalformedPointerTargetError{Msg: fmt.Sprintf("%q must be a point [x, y] of integers from 0 to %d", name, MaxCoordinate)}
	}
	return &Point{X: xy[0], Y: xy[1]}, nil
}

func requirePointerShape(t PointerTarget, kind string) error {
	bad := func(format string, args ...any) error {
		return &MalformedPointerTargetError{Msg: fmt.Sprintf(format, args...)}
	}
	if kind == "type" {
		if !t.Focused || t.At != nil || t.To != nil || t.ToElement != nil {
			return bad(`a type action's pointer target is {"element": ..., "focused": true}`)
		}
		return nil
	}
	if t.Focused {
		return bad("a %s action does not act on the focused element", kind)
	}
	if kind == "drag" {
		if t.ToElement == nil || (t.At == nil) != (t.To == nil) {
			return bad("a drag's pointer target names both ends: 'element' and 'to_element', with 'at' and 'to' or neither")
		}
		return nil
	}
	if slices.Contains(atKinds, kind) && (t.At == nil || t.To != nil || t.ToElement != nil) {
		return bad(`a %s action's pointer target is {"at": [x, y], "element": ...}`, kind)
	}
	return nil
}
