"""Helpers shared by the command modules: settings, stores, keys."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bernstein.consumers.manifest import load_manifest, trusted_producer_keys
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.cas import BlobStore, DirBlobStore, S3BlobStore
from bernstein.substrate.cli_args import command_group as command_group
from bernstein.substrate.cli_args import non_negative_int as non_negative_int
from bernstein.substrate.cli_args import positive_seconds as positive_seconds
from bernstein.substrate.cli_args import show_usage as show_usage
from bernstein.substrate.config import DEFAULT_PREFIX, Resolved, Settings, resolve
from bernstein.substrate.keys import InstallKeys, TrustedKeys, default_keys_dir, load_keys

if TYPE_CHECKING:
    from bernstein.verifier.sources import RecordSource


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


@dataclass(frozen=True)
class Uses:
    """What one invocation of a command talks to, for its first stderr line (``endpoint_banner``)."""

    kafka: bool = False
    s3: bool = False
    prefix: bool = True
    """Whether the topic prefix matters to it (not to ``kafka users``, nor to a dump's verify)."""
    json: bool = False
    """Its stderr is JSON lines (``scheduler run --log-format json``, ``audit follow --progress``): the line is one too."""
    logger: str = "bernstein"
    fields: tuple[tuple[str, Any], ...] = ()
    """The JSON line's ``logger`` and the fields every line of the command's log carries (the scheduler's partition)."""


NOTHING: Final = Uses()
"""A command that touches neither Kafka nor S3: no line."""


def _from(source: str) -> str:
    """A source as the banner words it: ``default``, ``default: ...``, ``unset: ...`` and ``unreadable: ...`` as they
    are, anything else (a flag, a variable, an ``.infra/env``, a file) ``from SOURCE``."""
    return source if source == "default" or source.startswith(("default:", "unset:", "unreadable:")) else f"from {source}"


def _protocol(start: Path | None) -> tuple[str, str]:
    """The Kafka security protocol every client gets (``bernstein.substrate.kafka.security_config``) and where it came from.

    Never raises: an unusable properties file is the command's own error, on the next line."""
    from bernstein.substrate.kafka import CONFIG_FILE_SETTING, KafkaConfigError, load_client_properties

    named = resolve(CONFIG_FILE_SETTING, start=start)
    if not named.value:
        return "PLAINTEXT", f"default: {CONFIG_FILE_SETTING} unset"
    path = Path(named.value).expanduser()
    via = f"via {CONFIG_FILE_SETTING}" + ("" if named.source == CONFIG_FILE_SETTING else f" {_from(named.source)}")
    try:
        protocol = load_client_properties(path).get("security.protocol")
    except KafkaConfigError as exc:
        return "unknown", f"unreadable: {exc.message}"
    if protocol is None:
        return "PLAINTEXT", f"default: no security.protocol in {path} {via}"
    return protocol, f"{path} {via}"


def endpoint_fields(uses: Uses, prefix_flag: str | None = None, *, start: Path | None = None) -> dict[str, Any]:
    """Each endpoint, protocol and the prefix ``uses`` names, with where each came from, resolved as
    ``Settings.load`` resolves them (flag, environment, ``.infra/env``, default); empty for ``NOTHING``."""
    fields: dict[str, Any] = {}
    if uses.kafka:
        bootstrap = resolve("BERNSTEIN_KAFKA_BOOTSTRAP", start=start)
        protocol, protocol_from = _protocol(start)
        fields["kafka"] = {
            "bootstrap": bootstrap.value,
            "bootstrap_from": bootstrap.source,
            "protocol": protocol,
            "protocol_from": protocol_from,
        }
    if uses.prefix and (uses.kafka or uses.s3):
        prefix: Resolved = resolve("BERNSTEIN_TOPIC_PREFIX", DEFAULT_PREFIX, start=start, flag=("--prefix", prefix_flag))
        fields["prefix"] = {"value": prefix.value or DEFAULT_PREFIX, "from": prefix.source}
    if uses.s3:
        endpoint = resolve("BERNSTEIN_S3_ENDPOINT", start=start)
        scheme = None if not endpoint.value else "https" if endpoint.value.startswith("https://") else "http"
        fields["s3"] = {"endpoint": endpoint.value, "protocol": scheme, "from": endpoint.source}
    return fields


def endpoint_banner(fields: dict[str, Any]) -> str | None:
    """``endpoint_fields`` as one line, the first a command that talks to Kafka or S3 writes on stderr, e.g.
    ``bernstein: kafka HOST:PORT (SASL_SSL, from FILE via BERNSTEIN_KAFKA_CONFIG_FILE from .infra/env PATH; address
    from .infra/env PATH); prefix bernstein (default); s3 http://HOST:PORT (http, from BERNSTEIN_S3_ENDPOINT)``.
    A wrong broker, listener, prefix or store is then seen before the command waits on it (docs/operations.md,
    "Configuration")."""
    parts = []
    kafka = fields.get("kafka")
    if kafka is not None:
        if kafka["bootstrap"] is None:
            parts.append(f"kafka none ({kafka['bootstrap_from']})")
        else:
            parts.append(
                f"kafka {kafka['bootstrap']} ({kafka['protocol']}, {_from(kafka['protocol_from'])}; "
                f"address {_from(kafka['bootstrap_from'])})"
            )
    prefix = fields.get("prefix")
    if prefix is not None:
        parts.append(f"prefix {prefix['value']} ({_from(prefix['from'])})")
    s3 = fields.get("s3")
    if s3 is not None:
        if s3["endpoint"] is None:
            parts.append(f"s3 none ({s3['from']})")
        else:
            parts.append(f"s3 {s3['endpoint']} ({s3['protocol']}, {_from(s3['from'])})")
    return f"bernstein: {'; '.join(parts)}" if parts else None


ENDPOINT_LINE: Final = re.compile(r"bernstein: (kafka|prefix|s3) \S+ \(.*\)(; (prefix|s3) \S+ \(.*\))*")
"""The text form of ``endpoint_banner`` (a whole line)."""


def without_endpoint_line(stderr: str) -> str:
    """``stderr`` without its first line when that line is the endpoint line (text, or the JSON event ``endpoints``
    of a ``bernstein`` logger), for whatever reads the rest."""
    first, _, rest = stderr.partition("\n")
    if ENDPOINT_LINE.fullmatch(first):
        return rest
    if first.startswith("{"):
        try:
            event = json.loads(first)
        except ValueError:
            return stderr
        if isinstance(event, dict) and event.get("event") == "endpoints" and str(event.get("logger")).startswith("bernstein"):
            return rest
    return stderr


def announce_endpoints(uses: Uses, prefix_flag: str | None = None, *, stream: Any = None) -> None:
    """Write the endpoint line (``endpoint_banner``) on stderr, as a JSON event when the command's stderr is JSON
    lines; nothing for a command that touches neither Kafka nor S3."""
    fields = endpoint_fields(uses, prefix_flag)
    line = endpoint_banner(fields)
    if line is None:
        return
    from bernstein.substrate.logs import EventLog

    log = EventLog(uses.logger, json=uses.json, stream=stream or sys.stderr, fields=dict(uses.fields))
    log.emit("endpoints", line.removeprefix("bernstein: ") if uses.json else line, **fields)


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


def record_source(args: argparse.Namespace) -> tuple[RecordSource, Path | None]:
    """The records ``--from`` names (``kafka``, a dump directory, or kcat -J files; a dump's ``cas/`` beside it), with
    the checkpoints handed with ``--witnessed`` (read now: an unreadable one is a usage error) attached as
    ``source.witnessed``. Used by ``activity verify``/``report``/``prove`` and ``witness submit``."""
    source, cas = _records(args)
    witnessed = []
    for path in getattr(args, "witnessed", None) or ():
        try:
            witnessed.append(path.read_bytes())
        except OSError as exc:
            raise UsageError(f"--witnessed {path}: cannot read it ({exc.strerror or exc})") from None
    source.witnessed = tuple(witnessed)  # type: ignore[attr-defined]
    return source, cas


def _records(args: argparse.Namespace) -> tuple[RecordSource, Path | None]:
    from bernstein.substrate.kafka import require_bootstrap
    from bernstein.verifier.sources import DumpSource, KcatSource

    if args.source == "kafka":
        from bernstein.verifier.kafka_source import KafkaSource

        settings = settings_from(args)
        return KafkaSource(require_bootstrap(settings.kafka_bootstrap), settings.topics), None
    paths = [Path(p) for p in args.source.split(",")]
    if len(paths) == 1 and paths[0].is_dir():
        return DumpSource(paths[0]), paths[0] / "cas"
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UsageError(f"--from {args.source}: {', '.join(missing)} not found (pass kafka, a dump directory or kcat -J files)")
    prefix = args.prefix or settings_from(args).topics.prefix
    return KcatSource(paths, prefix), None


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


def metrics_port(text: str) -> int:
    """argparse type of ``--metrics-port``: 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--metrics-port takes a port number, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"--metrics-port takes 0 to 65535, not {value}")
    return value
