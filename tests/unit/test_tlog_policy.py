"""Witness policies in the C2SP tlog-policy syntax: the spec's example quorum, and every malformed line named."""

from __future__ import annotations

import pytest

from bernstein.schemas.notes import SIG_COSIGNATURE_V1, SIG_ED25519, NoteSigner, open_note, sign_note
from bernstein.schemas.tlog_policy import MalformedPolicy, parse_policy

WITNESSES = {
    name: NoteSigner(f"{name}.example", SIG_COSIGNATURE_V1, bytes([i + 1]) * 32)
    for i, name in enumerate(["X1", "X2", "X3", "Y1", "Y2", "Y3"])
}
LOG = NoteSigner("bernstein/t.submissions/0/e1", SIG_ED25519, b"\x40" * 32)
CHECKPOINT = f"{LOG.name}\n3\n{'A' * 43}=\n"


def spec_example() -> str:
    lines = [f"log {LOG.verifier.vkey}", ""]
    lines += [f"witness {n} {WITNESSES[n].verifier.vkey}" for n in ("X1", "X2", "X3")]
    lines += ["group X-witnesses 2 X1 X2 X3", ""]
    lines += [f"witness {n} {WITNESSES[n].verifier.vkey} https://{n}.example/" for n in ("Y1", "Y2", "Y3")]
    lines += [
        "group Y-witnesses any Y1 Y2 Y3",
        "",
        "\t# two organisations",
        "group X-and-Y all X-witnesses Y-witnesses",
        "quorum X-and-Y",
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("cosigners", "met"),
    [
        ((), False),
        (("X1", "X2", "Y3"), True),
        (("X1", "X2"), False),
        (("X1", "Y1", "Y2", "Y3"), False),
        (("X1", "X2", "X3", "Y1", "Y2", "Y3"), True),
        (("X3", "X1", "Y2"), True),
    ],
)
def test_the_spec_example_needs_two_x_witnesses_and_one_y_witness(cosigners: tuple[str, ...], met: bool) -> None:
    policy = parse_policy(spec_example())
    note = sign_note(CHECKPOINT, [LOG, *(WITNESSES[n] for n in cosigners)], timestamp=1_700_000_000)
    opened = open_note(note, [LOG.verifier, *(w.verifier for w in WITNESSES.values())])
    assert policy.witnessed_by(opened) == frozenset(cosigners)
    assert policy.satisfied(policy.witnessed_by(opened)) is met
    assert policy.describe() == "2 of (2 of (X1, X2, X3), 1 of (Y1, Y2, Y3))"
    assert [v.vkey for v in policy.logs] == [LOG.verifier.vkey]


def test_quorum_none_and_a_single_witness() -> None:
    assert parse_policy("quorum none\n").satisfied(frozenset())
    one = parse_policy(f"witness W {WITNESSES['X1'].verifier.vkey}\nquorum W\n")
    assert not one.satisfied(frozenset()) and one.satisfied(frozenset({"W"}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "exactly one quorum line"),
        ("quorum none\nquorum none\n", "line 2: a policy has exactly one quorum line"),
        ("quorum W\n", "line 1: the quorum 'W' is not a witness or group defined above"),
        ("group G any W\nquorum G\n", "line 1: group member 'W' is not a witness or group defined above"),
        (
            f"witness W {WITNESSES['X1'].verifier.vkey}\ngroup G 2 W\nquorum G\n",
            "threshold is all, any or a decimal k with 1 <= k <= 1",
        ),
        (f"witness W {WITNESSES['X1'].verifier.vkey}\ngroup G 01 W\nquorum G\n", "got '01'"),
        (f"witness W {WITNESSES['X1'].verifier.vkey}\ngroup G any W W\nquorum G\n", "each member once"),
        (
            f"witness W {WITNESSES['X1'].verifier.vkey}\nwitness W {WITNESSES['X2'].verifier.vkey}\n",
            "line 2: the name 'W' is taken",
        ),
        (
            f"witness A {WITNESSES['X1'].verifier.vkey}\nwitness B {WITNESSES['X1'].verifier.vkey}\n",
            "line 2: a public key is listed twice",
        ),
        (f"witness none {WITNESSES['X1'].verifier.vkey}\n", "the name 'none' is taken"),
        (f"witness W {LOG.verifier.vkey}\nquorum W\n", "is not a cosignature/v1 key (type 0x04)"),
        (f"log {WITNESSES['X1'].verifier.vkey}\nquorum none\n", "is not an Ed25519 log key (type 0x01)"),
        ("log nope+00000000+AAAA\nquorum none\n", "line 1: not a verifier key"),
        ("witnesses W x\n", "unknown keyword 'witnesses'"),
        ("quorum none\r\n", "found byte 0x0d"),
    ],
)
def test_a_malformed_policy_names_its_line(text: str, message: str) -> None:
    with pytest.raises(MalformedPolicy, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        parse_policy(text)


def test_only_space_and_tab_separate_and_only_ascii_digits_count() -> None:
    vkey = WITNESSES["X1"].verifier.vkey
    with pytest.raises(MalformedPolicy, match="unknown keyword"):
        parse_policy(f"witness W {vkey}\nquorum\u00a0W\n")
    with pytest.raises(MalformedPolicy, match="threshold is all, any or a decimal"):
        parse_policy(f"witness W {vkey}\ngroup G \u00b2 W\nquorum G\n")
    with pytest.raises(MalformedPolicy, match="threshold is all, any or a decimal"):
        parse_policy(f"witness W {vkey}\ngroup G \u0661 W\nquorum G\n")
    assert parse_policy(f"witness\tW\t{vkey}\n  quorum  W  \n").satisfied(frozenset({"W"}))


def test_groups_that_share_members_are_decided_once_each() -> None:
    """Each group names every group before it: the quorum is decided in one pass, not by re-walking the shared members."""
    lines = [f"witness W {WITNESSES['X1'].verifier.vkey}", "group G0 any W"]
    lines += [f"group G{i} all {' '.join(f'G{j}' for j in range(i))}" for i in range(1, 120)]
    policy = parse_policy("\n".join([*lines, "quorum G119"]) + "\n")
    assert policy.satisfied(frozenset({"W"})) and not policy.satisfied(frozenset())
