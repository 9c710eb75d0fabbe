"""Node delivery of a ModelDeployment's weights through a real kubelet (model-delivery spec §4.3,
§4.5): the deployment's Pod carries the CSI inline volume ``model.csi.gpustack.ai``, the kubelet of a
real node (upstream kubelet over the recording CRI fake runtime, tests/cluster/nodes.py) calls the
``gpustack-operator model-manager`` plugin it registered, the plugin downloads the pinned digest from
the local hub and bind-mounts it read-only, and only then does the kubelet create the container —
whose recorded mounts show the weights at ``/var/lib/gpustack/model``.

The plugin runs inside the kubelet's own mount namespace (as the DaemonSet shares the host's with
kubelet), on a small tmpfs there, with a ServiceAccount token bound to a Pod of its own on the node
(so the status guard lets it write that node's NodeModelStore only).  ``CSINode`` is the kubelet's.

Ports: node slot 7 (``GPUSTACK_NODE_PORT_BASE`` + 21..23), the hub and the plugin's side port on
free ports (``GPUSTACK_MD_NODE_HUB_PORT`` to pin the hub).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import gpustack
import harness
import localhub
import nodes
import pytest
import yaml

from api import constants
from tests.e2e.model_manager import bound_kubeconfig, plugin_rbac
from tests.e2e.objects import condition, delete_all, delete_artifacts, get, pool_ready, setting
from tests.hub.repos import HubRepos
from tests.net import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SUFFIX = uuid.uuid4().hex[:5]
NS = f"md-node-{SUFFIX}"
NODE = "mdn-a10g"
SLOT = 7
POOL = "gpustack--nvidia-a10g-linux-amd64"
SYSTEM = gpustack.SYSTEM_NAMESPACE
REPOSITORY = "Qwen/Qwen2.5-7B-Instruct"
WAIT = 300
SETTINGS = ("model-artifact-huggingface-endpoint", "model-artifact-delivery-mode")


@pytest.fixture(scope="module")
def hub(cluster: harness.ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("md-node-hub")
    port = localhub.port_from("GPUSTACK_MD_NODE_HUB_PORT")
    with localhub.serving(root, port, cluster.state_dir / "logs" / "md-node-hub.log") as endpoint:
        repos = HubRepos(root)
        repos.create(REPOSITORY)
        repos.commit(
            REPOSITORY, {"config.json": b'{"model_type": "qwen2"}\n', "model.safetensors": bytes(8192)}
        )
        yield endpoint


class Plugin:
    """``gpustack-operator model-manager`` inside the kubelet's mount namespace, registering itself
    with that kubelet (no ``--no-register``)."""

    def __init__(self, cluster: harness.ClusterInfo, node: nodes.Node) -> None:
        self.node = node
        self.root = node.directory / "model-cache"
        self.kubeconfig = node.directory / "model-manager.kubeconfig"
        self.log = node.directory / "logs" / "model-manager.log"
        self.process: subprocess.Popen | None = None
        bound_kubeconfig(cluster, node.name, self.kubeconfig)

    def kubelet_pid(self) -> int:
        pid = nodes._alive(self.node, "kubelet")
        assert pid is not None, "the node's kubelet is not running"
        return pid

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        enter = ["nsenter", "-t", str(self.kubelet_pid()), "-m", "--"]
        mounted = subprocess.run([*enter, "mountpoint", "-q", str(self.root)], check=False).returncode == 0
        if not mounted:  # the cache's filesystem, in the kubelet's namespace only
            subprocess.run(
                [*enter, "mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(self.root)], check=True
            )
        argv = [
            *enter,
            gpustack.PYTHON, "-m", "gpustack_operator", "model-manager",
            "--node-name", self.node.name,
            "--root-path", str(self.root),
            "--kubelet-dir", str(nodes.KUBELET_MOUNT),
            "--kubeconfig", str(self.kubeconfig),
            "--insecure", "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            argv,
            cwd=gpustack.REPO,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def env(cluster: harness.ClusterInfo, hub: str):
    op = gpustack.install(cluster)
    cluster.apply(setting("model-artifact-huggingface-endpoint", hub))
    gpustack.ensure_namespace(cluster, NS)
    harness.wait_for_default_service_account(cluster, NS)
    gpustack.start_worker(cluster, op, "--no-leader-election")
    node: nodes.Node | None = None
    plugin: Plugin | None = None
    try:
        node = nodes.start_node(cluster, NODE, "a10g-4.yaml", slot=SLOT)
        plugin_rbac(cluster)  # the plugin's ServiceAccount and RBAC, and the CSIDriver
        plugin = Plugin(cluster, node)
        plugin.start()

        def registered() -> bool:
            csinode = get(cluster, "csinode", NODE) or {}
            return any(
                d.get("name") == constants.CSI_DRIVER_MODEL
                for d in (csinode.get("spec") or {}).get("drivers") or []
            )

        harness.wait_for(registered, timeout=120, what="the kubelet registering the plugin (CSINode)")
        harness.wait_for(
            lambda: (
                ((get(cluster, "nodemodelstore", NODE) or {}).get("status") or {}).get("observedGeneration")
                is not None
            ),
            timeout=120,
            what="the node's store written by the worker and reported by the plugin",
        )
        cluster.apply(setting("model-artifact-delivery-mode", "Node"))

        harness.wait_for(
            lambda: pool_ready(cluster, POOL, NS),
            timeout=WAIT,
            what="the A10G pool of the real node and its LocalQueue",
        )
        yield cluster, node
    finally:
        delete_all(cluster, "modeldeployments", NS, WAIT, "deployments gone")
        delete_artifacts(cluster, NS, WAIT)
        for name in SETTINGS:
            cluster.kubectl("delete", "setting", name, "-n", SYSTEM, "--ignore-not-found", check=False)
        if plugin is not None:
            plugin.stop()
        started = node or nodes.node(cluster, NODE)  # a node whose start failed half-way too
        if started is not None:
            nodes.stop_node(started)
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        cluster.kubectl(
            "delete", "pod", f"mm-{NODE}", "-n", SYSTEM, "--force", "--grace-period=0", check=False
        )
        cluster.kubectl("delete", "node", NODE, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "devices", NODE, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "csidriver", constants.CSI_DRIVER_MODEL, "--ignore-not-found", check=False)
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)


def test_the_kubelet_mounts_the_weights_before_it_creates_the_container(env) -> None:
    cluster, node = env
    artifact = yaml.safe_load((REPO / "examples" / "40-modelartifact-qwen-7b.yaml").read_text())
    artifact["metadata"]["namespace"] = NS
    cluster.apply(artifact)
    resolved = harness.wait_for(
        lambda: (
            (a := get(cluster, "modelartifact", "qwen-7b", NS))
            and condition(a, "Resolved")[0] == "True"
            and a
        ),
        timeout=90,
        what="the seed artifact Resolved",
    )
    digest = resolved["status"]["resolved"]["manifestDigest"]
    deployment = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": "weights", "namespace": NS},
        "spec": {
            "model": {"name": REPOSITORY, "artifactRef": {"name": "qwen-7b"}},
            "engine": {"name": "vLLM", "image": "gpustack/runner:cuda13.0-vllm0.29.0"},
            "roles": [{"name": "server", "instanceType": POOL, "resources": {"accelerator": 1}}],
        },
    }
    cluster.apply(deployment)

    def mounted() -> dict | None:
        obj = get(cluster, "modeldeployment", "weights", NS)
        return obj if condition(obj, "WeightsReady")[1] == "Mounted" else None

    try:
        obj = harness.wait_for(mounted, timeout=WAIT, what="WeightsReady Mounted")
    except TimeoutError as error:
        status = (get(cluster, "modeldeployment", "weights", NS) or {}).get("status")
        raise TimeoutError(f"{error}: {json.dumps(status)[:3000]}") from None
    assert obj["status"]["model"] == {
        "artifact": "qwen-7b",
        "revision": resolved["status"]["resolved"]["revision"],
        "manifestDigest": digest,
        "delivery": "Node",
    }
    (pod,) = cluster.kubectl_json("get", "pods", "-n", NS, "-l", f"{constants.LABEL_APP_INSTANCE}=weights")[
        "items"
    ]
    assert pod["spec"]["nodeName"] == NODE
    main = next(ct for ct in pod["spec"]["containers"] if ct["name"] == "main")
    assert main["command"][:3] == ["vllm", "serve", "/var/lib/gpustack/model"]
    # What the kubelet handed the runtime: the plugin's read-only bind mount of the published digest.
    records = [
        r for r in node.containers() if r["podUid"] == pod["metadata"]["uid"] and r["container"] == "main"
    ]
    assert records, "the fake runtime recorded no main container"
    weights = next(m for m in records[-1]["mounts"] if m["containerPath"] == "/var/lib/gpustack/model")
    assert weights["readonly"] is True
    assert weights["hostPath"].endswith("/volumes/kubernetes.io~csi/gpustack-model/mount")
    assert pod["metadata"]["uid"] in weights["hostPath"]
    store = get(cluster, "nodemodelstore", NODE) or {}
    entry = next(m for m in (store.get("status") or {}).get("models") or [] if m["digest"] == digest)
    assert entry["state"] == "Ready" and entry["referenced"] is True


def test_an_instance_mounts_the_same_weights_read_only(env) -> None:
    """An Instance's ``additionalVolumes[].model``: a hub artifact goes through the CSI plugin (the
    digest is on the node already, so this mount is a bind of the published tree)."""
    cluster, node = env
    cluster.apply(
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "Instance",
            "metadata": {"name": "notebook", "namespace": NS},
            "spec": {
                "type": POOL,
                "image": "ubuntu:24.04",
                "command": ["tail", "-f", "/dev/null"],
                "resources": {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 10},
                "volume": {"ephemeral": {"capacity": "1Gi"}},
                "additionalVolumes": [
                    {"mountPath": "/models/qwen", "model": {"artifactRef": {"name": "qwen-7b"}}}
                ],
            },
        }
    )

    def recorded() -> tuple[dict, dict] | None:
        pod = get(cluster, "pod", "notebook", NS)
        if pod is None:
            return None
        uid = pod["metadata"]["uid"]  # the node's record outlives earlier runs' Pods of this name
        found = [r for r in node.containers() if r["podUid"] == uid and r["container"] == "main"]
        return (pod, found[-1]) if found else None

    try:
        pod, record = harness.wait_for(recorded, timeout=WAIT, what="the Instance's main container created")
    except TimeoutError as error:
        status = (get(cluster, "instance", "notebook", NS) or {}).get("status")
        raise TimeoutError(f"{error}: {json.dumps(status)[:2000]}") from None
    volume = next(v for v in pod["spec"]["volumes"] if "csi" in v)
    assert volume["csi"]["driver"] == constants.CSI_DRIVER_MODEL and volume["csi"]["readOnly"] is True
    assert volume["csi"]["volumeAttributes"]["artifact"] == "qwen-7b"
    weights = next(m for m in record["mounts"] if m["containerPath"] == "/models/qwen")
    assert weights["readonly"] is True and pod["metadata"]["uid"] in weights["hostPath"]
    cluster.kubectl("delete", "instance", "notebook", "-n", NS, "--wait=false")
    harness.wait_for(
        lambda: get(cluster, "instance", "notebook", NS) is None, timeout=WAIT, what="the Instance gone"
    )
