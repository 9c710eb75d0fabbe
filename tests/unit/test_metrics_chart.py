"""The chart's metrics objects (templates/metrics/), rendered by the helm binary the cluster build
makes: /metrics protected by default and the grants that needs, the scrape targets, the
PrometheusRule and the Grafana dashboard behind their toggles, each carrying the shipped file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpustack-operator"
sys.path.insert(0, str(REPO / "tests" / "cluster"))
import harness  # noqa: E402

HELM = Path(os.environ.get("GPUSTACK_HELM") or harness.bin_dir() / "helm")
pytestmark = pytest.mark.skipif(
    not HELM.is_file(), reason="no helm binary yet: tests/cluster/build.sh builds it (make cluster-binaries)"
)
NS = "gpustack-system"
VALUES = ("--values", "-")  # JSON on stdin (JSON is YAML)
ALL_ON = {
    "metrics": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}, "interval": "15s"},
        "prometheusRule": {"enabled": True, "labels": {"role": "alerts"}},
        "dashboard": {
            "enabled": True,
            "namespace": "monitoring",
            "annotations": {"grafana_folder": "GPUStack"},
        },
        "auth": {"readers": [{"namespace": "monitoring", "name": "prometheus-k8s"}]},
    }
}


@pytest.fixture(scope="module", autouse=True)
def dependencies() -> None:
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "chart-dependencies.py")], check=True, capture_output=True
    )


def helm(values: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [
            str(HELM),
            "template",
            "gpustack-operator",
            str(CHART),
            "--kube-version",
            "1.36.3",
            "-n",
            NS,
            *VALUES,
        ],
        input=json.dumps(values),
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(REPO / ".dev" / "helm-home")},
    )
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr)
    return proc


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return harness.yaml_documents(helm(values or {}).stdout)


def ours(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d
        for d in docs
        if d["kind"] == kind
        and (d["metadata"].get("labels") or {}).get("helm.sh/chart", "").startswith("gpustack-operator-")
    }


def worker_args(docs: list[dict[str, Any]]) -> list[str]:
    worker = ours(docs, "Deployment")["gpustack-operator-worker"]
    return worker["spec"]["template"]["spec"]["containers"][0]["args"]


def worker_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rule of every ClusterRole bound to the worker's ServiceAccount."""
    roles = ours(docs, "ClusterRole")
    rules: list[dict[str, Any]] = []
    for binding in ours(docs, "ClusterRoleBinding").values():
        if {"kind": "ServiceAccount", "name": "gpustack-operator-worker", "namespace": NS} in binding[
            "subjects"
        ]:
            rules += roles[binding["roleRef"]["name"]]["rules"]
    return rules


def allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
        for r in rules
    )


def test_by_default_metrics_are_protected_and_nothing_needs_the_prometheus_operator() -> None:
    docs = render()
    assert "--metrics-auth=true" in worker_args(docs)
    rules = worker_rules(docs)
    assert allows(rules, "authentication.k8s.io", "tokenreviews", "create")
    assert allows(rules, "authorization.k8s.io", "subjectaccessreviews", "create")
    reader = ours(docs, "ClusterRole")["gpustack-operator-metrics-reader"]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert "gpustack-operator-dashboard" not in ours(docs, "ConfigMap")
    assert "gpustack-operator-metrics-reader" not in ours(docs, "ClusterRoleBinding")  # no reader named


def test_auth_off_passes_the_flag_off_and_drops_the_review_grant() -> None:
    docs = render({"metrics": {"auth": {"enabled": False}}})
    assert "--metrics-auth=false" in worker_args(docs)
    assert "gpustack-operator-worker-metrics-auth" not in ours(docs, "ClusterRole")
    assert not allows(worker_rules(docs), "authorization.k8s.io", "subjectaccessreviews", "create")
    assert "gpustack-operator-metrics-reader" in ours(docs, "ClusterRole")  # harmless, and ready to bind


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_scrape_targets_select_the_components_and_their_ports() -> None:
    docs = render(ALL_ON)
    monitors = ours(docs, "ServiceMonitor")
    services = ours(docs, "Service")
    assert set(monitors) == {"gpustack-operator-worker", "gpustack-operator-device-manager"}
    for name, monitor in monitors.items():
        assert (
            monitor["metadata"]["namespace"] == NS
            and monitor["metadata"]["labels"]["release"] == "prometheus"
        )
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NS]}
        service = services[name]
        assert _selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]), name
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert (endpoint["scheme"], endpoint["path"], endpoint["interval"]) == ("https", "/metrics", "15s")
        assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    worker = monitors["gpustack-operator-worker"]["spec"]["endpoints"][0]
    assert worker["honorLabels"] is True  # the objects' namespace label wins over the target's
    assert worker["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    [pod_monitor] = ours(docs, "PodMonitor").values()
    plugin = ours(docs, "DaemonSet")["gpustack-operator-model-manager"]
    pod = plugin["spec"]["template"]
    assert _selects(pod_monitor["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    [endpoint] = pod_monitor["spec"]["podMetricsEndpoints"]
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert ports[endpoint["port"]] == 32444
    binding = ours(docs, "ClusterRoleBinding")["gpustack-operator-metrics-reader"]
    assert binding["roleRef"]["name"] == "gpustack-operator-metrics-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    ]


def test_without_auth_the_worker_monitor_sends_no_token() -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True}, "auth": {"enabled": False}}}
    monitor = ours(render(values), "ServiceMonitor")["gpustack-operator-worker"]
    assert "bearerTokenFile" not in monitor["spec"]["endpoints"][0]


def test_the_rule_and_the_dashboard_carry_the_shipped_files() -> None:
    docs = render(ALL_ON)
    [rule] = ours(docs, "PrometheusRule").values()
    assert rule["metadata"]["labels"]["role"] == "alerts"
    assert rule["spec"] == yaml.safe_load((CHART / "rules" / "gpustack-operator.yaml").read_text())
    dashboard = ours(docs, "ConfigMap")["gpustack-operator-dashboard"]
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "GPUStack"}
    shipped = json.loads((CHART / "dashboards" / "gpustack-operator.json").read_text())
    assert json.loads(dashboard["data"]["gpustack-operator.json"]) == shipped


def test_disabled_components_get_no_target() -> None:
    values = {**ALL_ON, "deviceManager": {"enabled": False}, "modelManager": {"enabled": False}}
    docs = render(values)
    assert set(ours(docs, "ServiceMonitor")) == {"gpustack-operator-worker"}
    assert ours(docs, "PodMonitor") == {}


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"metrics": {"serviceMonitor": {"enabled": "yes"}}}, "at '/metrics/serviceMonitor/enabled'"),
        ({"metrics": {"auth": {"enabled": "on"}}}, "at '/metrics/auth/enabled'"),
        ({"metrics": {"auth": {"readers": [{"name": "prometheus"}]}}}, "at '/metrics/auth/readers/0'"),
        ({"metrics": {"serviceMonitor": {"interval": "soon"}}}, "at '/metrics/serviceMonitor/interval'"),
        ({"metrics": {"grafana": {}}}, "additional properties 'grafana' not allowed"),
    ],
)
def test_the_schema_refuses_a_wrong_metrics_value(values: dict[str, Any], said: str) -> None:
    refused = helm(values, check=False)
    assert refused.returncode != 0 and said in refused.stderr, refused.stderr
