"""The topology reconcilers with the pool reconcilers over an in-memory API (topology spec B.3-B.4).

The chain runs as in a cluster: a TopologySource → (snapshot arms) NodeFeatures → NFD's
projection onto Node labels → the node's profile in the worker's NodeFeature → NFD again → the
Topology, the profile-pinned flavors, the ClusterQueue and the ``Devices`` mirror.  NFD and Kueue
are the two outside components simulated here (:func:`project` and :func:`kueue_reports`); a
test writes only what an administrator or those components would.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from api import constants
from api.naming import topology_profile
from api.objects import Obj
from controllers.topology.node_profiles import NodeTopologyReconciler
from controllers.topology.sources import TopologySourceReconciler
from kube.client import ApiError
from kube.manager import Manager
from tests.topology_inventory import Answer, Inventory, make_pki
from tests.unit.pools_fixtures import H100, devices, node
from tests.unit.test_pools_reconcilers import RECONCILERS, FakeClient, World, kinds

ZONE, RACK = "topology.kubernetes.io/zone", "topology.example.com/rack"
G_RACK = "topology.gpustack.ai/rack"
HOST = constants.LABEL_HOSTNAME
NS = constants.SYSTEM_NAMESPACE
NODE_NAME = "nfd.node.kubernetes.io/node-name"
POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
CPU_POOL = "gpustack--generic-linux-amd64"
T0 = 1_800_000_000.0
ZONED = topology_profile([ZONE, HOST])
RACKED = topology_profile([ZONE, RACK, HOST])
HOSTNAME = topology_profile([HOST])


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Client(FakeClient):
    """The pool tests' client, plus a whole-object ``update`` with optimistic concurrency."""

    def update(self, obj: Obj, **_: Any) -> Obj:
        meta = obj["metadata"]
        self._record("update", obj["kind"], meta["name"])
        current = self.world.objects.get((obj["kind"], meta.get("namespace", ""), meta["name"]))
        if current is None:
            raise ApiError(404, "NotFound", meta["name"])
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        return self.world.put(obj)


class Cluster:
    def __init__(self) -> None:
        self.world = World()
        self.clock = Clock()
        self.nfd: dict[str, set[str]] = {}  # per node: the labels NFD projected (its annotation)
        self.manager: Manager | None = None

    def start(self) -> Manager:
        manager = Manager(Client(self.world), leader_election=False)  # type: ignore[arg-type]
        manager.add(lambda m: TopologySourceReconciler(m, clock=self.clock))
        manager.add(NodeTopologyReconciler)
        for reconciler in RECONCILERS:
            manager.add(reconciler)
        self.world.managers = [manager]
        for (kind, namespace, _), informer in manager._informers.items():
            for obj in self.world.objects.values():
                if obj["kind"] == kind and namespace in ("", obj["metadata"].get("namespace", "")):
                    key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                    informer._put(key, copy.deepcopy(obj), None)
            informer._synced.set()
        for informer in manager._informers.values():
            for handler in informer._handlers:
                for obj in informer.list():
                    handler("MODIFIED", obj, obj)
        self.manager = manager
        return manager

    def poke(self, name: str) -> None:
        """Time has moved (the test's clock): the source's requeue is due."""
        assert self.manager is not None
        self.manager.controllers[0].queue.add(name)

    def run(self, rounds: int = 30) -> None:
        """Reconcile until nothing is queued and NFD has nothing left to project."""
        assert self.manager is not None
        for _ in range(rounds):
            worked = False
            for controller in self.manager.controllers:
                while (key := controller.queue.get(timeout=0)) is not None:
                    worked = True
                    try:
                        controller.reconcile(key)
                    finally:
                        controller.queue.done(key)
            if not self.project() and not worked:
                return
        raise AssertionError("the chain did not settle")

    def project(self) -> bool:
        """nfd-master: every NodeFeature's labels onto its Node; labels it set and no NodeFeature
        carries any more are removed.  Returns whether a Node changed."""
        wanted: dict[str, dict[str, str]] = {}
        for (kind, _ns, _name), feature in self.world.objects.items():
            if kind == "NodeFeature":
                target = feature["metadata"].get("labels", {}).get(NODE_NAME)
                wanted.setdefault(target, {}).update((feature.get("spec") or {}).get("labels") or {})
        changed = False
        for (kind, _ns, name), current in list(self.world.objects.items()):
            if kind != "Node":
                continue
            labels = dict(current["metadata"].get("labels") or {})
            before = dict(labels)
            for key in self.nfd.get(name, set()) - set(wanted.get(name, {})):
                labels.pop(key, None)
            labels.update(wanted.get(name, {}))
            self.nfd[name] = set(wanted.get(name, {}))
            if labels != before:
                updated = copy.deepcopy(current)
                updated["metadata"]["labels"] = labels
                self.world.put(updated)
                changed = True
        return changed

    def get(self, kind: str, name: str, namespace: str = "") -> Obj:
        return self.world.objects[(kind, namespace, name)]

    def kueue_reports(self, queue: str, reserving: int, flavors: dict[str, int]) -> None:
        """Kueue writing the ClusterQueue's status for its current generation."""
        current = copy.deepcopy(self.get("ClusterQueue", queue))
        generation = current["metadata"].get("generation", 1)
        status = current.setdefault("status", {})
        status.update(
            reservingWorkloads=reserving,
            admittedWorkloads=reserving,
            flavorsReservation=[
                {"name": n, "resources": [{"name": "credits.gpustack.ai/nvidia", "total": str(t)}]}
                for n, t in flavors.items()
            ],
        )
        others = [c for c in status.get("conditions") or [] if c["type"] != "Active"]
        status["conditions"] = [
            *others,
            {"type": "Active", "status": "True", "observedGeneration": generation},
        ]
        self.world.put(current)


def h100(name: str, **labels: str) -> Obj:
    """A managed 8 × H100 node, labelled the way NFD would from the device manager's and the
    worker's features, except the topology profile (the topology reconciler's to publish)."""
    return node(name, H100, 8, labels=labels, drop=(constants.LABEL_TOPOLOGY_PROFILE,))


def ledger(name: str) -> Obj:
    out = devices(name, H100, 8)
    out["metadata"]["labels"].pop(constants.LABEL_TOPOLOGY_PROFILE, None)
    return out


def source(name: str = "racks", levels: list[str] | None = None, **arm: Any) -> Obj:
    spec: dict[str, Any] = {"nodeSelector": {}, "levels": levels or [ZONE, RACK]}
    spec.update(arm or {"nodeLabels": {}})
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "TopologySource",
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
    }


def seeded(*nodes: Obj) -> Cluster:
    cluster = Cluster()
    for obj in nodes:
        cluster.world.put(obj)
        cluster.world.put(ledger(obj["metadata"]["name"]))
    for ns in ("team-a", NS):
        cluster.world.put(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "status": {"phase": "Active"}}
        )
    return cluster


def condition(obj: Obj, kind: str) -> Obj:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def profile_of(cluster: Cluster, name: str) -> str | None:
    return cluster.get("Node", name)["metadata"]["labels"].get(constants.LABEL_TOPOLOGY_PROFILE)


def queue_flavors(cluster: Cluster) -> list[str]:
    queue = cluster.get("ClusterQueue", POOL)
    return [f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]]


# --- nodeLabels: profiles, Topologies, profile-pinned flavors -------------------------------------


def test_a_node_labels_source_yields_profiles_topologies_and_pinned_flavors() -> None:
    cluster = seeded(
        h100("n1", **{ZONE: "z1", RACK: "r1"}),
        h100("n2", **{ZONE: "z1", RACK: "r2"}),
        h100("n3", **{ZONE: "z2"}),
        h100("n4"),
    )
    cluster.world.put(source())
    cluster.start()
    cluster.run()
    src = cluster.get("TopologySource", "racks")
    assert condition(src, "Ready")["status"] == "True" and src["status"]["sourceKind"] == "NodeLabels"
    assert src["status"]["selectedNodes"] == 4
    # Each node's profile is in the worker's NodeFeature, under the topology field manager only.
    feature = cluster.get("NodeFeature", "n1-gpustack-worker", NS)
    assert feature["spec"]["labels"] == {constants.LABEL_TOPOLOGY_PROFILE: RACKED}
    assert {n: profile_of(cluster, n) for n in ("n1", "n2", "n3", "n4")} == {
        "n1": RACKED,
        "n2": RACKED,
        "n3": ZONED,
        "n4": HOSTNAME,
    }
    # The profile is mirrored onto the Devices ledger.
    assert cluster.get("Devices", "n3")["metadata"]["labels"][constants.LABEL_TOPOLOGY_PROFILE] == ZONED
    # One Topology per key list, values staying node labels.
    topologies = {t: cluster.get("Topology", t)["spec"]["levels"] for t in kinds(cluster.world, "Topology")}
    assert topologies == {
        f"gpustack-{RACKED}": [{"nodeLabel": ZONE}, {"nodeLabel": RACK}, {"nodeLabel": HOST}],
        f"gpustack-{ZONED}": [{"nodeLabel": ZONE}, {"nodeLabel": HOST}],
        f"gpustack-{HOSTNAME}": [{"nodeLabel": HOST}],
    }
    # Hardware identity × profile = flavor identity: three H100 flavors, each pinned.
    flavors = [f for f in kinds(cluster.world, "ResourceFlavor") if "h100" in f]
    assert flavors == sorted(
        [
            "gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d",
            f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{RACKED}",
            f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{ZONED}",
        ]
    )
    racked = cluster.get(
        "ResourceFlavor", f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{RACKED}"
    )
    assert racked["spec"]["nodeLabels"][constants.LABEL_TOPOLOGY_PROFILE] == RACKED
    assert racked["spec"]["topologyName"] == f"gpustack-{RACKED}"
    assert (
        racked["metadata"]["labels"][f"{constants.PREFIX_ACCELERATABLE}nvidia-h100-80gb-hbm3.capacity"]
        == "16"
    )
    # One queue over the three, each topology-aware.
    assert sorted(queue_flavors(cluster)) == flavors


def test_a_restarted_chain_writes_nothing() -> None:
    cluster = seeded(h100("n1", **{ZONE: "z1", RACK: "r1"}), h100("n2"))
    cluster.world.put(source())
    cluster.start()
    cluster.run()
    cluster.world.calls.clear()
    cluster.start()
    cluster.run()
    assert cluster.world.calls == []


def test_ambiguous_sources_fall_back_to_hostname_only() -> None:
    cluster = seeded(h100("n1", **{ZONE: "z1", RACK: "r1"}))
    cluster.world.put(source())
    cluster.world.put(source("zones", [ZONE]))
    cluster.start()
    cluster.run()
    assert condition(cluster.get("TopologySource", "zones"), "Ready")["status"] == "True"
    assert profile_of(cluster, "n1") == HOSTNAME
    cluster.world.remove("TopologySource", "zones")
    cluster.run()
    assert profile_of(cluster, "n1") == RACKED


def test_labels_that_are_no_hierarchy_leave_the_source_not_ready() -> None:
    cluster = seeded(h100("n1", **{ZONE: "z1", RACK: "r1"}), h100("n2", **{ZONE: "z2", RACK: "r1"}))
    cluster.world.put(source())
    cluster.start()
    cluster.run()
    ready = condition(cluster.get("TopologySource", "racks"), "Ready")
    assert ready["status"] == "False" and "node n2" in ready["message"] and RACK in ready["message"]
    assert profile_of(cluster, "n1") == profile_of(cluster, "n2") == HOSTNAME


# --- the live profile change (B.4 step 7) ---------------------------------------------------------


def test_a_live_profile_change_drains_swaps_on_the_same_queue_and_restores() -> None:
    cluster = seeded(h100("n1", **{ZONE: "z1", RACK: "r1"}))
    cluster.world.put(source())
    cluster.start()
    cluster.run()
    old = f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{RACKED}"
    new = f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{ZONED}"
    assert queue_flavors(cluster) == [old]
    uid = cluster.get("ClusterQueue", POOL)["metadata"]["uid"]
    cluster.kueue_reports(POOL, reserving=1, flavors={old: 1_600_000})  # a running workload
    cluster.kueue_reports(CPU_POOL, reserving=0, flavors={})
    cluster.run()

    # The administrator drops the rack label: the node's key list, so its profile, changes.
    moved = copy.deepcopy(cluster.get("Node", "n1"))
    del moved["metadata"]["labels"][RACK]
    cluster.world.put(moved)
    cluster.run()
    assert profile_of(cluster, "n1") == ZONED
    assert cluster.get("Devices", "n1")["metadata"]["labels"][constants.LABEL_TOPOLOGY_PROFILE] == ZONED
    assert new in kinds(cluster.world, "ResourceFlavor")  # the replacement first
    retiring = cluster.get("ResourceFlavor", old)
    assert retiring["metadata"]["labels"][constants.LABEL_FLAVOR_RETIRING] == "true"
    queue = cluster.get("ClusterQueue", POOL)
    assert queue["spec"]["stopPolicy"] == "HoldAndDrain" and queue_flavors(cluster) == [old]
    assert f"gpustack-{RACKED}" in kinds(cluster.world, "Topology")  # still referenced

    # Kueue evicts; while it still reports the reservation nothing swaps.
    cluster.kueue_reports(POOL, reserving=1, flavors={old: 1_600_000})
    cluster.run()
    assert queue_flavors(cluster) == [old]
    cluster.kueue_reports(POOL, reserving=0, flavors={old: 0})
    cluster.kueue_reports(CPU_POOL, reserving=0, flavors={})
    cluster.run()
    queue = cluster.get("ClusterQueue", POOL)
    assert queue_flavors(cluster) == [new] and queue["metadata"]["uid"] == uid
    assert queue["spec"]["stopPolicy"] == "None"
    assert constants.ANNOTATION_DRAIN_PLAN_HOLD not in queue["metadata"]["annotations"]
    # Old objects retire once unreferenced.
    assert old not in kinds(cluster.world, "ResourceFlavor")
    assert f"gpustack-{RACKED}" not in kinds(cluster.world, "Topology")


def events(cluster: Cluster, kind: str, name: str) -> list[Obj]:
    return [
        o
        for (k, _ns, _n), o in cluster.world.objects.items()
        if k == "Event" and o["involvedObject"]["kind"] == kind and o["involvedObject"]["name"] == name
    ]


def test_the_source_says_what_a_profile_change_evicts_and_stops_before_the_swap() -> None:
    cluster = seeded(h100("n1", **{ZONE: "z1", RACK: "r1"}))
    cluster.world.put(source())
    old = f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{RACKED}"
    new = f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{ZONED}"
    # A Pod's Workload admitted in the pool's queue, and an Instance of the type.
    cluster.world.put(
        {
            "kind": "Workload",
            "metadata": {
                "name": "pod-gpu-workload-1a2b3",
                "namespace": "team-a",
                "ownerReferences": [{"kind": "Pod", "name": "gpu-workload", "uid": "p1"}],
            },
            "status": {
                "admission": {"clusterQueue": POOL, "podSetAssignments": [{"flavors": {"c": old}}]},
                "conditions": [
                    {"type": "QuotaReserved", "status": "True"},
                    {"type": "Admitted", "status": "True"},
                ],
            },
        }
    )
    cluster.world.put(
        {
            "kind": "Instance",
            "metadata": {"name": "sliced-demo", "namespace": "team-a"},
            "spec": {"type": POOL},
        }
    )
    cluster.start()
    cluster.run()
    cluster.kueue_reports(POOL, reserving=1, flavors={old: 1_600_000})
    cluster.kueue_reports(CPU_POOL, reserving=0, flavors={})
    cluster.run()
    settled = cluster.get("TopologySource", "racks")
    assert "profileChange" not in settled["status"]
    assert condition(settled, "ProfileChange")["status"] == "False"
    assert not events(cluster, "TopologySource", "racks")

    # The administrator drops the rack label; the source's pass runs first and tells.
    moved = copy.deepcopy(cluster.get("Node", "n1"))
    del moved["metadata"]["labels"][RACK]
    cluster.world.put(moved)
    assert cluster.manager is not None
    sources = cluster.manager.controllers[0]
    while (key := sources.queue.get(timeout=0)) is not None:
        sources.reconcile(key)
        sources.queue.done(key)
    told = cluster.get("TopologySource", "racks")
    assert told["status"]["profileChange"] == {
        "profiles": [f"{RACKED} -> {ZONED}"],
        "nodes": 1,
        "stopPolicy": "HoldAndDrain",
        "clusterQueues": [POOL],
        "workloads": 1,
        "pods": 1,
        "instances": 1,
        "names": [
            "Workload team-a/pod-gpu-workload-1a2b3",
            "Pod team-a/gpu-workload",
            "Instance team-a/sliced-demo",
        ],
    }
    reported = condition(told, "ProfileChange")
    assert reported["status"] == "True" and reported["reason"] == "ProfileChangePlanned"
    (event,) = events(cluster, "TopologySource", "racks")
    assert event["reason"] == "ProfileChangePlanned" and event["type"] == "Warning"
    assert event["message"] == reported["message"]
    assert (
        "evicts 1 Workload(s) (team-a/pod-gpu-workload-1a2b3) and 1 Pod(s) (team-a/gpu-workload)"
        in event["message"]
    )
    assert "stops 1 Instance(s) (team-a/sliced-demo)" in event["message"]
    # Nothing has moved yet: the queue still admits on the old flavor.
    assert cluster.get("ClusterQueue", POOL)["spec"]["stopPolicy"] == "None"

    # The chain follows: the queue drains for the profile change; the type says so.
    cluster.run()
    queue = cluster.get("ClusterQueue", POOL)
    assert queue["spec"]["stopPolicy"] == "HoldAndDrain"
    assert queue["metadata"]["annotations"][constants.ANNOTATION_PROFILE_CHANGE] == f"{RACKED} -> {ZONED}"
    status = cluster.get("InstanceType", POOL)["status"]
    assert status["phase"] == "Draining", status
    assert status["phaseMessage"].startswith(f"profile change in progress ({RACKED} -> {ZONED})"), status
    # Under way, the report stands (the node has moved; the queue has not swapped), told once.
    during = cluster.get("TopologySource", "racks")
    assert during["status"]["profileChange"]["clusterQueues"] == [POOL]
    assert during["status"]["profileChange"]["nodes"] == 0
    assert len(events(cluster, "TopologySource", "racks")) == 1

    # Kueue evicted: the swap, then the report clears and says so.
    cluster.world.remove("Workload", "pod-gpu-workload-1a2b3", "team-a")
    cluster.kueue_reports(POOL, reserving=0, flavors={old: 0})
    cluster.run()
    assert queue_flavors(cluster) == [new]
    after = cluster.get("TopologySource", "racks")
    assert "profileChange" not in after["status"]
    assert condition(after, "ProfileChange")["status"] == "False"
    assert [e["reason"] for e in events(cluster, "TopologySource", "racks")].count(
        "ProfileChangeComplete"
    ) == 1


def test_an_idle_flavor_swaps_in_place_and_a_node_leaving_is_dropped_in_place() -> None:
    cluster = seeded(h100("n1", **{ZONE: "z1", RACK: "r1"}))
    cluster.world.put(source())
    cluster.start()
    cluster.run()
    cluster.kueue_reports(POOL, reserving=0, flavors={})
    cluster.kueue_reports(CPU_POOL, reserving=0, flavors={})
    cluster.run()
    moved = copy.deepcopy(cluster.get("Node", "n1"))
    del moved["metadata"]["labels"][RACK]
    cluster.world.put(moved)
    cluster.run()
    queue = cluster.get("ClusterQueue", POOL)
    assert queue["spec"]["stopPolicy"] == "None"
    assert queue_flavors(cluster) == [f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{ZONED}"]


# --- snapshot arms --------------------------------------------------------------------------------


def snapshot(nodes: dict, revision: str = "inv-1") -> str:
    return json.dumps({"apiVersion": "topology.gpustack.ai/v1alpha1", "revision": revision, "nodes": nodes})


def config_map(data: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "inventory", "namespace": NS},
        "data": {"snapshot.yaml": data},
    }


CONFIG_ARM = {
    "configMap": {
        "configMapRef": {"namespace": NS, "name": "inventory"},
        "key": "snapshot.yaml",
        "maxStaleness": "10m",
    }
}


def features_of(cluster: Cluster, uid: str) -> dict[str, dict[str, str]]:
    return {
        f["metadata"]["labels"][NODE_NAME]: f["spec"]["labels"]
        for (k, _ns, _n), f in cluster.world.objects.items()
        if k == "NodeFeature" and f["metadata"]["labels"].get(constants.LABEL_TOPOLOGY_SOURCE_UID) == uid
    }


def test_a_config_map_snapshot_is_published_through_node_features() -> None:
    cluster = seeded(h100("n1", **{ZONE: "z1"}), h100("n2", **{ZONE: "z1"}))
    cluster.world.put(source("inv", [ZONE, G_RACK], **CONFIG_ARM))
    cluster.world.put(config_map(snapshot({"n1": {ZONE: "z1", G_RACK: "r1"}, "n2": {G_RACK: "r2"}})))
    cluster.start()
    cluster.run()
    assert features_of(cluster, "uid-inv") == {"n1": {G_RACK: "r1"}, "n2": {G_RACK: "r2"}}
    assert cluster.get("Node", "n1")["metadata"]["labels"][G_RACK] == "r1"  # projected by NFD
    racked = topology_profile([ZONE, G_RACK, HOST])
    assert profile_of(cluster, "n1") == profile_of(cluster, "n2") == racked
    status = cluster.get("TopologySource", "inv")["status"]
    assert status["lastSuccessfulRevision"] == "inv-1" and status["sourceKind"] == "ConfigMap"

    # A foreign edit of our NodeFeature is put back.
    (name,) = [
        n for (k, _ns, n) in cluster.world.objects if k == "NodeFeature" and n.startswith("n1-topology-")
    ]
    edited = copy.deepcopy(cluster.get("NodeFeature", name, NS))
    edited["spec"]["labels"][G_RACK] = "r9"
    cluster.world.put(edited)
    cluster.run()
    assert features_of(cluster, "uid-inv")["n1"] == {G_RACK: "r1"}

    # An unknown node rejects the whole revision: nothing changes, the source says why.
    cluster.world.put(config_map(snapshot({"n1": {G_RACK: "r5"}, "ghost": {G_RACK: "r1"}}, "inv-2")))
    cluster.run()
    assert features_of(cluster, "uid-inv") == {"n1": {G_RACK: "r1"}, "n2": {G_RACK: "r2"}}
    src = cluster.get("TopologySource", "inv")
    assert condition(src, "Valid")["status"] == "False" and "node ghost" in condition(src, "Valid")["message"]
    assert condition(src, "Ready")["reason"] == "ServingLastValid"

    # Deleted: the last valid set stays until maxStaleness, then goes.
    cluster.world.remove("ConfigMap", "inventory", NS)
    cluster.clock.now += 300
    cluster.poke("inv")
    cluster.run()
    assert features_of(cluster, "uid-inv") != {}
    cluster.clock.now += 601
    cluster.poke("inv")
    cluster.run()
    assert features_of(cluster, "uid-inv") == {}
    assert G_RACK not in cluster.get("Node", "n1")["metadata"]["labels"]
    assert condition(cluster.get("TopologySource", "inv"), "Ready")["reason"] == "Expired"
    assert profile_of(cluster, "n1") == HOSTNAME  # a source that is not Ready describes no node


@pytest.fixture(scope="module")
def pki():
    return make_pki()


def test_a_webhook_snapshot_with_a_bearer_token(pki, tmp_path) -> None:
    cluster = seeded(h100("n1"), h100("n2"))
    with Inventory(pki, tmp_path, token="s3cret") as inventory:
        inventory.answer = Answer(body=snapshot({"n1": {G_RACK: "r1"}, "n2": {G_RACK: "r1"}}).encode())
        arm = {
            "webhook": {
                "url": inventory.url,
                "pollInterval": "1m",
                "timeout": "1s",
                "maxStaleness": "5m",
                "caBundleConfigMapRef": {"namespace": NS, "name": "inventory-ca"},
                "bearerTokenSecretRef": {"namespace": NS, "name": "inventory-token"},
            }
        }
        cluster.world.put(source("svc", [G_RACK], **arm))
        cluster.world.put(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "inventory-ca", "namespace": NS},
                "data": {"ca.crt": pki.ca.decode()},
            }
        )
        cluster.world.put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "inventory-token", "namespace": NS},
                "data": {"token": base64.b64encode(b"s3cret\n").decode()},
            }
        )
        cluster.start()
        cluster.run()
        assert features_of(cluster, "uid-svc") == {"n1": {G_RACK: "r1"}, "n2": {G_RACK: "r1"}}
        assert profile_of(cluster, "n1") == topology_profile([G_RACK, HOST])
        assert len(inventory.requests) == 1  # NodeFeature events between polls do not fetch again

        # A redirect, then 10 MiB: each a failed read, the last valid set kept until stale.
        inventory.answer = Answer(status=302, headers={"Location": "https://elsewhere.example/"})
        cluster.clock.now += 61
        cluster.poke("svc")
        cluster.run()
        src = cluster.get("TopologySource", "svc")
        assert (
            condition(src, "Ready")["reason"] == "ServingLastValid"
            and "redirect" in condition(src, "Valid")["message"]
        )
        inventory.answer = Answer(body=b"x" * (10 * 1024 * 1024))
        cluster.clock.now += 61
        cluster.poke("svc")
        cluster.run()
        assert features_of(cluster, "uid-svc") != {}
        assert "at most" in condition(cluster.get("TopologySource", "svc"), "Valid")["message"]
        inventory.answer = Answer(hang=True)
        cluster.clock.now += 300
        cluster.poke("svc")
        cluster.run()
        assert features_of(cluster, "uid-svc") == {}
        assert condition(cluster.get("TopologySource", "svc"), "Ready")["reason"] == "Expired"
