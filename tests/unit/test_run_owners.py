"""Runs and their owners: a run id in a producer's ``run_prefixes`` takes records only from
that producer and its ``collaborators``; both cores refuse everything else alike (RUN_NOT_OWNED), before the run
is read or changed. Run ids in nobody's prefixes stay open to every registered producer."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from bernstein.consumers.core.model import ProducerRegistry, SchedulerConfig
from bernstein.consumers.manifest import ManifestError, parse_manifest
from bernstein.schemas import codec
from tests.support.cores import NON_ASCII_PRODUCERS, PRODUCERS, Pair, close_record, enc_sub, kinds, make_config
from tests.support.producers import NAMES, encode_signed_close, encode_signed_submission, producer, producer_signer

OWNER = "navigator@test"
HELPER = "coder@test"
STRANGER = "unit@test"
SNOWMAN = NON_ASCII_PRODUCERS[0]


def owned_config() -> SchedulerConfig:
    """The native tests' producers, with OWNER owning run ids that start with "nav-" (HELPER its collaborator) and
    a non-ASCII producer owning "w-" (its name is repr'd through the host)."""
    owners = {
        OWNER: dataclasses.replace(producer(OWNER), run_prefixes=("nav-",), collaborators=frozenset({HELPER})),
        SNOWMAN: dataclasses.replace(producer(SNOWMAN), run_prefixes=("w-",)),
    }
    return dataclasses.replace(
        make_config(), producers=ProducerRegistry.of([owners.get(p.name, p) for p in PRODUCERS.producers.values()])
    )


def stage(run_id: str, stage_id: str, by: str, page: bytes) -> bytes:
    return enc_sub(run_id=run_id, stage_id=stage_id, pages=[page], producer={"id": by, "sdk": "x"})


def close(run_id: str, by: str) -> bytes:
    return encode_signed_close({**close_record(run_id), "producer": {"id": by, "sdk": "x"}})


def refusal(outs: list[Any]) -> dict[str, Any]:
    assert kinds(outs) == [codec.REFUSAL_V2, codec.AUDIT_RECORD_V2]
    return dict(codec.decode(outs[0].value).record)


def test_the_owner_and_its_collaborators_add_to_its_runs_and_nobody_else_touches_them() -> None:
    pair = Pair(owned_config())
    key = b"nav-run-1"
    assert kinds(pair.feed(stage("nav-run-1", "s0", OWNER, b"owner's page"), key=key))[0] == codec.JOURNAL_RECORD
    assert kinds(pair.feed(stage("nav-run-1", "s1", HELPER, b"helper's page"), key=key))[0] == codec.JOURNAL_RECORD
    squat = refusal(pair.feed(stage("nav-run-1", "s2", STRANGER, b"stranger's page"), key=key))
    assert (squat["code"], squat["field"], squat["declared"], squat["recomputed"]) == (
        "RUN_NOT_OWNED",
        "run_id",
        "nav-run-1",
        OWNER,
    )
    assert squat["message"] == (
        f"run 'nav-run-1' belongs to '{OWNER}' (run prefix 'nav-' in the roles manifest); '{STRANGER}' is not one of "
        "its collaborators"
    )
    # a stranger's stage id, close and even a repeated submission id are refused before the run is read
    assert refusal(pair.feed(stage("nav-run-1", "s0", STRANGER, b"owner's page"), key=key))["code"] == "RUN_NOT_OWNED"
    assert refusal(pair.feed(close("nav-run-1", STRANGER), key=key))["code"] == "RUN_NOT_OWNED"
    run = pair.py_state.runs["nav-run-1"]
    assert (run.entry_count, sorted(run.stages), run.closed) == (2, ["s0", "s1"], False)
    # ... nor can the run id be taken before its owner opens it
    assert refusal(pair.feed(close("nav-run-2", STRANGER), key=b"nav-run-2"))["code"] == "RUN_NOT_OWNED"
    assert "nav-run-2" not in pair.py_state.runs
    # the owner and its collaborator close their runs; ids outside every prefix are open to all, as before
    assert kinds(pair.feed(close("nav-run-1", HELPER), key=key))[0] == codec.SEAL_RECORD
    assert kinds(pair.feed(stage("run-9", "s0", STRANGER, b"open run"), key=b"run-9"))[0] == codec.JOURNAL_RECORD
    assert kinds(pair.feed(stage("run-9", "s1", OWNER, b"open run, 2"), key=b"run-9"))[0] == codec.JOURNAL_RECORD
    assert pair.native.fallbacks == 0  # every ownership check is native, byte for byte


def test_a_refusal_names_its_sender_as_proven_or_only_as_claimed_by_both_cores() -> None:
    """Refusal.v2: a stranger's authenticated stage is refused naming the stranger (``authenticated``); a record
    that claims the owner's name under the stranger's key is refused before any trust, the names only claimed."""
    pair = Pair(owned_config())
    key = b"nav-run-1"
    pair.feed(stage("nav-run-1", "s0", OWNER, b"owner's page"), key=key)
    squat = refusal(pair.feed(stage("nav-run-1", "s1", STRANGER, b"a page"), key=key))
    assert (squat["code"], squat["producer"], squat["key_id"], squat["authenticated"]) == (
        "RUN_NOT_OWNED",
        STRANGER,
        producer_signer(STRANGER).key_id,
        True,
    )
    forged = enc_sub(run_id="nav-run-1", stage_id="s1", pages=[b"a page"], producer={"id": OWNER, "sdk": "x"})
    impostor = encode_signed_submission(codec.decode(forged).record, producer_signer(STRANGER))
    posing = refusal(pair.feed(impostor, key=key))
    assert (posing["code"], posing["producer"], posing["key_id"], posing["authenticated"]) == (
        "PRODUCER_MISMATCH",
        OWNER,
        producer_signer(STRANGER).key_id,
        False,
    )
    stray = refusal(pair.feed(close("nav-run-1", STRANGER), key=key))
    assert (stray["code"], stray["producer"], stray["authenticated"]) == ("RUN_NOT_OWNED", STRANGER, True)


def test_an_owner_with_a_non_ascii_name_is_named_alike() -> None:
    pair = Pair(owned_config())
    record = refusal(pair.feed(stage("w-1", "s0", STRANGER, b"page"), key=b"w-1"))
    assert record["message"].startswith(f"run 'w-1' belongs to {SNOWMAN!r} (run prefix 'w-' in the roles manifest)")
    assert kinds(pair.feed(stage("w-1", "s0", SNOWMAN, b"page"), key=b"w-1"))[0] == codec.JOURNAL_RECORD


MANIFEST_HEAD = '[[roles]]\nrole = "developer"\n'


def entry(name: str, extra: str = "") -> str:
    key = producer_signer(name).public_key_raw.hex()
    return f'\n[[producers]]\nname = "{name}"\nroles = ["developer"]\n{extra}  [[producers.keys]]\n  public_key = "{key}"\n'


def test_the_manifest_reads_run_prefixes_and_collaborators() -> None:
    text = MANIFEST_HEAD + entry(OWNER, f'run_prefixes = ["nav-", "browse."]\ncollaborators = ["{HELPER}"]\n') + entry(HELPER)
    manifest = parse_manifest(text, source="m.toml")
    owner = manifest.producers.producers[OWNER]
    assert (owner.run_prefixes, owner.collaborators) == (("nav-", "browse."), frozenset({HELPER}))
    assert manifest.producers.run_owner("browse.1") == (owner, "browse.")
    assert manifest.producers.run_owner("run-1") is None


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ('run_prefixes = ["nav"]\n', "run prefix 'nav-' of 'navigator@test' starts with 'nav' of 'coder@test'"),
        ('run_prefixes = ["nav-x"]\n', "run prefix 'nav-x' of 'coder@test' starts with 'nav-' of 'navigator@test'"),
        ('run_prefixes = ["bad prefix"]\n', "run prefix 'bad prefix' must be the start of a valid run id"),
        ('collaborators = ["ghost@test"]\n', "collaborator 'ghost@test' of 'coder@test' is not a declared producer"),
    ],
)
def test_overlapping_prefixes_and_unknown_collaborators_are_refused_by_name(extra: str, said: str) -> None:
    text = MANIFEST_HEAD + entry(OWNER, 'run_prefixes = ["nav-"]\n') + entry(HELPER, extra)
    with pytest.raises(ManifestError) as refused:
        parse_manifest(text, source="m.toml")
    assert said in str(refused.value)


def test_the_test_identities_own_no_runs() -> None:
    """Every other suite's producers keep the open behaviour: no test identity has a run prefix."""
    assert all(not producer(name).run_prefixes for name in NAMES)
