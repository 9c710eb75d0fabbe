"""The pool and warming kinds' controllers (model-delivery spec §2.3, §4.4 item 2, §4.9): the pool
layer in each node's spec, ModelStore and ModelStoreBinding status, and a prefetch's warm-up Pods,
status, lapses and pins — the pure decisions from the spec's examples, then the reconcilers
together over the in-memory apiserver, with the artifact resolved by the real controller against
the local hub."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import pytest

from api import constants
from api import delivery as d
from api import prefetch as pf
from controllers.delivery import pools
from controllers.delivery import prefetch_plan as pp
from controllers.delivery.artifact_status import find
from controllers.delivery.artifacts import ModelArtifactReconciler
from controllers.delivery.model_stores import ModelStoreBindingReconciler, ModelStoreReconciler
from controllers.delivery.node_stores import NodeModelStoreWriter, checked_values, render_spec
from controllers.delivery.prefetches import ModelPrefetchReconciler
from kube.client import Client
from kube.manager import Manager
from tests.hub.server import HubServer
from tests.kube_fake import FakeApiServer

NS = "team-a"
GROUP = "worker.gpustack.ai/v1"
DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
GiB = 1 << 30
NOW = dt.datetime(2026, 3, 1, 12, 30, tzinfo=dt.UTC)


def node(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": pool, "kubernetes.io/hostname": name}},
    }


def store(name: str, selector: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": "ModelStore",
        "metadata": {"name": name, "generation": 1},
        "spec": {"nodeSelector": selector, **spec},
    }


def nms(
    name: str, models: list[dict[str, Any]] | None = None, total: int = 100 * GiB, stored: int = 0
) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": "NodeModelStore",
        "metadata": {"name": name},
        "spec": {},
        "status": {
            "capacity": {"totalBytes": total, "storedBytes": stored, "usedPercent": 0},
            "models": models or [],
        },
    }


def entry(state: str, digest: str = DIGEST, **extra: Any) -> dict[str, Any]:
    return {"digest": digest, "state": state, **extra}


def artifact(
    name: str = "qwen", digest: str = DIGEST, size: int = 10 * GiB, resolved: bool = True
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": "Resolved", "status": "True" if resolved else "False", "reason": "x"}]
    }
    if resolved:
        status["resolved"] = {"revision": "c" * 40, "manifestDigest": digest, "sizeBytes": size}
    return {
        "apiVersion": GROUP,
        "kind": "ModelArtifact",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {
            "source": {
                "huggingFace": {"repository": "org/x", "revision": "main", "secretRef": {"name": "hf"}}
            }
        },
        "status": status,
    }


def binding(stores: tuple[str, ...] = ("a",), quota: str = "100Gi", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": "ModelStoreBinding",
        "metadata": {"name": "grant", "namespace": NS, "generation": 1},
        "spec": {"storeRefs": [{"name": s} for s in stores], "quota": {"bytes": quota}, **spec},
    }


def prefetch(name: str = "warm", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": "ModelPrefetch",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1},
        "spec": {"artifactRef": {"name": "qwen"}, "bindingRef": {"name": "grant"}, **spec},
    }


def facts(
    obj: dict[str, Any],
    *,
    targets: tuple[str, ...] = ("a1", "a2"),
    granted: set[str] | None = None,
    stores: dict[str, dict[str, Any]] | None = None,
    pods: dict[str, dict[str, Any]] | None = None,
    art: dict[str, Any] | str | None = "default",
    now: dt.datetime = NOW,
) -> pp.Facts:
    return pp.Facts(
        prefetch=obj,
        artifact=artifact() if art == "default" else art,  # type: ignore[arg-type]
        binding=binding(),
        targets=pf.Targets(targets),
        granted=set(targets) if granted is None else granted,
        node_stores=stores if stores is not None else {n: nms(n) for n in targets},
        pods=pods or {},
        csi_driver_present=True,
        image="gpustack/mirrored-python:3.12-alpine",
        now=now,
    )


def cond(status: dict[str, Any], kind: str) -> tuple[str, str]:
    found = find(status.get("conditions"), kind) or {}
    return str(found.get("status")), str(found.get("reason"))


# --- the pool layer in each node's spec ---------------------------------------------------------------


def test_a_store_overrides_only_the_fields_it_states() -> None:
    values, problems = checked_values({"model-store-download-bandwidth": "200Mi"})
    assert not problems
    plain = render_spec(values)
    assert "store" not in plain and plain["peerSync"] is True
    pool = store("a100", {}, download={"bytesPerSecond": 0})  # explicit 0: unlimited on this pool
    spec = render_spec(values, pool)
    assert spec["store"] == "a100"
    assert spec["download"] == {"concurrency": 8, "bytesPerSecond": 0}
    assert spec["watermarks"] == plain["watermarks"] and spec["hub"] == plain["hub"]
    marks = render_spec(values, store("a100", {}, watermarks={"highPercent": 90, "lowPercent": 85}))
    assert (
        marks["watermarks"] == {"highPercent": 90, "lowPercent": 85}
        and marks["download"] == plain["download"]
    )


def test_a_store_override_that_fails_its_check_is_never_written() -> None:
    values, _ = checked_values({})
    spec = render_spec(
        values,
        store("bad", {}, watermarks={"highPercent": 60, "lowPercent": 70}, download={"concurrency": 99}),
    )
    assert spec["watermarks"] == {"highPercent": 80, "lowPercent": 70}
    assert spec["download"]["concurrency"] == 8 and spec["store"] == "bad"


def test_the_peer_sync_setting_reaches_the_spec() -> None:
    values, problems = checked_values({"model-store-peer-sync": "false"})
    assert not problems and render_spec(values)["peerSync"] is False
    values, problems = checked_values({"model-store-peer-sync": "maybe"})
    assert problems and render_spec(values)["peerSync"] is True


# --- ModelStore status ------------------------------------------------------------------------------


def test_store_status_counts_governed_nodes_and_reports_overlap() -> None:
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b")]
    stores = [
        store("a", {"matchLabels": {"pool": "a"}}),
        store("all", {}),
        store("b", {"matchLabels": {"pool": "b"}}),
    ]
    by_node = {"a1": nms("a1", total=10, stored=3), "a2": nms("a2", total=20, stored=4)}
    first = pools.store_status(stores[0], stores, nodes, by_node, NOW)
    assert first["nodes"] == 2 and first["capacity"] == {"totalBytes": 30, "storedBytes": 7}
    assert cond(first, d.STORE_READY) == ("True", d.REASON_GOVERNS_NODES)
    assert cond(first, d.STORE_SELECTOR_OVERLAP) == ("True", d.REASON_OVERLAP)
    wide = pools.store_status(stores[1], stores, nodes, by_node, NOW)
    assert wide["nodes"] == 1 and cond(wide, d.STORE_READY)[0] == "True"  # a1, a2 go to "a"; b1 to "all"
    # "all" < "b": b selects only b1, which "all" governs.
    lost = pools.store_status(stores[2], stores, nodes, by_node, NOW)
    assert lost["nodes"] == 0 and cond(lost, d.STORE_READY) == ("False", d.REASON_NO_NODES)
    assert "ModelStore all (1)" in find(lost["conditions"], d.STORE_READY)["message"]  # type: ignore[index]
    lone = pools.store_status(stores[0], stores[:1], nodes, by_node, NOW)
    assert cond(lone, d.STORE_SELECTOR_OVERLAP) == ("False", d.REASON_NO_OVERLAP)
    broken = store("x", {"matchExpressions": [{"key": "pool", "operator": "Near"}]})
    assert (
        cond(pools.store_status(broken, [broken], nodes, {}, NOW), d.STORE_READY)[1]
        == d.REASON_INVALID_SELECTOR
    )


# --- ModelStoreBinding status -----------------------------------------------------------------------


def test_binding_counts_each_digest_fully_on_every_granted_node_holding_it() -> None:
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b")]
    stores = {"a": store("a", {"matchLabels": {"pool": "a"}})}
    held = [
        nms("a1", [entry(d.STATE_READY)]),
        nms("a2", [entry(d.STATE_DOWNLOADING, downloadedBytes=1)]),  # any state counts
        nms("b1", [entry(d.STATE_READY)]),  # outside the grant
    ]
    two = [prefetch("p1"), prefetch("p2")]  # two prefetches of one artifact: one digest
    status = pools.binding_status(binding(), two, {"qwen": artifact()}, stores, nodes, held, 100 * GiB, NOW)
    assert status["usedBytes"] == "20Gi" and status["phase"] == d.PHASE_READY
    assert cond(status, d.BINDING_OVER_QUOTA) == ("False", d.REASON_WITHIN_QUOTA)
    over = pools.binding_status(binding(), two, {"qwen": artifact()}, stores, nodes, held, 15 * GiB, NOW)
    assert over["phase"] == d.PHASE_OVER_QUOTA and cond(over, d.BINDING_OVER_QUOTA)[0] == "True"


def test_binding_usage_is_absent_while_an_artifact_is_unresolved_and_missing_stores_are_an_error() -> None:
    status = pools.binding_status(
        binding(), [prefetch()], {"qwen": artifact(resolved=False)}, {}, [], [], GiB, NOW
    )
    assert "usedBytes" not in status and cond(status, d.BINDING_OVER_QUOTA) == (
        "Unknown",
        d.REASON_NOT_COUNTED,
    )
    assert status["phase"] == d.PHASE_ERROR and "ModelStore a does not exist" in status["phaseMessage"]
    zero = pools.binding_status(binding(), [], {}, {"a": store("a", {})}, [], [], GiB, NOW)
    assert zero["usedBytes"] == "0" and zero["phase"] == d.PHASE_READY  # zero is a measurement


# --- ModelPrefetch: Pods, status, lapses, pins -------------------------------------------------------


def test_one_warm_up_pod_per_target_node_mounting_the_artifacts_own_volume() -> None:
    result = pp.plan(facts(prefetch()))
    assert [p["spec"]["nodeName"] for p in result.create] == ["a1", "a2"]
    pod = result.create[0]
    assert constants.KUEUE_QUEUE_NAME not in pod["metadata"]["labels"]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ModelPrefetch"
    assert pod["metadata"]["ownerReferences"][0]["controller"] is True
    (volume,) = pod["spec"]["volumes"]
    assert volume["csi"]["driver"] == d.CSI_DRIVER_MODEL and volume["csi"]["readOnly"] is True
    assert volume["csi"]["volumeAttributes"] == {
        "artifact": "qwen",
        "artifactUID": "uid-qwen",
        "manifestDigest": DIGEST,
    }
    assert volume["csi"]["nodePublishSecretRef"] == {"name": "hf"}
    (container,) = pod["spec"]["containers"]
    assert "sha256sum" in container["command"][-1] and "find" in container["command"][-1]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert result.status["desiredNodes"] == 2 and result.status["readyNodes"] == 0
    assert cond(result.status, d.PREFETCH_PROGRESSING) == ("True", d.REASON_WARMING)
    assert cond(result.status, d.PREFETCH_AVAILABLE) == ("False", d.REASON_BELOW_MIN_READY)


def test_ready_nodes_need_no_pod_and_make_it_available_at_min_ready() -> None:
    stores = {"a1": nms("a1", [entry(d.STATE_READY)]), "a2": nms("a2", [entry(d.STATE_DOWNLOADING)])}
    result = pp.plan(facts(prefetch(minReady=1), stores=stores))
    assert [p["spec"]["nodeName"] for p in result.create] == ["a2"]
    assert (result.status["readyNodes"], result.status["downloadingNodes"]) == (1, 1)
    assert cond(result.status, d.PREFETCH_AVAILABLE) == ("True", d.REASON_WARM)
    all_of_them = pp.plan(facts(prefetch(), stores=stores))  # minReady 0: every target
    assert cond(all_of_them.status, d.PREFETCH_AVAILABLE)[0] == "False"


def test_a_node_that_gave_up_degrades_the_prefetch_with_its_reason() -> None:
    failed = entry(d.STATE_FAILED, reason="AccessDenied", retryTime="2026-03-01T13:00:00Z")
    stores = {"a1": nms("a1", [failed]), "a2": nms("a2", [entry(d.STATE_READY)])}
    result = pp.plan(
        facts(
            prefetch(),
            stores=stores,
            pods={"a1": {"metadata": {"name": "x"}, "status": {"phase": "Pending"}}},
        )
    )
    status, reason = cond(result.status, d.PREFETCH_DEGRADED)
    assert (status, reason) == ("True", d.REASON_MATERIALIZATION_FAILED)
    message = find(result.status["conditions"], d.PREFETCH_DEGRADED)["message"]  # type: ignore[index]
    assert "AccessDenied on 1" in message and "2026-03-01T13:00:00Z" in message
    assert cond(result.status, d.PREFETCH_LAPSED) == ("False", d.REASON_NOT_LAPSED)


def test_targets_outside_the_grant_are_not_warmed_and_degrade() -> None:
    result = pp.plan(facts(prefetch(), targets=("a1", "b1"), granted={"a1"}))
    assert [p["spec"]["nodeName"] for p in result.create] == ["a1"] and result.status["desiredNodes"] == 1
    assert cond(result.status, d.PREFETCH_DEGRADED) == ("True", d.REASON_OUTSIDE_GRANT)


def test_ttl_lapses_an_unreferenced_copy_unpins_it_and_never_warms_it_again() -> None:
    spec = {"retention": {"pinned": True, "ttlAfterLastUse": "24h"}}
    old = entry(d.STATE_READY, lastUsedTime="2026-02-27T11:00:00Z")  # 2 days ago
    in_use = entry(d.STATE_READY, lastUsedTime="2026-02-27T11:00:00Z", referenced=True)
    pods = {n: {"metadata": {"name": f"p-{n}"}, "status": {"phase": "Succeeded"}} for n in ("a1", "a2")}
    result = pp.plan(
        facts(prefetch(**spec), stores={"a1": nms("a1", [old]), "a2": nms("a2", [in_use])}, pods=pods)
    )
    assert result.mark_lapsed == ["p-a1"] and result.pinned_nodes == ["a2"]
    assert result.status["readyNodes"] == 2  # still on disk until collection removes it
    # Collection removed it: the lapsed node is not warmed again, and the shortfall is the lapse's.
    pods["a1"]["metadata"]["annotations"] = {d.ANNOTATION_PREFETCH_LAPSED: "true"}
    gone = pp.plan(facts(prefetch(**spec), stores={"a1": nms("a1"), "a2": nms("a2", [in_use])}, pods=pods))
    assert gone.create == [] and gone.delete == [] and gone.pinned_nodes == ["a2"]
    assert cond(gone.status, d.PREFETCH_LAPSED) == ("True", d.REASON_TTL_EXPIRED)
    assert cond(gone.status, d.PREFETCH_AVAILABLE)[0] == "False"


def test_the_hour_of_last_use_counts_whole_and_a_fresh_mount_clears_a_lapse() -> None:
    spec = {"retention": {"ttlAfterLastUse": "1h"}}
    used = entry(d.STATE_READY, lastUsedTime="2026-03-01T11:00:00Z")  # used between 11:00 and 12:00
    pods = {"a1": {"metadata": {"name": "p-a1", "annotations": {d.ANNOTATION_PREFETCH_LAPSED: "true"}}}}
    result = pp.plan(facts(prefetch(**spec), targets=("a1",), stores={"a1": nms("a1", [used])}, pods=pods))
    assert result.mark_lapsed == [] and result.clear_lapsed == ["p-a1"]
    assert result.requeue == pytest.approx(30 * 60)  # 13:00, half an hour from now
    later = pp.plan(
        facts(
            prefetch(**spec),
            targets=("a1",),
            stores={"a1": nms("a1", [used])},
            now=NOW + dt.timedelta(hours=1),
        )
    )
    assert later.create == []


def test_a_copy_collected_without_a_lapse_is_warmed_again() -> None:
    pods = {"a1": {"metadata": {"name": "p-a1"}, "status": {"phase": "Succeeded"}}}
    result = pp.plan(facts(prefetch(), targets=("a1",), pods=pods))
    assert result.delete == ["p-a1"] and result.create == []  # the next pass creates its successor
    running = pp.plan(
        facts(
            prefetch(),
            targets=("a1",),
            pods={"a1": {"metadata": {"name": "p-a1"}, "status": {"phase": "Running"}}},
        )
    )
    assert running.delete == [] and running.create == []


def test_pods_of_nodes_that_left_the_target_set_are_deleted() -> None:
    pods = {"gone": {"metadata": {"name": "p-gone"}, "status": {"phase": "Running"}}}
    assert pp.plan(facts(prefetch(), targets=("a1",), pods=pods)).delete == ["p-gone"]


@pytest.mark.parametrize(
    ("art", "reason", "keeps_pods"),
    [
        (None, d.REASON_ARTIFACT_NOT_FOUND, False),
        (artifact(resolved=False), d.REASON_ARTIFACT_NOT_RESOLVED, True),
    ],
)
def test_without_a_resolved_artifact_nothing_new_is_warmed(art, reason: str, keeps_pods: bool) -> None:
    pods = {"a1": {"metadata": {"name": "p-a1"}}}
    result = pp.plan(facts(prefetch(retention={"pinned": True}), art=art, pods=pods))
    assert result.create == [] and result.pinned_nodes == [] and (result.delete == []) == keeps_pods
    assert cond(result.status, d.PREFETCH_DEGRADED) == ("True", reason)


def test_pins_are_one_union_per_node() -> None:
    assert pp.pins([(DIGEST, ["a1", "a2"]), (OTHER, ["a2"]), (DIGEST, ["a2"])]) == {
        "a1": [DIGEST],
        "a2": [DIGEST, OTHER],
    }


# --- the reconcilers together over the in-memory apiserver --------------------------------------------


def wait(check: Callable[[], bool], timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def setting(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": constants.SYSTEM_NAMESPACE},
        "spec": {"value": value},
    }


def test_the_controllers_warm_pin_and_account_a_prefetch(hub: HubServer) -> None:
    server = FakeApiServer()
    client = Client(server)  # type: ignore[arg-type]
    manager = Manager(client, leader_election=False)
    for controller in (
        ModelArtifactReconciler,
        NodeModelStoreWriter,
        ModelStoreReconciler,
        ModelStoreBindingReconciler,
        ModelPrefetchReconciler,
    ):
        manager.add(controller)
    server.put(setting("model-artifact-huggingface-endpoint", hub.endpoint))
    server.put(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": constants.CSI_DRIVER_MODEL},
            "spec": {},
        }
    )
    for name, pool in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        server.put(node(name, pool))
        server.put(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": name},
                "spec": {"drivers": [{"name": constants.CSI_DRIVER_MODEL, "nodeID": name}]},
            }
        )
    server.put(store("a", {"matchLabels": {"pool": "a"}}, download={"concurrency": 3}))
    server.put(binding(allowPinned=True))
    server.put(
        {
            "apiVersion": GROUP,
            "kind": "ModelArtifact",
            "metadata": {"name": "qwen", "namespace": NS, "generation": 1},
            "spec": {"source": {"huggingFace": {"repository": "org/public", "revision": "main"}}},
        }
    )
    server.put(
        prefetch(placement={"nodeSelector": {"matchLabels": {"pool": "a"}}}, retention={"pinned": True})
    )
    manager.start(sync_timeout=10)
    try:

        def get(kind: str, name: str, namespace: str = "") -> dict[str, Any]:
            return client.get(kind, name, namespace) or {}

        assert wait(lambda: get("NodeModelStore", "a1").get("spec", {}).get("store") == "a")
        assert get("NodeModelStore", "a1")["spec"]["download"]["concurrency"] == 3
        assert wait(lambda: "spec" in get("NodeModelStore", "b1"))
        assert "store" not in get("NodeModelStore", "b1")["spec"]
        assert wait(lambda: (get("ModelStore", "a").get("status") or {}).get("nodes") == 2)
        digest = ""

        def resolved() -> bool:
            nonlocal digest
            digest = ((get("ModelArtifact", "qwen", NS).get("status") or {}).get("resolved") or {}).get(
                "manifestDigest", ""
            )
            return bool(digest)

        assert wait(resolved)
        pods, _ = client.list("Pod", NS)
        assert wait(lambda: len(client.list("Pod", NS)[0]) == 2)
        pods, _ = client.list("Pod", NS)
        assert sorted(p["spec"]["nodeName"] for p in pods) == ["a1", "a2"]
        assert all(
            p["spec"]["volumes"][0]["csi"]["volumeAttributes"]["manifestDigest"] == digest for p in pods
        )
        # One pins pass applies the node stores one after another: wait for both.
        assert wait(
            lambda: all(
                get("NodeModelStore", n).get("spec", {}).get("pinned") == [digest] for n in ("a1", "a2")
            )
        )
        assert not get("NodeModelStore", "b1")["spec"].get("pinned")
        assert wait(lambda: (get("ModelPrefetch", "warm", NS).get("status") or {}).get("desiredNodes") == 2)
        status = get("ModelPrefetch", "warm", NS)["status"]
        assert cond(status, d.PREFETCH_PROGRESSING) == ("True", d.REASON_WARMING)
        assert wait(
            lambda: (get("ModelStoreBinding", "grant", NS).get("status") or {}).get("usedBytes") == "0"
        )
        # Deleting the prefetch drops its pins on the next union pass.
        client.delete("ModelPrefetch", "warm", NS)
        assert wait(lambda: get("NodeModelStore", "a1")["spec"].get("pinned") == [])
    finally:
        manager.stop()
        server.close_watches()
