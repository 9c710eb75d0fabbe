"""controllers.pools.node_capacity and the Devices label mirror: gate 4's node counting keys (§3.2)."""

from __future__ import annotations

from api import constants
from controllers.pools.devices_labels import label_patch
from controllers.pools.node_capacity import capacity_patch, counting_key, node_capacity
from controllers.pools.node_capacity_keys import credits_enabled
from tests.unit.pools_fixtures import A10G, H100, M, devices, node, partition_example


def test_sliced_keys_of_an_a10g_node() -> None:
    keys = node_capacity(node("a", A10G, 4), devices("a", A10G, 4)).keys
    assert keys == {
        "nvidia.com/gpu.sliced.units": str(4 * M),
        "nvidia.com/gpu.sliced.cores-percentage": str(4 * 128 * 100),  # NVIDIA overcommits compute
        "nvidia.com/gpu.sliced.memory-percentage": "400",
        "nvidia.com/gpu.sliced.memory-mib": str(4 * 24576),
    }


def test_compute_not_overcommitted_caps_cores_at_cards() -> None:
    d = devices("a", A10G, 2)
    for card in d["spec"]["groups"][0]["accelerators"]:
        card["status"]["logicalSliced"]["coresPercentageOvercommit"] = False
    keys = node_capacity(node("a", A10G, 2), d).keys
    assert keys["nvidia.com/gpu.sliced.cores-percentage"] == "200"


def test_partition_keys_of_the_worked_example() -> None:
    # §7: .partitioned = (1+3)+7+7 = 18 (the plugin's), mig-3g.40gb = 1 + 5 = 6, mig-4g.40gb = 2.
    result = node_capacity(node("h1", H100, 3, partitioned=True), partition_example())
    assert result.partition_tokens == {"nvidia.com/gpu.partitioned": 18}
    keys = result.keys
    assert keys["nvidia.com/gpu.partitioned.mig-3g.40gb"] == "6"
    assert keys["nvidia.com/gpu.partitioned.mig-4g.40gb"] == "2"
    assert keys["nvidia.com/gpu.partitioned.mig-1g.10gb"] == "17"
    assert keys["nvidia.com/gpu.partitioned.units"] == str(3 * M)
    assert not any(k.startswith("nvidia.com/gpu.sliced.") for k in keys)  # the other family is absent


def test_a_card_without_a_ledger_row_counts_its_static_ceiling() -> None:
    d = devices("h1", H100, 2, partitioned=True)
    d["status"] = {}
    keys = node_capacity(node("h1", H100, 2, partitioned=True), d).keys
    assert keys["nvidia.com/gpu.partitioned.mig-1g.10gb"] == "14"
    assert keys["nvidia.com/gpu.partitioned.mig-7g.80gb"] == "2"


def test_presence_is_gated_on_capacity_not_allocatable() -> None:
    n = node("a", A10G, 4)
    n["status"]["allocatable"]["nvidia.com/gpu.sliced"] = "0"  # saturated: keys stay
    assert node_capacity(n, devices("a", A10G, 4)).keys
    n["status"]["capacity"]["nvidia.com/gpu.sliced"] = "0"  # the pool dropped: keys go
    assert node_capacity(n, devices("a", A10G, 4)).keys == {}


def test_patch_writes_changes_and_removes_stale_keys_only() -> None:
    n = node("a", A10G, 4)
    wanted = node_capacity(n, devices("a", A10G, 4)).keys
    patch = capacity_patch(n, wanted)
    assert patch == wanted
    for section in ("capacity", "allocatable"):
        n["status"][section].update(wanted)
        n["status"][section]["nvidia.com/gpu.partitioned.mig-3g.40gb"] = "2"  # stale
        n["status"][section]["nvidia.com/gpu.sliced.units"] = "6400k"  # same quantity, other spelling
    assert capacity_patch(n, wanted) == {"nvidia.com/gpu.partitioned.mig-3g.40gb": None}
    n["status"]["capacity"].pop("nvidia.com/gpu.partitioned.mig-3g.40gb")
    n["status"]["allocatable"].pop("nvidia.com/gpu.partitioned.mig-3g.40gb")
    assert capacity_patch(n, wanted) == {}


def test_the_plugin_pools_are_never_ours() -> None:
    for key in (
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/gpu.sliced",
        "nvidia.com/gpu.partitioned",
    ):
        assert not counting_key(key)
    assert not counting_key("nvidia.com/gpu.partitioned.")
    assert not counting_key("nvidia.com/gpu.sliced.mig-1g.10gb")  # legacy, no special handling
    assert counting_key("nvidia.com/gpu.partitioned.mig-1g.10gb")
    assert counting_key("huawei.com/npu.sliced.memory-mib")


def test_kueue_compatibility_credits() -> None:
    keys = node_capacity(node("a", A10G, 4), devices("a", A10G, 4), credits=True).keys
    assert keys["credits.gpustack.ai/nvidia"] == str(4 * M)
    assert counting_key("credits.gpustack.ai/nvidia")
    assert not credits_enabled({}) and credits_enabled({"GPUSTACK_NODE_CREDITS_CAPACITY": "true"})


def test_devices_labels_mirror_the_node() -> None:
    d = devices("a", A10G, 4)
    n = node("a", A10G, 4)
    assert label_patch(d, n) == {}
    n["metadata"]["labels"][constants.LABEL_TOPOLOGY_PROFILE] = "fnv64-0000000000000000"
    del n["metadata"]["labels"][constants.LABEL_MANAGED]
    assert label_patch(d, n) == {
        constants.LABEL_MANAGED: None,
        constants.LABEL_TOPOLOGY_PROFILE: "fnv64-0000000000000000",
    }
