"""``ops/grafana/bernstein.json`` against Grafana's published dashboard JSON schema, and its provisionable shape.

No Grafana runs here, so the dashboard is validated against the dashboard schema the Grafana Foundation
SDK publishes (``tests/data/grafana-dashboard.schema.json``; ``tests/data/README.md`` names the release).
That schema allows no unknown property anywhere, so it refuses the import-only ``__inputs`` block, a
misspelt key, an out-of-grid position or a variable of an unknown type; the tests below show it
refusing each. Beyond the schema: every panel and query uses the ``datasource`` variable (file
provisioning resolves no ``__inputs``), and every query filters on the ``prefix`` variable, a label
that both the scheduler and the audit follower serve, so that two deployments on one Prometheus never
mix.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, cast

import pytest
from jsonschema import Draft7Validator
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bernstein.consumers.metrics import SchedulerMetrics
from bernstein.verifier.follow.consumer import Follower
from bernstein.verifier.follow.metrics import FollowerMetrics

ROOT: Final = Path(__file__).resolve().parents[2]
DASHBOARD: Final = ROOT / "ops" / "grafana" / "bernstein.json"
SCHEMA: Final = ROOT / "tests" / "data" / "grafana-dashboard.schema.json"
SCHEMA_SHA256: Final = "67451cd5b288f97e3f68eccd52ffa4f75151fc87c669b8cd93c051056b294265"
PROVISIONING: Final = ROOT / "ops" / "grafana" / "provisioning"
OPERATIONS: Final = ROOT / "docs" / "operations.md"
SOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
PREFIX_FILTER: Final = 'prefix="$prefix"'
# Grafana's own variables a query may use without defining them
BUILTINS: Final = frozenset({"__rate_interval", "__interval", "__range", "__all"})


def _dashboard() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(DASHBOARD.read_text(encoding="utf-8")))


def _validator() -> Draft7Validator:
    return Draft7Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))


def _errors(dashboard: dict[str, Any]) -> list[str]:
    """Every schema error, as 'path: message' (a oneOf's own errors included: they say which branch failed)."""
    out = []
    for error in sorted(_validator().iter_errors(dashboard), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(map(str, error.absolute_path)) or "(top)"
        out.append(f"{where}: {error.message[:300]}")
        out += [f"    {'/'.join(map(str, c.absolute_path))}: {c.message[:200]}" for c in error.context or ()]
    return out


def _panels(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for top in d["panels"] for p in (top, *top.get("panels", []))]


def _variables(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in d["templating"]["list"]}


def _queries(d: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    out = [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in _panels(d) for t in p.get("targets", [])]
    out += [(f"variable {v['name']}", v["query"]) for v in d["templating"]["list"] if v["type"] == "query"]
    return out


# -- the schema ----------------------------------------------------------------------------------


def test_the_vendored_schema_is_the_published_file_and_a_valid_draft_7_schema() -> None:
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256, "tests/data/README.md: replaced or edited"
    assert SCHEMA_SHA256 in (ROOT / "tests" / "data" / "README.md").read_text(encoding="utf-8")
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    Draft7Validator.check_schema(schema)
    assert schema["$ref"] == "#/definitions/Dashboard"
    assert schema["definitions"]["Dashboard"]["additionalProperties"] is False


def test_the_dashboard_validates_against_grafanas_dashboard_schema() -> None:
    errors = _errors(_dashboard())
    assert errors == [], "\n".join(errors)


def _mutations() -> dict[str, Callable[[dict[str, Any]], None]]:
    def panel(d: dict[str, Any]) -> dict[str, Any]:
        return next(p for p in d["panels"] if p["type"] != "row")

    return {
        # the shape this file had before: an import-time input that file provisioning leaves unresolved
        "import-time __inputs": lambda d: d.update(__inputs=[{"name": "DS_PROMETHEUS", "type": "datasource"}]),
        "variable query as an editor object": lambda d: _variables(d)["prefix"].update(
            query={"query": "label_values(bernstein_audit_ready, prefix)", "refId": "A"}
        ),
        "misspelt panel key": lambda d: panel(d).update(datasources=SOURCE),
        "panel wider than the grid": lambda d: panel(d)["gridPos"].update(w=25),
        "unknown variable type": lambda d: _variables(d)["datasource"].update(type="datasources"),
        "crosshair mode out of range": lambda d: d.update(graphTooltip=3),
        "no templating": lambda d: d.pop("templating"),
        "data source ref with a name": lambda d: panel(d)["datasource"].update(name="Prometheus"),
    }


@pytest.mark.parametrize("mutation", sorted(_mutations()))
def test_the_schema_check_refuses_what_grafanas_schema_does_not_allow(mutation: str) -> None:
    """The validation is not vacuous: each of these, made to a copy of the dashboard, is an error."""
    d = copy.deepcopy(_dashboard())
    _mutations()[mutation](d)
    assert _errors(d), mutation


# -- provisionable: the data source is a variable ---------------------------------------------------


def _datasource_refs(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(where, value) of every ``datasource`` key anywhere in the dashboard."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield f"{path}/{key}", value
            yield from _datasource_refs(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _datasource_refs(item, f"{path}/{i}")


def test_every_panel_query_and_variable_uses_the_datasource_variable() -> None:
    d = _dashboard()
    text = DASHBOARD.read_text(encoding="utf-8")
    assert "__inputs" not in d and "__requires" not in d and "${DS_" not in text
    variables = _variables(d)
    source = variables["datasource"]
    assert (source["type"], source["query"], source.get("multi", False), source.get("includeAll", False)) == (
        "datasource",
        "prometheus",
        False,
        False,
    )
    panels = [p for p in _panels(d) if p["type"] != "row"]
    assert len(panels) >= 15
    for p in panels:
        assert p["datasource"] == SOURCE, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == SOURCE, (p["title"], t["refId"])
    queried = [v for v in variables.values() if v["type"] == "query"]
    assert {v["name"] for v in queried} == {"prefix", "partition"}
    assert all(v["datasource"] == SOURCE for v in queried)
    # nothing else anywhere names a data source, but for Grafana's built-in annotations
    others = [(where, ref) for where, ref in _datasource_refs(d) if ref != SOURCE]
    assert others == [("/annotations/list/0/datasource", {"type": "grafana", "uid": "-- Grafana --"})]


# -- every query filters on the deployment's prefix ------------------------------------------------

NAME_SELECTOR: Final = re.compile(r"\{[^{}]*__name__[^{}]*\}")
METRIC: Final = re.compile(r"\b(bernstein_[a-z0-9_]+)\b(\{[^{}]*\})?")


def unfiltered(expr: str) -> list[str]:
    """The selectors of bernstein metrics in ``expr`` that do not match ``prefix="$prefix"``."""
    missing = [m[0] for m in NAME_SELECTOR.finditer(expr) if PREFIX_FILTER not in m[0]]
    rest = NAME_SELECTOR.sub("", expr)  # the names inside a __name__ matcher are checked with it
    missing += [m[0] for m in METRIC.finditer(rest) if PREFIX_FILTER not in (m[2] or "")]
    return missing


def test_the_filter_check_finds_a_query_that_mixes_deployments() -> None:
    assert unfiltered('sum(rate(bernstein_scheduler_seals_total{prefix="$prefix", partition=~"$partition"}[5m]))') == []
    assert unfiltered('label_values({__name__=~"bernstein_a|bernstein_b", prefix="$prefix"}, partition)') == []
    assert unfiltered("sum(rate(bernstein_scheduler_seals_total[5m]))") == ["bernstein_scheduler_seals_total"]
    assert unfiltered('bernstein_audit_ready{partition="1"}') == ['bernstein_audit_ready{partition="1"}']
    assert unfiltered('bernstein_audit_ready{prefix="prod"}') == ['bernstein_audit_ready{prefix="prod"}']
    assert unfiltered('label_values({__name__=~"bernstein_a|bernstein_b"}, partition)') == [
        '{__name__=~"bernstein_a|bernstein_b"}'
    ]
    assert unfiltered('a{prefix="$prefix"} / bernstein_b_total') == ["bernstein_b_total"]


def test_every_query_filters_on_the_prefix_variable() -> None:
    d = _dashboard()
    queries = _queries(d)
    assert len(queries) >= 25
    for where, expr in queries:
        if where == "variable prefix":
            continue  # the list of deployments itself
        assert METRIC.search(expr), (where, expr)
        assert unfiltered(expr) == [], f"{where}: {expr}"
    prefix = _variables(d)["prefix"]
    assert "$prefix" not in prefix["query"] and re.fullmatch(r"label_values\(.+, prefix\)", prefix["query"])
    assert prefix.get("definition", prefix["query"]) == prefix["query"]
    assert not prefix.get("multi") and not prefix.get("includeAll"), "one deployment at a time"


def test_every_variable_a_query_names_is_defined() -> None:
    d = _dashboard()
    defined = set(_variables(d)) | BUILTINS
    used = {
        m[1] or m[2]
        for _, text in [*_queries(d), *((where, str(ref)) for where, ref in _datasource_refs(d))]
        for m in re.finditer(r"\$\{(\w+)\}|\$(\w+)", text)
    }
    assert used <= defined, sorted(used - defined)
    assert {"datasource", "prefix", "partition"} <= used


def _served_labels() -> dict[str, set[str]]:
    """Per sample name, the labels the scheduler's and the follower's registries serve it with."""
    from tests.support.metrics import FollowerTallies
    from tests.support.shells import offline_shell

    shell = offline_shell()
    c = shell.counters
    c.next_offset, c.high_watermark, c.last_seal_time, c.rebuilds = 1, 2, 3.0, 1
    registries = [
        SchedulerMetrics(shell, "python reference").registry,
        FollowerMetrics(cast(Follower, FollowerTallies())).registry,
    ]
    labels: dict[str, set[str]] = {}
    for registry in registries:
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for sample in family.samples:
                labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def test_the_variables_read_labels_both_processes_serve() -> None:
    """The prefix list comes from a gauge of each process, both labelled prefix; the partition list likewise."""
    served = _served_labels()
    variables = _variables(_dashboard())
    for name, label in (("prefix", "prefix"), ("partition", "partition")):
        query = variables[name]["query"]
        assert query.endswith(f", {label})"), query
        metrics = re.findall(r"bernstein_[a-z0-9_]+", query)
        assert {m.split("_")[1] for m in metrics} == {"scheduler", "audit"}, query  # one of each process
        for metric in metrics:
            assert label in served[metric], (metric, served.get(metric))
    # and every bernstein sample either process serves has the prefix label the panels filter on
    assert all("prefix" in labels for name, labels in served.items() if name.startswith("bernstein_")), served


# -- the provisioning examples ---------------------------------------------------------------------


def _settings(path: Path) -> dict[str, str]:
    """The ``key: value`` lines of a small YAML file (comments dropped; nesting ignored)."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if m := re.fullmatch(r"\s*(?:- )?([A-Za-z]+): *([^#]*?)\s*(?:#.*)?", line):
            if m[2]:
                assert m[1] not in out, f"{path.name}: {m[1]} twice"
                out[m[1]] = m[2]
    return out


def test_the_provisioning_examples_load_this_dashboard_from_the_folder_the_docs_name() -> None:
    provider = _settings(PROVISIONING / "dashboards" / "bernstein.yaml")
    assert (provider["apiVersion"], provider["type"]) == ("1", "file")
    folder = provider["path"]
    assert folder.startswith("/") and not folder.endswith(".json"), "a folder of dashboard files"
    docs = OPERATIONS.read_text(encoding="utf-8")
    section = docs.split("### The dashboard", 1)[1].split("\n## ", 1)[0]
    assert f"`{folder}/`" in section and "ops/grafana/provisioning/dashboards/bernstein.yaml" in section
    assert "/etc/grafana/provisioning/dashboards/" in section and "/etc/grafana/provisioning/datasources/" in section
    source = _settings(PROVISIONING / "datasources" / "prometheus.yaml")
    assert (source["apiVersion"], source["type"]) == ("1", _variables(_dashboard())["datasource"]["query"])
    assert re.fullmatch(r"https?://\S+", source["url"])
    for name in ("datasource", "prefix", "partition"):
        assert f"| `{name}` |" in section, f"docs/operations.md does not describe the {name} variable"
