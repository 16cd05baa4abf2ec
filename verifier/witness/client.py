"""The log's side of C2SP tlog-witness: send a partition's newest signed checkpoint to witnesses, collect cosignatures.

``collect`` reads a partition's journal (its Merkle leaves) and checkpoints, takes the newest v2
checkpoint the journal reproduces, and asks each witness to cosign it: ``old <size>`` with the
consistency proof from the size the witness last cosigned (a first request says ``old 0``; a
witness that knows a size answers ``409`` with it and the request is made again with the proof
from there). The witnesses' ``cosignature/v1`` lines are added to the log's note: the cosigned
checkpoint an auditor hands to ``activity verify --witnessed``. Refusals are reported per witness,
never raised; an unreachable witness is one such refusal.
"""

from __future__ import annotations

import base64
import http.client
import urllib.parse
from dataclasses import dataclass
from typing import Final

from bernstein.schemas import merkle, notes
from bernstein.schemas.errors import BernsteinError, MalformedInput
from bernstein.verifier.sources import RecordSource
from bernstein.verifier.tlog import partition_leaf_hashes, reproduced, signed_heads

TIMEOUT_SECONDS: Final = 10.0
SIZE_TYPE: Final = "text/x.tlog.size"


class NothingToWitness(BernsteinError):
    """The partition has no signed tree head that its journal reproduces."""

    code = "E_NOTHING_TO_WITNESS"


@dataclass(frozen=True)
class WitnessAnswer:
    """One witness's answer: its cosignature lines, or why it refused (status 0: it could not be reached)."""

    url: str
    status: int
    cosignatures: tuple[notes.Signature, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class Collected:
    """The checkpoint sent (its note), the answers, and the note with every cosignature added."""

    partition: int
    size: int
    origin: str
    answers: tuple[WitnessAnswer, ...]
    cosigned: bytes


def newest_head(source: RecordSource, partition: int) -> tuple[list[bytes], bytes]:
    """The partition's leaf hashes up to its newest v2 checkpoint whose root they reproduce, and that note."""
    hashes = partition_leaf_hashes(source, partition)
    good = [head for head, ok in reproduced(signed_heads(source, partition), hashes) if ok]
    if not good:
        raise NothingToWitness(f"partition {partition} has no signed tree head that its journal reproduces")
    best = max(good, key=lambda head: head.size)
    return hashes[: best.size], best.note


def collect(
    source: RecordSource, partition: int, witnesses: list[tuple[str, notes.NoteVerifier]], *, timeout: float = TIMEOUT_SECONDS
) -> Collected:
    """Ask every witness (its submission prefix URL and cosignature key) to cosign the partition's newest signed tree
    head; only lines that verify as that witness's cosignature of the checkpoint are kept (the spec's MUST)."""
    hashes, note = newest_head(source, partition)
    checkpoint = notes.parse_checkpoint(notes.parse_note(note).text)
    answers = tuple(_ask(url, verifier, note, hashes, timeout) for url, verifier in witnesses)
    signatures = [sig for answer in answers for sig in answer.cosignatures]
    cosigned = notes.add_signatures(note, signatures) if signatures else note
    return Collected(partition, checkpoint.size, checkpoint.origin, answers, cosigned)


def _ask(url: str, verifier: notes.NoteVerifier, note: bytes, hashes: list[bytes], timeout: float) -> WitnessAnswer:
    old = 0
    for _ in range(2):  # the second time with the size the witness said it holds
        proof = merkle.consistency_proof(hashes, old) if 0 < old < len(hashes) else []
        body = b"old %d\n" % old + b"".join(base64.b64encode(h) + b"\n" for h in proof) + b"\n" + note
        status, content_type, reply = _post(url, body, timeout)
        if status == 200:
            try:
                lines = [line for line in reply.decode("utf-8").split("\n") if line]
                parsed = notes.parse_note(b"x\n\n" + "".join(line + "\n" for line in lines).encode())
            except (UnicodeDecodeError, MalformedInput) as exc:
                return WitnessAnswer(url, 0, detail=f"the answer is no cosignature line: {exc}")
            checkpoint_body = notes.parse_note(note).text.encode("utf-8")
            mine = tuple(
                sig
                for sig in parsed.signatures
                if (sig.name, sig.key_id) == (verifier.name, verifier.key_id) and verifier.verify(checkpoint_body, sig.signature)
            )
            if not mine:
                return WitnessAnswer(url, 0, detail=f"no line of the answer is a valid cosignature by {verifier.vkey}")
            return WitnessAnswer(url, status, mine)
        if status == 409 and content_type.startswith(SIZE_TYPE):
            text = reply.decode("ascii", "replace").strip()
            if not text.isdigit() or int(text) > len(hashes) or int(text) == old:
                return WitnessAnswer(url, status, detail=f"the witness holds size {text[:40]!r}, which this log cannot extend")
            old = int(text)
            continue
        return WitnessAnswer(url, status, detail=reply.decode("utf-8", "replace").strip()[:500])
    return WitnessAnswer(url, 409, detail="the witness's size moved while it was asked")


def _post(url: str, body: bytes, timeout: float) -> tuple[int, str, bytes]:
    """(status, content type, body) of ``POST <url>/add-checkpoint``; status 0 when nothing answered."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return 0, "", f"not an http(s) URL: {url!r}".encode()
    connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_type(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request(
            "POST", parts.path.rstrip("/") + "/add-checkpoint", body, {"Content-Type": "text/plain; charset=utf-8"}
        )
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read(64 * 1024)
    except (OSError, http.client.HTTPException) as exc:
        return 0, "", f"no answer: {exc}".encode()
    finally:
        connection.close()
