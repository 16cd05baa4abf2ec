"""The emitter SDK against the real broker and S3 server.

The admin creates the topics first (``deployed``): producers never create topics, and an emitter
on a prefix without them raises ``TopicMissing`` and leaves the broker's topic list as it was.
"""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bernstein.producers.activity import ActivityResult, observe
from bernstein.producers.emitter import EmitError, Emitter, EvidenceNotStored, PublishFailed, TopicMissing
from bernstein.schemas import codec
from bernstein.schemas.canonical import evidence_set_hash, submission_signing_input, submission_statement
from bernstein.substrate.cas import DirBlobStore, S3BlobStore, S3Settings
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import KafkaUnavailable, client_config
from bernstein.substrate.keys import ProducerKeys, verify_signature
from tests.support.kafka import fresh_topics
from tests.support.prefixes import fresh_prefix
from tests.support.producer_setup import identity


@pytest.fixture
def deployed(settings: Settings) -> Settings:
    """``settings`` whose topics the admin created (`bernstein topic create`), as a deployment's are."""
    assert settings.kafka_bootstrap is not None
    fresh_topics(settings.kafka_bootstrap, settings.topics.prefix)
    return settings


def _read_all(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    consumer = Consumer(
        client_config(
            bootstrap,
            **{
                "group.id": "test-reader",
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
            },
        )
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[bytes | None, bytes]] = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "timed out reading back"
            if message.error():
                break
            out.append((message.key(), message.value()))
    finally:
        consumer.close()
    return out


def test_submission_round_trips_through_kafka_byte_for_byte(
    deployed: Settings, s3_store: S3BlobStore, producer_keys: ProducerKeys
) -> None:
    settings = deployed
    assert settings.kafka_bootstrap is not None
    with Emitter.from_settings(settings, producer=producer_keys, store=s3_store) as emitter:
        pages = [emitter.capture("page", "https://a.example/x", b"<p>alpha</p>"), emitter.capture("page", "https://b", b"beta")]
        result = ActivityResult.build("research", {"claims": ["c1"]}, pages)
        published = emitter.publish(run_id="run-rt", stage_id="research-0", role="scout", result=result)
    records = _read_all(settings.kafka_bootstrap, settings.topics.submissions)
    assert records == [(b"run-rt", published.value)]
    decoded = codec.decode(records[0][1])
    assert decoded.schema.name == codec.ACTIVITY_SUBMISSION_V3  # sizes declared, signed by the producer
    sub = decoded.record
    assert (sub["run_id"], sub["stage_id"], sub["role"], sub["kind"]) == ("run-rt", "research-0", "scout", "research")
    assert sub["producer"]["id"] == producer_keys.name == "agents@test"  # the producer key ring's name
    assert sub["producer_key_id"] == producer_keys.signer.key_id
    statement = submission_signing_input(submission_statement(sub, producer_keys.signer.key_id))
    assert verify_signature(producer_keys.signer.public_key_raw, sub["producer_signature"], statement)
    assert sub["artifact"] == result.artifact and sub["artifact_hash"] == result.artifact_hash
    assert sub["evidence_set_hash"] == evidence_set_hash([p.content_hash for p in pages])
    assert [(o["ref"], o["size"]) for o in sub["observations"]] == [("https://a.example/x", 12), ("https://b", 4)]
    assert codec.encode(codec.ACTIVITY_SUBMISSION_V3, sub) == records[0][1]


def test_blobs_are_in_the_store_before_the_event_exists(deployed: Settings, s3_store: S3BlobStore) -> None:
    settings = deployed
    assert settings.kafka_bootstrap is not None
    data = b"evidence that must be reattachable"
    with Emitter.from_settings(settings, producer=identity("t"), store=s3_store) as emitter:
        result = ActivityResult.build("coding", b"diff", [emitter.capture("file", "a.py", data)])
        emitter.publish(run_id="run-order", stage_id="coding-0", role="developer", result=result)
    ((_, value),) = _read_all(settings.kafka_bootstrap, settings.topics.submissions)
    sub = codec.decode(value).record
    assert s3_store.get(sub["observations"][0]["content_hash"]) == data
    assert s3_store.get(sub["artifact_hash"]) == b"diff"


def test_observation_not_in_the_store_is_not_published(deployed: Settings, s3_store: S3BlobStore) -> None:
    settings = deployed
    assert settings.kafka_bootstrap is not None
    with Emitter.from_settings(settings, producer=identity("t"), store=s3_store) as emitter:
        phantom = observe("file", "never-stored.py", b"bytes nobody stored " + settings.topics.prefix.encode())
        result = ActivityResult.build("coding", b"diff", [phantom])
        with pytest.raises(EvidenceNotStored, match="never-stored.py"):
            emitter.publish(run_id="run-x", stage_id="coding-0", role="developer", result=result)
        emitter.close_run("run-x")  # something to read back, proving nothing else was published
    records = _read_all(settings.kafka_bootstrap, settings.topics.submissions)
    assert [codec.decode(v).schema.name for _, v in records] == [codec.RUN_CLOSE_V2]


def test_s3_failure_is_a_typed_error_and_nothing_is_published(deployed: Settings, tmp_path: object) -> None:
    settings = deployed
    assert settings.kafka_bootstrap is not None
    broken = S3BlobStore(S3Settings("http://127.0.0.1:9", "a", "b", "bernstein-cas"))
    with Emitter(bootstrap=settings.kafka_bootstrap, store=broken, topics=settings.topics, producer=identity("t")) as emitter:
        with pytest.raises(EmitError, match="unreachable"):
            emitter.capture("file", "a.py", b"x")
        with pytest.raises(EmitError):
            emitter.publish(run_id="r", stage_id="s", role="developer", result=ActivityResult.build("coding", b"d"))


def test_broker_failure_is_a_typed_error(tmp_path: object) -> None:
    store = DirBlobStore(tmp_path / "cas")  # type: ignore[operator]
    emitter = Emitter(bootstrap="127.0.0.1:9", store=store, topics=Topics("nowhere"), producer=identity("t"), delivery_timeout=3)
    with pytest.raises((KafkaUnavailable, PublishFailed)):
        emitter.publish(run_id="r", stage_id="s", role="developer", result=ActivityResult.build("coding", b"d"))


def _topic_names(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient(client_config(bootstrap)).list_topics(timeout=15).topics)


def test_an_emitter_never_creates_topics_a_missing_one_is_topic_missing(settings: Settings, s3_store: S3BlobStore) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    typo = Topics(fresh_prefix())
    before = _topic_names(bootstrap)
    with Emitter(bootstrap=bootstrap, store=s3_store, topics=typo, producer=identity("t"), delivery_timeout=10) as emitter:
        with pytest.raises(TopicMissing) as caught:
            emitter.close_run("run-typo")
        with pytest.raises(TopicMissing):  # and again: nothing was created by the first attempt
            emitter.require_topic()
    assert caught.value.code == "E_TOPIC_MISSING"
    assert f"topic {typo.submissions} does not exist on Kafka at {bootstrap}" in caught.value.message
    assert f"`bernstein topic create --prefix {typo.prefix}`" in caught.value.message
    after = _topic_names(bootstrap)
    assert not {name for name in after if name.startswith(typo.prefix + ".")}
    assert not (after - before) & set(typo.all)
