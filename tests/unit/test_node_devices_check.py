"""controllers.nodedevices.check: the gate-3 reconciler over a fake API client (no cluster)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from api import allocation, booleans, constants
from api.objects import Obj
from controllers.nodedevices import check, fit
from kube.client import ApiError
from kube.manager import Manager

try:  # tests/unit as a package, or (without its __init__) as a rootdir on sys.path
    from tests.unit import test_node_devices_fit as objects
except ImportError:  # pragma: no cover
    import test_node_devices_fit as objects  # type: ignore[no-redef]

NS = objects.NS
assignment, devices, flavor, gpu = objects.assignment, objects.devices, objects.flavor, objects.gpu
node, pod_set, sliced_half, tas, workload = (
    objects.node,
    objects.pod_set,
    objects.sliced_half,
    objects.tas,
    objects.workload,
)


class FakeClient:
    """Just enough of ``kube.client.Client``: objects by (kind, namespace, name)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.applied: list[tuple[Obj, str, str]] = []
        self.lists: list[tuple[str, str]] = []
        self.events: list[Obj] = []
        self.fail_apply: ApiError | None = None
        self.revision = 100

    def put(self, obj: Obj) -> Obj:
        self.revision += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.revision)
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def get(self, kind: str, name: str, namespace: str = "", **_: Any) -> Obj | None:
        obj = self.objects.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj else None

    def list(self, kind: str, namespace: str = "", *, field_selector: str = "", **_: Any):
        self.lists.append((kind, field_selector))
        items = [copy.deepcopy(o) for (k, _, _), o in self.objects.items() if k == kind]
        if field_selector.startswith("spec.nodeName=") and not field_selector.endswith("!="):
            wanted = field_selector.split("=", 1)[1]
            items = [o for o in items if o["spec"].get("nodeName") == wanted]
        return items, str(self.revision)

    def apply(self, obj: Obj, *, field_manager: str, force: bool = True, subresource: str = "") -> Obj:
        if self.fail_apply is not None:
            raise self.fail_apply
        self.applied.append((copy.deepcopy(obj), field_manager, subresource))
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        current = copy.deepcopy(self.objects.get(key)) or {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {"name": meta["name"], "generation": 1},
        }
        if subresource == "status" and obj["kind"] == "Workload":
            checks = current.setdefault("status", {}).setdefault("admissionChecks", [])
            for entry in obj["status"]["admissionChecks"]:
                checks[:] = [e for e in checks if e["name"] != entry["name"]] + [entry]
        elif subresource == "status":
            current["status"] = copy.deepcopy(obj["status"])
        else:
            current["spec"] = copy.deepcopy(obj.get("spec"))
        return self.put(current)

    def create(self, obj: Obj, **_: Any) -> Obj:
        self.events.append(obj)
        return obj

    def patch(self, *args: Any, **kwargs: Any) -> Obj:
        return {}


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv(
        booleans.ENV_NODE_DEVICES_RETRY, raising=False
    )  # the e2e suite's shorter one: not here
    client = FakeClient()
    manager = Manager(client, leader_election=False)  # type: ignore[arg-type]
    controller = manager.add(check.NodeDevicesCheck)
    assert isinstance(controller, check.NodeDevicesCheck)

    def observe(obj: Obj, event: str = "MODIFIED") -> None:
        """What the informer would see: store the object and run the mappers."""
        informer = manager.informer(obj["kind"])
        informer._store(
            event if informer.get(obj["metadata"]["name"], obj["metadata"].get("namespace", "")) else "ADDED",
            obj,
        )

    for obj in (flavor(), node("n1"), devices("n1", rows=sliced_half())):
        observe(client.put(obj))
    # The AdmissionCheck key is queued at construction; take it off.
    assert controller.queue.get(timeout=0) == check.CHECK_KEY
    controller.queue.done(check.CHECK_KEY)
    return client, controller, observe


def queued(controller: check.NodeDevicesCheck) -> list:
    keys = []
    while (key := controller.queue.get(timeout=0)) is not None:
        keys.append(key)
        controller.queue.done(key)
    return keys


# --- The AdmissionCheck object ----------------------------------------------------------------------------


def test_admission_check_is_applied_then_made_active_once(env) -> None:
    client, controller, _ = env
    assert controller.ensure_admission_check() is None
    spec, status = client.applied
    assert spec[0]["spec"] == {"controllerName": "worker.gpustack.ai/node-devices"}
    assert spec[1:] == (check.FIELD_MANAGER, "")
    assert status[0]["status"]["conditions"][0]["type"] == "Active"
    assert status[1:] == (check.FIELD_MANAGER, "status")
    client.applied.clear()
    controller.ensure_admission_check()
    assert [a[2] for a in client.applied] == [""]  # spec re-applied (a no-op), Active kept


def test_admission_check_retries_while_kueues_crd_is_not_served(env) -> None:
    client, controller, _ = env
    client.fail_apply = ApiError(404, "NotFound", "the server could not find the requested resource")
    assert controller.ensure_admission_check() == controller.crd_retry_seconds
    client.fail_apply = ApiError(403, "Forbidden", "no")
    with pytest.raises(ApiError):
        controller.ensure_admission_check()


# --- Verdicts -----------------------------------------------------------------------------------------------


def four_cards(name: str = "wl", **kw: Any) -> Obj:
    return workload(name, [pod_set(limits=gpu(4))], [tas()], **kw)


def test_retry_is_written_by_ssa_with_a_requeue_delay_and_an_event(env, caplog) -> None:
    caplog.set_level(logging.INFO)  # the verdict's log line must not clash with LogRecord fields
    client, controller, observe = env
    observe(client.put(four_cards()))
    assert queued(controller) == [(NS, "wl")]
    assert controller.reconcile((NS, "wl")) == controller.retry_after_seconds
    body, manager_, sub = client.applied[-1]
    assert (manager_, sub) == ("gpustack-node-devices", "status")
    assert body["metadata"]["uid"] == "uid-wl" and body["metadata"]["resourceVersion"]
    (entry,) = body["status"]["admissionChecks"]
    assert entry["state"] == "Retry" and entry["requeueAfterSeconds"] == 30
    assert 'PodSet "main"' in entry["message"]
    assert client.events[-1]["reason"] == check.REASON_RETRY
    assert client.lists[-1] == ("Pod", "spec.nodeName=n1")
    assert any(getattr(r, "workload", None) == "wl" for r in caplog.records)
    # Same cause, same message: nothing is written again.
    observe(client.get("Workload", "wl", NS))
    writes = len(client.applied)
    controller.reconcile((NS, "wl"))
    assert len(client.applied) == writes


def test_a_changed_cause_refreshes_the_message(env) -> None:
    client, controller, observe = env
    observe(client.put(four_cards()))
    controller.reconcile((NS, "wl"))
    observe(client.get("Workload", "wl", NS))
    rows = sliced_half()
    rows[0] = {"mode": 0, "allocated": 0, "remaining": 1_600_000, "allocatedSlices": 0}
    observe(client.put(devices("n1", rows=rows)))
    assert (NS, "wl") in queued(controller)  # a ledger change re-judges the waiting Workload
    controller.reconcile((NS, "wl"))
    entry = client.applied[-1][0]["status"]["admissionChecks"][0]
    assert entry["state"] == "Retry" and "1 of 8 cards whole and free" in entry["message"]


def test_freed_cards_turn_retry_into_ready_and_ready_is_remembered(env) -> None:
    client, controller, observe = env
    observe(client.put(four_cards("first")))
    controller.reconcile((NS, "first"))
    observe(client.put(devices("n1")))  # every card free
    assert controller.reconcile((NS, "first")) is None
    assert client.applied[-1][0]["status"]["admissionChecks"][0]["state"] == "Ready"
    assert client.events[-1]["reason"] == check.REASON_READY
    # The cache has not seen the Ready yet: a second Workload judged now must count the first.
    observe(client.put(workload("second", [pod_set(limits=gpu(5))], [tas()])))
    controller.reconcile((NS, "second"))
    assert client.applied[-1][0]["status"]["admissionChecks"][0]["state"] == "Retry"
    # Once the cache shows the Ready, the memory is dropped (the cache itself says it).
    observe(client.get("Workload", "first", NS))
    assert controller._ready_written == {}
    assert any(fit.is_inflight(w) for w in controller.promised(None))


def test_evicted_unreserved_and_ready_workloads_are_not_judged(env) -> None:
    client, controller, observe = env
    for wl in (
        four_cards("a", evicted=True),
        four_cards("b", reserved=False),
        four_cards("c", check="Ready"),
    ):
        observe(client.put(wl))
        assert controller.reconcile((NS, wl["metadata"]["name"])) is None
    assert client.applied == []


def test_the_uncached_read_decides_whether_to_judge(env) -> None:
    client, controller, observe = env
    observe(client.put(four_cards()))
    client.put(four_cards(evicted=True))  # Kueue evicted it; the cache has not seen it yet
    assert controller.reconcile((NS, "wl")) is None
    assert client.applied == []


def test_a_workload_that_moved_on_before_the_write_is_judged_again(env) -> None:
    client, controller, observe = env
    observe(client.put(four_cards()))
    client.fail_apply = ApiError(409, "Conflict", "the object has been modified")
    with pytest.raises(check.RetryNow):
        controller.reconcile((NS, "wl"))


def test_inflight_promise_let_go_wakes_the_waiting(env) -> None:
    client, controller, observe = env
    observe(client.put(four_cards("waiting")))
    queued(controller)
    ready = four_cards("ready", check="Ready")
    observe(client.put(ready))
    queued(controller)
    gone = copy.deepcopy(ready)
    gone["status"]["conditions"].append({"type": "Evicted", "status": "True"})
    observe(client.put(gone))
    assert (NS, "waiting") in queued(controller)


# --- Pure helpers ---------------------------------------------------------------------------------------------


def test_check_status_patch_keeps_the_transition_time_while_the_state_holds() -> None:
    wl = four_cards(check="Retry")
    wl["metadata"]["resourceVersion"] = "7"
    wl["status"]["admissionChecks"][0].update(message="old", lastTransitionTime="2020-01-01T00:00:00Z")
    body = check.check_status_patch(wl, fit.Verdict("Retry", "new"), retry_after=30, now="NOW")
    entry = body["status"]["admissionChecks"][0]
    assert entry["lastTransitionTime"] == "2020-01-01T00:00:00Z" and entry["message"] == "new"
    assert body["metadata"]["resourceVersion"] == "7"
    ready = check.check_status_patch(wl, fit.Verdict("Ready", "fits"), retry_after=30, now="NOW")
    assert ready["status"]["admissionChecks"][0] == {
        "name": constants.ADMISSION_CHECK_NODE_DEVICES,
        "state": "Ready",
        "message": "fits",
        "lastTransitionTime": "NOW",
    }
    wl["status"]["admissionChecks"][0].update(message="same", requeueAfterSeconds=30)
    assert check.check_status_patch(wl, fit.Verdict("Retry", "same"), retry_after=30, now="NOW") is None


def test_the_assigned_nodes_are_read_one_by_one_when_they_are_few() -> None:
    assert check.nodes_to_read(four_cards()) == ["n1"]
    two = workload(pod_sets=[pod_set(count=2, limits=gpu(1))], assignments=[tas(count=2, n1=1, n2=1)])
    assert check.nodes_to_read(two) == ["n1", "n2"]
    many = {f"n{i}": 1 for i in range(fit.NODE_READS + 1)}
    spread = workload(
        pod_sets=[pod_set(count=len(many), limits=gpu(1))], assignments=[tas(count=len(many), **many)]
    )
    assert check.nodes_to_read(spread) == []
    pool = workload(pod_sets=[pod_set(limits=gpu(1))], assignments=[assignment()])
    assert check.nodes_to_read(pool) == []


def test_a_workload_on_two_nodes_lists_each_one_and_counts_the_pods_bound_there(env) -> None:
    client, controller, observe = env
    for obj in (node("n2"), devices("n2"), devices("n1")):  # every card free on both nodes
        observe(client.put(obj))
    for i in range(8):  # ...but n2's Pods hold all its cards; the ledger status has not caught up
        entry = allocation.accelerator_entry(
            objects.card("n2", i), i, constants.DEVICE_MODE_EXCLUSIVE, objects.M
        )
        client.put(objects.record_pod(f"holder-{i}", "n2", [entry]))
    wl = workload("spread", [pod_set(count=2, limits=gpu(1))], [tas(count=2, n1=1, n2=1)])
    observe(client.put(wl))
    client.lists.clear()
    controller.reconcile((NS, "spread"))
    assert client.lists == [("Pod", "spec.nodeName=n1"), ("Pod", "spec.nodeName=n2")]
    verdict = client.applied[-1][0]["status"]["admissionChecks"][0]
    assert verdict["state"] == "Retry" and "n2" in verdict["message"], verdict


def test_registered_in_the_worker() -> None:
    from controllers.registry import CONTROLLERS

    assert check.NodeDevicesCheck in CONTROLLERS


def pool_workload(name: str, cards: int) -> Obj:
    return workload(name, [pod_set(limits=gpu(cards))], [assignment()])


def see_pod(controller: check.NodeDevicesCheck, pod: Obj, event: str = "ADDED") -> None:
    """What the shared Pod informer would see (it selects the Pods Kueue labelled)."""
    informer = controller.manager.informer("Pod", label_selector=check.POD_SELECTOR)
    informer._store(event, pod)


def holder(name: str, node_name: str, cards: range) -> Obj:
    entries = [
        allocation.accelerator_entry(
            objects.card(node_name, i), i, constants.DEVICE_MODE_EXCLUSIVE, objects.M
        )
        for i in cards
    ]
    pod = objects.record_pod(name, node_name, entries, limits=gpu(len(cards)), workload_name=f"wl-{name}")
    return pod


def test_a_pool_verdict_reads_the_pod_cache_and_confirms_ready_on_the_node_it_places_on(env) -> None:
    client, controller, observe = env
    for obj in (node("n2"), devices("n2"), devices("n1")):  # every card free on both nodes
        observe(client.put(obj))
    # n1's Pod holds six cards and the cache has seen it; n2's holds six too, but the cache lags.
    see_pod(controller, client.put(holder("a", "n1", range(6))))
    client.put(holder("b", "n2", range(6)))
    wl = pool_workload("pool", 4)
    observe(client.put(wl))
    client.lists.clear()
    controller.reconcile((NS, "pool"))
    # The cache put it on n2; the uncached read of n2 says no, and n1 is full in the cache too.
    assert client.lists == [("Pod", "spec.nodeName=n2")]
    verdict = client.applied[-1][0]["status"]["admissionChecks"][0]
    assert verdict["state"] == "Retry", verdict
    # The lagging Pod lands in the cache, then goes: the waiting Workload is woken and fits n2.
    see_pod(controller, client.objects[("Pod", NS, "b")])
    queued(controller)
    see_pod(controller, client.objects.pop(("Pod", NS, "b")), "DELETED")
    assert (NS, "pool") in queued(controller)
    client.lists.clear()
    controller.reconcile((NS, "pool"))
    assert client.lists == [("Pod", "spec.nodeName=n2")]
    verdict = client.applied[-1][0]["status"]["admissionChecks"][0]
    assert verdict["state"] == "Ready", verdict


def test_a_pool_retry_from_the_cache_lists_nothing_uncached(env) -> None:
    client, controller, observe = env
    observe(client.put(devices("n1")))
    see_pod(controller, client.put(holder("a", "n1", range(6))))
    observe(client.put(pool_workload("pool", 4)))
    client.lists.clear()
    controller.reconcile((NS, "pool"))
    assert client.lists == []
    assert client.applied[-1][0]["status"]["admissionChecks"][0]["state"] == "Retry"


def test_only_a_pod_that_held_cards_wakes_the_waiting_when_it_goes_or_ends(env) -> None:
    client, controller, observe = env
    observe(client.put(devices("n1")))
    see_pod(controller, client.put(holder("a", "n1", range(6))))
    observe(client.put(pool_workload("pool", 4)))
    controller.reconcile((NS, "pool"))  # Retry: two cards free
    queued(controller)
    cpu_only = objects.record_pod("cpu", "n1", [], workload_name="wl-cpu")
    cpu_only["metadata"]["annotations"].pop(allocation.ANNOTATION)
    see_pod(controller, client.put(cpu_only))
    ended = copy.deepcopy(client.objects[("Pod", NS, "cpu")])
    ended["status"]["phase"] = "Succeeded"
    see_pod(controller, client.put(ended), "MODIFIED")
    see_pod(controller, client.objects.pop(("Pod", NS, "cpu")), "DELETED")
    assert queued(controller) == []  # no cards freed: nothing to judge again
    done = copy.deepcopy(client.objects[("Pod", NS, "a")])
    done["status"]["phase"] = "Succeeded"
    see_pod(controller, client.put(done), "MODIFIED")
    assert queued(controller) == [(NS, "pool")]


def test_a_decision_reads_the_promises_on_its_nodes_not_the_fleets(env) -> None:
    """``promised``: the Workloads the node index assigns one of the nodes a decision reads (any
    node: the inflight ones, the only ones a decision charges), and every ``Ready`` written that the
    cache does not show (it may be assigned anywhere)."""
    client, controller, observe = env
    for name, at in (("on-n1", "n1"), ("on-n2", "n2"), ("on-both", "n1")):
        nodes = {at: 1} if name != "on-both" else {"n1": 1, "n2": 1}
        observe(client.put(workload(name, [pod_set(limits=gpu(1))], [tas(**nodes)], admitted=True)))
    observe(client.put(workload("unreserved", [pod_set(limits=gpu(1))], reserved=False)))

    def names(near):
        return sorted(w["metadata"]["name"] for w in controller.promised(near))

    assert names({"n1"}) == ["on-both", "on-n1"]
    assert names({"n2"}) == ["on-both", "on-n2"]
    assert names(None) == ["on-both", "on-n1", "on-n2"]  # "unreserved" charges nothing
    # The index follows the cache: reserved and admitted, it is read by a decision over a pool.
    observe(client.put(workload("unreserved", [pod_set(limits=gpu(1))], [tas(n2=1)], admitted=True)))
    assert names(None) == ["on-both", "on-n1", "on-n2", "unreserved"]
    observe(client.put(workload("unreserved", [pod_set(limits=gpu(1))], reserved=False)))
    assert names(None) == ["on-both", "on-n1", "on-n2"]
    # A Ready written for a Workload on n2, the cache behind it: read by every decision.
    observe(client.put(four_cards("judged")))
    observe(client.put(devices("n1")))
    controller.reconcile((NS, "judged"))
    assert client.applied[-1][0]["status"]["admissionChecks"][0]["state"] == "Ready"
    assert "judged" in names({"n2"}) and "judged" in names(None)
    observe(client.get("Workload", "judged", NS))  # the cache shows it: read by its nodes only
    assert "judged" in names({"n1"}) and "judged" not in names({"n2"})
    assert "judged" in names(None)  # and by a decision over a pool: it is inflight


def test_a_workload_deleted_while_its_ready_is_written_is_not_promised(env) -> None:
    """The delete reaches the cache while the verdict's write is on its way: the answer that comes
    back must not be remembered as a promise (it held a card for good in the containers e2e: the
    chat-kv step found '0 of 6 cards whole and free' beside a free card)."""
    client, controller, observe = env
    observe(client.put(devices("n1")))
    observe(client.put(four_cards("judged")))
    applying = client.apply

    def apply_then_delete(obj: Obj, **kw: Any) -> Obj:
        written = applying(obj, **kw)
        observe(client.get("Workload", "judged", NS), "DELETED")
        return written

    client.apply = apply_then_delete  # type: ignore[method-assign]
    controller.reconcile((NS, "judged"))
    assert client.applied[-1][0]["status"]["admissionChecks"][0]["state"] == "Ready"
    assert controller._ready_written == {}
    assert "judged" not in [w["metadata"]["name"] for w in controller.promised(None)]


def test_a_ready_the_cache_never_shows_stops_being_promised(env) -> None:
    """A write whose Workload the cache never shows (it went while the watch was away) is charged
    for UNSEEN_WRITE_SECONDS, then no more."""
    client, controller, observe = env
    observe(client.put(devices("n1")))
    observe(client.put(four_cards("unseen")))
    now = [1000.0]
    controller.clock = lambda: now[0]
    controller.reconcile((NS, "unseen"))
    controller.workloads._items.pop((NS, "unseen"))  # gone from the cache, no event told
    assert [w["metadata"]["name"] for w in controller.promised({"n1"})] == ["unseen"]
    now[0] += check.UNSEEN_WRITE_SECONDS + 1
    assert controller.promised({"n1"}) == [] and controller._ready_written == {}


def test_deleted_uids_are_kept_for_gone_seconds_and_pruned_from_the_oldest(env) -> None:
    _, controller, _ = env
    now = [0.0]
    controller.clock = lambda: now[0]
    for uid in ("a", "b", "c"):
        controller._forget(uid)
        now[0] += 100.0
    controller._forget("a")  # deleted again (a relist): its time and place move to the end
    assert list(controller._gone) == ["b", "c", "a"]
    now[0] = check.GONE_SECONDS + 150.0
    controller._forget("d")
    assert list(controller._gone) == ["c", "a", "d"]
