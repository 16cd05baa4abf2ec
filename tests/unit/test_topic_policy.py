"""The rule that keeps a scheduler off topics that could lose history (substrate.topic_policy)."""

from __future__ import annotations

from bernstein.substrate.kafka import RETAIN_FOREVER
from bernstein.substrate.topic_policy import TopicSettings, history_risks

SAFE = {**RETAIN_FOREVER, "min.insync.replicas": "1"}


def risks(config: dict[str, str], *, replicas: int = 1, factor: int = 1, min_insync: int = 1) -> list[tuple[str, str, str]]:
    found = history_risks(
        [TopicSettings("p.activity.journal", config, replicas)], replication_factor=factor, min_insync=min_insync
    )
    return [(r.topic, r.setting, r.value) for r in found]


def test_the_settings_topic_create_uses_are_safe() -> None:
    assert risks(SAFE) == []


def test_a_broker_default_retention_is_refused_with_the_setting_that_fixes_it() -> None:
    (risk,) = history_risks(
        [TopicSettings("p.audit", {**SAFE, "retention.ms": "604800000"}, 1)], replication_factor=1, min_insync=1
    )
    assert (risk.topic, risk.setting, risk.value) == ("p.audit", "retention.ms", "604800000")
    assert risk.fix == "kafka-configs.sh --alter --entity-type topics --entity-name p.audit --add-config retention.ms=-1"
    assert "p.audit: retention.ms=604800000" in risk.describe()


def test_size_based_retention_and_missing_settings_are_refused() -> None:
    assert risks({**SAFE, "retention.bytes": "1073741824"}) == [("p.activity.journal", "retention.bytes", "1073741824")]
    unset = {k: v for k, v in SAFE.items() if k != "retention.ms"}
    assert risks(unset) == [("p.activity.journal", "retention.ms", "unset")]


def test_compaction_is_refused_alone_or_with_delete() -> None:
    assert risks({**SAFE, "cleanup.policy": "compact"}) == [("p.activity.journal", "cleanup.policy", "compact")]
    assert risks({**SAFE, "cleanup.policy": "compact,delete"}) == [("p.activity.journal", "cleanup.policy", "compact,delete")]


def test_replication_below_the_deployment_settings_is_refused() -> None:
    assert risks(SAFE, replicas=1, factor=3, min_insync=2) == [
        ("p.activity.journal", "replication factor", "1"),
        ("p.activity.journal", "min.insync.replicas", "1"),
    ]
    assert risks({**SAFE, "min.insync.replicas": "2"}, replicas=3, factor=3, min_insync=2) == []


def test_every_risk_of_every_topic_is_named_in_topic_order() -> None:
    found = history_risks(
        [
            TopicSettings("p.b", {**SAFE, "retention.ms": "1"}, 1),
            TopicSettings("p.a", {**SAFE, "cleanup.policy": "compact", "retention.bytes": "5"}, 1),
        ],
        replication_factor=1,
        min_insync=1,
    )
    assert [(r.topic, r.setting) for r in found] == [
        ("p.a", "cleanup.policy"),
        ("p.a", "retention.bytes"),
        ("p.b", "retention.ms"),
    ]


def test_the_state_topic_is_exempt_from_the_history_rules_only_when_named_and_not_from_replication() -> None:
    from bernstein.substrate.config import Topics
    from bernstein.substrate.kafka import STATE_COMPACTED, topic_config

    topics = Topics("p")
    state = TopicSettings(topics.state, {**STATE_COMPACTED, "min.insync.replicas": "1"}, 1)
    journal = TopicSettings(topics.journal, {**SAFE, "cleanup.policy": "compact"}, 1)
    assert topic_config(topics, topics.state)["cleanup.policy"] == "compact"
    assert topic_config(topics, topics.journal) == RETAIN_FOREVER
    assert topics.state in topics.all and topics.state not in topics.history
    found = history_risks([state, journal], replication_factor=1, min_insync=1, compacted=(topics.state,))
    assert [(r.topic, r.setting) for r in found] == [("p.activity.journal", "cleanup.policy")]
    # not named: the state topic's compaction and retention are risks like any topic's
    found = history_risks([state], replication_factor=1, min_insync=1)
    assert [(r.topic, r.setting) for r in found] == [
        ("p.scheduler.state", "cleanup.policy"),
        ("p.scheduler.state", "retention.ms"),
        ("p.scheduler.state", "retention.bytes"),
    ]
    # replication is still checked
    found = history_risks([state], replication_factor=3, min_insync=2, compacted=(topics.state,))
    assert [(r.topic, r.setting) for r in found] == [
        ("p.scheduler.state", "replication factor"),
        ("p.scheduler.state", "min.insync.replicas"),
    ]


def test_the_submissions_topic_must_be_broker_stamped_and_keep_batches_as_sent() -> None:
    """LogAppendTime (no backdating around a revocation) and compression.type=producer (the broker never inflates
    a batch in its heap); the settings ``topic create`` gives the submissions topic pass."""
    from bernstein.substrate.config import Topics
    from bernstein.substrate.kafka import topic_config

    topics = Topics("p")
    made = {**topic_config(topics, topics.submissions), "min.insync.replicas": "1"}
    assert (
        history_risks(
            [TopicSettings(topics.submissions, made, 1)], replication_factor=1, min_insync=1, submissions=topics.submissions
        )
        == []
    )
    loose = {**made, "message.timestamp.type": "CreateTime", "compression.type": "uncompressed"}
    found = history_risks(
        [TopicSettings(topics.submissions, loose, 1), TopicSettings(topics.journal, loose, 1)],
        replication_factor=1,
        min_insync=1,
        submissions=topics.submissions,
    )
    assert [(r.topic, r.setting, r.value) for r in found] == [
        (topics.submissions, "message.timestamp.type", "CreateTime"),
        (topics.submissions, "compression.type", "uncompressed"),
    ]
    assert found[1].fix.endswith(f"--entity-name {topics.submissions} --add-config compression.type=producer")
