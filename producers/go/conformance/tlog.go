package conformance

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	tlogformat "github.com/transparency-dev/formats/log"
	formatsnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// --- tlog.json --------------------------------------------------------------------------------
//
// The journal's RFC 6962 / 9162 Merkle trees and C2SP signed checkpoints, checked with other
// people's code rather than ours, so that passing is an interoperability proof:
// github.com/transparency-dev/merkle hashes the leaves, builds the roots (compact ranges) and
// verifies the proofs; golang.org/x/mod/sumdb/note opens the log's signed notes;
// github.com/transparency-dev/formats parses the checkpoint bodies and verifies the witness's
// cosignature/v1. Every accepted case must pass and every refused one must be refused (a
// well-formed note for its signature, not as malformed). Ed25519 is deterministic, so each
// note and cosignature line is also re-signed from the stated seeds and must be byte for byte
// the stated one.

var tlogHasher = rfc6962.DefaultHasher

func runTlog(r *Runner, doc obj) {
	if doc.str("description") == "" {
		r.miss("tlog/description", "empty")
	}
	origin := doc.str("origin")
	cosignedAt := doc.int("cosigned_at")
	logKey, witnessKey := doc.obj("log"), doc.obj("witness")
	logV, logSign := tlogLogKey(r, logKey)
	witnessV, witnessSign := tlogWitnessKey(r, witnessKey)

	leaves, leafHashes, roots := doc.strs("leaves_hex"), doc.strs("leaf_hashes_hex"), doc.strs("roots_hex")
	if len(leafHashes) != len(leaves) || len(roots) != len(leaves)+1 {
		r.miss("tlog/leaves_hex", "%d leaves, %d leaf hashes, %d roots (want n, n, n+1)", len(leaves), len(leafHashes), len(roots))
	}
	for i, leaf := range leaves {
		b, err := hex.DecodeString(leaf)
		if r.ok(fmt.Sprintf("tlog/leaf_hashes_hex[%d]", i), err) && i < len(leafHashes) {
			r.same(fmt.Sprintf("tlog/leaf_hashes_hex[%d]", i), hexs(tlogHasher.HashLeaf(b)), leafHashes[i])
		}
	}
	// roots_hex[n] from the first n leaf hashes, appended to one compact range.
	rf := &compact.RangeFactory{Hash: tlogHasher.HashChildren}
	rng := rf.NewEmptyRange(0)
	for n, want := range roots {
		name := fmt.Sprintf("tlog/roots_hex[%d]", n)
		root, err := rng.GetRootHash(nil)
		if n == 0 {
			root = tlogHasher.EmptyRoot() // RFC 6962: the empty tree's root is SHA-256 of nothing
		}
		if r.ok(name, err) {
			r.same(name, hexs(root), want)
		}
		if n < len(leafHashes) {
			b, err := hex.DecodeString(leafHashes[n])
			if err == nil {
				err = rng.Append(b, nil)
			}
			if !r.ok(name, err) {
				break
			}
		}
	}
	rootOf := func(size int64) string {
		if size < 0 || size >= int64(len(roots)) {
			return fmt.Sprintf("(no stated root for size %d)", size)
		}
		return roots[size]
	}

	accepted := doc.obj("accepted")
	accepted.onlyKeys("checkpoints", "inclusion", "consistency")
	for _, c := range accepted.objs("checkpoints") {
		c.onlyKeys("size", "root_hex", "body", "note", "cosigned")
		size, body, signed, cosigned := c.int("size"), c.str("body"), c.str("note"), c.str("cosigned")
		r.same(c.at("root_hex"), c.str("root_hex"), rootOf(size))
		r.ok(c.at("body"), checkCheckpointBody(body, origin, size, c.hex("root_hex")))
		if logV != nil {
			r.ok(c.at("note"), openTlogNote(signed, body, 1, logV))
			r.ok(c.at("cosigned"), checkCosigned(cosigned, body, signed, logV, witnessV, cosignedAt))
		}
		if logSign != nil {
			got, err := note.Sign(&note.Note{Text: body}, logSign)
			if r.ok(c.at("note")+"/from_seed", err) {
				r.same(c.at("note")+"/from_seed", string(got), signed)
			}
		}
		if witnessSign != nil {
			r.same(c.at("cosigned")+"/from_seed", signed+witnessSign(body, uint64(cosignedAt)), cosigned)
		}
	}
	for _, c := range accepted.objs("inclusion") {
		c.onlyKeys("index", "size", "leaf_hash_hex", "root_hex", "proof_hex")
		index, size := c.int("index"), c.int("size")
		if index < 0 || index >= int64(len(leafHashes)) || c.str("leaf_hash_hex") != leafHashes[index] || c.str("root_hex") != rootOf(size) {
			r.miss(c.path, "the leaf hash or root is not the stated tree's (leaf_hashes_hex[index], roots_hex[size])")
			continue
		}
		r.ok(c.path, tlogInclusion(c))
	}
	for _, c := range accepted.objs("consistency") {
		c.onlyKeys("size1", "size2", "root1_hex", "root2_hex", "proof_hex")
		if c.str("root1_hex") != rootOf(c.int("size1")) || c.str("root2_hex") != rootOf(c.int("size2")) {
			r.miss(c.path, "a root is not the stated tree's (roots_hex[size1], roots_hex[size2])")
			continue
		}
		r.ok(c.path, tlogConsistency(c))
	}

	refused := doc.obj("refused")
	refused.onlyKeys("notes", "cosigned", "inclusion", "consistency")
	refuse := func(c obj, err error) {
		if err == nil {
			r.miss(c.path, "not refused for its signature or proof; the vector refuses it: %s", c.str("why"))
		} else if c.str("why") == "" {
			r.miss(c.path, "no why")
		} else {
			r.pass(c.path)
		}
	}
	for _, c := range refused.objs("notes") {
		c.onlyKeys("note", "why")
		if logV != nil {
			refuse(c, refusedForSignature(c.str("note"), logV))
		}
	}
	for _, c := range refused.objs("cosigned") {
		c.onlyKeys("note", "why")
		if logV != nil && witnessV != nil {
			refuse(c, refusedForSignature(c.str("note"), logV, witnessV))
		}
	}
	for _, c := range refused.objs("inclusion") {
		c.onlyKeys("index", "size", "leaf_hash_hex", "root_hex", "proof_hex", "why")
		refuse(c, tlogInclusion(c))
	}
	for _, c := range refused.objs("consistency") {
		c.onlyKeys("size1", "size2", "root1_hex", "root2_hex", "proof_hex", "why")
		refuse(c, tlogConsistency(c))
	}

	runSchedulerCheckpoints(r, doc.obj("scheduler_checkpoints")) // tlog_journal.go
	runActivityProofs(r, doc.obj("activity_proofs"))             // tlog_proofs.go
}

// tlogLogKey: the log's vkey opens notes with x/mod's verifier, and its seed gives that very vkey
// (and a note.Signer to re-sign the checkpoints with).
func tlogLogKey(r *Runner, k obj) (note.Verifier, note.Signer) {
	k.onlyKeys("name", "vkey", "ed25519_seed_hex")
	name, vkey, seed := k.str("name"), k.str("vkey"), k.hex("ed25519_seed_hex")
	v, err := note.NewVerifier(vkey)
	if !r.ok(k.at("vkey"), err) {
		return nil, nil
	}
	if len(seed) != ed25519.SeedSize {
		r.miss(k.at("ed25519_seed_hex"), "%d bytes, want %d", len(seed), ed25519.SeedSize)
		return v, nil
	}
	public := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	fromSeed, err := note.NewEd25519VerifierKey(name, public)
	if r.ok(k.at("vkey"), err) {
		r.same(k.at("vkey"), fromSeed, vkey)
	}
	skey := fmt.Sprintf("PRIVATE+KEY+%s+%08x+%s", name, v.KeyHash(), base64.StdEncoding.EncodeToString(append([]byte{1}, seed...)))
	s, err := note.NewSigner(skey)
	if !r.ok(k.at("ed25519_seed_hex"), err) {
		return v, nil
	}
	return v, s
}

// tlogWitnessKey: the witness's vkey (type 0x04) gives the formats module's cosignature/v1
// verifier, whose key id must be the vkey's (that constructor does not check it; a mismatch is a
// miss, and the verifier still checks the notes), and the seed
// gives the same vkey and signs cosignature lines (at a stated time, which the formats module's
// signer, on the clock, cannot).
func tlogWitnessKey(r *Runner, k obj) (note.Verifier, func(body string, at uint64) string) {
	k.onlyKeys("name", "vkey", "ed25519_seed_hex")
	name, vkey, seed := k.str("name"), k.str("vkey"), k.hex("ed25519_seed_hex")
	v, err := formatsnote.NewVerifierForCosignatureV1(vkey)
	if !r.ok(k.at("vkey"), err) {
		return nil, nil
	}
	if v.Name() != name || !strings.HasPrefix(vkey, fmt.Sprintf("%s+%08x+", name, v.KeyHash())) {
		r.miss(k.at("vkey"), "the verifier is %s+%08x, not the vkey's name and key id", v.Name(), v.KeyHash())
	}
	if len(seed) != ed25519.SeedSize {
		r.miss(k.at("ed25519_seed_hex"), "%d bytes, want %d", len(seed), ed25519.SeedSize)
		return v, nil
	}
	private := ed25519.NewKeyFromSeed(seed)
	plain, err := note.NewEd25519VerifierKey(name, private.Public().(ed25519.PublicKey))
	if err == nil {
		var fromSeed string
		fromSeed, err = formatsnote.VKeyToCosignatureV1(plain)
		if err == nil {
			r.same(k.at("vkey"), fromSeed, vkey)
		}
	}
	if !r.ok(k.at("vkey"), err) {
		return v, nil
	}
	return v, func(body string, at uint64) string {
		sig := binary.BigEndian.AppendUint32(nil, v.KeyHash())
		sig = binary.BigEndian.AppendUint64(sig, at)
		sig = append(sig, ed25519.Sign(private, fmt.Appendf(nil, "cosignature/v1\ntime %d\n%s", at, body))...)
		return "— " + name + " " + base64.StdEncoding.EncodeToString(sig) + "\n"
	}
}

// checkCheckpointBody parses body with the formats module's tlog-checkpoint parser.
func checkCheckpointBody(body, origin string, size int64, root []byte) error {
	var cp tlogformat.Checkpoint
	rest, err := cp.Unmarshal([]byte(body))
	switch {
	case err != nil:
		return err
	case len(rest) != 0:
		return fmt.Errorf("extension lines %q after the checkpoint", rest)
	case cp.Origin != origin || cp.Size != uint64(size) || !bytes.Equal(cp.Hash, root):
		return fmt.Errorf("parsed as %s/%d/%x, want %s/%d/%x", cp.Origin, cp.Size, cp.Hash, origin, size, root)
	case string(cp.Marshal()) != body:
		return fmt.Errorf("marshals back as %q", cp.Marshal())
	}
	return nil
}

// openTlogNote opens msg with the known verifiers: its text must be body, with sigs verified
// signatures and none unknown.
func openTlogNote(msg, body string, sigs int, known ...note.Verifier) error {
	n, err := note.Open([]byte(msg), note.VerifierList(known...))
	switch {
	case err != nil:
		return err
	case n.Text != body:
		return fmt.Errorf("the note's text is %q, want the body", n.Text)
	case len(n.Sigs) != sigs || len(n.UnverifiedSigs) != 0:
		return fmt.Errorf("%d verified and %d unknown signatures, want %d and 0", len(n.Sigs), len(n.UnverifiedSigs), sigs)
	}
	return nil
}

// checkCosigned: the cosigned note is the log's note plus the witness's line, opens with both keys
// (and with the witness's alone), and the cosignature's timestamp is cosigned_at.
func checkCosigned(cosigned, body, signed string, logV, witnessV note.Verifier, at int64) error {
	if witnessV == nil {
		return errors.New("no witness verifier")
	}
	if !strings.HasPrefix(cosigned, signed) {
		return errors.New("does not begin with the log's signed note")
	}
	if err := openTlogNote(cosigned, body, 2, logV, witnessV); err != nil {
		return err
	}
	n, err := note.Open([]byte(cosigned), note.VerifierList(witnessV))
	if err != nil {
		return fmt.Errorf("with the witness's key alone: %w", err)
	}
	if len(n.Sigs) != 1 {
		return fmt.Errorf("%d witness signatures", len(n.Sigs))
	}
	t, err := formatsnote.CoSigV1Timestamp(n.Sigs[0])
	if err != nil {
		return err
	}
	if t.Unix() != at {
		return fmt.Errorf("cosigned at %d, want cosigned_at %d", t.Unix(), at)
	}
	return nil
}

// refusedForSignature opens msg with the known verifiers and returns nil when the note is accepted.
// A refusal must be for a signature (one by a known key that does not verify, or none by a known
// key): a note refused as malformed is returned as accepted too, so a refused vector cannot pass
// by being garbage.
func refusedForSignature(msg string, known ...note.Verifier) error {
	_, err := note.Open([]byte(msg), note.VerifierList(known...))
	var invalid *note.InvalidSignatureError
	var unverified *note.UnverifiedNoteError
	if err == nil || errors.As(err, &invalid) || errors.As(err, &unverified) {
		return err
	}
	return nil
}

func tlogInclusion(c obj) error {
	p, err := proofHashes(c.strs("proof_hex"))
	if err != nil {
		return err
	}
	return proof.VerifyInclusion(tlogHasher, uint64(c.int("index")), uint64(c.int("size")), c.hex("leaf_hash_hex"), p, c.hex("root_hex"))
}

func tlogConsistency(c obj) error {
	p, err := proofHashes(c.strs("proof_hex"))
	if err != nil {
		return err
	}
	return proof.VerifyConsistency(tlogHasher, uint64(c.int("size1")), uint64(c.int("size2")), p, c.hex("root1_hex"), c.hex("root2_hex"))
}

func proofHashes(hexes []string) ([][]byte, error) {
	out := make([][]byte, len(hexes))
	for i, h := range hexes {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("proof_hex[%d]: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}
