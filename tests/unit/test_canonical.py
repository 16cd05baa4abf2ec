"""The one module that produces hashed bytes: RFC 8785, digests, evidence sets, chain steps."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from bernstein.schemas import canonical
from bernstein.schemas.canonical import canonical_json, json_nesting_exceeds
from bernstein.schemas.errors import CanonicalizationError, MalformedDigest

VECTORS = Path(__file__).resolve().parents[2] / "schemas" / "vectors"

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1),
    st.text(),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(st.text(max_size=8), children, max_size=5)),
    max_leaves=25,
)
digests = st.binary(max_size=16).map(canonical.sha256_digest)


def test_canonical_vectors_reproduce() -> None:
    document = json.loads((VECTORS / "canonical_json.json").read_text(encoding="utf-8"))
    assert document["rule"] == "rfc8785"
    assert len(document["cases"]) >= 9
    for case in document["cases"]:
        data = canonical.canonical_json(case["input"])
        assert data.hex() == case["canonical_hex"], case["name"]
        assert canonical.sha256_digest(data) == case["sha256"], case["name"]
        # The vectors agree with the pure reference encoder, not just with ourselves.
        assert rfc8785.dumps(case["input"]) == data, case["name"]


def test_supplementary_plane_keys_sort_by_utf16_code_units() -> None:
    # U+1F600 is D83D DE00 in UTF-16, which sorts before U+E000; code-point order would disagree.
    data = canonical.canonical_json({"\U0001f600": 1, "\ue000": 2})
    assert data == '{"\U0001f600":1,"\ue000":2}'.encode()


@pytest.mark.parametrize("value", [1.5, 1.0, float("nan"), float("inf"), {"a": [0.1]}, 2**53, -(2**53), {1: "x"}, object()])
def test_values_without_a_canonical_form_are_refused(value: object) -> None:
    with pytest.raises(CanonicalizationError):
        canonical.canonical_json(value)


@given(json_values)
@settings(max_examples=400, deadline=None)
def test_fast_path_is_byte_identical_to_the_reference_encoder(value: object) -> None:
    assert canonical.canonical_json(value) == rfc8785.dumps(value)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_canonical_json_refuses_every_float(value: float) -> None:
    with pytest.raises(CanonicalizationError):
        canonical.canonical_json({"x": value})


@given(st.lists(digests, max_size=12), st.randoms())
def test_evidence_set_hash_ignores_order_and_duplicates(members: list[str], rnd: object) -> None:
    shuffled = list(members) + list(members[: len(members) // 2])
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert canonical.evidence_set_hash(shuffled) == canonical.evidence_set_hash(members)
    expected = canonical.sha256_digest(canonical.canonical_json(sorted(set(members))))
    assert canonical.evidence_set_hash(members) == expected


def test_evidence_set_hash_changes_with_content() -> None:
    a, b = canonical.sha256_digest(b"a"), canonical.sha256_digest(b"b")
    assert canonical.evidence_set_hash([a]) != canonical.evidence_set_hash([a, b])


@pytest.mark.parametrize(
    "bad",
    ["", "sha256:", "sha256:" + "A" * 64, "sha256:" + "0" * 63, "sha256:" + "0" * 65, "sha1:" + "0" * 40, "0" * 64, None, 7],
)
def test_malformed_digests_are_typed_errors(bad: object) -> None:
    assert not canonical.is_digest(bad)
    with pytest.raises(MalformedDigest) as info:
        canonical.require_digest(bad, field="artifact_hash")
    assert "artifact_hash" in str(info.value)
    with pytest.raises(MalformedDigest):
        canonical.evidence_set_hash([canonical.sha256_digest(b"ok"), bad])  # type: ignore[list-item]


def test_pae_is_unambiguous() -> None:
    assert canonical.pae("t", b"ab") != canonical.pae("ta", b"b")
    assert canonical.pae("bernstein/example/v1", b"hello") == b"DSSEv1 20 bernstein/example/v1 5 hello"


def test_chain_steps_are_domain_separated() -> None:
    payload = b"same bytes"
    assert canonical.journal_entry_hash(payload) != canonical.sha256_digest(payload)
    assert canonical.journal_genesis("run-a") != canonical.journal_genesis("run-b")
    key = b"k" * 32
    assert canonical.audit_genesis(key, 0) != canonical.audit_genesis(key, 1)
    assert canonical.audit_mac(key, payload) != canonical.audit_mac(b"j" * 32, payload)
    assert canonical.is_mac(canonical.audit_mac(key, payload))


def test_typed_value_digest_is_keyed_and_hides_the_value() -> None:
    digest = canonical.typed_value_digest(b"k" * 32, "hunter2")
    assert "hunter2" not in digest
    assert digest != canonical.typed_value_digest(b"j" * 32, "hunter2")
    assert digest != canonical.sha256_digest(b"hunter2")


# -- one depth limit and one key rule for both encoder paths (review addendum A1-A3) --


def _nest(depth: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("key", ["ascii", "\U0001f600"], ids=["fast-path", "fallback"])
def test_both_paths_accept_64_levels_and_refuse_65_with_a_typed_error(key: str) -> None:
    assert canonical_json({key: _nest(63)}) == b'{"' + key.encode() + b'":' + b"[" * 63 + b"1" + b"]" * 63 + b"}"
    with pytest.raises(CanonicalizationError, match="deeper than 64 levels"):
        canonical_json({key: _nest(64)})
    with pytest.raises(CanonicalizationError, match="deeper than 64 levels"):
        canonical_json({key: _nest(5000)})  # formerly RecursionError on the fallback


def test_a_cyclic_value_is_refused_instead_of_looping() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(CanonicalizationError, match="or is cyclic"):
        canonical_json(cyclic)
    loop: dict[str, object] = {}
    loop["self"] = loop
    with pytest.raises(CanonicalizationError):
        canonical_json({"\U0001f600": loop})


class _Key(StrEnum):
    A = "a"


@pytest.mark.parametrize("extra", [{}, {"\U0001f600": 1}], ids=["fast-path", "fallback"])
def test_str_subclass_keys_are_refused_on_both_paths(extra: dict[str, int]) -> None:
    with pytest.raises(CanonicalizationError, match="exactly str"):
        canonical_json({_Key.A: 1, **extra})
    assert canonical_json({"a": _Key.A, **extra}).startswith(b'{"a":"a"')  # a str subclass value is its text


@pytest.mark.parametrize(
    ("text", "exceeds"),
    [
        (b"[" * 64 + b"]" * 64, False),
        (b"[" * 65 + b"]" * 65, True),
        (b'{"a":' * 65 + b"1" + b"}" * 65, True),
        (b'["' + b"[" * 1000 + b'"]', False),  # brackets inside a string do not count
        (b'["\\"' + b"[" * 1000 + b'"]', False),  # nor after an escaped quote
        (b'"' + b"[" * 1000, True),  # an unterminated string is not a string
        (b"[" * 1000, True),
    ],
)
def test_json_nesting_exceeds_counts_only_structure(text: bytes, exceeds: bool) -> None:
    assert json_nesting_exceeds(text) is exceeds


def test_a_log_origin_parses_back_into_what_made_it_and_nothing_else_parses() -> None:
    from bernstein.schemas.canonical import parse_tlog_origin, tlog_origin

    origin = tlog_origin("journal.example/eu", "bernstein.activity.submissions", 12, 3)
    assert parse_tlog_origin(origin) == ("journal.example/eu", "bernstein.activity.submissions", 12, 3)
    for other in (
        "t/0/e1",
        "/t/0/e1",
        "n//0/e1",
        "n/t/00/e1",
        "n/t/0/1",
        "n/t/0/e",
        "n/t/0/e01",
        "n/t/\u0661/e1",
        "n/t/0/e\u00b2",
    ):
        assert parse_tlog_origin(other) is None, other
