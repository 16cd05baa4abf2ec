"""The content-addressed blob store (CAS): one port, an S3 adapter and a directory adapter.

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

An S3 store is shared by every producer, so it may be hostile too (docs/security.md):

- every upload carries ``x-amz-checksum-sha256`` equal to its address, so the store itself
  refuses bytes that are not the address's; an upload is skipped only when the newest version
  at the address carries that same checksum (the store computed and checked it), never merely
  because an object is there: bytes placed first by someone else cannot stop the true ones
  from being stored;
- with versioning and Object Lock (``infra/up`` makes its bucket so) nothing can remove a
  version, so a reader whose newest version does not hash to its address looks through the
  older ones, reads the true bytes from the one that does, and keeps every other version it
  saw as an ``OtherVersion`` (``S3BlobStore.other_versions``): a poisoning attempt the
  verifier names without failing the run whose true bytes are present;
- bytes placed *before* the true ones (the pre-poisoning a checked upload defeats) lie beneath a
  newest version that is right, so an ordinary read never sees them; with ``every_version`` a
  reader also lists every blob's versions and names those too (one listing per blob read).

An S3 store that does not answer is an outage, never a verdict on the bytes: every
failure to get an answer is a ``CasUnavailable`` whose ``failure`` says which kind it is
(``Failure``: unreachable, timeout, access denied, server error, connection cut, refused) with
the endpoint and what to check, never a ``BlobNotFound`` or ``BlobIntegrityError``. Each request
gets a deadline (``S3Settings.timeout``, else ``BERNSTEIN_S3_TIMEOUT`` seconds, default 10):
connection failures, timeouts and 5xx answers are retried (three attempts at most) only while the
deadline lasts, and no single wait outlives it; a wait of more than a few seconds is announced on
the ``bernstein.s3`` logger (stderr, when nothing else is configured) as it goes on.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import itertools
import logging
import os
import re
import stat
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from bernstein.schemas.canonical import digest_hex, sha256_digest
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.files import write_atomically

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


@dataclass(frozen=True)
class OtherVersion:
    """A version at a blob's address whose bytes are not the address's: a poisoning attempt (or damage).

    Found by a reader that then read the true bytes from another version of the same key."""

    digest: str
    """The address (the digest the bytes should have)."""
    version_id: str
    recomputed: str
    """What this version's bytes hash to ("" when it could not be read, or is a delete marker)."""
    written: str
    """When the store says the version was written (ISO 8601), "" when it does not say."""
    owner: str = ""
    """Who wrote it, when the store says (its listing's owner), else ""."""


def _other_version(digest: str, version: Any, recomputed: str) -> OtherVersion:
    """An ``OtherVersion`` from a listed version (minio's ``Object``): its id, when and by whom it was written."""
    owner = getattr(version, "owner_name", None) or getattr(version, "owner_id", None) or ""
    written = version.last_modified.isoformat() if version.last_modified else ""
    return OtherVersion(digest, str(version.version_id), recomputed, written, str(owner))


def checksum_sha256(digest: str) -> str:
    """The ``x-amz-checksum-sha256`` of the bytes whose address is ``digest`` (base64 of the raw SHA-256)."""
    return base64.b64encode(bytes.fromhex(digest_hex(digest))).decode("ascii")


@dataclass(frozen=True)
class S3Settings:
    """How to reach the S3 (MinIO) bucket that holds the CAS."""

    endpoint: str
    """``http://host:port`` or ``https://host:port``."""
    access_key: str
    secret_key: str
    bucket: str = "bernstein-cas"
    region: str = "us-east-1"
    timeout: float | None = None
    """Seconds one request may take, its retries included (None: ``BERNSTEIN_S3_TIMEOUT``, default 10)."""


S3_TIMEOUT_SETTING: Final = "BERNSTEIN_S3_TIMEOUT"
DEFAULT_S3_TIMEOUT: Final = 10.0
"""A reachable store answers a blob request in milliseconds; a stopped or stalled one is named within seconds."""
_ATTEMPTS: Final = 3
"""Attempts of one request at most (connection failures, timeouts, 5xx answers), all within its deadline."""
_CONNECT_TIMEOUT: Final = 5.0
_WAIT_NOTICE_S: Final = 3.0
"""A request still unanswered after this many seconds is announced (and again every as many seconds)."""
_RETRY_NOTICE_S: Final = 1.0
"""A retry is announced once its request has waited this long (quicker ones are silent)."""
_S3_LOG: Final = logging.getLogger("bernstein.s3")
_DENIED_CODES: Final = frozenset(
    {"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken", "InvalidToken", "AllAccessDisabled"}
)


def s3_timeout() -> float:
    """``BERNSTEIN_S3_TIMEOUT`` (environment, then ``.infra/env``) in seconds, default 10: more than 0, at most 600."""
    from bernstein.substrate.config import seconds_setting  # substrate.config imports this module

    return seconds_setting(S3_TIMEOUT_SETTING, DEFAULT_S3_TIMEOUT, CasConfigError)


def _short(exc: BaseException) -> str:
    """``Type: message`` of a network error, without urllib3's object reprs and pool details (one readable line)."""
    text = re.sub(r"<[^<>]* object at 0x[0-9a-f]+>:?\s*", "", str(exc)).strip()
    text = re.sub(r"^HTTPS?Connection(?:Pool)?\([^)]*\):\s*", "", text)
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Waits:
    """Requests to S3 in flight, of every store of the process; one daemon thread announces each one still
    waiting, every ``_WAIT_NOTICE_S`` seconds (the progress of a long wait)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, tuple[str, float, float, list[float]]] = {}
        """Request id -> (store, deadline in seconds, began, [next announcement]) (monotonic)."""
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def begin(self, describe: str, seconds: float) -> int:
        now = time.monotonic()
        with self._lock:
            key = next(self._ids)
            self._open[key] = (describe, seconds, now, [now + _WAIT_NOTICE_S])
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="s3-waits", daemon=True)
                self._thread.start()
        return key

    def end(self, key: int) -> None:
        with self._lock:
            self._open.pop(key, None)

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            with self._lock:
                due = [(describe, seconds, began) for describe, seconds, began, at in self._open.values() if now >= at[0]]
                for _, _, _, at in self._open.values():
                    if now >= at[0]:
                        at[0] = now + _WAIT_NOTICE_S
            for describe, seconds, began in due:
                _S3_LOG.warning(
                    "bernstein: still waiting for %s: %.0fs so far (the request gives up after %gs: %s)",
                    describe,
                    now - began,
                    seconds,
                    S3_TIMEOUT_SETTING,
                )


_WAITS: Final = _Waits()


def _deadline_pool(seconds: float, describe: str) -> Any:
    """A urllib3 pool whose every request has one deadline, ``seconds`` from its start: its attempts (at most
    ``_ATTEMPTS``: connection failures, timeouts, 5xx answers) and each socket wait end there; the last 5xx
    answer is handed to minio (an ``S3Error`` with its code), not turned into a bare retry error."""
    import urllib3

    class DeadlineRetry(urllib3.Retry):
        deadline = float("inf")

        def new(self, **kw: Any) -> DeadlineRetry:
            renewed = super().new(**kw)
            renewed.deadline = self.deadline
            return renewed

        def is_exhausted(self) -> bool:
            return super().is_exhausted() or time.monotonic() >= self.deadline

        def get_backoff_time(self) -> float:
            return min(super().get_backoff_time(), max(0.0, self.deadline - time.monotonic()))

        def increment(self, *args: Any, **kw: Any) -> DeadlineRetry:
            renewed = super().increment(*args, **kw)
            if time.monotonic() - (self.deadline - seconds) < _RETRY_NOTICE_S:
                return renewed  # a quick retry (a refused connection) is not a wait worth a line
            error, response = kw.get("error"), kw.get("response")
            what = _short(error) if error is not None else f"HTTP {getattr(response, 'status', '?')}"
            _S3_LOG.warning(
                "bernstein: %s: %s; trying again (attempt %d of %d, %.1fs left of %gs, %s)",
                describe,
                what,
                len(renewed.history) + 1,
                _ATTEMPTS,
                max(0.0, self.deadline - time.monotonic()),
                seconds,
                S3_TIMEOUT_SETTING,
            )
            return renewed

    class DeadlineTimeout(urllib3.Timeout):
        deadline = float("inf")

        def clone(self) -> urllib3.Timeout:
            left = max(self.deadline - time.monotonic(), 0.05)
            connect, read = self.connect_timeout, self.read_timeout
            return urllib3.Timeout(
                connect=min(connect, left) if isinstance(connect, float | int) else left,
                read=min(read, left) if isinstance(read, float | int) else left,
            )

    class DeadlinePool(urllib3.PoolManager):
        def urlopen(self, method: str, url: str, redirect: bool = True, **kw: Any) -> Any:  # type: ignore[override]
            deadline = time.monotonic() + seconds
            retries = DeadlineRetry(
                total=_ATTEMPTS - 1,
                backoff_factor=0.2,
                status_forcelist=(500, 502, 503, 504),
                raise_on_status=False,
            )
            retries.deadline = deadline
            timeout = DeadlineTimeout(connect=min(_CONNECT_TIMEOUT, seconds), read=seconds)
            timeout.deadline = deadline
            kw.setdefault("retries", retries)
            kw.setdefault("timeout", timeout)
            key = _WAITS.begin(describe, seconds)
            try:
                return super().urlopen(method, url, redirect=redirect, **kw)
            finally:
                _WAITS.end(key)

    return DeadlinePool(maxsize=8)


class S3BlobStore(_StreamedStore):
    """A CAS in an S3 bucket, through the ``minio`` client (works against real MinIO)."""

    def __init__(self, settings: S3Settings, *, every_version: bool = False) -> None:
        from minio import Minio  # imported here so offline tools need not load it

        self.settings = settings
        self.every_version = every_version
        """Also name the versions beneath a newest version that holds the right bytes (a listing per blob read)."""
        self.timeout = settings.timeout if settings.timeout is not None else s3_timeout()
        """Seconds one request may take, retries included (see the module doc)."""
        secure = settings.endpoint.startswith("https://")
        host = settings.endpoint.split("://", 1)[-1].rstrip("/")
        self._client = Minio(
            host,
            access_key=settings.access_key,
            secret_key=settings.secret_key,
            secure=secure,
            region=settings.region,
            # Every request ends by its deadline: a store that is down, stalled or failing is named within seconds.
            http_client=_deadline_pool(self.timeout, self.describe()),
        )

        self.other_versions: dict[str, list[OtherVersion]] = {}
        """Digest -> the versions at its address that hold other bytes, as readers found them (see the module doc)."""

    def describe(self) -> str:
        return f"s3 bucket {self.settings.bucket} at {self.settings.endpoint}"

    def ensure_bucket(self) -> None:
        try:
            if not self._client.bucket_exists(self.settings.bucket):
                self._client.make_bucket(self.settings.bucket)
        except Exception as exc:  # noqa: BLE001 - translated at the edge
            raise self._translate(exc, "create bucket") from exc

    def put_result(self, data: bytes) -> PutResult:
        digest = sha256_digest(data)
        checksum = checksum_sha256(digest)
        if self.holds(digest, checksum):
            return PutResult(digest, stored=False)
        try:
            self._client.put_object(
                self.settings.bucket,
                blob_key(digest),
                io.BytesIO(data),
                length=len(data),
                content_type="application/octet-stream",
                metadata={"x-amz-checksum-sha256": checksum},  # the store refuses other bytes
            )
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, f"store blob {digest}") from exc
        return PutResult(digest, stored=True)

    def holds(self, digest: str, checksum: str | None = None) -> bool:
        """True only when the newest version at ``digest``'s address provably holds its bytes: the store
        computed and checked its SHA-256 checksum at upload and that checksum is the address's."""
        try:
            info = self._client.stat_object(
                self.settings.bucket, blob_key(digest), extra_headers={"x-amz-checksum-mode": "ENABLED"}
            )
        except Exception as exc:  # noqa: BLE001
            if _is_missing(exc):
                return False
            raise self._translate(exc, f"look up blob {digest}") from exc
        stored = (info.metadata or {}).get("x-amz-checksum-sha256")
        return stored is not None and stored == (checksum or checksum_sha256(digest))

    def get(self, digest: str) -> bytes:
        try:
            data = super().get(digest)
        except (BlobIntegrityError, BlobNotFound) as newest:
            found = bytearray()
            if self._true_version(digest, newest, found.extend) is None:
                raise
            return bytes(found)
        if self.every_version:
            self._versions_beneath(digest)
        return data

    def check(self, digest: str) -> None:
        self.checked_size(digest)

    def checked_size(self, digest: str) -> int:
        """The byte length of the version at ``digest``'s address whose bytes hash to it, re-hashed in a stream
        (the newest, else an older one: ``_true_version``); what ``check_blob_size`` asks."""
        total = 0

        def count(chunk: bytes | memoryview) -> None:
            nonlocal total
            total += len(chunk)

        try:
            actual = self._stream(digest, count)
            if actual != digest:
                raise BlobIntegrityError(digest, actual, self.describe())
            if self.every_version:
                self._versions_beneath(digest)
            return total
        except (BlobIntegrityError, BlobNotFound) as newest:
            total = 0
            if self._true_version(digest, newest, count) is None:
                raise
            return total

    def _versions(self, digest: str) -> list[Any] | None:
        """Every version at ``digest``'s address, newest first; None when this identity may not list them."""
        from minio.error import S3Error

        key = blob_key(digest)
        try:
            versions = [
                v
                for v in self._client.list_objects(self.settings.bucket, prefix=key, include_version=True)
                if v.object_name == key and v.version_id
            ]
        except S3Error as exc:
            outage = self._translate(exc, f"list the versions of blob {digest}")
            if outage.failure == Failure.SERVER_ERROR:
                raise outage from exc  # the store failed: no verdict may rest on what it did not list
            return None  # no ListBucketVersions (a producer's identity): the newest version's verdict stands
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, f"list the versions of blob {digest}") from exc
        versions.sort(key=lambda v: v.last_modified.timestamp() if v.last_modified else 0.0, reverse=True)
        return versions

    def _versions_beneath(self, digest: str) -> None:
        """Note in ``other_versions`` every version below the newest (which was read and is right) whose bytes
        are not the address's: bytes someone placed there first, or a delete marker."""
        versions = self._versions(digest) or []
        latest = [v for v in versions if str(v.is_latest).lower() == "true"]
        newest = latest[0] if latest else (versions[0] if versions else None)
        others: list[OtherVersion] = []
        for version in versions:
            if version is newest:
                continue
            recomputed = ""
            if not version.is_delete_marker:
                try:
                    recomputed = self._stream(digest, None, version.version_id)
                except CasUnavailable:
                    raise  # an outage is not a version without readable bytes
                except CasError:
                    recomputed = ""
                if recomputed == digest:
                    continue  # the same true bytes stored twice: nothing wrong
            others.append(_other_version(digest, version, recomputed))
        if others:
            self.other_versions[digest] = others

    def _true_version(self, digest: str, newest: CasError, sink: Any) -> str | None:
        """The id of an older version at ``digest``'s address whose bytes hash to it (streamed into ``sink``),
        noting every other version in ``other_versions``; None when there is none (or versions cannot be listed)."""
        versions = self._versions(digest)
        if versions is None:
            return None
        others: list[OtherVersion] = []
        found: str | None = None
        for version in versions:
            recomputed = ""
            if not version.is_delete_marker:
                sunk = bytearray() if sink is not None else None
                try:
                    recomputed = self._stream(digest, None if sunk is None else sunk.extend, version.version_id)
                except CasUnavailable:
                    raise  # an outage is not a version without readable bytes
                except CasError:
                    recomputed = ""
                if recomputed == digest and found is None:
                    found = version.version_id
                    if sink is not None and sunk is not None:
                        sink(bytes(sunk))
                    continue
            others.append(_other_version(digest, version, recomputed))
        if found is None:
            return None
        self.other_versions[digest] = others
        return found

    def _stream(self, digest: str, sink: Any, version_id: str | None = None) -> str:
        """``sha256:<hex>`` of the stored object (its newest version, or ``version_id``), read in chunks (each also
        given to ``sink``), at most the bound."""
        key = blob_key(digest)
        hasher = hashlib.sha256()
        response = None
        try:
            response = self._client.get_object(self.settings.bucket, key, version_id=version_id)
            length = response.headers.get("Content-Length")
            if length is None and "chunked" not in (response.headers.get("Transfer-Encoding") or "").lower():
                # An answer whose headers were cut short parses as one without a length and an empty body: hashing
                # it would call the blob changed. An S3 GetObject always states its length.
                raise self._cut_short(digest, "an answer that does not state its length")
            if length is not None and length.isdigit() and int(length) > MAX_BLOB_BYTES:
                raise BlobTooLarge(digest, int(length), self.describe())
            total = 0
            for chunk in response.stream(_CHUNK):
                total += len(chunk)
                if total > MAX_BLOB_BYTES:
                    raise BlobTooLarge(digest, None, self.describe())
                hasher.update(chunk)
                if sink is not None:
                    sink(chunk)
            if length is not None and length.isdigit() and total != int(length):
                raise self._cut_short(digest, f"{total} of the {length} bytes it announced")
        except CasError:
            raise
        except Exception as exc:  # noqa: BLE001
            if _is_missing(exc):
                raise BlobNotFound(digest, self.describe()) from None
            raise self._translate(exc, f"read blob {digest}") from exc
        finally:
            if response is not None:
                response.close()
                response.release_conn()
        return "sha256:" + hasher.hexdigest()

    def has(self, digest: str) -> bool:
        """An object (any bytes) is at ``digest``'s address; ``holds`` says whether they are the right ones."""
        key = blob_key(digest)
        try:
            self._client.stat_object(self.settings.bucket, key)
        except Exception as exc:  # noqa: BLE001
            if _is_missing(exc):
                return False
            raise self._translate(exc, f"look up blob {digest}") from exc
        return True

    def overwrite_for_test(self, digest: str, data: bytes) -> None:
        """Replace the bytes under ``digest`` (tamper tests only; production never rewrites)."""
        try:
            self._client.put_object(self.settings.bucket, blob_key(digest), io.BytesIO(data), length=len(data))
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, f"overwrite blob {digest}") from exc

    def delete_for_test(self, digest: str) -> None:
        """Remove a blob (tamper tests only)."""
        try:
            self._client.remove_object(self.settings.bucket, blob_key(digest))
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, f"delete blob {digest}") from exc

    def iter_digests(self) -> list[str]:
        """Every digest stored in the bucket (export and tests)."""
        try:
            objects = self._client.list_objects(self.settings.bucket, prefix="sha256/", recursive=True)
            return sorted("sha256:" + obj.object_name.rsplit("/", 1)[-1] for obj in objects if obj.object_name)
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, "list blobs") from exc

    def _translate(self, exc: Exception, action: str) -> CasUnavailable:
        """A failed request as an outage of one ``Failure`` kind, naming the store, the error and what to check.

        Never a verdict on the bytes: whatever went wrong here, nothing was read."""
        from xml.etree.ElementTree import ParseError

        from minio.error import InvalidResponseError, S3Error, ServerError
        from urllib3.exceptions import (
            MaxRetryError,
            NewConnectionError,
            ProtocolError,
            ResponseError,
            SSLError,
        )
        from urllib3.exceptions import TimeoutError as Urllib3Timeout

        where, endpoint = self.describe(), self.settings.endpoint
        root: BaseException = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
        status = 0
        if isinstance(exc, S3Error):
            status = int(getattr(exc.response, "status", 0) or 0)
        elif isinstance(exc, ServerError):
            status = exc.status_code
        elif isinstance(exc, InvalidResponseError):
            status = int(getattr(exc, "_code", 0) or 0)
        if status or isinstance(exc, S3Error):
            said = f"{exc.code}: {exc.message}" if isinstance(exc, S3Error) else _short(exc)
            if status in (401, 403) or (isinstance(exc, S3Error) and exc.code in _DENIED_CODES):
                return self._outage(
                    Failure.ACCESS_DENIED,
                    f"S3 refused to {action} in {where}: {said} (HTTP {status or 403})",
                    "check BERNSTEIN_S3_ACCESS_KEY / BERNSTEIN_S3_SECRET_KEY and what this identity may do in bucket "
                    f"{self.settings.bucket}",
                )
            if status >= 500:
                return self._outage(
                    Failure.SERVER_ERROR,
                    f"S3 failed to {action} in {where}: HTTP {status} {said}, on every attempt",
                    "the store is failing, not the data: check the S3 server's health, then try again",
                )
            return self._outage(
                Failure.REFUSED,
                f"S3 refused to {action} in {where}: {said} (HTTP {status})",
                f"check BERNSTEIN_S3_BUCKET ({self.settings.bucket}) and BERNSTEIN_S3_ENDPOINT ({endpoint})",
            )
        if isinstance(root, ResponseError):  # a bare retry error: only when a 5xx came without a usable answer
            return self._outage(
                Failure.SERVER_ERROR,
                f"S3 failed to {action} in {where}: {_short(root)}",
                "the store is failing, not the data: check the S3 server's health, then try again",
            )
        if isinstance(root, NewConnectionError | ConnectionRefusedError | SSLError):
            return self._outage(
                Failure.UNREACHABLE,
                f"cannot {action}: {where} is unreachable ({_short(root)})",
                "is the S3 server running? (`infra/up` starts one); does BERNSTEIN_S3_ENDPOINT name it?",
            )
        if isinstance(root, Urllib3Timeout | TimeoutError):
            return self._outage(
                Failure.TIMEOUT,
                f"cannot {action}: {where} did not answer within {self.timeout:g}s ({_short(root)})",
                f"the store or the network is stalled or slow: try again, or allow more with {S3_TIMEOUT_SETTING}",
            )
        if isinstance(root, ProtocolError | ConnectionError | OSError | http.client.HTTPException | ParseError):
            return self._outage(
                Failure.INTERRUPTED,
                f"cannot {action}: {where} cut the connection before the whole answer came ({_short(root)})",
                "a proxy, load balancer or the network dropped it: try again",
            )
        return self._outage(
            Failure.UNREACHABLE,
            f"cannot {action}: {where} is unreachable ({_short(root)})",
            "is the S3 server running? (`infra/up` starts one); does BERNSTEIN_S3_ENDPOINT name it?",
        )

    def _cut_short(self, digest: str, what: str) -> CasUnavailable:
        return self._outage(
            Failure.INTERRUPTED,
            f"cannot read blob {digest}: {self.describe()} sent {what}: the answer was cut short",
            "a proxy, load balancer or the network dropped it: try again",
        )

    def _outage(self, failure: str, message: str, hint: str) -> CasUnavailable:
        return CasUnavailable(f"{message}; {hint}", failure=failure, endpoint=self.settings.endpoint, hint=hint)


def _is_missing(exc: Exception) -> bool:
    from minio.error import S3Error

    return isinstance(exc, S3Error) and exc.code in {"NoSuchKey", "NoSuchObject", "ResourceNotFound"}
