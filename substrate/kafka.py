"""Kafka configuration, topic creation and error translation.

Every topic is created with explicit settings (``ensure_topics``: ``bernstein topic
create``, the scheduler, the demo; never broker auto-creation): nothing is ever deleted
by retention and nothing is compacted, because a compacted or expired journal would
break its own hash chain. Producers never create topics: they only check that the
submissions topic exists (``require_submissions_topic``; a missing one is
``TopicMissing``, which names ``bernstein topic create``), so a mistyped prefix fails
instead of starting a deployment no scheduler reads. All
output topics have as many partitions as the submissions topic: a scheduler
writes its outputs to the partition number it reads from, so each input
partition owns one journal partition, one audit chain and one checkpoint chain.

Security: every client built here (``client_config``) merges the librdkafka
security settings of the properties file named by ``BERNSTEIN_KAFKA_CONFIG_FILE``
(environment, else ``.infra/env``): TLS, SASL/SCRAM or mTLS, see the README's
"Kafka security". Only the keys of ``SECURITY_KEYS`` are accepted; a password is
never logged nor quoted in an error.

Durability: topics are created with ``BERNSTEIN_TOPIC_REPLICATION_FACTOR``
replicas and ``min.insync.replicas`` = ``BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS``
(both default 1, the single local broker; a production cluster wants 3 and 2).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.config import Topics, seconds_setting, setting

RETAIN_FOREVER: Final = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "message.timestamp.type": "CreateTime",
    "max.message.bytes": "2097152",
}
BROKER_STAMPED: Final = {"message.timestamp.type": "LogAppendTime", "compression.type": "producer"}
"""The submissions topic's timestamps come from the broker, not the producer: the scheduler decides
which producer key was valid by its input's timestamp, so a producer holding a revoked key must not
be able to backdate a submission (docs/security.md). Output topics keep CreateTime: the scheduler
stamps each output with its input's timestamp, so a replay writes the same records. ``compression.type=producer``
keeps compressed batches as sent: any other value makes the broker inflate each batch in its heap
(``bernstein.substrate.topic_policy.INPUT_SETTINGS`` says what that costs)."""


STATE_COMPACTED: Final = {
    "cleanup.policy": "compact",
    "message.timestamp.type": "CreateTime",
    "max.message.bytes": "2097152",
    "segment.bytes": str(64 * 1024 * 1024),
    "min.cleanable.dirty.ratio": "0.1",
}
"""The scheduler state topic: compacted (key = partition, or partition.chunk), so only the newest snapshots stay;
small segments so that compaction reaches them (docs/scheduler.md, "Snapshots and restart")."""


def topic_config(topics: Topics, name: str) -> dict[str, str]:
    """The settings a new topic of the deployment gets."""
    if name == topics.state:
        return dict(STATE_COMPACTED)
    return {**RETAIN_FOREVER, **(BROKER_STAMPED if name == topics.submissions else {})}


class KafkaError(BernsteinError):
    """Kafka refused or could not be reached."""

    code = "E_KAFKA"


class KafkaUnavailable(KafkaError):
    code = "E_KAFKA_UNAVAILABLE"


class TopicMismatch(KafkaError):
    code = "E_TOPIC_MISMATCH"


class KafkaConfigError(KafkaError):
    """The client properties file or a topic setting is unusable (names the key, never a secret value)."""

    code = "E_KAFKA_CONFIG"


class KafkaNotAuthorized(KafkaError):
    """The broker refused this client's principal (authentication failed or an ACL denies the operation)."""

    code = "E_KAFKA_NOT_AUTHORIZED"


class TopicMissing(KafkaError):
    """A topic a producer writes to does not exist; producers never create topics (the admin does)."""

    code = "E_TOPIC_MISSING"


def topic_missing(bootstrap: str, topics: Topics) -> TopicMissing:
    """The typed error for a missing submissions topic: which topic, which prefix, and the command that creates it."""
    return TopicMissing(
        f"topic {topics.submissions} does not exist on Kafka at {bootstrap}: no deployment has the prefix {topics.prefix!r} there, so "
        "nothing would read what is published (a mistyped --prefix or BERNSTEIN_TOPIC_PREFIX?). Producers never create "
        f"topics: the Kafka admin creates the deployment's topics with `bernstein topic create --prefix {topics.prefix}`"
    )


CONFIG_FILE_SETTING: Final = "BERNSTEIN_KAFKA_CONFIG_FILE"

SECURITY_KEYS: Final = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)
"""The librdkafka settings a client properties file may hold (anything else is refused)."""

SECRET_KEYS: Final = frozenset({"sasl.password", "ssl.key.password"})
PATH_KEYS: Final = frozenset({"ssl.ca.location", "ssl.certificate.location", "ssl.key.location"})
PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")
ENDPOINT_CHECKS: Final = ("https", "none")


def parse_client_properties(text: str, *, source: str, base: Path | None = None) -> dict[str, str]:
    """The security settings of a client properties file (``key=value`` lines, ``#``/``!`` comments).

    Relative ``ssl.*.location`` paths are taken relative to ``base`` (the file's directory).
    Errors name the file, the line and the key, never a value (it may be a password).
    """
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            raise KafkaConfigError(f"{source}:{number}: expected key=value")
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key not in SECURITY_KEYS:
            raise KafkaConfigError(
                f"{source}:{number}: unknown key {key!r}; a Kafka client properties file may set only "
                + ", ".join(sorted(SECURITY_KEYS))
            )
        if key in values:
            raise KafkaConfigError(f"{source}:{number}: {key} is set twice")
        if not value:
            raise KafkaConfigError(f"{source}:{number}: {key} has no value")
        values[key] = value
    if "sasl.mechanism" in values and "sasl.mechanisms" in values:
        raise KafkaConfigError(f"{source}: set sasl.mechanism or sasl.mechanisms, not both")
    _check_choice(values, "security.protocol", PROTOCOLS, source)
    for key in ("sasl.mechanism", "sasl.mechanisms"):
        _check_choice(values, key, MECHANISMS, source)
    _check_choice(values, "ssl.endpoint.identification.algorithm", ENDPOINT_CHECKS, source)
    protocol = values.get("security.protocol", "PLAINTEXT")
    if protocol.startswith("SASL_") and "sasl.username" in values and "sasl.password" not in values:
        raise KafkaConfigError(f"{source}: sasl.username is set but sasl.password is not")
    if not protocol.startswith("SASL_") and any(key.startswith("sasl.") for key in values):
        raise KafkaConfigError(f"{source}: sasl.* settings need security.protocol SASL_SSL or SASL_PLAINTEXT")
    if base is not None:
        for key in PATH_KEYS & values.keys():
            values[key] = str(base / values[key])
    return values


def _check_choice(values: dict[str, str], key: str, choices: tuple[str, ...], source: str) -> None:
    if key in values:
        upper = values[key].upper() if key != "ssl.endpoint.identification.algorithm" else values[key].lower()
        if upper not in choices:
            raise KafkaConfigError(f"{source}: {key} must be one of {', '.join(choices)}")
        values[key] = upper


def load_client_properties(path: Path) -> dict[str, str]:
    """Read and check one client properties file (see ``parse_client_properties``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise KafkaConfigError(f"cannot read the Kafka client properties file {path} ({CONFIG_FILE_SETTING}): {reason}") from None
    return parse_client_properties(text, source=str(path), base=path.resolve().parent)


def security_config(config_file: Path | None = None) -> dict[str, str]:
    """The security settings every client gets: ``config_file``, else the file ``BERNSTEIN_KAFKA_CONFIG_FILE`` names."""
    if config_file is None:
        named = setting(CONFIG_FILE_SETTING)
        if not named:
            return {}
        config_file = Path(named).expanduser()
    return load_client_properties(config_file)


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` fit for a log line or an error: secrets replaced by ``***``."""
    return {key: ("***" if key in SECRET_KEYS else value) for key, value in config.items() if key != "logger"}


def replication_settings() -> tuple[int, int]:
    """(replication factor, min.insync.replicas) of the topics ``ensure_topics`` creates."""
    factor = _positive_setting("BERNSTEIN_TOPIC_REPLICATION_FACTOR")
    min_insync = _positive_setting("BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS")
    if min_insync > factor:
        raise KafkaConfigError(
            f"BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS={min_insync} exceeds BERNSTEIN_TOPIC_REPLICATION_FACTOR={factor}: "
            "no write could ever be acknowledged"
        )
    return factor, min_insync


CONNECT_TIMEOUT_SETTING: Final = "BERNSTEIN_KAFKA_CONNECT_TIMEOUT"


def connect_timeout() -> float:
    """How long a command's first request (metadata) may wait for a broker before it says it cannot reach it:
    ``BERNSTEIN_KAFKA_CONNECT_TIMEOUT`` seconds, default 5. A reachable broker answers in milliseconds; a wrong
    address or a stopped broker is then named within seconds, not after the client's own 30."""
    return seconds_setting(CONNECT_TIMEOUT_SETTING, 5.0, KafkaConfigError)


def _positive_setting(name: str) -> int:
    text = setting(name, "1") or "1"
    try:
        value = int(text)
    except ValueError:
        raise KafkaConfigError(f"{name}={text!r} is not a whole number") from None
    if value < 1:
        raise KafkaConfigError(f"{name}={value} must be at least 1")
    return value


_LIBRDKAFKA_LOG = logging.getLogger("bernstein.librdkafka")
if not os.environ.get("BERNSTEIN_DEBUG"):
    # librdkafka logs every failed connection attempt; our own errors say what
    # went wrong and what to do, so its chatter is opt-in (BERNSTEIN_DEBUG=1).
    _LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
    _LIBRDKAFKA_LOG.propagate = False


def client_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Base librdkafka config: logs routed to a Python logger (silent unless BERNSTEIN_DEBUG).

    The security settings of ``BERNSTEIN_KAFKA_CONFIG_FILE`` (``security_config``) come next;
    ``extra`` wins over both.

    Nagle's algorithm is off, as in Kafka's Java client and broker: a transaction is a chain
    of small requests (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) that must not wait
    behind one another. Measured +5% for the scheduler and for the passthrough alike.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "bernstein",
        "log_level": 3,
        "logger": _LIBRDKAFKA_LOG,
        "socket.nagle.disable": True,
    }
    config.update(security_config())
    config.update(extra)
    return config


def client_config_as(config_file: Path, bootstrap: str, **extra: Any) -> dict[str, Any]:
    """``client_config`` with the security settings of ``config_file`` instead of ``BERNSTEIN_KAFKA_CONFIG_FILE``.

    For code that acts as several principals in one process (tests, ``bernstein kafka``).
    """
    config = client_config(bootstrap)
    for key in SECURITY_KEYS:
        config.pop(key, None)
    config.update(security_config(config_file))
    config.update(extra)
    return config


def emitter_producer_config(bootstrap: str) -> dict[str, Any]:
    """Idempotent producer, acks from every in-sync replica, bounded delivery time, Kafka's murmur2 partitioner.

    ``murmur2_random`` places a keyed record where the Java client, franz-go and kafkajs do
    (``bernstein.schemas.partitioning.partition_for``), not on librdkafka's default CRC-32 partition: the
    scheduler refuses a record on another partition than its run id's (``WRONG_PARTITION``).
    """
    return client_config(
        bootstrap,
        **{
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 2,
            "message.timeout.ms": 30000,
            "message.max.bytes": 2097152,
            # a producer never creates topics, not even through a broker that auto-creates them on first use
            "allow.auto.create.topics": False,
        },
    )


def transactional_producer_config(bootstrap: str, transactional_id: str) -> dict[str, Any]:
    """The scheduler's transactional producer (the benchmark's passthrough baseline uses the same)."""
    return client_config(
        bootstrap,
        **{
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60000,
            # Records leave while the batch is still being produced, instead of all at once when the
            # commit flushes (measured on the scheduler benchmark: 53k -> 67k rec/s; passthrough unchanged).
            "linger.ms": 1,
            "batch.num.messages": 10000,
            "message.max.bytes": 2097152,
            "queue.buffering.max.messages": 500000,
            "compression.type": "lz4",
            # After a commit the coordinator is still writing markers and answers the next
            # transaction's first request with a retriable CONCURRENT_TRANSACTIONS; the default
            # 100 ms backoff then dominates every batch (measured: 53 ms per batch -> 4 ms).
            "retry.backoff.ms": 5,
            "retry.backoff.max.ms": 100,
        },
    )


def require_bootstrap(bootstrap: str | None) -> str:
    if not bootstrap:
        raise KafkaUnavailable(
            "no Kafka bootstrap address: set BERNSTEIN_KAFKA_BOOTSTRAP or run `infra/up` (it writes .infra/env)"
        )
    return bootstrap


def ensure_topics(bootstrap: str, topics: Topics, *, partitions: int = 1, timeout: float = 30.0) -> int:
    """Create any missing topic of the deployment; return the partition count.

    Existing topics are kept; the partition count of existing topics wins and
    all of them must agree (an output topic with fewer partitions than the
    submissions topic would mix audit chains). New topics get the replication
    factor and ``min.insync.replicas`` of ``replication_settings``. A principal
    that may not create topics gets ``KafkaNotAuthorized`` (create them as the
    Kafka admin: ``bernstein topic create``).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    factor, min_insync = replication_settings()
    admin, errors = _admin(bootstrap)
    names = topics.all
    metadata = _cluster_metadata(admin, bootstrap, timeout, errors)
    existing = {name: len(metadata.topics[name].partitions) for name in names if name in metadata.topics}
    counts = set(existing.values())
    if len(counts) > 1:
        raise TopicMismatch(f"topics of prefix {topics.prefix!r} disagree on partition counts: {existing}")
    count = counts.pop() if counts else partitions
    missing = [name for name in names if name not in existing]
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=count,
                    replication_factor=factor,
                    config={**topic_config(topics, name), "min.insync.replicas": str(min_insync)},
                )
                for name in missing
            ],
            operation_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" in str(exc):
                    continue
                if is_authorization_error(exc):
                    raise KafkaNotAuthorized(
                        f"this principal may not create topic {name} (or cannot see it): create the topics of prefix "
                        f"{topics.prefix!r} as the Kafka admin (`bernstein topic create --prefix {topics.prefix}`) and grant "
                        f"this principal its ACLs (`bernstein kafka acls --prefix {topics.prefix}`)"
                    ) from None
                raise KafkaError(f"cannot create topic {name}: {exc}") from exc
        _wait_for_leaders(admin, missing, count, timeout)
    return count


def require_submissions_topic(bootstrap: str, topics: Topics, *, timeout: float = 30.0) -> int:
    """A producer's check: the submissions topic exists (its partition count is returned). Never creates a topic.

    Needs only Describe on that topic (a producer's ACLs grant nothing else). A missing topic is
    ``TopicMissing`` (the prefix and ``bernstein topic create`` named), on an open broker as under
    ACLs; a principal that may not Describe it gets ``KafkaNotAuthorized`` (Kafka does not tell it
    whether the topic exists). The metadata request does not ask the broker to auto-create it.
    """
    from confluent_kafka import KafkaException

    admin, errors = _admin(bootstrap, **{"allow.auto.create.topics": False})
    try:
        metadata = admin.list_topics(topic=topics.submissions, timeout=timeout)
    except KafkaException as exc:
        if is_authorization_error(exc):
            raise _no_topic(topics) from None
        raise _unreachable(exc, bootstrap, errors, admin) from exc
    info = metadata.topics.get(topics.submissions)
    error = None if info is None else info.error
    if info is not None and error is None and info.partitions:
        return len(info.partitions)
    if error is not None and is_authorization_error(error):
        raise _no_topic(topics)
    if error is None or is_unknown_topic(error):
        raise topic_missing(bootstrap, topics)
    raise KafkaError(f"cannot describe topic {topics.submissions}: {error}")


def is_unknown_topic(error: Any) -> bool:
    """True for a confluent_kafka ``KafkaError`` that says the topic does not exist."""
    name = error.name() if hasattr(error, "name") else str(error)
    return name in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC")


def _no_topic(topics: Topics) -> KafkaNotAuthorized:
    # Kafka answers TOPIC_AUTHORIZATION_FAILED for a topic that does not exist too (it never tells
    # a principal without Describe whether a topic exists)
    return KafkaNotAuthorized(
        f"this principal may not describe topic {topics.submissions}, or it does not exist: the Kafka admin creates "
        f"the deployment's topics (`bernstein topic create --prefix {topics.prefix}`) and grants the ACLs "
        f"(`bernstein kafka acls --prefix {topics.prefix} --apply`); check BERNSTEIN_KAFKA_CONFIG_FILE names this "
        "producer's client properties"
    )


_AUTHORIZATION_ERRORS: Final = (
    "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "SASL_AUTHENTICATION_FAILED",
    "_AUTHENTICATION",
)


def is_authorization_error(error: Any) -> bool:
    """True for a KafkaException / KafkaError that says the principal was refused."""
    inner = error.args[0] if isinstance(error, Exception) and error.args else error
    name = inner.name() if hasattr(inner, "name") else str(inner)
    return any(code in name or code in str(inner) for code in _AUTHORIZATION_ERRORS)


def not_authorized(action: str) -> KafkaNotAuthorized:
    """The typed error for a refused operation: what was refused and where the rights come from."""
    return KafkaNotAuthorized(
        f"Kafka refused this client's principal to {action}: check BERNSTEIN_KAFKA_CONFIG_FILE (which principal "
        "this client authenticates as) and the deployment's ACLs (`bernstein kafka acls --prefix P`)"
    )


def delivery_error(error: Any, topic: str) -> KafkaError:
    """A failed delivery report (confluent_kafka ``KafkaError``) as a typed error; authorization failures are ``KafkaNotAuthorized``."""
    if is_authorization_error(error):
        return not_authorized(f"write to topic {topic} ({error.name()})")
    return KafkaError(f"Kafka refused a record for topic {topic}: {error}")


def delete_topics_with_prefixes(bootstrap: str, prefixes: Iterable[str], *, timeout: float = 30.0) -> list[str]:
    """Delete every topic whose name starts with one of ``prefixes``; returns the names deleted.

    For benchmarks and test sessions, which create topics by the dozen: left behind, their data
    piles up on the local broker (about a gigabyte per scheduler benchmark run) and slows it down.
    """
    from confluent_kafka import KafkaException

    starts = tuple(prefixes)
    if not starts:
        return []
    admin, errors = _admin(bootstrap)
    doomed = sorted(name for name in _cluster_metadata(admin, bootstrap, timeout, errors).topics if name.startswith(starts))
    if not doomed:
        return []
    for name, future in admin.delete_topics(doomed, operation_timeout=timeout).items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            if "UNKNOWN_TOPIC" not in str(exc):
                raise KafkaError(f"cannot delete topic {name}: {exc}") from exc
    return doomed


def _admin(bootstrap: str, **extra: Any) -> tuple[Any, list[Any]]:
    """An AdminClient and the errors librdkafka reports out of band (a refused SASL login, a failed TLS handshake)."""
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    return AdminClient(client_config(bootstrap, error_cb=errors.append, **extra)), errors


def unreachable(exc: Exception, bootstrap: str, errors: list[Any] | None = None, admin: Any = None) -> KafkaError:
    """``_unreachable`` for callers outside this module (the verifier's Kafka source, the follower)."""
    return _unreachable(exc, bootstrap, errors or [], admin)


def _unreachable(exc: Exception, bootstrap: str, errors: list[Any], admin: Any = None) -> KafkaError:
    """A failed request as a typed error: refused credentials, a TLS failure, or no broker at all."""
    if admin is not None:
        admin.poll(0)  # serve the error callbacks waiting in librdkafka's queue
    if is_authorization_error(exc) or any(is_authorization_error(error) for error in errors):
        return KafkaNotAuthorized(
            f"Kafka at {bootstrap} refused this client's login: check the SASL user and password (or the client "
            "certificate) in the file BERNSTEIN_KAFKA_CONFIG_FILE names"
        )
    if any(getattr(error, "name", lambda: "")() == "_SSL" for error in errors):
        return KafkaUnavailable(
            f"TLS with Kafka at {bootstrap} failed: check ssl.ca.location (and the broker's certificate) in the file "
            "BERNSTEIN_KAFKA_CONFIG_FILE names"
        )
    return KafkaUnavailable(
        f"cannot reach Kafka at {bootstrap}: {exc}; is the broker running (`infra/up`), and does "
        "BERNSTEIN_KAFKA_CONFIG_FILE match its listener (security.protocol)?"
    )


def _cluster_metadata(admin: Any, bootstrap: str, timeout: float, errors: list[Any] | None = None) -> Any:
    """``admin.list_topics()``, failures translated into typed errors (``_unreachable``)."""
    from confluent_kafka import KafkaException

    try:
        return admin.list_topics(timeout=min(timeout, connect_timeout()))
    except KafkaException as exc:
        if is_authorization_error(exc):
            raise not_authorized("list topics") from None
        raise _unreachable(exc, bootstrap, errors or [], admin) from exc


def _wait_for_leaders(admin: Any, names: list[str], count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=timeout)
        ready = all(
            name in metadata.topics
            and len(metadata.topics[name].partitions) == count
            and all(p.leader >= 0 for p in metadata.topics[name].partitions.values())
            for name in names
        )
        if ready:
            return
        if time.monotonic() > deadline:
            raise KafkaUnavailable(f"topics {names} have no leader after {timeout:.0f}s")
        time.sleep(0.1)


def partition_count(bootstrap: str, topic: str, timeout: float = 10.0) -> int:
    from confluent_kafka import KafkaException

    admin, errors = _admin(bootstrap)
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise _unreachable(exc, bootstrap, errors, admin) from exc
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        raise TopicMismatch(
            f"topic {topic} does not exist: create the deployment's topics with `bernstein topic create --prefix P`"
        )
    return len(info.partitions)


def headers_dict(headers: Mapping[str, bytes] | list[tuple[str, bytes]] | None) -> dict[str, bytes]:
    if headers is None:
        return {}
    if isinstance(headers, Mapping):
        return dict(headers)
    return {k: v for k, v in headers}
