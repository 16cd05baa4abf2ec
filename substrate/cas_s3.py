"""The CAS's S3 adapter: ``S3BlobStore`` over the ``minio`` client, and how to reach its bucket.

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

Every failed request becomes a ``CasUnavailable`` of one ``Failure`` kind (``_translate``), within
the deadline of ``bernstein.substrate.deadlines``. ``bernstein.substrate.cas`` hands these names
on, so callers import them from there.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
from dataclasses import dataclass
from typing import Any, Final

from bernstein.schemas.canonical import digest_hex, sha256_digest
from bernstein.substrate.cas import (
    _CHUNK,
    MAX_BLOB_BYTES,
    BlobIntegrityError,
    BlobNotFound,
    BlobTooLarge,
    CasError,
    CasUnavailable,
    Failure,
    PutResult,
    _StreamedStore,
    blob_key,
)
from bernstein.substrate.deadlines import S3_TIMEOUT_SETTING, _deadline_pool, _short, s3_timeout


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


_DENIED_CODES: Final = frozenset(
    {"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken", "InvalidToken", "AllAccessDisabled"}
)


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
