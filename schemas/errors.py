"""The root of every error this project raises on purpose.

Each error carries a stable machine-readable ``code`` (never reworded between
versions) and a human message that says what to do next. Foreign exceptions
(Kafka, S3, Avro, cryptography) are translated into one of these at the edge
of the module that talks to the foreign library; callers never see them.

Tree::

    BernsteinError
    ├── MalformedInput              bytes or documents that cannot be parsed
    │   ├── CanonicalizationError   a value that has no RFC 8785 form (floats, ...)
    │   ├── MalformedDigest         not ``sha256:<64 lowercase hex>``
    │   └── DecodeError             wire bytes that are not our Avro (codec.py)
    │       ├── NotSingleObjectEncoded
    │       ├── UnknownFingerprint
    │       └── TruncatedRecord
    ├── SubstrateError              CAS, keys, Kafka (substrate/)
    └── ...                         producers/, consumers/, verifier/ add theirs
"""

from __future__ import annotations

from typing import ClassVar


class BernsteinError(Exception):
    """Base class: a deliberate, typed failure with a stable ``code``."""

    code: ClassVar[str] = "E_BERNSTEIN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class MalformedInput(BernsteinError):
    """Input that cannot be parsed into the shape the contract requires."""

    code = "E_MALFORMED_INPUT"


class CanonicalizationError(MalformedInput):
    """A value that RFC 8785 canonical JSON cannot represent exactly."""

    code = "E_CANONICALIZATION"


class MalformedDigest(MalformedInput):
    """A digest string that is not ``sha256:`` followed by 64 lowercase hex digits."""

    code = "E_MALFORMED_DIGEST"

    def __init__(self, value: object, *, field: str = "digest") -> None:
        shown = repr(value) if not isinstance(value, str) or len(value) <= 80 else repr(value[:77] + "...")
        super().__init__(f"{field} is not a digest of the form 'sha256:<64 lowercase hex>': {shown}")
        self.value = value
        self.field = field
