"""The shipped alert rules and Grafana dashboard name only metrics that exist.

``ops/prometheus/alerts.yml`` and ``ops/grafana/bernstein.json`` are checked against the
metrics ``consumers/metrics.py`` serves (read from a live registry, every conditional family
present) and the audit follower's (``FOLLOWER_METRICS``, itself checked against what
``verifier/follow/metrics.py`` serves). Every alert carries severity, summary,
description and a runbook anchor that exists in docs/operations.md, covers the follower's
alert kinds, and has promtool unit tests where it fires and where it does not (promtool
itself runs them: scripts/promtool.sh). No YAML library is installed: the rules file is read
with the small line parser below, which fails loudly on a layout it does not know.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bernstein.consumers.metrics import SchedulerMetrics
from bernstein.verifier.follow.alerts import AlertKind
from bernstein.verifier.follow.consumer import Follower
from bernstein.verifier.follow.latch import TAMPER
from bernstein.verifier.follow.metrics import FollowerMetrics
from bernstein.verifier.follow.rules import DEFAULT_RUNBOOK_BASE
from tests.support.metrics import FollowerTallies

ROOT: Final = Path(__file__).resolve().parents[2]
RULES: Final = ROOT / "ops" / "prometheus" / "alerts.yml"
RULE_TESTS: Final = ROOT / "ops" / "prometheus" / "tests"
DASHBOARD: Final = ROOT / "ops" / "grafana" / "bernstein.json"
OPERATIONS: Final = ROOT / "docs" / "operations.md"

# The audit follower's metrics (`bernstein audit follow --metrics-port`), sample names as
# scraped; test_the_follower_list_is_what_the_follower_serves keeps it equal to the follower's.
FOLLOWER_METRICS: Final = frozenset(
    {
        "bernstein_audit_records_verified_total",  # counter {prefix, partition}
        "bernstein_audit_alerts_total",  # counter {prefix, kind}: kind = verifier.follow.alerts.AlertKind
        "bernstein_audit_last_record_timestamp_seconds",  # gauge {prefix, partition}: the record's Kafka timestamp
        "bernstein_audit_lag_records",  # gauge {prefix, partition}
        "bernstein_audit_ready",  # gauge {prefix}
        "bernstein_audit_tamper_latched",  # gauge {prefix, partition, kind}: kind = verifier.follow.latch.TAMPER
        "bernstein_audit_log_leaves",  # gauge {prefix, partition}: --witness only
        "bernstein_audit_log_cosigned_size",  # gauge {prefix, partition}: --witness only
        "bernstein_audit_log_heads_waiting",  # gauge {prefix, partition}: --witness only
        "bernstein_audit_log_heads_unjudged",  # gauge {prefix, partition}: --witness only
    }
)
# What an exporter of Kafka's own consumer-group offsets serves (kafka_exporter, github.com/danielqsj/kafka_exporter):
# the example rule on the scheduler group's lag reads these, so that lag shows while no scheduler runs.
EXPORTER_METRICS: Final = frozenset({"kafka_consumergroup_lag", "kafka_consumergroup_current_offset"})
EXPORTER_NAME: Final = re.compile(r"\b(kafka_[a-z0-9_]+)\b")
SEVERITIES: Final = frozenset({"critical", "warning"})
METRIC_NAME: Final = re.compile(r"\b(bernstein_[a-z0-9_]+)\b")
RECORDED_NAME: Final = re.compile(r"\b(bernstein:[a-z0-9_:]+)")


def scheduler_metrics() -> frozenset[str]:
    """Every sample name the scheduler's registry serves, each conditional family made present."""
    from tests.support.shells import offline_shell

    shell = offline_shell()
    metrics = SchedulerMetrics(shell, "python reference")
    c = shell.counters
    c.next_offset, c.high_watermark, c.last_seal_time, c.rebuilds = 1, 2, 3.0, 1
    c.refused_codes["X"] = c.dead_letter_codes["Y"] = 1
    text = generate_latest(metrics.registry).decode()
    return frozenset(s.name for family in text_string_to_metric_families(text) for s in family.samples)


KNOWN: Final = scheduler_metrics() | FOLLOWER_METRICS


@dataclass
class Rule:
    name: str
    is_alert: bool
    expr: str = ""
    has_for: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"')
    return value


def parse_rules(text: str) -> list[Rule]:
    """The rules of alerts.yml: `- alert:`/`- record:` items with expr (one line or `|` block), for, labels, annotations."""
    rules: list[Rule] = []
    section = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if m := re.fullmatch(r"      - (alert|record): (\S+)", line):
            rules.append(Rule(m[2], m[1] == "alert"))
            section = ""
            continue
        if re.fullmatch(r"groups:|  - name: \S+|    rules:", line):
            continue
        assert rules, f"alerts.yml: line {i} outside a rule: {line!r}"
        rule = rules[-1]
        if m := re.fullmatch(r"        expr: \|", line):
            block = []
            while i < len(lines) and (lines[i].startswith("          ") or not lines[i].strip()):
                block.append(lines[i].strip())
                i += 1
            rule.expr = " ".join(b for b in block if b)
        elif m := re.fullmatch(r"        expr: (.+)", line):
            rule.expr = m[1]
        elif re.fullmatch(r"        for: \d+[smh]", line):
            rule.has_for = True
        elif m := re.fullmatch(r"        (labels|annotations):", line):
            section = m[1]
        elif (m := re.fullmatch(r"          ([a-z_]+): (.+)", line)) and section:
            getattr(rule, section)[m[1]] = _unquote(m[2])
        else:
            raise AssertionError(f"alerts.yml: line {i} has a layout this parser does not know: {line!r}")
    return rules


RULE_LIST: Final = parse_rules(RULES.read_text(encoding="utf-8"))
ALERTS: Final = [r for r in RULE_LIST if r.is_alert]
RECORDED: Final = frozenset(r.name for r in RULE_LIST if not r.is_alert)


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (lower case, punctuation dropped, spaces to -)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not (m := re.match(r"#{1,6} (.+)", line)):
            continue
        slug = re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_the_parser_read_every_rule_of_the_file() -> None:
    text = RULES.read_text(encoding="utf-8")
    assert len(ALERTS) == len(re.findall(r"^\s+- alert: ", text, flags=re.M)) >= 20
    assert len(RECORDED) == len(re.findall(r"^\s+- record: ", text, flags=re.M))
    assert all(r.expr for r in RULE_LIST)
    assert len({r.name for r in RULE_LIST}) == len(RULE_LIST), "duplicate rule names"


def test_the_parser_refuses_a_layout_it_does_not_know() -> None:
    with pytest.raises(AssertionError, match="layout"):
        parse_rules("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        keep_firing_for: 5m\n")


@pytest.mark.parametrize("rule", RULE_LIST, ids=lambda r: r.name)
def test_every_rule_names_only_metrics_that_are_served(rule: Rule) -> None:
    names = set(METRIC_NAME.findall(rule.expr))
    exported = set(EXPORTER_NAME.findall(rule.expr))
    assert names or exported or RECORDED_NAME.search(rule.expr) or "up{" in rule.expr, rule.expr
    assert names <= KNOWN, f"{rule.name} names metrics nothing serves: {sorted(names - KNOWN)}"
    assert exported <= EXPORTER_METRICS, f"{rule.name} names exporter metrics not listed: {sorted(exported - EXPORTER_METRICS)}"
    assert set(RECORDED_NAME.findall(rule.expr)) <= RECORDED


def test_the_follower_list_is_what_the_follower_serves() -> None:
    """FOLLOWER_METRICS equals the bernstein_ samples of verifier/follow/metrics.py: it cannot drift."""
    registry = FollowerMetrics(cast(Follower, FollowerTallies())).registry
    text = generate_latest(registry).decode()
    families = list(text_string_to_metric_families(text))
    served = {s.name for family in families for s in family.samples if s.name.startswith("bernstein_")}
    assert served == FOLLOWER_METRICS
    unlabelled = [s for f in families for s in f.samples if s.name.startswith("bernstein_") and s.labels.get("prefix") != "p"]
    assert unlabelled == [], "every follower sample carries the deployment's prefix"
    kinds = {s.labels["kind"]: s.value for f in families for s in f.samples if s.name == "bernstein_audit_alerts_total"}
    assert kinds == {k.value: (1 if k.value == "gap" else 0) for k in AlertKind}  # every kind from 0: rules see the first one
    latched = {
        (s.labels["prefix"], s.labels["partition"], s.labels["kind"]): s.value
        for f in families
        for s in f.samples
        if s.name == "bernstein_audit_tamper_latched"
    }
    assert latched == {("p", "0", k.value): (1 if k is AlertKind.CHAIN_BREAK else 0) for k in TAMPER}


def test_the_known_metric_list_catches_a_misspelt_name() -> None:
    """The check is not vacuous: the scheduler's real names are in, near misses are out."""
    assert "bernstein_scheduler_consumer_lag_records" in KNOWN
    assert "bernstein_scheduler_transaction_duration_seconds_bucket" in KNOWN
    assert "bernstein_scheduler_core_info" in KNOWN
    assert "bernstein_scheduler_consumer_lag" not in KNOWN
    assert "bernstein_scheduler_last_seal_age_seconds" not in KNOWN


@pytest.mark.parametrize("alert", ALERTS, ids=lambda r: r.name)
def test_every_alert_has_severity_summary_description_and_a_runbook_that_exists(alert: Rule) -> None:
    assert alert.name.startswith("Bernstein")
    assert alert.labels.get("severity") in SEVERITIES
    assert set(alert.annotations) == {"summary", "description", "runbook_url"}
    assert all(len(alert.annotations[k]) > 20 for k in ("summary", "description"))
    doc, _, anchor = alert.annotations["runbook_url"].partition("#")
    assert doc == DEFAULT_RUNBOOK_BASE and doc.startswith("https://"), "absolute, under the one base (audit rules)"
    assert DEFAULT_RUNBOOK_BASE.endswith("/docs/operations.md")
    assert anchor == alert.name.lower(), "one runbook heading per alert, named as the alert"
    assert anchor in github_anchors(OPERATIONS.read_text(encoding="utf-8"))


def test_the_anchor_rule_matches_githubs() -> None:
    anchors = github_anchors("# Operations\n## Following the audit topic: `bernstein audit follow`\n## A b\n## A b\n")
    assert anchors == {"operations", "following-the-audit-topic-bernstein-audit-follow", "a-b", "a-b-1"}


def test_every_follower_alert_kind_has_an_alert() -> None:
    """Each kind `audit follow` raises is selected by exactly one alert; no rule names a kind that does not exist.
    The tamper kinds are selected on the latch gauge (they fire until acknowledged), the others on the alert counts."""
    selected: list[str] = []
    for alert in ALERTS:
        for op, value in re.findall(r'kind(=~?)"([^"]+)"', alert.expr):
            selected += value.split("|") if op == "=~" else [value]
    assert sorted(selected) == sorted(k.value for k in AlertKind)
    for alert in ALERTS:
        for _, value in re.findall(r'kind(=~?)"([^"]+)"', alert.expr):
            latched = {AlertKind(k) for k in value.split("|")} <= TAMPER
            assert latched == alert.expr.startswith("bernstein_audit_tamper_latched{"), alert.name
            assert not latched or (alert.expr.endswith("== 1") and not alert.has_for), alert.name


def _rule_tests() -> dict[str, dict[str, int]]:
    """Per alert name, how many promtool cases expect it firing and how many expect it silent."""
    counts: dict[str, dict[str, int]] = {}
    for path in sorted(RULE_TESTS.glob("*.yml")):
        text = path.read_text(encoding="utf-8")
        assert re.search(r"^rule_files:\n  - \.\./alerts\.yml$", text, flags=re.M), path
        for name, expected in re.findall(r"alertname: (\S+)\n\s+exp_alerts:( \[\]|\n)", text):
            slot = counts.setdefault(name, {"fires": 0, "silent": 0})
            slot["silent" if expected == " []" else "fires"] += 1
    return counts


def test_every_alert_has_promtool_tests_where_it_fires_and_where_it_does_not() -> None:
    counts = _rule_tests()
    names = {a.name for a in ALERTS}
    assert set(counts) == names, f"untested: {sorted(names - set(counts))}, unknown: {sorted(set(counts) - names)}"
    for name, slot in sorted(counts.items()):
        assert slot["fires"] >= 1 and slot["silent"] >= 1, (name, slot)


def test_the_docs_section_lists_every_alert() -> None:
    doc = OPERATIONS.read_text(encoding="utf-8")
    section = doc.split("## Alert rules and dashboard", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^#### (Bernstein\w+)$", section, flags=re.M))
    assert documented == {a.name for a in ALERTS}


# The dashboard.


def _dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def test_the_dashboard_provisions_from_a_file() -> None:
    """No import-time inputs (file provisioning leaves them unresolved): a data-source variable instead, which every
    panel and query uses (tests/unit/test_grafana_dashboard.py checks the shape against Grafana's schema)."""
    d = _dashboard()
    assert d["schemaVersion"] >= 39
    assert d["uid"] == "bernstein-ops" and d["title"]
    assert "__inputs" not in d and "__requires" not in d
    assert "${DS_" not in DASHBOARD.read_text(encoding="utf-8")
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    assert variables["prefix"]["type"] == "query" and not variables["prefix"].get("includeAll")
    source = {"type": "prometheus", "uid": "${datasource}"}
    panels = _panels(d)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for p in panels:
        if p["type"] == "row":
            continue
        assert p["datasource"] == source, p["title"]
        assert p["targets"] and all(t["datasource"] == source and t["expr"] for t in p["targets"]), p["title"]
        assert p.get("description"), p["title"]


def test_the_dashboard_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in _panels(_dashboard()):
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def _exprs(d: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in _panels(d) for t in p.get("targets", [])]
    exprs += [v["definition"] for v in d["templating"]["list"] if v.get("definition")]
    return exprs


def test_every_dashboard_expression_names_only_served_metrics() -> None:
    for expr in _exprs(_dashboard()):
        names = set(METRIC_NAME.findall(expr))
        assert names, expr
        assert names <= KNOWN, f"{expr!r} names metrics nothing serves: {sorted(names - KNOWN)}"


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    """Throughput, refusals by code, dead letters, lag, latency quantiles, seal age, core, audit verified, alerts by kind."""
    exprs = _exprs(_dashboard())
    joined = "\n".join(exprs)
    for needed in (
        "bernstein_scheduler_records_consumed_total",
        "sum by (code) (rate(bernstein_scheduler_records_refused_total",
        "bernstein_scheduler_records_dead_lettered_total",
        "bernstein_scheduler_consumer_lag_records",
        "histogram_quantile(0.99, sum by (le) (rate(bernstein_scheduler_transaction_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(bernstein_scheduler_commit_duration_seconds_bucket",
        "time() - bernstein_scheduler_last_seal_timestamp_seconds",
        "bernstein_scheduler_core_info",
        "rate(bernstein_audit_records_verified_total",
        "sum by (kind) (increase(bernstein_audit_alerts_total",
        "bernstein_audit_lag_records",
    ):
        assert needed in joined, needed
    served_families = {n for n in KNOWN if n.startswith("bernstein_")}
    shown = set(METRIC_NAME.findall(joined))
    # every bernstein metric family is on the dashboard (histograms through _bucket or _sum/_count)
    families = {re.sub(r"_(bucket|sum|count|created)$", "", n) for n in served_families if not n.endswith("_created")}
    shown_families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in shown}
    assert families - shown_families <= {
        "bernstein_scheduler_input_high_watermark",
        "bernstein_scheduler_input_committed_offset",
        "bernstein_scheduler_rebuilds_total",
    }


# Deployments: every bernstein_ sample carries the topic prefix.


def _own_metric_alerts() -> list[Rule]:
    """The alerts on bernstein's own metrics (not Prometheus' `up`, not kafka_exporter's)."""
    return [a for a in ALERTS if METRIC_NAME.search(a.expr) or RECORDED_NAME.search(a.expr)]


def test_alerts_on_bernstein_metrics_name_the_deployment_and_match_on_its_prefix() -> None:
    """Every summary names the prefix; every `on`/`by`/`ignoring` clause over bernstein metrics keeps it, so two
    deployments scraped by one Prometheus (even under one instance label) are never matched with each other."""
    own = _own_metric_alerts()
    assert len(own) >= 15
    for alert in own:
        assert "{{ $labels.prefix }}" in alert.annotations["summary"], alert.name
    for rule in RULE_LIST:
        if not (METRIC_NAME.search(rule.expr) or RECORDED_NAME.search(rule.expr)):
            continue
        assert not re.search(r"\b(without|ignoring)\s*\(", rule.expr), rule.name
        for clause in re.findall(r"\b(?:on|by)\s*\(([^)]*)\)", rule.expr):
            assert "prefix" in {label.strip() for label in clause.split(",")}, (rule.name, clause)


def test_every_bernstein_series_of_the_promtool_tests_carries_a_prefix() -> None:
    """The rule tests feed series shaped as the processes serve them: with the prefix label."""
    series = [
        s for path in sorted(RULE_TESTS.glob("*.yml")) for s in re.findall(r"- series: '(bernstein_[^']+)'", path.read_text())
    ]
    assert len(series) >= 40
    assert [s for s in series if not re.search(r'[{,]\s*prefix="[^"]+"', s)] == []
    prefixes = {re.search(r'prefix="([^"]+)"', s)[1] for s in series}  # type: ignore[index]
    assert prefixes >= {"prod", "staging"}, "a test with two deployments on one Prometheus"


# The follower's metrics port: one number everywhere.


def test_the_followers_metrics_port_is_one_documented_default() -> None:
    from bernstein.verifier.follow.metrics import DEFAULT_PORT

    unit = (ROOT / "ops" / "systemd" / "bernstein-audit-follow.service").read_text(encoding="utf-8")
    assert re.findall(r"--metrics-port (\d+)", unit) == [str(DEFAULT_PORT)]
    group = (ROOT / "ops" / "systemd" / "bernstein-scheduler-group.service").read_text(encoding="utf-8")
    assert str(DEFAULT_PORT) not in re.findall(r"--metrics-port (\d+)", group)
    docs = OPERATIONS.read_text(encoding="utf-8")
    assert f"**{DEFAULT_PORT} for the audit follower**" in docs
    assert f"metrics on {DEFAULT_PORT};" in docs  # the units' table
    scrape = docs.split("job_name: bernstein-audit-follow", 1)[1].split("\n", 2)[1]
    assert re.findall(r'"[\w.-]+:(\d+)"', scrape) == [str(DEFAULT_PORT)], scrape
    instances = {
        port for path in RULE_TESTS.glob("*.yml") for port in re.findall(r'instance="follow[\w-]*:(\d+)"', path.read_text())
    }
    assert instances == {str(DEFAULT_PORT)}


# Packaging: the installed package carries the rules `bernstein audit rules` prints.


def test_the_wheel_carries_the_rules_that_audit_rules_reads(tmp_path: Path) -> None:
    import subprocess
    import sys
    import zipfile

    uv = ROOT / ".infra" / "uv" / "bin" / "uv"
    if not uv.is_file():
        pytest.skip("no .infra/uv/bin/uv (make venv installs it)")
    built = subprocess.run(
        [str(uv), "build", "--wheel", "--quiet", "--out-dir", str(tmp_path / "dist"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("bernstein_journal-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("bernstein/verifier/follow/alerts.yml") == RULES.read_bytes()
        archive.extractall(tmp_path / "site")
    # the installed code finds its own copy, from a directory that is not a checkout
    probe = "import bernstein.verifier.follow.rules as r; print(r.__file__); print(r.shipped_rules())"
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    module, rules = found.stdout.splitlines()
    assert Path(module).parent == tmp_path / "site" / "bernstein" / "verifier" / "follow"
    assert Path(rules) == tmp_path / "site" / "bernstein" / "verifier" / "follow" / "alerts.yml"
