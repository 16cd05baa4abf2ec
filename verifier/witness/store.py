"""The witness's state on disk: the latest cosigned checkpoint per origin, and the evidence it kept.

    <state>/logs/<sha256(origin)>.json       {"origin", "size", "root_hash" (base64), "note" (the cosigned note)}
    <state>/evidence/<sha256(origin)>/<sha256(request)>.json
                                             {"kind", "origin", "cosigned" (note), "presented" (note), "old_size", "proof"}
    <state>/lock                             held while a request is checked and its result persisted

A state file is written to a temporary file, synced, renamed over the old one and the directory
synced, so a crash leaves either the old or the new checkpoint, never a torn one. The lock is a
thread lock plus ``flock`` on ``<state>/lock``: two witness processes on one state directory
(a mistake, but a possible one) still check and persist one request at a time. A state file that
does not parse is an error the operator must look at (``WitnessStateCorrupt``), never a reset to
"nothing cosigned", which would let a log roll its history back.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bernstein.schemas import notes
from bernstein.schemas.errors import BernsteinError
from bernstein.verifier.witness.core import AddCheckpoint, Witnessed, origin_id


class WitnessStateCorrupt(BernsteinError):
    """A witness state file that cannot be read back: the witness stops rather than forget what it cosigned."""

    code = "E_WITNESS_STATE_CORRUPT"


class FileWitnessStore:
    """``WitnessStore`` in a directory (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        self._thread_lock = threading.Lock()

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._thread_lock, open(self.directory / "lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _path(self, origin: str) -> Path:
        return self.directory / "logs" / f"{origin_id(origin)}.json"

    def latest(self, origin: str) -> Witnessed | None:
        path = self._path(origin)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            document = json.loads(data)
            witnessed = Witnessed(
                str(document["origin"]),
                int(document["size"]),
                base64.b64decode(document["root_hash"], validate=True),
                str(document["note"]).encode("utf-8"),
            )
            checkpoint = notes.parse_checkpoint(notes.parse_note(witnessed.note).text)
        except (ValueError, KeyError, TypeError, binascii.Error, notes.MalformedNote) as exc:
            raise WitnessStateCorrupt(f"{path} does not parse ({exc}); restore it from a backup") from None
        if (checkpoint.origin, checkpoint.size, checkpoint.root_hash) != (origin, witnessed.size, witnessed.root_hash):
            raise WitnessStateCorrupt(f"{path} does not hold {origin!r}'s checkpoint; restore it from a backup")
        return witnessed

    def save(self, witnessed: Witnessed) -> None:
        document = {
            "origin": witnessed.origin,
            "size": witnessed.size,
            "root_hash": base64.b64encode(witnessed.root_hash).decode("ascii"),
            "note": witnessed.note.decode("utf-8"),
        }
        _write_atomically(self._path(witnessed.origin), json.dumps(document, indent=2, sort_keys=True).encode() + b"\n")

    def keep_evidence(self, origin: str, kind: str, cosigned: Witnessed, presented: AddCheckpoint) -> str:
        document: dict[str, Any] = {
            "kind": kind,
            "origin": origin,
            "cosigned": cosigned.note.decode("utf-8"),
            "presented": presented.note.decode("utf-8", errors="replace"),
            "old_size": presented.old_size,
            "proof": [base64.b64encode(h).decode("ascii") for h in presented.proof],
        }
        data = json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"
        folder = self.directory / "evidence" / origin_id(origin)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{hashlib.sha256(data).hexdigest()}.json"
        _write_atomically(path, data)
        return str(path)

    def evidence(self) -> list[dict[str, Any]]:
        """Every piece of evidence kept, oldest file name first (for tests and ``witness`` tooling)."""
        root = self.directory / "evidence"
        return [json.loads(p.read_bytes()) for p in sorted(root.rglob("*.json"))] if root.exists() else []


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
