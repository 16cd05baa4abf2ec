package conformance

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	tlogformat "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"golang.org/x/mod/sumdb/note"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// --- tlog.json activity_proofs ----------------------------------------------------------------
//
// C2SP tlog-proofs of one activity (bernstein activity prove), checked here as an auditor without
// our Python would: a small strict parser of the tlog-proof text, the checkpoint note opened with
// golang.org/x/mod/sumdb/note (a vkey from the note's origin and each pinned seal key) and parsed
// with github.com/transparency-dev/formats/log.ParseCheckpoint, the extra JournalRecord decoded
// with the SDK's codec, its entry hash and leaf recomputed (PAE, canonical JSON), the inclusion
// path verified with github.com/transparency-dev/merkle/proof.VerifyInclusion and the RFC 6962
// hasher, and the stage's producer signature with the SDK's statement. Every check names the
// problem code verify_proof gives (verifier/proof.py); an accepted proof has none, a refused one
// exactly the stated ones.

const (
	tlogProofHeader   = "c2sp.org/tlog-proof@v1"
	maxTlogProofBytes = 4 * 1024 * 1024
)

type tlogProof struct {
	record []byte
	index  uint64
	path   [][]byte
	note   []byte
}

// base64Strict decodes standard padded base64 only in its canonical spelling.
func base64Strict(text string) ([]byte, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(text)
	if err == nil && base64.StdEncoding.EncodeToString(b) != text {
		err = errors.New("not canonical base64")
	}
	return b, err
}

// parseTlogProof parses c2sp.org/tlog-proof@v1 text: the header, "extra <base64>", "index <decimal>",
// base64 hashes of 32 bytes (at most 64), an empty line, then the note. Nothing is verified.
func parseTlogProof(text string) (*tlogProof, error) {
	if len(text) > maxTlogProofBytes || !utf8.ValidString(text) {
		return nil, errors.New("not UTF-8 text of at most 4 MiB")
	}
	head, signed, ok := strings.Cut(text, "\n\n")
	if !ok {
		return nil, errors.New("no empty line before the checkpoint")
	}
	lines := strings.Split(head, "\n")
	if lines[0] != tlogProofHeader {
		return nil, fmt.Errorf("the first line is %q, not %q", lines[0], tlogProofHeader)
	}
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "extra ") {
		return nil, errors.New("no 'extra' line")
	}
	record, err := base64Strict(strings.TrimPrefix(lines[1], "extra "))
	if err != nil {
		return nil, fmt.Errorf("the extra data: %w", err)
	}
	digits, ok := strings.CutPrefix(lines[2], "index ")
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" || (digits != "0" && digits[0] == '0') {
		return nil, fmt.Errorf("the third line is not 'index <decimal>': %q", lines[2])
	}
	index, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return nil, err
	}
	p := &tlogProof{record: record, index: index, note: []byte(signed)}
	for _, line := range lines[3:] {
		h, err := base64Strict(line)
		if err != nil || len(h) != 32 {
			return nil, fmt.Errorf("a path line is not base64 of 32 bytes: %q", line)
		}
		p.path = append(p.path, h)
	}
	if len(p.path) > 64 {
		return nil, errors.New("more than 64 path hashes")
	}
	return p, nil
}

// journalEntryV3 is a JournalEntry.v3 record (schemas/avro/JournalEntry.v3.avsc).
type journalEntryV3 struct {
	RunID           string                  `avro:"run_id"`
	Seq             int64                   `avro:"seq"`
	PrevHash        string                  `avro:"prev_hash"`
	EntryType       string                  `avro:"entry_type"`
	StageID         string                  `avro:"stage_id"`
	Role            string                  `avro:"role"`
	Kind            string                  `avro:"kind"`
	ProducerID      string                  `avro:"producer_id"`
	SubmissionID    string                  `avro:"submission_id"`
	ArtifactHash    string                  `avro:"artifact_hash"`
	EvidenceSetHash string                  `avro:"evidence_set_hash"`
	Observations    []bernstein.Observation `avro:"observations"`
	TerminalState   string                  `avro:"terminal_state"`
	ReasonCode      string                  `avro:"reason_code"`
	Input           struct {
		Topic     string `avro:"topic"`
		Partition int32  `avro:"partition"`
		Offset    int64  `avro:"offset"`
	} `avro:"input"`
	OccurredAtMS      int64  `avro:"occurred_at_ms"`
	ProducerKeyID     string `avro:"producer_key_id"`
	ProducerSignature []byte `avro:"producer_signature"`
}

type proofPins struct {
	seal      []ed25519.PublicKey
	producers map[string]struct {
		name string
		key  ed25519.PublicKey
	}
}

type proofFacts struct {
	runID, stageID, entryHash, root string
	index, size                     uint64
}

// checkTlogProof checks a proof with the pinned keys alone, as verify_proof does, and returns the
// sorted problem codes.
func (r *Runner) checkTlogProof(text string, pins proofPins) (proofFacts, []string) {
	var facts proofFacts
	p, err := parseTlogProof(text)
	if err != nil {
		return facts, []string{"PROOF_MALFORMED"}
	}
	facts.index = p.index
	var problems []string
	add := func(code string) { problems = append(problems, code) }

	// the extra data: a JournalRecord whose payload is a JournalEntry
	var rec journalRecord
	var entry map[string]any
	s, err := r.codec.Decode(p.record, &rec)
	if err == nil && s.Name != "JournalRecord.v1" {
		err = fmt.Errorf("a %s record", s.Name)
	}
	if err == nil {
		entry, _, err = r.decodeMap(rec.Payload, "JournalEntry.")
	}
	if err != nil {
		add("PROOF_ENTRY_UNDECODABLE")
		entry = nil
	}

	// the tree head: a tlog-checkpoint note a pinned seal key signed under the note's own origin
	var head *tlogformat.Checkpoint
	var unverified *note.UnverifiedNoteError
	_, err = note.Open(p.note, note.VerifierList())
	var body tlogformat.Checkpoint
	if !errors.As(err, &unverified) {
		add("PROOF_CHECKPOINT_UNDECODABLE") // not a well-formed note
	} else if _, err := body.Unmarshal([]byte(unverified.Note.Text)); err != nil {
		add("PROOF_CHECKPOINT_UNDECODABLE")
	} else {
		for _, key := range pins.seal {
			vkey, err := note.NewEd25519VerifierKey(body.Origin, key)
			if err != nil {
				continue
			}
			v, err := note.NewVerifier(vkey)
			if err != nil {
				continue
			}
			if cp, _, _, err := tlogformat.ParseCheckpoint(p.note, body.Origin, v); err == nil {
				head = cp
				break
			}
		}
		if head == nil {
			add("PROOF_CHECKPOINT_NOT_SIGNED")
		}
	}
	if entry == nil {
		slices.Sort(problems)
		return facts, problems
	}

	facts.runID, _ = field[string](entry, "run_id")
	facts.stageID, _ = field[string](entry, "stage_id")
	seq, _ := field[int64](entry, "seq")
	facts.entryHash = bernstein.JournalEntryHash(rec.Payload)
	if facts.entryHash != rec.EntryHash {
		add("PROOF_ENTRY_HASH_MISMATCH")
	}
	if code := r.producerProblem(rec.Payload, entry, pins); code != "" {
		add(code)
	}
	if head != nil {
		facts.size, facts.root = head.Size, fmt.Sprintf("sha256:%x", head.Hash)
		input, _ := field[map[string]any](entry, "input")
		if !originOf(head.Origin, input) {
			add("PROOF_ORIGIN_MISMATCH")
		}
		leaf, err := tlogLeaf("entry", facts.runID, seq, facts.entryHash)
		if err != nil || p.index >= head.Size ||
			proof.VerifyInclusion(tlogHasher, p.index, head.Size, tlogHasher.HashLeaf(leaf), p.path, head.Hash) != nil {
			add("PROOF_INCLUSION_FAILED")
		}
	}
	slices.Sort(problems)
	return facts, problems
}

// originOf: origin is '<log name>/<topic>/<partition>/e<epoch>' of the entry's input position.
func originOf(origin string, input map[string]any) bool {
	tail := fmt.Sprintf("/%v/%v/e", input["topic"], input["partition"])
	i := strings.LastIndex(origin, tail)
	if i <= 0 {
		return false
	}
	epoch := origin[i+len(tail):]
	return epoch != "" && strings.Trim(epoch, "0123456789") == ""
}

// producerProblem: a JournalEntry.v3's producer signature, by a key pinned to its producer.
func (r *Runner) producerProblem(payload []byte, entry map[string]any, pins proofPins) string {
	if keyID, _ := field[string](entry, "producer_key_id"); keyID == "" {
		return "" // JournalEntry v1/v2: written before producers signed their stages
	}
	var e journalEntryV3
	if _, err := r.codec.Decode(payload, &e); err != nil {
		return "PROOF_PRODUCER_SIGNATURE_INVALID"
	}
	pinned, ok := pins.producers[e.ProducerKeyID]
	if !ok || pinned.name != e.ProducerID {
		return "PROOF_PRODUCER_KEY_NOT_PINNED"
	}
	sub := bernstein.ActivitySubmission{
		SubmissionID: e.SubmissionID, RunID: e.RunID, StageID: e.StageID, Role: e.Role,
		Producer: bernstein.Producer{ID: e.ProducerID}, Kind: e.Kind, ArtifactHash: e.ArtifactHash,
		EvidenceSetHash: e.EvidenceSetHash, Observations: e.Observations, TerminalState: e.TerminalState,
		ReasonCode: e.ReasonCode, OccurredAtMS: e.OccurredAtMS,
	}
	signed, err := bernstein.SubmissionSigningInput(bernstein.SubmissionStatement(&sub, e.ProducerKeyID))
	if err != nil || !ed25519.Verify(pinned.key, signed, e.ProducerSignature) {
		return "PROOF_PRODUCER_SIGNATURE_INVALID"
	}
	return ""
}

func (r *Runner) proofPins(p obj) proofPins {
	p.onlyKeys("seal", "producers")
	pins := proofPins{producers: map[string]struct {
		name string
		key  ed25519.PublicKey
	}{}}
	pinned := func(k obj) ed25519.PublicKey {
		public := k.hex("public_key_hex")
		id, err := bernstein.PublicKeyID(public)
		if r.ok(k.at("key_id"), err) {
			r.same(k.at("key_id"), id, k.str("key_id"))
		}
		return public
	}
	seal := p.obj("seal")
	seal.onlyKeys("public_key_hex", "key_id")
	pins.seal = append(pins.seal, pinned(seal))
	for _, k := range p.objs("producers") {
		k.onlyKeys("producer", "public_key_hex", "key_id")
		pins.producers[k.str("key_id")] = struct {
			name string
			key  ed25519.PublicKey
		}{k.str("producer"), pinned(k)}
	}
	return pins
}

func runActivityProofs(r *Runner, s obj) {
	s.onlyKeys("about", "pinned", "accepted", "refused")
	if s.str("about") == "" {
		r.miss(s.at("about"), "empty")
	}
	pins := r.proofPins(s.obj("pinned"))
	for _, c := range s.objs("accepted") {
		c.onlyKeys("run_id", "stage_id", "index", "tree_size", "root", "entry_hash", "proof")
		facts, problems := r.checkTlogProof(c.str("proof"), pins)
		if len(problems) != 0 {
			r.miss(c.path, "refused: %v", problems)
			continue
		}
		const format = "run %q stage %q index %d size %d root %s entry hash %s"
		r.same(c.path, fmt.Sprintf(format, facts.runID, facts.stageID, facts.index, facts.size, facts.root, facts.entryHash),
			fmt.Sprintf(format, c.str("run_id"), c.str("stage_id"), c.int("index"), c.int("tree_size"), c.str("root"), c.str("entry_hash")))
	}
	for _, c := range s.objs("refused") {
		c.onlyKeys("why", "proof", "problems")
		want := c.strs("problems")
		_, problems := r.checkTlogProof(c.str("proof"), pins)
		switch {
		case c.str("why") == "":
			r.miss(c.path, "no why")
		case len(want) == 0:
			r.miss(c.path, "a refused proof states no problems")
		default:
			r.same(c.path, strings.Join(problems, " "), strings.Join(want, " "))
		}
	}
}
