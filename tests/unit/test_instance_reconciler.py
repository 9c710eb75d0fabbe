"""controllers.instance.reconciler over an in-memory API, one pass at a time, with the informer
caches filled the way a watch fills them: a status written from a cache that has not shown the
controller's previous write yet is corrected once the cache shows it."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from api import allocation, constants
from api.objects import Obj
from controllers.instance.pod import PodFacts, render_pod
from controllers.instance.reconciler import InstanceReconciler
from kube.manager import Manager
from tests.unit.instances import instance

NODE = "gpu-a10g-0"
CARD, FREE = "gpu-a10g-0-nvidia-a10g-2", "gpu-a10g-0-nvidia-a10g-3"
KEY = ("team-a", "sliced-demo")
_versions = itertools.count(10)


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for name, value in patch.items():
        if value is None:
            target.pop(name, None)
        elif isinstance(value, dict) and isinstance(target.get(name), dict):
            _merge(target[name], value)
        else:
            target[name] = copy.deepcopy(value)


class Api:
    """The objects one pass reaches, by (kind, namespace, name); merge patches applied, every
    status write recorded."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.status_writes: list[Obj] = []

    def version(self) -> Obj:
        return {"major": "1", "minor": "36"}

    def get(self, kind: str, name: str, namespace: str = "", **_: Any) -> Obj | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def list(self, kind: str, namespace: str = "", **_: Any) -> tuple[list[Obj], str]:
        return [copy.deepcopy(o) for (k, _ns, _n), o in self.objects.items() if k == kind], "1"

    def create(self, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        obj["metadata"].setdefault("resourceVersion", str(next(_versions)))
        self.objects[(obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"].get("name", ""))] = (
            obj
        )
        return obj

    def patch(self, kind: str, name: str, body: Obj, *, namespace: str = "", subresource: str = "") -> Obj:
        current = self.objects[(kind, namespace, name)]
        _merge(current, body)
        current["metadata"]["resourceVersion"] = str(next(_versions))
        if subresource == "status":
            self.status_writes.append(copy.deepcopy(body["status"]))
        return copy.deepcopy(current)


def _record(card: str) -> allocation.Record:
    entry = allocation.accelerator_entry(card, int(card[-1]), constants.DEVICE_MODE_SLICED, 320_000, slices=1)
    group = {"id": "nvidia-a10g", "manufacturer": "nvidia", "accelerators": [entry]}
    return {constants.INSTANCE_CONTAINER_MAIN: [group]}


def _pod(card: str) -> Obj:
    pod = render_pod(instance(), PodFacts(queue_name="q", ssh_image="sshd"))
    pod["metadata"]["resourceVersion"] = str(next(_versions))
    pod["metadata"]["annotations"] = {
        constants.ANNOTATION_ACCELERATOR_ALLOCATED: allocation.encode(_record(card))
    }
    pod["spec"]["nodeName"] = NODE
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "podIP": "10.0.0.7",
    }
    return pod


def _devices() -> Obj:
    row = {"id": CARD, "index": 2, "mode": constants.DEVICE_MODE_SLICED, "allocated": 320_000}
    free = {"id": FREE, "index": 3, "mode": 0, "allocated": 0}
    return {
        "kind": "Devices",
        "metadata": {"name": NODE, "resourceVersion": "1"},
        "status": {"groups": [{"id": "nvidia-a10g", "manufacturer": "nvidia", "accelerators": [row, free]}]},
    }


@pytest.fixture
def world() -> tuple[Api, InstanceReconciler]:
    api = Api()
    manager = Manager(api, leader_election=False)  # type: ignore[arg-type]
    controller = manager.add(InstanceReconciler)
    assert isinstance(controller, InstanceReconciler)
    return api, controller


def watched(api: Api, controller: InstanceReconciler, kind: str, obj: Obj) -> None:
    """``obj`` as the API has it, delivered to the controller's cache of its kind by its watch."""
    meta = obj["metadata"]
    api.objects[(kind, meta.get("namespace", ""), meta["name"])] = copy.deepcopy(obj)
    informer = {
        "Instance": controller.instances,
        "InstanceType": controller.types,
        "Pod": controller.pods,
        "Devices": controller.devices,
    }[kind]
    informer._store("MODIFIED", copy.deepcopy(obj))


def drain(controller: InstanceReconciler) -> list[Any]:
    keys = []
    while len(controller.queue):
        key = controller.queue.get(timeout=0)
        controller.queue.done(key)
        keys.append(key)
    return keys


def shown(status: Obj | None) -> list[str]:
    return [a["id"] for g in (status or {}).get("allocations") or [] for a in g["accelerators"]]


def test_a_status_skipped_against_a_stale_cache_is_written_once_the_cache_shows_the_last_write(
    world,
) -> None:
    api, controller = world
    obj = instance()
    obj["metadata"].update(finalizers=[constants.FINALIZER_INSTANCE], resourceVersion="2")
    watched(api, controller, "Instance", obj)
    pool = {"kind": "InstanceType", "metadata": {"name": obj["spec"]["type"]}, "status": {"phase": "Active"}}
    watched(api, controller, "InstanceType", pool)
    watched(api, controller, "Devices", _devices())
    watched(api, controller, "Pod", _pod(CARD))
    controller.reconcile(KEY)
    watched(api, controller, "Instance", api.objects[("Instance", *KEY)])  # the write, seen
    assert shown(api.objects[("Instance", *KEY)]["status"]) == [CARD]

    # The record is edited to claim a free card: not shown, the allocations go.
    watched(api, controller, "Pod", _pod(FREE))
    controller.reconcile(KEY)
    assert shown(api.objects[("Instance", *KEY)]["status"]) == []
    # The device manager restores it at once: the next pass runs before the cache shows the
    # write just made, so it finds nothing to change against the cached status.
    watched(api, controller, "Pod", _pod(CARD))
    drain(controller)
    writes = len(api.status_writes)
    controller.reconcile(KEY)
    assert len(api.status_writes) == writes
    assert shown(api.objects[("Instance", *KEY)]["status"]) == []  # the API holds the stale status

    # The cache catches up with the write: the Instance is judged again, and the card shown.
    watched(api, controller, "Instance", api.objects[("Instance", *KEY)])
    assert drain(controller) == [KEY]
    controller.reconcile(KEY)
    assert shown(api.objects[("Instance", *KEY)]["status"]) == [CARD]
    # Seeing that write lands no further one: the status agrees with what is seen.
    watched(api, controller, "Instance", api.objects[("Instance", *KEY)])
    writes = len(api.status_writes)
    for key in drain(controller):
        controller.reconcile(key)
    assert len(api.status_writes) == writes


def _ready(status: Obj | None) -> Obj:
    found = [c for c in (status or {}).get("conditions") or [] if c["type"] == "Ready"]
    assert len(found) == 1
    return found[0]


def test_the_ready_condition_follows_the_phase_and_a_converged_resync_writes_nothing(
    world, monkeypatch
) -> None:
    api, controller = world
    clock = iter(f"2025-01-0{day}T00:00:00Z" for day in range(1, 10))
    monkeypatch.setattr("controllers.instance.reconciler._now", lambda: next(clock))
    obj = instance()
    obj["metadata"].update(finalizers=[constants.FINALIZER_INSTANCE], resourceVersion="2", generation=1)
    watched(api, controller, "Instance", obj)
    pool = {"kind": "InstanceType", "metadata": {"name": obj["spec"]["type"]}, "status": {"phase": "Active"}}
    watched(api, controller, "InstanceType", pool)
    watched(api, controller, "Devices", _devices())
    pod = _pod(CARD)
    watched(api, controller, "Pod", pod)

    controller.reconcile(KEY)
    status = api.objects[("Instance", *KEY)]["status"]
    assert status["phase"] == "Ready"
    ready = _ready(status)
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "Ready", 1)
    since = ready["lastTransitionTime"]

    # Converged: the write seen, every later pass writes nothing.
    watched(api, controller, "Instance", api.objects[("Instance", *KEY)])
    writes = len(api.status_writes)
    for _ in range(3):
        controller.reconcile(KEY)
    assert len(api.status_writes) == writes
    assert _ready(api.objects[("Instance", *KEY)]["status"])["lastTransitionTime"] == since

    # A container stops being ready: False, the Pod's reason, a new transition time.
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    pod["status"]["containerStatuses"] = [
        {"name": "main", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}
    ]
    watched(api, controller, "Pod", pod)
    controller.reconcile(KEY)
    status = api.objects[("Instance", *KEY)]["status"]
    ready = _ready(status)
    assert (status["phase"], ready["status"], ready["reason"]) == (
        "CrashLoopBackOff",
        "False",
        "CrashLoopBackOff",
    )
    assert ready["message"] == status["phaseMessage"]
    assert ready["lastTransitionTime"] != since
    since = ready["lastTransitionTime"]

    # Still not ready under another phase: the reason moves, the time holds.
    pod["status"]["containerStatuses"] = []
    watched(api, controller, "Instance", api.objects[("Instance", *KEY)])
    watched(api, controller, "Pod", pod)
    controller.reconcile(KEY)
    ready = _ready(api.objects[("Instance", *KEY)]["status"])
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == ("False", "Running", since)
