"""The witness (C2SP tlog-witness add-checkpoint): it cosigns only what extends what it cosigned, and keeps forks."""

from __future__ import annotations

import base64
import hashlib
import threading
from pathlib import Path

import pytest

from bernstein.commands.witness import parse_logs
from bernstein.schemas import merkle, notes
from bernstein.verifier.witness.core import MAX_PROOF_LINES, Witness, WitnessCode, WitnessRefusal, parse_request
from bernstein.verifier.witness.keys import init_witness_key, load_witness_key
from bernstein.verifier.witness.store import FileWitnessStore, WitnessStateCorrupt

ORIGIN = "bernstein.example/journal/0"
NOW = 1767225600


def seed(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


LOG = notes.NoteSigner(ORIGIN, notes.SIG_ED25519, seed("log"))
WITNESS = notes.NoteSigner("witness.example/w1", notes.SIG_COSIGNATURE_V1, seed("witness"))


class Log:
    """A log that grows and signs checkpoints; ``fork`` rewrites one leaf (a log showing two histories)."""

    def __init__(self, leaves: int = 0, *, signer: notes.NoteSigner = LOG) -> None:
        self.hashes = [merkle.leaf_hash(b"entry %d" % i) for i in range(leaves)]
        self.signer = signer

    def grow(self, n: int) -> None:
        start = len(self.hashes)
        self.hashes += [merkle.leaf_hash(b"entry %d" % i) for i in range(start, start + n)]

    def fork(self, index: int) -> Log:
        other = Log(signer=self.signer)
        other.hashes = list(self.hashes)
        other.hashes[index] = merkle.leaf_hash(b"rewritten %d" % index)
        return other

    def note(self, size: int | None = None) -> bytes:
        size = len(self.hashes) if size is None else size
        body = notes.Checkpoint(ORIGIN, size, merkle.root(self.hashes[:size])).body()
        return notes.sign_note(body, [self.signer])

    def request(self, old: int, size: int | None = None, proof: list[bytes] | None = None) -> bytes:
        size = len(self.hashes) if size is None else size
        if proof is None:
            proof = merkle.consistency_proof(self.hashes[:size], old) if 0 < old else []
        lines = [f"old {old}".encode()] + [base64.b64encode(h) for h in proof]
        return b"\n".join(lines) + b"\n\n" + self.note(size)


@pytest.fixture
def store(tmp_path: Path) -> FileWitnessStore:
    return FileWitnessStore(tmp_path / "state")


@pytest.fixture
def witness(store: FileWitnessStore) -> Witness:
    return Witness(WITNESS, {ORIGIN: [LOG.verifier]}, store, clock=lambda: NOW)


def refused(witness: Witness, body: bytes) -> WitnessRefusal:
    with pytest.raises(WitnessRefusal) as caught:
        witness.add_checkpoint(body)
    return caught.value


def cosignature_verifies(line: bytes, note: bytes) -> int:
    """The cosignature line's timestamp, once the Go-compatible note code accepts it on the checkpoint."""
    opened = notes.open_note(note + line, [LOG.verifier, WITNESS.verifier])
    signature = opened.signed_by(WITNESS.verifier)
    assert signature is not None
    return notes.cosignature_timestamp(signature)


def test_a_growing_log_is_cosigned_at_each_size_and_the_state_follows(witness: Witness, store: FileWitnessStore) -> None:
    log = Log(5)
    line = witness.add_checkpoint(log.request(0))
    assert line.startswith("— witness.example/w1 ".encode()) and line.endswith(b"\n")
    assert cosignature_verifies(line, log.note()) == NOW
    latest = store.latest(ORIGIN)
    assert latest is not None and (latest.size, latest.root_hash) == (5, merkle.root(log.hashes))
    assert notes.open_note(latest.note, [LOG.verifier, WITNESS.verifier]).signed_by(WITNESS.verifier) is not None
    for grow in (1, 2, 11):
        old = len(log.hashes)
        log.grow(grow)
        assert cosignature_verifies(witness.add_checkpoint(log.request(old)), log.note()) == NOW
    latest = store.latest(ORIGIN)
    assert latest is not None and latest.size == 19
    again = witness.add_checkpoint(log.request(19))  # the same checkpoint again: cosigned again, nothing moves
    assert cosignature_verifies(again, log.note()) == NOW


def test_a_stale_old_size_is_409_with_the_witnessed_size(witness: Witness) -> None:
    log = Log(4)
    witness.add_checkpoint(log.request(0))
    log.grow(3)
    refusal = refused(witness, log.request(2))
    assert (refusal.code, refusal.witnessed_size) == (WitnessCode.OLD_SIZE_MISMATCH, 4)
    assert refusal.response() == (409, "text/x.tlog.size", b"4\n")
    assert refused(witness, log.request(0)).response()[2] == b"4\n"  # a client that knows nothing learns the size


def test_a_fork_is_refused_and_kept_as_evidence(witness: Witness, store: FileWitnessStore) -> None:
    log = Log(8)
    witness.add_checkpoint(log.request(0))
    fork = log.fork(3)
    fork.grow(4)
    refusal = refused(witness, fork.request(8, proof=merkle.consistency_proof(fork.hashes, 8)))
    assert refusal.code == WitnessCode.INCONSISTENT and refusal.status == 422
    same_size = log.fork(5)
    refusal = refused(witness, same_size.request(8, proof=[]))
    assert refusal.code == WitnessCode.ROOT_MISMATCH and refusal.status == 409 and refusal.response()[1].startswith("text/plain")
    kept = store.evidence()
    assert sorted(e["kind"] for e in kept) == ["inconsistent", "root_mismatch"]
    for evidence in kept:
        assert evidence["origin"] == ORIGIN and evidence["cosigned"] == store.latest(ORIGIN).note.decode()  # type: ignore[union-attr]
        cosigned = notes.parse_checkpoint(notes.open_note(evidence["cosigned"].encode(), [LOG.verifier]).text)
        presented = notes.parse_checkpoint(notes.open_note(evidence["presented"].encode(), [LOG.verifier]).text)
        assert cosigned.size == 8 and presented.root_hash != merkle.root(log.hashes[: presented.size])  # both log-signed
    latest = store.latest(ORIGIN)
    assert latest is not None and latest.size == 8 and latest.root_hash == merkle.root(log.hashes)  # nothing moved


def test_a_flipped_proof_byte_is_422_and_a_proof_where_none_belongs_too(witness: Witness) -> None:
    log = Log(6)
    witness.add_checkpoint(log.request(0))
    log.grow(5)
    proof = merkle.consistency_proof(log.hashes, 6)
    bad = [bytes([proof[0][0] ^ 1]) + proof[0][1:], *proof[1:]]
    assert refused(witness, log.request(6, proof=bad)).code == WitnessCode.INCONSISTENT
    assert refused(witness, log.request(6, proof=proof[:-1])).code == WitnessCode.INCONSISTENT  # wrong length
    assert refused(witness, log.request(6, size=6, proof=proof[:1])).code == WitnessCode.INCONSISTENT  # equal sizes
    fresh = Witness(
        WITNESS, {ORIGIN: [LOG.verifier]}, FileWitnessStore(witness.store.directory.parent / "other"), clock=lambda: NOW
    )  # type: ignore[attr-defined]
    assert refused(fresh, log.request(0, proof=proof)).code == WitnessCode.INCONSISTENT  # from size 0: empty
    assert witness.add_checkpoint(log.request(6))  # the right proof still goes through


def test_signatures_origins_and_sizes_are_checked_before_the_state(witness: Witness, store: FileWitnessStore) -> None:
    log = Log(3)
    stranger = Log(3, signer=notes.NoteSigner(ORIGIN, notes.SIG_ED25519, seed("not the log")))
    assert refused(witness, stranger.request(0)).response()[0] == 403  # an unknown key: no trusted signature
    forged = log.request(0).replace(b"\n3\n", b"\n4\n", 1)
    assert refused(witness, forged).code == WitnessCode.NOT_SIGNED_BY_LOG  # the trusted key's signature fails
    other = notes.sign_note(notes.Checkpoint("elsewhere.example/log", 1, merkle.leaf_hash(b"x")).body(), [LOG])
    assert refused(witness, b"old 0\n\n" + other).response()[0] == 404
    assert refused(witness, log.request(5, size=3, proof=[])).code == WitnessCode.OLD_SIZE_ABOVE_CHECKPOINT
    assert store.latest(ORIGIN) is None  # none of them touched the state


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"old 0\n",
        b"old 01\n\nx",
        b"old -1\n\nx",
        b"old  1\n\nx",
        b"new 1\n\nx",
        b"old 1\nnot base64!\n\nx",
        b"old 1\n" + base64.b64encode(b"short") + b"\n\nx",
        b"old 1\n" + b"\n".join([base64.b64encode(bytes(32))] * (MAX_PROOF_LINES + 1)) + b"\n\nx",
        b"old 18446744073709551616\n\nx",
        b"old 0\n\nnot a note",
        b"old 0\n\n" + b"x" * 20000,
    ],
)
def test_malformed_requests_are_400(witness: Witness, body: bytes) -> None:
    refusal = refused(witness, body)
    assert refusal.status == 400 and refusal.code == WitnessCode.MALFORMED_REQUEST


def test_a_canonical_request_parses() -> None:
    proof = [bytes(range(32))]
    parsed = parse_request(b"old 7\n" + base64.b64encode(proof[0]) + b"\n\nNOTE")
    assert (parsed.old_size, parsed.proof, parsed.note) == (7, tuple(proof), b"NOTE")


def test_racing_requests_never_roll_the_size_back(witness: Witness, store: FileWitnessStore) -> None:
    log = Log(4)
    witness.add_checkpoint(log.request(0))
    log.grow(60)
    bodies = [log.request(4, size=size) for size in range(5, 64)]
    outcomes: list[str] = []
    lock = threading.Lock()

    def send(body: bytes) -> None:
        try:
            witness.add_checkpoint(body)
            result = "ok"
        except WitnessRefusal as refusal:
            result = refusal.code
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=send, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("ok") == 1 and set(outcomes) == {"ok", WitnessCode.OLD_SIZE_MISMATCH}
    latest = store.latest(ORIGIN)
    assert latest is not None and latest.size > 4


def test_a_corrupt_state_file_stops_the_witness_rather_than_forgetting(witness: Witness, store: FileWitnessStore) -> None:
    log = Log(2)
    witness.add_checkpoint(log.request(0))
    (path,) = (store.directory / "logs").iterdir()
    path.write_text(path.read_text().replace('"size": 2', '"size": 1'))
    with pytest.raises(WitnessStateCorrupt):
        witness.add_checkpoint(log.request(2))


def test_the_witness_key_round_trips_and_is_private(tmp_path: Path) -> None:
    signer = init_witness_key(tmp_path / "keys", "witness.example/w2")
    assert (tmp_path / "keys" / "witness.key").stat().st_mode & 0o077 == 0
    assert (tmp_path / "keys" / "witness.vkey").read_text().strip() == signer.verifier.vkey
    assert load_witness_key(tmp_path / "keys") == signer and signer.sig_type == notes.SIG_COSIGNATURE_V1


def test_log_flags_name_origins_by_key_or_explicitly() -> None:
    vkey = LOG.verifier.vkey
    assert parse_logs([vkey]) == {ORIGIN: [LOG.verifier]}
    assert parse_logs([f"another.example/log={vkey}"]) == {"another.example/log": [LOG.verifier]}
    with pytest.raises(notes.MalformedVerifierKey):
        parse_logs([WITNESS.verifier.vkey])  # a cosigning key is not a log key
