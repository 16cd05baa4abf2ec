"""C2SP signed notes, ``tlog-checkpoint`` bodies and ``cosignature/v1``: pure, both signing and verifying.

The formats (https://c2sp.org/signed-note, /tlog-checkpoint, /tlog-cosignature), as
``golang.org/x/mod/sumdb/note`` and ``github.com/transparency-dev/formats`` implement them:

- A **signed note** is UTF-8 text without ASCII control characters other than newline: the
  note text (ending in a newline), a blank line, then one or more signature lines
  ``— <key name> base64(key id (4 bytes, big endian) || signature)``. The text ends at the last
  blank line. Key names are non-empty, without Unicode spaces or ``+``.
- **Key ids** are ``SHA-256(name || 0x0A || type || public key)[:4]``; type ``0x01`` is a plain
  Ed25519 signature over the note text, ``0x04`` a timestamped Ed25519 cosignature.
- A **verifier key** (vkey) is ``<name>+<8 lowercase hex key id>+base64(type || public key)``.
- A **checkpoint** body is the origin line, the tree size in decimal (no leading zeros), the
  base64 root hash (32 bytes), then optional non-empty extension lines.
- A **cosignature/v1** signs ``cosignature/v1\\ntime <seconds>\\n`` followed by the checkpoint
  body; its signature line's payload is ``key id || timestamp (u64 big endian) || signature``.

Verification (``open_note``) follows the signed-note rules: signatures whose (name, key id) no
known verifier has are ignored (kept in ``OpenedNote.unknown``), a known key's signature that
fails rejects the whole note (``InvalidNoteSignature``), and a note no known key signed is
rejected (``UnverifiedNote``). Repeated lines by one key are checked once. At most
``MAX_SIGNATURES`` signature lines (the Go library's 100; the spec asks for at least 16) and
``MAX_NOTE_BYTES`` bytes are read; more is ``MalformedNote``.

Strictness beyond the Go libraries, on purpose: base64 must be canonical (what Go writes),
vkey key ids lower-case hex, a size-0 checkpoint must carry the empty tree's root, and a vkey
whose public key is weak (small order, or not the canonical encoding of a point of the
prime-order subgroup) is refused, because under the ZIP 215 rule
(``bernstein.schemas.ed25519``) anyone could sign for it. Signatures verify by that rule.

Key material is raw: a 32-byte Ed25519 seed for a ``NoteSigner``, a 32-byte public key for a
``NoteVerifier``. Signing goes through the ``cryptography`` package (Ed25519 is deterministic,
so the same seed and text give the same bytes); a cosignature's timestamp is an argument,
never the clock.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bernstein.schemas.ed25519 import verify_signature, weak_key
from bernstein.schemas.errors import BernsteinError, MalformedInput
from bernstein.schemas.merkle import EMPTY_ROOT, HASH_SIZE, MAX_SIZE

SIG_ED25519: Final = 0x01
"""Signature type of a plain Ed25519 note signature (c2sp.org/signed-note)."""
SIG_COSIGNATURE_V1: Final = 0x04
"""Signature type of a timestamped Ed25519 checkpoint cosignature (c2sp.org/tlog-cosignature)."""
SIGNATURE_TYPES: Final = frozenset({SIG_ED25519, SIG_COSIGNATURE_V1})

MAX_SIGNATURES: Final = 100
"""Signature lines read from one note, as ``golang.org/x/mod/sumdb/note`` (the spec: at least 16)."""
MAX_NOTE_BYTES: Final = 1 << 20
"""Bytes read from one note: room for 100 post-quantum signatures over a large text."""
MAX_TIMESTAMP: Final = 2**63 - 1
"""The largest cosignature timestamp the spec allows."""

COSIGNATURE_V1_HEADER: Final = b"cosignature/v1\n"
_SIGNATURE_PREFIX: Final = "— "
_ED25519_SIGNATURE_SIZE: Final = 64
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_HEX_KEY_ID: Final = re.compile(r"[0-9a-f]{8}", re.ASCII)


class MalformedNote(MalformedInput):
    """Bytes that are not a signed note (encoding, layout, a signature line, too many or too large)."""

    code = "E_MALFORMED_NOTE"


class MalformedVerifierKey(MalformedNote):
    """A vkey (or key material) that is not ``name+keyid+base64(type||key)`` for a supported, sound key."""

    code = "E_MALFORMED_VKEY"


class MalformedCheckpoint(MalformedNote):
    """A note text that is not a ``tlog-checkpoint`` body."""

    code = "E_MALFORMED_CHECKPOINT"


class NoteRejected(BernsteinError):
    """A well-formed note the known verifiers do not accept."""

    code = "E_NOTE_REJECTED"


class InvalidNoteSignature(NoteRejected):
    """A signature by a known key (name and key id match) that does not verify: the whole note is rejected."""

    code = "E_NOTE_BAD_SIGNATURE"

    def __init__(self, name: str, key_id: int) -> None:
        super().__init__(f"the signature of known key {name}+{key_id:08x} does not verify: the note is rejected")
        self.name = name
        self.key_id = key_id


class UnverifiedNote(NoteRejected):
    """A note that no known key signed (every signature line is by an unknown key)."""

    code = "E_NOTE_UNVERIFIED"

    def __init__(self, note: Note) -> None:
        super().__init__(f"no known key signed this note ({len(note.signatures)} signatures by unknown keys)")
        self.note = note


class AmbiguousVerifiers(NoteRejected):
    """Two different verifiers share a key name and key id: the set of known keys is unusable."""

    code = "E_NOTE_AMBIGUOUS_VERIFIERS"


# --------------------------------------------------------------------------
# Names, key ids, base64
# --------------------------------------------------------------------------


def is_valid_key_name(name: object) -> bool:
    """Non-empty text without Unicode spaces, ``+`` or control characters (c2sp.org/signed-note)."""
    return (
        isinstance(name, str)
        and name != ""
        and "+" not in name
        and not any(ch.isspace() or ord(ch) < 0x20 or 0xD800 <= ord(ch) <= 0xDFFF for ch in name)
    )


def key_id(name: str, sig_type: int, public_key: bytes) -> int:
    """``SHA-256(name || 0x0A || type || public key)[:4]`` as a big-endian integer."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([sig_type]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode_canonical(text: str, error: type[MalformedInput], what: str) -> bytes:
    """Standard base64 with padding, canonical only (re-encoding gives the same text); ``error`` names ``what``
    otherwise. The one decoder of the C2SP text formats' base64: notes, checkpoints, tlog-proofs, rewriting proofs."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise error(f"{what} is not base64") from exc
    if _b64encode(data) != text:
        raise error(f"{what} is not canonical base64")
    return data


def _require_text(text: object, what: str, error: type[MalformedNote]) -> str:
    """UTF-8-clean text (a ``str`` without surrogates) with no control characters but newline."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{what} is not valid UTF-8") from exc
    if not isinstance(text, str):
        raise error(f"{what} is text or UTF-8 bytes, got {type(text).__name__}")
    for ch in text:
        code = ord(ch)
        if (code < 0x20 and ch != "\n") or 0xD800 <= code <= 0xDFFF:
            raise error(f"{what} holds a control character (U+{code:04X}); only newline is allowed")
    return text


# --------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NoteVerifier:
    """A known key: name, signature type (``SIG_ED25519`` or ``SIG_COSIGNATURE_V1``) and raw public key."""

    name: str
    sig_type: int
    public_key: bytes

    def __post_init__(self) -> None:
        if not is_valid_key_name(self.name):
            raise MalformedVerifierKey(f"key name {self.name!r} is empty or holds a space, '+' or a control character")
        if self.sig_type not in SIGNATURE_TYPES:
            raise MalformedVerifierKey(f"signature type {self.sig_type!r} is not supported (0x01 Ed25519, 0x04 cosignature/v1)")
        if type(self.public_key) is not bytes or len(self.public_key) != 32:
            raise MalformedVerifierKey("an Ed25519 public key has 32 bytes")
        reason = weak_key(self.public_key)
        if reason is not None:
            raise MalformedVerifierKey(f"the public key of {self.name} {reason}")

    @property
    def key_id(self) -> int:
        return key_id(self.name, self.sig_type, self.public_key)

    @property
    def vkey(self) -> str:
        """``<name>+<hex key id>+base64(type || public key)``."""
        return f"{self.name}+{self.key_id:08x}+{_b64encode(bytes([self.sig_type]) + self.public_key)}"

    @classmethod
    def from_vkey(cls, vkey: str) -> NoteVerifier:
        """Parse a vkey; raises ``MalformedVerifierKey`` unless it is well formed and its key id matches."""
        if not isinstance(vkey, str):
            raise MalformedVerifierKey(f"a vkey is text, got {type(vkey).__name__}")
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise MalformedVerifierKey("a vkey is <name>+<key id>+<base64 key>")
        name, hex_id, key64 = parts
        if _HEX_KEY_ID.fullmatch(hex_id) is None:
            raise MalformedVerifierKey(f"a vkey's key id is 8 lowercase hex digits, got {hex_id[:16]!r}")
        raw = b64decode_canonical(key64, MalformedVerifierKey, "a vkey's key")
        if len(raw) != 33:
            raise MalformedVerifierKey(f"a vkey's key is a type byte and a 32-byte Ed25519 key, got {len(raw)} bytes")
        verifier = cls(name, raw[0], raw[1:])
        if verifier.key_id != int(hex_id, 16):
            raise MalformedVerifierKey(f"the vkey of {name} names key id {hex_id}, its key has {verifier.key_id:08x}")
        return verifier

    def verify(self, text: bytes, signature: bytes) -> bool:
        """True when ``signature`` (a signature line's bytes after the key id) is this key's over ``text``."""
        if self.sig_type == SIG_ED25519:
            return len(signature) == _ED25519_SIGNATURE_SIZE and verify_signature(self.public_key, signature, text)
        if len(signature) != 8 + _ED25519_SIGNATURE_SIZE:
            return False
        timestamp = int.from_bytes(signature[:8], "big")
        if timestamp > MAX_TIMESTAMP:
            return False
        try:
            parse_checkpoint(text)
        except MalformedCheckpoint:
            return False
        return verify_signature(self.public_key, signature[8:], cosignature_message(text, timestamp))


@dataclass(frozen=True, slots=True)
class NoteSigner:
    """A signing key: name, signature type and the raw 32-byte Ed25519 seed (never shown in ``repr``)."""

    name: str
    sig_type: int
    seed: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if type(self.seed) is not bytes or len(self.seed) != 32:
            raise MalformedVerifierKey("an Ed25519 seed has 32 bytes")
        NoteVerifier(self.name, self.sig_type, self.public_key)  # the name and type checks a verifier makes

    @property
    def public_key(self) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).public_key().public_bytes_raw()

    @property
    def verifier(self) -> NoteVerifier:
        return NoteVerifier(self.name, self.sig_type, self.public_key)

    @property
    def key_id(self) -> int:
        return key_id(self.name, self.sig_type, self.public_key)

    def sign(self, text: str | bytes, *, timestamp: int | None = None) -> Signature:
        """This key's signature over a note text; a cosignature needs ``timestamp`` (seconds), a plain one refuses it.

        A cosignature's text must be a checkpoint body (``MalformedCheckpoint`` otherwise)."""
        body = _require_text(text, "a note text", MalformedNote)
        if not body.endswith("\n"):
            raise MalformedNote("a note text ends with a newline")
        data = body.encode("utf-8")
        key = Ed25519PrivateKey.from_private_bytes(self.seed)
        if self.sig_type == SIG_ED25519:
            if timestamp is not None:
                raise MalformedNote("a plain Ed25519 note signature carries no timestamp")
            return Signature(self.name, self.key_id, key.sign(data))
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_TIMESTAMP:
            raise MalformedNote(f"a cosignature's timestamp is whole seconds in [0, 2**63), got {timestamp!r}")
        parse_checkpoint(data)
        stamp = timestamp.to_bytes(8, "big")
        return Signature(self.name, self.key_id, stamp + key.sign(cosignature_message(data, timestamp)))


# --------------------------------------------------------------------------
# Notes
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Signature:
    """One signature line: the key name, the key id and the signature bytes after the key id."""

    name: str
    key_id: int
    signature: bytes

    def line(self) -> str:
        """``— <name> base64(key id || signature)`` and a newline."""
        return f"{_SIGNATURE_PREFIX}{self.name} {_b64encode(self.key_id.to_bytes(4, 'big') + self.signature)}\n"


@dataclass(frozen=True, slots=True)
class Note:
    """A note text (ending in a newline) and its signature lines, in order."""

    text: str
    signatures: tuple[Signature, ...]

    def encode(self) -> bytes:
        """The note's bytes: text, blank line, signature lines. Refuses what ``parse_note`` would."""
        text = _require_text(self.text, "a note text", MalformedNote)
        if not text.endswith("\n"):
            raise MalformedNote("a note text ends with a newline")
        if not self.signatures:
            raise MalformedNote("a signed note has at least one signature")
        for sig in self.signatures:
            if not is_valid_key_name(sig.name) or not 0 <= sig.key_id < 2**32 or not sig.signature:
                raise MalformedNote(f"signature by {sig.name!r} is not a valid signature line")
        data = (text + "\n" + "".join(sig.line() for sig in self.signatures)).encode("utf-8")
        if len(data) > MAX_NOTE_BYTES or len(self.signatures) > MAX_SIGNATURES:
            raise MalformedNote(f"a note has at most {MAX_SIGNATURES} signatures and {MAX_NOTE_BYTES} bytes")
        return data


@dataclass(frozen=True, slots=True)
class OpenedNote:
    """A note whose known signatures all verified: the text, the verified ones and those by unknown keys."""

    text: str
    verified: tuple[Signature, ...]
    unknown: tuple[Signature, ...]

    def signed_by(self, verifier: NoteVerifier) -> Signature | None:
        """The verified signature of ``verifier``'s key, if any."""
        want = (verifier.name, verifier.key_id)
        return next((sig for sig in self.verified if (sig.name, sig.key_id) == want), None)


def parse_note(data: bytes) -> Note:
    """Split a signed note into its text and signature lines (syntax only: nothing is verified).

    Raises ``MalformedNote`` for anything the signed-note format does not allow."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedNote(f"a note is bytes, got {type(data).__name__}")
    if len(data) > MAX_NOTE_BYTES:
        raise MalformedNote(f"a note has at most {MAX_NOTE_BYTES} bytes, got {len(data)}")
    message = _require_text(data, "a note", MalformedNote)
    split = message.rfind("\n\n")
    if split < 0:
        raise MalformedNote("a note has no blank line before its signatures")
    text, block = message[: split + 1], message[split + 2 :]
    if not block or not block.endswith("\n"):
        raise MalformedNote("a note ends with signature lines, each ending in a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNote(f"a note has at most {MAX_SIGNATURES} signatures, got {len(lines)}")
    return Note(text, tuple(_parse_signature_line(line) for line in lines))


def _parse_signature_line(line: str) -> Signature:
    if not line.startswith(_SIGNATURE_PREFIX):
        raise MalformedNote("a signature line starts with an em dash and a space")
    name, space, b64 = line[len(_SIGNATURE_PREFIX) :].partition(" ")
    if not space or not is_valid_key_name(name):
        raise MalformedNote("a signature line is '— <key name> <base64 signature>'")
    raw = b64decode_canonical(b64, MalformedNote, f"the signature of {name}")
    if len(raw) < 5:
        raise MalformedNote(f"the signature of {name} is a 4-byte key id and at least one byte")
    return Signature(name, int.from_bytes(raw[:4], "big"), raw[4:])


def open_note(data: bytes, verifiers: Iterable[NoteVerifier]) -> OpenedNote:
    """Parse a signed note and check it against the known verifiers (c2sp.org/signed-note).

    Signatures by unknown (name, key id) pairs are ignored; every signature by a known key must
    verify (``InvalidNoteSignature`` otherwise) and at least one must be present
    (``UnverifiedNote`` otherwise). ``MalformedNote`` for bytes that are not a note,
    ``AmbiguousVerifiers`` when two different known keys share a name and key id."""
    known: dict[tuple[str, int], NoteVerifier] = {}
    for verifier in verifiers:
        slot = (verifier.name, verifier.key_id)
        if known.setdefault(slot, verifier) != verifier:
            raise AmbiguousVerifiers(f"two different keys are named {verifier.name}+{verifier.key_id:08x}")
    note = parse_note(data)
    text = note.text.encode("utf-8")
    verified: list[Signature] = []
    unknown: list[Signature] = []
    seen: set[tuple[str, int]] = set()
    for sig in note.signatures:
        slot = (sig.name, sig.key_id)
        match = known.get(slot)
        if match is None:
            if sig not in unknown:
                unknown.append(sig)
            continue
        if slot in seen:  # a key's first line is the one checked, as in the Go library
            continue
        seen.add(slot)
        if not match.verify(text, sig.signature):
            raise InvalidNoteSignature(sig.name, sig.key_id)
        verified.append(sig)
    if not verified:
        raise UnverifiedNote(note)
    return OpenedNote(note.text, tuple(verified), tuple(unknown))


def sign_note(text: str | bytes, signers: Iterable[NoteSigner], *, timestamp: int | None = None) -> bytes:
    """A signed note of ``text`` by each signer in order (cosigners use ``timestamp``; plain signers must not get one)."""
    body = _require_text(text, "a note text", MalformedNote)
    signatures = tuple(
        signer.sign(body, timestamp=timestamp if signer.sig_type == SIG_COSIGNATURE_V1 else None) for signer in signers
    )
    return Note(body, signatures).encode()


def add_signatures(data: bytes, signatures: Iterable[Signature]) -> bytes:
    """A note with further signature lines after its own (a cosigned checkpoint from a signed one).

    Lines already present by the same (name, key id) are replaced, as ``note.Sign`` does."""
    note = parse_note(data)
    extra = tuple(signatures)
    replaced = {(sig.name, sig.key_id) for sig in extra}
    kept = tuple(sig for sig in note.signatures if (sig.name, sig.key_id) not in replaced)
    return Note(note.text, kept + extra).encode()


# --------------------------------------------------------------------------
# Checkpoints (c2sp.org/tlog-checkpoint) and cosignatures (c2sp.org/tlog-cosignature)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A log's tree head: origin, tree size, RFC 6962 root hash and optional extension lines."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if type(self.origin) is not str:
            raise MalformedCheckpoint(f"a checkpoint origin is text, got {type(self.origin).__name__}")
        _require_text(self.origin, "a checkpoint origin", MalformedCheckpoint)
        if not self.origin or "\n" in self.origin:
            raise MalformedCheckpoint("a checkpoint origin is one non-empty line")
        if type(self.size) is not int or not 0 <= self.size <= MAX_SIZE:
            raise MalformedCheckpoint(f"a checkpoint's tree size is an integer in [0, 2**64), got {self.size!r}")
        if type(self.root_hash) is not bytes or len(self.root_hash) != HASH_SIZE:
            raise MalformedCheckpoint(f"a checkpoint's root hash has {HASH_SIZE} bytes")
        if self.size == 0 and self.root_hash != EMPTY_ROOT:
            raise MalformedCheckpoint("a checkpoint of size 0 carries the empty tree's root, SHA-256 of nothing")
        if type(self.extensions) is not tuple:
            raise MalformedCheckpoint("a checkpoint's extension lines are a tuple of strings")
        for line in self.extensions:
            if type(line) is not str:
                raise MalformedCheckpoint("a checkpoint extension line is text")
            _require_text(line, "a checkpoint extension line", MalformedCheckpoint)
            if not line or "\n" in line:
                raise MalformedCheckpoint("a checkpoint extension line is one non-empty line")

    def body(self) -> bytes:
        """The note text: origin, size, base64 root, extension lines, each ending in a newline."""
        lines = [self.origin, str(self.size), _b64encode(self.root_hash), *self.extensions]
        return "".join(line + "\n" for line in lines).encode("utf-8")


def parse_checkpoint(text: str | bytes) -> Checkpoint:
    """Parse a checkpoint body strictly; ``MalformedCheckpoint`` for anything else.

    At least three lines, each ending in a newline and none empty; a decimal size without
    leading zeros below 2**64; a canonical base64 root of 32 bytes (the empty tree's root at
    size 0)."""
    body = _require_text(text, "a checkpoint", MalformedCheckpoint)
    if not body.endswith("\n"):
        raise MalformedCheckpoint("a checkpoint body ends with a newline")
    lines = body[:-1].split("\n")
    if len(lines) < 3:
        raise MalformedCheckpoint(f"a checkpoint has an origin, a size and a root line, got {len(lines)} lines")
    if any(not line for line in lines):
        raise MalformedCheckpoint("a checkpoint has no empty lines")
    origin, size_text, root_text, *extensions = lines
    if _DECIMAL.fullmatch(size_text) is None or len(size_text) > 20 or int(size_text) > MAX_SIZE:
        raise MalformedCheckpoint(f"a checkpoint's size is a decimal below 2**64 without leading zeros, got {size_text[:24]!r}")
    root_hash = b64decode_canonical(root_text, MalformedCheckpoint, "a checkpoint's root hash")
    return Checkpoint(origin, int(size_text), root_hash, tuple(extensions))


def open_checkpoint(data: bytes, verifiers: Iterable[NoteVerifier]) -> tuple[Checkpoint, OpenedNote]:
    """``open_note`` then ``parse_checkpoint`` of its text: a signed checkpoint the known keys accept.

    Which keys must have signed (the log's, k of n witnesses) is the caller's policy: see
    ``OpenedNote.signed_by``."""
    opened = open_note(data, verifiers)
    return parse_checkpoint(opened.text), opened


def log_checkpoint_note(origin: str, size: int, root_hash: bytes, public_key: bytes, sign: Callable[[bytes], bytes]) -> str:
    """A log's signed checkpoint: the C2SP body signed as a note under the origin's name by an Ed25519 key
    that signs through ``sign`` (the scheduler's seal key: its verifier key follows from the trusted public key)."""
    body = Checkpoint(origin, size, root_hash).body()
    signature = Signature(origin, key_id(origin, SIG_ED25519, public_key), sign(body))
    return Note(body.decode("utf-8"), (signature,)).encode().decode("utf-8")


def log_verifier(origin: str, public_key: bytes) -> NoteVerifier:
    """The note verifier of a log key (``log_checkpoint_note``'s signer) for ``origin``."""
    return NoteVerifier(origin, SIG_ED25519, public_key)


def cosignature_message(checkpoint_body: bytes, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: ``cosignature/v1\\ntime <timestamp>\\n`` then the checkpoint body."""
    return COSIGNATURE_V1_HEADER + b"time %d\n" % timestamp + checkpoint_body


def cosignature_timestamp(signature: Signature) -> int:
    """The timestamp (seconds) a cosignature/v1 signature line carries; ``MalformedNote`` if it has none."""
    if len(signature.signature) != 8 + _ED25519_SIGNATURE_SIZE:
        raise MalformedNote(
            f"a cosignature/v1 is an 8-byte timestamp and a 64-byte signature, got {len(signature.signature)} bytes"
        )
    timestamp = int.from_bytes(signature.signature[:8], "big")
    if timestamp > MAX_TIMESTAMP:
        raise MalformedNote("a cosignature's timestamp is below 2**63")
    return timestamp
