"""Install keys: an Ed25519 signing key and an HMAC audit key, as files.

Layout of a key directory (``bernstein keys init``)::

    install.ed25519.key   PEM PKCS#8 Ed25519 private key   mode 0600
    install.ed25519.pub   PEM SubjectPublicKeyInfo          mode 0644
    audit.hmac.key        64 hex characters (32 bytes)      mode 0600

Keys are identified by key id (``schemas.canonical.public_key_id`` /
``hmac_key_id``). A verifier trusts only keys it is handed in a trusted-keys
file (``TrustedKeys``), never a key found in the data it checks.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from schemas.canonical import hmac_key_id, public_key_id
from schemas.ed25519 import verify_signature as verify_signature  # re-exported for callers
from schemas.errors import BernsteinError

SIGNING_KEY_FILE: Final = "install.ed25519.key"
PUBLIC_KEY_FILE: Final = "install.ed25519.pub"
AUDIT_KEY_FILE: Final = "audit.hmac.key"
TRUSTED_KEYS_FORMAT: Final = "bernstein.trusted-keys/v1"


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


@dataclass(frozen=True)
class InstallKeys:
    """The pair of keys a scheduler or producer works with."""

    signer: Ed25519Signer
    audit: AuditKey
    directory: Path


def init_keys(directory: Path) -> InstallKeys:
    """Create a fresh key pair and audit key; refuse to overwrite existing keys."""
    existing = [name for name in (SIGNING_KEY_FILE, PUBLIC_KEY_FILE, AUDIT_KEY_FILE) if (directory / name).exists()]
    if existing:
        raise KeysExist(
            f"{directory} already holds {', '.join(existing)}; refusing to overwrite keys "
            "(anything signed with them would stop verifying). Use another --dir or remove them deliberately."
        )
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    signer = Ed25519Signer.generate()
    private_pem = signer._key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = signer.public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    secret = os.urandom(32)
    _write_new(directory / SIGNING_KEY_FILE, private_pem, 0o600)
    _write_new(directory / PUBLIC_KEY_FILE, public_pem, 0o644)
    _write_new(directory / AUDIT_KEY_FILE, secret.hex().encode() + b"\n", 0o600)
    return InstallKeys(signer=signer, audit=AuditKey.from_secret(secret), directory=directory)


def load_keys(directory: Path) -> InstallKeys:
    """Load the install keys, checking permissions and formats with clear errors."""
    return InstallKeys(
        signer=load_signer(directory / SIGNING_KEY_FILE),
        audit=load_audit_key(directory / AUDIT_KEY_FILE),
        directory=directory,
    )


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
class TrustedKeys:
    """The keys a verifier was told to trust (pinned): nothing else verifies."""

    ed25519: dict[str, bytes] = field(default_factory=dict)
    """key_id -> raw public key."""
    hmac: dict[str, bytes] = field(default_factory=dict)
    """key_id -> secret."""

    def public_key(self, key_id: str) -> bytes | None:
        return self.ed25519.get(key_id)

    def audit_secret(self, key_id: str) -> bytes | None:
        return self.hmac.get(key_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": TRUSTED_KEYS_FORMAT,
            "ed25519": [{"key_id": k, "public_key": v.hex()} for k, v in sorted(self.ed25519.items())],
            "hmac": [{"key_id": k, "secret": v.hex()} for k, v in sorted(self.hmac.items())],
        }

    @classmethod
    def from_install(cls, keys: InstallKeys, *, include_audit_key: bool = True) -> TrustedKeys:
        return cls(
            ed25519={keys.signer.key_id: keys.signer.public_key_raw},
            hmac={keys.audit.key_id: keys.audit.secret} if include_audit_key else {},
        )

    @classmethod
    def load(cls, path: Path) -> TrustedKeys:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise KeyFileMissing(f"no trusted-keys file at {path}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KeyFormatError(f"{path} is not a readable trusted-keys JSON file: {exc}") from exc
        if not isinstance(document, dict) or document.get("format") != TRUSTED_KEYS_FORMAT:
            raise KeyFormatError(f"{path} is not a {TRUSTED_KEYS_FORMAT} document (write one with `bernstein keys trust`)")
        ed25519: dict[str, bytes] = {}
        hmac: dict[str, bytes] = {}
        try:
            for item in document.get("ed25519", []):
                raw = bytes.fromhex(item["public_key"])
                key_id = public_key_id(raw)
                if item.get("key_id", key_id) != key_id:
                    raise KeyFormatError(f"{path}: key_id {item['key_id']} does not match its public key ({key_id})")
                ed25519[key_id] = raw
            for item in document.get("hmac", []):
                audit = AuditKey.from_secret(bytes.fromhex(item["secret"]))
                if item.get("key_id", audit.key_id) != audit.key_id:
                    raise KeyFormatError(f"{path}: key_id {item['key_id']} does not match its secret ({audit.key_id})")
                hmac[audit.key_id] = audit.secret
        except (KeyError, TypeError, ValueError, BernsteinError) as exc:
            if isinstance(exc, KeyFormatError):
                raise
            raise KeyFormatError(f"{path}: malformed key entry: {exc}") from exc
        return cls(ed25519=ed25519, hmac=hmac)

    def write(self, path: Path) -> None:
        _write_new(path, (json.dumps(self.to_json(), indent=2) + "\n").encode(), 0o600 if self.hmac else 0o644, replace=True)


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
