"""api.allocation, the allocation record's codec, and fastpath.ledger's ledger rebuilt from it (gate 3,
gate 5)."""

from __future__ import annotations

import pytest

from api import allocation
from fastpath import ledger
from nodeplugins.devicemanager import simulated as sim

M = 1_600_000
A10G = sim.PRODUCTS["NVIDIA A10G"]
H100 = sim.PRODUCTS["NVIDIA H100 80GB HBM3"]


def card(i: int, product=A10G, node: str = "n1") -> str:
    return f"{node}-{product.group}-{i}"


def pod(
    entries_by_container: dict[str, list[dict]],
    *,
    containers: dict[str, dict] | None = None,
    phase: str = "Running",
    group: str = A10G.group,
    manufacturer: str = "nvidia",
    node: str = "n1",
) -> dict:
    record = {
        name: [{"id": group, "manufacturer": manufacturer, "accelerators": entries}]
        for name, entries in entries_by_container.items()
    }
    containers = containers or {name: {"nvidia.com/gpu": "1"} for name in entries_by_container}
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {allocation.ANNOTATION: allocation.encode(record)},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": name, "image": "x", "resources": {"limits": limits}}
                for name, limits in containers.items()
            ],
        },
        "status": {"phase": phase},
    }


# --- Codec ---------------------------------------------------------------------------------------------------


def test_encode_is_canonical_and_round_trips() -> None:
    record = {
        "b": [
            {
                "id": "nvidia-a10g",
                "manufacturer": "nvidia",
                "accelerators": [
                    allocation.accelerator_entry("c1", 1, 3, 400_000, slices=1),
                    allocation.accelerator_entry("c0", 0, 1),
                ],
            }
        ],
        "a": [
            {
                "id": "nvidia-a10g",
                "manufacturer": "nvidia",
                "accelerators": [allocation.accelerator_entry("c2", 2, 2, 160_000)],
            }
        ],
    }
    text = allocation.encode(record)
    assert text.index('"a"') < text.index('"b"')
    assert text.index('"c0"') < text.index('"c1"')
    decoded = allocation.decode(text)
    assert allocation.encode(decoded) == text
    assert decoded["b"][0]["accelerators"][1] == {
        "id": "c1",
        "index": 1,
        "mode": 3,
        "allocated": 400_000,
        "allocatedSlices": 1,
    }


def test_partition_entries_carry_profile_and_placements() -> None:
    entry = allocation.accelerator_entry("c0", 0, 4, 785_000, profile="3g.40gb", placements=[(4, 4)])
    assert entry["allocatedPhysicalProfile"] == "3g.40gb"
    assert entry["allocatedPhysicalPlacements"] == [{"start": 4, "length": 4}]


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "[]",
        '{"main": {}}',
        '{"main": [{"manufacturer": "nvidia"}]}',
        '{"main": [{"id": "g"}]}',
        '{"main": [{"id": "g", "manufacturer": "nvidia", "accelerators": [{"id": "c", "mode": 9}]}]}',
        '{"main": [{"id": "g", "manufacturer": "nvidia", "accelerators": [{"mode": 1}]}]}',
    ],
)
def test_malformed_records_are_refused_by_decode_and_ignored_by_readers(value: str) -> None:
    with pytest.raises(allocation.RecordError):
        allocation.decode(value)
    assert allocation.record_of({"metadata": {"annotations": {allocation.ANNOTATION: value}}}) == {}


def test_absent_record_is_empty() -> None:
    assert allocation.decode(None) == {} and allocation.decode("") == {}
    assert allocation.record_of({"metadata": {}}) == {}


def test_release_terminated_setting() -> None:
    assert allocation.release_terminated_from_env({}) is True
    assert allocation.release_terminated_from_env({allocation.ENV_RELEASE_TERMINATED: "false"}) is False
    assert allocation.release_terminated_from_env({allocation.ENV_RELEASE_TERMINATED: "True"}) is True


# --- Held -------------------------------------------------------------------------------------------------------


def test_a_pod_is_held_once_its_record_names_every_accelerator_container() -> None:
    two = {"main": {"nvidia.com/gpu": "1"}, "side": {"nvidia.com/gpu.shared": "1"}, "plain": {"cpu": "1"}}
    partial = pod({"main": [allocation.accelerator_entry(card(0), 0, 1)]}, containers=two)
    assert ledger.accelerator_containers(partial) == ["main", "side"]
    assert not ledger.is_held(partial)
    both = pod(
        {
            "main": [allocation.accelerator_entry(card(0), 0, 1)],
            "side": [allocation.accelerator_entry(card(1), 1, 2)],
        },
        containers=two,
    )
    assert ledger.is_held(both)
    assert not ledger.is_held({"metadata": {}, "spec": {"containers": [{"name": "c", "resources": {}}]}})


# --- Aggregation --------------------------------------------------------------------------------------------------


def rows_of(devices: dict, pods: list[dict], **kw) -> list[dict]:
    return ledger.ledger_rows(devices, pods, **kw)[0]["accelerators"]


def test_aggregation_sums_each_card_as_the_device_manager_does() -> None:
    devices = sim.devices("n1", A10G, 4)
    pods = [
        pod({"main": [allocation.accelerator_entry(card(0), 0, 3, 480_000, slices=1)]}),
        pod(
            {"main": [allocation.accelerator_entry(card(0), 0, 3, 320_000)]}
        ),  # allocatedSlices defaults to 1
        pod({"main": [allocation.accelerator_entry(card(1), 1, 1)]}),  # allocated defaults to M
        pod(
            {
                "a": [allocation.accelerator_entry(card(2), 2, 2)],
                "b": [allocation.accelerator_entry(card(2), 2, 2)],
            }
        ),
        pod({"ssh": [allocation.accelerator_entry(card(3), 3, 5)]}),  # visibility never charges
    ]
    rows = rows_of(devices, pods)
    assert [(r["mode"], r["allocated"], r["remaining"], r["allocatedSlices"]) for r in rows] == [
        (3, 800_000, 800_000, 2),
        (1, M, 0, 0),
        (2, 320_000, M - 320_000, 0),
        (0, 0, M, 0),
    ]


def test_records_charge_only_the_node_their_pod_is_bound_to() -> None:
    devices = sim.devices("n1", A10G, 1)
    stray = pod({"main": [allocation.accelerator_entry(card(0), 0, 1)]}, node="n2")
    assert rows_of(devices, [stray])[0]["remaining"] == M


def test_finished_pods_release_cards_and_slices_but_not_partitions_or_metax_slices() -> None:
    devices = sim.devices("n1", A10G, 2)
    done = [
        pod({"main": [allocation.accelerator_entry(card(0), 0, 1)]}, phase="Succeeded"),
        pod({"main": [allocation.accelerator_entry(card(1), 1, 3, 400_000)]}, phase="Failed"),
    ]
    assert [r["remaining"] for r in rows_of(devices, done)] == [M, M]
    assert [r["remaining"] for r in rows_of(devices, done, release_terminated=False)] == [0, M - 400_000]

    metax = sim.devices("n1", A10G, 1)
    metax["spec"]["groups"][0]["manufacturer"] = "metax"
    slice_ = pod(
        {"main": [allocation.accelerator_entry(card(0), 0, 3, 400_000)]},
        phase="Succeeded",
        manufacturer="metax",
    )
    assert rows_of(metax, [slice_])[0]["remaining"] == M - 400_000


def test_partitioned_cards_report_placement_aware_remaining_profiles() -> None:
    devices = sim.devices("n1", H100, 1, partitioned=True)
    entry = allocation.accelerator_entry(card(0, H100), 0, 4, 785_000, profile="3g.40gb", placements=[(0, 4)])
    done = pod({"main": [entry]}, phase="Succeeded", group=H100.group)  # partitions stay until Pod is gone
    (row,) = rows_of(devices, [done])
    assert row["mode"] == 4 and row["remaining"] == M - 785_000
    assert row["allocatedProfiles"] == [{"name": "3g.40gb", "count": 1}]
    remaining = {p["name"]: p["count"] for p in row["remainingProfiles"]}
    # The spec's worked example (§7): 3, 2, 1, 1, 0, 0.
    assert remaining == {"1g.10gb": 3, "1g.20gb": 2, "2g.20gb": 1, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0}
    # The fit ledger built on these rows agrees.
    node = ledger.node_ledger(devices, H100.group, ledger.ledger_rows(devices, [done]))
    assert node.cards[0].profile_remaining()["3g.40gb"] == 1
    assert node.cards[0].profile_remaining()["7g.80gb"] == 0


def test_a_partition_without_placements_leaves_the_geometry_to_fit() -> None:
    devices = sim.devices("n1", H100, 1, partitioned=True)
    entry = allocation.accelerator_entry(card(0, H100), 0, 4, 785_000, profile="3g.40gb")
    (row,) = rows_of(devices, [pod({"main": [entry]}, group=H100.group)])
    assert row["allocatedProfiles"] == [{"name": "3g.40gb", "count": 1}]
    assert "remainingProfiles" not in row


def test_free_devices_rows_match_a_fresh_ledger() -> None:
    devices = sim.devices("n1", A10G, 2)
    assert rows_of(devices, []) == [
        {"id": card(i), "index": i, "mode": 0, "allocated": 0, "remaining": M, "allocatedSlices": 0}
        for i in range(2)
    ]
