"""The InstanceTypeFlavor catalog (§2.3, §8): entries from the generated flavors, names by the
grouping setting, kept equal by its reconciler over the in-memory API, never rewritten when
converged, restored when edited or deleted by hand."""

from __future__ import annotations

import copy

from controllers.pools import catalog
from controllers.pools.instance_type_flavors import InstanceTypeFlavorReconciler
from tests.unit import test_pools_reconcilers as pools
from tests.unit.test_pools_reconcilers import World, kinds, seeded, settle


def _start(world: World):
    previous = pools.RECONCILERS
    pools.RECONCILERS = (*previous, InstanceTypeFlavorReconciler)
    try:
        return pools.start(world)
    finally:
        pools.RECONCILERS = previous


def _flavors(world: World) -> list[dict]:
    return [o for (k, _ns, _n), o in world.objects.items() if k == "ResourceFlavor"]


def test_one_entry_per_pool_shape_named_as_section_8() -> None:
    world = seeded()
    settle(_start(world))
    assert kinds(world, "InstanceTypeFlavor") == [
        "gpustack--generic",
        "gpustack--nvidia-a10g",
        "gpustack--nvidia-h100-80gb-hbm3",
    ]
    a10g = world.objects[("InstanceTypeFlavor", "", "gpustack--nvidia-a10g")]["spec"]
    assert a10g["acceleratable"] is True and a10g["acceleratorGroup"] == "nvidia-a10g"
    assert a10g["manufacturer"] == "nvidia" and a10g["sliceable"] is True
    assert "generalGroup" not in a10g  # os/arch- and CPU-agnostic unless the pools are CPU-aware
    generic = world.objects[("InstanceTypeFlavor", "", "gpustack--generic")]["spec"]
    assert generic == {"acceleratable": False, "generalGroup": "generic", "manufacturer": "generic"}


def test_cpu_aware_grouping_names_entries_by_the_cpu_key_too() -> None:
    world = seeded()
    settle(_start(world))
    gkey = "intel-xeon-platinum-8480"
    flavors = copy.deepcopy(_flavors(world))
    for flavor in flavors:  # nodes whose CPU group key the worker's NodeFeature named
        labels = flavor["metadata"]["labels"]
        labels.pop("general.feature.gpustack.ai/generic")
        labels[f"general.feature.gpustack.ai/{gkey}"] = "true"
    entries = catalog.catalog(flavors, aware_cpu=True)
    assert sorted(entries) == [
        f"gpustack--{gkey}",
        f"gpustack--{gkey}--nvidia-a10g",
        f"gpustack--{gkey}--nvidia-h100-80gb-hbm3",
    ]
    assert entries[f"gpustack--{gkey}"]["spec"] == {
        "acceleratable": False,
        "generalGroup": gkey,
        "manufacturer": "intel",
    }
    assert entries[f"gpustack--{gkey}--nvidia-a10g"]["spec"]["generalGroup"] == gkey
    assert sorted(catalog.catalog(flavors, aware_cpu=False)) == [
        "gpustack--generic",
        "gpustack--nvidia-a10g",
        "gpustack--nvidia-h100-80gb-hbm3",
    ]


def test_converged_catalog_is_not_rewritten_and_hand_edits_are_undone() -> None:
    world = seeded()
    manager = _start(world)
    settle(manager)
    world.calls.clear()
    for flavor in _flavors(world):  # a resync of every flavor
        world.put(flavor)
    settle(manager)
    assert [c for c in world.calls if c[1] == "InstanceTypeFlavor"] == []

    edited = copy.deepcopy(world.objects[("InstanceTypeFlavor", "", "gpustack--nvidia-a10g")])
    edited["spec"]["memory"] = "1Gi"
    world.put(edited)
    world.remove("InstanceTypeFlavor", "gpustack--generic")
    settle(manager)
    assert kinds(world, "InstanceTypeFlavor")[0] == "gpustack--generic"
    assert world.objects[("InstanceTypeFlavor", "", "gpustack--nvidia-a10g")]["spec"].get("memory") != "1Gi"


def test_an_entry_no_flavor_calls_for_is_removed() -> None:
    world = seeded()
    manager = _start(world)
    settle(manager)
    world.put(
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "InstanceTypeFlavor",
            "metadata": {"name": "gpustack--stale"},
            "spec": {"acceleratable": False},
        },
        "ADDED",
    )
    settle(manager)
    assert "gpustack--stale" not in kinds(world, "InstanceTypeFlavor")


def test_flavors_of_other_owners_and_deleting_ones_contribute_nothing() -> None:
    world = seeded()
    settle(_start(world))
    flavors = _flavors(world)
    foreign = copy.deepcopy(flavors[0])
    foreign["metadata"]["name"] = "someone-elses"
    foreign["metadata"]["labels"] = {"general.feature.gpustack.ai/other": "true"}
    going = [copy.deepcopy(f) for f in flavors]
    for f in going:
        f["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert catalog.catalog([foreign, *going], aware_cpu=False) == {}
