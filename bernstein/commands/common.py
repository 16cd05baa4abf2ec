"""Helpers shared by the command modules: settings, stores, keys."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from consumers.manifest import load_manifest, trusted_producer_keys
from schemas.errors import BernsteinError
from substrate.cas import BlobStore, DirBlobStore, S3BlobStore
from substrate.config import Settings
from substrate.exit_codes import EXIT_USAGE
from substrate.keys import InstallKeys, TrustedKeys, default_keys_dir, load_keys


class UsageError(BernsteinError):
    """A flag combination or argument that cannot work; the message says what to pass."""

    code = "E_USAGE"


def add_prefix_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", default=None, help="topic prefix (default: $BERNSTEIN_TOPIC_PREFIX or 'bernstein')")


def add_keys_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keys-dir",
        type=Path,
        default=None,
        help="install key directory (default: $BERNSTEIN_KEYS_DIR or ~/.local/state/bernstein/keys)",
    )


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.load(prefix=getattr(args, "prefix", None))


def keys_from(args: argparse.Namespace) -> InstallKeys:
    return load_keys(getattr(args, "keys_dir", None) or default_keys_dir())


def s3_store(settings: Settings, *, every_version: bool = False) -> S3BlobStore:
    if settings.s3 is None:
        raise UsageError("no S3 endpoint: set BERNSTEIN_S3_ENDPOINT or run `infra/up` (it writes .infra/env)")
    return S3BlobStore(settings.s3, every_version=every_version)


def store_from(
    spec: str | None, settings: Settings, *, default_dir: Path | None = None, every_version: bool = False
) -> BlobStore | None:
    """``s3`` -> the S3 bucket, ``none`` -> no store, anything else -> a CAS directory. ``every_version``: an S3
    store also lists each blob's versions and names the wrong ones beneath a right newest (``S3BlobStore``)."""
    if spec is None:
        if default_dir is not None:
            return DirBlobStore(default_dir) if default_dir.is_dir() else None
        return s3_store(settings, every_version=every_version) if settings.s3 is not None else None
    if spec == "none":
        return None
    if spec == "s3":
        return s3_store(settings, every_version=every_version)
    path = Path(spec)
    if not path.is_dir():
        raise UsageError(f"--cas {spec}: no such directory (pass s3, none, or a CAS directory such as <dump>/cas)")
    return DirBlobStore(path)


DEFAULT_ROLES: Final = Path("config") / "roles.toml"


def trusted_from(path: Path | None, keys_dir: Path | None = None, roles: Path | None = None) -> TrustedKeys:
    """The pinned keys: the --trusted-keys file, else what ``bernstein keys trust --manifest`` would export
    locally: the install's key ring, and the producer keys the roles manifest registers (``roles``, else
    ``$BERNSTEIN_ROLES``, else ``config/roles.toml`` when it exists)."""
    if path is not None:
        return TrustedKeys.load(path)
    directory = keys_dir or default_keys_dir()
    try:
        trusted = TrustedKeys.from_install(load_keys(directory))
    except BernsteinError as exc:
        raise UsageError(
            f"no keys to trust: pass --trusted-keys FILE (write one with `bernstein keys trust`) ({exc.message})"
        ) from exc
    manifest = roles or (Path(os.environ["BERNSTEIN_ROLES"]) if os.environ.get("BERNSTEIN_ROLES") else None)
    if manifest is None and DEFAULT_ROLES.is_file():
        manifest = DEFAULT_ROLES
    if manifest is None:
        return trusted
    try:
        producers = load_manifest(manifest).producers
    except BernsteinError as exc:
        raise UsageError(f"cannot read the producers to trust from {manifest}: {exc.message}") from exc
    return trusted.merged(trusted_producer_keys(producers))


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0, with a message that names the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def metrics_port(text: str) -> int:
    """argparse type of ``--metrics-port``: 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--metrics-port takes a port number, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"--metrics-port takes 0 to 65535, not {value}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def show_usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Handler for a command group run without a subcommand: its help on stderr, exit 3."""

    def handler(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return handler


def command_group(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, *, help: str, metavar: str | None = None
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Add ``bernstein NAME <command>`` and return where its subcommands go.

    Every group is wired the same way: subcommand in ``args.<name>_command``,
    and run bare it prints its own help and exits 3 (``show_usage``).
    """
    group = sub.add_parser(name, help=help)
    group.set_defaults(func=show_usage(group))
    return group.add_subparsers(dest=f"{name}_command", metavar=metavar or f"<{name} command>")
