"""Tamper latches of ``audit follow`` and ``bernstein audit ack``: pure logic, files, the follower's
bookkeeping and gauge without Kafka, the commands; and ``bernstein audit rules``' runbook base."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bernstein.cli import main
from bernstein.substrate.config import Topics
from bernstein.verifier.follow.alerts import INTEGRITY, Alert, AlertKind
from bernstein.verifier.follow.checker import Policy
from bernstein.verifier.follow.checkpoint import CheckpointStore
from bernstein.verifier.follow.consumer import Follower, FollowOptions
from bernstein.verifier.follow.latch import (
    ACK_LOG,
    TAMPER,
    Ack,
    AckLog,
    LatchError,
    LatchStore,
    NotLatched,
    PartitionLatches,
    acknowledge,
    pending,
)
from bernstein.verifier.follow.metrics import FollowerMetrics
from bernstein.verifier.follow.rules import DEFAULT_RUNBOOK_BASE, check_base, rebase, runbook_urls

TOPIC = "p.audit"
T0 = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]


def alert(kind: AlertKind, offset: int | None = 7, partition: int = 0, **extra: Any) -> Alert:
    return Alert(kind, TOPIC, partition, offset, f"{kind.value} at {offset}", {"seq": offset, **extra})


def ack_of(latches: PartitionLatches, kind: AlertKind, log: list[Ack] | None = None, at: int = T0 + 5000) -> Ack:
    return acknowledge(latches, kind, by="alice", reason="forged record investigated, INC-42", now_ms=at, log=log or [])


# -- the latch itself -------------------------------------------------------------------------------------


def test_the_tamper_kinds_are_the_integrity_kinds() -> None:
    assert TAMPER == INTEGRITY
    assert {AlertKind.CHAIN_BREAK, AlertKind.MAC_MISMATCH, AlertKind.HISTORY_REWRITTEN, AlertKind.GAP} <= TAMPER
    assert not {AlertKind.DEADLETTER, AlertKind.REFUSAL_BURST, AlertKind.RUN_UNSEALED, AlertKind.SCHEDULER_SILENT} & TAMPER


def test_a_tamper_finding_latches_once_per_kind_and_counts_the_findings_after_it() -> None:
    latches = PartitionLatches(TOPIC, 0)
    first = latches.latch(alert(AlertKind.CHAIN_BREAK, 7), T0)
    assert first is not None and first.findings == 1 and first.since_ms == T0
    assert first.first == first.last == alert(AlertKind.CHAIN_BREAK, 7).to_json()
    assert latches.latch(alert(AlertKind.CHAIN_BREAK, 9), T0 + 1) is None  # counted in the latch held
    assert latches.latch(alert(AlertKind.CHAIN_BREAK, 9), T0 + 2) is None  # the same finding again (a re-check)
    held = latches.held[AlertKind.CHAIN_BREAK]
    assert (held.id, held.findings, held.first["offset"], held.last["offset"]) == (first.id, 2, 7, 9)
    other = latches.latch(alert(AlertKind.MAC_MISMATCH, 12), T0 + 3)
    assert other is not None and other.id != first.id
    assert sorted(latches.held) == [AlertKind.CHAIN_BREAK, AlertKind.MAC_MISMATCH]


@pytest.mark.parametrize(
    "kind", [AlertKind.DEADLETTER, AlertKind.REFUSAL_BURST, AlertKind.RUN_UNSEALED, AlertKind.SCHEDULER_SILENT]
)
def test_operational_alerts_do_not_latch(kind: AlertKind) -> None:
    latches = PartitionLatches(TOPIC, 0)
    assert latches.latch(alert(kind, None), T0) is None and latches.held == {}


def test_an_ack_clears_its_latch_and_a_new_finding_of_the_kind_latches_again() -> None:
    latches = PartitionLatches(TOPIC, 0)
    latches.latch(alert(AlertKind.CHAIN_BREAK, 7), T0)
    latches.latch(alert(AlertKind.GAP, 8), T0)
    ack = ack_of(latches, AlertKind.CHAIN_BREAK)
    line = ack.to_json()
    assert (line["by"], line["reason"], line["partition"], line["kind"], line["findings"]) == (
        "alice",
        "forged record investigated, INC-42",
        0,
        "chain_break",
        1,
    )
    assert line["at"] == "2023-11-14T22:13:25.000Z" and line["since"] == "2023-11-14T22:13:20.000Z"
    assert line["evidence"]["first"] == alert(AlertKind.CHAIN_BREAK, 7).to_json()
    assert Ack.from_json(json.loads(ack.line())) == ack
    cleared = latches.acknowledge(ack, T0 + 6000)
    assert cleared is not None and cleared.id == ack.latch
    assert sorted(latches.held) == [AlertKind.GAP]  # the other kind stays latched
    assert latches.acknowledge(ack, T0 + 7000) is None  # applying the log again changes nothing
    again = latches.latch(alert(AlertKind.CHAIN_BREAK, 30), T0 + 8000)
    assert again is not None and again.id != ack.latch
    assert latches.acknowledge(ack, T0 + 9000) is None  # the old ack does not cover the new latch
    assert AlertKind.CHAIN_BREAK in latches.held


def test_findings_after_the_ack_was_written_stay_latched_as_a_new_latch() -> None:
    latches = PartitionLatches(TOPIC, 0)
    latches.latch(alert(AlertKind.MAC_MISMATCH, 7), T0)
    ack = ack_of(latches, AlertKind.MAC_MISMATCH)
    latches.latch(alert(AlertKind.MAC_MISMATCH, 11), T0 + 1)  # the follower found another meanwhile
    latches.latch(alert(AlertKind.MAC_MISMATCH, 12), T0 + 2)
    cleared = latches.acknowledge(ack, T0 + 3)
    assert cleared is not None and cleared.findings == 3
    renewed = latches.held[AlertKind.MAC_MISMATCH]
    assert renewed.id != ack.latch and renewed.findings == 2 and renewed.first["offset"] == 12 and renewed.since_ms == T0 + 3


def test_acking_what_is_not_latched_or_acked_already_or_without_a_reason_is_refused() -> None:
    latches = PartitionLatches(TOPIC, 3)
    with pytest.raises(NotLatched, match=r"no chain_break finding is latched on p.audit\[3\]"):
        ack_of(latches, AlertKind.CHAIN_BREAK)
    latches.latch(alert(AlertKind.CHAIN_BREAK, 7, partition=3), T0)
    with pytest.raises(NotLatched, match="--reason is empty"):
        acknowledge(latches, AlertKind.CHAIN_BREAK, by="alice", reason="  ", now_ms=T0, log=[])
    with pytest.raises(NotLatched, match="--by is empty"):
        acknowledge(latches, AlertKind.CHAIN_BREAK, by="", reason="why", now_ms=T0, log=[])
    first = ack_of(latches, AlertKind.CHAIN_BREAK)
    assert pending(latches, [first]) == []
    with pytest.raises(NotLatched, match="acknowledged already \\(by alice at 2023-11-14T22:13:25.000Z\\)"):
        ack_of(latches, AlertKind.CHAIN_BREAK, [first])
    latches.latch(alert(AlertKind.CHAIN_BREAK, 8, partition=3), T0 + 1)  # a finding the first ack did not cover
    assert [latch.kind for latch in pending(latches, [first])] == [AlertKind.CHAIN_BREAK]
    assert ack_of(latches, AlertKind.CHAIN_BREAK, [first]).findings == 2


# -- the files ------------------------------------------------------------------------------------------


def test_latch_files_round_trip_atomically_and_a_state_without_them_has_no_latch(tmp_path: Path) -> None:
    store = LatchStore(tmp_path / "state")
    assert store.load(TOPIC, 0).held == {} and store.partitions(TOPIC) == []
    latches = PartitionLatches(TOPIC, 2)
    latches.latch(alert(AlertKind.HISTORY_REWRITTEN, 40, partition=2, expected="sha256:00"), T0)
    store.save(latches)
    (tmp_path / "state" / "p.audit.2.json").write_text("{}")  # a checkpoint beside it is not a latch file
    assert [p.name for p in sorted((tmp_path / "state").iterdir())] == ["p.audit.2.json", "p.audit.2.latches.json"]
    loaded = store.load(TOPIC, 2)
    assert loaded.to_json() == latches.to_json()
    assert store.partitions(TOPIC) == [2] and store.partitions("q.audit") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "is not a latch file"),
        ('{"format": "other"}', "is not a latch file"),
        (
            '{"format": "bernstein.audit-follow-latches/v1", "topic": "p.audit", "partition": 0, "latches": [{"kind": "gap"}]}',
            "is not a latch file",
        ),
        ('{"format": "bernstein.audit-follow-latches/v1", "topic": "p.audit", "partition": 1, "latches": []}', r"p.audit\[1\]"),
    ],
)
def test_an_unreadable_latch_file_is_a_typed_error(tmp_path: Path, text: str, message: str) -> None:
    store = LatchStore(tmp_path)
    store.path(TOPIC, 0).write_text(text)
    with pytest.raises(LatchError, match=message):
        store.load(TOPIC, 0)


def test_the_ack_log_appends_lines_and_names_a_bad_one(tmp_path: Path) -> None:
    log = AckLog(tmp_path / "state")
    assert log.read() == [] and log.stamp() is None
    latches = PartitionLatches(TOPIC, 0)
    latches.latch(alert(AlertKind.GAP, 3), T0)
    ack = ack_of(latches, AlertKind.GAP)
    log.append(ack)
    stamp = log.stamp()
    log.append(ack)
    assert log.read() == [ack, ack] and log.stamp() != stamp
    assert (tmp_path / "state" / ACK_LOG).stat().st_mode & 0o077 == 0
    with (tmp_path / "state" / ACK_LOG).open("a") as handle:
        handle.write('{"format": "bernstein.audit-ack/v1"}\n')
    with pytest.raises(LatchError, match="line 3 is not an ack"):
        log.read()


# -- the follower's bookkeeping and gauge (no Kafka: the parts that do not consume) ----------------------


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def follower(state: Path, notices: list[dict[str, Any]], clock: list[float]) -> Follower:
    options = FollowOptions(
        bootstrap="127.0.0.1:9",
        topics=Topics("p"),
        store=CheckpointStore(state),
        group="p.audit-follow",
        policy=Policy(silent_after_ms=None),
    )
    return Follower(options, lambda: cast(Any, None), lambda _a: None, notice=notices.append, clock=lambda: clock[0])


def gauge(f: Follower) -> dict[tuple[str, str, str], float]:
    text = generate_latest(FollowerMetrics(f).registry).decode()
    return {
        (s.labels["prefix"], s.labels["partition"], s.labels["kind"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "bernstein_audit_tamper_latched"
    }


@pytest.fixture
def closing() -> Iterator[list[Follower]]:
    made: list[Follower] = []
    yield made
    for f in made:
        f._writer.close()


def test_a_latch_survives_a_restart_and_an_ack_clears_its_gauge_at_the_next_tick(
    state: Path, closing: list[Follower], capsys: pytest.CaptureFixture[str]
) -> None:
    notices: list[dict[str, Any]] = []
    clock = [T0 / 1000]
    first = follower(state, notices, clock)
    closing.append(first)
    first._load_latches(0)  # what opening partition 0 does
    assert gauge(first) == {("p", "0", k.value): 0 for k in TAMPER}  # every tamper kind served, 0 until latched
    first._emit([alert(AlertKind.CHAIN_BREAK, 7), alert(AlertKind.DEADLETTER, 8)])
    first._flush_latches()
    assert gauge(first)[("p", "0", "chain_break")] == 1 and sum(gauge(first).values()) == 1
    assert [(n["event"], n["kind"], n["first_offset"]) for n in notices] == [("latched", "chain_break", 7)]
    assert notices[0]["ack"] == (f"bernstein audit ack --prefix p --state {state} --partition 0 --kind chain_break --reason TEXT")

    # a restart: the latch comes back from the state directory, announced
    notices.clear()
    second = follower(state, notices, clock)
    closing.append(second)
    second._load_latches(0)
    assert gauge(second)[("p", "0", "chain_break")] == 1
    assert [(n["event"], n["kind"], n["findings"]) for n in notices] == [("latch_held", "chain_break", 1)]

    # the operator acknowledges it by partition and kind
    notices.clear()
    args = ["audit", "ack", "--prefix", "p", "--state", str(state), "--partition", "0", "--kind", "chain_break"]
    assert main([*args, "--reason", "replaced record restored from export", "--by", "bob"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["by"], printed["kind"], printed["partition"], printed["findings"]) == ("bob", "chain_break", 0, 1)
    assert printed["evidence"]["first"]["offset"] == 7
    assert [json.loads(line) for line in (state / ACK_LOG).read_text().splitlines()] == [printed]
    assert gauge(second)[("p", "0", "chain_break")] == 1  # until the follower's next tick
    second._tick()
    second._flush_latches()
    assert gauge(second)[("p", "0", "chain_break")] == 0
    assert [(n["event"], n["by"], n["reason"]) for n in notices] == [
        ("latch_acknowledged", "bob", "replaced record restored from export")
    ]
    assert LatchStore(state).load(TOPIC, 0).held == {}

    # acking it again is a usage error that says what is latched; a new finding latches again
    assert main([*args, "--reason", "again"]) == 3
    err = capsys.readouterr().err
    assert "no chain_break finding is latched on p.audit[0]" in err and "nothing is latched in" in err
    assert "Traceback" not in err
    second._emit([alert(AlertKind.CHAIN_BREAK, 50)])
    second._flush_latches()
    assert gauge(second)[("p", "0", "chain_break")] == 1
    third = follower(state, [], clock)
    closing.append(third)
    third._load_latches(0)  # the old ack in the log does not clear the new latch
    assert gauge(third)[("p", "0", "chain_break")] == 1


def test_a_history_rewrite_latches_before_its_checkpoint_is_discarded(state: Path, closing: list[Follower]) -> None:
    from bernstein.verifier.follow.checker import ChainState
    from bernstein.verifier.follow.checkpoint import Checkpoint, value_digest

    f = follower(state, [], [T0 / 1000])
    closing.append(f)
    store = CheckpointStore(state)
    checkpoint = Checkpoint(TOPIC, 1, 9, value_digest(b"x"), 10, ChainState(next_seq=10))
    store.save(checkpoint)
    f._rewritten(checkpoint, "has vanished")
    assert store.load(TOPIC, 1) is None
    held = LatchStore(state).load(TOPIC, 1).held
    assert list(held) == [AlertKind.HISTORY_REWRITTEN]
    assert held[AlertKind.HISTORY_REWRITTEN].first["expected"] == value_digest(b"x")


def test_ack_and_latches_commands_name_what_is_latched(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--prefix", "p", "--state", str(state)]
    assert main(["audit", "ack", *base, "--partition", "0", "--kind", "gap", "--reason", "r"]) == 3
    assert "no follower state directory" in capsys.readouterr().err
    store = LatchStore(state)
    for partition, kind in ((0, AlertKind.GAP), (2, AlertKind.MAC_MISMATCH)):
        latches = store.load(TOPIC, partition)
        latches.latch(alert(kind, 4, partition=partition), T0)
        store.save(latches)
    assert main(["audit", "latches", *base]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(x["partition"], x["kind"], x["findings"]) for x in listed] == [(0, "gap", 1), (2, "mac_mismatch", 1)]
    assert listed[1]["ack"].endswith("--partition 2 --kind mac_mismatch --reason TEXT")
    assert main(["audit", "ack", *base, "--partition", "0", "--kind", "mac_mismatch", "--reason", "r"]) == 3
    err = capsys.readouterr().err
    assert f"latched in {state}: partition 0 gap, partition 2 mac_mismatch" in err
    assert main(["audit", "ack", *base, "--partition", "0", "--kind", "deadletter", "--reason", "r"]) == 3
    assert "--kind deadletter: not a kind that latches" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # --reason is required (argparse's usage error)
        main(["audit", "ack", *base, "--partition", "0", "--kind", "gap"])
    assert exited.value.code == 3
    assert "--reason" in capsys.readouterr().err
    assert main(["audit", "ack", *base, "--partition", "0", "--kind", "gap", "--reason", "checked: DeleteRecords by ops"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "gap"
    assert main(["audit", "latches", *base]) == 0
    assert [json.loads(line)["partition"] for line in capsys.readouterr().out.splitlines()] == [2]


def test_by_defaults_to_the_user_behind_sudo_else_the_login(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = LatchStore(state)
    latches = store.load(TOPIC, 0)
    latches.latch(alert(AlertKind.GAP, 4), T0)
    latches.latch(alert(AlertKind.CHAIN_BREAK, 5), T0)
    store.save(latches)
    monkeypatch.setenv("SUDO_USER", "carol")
    assert (
        main(["audit", "ack", "--prefix", "p", "--state", str(state), "--partition", "0", "--kind", "gap", "--reason", "r"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["by"] == "carol"
    monkeypatch.delenv("SUDO_USER")
    monkeypatch.setenv("LOGNAME", "dave")
    args = ["audit", "ack", "--prefix", "p", "--state", str(state), "--partition", "0", "--kind", "chain_break"]
    assert main([*args, "--reason", "r"]) == 0
    assert json.loads(capsys.readouterr().out)["by"] == "dave"


# -- runbook URLs from one base ---------------------------------------------------------------------------


def test_the_shipped_rules_link_every_runbook_under_the_default_base() -> None:
    text = (ROOT / "ops" / "prometheus" / "alerts.yml").read_text(encoding="utf-8")
    urls = runbook_urls(text)
    assert len(urls) == len(re.findall(r"^\s+runbook_url:", text, flags=re.M)) >= 20
    assert {base for base, _ in urls} == {DEFAULT_RUNBOOK_BASE}
    assert DEFAULT_RUNBOOK_BASE.startswith("https://")


def test_rules_with_another_runbook_base_change_only_the_links(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "ops" / "prometheus" / "alerts.yml").read_text(encoding="utf-8")
    base = "https://wiki.example.org/ops/bernstein-runbook"
    assert main(["audit", "rules", "--runbook-base", base]) == 0
    out = capsys.readouterr().out
    assert out == rebase(text, base)
    assert {b for b, _ in runbook_urls(out)} == {base}
    assert [a for _, a in runbook_urls(out)] == [a for _, a in runbook_urls(text)]
    assert out.replace(base, DEFAULT_RUNBOOK_BASE) == text
    assert main(["audit", "rules", "--runbook-base", base, "--out", str(tmp_path / "alerts.yml")]) == 0
    assert (tmp_path / "alerts.yml").read_text() == out
    for bad in ("docs/operations.md", "https://x.example/a#b", "ftp://x.example/a", 'https://x.example/"a'):
        assert main(["audit", "rules", "--runbook-base", bad]) == 3
        assert "--runbook-base" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not an absolute"):
        check_base("/runbooks")
    with pytest.raises(ValueError, match="not of the form"):
        rebase('      runbook_url: "x#a"\n      runbook_url: docs#b\n', base)
