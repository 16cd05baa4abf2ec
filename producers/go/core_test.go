package bernstein

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The embedded schemas are the repository's: a copy that differs fails here.
func TestEmbeddedSchemasEqualTheRepository(t *testing.T) {
	repo, err := filepath.Glob("../../schemas/avro/*.avsc")
	if err != nil || len(repo) == 0 {
		t.Fatalf("no schemas in ../../schemas/avro: %v", err)
	}
	ours, _ := filepath.Glob("schemas/*.avsc")
	if len(ours) != len(repo) {
		t.Fatalf("producers/go/schemas has %d schemas, the repository %d: copy schemas/avro/*.avsc", len(ours), len(repo))
	}
	for _, path := range repo {
		want, _ := os.ReadFile(path)
		got, err := schemaFiles.ReadFile("schemas/" + filepath.Base(path))
		if err != nil {
			t.Errorf("%s is not embedded: %v", filepath.Base(path), err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("producers/go/schemas/%s differs from schemas/avro/%s: copy it again", filepath.Base(path), filepath.Base(path))
		}
	}
}

func TestCanonicalJSONKeyOrderIsUTF16(t *testing.T) {
	// U+1F600 (surrogates D83D DE00) sorts before U+E000 in UTF-16, after it in code points.
	got, err := CanonicalJSON(map[string]any{"\U0001F600": 1, "\ue000": 2, "a": 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"a\":3,\"\U0001F600\":1,\"\ue000\":2}"; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestCanonicalJSONRefusesFloatsAndLoneSurrogates(t *testing.T) {
	for _, v := range []any{1.5, float32(1), map[string]any{"a": []any{2.0}}, "\xff"} {
		if _, err := CanonicalJSON(v); CodeOf(err) != "E_CANONICALIZATION" {
			t.Errorf("%#v: got %v, want a CanonicalizationError", v, err)
		}
	}
	for _, text := range []string{`1.0`, `1e3`, `9007199254740992`, `"\ud800"`, `{"a":"\udc00x"}`, `"\ud83d\u0041"`} {
		if _, err := CanonicalizeJSONText([]byte(text)); CodeOf(err) != "E_CANONICALIZATION" {
			t.Errorf("%s: got %v, want a CanonicalizationError", text, err)
		}
	}
	got, err := CanonicalizeJSONText([]byte(`{"b":"\ud83d\ude00","a":[-0,9007199254740991,"\u007f\u001f"]}`))
	if err != nil || string(got) != "{\"a\":[0,9007199254740991,\"\x7f\\u001f\"],\"b\":\"\U0001F600\"}" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestMurmur2MatchesJavaUtilsMurmur2(t *testing.T) {
	// Values of Kafka's org.apache.kafka.common.utils.Utils.murmur2 (its UtilsTest).
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for key, want := range cases {
		if got := Murmur2([]byte(key)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestDecodeRefusesTrailingAndTruncatedBytes(t *testing.T) {
	signer, _ := NewSigner(bytes.Repeat([]byte{7}, 32))
	rc := &RunClose{SubmissionID: "s1", RunID: "run-1", Producer: Producer{ID: "p", SDK: SDK}, OccurredAtMS: 5}
	if err := rc.Sign(signer); err != nil {
		t.Fatal(err)
	}
	value, err := rc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := DefaultCodec()
	var back RunClose
	if s, err := c.Decode(value, &back); err != nil || s.Name != SchemaRunCloseV2 || back.RunID != "run-1" {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	for name, bad := range map[string][]byte{
		"trailing":  append(append([]byte{}, value...), 0),
		"truncated": value[:len(value)-3],
	} {
		var v any
		if _, err := c.Decode(bad, &v); CodeOf(err) != CodeTruncatedBody {
			t.Errorf("%s: got %v, want %s", name, err, CodeTruncatedBody)
		}
	}
	var v any
	if _, err := c.Decode([]byte("junk-not-avro"), &v); CodeOf(err) != CodeNotSingleObject {
		t.Errorf("got %v", err)
	}
	unknown, _ := hex.DecodeString("c3010000000000000000")
	if _, err := c.Decode(unknown, &v); CodeOf(err) != CodeUnknownFingerprint {
		t.Errorf("got %v", err)
	}
	var target *DecodeError
	if _, err := c.Decode(unknown, &v); !errors.As(err, &target) {
		t.Errorf("not a *DecodeError: %T", err)
	}
}
