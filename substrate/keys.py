"""Keys by owner and purpose, as files: the scheduler's ring and each producer host's own.

A scheduler's key directory (``bernstein keys init``), on the scheduler host only::

    install.ed25519.key   PEM PKCS#8 Ed25519 private key (seal key)   mode 0600
    install.ed25519.pub   PEM SubjectPublicKeyInfo                    mode 0644
    audit.hmac.key        64 hex characters (32 bytes, audit key)     mode 0600
    keyring.json          every key with its purpose and lifetime     mode 0600
    seal-NNN.ed25519.key, audit-NNN.hmac.key ...   keys added by `bernstein keys rotate`

A producer's key directory (``bernstein keys init --producer NAME``), on that producer host::

    producer.ed25519.key/.pub   signs submissions, lineage entries, data/ops receipts
    lineage.hmac.key            the HMAC envelope of its lineage entries
    redaction.hmac.key          typed-value digests (never exported)
    keyring.json                as above, with ``"producer": NAME``

Keys are identified by key id (``bernstein.schemas.canonical.public_key_id`` /
``hmac_key_id``). A verifier trusts only keys it is handed in a trusted-keys
file (``TrustedKeys``), never a key found in the data it checks. See docs/security.md.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bernstein.schemas.canonical import hmac_key_id, public_key_id
from bernstein.schemas.ed25519 import verify_signature as verify_signature  # re-exported for callers
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.tlog_policy import Policy, parse_policy

SIGNING_KEY_FILE: Final = "install.ed25519.key"
PUBLIC_KEY_FILE: Final = "install.ed25519.pub"
AUDIT_KEY_FILE: Final = "audit.hmac.key"
KEYRING_FILE: Final = "keyring.json"
KEYRING_FORMAT: Final = "bernstein.keyring/v1"
PRODUCER_KEY_FILE: Final = "producer.ed25519.key"
PRODUCER_PUBLIC_FILE: Final = "producer.ed25519.pub"
LINEAGE_KEY_FILE: Final = "lineage.hmac.key"
REDACTION_KEY_FILE: Final = "redaction.hmac.key"
TRUSTED_KEYS_FORMAT: Final = "bernstein.trusted-keys/v2"
TRUSTED_KEYS_FORMAT_V1: Final = "bernstein.trusted-keys/v1"


class KeyStoreError(BernsteinError):
    """A key file is missing, unreadable, too open or not a key."""

    code = "E_KEYS"


class KeyFileMissing(KeyStoreError):
    code = "E_KEY_MISSING"


class KeyPermissionsTooOpen(KeyStoreError):
    code = "E_KEY_PERMISSIONS"


class KeyFormatError(KeyStoreError):
    code = "E_KEY_FORMAT"


class KeysExist(KeyStoreError):
    code = "E_KEYS_EXIST"


def default_keys_dir() -> Path:
    """``$BERNSTEIN_KEYS_DIR``, else ``$XDG_STATE_HOME/bernstein/keys``, else ``~/.local/state/bernstein/keys``."""
    explicit = os.environ.get("BERNSTEIN_KEYS_DIR")
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "bernstein" / "keys"


class Ed25519Signer:
    """Signs with an Ed25519 private key; deterministic per RFC 8032."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key = private_key.public_key()
        self.public_key_raw = self.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self._key_id = public_key_id(self.public_key_raw)

    @property
    def key_id(self) -> str:
        return self._key_id

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)

    @classmethod
    def from_seed(cls, seed: bytes) -> Ed25519Signer:
        """A signer from a 32-byte seed (test vectors and fixtures)."""
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def generate(cls) -> Ed25519Signer:
        return cls(Ed25519PrivateKey.generate())


@dataclass(frozen=True)
class AuditKey:
    """The HMAC-SHA256 key of the audit chain."""

    secret: bytes
    key_id: str

    @classmethod
    def from_secret(cls, secret: bytes) -> AuditKey:
        if len(secret) < 16:
            raise KeyFormatError("an audit HMAC key needs at least 16 bytes")
        return cls(secret=secret, key_id=hmac_key_id(secret))


class KeyPurpose(StrEnum):
    """What a key is for: one key, one purpose (docs/security.md)."""

    SEAL = "seal"
    """Ed25519, scheduler host only: signs run seals and partition checkpoints."""
    AUDIT = "audit"
    """HMAC-SHA256, scheduler host only: MACs the audit chain. Auditors receive the secret."""
    PRODUCER = "producer"
    """Ed25519, one per producer host: signs submissions, computer-use lineage entries, data/ops receipts."""
    LINEAGE = "lineage"
    """HMAC-SHA256, producer host only: the seeds' HMAC envelope on lineage entries."""
    REDACTION = "redaction"
    """HMAC-SHA256, producer host only: typed-value digests. Never exported."""
    ANY = "any"
    """A key from a v1 trusted-keys file, which did not say what it was for."""


_SIGNING_PURPOSES: Final = frozenset({KeyPurpose.SEAL, KeyPurpose.PRODUCER})
_SCHEDULER_PURPOSES: Final = (KeyPurpose.SEAL, KeyPurpose.AUDIT)
_PRODUCER_PURPOSES: Final = (KeyPurpose.PRODUCER, KeyPurpose.LINEAGE, KeyPurpose.REDACTION)


class KeyStatus(StrEnum):
    ACTIVE = "active"
    RETIRED = "retired"
    """Replaced by a newer key; still trusted for records inside its range."""
    REVOKED = "revoked"
    """Withdrawn (compromised): its private part is destroyed; records after valid_until are forgeries."""


@dataclass(frozen=True)
class Validity:
    """A key's lifetime in milliseconds since the epoch: ``[valid_from_ms, valid_until_ms)``.

    Compared with a record's Kafka timestamp: the input's timestamp for what the scheduler
    decides and writes (its outputs carry the same timestamp), never the scheduler's clock.
    """

    valid_from_ms: int = 0
    valid_until_ms: int | None = None

    def contains(self, timestamp_ms: int) -> bool:
        return timestamp_ms >= self.valid_from_ms and (self.valid_until_ms is None or timestamp_ms < self.valid_until_ms)

    def describe(self) -> str:
        until = "open" if self.valid_until_ms is None else str(self.valid_until_ms)
        return f"[{self.valid_from_ms}, {until})"


ALWAYS: Final = Validity()


@dataclass(frozen=True)
class RingKey:
    """One key of a key directory's ring, with its private part when this host holds it."""

    key_id: str
    purpose: KeyPurpose
    file: str
    validity: Validity = ALWAYS
    status: KeyStatus = KeyStatus.ACTIVE
    signer: Ed25519Signer | None = None
    """Ed25519 keys whose private file is present."""
    public_key_raw: bytes | None = None
    """Ed25519 keys: the raw public key (kept after a revocation destroys the private part)."""
    secret: bytes | None = None
    """HMAC keys."""

    def to_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "key_id": self.key_id,
            "purpose": self.purpose.value,
            "file": self.file,
            "valid_from_ms": self.validity.valid_from_ms,
            "valid_until_ms": self.validity.valid_until_ms,
            "status": self.status.value,
        }
        if self.public_key_raw is not None:
            item["public_key"] = self.public_key_raw.hex()
        return item


@dataclass(frozen=True)
class KeyRing:
    """Every key a key directory ever held, oldest first, as ``keyring.json`` lists them."""

    keys: tuple[RingKey, ...]
    producer: str | None = None
    """The producer name of a producer key directory; None for the scheduler's."""

    def of(self, purpose: KeyPurpose) -> list[RingKey]:
        return [k for k in self.keys if k.purpose == purpose]

    def current(self, purpose: KeyPurpose) -> RingKey:
        """The newest key of ``purpose`` that this host can use (private part present, not revoked)."""
        usable = [k for k in self.of(purpose) if k.status != KeyStatus.REVOKED and (k.signer or k.secret)]
        if not usable:
            raise KeyFileMissing(f"no usable {purpose.value} key in the key ring")
        return usable[-1]

    def usable(self, purpose: KeyPurpose) -> list[RingKey]:
        """Keys of ``purpose`` whose private part this host holds, oldest first (revoked HMAC keys excluded)."""
        return [k for k in self.of(purpose) if (k.signer or k.secret) and k.status != KeyStatus.REVOKED]

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"format": KEYRING_FORMAT, "keys": [k.to_json() for k in self.keys]}
        if self.producer is not None:
            document["producer"] = self.producer
        return document


@dataclass(frozen=True)
class InstallKeys:
    """The scheduler's keys: the current seal signer and audit key, and the whole ring.

    (The name is the seeds' "install key"; since producer identities it is the scheduler's
    alone and never leaves the scheduler host.)
    """

    signer: Ed25519Signer
    audit: AuditKey
    directory: Path
    ring: KeyRing | None = None

    @property
    def key_ring(self) -> KeyRing:
        if self.ring is not None:
            return self.ring
        return KeyRing(
            (
                RingKey(
                    self.signer.key_id,
                    KeyPurpose.SEAL,
                    SIGNING_KEY_FILE,
                    signer=self.signer,
                    public_key_raw=self.signer.public_key_raw,
                ),
                RingKey(self.audit.key_id, KeyPurpose.AUDIT, AUDIT_KEY_FILE, secret=self.audit.secret),
            )
        )


@dataclass(frozen=True)
class ProducerKeys:
    """A producer host's own keys: its signing key, its lineage envelope key, its redaction key."""

    name: str
    signer: Ed25519Signer
    lineage: AuditKey
    redaction: AuditKey
    directory: Path
    ring: KeyRing


def init_keys(directory: Path) -> InstallKeys:
    """Create the scheduler's first seal key and audit key; refuse to overwrite existing keys."""
    _refuse_existing(directory, (SIGNING_KEY_FILE, PUBLIC_KEY_FILE, AUDIT_KEY_FILE, KEYRING_FILE))
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    seal = _new_ed25519(directory, SIGNING_KEY_FILE, PUBLIC_KEY_FILE, KeyPurpose.SEAL, ALWAYS)
    audit = _new_hmac(directory, AUDIT_KEY_FILE, KeyPurpose.AUDIT, ALWAYS)
    ring = KeyRing((seal, audit))
    _write_ring(directory, ring)
    assert seal.signer is not None and audit.secret is not None
    return InstallKeys(signer=seal.signer, audit=AuditKey.from_secret(audit.secret), directory=directory, ring=ring)


def load_keys(directory: Path) -> InstallKeys:
    """Load the scheduler's keys, checking permissions and formats with clear errors.

    A directory without ``keyring.json`` (written before key rings) holds one seal key and one
    audit key, both valid from the beginning with no end.
    """
    if not (directory / KEYRING_FILE).exists():
        return InstallKeys(
            signer=load_signer(directory / SIGNING_KEY_FILE),
            audit=load_audit_key(directory / AUDIT_KEY_FILE),
            directory=directory,
        )
    ring = load_ring(directory)
    if ring.producer is not None:
        raise KeyFormatError(
            f"{directory} holds the keys of producer {ring.producer!r}, not a scheduler's "
            "(a scheduler's keys come from `bernstein keys init` without --producer)"
        )
    seal = ring.current(KeyPurpose.SEAL)
    audit = ring.current(KeyPurpose.AUDIT)
    assert seal.signer is not None and audit.secret is not None
    return InstallKeys(signer=seal.signer, audit=AuditKey.from_secret(audit.secret), directory=directory, ring=ring)


def init_producer_keys(directory: Path, name: str) -> ProducerKeys:
    """Create a producer host's keys (signing, lineage envelope, redaction) for producer ``name``."""
    _refuse_existing(directory, (PRODUCER_KEY_FILE, PRODUCER_PUBLIC_FILE, LINEAGE_KEY_FILE, REDACTION_KEY_FILE, KEYRING_FILE))
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    signing = _new_ed25519(directory, PRODUCER_KEY_FILE, PRODUCER_PUBLIC_FILE, KeyPurpose.PRODUCER, ALWAYS)
    lineage = _new_hmac(directory, LINEAGE_KEY_FILE, KeyPurpose.LINEAGE, ALWAYS)
    redaction = _new_hmac(directory, REDACTION_KEY_FILE, KeyPurpose.REDACTION, ALWAYS)
    ring = KeyRing((signing, lineage, redaction), producer=name)
    _write_ring(directory, ring)
    return _producer_keys(directory, ring)


def load_producer_keys(directory: Path) -> ProducerKeys:
    """Load a producer host's keys (``bernstein keys init --producer NAME``)."""
    if not (directory / KEYRING_FILE).exists():
        raise KeyFileMissing(
            f"no producer keys in {directory}; create them with `bernstein keys init --producer NAME --dir {directory}`"
        )
    ring = load_ring(directory)
    if ring.producer is None:
        raise KeyFormatError(
            f"{directory} holds a scheduler's keys, not a producer's: a producer host gets its own "
            "(`bernstein keys init --producer NAME`) and is registered in the manifest's [[producers]]"
        )
    return _producer_keys(directory, ring)


def _producer_keys(directory: Path, ring: KeyRing) -> ProducerKeys:
    assert ring.producer is not None
    signing = ring.current(KeyPurpose.PRODUCER)
    lineage = ring.current(KeyPurpose.LINEAGE)
    redaction = ring.current(KeyPurpose.REDACTION)
    assert signing.signer is not None and lineage.secret is not None and redaction.secret is not None
    return ProducerKeys(
        name=ring.producer,
        signer=signing.signer,
        lineage=AuditKey.from_secret(lineage.secret),
        redaction=AuditKey.from_secret(redaction.secret),
        directory=directory,
        ring=ring,
    )


def rotate_key(directory: Path, purpose: KeyPurpose, *, now_ms: int, revoke: bool = False) -> tuple[RingKey, RingKey]:
    """Replace the current key of ``purpose`` with a fresh one at ``now_ms``; return (old, new).

    Rotation retires the old key at ``now_ms`` and keeps its private part, so inputs stamped
    before the rotation are still signed with it. ``revoke`` withdraws it instead: an Ed25519
    private file is destroyed (an HMAC secret is kept, because verifiers need it for the old
    records) and the new key also covers the old key's range, taking over the backlog.
    """
    ring = _ring_for_rotation(directory)
    if purpose not in {k.purpose for k in ring.keys}:
        raise KeyFormatError(f"{directory} has no {purpose.value} key to rotate")
    old = ring.current(purpose)
    if now_ms <= old.validity.valid_from_ms:
        raise KeyFormatError(
            f"cannot rotate at {now_ms}: the current {purpose.value} key is valid from {old.validity.valid_from_ms}"
        )
    suffix = f"{len(ring.keys):03d}"
    new_from = old.validity.valid_from_ms if revoke else now_ms
    if purpose in _SIGNING_PURPOSES:
        new = _new_ed25519(
            directory,
            f"{purpose.value}-{suffix}.ed25519.key",
            f"{purpose.value}-{suffix}.ed25519.pub",
            purpose,
            Validity(new_from),
        )
    else:
        new = _new_hmac(directory, f"{purpose.value}-{suffix}.hmac.key", purpose, Validity(new_from))
    retired = replace(
        old,
        validity=Validity(old.validity.valid_from_ms, now_ms),
        status=KeyStatus.REVOKED if revoke else KeyStatus.RETIRED,
        signer=None if revoke else old.signer,
    )
    keys = tuple(retired if k.key_id == old.key_id else k for k in ring.keys) + (new,)
    _write_ring(directory, KeyRing(keys, producer=ring.producer))
    if revoke and old.signer is not None:
        (directory / old.file).unlink(missing_ok=True)
    return retired, new


def _ring_for_rotation(directory: Path) -> KeyRing:
    if (directory / KEYRING_FILE).exists():
        return load_ring(directory)
    legacy = load_keys(directory)
    ring = legacy.key_ring
    _write_ring(directory, ring)
    return ring


def load_ring(directory: Path) -> KeyRing:
    """Read ``keyring.json`` and every key file it names that is still present."""
    path = directory / KEYRING_FILE
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KeyFileMissing(f"no key ring at {path}; create keys with `bernstein keys init --dir {directory}`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KeyFormatError(f"{path} is not a readable key ring: {exc}") from exc
    if not isinstance(document, dict) or document.get("format") != KEYRING_FORMAT:
        raise KeyFormatError(f"{path} is not a {KEYRING_FORMAT} document")
    keys: list[RingKey] = []
    try:
        for item in document["keys"]:
            purpose = KeyPurpose(item["purpose"])
            status = KeyStatus(item.get("status", "active"))
            validity = _validity(item)
            file = str(item["file"])
            if "/" in file or file.startswith("."):
                raise KeyFormatError(f"{path}: key file name {file!r} must be a plain name in the directory")
            if purpose in _SIGNING_PURPOSES:
                signer = load_signer(directory / file) if (directory / file).exists() else None
                public = bytes.fromhex(item["public_key"]) if "public_key" in item else None
                if signer is not None:
                    public = signer.public_key_raw
                if public is None:
                    raise KeyFormatError(f"{path}: key {item['key_id']} has neither a private file nor a public key")
                key_id = public_key_id(public)
                keys.append(RingKey(key_id, purpose, file, validity, status, signer=signer, public_key_raw=public))
            else:
                secret = load_audit_key(directory / file).secret if (directory / file).exists() else None
                key_id = hmac_key_id(secret) if secret is not None else str(item["key_id"])
                keys.append(RingKey(key_id, purpose, file, validity, status, secret=secret))
            if item.get("key_id", key_id) != key_id:
                raise KeyFormatError(f"{path}: key_id {item['key_id']} does not match the key in {file} ({key_id})")
    except (KeyError, TypeError, ValueError) as exc:
        raise KeyFormatError(f"{path}: malformed key entry: {exc}") from exc
    producer = document.get("producer")
    if producer is not None and not isinstance(producer, str):
        raise KeyFormatError(f"{path}: producer must be a string")
    return KeyRing(tuple(keys), producer=producer)


def _validity(item: Mapping[str, Any]) -> Validity:
    start = item.get("valid_from_ms", 0)
    until = item.get("valid_until_ms")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise ValueError(f"valid_from_ms must be a non-negative integer, got {start!r}")
    if until is not None and (not isinstance(until, int) or isinstance(until, bool) or until <= start):
        raise ValueError(f"valid_until_ms must be an integer after valid_from_ms, got {until!r}")
    return Validity(start, until)


def _refuse_existing(directory: Path, names: tuple[str, ...]) -> None:
    existing = [name for name in names if (directory / name).exists()]
    if existing:
        raise KeysExist(
            f"{directory} already holds {', '.join(existing)}; refusing to overwrite keys "
            "(anything signed with them would stop verifying). Use another --dir, or `bernstein keys rotate`."
        )


def _new_ed25519(directory: Path, private_name: str, public_name: str, purpose: KeyPurpose, validity: Validity) -> RingKey:
    signer = Ed25519Signer.generate()
    private_pem = signer._key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = signer.public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_new(directory / private_name, private_pem, 0o600)
    _write_new(directory / public_name, public_pem, 0o644)
    return RingKey(signer.key_id, purpose, private_name, validity, signer=signer, public_key_raw=signer.public_key_raw)


def _new_hmac(directory: Path, name: str, purpose: KeyPurpose, validity: Validity) -> RingKey:
    secret = os.urandom(32)
    _write_new(directory / name, secret.hex().encode() + b"\n", 0o600)
    return RingKey(hmac_key_id(secret), purpose, name, validity, secret=secret)


def _write_ring(directory: Path, ring: KeyRing) -> None:
    _write_new(directory / KEYRING_FILE, (json.dumps(ring.to_json(), indent=2) + "\n").encode(), 0o600, replace=True)


def load_signer(path: Path) -> Ed25519Signer:
    data = _read_secret(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise KeyFormatError(f"{path} is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFormatError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key")
    return Ed25519Signer(key)


def load_audit_key(path: Path) -> AuditKey:
    text = _read_secret(path).decode("ascii", "replace").strip()
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise KeyFormatError(f"{path} must hold the audit key as hex characters") from None
    return AuditKey.from_secret(secret)


def load_public_key(path: Path) -> bytes:
    """Raw 32 bytes of an Ed25519 public key from a PEM file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise KeyFileMissing(f"no public key at {path}") from None
    except OSError as exc:
        raise KeyStoreError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFormatError(f"{path} is not a PEM public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFormatError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class TrustedKey:
    """One pinned key: what it may sign or MAC, for whom, and when."""

    key_id: str
    purpose: KeyPurpose
    material: bytes
    """Raw Ed25519 public key, or the HMAC secret of an audit key."""
    validity: Validity = ALWAYS
    producer: str | None = None
    """For producer keys: the producer name the manifest registers the key to."""
    status: KeyStatus = KeyStatus.ACTIVE

    @property
    def is_hmac(self) -> bool:
        return self.purpose == KeyPurpose.AUDIT

    def allows(self, purpose: KeyPurpose) -> bool:
        """A v1 file's Ed25519 keys (purpose ANY) may stand for a seal or a producer key."""
        if self.purpose == KeyPurpose.ANY:
            return purpose in _SIGNING_PURPOSES
        return self.purpose == purpose

    def to_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {"key_id": self.key_id, "purpose": self.purpose.value}
        item["secret" if self.is_hmac else "public_key"] = self.material.hex()
        item["producer"] = self.producer
        item["valid_from_ms"] = self.validity.valid_from_ms
        item["valid_until_ms"] = self.validity.valid_until_ms
        item["status"] = self.status.value
        return item


@dataclass(frozen=True)
class TrustedKeys:
    """The keys a verifier was told to trust (pinned): nothing else verifies.

    ``bernstein.trusted-keys/v2`` names each key's purpose, lifetime and (producer keys) owner;
    a v1 file still loads, its keys with no end and no stated purpose.
    """

    ed25519: dict[str, bytes] = field(default_factory=dict)
    """key_id -> raw public key (every Ed25519 key, whatever its purpose)."""
    hmac: dict[str, bytes] = field(default_factory=dict)
    """key_id -> secret (audit keys)."""
    entries: dict[str, TrustedKey] = field(default_factory=dict)
    """key_id -> the pinned key with its purpose and validity."""
    witness_policy: str | None = None
    """A C2SP tlog-policy (``bernstein.schemas.tlog_policy``): the witnesses whose cosignatures a partition log's
    checkpoints need (``activity verify`` then requires a witnessed checkpoint per partition). None: no policy."""

    witness_max_lag_s: int | None = None
    """With a witness policy: how long (seconds) a journal record may stay outside the largest checkpoint witnesses
    cosigned, counted at that cosignature (``activity verify`` names an older unwitnessed tail). None: no bound."""

    def __post_init__(self) -> None:
        if self.witness_policy is not None:
            parse_policy(self.witness_policy)  # MalformedPolicy names the line
        if self.witness_max_lag_s is not None and (
            type(self.witness_max_lag_s) is not int or self.witness_max_lag_s < 0 or self.witness_policy is None
        ):
            raise KeyFormatError("witness_max_lag_seconds is a whole number of seconds, with a witness policy")
        # Keys given only as the plain dictionaries (tests, v1 files) are trusted for any purpose.
        for key_id, raw in self.ed25519.items():
            self.entries.setdefault(key_id, TrustedKey(key_id, KeyPurpose.ANY, raw))
        for key_id, secret in self.hmac.items():
            self.entries.setdefault(key_id, TrustedKey(key_id, KeyPurpose.AUDIT, secret))

    @classmethod
    def of(
        cls, keys: Iterable[TrustedKey], witness_policy: str | None = None, witness_max_lag_s: int | None = None
    ) -> TrustedKeys:
        entries = {k.key_id: k for k in keys}
        return cls(
            ed25519={k: v.material for k, v in entries.items() if not v.is_hmac},
            hmac={k: v.material for k, v in entries.items() if v.is_hmac},
            entries=entries,
            witness_policy=witness_policy,
            witness_max_lag_s=witness_max_lag_s,
        )

    def policy(self) -> Policy | None:
        """The parsed witness policy, if one is pinned."""
        return None if self.witness_policy is None else parse_policy(self.witness_policy)

    def with_witness_policy(self, text: str | None, max_lag_s: int | None = None) -> TrustedKeys:
        return TrustedKeys.of(self.entries.values(), text, max_lag_s)

    def public_key(self, key_id: str) -> bytes | None:
        return self.ed25519.get(key_id)

    def audit_secret(self, key_id: str) -> bytes | None:
        return self.hmac.get(key_id)

    def entry(self, key_id: str) -> TrustedKey | None:
        return self.entries.get(key_id)

    def merged(self, other: TrustedKeys) -> TrustedKeys:
        first = self if self.witness_policy is not None else other
        return TrustedKeys.of([*self.entries.values(), *other.entries.values()], first.witness_policy, first.witness_max_lag_s)

    def without_audit_keys(self) -> TrustedKeys:
        return TrustedKeys.of([k for k in self.entries.values() if not k.is_hmac], self.witness_policy, self.witness_max_lag_s)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "format": TRUSTED_KEYS_FORMAT,
            "keys": [self.entries[k].to_json() for k in sorted(self.entries)],
        }
        if self.witness_policy is not None:
            document["witness_policy"] = self.witness_policy
        if self.witness_max_lag_s is not None:
            document["witness_max_lag_seconds"] = self.witness_max_lag_s
        return document

    @classmethod
    def from_ring(cls, ring: KeyRing, *, include_audit_key: bool = True) -> TrustedKeys:
        """The public half of a scheduler's ring (and its audit secrets, which auditors need)."""
        pinned: list[TrustedKey] = []
        for key in ring.keys:
            if key.purpose == KeyPurpose.AUDIT:
                if include_audit_key and key.secret is not None:
                    pinned.append(TrustedKey(key.key_id, key.purpose, key.secret, key.validity, None, key.status))
            elif key.purpose in _SIGNING_PURPOSES and key.public_key_raw is not None:
                pinned.append(TrustedKey(key.key_id, key.purpose, key.public_key_raw, key.validity, ring.producer, key.status))
        return cls.of(pinned)

    @classmethod
    def from_install(cls, keys: InstallKeys, *, include_audit_key: bool = True) -> TrustedKeys:
        return cls.from_ring(keys.key_ring, include_audit_key=include_audit_key)

    @classmethod
    def load(cls, path: Path) -> TrustedKeys:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise KeyFileMissing(f"no trusted-keys file at {path}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KeyFormatError(f"{path} is not a readable trusted-keys JSON file: {exc}") from exc
        if not isinstance(document, dict) or document.get("format") not in (TRUSTED_KEYS_FORMAT, TRUSTED_KEYS_FORMAT_V1):
            raise KeyFormatError(f"{path} is not a {TRUSTED_KEYS_FORMAT} document (write one with `bernstein keys trust`)")
        try:
            if document["format"] == TRUSTED_KEYS_FORMAT_V1:
                return cls.of(_v1_entries(document))
            policy = document.get("witness_policy")
            if policy is not None and not isinstance(policy, str):
                raise KeyFormatError("witness_policy is the text of a C2SP tlog-policy")
            lag = document.get("witness_max_lag_seconds")
            return cls.of((_v2_entry(item) for item in document["keys"]), policy, lag)
        except KeyFormatError as exc:
            raise KeyFormatError(f"{path}: {exc}") from exc
        except (KeyError, TypeError, ValueError, BernsteinError) as exc:
            raise KeyFormatError(f"{path}: malformed key entry: {exc}") from exc

    def write(self, path: Path) -> None:
        _write_new(path, (json.dumps(self.to_json(), indent=2) + "\n").encode(), 0o600 if self.hmac else 0o644, replace=True)


def _v1_entries(document: Mapping[str, Any]) -> list[TrustedKey]:
    entries: list[TrustedKey] = []
    for item in document.get("ed25519", []):
        raw = bytes.fromhex(item["public_key"])
        key_id = public_key_id(raw)
        if item.get("key_id", key_id) != key_id:
            raise KeyFormatError(f"key_id {item['key_id']} does not match its public key ({key_id})")
        entries.append(TrustedKey(key_id, KeyPurpose.ANY, raw))
    for item in document.get("hmac", []):
        audit = AuditKey.from_secret(bytes.fromhex(item["secret"]))
        if item.get("key_id", audit.key_id) != audit.key_id:
            raise KeyFormatError(f"key_id {item['key_id']} does not match its secret ({audit.key_id})")
        entries.append(TrustedKey(audit.key_id, KeyPurpose.AUDIT, audit.secret))
    return entries


def _v2_entry(item: Mapping[str, Any]) -> TrustedKey:
    purpose = KeyPurpose(item["purpose"])
    if purpose in (KeyPurpose.LINEAGE, KeyPurpose.REDACTION):
        raise KeyFormatError(f"a {purpose.value} key is a producer's own secret and never belongs in a trusted-keys file")
    if purpose == KeyPurpose.AUDIT:
        material = AuditKey.from_secret(bytes.fromhex(item["secret"])).secret
        key_id = hmac_key_id(material)
    else:
        material = bytes.fromhex(item["public_key"])
        key_id = public_key_id(material)
    if item.get("key_id", key_id) != key_id:
        raise KeyFormatError(f"key_id {item['key_id']} does not match its key material ({key_id})")
    producer = item.get("producer")
    if producer is not None and not isinstance(producer, str):
        raise KeyFormatError(f"key {key_id}: producer must be a string")
    if purpose == KeyPurpose.PRODUCER and not producer:
        raise KeyFormatError(f"producer key {key_id} names no producer")
    return TrustedKey(key_id, purpose, material, _validity(item), producer, KeyStatus(item.get("status", "active")))


def _read_secret(path: Path) -> bytes:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise KeyFileMissing(f"no key at {path}; create keys with `bernstein keys init --dir {path.parent}`") from None
    except OSError as exc:
        raise KeyStoreError(f"cannot read {path}: {exc.strerror}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyPermissionsTooOpen(
            f"{path} has mode {stat.S_IMODE(mode):04o}; a secret key must be readable by its owner only: chmod 600 {path}"
        )
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KeyStoreError(f"cannot read {path}: {exc.strerror}") from exc


def _write_new(path: Path, data: bytes, mode: int, *, replace: bool = False) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    fd = os.open(path, flags, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
