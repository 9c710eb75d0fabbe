"""Per-card fit labels (§6.6): values from gate 3's predicates, removal, minimal patches."""

from __future__ import annotations

import copy

from controllers.nodedevices.fit_labels import desired_fit_labels, fit_label_patch, is_fit_label
from nodeplugins.devicemanager import simulated

A10G = simulated.PRODUCTS["NVIDIA A10G"]
H100 = simulated.PRODUCTS["NVIDIA H100 80GB HBM3"]
SLICED = "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g"
SHARED = "shared-free-cards.fit.gpustack.ai/nvidia-a10g"


def node(name="n1", managed=True, extra=None):
    labels = {"gpustack.ai/managed": "true"} if managed else {}
    labels.update(extra or {})
    return {"metadata": {"name": name, "labels": labels}}


def test_spec_example_cards_at_640000_640000_1600000_give_1600000():
    devices = simulated.devices("n1", A10G, 3)
    cards = devices["status"]["groups"][0]["accelerators"]
    for card in cards[:2]:
        card.update(mode=3, allocated=960_000, remaining=640_000, allocatedSlices=1)
    labels = desired_fit_labels(node(), devices)
    assert labels[SLICED] == "1600000"
    assert labels[SHARED] == "1"  # a sliced card grants no share; only the free one can


def test_full_cards_give_zero_and_exclusive_cards_cannot_share():
    devices = simulated.devices("n1", A10G, 2)
    for card in devices["status"]["groups"][0]["accelerators"]:
        card.update(mode=1, allocated=1_600_000, remaining=0)
    labels = desired_fit_labels(node(), devices)
    assert labels[SLICED] == "0" and labels[SHARED] == "0"


def test_partitioned_cards_publish_only_their_free_placements():
    labels = desired_fit_labels(node(), simulated.devices("n1", H100, 2, partitioned=True))
    assert labels and all(is_fit_label(k) for k in labels)
    assert all(k.startswith("partitioned-free-instances.fit.gpustack.ai/") for k in labels)


def test_unmanaged_or_ledgerless_nodes_carry_none():
    assert desired_fit_labels(node(managed=False), simulated.devices("n1", A10G, 2)) == {}
    assert desired_fit_labels(node(), None) == {}


def test_patch_sets_what_differs_and_removes_what_is_stale():
    current = node(extra={SLICED: "1600000", "shared-free-cards.fit.gpustack.ai/gone": "2", "other": "x"})
    patch = fit_label_patch(current, {SLICED: "1600000", SHARED: "4"})
    assert patch == {SHARED: "4", "shared-free-cards.fit.gpustack.ai/gone": None}
    applied = copy.deepcopy(current)
    applied["metadata"]["labels"].update({k: v for k, v in patch.items() if v is not None})
    for k in [k for k, v in patch.items() if v is None]:
        del applied["metadata"]["labels"][k]
    assert fit_label_patch(applied, {SLICED: "1600000", SHARED: "4"}) == {}


# --- What a new Workload could still get: reservations count before their Pods hold cards -------------

from api import allocation  # noqa: E402
from controllers.nodedevices.fit_labels import assigned_nodes  # noqa: E402
from tests.unit import test_node_devices_fit as g3  # noqa: E402

EXCLUSIVE = "exclusive-free-cards.fit.gpustack.ai/nvidia-a10g"


def labels_with(workloads=(), pods=()):
    return desired_fit_labels(
        g3.node("n1"), g3.devices("n1"), pods=pods, workloads=workloads, flavors={"rf": g3.flavor()}
    )


def test_a_reservation_lowers_the_labels_before_its_pods_hold_cards():
    assert labels_with()[EXCLUSIVE] == "8"
    reserved = g3.workload("w", [g3.pod_set(count=3, limits=g3.gpu(2))], [g3.tas(count=3)])  # Pending here
    labels = labels_with([reserved])
    assert labels[EXCLUSIVE] == "2" and labels[SHARED] == "2" and labels[SLICED] == "1600000"
    # Evicted (a Retry), unreserved or finished: nothing is promised any more.
    for idle in (
        g3.workload("w", [g3.pod_set(count=3, limits=g3.gpu(2))], [g3.tas(count=3)], evicted=True),
        g3.workload("w", [g3.pod_set(count=3, limits=g3.gpu(2))], reserved=False),
    ):
        assert labels_with([idle])[EXCLUSIVE] == "8"


def test_a_held_pod_moves_from_promise_to_ledger_without_being_counted_twice():
    reserved = g3.workload("w", [g3.pod_set(count=2, limits=g3.gpu(2))], [g3.tas(count=2)], admitted=True)
    held = g3.record_pod(
        "w-0",
        "n1",
        [allocation.accelerator_entry(g3.card("n1", i), i, 1) for i in (0, 1)],
        limits=g3.gpu(2),
        workload_name="w",
    )
    assert labels_with([reserved], [held])[EXCLUSIVE] == "4"  # 2 held + 2 promised of 8
    other_node = g3.workload("x", [g3.pod_set(limits=g3.gpu(4))], [g3.assignment(nodes={"n2": 1})])
    assert labels_with([other_node])[EXCLUSIVE] == "8"  # promised elsewhere


def test_a_workload_is_indexed_under_the_nodes_it_is_assigned_while_live():
    wl = g3.workload(
        "w", [g3.pod_set(count=3, limits=g3.gpu(1))], [g3.assignment(count=3, nodes={"n2": 2, "n1": 1})]
    )
    assert assigned_nodes(wl) == ["n1", "n2"]
    assert assigned_nodes(g3.workload("w", evicted=True, assignments=[g3.tas()])) == []
    assert assigned_nodes(g3.workload("w", reserved=False)) == []
