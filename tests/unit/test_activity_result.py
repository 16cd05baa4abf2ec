"""ActivityResult.build: the seed's contract and its refusals before anything is published."""

from __future__ import annotations

import pytest

from bernstein.producers.activity import ActivityRejected, ActivityResult, ArtifactTooLarge, observe
from bernstein.schemas.canonical import canonical_json, evidence_set_hash, sha256_digest
from bernstein.schemas.records import MAX_INLINE_ARTIFACT_BYTES, ActivityKind, TerminalState


def test_build_computes_both_hashes() -> None:
    pages = [observe("page", "https://a", b"alpha"), observe("page", "https://b", b"beta")]
    result = ActivityResult.build("research", {"claims": []}, pages)
    assert result.kind is ActivityKind.RESEARCH
    assert result.artifact == canonical_json({"claims": []})
    assert result.artifact_hash == sha256_digest(result.artifact)
    assert result.evidence_set_hash == evidence_set_hash([p.content_hash for p in pages])
    assert result.terminal_state is TerminalState.COMPLETED and result.reason_code == "ok"


def test_ref_is_provenance_only() -> None:
    assert observe("page", "https://a", b"x").content_hash == observe("page", "https://elsewhere", b"x").content_hash


def test_bytes_artifacts_are_taken_verbatim() -> None:
    assert ActivityResult.build("coding", b"--- a\n+++ b\n").artifact == b"--- a\n+++ b\n"


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"kind": "poetry"}, "UNKNOWN_KIND"),
        ({"terminal_state": "exploded"}, "UNKNOWN_TERMINAL_STATE"),
        ({"reason_code": "  "}, "EMPTY_REASON_CODE"),
        ({"reason_code": "a\nb"}, "INVALID_REASON_CODE"),
    ],
)
def test_invalid_results_are_refused_with_codes(kwargs: dict[str, str], code: str) -> None:
    args = {"kind": "coding", "artifact": b"x"}
    args.update(kwargs)
    kind = args.pop("kind")
    with pytest.raises(ActivityRejected) as info:
        ActivityResult.build(kind, **args)  # type: ignore[arg-type]
    assert info.value.code == code


def test_oversized_artifact_is_a_typed_error() -> None:
    with pytest.raises(ArtifactTooLarge) as info:
        ActivityResult.build("coding", b"x" * (MAX_INLINE_ARTIFACT_BYTES + 1))
    assert info.value.code == "ARTIFACT_TOO_LARGE"
    assert info.value.evidence == {"size": str(MAX_INLINE_ARTIFACT_BYTES + 1), "limit": str(MAX_INLINE_ARTIFACT_BYTES)}
    assert "inline limit" in str(info.value)
