"""Topic settings that could lose history, checked (not assumed) before a scheduler starts.

``ensure_topics`` creates a deployment's topics with retention off and no compaction, but a
topic created by hand, by a platform team's template or by a broker default
(``log.retention.hours=168``) may expire or compact records. Every topic of a deployment is
history: the journal and the audit topics are hash and MAC chains that break where a record
goes missing, refusals and checkpoints are what the verifier reports against, and the
submissions topic is where each audit chain's input offsets point. So the scheduler refuses
to start on a topic that could delete records, and on one replicated less than the
deployment's settings ask for (``BERNSTEIN_TOPIC_REPLICATION_FACTOR``,
``BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS``), and says how to fix it.

The scheduler state topic (``<prefix>.scheduler.state``) is the one exception, named explicitly
by the caller (``compacted``): it holds snapshots, not history, and is compacted by design (only
the newest snapshot of each partition matters; losing one costs a longer restart, never a
record). Its replication is still checked.

``history_risks`` is the pure rule; ``describe_topics`` reads what it needs from Kafka.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from bernstein.substrate.kafka import (
    KafkaError,
    _admin,
    _cluster_metadata,
    _unreachable,
    is_authorization_error,
    not_authorized,
    replication_settings,
)

KEEP_FOREVER: Final = {"retention.ms": "-1", "retention.bytes": "-1"}
"""The retention settings under which Kafka deletes nothing (with ``cleanup.policy=delete``)."""

INPUT_SETTINGS: Final = {
    "message.timestamp.type": (
        "LogAppendTime",
        "lets a producer stamp its own submissions, so a holder of a revoked key could backdate one into the key's lifetime",
    ),
    "compression.type": (
        "producer",
        "makes the broker decompress and recompress every batch in its heap: one small compressed record that "
        "inflates to more than the heap stops the broker (a 500 MB zstd value did, with a 768 MB heap)",
    ),
}
"""The submissions topic's settings the scheduler relies on: the broker's clock decides which producer key was
valid, and the broker validates compressed batches without inflating them (the scheduler's consumer, which
does inflate them, dead-letters any record it cannot, as INPUT_UNREADABLE)."""


class TopicHistoryAtRisk(KafkaError):
    """A deployment topic's settings could delete or compact records, or replicate them too thinly."""

    code = "E_TOPIC_SETTINGS"


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """What the check needs to know of one topic: its effective configuration and replica count."""

    name: str
    config: Mapping[str, str]
    replicas: int


@dataclass(frozen=True, slots=True)
class TopicRisk:
    """One setting of one topic that the scheduler will not run with, and the setting that fixes it."""

    topic: str
    setting: str
    value: str
    why: str
    fix: str

    def describe(self) -> str:
        return f"{self.topic}: {self.setting}={self.value} {self.why}; fix: {self.fix}"


def history_risks(
    topics: Iterable[TopicSettings],
    *,
    replication_factor: int,
    min_insync: int,
    compacted: Collection[str] = (),
    submissions: str | None = None,
) -> list[TopicRisk]:
    """Every setting of ``topics`` that could lose a record, in topic order (empty: safe to start).

    Topics named in ``compacted`` (the scheduler state topic) are exempt from the retention and
    compaction rules, not from the replication ones. The topic named ``submissions`` must also have
    ``INPUT_SETTINGS``.
    """
    risks: list[TopicRisk] = []
    for topic in sorted(topics, key=lambda t: t.name):
        alter = f"kafka-configs.sh --alter --entity-type topics --entity-name {topic.name} --add-config"
        policy = topic.config.get("cleanup.policy", "delete")
        history = topic.name not in compacted
        if history and "compact" in {part.strip() for part in policy.split(",")}:
            risks.append(
                TopicRisk(
                    topic.name,
                    "cleanup.policy",
                    policy,
                    "keeps only the newest record per key, so compaction deletes a run's earlier records",
                    f"{alter} cleanup.policy=delete",
                )
            )
        for name, keep in KEEP_FOREVER.items() if history else ():
            value = topic.config.get(name)
            if value is None or value.strip() != keep:
                risks.append(
                    TopicRisk(
                        topic.name,
                        name,
                        "unset" if value is None else value,
                        "lets Kafka delete old records, which breaks the chains that run through them",
                        f"{alter} {name}={keep}",
                    )
                )
        if topic.replicas < replication_factor:
            risks.append(
                TopicRisk(
                    topic.name,
                    "replication factor",
                    str(topic.replicas),
                    f"is below BERNSTEIN_TOPIC_REPLICATION_FACTOR={replication_factor}: losing a broker could lose records",
                    "add replicas with kafka-reassign-partitions.sh, or lower BERNSTEIN_TOPIC_REPLICATION_FACTOR if this "
                    "cluster cannot have more",
                )
            )
        for name, (want, why) in INPUT_SETTINGS.items() if topic.name == submissions else ():
            value = topic.config.get(name)
            if value != want:
                risks.append(TopicRisk(topic.name, name, "unset" if value is None else value, why, f"{alter} {name}={want}"))
        insync = topic.config.get("min.insync.replicas", "1")
        if _int(insync) < min_insync:
            risks.append(
                TopicRisk(
                    topic.name,
                    "min.insync.replicas",
                    insync,
                    f"is below BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS={min_insync}: an acknowledged write could sit on too "
                    "few brokers",
                    f"{alter} min.insync.replicas={min_insync}",
                )
            )
    return risks


def require_history_kept(
    bootstrap: str,
    names: Iterable[str],
    *,
    timeout: float = 30.0,
    compacted: Collection[str] = (),
    submissions: str | None = None,
) -> None:
    """Raise ``TopicHistoryAtRisk`` naming every risky setting of the topics ``names`` (all must exist).

    ``compacted``: topics among ``names`` that are compacted by design; ``submissions``: the input topic
    (``history_risks``).
    """
    factor, min_insync = replication_settings()
    risks = history_risks(
        describe_topics(bootstrap, list(names), timeout=timeout),
        replication_factor=factor,
        min_insync=min_insync,
        compacted=compacted,
        submissions=submissions,
    )
    if risks:
        lines = "\n  ".join(risk.describe() for risk in risks)
        raise TopicHistoryAtRisk(
            f"the scheduler will not start: {len(risks)} topic setting(s) could lose history or stop it:\n  {lines}\n"
            "(topics made by `bernstein topic create` have none of these; docs/kafka-security.md, 'Topics and their settings')"
        )


def describe_topics(bootstrap: str, names: list[str], *, timeout: float = 30.0) -> list[TopicSettings]:
    """Each topic's effective configuration (its own settings over the broker's defaults) and replica count."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    admin, errors = _admin(bootstrap)
    metadata = _cluster_metadata(admin, bootstrap, timeout, errors)
    missing = [name for name in names if name not in metadata.topics]
    if missing:
        raise KafkaError(f"topics {', '.join(missing)} do not exist: create them with `bernstein topic create`")
    try:
        futures = admin.describe_configs([ConfigResource("topic", name) for name in names], request_timeout=timeout)
        configs = {resource.name: _values(future.result(timeout)) for resource, future in futures.items()}
    except KafkaException as exc:
        if is_authorization_error(exc):
            raise not_authorized(f"describe the configuration of topics {', '.join(names)} (DescribeConfigs)") from None
        raise _unreachable(exc, bootstrap, errors, admin) from exc
    return [
        TopicSettings(name, configs[name], min((len(p.replicas) for p in metadata.topics[name].partitions.values()), default=0))
        for name in names
    ]


def _values(entries: Mapping[str, Any]) -> dict[str, str]:
    return {name: str(entry.value) for name, entry in entries.items() if entry.value is not None}


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0
