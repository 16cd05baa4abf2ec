"""The BlobStore contract, run against every adapter (directory in unit tests, S3 in integration).

Subclasses provide three fixtures: ``store`` (a BlobStore), ``overwrite``
(replace the bytes stored under a digest, to simulate tampering) and
``remove`` (delete a blob), and say whether the store ``keeps_versions``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from bernstein.schemas.canonical import sha256_digest
from bernstein.schemas.errors import MalformedDigest
from bernstein.substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, blob_key


class BlobStoreContract:
    keeps_versions = False
    """The store keeps every version of a key (S3 with versioning and Object Lock): nothing written is lost."""

    def test_put_returns_the_content_digest_and_get_returns_the_bytes(self, store: BlobStore) -> None:
        data = os.urandom(1000)
        digest = store.put(data)
        assert digest == sha256_digest(data)
        assert store.has(digest)
        assert store.get(digest) == data

    def test_a_changed_blob_is_never_read_as_its_address(self, store: BlobStore, overwrite: Callable[[str, bytes], None]) -> None:
        """Other bytes at an address are named: a store without versions raises with both digests; a versioned
        store (``keeps_versions``) reads the true bytes from the version that holds them and names the other one."""
        nonce = os.urandom(8).hex().encode()  # a store keeps its versions: an address of this run's own
        data, changed = b"original page bytes " + nonce, b"original page bytez " + nonce
        digest = store.put(data)
        overwrite(digest, changed)
        if not self.keeps_versions:
            with pytest.raises(BlobIntegrityError) as info:
                store.get(digest)
            assert info.value.expected == digest
            assert info.value.actual == sha256_digest(changed)
            assert info.value.code == "E_BLOB_INTEGRITY"
            return
        assert store.get(digest) == data
        (other,) = store.other_versions[digest]  # type: ignore[attr-defined]
        assert (other.digest, other.recomputed) == (digest, sha256_digest(changed))

    def test_put_stores_again_only_what_is_not_provably_there(
        self, store: BlobStore, overwrite: Callable[[str, bytes], None]
    ) -> None:
        """A second put of the same bytes is not stored again; after the address was overwritten, a store without
        versions keeps the tamper visible (never rewrites), a versioned one stores the true bytes as its newest version."""
        data = os.urandom(64)
        first = store.put_result(data)  # type: ignore[attr-defined]
        again = store.put_result(data)  # type: ignore[attr-defined]
        assert (first.digest, first.stored, again.stored) == (sha256_digest(data), True, False)
        overwrite(first.digest, b"tampered")
        assert store.put_result(data).stored is self.keeps_versions  # type: ignore[attr-defined]
        if self.keeps_versions:
            assert store.get(first.digest) == data
        else:
            with pytest.raises(BlobIntegrityError):
                store.get(first.digest)

    def test_missing_blob_is_its_own_error(self, store: BlobStore, remove: Callable[[str], None]) -> None:
        """A removed blob is gone from a store without versions; a versioned store keeps it under the delete."""
        data = os.urandom(32)
        digest = store.put(data)
        remove(digest)
        assert not store.has(digest)
        if self.keeps_versions:
            assert store.get(digest) == data
            assert [v.recomputed for v in store.other_versions[digest]] == [""]  # type: ignore[attr-defined]
            return
        with pytest.raises(BlobNotFound) as info:
            store.get(digest)
        assert info.value.digest == digest

    def test_a_blob_never_stored_is_not_found(self, store: BlobStore) -> None:
        digest = sha256_digest(os.urandom(32))
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
