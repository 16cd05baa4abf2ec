"""The edge to the archive libraries (the ``archive`` extra): warcio writes and reads WARC records, py-wacz packages
and validates WACZ files.

Nothing else in the project imports them. They are imported on first use, with their import-time warnings silenced
(``surt``, which py-wacz's indexer uses, has invalid escapes that Python reports as ``SyntaxWarning`` when it
compiles them), so a base install that never asks for an archive needs neither. Without them, asking for one is
``ArchiveExtraMissing``, naming the extra. Their exceptions are translated into this module's typed errors by the
modules that call them (``warc``, ``package``, ``check``); none escapes to the command line.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType
from typing import ClassVar, Final

from bernstein.schemas.errors import BernsteinError, MalformedInput

ARCHIVE_EXTRA: Final = "bernstein-journal[archive]"
"""The extra that installs warcio and py-wacz (pinned in pyproject.toml)."""

READER: Final = ("warcio.archiveiterator", "warcio.statusandheaders", "warcio.exceptions")
"""What checking an archive needs (warcio only: py-wacz and its validator's dependencies take seconds to import)."""
WRITER: Final = (*READER, "warcio.warcwriter", "wacz.main")
"""What writing (and validating) one needs."""


class ArchiveError(BernsteinError):
    """A WACZ archive could not be written or read as asked (exit 3: the message says what to fix)."""

    code: ClassVar[str] = "E_ARCHIVE"


class ArchiveExtraMissing(ArchiveError):
    """``--wacz`` was asked for in an install without the ``archive`` extra."""

    code: ClassVar[str] = "E_ARCHIVE_EXTRA_MISSING"

    def __init__(self, missing: str) -> None:
        super().__init__(
            f"WACZ archives need warcio and py-wacz ({missing} is not installed): pip install '{ARCHIVE_EXTRA}' "
            "(see docs/research.md, 'Pages as a web archive')"
        )


class ArchiveUnreadable(ArchiveError, MalformedInput):
    """The file named as a WACZ is not one at all (missing, not a ZIP file): unreadable input, not a verdict."""

    code: ClassVar[str] = "E_ARCHIVE_UNREADABLE"


_loaded: dict[str, ModuleType] = {}


def module(name: str) -> ModuleType:
    """One of the archive libraries' modules (``warcio.warcwriter``, ``wacz.main``, ...), imported once."""
    if name not in _loaded:
        require((name,))
    return _loaded[name]


def require(names: tuple[str, ...] = WRITER) -> None:
    """Import ``names`` now (default: everything an export needs), or raise ``ArchiveExtraMissing`` naming the extra."""
    missing = [name for name in names if name not in _loaded]
    if not missing:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in missing:
            try:
                _loaded[name] = importlib.import_module(name)
            except ModuleNotFoundError as exc:  # the library, or one it needs: the extra is not (wholly) installed
                raise ArchiveExtraMissing((exc.name or name).split(".")[0]) from None
