"""The shipped ACL spec (config/kafka-acls.toml) and `bernstein kafka acls` without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from bernstein.cli import main
from bernstein.commands.common import UsageError
from bernstein.commands.kafka import Acl, AclSpecError, acls_for, bindings, load_spec

PRINCIPALS = {"producer": "User:producer", "scheduler": "User:scheduler", "auditor": "User:auditor"}


def rights(principal: str, prefix: str = "acme") -> set[tuple[str, str, str, str]]:
    return {
        (a.operation, a.resource, a.pattern, a.name)
        for a in acls_for(prefix, PRINCIPALS, load_spec())
        if a.principal == f"User:{principal}"
    }


def test_producers_may_only_write_and_describe_submissions() -> None:
    assert rights("producer") == {
        ("write", "topic", "literal", "acme.activity.submissions"),
        ("describe", "topic", "literal", "acme.activity.submissions"),
    }


def test_only_the_scheduler_writes_the_outputs_and_owns_its_transactional_ids_and_group() -> None:
    outputs = (
        "acme.activity.journal",
        "acme.activity.refusals",
        "acme.audit",
        "acme.activity.deadletter",
        "acme.checkpoints",
        "acme.scheduler.state",
    )
    acls = acls_for("acme", PRINCIPALS, load_spec())
    writers = {a.name: {b.principal for b in acls if b.name == a.name and b.operation == "write"} for a in acls}
    for topic in outputs:
        assert writers[topic] == {"User:scheduler"}, topic
    scheduler = rights("scheduler")
    assert ("read", "topic", "literal", "acme.activity.submissions") in scheduler
    assert ("read", "topic", "literal", "acme.scheduler.state") in scheduler  # snapshots, read back on restart
    assert ("write", "topic", "literal", "acme.activity.submissions") not in scheduler
    assert ("write", "transactional_id", "prefixed", "acme.scheduler") in scheduler
    assert ("read", "group", "literal", "acme.scheduler") in scheduler
    assert not [r for r in scheduler if r[0] in ("create", "alter", "delete", "alter_configs")]


def test_auditors_read_everything_and_write_nothing() -> None:
    assert rights("auditor") == {
        ("read", "topic", "prefixed", "acme."),
        ("describe", "topic", "prefixed", "acme."),
        ("read", "group", "literal", "bernstein.verifier"),
        ("describe", "group", "literal", "bernstein.verifier"),
        ("read", "group", "prefixed", "acme.audit-follow"),  # bernstein audit follow's consumer group
        ("describe", "group", "prefixed", "acme.audit-follow"),
    }


def test_principals_are_substituted_and_lines_are_stable() -> None:
    acls = acls_for("p", {**PRINCIPALS, "producer": "User:CN=worker-1"}, load_spec())
    assert Acl("User:CN=worker-1", "topic", "literal", "p.activity.submissions", "write") in acls
    assert acls == sorted(acls)
    assert Acl("User:x", "transactional_id", "prefixed", "p.scheduler", "write").line() == (
        "ALLOW User:x WRITE TRANSACTIONAL_ID PREFIXED p.scheduler"
    )


def test_bindings_are_confluent_acl_bindings() -> None:
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType  # type: ignore[attr-defined]

    (binding,) = bindings([Acl("User:scheduler", "transactional_id", "prefixed", "p.scheduler", "write")])
    assert binding.restype == ResourceType.TRANSACTIONAL_ID
    assert binding.resource_pattern_type == ResourcePatternType.PREFIXED
    assert binding.operation == AclOperation.WRITE
    assert (binding.name, binding.principal, binding.host) == ("p.scheduler", "User:scheduler", "*")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[acl]]\nprincipal='root'\nresource='topic'\npattern='literal'\nname='x'\noperations=['read']\n", "principal 'root'"),
        ("[[acl]]\nprincipal='auditor'\nresource='topic'\npattern='match'\nname='x'\noperations=['read']\n", "pattern 'match'"),
        ("[[acl]]\nprincipal='auditor'\nresource='topic'\npattern='literal'\nname='x'\noperations=['all']\n", "operations must"),
        ("[[acl]]\nprincipal='auditor'\nresource='topic'\npattern='literal'\nname='x'\n", "needs exactly"),
        ("other = 1\n", "expected one or more"),
        ("[[acl]\n", "not TOML"),
    ],
)
def test_malformed_specs_are_typed_errors(tmp_path: Path, text: str, message: str) -> None:
    spec = tmp_path / "acls.toml"
    spec.write_text(text)
    with pytest.raises(AclSpecError, match=message):
        load_spec(spec)


@pytest.mark.parametrize("prefix", ["", "a b", "x/y", "ü"])
def test_bad_prefix_is_a_usage_error(prefix: str) -> None:
    with pytest.raises(UsageError, match="topic prefix"):
        acls_for(prefix, PRINCIPALS, load_spec())


def test_bad_principal_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"--producer-principal 'worker': expected TYPE:NAME"):
        acls_for("p", {**PRINCIPALS, "producer": "worker"}, load_spec())


def test_cli_prints_without_touching_kafka(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kafka", "acls", "--prefix", "acme", "--auditor-principal", "User:CN=audit"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "ALLOW User:producer WRITE TOPIC LITERAL acme.activity.submissions" in lines
    assert "ALLOW User:CN=audit READ TOPIC PREFIXED acme." in lines
    assert len(lines) == len(set(lines)) == 41  # 37 + the scheduler state topic (read, write, describe, describe_configs)
