"""`bernstein scheduler run` refuses topics whose settings could lose history.

Real broker: the admin alters a fresh deployment's topics the way a hand-made topic or a broker
default would have them (7-day retention, compaction); the scheduler, started as its own
principal, exits 3 before consuming anything, naming each setting and the command that fixes it.
Fixed, it starts. A deployment asking for more replicas than a topic has is refused the same way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bernstein.substrate.config import Settings
from tests.conftest import as_component
from tests.support.kafka import fresh_topics

REPO = Path(__file__).resolve().parents[2]
SCHEDULER = [str(REPO / ".venv" / "bin" / "python"), "-m", "bernstein", "scheduler", "run", "--idle-exit", "0.5"]


def alter(bootstrap: str, topic: str, **settings: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource  # type: ignore[attr-defined]

    from bernstein.substrate.kafka import client_config

    admin = AdminClient(client_config(bootstrap))  # kept alive until every future resolved
    entries = [
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in settings.items()
    ]
    for future in admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=entries)]).values():
        future.result(30)


def run_scheduler(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(SCHEDULER, env=as_component(SCHEDULER, env), cwd=REPO, capture_output=True, text=True, timeout=120)


def test_retention_and_compaction_keep_the_scheduler_from_starting(settings: Settings, cli_env: dict[str, str]) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)
    alter(bootstrap, topics.journal, retention_ms="604800000")
    alter(bootstrap, topics.audit, cleanup_policy="compact")
    alter(bootstrap, topics.submissions, retention_bytes="1073741824")

    refused = run_scheduler(cli_env)

    assert refused.returncode == 3, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "the scheduler will not start: 3 topic setting(s) could lose history" in refused.stderr
    fix = "kafka-configs.sh --alter --entity-type topics --entity-name"
    for topic, setting, value, repair in (
        (topics.journal, "retention.ms", "604800000", "retention.ms=-1"),
        (topics.audit, "cleanup.policy", "compact", "cleanup.policy=delete"),
        (topics.submissions, "retention.bytes", "1073741824", "retention.bytes=-1"),
    ):
        assert f"{topic}: {setting}={value} " in refused.stderr, (topic, refused.stderr)
        assert f"{fix} {topic} --add-config {repair}" in refused.stderr
    assert "scheduler p0:" not in refused.stderr, "the scheduler started before refusing"

    # as the error says: put the settings back and it starts
    alter(bootstrap, topics.journal, retention_ms="-1")
    alter(bootstrap, topics.audit, cleanup_policy="delete")
    alter(bootstrap, topics.submissions, retention_bytes="-1")
    started = run_scheduler(cli_env)
    assert started.returncode == 0, started.stderr


def test_topics_replicated_less_than_the_settings_ask_are_refused(settings: Settings, cli_env: dict[str, str]) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)  # one broker: replication factor 1

    refused = run_scheduler({**cli_env, "BERNSTEIN_TOPIC_REPLICATION_FACTOR": "3", "BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS": "2"})

    assert refused.returncode == 3, refused.stderr
    assert "Traceback" not in refused.stderr
    for topic in topics.all:
        assert f"{topic}: replication factor=1 is below BERNSTEIN_TOPIC_REPLICATION_FACTOR=3" in refused.stderr
        assert f"{topic}: min.insync.replicas=1 is below BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS=2" in refused.stderr
