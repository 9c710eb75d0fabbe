"""The scale-up fabric (spec C.3 [R]): NVML's registration read through pynvml's real wrappers, the
card's ``topology.fabric`` in ``Devices``, and the two node labels reduced over every card."""

from __future__ import annotations

import pytest

from api import constants
from nodeplugins.devicemanager import devices
from nodeplugins.devicemanager.backends import DiscoveryError, backend_for
from nodeplugins.devicemanager.fabric import domain_of, fabric_labels

DOMAIN = constants.LABEL_FABRIC_DOMAIN
MEMBERS = constants.LABEL_FABRIC_MEMBERS
UUID = "5b0e112233445566778899aabbccddef"


def discover(tmp_path, text: str, manufacturer: str = "nvidia"):
    path = tmp_path / "node.yaml"
    path.write_text(text)
    inventory = backend_for(manufacturer, simulate=path, node="n1").discover()
    return inventory, devices.canonical_groups(devices.spec_groups(inventory, {}))


def nvidia(*entries: str) -> str:
    return "manufacturer: nvidia\ncards:\n" + "".join(f"  - {e}\n" for e in entries)


def test_a_registered_nvlink_domain_is_recorded_per_card_and_labels_the_node(tmp_path):
    inventory, groups = discover(
        tmp_path, nvidia(f"{{product: NVIDIA H100 80GB HBM3, count: 4, fabric: {{id: {UUID}, clique: 3}}}}")
    )
    assert {card.fabric.id for card in inventory.cards if card.fabric} == {UUID}
    fabric = groups[0]["accelerators"][0]["topology"]["fabric"]
    assert fabric == {"kind": "nvlink", "id": UUID, "cliqueId": "3"}
    # NVML names no domain size: the node publishes the domain alone.
    assert devices.node_labels(inventory, groups)[DOMAIN] == f"nvlink-{UUID}-3"
    assert MEMBERS not in devices.node_labels(inventory, groups)


@pytest.mark.parametrize(
    "fabric",
    [
        f"{{id: {UUID}, state: in-progress}}",  # still negotiating: no cluster yet
        f"{{id: {UUID}, state: not-started}}",
        f"{{id: {UUID}, state: not-supported}}",
        f"{{id: {UUID}, status: error}}",  # completed with an error: identifies no cluster
        "{id: '00000000000000000000000000000000'}",  # all-zero cluster UUID
    ],
)
def test_an_unfinished_or_failed_registration_records_no_domain(tmp_path, fabric):
    inventory, groups = discover(tmp_path, nvidia(f"{{product: NVIDIA H100 80GB HBM3, fabric: {fabric}}}"))
    assert inventory.cards[0].fabric is None
    assert "fabric" not in groups[0]["accelerators"][0]["topology"]
    assert DOMAIN not in devices.node_labels(inventory, groups)


def test_an_ordinary_card_answers_not_supported_and_zeros(tmp_path):
    inventory, groups = discover(tmp_path, nvidia("{product: NVIDIA A10G, count: 2}"))
    assert [card.fabric for card in inventory.cards] == [None, None]
    assert fabric_labels(groups) == {}


def test_a_card_nvml_cannot_ask_has_no_domain(tmp_path):
    text = nvidia(
        f"{{product: NVIDIA H100 80GB HBM3, fabric: {{id: {UUID}}}, failing: nvmlDeviceGetGpuFabricInfo}}"
    )
    inventory, _groups = discover(tmp_path, text)
    assert len(inventory.cards) == 1 and inventory.cards[0].fabric is None


def test_cards_in_two_cliques_or_one_without_a_domain_withhold_the_label(tmp_path):
    two_cliques = nvidia(
        f"{{product: NVIDIA H100 80GB HBM3, count: 2, fabric: {{id: {UUID}, clique: 1}}}}",
        f"{{product: NVIDIA H100 80GB HBM3, count: 2, fabric: {{id: {UUID}, clique: 2}}}}",
    )
    assert fabric_labels(discover(tmp_path, two_cliques)[1]) == {}
    one_outside = nvidia(
        f"{{product: NVIDIA H100 80GB HBM3, count: 2, fabric: {{id: {UUID}, clique: 1}}}}",
        f"{{product: NVIDIA H100 80GB HBM3, fabric: {{id: {UUID}, state: in-progress}}}}",
    )
    assert fabric_labels(discover(tmp_path, one_outside)[1]) == {}


def test_an_ascend_super_pod_publishes_its_size_when_every_card_agrees(tmp_path):
    text = (
        "manufacturer: ascend\ncards:\n  - {product: Ascend 910B, count: 2, fabric: {id: '7', members: 64}}\n"
    )
    _inventory, groups = discover(tmp_path, text, "ascend")
    assert groups[0]["accelerators"][1]["topology"]["fabric"] == {"kind": "ub", "id": "7", "memberCount": 64}
    assert fabric_labels(groups) == {DOMAIN: "ub-7", MEMBERS: "64"}
    sizes = (
        "manufacturer: ascend\ncards:\n  - {product: Ascend 910B, fabric: {id: '7', members: 64}}\n"
        "  - {product: Ascend 910B, fabric: {id: '7', members: 32}}\n"
    )
    assert fabric_labels(discover(tmp_path, sizes, "ascend")[1]) == {DOMAIN: "ub-7"}


def card(fabric: dict | None) -> dict:
    return {"topology": {"fabric": fabric} if fabric is not None else {}}


def test_the_reduction_over_raw_groups():
    nv = {"kind": "nvlink", "id": UUID, "cliqueId": "1"}
    assert domain_of(nv) == f"nvlink-{UUID}-1"
    assert domain_of({"kind": "ub", "id": "7"}) == "ub-7"
    assert domain_of({"id": "7"}) == "" and domain_of({"kind": "ub", "id": 7}) == ""
    # Two groups (two products) on one node reduce together.
    assert fabric_labels([{"accelerators": [card(nv)]}, {"accelerators": [card(nv)]}]) == {
        DOMAIN: f"nvlink-{UUID}-1"
    }
    assert fabric_labels([]) == {}
    assert fabric_labels([{"accelerators": [card(nv), card(None)]}]) == {}
    # A value no label can carry is withheld, never sanitised into another domain's name.
    assert fabric_labels([{"accelerators": [card({"kind": "ub", "id": "7/8"})]}]) == {}
    assert fabric_labels([{"accelerators": [card({"kind": "ub", "id": "7" * 70})]}]) == {}
    zero = {"kind": "ub", "id": "7", "memberCount": 0}
    assert fabric_labels([{"accelerators": [card(zero)]}]) == {DOMAIN: "ub-7"}


@pytest.mark.parametrize(
    ("manufacturer", "fabric", "fragment"),
    [
        ("nvidia", "{id: xyz}", "cards[0].fabric.id: want the cluster UUID as 32 hex digits"),
        ("nvidia", f"{{id: {UUID}, state: done}}", "cards[0].fabric.state: want one of"),
        ("nvidia", f"{{id: {UUID}, status: maybe}}", "cards[0].fabric.status: want success or error"),
        ("nvidia", f"{{id: {UUID}, clique: -1}}", "cards[0].fabric.clique: want an integer >= 0"),
        ("nvidia", f"{{id: {UUID}, rack: 2}}", "cards[0].fabric.rack: unknown field"),
        ("nvidia", "[1]", "cards[0].fabric: want a mapping"),
        ("amd", "{id: '1'}", "cards[0].fabric: amd cards report no fabric domain"),
    ],
)
def test_a_malformed_fabric_in_a_profile_names_the_field(tmp_path, manufacturer, fabric, fragment):
    product = {"nvidia": "NVIDIA H100 80GB HBM3", "amd": "AMD Instinct MI300X"}[manufacturer]
    text = f"manufacturer: {manufacturer}\ncards:\n  - {{product: {product}, fabric: {fabric}}}\n"
    with pytest.raises(DiscoveryError) as error:
        discover(tmp_path, text, manufacturer)
    assert fragment in str(error.value)
