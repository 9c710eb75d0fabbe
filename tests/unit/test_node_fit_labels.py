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


def test_partitioned_cards_publish_no_slice_or_share_label():
    labels = desired_fit_labels(node(), simulated.devices("n1", H100, 2, partitioned=True))
    assert not any(is_fit_label(k) for k in labels)


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
