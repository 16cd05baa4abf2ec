"""Kafka configuration, topic creation and error translation.

Every topic is created on first use with explicit settings (never broker
auto-creation): nothing is ever deleted by retention and nothing is compacted,
because a compacted or expired journal would break its own hash chain. All
output topics have as many partitions as the submissions topic: a scheduler
writes its outputs to the partition number it reads from, so each input
partition owns one journal partition, one audit chain and one checkpoint chain.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from schemas.errors import BernsteinError
from substrate.config import Topics

RETAIN_FOREVER: Final = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "message.timestamp.type": "CreateTime",
    "max.message.bytes": "2097152",
}


class KafkaError(BernsteinError):
    """Kafka refused or could not be reached."""

    code = "E_KAFKA"


class KafkaUnavailable(KafkaError):
    code = "E_KAFKA_UNAVAILABLE"


class TopicMismatch(KafkaError):
    code = "E_TOPIC_MISMATCH"


_LIBRDKAFKA_LOG = logging.getLogger("bernstein.librdkafka")
if not os.environ.get("BERNSTEIN_DEBUG"):
    # librdkafka logs every failed connection attempt; our own errors say what
    # went wrong and what to do, so its chatter is opt-in (BERNSTEIN_DEBUG=1).
    _LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
    _LIBRDKAFKA_LOG.propagate = False


def client_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Base librdkafka config: logs routed to a Python logger (silent unless BERNSTEIN_DEBUG).

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
    config.update(extra)
    return config


def emitter_producer_config(bootstrap: str) -> dict[str, Any]:
    """Idempotent producer, acks from every in-sync replica, bounded delivery time."""
    return client_config(
        bootstrap,
        **{
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 30000,
            "message.max.bytes": 2097152,
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
    submissions topic would mix audit chains).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(client_config(bootstrap))
    names = topics.all
    metadata = _cluster_metadata(admin, bootstrap, timeout)
    existing = {name: len(metadata.topics[name].partitions) for name in names if name in metadata.topics}
    counts = set(existing.values())
    if len(counts) > 1:
        raise TopicMismatch(f"topics of prefix {topics.prefix!r} disagree on partition counts: {existing}")
    count = counts.pop() if counts else partitions
    missing = [name for name in names if name not in existing]
    if missing:
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=count, replication_factor=1, config=dict(RETAIN_FOREVER)) for name in missing],
            operation_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise KafkaError(f"cannot create topic {name}: {exc}") from exc
        _wait_for_leaders(admin, missing, count, timeout)
    return count


def delete_topics_with_prefixes(bootstrap: str, prefixes: Iterable[str], *, timeout: float = 30.0) -> list[str]:
    """Delete every topic whose name starts with one of ``prefixes``; returns the names deleted.

    For benchmarks and test sessions, which create topics by the dozen: left behind, their data
    piles up on the local broker (about a gigabyte per scheduler benchmark run) and slows it down.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    starts = tuple(prefixes)
    if not starts:
        return []
    admin = AdminClient(client_config(bootstrap))
    doomed = sorted(name for name in _cluster_metadata(admin, bootstrap, timeout).topics if name.startswith(starts))
    if not doomed:
        return []
    for name, future in admin.delete_topics(doomed, operation_timeout=timeout).items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            if "UNKNOWN_TOPIC" not in str(exc):
                raise KafkaError(f"cannot delete topic {name}: {exc}") from exc
    return doomed


def _cluster_metadata(admin: Any, bootstrap: str, timeout: float) -> Any:
    """``admin.list_topics()``, an unreachable broker translated into ``KafkaUnavailable``."""
    from confluent_kafka import KafkaException

    try:
        return admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot reach Kafka at {bootstrap}: {exc}; is the broker running? (`infra/up`)") from exc


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
    from confluent_kafka.admin import AdminClient

    try:
        metadata = AdminClient(client_config(bootstrap)).list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        raise TopicMismatch(f"topic {topic} does not exist; publish something or run `bernstein topics create`")
    return len(info.partitions)


def headers_dict(headers: Mapping[str, bytes] | list[tuple[str, bytes]] | None) -> dict[str, bytes]:
    if headers is None:
        return {}
    if isinstance(headers, Mapping):
        return dict(headers)
    return {k: v for k, v in headers}
