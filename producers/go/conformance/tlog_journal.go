package conformance

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	tlogformat "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"golang.org/x/mod/sumdb/note"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// --- tlog.json scheduler_checkpoints ----------------------------------------------------------
//
// The scheduler's own log: a run journalled by the reference core, the journal partition's
// records and every PartitionCheckpoint.v2 it signed. Every leaf is recomputed from the record
// bytes with the SDK's Avro codec, canonical JSON and PAE (never read from the vector); each
// checkpoint's note is opened with golang.org/x/mod/sumdb/note under a vkey built from the origin
// and the seal key, parsed with github.com/transparency-dev/formats/log.ParseCheckpoint, and its
// size and root must be those of the recomputed leaves (a compact range of
// github.com/transparency-dev/merkle); every leaf's inclusion proof and the consistency proof from
// the previous checkpoint are built with merkle/proof's node lists and verified with its
// VerifyInclusion and VerifyConsistency against the signed roots.

// DomainTlogLeaf is the PAE type of a partition log's leaves (schemas/canonical.py DOMAIN_TLOG_LEAF).
const DomainTlogLeaf = "bernstein/tlog-leaf/v1"

type envelope struct {
	Payload   []byte `avro:"payload"`
	KeyID     string `avro:"key_id"`
	Signature []byte `avro:"signature"`
}

type journalRecord struct {
	Payload   []byte `avro:"payload"`
	EntryHash string `avro:"entry_hash"`
}

func tlogLeaf(fields ...any) ([]byte, error) {
	body, err := bernstein.CanonicalJSON(fields)
	if err != nil {
		return nil, err
	}
	return bernstein.PAE(DomainTlogLeaf, body), nil
}

// decodeMap decodes single-object bytes into a map, requiring a schema whose name starts with prefix.
func (r *Runner) decodeMap(data []byte, prefix string) (map[string]any, string, error) {
	var v any
	s, err := r.codec.Decode(data, &v)
	if err != nil {
		return nil, "", err
	}
	m, ok := v.(map[string]any)
	if !ok || !strings.HasPrefix(s.Name, prefix) {
		return nil, s.Name, fmt.Errorf("a %s record, expected %s*", s.Name, prefix)
	}
	return m, s.Name, nil
}

// field reads a decoded record's field as a T.
func field[T any](m map[string]any, name string) (T, error) {
	v, ok := m[name].(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("field %s is %T, expected %T", name, m[name], zero)
	}
	return v, nil
}

// journalLeaf is the log leaf of one journal record: a JournalRecord's entry (its stored entry hash
// must be the payload's) or a SealRecord's seal (its signature must verify with the seal key).
func (r *Runner) journalLeaf(value []byte, sealKey ed25519.PublicKey) ([]byte, string, error) {
	s, err := r.codec.SchemaOf(value)
	if err != nil {
		return nil, "", err
	}
	switch s.Name {
	case "JournalRecord.v1":
		var rec journalRecord
		if _, err := r.codec.Decode(value, &rec); err != nil {
			return nil, s.Name, err
		}
		entry, _, err := r.decodeMap(rec.Payload, "JournalEntry.")
		if err != nil {
			return nil, s.Name, err
		}
		if h := bernstein.JournalEntryHash(rec.Payload); h != rec.EntryHash {
			return nil, s.Name, fmt.Errorf("stored entry_hash %s, the payload's is %s", rec.EntryHash, h)
		}
		runID, err1 := field[string](entry, "run_id")
		seq, err2 := field[int64](entry, "seq")
		if err := errors.Join(err1, err2); err != nil {
			return nil, s.Name, err
		}
		leaf, err := tlogLeaf("entry", runID, seq, rec.EntryHash)
		return leaf, s.Name, err
	case "SealRecord.v1":
		var env envelope
		if _, err := r.codec.Decode(value, &env); err != nil {
			return nil, s.Name, err
		}
		if !ed25519.Verify(sealKey, bernstein.SealSigningInput(env.Payload), env.Signature) {
			return nil, s.Name, errors.New("the seal's signature does not verify with the seal key")
		}
		seal, _, err := r.decodeMap(env.Payload, "RunSeal.")
		if err != nil {
			return nil, s.Name, err
		}
		runID, e1 := field[string](seal, "run_id")
		count, e2 := field[int64](seal, "entry_count")
		head, e3 := field[string](seal, "head_hash")
		last, e4 := field[int64](seal, "last_input_offset")
		final, e5 := field[bool](seal, "final")
		audit, e6 := field[string](seal, "audit_head")
		if err := errors.Join(e1, e2, e3, e4, e5, e6); err != nil {
			return nil, s.Name, err
		}
		leaf, err := tlogLeaf("seal", runID, count, head, last, final, audit)
		return leaf, s.Name, err
	}
	return nil, s.Name, fmt.Errorf("a %s record is no journal entry or seal", s.Name)
}

// subtreeHash is the hash of the perfect subtree id of the tree of leaves (a one-node compact range).
func subtreeHash(leaves [][]byte, id compact.NodeID) ([]byte, error) {
	begin, end := id.Coverage()
	if end > uint64(len(leaves)) {
		return nil, fmt.Errorf("node %+v lies past %d leaves", id, len(leaves))
	}
	rf := &compact.RangeFactory{Hash: tlogHasher.HashChildren}
	rng := rf.NewEmptyRange(begin)
	for _, h := range leaves[begin:end] {
		if err := rng.Append(h, nil); err != nil {
			return nil, err
		}
	}
	if len(rng.Hashes()) != 1 { // a perfect subtree's range is that one node
		return nil, fmt.Errorf("node %+v is not one perfect subtree", id)
	}
	return rng.Hashes()[0], nil
}

// buildProof turns merkle/proof's node list into the proof's hashes.
func buildProof(leaves [][]byte, nodes proof.Nodes) ([][]byte, error) {
	hashes := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		h, err := subtreeHash(leaves, id)
		if err != nil {
			return nil, err
		}
		hashes[i] = h
	}
	return nodes.Rehash(hashes, tlogHasher.HashChildren)
}

func treeRoot(leaves [][]byte) ([]byte, error) {
	if len(leaves) == 0 {
		return tlogHasher.EmptyRoot(), nil
	}
	rf := &compact.RangeFactory{Hash: tlogHasher.HashChildren}
	rng := rf.NewEmptyRange(0)
	for _, h := range leaves {
		if err := rng.Append(h, nil); err != nil {
			return nil, err
		}
	}
	return rng.GetRootHash(nil)
}

// treeHead opens a checkpoint note with v (x/mod's note.Open inside formats' ParseCheckpoint) and
// requires exactly the log's signature and no extension lines.
func treeHead(msg, origin string, v note.Verifier) (*tlogformat.Checkpoint, error) {
	cp, rest, n, err := tlogformat.ParseCheckpoint([]byte(msg), origin, v)
	switch {
	case err != nil:
		return nil, err
	case len(rest) != 0:
		return nil, fmt.Errorf("extension lines %q", rest)
	case len(n.Sigs) != 1 || len(n.UnverifiedSigs) != 0:
		return nil, fmt.Errorf("%d verified and %d unknown signatures, want 1 and 0", len(n.Sigs), len(n.UnverifiedSigs))
	}
	return cp, nil
}

// headMatches: the signed size and root are those of the journal's first size leaves.
func headMatches(cp *tlogformat.Checkpoint, leaves [][]byte) error {
	if cp.Size > uint64(len(leaves)) {
		return fmt.Errorf("the note signs %d leaves, the journal holds %d", cp.Size, len(leaves))
	}
	root, err := treeRoot(leaves[:cp.Size])
	if err != nil {
		return err
	}
	if hexs(root) != hexs(cp.Hash) {
		return fmt.Errorf("the note signs root %x for %d leaves, the journal's leaves give %x", cp.Hash, cp.Size, root)
	}
	return nil
}

func runSchedulerCheckpoints(r *Runner, s obj) {
	s.onlyKeys("about", "log_name", "epoch", "input_topic", "partition", "origin", "seal_key", "journal", "checkpoints", "refused")
	if s.str("about") == "" {
		r.miss(s.at("about"), "empty")
	}
	origin, topic, partition := s.str("origin"), s.str("input_topic"), s.int("partition")
	r.same(s.at("origin"), fmt.Sprintf("%s/%s/%d/e%d", s.str("log_name"), topic, partition, s.int("epoch")), origin)
	k := s.obj("seal_key")
	k.onlyKeys("public_key_hex", "key_id", "vkey")
	public := ed25519.PublicKey(k.hex("public_key_hex"))
	keyID, err := bernstein.PublicKeyID(public)
	if r.ok(k.at("key_id"), err) {
		r.same(k.at("key_id"), keyID, k.str("key_id"))
	}
	vkey, err := note.NewEd25519VerifierKey(origin, public)
	if !r.ok(k.at("vkey"), err) {
		return
	}
	r.same(k.at("vkey"), vkey, k.str("vkey"))
	verifier, err := note.NewVerifier(vkey)
	if !r.ok(k.at("vkey"), err) {
		return
	}

	var leaves [][]byte
	for _, j := range s.objs("journal") {
		j.onlyKeys("schema", "value_hex", "leaf_hash_hex")
		leaf, schema, err := r.journalLeaf(j.hex("value_hex"), public)
		if !r.ok(j.path, err) {
			return // the leaves after a missing one would all be misplaced
		}
		r.same(j.at("schema"), schema, j.str("schema"))
		h := tlogHasher.HashLeaf(leaf)
		r.same(j.at("leaf_hash_hex"), hexs(h), j.str("leaf_hash_hex"))
		leaves = append(leaves, h)
	}

	prevHash := bernstein.CheckpointGenesis(int(partition))
	var prev *tlogformat.Checkpoint
	for _, c := range s.objs("checkpoints") {
		c.onlyKeys("seq", "reason", "tree_size", "tree_root", "note", "value_hex")
		payload, fields, err := r.checkpointRecord(c.hex("value_hex"), public, keyID)
		if !r.ok(c.at("value_hex"), err) {
			continue
		}
		r.same(c.at("value_hex")+"/prev_hash", fmt.Sprint(fields["prev_hash"]), prevHash)
		prevHash = bernstein.CheckpointHash(payload)
		const format = "seq %d, reason %q, tree_size %d, tree_root %q, note %q, input_topic %q, partition %d"
		r.same(c.at("value_hex")+"/fields",
			fmt.Sprintf(format, fields["seq"], fields["reason"], fields["tree_size"], fields["tree_root"], fields["note"], fields["input_topic"], fields["partition"]),
			fmt.Sprintf(format, c.int("seq"), c.str("reason"), c.int("tree_size"), c.str("tree_root"), c.str("note"), topic, partition))
		cp, err := treeHead(c.str("note"), origin, verifier)
		if !r.ok(c.at("note"), err) {
			continue
		}
		r.same(c.at("note")+"/tree_head", fmt.Sprintf("%d sha256:%x", cp.Size, cp.Hash), fmt.Sprintf("%d %s", c.int("tree_size"), c.str("tree_root")))
		if !r.ok(c.at("tree_root"), headMatches(cp, leaves)) {
			continue
		}
		r.ok(c.at("inclusion"), includesEveryLeaf(leaves, cp))
		if prev != nil {
			r.ok(c.at("consistency"), consistentWith(leaves, prev, cp))
		}
		prev = cp
	}

	for _, c := range s.objs("refused") {
		c.onlyKeys("why", "refused_for", "note")
		got := "accepted"
		_, err := note.Open([]byte(c.str("note")), note.VerifierList(verifier))
		var invalid *note.InvalidSignatureError
		var unverified *note.UnverifiedNoteError
		switch {
		case errors.As(err, &invalid) || errors.As(err, &unverified):
			got = "signature"
		case err != nil:
			got = "malformed: " + err.Error()
		default:
			if cp, err := treeHead(c.str("note"), origin, verifier); err != nil {
				got = "unparsed: " + err.Error()
			} else if headMatches(cp, leaves) != nil {
				got = "tree"
			}
		}
		if c.str("why") == "" {
			r.miss(c.path, "no why")
		} else {
			r.same(c.path, got, c.str("refused_for"))
		}
	}
}

// checkpointRecord checks a CheckpointRecord's signature by the seal key and decodes its
// PartitionCheckpoint.v2 payload.
func (r *Runner) checkpointRecord(value []byte, public ed25519.PublicKey, keyID string) ([]byte, map[string]any, error) {
	var env envelope
	s, err := r.codec.Decode(value, &env)
	switch {
	case err != nil:
		return nil, nil, err
	case s.Name != "CheckpointRecord.v1":
		return nil, nil, fmt.Errorf("a %s record, expected CheckpointRecord.v1", s.Name)
	case env.KeyID != keyID:
		return nil, nil, fmt.Errorf("signed by key %s, not the seal key %s", env.KeyID, keyID)
	case !ed25519.Verify(public, bernstein.CheckpointSigningInput(env.Payload), env.Signature):
		return nil, nil, errors.New("the checkpoint's signature does not verify with the seal key")
	}
	fields, name, err := r.decodeMap(env.Payload, "PartitionCheckpoint.v2")
	if err != nil {
		return nil, nil, fmt.Errorf("payload %s: %w", name, err)
	}
	return env.Payload, fields, nil
}

// includesEveryLeaf builds every leaf's inclusion proof with merkle/proof.Inclusion and verifies it
// against the signed root with proof.VerifyInclusion.
func includesEveryLeaf(leaves [][]byte, cp *tlogformat.Checkpoint) error {
	for i := range cp.Size {
		nodes, err := proof.Inclusion(i, cp.Size)
		if err != nil {
			return err
		}
		p, err := buildProof(leaves, nodes)
		if err == nil {
			err = proof.VerifyInclusion(tlogHasher, i, cp.Size, leaves[i], p, cp.Hash)
		}
		if err != nil {
			return fmt.Errorf("leaf %d of %d: %w", i, cp.Size, err)
		}
	}
	return nil
}

// consistentWith builds the consistency proof from the previous signed head with
// merkle/proof.Consistency and verifies it with proof.VerifyConsistency.
func consistentWith(leaves [][]byte, prev, cp *tlogformat.Checkpoint) error {
	nodes, err := proof.Consistency(prev.Size, cp.Size)
	if err != nil {
		return err
	}
	p, err := buildProof(leaves, nodes)
	if err != nil {
		return err
	}
	return proof.VerifyConsistency(tlogHasher, prev.Size, cp.Size, p, prev.Hash, cp.Hash)
}
