"""How a quote is matched against a fetched page: one rule, used at build AND verify time.

A raw byte substring on HTML (the public implementation's check) fails on any
quote that crosses inline markup or an entity, and it is only run at verify
time, so a report with a made-up quote is anchored first and caught later.
Here the worker refuses such a report before anything is published, and the
verifier re-runs the exact same function on the reattached bytes.

The rule, version ``bernstein.quote-normalisation/v1`` (written into every
report as ``quote_normalisation``):

1. Decode. The charset comes from the ``Content-Type`` parameter when it
   names a codec Python knows, else UTF-8; undecodable bytes become U+FFFD
   (errors="replace"), a leading BOM is dropped. ``<meta charset>`` is NOT
   consulted.
2. HTML only (media type ``text/html`` or ``application/xhtml+xml``, or no
   content type and the bytes start with ``<!doctype html`` or ``<html``):
   parse with the stdlib ``html.parser``; drop comments, declarations and the
   content of ``script``, ``style`` and ``template``; drop attributes (``alt``
   and ``title`` text is not page text); decode character references once
   (``&amp;`` -> ``&``). Block-level elements (``p``, ``li``, ``h1``-``h6``,
   ``br``, ``td``, ...) end a text block; inline elements (``em``, ``a``,
   ``code``, ...) do not, so ``free-<em>threaded</em>`` reads ``free-threaded``.
   Any other media type is one text, split into blocks at blank lines.
3. Each block: Unicode NFC, every run of whitespace (``str.isspace``,
   including NBSP) collapsed to one space, trimmed; empty blocks dropped.
   The page text is the blocks joined by one space.
4. A quote is normalised by step 3 only (it is plain text, as a reader sees
   it: no entity decoding, no tag stripping). It matches when it is non-empty
   and a substring of the page text. Matching is case-sensitive; quotation
   marks, dashes and ligatures are not folded.

Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

import codecs
import unicodedata
from collections.abc import Sequence
from html.parser import HTMLParser
from typing import Final

NORMALISATION_VERSION: Final = "bernstein.quote-normalisation/v1"

_HTML_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
_SKIP_TAGS: Final = frozenset({"script", "style", "template"})
_BLOCK_TAGS: Final = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "br", "caption", "dd", "details", "dialog",
        "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4",
        "h5", "h6", "head", "header", "hgroup", "hr", "html", "li", "main", "nav", "ol", "option", "p",
        "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "title", "tr", "ul",
    }
)  # fmt: skip


def normalise_text(text: str) -> str:
    """NFC, whitespace runs to one space, trimmed. Idempotent."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def media_type(content_type: str | None) -> str:
    """``text/html; charset=utf-8`` -> ``text/html`` (lower case, "" when absent)."""
    if not content_type:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def charset_of(content_type: str | None) -> str:
    """The codec named by the content type's ``charset`` parameter, else ``utf-8``."""
    if content_type:
        for param in content_type.split(";")[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset":
                label = value.strip().strip("\"'").strip()
                try:
                    return codecs.lookup(label).name
                except (LookupError, ValueError):
                    break
    return "utf-8"


def is_html(content: bytes, content_type: str | None) -> bool:
    """HTML by declared media type, or (no type declared) by the document's first bytes."""
    declared = media_type(content_type)
    if declared:
        return declared in _HTML_TYPES
    head = content[:512].lstrip(b"\xef\xbb\xbf \t\r\n\x0c").lower()
    return head.startswith((b"<!doctype html", b"<html"))


def decode(content: bytes, content_type: str | None) -> str:
    """Step 1: bytes to text, deterministically (never raises)."""
    try:
        text = content.decode(charset_of(content_type), errors="replace")
    except LookupError:  # a registered codec that is not a text encoding (e.g. rot13)
        text = content.decode("utf-8", errors="replace")
    return text[1:] if text.startswith("\ufeff") else text


class _TextExtractor(HTMLParser):
    """Collects visible text into blocks; see the module docstring, step 2."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self._current: list[str] = []
        self._skip_depth = 0

    def _break(self) -> None:
        if self._current:
            self.blocks.append("".join(self._current))
            self._current = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip_depth += 1
        elif tag in _BLOCK_TAGS:
            self._break()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:
            self._break()

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag in _BLOCK_TAGS:
            self._break()

    def handle_data(self, data: str) -> None:
        if not self._skip_depth:
            self._current.append(data)

    def close(self) -> None:
        super().close()
        self._break()


def page_blocks(content: bytes, content_type: str | None) -> list[str]:
    """The page's text blocks (paragraphs, list items, headings), each normalised, none empty."""
    text = decode(content, content_type)
    if is_html(content, content_type):
        parser = _TextExtractor()
        parser.feed(text)
        parser.close()
        raw: Sequence[str] = parser.blocks
    else:
        raw = _split_paragraphs(text)
    return [block for block in (normalise_text(b) for b in raw) if block]


def _split_paragraphs(text: str) -> list[str]:
    blocks: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def page_text(content: bytes, content_type: str | None) -> str:
    """The normalised text a quote is matched against (steps 1-3)."""
    return " ".join(page_blocks(content, content_type))


def quote_occurs(quote: str, text: str) -> bool:
    """Step 4 against an already normalised page text (see ``page_text``)."""
    needle = normalise_text(quote)
    return bool(needle) and needle in text


def quote_in_page(quote: str, content: bytes, content_type: str | None) -> bool:
    """True when ``quote`` occurs in the page bytes under this module's rule."""
    return quote_occurs(quote, page_text(content, content_type))
