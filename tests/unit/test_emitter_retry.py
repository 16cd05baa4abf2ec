"""The emitter retries a publish with the same bytes, so the same submission_id (review L13).

A fake producer stands in for librdkafka: it records every produce and answers
each with a scripted outcome (acknowledged, never acknowledged, a broker error).
No network: the Kafka client is never asked to connect.
"""

from __future__ import annotations

from typing import Any

import pytest

from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter, PublishFailed
from bernstein.producers.identity import ProducerIdentity
from bernstein.schemas import codec
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.config import Topics
from tests.support.emitter_fakes import FakeProducer
from tests.support.producers import producer_signer


def _emitter(tmp_path: Any, outcomes: list[str], *, retries: int = 2) -> tuple[Emitter, FakeProducer]:
    emitter = Emitter(
        bootstrap="127.0.0.1:9",
        store=DirBlobStore(tmp_path / "cas"),
        topics=Topics("unit"),
        producer=ProducerIdentity("unit@test", producer_signer("unit@test")),
        delivery_timeout=0.05,
        retries=retries,
    )
    fake = FakeProducer(outcomes)
    emitter._producer = fake
    emitter._topics_ready = True
    return emitter, fake


def _result(emitter: Emitter) -> ActivityResult:
    page = emitter.capture("page", "https://example.test/a", b"page a")
    return ActivityResult.build("research", b'{"report":"a"}', [page])


def test_a_publish_that_is_not_acknowledged_is_retried_with_the_same_bytes(tmp_path: Any) -> None:
    emitter, fake = _emitter(tmp_path, ["silent", "retriable", "ack"])
    published = emitter.publish(run_id="run-1", stage_id="s0", role="scout", result=_result(emitter))
    assert len(fake.produced) == 3
    assert {value for _, _, value in fake.produced} == {published.value}  # same id, same occurred_at_ms
    assert {key for _, key, _ in fake.produced} == {b"run-1"}
    assert codec.decode(published.value).record["submission_id"] == published.submission_id
    assert published.offset == 2


def test_a_caller_retry_after_the_retries_reuses_the_submission_id(tmp_path: Any) -> None:
    emitter, fake = _emitter(tmp_path, ["silent", "silent", "silent", "ack"], retries=2)
    with pytest.raises(PublishFailed) as caught:
        emitter.publish(run_id="run-1", stage_id="s0", role="scout", result=_result(emitter))
    failed = caught.value
    assert failed.retriable and failed.run_id == "run-1"
    assert "it may still be delivered" in str(failed) and failed.submission_id in str(failed)
    assert codec.decode(failed.value).record["submission_id"] == failed.submission_id
    published = emitter.retry(failed)
    assert (published.submission_id, published.value) == (failed.submission_id, failed.value)
    assert [value for _, _, value in fake.produced] == [failed.value] * 4


def test_a_permanent_broker_error_is_not_retried(tmp_path: Any) -> None:
    emitter, fake = _emitter(tmp_path, ["fatal", "ack"])
    with pytest.raises(PublishFailed, match="Message size too large") as caught:
        emitter.publish(run_id="run-1", stage_id="s0", role="scout", result=_result(emitter))
    assert not caught.value.retriable
    assert len(fake.produced) == 1


def test_an_explicit_submission_id_is_used_for_results_and_closes(tmp_path: Any) -> None:
    emitter, fake = _emitter(tmp_path, ["ack", "ack"])
    published = emitter.publish(run_id="run-1", stage_id="s0", role="scout", result=_result(emitter), submission_id="mine-1")
    assert published.submission_id == "mine-1"
    closed = emitter.close_run("run-1", submission_id="close-mine")
    assert codec.decode(closed.value).record["submission_id"] == "close-mine"
    assert [codec.decode(v).record["submission_id"] for _, _, v in fake.produced] == ["mine-1", "close-mine"]
