"""``bernstein witness serve`` against an independent reference client: sigsum-go's tlog-witness client, in Go.

``producers/go/cmd/bernstein-witness-probe`` submits a checkpoint with ``sigsum.org/sigsum-go/pkg/client``
(``Client.AddCheckpoint``, the client a Sigsum log collects its cosignatures with) and opens the
cosigned note with Go's note verifier (``golang.org/x/mod/sumdb/note`` with the cosignature/v1 verifier of
``github.com/transparency-dev/formats``) and with sigsum-go's own cosignature check. It prints one JSON line.
A log of size 10 is cosigned, grown to 25 with a consistency proof made here, grown to 40 from ``old 0``
(the witness's 409 names 25, the Go side proves from there with x/mod's tlog), and a fork of it is refused.
No Kafka, no S3: the witness is the command in a subprocess with its own key and state directory.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas import merkle, notes
from tests.support.witness_serve import ServedWitness, serve_witness

REPO = Path(__file__).resolve().parents[2]
GO_DIR = REPO / "producers" / "go"
ORIGIN = "bernstein.example/reference-client/0"
LOG = notes.NoteSigner(ORIGIN, notes.SIG_ED25519, bytes(range(32, 64)))


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go probe, built from the module's pinned go.mod/go.sum (no Go: the test fails, it is not skipped)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    assert Path(go).exists(), "Go (>= 1.26) is needed to build producers/go/cmd/bernstein-witness-probe"
    binary = tmp_path_factory.mktemp("probe") / "bernstein-witness-probe"
    env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false", "GOTOOLCHAIN": "local"}
    built = subprocess.run(
        [go, "build", "-o", str(binary), "./cmd/bernstein-witness-probe"],
        cwd=GO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    return binary


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedWitness]:
    with serve_witness(tmp_path, "witness.test/ref", LOG.verifier.vkey) as witness:
        yield witness


def leaves(n: int, tag: bytes = b"") -> list[bytes]:
    return [merkle.leaf_hash(tag + b"entry %d" % i) for i in range(n)]


def submit(
    probe: Path,
    served: ServedWitness,
    tmp_path: Path,
    hashes: list[bytes],
    *,
    old: int,
    proof: list[bytes] | None = None,
    vkey: str | None = None,
) -> tuple[int, dict[str, Any], bytes]:
    """Sign a checkpoint over ``hashes`` with the log key and hand it to the Go probe: (exit code, its JSON, the note)."""
    note = notes.sign_note(notes.Checkpoint(ORIGIN, len(hashes), merkle.root(hashes)).body(), [LOG])
    name = f"{len(hashes)}-{old}-{os.urandom(4).hex()}"
    (tmp_path / f"{name}.note").write_bytes(note)
    args = [str(probe), "-witness", served.prefix, "-witness-vkey", vkey or served.witness.vkey]
    args += ["-checkpoint", str(tmp_path / f"{name}.note"), "-old", str(old)]
    if proof is None:
        (tmp_path / f"{name}.leaves").write_bytes(b"".join(base64.b64encode(h) + b"\n" for h in hashes))
        args += ["-leaves", str(tmp_path / f"{name}.leaves")]
    else:
        (tmp_path / f"{name}.proof").write_bytes(b"".join(base64.b64encode(h) + b"\n" for h in proof))
        args += ["-proof", str(tmp_path / f"{name}.proof")]
    ran = subprocess.run(args, capture_output=True, text=True, timeout=60)
    lines = ran.stdout.splitlines()
    assert len(lines) == 1, (ran.stdout, ran.stderr)
    return ran.returncode, json.loads(lines[0]), note


def assert_cosigned(result: dict[str, Any], note: bytes, served: ServedWitness, size: int) -> None:
    """The Go side verified the witness's cosignature; Python's note verifier agrees on the same cosigned note."""
    name, key_hash, _key = served.witness.vkey.split("+", 2)
    assert result["ok"] is True and result["status"] == 200 and result["size"] == size, result
    assert result["origin"] == ORIGIN
    assert f"{name}+{key_hash}" in result["verified"]
    assert all(t > 0 for t in result["timestamps"])
    cosigned = result["cosigned"].encode()
    assert cosigned.startswith(note.rstrip(b"\n"))
    checkpoint, opened = notes.open_checkpoint(cosigned, [LOG.verifier, served.witness])
    assert checkpoint.size == size
    assert opened.signed_by(LOG.verifier) is not None
    cosignature = opened.signed_by(served.witness)
    assert cosignature is not None and notes.cosignature_timestamp(cosignature) in result["timestamps"]


def test_the_witness_cosigns_for_a_reference_client_and_go_verifies(probe: Path, served: ServedWitness, tmp_path: Path) -> None:
    hashes = leaves(40)

    code, first, note = submit(probe, served, tmp_path, hashes[:10], old=0)
    assert code == 0, first
    assert first["attempts"] == 1 and first["old"] == 0
    assert_cosigned(first, note, served, 10)

    code, grown, note = submit(probe, served, tmp_path, hashes[:25], old=10, proof=merkle.consistency_proof(hashes[:25], 10))
    assert code == 0, grown
    assert grown["attempts"] == 1 and grown["old"] == 10
    assert_cosigned(grown, note, served, 25)

    # From "old 0", as a client that knows nothing: the witness's 409 names 25, the Go side proves from there.
    code, again, note = submit(probe, served, tmp_path, hashes, old=0)
    assert code == 0, again
    assert again["attempts"] == 2 and again["witness_size"] == 25 and again["old"] == 25
    assert_cosigned(again, note, served, 40)


def test_a_fork_and_a_stale_checkpoint_are_refused_to_the_reference_client(
    probe: Path, served: ServedWitness, tmp_path: Path
) -> None:
    hashes = leaves(40)
    assert submit(probe, served, tmp_path, hashes[:25], old=0)[0] == 0
    assert submit(probe, served, tmp_path, hashes, old=25)[0] == 0

    forked = list(hashes)
    forked[7] = merkle.leaf_hash(b"rewritten")
    forked.append(merkle.leaf_hash(b"entry 40"))
    code, refused, _note = submit(probe, served, tmp_path, forked, old=40)
    assert code == 1, refused
    assert refused["ok"] is False and refused["status"] == 422 and "refused" in refused["error"], refused
    assert "cosignatures" not in refused and "verified" not in refused

    code, stale, _note = submit(probe, served, tmp_path, hashes[:25], old=10, proof=merkle.consistency_proof(hashes[:25], 10))
    assert code == 1, stale
    assert stale["ok"] is False and stale["status"] == 409 and stale["witness_size"] == 40, stale

    # Still cosigning the true history after both refusals.
    more = hashes + leaves(5, b"more ")
    code, grown, note = submit(probe, served, tmp_path, more, old=40)
    assert code == 0, grown
    assert_cosigned(grown, note, served, 45)

    # The Go check is not vacuous: the same answer under another key of the witness's name does not verify.
    impostor = notes.NoteSigner(served.witness.name, notes.SIG_COSIGNATURE_V1, os.urandom(32)).verifier.vkey
    code, unverified, _note = submit(probe, served, tmp_path, more + leaves(5, b"last "), old=45, vkey=impostor)
    assert code == 1, unverified
    assert unverified["ok"] is False and unverified["status"] == 200, unverified
    assert "note verifier rejects" in unverified["error"] and "verified" not in unverified
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(timeout=10) == 0
