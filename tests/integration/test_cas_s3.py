"""The S3 CAS adapter against the shared BlobStore contract, on the real S3 server."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from substrate.cas import CasUnavailable, S3BlobStore, S3Settings
from tests.cas_contract import BlobStoreContract


class TestS3BlobStore(BlobStoreContract):
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
