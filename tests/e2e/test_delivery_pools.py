"""The pool and warming kinds and node-to-node sync on the local control plane (model-delivery spec
§2.3, §3.5, §4.9, §4.10), with the local hub and two ``gpustack-operator model-manager`` plugins.

The worker (webhooks and every controller) resolves artifacts, writes each plugin node's
NodeModelStore spec (with its ModelStore's overrides and ``spec.peerSync``), reports ModelStore and
ModelStoreBinding status, renders warm-up Pods and writes pins. The two plugins run as in
``test_delivery`` (kwok nodes, a private mount namespace each, a token bound to a Pod of their own),
here with ``--peer-port``: each serves its trees to the other, authenticating the puller's
projected token (audience ``gpustack-model-peer``) with a real TokenReview. kwok runs no kubelet,
so the tests call a plugin's CSI socket the way kubelet would, with the attributes the Pods carry.

The hub's request log proves where bytes came from: after the first node published a digest, the
second node asks the hub nothing.

Ports: the hub on ``GPUSTACK_DELIVERY_POOLS_HUB_PORT`` (a free port when unset); the plugins' side
and peer ports are free ports.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gpustack
import harness
import localhub
import pytest

from api import constants
from api import delivery as d
from tests.e2e import model_manager as mm
from tests.e2e import test_delivery as td
from tests.e2e.objects import setting
from tests.hub.control import HubControl
from tests.hub.repos import HubRepos, write_random
from tests.net import free_port

pytestmark = pytest.mark.e2e

SUFFIX = uuid.uuid4().hex[:5]
NS = f"pools-{SUFFIX}"
SYSTEM = gpustack.SYSTEM_NAMESPACE
GROUP = "worker.gpustack.ai/v1"
POOL_LABEL = "pool.e2e.gpustack.ai/name"
WAIT = 120


@pytest.fixture(scope="module")
def hub(cluster: harness.ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[td.Hub]:
    root = tmp_path_factory.mktemp("pools-hub")
    port = localhub.port_from("GPUSTACK_DELIVERY_POOLS_HUB_PORT")
    with localhub.serving(root, port, cluster.state_dir / "logs" / "delivery-pools-hub.log") as endpoint:
        yield td.Hub(endpoint, HubRepos(root), HubControl(endpoint))


@pytest.fixture(scope="module")
def operator(cluster: harness.ClusterInfo, hub: td.Hub) -> Iterator[gpustack.Operator]:
    op = gpustack.install(cluster)
    cluster.apply(setting("model-artifact-huggingface-endpoint", hub.endpoint))
    gpustack.ensure_namespace(cluster, NS)
    harness.wait_for_default_service_account(cluster, NS)
    gpustack.start_worker(cluster, op)
    try:
        yield op
    finally:
        for kind in ("modelprefetches", "modelstorebindings", "modelartifacts"):
            cluster.kubectl("delete", kind, "--all", "-n", NS, "--wait=false", check=False)
        cluster.kubectl("delete", "modelstores", "--all", "--wait=false", check=False)
        harness.wait_for(
            lambda: not cluster.kubectl_json("get", "modelartifacts", "-n", NS)["items"],
            timeout=WAIT,
            what="the artifacts' finalizers released",
        )
        cluster.kubectl(
            "delete", "setting", "model-store-peer-sync", "-n", SYSTEM, "--ignore-not-found", check=False
        )
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)
        cluster.kubectl("delete", "namespace", NS, "--wait=false", "--ignore-not-found")


def _peer_rbac(cluster: harness.ClusterInfo) -> None:
    """What the chart grants the plugins for peer sync: TokenReviews of the tokens peers present."""
    cluster.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": f"{mm.SA}-peers"},
                "rules": [
                    {
                        "apiGroups": ["authentication.k8s.io"],
                        "resources": ["tokenreviews"],
                        "verbs": ["create"],
                    }
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{mm.SA}-peers"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": f"{mm.SA}-peers",
                },
                "subjects": [{"kind": "ServiceAccount", "name": mm.SA, "namespace": SYSTEM}],
            },
        ]
    )


def _peer_flags(cluster: harness.ClusterInfo, node: str):
    """The peer flags of ``node``'s plugin, with the projected token kubelet would mount: audience
    gpustack-model-peer, bound to the plugin's own Pod (created by ``mm.bound_kubeconfig``)."""

    def flags(base: Path) -> tuple[str, ...]:
        pod = f"mm-{node}"
        uid = cluster.kubectl_json("get", "pod", pod, "-n", SYSTEM)["metadata"]["uid"]
        token = cluster.kubectl(
            "create", "token", mm.SA, "-n", SYSTEM, "--audience", d.PEER_AUDIENCE,
            "--bound-object-kind", "Pod", "--bound-object-name", pod, "--bound-object-uid", uid,
            "--duration", "2h",
        ).stdout.strip()  # fmt: skip
        path = base / "peer-token"
        path.write_text(token)
        path.chmod(0o600)
        return (
            "--peer-port", str(free_port()), "--peer-address", "127.0.0.1", "--peer-token-file", str(path),
            "--peer-user", f"system:serviceaccount:{SYSTEM}:{mm.SA}",
        )  # fmt: skip

    return flags


@pytest.fixture(scope="module")
def plugins(cluster: harness.ClusterInfo, operator: gpustack.Operator) -> Iterator[dict[str, td.Plugin]]:
    mm.plugin_rbac(cluster)
    _peer_rbac(cluster)
    started: dict[str, td.Plugin] = {}
    try:
        for role in ("seed", "cold"):
            name = f"pl-{role}-{SUFFIX}"
            started[role] = td._plugin(cluster, name, tmpfs_mib=96, extra=_peer_flags(cluster, name))
            cluster.kubectl("label", "node", name, f"{POOL_LABEL}=e2e-{SUFFIX}", "--overwrite")
        for plugin in started.values():
            harness.wait_for(
                lambda p=plugin: bool(td.store_status(cluster, p.node).get("peerAddress")),
                timeout=WAIT,
                what=f"{plugin.node}'s store reported with its peer address",
            )
        yield started
    finally:
        for plugin in started.values():
            plugin.stop()
            harness.delete_fake_node(cluster, plugin.node)
            cluster.kubectl(
                "delete", "pod", f"mm-{plugin.node}", "-n", SYSTEM, "--force", "--grace-period=0", check=False
            )
        cluster.kubectl("delete", "csidriver", constants.CSI_DRIVER_MODEL, "--ignore-not-found")


def resolved(
    cluster: harness.ClusterInfo, hub: td.Hub, name: str, repo: str, files: dict[str, Any]
) -> dict[str, Any]:
    hub.commit(repo, files)
    cluster.apply(
        {
            "apiVersion": GROUP,
            "kind": "ModelArtifact",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"source": {"huggingFace": {"repository": repo}}},
        }
    )

    def ready() -> dict[str, Any] | None:
        obj = cluster.kubectl_json("get", "modelartifact", name, "-n", NS)
        return obj if td.condition(obj, d.RESOLVED).get("status") == "True" else None

    return harness.wait_for(ready, timeout=90, what=f"artifact {name} Resolved")


def hub_traffic(hub: td.Hub) -> list[dict[str, Any]]:
    return [e for e in hub.control.log() if e["kind"] in ("revision", "tree", "resolve", "cdn")]


def wait_state(
    cluster: harness.ClusterInfo, node: str, digest: str, state: str = d.STATE_READY
) -> dict[str, Any]:
    return harness.wait_for(
        lambda: (e := td.model_entry(cluster, node, digest)).get("state") == state and e,
        timeout=WAIT,
        what=f"{digest[:19]} {state} on {node}",
    )


# --- peer sync --------------------------------------------------------------------------------------


def test_the_second_node_pulls_from_the_first_and_never_from_the_hub(
    cluster: harness.ClusterInfo, hub: td.Hub, plugins: dict[str, td.Plugin], tmp_path: Path
) -> None:
    weights = write_random(tmp_path / "weights", 24 << 20, seed=16)
    obj = resolved(
        cluster, hub, "peered", "org/peered", {"config.json": b'{"p": 1}\n', "model.safetensors": weights}
    )
    digest = obj["status"]["resolved"]["manifestDigest"]
    seed, cold = plugins["seed"], plugins["cold"]
    seed.mount_until_done(obj, "seed-pod", namespace=NS)
    assert wait_state(cluster, seed.node, digest)["source"] == d.SOURCE_HUB
    assert hub_traffic(hub), "the first node downloaded from the hub"
    hub.control.clear_log()
    codes = cold.mount_until_done(obj, "cold-pod", namespace=NS)
    assert codes and codes[0] == "ABORTED"  # it materialized, from somewhere
    entry = wait_state(cluster, cold.node, digest)
    assert entry["source"] == d.SOURCE_PEER
    assert hub_traffic(hub) == [], f"the second node asked the hub: {hub_traffic(hub)[:3]}"
    assert f"/trees/{digest.removeprefix('sha256:')}/model" in cold.mountinfo()
    served = td.store_status(cluster, seed.node)["peerAddress"]
    assert served.startswith("127.0.0.1:")
    printed = cluster.kubectl("get", "nms", cold.node, "-o", "wide").stdout
    assert cold.node in printed


def test_a_tenant_cannot_read_a_peers_trees(
    cluster: harness.ClusterInfo, plugins: dict[str, td.Plugin]
) -> None:
    import urllib.error
    import urllib.request

    address = td.store_status(cluster, plugins["seed"].node)["peerAddress"]
    digest = next(m["digest"] for m in td.store_status(cluster, plugins["seed"].node)["models"])
    tenant = cluster.kubectl(
        "create", "token", "default", "-n", NS, "--audience", d.PEER_AUDIENCE
    ).stdout.strip()
    for headers, code in (({}, 401), ({"Authorization": f"Bearer {tenant}"}, 403)):
        request = urllib.request.Request(
            f"http://{address}{d.PEER_TREES_PATH}{digest.removeprefix('sha256:')}", headers=headers
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == code


def test_with_peer_sync_off_the_second_node_downloads_from_the_hub(
    cluster: harness.ClusterInfo, hub: td.Hub, plugins: dict[str, td.Plugin]
) -> None:
    seed, cold = plugins["seed"], plugins["cold"]
    cluster.apply(setting("model-store-peer-sync", "false"))
    harness.wait_for(
        lambda: cluster.kubectl_json("get", "nms", cold.node)["spec"].get("peerSync") is False,
        timeout=90,
        what="spec.peerSync false on the node",
    )
    try:
        obj = resolved(
            cluster,
            hub,
            "hubbed",
            "org/hubbed",
            {"config.json": b'{"h": 1}\n', "w.safetensors": bytes(1 << 20)},
        )
        digest = obj["status"]["resolved"]["manifestDigest"]
        seed.mount_until_done(obj, "seed-hubbed", namespace=NS)
        wait_state(cluster, seed.node, digest)
        hub.control.clear_log()
        cold.mount_until_done(obj, "cold-hubbed", namespace=NS)
        assert wait_state(cluster, cold.node, digest)["source"] == d.SOURCE_HUB
        assert any(e["kind"] in ("resolve", "cdn") for e in hub_traffic(hub))
    finally:
        cluster.kubectl("delete", "setting", "model-store-peer-sync", "-n", SYSTEM, "--ignore-not-found")


# --- pools and warming ------------------------------------------------------------------------------


def store(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": "ModelStore",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: f"e2e-{SUFFIX}"}}, **spec},
    }


def apply_refused(cluster: harness.ClusterInfo, obj: dict[str, Any]) -> str:
    run = cluster.kubectl("apply", "-f", "-", check=False, input=json.dumps(obj))
    assert run.returncode != 0, f"{obj['kind']} was admitted"
    return run.stderr


def test_a_model_store_is_the_pool_layer_of_its_nodes(
    cluster: harness.ClusterInfo, plugins: dict[str, td.Plugin]
) -> None:
    name = f"a-pool-{SUFFIX}"
    cluster.apply(store(name, watermarks={"highPercent": 90, "lowPercent": 85}, download={"concurrency": 3}))
    node = plugins["seed"].node

    def layered() -> bool:
        spec = cluster.kubectl_json("get", "nms", node)["spec"]
        return spec.get("store") == name and spec["download"]["concurrency"] == 3

    harness.wait_for(layered, timeout=90, what="the store's overrides in the node's spec")
    assert cluster.kubectl_json("get", "nms", node)["spec"]["watermarks"] == {
        "highPercent": 90,
        "lowPercent": 85,
    }
    harness.wait_for(
        lambda: (cluster.kubectl_json("get", "modelstore", name).get("status") or {}).get("nodes") == 2,
        timeout=90,
        what="the store's status counting its two nodes",
    )
    ms = cluster.kubectl_json("get", "modelstore", name)
    assert td.condition(ms, d.STORE_READY)["status"] == "True"
    # A second store over the same nodes: both report the overlap; the first name keeps them.
    second = f"b-pool-{SUFFIX}"
    cluster.apply(store(second))
    harness.wait_for(
        lambda: (
            td.condition(cluster.kubectl_json("get", "modelstore", second), d.STORE_SELECTOR_OVERLAP).get(
                "status"
            )
            == "True"
        ),
        timeout=90,
        what="SelectorOverlap on the second store",
    )
    assert (
        td.condition(cluster.kubectl_json("get", "modelstore", name), d.STORE_SELECTOR_OVERLAP)["status"]
        == "True"
    )
    assert cluster.kubectl_json("get", "nms", node)["spec"]["store"] == name
    cluster.kubectl("delete", "modelstore", second)
    stderr = apply_refused(cluster, store("bad", watermarks={"highPercent": 70, "lowPercent": 80}))
    assert "spec.watermarks.lowPercent" in stderr


def test_a_prefetch_warms_every_target_node_and_pins_it(
    cluster: harness.ClusterInfo, hub: td.Hub, plugins: dict[str, td.Plugin]
) -> None:
    pool = f"a-pool-{SUFFIX}"
    cluster.apply(store(pool, watermarks={"highPercent": 90, "lowPercent": 85}))
    obj = resolved(
        cluster, hub, "warm", "org/warm", {"config.json": b'{"w": 1}\n', "w.safetensors": bytes(3 << 20)}
    )
    digest = obj["status"]["resolved"]["manifestDigest"]
    binding: dict[str, Any] = {
        "apiVersion": GROUP,
        "kind": "ModelStoreBinding",
        "metadata": {"name": "grant", "namespace": NS},
        "spec": {"storeRefs": [{"name": pool}], "quota": {"bytes": "1Gi"}, "allowPinned": False},
    }
    cluster.apply(binding)
    prefetch = {
        "apiVersion": GROUP,
        "kind": "ModelPrefetch",
        "metadata": {"name": "warm", "namespace": NS},
        "spec": {
            "artifactRef": {"name": "warm"},
            "bindingRef": {"name": "grant"},
            "placement": {"nodeSelector": {"matchLabels": {POOL_LABEL: f"e2e-{SUFFIX}"}}},
            "retention": {"pinned": True},
        },
    }
    assert "spec.retention.pinned" in apply_refused(cluster, prefetch)  # the grant does not allow pins
    binding["spec"]["allowPinned"] = True
    cluster.apply(binding)
    cluster.apply(prefetch)

    def pods() -> list[dict[str, Any]]:
        found = cluster.kubectl_json("get", "pods", "-n", NS, "-l", d.LABEL_PREFETCH)["items"]
        return found if len(found) == 2 else []

    warmups = harness.wait_for(pods, timeout=90, what="one warm-up Pod per target node")
    assert sorted(p["spec"]["nodeName"] for p in warmups) == sorted(p.node for p in plugins.values())
    for pod in warmups:
        assert constants.KUEUE_QUEUE_NAME not in pod["metadata"]["labels"]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ModelPrefetch"
    # The node's kubelet mounts the Pod's volume: here the test, on kwok nodes, with the Pod's attributes.
    by_node = {p.node: p for p in plugins.values()}
    hub.control.clear_log()
    for pod in sorted(warmups, key=lambda p: p["spec"]["nodeName"] != plugins["seed"].node):
        attributes = pod["spec"]["volumes"][0]["csi"]["volumeAttributes"]
        assert attributes["manifestDigest"] == digest and attributes["artifactUID"] == obj["metadata"]["uid"]
        by_node[pod["spec"]["nodeName"]].mount_until_done(obj, pod["metadata"]["name"], namespace=NS)
    for plugin in plugins.values():
        wait_state(cluster, plugin.node, digest)
    assert td.model_entry(cluster, plugins["cold"].node, digest)["source"] == d.SOURCE_PEER

    def available() -> dict[str, Any] | None:
        found = cluster.kubectl_json("get", "modelprefetch", "warm", "-n", NS)
        return found if td.condition(found, d.PREFETCH_AVAILABLE).get("status") == "True" else None

    done = harness.wait_for(available, timeout=90, what="the prefetch Available")
    assert (done["status"]["readyNodes"], done["status"]["desiredNodes"]) == (2, 2)
    for plugin in plugins.values():
        harness.wait_for(
            lambda p=plugin: (
                digest in (cluster.kubectl_json("get", "nms", p.node)["spec"].get("pinned") or [])
            ),
            timeout=90,
            what=f"the digest pinned on {plugin.node}",
        )
    size = obj["status"]["resolved"]["sizeBytes"]
    harness.wait_for(
        lambda: (
            (cluster.kubectl_json("get", "modelstorebinding", "grant", "-n", NS).get("status") or {}).get(
                "usedBytes"
            )
            == str(size * 2)
        ),
        timeout=90,
        what="the grant's measured footprint: the digest on two nodes",
    )
    printed = cluster.kubectl("get", "mpf", "-n", NS).stdout
    assert "warm" in printed and "grant" in printed
    # The grant cannot shrink under what it admitted.
    binding["spec"]["quota"]["bytes"] = "1Mi"
    assert "spec.quota.bytes" in apply_refused(cluster, binding)
    # Deleting the prefetch drops its pins.
    cluster.kubectl("delete", "modelprefetch", "warm", "-n", NS)
    for plugin in plugins.values():
        harness.wait_for(
            lambda p=plugin: (
                digest not in (cluster.kubectl_json("get", "nms", p.node)["spec"].get("pinned") or [])
            ),
            timeout=90,
            what=f"the pin dropped on {plugin.node}",
        )
