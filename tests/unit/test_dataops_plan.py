"""The plan projection: byte-identical for the same inputs (any order, duplicates) and steps."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bernstein.producers.dataops import DataActivity, DataOpsPlan
from bernstein.schemas.canonical import canonical_json, plan_document, plan_hash, sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import Ed25519Signer

SIGNER = Ed25519Signer.from_seed(b"\x07" * 32)
STEPS = ["filter status == shipped", "group by region", "sum amount_cents"]
A, B, C = (sha256_digest(x) for x in (b"a", b"b", b"c"))


def _plan_of(tmp_path: Path, contents: list[bytes], steps: list[str]) -> str:
    activity = DataActivity("run-1", "s", store=DirBlobStore(tmp_path / "cas"), signer=SIGNER)
    for number, content in enumerate(contents):
        activity.add_input(f"in-{number}", content)
    return activity.plan(steps)


def test_same_inputs_in_any_order_give_the_same_plan_hash(tmp_path: Path) -> None:
    assert _plan_of(tmp_path, [b"a", b"b", b"c"], STEPS) == _plan_of(tmp_path, [b"c", b"a", b"b"], STEPS)


def test_a_changed_step_or_input_changes_the_plan_hash(tmp_path: Path) -> None:
    base = _plan_of(tmp_path, [b"a", b"b"], STEPS)
    assert _plan_of(tmp_path, [b"a", b"b"], [*STEPS[:2], "sum quantity"]) != base
    assert _plan_of(tmp_path, [b"a", b"B"], STEPS) != base
    assert _plan_of(tmp_path, [b"a"], STEPS) != base


def test_step_order_matters() -> None:
    assert plan_hash([A], ["x", "y"]) != plan_hash([A], ["y", "x"])


def test_the_projection_is_the_documented_canonical_json() -> None:
    plan = DataOpsPlan.derive([B, A, B], ["s1", "s2"])
    low, high = sorted((A, B))
    assert plan.input_hashes == (low, high)
    assert plan.steps == ("s1", "s2")
    expected = b'{"input_hashes":["' + low.encode() + b'","' + high.encode() + b'"],"steps":["s1","s2"]}'
    assert canonical_json(plan_document([B, A, B], ["s1", "s2"])) == expected
    assert plan.plan_hash == sha256_digest(expected)


def test_zero_inputs_and_zero_steps_have_a_hash() -> None:
    assert plan_hash([], []) == sha256_digest(b'{"input_hashes":[],"steps":[]}')


digests = st.binary(max_size=16).map(sha256_digest)


@settings(max_examples=200, deadline=None)
@given(
    hashes=st.lists(digests, max_size=8),
    steps=st.lists(st.text(min_size=1, max_size=20), max_size=5),
    data=st.data(),
)
def test_plan_hash_ignores_input_order_and_duplicates(hashes: list[str], steps: list[str], data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(hashes))
    duplicated = shuffled + data.draw(st.lists(st.sampled_from(hashes), max_size=4)) if hashes else shuffled
    assert plan_hash(duplicated, steps) == plan_hash(hashes, steps)
    assert DataOpsPlan.derive(duplicated, steps) == DataOpsPlan.derive(hashes, steps)


@settings(max_examples=100, deadline=None)
@given(hashes=st.lists(digests, min_size=1, max_size=6, unique=True), extra=digests)
def test_plan_hash_changes_with_a_new_distinct_input(hashes: list[str], extra: str) -> None:
    if extra in hashes:
        return
    assert plan_hash([*hashes, extra], ["s"]) != plan_hash(hashes, ["s"])


def test_malformed_input_hash_is_refused() -> None:
    from bernstein.schemas.errors import MalformedDigest

    with pytest.raises(MalformedDigest):
        plan_hash(["sha256:XYZ"], [])
