"""The witness's own key: an Ed25519 seed that signs cosignature/v1, in a directory only the witness reads.

    <dir>/witness.key     the 32-byte seed in hex and a newline (mode 0600)
    <dir>/witness.vkey    its verifier key, <name>+<key id>+<base64>, for the policies that trust the witness

The key is the witness's alone: a witness shares no key with the log it watches (its own trust domain).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Final

from bernstein.schemas import notes
from bernstein.substrate.keys import KeyStoreError, _read_secret, _write_new

KEY_FILE: Final = "witness.key"
VKEY_FILE: Final = "witness.vkey"


def init_witness_key(directory: Path, name: str) -> notes.NoteSigner:
    """A new witness key named ``name`` in ``directory`` (refuses to overwrite one)."""
    signer = notes.NoteSigner(name, notes.SIG_COSIGNATURE_V1, secrets.token_bytes(32))
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    try:
        _write_new(directory / KEY_FILE, f"{name}\n{signer.seed.hex()}\n".encode(), 0o600)
    except FileExistsError:
        raise KeyStoreError(f"{directory / KEY_FILE} exists; a witness keeps its key (pick another --keys directory)") from None
    _write_new(directory / VKEY_FILE, (signer.verifier.vkey + "\n").encode(), 0o644, replace=True)
    return signer


def load_witness_key(directory: Path) -> notes.NoteSigner:
    """The witness key of ``directory`` (``KeyStoreError`` naming the file for anything unusable)."""
    path = directory / KEY_FILE
    lines = _read_secret(path).decode("utf-8", errors="replace").split("\n")
    try:
        name, seed = lines[0], bytes.fromhex(lines[1])
        return notes.NoteSigner(name, notes.SIG_COSIGNATURE_V1, seed)
    except (IndexError, ValueError, notes.MalformedNote) as exc:
        raise KeyStoreError(f"{path} is not a witness key (its name, then its seed in hex): {exc}") from None
