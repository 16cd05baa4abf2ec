"""The first stderr line of a command that talks to Kafka or S3.

It names the broker, its security protocol, the topic prefix and the S3 endpoint, each with where
it came from: a flag, a variable (by name), the ``.infra/env`` found from the working directory
upwards (by path), or the default. Commands that touch neither print nothing extra, and stdout
stays as it was. No test here opens a connection.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bernstein import cli
from bernstein.commands.common import (
    NOTHING,
    Uses,
    announce_endpoints,
    endpoint_banner,
    endpoint_fields,
    without_endpoint_line,
)
from bernstein.substrate.config import Resolved, Settings, resolve

SASL = "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password=not-shown\n"


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No BERNSTEIN_* variable and a working directory with no ``.infra/env`` above it."""
    for name in list(os.environ):
        if name.startswith("BERNSTEIN_"):
            monkeypatch.delenv(name)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert not any((parent / ".infra" / "env").is_file() for parent in (work, *work.parents))
    return work


def infra_env(root: Path, **values: str) -> Path:
    path = root / ".infra" / "env"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name}={value}\n" for name, value in values.items()), encoding="utf-8")
    return path


def line(uses: Uses, prefix_flag: str | None = None) -> str | None:
    return endpoint_banner(endpoint_fields(uses, prefix_flag))


# ---------------------------------------------------------------------------
# provenance: flag, variable, .infra/env, default
# ---------------------------------------------------------------------------


def test_resolve_names_where_each_value_came_from(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = infra_env(clean.parent, BERNSTEIN_TOPIC_PREFIX="from-file", BERNSTEIN_S3_BUCKET="b")
    name = "BERNSTEIN_TOPIC_PREFIX"
    assert resolve(name, "bernstein") == Resolved("from-file", f".infra/env {env}")
    monkeypatch.setenv(name, "from-variable")
    assert resolve(name, "bernstein") == Resolved("from-variable", name)
    assert resolve(name, "bernstein", flag=("--prefix", "from-flag")) == Resolved("from-flag", "flag --prefix")
    assert resolve(name, "bernstein", flag=("--prefix", None)) == Resolved("from-variable", name)
    assert resolve("BERNSTEIN_KAFKA_BOOTSTRAP", "d") == Resolved("d", "default")
    assert resolve("BERNSTEIN_KAFKA_BOOTSTRAP") == Resolved(
        None, f"unset: BERNSTEIN_KAFKA_BOOTSTRAP is not in the environment nor in .infra/env {env}"
    )
    # and the settings every command loads are these values
    assert Settings.load().topics.prefix == "from-variable"
    assert Settings.load(prefix="from-flag").topics.prefix == "from-flag"


def test_without_any_setting_the_line_says_what_is_unset_and_where_it_looked(clean: Path) -> None:
    assert line(Uses(kafka=True, s3=True)) == (
        f"bernstein: kafka none (unset: BERNSTEIN_KAFKA_BOOTSTRAP is not in the environment and no .infra/env from "
        f"{clean} upwards); prefix bernstein (default); s3 none (unset: BERNSTEIN_S3_ENDPOINT is not in the environment "
        f"and no .infra/env from {clean} upwards)"
    )


def test_variables_and_a_flag(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "kafka-1:9092")
    monkeypatch.setenv("BERNSTEIN_S3_ENDPOINT", "https://s3.example:443")
    monkeypatch.setenv("BERNSTEIN_TOPIC_PREFIX", "prod")
    assert line(Uses(kafka=True, s3=True)) == (
        "bernstein: kafka kafka-1:9092 (PLAINTEXT, default: BERNSTEIN_KAFKA_CONFIG_FILE unset; address from "
        "BERNSTEIN_KAFKA_BOOTSTRAP); prefix prod (from BERNSTEIN_TOPIC_PREFIX); s3 https://s3.example:443 (https, from "
        "BERNSTEIN_S3_ENDPOINT)"
    )
    assert line(Uses(kafka=True), "t3u-typo") == (
        "bernstein: kafka kafka-1:9092 (PLAINTEXT, default: BERNSTEIN_KAFKA_CONFIG_FILE unset; address from "
        "BERNSTEIN_KAFKA_BOOTSTRAP); prefix t3u-typo (from flag --prefix)"
    )


def test_the_infra_env_found_upwards_and_the_protocol_of_the_file_it_names(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    properties = clean.parent / "admin.properties"
    properties.write_text(SASL, encoding="utf-8")
    env = infra_env(
        clean.parent,
        BERNSTEIN_KAFKA_BOOTSTRAP="127.0.0.1:9093",
        BERNSTEIN_KAFKA_CONFIG_FILE=str(properties),
        BERNSTEIN_S3_ENDPOINT="http://127.0.0.1:9000",
    )
    assert line(Uses(kafka=True, s3=True)) == (
        f"bernstein: kafka 127.0.0.1:9093 (SASL_SSL, from {properties} via BERNSTEIN_KAFKA_CONFIG_FILE from .infra/env "
        f"{env}; address from .infra/env {env}); prefix bernstein (default); s3 http://127.0.0.1:9000 (http, from "
        f".infra/env {env})"
    )
    # a variable beats the file; S3 alone names no Kafka; the password is never shown
    monkeypatch.setenv("BERNSTEIN_S3_ENDPOINT", "http://minio:9000")
    assert line(Uses(s3=True)) == "bernstein: prefix bernstein (default); s3 http://minio:9000 (http, from BERNSTEIN_S3_ENDPOINT)"
    assert "not-shown" not in str(line(Uses(kafka=True, s3=True)))


def test_a_properties_file_without_a_protocol_and_one_that_cannot_be_read(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "b:1")
    bare = clean / "bare.properties"
    bare.write_text("ssl.endpoint.identification.algorithm=none\n", encoding="utf-8")
    monkeypatch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(bare))
    assert line(Uses(kafka=True, prefix=False)) == (
        f"bernstein: kafka b:1 (PLAINTEXT, default: no security.protocol in {bare} via BERNSTEIN_KAFKA_CONFIG_FILE; "
        "address from BERNSTEIN_KAFKA_BOOTSTRAP)"
    )
    monkeypatch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(clean / "missing.properties"))
    text = line(Uses(kafka=True, prefix=False))  # the command's own error says the rest; the line never fails
    assert text is not None and text.startswith("bernstein: kafka b:1 (unknown, unreadable: cannot read the Kafka client ")


def test_nothing_for_a_command_that_touches_neither(clean: Path) -> None:
    assert line(NOTHING) is None
    assert line(Uses(prefix=True)) is None


# ---------------------------------------------------------------------------
# the command line: first on stderr, never on stdout, the table complete
# ---------------------------------------------------------------------------


def test_every_command_says_whether_it_talks_to_kafka_or_s3() -> None:
    """A new command must be added to ``cli.ENDPOINTS`` (``NOTHING`` when it touches neither)."""
    commands = set(cli.leaf_commands(cli.build_parser()))
    assert {("activity", "verify"), ("scheduler", "run"), ("browser", "replay"), ("keys", "show")} <= commands
    assert commands - set(cli.ENDPOINTS) == set()


DATA_RUN = ["data", "run", "--run", "r", "--stage", "s", "--input", "i", "--output", "o", "--step", "x"]


@pytest.mark.parametrize(
    ("argv", "kafka", "s3"),
    [
        (["topic", "create"], True, False),
        (["topic", "export", "--all", "--out", "x"], True, True),
        (["topic", "export", "--all", "--out", "x", "--cas", "none"], True, False),
        (["activity", "verify", "r"], True, True),
        (["activity", "verify", "r", "--records-only"], True, False),
        (["activity", "verify", "r", "--from", "{dump}"], False, False),
        (["activity", "verify", "r", "--from", "{dump}", "--cas", "s3"], False, True),
        (["scheduler", "run"], True, False),
        (["audit", "follow"], True, False),
        (["audit", "ack", "--partition", "0", "--kind", "chain_break", "--reason", "x"], False, False),
        (["submit"], True, True),
        (["kafka", "acls", "--prefix", "p"], False, False),
        (["kafka", "acls", "--prefix", "p", "--apply"], True, False),
        ([*DATA_RUN, "--no-publish", "--cas-dir", "c"], False, False),
        ([*DATA_RUN, "--cas-dir", "c"], True, False),
        (["ops", *DATA_RUN[1:]], True, True),
        (["browser", "replay", "r"], True, True),
        (["browser", "replay", "r", "--from", "{dump}"], False, False),
        (["keys", "show"], False, False),
        (["submission", "check", "f"], False, False),
    ],
)
def test_what_each_invocation_uses(tmp_path: Path, argv: list[str], kafka: bool, s3: bool) -> None:
    parser = cli.build_parser()
    known, _ = parser.parse_known_args([part.format(dump=tmp_path) for part in argv])
    uses = cli.command_uses(known)
    assert (uses.kafka, uses.s3) == (kafka, s3)


def test_the_line_comes_first_on_stderr_before_a_variable_warning(
    clean: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    monkeypatch.setenv("BERNSTEIN_TOPICPREFIX", "misspelt")
    assert cli.main(["topic", "create", "--prefix", "p1", "--partitions", "0"]) == 3  # refused before any connection
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "bernstein: kafka 127.0.0.1:9 (PLAINTEXT, default: BERNSTEIN_KAFKA_CONFIG_FILE unset; address from "
        "BERNSTEIN_KAFKA_BOOTSTRAP); prefix p1 (from flag --prefix)",
        "bernstein: warning: BERNSTEIN_TOPICPREFIX is set but no setting of bernstein has that name (did you mean "
        "BERNSTEIN_TOPIC_PREFIX?); it is ignored",
        "bernstein: error: --partitions must be at least 1",
    ]
    assert without_endpoint_line(err) == "\n".join(err.splitlines()[1:]) + "\n"


def test_commands_that_touch_neither_print_nothing_more(clean: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["kafka", "acls", "--prefix", "p"]) == 0  # prints the ACLs, connects to nothing
    out, err = capsys.readouterr()
    assert out.startswith("ALLOW ") and err == ""
    assert cli.main(["keys", "show", "--dir", str(clean / "none")]) == 3
    assert capsys.readouterr().err.startswith("bernstein: error: ")


def test_json_stdout_is_untouched_and_json_stderr_gets_a_json_line(
    clean: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "127.0.0.1:9")

    def run(args: object) -> int:
        print(json.dumps({"ok": True}))
        return 0

    monkeypatch.setattr("bernstein.commands.scheduler._run", run)
    assert cli.main(["scheduler", "run", "--partition", "2", "--log-format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": True}
    event = json.loads(err)  # one line, the scheduler's own JSON form
    assert (event["logger"], event["event"], event["level"], event["partition"]) == (
        "bernstein.scheduler",
        "endpoints",
        "info",
        2,
    )
    assert event["kafka"] == {
        "bootstrap": "127.0.0.1:9",
        "bootstrap_from": "BERNSTEIN_KAFKA_BOOTSTRAP",
        "protocol": "PLAINTEXT",
        "protocol_from": "default: BERNSTEIN_KAFKA_CONFIG_FILE unset",
    }
    assert event["prefix"] == {"value": "bernstein", "from": "default"}
    assert event["message"].startswith("kafka 127.0.0.1:9 (PLAINTEXT, ")
    assert without_endpoint_line(err) == ""


def test_without_endpoint_line_drops_that_line_only(
    clean: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BERNSTEIN_S3_ENDPOINT", "http://s3:9000")
    announce_endpoints(Uses(s3=True), None)
    text = capsys.readouterr().err
    assert text == "bernstein: prefix bernstein (default); s3 http://s3:9000 (http, from BERNSTEIN_S3_ENDPOINT)\n"
    assert without_endpoint_line(text + "bernstein: error: x\n") == "bernstein: error: x\n"
    for other in ("bernstein: error: kafka x (y)\n", "bernstein: kafka\n", '{"event":"checked"}\n', ""):
        assert without_endpoint_line(other) == other
