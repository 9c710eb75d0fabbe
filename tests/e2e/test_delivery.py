"""Model delivery on the local control plane with the local hub (model-delivery spec §3-§4).

The worker (webhooks and controllers) resolves ModelArtifacts against the local hub and writes each
plugin node's NodeModelStore spec; ``gpustack-operator model-manager`` runs as each node's plugin,
in a private mount namespace, with a ServiceAccount token bound to its own Pod (so the status guard
admits it for its node only). The nodes are kwok nodes: no kubelet calls the plugin, so the tests
call its CSI socket the way kubelet does (``NodePublishVolume`` with kubelet's pod keys) and read
the plugin's own mount table; ``CSINode`` (kubelet's object) is written by the harness. The
real-kubelet variant waits for the real-kubelet nodes of the device-manager work.

Ports: ``GPUSTACK_DELIVERY_HUB_PORT`` and ``GPUSTACK_DELIVERY_PLUGIN_PORT`` (free ports when unset).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gpustack
import grpc
import harness
import localhub
import pytest

from api import delivery as d
from tests.e2e.model_manager import bound_kubeconfig, plugin_rbac
from tests.e2e.objects import setting
from tests.hub.control import HubControl
from tests.hub.repos import HubRepos, write_random
from tests.hub.server import Fault
from tests.net import free_port

pytestmark = pytest.mark.e2e

SUFFIX = uuid.uuid4().hex[:5]
NS = f"delivery-{SUFFIX}"
TOKEN = "hf_e2e_reader_token"
SYSTEM = gpustack.SYSTEM_NAMESPACE
GROUP = "worker.gpustack.ai/v1"


# --- the hub ---------------------------------------------------------------------------------------


@dataclass
class Hub:
    endpoint: str
    repos: HubRepos
    control: HubControl

    def commit(self, repo: str, files: dict[str, Any], **kw: Any) -> str:
        if self.repos.load(repo) is None:
            self.repos.create(repo, private=kw.pop("private", False))
        return self.repos.commit(repo, files, **kw)


@pytest.fixture(scope="module")
def hub(cluster: harness.ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    root = tmp_path_factory.mktemp("hub")
    port = localhub.port_from("GPUSTACK_DELIVERY_HUB_PORT")
    with localhub.serving(root, port, cluster.state_dir / "logs" / "delivery-hub.log") as endpoint:
        found = Hub(endpoint, HubRepos(root), HubControl(endpoint))
        found.repos.add_user(TOKEN, "e2e")
        yield found


# --- the operator ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def operator(cluster: harness.ClusterInfo, hub: Hub) -> Iterator[gpustack.Operator]:
    op = gpustack.install(cluster)
    cluster.apply(
        [
            setting("model-artifact-huggingface-endpoint", hub.endpoint),
            setting("model-store-high-watermark", "60"),
            setting("model-store-low-watermark", "50"),
        ]
    )
    gpustack.ensure_namespace(cluster, NS)
    harness.wait_for_default_service_account(cluster, NS)
    gpustack.start_worker(cluster, op)
    try:
        yield op
    finally:
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)
        cluster.kubectl("delete", "namespace", NS, "--wait=false", "--ignore-not-found")


def artifact(cluster: harness.ClusterInfo, name: str) -> dict[str, Any]:
    return cluster.kubectl_json("get", "modelartifact", name, "-n", NS)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def apply_artifact(
    cluster: harness.ClusterInfo, name: str, repo: str, secret: str | None = None, **spec: Any
) -> None:
    hub_source: dict[str, Any] = {"repository": repo}
    if secret:
        hub_source["secretRef"] = {"name": secret}
    cluster.apply(
        {
            "apiVersion": GROUP,
            "kind": "ModelArtifact",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"source": {"huggingFace": hub_source}, **spec},
        }
    )


def wait_resolved(
    cluster: harness.ClusterInfo, name: str, status: str = "True", reason: str | None = None
) -> dict:
    def ready() -> bool:
        cond = condition(artifact(cluster, name), d.RESOLVED)
        return cond.get("status") == status and (reason is None or cond.get("reason") == reason)

    harness.wait_for(ready, timeout=90, what=f"artifact {name} Resolved={status} {reason or ''}")
    return artifact(cluster, name)


def expected_digest(repos: HubRepos, repo: str) -> str:
    record = repos.load(repo)
    lines = sorted(
        (f.path.encode(), f"{'sha256:' + f.sha256 if f.lfs else 'gitsha1:' + f.oid} {f.size} {f.path}\n")
        for f in record.files(record.refs["main"])
    )
    text = "gpustack-manifest v1\n" + "".join(line for _, line in lines)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


# --- the plugin -------------------------------------------------------------------------------------


@dataclass
class Plugin:
    node: str
    kubelet: Path
    root: Path
    kubeconfig: Path
    log: Path
    port: int
    tmpfs_mib: int
    process: subprocess.Popen | None = None
    holder: subprocess.Popen | None = None
    extra: tuple[str, ...] = ()  # further model-manager flags (the peer port, its token)

    @property
    def socket(self) -> Path:
        return self.kubelet / "plugins" / "model.csi.gpustack.ai" / "csi.sock"

    def start(self) -> None:
        """Start the plugin inside the node's mount namespace (made once, with the cache's tmpfs, and
        held by a process of its own so mounts outlive a plugin restart, as a node's do)."""
        if self.holder is None:
            script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && exec sleep infinity'
            self.holder = subprocess.Popen(
                [
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    script,
                    "sh",
                    f"{self.tmpfs_mib}m",
                    str(self.root),
                ],
                start_new_session=True,
            )
            harness.wait_for(
                lambda: f" {self.root} " in Path(f"/proc/{self.holder.pid}/mountinfo").read_text(),
                timeout=30,
                what="the node's cache filesystem",
            )
        command = [
            "nsenter",
            "-t",
            str(self.holder.pid),
            "-m",
            "--",
            gpustack.PYTHON,
            "-m",
            "gpustack_operator",
            "model-manager",
            "--node-name",
            self.node,
            "--root-path",
            str(self.root),
            "--kubelet-dir",
            str(self.kubelet),
            "--kubeconfig",
            str(self.kubeconfig),
            "--insecure",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            str(self.port),
            "--no-register",
            "--stall-timeout",
            "2",
            "--checkpoint-mib",
            "4",
            "--unreferenced-grace",
            "1",
            *self.extra,
        ]
        self.socket.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            command,
            cwd=gpustack.REPO,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        harness.wait_for(self.socket.exists, timeout=60, what=f"the plugin socket of {self.node}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.holder is not None:
            os.killpg(self.holder.pid, signal.SIGKILL)  # the namespace, its tmpfs and mounts go with it
            self.holder.wait(timeout=10)

    def mountinfo(self) -> str:
        assert self.process is not None
        return Path(f"/proc/{self.process.pid}/mountinfo").read_text()

    def target(self, pod: str) -> Path:
        return self.kubelet / "pods" / pod / "volumes" / "kubernetes.io~csi" / "gpustack-model" / "mount"

    def publish(
        self, obj: dict[str, Any], pod: str, *, namespace: str = NS, token: str | None = None
    ) -> grpc.RpcError | None:
        """One NodePublishVolume as kubelet sends it; the error, or None when mounted."""
        from nodeplugins.modelmanager.grpc_server import csi, csi_grpc

        context = {
            d.CSI_EPHEMERAL: "true",
            d.CSI_POD_NAMESPACE: namespace,
            d.CSI_POD_NAME: pod,
            d.ATTR_ARTIFACT: obj["metadata"]["name"],
            d.ATTR_ARTIFACT_UID: obj["metadata"]["uid"],
            d.ATTR_MANIFEST_DIGEST: obj["status"]["resolved"]["manifestDigest"],
        }
        request = csi.NodePublishVolumeRequest(
            volume_id=f"csi-{pod}",
            target_path=str(self.target(pod)),
            readonly=True,
            volume_capability=csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume()),
            volume_context=context,
            secrets={"token": token} if token else {},
        )
        with grpc.insecure_channel(f"unix://{self.socket}") as channel:
            try:
                csi_grpc.NodeStub(channel).NodePublishVolume(request, timeout=30)
            except grpc.RpcError as error:
                return error
        return None

    def unpublish(self, pod: str) -> None:
        from nodeplugins.modelmanager.grpc_server import csi, csi_grpc

        with grpc.insecure_channel(f"unix://{self.socket}") as channel:
            csi_grpc.NodeStub(channel).NodeUnpublishVolume(
                csi.NodeUnpublishVolumeRequest(volume_id=f"csi-{pod}", target_path=str(self.target(pod))),
                timeout=30,
            )

    def mount_until_done(self, obj: dict[str, Any], pod: str, timeout: float = 120, **kw: Any) -> list[str]:
        """Retry as kubelet does until mounted; returns the codes seen on the way."""
        codes: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            error = self.publish(obj, pod, **kw)
            if error is None:
                return codes
            codes.append(error.code().name)
            if error.code() not in (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE):
                raise AssertionError(f"{error.code().name}: {error.details()}")
            time.sleep(0.5)
        raise AssertionError(f"never mounted: {codes[-3:]}")


def _node(cluster: harness.ClusterInfo, name: str) -> None:
    harness.create_fake_node(cluster, name)
    cluster.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": name},
            "spec": {"drivers": [{"name": "model.csi.gpustack.ai", "nodeID": name}]},
        }
    )


def _plugin(
    cluster: harness.ClusterInfo,
    name: str,
    *,
    tmpfs_mib: int,
    extra: Callable[[Path], tuple[str, ...]] | None = None,
) -> Plugin:
    """A kwok node of ``name`` with its plugin; ``extra(base)`` gives further flags, from the
    plugin's own directory."""
    base = cluster.state_dir / f"dl-{name[-9:]}"
    shutil.rmtree(base, ignore_errors=True)
    (base / "kubelet" / "pods").mkdir(parents=True)
    (base / "cache").mkdir()
    _node(cluster, name)
    bound_kubeconfig(cluster, name, base / "kubeconfig")
    plugin = Plugin(
        name,
        base / "kubelet",
        base / "cache",
        base / "kubeconfig",
        base / "plugin.log",
        free_port(),
        tmpfs_mib,
        extra=extra(base) if extra is not None else (),
    )
    plugin.start()
    return plugin


@pytest.fixture(scope="module")
def plugins(cluster: harness.ClusterInfo, operator: gpustack.Operator) -> Iterator[dict[str, Plugin]]:
    plugin_rbac(cluster)
    started: dict[str, Plugin] = {}
    try:
        started["disk"] = _plugin(cluster, f"dl-disk-{SUFFIX}", tmpfs_mib=192)
        # No grace: a model is collectable as soon as its last Pod unpublishes it.
        no_grace = ("--unreferenced-grace", "0")
        started["small"] = _plugin(cluster, f"dl-small-{SUFFIX}", tmpfs_mib=96, extra=lambda _: no_grace)
        yield started
    finally:
        for plugin in started.values():
            plugin.stop()
            harness.delete_fake_node(cluster, plugin.node)
        cluster.kubectl("delete", "csidriver", "model.csi.gpustack.ai", "--ignore-not-found")


def store_status(cluster: harness.ClusterInfo, node: str) -> dict[str, Any]:
    run = cluster.kubectl("get", "nodemodelstore", node, "-o", "json", check=False)
    found = json.loads(run.stdout) if run.returncode == 0 else {}
    return found.get("status") or {}


def model_entry(cluster: harness.ClusterInfo, node: str, digest: str) -> dict[str, Any]:
    return next((m for m in store_status(cluster, node).get("models") or [] if m["digest"] == digest), {})


# --- the tests ----------------------------------------------------------------------------------------


def test_an_artifact_resolves_to_a_commit_and_a_digest(
    cluster: harness.ClusterInfo, hub: Hub, operator
) -> None:
    commit = hub.commit(
        "org/tiny", {"config.json": b'{"h": 1}\n', "model.safetensors": bytes(range(256)) * 1024}
    )
    hub.commit("org/tiny", {"extra.md": b"later\n"}, keep=True, branch="next")
    apply_artifact(cluster, "tiny", "org/tiny")
    obj = wait_resolved(cluster, "tiny")
    resolved = obj["status"]["resolved"]
    assert resolved["revision"] == commit
    assert resolved["manifestDigest"] == expected_digest(hub.repos, "org/tiny")
    assert resolved["fileCount"] == 2 and obj["spec"]["source"]["huggingFace"]["revision"] == "main"
    assert "worker.gpustack.ai/model-artifact-protection" in obj["metadata"]["finalizers"]
    printed = cluster.kubectl("get", "mart", "tiny", "-n", NS).stdout
    assert commit in printed and "True" in printed


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"source": {"persistentVolumeClaim": {"claimName": "w"}}, "allowPatterns": ["*.bin"]},
            "spec.allowPatterns",
        ),
        ({"source": {"persistentVolumeClaim": {"claimName": "w", "path": "../x"}}}, "path"),
        ({"source": {"image": {"reference": "repo:v1"}}}, "spec.source.image.reference"),
        (
            {"source": {"huggingFace": {"repository": "a/b"}, "persistentVolumeClaim": {"claimName": "c"}}},
            "spec.source",
        ),
    ],
)
def test_bad_artifacts_are_refused_with_their_field(
    cluster: harness.ClusterInfo, operator, spec, field
) -> None:
    run = cluster.kubectl(
        "apply",
        "-f",
        "-",
        check=False,
        input=json.dumps(
            {
                "apiVersion": GROUP,
                "kind": "ModelArtifact",
                "metadata": {"name": "bad", "namespace": NS},
                "spec": spec,
            }
        ),
    )
    assert run.returncode != 0 and field in run.stderr, run.stderr


def test_a_private_repository_without_a_token_is_access_denied(
    cluster: harness.ClusterInfo, hub: Hub, operator
) -> None:
    hub.commit("org/secret", {"config.json": b"{}\n"}, private=True)
    hub.repos.grant("org/secret", TOKEN)
    apply_artifact(cluster, "secret-none", "org/secret")
    obj = wait_resolved(cluster, "secret-none", "False", d.ACCESS_DENIED)
    assert "not accessible" in condition(obj, d.RESOLVED)["message"]
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf", "namespace": NS},
            "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
        }
    )
    apply_artifact(cluster, "secret-ok", "org/secret", secret="hf")
    wait_resolved(cluster, "secret-ok")


def test_a_tenant_cannot_write_an_artifacts_status(cluster: harness.ClusterInfo, operator) -> None:
    cluster.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "status-writer", "namespace": NS},
                "rules": [
                    {
                        "apiGroups": ["worker.gpustack.ai"],
                        "resources": ["modelartifacts/status"],
                        "verbs": ["get", "patch", "update"],
                    }
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "alice", "namespace": NS},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "status-writer"},
                "subjects": [{"kind": "User", "name": "alice"}],
            },
        ]
    )
    patch = {
        "status": {
            "conditions": [
                {
                    "type": "Resolved",
                    "status": "True",
                    "reason": "Resolved",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        }
    }
    run = cluster.kubectl(
        "patch",
        "modelartifact",
        "secret-none",
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(patch),
        "--as=alice",
        check=False,
    )
    assert run.returncode != 0 and "only the worker writes a ModelArtifact's status" in run.stderr


def test_node_stores_carry_the_settings_and_the_plugins_status(
    cluster: harness.ClusterInfo, hub: Hub, plugins
) -> None:
    node = plugins["disk"].node
    harness.wait_for(
        lambda: store_status(cluster, node).get("observedGeneration") is not None,
        timeout=60,
        what="the plugin's first status",
    )
    obj = cluster.kubectl_json("get", "nodemodelstore", node)
    assert obj["spec"]["hub"]["huggingFaceEndpoint"] == hub.endpoint
    assert obj["spec"]["watermarks"] == {"highPercent": 60, "lowPercent": 50}
    assert obj["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert condition(obj, "Ready")["status"] == "True"
    # Another node's plugin may not write this node's status: its token names its own node.
    other = plugins["small"].kubeconfig
    run = subprocess.run(
        [
            str(cluster.kubectl_path),
            "--kubeconfig",
            str(other),
            "patch",
            "nodemodelstore",
            node,
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status": {"models": []}}',
        ],
        capture_output=True,
        text=True,
        env=cluster.env(),
        timeout=60,
    )
    assert run.returncode != 0 and "node its Pod runs on" in run.stderr


def test_a_mount_downloads_once_and_a_second_pod_mounts_without_a_download(
    cluster: harness.ClusterInfo, hub: Hub, plugins
) -> None:
    plugin = plugins["disk"]
    obj = artifact(cluster, "tiny")
    digest = obj["status"]["resolved"]["manifestDigest"]
    hub.control.clear_log()
    codes = plugin.mount_until_done(obj, "pod-a")
    assert codes and codes[0] == "ABORTED"  # the first mount starts the download
    assert f"/trees/{digest.removeprefix('sha256:')}/model" in plugin.mountinfo()
    line = next(ln for ln in plugin.mountinfo().splitlines() if str(plugin.target("pod-a")) in ln)
    assert line.split()[5].startswith("ro")  # bind, then remount read-only
    # The store publishes Ready and the reference in separate status writes: wait for both.
    harness.wait_for(
        lambda: (
            (e := model_entry(cluster, plugin.node, digest)).get("state") == "Ready" and e.get("referenced")
        ),
        timeout=60,
        what="the digest Ready and referenced in the node's store",
    )
    assert model_entry(cluster, plugin.node, digest)["referenced"] is True
    downloads = [e for e in hub.control.log() if e["kind"] in ("resolve", "cdn") and e["method"] == "GET"]
    hub.control.clear_log()
    assert plugin.mount_until_done(obj, "pod-b") == []
    assert [e for e in hub.control.log() if e["kind"] in ("resolve", "cdn", "tree")] == []
    assert len(downloads) >= 2
    # The digest is not authorization: another namespace naming the same artifact is refused.
    error = plugin.publish(obj, "pod-x", namespace="default")
    assert error is not None and error.code() == grpc.StatusCode.PERMISSION_DENIED
    text = json.dumps(store_status(cluster, plugin.node))
    assert NS not in text and "org/tiny" not in text and "tiny" not in text.replace(digest, "")


def test_a_tampered_file_is_refused_with_integrity_mismatch(
    cluster: harness.ClusterInfo, hub: Hub, plugins
) -> None:
    plugin = plugins["disk"]
    hub.commit("org/tampered", {"config.json": b'{"t": 1}\n', "weights.safetensors": bytes(4096)})
    apply_artifact(cluster, "tampered", "org/tampered")
    obj = wait_resolved(cluster, "tampered")
    hub.repos.tamper("org/tampered", "config.json")
    digest = obj["status"]["resolved"]["manifestDigest"]
    plugin.publish(obj, "pod-t")
    harness.wait_for(
        lambda: model_entry(cluster, plugin.node, digest).get("state") == "Failed",
        timeout=60,
        what="the tampered digest Failed",
    )
    entry = model_entry(cluster, plugin.node, digest)
    assert entry["reason"] == d.INTEGRITY_MISMATCH and entry.get("retryTime")
    error = plugin.publish(obj, "pod-t")
    assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
    assert f"/trees/{digest.removeprefix('sha256:')}" not in plugin.mountinfo()


def test_a_hub_outage_during_revalidation_degrades_and_never_revokes(
    cluster: harness.ClusterInfo, hub: Hub
) -> None:
    wait_resolved(cluster, "secret-ok")
    hub.control.set_faults(Fault("status", status=503))
    try:
        # A Secret change revalidates at once (the interval is a day).
        cluster.kubectl(
            "annotate", "secret", "hf", "-n", NS, f"touched={uuid.uuid4().hex[:6]}", "--overwrite"
        )
        harness.wait_for(
            lambda: condition(artifact(cluster, "secret-ok"), d.DEGRADED).get("status") == "True",
            timeout=60,
            what="Degraded during the outage",
        )
        obj = artifact(cluster, "secret-ok")
        assert condition(obj, d.DEGRADED)["reason"] == d.SOURCE_UNAVAILABLE
        assert condition(obj, d.RESOLVED)["status"] == "True"
    finally:
        hub.control.set_faults()


def test_collection_removes_the_oldest_unreferenced_model_and_never_a_referenced_one(
    cluster: harness.ClusterInfo, hub: Hub, plugins, tmp_path: Path
) -> None:
    plugin = plugins["small"]  # a 96 MiB filesystem, high watermark 60 % (57.6 MiB), low 50 %
    names = {}
    for name in ("gc-a", "gc-b", "gc-c"):
        hub.commit(f"org/{name}", {"w.safetensors": write_random(tmp_path / name, 30 << 20, seed=len(names))})
        apply_artifact(cluster, name, f"org/{name}")
        names[name] = wait_resolved(cluster, name)
    digest = {n: o["status"]["resolved"]["manifestDigest"] for n, o in names.items()}
    plugin.mount_until_done(names["gc-a"], "gc-pod-a")
    plugin.unpublish("gc-pod-a")  # unreferenced from now on, and this plugin keeps no grace
    harness.wait_for(
        lambda: model_entry(cluster, plugin.node, digest["gc-a"]).get("referenced") is False,
        timeout=60,
        what="A published as unreferenced",
    )
    plugin.mount_until_done(names["gc-b"], "gc-pod-b")  # does not fit beside A: A is collected
    harness.wait_for(
        lambda: not model_entry(cluster, plugin.node, digest["gc-a"]),
        timeout=60,
        what="the unreferenced model collected",
    )
    # C does not fit beside the referenced B, and B is never removed for it.
    plugin.publish(names["gc-c"], "gc-pod-c")
    harness.wait_for(
        lambda: model_entry(cluster, plugin.node, digest["gc-c"]).get("state") == "Failed",
        timeout=60,
        what="C refused for capacity",
    )
    assert model_entry(cluster, plugin.node, digest["gc-c"])["reason"] == d.INSUFFICIENT_CAPACITY
    error = plugin.publish(names["gc-c"], "gc-pod-c")
    assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert model_entry(cluster, plugin.node, digest["gc-b"])["state"] == "Ready"


def test_killing_the_plugin_mid_download_resumes_from_the_last_verified_byte(
    cluster: harness.ClusterInfo, hub: Hub, plugins, tmp_path: Path
) -> None:
    plugin = plugins["disk"]
    size = 24 << 20
    hub.commit("org/big", {"weights.safetensors": write_random(tmp_path / "big", size, seed=99)})
    apply_artifact(cluster, "big", "org/big")
    obj = wait_resolved(cluster, "big")
    digest = obj["status"]["resolved"]["manifestDigest"]
    hub.control.clear_log()
    hub.control.set_faults(Fault("slow", kind="cdn", rate=2 << 20))
    try:
        plugin.publish(obj, "big-pod")
        # The node's row shows the running download (kubectl get nms: Downloading "1 (N%)").
        harness.wait_for(
            lambda: "1 (" in cluster.kubectl("get", "nms", plugin.node, "--no-headers").stdout,
            timeout=30,
            what="the download in kubectl get nms",
        )
        harness.wait_for(
            lambda: sum(e["sent"] for e in hub.control.log("cdn")) > 10 << 20,
            timeout=60,
            what="10 MiB received",
        )
        plugin.kill()
    finally:
        hub.control.set_faults()
    before = sum(e["sent"] for e in hub.control.log("cdn"))
    hub.control.clear_log()
    plugin.start()
    plugin.mount_until_done(obj, "big-pod")
    after = hub.control.log("cdn")
    starts = [int(e["range"].split("=")[1].split("-")[0]) for e in after if e.get("range")]
    assert starts and min(starts) >= 4 << 20  # resumed at a checkpoint, not from the first byte
    assert sum(e["sent"] for e in after) < size
    assert before + sum(e["sent"] for e in after) < 2 * size
    harness.wait_for(
        lambda: model_entry(cluster, plugin.node, digest).get("state") == "Ready",
        timeout=60,
        what="the resumed digest Ready",
    )
