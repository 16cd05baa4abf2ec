"""Re-export of ``bernstein.schemas.documents.quotes``: the quote normalisation's one home.

The rule moved to the document package so that the worker, the scheduler and
the verifier share it; this module keeps the producers' import path working.
"""

from __future__ import annotations

from bernstein.schemas.documents.quotes import (
    NORMALISATION_VERSION,
    charset_of,
    decode,
    is_html,
    media_type,
    normalise_text,
    page_blocks,
    page_text,
    quote_in_page,
    quote_occurs,
)

__all__ = [
    "NORMALISATION_VERSION",
    "charset_of",
    "decode",
    "is_html",
    "media_type",
    "normalise_text",
    "page_blocks",
    "page_text",
    "quote_in_page",
    "quote_occurs",
]
