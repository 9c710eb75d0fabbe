"""Discovery (§2.0, §2.1): the NVML backend on pynvml's real wrappers over the simulated library,
the Devices spec and labels it renders, and the bad-input cases (a failing card, a malformed
profile, an Xid, a library that does not answer)."""

from __future__ import annotations

import pytest

from api import constants
from nodeplugins.devicemanager import devices
from nodeplugins.devicemanager.backends import DiscoveryError, backend_for
from nodeplugins.devicemanager.backends.nvidia import NvidiaBackend

MIXED = """
manufacturer: nvidia
cards:
  - {product: NVIDIA H100 80GB HBM3, count: 6}
  - {product: NVIDIA H100 80GB HBM3, count: 2, partitioned: true}
"""


def discover(tmp_path, text: str, node: str = "n1"):
    path = tmp_path / "node.yaml"
    path.write_text(text)
    return backend_for("nvidia", simulate=path, node=node).discover()


def test_mixed_h100_node_renders_both_families(tmp_path):
    inventory = discover(tmp_path, MIXED)
    assert inventory.driver_version == "570.124.06" and inventory.runtime_version == "12.8"
    [group] = devices.spec_groups(inventory, {})
    assert group["id"] == "nvidia-h100-80gb-hbm3" and group["memory"] == 81920 and group["family"] == "hopper"
    cards = group["accelerators"]
    assert [a["index"] for a in cards] == list(range(8))
    assert cards[0]["status"]["logicalSliced"] == {"coresPercentageOvercommit": True, "count": 128}
    assert cards[6]["status"]["logicalSliced"] == {"count": 0}
    profiles = {p["name"]: p for p in cards[6]["status"]["physicalSliced"]["profiles"]}
    assert profiles["3g.40gb"]["placements"] == [{"start": 0, "length": 4}, {"start": 4, "length": 4}]
    assert cards[6]["status"]["physicalSliced"]["count"] == 7
    assert cards[0]["topology"]["pciBusId"] == "0000:18:00.0" and cards[0]["topology"]["numaAffinity"] == "0"
    detail = group["acceleratorSlicedDetail"]
    assert detail["logical"]["count"] == 6 * 128 and detail["physical"]["count"] == 14
    labels = devices.feature_labels([inventory])
    assert labels[constants.LABEL_ACCELERATABLE] == "true"
    assert labels["acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.count"] == "8"
    assert labels["acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.comcap"] == "9.0"
    assert labels["acceleratable.feature.gpustack.ai/nvidia.driver-version"] == "570.124.06"


def test_card_ids_are_unique_across_nodes(tmp_path):
    one = {c.id for c in discover(tmp_path, MIXED, "n1").cards}
    two = {c.id for c in discover(tmp_path, MIXED, "n2").cards}
    assert len(one) == 8 and not one & two


def test_a_card_nvml_fails_on_is_left_out_of_the_pass(tmp_path, caplog):
    text = "manufacturer: nvidia\ncards:\n  - {product: NVIDIA A10G, count: 2}\n  - {product: NVIDIA A10G, failing: nvmlDeviceGetUUID}\n"
    inventory = discover(tmp_path, text)
    assert len(inventory.cards) == 2
    assert "NVML failed on a card" in caplog.text


def test_a_critical_xid_marks_the_card_unhealthy(tmp_path):
    text = "manufacturer: nvidia\ncards:\n  - {product: NVIDIA A10G}\n  - {product: NVIDIA A10G, unhealthy: true}\n"
    inventory = discover(tmp_path, text)
    assert [card.unhealthy for card in inventory.cards] == [False, True]
    [group] = devices.spec_groups(inventory, {})
    assert group["accelerators"][1]["status"]["unhealthy"] is True


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("manufacturer: nvidia\ncards: []\n", "cards: want a non-empty list"),
        ("manufacturer: nvidia\ncards: [{product: Nope}]\n", "cards[0].product: unknown product 'Nope'"),
        (
            "manufacturer: nvidia\ncards: [{product: NVIDIA A10G, partitioned: true}]\n",
            "has no partition profiles",
        ),
        ("manufacturer: ascend\ncards: [{product: Ascend 910B}]\n", "start it with --manufacturer ascend"),
        ("manufacturer: [\n", "not YAML"),
    ],
)
def test_a_malformed_profile_is_a_failed_pass_naming_the_field(tmp_path, text, fragment):
    with pytest.raises(DiscoveryError, match=None) as error:
        discover(tmp_path, text)
    assert fragment in str(error.value)


def test_an_nvml_that_does_not_answer_fails_the_pass():
    class Dead:
        def __init__(self):
            self.nvmlInitWithFlags = lambda flags: 999
            self.nvmlErrorString = lambda result: b"Unknown Error"

    with pytest.raises(DiscoveryError, match="NVML did not initialise"):
        NvidiaBackend(Dead()).discover()


def test_other_manufacturers_discover_from_the_profile(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("manufacturer: amd\ncards: [{product: AMD Instinct MI300X, count: 2}]\n")
    backend = backend_for("amd", simulate=path, node="n1")
    inventory = backend.discover()
    assert [card.product for card in inventory.cards] == ["AMD Instinct MI300X"] * 2
    injection = backend.inject(
        "exclusive",
        [
            __import__("nodeplugins.devicemanager.backends.base", fromlist=["Grant"]).Grant(
                inventory.cards[1], 1_600_000
            )
        ],
    )
    assert injection.envs["AMD_VISIBLE_DEVICES"] == "none"
    assert ("/dev/kfd", "/dev/kfd", "rw") in injection.devices
    with pytest.raises(DiscoveryError, match="--simulate"):
        backend_for("amd", node="n1").discover()
