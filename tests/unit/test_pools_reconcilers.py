"""The pool reconcilers over an in-memory API (no cluster): they converge, and a restarted set of
controllers over the converged objects writes nothing (idempotent, level-based)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from api import constants
from api.naming import local_queue_name
from api.objects import Obj
from controllers.pools import render
from controllers.pools.cluster_queues import ClusterQueueReconciler
from controllers.pools.devices_labels import DevicesLabelReconciler
from controllers.pools.instance_types import InstanceTypeReconciler
from controllers.pools.local_queues import LocalQueueReconciler
from controllers.pools.node_capacity_keys import NodeCapacityReconciler
from controllers.pools.resource_flavors import ResourceFlavorReconciler
from kube.client import ApiError
from kube.manager import Manager
from tests.unit.pools_fixtures import A10G, H100, devices, node, sliced

RECONCILERS = (
    ResourceFlavorReconciler,
    InstanceTypeReconciler,
    ClusterQueueReconciler,
    LocalQueueReconciler,
    NodeCapacityReconciler,
    DevicesLabelReconciler,
)


def _merge(target: Obj, patch: Obj) -> Obj:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class World:
    """The apiserver's store, delivering every change to the informers as a watch would."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.versions = itertools.count(100)
        self.managers: list[Manager] = []
        self.calls: list[tuple[str, str, str]] = []

    def key(self, obj: Obj) -> tuple[str, str, str]:
        meta = obj["metadata"]
        return (obj["kind"], meta.get("namespace", ""), meta["name"])

    def put(self, obj: Obj, event: str = "MODIFIED") -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self.versions))
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("generation", 1)
        self.objects[self.key(obj)] = obj
        self.notify(event, obj)
        return copy.deepcopy(obj)

    def remove(self, kind: str, name: str, namespace: str = "") -> None:
        obj = self.objects.pop((kind, namespace, name), None)
        if obj is not None:
            self.notify("DELETED", obj)

    def notify(self, event: str, obj: Obj) -> None:
        for manager in self.managers:
            for (kind, namespace, _selector), informer in manager._informers.items():
                if kind == obj["kind"] and namespace in ("", obj["metadata"].get("namespace", "")):
                    informer._store(event, copy.deepcopy(obj))


class FakeClient:
    """Just what the pool reconcilers call, over a :class:`World`."""

    def __init__(self, world: World) -> None:
        self.world = world

    def _record(self, verb: str, kind: str, name: str) -> None:
        if kind != "Event":
            self.world.calls.append((verb, kind, name))

    def get(self, kind: str, name: str, namespace: str = "", **_: Any) -> Obj | None:
        obj = self.world.objects.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj else None

    def list(self, kind: str, namespace: str = "", **_: Any) -> tuple[list[Obj], str]:
        items = [copy.deepcopy(o) for (k, ns, _), o in self.world.objects.items() if k == kind]
        return [o for o in items if not namespace or o["metadata"].get("namespace") == namespace], "1"

    def create(self, obj: Obj, **_: Any) -> Obj:
        self._record("create", obj["kind"], obj["metadata"]["name"])
        if self.world.key(obj) in self.world.objects:
            raise ApiError(409, "AlreadyExists", "exists")
        return self.world.put(obj, "ADDED")

    def apply(self, obj: Obj, *, field_manager: str, subresource: str = "", **_: Any) -> Obj:
        self._record(f"apply{'/' + subresource if subresource else ''}", obj["kind"], obj["metadata"]["name"])
        current = self.world.objects.get(self.world.key(obj))
        if current is None:
            return self.world.put(obj, "ADDED")
        merged = copy.deepcopy(current)
        if subresource == "status":
            # Our field manager owns the whole status, except a ClusterQueue's (Kueue's): there it
            # owns one condition, merged by type.
            status = copy.deepcopy(obj["status"])
            if obj["kind"] == "ClusterQueue":
                conditions = {x["type"]: x for x in (merged.get("status") or {}).get("conditions") or []}
                conditions.update({x["type"]: x for x in status.get("conditions") or []})
                status = {**(merged.get("status") or {}), "conditions": list(conditions.values())}
            merged["status"] = status
        else:
            for part in ("labels", "annotations"):
                merged["metadata"][part] = dict(obj["metadata"].get(part) or {})
            if "spec" in obj:
                if merged.get("spec") != obj["spec"]:
                    merged["metadata"]["generation"] = merged["metadata"].get("generation", 1) + 1
                merged["spec"] = copy.deepcopy(obj["spec"])
        return self.world.put(merged)

    def patch(self, kind: str, name: str, body: Obj, *, namespace: str = "", **_: Any) -> Obj:
        self._record("patch", kind, name)
        current = self.world.objects.get((kind, namespace, name))
        if current is None:
            raise ApiError(404, "NotFound", name)
        if not isinstance(body, dict):  # a JSON patch (an Event's count): not modelled
            return copy.deepcopy(current)
        body = copy.deepcopy(body)
        body.get("metadata", {}).pop("resourceVersion", None)
        merged = _merge(copy.deepcopy(current), body)
        if "finalizers" in body.get("metadata", {}):
            merged["metadata"]["finalizers"] = body["metadata"]["finalizers"]
            if merged["metadata"].get("deletionTimestamp") and not merged["metadata"]["finalizers"]:
                self.world.remove(kind, name, namespace)
                return merged
        return self.world.put(merged)

    def delete(self, kind: str, name: str, namespace: str = "", **_: Any) -> None:
        self._record("delete", kind, name)
        current = self.world.objects.get((kind, namespace, name))
        if current is None:
            return
        if current["metadata"].get("finalizers"):
            current = copy.deepcopy(current)
            current["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            self.world.put(current)
        else:
            self.world.remove(kind, name, namespace)


def start(world: World) -> Manager:
    """A manager whose caches are synced from the world (a restart), with every controller."""
    manager = Manager(FakeClient(world), leader_election=False)  # type: ignore[arg-type]
    for reconciler in RECONCILERS:
        manager.add(reconciler)
    world.managers.append(manager)
    for (kind, namespace, _), informer in manager._informers.items():
        for obj in world.objects.values():
            if obj["kind"] == kind and namespace in ("", obj["metadata"].get("namespace", "")):
                key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                informer._put(key, copy.deepcopy(obj), None)
        informer._synced.set()
    for informer in manager._informers.values():  # the manager's first pass over every cached object
        for handler in informer._handlers:
            for obj in informer.list():
                handler("MODIFIED", obj, obj)
    return manager


def settle(manager: Manager, rounds: int = 50) -> None:
    for _ in range(rounds):
        worked = False
        for controller in manager.controllers:
            while (key := controller.queue.get(timeout=0)) is not None:
                worked = True
                try:
                    controller.reconcile(key)
                finally:
                    controller.queue.done(key)
        if not worked:
            return
    raise AssertionError("the controllers did not settle")


def seeded() -> World:
    world = World()
    for name, product, count in (("h100-a", H100, 8), ("h100-b", H100, 8), ("a10g-a", A10G, 4)):
        world.put(node(name, product, count))
        ledger = devices(name, product, count)
        world.put(sliced(ledger, 50) if product is H100 else ledger)
    for ns in ("team-a", "kube-system", "gpustack-system"):
        world.put(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "status": {"phase": "Active"}}
        )
    return world


def kinds(world: World, kind: str) -> list[str]:
    return sorted(name for (k, _ns, name) in world.objects if k == kind)


def test_converges_then_a_restart_writes_nothing() -> None:
    world = seeded()
    settle(start(world))
    assert kinds(world, "ResourceFlavor") == [
        "gpustack--generic--nvidia-a10g-linux-amd64-4d",
        "gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d",
        "gpustack--generic-linux-amd64-64c",
    ]
    assert (
        kinds(world, "InstanceType")
        == kinds(world, "ClusterQueue")
        == [
            "gpustack--generic-linux-amd64",
            "gpustack--nvidia-a10g-linux-amd64",
            "gpustack--nvidia-h100-80gb-hbm3-linux-amd64",
        ]
    )
    assert kinds(world, "Topology") == [f"gpustack-{render.HOSTNAME_PROFILE}"]
    lqs = sorted((ns, name) for (k, ns, name) in world.objects if k == "LocalQueue")
    assert {ns for ns, _ in lqs} == {"team-a"} and len(lqs) == 3
    h100 = world.objects[("InstanceType", "", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64")]
    assert h100["status"]["acceleratorSummary"] == "0/0 0/0 50/800 0/0"
    assert constants.FINALIZER_CONTROLLED in h100["metadata"]["finalizers"]
    node_status = world.objects[("Node", "", "a10g-a")]["status"]
    assert node_status["capacity"]["nvidia.com/gpu.sliced.units"] == str(4 * 1_600_000)

    world.calls.clear()
    for manager in world.managers:
        world.managers.remove(manager)
    settle(start(world))
    assert world.calls == []


def test_a_ledger_change_writes_only_the_status_it_moves() -> None:
    world = seeded()
    manager = start(world)
    settle(manager)
    world.calls.clear()
    ledger = copy.deepcopy(world.objects[("Devices", "", "h100-a")])
    ledger["status"]["groups"][0]["accelerators"][0].update(
        mode=0, allocated=0, remaining=1_600_000, allocatedSlices=0
    )
    world.put(ledger)
    settle(manager)
    assert world.calls == [("apply/status", "InstanceType", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64")]
    h100 = world.objects[("InstanceType", "", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64")]
    assert h100["status"]["acceleratorSummary"] == "1/1 1/10 100/850 0/0"


def test_an_admin_edit_of_a_derived_type_is_never_overwritten() -> None:
    world = seeded()
    manager = start(world)
    settle(manager)
    key = ("InstanceType", "", "gpustack--nvidia-a10g-linux-amd64")
    edited = copy.deepcopy(world.objects[key])
    edited["spec"]["displayName"] = "A10G (team)"
    world.put(edited)
    world.remove("InstanceType", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64")  # authored again
    settle(manager)
    assert world.objects[key]["spec"]["displayName"] == "A10G (team)"
    assert ("InstanceType", "", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64") in world.objects


def test_a_ledger_whose_node_is_gone_is_deleted() -> None:
    world = seeded()
    manager = start(world)
    settle(manager)
    world.remove("Node", "h100-b")
    settle(manager)
    assert ("Devices", "", "h100-b") not in world.objects
    flavor = world.objects[("ResourceFlavor", "", "gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d")]
    assert (
        flavor["metadata"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.capacity"]
        == "8"
    )


def test_deleting_a_type_tears_its_queue_and_local_queues_down() -> None:
    world = seeded()
    manager = start(world)
    settle(manager)
    name = "gpustack--nvidia-a10g-linux-amd64"
    world.remove("Node", "a10g-a")  # so it is not authored again
    settle(manager)
    FakeClient(world).delete("InstanceType", name)
    settle(manager)
    assert ("InstanceType", "", name) not in world.objects
    assert ("ClusterQueue", "", name) not in world.objects
    assert not [k for k in world.objects if k[0] == "LocalQueue" and k[2] == local_queue_name(name)]
