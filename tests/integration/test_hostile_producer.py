"""One compromised producer host against two honest ones (security review 2026-12-06).

Mallory holds what a producer host holds: a registered producer key, the producer Kafka principal
and the producer S3 identity (``.infra/s3/producer.env``). Alice and Bob are honest producers on the
same deployment. Each attack says which defence stops it; after all of them, the honest runs are
sealed and `bernstein activity verify --from kafka --cas s3`, run with the reader S3 identity,
exits 0 for each, naming what Mallory left at their blobs' addresses.

| attack | what stops it |
|---|---|
| pre-place other bytes at the address of a page Alice is about to store | the SDK stores anyway: the object there lacks the store's checksum for the address (``holds``) |
| overwrite a blob of Bob's sealed run | the bucket is versioned: the verifier reads the true version and names the other (CAS_VERSION_POISONED) |
| delete a blob of Bob's sealed run | the producer identity may not delete (AccessDenied); Object Lock would refuse it anyway |
| list other producers' evidence | the producer identity may not list (AccessDenied) |
| upload a body under an address with a checksum that is not the body's | the store refuses it (XAmzContentChecksumMismatch) |
| a compressed record that no client can inflate, on the honest runs' partition | the scheduler dead-letters it (INPUT_UNREADABLE) and reads on |
| close Bob's run before he starts it, squat Alice's stage id, close her run | the runs are theirs (manifest ``run_prefixes``): RUN_NOT_OWNED, before the run is read or changed |

Not yet defended: empty closes of fresh run ids outside every prefix, and a bound on the runs one
producer keeps open.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from minio.error import S3Error

from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter
from bernstein.producers.identity import ProducerIdentity
from bernstein.schemas import codec
from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import blob_key, checksum_sha256
from bernstein.substrate.kafka import client_config
from bernstein.substrate.keys import init_keys, init_producer_keys
from tests.conftest import bernstein_env
from tests.support import tamper as kit
from tests.support.kafka import fresh_topics, read_partition
from tests.support.prefixes import fresh_prefix
from tests.support.principals import producer_principal, s3_identity, store_as
from tests.support.producer_setup import trusted_keys, write_manifest

pytestmark = pytest.mark.integration


def publish_run(services: Any, topics: Any, keys: Any, run_id: str, pages: list[bytes]) -> list[str]:
    """An honest producer's run under the producer principal and the producer S3 identity: one stage per page, then the
    close. Returns the pages' digests."""
    with (
        producer_principal(services),
        Emitter(
            bootstrap=services.bootstrap,
            store=store_as("producer", services),
            topics=topics,
            producer=ProducerIdentity(keys.name, keys.signer),
        ) as emitter,
    ):
        digests = []
        for index, page in enumerate(pages):
            observation = emitter.capture("page", f"https://example.test/{run_id}/{index}", page)
            digests.append(observation.content_hash)
            result = ActivityResult.build("coding", {"run": run_id, "stage": index}, [observation])
            emitter.publish(run_id=run_id, stage_id=f"s{index}", role="developer", result=result)
        emitter.close_run(run_id)
    return digests


def test_a_hostile_producer_cannot_destroy_poison_or_stall_the_honest_producers_runs(services: Any, tmp_path: Path) -> None:
    prefix = fresh_prefix()
    topics = fresh_topics(services.bootstrap, prefix)
    keys = init_keys(tmp_path / "keys")
    alice, bob, mallory = (init_producer_keys(tmp_path / name, f"{name}@hostile") for name in ("alice", "bob", "mallory"))
    manifest = write_manifest(tmp_path / "roles.toml", alice, bob, mallory, test_identities=False)
    text = manifest.read_text()
    for name in ("alice", "bob"):  # each owns the run ids that start with its name
        text = text.replace(f'name = "{name}@hostile"', f'name = "{name}@hostile"\nrun_prefixes = ["{name}-"]')
    manifest.write_text(text)
    trust = tmp_path / "trusted-keys.json"
    trusted_keys(keys, manifest).write(trust)
    hostile = store_as("producer", services)  # Mallory's S3 identity: the one every producer host gets

    # 1. Mallory pre-places bytes at the address of a page Alice will store (public pages are predictable)
    alice_pages = [
        b"a public page, predictable " + os.urandom(6).hex().encode(),
        b"alice's own notes " + os.urandom(6).hex().encode(),
    ]
    poisoned = sha256_digest(alice_pages[0])
    hostile._client.put_object(hostile.settings.bucket, blob_key(poisoned), io.BytesIO(b"poison"), 6)
    # 2. Bob's run is published and (below) sealed; then Mallory overwrites one of its blobs and tries to delete another
    bob_pages = [b"bob page one " + os.urandom(6).hex().encode(), b"bob page two " + os.urandom(6).hex().encode()]
    # 0. Mallory, with her own registered key, goes for the others' runs first: close Bob's before he starts it,
    #    take Alice's first stage id and close her run
    with (
        producer_principal(services),
        Emitter(
            bootstrap=services.bootstrap, store=hostile, topics=topics, producer=ProducerIdentity(mallory.name, mallory.signer)
        ) as emitter,
    ):
        emitter.close_run("bob-run")
        squat = emitter.capture("page", "https://example.test/squat", b"mallory was here " + os.urandom(4).hex().encode())
        emitter.publish(
            run_id="alice-run", stage_id="s0", role="developer", result=ActivityResult.build("coding", {"x": 1}, [squat])
        )
        emitter.close_run("alice-run")
    bob_digests = publish_run(services, topics, bob, "bob-run", bob_pages)
    hostile._client.put_object(hostile.settings.bucket, blob_key(bob_digests[0]), io.BytesIO(b"overwritten"), 11)
    with pytest.raises(S3Error) as refused:
        hostile._client.remove_object(hostile.settings.bucket, blob_key(bob_digests[1]))
    assert refused.value.code == "AccessDenied"
    with pytest.raises(S3Error) as refused:
        list(hostile._client.list_objects(hostile.settings.bucket, prefix="sha256/", recursive=True))
    assert refused.value.code == "AccessDenied"
    with pytest.raises(S3Error) as refused:
        hostile._client.put_object(
            hostile.settings.bucket,
            blob_key(bob_digests[1]),
            io.BytesIO(b"not bob's"),
            9,
            metadata={"x-amz-checksum-sha256": checksum_sha256(bob_digests[1])},
        )
    assert refused.value.code == "XAmzContentChecksumMismatch"
    # 3. a compressed record no client can inflate, on the partition of the honest runs, under the producer principal
    with producer_principal(services):
        bomb = Producer(client_config(services.bootstrap, **{"compression.type": "zstd", "message.max.bytes": 1_000_000_000}))
        bomb.produce(topics.submissions, b"\xc3\x01" + bytes(150_000_000), b"alice-run", partition=0)
        assert bomb.flush(60) == 0
    alice_digests = publish_run(services, topics, alice, "alice-run", alice_pages)
    assert alice_digests[0] == poisoned

    env = {**kit.offline_env(), **bernstein_env(services, prefix, keys, None, manifest)}
    scheduled = kit.bernstein(["scheduler", "run", "--partition", "0", "--idle-exit", "5"], env)
    assert scheduled.returncode == 0, scheduled.stdout + scheduled.stderr
    assert "cannot be read" in scheduled.stderr and "INPUT_UNREADABLE" in scheduled.stderr, scheduled.stderr

    refused = [
        codec.decode(r.value).record for r in read_partition(services.bootstrap, topics, "refusals") if r.value is not None
    ]
    assert sorted((r["run_id"], r["code"]) for r in refused) == [
        ("alice-run", "RUN_NOT_OWNED"),
        ("alice-run", "RUN_NOT_OWNED"),
        ("bob-run", "RUN_NOT_OWNED"),
    ]
    # each refusal names Mallory, proven: her own registered key signed what was refused (Refusal.v2)
    assert {(r["producer"], r["key_id"], r["authenticated"]) for r in refused} == {(mallory.name, mallory.signer.key_id, True)}
    reader = {**env, **s3_identity("reader")}
    for run_id, other in (("alice-run", None), ("bob-run", bob_digests[0])):
        verified = kit.bernstein(
            ["activity", "verify", run_id, "--from", "kafka", "--cas", "s3", "--trusted-keys", str(trust)], reader
        )
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert [line.strip() for line in verified.stdout.splitlines() if line.strip().startswith("by ")] == [
            f"by {run_id.split('-')[0]}@hostile (key {(alice if run_id.startswith('alice') else bob).signer.key_id})"
        ] * 2  # both stages are the owner's own: Mallory's squat was refused
        named = [line for line in verified.stdout.splitlines() if "store CAS_VERSION_POISONED" in line]
        if other is None:
            assert named == [], verified.stdout  # Alice's true bytes are the newest version: nothing to name
        else:
            assert len(named) == 1 and other in named[0] and sha256_digest(b"overwritten") in named[0], verified.stdout
        assert (
            "REFUSED RUN_NOT_OWNED" in verified.stdout
            and f"-- by {mallory.name} (key {mallory.signer.key_id})" in verified.stdout
        )
    # --every-version lists every blob's versions: Mallory's bytes beneath Alice's true newest version are named too
    listed = kit.bernstein(
        ["activity", "verify", "alice-run", "--from", "kafka", "--cas", "s3", "--every-version", "--trusted-keys", str(trust)],
        reader,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr  # the true bytes are there: the run still verifies
    named = [line for line in listed.stdout.splitlines() if "store CAS_VERSION_POISONED" in line]
    assert len(named) == 1 and poisoned in named[0] and sha256_digest(b"poison") in named[0], listed.stdout
