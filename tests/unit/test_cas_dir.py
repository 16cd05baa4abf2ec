"""The directory CAS adapter against the shared BlobStore contract."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from substrate.cas import DirBlobStore
from tests.cas_contract import BlobStoreContract


class TestDirBlobStore(BlobStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> DirBlobStore:
        return DirBlobStore(tmp_path / "cas")

    @pytest.fixture
    def overwrite(self, store: DirBlobStore) -> Callable[[str, bytes], None]:
        return lambda digest, data: store.path_of(digest).write_bytes(data)

    @pytest.fixture
    def remove(self, store: DirBlobStore) -> Callable[[str], None]:
        return lambda digest: store.path_of(digest).unlink()

    def test_writes_are_atomic_files_at_the_shared_layout(self, store: DirBlobStore) -> None:
        digest = store.put(b"abc")
        path = store.path_of(digest)
        assert path.read_bytes() == b"abc"
        assert path.relative_to(store.root).as_posix().startswith("sha256/")
        assert not list(path.parent.glob(".tmp-*"))

    def test_hash_stored_streams(self, store: DirBlobStore) -> None:
        data = b"z" * (3 << 20)
        digest = store.put(data)
        assert store.hash_stored(digest) == digest
