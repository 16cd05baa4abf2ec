package bernstein

import (
	"bytes"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"
)

// Avro single-object encoding for every record on bernstein's topics:
// C3 01 + the 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing
// Canonical Form + the Avro binary body. The schemas are the repository's schemas/avro/*.avsc,
// copied into schemas/ and embedded (a test fails when a copy differs from the repository's).

//go:embed schemas/*.avsc
var schemaFiles embed.FS

// Schema names are the .avsc file stems.
const (
	SchemaActivitySubmissionV3 = "ActivitySubmission.v3"
	SchemaRunCloseV2           = "RunClose.v2"
	SchemaJournalEntryV3       = "JournalEntry.v3"
	SchemaRefusal              = "Refusal.v2" // what the scheduler writes on P.activity.refusals since v2 (v1 still decodes)
)

// Magic is the Avro single-object marker.
var Magic = []byte{0xc3, 0x01}

// HeaderSize is the marker plus the fingerprint.
const HeaderSize = 10

// wireAPI writes every array as ONE block with a positive item count and no block byte size,
// then the 0 terminator: the form fastavro (and so the scheduler and the vectors) writes. hamba's
// default would split arrays into blocks of 100 with negative counts and byte sizes, which decodes
// to the same record but is other bytes, so a re-encode check would fail.
var wireAPI = avro.Config{
	DisableBlockSizeHeader: true,
	BlockLength:            math.MaxInt32,
	MaxByteSliceSize:       8 << 20,
}.Freeze()

// Schema is one versioned schema: its name, Parsing Canonical Form, fingerprint and parsed form.
type Schema struct {
	Name          string
	CanonicalForm string
	Fingerprint   [8]byte // CRC-64-AVRO of the canonical form, little-endian
	Parsed        avro.Schema
}

// Header is the single-object header of records written with this schema.
func (s *Schema) Header() []byte {
	return append(append([]byte{}, Magic...), s.Fingerprint[:]...)
}

// Codec encodes and decodes single-object records for a fixed set of schemas.
type Codec struct {
	byName        map[string]*Schema
	byFingerprint map[[8]byte]*Schema
}

var (
	defaultCodec     *Codec
	defaultCodecErr  error
	defaultCodecOnce sync.Once
)

// DefaultCodec is the codec over the embedded schemas.
func DefaultCodec() (*Codec, error) {
	defaultCodecOnce.Do(func() { defaultCodec, defaultCodecErr = NewCodec(schemaFiles, "schemas") })
	return defaultCodec, defaultCodecErr
}

// NewCodec parses every *.avsc file of dir in fsys. Each file is a complete contract on its own:
// its nested named types are parsed with a fresh name table.
func NewCodec(fsys fs.FS, dir string) (*Codec, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("cannot read schemas: %v", err)}
	}
	c := &Codec{byName: map[string]*Schema{}, byFingerprint: map[[8]byte]*Schema{}}
	for _, entry := range entries {
		if entry.IsDir() || !strings.HasSuffix(entry.Name(), ".avsc") {
			continue
		}
		text, err := fs.ReadFile(fsys, dir+"/"+entry.Name())
		if err != nil {
			return nil, &ConfigError{Msg: fmt.Sprintf("cannot read schema %s: %v", entry.Name(), err)}
		}
		parsed, err := avro.ParseBytesWithCache(text, "", &avro.SchemaCache{})
		if err != nil {
			return nil, &ConfigError{Msg: fmt.Sprintf("schema %s does not parse: %v", entry.Name(), err)}
		}
		fp, err := parsed.FingerprintUsing(avro.CRC64AvroLE)
		if err != nil {
			return nil, &ConfigError{Msg: fmt.Sprintf("schema %s: %v", entry.Name(), err)}
		}
		s := &Schema{Name: strings.TrimSuffix(entry.Name(), ".avsc"), CanonicalForm: parsed.String(), Parsed: parsed}
		copy(s.Fingerprint[:], fp)
		if other, dup := c.byFingerprint[s.Fingerprint]; dup {
			return nil, &ConfigError{Msg: fmt.Sprintf("schemas %s and %s have the same fingerprint", other.Name, s.Name)}
		}
		c.byName[s.Name] = s
		c.byFingerprint[s.Fingerprint] = s
	}
	return c, nil
}

// Schema returns the schema called name.
func (c *Codec) Schema(name string) (*Schema, error) {
	s, ok := c.byName[name]
	if !ok {
		return nil, &EncodeError{Schema: name, Err: fmt.Errorf("no schema named %q; known: %s", name, strings.Join(c.Names(), ", "))}
	}
	return s, nil
}

// Names lists every schema name, sorted.
func (c *Codec) Names() []string {
	names := make([]string, 0, len(c.byName))
	for n := range c.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Encode single-object encodes record with the schema name. record is a struct with avro tags
// (ActivitySubmission, RunClose) or a map[string]any holding Go values of the schema's types
// (string, []byte, int32/int for int, int64 for long, bool, []any, map[string]any; a ["null", T]
// union as nil or map[string]any{"<T>": value}).
func (c *Codec) Encode(name string, record any) ([]byte, error) {
	s, err := c.Schema(name)
	if err != nil {
		return nil, err
	}
	body, err := wireAPI.Marshal(s.Parsed, record)
	if err != nil {
		return nil, &EncodeError{Schema: name, Err: err}
	}
	return append(s.Header(), body...), nil
}

// SchemaOf is the schema named by the header of data.
func (c *Codec) SchemaOf(data []byte) (*Schema, error) {
	if len(data) < HeaderSize || !bytes.Equal(data[:2], Magic) {
		shown := data
		if len(shown) > 12 {
			shown = shown[:12]
		}
		return nil, &DecodeError{Kind: CodeNotSingleObject, Msg: fmt.Sprintf(
			"value is not an Avro single-object record (expected it to start with c301, got %q, %d bytes)", hex.EncodeToString(shown), len(data))}
	}
	var fp [8]byte
	copy(fp[:], data[2:HeaderSize])
	s, ok := c.byFingerprint[fp]
	if !ok {
		return nil, &DecodeError{Kind: CodeUnknownFingerprint, Msg: fmt.Sprintf(
			"value names schema fingerprint %s which is not one of our schemas", hex.EncodeToString(fp[:]))}
	}
	return s, nil
}

// Decode decodes a single-object record into out (a pointer to a tagged struct or to any, which
// then holds a map[string]any). The body must be exactly the record's canonical encoding: bytes
// after it, a truncated body or a non-minimal number are a DecodeError.
func (c *Codec) Decode(data []byte, out any) (*Schema, error) {
	s, err := c.SchemaOf(data)
	if err != nil {
		return nil, err
	}
	body := data[HeaderSize:]
	if err := wireAPI.Unmarshal(s.Parsed, body, out); err != nil {
		return s, &DecodeError{Kind: CodeTruncatedBody, Msg: fmt.Sprintf("%s body is truncated or malformed: %v", s.Name, err)}
	}
	again, err := wireAPI.Marshal(s.Parsed, derefAny(out))
	if err != nil || !bytes.Equal(again, body) {
		return s, &DecodeError{Kind: CodeTruncatedBody, Msg: fmt.Sprintf("%s body is truncated, malformed or has trailing bytes", s.Name)}
	}
	return s, nil
}

func derefAny(out any) any {
	if p, ok := out.(*any); ok {
		return *p
	}
	return out
}
