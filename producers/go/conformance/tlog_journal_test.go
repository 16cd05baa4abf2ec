package conformance

import "testing"

// tlog.json's scheduler log: two journal records swapped (their leaves, and every signed root
// after them, no longer recompute), a checkpoint whose note is a refused one, a refused note said
// to be refused for the wrong reason, an accepted proof that is a refused one and a refused proof
// with other problems stated are each a miss.
func TestMutatedSchedulerLogMiss(t *testing.T) {
	misses := mutatedMisses(t, "tlog.json", func(doc map[string]any) {
		log := doc["scheduler_checkpoints"].(map[string]any)
		journal := log["journal"].([]any)
		a, b := journal[4].(map[string]any), journal[5].(map[string]any)
		a["value_hex"], b["value_hex"] = b["value_hex"], a["value_hex"]
		a["schema"], b["schema"] = b["schema"], a["schema"]
		refusedNotes := log["refused"].([]any)
		log["checkpoints"].([]any)[0].(map[string]any)["note"] = refusedNotes[0].(map[string]any)["note"]
		refusedNotes[4].(map[string]any)["refused_for"] = "signature"
		proofs := doc["activity_proofs"].(map[string]any)
		refused := proofs["refused"].([]any)
		proofs["accepted"].([]any)[1].(map[string]any)["proof"] = refused[0].(map[string]any)["proof"]
		refused[6].(map[string]any)["problems"] = []any{"PROOF_ENTRY_HASH_MISMATCH"}
	})
	requireMisses(t, misses,
		"MISS tlog/scheduler_checkpoints/journal[4]/leaf_hash_hex: got",
		"MISS tlog/scheduler_checkpoints/journal[5]/leaf_hash_hex: got",
		"MISS tlog/scheduler_checkpoints/checkpoints[1]/tree_root: the note signs root",
		"MISS tlog/scheduler_checkpoints/checkpoints[2]/tree_root: the note signs root",
		"MISS tlog/scheduler_checkpoints/checkpoints[0]/value_hex/fields: got",
		"MISS tlog/scheduler_checkpoints/checkpoints[0]/note: failed to verify signatures on checkpoint",
		"MISS tlog/scheduler_checkpoints/refused[4]: got tree, want signature",
		"MISS tlog/scheduler_checkpoints/refused[3]: got accepted, want tree", // the swapped tree is now the journal's
		"MISS tlog/activity_proofs/accepted[1]: refused: [PROOF_INCLUSION_FAILED]",
		"MISS tlog/activity_proofs/refused[6]: got PROOF_ENTRY_HASH_MISMATCH PROOF_INCLUSION_FAILED PROOF_PRODUCER_SIGNATURE_INVALID, want PROOF_ENTRY_HASH_MISMATCH",
	)
}
