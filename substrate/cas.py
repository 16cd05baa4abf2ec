"""The content-addressed blob store (CAS): one port, its errors, and the directory adapter.

Every blob lives under ``sha256/<first two hex>/<64 hex>`` of its own bytes,
the same key in a bucket and in a directory, so an exported dump's ``cas/``
folder is a byte-for-byte mirror of the bucket. ``put`` is idempotent (an
existing blob is never rewritten); ``get`` always re-hashes and raises
``BlobIntegrityError`` when the bytes no longer match their name. S3 and
filesystem exceptions are translated here into ``CasError`` subclasses.

A store read by the verifier may be hostile (a dump's ``cas/`` folder is
whatever the sender put there), so reading is bounded:

- no blob is larger than ``MAX_BLOB_BYTES`` (64 MiB, the per-run evidence cap:
  a run cannot reference anything larger); a bigger one is ``BlobTooLarge``,
  noticed from its size before it is read, and never read past the bound;
- ``DirBlobStore`` opens a blob without following a symbolic link and without
  blocking (``O_NOFOLLOW | O_NONBLOCK``) and reads it only when it is a regular
  file: a symlink, FIFO, socket, device or directory is ``BlobNotRegular``
  (naming the path), so ``/dev/zero`` or a FIFO can neither hang nor exhaust
  the reader;
- hashing streams (``check``, ``hash_stored``): the bytes are never held
  whole; ``get``, for a check that needs the bytes, holds at most the bound.

Both refusals are ``CasError``s, which a verifier reports as an unreadable
blob of the stage that names it (a mismatch), not as unusable input.

An S3 store that does not answer is an outage, never a verdict on the bytes: every
failure to get an answer is a ``CasUnavailable`` whose ``failure`` says which kind it is
(``Failure``: unreachable, timeout, access denied, server error, connection cut, refused) with
the endpoint and what to check, never a ``BlobNotFound`` or ``BlobIntegrityError``.

The S3 adapter is ``bernstein.substrate.cas_s3`` and the deadline each of its requests gets is
``bernstein.substrate.deadlines``; the S3 names are importable from here too (on first use, as the
adapter builds on this module), so every caller imports the store from this module.
"""

from __future__ import annotations

import hashlib
import os
import stat
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from bernstein.schemas.canonical import digest_hex, sha256_digest
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.files import write_atomically

if TYPE_CHECKING:
    from bernstein.substrate.cas_s3 import OtherVersion as OtherVersion
    from bernstein.substrate.cas_s3 import S3BlobStore as S3BlobStore
    from bernstein.substrate.cas_s3 import S3Settings as S3Settings
    from bernstein.substrate.cas_s3 import checksum_sha256 as checksum_sha256

_S3_NAMES: Final = frozenset({"OtherVersion", "S3BlobStore", "S3Settings", "checksum_sha256"})
"""The S3 adapter's names (``bernstein.substrate.cas_s3``), importable from here as before."""

_CHUNK: Final = 1 << 20

MAX_BLOB_BYTES: Final = 64 * 1024 * 1024
"""The largest blob a reader accepts: the per-run evidence cap (64 MiB), so no blob of a valid run is larger."""


class CasError(BernsteinError):
    """The blob store failed or holds something unexpected."""

    code = "E_CAS"


class BlobNotFound(CasError):
    """No blob is stored under this digest."""

    code = "E_BLOB_MISSING"

    def __init__(self, digest: str, where: str) -> None:
        super().__init__(f"blob {digest} is not in {where}")
        self.digest = digest


class BlobIntegrityError(CasError):
    """The stored bytes do not hash to the digest they are stored under."""

    code = "E_BLOB_INTEGRITY"

    def __init__(self, expected: str, actual: str, where: str, data: bytes | None = None) -> None:
        super().__init__(f"blob {expected} in {where} has changed: its bytes now hash to {actual}")
        self.expected = expected
        self.actual = actual
        self.data = data
        """The bytes as stored now, so a caller can say what they have become (e.g. recompute an anchor)."""


class Failure:
    """Why a store did not serve a request (``CasUnavailable.failure``): stable words, in reports as ``failure``."""

    UNREACHABLE: Final = "unreachable"
    """Nothing answered at the address (connection refused, no route, no such host, a failed TLS handshake)."""
    TIMEOUT: Final = "timeout"
    """No answer within the request's deadline (``BERNSTEIN_S3_TIMEOUT``)."""
    ACCESS_DENIED: Final = "access_denied"
    """The store refused this credential or its policy refused the request (HTTP 401/403)."""
    SERVER_ERROR: Final = "server_error"
    """The store answered with a server error (HTTP 5xx) on every attempt."""
    INTERRUPTED: Final = "interrupted"
    """The connection was cut before the whole answer came (a proxy, a load balancer, the network)."""
    REFUSED: Final = "refused"
    """The store answered with another error (no such bucket, a bad request): it would not serve this request."""
    LOCAL_IO: Final = "local_io"
    """A directory store's file could not be read or written (permissions, I/O error)."""

    ALL: Final = (UNREACHABLE, TIMEOUT, ACCESS_DENIED, SERVER_ERROR, INTERRUPTED, REFUSED, LOCAL_IO)


class CasUnavailable(CasError):
    """The store could not be reached or refused the request: an outage, never a verdict on the bytes.

    ``failure`` is one of ``Failure``; ``endpoint`` the store's address; ``hint`` what to check."""

    code = "E_CAS_UNAVAILABLE"

    def __init__(self, message: str, *, failure: str = Failure.UNREACHABLE, endpoint: str = "", hint: str = "") -> None:
        super().__init__(message)
        self.failure = failure
        self.endpoint = endpoint
        self.hint = hint

    def restated(self, message: str) -> CasUnavailable:
        """The same outage with another message (a caller adding what it means for its own work)."""
        return CasUnavailable(message, failure=self.failure, endpoint=self.endpoint, hint=self.hint)


class CasConfigError(CasError):
    """A store setting that cannot work (``BERNSTEIN_S3_TIMEOUT`` that is not a number of seconds)."""

    code = "E_CAS_CONFIG"


class BlobRefused(CasError):
    """A stored blob the reader will not read (too large, or not a regular file)."""

    code = "E_BLOB_REFUSED"

    def __init__(self, digest: str, message: str) -> None:
        super().__init__(message)
        self.digest = digest


class BlobTooLarge(BlobRefused):
    """A blob larger than ``MAX_BLOB_BYTES``: no run can reference it, and it is not read."""

    code = "E_BLOB_TOO_LARGE"

    def __init__(self, digest: str, size: int | None, where: str, limit: int | None = None) -> None:
        limit = MAX_BLOB_BYTES if limit is None else limit
        stated = "more than" if size is None else f"{size} bytes,"
        super().__init__(digest, f"blob {digest} in {where} is {stated} {limit} bytes (the largest blob a run can reference)")
        self.size = size
        self.limit = limit


class BlobNotRegular(BlobRefused):
    """A blob path that is a symlink, FIFO, socket, device or directory: never followed or read."""

    code = "E_BLOB_NOT_REGULAR"

    def __init__(self, digest: str, path: Path, kind: str) -> None:
        super().__init__(digest, f"blob {digest} at {path} is {kind}, not a regular file; it is not read")
        self.path = path
        self.kind = kind


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, for messages: "a regular file", "a symbolic link", "a FIFO", ..."""
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


class NotRegularFile(OSError):
    """``open_regular`` met a symlink, FIFO, socket, device or directory (never read)."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path = path
        self.kind = kind


def open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its ``fstat``, only if it is a regular file.

    The last path component is never followed (``O_NOFOLLOW``) and the open
    never blocks (``O_NONBLOCK``: a FIFO opens at once instead of waiting for a
    writer); anything but a regular file is closed again before any read.
    Raises ``FileNotFoundError``, ``NotRegularFile`` or ``OSError``.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            raise exc from None
        if not stat.S_ISREG(mode):  # ELOOP: a symlink; ENXIO: a socket or FIFO without a writer
            raise NotRegularFile(path, file_kind(mode)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(path, file_kind(info.st_mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def blob_key(digest: str) -> str:
    """Object key of a blob: ``sha256/<aa>/<hex>`` (raises MalformedDigest)."""
    hex_digest = digest_hex(digest)
    return f"sha256/{hex_digest[:2]}/{hex_digest}"


@runtime_checkable
class BlobStore(Protocol):
    """The CAS port. Adapters: ``S3BlobStore``, ``DirBlobStore``."""

    def put(self, data: bytes) -> str:
        """Store ``data`` under its digest (no-op when present); return the digest."""
        ...

    def get(self, digest: str) -> bytes:
        """The verified bytes of ``digest``; BlobNotFound or BlobIntegrityError otherwise."""
        ...

    def has(self, digest: str) -> bool:
        """True when a blob is stored under ``digest`` (its bytes are not checked)."""
        ...

    def describe(self) -> str:
        """Where the blobs live, for messages."""
        ...


def check_blob(store: BlobStore, digest: str) -> None:
    """Re-hash a stored blob without keeping its bytes: the adapter's streaming ``check`` when it has one.

    Raises what ``get`` raises (BlobNotFound, BlobIntegrityError, other CasErrors).
    """
    check = getattr(store, "check", None)
    if check is not None:
        check(digest)
    else:
        store.get(digest)


def check_blob_size(store: BlobStore, digest: str) -> int:
    """Re-hash a stored blob in a stream (nothing held) and return its byte length.

    What the verifier compares with a declared size (the per-run evidence cap). Raises what
    ``get`` raises (BlobNotFound, BlobIntegrityError, other CasErrors).
    """
    checked_size = getattr(store, "checked_size", None)
    if checked_size is not None:
        return int(checked_size(digest))
    stream = getattr(store, "_stream", None)
    if stream is None:
        return len(store.get(digest))
    total = 0

    def count(chunk: bytes | memoryview) -> None:
        nonlocal total
        total += len(chunk)

    actual = stream(digest, count)
    if actual != digest:
        raise BlobIntegrityError(digest, actual, store.describe())
    return total


@dataclass(frozen=True)
class PutResult:
    digest: str
    stored: bool
    """False when the blob was already present (dedup)."""


class _StreamedStore(ABC):
    """What both adapters build on their own ``put_result`` and chunked ``_stream``."""

    @abstractmethod
    def describe(self) -> str: ...

    @abstractmethod
    def put_result(self, data: bytes) -> PutResult: ...

    @abstractmethod
    def _stream(self, digest: str, sink: Any) -> str: ...

    def put(self, data: bytes) -> str:
        return self.put_result(data).digest

    def get(self, digest: str) -> bytes:
        data = bytearray()
        actual = self._stream(digest, data.extend)
        if actual != digest:
            raise BlobIntegrityError(digest, actual, self.describe(), bytes(data))
        return bytes(data)

    def check(self, digest: str) -> None:
        """Re-hash the stored blob in a stream (nothing held): BlobNotFound, BlobIntegrityError or CasError."""
        actual = self._stream(digest, None)
        if actual != digest:
            raise BlobIntegrityError(digest, actual, self.describe())


class DirBlobStore(_StreamedStore):
    """A CAS in a local directory; used for offline dumps and unit tests."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return f"directory {self.root}"

    def path_of(self, digest: str) -> Path:
        return self.root / blob_key(digest)

    def put_result(self, data: bytes) -> PutResult:
        digest = sha256_digest(data)
        path = self.path_of(digest)
        if path.exists():
            return PutResult(digest, stored=False)
        try:
            write_atomically(path, data)
        except OSError as exc:
            raise CasUnavailable(
                f"cannot write blob {digest} under {self.root}: {exc.strerror}", failure=Failure.LOCAL_IO, endpoint=str(self.root)
            ) from exc
        return PutResult(digest, stored=True)

    def has(self, digest: str) -> bool:
        """True when a regular file is stored under ``digest`` (a symlink is not a stored blob)."""
        try:
            return stat.S_ISREG(os.lstat(self.path_of(digest)).st_mode)
        except OSError:
            return False

    def hash_stored(self, digest: str) -> str:
        """Re-hash a stored blob in chunks without holding it in memory."""
        return self._stream(digest, None)

    def _stream(self, digest: str, sink: Any) -> str:
        """``sha256:<hex>`` of the stored bytes, read in chunks (each also given to ``sink``), at most the bound."""
        path = self.path_of(digest)
        try:
            fd, info = open_regular(path)
        except FileNotFoundError:
            raise BlobNotFound(digest, self.describe()) from None
        except NotRegularFile as exc:
            raise BlobNotRegular(digest, path, exc.kind) from None
        except OSError as exc:
            raise CasUnavailable(
                f"cannot read blob {digest} from {self.root}: {exc.strerror}", failure=Failure.LOCAL_IO, endpoint=str(self.root)
            ) from exc
        hasher = hashlib.sha256()
        try:
            if info.st_size > MAX_BLOB_BYTES:
                raise BlobTooLarge(digest, info.st_size, self.describe())
            with os.fdopen(fd, "rb", buffering=0) as handle:
                fd = -1
                total = 0
                buffer = bytearray(_CHUNK)
                view = memoryview(buffer)
                while True:
                    n = handle.readinto(buffer)
                    if not n:
                        break
                    total += n
                    if total > MAX_BLOB_BYTES:  # grown since fstat: still never read past the bound
                        raise BlobTooLarge(digest, None, self.describe())
                    hasher.update(view[:n])
                    if sink is not None:
                        sink(view[:n])
        except OSError as exc:
            raise CasUnavailable(
                f"cannot read blob {digest} from {self.root}: {exc.strerror}", failure=Failure.LOCAL_IO, endpoint=str(self.root)
            ) from exc
        finally:
            if fd >= 0:
                os.close(fd)
        return "sha256:" + hasher.hexdigest()


def __getattr__(name: str) -> Any:
    # The S3 adapter builds on this module, so its names are imported from it on first use (not a cycle at import).
    if name in _S3_NAMES:
        from bernstein.substrate import cas_s3

        return getattr(cas_s3, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
