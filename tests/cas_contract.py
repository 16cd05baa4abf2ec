"""The BlobStore contract, run against every adapter (directory in unit tests, S3 in integration).

Subclasses provide three fixtures: ``store`` (a BlobStore), ``overwrite``
(replace the bytes stored under a digest, to simulate tampering) and
``remove`` (delete a blob).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from schemas.canonical import sha256_digest
from schemas.errors import MalformedDigest
from substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, blob_key


class BlobStoreContract:
    def test_put_returns_the_content_digest_and_get_returns_the_bytes(self, store: BlobStore) -> None:
        data = os.urandom(1000)
        digest = store.put(data)
        assert digest == sha256_digest(data)
        assert store.has(digest)
        assert store.get(digest) == data

    def test_put_is_idempotent_and_never_rewrites(self, store: BlobStore, overwrite: Callable[[str, bytes], None]) -> None:
        data = os.urandom(64)
        digest = store.put(data)
        overwrite(digest, b"tampered")
        assert store.put(data) == digest  # present: not rewritten, so the tamper stays visible
        with pytest.raises(BlobIntegrityError):
            store.get(digest)

    def test_get_rehashes_and_names_both_digests(self, store: BlobStore, overwrite: Callable[[str, bytes], None]) -> None:
        data = b"original page bytes"
        digest = store.put(data)
        overwrite(digest, b"original page bytez")
        with pytest.raises(BlobIntegrityError) as info:
            store.get(digest)
        assert info.value.expected == digest
        assert info.value.actual == sha256_digest(b"original page bytez")
        assert info.value.code == "E_BLOB_INTEGRITY"

    def test_missing_blob_is_its_own_error(self, store: BlobStore, remove: Callable[[str], None]) -> None:
        digest = store.put(os.urandom(32))
        remove(digest)
        assert not store.has(digest)
        with pytest.raises(BlobNotFound) as info:
            store.get(digest)
        assert info.value.digest == digest

    def test_empty_and_binary_blobs(self, store: BlobStore) -> None:
        for data in (b"", bytes(range(256)) * 10):
            assert store.get(store.put(data)) == data

    def test_malformed_digest_is_refused(self, store: BlobStore) -> None:
        with pytest.raises(MalformedDigest):
            store.get("sha256:../../etc/passwd")
        with pytest.raises(MalformedDigest):
            store.has("not-a-digest")

    def test_key_layout(self) -> None:
        digest = sha256_digest(b"x")
        hex_digest = digest.removeprefix("sha256:")
        assert blob_key(digest) == f"sha256/{hex_digest[:2]}/{hex_digest}"
