"""NodePublishVolume / NodeUnpublishVolume logic against the local hub: validation, authorization
(the digest is never authorization), Aborted while materializing, the reference recorded before the
bind, back-off answers, idempotence, unpublish from the target alone; and real read-only bind mounts
in a private mount namespace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from api import delivery as d
from modelhub import huggingface as hf
from modelhub.connection import HubConnection
from nodeplugins.modelmanager import mounts
from nodeplugins.modelmanager.cache import NodeCache
from nodeplugins.modelmanager.config import PluginConfig
from nodeplugins.modelmanager.download import Limits
from nodeplugins.modelmanager.layout import Layout
from nodeplugins.modelmanager.materialize import Materializer
from nodeplugins.modelmanager.publish import CsiError, MountOps, NodeService, PublishRequest
from nodeplugins.modelmanager.throttle import ByteRate, RequestLimit
from tests.hub.server import Fault, HubServer
from tests.unit.delivery.conftest import TOKEN
from tests.unit.delivery.test_materialize import TUNING, FakeCapacity


class Artifacts:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.ready = True

    def synced(self) -> bool:
        return self.ready

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.objects.get((namespace, name))


class Kernel:
    """The mount table, for tests that run outside a mount namespace of their own."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.table: list[mounts.Mount] = []
        self.order: list[str] = []

    def bind(self, source: Path, target: Path) -> None:
        self.order.append("bind")
        self.table.append(mounts.Mount(self.device, str(source), os.path.normpath(str(target)), "ro"))

    def unmount(self, target: Path) -> bool:
        before = len(self.table)
        self.table = [m for m in self.table if m.point != os.path.normpath(str(target))]
        return len(self.table) < before

    def ops(self) -> MountOps:
        return MountOps(
            self.bind,
            self.unmount,
            lambda: list(self.table),
            lambda t: any(m.point == os.path.normpath(str(t)) for m in self.table),
        )


class Node:
    def __init__(self, hub: HubServer, tmp: Path) -> None:
        self.kubelet = tmp / "kubelet"
        self.kubelet.mkdir()
        self.layout = Layout(tmp / "cache")
        self.cache = NodeCache(self.layout)
        self.capacity = FakeCapacity(self.cache)
        config = PluginConfig(1, 80, 70, 4, 0, HubConnection(hub.endpoint))
        self.materializer = Materializer(
            self.cache, Limits(RequestLimit(4), ByteRate(0)), lambda: config, self.capacity, tuning=TUNING
        )
        self.artifacts = Artifacts()
        self.kernel = Kernel(mounts.device_of(self.layout.root))
        original = self.cache.add_reference

        def recorded(target: str, digest: str) -> None:
            self.kernel.order.append("reference")
            original(target, digest)

        self.cache.add_reference = recorded  # type: ignore[method-assign]
        self.service = NodeService(
            self.cache, self.materializer, self.artifacts, self.kubelet, ops=self.kernel.ops()
        )

    def resolve(
        self,
        hub: HubServer,
        name: str,
        repo: str,
        namespace: str = "team-a",
        token: str | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        res = hf.resolve(HubConnection(hub.endpoint), repo, "main", token, spec.get("allowPatterns"))
        obj = {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
            "spec": {"source": {"huggingFace": {"repository": repo, "revision": "main"}}, **spec},
            "status": {
                "resolved": {"revision": res.commit, "manifestDigest": res.manifest.digest},
                "conditions": [{"type": "Resolved", "status": "True"}],
            },
        }
        self.artifacts.objects[(namespace, name)] = obj
        return obj

    def target(self, pod: str) -> str:
        return str(self.kubelet / "pods" / pod / "volumes" / "kubernetes.io~csi" / "gpustack-model" / "mount")

    def request(
        self, artifact: dict[str, Any], pod: str, *, namespace: str | None = None, **over: Any
    ) -> PublishRequest:
        context = {
            d.CSI_EPHEMERAL: "true",
            d.CSI_POD_NAMESPACE: namespace or artifact["metadata"]["namespace"],
            d.ATTR_ARTIFACT: artifact["metadata"]["name"],
            d.ATTR_ARTIFACT_UID: artifact["metadata"]["uid"],
            d.ATTR_MANIFEST_DIGEST: artifact["status"]["resolved"]["manifestDigest"],
        }
        context.update(over.pop("context", {}))
        return PublishRequest(
            over.pop("volume_id", f"csi-{pod}"), over.pop("target", self.target(pod)), context, **over
        )

    def publish_until_mounted(self, request: PublishRequest, timeout: float = 60) -> list[str]:
        codes = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.service.publish(request)
                return codes
            except CsiError as error:
                codes.append(error.code)
                if error.code != "ABORTED":
                    raise
                time.sleep(0.05)
        raise AssertionError("never mounted")


def code_of(call) -> CsiError:
    with pytest.raises(CsiError) as raised:
        call()
    return raised.value


@pytest.fixture
def node(hub: HubServer, tmp_path: Path) -> Node:
    return Node(hub, tmp_path)


def test_first_mount_is_aborted_with_progress_then_mounts(node: Node, hub: HubServer) -> None:
    artifact = node.resolve(hub, "qwen", "org/public")
    request = node.request(artifact, "pod-a")
    first = code_of(lambda: node.service.publish(request))
    assert first.code == "ABORTED" and first.message.startswith("materializing sha256:")
    node.publish_until_mounted(request)
    digest = artifact["status"]["resolved"]["manifestDigest"]
    assert node.kernel.table[-1].root == str(node.layout.tree_model(digest))
    assert node.kernel.order == ["reference", "bind"]  # the reference is recorded before the bind
    assert node.cache.ledger.references == {os.path.normpath(request.target_path): digest}


def test_a_second_pod_mounts_without_a_second_download(node: Node, hub: HubServer) -> None:
    artifact = node.resolve(hub, "qwen", "org/public")
    node.publish_until_mounted(node.request(artifact, "pod-a"))
    hub.clear_log()
    node.service.publish(node.request(artifact, "pod-b"))
    assert hub.log() == []
    assert len(node.kernel.table) == 2


def test_publish_is_idempotent_for_a_mounted_target(node: Node, hub: HubServer) -> None:
    artifact = node.resolve(hub, "qwen", "org/public", allowPatterns=["*.json"])
    request = node.request(artifact, "pod-a")
    node.publish_until_mounted(request)
    node.service.publish(request)
    assert len(node.kernel.table) == 1


def test_the_digest_is_not_authorization(node: Node, hub: HubServer) -> None:
    artifact = node.resolve(hub, "qwen", "org/public", allowPatterns=["*.json"])
    node.publish_until_mounted(node.request(artifact, "pod-a"))
    # Another namespace names the same artifact and digest; it has no artifact of its own.
    stolen = node.request(artifact, "pod-x", namespace="team-b")
    error = code_of(lambda: node.service.publish(stolen))
    assert error.code == "PERMISSION_DENIED" and "team-b" in error.message
    # A user-written pod.namespace attribute is overwritten by kubelet's: judged in team-b still.
    assert len(node.kernel.table) == 1


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (lambda a: a["metadata"].__setitem__("uid", "other"), "UID"),
        (lambda a: a["status"]["conditions"][0].__setitem__("status", "False"), "not Resolved"),
        (
            lambda a: a["status"]["resolved"].__setitem__("manifestDigest", "sha256:" + "1" * 64),
            "another manifest",
        ),
        (
            lambda a: a["spec"].__setitem__("source", {"persistentVolumeClaim": {"claimName": "w"}}),
            "no hub source",
        ),
    ],
)
def test_authorization_rules(node: Node, hub: HubServer, change, rule: str) -> None:
    artifact = node.resolve(hub, "qwen", "org/public")
    request = node.request(artifact, "pod-a")
    change(artifact)
    error = code_of(lambda: node.service.publish(request))
    assert error.code == "PERMISSION_DENIED" and rule in error.message


@pytest.mark.parametrize(
    "over",
    [
        {"volume_id": ""},
        {"target": ""},
        {"target": "/etc/passwd"},
        {"target": "relative/path"},
        {"has_capability": False},
        {"block": True},
        {"context": {d.CSI_EPHEMERAL: "false"}},
        {"context": {d.ATTR_MANIFEST_DIGEST: "sha256:short"}},
        {"context": {d.ATTR_ARTIFACT: ""}},
    ],
)
def test_invalid_requests(node: Node, hub: HubServer, over: dict[str, Any]) -> None:
    artifact = node.resolve(hub, "qwen", "org/public")
    error = code_of(lambda: node.service.publish(node.request(artifact, "pod-a", **over)))
    assert error.code == "INVALID_ARGUMENT"


def test_traversal_out_of_the_kubelet_dir_is_refused(node: Node, hub: HubServer) -> None:
    artifact = node.resolve(hub, "qwen", "org/public")
    sneaky = str(node.kubelet / "pods" / ".." / ".." / "elsewhere")
    assert (
        code_of(lambda: node.service.publish(node.request(artifact, "p", target=sneaky))).code
        == "INVALID_ARGUMENT"
    )


def test_unavailable_until_artifacts_are_read(node: Node, hub: HubServer) -> None:
    artifact = node.resolve(hub, "qwen", "org/public")
    node.artifacts.ready = False
    assert code_of(lambda: node.service.publish(node.request(artifact, "pod-a"))).code == "UNAVAILABLE"


def test_a_failed_digest_answers_unavailable_at_once_without_downloading(node: Node, hub: HubServer) -> None:
    hub.repos.tamper("org/public", "config.json")
    artifact = node.resolve(hub, "qwen", "org/public")
    request = node.request(artifact, "pod-a")
    code_of(lambda: node.service.publish(request))
    node.materializer.wait(artifact["status"]["resolved"]["manifestDigest"], 60)
    hub.clear_log()
    error = code_of(lambda: node.service.publish(request))
    assert (
        error.code == "UNAVAILABLE"
        and d.INTEGRITY_MISMATCH in error.message
        and "next attempt" in error.message
    )
    assert hub.log() == []


def test_private_repository_needs_the_mounts_secret(node: Node, hub: HubServer) -> None:
    artifact = node.resolve(hub, "private", "org/private", token=TOKEN)
    no_secret = node.request(artifact, "pod-a")
    code_of(lambda: node.service.publish(no_secret))
    node.materializer.wait(artifact["status"]["resolved"]["manifestDigest"], 60)
    error = code_of(lambda: node.service.publish(no_secret))
    assert error.code == "UNAVAILABLE" and d.ACCESS_DENIED in error.message and TOKEN not in error.message


def test_unpublish_from_the_target_alone_and_for_unknown_targets(node: Node, hub: HubServer) -> None:
    artifact = node.resolve(hub, "qwen", "org/public", allowPatterns=["*.json"])
    request = node.request(artifact, "pod-a")
    node.publish_until_mounted(request)
    node.service.unpublish("csi-pod-a", request.target_path)
    assert node.kernel.table == [] and node.cache.ledger.references == {}
    assert not Path(request.target_path).exists()
    node.service.unpublish("csi-never", node.target("never"))  # succeeds
    assert code_of(lambda: node.service.unpublish("", request.target_path)).code == "INVALID_ARGUMENT"


def test_insufficient_capacity_is_resource_exhausted(node: Node, hub: HubServer) -> None:
    node.capacity.total, node.capacity.base = 100 << 20, 79 << 20
    artifact = node.resolve(hub, "qwen", "org/public")
    request = node.request(artifact, "pod-a")
    code_of(lambda: node.service.publish(request))
    node.materializer.wait(artifact["status"]["resolved"]["manifestDigest"], 60)
    assert code_of(lambda: node.service.publish(request)).code == "RESOURCE_EXHAUSTED"


def test_hub_outage_during_download_backs_off(node: Node, hub: HubServer) -> None:
    artifact = node.resolve(hub, "qwen", "org/public")
    hub.set_faults(Fault("status", kind="tree", status=503))
    request = node.request(artifact, "pod-a")
    code_of(lambda: node.service.publish(request))
    node.materializer.wait(artifact["status"]["resolved"]["manifestDigest"], 120)
    error = code_of(lambda: node.service.publish(request))
    assert error.code == "UNAVAILABLE" and d.SOURCE_UNAVAILABLE in error.message


# --- the kernel, for real, in a private mount namespace ---------------------------------------------

_REAL = r"""
import json, os, sys
from pathlib import Path
from nodeplugins.modelmanager import mounts
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
dst.mkdir(parents=True)
mounts.bind_read_only(src, dst)
table = mounts.read_mountinfo()
entry = mounts.mounted_at(table, dst)
try:
    (dst / "new").write_text("x")
    writable = True
except OSError:
    writable = False
refs = mounts.tree_references(table, mounts.device_of(src), Path(sys.argv[3]))
unmounted = mounts.unmount(dst)
again = mounts.unmount(dst)
print(json.dumps({"ro": entry.read_only, "writable": writable, "refs": refs, "unmounted": unmounted,
                  "again": again, "content": (src / "config.json").read_text()}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need CAP_SYS_ADMIN")
def test_read_only_bind_mount_in_a_private_namespace(tmp_path: Path) -> None:
    digest_hex = "ab" * 32
    tree = tmp_path / "cache" / "v1" / "trees" / digest_hex / "model"
    tree.mkdir(parents=True)
    (tree / "config.json").write_text("{}")
    target = (
        tmp_path / "kubelet" / "pods" / "p1" / "volumes" / "kubernetes.io~csi" / "gpustack-model" / "mount"
    )
    run = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            _REAL,
            str(tree),
            str(target),
            str(tmp_path / "kubelet"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["ro"] is True and result["writable"] is False  # the remount made it read-only
    assert result["refs"] == {str(target): "sha256:" + digest_hex}
    assert result["unmounted"] is True and result["again"] is False
    assert not (tree / "new").exists()


def test_mounts_are_counted_by_result_without_tenant_labels(node: Node, hub: HubServer) -> None:
    from prometheus_client import REGISTRY

    from nodeplugins.modelmanager import metrics

    def count(result: str) -> float:
        return metrics.MOUNTS.labels(result)._value.get()

    artifact = node.resolve(hub, "qwen", "org/public", allowPatterns=["*.json"])
    before = {r: count(r) for r in ("hit", "materialized", "denied", "pending")}
    node.publish_until_mounted(node.request(artifact, "pod-a"))
    node.service.publish(node.request(artifact, "pod-b"))
    code_of(lambda: node.service.publish(node.request(artifact, "pod-x", namespace="team-b")))
    assert count("pending") > before["pending"] and count("denied") == before["denied"] + 1
    assert count("hit") + count("materialized") >= before["hit"] + before["materialized"] + 2
    exposed = "\n".join(
        f"{s.name}{s.labels}"
        for m in REGISTRY.collect()
        if m.name.startswith("gpustack_model_manager")
        for s in m.samples
    )
    assert "team" not in exposed and "qwen" not in exposed and "sha256" not in exposed
