"""The directory CAS adapter against the shared BlobStore contract."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import (
    MAX_BLOB_BYTES,
    BlobIntegrityError,
    BlobNotFound,
    BlobNotRegular,
    BlobTooLarge,
    CasError,
    DirBlobStore,
    NotRegularFile,
    check_blob,
    open_regular,
)
from tests.support.cas_contract import BlobStoreContract


class TestDirBlobStore(BlobStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> DirBlobStore:
        return DirBlobStore(tmp_path / "cas")

    @pytest.fixture
    def overwrite(self, store: DirBlobStore) -> Callable[[str, bytes], None]:
        def overwrite(digest: str, data: bytes) -> None:
            store.path_of(digest).write_bytes(data)

        return overwrite

    @pytest.fixture
    def remove(self, store: DirBlobStore) -> Callable[[str], None]:
        return lambda digest: store.path_of(digest).unlink()

    def test_writes_are_atomic_files_at_the_shared_layout(self, store: DirBlobStore) -> None:
        digest = store.put(b"abc")
        path = store.path_of(digest)
        assert path.read_bytes() == b"abc"
        assert path.relative_to(store.root).as_posix().startswith("sha256/")
        assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left beside it

    def test_hash_stored_streams(self, store: DirBlobStore) -> None:
        data = b"z" * (3 << 20)
        digest = store.put(data)
        assert store.hash_stored(digest) == digest


@pytest.fixture
def store(tmp_path: Path) -> DirBlobStore:
    return DirBlobStore(tmp_path / "cas")


# ---------------------------------------------------------------------------
# a hostile cas/ folder: never followed, never blocking, never unbounded
# ---------------------------------------------------------------------------


def _planted(store: DirBlobStore, data: bytes = b"planted") -> tuple[str, Path]:
    """A digest whose path is free (the test puts something there) and that path."""
    digest = sha256_digest(data)
    path = store.path_of(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    return digest, path


def test_a_symlink_blob_is_refused_not_followed(store: DirBlobStore, tmp_path: Path) -> None:
    target = tmp_path / "outside"
    target.write_bytes(b"planted")
    digest, path = _planted(store)
    path.symlink_to(target)
    for read in (store.get, store.check, store.hash_stored):
        with pytest.raises(BlobNotRegular) as info:
            read(digest)
        assert (info.value.kind, info.value.path, info.value.code) == ("a symbolic link", path, "E_BLOB_NOT_REGULAR")
        assert str(path) in str(info.value)
        assert isinstance(info.value, CasError)
    assert not store.has(digest)  # a symlink is not a stored blob


def test_a_symlink_to_dev_zero_is_refused_at_once(store: DirBlobStore) -> None:
    digest, path = _planted(store)
    path.symlink_to("/dev/zero")
    with pytest.raises(BlobNotRegular, match="a symbolic link"):
        store.get(digest)


def test_a_fifo_blob_is_refused_without_blocking(store: DirBlobStore) -> None:
    digest, path = _planted(store)
    os.mkfifo(path)
    # No writer ever opens the FIFO: a blocking open or read would hang this test forever.
    for read in (store.get, store.check, store.hash_stored):
        with pytest.raises(BlobNotRegular) as info:
            read(digest)
        assert info.value.kind == "a FIFO"
    assert not store.has(digest)


def test_a_directory_or_socket_blob_is_refused(store: DirBlobStore, tmp_path: Path) -> None:
    digest, path = _planted(store)
    path.mkdir()
    with pytest.raises(BlobNotRegular, match="is a directory, not a regular file"):
        store.get(digest)
    path.rmdir()
    short = Path(tempfile.mkdtemp(dir="/tmp")) / "s"  # AF_UNIX paths are short
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(short))
        path.symlink_to(short)
        with pytest.raises(BlobNotRegular, match="a symbolic link"):
            store.get(digest)
        path.unlink()
        os.link(short, path)  # a second name of the socket itself
        with pytest.raises(BlobNotRegular, match="a socket"):
            store.get(digest)


def test_a_blob_larger_than_any_run_can_reference_is_refused_unread(store: DirBlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    small = store.put(b"small")
    digest, path = _planted(store)
    with path.open("wb") as handle:  # sparse: 1 GiB of size, no disk
        handle.truncate(1 << 30)
    opened: list[int] = []
    real_fdopen = os.fdopen

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        opened.append(fd)  # the only way the store reads a blob
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    for read in (store.get, store.check, store.hash_stored):
        with pytest.raises(BlobTooLarge) as info:
            read(digest)
        assert (info.value.size, info.value.limit) == (1 << 30, MAX_BLOB_BYTES)
        assert info.value.code == "E_BLOB_TOO_LARGE"
        assert f"{1 << 30} bytes, {MAX_BLOB_BYTES} bytes" in str(info.value)
    assert opened == []  # refused from its size, before any read
    assert store.get(small) == b"small" and len(opened) == 1
    assert MAX_BLOB_BYTES == 64 * 1024 * 1024


def test_a_blob_that_grows_past_the_bound_while_read_stops_at_it(store: DirBlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import bernstein.substrate.cas as cas

    digest = store.put(b"x" * 5000)
    monkeypatch.setattr(cas, "MAX_BLOB_BYTES", 4096)
    monkeypatch.setattr(cas, "_CHUNK", 1024)
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: _shrunk(real_fstat(fd)))  # as if it grew after fstat
    for read in (store.get, store.check):
        with pytest.raises(BlobTooLarge) as info:
            read(digest)
        assert info.value.size is None and "is more than 4096 bytes" in str(info.value)
    exact = store.put(b"y" * 4096)  # exactly the bound is a blob like any other
    assert store.get(exact) == b"y" * 4096


def _shrunk(info: os.stat_result) -> os.stat_result:
    """An fstat result that reports a size of 1 (the file grew after it was taken)."""
    values = list(info)
    values[6] = 1  # st_size
    return os.stat_result(values)


def test_check_streams_and_names_both_digests(store: DirBlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import bernstein.substrate.cas as cas

    monkeypatch.setattr(cas, "_CHUNK", 1000)
    data = os.urandom(10_500)
    digest = store.put(data)
    store.check(digest)  # intact: no error
    check_blob(store, digest)
    store.path_of(digest).write_bytes(data[:-1] + b"!")
    with pytest.raises(BlobIntegrityError) as info:
        store.check(digest)
    assert (info.value.expected, info.value.actual, info.value.data) == (digest, sha256_digest(data[:-1] + b"!"), None)
    with pytest.raises(BlobIntegrityError) as got:
        store.get(digest)
    assert got.value.data == data[:-1] + b"!"  # get still hands back what the bytes became
    store.path_of(digest).unlink()
    with pytest.raises(BlobNotFound):
        store.check(digest)


def test_check_blob_falls_back_to_get_for_a_store_without_check(store: DirBlobStore) -> None:
    class GetOnly:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def put(self, data: bytes) -> str:
            return store.put(data)

        def get(self, digest: str) -> bytes:
            self.asked.append(digest)
            return store.get(digest)

        def has(self, digest: str) -> bool:
            return store.has(digest)

        def describe(self) -> str:
            return "get only"

    other = GetOnly()
    digest = store.put(b"abc")
    check_blob(other, digest)
    assert other.asked == [digest]
    store.path_of(digest).write_bytes(b"abd")
    with pytest.raises(BlobIntegrityError):
        check_blob(other, digest)


def test_open_regular_refuses_before_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile) as info:
        open_regular(fifo)
    assert (info.value.path, info.value.kind) == (fifo, "a FIFO")
    link = tmp_path / "link"
    link.symlink_to(fifo)
    with pytest.raises(NotRegularFile, match="a symbolic link"):
        open_regular(link)
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "absent")
    regular = tmp_path / "file"
    regular.write_bytes(b"ok")
    fd, info_ = open_regular(regular)
    try:
        assert os.read(fd, 10) == b"ok" and info_.st_size == 2
        assert os.get_blocking(fd)
    finally:
        os.close(fd)
