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
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from schemas.canonical import digest_hex, sha256_digest
from schemas.errors import BernsteinError
from substrate.files import write_atomically

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


class CasUnavailable(CasError):
    """The store could not be reached or refused the request."""

    code = "E_CAS_UNAVAILABLE"


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
            raise CasUnavailable(f"cannot write blob {digest} under {self.root}: {exc.strerror}") from exc
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
            raise CasUnavailable(f"cannot read blob {digest} from {self.root}: {exc.strerror}") from exc
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
            raise CasUnavailable(f"cannot read blob {digest} from {self.root}: {exc.strerror}") from exc
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


class S3BlobStore(_StreamedStore):
    """A CAS in an S3 bucket, through the ``minio`` client (works against real MinIO)."""

    def __init__(self, settings: S3Settings, *, every_version: bool = False) -> None:
        import urllib3
        from minio import Minio  # imported here so offline tools need not load it

        self.settings = settings
        self.every_version = every_version
        """Also name the versions beneath a newest version that holds the right bytes (a listing per blob read)."""
        secure = settings.endpoint.startswith("https://")
        host = settings.endpoint.split("://", 1)[-1].rstrip("/")
        self._client = Minio(
            host,
            access_key=settings.access_key,
            secret_key=settings.secret_key,
            secure=secure,
            region=settings.region,
            # Fail within seconds when the server is down instead of minio's long default retries.
            http_client=urllib3.PoolManager(
                timeout=urllib3.Timeout(connect=5.0, read=60.0),
                retries=urllib3.Retry(total=2, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
                maxsize=8,
            ),
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
        except S3Error:
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

    def _translate(self, exc: Exception, action: str) -> CasError:
        from minio.error import S3Error

        if isinstance(exc, S3Error):
            return CasUnavailable(f"S3 refused to {action} in {self.describe()}: {exc.code}: {exc.message}")
        return CasUnavailable(
            f"cannot {action}: {self.describe()} is unreachable ({type(exc).__name__}: {exc}); "
            "is the S3 server running? (`infra/up` starts one)"
        )


def _is_missing(exc: Exception) -> bool:
    from minio.error import S3Error

    return isinstance(exc, S3Error) and exc.code in {"NoSuchKey", "NoSuchObject", "ResourceNotFound"}
