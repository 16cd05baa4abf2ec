"""A revoked producer key stays revoked: the broker, not the producer, stamps every submission.

The scheduler decides whether a producer key was valid by its input's Kafka timestamp. With a
CreateTime submissions topic, whoever holds a revoked key could set an old timestamp on its
record and be journalled; the deployment's submissions topic is LogAppendTime, so the broker's
clock decides (docs/security.md, "Key rings, lifetimes, rotation and revocation").
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource

from bernstein.consumers.core.model import Lifetime, ProducerRegistry
from bernstein.schemas.records import RefusalCode
from bernstein.substrate.config import Settings
from bernstein.substrate.kafka import _admin, client_config
from bernstein.substrate.keys import InstallKeys
from tests.support.kafka import fresh_topics, read_partition, run_scheduler, scheduler_config, submission_record
from tests.support.producers import encode_signed_submission, producer


def _timestamp_type(bootstrap: str, topic: str) -> str:
    admin, _ = _admin(bootstrap)
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return str(future.result(30)["message.timestamp.type"].value)


def test_the_broker_stamps_submissions_so_a_revoked_key_cannot_be_backdated(
    services: Any, settings: Settings, install_keys: InstallKeys
) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)
    assert _timestamp_type(bootstrap, topics.submissions) == "LogAppendTime"
    assert _timestamp_type(bootstrap, topics.journal) == "CreateTime", "outputs carry their input's timestamp"

    now = int(time.time() * 1000)
    revoked_at = now - 60_000
    config = replace(
        scheduler_config(install_keys),
        producers=ProducerRegistry.of([producer("tests@host", lifetime=Lifetime(0, revoked_at))]),
    )
    client = Producer(client_config(bootstrap))
    for stage, stamp in (("backdated", revoked_at - 1), ("current", None)):
        value = encode_signed_submission(submission_record(run_id="run-b", stage_id=stage, occurred_at_ms=revoked_at - 1))
        client.produce(topics.submissions, key=b"run-b", value=value, **({} if stamp is None else {"timestamp": stamp}))
    assert client.flush(30) == 0
    run_scheduler(bootstrap, topics, config, expect=2, idle_exit=10)

    assert read_partition(bootstrap, topics, "journal") == [], "nothing the revoked key signed is journalled"
    refusals = [r.record for r in read_partition(bootstrap, topics, "refusals")]
    assert [(r["stage_id"], r["code"]) for r in refusals] == [
        ("backdated", RefusalCode.PRODUCER_KEY_NOT_VALID.value),
        ("current", RefusalCode.PRODUCER_KEY_NOT_VALID.value),
    ]
    for refusal in refusals:
        # the evidence is the broker's timestamp (after the revocation), not the one the producer asked for
        assert int(refusal["declared"]) >= now, refusal
        assert refusal["recomputed"] == f"[0, {revoked_at})", refusal
