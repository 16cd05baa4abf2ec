"""A producer's identity: the name its submissions carry and the key that signs them.

Every producer host has its own key directory (``bernstein keys init --producer NAME``),
separate from the scheduler's and never holding the scheduler's keys. Producer commands
(``bernstein research|data|ops|browser|coding run``) and ``Emitter.from_settings`` load it
from, in this order:

1. ``--producer-keys DIR`` (a command's flag) or the ``keys_dir`` argument;
2. ``$BERNSTEIN_PRODUCER_KEYS_DIR``;
3. ``$XDG_STATE_HOME/bernstein/producer-keys`` (``~/.local/state/bernstein/producer-keys``),
   next to the scheduler's default ``.../bernstein/keys`` but never inside it.

``producer.id`` of every submission is the producer name of that key ring; a
``--producer-id`` given as well must equal it (``ProducerIdMismatch``), because the
scheduler refuses a submission whose ``producer.id`` differs from the name its key is
registered to (PRODUCER_MISMATCH).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.keys import Ed25519Signer, ProducerKeys, load_producer_keys

PRODUCER_KEYS_ENV: Final = "BERNSTEIN_PRODUCER_KEYS_DIR"


class ProducerIdMismatch(BernsteinError):
    """An explicit producer id that is not the name of the producer's key ring."""

    code = "E_PRODUCER_ID"


class SigningProducer(Protocol):
    """What signs a producer's submissions: its name and its Ed25519 producer key.

    ``bernstein.substrate.keys.ProducerKeys`` (a producer key directory) is one; ``ProducerIdentity``
    is the bare pair (tests, tools that hold the key elsewhere).
    """

    @property
    def name(self) -> str: ...

    @property
    def signer(self) -> Ed25519Signer: ...


@dataclass(frozen=True)
class ProducerIdentity:
    """A producer name and its signing key, without a key directory."""

    name: str
    signer: Ed25519Signer


def default_producer_keys_dir() -> Path:
    """``$BERNSTEIN_PRODUCER_KEYS_DIR``, else ``$XDG_STATE_HOME/bernstein/producer-keys``, else ``~/.local/state/...``."""
    explicit = os.environ.get(PRODUCER_KEYS_ENV)
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "bernstein" / "producer-keys"


def load_producer(keys_dir: Path | None = None) -> ProducerKeys:
    """The producer keys of ``keys_dir`` (default: ``default_producer_keys_dir()``)."""
    return load_producer_keys(keys_dir or default_producer_keys_dir())


def resolve_producer_id(producer: SigningProducer, explicit: str | None) -> str:
    """The ``producer.id`` to publish under: the key ring's name; ``explicit`` must equal it."""
    if explicit is not None and explicit != producer.name:
        raise ProducerIdMismatch(
            f"producer id {explicit!r} is not the name of the producer key ({producer.name!r}, key "
            f"{producer.signer.key_id}): the scheduler refuses a producer.id other than the name the key is "
            "registered to; drop --producer-id or use the key directory of that producer"
        )
    return producer.name


def add_producer_flags(parser: argparse.ArgumentParser, *, id_help: str = "") -> None:
    """``--producer-keys DIR`` and ``--producer-id ID`` for a command that publishes as a producer."""
    parser.add_argument(
        "--producer-keys",
        dest="producer_keys",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"this producer's key directory (`bernstein keys init --producer NAME`); the ONLY source of its "
        f"signing keys (default: ${PRODUCER_KEYS_ENV} or ~/.local/state/bernstein/producer-keys)",
    )
    parser.add_argument(
        "--producer-id",
        default=None,
        metavar="ID",
        help=id_help or "producer identity; must be the producer key's name (default: that name)",
    )


def producer_from_args(args: argparse.Namespace) -> ProducerKeys:
    """The producer keys a command's ``--producer-keys`` names, checked against its ``--producer-id``."""
    keys = load_producer(getattr(args, "producer_keys", None))
    resolve_producer_id(keys, getattr(args, "producer_id", None))
    return keys
