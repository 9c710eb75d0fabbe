"""The Helm chart (operations spec D.3, D.4 chart mode), rendered by the helm binary the cluster
build makes (``tests/cluster/build.sh``): lint, the objects of the default values, the per-row
fan-out, the Kueue configuration against ``api/kueue.py``, and the schema's refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from api import constants, kueue, manufacturers

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpustack-operator"
sys.path.insert(0, str(REPO / "tests" / "cluster"))
import harness  # noqa: E402

HELM = Path(os.environ.get("GPUSTACK_HELM") or harness.bin_dir() / "helm")  # the cluster build's helm
pytestmark = pytest.mark.skipif(
    not HELM.is_file(), reason="no helm binary yet: tests/cluster/build.sh builds it (make cluster-binaries)"
)
NS = "gpustack-system"


@pytest.fixture(scope="module", autouse=True)
def dependencies() -> None:
    """The chart's Kueue and NFD packages in charts/ (a no-op when `make cluster-binaries` put them)."""
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "chart-dependencies.py")], check=True, capture_output=True
    )


def helm(*args: str, values: dict[str, Any] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    extra = ["--values", "-"] if values is not None else []
    proc = subprocess.run(
        [str(HELM), *args, *extra],
        input=json.dumps(values) if values is not None else None,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(REPO / ".dev" / "helm-home")},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {proc.stderr}")
    return proc


def render(values: dict[str, Any] | None = None, namespace: str = NS) -> list[dict[str, Any]]:
    out = helm("template", "gpustack-operator", str(CHART), "--namespace", namespace, values=values or {})
    return harness.yaml_documents(out.stdout)


def own_kueue(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` for a cluster with its own Kueue (``kueue.enabled=false``): the chart renders the
    configuration to hand it, whatever the kueue.* values say. With the bundled Kueue, values that
    change it are refused unless ``kueue.managerConfig`` says the same (tested below)."""
    return {**values, "kueue": {**values.get("kueue", {}), "enabled": False}}


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """This chart's own objects of ``kind`` (not those of its Kueue and NFD dependencies)."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind and ours(d)}


def ours(doc: dict[str, Any]) -> bool:
    labels = doc["metadata"].get("labels") or {}
    chart = labels.get("helm.sh/chart", "gpustack-operator-")
    return chart.startswith("gpustack-operator-")


def container(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]["containers"][0]


def env_of(workload: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(workload).get("env") or []}


def test_lint_is_clean() -> None:
    """`helm lint --strict` passes with nothing to say: no error, warning or note (the icon included)."""
    out = helm("lint", "--strict", str(CHART), "--namespace", NS)
    assert "0 chart(s) failed" in out.stdout, out.stdout
    assert not [line for line in out.stdout.splitlines() if line.startswith("[")], out.stdout


def test_default_objects() -> None:
    docs = render()
    worker = by_kind(docs, "Deployment")["gpustack-operator-worker"]
    args = container(worker)["args"]
    assert args[0] == "worker" and "--disable-applications=*" in args
    assert "--manufacturer=amd,ascend,cambricon,hygon,iluvatar,metax,mthreads,nvidia,thead" in args
    assert (
        "--webhook-service=gpustack-operator-worker" in args
        and "--cert-secret=gpustack-operator-worker-certs" in args
    )
    assert worker["spec"]["replicas"] == 1 and worker["spec"]["template"]["spec"]["serviceAccountName"] == (
        "gpustack-operator-worker"
    )
    assert "podAntiAffinity" in worker["spec"]["template"]["spec"]["affinity"]
    env = env_of(worker)
    assert env["GPUSTACK_NVIDIA_PCI_VENDOR_ID"] == "10de" and env["GPUSTACK_NVIDIA_PARTITION_KIND"] == "mig"
    assert env["GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS"] == "true"
    assert by_kind(docs, "Service")["gpustack-operator-worker"]["spec"]["ports"][0]["port"] == 443
    assert "PodDisruptionBudget" not in {d["kind"] for d in docs}
    daemonsets = by_kind(docs, "DaemonSet")
    for maker in manufacturers.MANUFACTURERS:
        ds = daemonsets[f"gpustack-operator-device-manager-{maker.name}"]
        pod = ds["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {
            f"feature.node.kubernetes.io/pci-{maker.pci_vendor_id}.present": "true"
        }
        assert container(ds)["args"][:2] == ["device-manager", "serve"]
        assert f"--manufacturer={maker.name}" in container(ds)["args"] and "--v=2" in container(ds)["args"]
        assert (pod.get("runtimeClassName") is not None) == (maker.name in ("nvidia", "mthreads"))
    assert "gpustack-operator-model-manager" in daemonsets
    assert set(by_kind(docs, "CSIDriver")) == {"model.csi.gpustack.ai"}
    assert set(by_kind(docs, "RuntimeClass")) == {"nvidia", "ascend", "mthreads", "iluvatar"}
    roles = {
        n: r
        for n, r in by_kind(docs, "ClusterRole").items()
        if "helm.sh/hook" not in (r["metadata"].get("annotations") or {})
    }
    assert set(roles) == {
        "gpustack-operator-worker",
        "gpustack-operator-worker-metrics-auth",  # metrics.auth.enabled: the reviews behind /metrics
        "gpustack-operator-metrics-reader",  # what a scraper is bound to (docs/metrics.md)
        "gpustack-operator-device-manager",
        "gpustack-operator-model-manager",
    }
    dm_rules = roles["gpustack-operator-device-manager"]["rules"]
    assert not any("*" in r["resources"] or "delete" in r["verbs"] for r in dm_rules)  # least privilege
    # The only hooks by default: the pre-delete emptying of the Kueue it installs (and NFD's own) and
    # the post-delete removal of the webhook configurations.
    hooks = [d for d in docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {}) and ours(d)]
    assert {(d["metadata"]["annotations"]["helm.sh/hook"], d["metadata"]["name"]) for d in hooks} == {
        ("pre-delete", "gpustack-operator-cleanup-before-kueue"),
        ("post-delete", "gpustack-operator-cleanup-webhooks"),
    }


def _resources(docs: list[dict[str, Any]]) -> dict[str, Any]:
    config_map = by_kind(docs, "ConfigMap")["gpustack-operator-kueue-manager-config"]
    return yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])


def _normal(resources: dict[str, Any]) -> dict[str, Any]:
    out = dict(resources)
    out["transformations"] = sorted(resources["transformations"], key=lambda t: t["input"])
    if "excludeResourcePrefixes" in out:
        out["excludeResourcePrefixes"] = sorted(out["excludeResourcePrefixes"])
    return out


@pytest.mark.parametrize("strategy", [False, True])
def test_kueue_configuration_is_what_api_kueue_states(strategy: bool) -> None:
    config = _resources(render(own_kueue({"kueue": {"quotaCheckStrategy": strategy}})))
    assert _normal(config["resources"]) == _normal(kueue.resources_config(quota_check_strategy=strategy))
    assert config["featureGates"]["TopologyAwareScheduling"] is True
    excluded = config["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"]
    assert {"kube-system", "kueue-system", NS} <= set(excluded)
    assert config["integrations"]["frameworks"] == ["pod", "batch/job", "deployment", "statefulset"]


@pytest.mark.parametrize(
    ("version", "gate", "strategy", "credits"),
    [
        ("v0.17.0", False, False, "true"),  # no quotaCheckStrategy, no gate, kueue#12005 unfixed
        ("v0.17.5", False, False, "false"),  # the fix was backported to 0.17.5
        ("v0.18.0", True, True, "true"),  # the field and the gate, but not the fix
        ("v0.18.1", True, True, "false"),
        ("v0.19.0", True, True, "false"),  # what the local cluster runs, and the default
    ],
)
def test_the_kueue_configuration_follows_the_kueue_version(
    version: str, gate: bool, strategy: bool, credits: str
) -> None:
    docs = render(own_kueue({"kueue": {"version": version}}))
    config = _resources(docs)
    assert ("TASRespectNodeAffinityPreferred" in config["featureGates"]) is gate
    assert (config["resources"].get("quotaCheckStrategy") == "IgnoreUndeclared") is strategy
    assert ("excludeResourcePrefixes" in config["resources"]) is not strategy
    env = env_of(by_kind(docs, "Deployment")["gpustack-operator-worker"])
    assert env["GPUSTACK_KUEUE_QUOTA_CHECK_STRATEGY"] == str(strategy).lower()
    assert env["GPUSTACK_NODE_CREDITS_CAPACITY"] == credits


@pytest.mark.parametrize(
    ("values", "rendered"),
    [
        ({}, {"timeout": "6h"}),  # the default: a replica may take six hours to become Ready
        ({"waitForPodsReady": {"timeout": "90m"}}, {"timeout": "90m"}),
        ({"waitForPodsReady": None}, None),  # Kueue's own default (30 minutes from v0.19)
        ({"version": "v0.18.1"}, None),  # before v0.19 the setting's presence would turn it on
    ],
)
def test_kueue_waits_for_a_model_server_longer_than_its_30_minute_default(
    values: dict[str, Any], rendered: dict[str, Any] | None
) -> None:
    """From v0.19 Kueue evicts a Workload whose Pods are not all Ready 30 minutes after admission
    unless its configuration says otherwise; a large model's download and load take longer."""
    assert _resources(render(own_kueue({"kueue": values}))).get("waitForPodsReady") == rendered


@pytest.mark.parametrize(
    ("values", "rendered"),
    [
        (  # the default: Kueue's own chart's numbers
            {},
            {
                "Pod": 5,
                "Job.batch": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            },
        ),
        ({"controllerConcurrency": None}, None),  # none rendered: one reconcile of each at a time
        (  # one kind changed, one dropped: the rest stay
            {"controllerConcurrency": {"Pod": 10, "Job.batch": None}},
            {
                "Pod": 10,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            },
        ),
    ],
)
def test_kueue_reconciles_several_pods_and_workloads_at_once(
    values: dict[str, Any], rendered: dict[str, int] | None
) -> None:
    """Without controller.groupKindConcurrency each Kueue controller runs one reconcile at a time:
    at 5,000 deployments its Pod controller ungated 0.4 Pods a second with 8,000 queued."""
    config = _resources(render(own_kueue({"kueue": values})))
    assert (config.get("controller") or {}).get("groupKindConcurrency") == rendered


@pytest.mark.parametrize(
    ("values", "rendered"),
    [
        ({}, {"qps": 50, "burst": 100}),  # Kueue's own defaults
        ({"clientConnection": {"qps": 200, "burst": 400}}, {"qps": 200, "burst": 400}),
    ],
)
def test_kueue_keeps_the_request_rate_the_values_give(
    values: dict[str, Any], rendered: dict[str, int]
) -> None:
    assert _resources(render(own_kueue({"kueue": values})))["clientConnection"] == rendered


def test_the_local_cluster_runs_the_charts_kueue_configuration_unchanged(tmp_path: Path) -> None:
    """tests/cluster/up.sh starts Kueue from the ConfigMap the chart renders: only where it listens,
    its certificates and the visibility server (a fixed port) differ; a gate the Kueue being started
    does not know stops the cluster's start, as it would stop Kueue in a cluster."""
    import argparse

    import kueue_manifests

    chart = kueue_manifests.chart_configuration(
        by_kind(render(), "ConfigMap")["gpustack-operator-kueue-manager-config"]
    )
    features = tmp_path / "pkg" / "features"
    features.mkdir(parents=True)
    known = [*chart["featureGates"], "VisibilityOnDemand"]
    (features / "kube_features.go").write_text("".join(f'\t{g} featuregate.Feature = "{g}"\n' for g in known))
    args = argparse.Namespace(
        kueue_src=tmp_path, health_port=1, metrics_port=2, webhook_port=3, cert_dir=Path("/certs")
    )
    started = kueue_manifests.render_config(args, chart)
    unplaced = set(kueue_manifests.PLACEMENT)
    assert {k: v for k, v in started.items() if k not in unplaced} == {
        **{k: v for k, v in chart.items() if k not in unplaced},
        "featureGates": {**chart["featureGates"], "VisibilityOnDemand": False},
    }
    assert started["webhook"] == {"host": "127.0.0.1", "port": 3, "certDir": "/certs"}
    (features / "kube_features.go").write_text(
        '\tVisibilityOnDemand featuregate.Feature = "VisibilityOnDemand"\n'
    )
    with pytest.raises(SystemExit, match="TopologyAwareScheduling"):
        kueue_manifests.render_config(args, chart)


def test_the_default_kueue_version_is_the_one_the_local_cluster_builds() -> None:
    pinned = (REPO / "tests" / "cluster" / "kueue" / "go.mod").read_text()
    default = yaml.safe_load((REPO / "charts" / "gpustack-operator" / "values.yaml").read_text())["kueue"][
        "version"
    ]
    assert f"sigs.k8s.io/kueue {default} " in pinned


def test_a_row_set_to_null_is_gone_everywhere() -> None:
    docs = render(own_kueue({"global": {"manufacturers": {"thead": None, "amd": None}}}))
    assert "gpustack-operator-device-manager-thead" not in by_kind(docs, "DaemonSet")
    args = container(by_kind(docs, "Deployment")["gpustack-operator-worker"])["args"]
    assert "--manufacturer=ascend,cambricon,hygon,iluvatar,metax,mthreads,nvidia" in args
    inputs = {t["input"] for t in _resources(docs)["resources"]["transformations"]}
    assert not any(i.startswith(("alibabacloud.com/", "amd.com/")) for i in inputs)


def test_a_changed_row_reaches_the_worker_the_device_manager_and_kueue() -> None:
    row = {"resourceName": "example.com/gpu", "runtimeInjectsDriver": False}  # merged over the default row
    docs = render(own_kueue({"global": {"manufacturers": {"nvidia": row}}}))
    ds = by_kind(docs, "DaemonSet")["gpustack-operator-device-manager-nvidia"]
    assert env_of(ds)["GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME"] == "example.com/gpu"
    assert ds["spec"]["template"]["spec"].get("runtimeClassName") is None  # no runtimeInjectsDriver now
    inputs = {t["input"] for t in _resources(docs)["resources"]["transformations"]}
    assert "example.com/gpu.sliced.units" in inputs and "nvidia.com/gpu" not in inputs


def test_replicas_budget_and_spread() -> None:
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]
    docs = render(
        {
            "worker": {
                "replicas": 3,
                "podDisruptionBudget": {"enabled": True, "minAvailable": 2},
                "topologySpreadConstraints": spread,
            }
        }
    )
    worker = by_kind(docs, "Deployment")["gpustack-operator-worker"]
    assert worker["spec"]["replicas"] == 3
    constraint = worker["spec"]["template"]["spec"]["topologySpreadConstraints"][0]
    assert constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"
    assert by_kind(docs, "PodDisruptionBudget")["gpustack-operator-worker"]["spec"]["minAvailable"] == 2


def test_cert_manager_mode_mounts_the_provided_certificate() -> None:
    docs = render({"global": {"certmanager": {"enabled": True}}})
    assert {"gpustack-operator-worker-serving", "gpustack-operator-worker-ca"} <= set(
        by_kind(docs, "Certificate")
    )
    worker = by_kind(docs, "Deployment")["gpustack-operator-worker"]
    assert "--cert-dir=/etc/gpustack/certs" in container(worker)["args"]
    assert not any(a.startswith("--cert-secret") for a in container(worker)["args"])
    assert "Certificate" not in {d["kind"] for d in render({"global": {"certmanager": {"enabled": "auto"}}})}


def test_cleanup_on_uninstall_renders_post_delete_hooks() -> None:
    docs = render({"cleanupOnUninstall": True})
    hooks = [
        d
        for d in docs
        if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "post-delete" and ours(d)
    ]
    assert {d["kind"] for d in hooks} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
    job = next(d for d in hooks if d["kind"] == "Job")
    assert container(job)["args"][0] == "cleanup"


def _post_delete(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in docs
        if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "post-delete" and ours(d)
    ]


def test_every_uninstall_removes_the_webhook_configurations_and_only_them() -> None:
    """They fail closed; the worker made them, so only a hook removes them. Its role may delete the
    two by name and nothing else; with cleanupOnUninstall the full cleanup does it, first."""
    hooks = _post_delete(render())
    assert {d["kind"] for d in hooks} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
    job = next(d for d in hooks if d["kind"] == "Job")
    assert container(job)["args"][:2] == ["cleanup", "--webhooks-only"]
    (role,) = [d for d in hooks if d["kind"] == "ClusterRole"]
    deletable = {
        (r["resources"][0], tuple(r.get("resourceNames") or ("*",)))
        for r in role["rules"]
        if "delete" in r["verbs"]
    }
    assert deletable == {
        ("mutatingwebhookconfigurations", (constants.MUTATING_CONFIGURATION,)),
        ("validatingwebhookconfigurations", (constants.VALIDATING_CONFIGURATION,)),
    }
    assert not _post_delete(render({"removeWebhooksOnUninstall": False}))
    full = _post_delete(render({"cleanupOnUninstall": True}))
    assert [container(d)["args"][1] for d in full if d["kind"] == "Job"] == [
        "--cert-secret=gpustack-operator-worker-certs"
    ]


def test_the_kueue_it_installs_is_emptied_of_the_operators_objects_before_it_goes() -> None:
    """Pre-delete (kueue.enabled): the Job deletes the worker, then the pools' Kueue objects while
    Kueue still runs; it may delete only the release's worker Deployment. None with the cluster's Kueue."""
    docs = render()
    hooks = [
        d
        for d in docs
        if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete" and ours(d)
    ]
    job = next(d for d in hooks if d["kind"] == "Job")
    assert container(job)["args"][:2] == ["cleanup", "--before-kueue-goes=gpustack-operator-worker"]
    (role,) = [d for d in hooks if d["kind"] == "Role"]
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "resourceNames": ["gpustack-operator-worker"],
            "verbs": ["delete"],
        }
    ]
    assert not [
        d
        for d in render({"kueue": {"enabled": False}})
        if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"
    ]


def test_peer_sync_port_wires_the_plugin_its_token_and_the_tokenreview_grant() -> None:
    """Delivery spec 4.10: modelManager.port 0 is off; a port serves the peer endpoints with the
    plugin's projected token (audience gpustack-model-peer) and lets it review peers' tokens."""
    name = "gpustack-operator-model-manager"
    off = render()
    assert not any(a.startswith("--peer-") for a in container(by_kind(off, "DaemonSet")[name])["args"])
    assert not any("tokenreviews" in r["resources"] for r in by_kind(off, "ClusterRole")[name]["rules"])
    docs = render({"modelManager": {"port": 32445, "peerSync": {"streamsPerSource": 2}}})
    plugin = by_kind(docs, "DaemonSet")[name]
    args = container(plugin)["args"]
    assert "--peer-port=32445" in args and "--peer-streams-per-source=2" in args
    assert f"--peer-user=system:serviceaccount:{NS}:{name}" in args
    assert "--peer-max-serving-streams=8" in args
    (token,) = [v for v in plugin["spec"]["template"]["spec"]["volumes"] if v["name"] == "peer-token"]
    assert token["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "gpustack-model-peer"
    mounts = {m["name"]: m["mountPath"] for m in container(plugin)["volumeMounts"]}
    assert mounts["peer-token"] == "/var/run/secrets/gpustack.ai/peer"  # the plugin's default token file
    assert any("tokenreviews" in r["resources"] for r in by_kind(docs, "ClusterRole")[name]["rules"])


def test_disabled_components_render_nothing() -> None:
    docs = render(
        {
            "deviceManager": {"enabled": False},
            "modelManager": {"enabled": False},
            "kueue": {"enabled": False},
            "node-feature-discovery": {"enabled": False},
        }
    )
    kinds = {d["kind"] for d in docs}
    assert "DaemonSet" not in kinds and "CSIDriver" not in kinds and "RuntimeClass" not in kinds
    assert all(ours(d) for d in docs)  # neither Kueue nor NFD: the cluster's own are used
    # ... and the configuration to hand to that Kueue is still rendered.
    assert "gpustack-operator-kueue-manager-config" in by_kind(docs, "ConfigMap")


def kueue_config_of(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    return yaml.safe_load(found["data"]["controller_manager_config.yaml"])


def test_the_kueue_it_installs_starts_from_the_configuration_it_renders() -> None:
    """The Kueue dependency's own ConfigMap (from values.yaml's generated copy) equals the chart's
    rendered configuration, and both dependencies run the images the project builds under their
    upstream names (images/build.py), without pulling what is present."""
    docs = render()
    assert kueue_config_of(docs, "kueue-manager-config") == kueue_config_of(
        docs, "gpustack-operator-kueue-manager-config"
    )
    (kueue,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kueue-controller-manager"
    ]
    manager = container(kueue)
    assert (
        manager["image"] == "registry.k8s.io/kueue/kueue:v0.19.0"
        and manager["imagePullPolicy"] == "IfNotPresent"
    )
    nfd = [
        d
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet") and "node-feature-discovery" in d["metadata"]["name"]
    ]
    assert {container(d)["image"] for d in nfd} == {"registry.k8s.io/nfd/node-feature-discovery:v0.19.0"}
    master = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-master-conf")
    )
    assert "topology.gpustack.ai" in yaml.safe_load(master["data"]["nfd-master.conf"])["extraLabelNs"]
    worker = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-worker-conf")
    )
    pci = yaml.safe_load(worker["data"]["nfd-worker.conf"])["sources"]["pci"]
    assert pci == {"deviceClassWhitelist": ["02", "03", "0b", "12"], "deviceLabelFields": ["vendor"]}


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"kueue": {"featureGates": {"TASBalancedPlacement": False}}}, "featureGates.TASBalancedPlacement"),
        ({"kueue": {"clientConnection": {"qps": 200, "burst": 400}}}, "clientConnection"),
        ({"kueue": {"controllerConcurrency": {"Pod": 10}}}, "controller"),
        ({"kueue": {"waitForPodsReady": {"timeout": "90m"}}}, "waitForPodsReady"),
        ({"global": {"manufacturers": {"nvidia": {"resourceName": "example.com/gpu"}}}}, "resources"),
    ],
)
def test_a_value_the_bundled_kueue_would_not_get_is_refused_with_the_way_to_give_it(
    values: dict[str, Any], named: str
) -> None:
    """The bundled Kueue starts from kueue.managerConfig, a copy the chart cannot rewrite: a value
    that changes the configuration is refused, naming what differs, unless the copy says the same.
    Following the message (render with kueue.enabled=false, hand the copy over) installs."""
    refused = helm("template", "gpustack-operator", str(CHART), "--namespace", NS, values=values, check=False)
    assert refused.returncode != 0, refused.stdout[:200]
    assert f"(different: {named})" in refused.stderr and "--set-file kueue.managerConfig" in refused.stderr
    wanted = kueue_config_of(render(own_kueue(values)), "gpustack-operator-kueue-manager-config")
    given = {
        **values,
        "kueue": {
            **values.get("kueue", {}),
            "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(wanted)},
        },
    }
    docs = render(given)
    assert kueue_config_of(docs, "kueue-manager-config") == wanted
    assert kueue_config_of(docs, "gpustack-operator-kueue-manager-config") == wanted


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"worker": {"replicas": "two"}}, "at '/worker/replicas': got string, want integer"),
        ({"deviceManager": {"securePort": "https"}}, "at '/deviceManager/securePort'"),
        (
            {"global": {"manufacturers": {"nvidia": {"pciVendorID": "10DE"}}}},
            "at '/global/manufacturers/nvidia/pciVendorID': '10DE' does not match",
        ),
        ({"cleanupOnUninstall": "yes"}, "at '/cleanupOnUninstall': got string, want boolean"),
        ({"worker": {"leaderElection": {"lease": "15 seconds"}}}, "at '/worker/leaderElection/lease'"),
        ({"workers": {"replicas": 2}}, "additional properties 'workers' not allowed"),
        ({"global": {"certmanager": {"enabled": "sometimes"}}}, "at '/global/certmanager/enabled'"),
        ({"modelManager": {"port": -1}}, "at '/modelManager/port'"),
        ({"kueue": {"clientConnection": {"qps": 0}}}, "at '/kueue/clientConnection/qps'"),
        ({"kueue": {"clientConnection": {"burst": "many"}}}, "at '/kueue/clientConnection/burst'"),
        ({"kueue": {"controllerConcurrency": {"Pod": 0}}}, "at '/kueue/controllerConcurrency/Pod': minimum"),
        ({"kueue": {"controllerConcurrency": {"Pod": "five"}}}, "at '/kueue/controllerConcurrency/Pod'"),
        ({"kueue": {"waitForPodsReady": {"timeout": "6 hours"}}}, "at '/kueue/waitForPodsReady/timeout'"),
    ],
)
def test_the_schema_refuses_a_wrong_value_naming_it(values: dict[str, Any], said: str) -> None:
    refused = helm("template", "gpustack-operator", str(CHART), "--namespace", NS, values=values, check=False)
    assert refused.returncode != 0 and said in refused.stderr, refused.stderr


def test_another_namespace_is_refused_with_the_command_to_use() -> None:
    refused = helm("template", "gpustack-operator", str(CHART), "--namespace", "ops", values={}, check=False)
    assert (
        refused.returncode != 0 and "gpustack-system" in refused.stderr and "helm install" in refused.stderr
    )
    assert "Settings, leader Lease and certificate Secret" in refused.stderr  # and why


def test_values_carry_every_value_of_d3() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in (
        "global.manufacturers.nvidia.pciVendorID",
        "global.manufacturers.nvidia.runtimeInjectsDriver",
        "global.manufacturers.ascend.runtimeInjectsDevices",
        "global.manufacturers.thead.partitionKind",
        "global.certmanager.enabled",
        "worker.enabled",
        "worker.replicas",
        "worker.securePort",
        "worker.podDisruptionBudget",
        "worker.topologySpreadConstraints",
        "worker.affinity",
        "worker.disableApplications",
        "deviceManager.enabled",
        "deviceManager.securePort",
        "deviceManager.env",
        "deviceManager.createRuntimeClasses",
        "deviceManager.networkPolicy.enabled",
        "modelManager.enabled",
        "modelManager.rootPath",
        "modelManager.securePort",
        "kueue.enabled",
        "node-feature-discovery.enabled",
        "csi-driver-nfs.enabled",
        "csi-driver-s3.enabled",
        "topograph.enabled",
        "ledgerReleaseTerminatedPods",
        "cleanupOnUninstall",
        "removeWebhooksOnUninstall",
    ):
        node: Any = values
        for part in path.split("."):
            assert isinstance(node, dict) and part in node, path
            node = node[part]
    assert len(values["global"]["manufacturers"]) == len(manufacturers.MANUFACTURERS)
