"""``bernstein witness serve`` over real HTTP: a client grows a log, the witness cosigns, a fork is refused and kept.

The witness is the command in a subprocess with its own key (``witness init``) and state directory; the client
speaks the C2SP tlog-witness wire format with the standard library's HTTP client. The log is a test log signed
with its own Ed25519 key (the scheduler's partition logs use the same checkpoint format).
"""

from __future__ import annotations

import base64
import hashlib
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas import merkle, notes
from tests.support.witness_serve import serve_witness

ORIGIN = "bernstein.example/http-witness/0"
LOG = notes.NoteSigner(ORIGIN, notes.SIG_ED25519, bytes(range(32)))


def bernstein(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bernstein", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, notes.NoteVerifier, Path, subprocess.Popen[str]]]:
    with serve_witness(tmp_path, "witness.test/w1", LOG.verifier.vkey) as witness:
        yield witness.url, witness.witness, witness.state, witness.process


def post(url: str, body: bytes) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def request(hashes: list[bytes], old: int, proof: list[bytes] | None = None) -> tuple[bytes, bytes]:
    note = notes.sign_note(notes.Checkpoint(ORIGIN, len(hashes), merkle.root(hashes)).body(), [LOG])
    if proof is None:
        proof = merkle.consistency_proof(hashes, old) if old else []
    return b"\n".join([f"old {old}".encode(), *(base64.b64encode(h) for h in proof)]) + b"\n\n" + note, note


def test_a_client_grows_a_log_through_the_witness_and_a_fork_is_kept(
    served: tuple[str, notes.NoteVerifier, Path, subprocess.Popen[str]],
) -> None:
    url, witness, state, process = served
    hashes = [merkle.leaf_hash(b"%d" % i) for i in range(10)]
    body, note = request(hashes, 0)
    status, _type, answer = post(url, body)
    assert status == 200, answer
    opened = notes.open_note(note + answer, [LOG.verifier, witness])
    cosignature = opened.signed_by(witness)
    assert cosignature is not None and notes.cosignature_timestamp(cosignature) > 0

    hashes += [merkle.leaf_hash(b"%d" % i) for i in range(10, 25)]
    assert post(url, request(hashes, 10)[0])[0] == 200
    assert post(url, request(hashes, 3)[0]) == (409, "text/x.tlog.size", b"25\n")

    forked = list(hashes)
    forked[7] = merkle.leaf_hash(b"rewritten")
    forked.append(merkle.leaf_hash(b"25"))
    status, _type, answer = post(url, request(forked, 25, proof=merkle.consistency_proof(forked, 25))[0])
    assert status == 422 and answer.startswith(b"INCONSISTENT: ")
    (kept,) = [json.loads(p.read_text()) for p in (state / "evidence").rglob("*.json")]
    assert kept["kind"] == "inconsistent" and notes.parse_checkpoint(notes.parse_note(kept["cosigned"].encode()).text).size == 25

    monitored = url.replace("/add-checkpoint", f"/{hashlib.sha256(ORIGIN.encode()).hexdigest()}/checkpoint")
    with urllib.request.urlopen(monitored, timeout=10) as response:
        latest = response.read()
    assert notes.parse_checkpoint(notes.open_note(latest, [LOG.verifier, witness]).text).size == 25
    assert notes.open_note(latest, [witness]).signed_by(witness) is not None  # what it vouched for, with its cosignature
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url.replace("/add-checkpoint", f"/{'0' * 64}/checkpoint"), timeout=10)
    assert missing.value.code == 404
    assert post(url.replace("/w/", "/x/"), body)[0] == 404
    assert post(url, b"old 0\n")[0] == 400
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


def test_a_proof_of_one_activity_carries_the_checkpoint_a_served_witness_cosigned(tmp_path: Path) -> None:
    """``witness submit`` to a running ``witness serve``, then ``activity prove --witnessed`` with the file it wrote:
    the proof rests on that cosigned checkpoint, and ``verify-proof`` holds it to the pinned witness policy."""
    from bernstein.verifier.export import export_dump
    from tests.support.verdicts import RUN, C, build_checkpointed

    def stages(w: Any) -> None:
        for i in range(5):
            w.stage(RUN, f"stage-{i}")

    b = build_checkpointed(tmp_path / "run", stages, checkpoint_every=3)
    dump = tmp_path / "dump"
    export_dump(b.source, dump, cas=b.store, runs=None, trusted=None)
    newest = C.decode(C.decode(b.records("checkpoints")[-1].value or b"").record["payload"]).record
    origin = newest["note"].split("\n", 1)[0]
    shown = bernstein("keys", "show", "--dir", str(tmp_path / "run" / "keys"), "--log-origin", origin)
    assert shown.returncode == 0, shown.stderr
    (log_vkey,) = json.loads(shown.stdout)["log_vkeys"]
    with serve_witness(tmp_path / "witness", "witness.test/proofs", log_vkey) as served:
        out = tmp_path / "cosigned"
        submit = ["witness", "submit", "--witness", served.prefix, "--witness-key", served.witness.vkey]
        submitted = bernstein(*submit, "--from", str(dump), "--out", str(out))
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    handed = out / "0.checkpoint"
    policy = f"witness W1 {served.witness.vkey}\nquorum W1\n"
    trusted = tmp_path / "trust.json"
    trusted.write_text(json.dumps(b.trusted.with_witness_policy(policy).to_json()), encoding="utf-8")
    proof = tmp_path / "stage-1.tlog-proof"
    prove = ["activity", "prove", RUN, "stage-1", "--from", str(dump), "--out", str(proof), "--trusted-keys", str(trusted)]
    made = bernstein(*prove, "--witnessed", str(handed))
    assert made.returncode == 0, made.stderr
    assert f"under the handed checkpoint of {newest['tree_size']} leaves cosigned by W1" in made.stdout
    assert proof.read_bytes().endswith(b"\n\n" + handed.read_bytes())  # the note as the witness left it
    checked = bernstein(
        "activity", "verify-proof", str(proof), "--trusted-keys", str(trusted), "--cas", str(dump / "cas"), "--json"
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    document = json.loads(checked.stdout)
    assert (document["verdict"], document["cosigned_by"], document["log"]["tree_size"]) == (
        "verified",
        ["W1"],
        newest["tree_size"],
    )
    # the scheduler's own head, without the witness's cosignature: under the same policy, not fully verified
    assert bernstein(*prove).returncode == 0
    unwitnessed = bernstein("activity", "verify-proof", str(proof), "--trusted-keys", str(trusted), "--json")
    assert unwitnessed.returncode == 6 and json.loads(unwitnessed.stdout)["verdict"] == "unchecked"
