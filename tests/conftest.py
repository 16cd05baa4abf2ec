"""Shared fixtures.

Unit tests (``tests/unit``) need no network. Integration tests
(``tests/integration``, marker ``integration``) talk to the real Kafka broker
and S3 server that ``infra/up`` starts; the ``services`` fixture starts them
when they are not running (idempotent) and every test isolates itself with a
fresh topic prefix and its own key directory.

Against a secured broker (``infra/up --secure``, what ``make test`` uses) the
in-process test code is the Kafka admin (``.infra/clients/admin.properties``,
exported as ``BERNSTEIN_KAFKA_CONFIG_FILE`` for the session), every test prefix
gets the deployment's ACLs (``grant``), and ``principal_env`` gives a subprocess
the client properties of the scheduler, producer or auditor principal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from hypothesis import settings

from bernstein.substrate.cas import S3BlobStore, S3Settings
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import KafkaError, delete_topics_with_prefixes, ensure_topics
from bernstein.substrate.keys import InstallKeys, ProducerKeys, TrustedKeys, init_keys, init_producer_keys
from tests.support.prefixes import ISSUED, fresh_prefix
from tests.support.producer_setup import PRODUCER_NAME, trusted_keys, write_manifest

REPO = Path(__file__).resolve().parent.parent

# The property and fuzz tests draw their examples from a fixed seed and without a time
# limit, so the same command on the same code gives the same verdict: it cannot flip on a
# lucky draw or a slow machine. BERNSTEIN_FUZZ_RANDOM=1 explores fresh examples instead
# (a failure prints its falsifying example, and the example database replays it first).
settings.register_profile("reproducible", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("BERNSTEIN_FUZZ_RANDOM") == "1" else "reproducible")


@dataclass(frozen=True)
class Services:
    bootstrap: str
    s3: S3Settings
    env_file: Path
    config_file: Path | None = None
    """The admin's client properties when the broker is secured (None: plaintext)."""

    @property
    def secure(self) -> bool:
        return self.config_file is not None

    def principal_file(self, principal: str) -> Path:
        """``.infra/clients/<principal>.properties`` of the secured local broker."""
        assert self.config_file is not None, "the broker is plaintext"
        return self.config_file.parent / f"{principal}.properties"


def _read_env(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


@pytest.fixture(scope="session")
def services() -> Iterator[Services]:
    """The real broker and S3 server (started by infra/up if needed)."""
    env_file = REPO / ".infra" / "env"
    if not (os.environ.get("BERNSTEIN_KAFKA_BOOTSTRAP") and os.environ.get("BERNSTEIN_S3_ENDPOINT")):
        # a running broker keeps its mode (a plaintext one stays plaintext); a stopped one starts secured
        command = [sys.executable, str(REPO / "infra" / "infra.py"), "up", "--secure", "--keep-mode"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            pytest.fail(f"infra/up failed:\n{result.stdout}\n{result.stderr}")
    from_file = _read_env(env_file)
    values = {**from_file, **{k: v for k, v in os.environ.items() if k.startswith("BERNSTEIN_")}}
    if "BERNSTEIN_KAFKA_BOOTSTRAP" in os.environ and "BERNSTEIN_KAFKA_CONFIG_FILE" not in os.environ:
        values.pop("BERNSTEIN_KAFKA_CONFIG_FILE", None)  # an external cluster: .infra/env's file is the local broker's
    config_file = Path(values["BERNSTEIN_KAFKA_CONFIG_FILE"]) if values.get("BERNSTEIN_KAFKA_CONFIG_FILE") else None
    if config_file is not None:
        os.environ["BERNSTEIN_KAFKA_CONFIG_FILE"] = str(config_file)  # in-process clients are the admin
    s3 = S3Settings(
        endpoint=values["BERNSTEIN_S3_ENDPOINT"],
        access_key=values.get("BERNSTEIN_S3_ACCESS_KEY", "bernstein"),
        secret_key=values.get("BERNSTEIN_S3_SECRET_KEY", "bernstein-secret-key"),
        bucket=values.get("BERNSTEIN_S3_BUCKET", "bernstein-cas"),
    )
    S3BlobStore(s3).ensure_bucket()
    bootstrap = values["BERNSTEIN_KAFKA_BOOTSTRAP"]
    yield Services(bootstrap=bootstrap, s3=s3, env_file=env_file, config_file=config_file)
    if not os.environ.get("BERNSTEIN_KEEP_TOPICS"):
        try:
            delete_topics_with_prefixes(bootstrap, ISSUED, timeout=10.0)
        except KafkaError as exc:  # housekeeping: it must not turn a session's result into an error
            print(f"\nleft the session's topics in place: {exc}", file=sys.stderr)


@pytest.fixture
def prefix() -> str:
    """A fresh topic prefix: every test gets its own topics."""
    return fresh_prefix()


@pytest.fixture
def settings(services: Services, prefix: str) -> Settings:
    return Settings(kafka_bootstrap=services.bootstrap, s3=services.s3, topics=Topics(prefix))


@pytest.fixture
def s3_store(services: Services) -> S3BlobStore:
    return S3BlobStore(services.s3)


@pytest.fixture
def install_keys(tmp_path: Path) -> InstallKeys:
    """The scheduler's keys (seal and audit); no producer ever loads them."""
    return init_keys(tmp_path / "keys")


@pytest.fixture
def producer_keys(tmp_path: Path) -> ProducerKeys:
    """A producer host's own keys (producer ``agents@test``), registered in ``manifest``."""
    return init_producer_keys(tmp_path / "producer-keys", PRODUCER_NAME)


@pytest.fixture
def manifest(tmp_path: Path, producer_keys: ProducerKeys) -> Path:
    """The manifest the scheduler runs with: config/roles.toml's roles, ``producer_keys`` and the test identities."""
    return write_manifest(tmp_path / "roles.toml", producer_keys)


@pytest.fixture
def trusted(install_keys: InstallKeys, manifest: Path) -> TrustedKeys:
    """What `bernstein keys trust --manifest` pins: the scheduler's keys and every registered producer key."""
    return trusted_keys(install_keys, manifest)


def grant(services: Services, prefix: str) -> None:
    """On a secured broker: the deployment ACLs of ``prefix`` (config/kafka-acls.toml) for the local principals."""
    if services.secure:
        from bernstein.commands.kafka import ROLES as ACL_ROLES
        from bernstein.commands.kafka import acls_for, apply_acls, load_spec

        apply_acls(services.bootstrap, acls_for(prefix, {r: f"User:{r}" for r in ACL_ROLES}, load_spec()))


def principal_env(env: dict[str, str], services: Services, principal: str) -> dict[str, str]:
    """``env`` for a subprocess acting as ``principal`` (scheduler, producer, auditor); unchanged on a plaintext broker."""
    if not services.secure:
        return env
    return {**env, "BERNSTEIN_KAFKA_CONFIG_FILE": str(services.principal_file(principal))}


_COMMAND_PRINCIPALS: Final = (
    (("scheduler",), "scheduler"),
    (("research", "run"), "producer"),
    (("browser", "run"), "producer"),
    (("dataops", "run"), "producer"),
    (("submit",), "producer"),
    (("activity", "verify"), "auditor"),
    (("topic", "export"), "auditor"),
    (("browser", "replay"), "auditor"),
)
"""Which principal a `bernstein` command runs as in a deployment (anything else: the admin)."""


def as_component(args: Sequence[str], env: dict[str, str]) -> dict[str, str]:
    """``env`` for ``bernstein ARGS`` (or a whole command line) under its own principal, when ``env`` names the secured broker's admin.

    The scheduler runs as User:scheduler, the research/browser/data-ops workers as User:producer,
    verify/export/replay as User:auditor, each with the ACLs ``grant`` gave the test's prefix.
    Before a producer or the scheduler runs, the prefix's topics are created: the deployment step
    an operator does first, since neither creates topics (``scheduler run`` only with ``--create-topics``).
    """
    config = env.get("BERNSTEIN_KAFKA_CONFIG_FILE")
    secured = bool(config) and Path(str(config)).name == "admin.properties"
    args = list(args)
    starts = [i for i, arg in enumerate(args) if arg == "bernstein" or arg.endswith("/bernstein")]
    if starts:  # a whole command line ("python -m bernstein ...", ".venv/bin/bernstein ..."): its arguments
        args = args[starts[-1] + 1 :]
    words = tuple(arg for arg in args if not arg.startswith("-"))
    for command, principal in _COMMAND_PRINCIPALS:
        if words[: len(command)] == command:
            creates = principal in ("producer", "scheduler")
            if creates and env.get("BERNSTEIN_KAFKA_BOOTSTRAP") and env.get("BERNSTEIN_TOPIC_PREFIX"):
                # `bernstein topic create` as the admin: the missing topics, 1 partition unless they exist
                ensure_topics(env["BERNSTEIN_KAFKA_BOOTSTRAP"], Topics(env["BERNSTEIN_TOPIC_PREFIX"]))
            if not secured:
                return env
            return {**env, "BERNSTEIN_KAFKA_CONFIG_FILE": str(Path(str(config)).parent / f"{principal}.properties")}
    return env


def kcat_security() -> list[str]:
    """kcat's extra arguments for the broker in use: none on a plaintext broker; on the secured one the test is skipped.

    Debian's kcat links librdkafka 2.0.2, whose SCRAM client proof Kafka 4 rejects ("invalid
    credentials"; fixed in librdkafka 2.6.1, confluentinc/librdkafka#4895). `make test` runs the
    kcat tests again in its plaintext phase.
    """
    if os.environ.get("BERNSTEIN_KAFKA_CONFIG_FILE"):
        pytest.skip("Debian's kcat (librdkafka 2.0.2) cannot log in with SCRAM to Kafka 4; run in make test's plaintext phase")
    return []


def bernstein_env(
    services: Services, prefix: str, keys: InstallKeys, producer: ProducerKeys | None = None, manifest: Path | None = None
) -> dict[str, str]:
    """The BERNSTEIN_* variables that point `bernstein` at these services, this topic prefix and these keys.

    The scheduler's commands get the scheduler's key directory and ``manifest`` (default: config/roles.toml,
    which registers no producer); producer commands get ``producer``'s key directory. On a secured broker
    the prefix's ACLs are granted here, so that ``as_component`` can run each command under its own
    principal; the variables name the admin's client properties.
    """
    security = {"BERNSTEIN_KAFKA_CONFIG_FILE": str(services.config_file)} if services.config_file else {}
    grant(services, prefix)
    env = {
        **security,
        "BERNSTEIN_KAFKA_BOOTSTRAP": services.bootstrap,
        "BERNSTEIN_S3_ENDPOINT": services.s3.endpoint,
        "BERNSTEIN_S3_ACCESS_KEY": services.s3.access_key,
        "BERNSTEIN_S3_SECRET_KEY": services.s3.secret_key,
        "BERNSTEIN_S3_BUCKET": services.s3.bucket,
        "BERNSTEIN_TOPIC_PREFIX": prefix,
        "BERNSTEIN_KEYS_DIR": str(keys.directory),
        "BERNSTEIN_ROLES": str(manifest or REPO / "config" / "roles.toml"),
    }
    if producer is not None:
        env["BERNSTEIN_PRODUCER_KEYS_DIR"] = str(producer.directory)
    return env


@pytest.fixture
def cli_env(
    services: Services, prefix: str, install_keys: InstallKeys, producer_keys: ProducerKeys, manifest: Path
) -> Iterator[dict[str, str]]:
    """Environment for running `bernstein` as a subprocess against this test's topics and keys: producer commands
    sign with ``producer_keys``, the scheduler uses ``install_keys`` and ``manifest``."""
    env = dict(os.environ)
    env.update(bernstein_env(services, prefix, install_keys, producer_keys, manifest))
    yield env
