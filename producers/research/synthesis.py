"""The synthesis step: the one opaque, stochastic part of a research run.

``synthesise(query, fetched) -> Sequence[ClaimDraft]`` drafts claims and the
spans they quote (a model in production). The worker admits nothing it emits
unless every quoted span occurs in a page the run actually fetched, so the
synthesiser needs no trust.

``extractive_synthesiser`` is what ships: a deterministic extractive
baseline, NOT a model. For each fetched page in plan order it takes the first
``sentences_per_page`` sentences of the page's normalised text blocks that end
in ``.``, ``!`` or ``?`` and are between ``min_chars`` and ``max_chars`` long,
and makes each one a claim quoting itself. It summarises nothing; it exists
so that the pipeline, budgets and verification can run end to end without a
model, and as a floor a real synthesiser must beat.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from bernstein.producers.research.fetch import FetchedPage
from bernstein.producers.research.quotes import page_blocks
from bernstein.schemas.errors import BernsteinError

_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclass(frozen=True, slots=True)
class SpanRef:
    """A span a claim quotes: ``quote`` must occur in the page fetched for ``source_ref``."""

    source_ref: str
    quote: str


@dataclass(frozen=True, slots=True)
class ClaimDraft:
    """A claim and the spans it rests on; an empty ``claim_id`` becomes ``c<position>``."""

    statement: str
    spans: tuple[SpanRef, ...] = ()
    claim_id: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "spans", tuple(self.spans))


class Synthesiser(Protocol):
    def __call__(self, query: str, fetched: Sequence[FetchedPage], /) -> Sequence[ClaimDraft]: ...


class SynthesiserNotFound(BernsteinError):
    """``--synthesiser module:attr`` does not name a callable."""

    code = "SYNTHESISER_NOT_FOUND"


def sentences(block: str) -> list[str]:
    """Split one normalised text block after ``.``/``!``/``?`` followed by whitespace."""
    return [part for part in _SENTENCE_END.split(block) if part]


def make_extractive_synthesiser(
    *, sentences_per_page: int = 2, min_chars: int = 40, max_chars: int = 400
) -> Callable[[str, Sequence[FetchedPage]], list[ClaimDraft]]:
    """A deterministic extractive baseline with these limits (see the module docstring)."""

    def synthesise(query: str, fetched: Sequence[FetchedPage]) -> list[ClaimDraft]:
        drafts: list[ClaimDraft] = []
        for page in fetched:
            taken = 0
            for block in page_blocks(page.content, page.content_type):
                for sentence in sentences(block):
                    if taken >= sentences_per_page:
                        break
                    if min_chars <= len(sentence) <= max_chars and sentence[-1] in ".!?":
                        drafts.append(ClaimDraft(statement=sentence, spans=(SpanRef(page.source_ref, sentence),)))
                        taken += 1
                if taken >= sentences_per_page:
                    break
        return drafts

    return synthesise


extractive_synthesiser: Final = make_extractive_synthesiser()
"""Two sentences of 40-400 characters per page, in plan order."""


def load_synthesiser(spec: str) -> Synthesiser:
    """``extractive`` or ``package.module:attribute`` naming a synthesise callable."""
    if spec == "extractive":
        return extractive_synthesiser
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SynthesiserNotFound(f"synthesiser {spec!r} must be 'extractive' or 'module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SynthesiserNotFound(f"cannot import synthesiser module {module_name!r}: {exc}") from None
    target: object = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise SynthesiserNotFound(f"module {module_name!r} has no attribute {attr!r}")
    if not callable(target):
        raise SynthesiserNotFound(f"{spec!r} is not callable")
    return target
