"""The scheduler's metrics, health endpoints and JSON logs, without a broker.

Refusals and dead letters are counted by code on both batch paths, exactly as the codes
written in the records; ``/metrics``, ``/healthz`` and ``/readyz`` answer as
docs/operations.md says; ``--log-format json`` writes one object per line.
"""

from __future__ import annotations

import io
import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from bernstein.commands.common import without_endpoint_line
from bernstein.consumers.core.model import Stream
from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.consumers.metrics import SchedulerMetrics, ShellProbe, core_name
from bernstein.consumers.shell import SchedulerShell, _codes_of, record_code
from bernstein.schemas import codec
from bernstein.substrate.logs import EventLog, LogFormatError, log_format
from bernstein.substrate.ops_http import OpsServer, OpsServerError, Probe
from tests.support.cores import PARTITION, make_config
from tests.support.shells import SHELL_TOPICS, SHELL_TOPICS_BY_STREAM, RecordingProducer, batch_messages, offline_shell


def _written_codes(calls: list[tuple[Any, ...]]) -> tuple[Counter[str], Counter[str]]:
    """The code of every refusal and dead letter a producer was given, decoded with the codec."""
    refused: Counter[str] = Counter()
    dead: Counter[str] = Counter()
    for topic, value, *_ in calls:
        if topic == SHELL_TOPICS.refusals:
            refused[codec.decode(value).record["code"]] += 1
        elif topic == SHELL_TOPICS.deadletter:
            dead[codec.decode(value).record["code"]] += 1
    return refused, dead


def _batches() -> list[list[Message]]:
    messages = batch_messages()
    return [messages[:4], messages[4:9], messages[9:]]


def test_refusals_and_dead_letters_are_counted_by_the_code_written_on_both_batch_paths() -> None:
    config = make_config()
    # the native path: the codes the extension reads back from its plan
    native = NativeSchedulerCore(config, PARTITION)
    producer = RecordingProducer()
    state: Any = initial_state(config, PARTITION)
    native_refused: Counter[str] = Counter()
    native_dead: Counter[str] = Counter()
    for messages in _batches():
        state = native.plan(state, messages, PARTITION)
        tallies = native.produce_planned(producer, SHELL_TOPICS_BY_STREAM, PARTITION)
        refused, dead = native.plan_codes()
        assert sum(n for _, n in refused) == tallies[2] and sum(n for _, n in dead) == tallies[3]
        native_refused.update(dict(refused))
        native_dead.update(dict(dead))
    written = _written_codes(producer.calls)
    assert (native_refused, native_dead) == written
    assert len(written[0]) >= 2 and len(written[1]) >= 2, written  # the batch has several codes of each

    # the reference path: the shell's own reading of the outputs it produces
    shell = SchedulerShell(
        bootstrap="unused:9", topics=SHELL_TOPICS, partition=PARTITION, core=SchedulerCore(config), progress=None
    )
    reference = RecordingProducer()
    ref_state: Any = initial_state(config, PARTITION)
    ref_refused: Counter[str] = Counter()
    ref_dead: Counter[str] = Counter()
    for messages in _batches():
        ref_state, planned = shell._step_all(ref_state, messages)
        shell._produce_all(reference, planned)
        refused, dead = _codes_of(planned)
        ref_refused.update(dict(refused))
        ref_dead.update(dict(dead))
    assert (ref_refused, ref_dead) == _written_codes(reference.calls) == written


def test_record_code_reads_the_code_and_says_unknown_for_bytes_without_one() -> None:
    config = make_config()
    state = initial_state(config, PARTITION)
    _, outputs = SchedulerCore(config).step(state, _input(b"not avro at all"))
    dead = [o for o in outputs if o.stream is Stream.DEADLETTER]
    assert [record_code(o.value, 0) for o in dead] == ["NOT_AVRO_SINGLE_OBJECT"]
    assert record_code(b"", 0) == "UNKNOWN"
    assert record_code(b"\xc3\x01" + bytes(8) + b"\x7f", 0) == "UNKNOWN"  # a length past the end
    assert record_code(b"\xc3\x01" + bytes(8) + b"\x04\xff\xfe", 0) == "UNKNOWN"  # not UTF-8


def _input(value: bytes) -> Any:
    from bernstein.consumers.core.model import InputRecord

    return InputRecord(topic="unit.activity.submissions", partition=PARTITION, offset=0, timestamp_ms=1, key=b"k", value=value)


# -- /metrics, /healthz, /readyz --------------------------------------------------------


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_ops_server_answers_metrics_health_and_readiness() -> None:
    registry = CollectorRegistry()
    family = CounterMetricFamily("demo_things", "Things.", labels=["partition"])
    family.add_metric(["0"], 3)

    class One:
        def collect(self) -> Any:
            yield family

    registry.register(One())
    probe = Probe(stall_after=0.3)
    server = OpsServer(registry, probe, port=0).start()
    try:
        assert server.port > 0
        status, body = _get(f"{server.url}/metrics")
        assert status == 200 and 'demo_things_total{partition="0"} 3.0' in body
        assert _get(f"{server.url}/readyz") == (503, "starting\n")
        probe.set_ready(True, "consuming")
        assert _get(f"{server.url}/readyz") == (200, "consuming\n")
        assert _get(f"{server.url}/healthz") == (200, "ok\n")
        time.sleep(0.4)  # no beat for longer than stall_after
        status, body = _get(f"{server.url}/healthz")
        assert status == 503 and body.startswith("stalled: the loop has not moved for")
        probe.beat()
        assert _get(f"{server.url}/healthz") == (200, "ok\n")
        assert _get(f"{server.url}/other")[0] == 404
        with pytest.raises(OpsServerError, match=f"cannot serve metrics on 127.0.0.1:{server.port}"):
            OpsServer(registry, probe, port=server.port).start()
    finally:
        server.close()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.port), timeout=1):
        pass  # closed: nothing listens any more


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_scheduler_collector_reads_the_counters_at_scrape_time() -> None:
    shell = offline_shell()
    metrics = SchedulerMetrics(shell, "python reference")
    p = (("partition", str(PARTITION)), ("prefix", SHELL_TOPICS.prefix))  # sorted label pairs: every sample has both
    before = _samples(metrics.registry)
    assert before[("bernstein_scheduler_records_consumed_total", p)] == 0
    assert before[("bernstein_scheduler_ready", p)] == 0
    assert before[("bernstein_scheduler_core_info", (("core", "python"), ("description", "python reference"), *p))] == 1
    assert not any(name == "bernstein_scheduler_consumer_lag_records" for name, _ in before)  # unknown yet
    assert not any(name == "bernstein_scheduler_last_seal_timestamp_seconds" for name, _ in before)

    c = shell.counters
    c.consumed, c.journalled, c.seals, c.refused, c.dead_letters = 10, 6, 1, 3, 1
    c.refused_codes.update({"UNKNOWN_ROLE": 2, "DUPLICATE_STAGE": 1})
    c.dead_letter_codes.update({"EMPTY_VALUE": 1})
    c.transactions, c.aborts, c.recoveries_total, c.rebuilds, c.rebuild_seconds = 4, 1, 1, 2, 0.25
    c.next_offset, c.high_watermark, c.last_seal_time, c.phase = 10, 25, 1_700_000_000.5, "consuming"
    shell.observer is not None and shell.observer(7, 0.02, 0.005)
    after = _samples(metrics.registry)
    assert after[("bernstein_scheduler_records_consumed_total", p)] == 10
    assert after[("bernstein_scheduler_records_journalled_total", p)] == 6
    assert after[("bernstein_scheduler_seals_total", p)] == 1
    assert after[("bernstein_scheduler_records_refused_total", (("code", "DUPLICATE_STAGE"), *p))] == 1
    assert after[("bernstein_scheduler_records_refused_total", (("code", "UNKNOWN_ROLE"), *p))] == 2
    assert after[("bernstein_scheduler_records_dead_lettered_total", (("code", "EMPTY_VALUE"), *p))] == 1
    assert after[("bernstein_scheduler_transactions_total", (("outcome", "committed"), *p))] == 4
    assert after[("bernstein_scheduler_transactions_total", (("outcome", "aborted"), *p))] == 1
    assert after[("bernstein_scheduler_consumer_lag_records", p)] == 15
    assert after[("bernstein_scheduler_last_seal_timestamp_seconds", p)] == 1_700_000_000.5
    assert after[("bernstein_scheduler_rebuild_duration_seconds", p)] == 0.25
    assert after[("bernstein_scheduler_ready", p)] == 1
    assert after[("bernstein_scheduler_batch_size_records_count", p)] == 1
    assert after[("bernstein_scheduler_batch_size_records_sum", p)] == 7
    assert after[("bernstein_scheduler_transaction_duration_seconds_sum", p)] == 0.02
    assert after[("bernstein_scheduler_commit_duration_seconds_sum", p)] == 0.005
    assert core_name("native (bernstein_native, Rust)") == "rust"


def _every_condition(shell: SchedulerShell) -> None:
    """Counters that make every conditional family present (lag, seal, rebuild, a refusal and a dead letter)."""
    c = shell.counters
    c.next_offset, c.high_watermark, c.last_seal_time, c.rebuilds = 1, 2, 3.0, 1
    c.refused_codes["X"] = c.dead_letter_codes["Y"] = 1
    shell.observer is not None and shell.observer(1, 0.01, 0.001)


def test_every_scheduler_sample_carries_the_deployments_prefix_and_partition() -> None:
    """Two deployments (topic prefixes) scraped by one Prometheus: no scheduler sample of one has the labels of
    a sample of the other, though both run partition 3 (a --group registry labels each shell by its own topics)."""
    from bernstein.substrate.config import Topics

    samples: dict[str, set[tuple[str, str, tuple[tuple[str, str], ...]]]] = {}
    for prefix in ("prod", "staging"):
        shells = [
            SchedulerShell(
                bootstrap="unused:9", topics=Topics(prefix), partition=p, core=SchedulerCore(make_config()), progress=None
            )
            for p in (PARTITION, PARTITION + 1)
        ]
        metrics = SchedulerMetrics(lambda shells=shells: shells, "python reference")
        for shell in shells:
            metrics.attach(shell)
            _every_condition(shell)
        found = samples.setdefault(prefix, set())
        for name, labels in _samples(metrics.registry):
            if not name.startswith("bernstein_scheduler_"):
                continue
            values = dict(labels)
            assert values.get("prefix") == prefix, (name, labels)
            assert values.get("partition") in (str(PARTITION), str(PARTITION + 1)), (name, labels)
            rest = tuple((k, v) for k, v in labels if k != "prefix")
            found.add((name, values["partition"], rest))
    assert samples["prod"] == samples["staging"]  # the same series apart from the prefix ...
    families = {name.removesuffix("_bucket") for name, _, _ in samples["prod"]}
    assert "bernstein_scheduler_batch_size_records" in families and "bernstein_scheduler_core_info" in families
    assert len(samples["prod"]) > 40  # ... and every family is there (histogram buckets included)


def test_the_scheduler_probe_follows_the_phase_and_the_heartbeat() -> None:
    shell = offline_shell()
    probe = ShellProbe(shell, stall_after=5.0)
    assert probe.readiness() == (False, "starting")
    shell.counters.phase = "rebuilding"
    assert probe.readiness() == (False, "rebuilding") and probe.health() == (True, "ok")
    shell.counters.phase = "consuming"
    assert probe.readiness() == (True, "consuming")
    shell.counters.heartbeat = time.monotonic() - 6
    ok, why = probe.health()
    assert not ok and why.startswith("stalled: the loop has not moved for 6s")
    shell.counters.heartbeat = time.monotonic()
    shell.counters.phase = "failed"
    assert probe.health() == (False, "failed") and probe.readiness() == (False, "failed")


# -- logs ------------------------------------------------------------------------------------


def test_json_events_are_one_object_per_line_and_text_stays_as_it_was() -> None:
    out = io.StringIO()
    log = EventLog("bernstein.scheduler", json=True, stream=out, fields={"partition": 2})
    log.emit("progress", "running: offset 4", consumed=5, logger="not the logger")
    log.emit("error", "two\nlines", level="error", code="E_X")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["ts"].endswith("Z") and len(first["ts"]) == len("2026-12-01T21:30:00.123Z")
    assert {k: v for k, v in first.items() if k != "ts"} == {
        "level": "info",
        "logger": "bernstein.scheduler",
        "event": "progress",
        "message": "running: offset 4",
        "partition": 2,
        "consumed": 5,
        "logger_": "not the logger",
    }
    assert second["message"] == "two\nlines" and second["level"] == "error" and second["code"] == "E_X"
    text = io.StringIO()
    EventLog("bernstein.scheduler", stream=text, text_prefix="scheduler p2: ").emit("progress", "running: offset 4", consumed=5)
    assert text.getvalue() == "scheduler p2: running: offset 4\n"


def test_the_log_format_comes_from_the_flag_then_the_environment() -> None:
    assert log_format(None, {}) == "text"
    assert log_format(None, {"BERNSTEIN_LOG_FORMAT": "JSON"}) == "json"
    assert log_format("text", {"BERNSTEIN_LOG_FORMAT": "json"}) == "text"
    with pytest.raises(LogFormatError, match="BERNSTEIN_LOG_FORMAT='yaml': the log format is text or json"):
        log_format(None, {"BERNSTEIN_LOG_FORMAT": "yaml"})


def test_the_shell_logs_events_through_its_emit_hook() -> None:
    shell = offline_shell()
    shell.progress = io.StringIO()
    events: list[tuple[str, str, str, dict[str, Any]]] = []
    shell.emit = lambda *event: events.append(event)
    shell.counters.consumed = 3
    shell._report(final=True)
    assert len(events) == 1
    event, message, level, fields = events[0]
    assert (event, level) == ("stopped", "info") and message.startswith("stopped: offset -1 | consumed 3")
    assert fields["consumed"] == 3 and fields["dead_lettered"] == 0
    assert shell.progress.getvalue() == ""
    shell.emit = None
    shell._report()
    assert shell.progress.getvalue().startswith(f"scheduler p{PARTITION}: running: offset -1 | consumed 3")


def test_a_failing_start_is_one_json_error_line_with_its_code_and_exit_3(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    # a bootstrap address is named (nothing listens there: the key check comes before any connection), so the
    # error is the missing keys whether or not this machine has local services in .infra/env
    env = {
        **os.environ,
        "BERNSTEIN_KAFKA_BOOTSTRAP": "127.0.0.1:9",
        "BERNSTEIN_KEYS_DIR": str(tmp_path / "no-keys"),
        "BERNSTEIN_LOG_FORMAT": "json",
    }
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", "scheduler", "run"], capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 3
    lines = without_endpoint_line(result.stderr).splitlines()  # the endpoints event comes first
    assert len(lines) == 1, result.stderr
    event = json.loads(lines[0])
    assert (event["level"], event["event"], event["code"], event["partition"]) == ("error", "error", "E_KEY_MISSING", 0)
    assert event["message"].startswith(f"no key at {tmp_path / 'no-keys'}")


def test_all_partitions_gives_each_child_its_own_metrics_port_and_the_log_format(monkeypatch: pytest.MonkeyPatch) -> None:
    from bernstein.cli import build_parser
    from bernstein.commands import scheduler
    from bernstein.commands.common import UsageError

    started: list[list[str]] = []

    class Child:
        def __init__(self, command: list[str]) -> None:
            started.append(command)

        def wait(self) -> int:
            return 0

        def poll(self) -> int:
            return 0

        def send_signal(self, signum: int) -> None:
            pass

    monkeypatch.setattr("bernstein.commands.scheduler.subprocess.Popen", Child)
    monkeypatch.setattr("bernstein.commands.scheduler.signal.signal", lambda *a: None)
    for port, expected in (("9400", ["9400", "9401", "9402"]), ("0", ["0", "0", "0"])):
        started.clear()
        args = build_parser().parse_args(
            ["scheduler", "run", "--all-partitions", "--metrics-port", port, "--metrics-host", "0.0.0.0", "--log-format", "json"]
        )
        assert scheduler._supervise(args, 3) == 0
        for p, command in enumerate(started):
            assert command[command.index("--partition") + 1] == str(p)
            assert command[command.index("--metrics-port") + 1] == expected[p]
            assert command[command.index("--metrics-host") + 1] == "0.0.0.0"
            assert command[command.index("--log-format") + 1] == "json"
    started.clear()
    with pytest.raises(UsageError, match="--metrics-port 65534: partition p serves on 65534\\+p, past 65535 for 3"):
        scheduler._supervise(build_parser().parse_args(["scheduler", "run", "--all-partitions", "--metrics-port", "65534"]), 3)
    assert started == []
    scheduler._supervise(build_parser().parse_args(["scheduler", "run", "--all-partitions"]), 2)
    assert all("--metrics-port" not in command and "--log-format" not in command for command in started)


def test_docs_operations_lists_exactly_the_metrics_the_scheduler_serves() -> None:
    from bernstein.consumers.shell import Counters

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    section = doc.split("## Metrics and health", 1)[1].split("\n## ", 1)[0]
    documented = dict(re.findall(r"^\| `(bernstein_scheduler_[a-z_]+)` \| ([a-z ()]+) \|", section, flags=re.M))
    shell = offline_shell()
    metrics = SchedulerMetrics(shell, "python reference")
    c: Counters = shell.counters
    c.next_offset, c.high_watermark, c.last_seal_time, c.rebuilds = 1, 2, 3.0, 1  # every conditional family present
    c.refused_codes["X"] = c.dead_letter_codes["Y"] = 1
    suffix = {"counter": "_total", "info": "_info"}
    kind = {"info": "gauge (info)"}
    served = {
        family.name + suffix.get(family.type, ""): kind.get(family.type, family.type)
        for family in metrics.registry.collect()
        if family.name.startswith("bernstein_scheduler_")
    }
    assert served == documented


def test_docs_operations_lists_every_event_the_scheduler_logs() -> None:
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "operations.md").read_text(encoding="utf-8")
    section = doc.split("## Structured logs", 1)[1].split("\n## ", 1)[0]
    documented = {name for row in re.findall(r"^\| (`[^|]+) \|", section, flags=re.M) for name in re.findall(r"`([a-z_]+)`", row)}
    logged = (
        set().union(*(_event_names(path, "_log", 1) for path in sorted((root / "consumers" / "shell").glob("*.py"))))
        | _event_names(root / "bernstein" / "commands" / "scheduler.py", "emit", 0)
        | _event_names(root / "bernstein" / "commands" / "common.py", "emit", 0)  # the first line: endpoints
        | _event_names(root / "consumers" / "group.py", "log", 1)  # --group's member
        | _event_names(root / "consumers" / "group.py", "_give_up", 2)
    )
    from bernstein.commands.scheduler import STARTUP_EVENTS

    logged |= set(STARTUP_EVENTS)
    assert {"progress", "stopped", "state_rebuilt", "consuming", "metrics_listening", "fenced", "error"} <= logged
    assert logged == documented


def _event_names(path: Path, method: str, position: int) -> set[str]:
    """The string constants given as argument ``position`` of every ``.method(...)`` call in ``path``."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
            if len(node.args) > position:
                arg = node.args[position]
                for value in (arg.body, arg.orelse) if isinstance(arg, ast.IfExp) else (arg,):
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        names.add(value.value)
    return names


def test_a_defect_is_one_json_internal_error_line_exit_4_and_debug_still_raises(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bernstein.cli import build_parser
    from bernstein.commands import scheduler

    def broken(args: Any, log: Any) -> int:
        raise RuntimeError("a defect")

    monkeypatch.setattr(scheduler, "_run_logged", broken)
    monkeypatch.setattr(scheduler, "install_json_logging", lambda log: None)  # leave this process's logging alone
    monkeypatch.delenv("BERNSTEIN_DEBUG", raising=False)
    args = build_parser().parse_args(["scheduler", "run", "--partition", "1", "--log-format", "json"])
    assert scheduler._run(args) == 4
    (line,) = capsys.readouterr().err.splitlines()
    event = json.loads(line)
    assert (event["event"], event["level"], event["exception"], event["partition"]) == (
        "internal_error",
        "error",
        "RuntimeError",
        1,
    )
    assert event["message"] == "RuntimeError: a defect (a defect; rerun with --debug and report it)"
    debug = build_parser().parse_args(["--debug", "scheduler", "run", "--log-format", "json"])
    with pytest.raises(RuntimeError, match="a defect"):
        scheduler._run(debug)


def test_readiness_fails_while_a_backlog_waits_behind_an_offset_that_does_not_move() -> None:
    shell = offline_shell()
    probe = ShellProbe(shell, stuck_after=30.0)
    c = shell.counters
    c.phase, c.next_offset, c.high_watermark = "consuming", 3066, 3068
    c.progressed = time.monotonic() - 10
    assert probe.readiness() == (True, "consuming")  # moving recently: a backlog is just work
    c.progressed = time.monotonic() - 31
    ready, why = probe.readiness()
    assert not ready and why.startswith("stuck: input offset 3066 has not been committed for 31s with 2 record(s) waiting")
    c.high_watermark = 3066  # nothing waits: an idle scheduler is ready however long it has been idle
    assert probe.readiness() == (True, "consuming")
