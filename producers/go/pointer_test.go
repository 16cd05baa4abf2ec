package bernstein

import (
	"errors"
	"strings"
	"testing"
)

func TestPointerTargetTextIsCanonicalAndParsesBack(t *testing.T) {
	done := "#done"
	cases := []struct {
		kind   string
		target PointerTarget
		text   string
	}{
		{"click", PointerTarget{Element: `internal:role=button[name="Go"i]`, At: &Point{412, 230}}, `{"at":[412,230],"element":"internal:role=button[name=\"Go\"i]"}`},
		{"hover", PointerTarget{Element: "", At: &Point{0, MaxCoordinate}}, `{"at":[0,100000],"element":""}`},
		{"drag", PointerTarget{Element: "#card", At: &Point{1, 2}, To: &Point{3, 4}, ToElement: &done}, `{"at":[1,2],"element":"#card","to":[3,4],"to_element":"#done"}`},
		{"drag", PointerTarget{Element: "#card", ToElement: &done}, `{"element":"#card","to_element":"#done"}`},
		{"type", PointerTarget{Element: "#code", Focused: true}, `{"element":"#code","focused":true}`},
	}
	for _, c := range cases {
		text, err := c.target.Text()
		if err != nil || text != c.text {
			t.Fatalf("%+v: got %s, %v; want %s", c.target, text, err, c.text)
		}
		parsed, err := ParsePointerTarget(text, c.kind)
		if err != nil {
			t.Fatalf("%s as %s: %v", text, c.kind, err)
		}
		if again, _ := parsed.Text(); again != text || parsed.Focused != c.target.Focused || (parsed.ToElement == nil) != (c.target.ToElement == nil) {
			t.Fatalf("%s parsed to %+v", text, parsed)
		}
		proposal := ProposedAction{Kind: c.kind, Target: text}
		if c.kind == "type" {
			proposal = Propose(c.kind, text, "Quarterly report")
		}
		if err := ValidateProposal(proposal, 0); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
	}
	if _, err := (PointerTarget{Element: "\xff", At: &Point{1, 2}}).Text(); CodeOf(err) != "E_CANONICALIZATION" {
		t.Fatalf("invalid UTF-8 got %v", err)
	}
}

func TestParsePointerTargetRefusesAnyOtherSpellingOrShape(t *testing.T) {
	for _, c := range []struct{ kind, text string }{
		{"click", `{"at": [1, 2], "element": "#a"}`},              // not canonical: spaces
		{"click", `{"element":"#a","at":[1,2]}`},                  // not canonical: key order
		{"click", `{"at":[1,2],"element":"\u0023a"}`},             // not canonical: an escape
		{"click", `{"at":[1,2],"element":"#a","x":1}`},            // unknown field
		{"click", `{"at":[1.0,2],"element":"#a"}`},                // not an integer
		{"click", `{"at":[true,2],"element":"#a"}`},               // a bool is no coordinate
		{"click", `{"at":[-1,2],"element":"#a"}`},                 // negative
		{"click", `{"at":[100001,2],"element":"#a"}`},             // too large
		{"click", `{"at":[1,2,3],"element":"#a"}`},                // not a pair
		{"click", `{"at":null,"element":"#a"}`},                   // null point
		{"click", `{"at":[1,2],"element":null}`},                  // element not a string
		{"click", `{"at":[1,2]}`},                                 // no element
		{"click", `{"element":"#a"}`},                             // no point
		{"click", `{"at":[1,2],"element":"\ud800"}`},              // lone surrogate
		{"click", `{#a`},                                          // not JSON
		{"click", `{"at":[1,2],"element":"#a"} `},                 // trailing space
		{"scroll", `{"element":"#a","focused":true}`},             // focused is for type
		{"type", `{"element":"#a","focused":false}`},              // focused only true
		{"type", `{"at":[1,2],"element":"#a"}`},                   // type acts on the focus
		{"drag", `{"at":[1,2],"element":"#a","to_element":"#b"}`}, // one point only
		{"drag", `{"at":[1,2],"element":"#a","to":[3,4]}`},        // no to_element
		{"hover", `{"at":[1,2],"element":"#a","to_element":"#b"}`},
		{"navigate", `{"at":[1,2],"element":"#a"}`}, // navigate takes no pointer target
	} {
		_, err := ParsePointerTarget(c.text, c.kind)
		var malformed *MalformedPointerTargetError
		if !errors.As(err, &malformed) || malformed.Code() != "E_MALFORMED_POINTER_TARGET" {
			t.Errorf("%s as %s: got %v, want a MalformedPointerTargetError", c.text, c.kind, err)
		}
		var invalid *InvalidActionError
		if err := ValidateProposal(Propose(c.kind, c.text, "x"), 3); !errors.As(err, &invalid) || invalid.Field != "target" || invalid.Index != 3 {
			t.Errorf("%s as %s: ValidateProposal got %v, want INVALID_ACTION on target", c.text, c.kind, err)
		}
	}
	err := ValidateProposal(ProposedAction{Kind: "drag", Target: "#a"}, 0)
	if CodeOf(err) != InvalidActionCode || !strings.Contains(err.Error(), "pointer target") {
		t.Fatalf("a drag to a selector: got %v", err)
	}
}
