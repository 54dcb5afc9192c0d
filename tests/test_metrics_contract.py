"""The metrics docs/observability.md documents are the ones the code registers, and the alerts and
the dashboard name only those: a metric, a label or a value (an outcome, a repair finding) added
or dropped on one side only fails here.

The code's side: the counters and histograms of ``shared.metrics``, the collectors each process
serves beside them (read through their ``describe()``, which needs no database), and the values
``shared.counters`` and the collectors accept. The docs' side: the two tables under "The metrics"
in docs/observability.md (one row per metric; one per label that takes a fixed set of values).
Nothing here starts a process or a database.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from shared import counters, metrics

ROOT = Path(__file__).resolve().parents[1]
OBSERVABILITY = ROOT / "docs" / "observability.md"
UNREACHABLE_DATABASE = "postgresql+psycopg2://nobody@127.0.0.1:1/nothing"  # never connected to here
EVERY_METRIC_WITH_IT = "every metric with it"  # the docs' row for a label shared by many metrics
METRICS_SECTION = "The metrics (names and labels are a contract)"


@dataclass(frozen=True)
class Metric:
    type: str
    labels: frozenset[str]


# The code's side


def served_collectors() -> Iterator[object]:
    """What each process serves beside shared.metrics' counters: the two apps' collectors, as the
    app factories build them, and the reconciler's leader gauge (platform_svc/reconciler/manager.py)."""
    import cluster_svc
    import platform_svc
    from platform_svc.operations.metrics import LeaderCollector

    platform = platform_svc.create_app(
        platform_svc.Settings(
            database_url=UNREACHABLE_DATABASE, cluster_svc_url="http://127.0.0.1:1", internal_token="t"
        ),
        testing=True,
    )
    cluster = cluster_svc.create_app(
        cluster_svc.Settings(database_url=UNREACHABLE_DATABASE, internal_token="t"), testing=True
    )
    try:
        for app in (platform, cluster):
            yield from app.extensions["observability"]["collectors"]
    finally:
        platform.extensions["writes"].pusher.path.client.close()
        for app in (platform, cluster):
            app.extensions["database"].dispose()
    yield LeaderCollector(leadership=None)


def exposed_name(wrapper: MetricWrapperBase) -> str:
    """prometheus-client keeps a counter's name without the ``_total`` its exposition adds."""
    return f"{wrapper._name}_total" if wrapper._type == "counter" else wrapper._name


@pytest.fixture(scope="module")
def registered() -> dict[str, Metric]:
    found = {
        exposed_name(wrapper): Metric(wrapper._type, frozenset(wrapper._labelnames))
        for wrapper in vars(metrics).values()
        if isinstance(wrapper, MetricWrapperBase)
    }
    for collector in served_collectors():
        for family in collector.describe():
            metric = Metric(family.type, frozenset(family._labelnames))
            # Served by several processes (`ready`, by both services): one contract for all of them.
            assert found.setdefault(family.name, metric) == metric, f"{family.name} differs between processes"
    return found


def resource_labels() -> set[str]:
    """The ``resource`` label's values: each service's registry, which must agree."""
    from cluster_svc.models import RESOURCES as CLUSTER_RESOURCES
    from platform_svc.models import RESOURCES as PLATFORM_RESOURCES

    platform = {resource.label for resource in PLATFORM_RESOURCES}
    assert platform == {resource.label for resource in CLUSTER_RESOURCES}
    return platform


@pytest.fixture(scope="module")
def registered_values(registered) -> dict[tuple[str, str], set[str]]:
    """(metric, label) -> the values the code accepts, for each label that takes a fixed set."""
    from platform_svc.states import SHOWN
    from shared.clock import REFERENCES

    values = {
        (name, "resource"): resource_labels() for name, metric in registered.items() if "resource" in metric.labels
    }
    for attribute, allowed in counters.ALLOWED_VALUES.items():
        wrapper = getattr(metrics, attribute)
        # counters.py checks the labels after `resource`, in the metric's order.
        assert wrapper._labelnames[0] == "resource", attribute
        for label, accepted in zip(wrapper._labelnames[1:], allowed, strict=True):
            values[(exposed_name(wrapper), label)] = set(accepted)
    values[("sync_rows", "state")] = set(SHOWN)
    values[("clock_offset_seconds", "reference")] = set(REFERENCES)
    return values


# The docs' side


def section(path: Path, heading: str) -> str:
    """The text under ``## heading``, up to the next heading of that level."""
    text = path.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def tables(text: str) -> Iterator[list[dict[str, str]]]:
    """Each Markdown table of ``text``: its rows, as {header: cell}."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("|"):
            i += 1
            continue
        block = []
        while i < len(lines) and lines[i].startswith("|"):
            block.append([cell.strip() for cell in lines[i].strip().strip("|").split("|")])
            i += 1
        header, _separator, *rows = block
        yield [dict(zip(header, row, strict=True)) for row in rows]


def table(text: str, *header: str) -> list[dict[str, str]]:
    [found] = [rows for rows in tables(text) if rows and tuple(rows[0]) == header]
    return found


def code(cell: str) -> list[str]:
    """What a cell names in backticks."""
    return re.findall(r"`([^`]+)`", cell)


@pytest.fixture(scope="module")
def documented() -> dict[str, Metric]:
    rows = table(section(OBSERVABILITY, METRICS_SECTION), "metric", "type", "labels", "from")
    found = {}
    for row in rows:
        [name] = code(row["metric"])
        assert name not in found, f"{name} is documented twice"
        found[name] = Metric(row["type"], frozenset(code(row["labels"])))
    return found


@pytest.fixture(scope="module")
def documented_values(documented) -> dict[tuple[str, str], set[str]]:
    rows = table(section(OBSERVABILITY, METRICS_SECTION), "metric", "label", "values")
    found = {}
    for row in rows:
        [label] = code(row["label"])
        if row["metric"] == EVERY_METRIC_WITH_IT:
            names = [name for name, metric in documented.items() if label in metric.labels]
        else:
            names = code(row["metric"])
        for name in names:
            assert (name, label) not in found, f"{name}'s {label} is documented twice"
            found[(name, label)] = set(code(row["values"]))
    return found


# The comparisons


def test_every_metric_the_code_registers_is_documented_and_no_other(registered, documented):
    assert sorted(set(registered) - set(documented)) == [], "registered, not documented in docs/observability.md"
    assert sorted(set(documented) - set(registered)) == [], "documented in docs/observability.md, not registered"


def test_each_metric_has_the_documented_type_and_labels(registered, documented):
    differ = {
        name: {"code": registered[name], "docs": documented[name]}
        for name in set(registered) & set(documented)
        if registered[name] != documented[name]
    }
    assert differ == {}


def test_the_labels_with_a_fixed_set_of_values_have_the_documented_values(registered_values, documented_values):
    assert sorted(set(registered_values) - set(documented_values)) == [], "values not documented"
    assert sorted(set(documented_values) - set(registered_values)) == [], "documented, the code takes any value"
    differ = {
        key: {"code": sorted(registered_values[key]), "docs": sorted(documented_values[key])}
        for key in registered_values
        if registered_values[key] != documented_values.get(key)
    }
    assert differ == {}


def test_every_repair_finding_is_documented_wherever_findings_are_listed():
    findings = set(counters.REPAIR_FINDINGS)
    operations = (ROOT / "docs" / "operations.md").read_text()
    [listed] = re.findall(r"sync_repairs_total\{finding=([a-z_|]+)\}", operations)
    assert set(listed.split("|")) == findings, "docs/operations.md"
    readme = table((ROOT / "README.md").read_text(), "finding", "cluster_svc's copy", "what repair does")
    assert {name for row in readme for name in code(row["finding"])} == findings, "README.md, Drift"


# The alerts and the dashboard

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "idempotent-pair.json"
# Words of PromQL that are not metrics (functions and aggregations are told by the "(" after them).
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
PROMETHEUS_OWN = {"up"}  # written by Prometheus for every target it scrapes
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def metric_names(expr: str) -> set[str]:
    """The metrics a PromQL expression reads: its identifiers once strings, label matchers, ranges
    and label lists are taken out, but for functions, aggregations and keywords."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.:])[A-Za-z_:][\w:]*", expr):
        if match.group() not in PROMQL_WORDS and not expr[match.end() :].lstrip().startswith("("):
            names.add(match.group())
    return names


def test_metric_names_are_read_from_promql():
    assert metric_names('(sum(sync_repair_leader) or vector(0)) != 1') == {"sync_repair_leader"}
    assert metric_names(
        'sum by (job) (rate(http_requests_total{status=~"5..",route!~"/readyz"}[5m]))'
        " / sum by (job) (rate(up[5m])) > 1e-2"
    ) == {"http_requests_total", "up"}
    assert metric_names("histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m]))) > scalar(max(y))") == {
        "x_bucket",
        "y",
    }


def queries() -> Iterator[tuple[str, str]]:
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            yield f"alert {rule['alert']}", rule["expr"]
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            yield f"dashboard panel {panel['title']!r}", target["expr"]


def test_every_metric_an_alert_or_the_dashboard_reads_is_registered(registered):
    known = set(registered) | PROMETHEUS_OWN
    known |= {name + suffix for name, m in registered.items() if m.type == "histogram" for suffix in HISTOGRAM_SERIES}
    unknown = {}
    for where, expr in queries():
        names = metric_names(expr)
        assert names, f"{where}: no metric read from {expr!r}"
        if names - known:
            unknown[where] = sorted(names - known)
    assert unknown == {}


def test_the_alerts_table_lists_the_shipped_alerts():
    shipped = {rule["alert"] for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]}
    rows = table(section(OBSERVABILITY, "Prometheus, alerts and Grafana"), "alert", "when")
    assert {name for row in rows for name in code(row["alert"])[:1]} == shipped
