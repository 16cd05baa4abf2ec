"""Quote normalisation: one rule for build and verify, robust to markup, entities and whitespace."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bernstein.producers.research.quotes import (
    charset_of,
    is_html,
    normalise_text,
    page_blocks,
    page_text,
    quote_in_page,
    quote_occurs,
)
from demo.site_server import SITE_DIR

HTML = "text/html; charset=utf-8"
NOTES = (SITE_DIR / "notes.html").read_bytes()
INDEX = (SITE_DIR / "index.html").read_bytes()
MIGRATION = (SITE_DIR / "migration.html").read_bytes()


@pytest.mark.parametrize(
    ("page", "quote"),
    [
        # inline tags inside the sentence
        (NOTES, "The quill fmt formatter is now deterministic across platforms"),
        (INDEX, "the first release of the language with a stable module system"),
        # entities: &amp; &gt; &nbsp; &mdash;
        (NOTES, "verifies checksums & signatures of every downloaded package"),
        (NOTES, "case x if x > 0"),
        (INDEX, "written for Quill 1.x keep compiling unchanged"),
        (MIGRATION, "rewrites the mechanical changes \u2014 imports, renamed built-ins"),
        (MIGRATION, "such as 1 < 2.0, is a compile error in Quill 2.0"),
        # whitespace: line breaks and indentation in the source, extra spaces in the quote
        (INDEX, "The release was shaped by   eighteen months\nof community proposals"),
        (NOTES, "  Code that still uses it fails to compile with error Q2041.  "),
    ],
)
def test_quotes_across_markup_entities_and_whitespace_match(page: bytes, quote: str) -> None:
    assert quote_in_page(quote, page, HTML)


@pytest.mark.parametrize(
    ("page", "quote"),
    [
        (NOTES, "The module system is now unstable"),  # absent
        (NOTES, "the module system is now stable"),  # case-sensitive
        (NOTES, "stable module system return"),  # script text is not page text
        (INDEX, "font-family: Georgia"),  # style text is not page text
        (INDEX, "https://example.invalid/forum"),  # attributes are not page text
        (NOTES, "checksums &amp; signatures"),  # quotes are plain text: no entity decoding
        (NOTES, "<code>quill fmt</code>"),  # ... and no tag stripping
        (NOTES, "   "),  # empty after normalisation never matches
        (NOTES, ""),
    ],
)
def test_quotes_not_in_the_text_do_not_match(page: bytes, quote: str) -> None:
    assert not quote_in_page(quote, page, HTML)


def test_block_elements_separate_words_inline_elements_do_not() -> None:
    page = b"<h1>Title</h1><p>free-<em>threaded</em> build</p><ul><li>one</li><li>two</li></ul>a<br>b"
    assert page_blocks(page, "text/html") == ["Title", "free-threaded build", "one", "two", "a", "b"]
    assert page_text(page, "text/html") == "Title free-threaded build one two a b"


def test_comments_are_not_text() -> None:
    assert "Internal" not in page_text((SITE_DIR / "performance.html").read_bytes(), HTML)


def test_charset_from_content_type() -> None:
    latin = "Caf\u00e9 cr\u00e8me".encode("latin-1")
    assert quote_in_page("Caf\u00e9 cr\u00e8me", latin, "text/plain; charset=ISO-8859-1")
    assert not quote_in_page("Caf\u00e9 cr\u00e8me", latin, "text/plain")  # utf-8 with replacement
    assert charset_of('text/html; charset="UTF-8"') == "utf-8"
    assert charset_of("text/html; charset=no-such-codec") == "utf-8"
    assert charset_of(None) == "utf-8"
    assert page_text(b"abc", "text/plain; charset=rot13") == "abc"  # not a text encoding: utf-8


def test_html_sniffed_only_without_a_declared_type() -> None:
    page = b"  <!DOCTYPE html><p>a &amp; b</p>"
    assert is_html(page, None)
    assert page_text(page, None) == "a & b"
    assert not is_html(page, "text/plain")
    assert page_text(page, "text/plain") == "<!DOCTYPE html><p>a &amp; b</p>"


def test_nfc_makes_composed_and_decomposed_forms_equal() -> None:
    composed = "caf\u00e9 au lait".encode()
    assert quote_in_page("cafe\u0301 au lait", composed, "text/plain")


def test_build_and_verify_use_the_same_function() -> None:
    """The verifier imports exactly these functions; pin that so nobody forks the rule."""
    import bernstein.verifier.checks.research as check

    assert getattr(check, "page_text") is page_text  # noqa: B009 - not re-exported on purpose
    assert getattr(check, "quote_occurs") is quote_occurs  # noqa: B009


@given(st.text())
def test_normalise_text_is_idempotent(text: str) -> None:
    once = normalise_text(text)
    assert normalise_text(once) == once


@given(st.text())
def test_page_text_is_already_normalised(text: str) -> None:
    for content_type in ("text/plain", "text/html"):
        out = page_text(text.encode("utf-8", "surrogatepass"), content_type)
        assert normalise_text(out) == out


_TEXT = st.text(alphabet=st.characters(codec="utf-8"))


@given(_TEXT, _TEXT, _TEXT)
def test_a_quote_inserted_in_a_page_is_found(quote: str, before: str, after: str) -> None:
    assume(normalise_text(quote))
    page = f"{before} {quote} {after}".encode()
    assert quote_in_page(quote, page, "text/plain")
