"""``bernstein witness serve`` as a subprocess for integration tests: its own key (``witness init``) and state."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bernstein.schemas import notes


@dataclass(frozen=True)
class ServedWitness:
    """A running witness: its add-checkpoint URL, its submission prefix URL, its key, state directory and process."""

    url: str
    prefix: str
    witness: notes.NoteVerifier
    state: Path
    process: subprocess.Popen[str]


@contextmanager
def serve_witness(directory: Path, name: str, log_vkey: str, *, prefix: str = "/w") -> Iterator[ServedWitness]:
    """``witness init`` then ``witness serve --log log_vkey --port 0`` in ``directory``; stopped (SIGTERM) after."""
    made = subprocess.run(
        [sys.executable, "-m", "bernstein", "witness", "init", "--keys", str(directory / "keys"), "--name", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    witness = notes.NoteVerifier.from_vkey(made.stdout.strip())
    state = directory / "state"
    process = subprocess.Popen(
        [sys.executable, "-m", "bernstein", "witness", "serve", "--keys", str(directory / "keys"), "--state", str(state)]
        + ["--log", log_vkey, "--port", "0", "--prefix", prefix],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    match = re.search(r"serving (http://\S+/add-checkpoint) as (\S+)", line)
    assert match is not None, line + (process.stderr.read() if process.poll() is not None else "")
    assert match.group(2) == witness.vkey
    try:
        yield ServedWitness(match.group(1), match.group(1).removesuffix("/add-checkpoint"), witness, state, process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
        process.stderr.close()  # never left for the garbage collector (an unclosed pipe warns in a later test)
