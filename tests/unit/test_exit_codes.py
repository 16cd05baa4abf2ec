"""One exit-code table (``substrate/exit_codes.py``), the docs' copy of it, and the producers' missing topic.

* docs/operations.md's "Exit codes" table is exactly the one the module generates;
* every ``EXIT_*`` constant is one row of ``TABLE`` and no other module gives an ``EXIT_*``
  name a number of its own (a command imports its codes, it does not define them);
* the module is a leaf (the standard library only), so the verifier and the producers use it
  without importing the ``bernstein`` command-line package;
* a usage error exits 3 everywhere, ``submission check`` included;
* a producer never creates topics: a missing submissions topic is ``TopicMissing``
  (``E_TOPIC_MISSING``), whose message names the topic, the prefix and ``bernstein topic create``,
  and ``bernstein submit`` prints it as one line, exit 3, before storing any blob.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas.errors import BernsteinError
from bernstein.substrate import exit_codes
from bernstein.substrate.cas import S3Settings
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.exit_codes import EXIT_UNAVAILABLE, EXIT_USAGE, TABLE, markdown_table
from bernstein.substrate.kafka import KafkaError, TopicMissing, require_submissions_topic, topic_missing

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "operations.md"
CODE_PACKAGES = ("bernstein", "verifier", "producers", "consumers", "substrate", "schemas")


def test_the_docs_table_is_the_modules_table() -> None:
    documented = exit_codes.documented_table(DOC.read_text(encoding="utf-8"))
    assert documented is not None, f"docs/operations.md lost the markers {exit_codes.BEGIN!r} / {exit_codes.END!r}"
    assert documented == markdown_table(), (
        "docs/operations.md's exit-code table differs from substrate/exit_codes.py: run "
        "`.venv/bin/python -m bernstein.substrate.exit_codes --write docs/operations.md`"
    )


def test_a_changed_module_row_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    text = DOC.read_text(encoding="utf-8")
    changed = (exit_codes.ExitCode(3, "EXIT_USAGE", "something else", "every command"), *TABLE[1:])
    monkeypatch.setattr(exit_codes, "TABLE", changed)
    assert exit_codes.documented_table(text) != markdown_table()
    assert exit_codes.documented_table(exit_codes.rewrite(text)) == markdown_table()


def test_write_puts_the_table_between_the_markers_and_keeps_the_rest(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nbefore\n\n{exit_codes.BEGIN}\n| stale |\n{exit_codes.END}\n\nafter\n", encoding="utf-8")
    assert exit_codes.main(["--write", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text == f"# Title\n\nbefore\n\n{exit_codes.BEGIN}\n{markdown_table()}{exit_codes.END}\n\nafter\n"
    assert exit_codes.main(["--write", str(tmp_path / "missing.md")]) == EXIT_USAGE


def test_every_constant_is_one_row_and_every_row_a_constant() -> None:
    names = exit_codes.names()
    rows = {row.name: row.code for row in TABLE}
    assert len(rows) == len(TABLE), "a name has two rows"
    assert rows == names
    assert [row.code for row in TABLE] == sorted(row.code for row in TABLE), "the table is ordered by code"
    assert all(row.meaning and row.commands for row in TABLE)
    # the codes every command agrees on
    assert (names["EXIT_OK"], names["EXIT_USAGE"], names["EXIT_UNAVAILABLE"], names["EXIT_INTERNAL"]) == (0, 3, 3, 4)


def _literal_exit_definitions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, int):
            for target in targets:
                if isinstance(target, ast.Name) and target.id.startswith("EXIT_"):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {target.id} = {value.value}")
    return found


def test_no_module_defines_an_exit_code_of_its_own() -> None:
    home = REPO / "substrate" / "exit_codes.py"
    defined = [
        found
        for package in CODE_PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if path != home
        for found in _literal_exit_definitions(path)
    ]
    assert defined == [], "import these from substrate.exit_codes (and add a row there if the meaning is new)"
    assert len(_literal_exit_definitions(home)) == len(TABLE)  # the scan sees the definitions where they are


def test_the_module_is_a_leaf() -> None:
    tree = ast.parse((REPO / "substrate" / "exit_codes.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} | {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_the_commands_use_the_tables_codes() -> None:
    from bernstein import cli
    from bernstein.commands import audit, scheduler, submission, submit
    from bernstein.commands import browser as browser_cli
    from bernstein.producers.dataops import cli as dataops_cli
    from bernstein.producers.research import cli as research_cli
    from bernstein.verifier import report

    assert cli.EXIT_USAGE is exit_codes.EXIT_USAGE and submission.EXIT_USAGE == 3
    assert scheduler.EXIT_FENCED == exit_codes.EXIT_FENCED == 7
    assert (audit.EXIT_CLEAN, audit.EXIT_ALERTS) == (0, 2)
    assert (submit.EXIT_BAD_DESCRIPTION, submit.EXIT_UNAVAILABLE) == (2, 3)
    assert research_cli.EXIT_REFUSED == dataops_cli.EXIT_REFUSED == browser_cli.EXIT_REFUSED == exit_codes.EXIT_REFUSED
    verdicts = (report.EXIT_VERIFIED, report.EXIT_NOT_FOUND, report.EXIT_MISMATCH, report.EXIT_OPEN)
    assert verdicts + (report.EXIT_NOT_FULLY_VERIFIED,) == (0, 1, 2, 5, 6)


def test_a_bare_command_group_exits_3_like_every_usage_error() -> None:
    for group in ("submission", "topic"):
        result = subprocess.run([sys.executable, "-m", "bernstein", group], capture_output=True, text=True, timeout=60)
        assert result.returncode == EXIT_USAGE, (group, result.stderr)
        assert "Traceback" not in result.stderr


# -- producers never create topics ---------------------------------------------------------


def test_topic_missing_is_a_typed_error_naming_the_topic_the_prefix_and_the_fix() -> None:
    error = topic_missing("127.0.0.1:9092", Topics("typo"))
    assert isinstance(error, TopicMissing) and isinstance(error, KafkaError) and isinstance(error, BernsteinError)
    assert error.code == "E_TOPIC_MISSING"
    assert error.message.startswith("topic typo.activity.submissions does not exist on Kafka at 127.0.0.1:9092")
    assert "the prefix 'typo'" in error.message
    assert "Producers never create topics" in error.message
    assert error.message.endswith("`bernstein topic create --prefix typo`")

    from bernstein.producers.emitter import TopicMissing as from_the_sdk

    assert from_the_sdk is TopicMissing


class _Topic:
    def __init__(self, error: Any, partitions: dict[int, Any]) -> None:
        self.error = error
        self.partitions = partitions


class _Error:
    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name


class _Admin:
    """The AdminClient's metadata answer for one topic; creating a topic is a test failure."""

    def __init__(self, topic: _Topic | None) -> None:
        self.topic = topic
        self.asked: list[str | None] = []

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        self.asked.append(topic)
        topics = {} if self.topic is None else {topic: self.topic}

        class Metadata:
            pass

        metadata = Metadata()
        metadata.topics = topics  # type: ignore[attr-defined]
        return metadata

    def create_topics(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a producer's check created a topic")


@pytest.mark.parametrize(
    "answer",
    [None, _Topic(_Error("UNKNOWN_TOPIC_OR_PART"), {}), _Topic(None, {})],
    ids=["absent", "unknown-topic", "no-partitions"],
)
def test_the_producers_check_raises_topic_missing_and_creates_nothing(
    monkeypatch: pytest.MonkeyPatch, answer: _Topic | None
) -> None:
    import bernstein.substrate.kafka as kafka

    admin = _Admin(answer)
    configs: list[dict[str, Any]] = []

    def fake_admin(bootstrap: str, **extra: Any) -> tuple[Any, list[Any]]:
        configs.append(extra)
        return admin, []

    monkeypatch.setattr(kafka, "_admin", fake_admin)
    with pytest.raises(TopicMissing, match=r"`bernstein topic create --prefix typo`$"):
        require_submissions_topic("127.0.0.1:9092", Topics("typo"), timeout=1)
    assert admin.asked == ["typo.activity.submissions"]
    assert configs == [{"allow.auto.create.topics": False}]  # nor through a broker that auto-creates on metadata requests


def test_the_producers_check_returns_the_partition_count_of_an_existing_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    import bernstein.substrate.kafka as kafka

    monkeypatch.setattr(kafka, "_admin", lambda bootstrap, **extra: (_Admin(_Topic(None, {0: 0, 1: 1})), []))
    assert require_submissions_topic("127.0.0.1:9092", Topics("real"), timeout=1) == 2


def test_the_emitter_producer_never_asks_the_broker_to_create_a_topic() -> None:
    from bernstein.substrate.kafka import emitter_producer_config

    assert emitter_producer_config("127.0.0.1:9092")["allow.auto.create.topics"] is False


def test_submit_prints_a_missing_topic_as_one_line_exit_3_before_storing_a_blob(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import bernstein.producers.emitter as emitter_module
    from bernstein.commands import submit
    from bernstein.substrate.keys import init_producer_keys

    def missing(bootstrap: str, topics: Topics, *, timeout: float) -> int:
        raise topic_missing(bootstrap, topics)

    def no_store(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a blob was stored although nothing can be published")

    monkeypatch.setattr(emitter_module, "require_submissions_topic", missing)
    monkeypatch.setattr(emitter_module.Emitter, "store_blobs", no_store)
    settings = Settings(
        kafka_bootstrap="127.0.0.1:9", s3=S3Settings("http://127.0.0.1:9", "a", "b", "bucket"), topics=Topics("typo")
    )
    producer = init_producer_keys(tmp_path / "pk", "worker@unit")
    line = '{"run_id": "r", "stage_id": "s", "role": "developer", "kind": "coding", "artifact": 1, '
    line += '"observations": [{"kind": "note", "ref": "n", "text": "x"}]}\n'
    out = io.StringIO()
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    code = submit.submit_lines(io.StringIO(line), producer=producer, settings=settings, timeout=1.0, out=out)
    assert code == EXIT_UNAVAILABLE == 3
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "bernstein submit: error: line 1: nothing published for this line: topic typo.activity.submissions does not "
        "exist on Kafka at 127.0.0.1:9: no deployment has the prefix 'typo' there, so nothing would read what is "
        "published (a mistyped --prefix or BERNSTEIN_TOPIC_PREFIX?). Producers never create topics: the Kafka admin "
        "creates the deployment's topics with `bernstein topic create --prefix typo`\n"
    )
