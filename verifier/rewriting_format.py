"""A proof of rewriting as bytes: encoded and parsed strictly, nothing verified (``rewriting`` does that).

bernstein/rewriting-proof/v1
<base64 hashes of the consistency path from m to n, one a line (none when m == n)>

note <byte length of A's signed note>
<A's signed note, verbatim>note <byte length of B's signed note>
<B's signed note, verbatim>
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Final

from bernstein.schemas import merkle
from bernstein.schemas.errors import BernsteinError, MalformedInput
from bernstein.schemas.notes import MAX_NOTE_BYTES, Checkpoint, b64decode_canonical, parse_checkpoint, parse_note

HEADER: Final = "bernstein/rewriting-proof/v1"
MAX_REWRITING_PROOF_BYTES: Final = 2 * MAX_NOTE_BYTES + 64 * 1024
"""Two notes of at most 1 MiB each, and a path of at most 129 hashes with the framing lines."""
_NOTE_LINE: Final = b"note "


class MalformedRewritingProof(MalformedInput):
    """Bytes that are no ``bernstein/rewriting-proof/v1`` file."""

    code = "E_MALFORMED_REWRITING_PROOF"


class NothingToProve(BernsteinError):
    """The source holds no two signed checkpoints a proof of rewriting can show to be inconsistent."""

    code = "E_NO_REWRITING"


# -- the file -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RewritingProof:
    """A parsed file: the consistency path and the two signed notes, the smaller tree's (A) first."""

    path: tuple[bytes, ...]
    old_note: bytes
    new_note: bytes

    def encode(self) -> str:
        lines = [HEADER, *(_b64(h) for h in self.path)]
        framed = b"".join(_NOTE_LINE + b"%d\n" % len(note) + note for note in (self.old_note, self.new_note))
        return "\n".join(lines) + "\n\n" + framed.decode("utf-8")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def parse_rewriting_proof(data: bytes) -> tuple[RewritingProof, Checkpoint, Checkpoint]:
    """Parse a file strictly (``MalformedRewritingProof`` otherwise): the proof and the two notes' checkpoints
    (their syntax only; no signature is checked here)."""
    if len(data) > MAX_REWRITING_PROOF_BYTES:
        raise MalformedRewritingProof(f"a proof of rewriting has at most {MAX_REWRITING_PROOF_BYTES} bytes, got {len(data)}")
    head, sep, rest = data.partition(b"\n\n")
    if not sep:
        raise MalformedRewritingProof("a proof of rewriting's consistency path ends with an empty line before the notes")
    lines = head.split(b"\n")
    if lines[0] != HEADER.encode():
        raise MalformedRewritingProof(f"a proof of rewriting starts with {HEADER!r}, got {lines[0][:80]!r}")
    if len(lines) - 1 > 2 * 64 + 1:
        raise MalformedRewritingProof(f"a consistency path has at most 129 hashes, got {len(lines) - 1}")
    path = tuple(_decode64(line, f"consistency path hash {i}") for i, line in enumerate(lines[1:]))
    old_note, rest = _framed(rest, "the first (smaller tree's) note")
    new_note, rest = _framed(rest, "the second (larger tree's) note")
    if rest:
        raise MalformedRewritingProof(f"{len(rest)} bytes follow the second note")
    old, new = _checkpoint(old_note, "the first note"), _checkpoint(new_note, "the second note")
    if old.size > new.size:
        raise MalformedRewritingProof(f"the first note is the smaller tree's, got {old.size} leaves before {new.size}")
    expected = merkle.consistency_path_length(old.size, new.size)
    if len(path) != expected:
        raise MalformedRewritingProof(
            f"the consistency path from {old.size} to {new.size} leaves has {expected} hashes, got {len(path)}"
        )
    return RewritingProof(path, old_note, new_note), old, new


def _decode64(line: bytes, what: str) -> bytes:
    value = b64decode_canonical(line.decode("latin-1"), MalformedRewritingProof, what)
    if len(value) != merkle.HASH_SIZE:
        raise MalformedRewritingProof(f"{what} has {len(value)} bytes, not {merkle.HASH_SIZE}")
    return value


def _framed(data: bytes, what: str) -> tuple[bytes, bytes]:
    """One ``note <length>`` line and that many bytes: (the note, what follows)."""
    line, sep, rest = data.partition(b"\n")
    number = line.removeprefix(_NOTE_LINE)
    if (
        not sep
        or not line.startswith(_NOTE_LINE)
        or not (number.isascii() and number.isdigit())
        or len(number) > 8
        or (number != b"0" and number.startswith(b"0"))
        or not 0 < int(number) <= MAX_NOTE_BYTES
    ):
        raise MalformedRewritingProof(f"{what} is introduced by 'note <its length in bytes>', got {line[:80]!r}")
    size = int(number)
    if len(rest) < size:
        raise MalformedRewritingProof(f"{what} is announced as {size} bytes, {len(rest)} follow")
    return rest[:size], rest[size:]


def _checkpoint(note: bytes, what: str) -> Checkpoint:
    try:
        return parse_checkpoint(parse_note(note).text)
    except MalformedInput as exc:
        raise MalformedRewritingProof(f"{what} is no signed tlog-checkpoint note: {exc}") from None
