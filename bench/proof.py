"""The proof of one activity in a 1M-leaf partition: its size, and how long ``verify-proof`` takes.

    python -m bench.proof [--leaves 1000000] [--rounds 200]

No services needed. One real stage is journalled by the scheduler core (``bench.scheduler``'s signed
submission and configuration), and its leaf is placed at a late index among ``--leaves`` other
leaves (as if the partition held that many entries and seals); the tree head over all of them is
signed by the scheduler's seal key as the checkpoint's note is, and ``bernstein activity prove``'s
encoder writes the proof. ``verify_proof`` (what ``activity verify-proof`` runs, with the pinned seal
and producer keys, no content store) is timed over ``--rounds`` rounds, interleaved with the baseline:
one Ed25519 check of the same note's signature, the least any signed-checkpoint proof costs.

The last line is ``verify_proof_vs_one_signature=<ratio> proof_bytes=<n> path_hashes=<n>``.
"""

from __future__ import annotations

import argparse
import hashlib
import time

from bench.scheduler import PRODUCER, config, submission
from bernstein.consumers.core.model import InputRecord, Stream
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import merkle, notes
from bernstein.schemas.canonical import tlog_origin
from bernstein.substrate.keys import KeyPurpose, TrustedKey, TrustedKeys
from bernstein.verifier.proof import verify_proof
from bernstein.verifier.proof_format import ActivityProof
from bernstein.verifier.tlog import journal_leaf

TOPIC = "bench.submissions"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaves", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    cfg = config()
    core = SchedulerCore(cfg)
    _, outputs = core.step(initial_state(cfg, 0), InputRecord(TOPIC, 0, 0, 1, b"run-p", submission(0, "run-p")))
    record = next(o.value for o in outputs if o.stream is Stream.JOURNAL)
    leaf = journal_leaf(core._codec, record)
    assert leaf is not None
    index = args.leaves * 7 // 10
    started = time.perf_counter()
    hashes = [hashlib.sha256(b"\x00other leaf %d" % i).digest() for i in range(args.leaves)]
    hashes[index] = merkle.leaf_hash(leaf)
    root = merkle.Frontier.of(hashes).root()
    path = merkle.inclusion_proof(hashes, index)
    origin = tlog_origin("bernstein", TOPIC, 0, 1)
    signer = cfg.signer
    note = notes.log_checkpoint_note(origin, args.leaves, root, signer.public_key_raw, signer.sign).encode()
    text = ActivityProof(record, index, tuple(path), note).encode().encode()
    print(f"built a {args.leaves}-leaf tree and the proof of leaf {index} in {time.perf_counter() - started:.1f} s", flush=True)
    trusted = TrustedKeys.of(
        [
            TrustedKey(signer.key_id, KeyPurpose.SEAL, signer.public_key_raw),
            TrustedKey(PRODUCER.key_id, KeyPurpose.PRODUCER, PRODUCER.public_key_raw, producer="bench"),
        ]
    )
    report = verify_proof(text, trusted)
    assert report.problems == (), report.problems
    verifier = notes.log_verifier(origin, signer.public_key_raw)
    proof_times: list[float] = []
    signature_times: list[float] = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        verify_proof(text, trusted)
        t1 = time.perf_counter()
        notes.open_checkpoint(note, (verifier,))
        t2 = time.perf_counter()
        proof_times.append(t1 - t0)
        signature_times.append(t2 - t1)
    proof_ms = min(proof_times) * 1000
    signature_ms = min(signature_times) * 1000
    print(f"proof: {len(text)} bytes ({len(record)} of them the journal record), {len(path)} path hashes")
    print(f"verify-proof: {proof_ms:.3f} ms (best of {args.rounds}); one signed-note check: {signature_ms:.3f} ms")
    print(f"verify_proof_vs_one_signature={proof_ms / signature_ms:.2f} proof_bytes={len(text)} path_hashes={len(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
