"""The dashboard's pure parts: the documents folded from cluster states, and the bounded history."""

from __future__ import annotations

import pytest

from api import constants
from gateway.dashboard import model
from gateway.dashboard.history import History
from gateway.fleet import item_name
from tests.gateway import dashboard_objects as objs
from tests.unit.gateway_objects import H100_SPEC

POOL = item_name(H100_SPEC)


def state(name: str, objects: list[dict], status: str = model.REACHABLE, **kw) -> model.ClusterState:
    by_kind: dict[str, list[dict]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    return model.ClusterState(name, status, objects=by_kind, **kw)


def test_a_tile_counts_nodes_cards_pools_pending_and_phases():
    objects = objs.cluster_objects("a", 2, used=3, pending=2)
    objects[2] = objs.node("a-gpu-0000", ready=False)  # [0:2] are the pools, then node, devices...
    objects.append(objs.devices("extra", unhealthy=2))
    objects.append(objs.workload("done", "tenant", "queue-" + objs.H100_TYPE, admitted=True))
    objects.append(objs.deployment("llama", "tenant", "Starting"))
    tile = model.cluster_tile(state("a", objects, last_seen=0.0))
    assert tile["nodes"] == {"total": 2, "ready": 1}
    assert tile["accelerators"] == [
        {"model": "NVIDIA H100 80GB HBM3", "manufacturer": "nvidia", "cards": 24, "unhealthy": 2}
    ]
    assert tile["pendingWorkloads"] == 2 and tile["pools"][0]["pending"] == 2
    assert tile["deployments"] == {"Ready": 1, "Starting": 1}
    assert tile["lastSeen"] == "1970-01-01T00:00:00Z"
    assert [p["name"] for p in tile["pools"]] == [objs.H100_TYPE, objs.CPU_TYPE]


def test_a_view_is_used_free_capacity_with_fractions_and_never_negative():
    status = {
        "accelerator": {"capacity": "8", "remaining": "9"},
        "acceleratorShared": {"capacity": "1500m", "remaining": "500m"},
    }
    assert model.view(status, "accelerator") == {"used": 0, "free": 9, "capacity": 8}
    assert model.view(status, "acceleratorShared") == {"used": 1, "free": 0.5, "capacity": 1.5}
    assert model.view(status, "acceleratorSliced") == {"used": 0, "free": 0, "capacity": 0}


@pytest.mark.parametrize(
    "conditions, spec, pending",
    [
        ([], {}, True),
        ([{"type": "QuotaReserved", "status": "True"}], {}, False),
        ([{"type": "Admitted", "status": "True"}], {}, False),
        ([{"type": "Finished", "status": "True"}], {}, False),
        ([], {"active": False}, False),
    ],
)
def test_a_workload_is_pending_while_it_waits_for_quota(conditions, spec, pending):
    workload = {
        "metadata": {"name": "w"},
        "spec": {"queueName": "q", **spec},
        "status": {"conditions": conditions},
    }
    assert model.workload_pending(workload) is pending


def test_the_fleet_pools_sum_their_clusters_and_the_pool_page_maps_cards_to_pods():
    a = state("a", objs.cluster_objects("a", 2, used=9))
    b = state("b", objs.cluster_objects("b", 1, used=1), status=model.UNREACHABLE, reason="gone")
    fleet = model.fleet([b, a], revision=7, now=0)
    assert [c["name"] for c in fleet["clusters"]] == ["a", "b"] and fleet["revision"] == 7
    h100 = fleet["pools"][0]
    assert (h100["name"], h100["clusters"], h100["used"], h100["capacity"]) == (POOL, ["a", "b"], 10, 24)
    page = model.pool([a, b], POOL, revision=7, now=0)
    assert page is not None
    assert [(n["cluster"], n["name"], n["cardsUsed"]) for n in page["nodes"]] == [
        ("a", "a-gpu-0000", 8),
        ("a", "a-gpu-0001", 1),
        ("b", "b-gpu-0000", 1),
    ]
    assert page["nodes"][1]["cards"][0]["pods"] == ["tenant/job-0001"]
    assert [c["state"] for c in page["candidates"]] == [model.REACHABLE, model.UNREACHABLE]
    assert model.pool([a], "no-such-pool", 7, 0) is None


def test_a_card_map_reads_modes_slices_and_skips_finished_and_visibility_pods():
    inventory = objs.devices("n")
    inventory = objs.allocate(inventory, 0, constants.DEVICE_MODE_SLICED, 320_000, allocatedSlices=2)
    inventory = objs.allocate(
        inventory,
        1,
        constants.DEVICE_MODE_PARTITIONED,
        800_000,
        allocatedProfiles=[{"name": "3g.40gb", "count": 1}],
    )
    c0, c1 = objs.card_id(inventory, 0), objs.card_id(inventory, 1)
    pods = [
        objs.pod(
            "a", "t", "n", [(c0, 0, constants.DEVICE_MODE_SLICED), (c1, 1, constants.DEVICE_MODE_PARTITIONED)]
        ),
        objs.pod("done", "t", "n", [(c0, 0, constants.DEVICE_MODE_SLICED)], phase="Succeeded"),
        objs.pod("ssh", "t", "n", [(c0, 0, constants.DEVICE_MODE_VISIBILITY)]),
    ]
    cards = model.cards(inventory, model._pods_by_card(pods))
    assert (cards[0]["mode"], cards[0]["slices"], cards[0]["fill"], cards[0]["pods"]) == (
        "sliced",
        2,
        0.2,
        ["t/a"],
    )
    assert (cards[1]["mode"], cards[1]["profiles"], cards[1]["fill"]) == ("partitioned", ["3g.40gb×1"], 0.5)
    assert cards[2]["mode"] == "free" and cards[2]["pods"] == []


def test_a_node_serves_the_pools_whose_schedule_labels_it_carries():
    h100, cpu = objs.pool_types(1)
    node = objs.node("n")
    assert model.selector(h100) == {
        constants.LABEL_ACCELERATABLE: "true",
        constants.LABEL_OS: "linux",
        constants.LABEL_ARCH: "amd64",
        constants.label_accelerator_group("nvidia-h100-80gb-hbm3"): "true",
    }
    assert model._matches(node["metadata"]["labels"], model.selector(h100))
    assert not model._matches(node["metadata"]["labels"], model.selector(cpu))  # an accelerated node


def test_history_keeps_one_window_per_pool_and_a_bounded_number_of_pools():
    history = History(interval=10, window=60, max_pools=3)
    assert history.per_pool == 6
    for tick in range(100):
        history.record(tick * 10.0, [{"name": f"p{i}", "used": tick, "pending": 1} for i in range(2)])
    assert history.pools() == ["p0", "p1"] and history.size() == 12
    assert [s[1] for s in history.samples("p0")] == list(range(94, 100))
    for i in range(10):  # many pools appear: only the newest max_pools are kept
        history.record(1000.0 + i, [{"name": f"q{i}", "used": i, "pending": 0}])
    assert len(history.pools()) == 3 and history.size() <= 3 * 6
    history.record(5000.0, [{"name": "late", "used": 1, "pending": 0}])  # the others are a window old
    assert history.pools() == ["late"]
    with pytest.raises(ValueError):
        History(interval=0)


def test_every_asset_of_the_page_is_served_and_ships_in_the_wheel():
    import fnmatch
    from importlib import resources
    from pathlib import Path

    from gateway.dashboard.app import INDEX, STATIC

    files = {p.name for p in resources.files("gateway.dashboard").joinpath("static").iterdir()}
    assert files == {INDEX, *STATIC}
    manifest = (Path(__file__).resolve().parents[2] / "MANIFEST.in").read_text().split("\n")
    patterns = next(line.split()[2:] for line in manifest if "gateway/dashboard/static" in line)
    assert all(any(fnmatch.fnmatch(name, p) for p in patterns) for name in files), (files, patterns)
