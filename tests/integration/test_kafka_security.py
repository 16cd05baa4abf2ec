"""The secured broker (`infra/up --secure`): each principal has exactly the rights of config/kafka-acls.toml.

Real clients, real SASL_SSL/SCRAM, real ACLs: the producer writes submissions and nothing
else, the auditor writes nothing, the scheduler runs a whole submissions -> journal pass
under its own principal, and nobody gets in without TLS and a password. Skipped when the
local broker runs plaintext (`infra/up` without --secure); `make test` runs it secured.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import (
    KafkaError,
    KafkaNotAuthorized,
    KafkaUnavailable,
    client_config,
    client_config_as,
    delivery_error,
    ensure_topics,
    partition_count,
    require_submissions_topic,
)
from bernstein.substrate.keys import ProducerKeys
from bernstein.verifier.kafka_source import KafkaSource
from tests.conftest import Services, grant, principal_env
from tests.support.kafka import read_partition

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def secured(services: Services) -> Services:
    if not services.secure:
        pytest.skip("the local broker runs plaintext (`infra/up`); `infra/up --secure` (make test) runs these")
    return services


@pytest.fixture
def topics(secured: Services, prefix: str) -> Topics:
    """The prefix's topics, created by the admin, with the deployment's ACLs."""
    topics = Topics(prefix)
    ensure_topics(secured.bootstrap, topics)
    grant(secured, prefix)
    return topics


@pytest.fixture
def as_principal(monkeypatch: pytest.MonkeyPatch, secured: Services) -> Iterator[Any]:
    """Switch this process's clients (client_config) to one principal's properties file."""

    def switch(principal: str) -> Path:
        path = secured.principal_file(principal)
        monkeypatch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(path))
        return path

    yield switch


def produce_one(config: dict[str, Any], topic: str) -> KafkaError | None:
    """Produce one record and wait for its delivery report: None if stored, else the typed error."""
    producer = Producer({**config, "message.timeout.ms": 15000})
    outcome: list[Any] = []
    producer.produce(topic, key=b"k", value=b"forged", on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(30) == 0, "no delivery report within 30 s"
    (error,) = outcome
    return None if error is None else delivery_error(error, topic)


def test_producer_writes_submissions_and_nothing_else(secured: Services, topics: Topics) -> None:
    config = client_config_as(
        secured.principal_file("producer"), secured.bootstrap, **{"enable.idempotence": True, "acks": "all"}
    )
    assert produce_one(config, topics.submissions) is None
    for topic in (topics.journal, topics.audit, topics.refusals, topics.deadletter, topics.checkpoints):
        error = produce_one(config, topic)
        assert isinstance(error, KafkaNotAuthorized), (topic, error)
        assert error.code == "E_KAFKA_NOT_AUTHORIZED"
        assert f"write to topic {topic} (TOPIC_AUTHORIZATION_FAILED)" in str(error)


def test_auditor_writes_nothing_but_reads_every_topic(secured: Services, topics: Topics) -> None:
    config = client_config_as(secured.principal_file("auditor"), secured.bootstrap)
    for topic in topics.all:
        error = produce_one(config, topic)
        assert isinstance(error, KafkaNotAuthorized), (topic, error)
    metadata = AdminClient(config).list_topics(timeout=15)
    assert set(topics.all) <= set(metadata.topics)
    assert all(metadata.topics[name].error is None for name in topics.all)


def test_producer_only_checks_its_topic_and_may_not_create_topics(
    secured: Services, topics: Topics, prefix: str, as_principal: Any
) -> None:
    as_principal("producer")
    # Describe on submissions is all the emitter needs when the admin created the topics
    assert require_submissions_topic(secured.bootstrap, topics) == 1
    # a deployment nobody created: the producer cannot create it, and says who must
    other = Topics(prefix + "-missing")
    with pytest.raises(
        KafkaNotAuthorized,
        match=r"or it does not exist: the Kafka admin creates the deployment's topics \(`bernstein topic create --prefix ",
    ):
        require_submissions_topic(secured.bootstrap, other, timeout=10)
    # the other principals' topics are invisible to it
    visible = set(AdminClient(client_config(secured.bootstrap)).list_topics(timeout=15).topics)
    assert topics.submissions in visible
    assert not {topics.journal, topics.audit, topics.refusals, topics.deadletter, topics.checkpoints} & visible


def test_scheduler_runs_end_to_end_under_its_own_principal(
    secured: Services,
    topics: Topics,
    settings: Settings,
    s3_store: S3BlobStore,
    cli_env: dict[str, str],
    producer_keys: ProducerKeys,
    as_principal: Any,
) -> None:
    as_principal("producer")
    # the producer signs with its own keys; the scheduler runs with the manifest that registers them (cli_env)
    with Emitter.from_settings(settings, producer=producer_keys, store=s3_store) as emitter:
        for i in range(3):
            page = emitter.capture("file", f"f{i}.py", f"print({i})\n".encode())
            emitter.publish(
                run_id="run-acl", stage_id=f"s{i}", role="developer", result=ActivityResult.build("coding", b"d%d" % i, [page])
            )
    env = principal_env(cli_env, secured, "scheduler")
    assert env["BERNSTEIN_KAFKA_CONFIG_FILE"].endswith("/scheduler.properties")
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", "scheduler", "run", "--idle-exit", "2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "consumed 3 journalled 3 refused 0" in result.stderr
    as_principal("auditor")  # and the auditor reads what it wrote
    journal = read_partition(secured.bootstrap, topics, "journal")
    assert [r.inner["stage_id"] for r in journal if "stage_id" in r.inner] == ["s0", "s1", "s2"]


def test_scheduler_cannot_use_another_deployments_topics(secured: Services, topics: Topics, prefix: str) -> None:
    config = client_config_as(secured.principal_file("scheduler"), secured.bootstrap)
    other = Topics(prefix + "-other")
    ensure_topics(secured.bootstrap, other)  # as the admin; no ACLs for this prefix
    for topic in (other.journal, other.audit):
        assert isinstance(produce_one(config, topic), KafkaNotAuthorized)
    # and its own submissions topic is read-only to it
    assert isinstance(produce_one(config, topics.submissions), KafkaNotAuthorized)


def test_plaintext_clients_are_refused_on_the_secure_port(
    secured: Services, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BERNSTEIN_KAFKA_CONFIG_FILE")
    monkeypatch.chdir(REPO.parent)  # no .infra/env above: a client with no security settings at all
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable, match=r"cannot reach Kafka"):
        partition_count(secured.bootstrap, topics.submissions, timeout=5)
    assert time.monotonic() - started < 30


def test_wrong_password_is_refused_as_not_authorized(
    secured: Services, topics: Topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = secured.principal_file("producer").read_text()
    lines = [("sasl.password=not-the-password" if line.startswith("sasl.password=") else line) for line in text.splitlines()]
    wrong = tmp_path / "wrong.properties"
    wrong.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(wrong))
    with pytest.raises(KafkaError) as caught:
        require_submissions_topic(secured.bootstrap, topics, timeout=10)
    assert isinstance(caught.value, KafkaNotAuthorized), caught.value
    assert "not-the-password" not in str(caught.value)


def test_acls_cli_prints_and_applies(secured: Services, cli_env: dict[str, str], prefix: str) -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "bernstein", "kafka", "acls", "--prefix", prefix, "--producer-principal", "User:worker-7"],
        cwd=REPO,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert f"ALLOW User:worker-7 WRITE TOPIC LITERAL {prefix}.activity.submissions" in lines
    assert not [line for line in lines if "worker-7" in line and "WRITE" in line and "submissions" not in line]
    assert f"ALLOW User:scheduler WRITE TRANSACTIONAL_ID PREFIXED {prefix}.scheduler" in lines
    # applying needs the admin: the producer principal may not create ACLs
    refused = subprocess.run(
        [sys.executable, "-m", "bernstein", "kafka", "acls", "--prefix", prefix, "--apply"],
        cwd=REPO,
        env=principal_env(cli_env, secured, "producer"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 3, refused.stderr
    assert (
        "Kafka refused this client's principal to create ACLs (run `bernstein kafka acls --apply` as the Kafka admin)"
        in refused.stderr
    )
    assert "Traceback" not in refused.stderr


def test_an_auditor_without_the_prefix_acls_is_told_so_not_shown_missing_streams(
    secured: Services, prefix: str, as_principal: Any
) -> None:
    """A topic the auditor may not Describe must not read as a deleted stream (a tamper verdict)."""
    ungranted = Topics(prefix + "-ungranted")
    ensure_topics(secured.bootstrap, ungranted)  # as the admin, and no ACLs for this prefix
    as_principal("auditor")
    source = KafkaSource(secured.bootstrap, ungranted)
    with pytest.raises(KafkaNotAuthorized, match=r"refused this client's principal to describe topic .*-ungranted\.audit"):
        source.partitions("audit")
