"""Evidence blobs re-hashed ahead, many files at a time, on every core.

Reattaching evidence reads and re-hashes every stored blob. One file at a time from
Python, the cost per file (open, stat, read, hash, close: a few dozen interpreter steps)
outweighs hashing the bytes of a small blob, and one core hashes while the other waits.
``HashedAhead`` wraps a ``DirBlobStore``: before the verifier checks a batch of stages it
hands over the batch's digests, and the ``bernstein_native`` extension opens, reads (1 MiB
at a time) and SHA-256-hashes those files on every core with the GIL released (SHA-NI where
the CPU has it). The verifier then takes each blob's recomputed digest and size from there.

Only successes are taken ahead: a blob the extension could not read (missing, not a regular
file, too large, an I/O error) is read again by the store itself, which raises exactly the
error it always did, so verdicts and messages do not change. Without the extension, or for
another store (S3), everything goes to the store as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Final

from bernstein.schemas.canonical import is_digest
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.cas import (
    MAX_BLOB_BYTES,
    BlobIntegrityError,
    BlobStore,
    CasUnavailable,
    DirBlobStore,
    check_blob,
    check_blob_size,
)
from bernstein.verifier import facts as _facts

KEEP_BYTES: Final = 256 * 1024
"""Blobs whose bytes the verifier needs (artifacts) are kept from the read when at most this long."""


class HashedAhead:
    """A ``BlobStore`` whose blobs of the current batch were re-hashed ahead (see the module doc)."""

    def __init__(self, store: DirBlobStore, reader: Any) -> None:
        self.store = store
        self._reader = reader
        self._root = os.fspath(store.root)
        self._hashed: dict[str, tuple[str, int, bytes | None]] = {}
        self.files = 0
        """Files re-hashed ahead so far."""
        self.bytes = 0
        """Their bytes."""

    @classmethod
    def wrap(cls, store: BlobStore | None) -> BlobStore | None:
        """``store`` re-hashed ahead when it is a directory store and the extension can; else ``store`` itself."""
        reader = getattr(_facts.current(), "_reader", None)
        if not isinstance(store, DirBlobStore) or reader is None or not hasattr(reader, "hash_files"):
            return store
        return cls(store, reader)

    def ahead(self, digests: Iterable[str], keep: Iterable[str] = ()) -> None:
        """Re-hash these blobs now (``keep``: also hold their bytes, up to ``KEEP_BYTES`` each); forget the last batch."""
        wanted = dict.fromkeys(d for d in digests if is_digest(d))
        keeping = {d for d in keep if is_digest(d)}
        wanted.update(dict.fromkeys(keeping))
        self._hashed = {}
        if not wanted:
            return
        names = list(wanted)
        root = self._root
        paths = [f"{root}/sha256/{d[7:9]}/{d[7:]}" for d in names]  # blob_key of a well-formed digest
        flags = [d in keeping for d in names]
        for digest, found in zip(names, self._reader.hash_files(paths, flags, MAX_BLOB_BYTES), strict=True):
            if found is None:
                continue  # the store reads it again and names what is wrong
            actual, size, data = found
            if data is not None and len(data) > KEEP_BYTES:
                data = None
            self._hashed[digest] = (actual, size, data)
            self.files += 1
            self.bytes += size

    def sized(self, digest: str) -> tuple[str, int] | None:
        """(recomputed digest, byte length) of a blob re-hashed ahead, or None: ask the store."""
        found = self._hashed.get(digest)
        return None if found is None else (found[0], found[1])

    # -- BlobStore ----------------------------------------------------------------

    def describe(self) -> str:
        return self.store.describe()

    def put(self, data: bytes) -> str:
        return self.store.put(data)

    def has(self, digest: str) -> bool:
        return self.store.has(digest)

    def get(self, digest: str) -> bytes:
        found = self._hashed.get(digest)
        data = None if found is None else found[2]
        if found is None or data is None:
            return self.store.get(digest)
        if found[0] != digest:
            raise BlobIntegrityError(digest, found[0], self.store.describe(), data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)  # the store's streaming read, path_of, ...: the same store


class StoreUnavailable(BernsteinError):
    """The content store did not answer (unreachable, timed out, refused, a server error): nothing was read, so
    nothing can be judged. Deliberately not a ``CasError``: no check may read it as a verdict on the bytes.

    Its message leads with the code and the kind of failure (``STORE_UNAVAILABLE (timeout): ...``): a command
    that stops on it (``browser replay``) prints that one line."""

    code = "STORE_UNAVAILABLE"

    def __init__(self, cause: CasUnavailable, store: str = "") -> None:
        super().__init__(f"{self.code} ({cause.failure}): {cause}")
        self.cause = cause
        self.store = store
        """The store, as it describes itself."""
        self.repeated = False
        """Raised again for a later read, without asking the store (``FailFast``)."""

    def again(self) -> StoreUnavailable:
        """This outage for a later read that was not asked for."""
        repeat = StoreUnavailable(self.cause, self.store)
        repeat.repeated = True
        return repeat

    def data(self) -> dict[str, str]:
        """What a report carries about the outage (a stage's ``data``): the code, the kind of failure, the store,
        its endpoint, the error and what to check (docs/verifier.md, "not checked")."""
        return {
            "code": self.code,
            "failure": self.cause.failure,
            "store": self.store,
            "endpoint": self.cause.endpoint,
            "error": str(self.cause),
            "hint": self.cause.hint,
        }

    def reason(self) -> str:
        """A stage's ``unchecked`` text: the whole error for the first stage it stopped, a pointer for the rest."""
        if self.repeated:
            return (
                f"{self.code}: evidence not reattached: the content store stopped answering before this stage "
                f"({self.cause.failure} at {self.cause.endpoint or self.store}); nothing more was asked"
            )
        return f"{self.code}: evidence not reattached, the content store did not answer ({self.cause})"


class FailFast:
    """A remote ``BlobStore`` that stops asking after its first outage.

    The first ``CasUnavailable`` (after the store's own bounded retries) becomes ``StoreUnavailable``, and so does
    every later read, at once: a verify of thousands of blobs against a store that is down ends in seconds, with
    every stage "not checked" (``STORE_UNAVAILABLE``, exit 6), never a mismatch. Everything else passes through.
    """

    def __init__(self, store: BlobStore) -> None:
        self.store = store
        self.outage: StoreUnavailable | None = None

    @classmethod
    def wrap(cls, store: BlobStore | None) -> BlobStore | None:
        """``store`` guarded, unless it is local (a directory read ahead or not): a local read error is about the file.
        A store already guarded is returned as it is."""
        if store is None or isinstance(store, HashedAhead | DirBlobStore | FailFast):
            return store
        return cls(store)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _ask(self, call: Any, digest: str) -> Any:
        if self.outage is not None:
            raise self.outage.again()
        try:
            return call(digest)
        except CasUnavailable as exc:
            self.outage = StoreUnavailable(exc, self.store.describe())
            raise self.outage from exc

    def get(self, digest: str) -> bytes:
        return bytes(self._ask(self.store.get, digest))

    def has(self, digest: str) -> bool:
        return bool(self._ask(self.store.has, digest))

    def check(self, digest: str) -> None:
        self._ask(lambda d: check_blob(self.store, d), digest)

    def checked_size(self, digest: str) -> int:
        return int(self._ask(lambda d: check_blob_size(self.store, d), digest))

    def describe(self) -> str:
        return self.store.describe()
