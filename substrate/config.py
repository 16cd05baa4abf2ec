"""Where the services are and what the topics are called.

Resolution order for every setting: a command's flag where it has one
(``--prefix``), the process environment, then the ``.infra/env`` file that
``infra/up`` writes (searched from the current directory upwards), then
built-in defaults. ``resolve`` also says which of these a value came from
(the first stderr line of every command that talks to Kafka or S3 names it).
Nothing here opens a connection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.cas import S3Settings

DEFAULT_PREFIX: Final = "bernstein"
ENV_FILE: Final = Path(".infra") / "env"


def env_file(start: Path | None = None) -> Path | None:
    """The ``.infra/env`` settings are read from: the first one from ``start`` (the current directory) upwards."""
    directory = (start or Path.cwd()).resolve()
    for candidate in (directory, *directory.parents):
        path = candidate / ENV_FILE
        if path.is_file():
            return path
    return None


def _env_file_values(start: Path | None = None) -> tuple[Path | None, dict[str, str]]:
    path = env_file(start)
    values: dict[str, str] = {}
    if path is not None:
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                name, _, value = line.partition("=")
                values[name.strip()] = value.strip().strip('"')
    return path, values


KNOWN_VARIABLES: Final = frozenset(
    {
        "BERNSTEIN_KAFKA_BOOTSTRAP",
        "BERNSTEIN_KAFKA_CONFIG_FILE",
        "BERNSTEIN_KAFKA_CONNECT_TIMEOUT",
        "BERNSTEIN_S3_ENDPOINT",
        "BERNSTEIN_S3_ACCESS_KEY",
        "BERNSTEIN_S3_SECRET_KEY",
        "BERNSTEIN_S3_BUCKET",
        "BERNSTEIN_S3_REGION",
        "BERNSTEIN_S3_LOCK_MODE",
        "BERNSTEIN_S3_LOCK_DAYS",
        "BERNSTEIN_S3_TIMEOUT",
        "BERNSTEIN_TOPIC_PREFIX",
        "BERNSTEIN_TOPIC_REPLICATION_FACTOR",
        "BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS",
        "BERNSTEIN_ROLES",
        "BERNSTEIN_KEYS_DIR",
        "BERNSTEIN_PRODUCER_KEYS_DIR",
        "BERNSTEIN_FOLLOW_STATE",
        "BERNSTEIN_LOG_FORMAT",
        "BERNSTEIN_DEBUG",
        "BERNSTEIN_CORE",
        "BERNSTEIN_CHROMIUM",
        "BERNSTEIN_CHROMIUM_NO_SANDBOX",
        "BERNSTEIN_BROWSER_USER",
        "BERNSTEIN_SIGNUP_PASSWORD",
        "BERNSTEIN_TOOL_CACHE",
        # read by the test suites and SDK checks only
        "BERNSTEIN_GO_LIVE",
        "BERNSTEIN_GO_SAMPLES",
        "BERNSTEIN_FUZZ_RANDOM",
        "BERNSTEIN_KEEP_TOPICS",
    }
)
"""Every ``BERNSTEIN_*`` variable something of the project reads (docs/operations.md, "Configuration")."""


def unknown_variables(environ: dict[str, str] | None = None) -> list[tuple[str, str | None]]:
    """``BERNSTEIN_*`` variables set but read by nothing, each with the known name it most likely meant (or None):
    a misspelt setting is otherwise ignored in silence and its default used."""
    import difflib

    names = sorted(name for name in (os.environ if environ is None else environ) if name.startswith("BERNSTEIN_"))
    return [
        (name, next(iter(difflib.get_close_matches(name, sorted(KNOWN_VARIABLES), n=1, cutoff=0.75)), None))
        for name in names
        if name not in KNOWN_VARIABLES
    ]


@dataclass(frozen=True)
class Resolved:
    """A setting's value and where it came from, as the first stderr line of a command that talks to Kafka or S3
    names it (``bernstein.commands.common.endpoint_banner``): a misread setting is then seen, not guessed at."""

    value: str | None
    source: str
    """``flag --NAME``, the variable's name (the environment), ``.infra/env PATH``, ``default``, or ``unset: why``."""


def resolve(
    name: str, default: str | None = None, *, start: Path | None = None, flag: tuple[str, str | None] | None = None
) -> Resolved:
    """``setting`` with its provenance; ``flag`` (the flag's name and value) wins when its value is given."""
    if flag is not None and flag[1]:
        return Resolved(flag[1], f"flag {flag[0]}")
    value = os.environ.get(name)
    if value:
        return Resolved(value, name)
    path, values = _env_file_values(start)
    if name in values:
        return Resolved(values[name], f"{ENV_FILE} {path}")
    if default is not None:
        return Resolved(default, "default")
    where = (
        f"nor in {ENV_FILE} {path}" if path is not None else f"and no {ENV_FILE} from {(start or Path.cwd()).resolve()} upwards"
    )
    return Resolved(None, f"unset: {name} is not in the environment {where}")


def setting(name: str, default: str | None = None, *, start: Path | None = None) -> str | None:
    """One setting: environment first, then ``.infra/env``, then ``default``."""
    return resolve(name, default, start=start).value


def seconds_setting(name: str, default: float, error: type[BernsteinError], *, most: float = 600) -> float:
    """A duration setting in seconds (``setting``), ``default`` when unset: more than 0 and at most ``most``, else
    ``error`` naming the variable and what it holds (one rule for every timeout a user can set)."""
    text = setting(name) or ""
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise error(f"{name}={text!r} is not a number of seconds") from None
    if not 0 < value <= most:
        raise error(f"{name}={value:g} must be more than 0 and at most {most:g} seconds")
    return value


@dataclass(frozen=True)
class Topics:
    """Topic names under one prefix."""

    prefix: str = DEFAULT_PREFIX

    @property
    def submissions(self) -> str:
        return f"{self.prefix}.activity.submissions"

    @property
    def journal(self) -> str:
        return f"{self.prefix}.activity.journal"

    @property
    def refusals(self) -> str:
        return f"{self.prefix}.activity.refusals"

    @property
    def audit(self) -> str:
        return f"{self.prefix}.audit"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}.activity.deadletter"

    @property
    def checkpoints(self) -> str:
        """Signed partition checkpoints (key = partition number), one chain per input partition."""
        return f"{self.prefix}.checkpoints"

    @property
    def state(self) -> str:
        """Snapshots of each partition's scheduler state (compacted by design: only the newest matter)."""
        return f"{self.prefix}.scheduler.state"

    @property
    def history(self) -> tuple[str, ...]:
        """The topics that hold history: kept forever, never compacted (``bernstein.substrate.topic_policy`` checks them)."""
        return (self.submissions, self.journal, self.refusals, self.audit, self.deadletter, self.checkpoints)

    @property
    def all(self) -> tuple[str, ...]:
        """Every topic of the deployment (the ones ``ensure_topics`` creates): the history and the state snapshots."""
        return (*self.history, self.state)

    def by_stream(self, stream: str) -> str:
        return {
            "journal": self.journal,
            "refusals": self.refusals,
            "audit": self.audit,
            "deadletter": self.deadletter,
            "checkpoints": self.checkpoints,
            "submissions": self.submissions,
            "state": self.state,
        }[stream]


@dataclass(frozen=True)
class Settings:
    """Endpoints and names for one deployment."""

    kafka_bootstrap: str | None
    s3: S3Settings | None
    topics: Topics

    @classmethod
    def load(cls, *, prefix: str | None = None, start: Path | None = None) -> Settings:
        endpoint = setting("BERNSTEIN_S3_ENDPOINT", start=start)
        s3 = None
        if endpoint:
            s3 = S3Settings(
                endpoint=endpoint,
                access_key=setting("BERNSTEIN_S3_ACCESS_KEY", "bernstein", start=start) or "",
                secret_key=setting("BERNSTEIN_S3_SECRET_KEY", "bernstein-secret-key", start=start) or "",
                bucket=setting("BERNSTEIN_S3_BUCKET", "bernstein-cas", start=start) or "bernstein-cas",
            )
        return cls(
            kafka_bootstrap=setting("BERNSTEIN_KAFKA_BOOTSTRAP", start=start),
            s3=s3,
            topics=Topics(prefix or setting("BERNSTEIN_TOPIC_PREFIX", DEFAULT_PREFIX, start=start) or DEFAULT_PREFIX),
        )
