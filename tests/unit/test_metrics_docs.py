"""docs/metrics.md lists exactly the ``gpustack_*`` metrics the code registers, with their types and
labels; the chart's Grafana dashboard and PrometheusRule query only metrics listed there, with
labels those metrics carry."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from controllers import metrics as state_metrics
from tests.unit.metrics_fixtures import REPO, Documented, documented, queryable

CHART = REPO / "charts" / "gpustack-operator"
DASHBOARD = CHART / "dashboards" / "gpustack-operator.json"
RULES = CHART / "rules" / "gpustack-operator.yaml"
# The modules that register each component's metrics (what its process imports).
COMPONENT_MODULES = {
    "Every component": ("kube.metrics",),
    "Worker": ("kube.manager", "kube.workqueue", "webhooks.metrics", "controllers.metrics"),
    "Device manager": (
        "nodeplugins.devicemanager.agent",
        "nodeplugins.devicemanager.plugin",
        "nodeplugins.devicemanager.rdma.plugin",
        "nodeplugins.devicemanager.rdma.inventory",
    ),
    "Model manager": ("nodeplugins.modelmanager.metrics",),
    "Worker-gateway": ("gateway.metrics",),
}
# Series Prometheus itself records for every target, which the alerts may use besides ours.
PROMETHEUS_OWN = {"up": ("job", "instance")}
# Labels every scraped series gets from its target (Prometheus Operator's ServiceMonitor/PodMonitor).
TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "service", "endpoint"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "inf", "nan"}


def registered() -> dict[str, Documented]:
    """Every ``gpustack_*`` metric of the components' modules, by the name it is queried by."""
    for modules in COMPONENT_MODULES.values():
        for module in modules:
            importlib.import_module(module)
    found: dict[str, Documented] = {}
    for collector in list(REGISTRY._collector_to_names):  # the public API lists samples, not label names
        if isinstance(collector, MetricWrapperBase) and collector._name.startswith("gpustack_"):
            name = collector._name + ("_total" if collector._type == "counter" else "")
            found[name] = Documented(name, str(collector._type), tuple(collector._labelnames), "")
    for name, (_, labels) in state_metrics.CATALOG.items():
        found[name] = Documented(name, "gauge", labels, "")
    return found


def test_the_reference_lists_exactly_the_registered_metrics_with_their_labels() -> None:
    docs = documented()
    code = registered()
    assert sorted(set(code) - set(docs)) == [], "registered but not documented"
    assert sorted(set(docs) - set(code)) == [], "documented but not registered"
    wrong = {
        name: {"code": (code[name].type, code[name].labels), "docs": (item.type, item.labels)}
        for name, item in docs.items()
        if (item.type, item.labels) != (code[name].type, code[name].labels)
    }
    assert wrong == {}


def test_each_metric_is_listed_under_the_component_that_registers_it() -> None:
    docs = documented()
    for section, modules in COMPONENT_MODULES.items():
        names = set()
        for module in modules:
            loaded = importlib.import_module(module)
            for value in vars(loaded).values():
                if isinstance(value, MetricWrapperBase):
                    names.add(value._name + ("_total" if value._type == "counter" else ""))
        if "controllers.metrics" in modules:
            names |= set(state_metrics.CATALOG)
        misplaced = {
            n: docs[n].section for n in names if n.startswith("gpustack_") and docs[n].section != section
        }
        assert misplaced == {}, section


# --- PromQL, read well enough to name the metrics and labels a query uses --------------------------


def _strip_label_values(expr: str) -> str:
    """Grafana's ``label_values(metric{…}, label)`` reads as the metric."""
    return re.sub(r"label_values\(\s*([^,()]+?)\s*,\s*\w+\s*\)", r"\1", expr)


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """Every ``metric`` or ``metric{matchers}`` of ``expr`` with the label names its matchers use
    and those its ``by``/``on`` clauses name (assigned to every metric of the expression)."""
    expr = _strip_label_values(expr)
    expr = re.sub(r"\$\{?[A-Za-z_]\w*\}?", "x", expr)  # Grafana variables ($__rate_interval, $node)
    grouping: set[str] = set()
    for clause in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        grouping |= {label.strip() for label in clause.split(",") if label.strip()}
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range and subquery selectors
    found: list[tuple[str, set[str]]] = []
    for match in re.finditer(r'(?<![\w.$"])([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?(\s*\()?', expr):
        name, matchers, call = match.groups()
        if call or name in KEYWORDS:
            continue  # a function or an aggregation, or an operator keyword
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers or ""))
        found.append((name, labels | grouping))
    return found


def _known(name: str, names: dict[str, Documented]) -> tuple[str, ...] | None:
    if name in PROMETHEUS_OWN:
        return PROMETHEUS_OWN[name]
    item = names.get(name)
    if item is None:
        return None
    return item.labels + (("le",) if name.endswith("_bucket") else ())


def check(expressions: list[str]) -> dict[str, str]:
    """What is wrong with each expression: an unknown metric or a label the metric lacks."""
    names = queryable(documented())
    problems: dict[str, str] = {}
    for expr in expressions:
        used = selectors(expr)
        if not used:
            problems[expr] = "names no metric"
        for name, labels in used:
            known = _known(name, names)
            if known is None:
                problems[expr] = f"{name} is not a documented metric"
                continue
            # A grouping label must be on some metric of the expression: checked across them.
            own = {label for label in labels if label not in TARGET_LABELS}
            every = set().union(*(set(_known(n, names) or ()) for n, _ in used))
            if not own <= every:
                problems[expr] = f"{name}: labels {sorted(own - every)} are on none of its metrics"
    return problems


def test_the_promql_reader() -> None:
    assert selectors('sum by (mode) (gpustack_node_cards{node=~"$node"})') == [
        ("gpustack_node_cards", {"node", "mode"})
    ]
    assert selectors("time() - max by (pod) (gpustack_model_manager_last_pass_timestamp_seconds)") == [
        ("gpustack_model_manager_last_pass_timestamp_seconds", {"pod"})
    ]
    assert [n for n, _ in selectors("(sum(up) or vector(0)) < 1 and on(x) rate(a_total[5m]) > 0.5")] == [
        "up",
        "a_total",
    ]
    assert selectors("label_values(gpustack_node_cards, node)") == [("gpustack_node_cards", set())]
    assert check(["sum(gpustack_nonexistent)"]) == {
        "sum(gpustack_nonexistent)": "gpustack_nonexistent is not a documented metric"
    }
    assert (
        "labels ['colour']"
        in check(['gpustack_node_cards{colour="red"}'])['gpustack_node_cards{colour="red"}']
    )


def dashboard_queries(board: dict[str, Any]) -> list[str]:
    queries: list[str] = []
    panels = list(board["panels"])
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels") or [])
        queries.extend(target["expr"] for target in panel.get("targets") or [])
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def test_the_dashboard_queries_only_documented_metrics_and_their_labels() -> None:
    board = json.loads(DASHBOARD.read_text())
    queries = dashboard_queries(board)
    assert len(queries) > 20
    assert check(queries) == {}
    used = {name for q in queries for name, _ in selectors(q)}
    # The figures issue 33 asks an operator to watch are all on it.
    for name in (
        "gpustack_build_info",
        "gpustack_worker_leader",
        "gpustack_instance_type_capacity",
        "gpustack_instance_type_remaining",
        "gpustack_instance_type_pending_workloads",
        "gpustack_node_cards",
        "gpustack_model_deployment_replicas_desired",
        "gpustack_model_deployment_replicas_ready",
        "gpustack_model_deployment_phase",
        "gpustack_instance_phase",
        "gpustack_model_artifact_nodes",
        "gpustack_model_artifact_download_percent",
        "gpustack_kv_cache_pool_used_bytes",
        "gpustack_device_manager_last_pass_timestamp_seconds",
        "gpustack_model_manager_last_pass_timestamp_seconds",
    ):
        assert name in used, name


def test_the_dashboard_is_well_formed_for_grafana() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "gpustack-operator" and board["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert [t["refId"] for t in panel["targets"]] == [
                chr(65 + i) for i in range(len(panel["targets"]))
            ]
    for name in re.findall(r"\$(\w+)", json.dumps(board)):
        assert name.startswith("__") or name in variables, f"${name} is not a dashboard variable"


def rules() -> list[dict[str, Any]]:
    spec = yaml.safe_load(RULES.read_text())
    return [rule for group in spec["groups"] for rule in group["rules"]]


def test_the_alerts_query_only_documented_metrics_and_their_labels() -> None:
    assert check([rule["expr"] for rule in rules()]) == {}


def test_the_alerts_issue_33_asks_for_and_their_shape() -> None:
    by_name = {rule["alert"]: rule for rule in rules()}
    assert {
        "GPUStackPoolFullWithPendingWorkloads",  # a pool with no free card and pending Workloads
        "GPUStackWorkerWithoutLeader",
        "GPUStackDeviceManagerNotReporting",  # the node agents
        "GPUStackModelManagerNotReporting",
    } <= set(by_name)
    for name, rule in by_name.items():
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert rule["expr"].count("(") == rule["expr"].count(")"), name
    pool = by_name["GPUStackPoolFullWithPendingWorkloads"]["expr"]
    assert "gpustack_instance_type_pending_workloads" in pool and 'view="exclusive"' in pool
    assert "gpustack_worker_leader" in by_name["GPUStackWorkerWithoutLeader"]["expr"]


@pytest.mark.parametrize("path", [DASHBOARD, RULES], ids=lambda p: Path(p).name)
def test_the_docs_page_names_the_files_it_ships(path: Path) -> None:
    text = (REPO / "docs" / "metrics.md").read_text()
    assert str(path.relative_to(REPO)) in text
    if path == RULES:
        for rule in rules():
            assert f"`{rule['alert']}`" in text
