"""The C2SP tlog-proof of one activity as bytes: encoded and parsed strictly, nothing verified (``proof`` does that).

c2sp.org/tlog-proof@v1
extra <base64 of the stage's JournalRecord bytes, as the journal stores them>
index <the entry's leaf index in its partition's Merkle log>
<base64 hashes of the RFC 6962 inclusion path, from the leaf's sibling up>

<the signed checkpoint note, verbatim, with any witness cosignatures>
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Final

from bernstein.schemas import merkle
from bernstein.schemas.errors import BernsteinError, MalformedInput
from bernstein.schemas.notes import b64decode_canonical

HEADER: Final = "c2sp.org/tlog-proof@v1"
MAX_PROOF_BYTES: Final = 4 * 1024 * 1024
"""A proof holds one journal record (at most the scheduler's 2 MiB output cap), 64 hashes and a note."""


class ProofUnavailable(BernsteinError):
    """No proof can be made (yet): the stage is not journalled, or no signed tree head covers it."""

    code = "E_PROOF_UNAVAILABLE"

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found
        """The stage is not in the journal (else: it is, but no signed tree head covers it yet)."""


class WitnessedCheckpointRefused(BernsteinError):
    """A checkpoint handed to ``prove --witnessed`` that no proof may rest on: not signed by a pinned seal key (or a
    pinned witness's cosignature fails), or not reproduced by the journal. ``problem`` is the code ``activity verify
    --witnessed`` names the same finding with."""

    code = "E_WITNESSED_CHECKPOINT_REFUSED"

    def __init__(self, problem: str, message: str, *, position: int) -> None:
        super().__init__(message)
        self.problem = problem
        self.position = position
        """Which of the handed checkpoints, from 0 in the order given."""


class MalformedProof(MalformedInput):
    """Bytes that are no C2SP tlog-proof of a journal entry."""

    code = "E_MALFORMED_TLOG_PROOF"


@dataclass(frozen=True, slots=True)
class ActivityProof:
    """A parsed proof: the journal record, its leaf index, the inclusion path and the signed checkpoint note."""

    record: bytes
    index: int
    path: tuple[bytes, ...]
    note: bytes

    def encode(self) -> str:
        lines = [HEADER, "extra " + _b64(self.record), f"index {self.index}", *(_b64(h) for h in self.path)]
        return "\n".join(lines) + "\n\n" + self.note.decode("utf-8")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def parse_proof(text: bytes) -> ActivityProof:
    """Parse a tlog-proof strictly (``MalformedProof`` otherwise); nothing is verified here."""
    if len(text) > MAX_PROOF_BYTES:
        raise MalformedProof(f"a proof has at most {MAX_PROOF_BYTES} bytes, got {len(text)}")
    try:
        head, sep, note = text.decode("utf-8").partition("\n\n")
    except UnicodeDecodeError:
        raise MalformedProof("a proof is UTF-8 text") from None
    if not sep:
        raise MalformedProof("a proof's inclusion path ends with an empty line before the checkpoint")
    lines = head.split("\n")
    if lines[0] != HEADER:
        raise MalformedProof(f"a proof starts with {HEADER!r}, got {lines[0][:80]!r}")
    if len(lines) < 3 or not lines[1].startswith("extra "):
        raise MalformedProof("a proof of an activity carries its journal record as the 'extra' line")
    record = _decode64(lines[1][len("extra ") :], "the extra data")
    index_text = lines[2].removeprefix("index ")
    if (
        not lines[2].startswith("index ")
        or not (index_text.isascii() and index_text.isdigit())
        or len(index_text) > 20
        or (index_text != "0" and index_text.startswith("0"))
        or int(index_text) >= merkle.MAX_SIZE
    ):
        raise MalformedProof(f"the third line is 'index <decimal below 2**64>', got {lines[2][:80]!r}")
    path = tuple(_decode64(line, "an inclusion path hash") for line in lines[3:])
    if any(len(h) != merkle.HASH_SIZE for h in path) or len(path) > 64:
        raise MalformedProof("an inclusion path is at most 64 hashes of 32 bytes")
    return ActivityProof(record, int(index_text), path, note.encode("utf-8"))


def _decode64(text: str, what: str) -> bytes:
    return b64decode_canonical(text, MalformedProof, what)
