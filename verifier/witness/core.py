"""A transparency-log witness: cosign a checkpoint only if it is consistent with what was cosigned before.

C2SP ``tlog-witness`` ``add-checkpoint`` (https://c2sp.org/tlog-witness, v1.0.0 status codes). A request
is an ``old <size>`` line, up to 63 base64 consistency-proof hashes, an empty line and a signed
checkpoint (``bernstein.schemas.notes``). In the spec's order, the witness:

1. parses the request (``400``) and the checkpoint (``400``); an origin it does not witness is ``404``;
2. verifies the log's signature with the keys it trusts for that origin, ignoring unknown keys;
   none, or a failing one, is ``403``;
3. refuses an old size above the checkpoint's (``400``) and, under its state lock, an old size that is
   not the size it last cosigned for the origin (``409``, ``text/x.tlog.size``: that size);
4. checks the RFC 6962 consistency proof from its last cosigned tree to the new one: a proof given
   from size zero, or one that does not verify, is ``422``; the same size with another root is ``409``;
5. persists the new checkpoint, with its own cosignature added, before it answers ``200`` with the
   ``cosignature/v1`` line.

Checking and persisting happen under one lock (``WitnessStore.locked``), so two racing requests
can never roll the witnessed size back. A request whose log signature verifies but which is not
consistent with what was cosigned (steps 4's refusals) is evidence of a log presenting two
histories: the witness keeps it beside the checkpoint it had cosigned (``WitnessStore.keep_evidence``).

Pure but for the store and the clock it is given (a cosignature's timestamp is the clock's seconds).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Final, Protocol

from bernstein.schemas import merkle, notes
from bernstein.schemas.errors import BernsteinError

MAX_PROOF_LINES: Final = 63
MAX_REQUEST_BYTES: Final = 16 * 1024
"""A request's bytes at most (the Go witness's cap: a checkpoint, its signatures and 63 proof lines fit)."""
SIZE_CONTENT_TYPE: Final = "text/x.tlog.size"


class WitnessCode:
    """Stable codes of the witness's refusals (each with its HTTP status)."""

    MALFORMED_REQUEST: Final = "MALFORMED_REQUEST"  # 400
    OLD_SIZE_ABOVE_CHECKPOINT: Final = "OLD_SIZE_ABOVE_CHECKPOINT"  # 400
    UNKNOWN_ORIGIN: Final = "UNKNOWN_ORIGIN"  # 404
    NOT_SIGNED_BY_LOG: Final = "NOT_SIGNED_BY_LOG"  # 403
    OLD_SIZE_MISMATCH: Final = "OLD_SIZE_MISMATCH"  # 409, the witnessed size in the body
    ROOT_MISMATCH: Final = "ROOT_MISMATCH"  # 409: the same size with another root
    INCONSISTENT: Final = "INCONSISTENT"  # 422: the proof does not verify (or is not empty from size 0)


_STATUS: Final = {
    WitnessCode.MALFORMED_REQUEST: 400,
    WitnessCode.OLD_SIZE_ABOVE_CHECKPOINT: 400,
    WitnessCode.UNKNOWN_ORIGIN: 404,
    WitnessCode.NOT_SIGNED_BY_LOG: 403,
    WitnessCode.OLD_SIZE_MISMATCH: 409,
    WitnessCode.ROOT_MISMATCH: 409,
    WitnessCode.INCONSISTENT: 422,
}


class WitnessRefusal(BernsteinError):
    """An ``add-checkpoint`` the witness does not cosign: its stable code, HTTP status and response body."""

    def __init__(self, code: str, message: str, *, witnessed_size: int | None = None) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]  # per-instance stable code
        self.status = _STATUS[code]
        self.witnessed_size = witnessed_size

    def response(self) -> tuple[int, str, bytes]:
        """(status, content type, body) as the protocol answers this refusal."""
        if self.code == WitnessCode.OLD_SIZE_MISMATCH:
            return self.status, SIZE_CONTENT_TYPE, f"{self.witnessed_size}\n".encode()
        return self.status, "text/plain; charset=utf-8", f"{self.code}: {self.message}\n".encode()


@dataclass(frozen=True, slots=True)
class AddCheckpoint:
    """A parsed request: the size the client believes the witness holds, the proof and the signed checkpoint."""

    old_size: int
    proof: tuple[bytes, ...]
    note: bytes


@dataclass(frozen=True, slots=True)
class Witnessed:
    """What the witness last cosigned for an origin: the checkpoint and its note with every signature kept."""

    origin: str
    size: int
    root_hash: bytes
    note: bytes


class WitnessStore(Protocol):
    """The witness's own state: the latest cosigned checkpoint per origin, and the evidence it kept."""

    def locked(self) -> AbstractContextManager[None]:
        """Held while one request is checked and its result persisted (no two interleave)."""
        ...

    def latest(self, origin: str) -> Witnessed | None: ...

    def save(self, witnessed: Witnessed) -> None:
        """Durably (written and synced before it returns): the witness answers only after this."""
        ...

    def keep_evidence(self, origin: str, kind: str, cosigned: Witnessed, presented: AddCheckpoint) -> str:
        """Keep a signed checkpoint inconsistent with the cosigned one; return where it is kept."""
        ...


def parse_request(body: bytes) -> AddCheckpoint:
    """Split an ``add-checkpoint`` body strictly (``WitnessRefusal`` ``MALFORMED_REQUEST`` otherwise)."""
    if len(body) > MAX_REQUEST_BYTES:
        raise _malformed(f"a request has at most {MAX_REQUEST_BYTES} bytes")
    head, sep, note = body.partition(b"\n\n")
    if not sep:
        raise _malformed("a request is an old size line, proof lines, an empty line and a checkpoint")
    lines = head.split(b"\n")
    old = lines[0]
    if not old.startswith(b"old ") or not (old[4:] == b"0" or (old[4:5] in b"123456789" and old[4:].isdigit())):
        raise _malformed("the first line is 'old <size>' in decimal without leading zeros")
    if len(old) > 4 + 20 or int(old[4:]) > merkle.MAX_SIZE:
        raise _malformed("the old size is below 2**64")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise _malformed(f"a consistency proof has at most {MAX_PROOF_LINES} lines")
    proof = tuple(_hash_line(line) for line in lines[1:])
    return AddCheckpoint(int(old[4:]), proof, note)


def _hash_line(line: bytes) -> bytes:
    try:
        raw = base64.b64decode(line, validate=True)
    except (binascii.Error, ValueError):
        raise _malformed("a proof line is one base64 hash") from None
    if len(raw) != merkle.HASH_SIZE or base64.b64encode(raw) != line:
        raise _malformed(f"a proof line is the canonical base64 of {merkle.HASH_SIZE} bytes")
    return raw


def _malformed(message: str) -> WitnessRefusal:
    return WitnessRefusal(WitnessCode.MALFORMED_REQUEST, message)


class Witness:
    """Cosigns checkpoints of the logs it witnesses (see the module docstring)."""

    def __init__(
        self,
        signer: notes.NoteSigner,
        logs: Mapping[str, Iterable[notes.NoteVerifier]],
        store: WitnessStore,
        *,
        clock: Callable[[], float],
    ) -> None:
        if signer.sig_type != notes.SIG_COSIGNATURE_V1:
            raise ValueError("a witness signs cosignature/v1 (signature type 0x04)")
        self.signer = signer
        self.logs = {origin: tuple(keys) for origin, keys in logs.items()}
        self.store = store
        self._clock = clock

    @property
    def vkey(self) -> str:
        """The witness's verifier key, for the policies that trust it."""
        return self.signer.verifier.vkey

    def latest_by_id(self, origin_hex: str) -> Witnessed | None:
        """The latest cosigned checkpoint of the witnessed origin whose ``origin_id`` this is (None: none yet)."""
        for origin in self.logs:
            if origin_id(origin) == origin_hex:
                return self.store.latest(origin)
        return None

    def add_checkpoint(self, body: bytes) -> bytes:
        """The cosignature line(s) for the request's checkpoint, or ``WitnessRefusal``."""
        request = parse_request(body)
        note, checkpoint = self._signed_by_log(request.note)
        if request.old_size > checkpoint.size:
            raise WitnessRefusal(
                WitnessCode.OLD_SIZE_ABOVE_CHECKPOINT, f"old size {request.old_size} is above the checkpoint's {checkpoint.size}"
            )
        with self.store.locked():
            latest = self.store.latest(checkpoint.origin)
            witnessed = 0 if latest is None else latest.size
            if request.old_size != witnessed:
                raise WitnessRefusal(
                    WitnessCode.OLD_SIZE_MISMATCH,
                    f"the witness last cosigned size {witnessed} of {checkpoint.origin!r}, not {request.old_size}",
                    witnessed_size=witnessed,
                )
            self._check_consistency(request, checkpoint, latest)
            signature = self.signer.sign(note.text, timestamp=max(int(self._clock()), 1))
            cosigned = notes.add_signatures(request.note, [signature])
            self.store.save(Witnessed(checkpoint.origin, checkpoint.size, checkpoint.root_hash, cosigned))
        return signature.line().encode("utf-8")

    def _signed_by_log(self, note_bytes: bytes) -> tuple[notes.Note, notes.Checkpoint]:
        """A checkpoint note of a witnessed origin that a key trusted for it signed (the spec's steps 1 and 2)."""
        try:
            note = notes.parse_note(note_bytes)
            checkpoint = notes.parse_checkpoint(note.text)
        except notes.MalformedNote as exc:
            raise _malformed(f"the checkpoint: {exc.message}") from None
        keys = self.logs.get(checkpoint.origin)
        if keys is None:
            raise WitnessRefusal(WitnessCode.UNKNOWN_ORIGIN, f"this witness does not witness {checkpoint.origin!r}")
        try:
            notes.open_note(note_bytes, keys)
        except notes.NoteRejected as exc:
            raise WitnessRefusal(WitnessCode.NOT_SIGNED_BY_LOG, f"the log's signature: {exc.message}") from None
        return note, checkpoint

    def cosign_checked(self, note_bytes: bytes, reproduced: Callable[[Witnessed], bool]) -> Witnessed | None:
        """Cosign a checkpoint whose tree the caller recomputed from the log's own leaves (``audit follow --witness``).

        No consistency proof: ``reproduced(latest)`` says whether those same leaves also gave the checkpoint this
        witness cosigned last. The log's signature is verified, and the check and the save share the lock, as in
        ``add_checkpoint``. Returns what is now cosigned; None when the witness already holds this tree or a larger
        one (nothing to add). ``WitnessRefusal``: ``NOT_SIGNED_BY_LOG``, ``UNKNOWN_ORIGIN``, or ``ROOT_MISMATCH`` /
        ``INCONSISTENT`` when the leaves do not give what was cosigned (the presented checkpoint is kept as evidence).
        """
        note, checkpoint = self._signed_by_log(note_bytes)
        with self.store.locked():
            latest = self.store.latest(checkpoint.origin)
            if latest is not None:
                presented = AddCheckpoint(latest.size, (), note_bytes)
                if checkpoint.size == latest.size and checkpoint.root_hash != latest.root_hash:
                    where = self.store.keep_evidence(checkpoint.origin, "root_mismatch", latest, presented)
                    raise WitnessRefusal(
                        WitnessCode.ROOT_MISMATCH,
                        f"size {checkpoint.size} of {checkpoint.origin!r} was cosigned with another root (evidence: {where})",
                    )
                if checkpoint.size <= latest.size:
                    return None
                if not reproduced(latest):
                    where = self.store.keep_evidence(checkpoint.origin, "inconsistent", latest, presented)
                    raise WitnessRefusal(
                        WitnessCode.INCONSISTENT,
                        f"the journal's leaves do not give size {latest.size} of {checkpoint.origin!r} as cosigned, so "
                        f"size {checkpoint.size} does not extend it (evidence: {where})",
                    )
            signature = self.signer.sign(note.text, timestamp=max(int(self._clock()), 1))
            witnessed = Witnessed(
                checkpoint.origin, checkpoint.size, checkpoint.root_hash, notes.add_signatures(note_bytes, [signature])
            )
            self.store.save(witnessed)
        return witnessed

    def _check_consistency(self, request: AddCheckpoint, checkpoint: notes.Checkpoint, latest: Witnessed | None) -> None:
        if latest is None or request.old_size == 0:
            if request.proof:
                raise WitnessRefusal(WitnessCode.INCONSISTENT, "a consistency proof from size 0 is empty")
            return
        if checkpoint.size == latest.size and checkpoint.root_hash != latest.root_hash:
            where = self.store.keep_evidence(checkpoint.origin, "root_mismatch", latest, request)
            raise WitnessRefusal(
                WitnessCode.ROOT_MISMATCH,
                f"size {checkpoint.size} of {checkpoint.origin!r} was cosigned with another root (evidence: {where})",
            )
        try:
            consistent = merkle.verify_consistency(
                latest.size, checkpoint.size, latest.root_hash, checkpoint.root_hash, request.proof
            )
        except merkle.MalformedProof:
            consistent = False
        if not consistent and checkpoint.size == latest.size:  # the same tree, but a proof where none belongs
            raise WitnessRefusal(WitnessCode.INCONSISTENT, "a consistency proof between equal sizes is empty")
        if not consistent:
            where = self.store.keep_evidence(checkpoint.origin, "inconsistent", latest, request)
            raise WitnessRefusal(
                WitnessCode.INCONSISTENT,
                f"the proof does not show size {latest.size} of {checkpoint.origin!r} is a prefix of size "
                f"{checkpoint.size} (evidence: {where})",
            )


def origin_id(origin: str) -> str:
    """A file-name-safe name of an origin: hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(origin.encode("utf-8")).hexdigest()
