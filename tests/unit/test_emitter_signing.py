"""The SDK signs every submission with the producer's own key (review C1).

``Emitter`` publishes ActivitySubmission.v3 and RunClose.v2: the producer's key id and an
Ed25519 signature over the submission statement, under ``producer.id`` = the name of the
producer's key ring. No network: librdkafka is replaced by a recorder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter
from bernstein.producers.identity import (
    PRODUCER_KEYS_ENV,
    ProducerIdentity,
    ProducerIdMismatch,
    default_producer_keys_dir,
    resolve_producer_id,
)
from bernstein.schemas import codec
from bernstein.schemas.canonical import run_close_statement, submission_signing_input, submission_statement
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.keys import KeyFileMissing, KeyFormatError, init_keys, init_producer_keys, verify_signature
from tests.support.emitter_fakes import FakeProducer
from tests.support.producers import producer_signer


def _emitter(tmp_path: Path, producer: Any, **options: Any) -> tuple[Emitter, FakeProducer]:
    emitter = Emitter(
        bootstrap="127.0.0.1:9", store=DirBlobStore(tmp_path / "cas"), topics=Topics("unit"), producer=producer, **options
    )
    fake = FakeProducer(["ack"] * 10)
    emitter._producer = fake  # type: ignore[assignment]
    emitter._topics_ready = True
    return emitter, fake


def test_a_submission_is_v3_signed_by_the_producer_key_under_its_name(tmp_path: Path) -> None:
    keys = init_producer_keys(tmp_path / "producer-keys", "research-worker")
    emitter, fake = _emitter(tmp_path, keys)
    page = emitter.capture("page", "https://example.test/a", b"page a")
    published = emitter.publish(
        run_id="run-1", stage_id="s0", role="scout", result=ActivityResult.build("research", b"{}", [page])
    )

    decoded = codec.decode(fake.produced[0][2])
    assert decoded.schema.name == codec.ACTIVITY_SUBMISSION_V3
    record = decoded.record
    assert record["producer"]["id"] == "research-worker" == emitter.producer_id
    assert record["producer_key_id"] == keys.signer.key_id
    signed = submission_signing_input(submission_statement(record, keys.signer.key_id))
    assert verify_signature(keys.signer.public_key_raw, record["producer_signature"], signed)
    # the statement binds every journalled field: another stage id no longer verifies
    forged = submission_signing_input(submission_statement({**record, "stage_id": "s1"}, keys.signer.key_id))
    assert not verify_signature(keys.signer.public_key_raw, record["producer_signature"], forged)
    assert published.value == fake.produced[0][2]


def test_the_signature_is_deterministic_so_a_rebuilt_submission_has_the_same_bytes(tmp_path: Path) -> None:
    identity = ProducerIdentity("unit@test", producer_signer("unit@test"))
    emitter, _ = _emitter(tmp_path, identity)
    result = ActivityResult.build("research", b"{}", [emitter.capture("page", "u", b"x")])
    _, first = emitter.submission_value(run_id="r", stage_id="s", role="scout", result=result, submission_id="same")
    record = codec.decode(first).record
    again = codec.encode(codec.ACTIVITY_SUBMISSION_V3, {**record, "producer_signature": b""})
    assert again != first  # the signature is part of the bytes ...
    resigned = identity.signer.sign(submission_signing_input(submission_statement(record, identity.signer.key_id)))
    assert resigned == record["producer_signature"]  # ... and Ed25519 gives the same one again


def test_close_run_is_a_signed_run_close_v2(tmp_path: Path) -> None:
    identity = ProducerIdentity("closer", producer_signer("closer"))
    emitter, fake = _emitter(tmp_path, identity)
    emitter.close_run("run-7", submission_id="close-1")
    decoded = codec.decode(fake.produced[0][2])
    assert decoded.schema.name == codec.RUN_CLOSE_V2
    record = decoded.record
    assert (record["run_id"], record["producer"]["id"], record["producer_key_id"]) == ("run-7", "closer", identity.signer.key_id)
    statement = run_close_statement("close-1", "run-7", "closer", record["occurred_at_ms"], identity.signer.key_id)
    assert verify_signature(identity.signer.public_key_raw, record["producer_signature"], submission_signing_input(statement))


def test_an_explicit_producer_id_must_be_the_keys_name(tmp_path: Path) -> None:
    identity = ProducerIdentity("navigator@host", producer_signer("navigator@host"))
    assert _emitter(tmp_path, identity, producer_id="navigator@host")[0].producer_id == "navigator@host"
    with pytest.raises(
        ProducerIdMismatch, match=r"producer id 'other@host' is not the name of the producer key \('navigator@host'"
    ):
        _emitter(tmp_path, identity, producer_id="other@host")
    assert resolve_producer_id(identity, None) == "navigator@host"


def test_from_settings_loads_the_producer_key_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = init_producer_keys(tmp_path / "pk", "data-worker")
    monkeypatch.setenv(PRODUCER_KEYS_ENV, str(tmp_path / "pk"))
    assert default_producer_keys_dir() == tmp_path / "pk"
    settings = Settings(kafka_bootstrap="127.0.0.1:9", s3=None, topics=Topics("unit"))
    emitter = Emitter.from_settings(settings, store=DirBlobStore(tmp_path / "cas"))
    assert (emitter.producer_id, emitter.signer.key_id) == ("data-worker", keys.signer.key_id)

    # no producer keys there: a typed error that says how to create them
    monkeypatch.setenv(PRODUCER_KEYS_ENV, str(tmp_path / "none"))
    with pytest.raises(KeyFileMissing, match="bernstein keys init --producer NAME"):
        Emitter.from_settings(settings, store=DirBlobStore(tmp_path / "cas"))
    # the scheduler's keys are not a producer's
    init_keys(tmp_path / "scheduler")
    with pytest.raises(KeyFormatError, match="holds a scheduler's keys, not a producer's"):
        Emitter.from_settings(settings, keys_dir=tmp_path / "scheduler", store=DirBlobStore(tmp_path / "cas"))


def test_the_default_producer_key_directory_is_not_the_schedulers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(PRODUCER_KEYS_ENV, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("BERNSTEIN_KEYS_DIR", str(tmp_path / "scheduler"))
    assert default_producer_keys_dir() == tmp_path / "bernstein" / "producer-keys"
