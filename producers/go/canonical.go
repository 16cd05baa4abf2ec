package bernstein

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Every byte string the project hashes, MACs or signs, as schemas/canonical.py builds it:
// RFC 8785 canonical JSON, "sha256:<hex>" digests and DSSE PAE framing per domain.

// MaxJSONDepth is how deeply a hashed document may nest arrays and objects ({} and [] are depth 1).
const MaxJSONDepth = 64

const maxSafeInt = 1<<53 - 1

// Domain-separation type strings for PAE (schemas/canonical.py); appended to, never changed.
const (
	DomainJournalGenesis      = "bernstein/journal-genesis/v1"
	DomainJournalEntry        = "bernstein/journal-entry/v1"
	DomainAuditGenesis        = "bernstein/audit-genesis/v1"
	DomainAuditEntry          = "bernstein/audit-entry/v1"
	DomainRunSeal             = "bernstein/run-seal/v1"
	DomainHMACKeyID           = "bernstein/hmac-key-id/v1"
	DomainDataOpsArtifact     = "bernstein/dataops-artifact/v1"
	DomainDataOpsReceipt      = "bernstein/dataops-receipt/v1"
	DomainComputerUseGenesis  = "bernstein/computer-use-genesis/v1"
	DomainTypedValue          = "bernstein/typed-value/v1"
	DomainLineageEntry        = "bernstein/lineage-entry/v1"
	DomainAuditRecordV2       = "bernstein/audit-record/v2"
	DomainCheckpointGenesis   = "bernstein/checkpoint-genesis/v1"
	DomainPartitionCheckpoint = "bernstein/partition-checkpoint/v1"
	DomainSubmission          = "bernstein/submission/v1"
)

const (
	digestPrefix = "sha256:"
	macPrefix    = "hmac-sha256:"
)

var (
	digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	macRE    = regexp.MustCompile(`^hmac-sha256:[0-9a-f]{64}$`)
)

// CanonicalJSON returns the RFC 8785 (JCS) canonical JSON bytes of v.
//
// Accepted: nil, bool, string (valid UTF-8), Go integers and integer json.Number values within
// +/-(2^53-1), slices/arrays and maps with string keys of those (any nesting up to MaxJSONDepth),
// and json.RawMessage (parsed first). Floats (float32, float64, a json.Number with a fraction or
// exponent) are refused, as are out-of-range integers and invalid UTF-8: a hashed document must not
// depend on a float printer. Object keys sort by their UTF-16 code units.
func CanonicalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeCanonical(&buf, reflect.ValueOf(v), 0); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// CanonicalizeJSONText parses JSON text (numbers kept exact) and returns its canonical form.
func CanonicalizeJSONText(text []byte) ([]byte, error) {
	v, err := ParseJSON(text)
	if err != nil {
		return nil, err
	}
	return CanonicalJSON(v)
}

// ParseJSON parses one JSON value with numbers as json.Number, refusing trailing data and
// escaped lone surrogates (which Go would silently turn into U+FFFD; Python keeps them and
// canonical JSON then refuses them).
func ParseJSON(text []byte) (any, error) {
	if hasLoneSurrogateEscape(text) {
		return nil, &CanonicalizationError{Msg: "a string holds a lone UTF-16 surrogate escape; it has no canonical JSON form"}
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &CanonicalizationError{Msg: "not JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, &CanonicalizationError{Msg: "not JSON: data after the value"}
	}
	var rest bytes.Buffer
	if _, err := rest.ReadFrom(dec.Buffered()); err == nil && len(bytes.TrimSpace(rest.Bytes())) != 0 {
		return nil, &CanonicalizationError{Msg: "not JSON: data after the value"}
	}
	return v, nil
}

// hasLoneSurrogateEscape reports a \uD800-\uDFFF escape inside a JSON string that is not a
// high surrogate immediately followed by a low one.
func hasLoneSurrogateEscape(text []byte) bool {
	if !bytes.Contains(text, []byte(`\u`)) && !bytes.Contains(text, []byte(`\U`)) {
		return false
	}
	inString := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(text) && text[i+1] == 'u' && i+5 < len(text) {
				r, err := strconv.ParseUint(string(text[i+2:i+6]), 16, 32)
				if err == nil && r >= 0xD800 && r <= 0xDFFF {
					if r >= 0xDC00 {
						return true
					}
					// a high surrogate must be followed by \u<low>
					if i+11 >= len(text) || text[i+6] != '\\' || text[i+7] != 'u' {
						return true
					}
					low, err := strconv.ParseUint(string(text[i+8:i+12]), 16, 32)
					if err != nil || low < 0xDC00 || low > 0xDFFF {
						return true
					}
					i += 11
					continue
				}
				i += 5
				continue
			}
			i++
		}
	}
	return false
}

func writeCanonical(buf *bytes.Buffer, v reflect.Value, depth int) error {
	if !v.IsValid() {
		buf.WriteString("null")
		return nil
	}
	if v.Type() == reflect.TypeFor[json.Number]() {
		return writeNumber(buf, v.Interface().(json.Number))
	}
	if v.Type() == reflect.TypeFor[json.RawMessage]() {
		parsed, err := ParseJSON(v.Bytes())
		if err != nil {
			return err
		}
		return writeCanonical(buf, reflect.ValueOf(parsed), depth)
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			buf.WriteString("null")
			return nil
		}
		return writeCanonical(buf, v.Elem(), depth)
	case reflect.Bool:
		if v.Bool() {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
		return nil
	case reflect.String:
		return writeString(buf, v.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := v.Int()
		if n > maxSafeInt || n < -maxSafeInt {
			return &CanonicalizationError{Msg: fmt.Sprintf("integer %d is outside the RFC 8785 safe range +/-(2**53-1)", n)}
		}
		buf.WriteString(strconv.FormatInt(n, 10))
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n := v.Uint()
		if n > maxSafeInt {
			return &CanonicalizationError{Msg: fmt.Sprintf("integer %d is outside the RFC 8785 safe range +/-(2**53-1)", n)}
		}
		buf.WriteString(strconv.FormatUint(n, 10))
		return nil
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		return &CanonicalizationError{Msg: fmt.Sprintf("floats are not allowed in hashed documents (got %s); use an integer or a string", formatFloat(f))}
	case reflect.Slice, reflect.Array:
		// A nil slice is the empty array (Go code builds lists with append).
		if depth >= MaxJSONDepth {
			return &CanonicalizationError{Msg: fmt.Sprintf("value nests arrays and objects deeper than %d levels", MaxJSONDepth)}
		}
		buf.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, v.Index(i), depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return &CanonicalizationError{Msg: fmt.Sprintf("object keys must be strings (got %s)", v.Type().Key())}
		}
		if depth >= MaxJSONDepth {
			return &CanonicalizationError{Msg: fmt.Sprintf("value nests arrays and objects deeper than %d levels", MaxJSONDepth)}
		}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		sortUTF16(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeString(buf, k); err != nil {
				return err
			}
			buf.WriteByte(':')
			if err := writeCanonical(buf, v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key())), depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
		return nil
	}
	return &CanonicalizationError{Msg: fmt.Sprintf("type %s has no canonical JSON form", v.Type())}
}

func formatFloat(f float64) string {
	if math.IsNaN(f) {
		return "nan"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func writeNumber(buf *bytes.Buffer, n json.Number) error {
	s := string(n)
	if strings.ContainsAny(s, ".eE") {
		return &CanonicalizationError{Msg: fmt.Sprintf("floats are not allowed in hashed documents (got %s); use an integer or a string", s)}
	}
	i, err := strconv.ParseInt(s, 10, 64)
	if err != nil || i > maxSafeInt || i < -maxSafeInt {
		return &CanonicalizationError{Msg: fmt.Sprintf("integer %s is outside the RFC 8785 safe range +/-(2**53-1)", s)}
	}
	buf.WriteString(strconv.FormatInt(i, 10))
	return nil
}

func sortUTF16(keys []string) {
	slices.SortFunc(keys, func(a, b string) int {
		return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
	})
}

const hexDigits = "0123456789abcdef"

func writeString(buf *bytes.Buffer, s string) error {
	if !utf8.ValidString(s) {
		return &CanonicalizationError{Msg: "a string is not valid UTF-8 (or holds a lone surrogate); it has no canonical JSON form"}
	}
	buf.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			buf.WriteString(`\"`)
		case c == '\\':
			buf.WriteString(`\\`)
		case c == '\b':
			buf.WriteString(`\b`)
		case c == '\t':
			buf.WriteString(`\t`)
		case c == '\n':
			buf.WriteString(`\n`)
		case c == '\f':
			buf.WriteString(`\f`)
		case c == '\r':
			buf.WriteString(`\r`)
		case c < 0x20:
			buf.WriteString(`\u00`)
			buf.WriteByte(hexDigits[c>>4])
			buf.WriteByte(hexDigits[c&0xf])
		default:
			buf.WriteByte(c)
		}
	}
	buf.WriteByte('"')
	return nil
}

// --- digests --------------------------------------------------------------

// SHA256Digest is "sha256:<hex>" of raw bytes: the content hash of a blob or observation.
func SHA256Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return digestPrefix + hex.EncodeToString(sum[:])
}

// ContentHash is the content hash of an observation's bytes (the ref is never hashed).
func ContentHash(data []byte) string { return SHA256Digest(data) }

// ArtifactHash is the hash of an artifact's bytes (structured artifacts are canonical JSON first).
func ArtifactHash(artifact []byte) string { return SHA256Digest(artifact) }

// IsDigest reports whether s is exactly "sha256:" plus 64 lowercase hex digits.
func IsDigest(s string) bool { return digestRE.MatchString(s) }

// IsMAC reports whether s is exactly "hmac-sha256:" plus 64 lowercase hex digits.
func IsMAC(s string) bool { return macRE.MatchString(s) }

// EvidenceSetHash is sha256 of the canonical JSON array of the sorted, de-duplicated content hashes.
func EvidenceSetHash(contentHashes []string) (string, error) {
	unique := map[string]struct{}{}
	for _, h := range contentHashes {
		if !IsDigest(h) {
			return "", &MalformedDigestError{Field: "observation content_hash", Value: h}
		}
		unique[h] = struct{}{}
	}
	members := make([]string, 0, len(unique))
	for h := range unique {
		members = append(members, h)
	}
	slices.Sort(members)
	if len(members) == 0 {
		return SHA256Digest([]byte("[]")), nil
	}
	return SHA256Digest([]byte(`["` + strings.Join(members, `","`) + `"]`)), nil
}

// DocumentHash is "sha256:" of a document's canonical JSON bytes.
func DocumentHash(document any) (string, error) {
	data, err := CanonicalJSON(document)
	if err != nil {
		return "", err
	}
	return SHA256Digest(data), nil
}

// --- PAE and chain steps ----------------------------------------------------

// PAE is the DSSE v1 pre-authentication encoding of body under payloadType.
func PAE(payloadType string, body []byte) []byte {
	out := fmt.Appendf(nil, "DSSEv1 %d %s %d ", len(payloadType), payloadType, len(body))
	return append(out, body...)
}

// SigningInput is PAE(domain, canonical JSON of document): the bytes signed for a structured document.
func SigningInput(domain string, document any) ([]byte, error) {
	data, err := CanonicalJSON(document)
	if err != nil {
		return nil, err
	}
	return PAE(domain, data), nil
}

func mac(key, message []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write(message)
	return macPrefix + hex.EncodeToString(h.Sum(nil))
}

// JournalGenesis is the prev_hash of a run's first journal entry.
func JournalGenesis(runID string) string {
	return SHA256Digest(PAE(DomainJournalGenesis, []byte(runID)))
}

// JournalEntryHash is the chain hash of one journal entry payload.
func JournalEntryHash(payload []byte) string { return SHA256Digest(PAE(DomainJournalEntry, payload)) }

// AuditGenesis is the prev_mac of the first audit record of an input partition's chain.
func AuditGenesis(key []byte, partition int) string {
	return mac(key, PAE(DomainAuditGenesis, []byte(strconv.Itoa(partition))))
}

// AuditMAC is the MAC of an AuditRecord.v1 payload.
func AuditMAC(key, payload []byte) string { return mac(key, PAE(DomainAuditEntry, payload)) }

// AuditRecordMAC is the MAC of an AuditRecord.v2: HMAC over PAE(audit-record/v2, PAE(key_id, payload)).
func AuditRecordMAC(key []byte, keyID string, payload []byte) string {
	return mac(key, AuditRecordMACInput(keyID, payload))
}

// AuditRecordMACInput is the exact bytes an AuditRecord.v2 MAC covers.
func AuditRecordMACInput(keyID string, payload []byte) []byte {
	return PAE(DomainAuditRecordV2, PAE(keyID, payload))
}

// SealSigningInput is the exact bytes an Ed25519 run seal signs.
func SealSigningInput(payload []byte) []byte { return PAE(DomainRunSeal, payload) }

// CheckpointGenesis is the prev_hash of an input partition's first checkpoint.
func CheckpointGenesis(partition int) string {
	return SHA256Digest(PAE(DomainCheckpointGenesis, []byte(strconv.Itoa(partition))))
}

// CheckpointSigningInput is the exact bytes a partition checkpoint's signature covers.
func CheckpointSigningInput(payload []byte) []byte { return PAE(DomainPartitionCheckpoint, payload) }

// CheckpointHash is a checkpoint's identity (the next checkpoint's prev_hash).
func CheckpointHash(payload []byte) string { return SHA256Digest(CheckpointSigningInput(payload)) }

// PublicKeyID is the key id of an Ed25519 public key: the digest of its 32 raw bytes.
func PublicKeyID(raw []byte) (string, error) {
	if len(raw) != 32 {
		return "", &CanonicalizationError{Msg: fmt.Sprintf("an Ed25519 public key has 32 bytes, got %d", len(raw))}
	}
	return SHA256Digest(raw), nil
}

// HMACKeyID is the key id of an HMAC key: a domain-separated digest.
func HMACKeyID(key []byte) string { return SHA256Digest(PAE(DomainHMACKeyID, key)) }

// --- modalities --------------------------------------------------------------

// PlanDocument is the data/ops plan projection: sorted unique input hashes and the ordered steps.
func PlanDocument(inputHashes []string, steps []string) (map[string]any, error) {
	unique := map[string]struct{}{}
	for _, h := range inputHashes {
		if !IsDigest(h) {
			return nil, &MalformedDigestError{Field: "input content_hash", Value: h}
		}
		unique[h] = struct{}{}
	}
	sorted := make([]string, 0, len(unique))
	for h := range unique {
		sorted = append(sorted, h)
	}
	slices.Sort(sorted)
	return map[string]any{"input_hashes": sorted, "steps": append([]string{}, steps...)}, nil
}

// PlanHash is sha256 of the canonical plan projection.
func PlanHash(inputHashes []string, steps []string) (string, error) {
	doc, err := PlanDocument(inputHashes, steps)
	if err != nil {
		return "", err
	}
	return DocumentHash(doc)
}

// ObservationHash is sha256(screenshot bytes || dom digest string) of a computer-use observation.
func ObservationHash(screenshot []byte, domDigest string) (string, error) {
	if !IsDigest(domDigest) {
		return "", &MalformedDigestError{Field: "dom_digest", Value: domDigest}
	}
	return SHA256Digest(append(append([]byte{}, screenshot...), domDigest...)), nil
}

// ComputerUseGenesis is the prev_anchor of a session's first action.
func ComputerUseGenesis(runID, sessionID string) (string, error) {
	data, err := CanonicalJSON([]string{runID, sessionID})
	if err != nil {
		return "", err
	}
	return SHA256Digest(PAE(DomainComputerUseGenesis, data)), nil
}

// ActionAnchor is sha256(canonical({prev_anchor, observation_hash, action})).
func ActionAnchor(prevAnchor, observationHash string, action map[string]any) (string, error) {
	return DocumentHash(map[string]any{"prev_anchor": prevAnchor, "observation_hash": observationHash, "action": action})
}

// LineageSigningInput is the exact bytes a lineage entry's HMAC and signature cover.
func LineageSigningInput(entry []byte) []byte { return PAE(DomainLineageEntry, entry) }

// LineageHMAC is the HMAC envelope of a lineage entry under the producer's lineage key.
func LineageHMAC(key, entry []byte) string { return mac(key, LineageSigningInput(entry)) }

// TypedValueDigest is the keyed digest of a typed form value.
func TypedValueDigest(key []byte, value string) string {
	return mac(key, PAE(DomainTypedValue, []byte(value)))
}
