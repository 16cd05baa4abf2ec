"""The S3 CAS adapter against the shared BlobStore contract, on the real S3 server."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any

import pytest
from minio.error import S3Error

from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import BlobIntegrityError, CasUnavailable, S3BlobStore, S3Settings, blob_key, checksum_sha256
from tests.support.cas_contract import BlobStoreContract
from tests.support.principals import store_as


class TestS3BlobStore(BlobStoreContract):
    keeps_versions = True  # infra/up's MinIO bucket: versioned, with Object Lock

    @pytest.fixture
    def store(self, s3_store: S3BlobStore) -> S3BlobStore:
        return s3_store

    @pytest.fixture
    def overwrite(self, s3_store: S3BlobStore) -> Callable[[str, bytes], None]:
        return s3_store.overwrite_for_test

    @pytest.fixture
    def remove(self, s3_store: S3BlobStore) -> Callable[[str], None]:
        return s3_store.delete_for_test

    def test_wrong_secret_is_refused_as_a_typed_error(self, s3_store: S3BlobStore) -> None:
        settings = s3_store.settings
        wrong = S3BlobStore(S3Settings(settings.endpoint, settings.access_key, "not-the-secret", settings.bucket))
        with pytest.raises(CasUnavailable, match="S3 refused"):
            wrong.put(b"should not be stored")

    def test_unreachable_server_is_a_typed_error(self) -> None:
        store = S3BlobStore(S3Settings("http://127.0.0.1:9", "a", "b", "bernstein-cas"))
        with pytest.raises(CasUnavailable, match="unreachable"):
            store.has("sha256:" + "0" * 64)


# ---------------------------------------------------------------------------
# a store that only the right bytes can enter and no one can empty (security review F2)
# ---------------------------------------------------------------------------


def raw_put(store: S3BlobStore, digest: str, data: bytes) -> None:
    """What a hostile holder of the identity can send: any bytes at any address, without a checksum."""
    store._client.put_object(store.settings.bucket, blob_key(digest), io.BytesIO(data), len(data))


def test_a_producer_can_neither_delete_nor_list_and_the_store_refuses_bytes_that_are_not_the_address(
    services: Any,
) -> None:
    mallory, alice = store_as("producer", services), store_as("producer", services)
    digest = alice.put(os.urandom(200))
    with pytest.raises(S3Error) as refused:
        mallory._client.remove_object(mallory.settings.bucket, blob_key(digest))
    assert refused.value.code == "AccessDenied"  # the bucket policy: no delete
    with pytest.raises(S3Error) as refused:
        list(mallory._client.list_objects(mallory.settings.bucket, prefix="sha256/", recursive=True))
    assert refused.value.code == "AccessDenied"  # no listing of other producers' evidence
    with pytest.raises(S3Error) as refused:  # a checksum that is not the body's: the store refuses the upload
        mallory._client.put_object(
            mallory.settings.bucket,
            blob_key(digest),
            io.BytesIO(b"poison"),
            6,
            metadata={"x-amz-checksum-sha256": checksum_sha256(digest)},
        )
    assert refused.value.code == "XAmzContentChecksumMismatch"


def test_bytes_placed_first_at_an_address_cannot_stop_the_true_ones_being_stored(services: Any) -> None:
    mallory, alice, reader = (store_as(n, services) for n in ("producer", "producer", "reader"))
    page = b"a public page anyone can predict " + os.urandom(8).hex().encode()
    digest = sha256_digest(page)
    raw_put(mallory, digest, b"poison")
    assert alice.has(digest) and not alice.holds(digest)  # an object is there, but not provably these bytes
    assert alice.put_result(page).stored  # so the honest producer stores its bytes (a new version)
    assert alice.holds(digest) and reader.get(digest) == page


def test_bytes_placed_beneath_the_true_ones_are_named_only_by_a_reader_that_lists_every_version(services: Any) -> None:
    mallory, alice, reader = (store_as(n, services) for n in ("producer", "producer", "reader"))
    page = b"another predictable page " + os.urandom(8).hex().encode()
    digest = sha256_digest(page)
    raw_put(mallory, digest, b"placed first")
    assert alice.put_result(page).stored and alice.put_result(page).stored is False  # stored once, then held
    assert reader.get(digest) == page and reader.other_versions == {}  # the newest is right: one read, nothing seen
    lister = store_as("reader", services)
    lister.every_version = True
    assert lister.get(digest) == page
    (other,) = lister.other_versions[digest]
    assert (other.recomputed, bool(other.version_id), bool(other.written)) == (sha256_digest(b"placed first"), True, True)
    checker = store_as("reader", services)
    checker.every_version = True
    assert checker.checked_size(digest) == len(page) and [o.version_id for o in checker.other_versions[digest]] == [
        other.version_id
    ]


def test_a_reader_finds_the_true_version_under_an_overwrite_and_names_the_other(services: Any) -> None:
    alice, mallory, reader, ops = (store_as(n, services) for n in ("producer", "producer", "reader", "ops"))
    page = os.urandom(300)
    digest = alice.put(page)
    raw_put(mallory, digest, b"overwritten after the run was sealed")
    assert reader.get(digest) == page
    (other,) = reader.other_versions[digest]
    assert other.recomputed == sha256_digest(b"overwritten after the run was sealed") and other.version_id and other.written
    # a producer cannot list versions: it sees the newest, which is not the address's, and says so
    with pytest.raises(BlobIntegrityError):
        store_as("producer", services).get(digest)
    # Object Lock: not even ops can delete the locked true version
    (true_version,) = [
        v.version_id
        for v in ops._client.list_objects(ops.settings.bucket, prefix=blob_key(digest), include_version=True)
        if v.version_id != other.version_id
    ]
    with pytest.raises(S3Error) as refused:
        ops._client.remove_object(ops.settings.bucket, blob_key(digest), version_id=true_version)
    assert "WORM" in str(refused.value) or refused.value.code in ("AccessDenied", "InvalidRequest")
    assert reader.get(digest) == page
