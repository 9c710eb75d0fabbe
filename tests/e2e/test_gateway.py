"""The worker-gateway over two real control planes.

Cluster ``east`` is the e2e cluster; ``west`` is a second control plane on its own state dir and
ports (``GPUSTACK_SECOND_CLUSTER_DIR``, ``GPUSTACK_SECOND_<NAME>_PORT``; by default the e2e ports
plus 20).  Each runs the operator's worker (webhooks and controllers) and simulated nodes of the
same hardware: one 8 × NVIDIA H100 80GB HBM3 node each, and a 4 × Tesla T4 node in east only.
The gateway runs as ``gpustack-operator wg`` in kubeconfig-directory mode on a unix socket and is
read over HTTPS, as the GPUStack server reads it.  What it serves is compared with what each
cluster's InstanceTypes say (kubectl), through capacity changes, deactivation, an unsubscribe and
an apiserver outage.  (No controller writes InstanceTypeFlavors yet, so the flavor view is covered
by tests/gateway only.)

Simulated nodes: kwok nodes, each with a publish-only device manager over a simulated hardware
profile (tests/cluster/profiles) that writes its ``Devices`` ledger and NodeFeature, and each
cluster's nfd-master labelling the node from them; nothing here writes a label or a ledger.  A
capacity change is the simulated hardware reporting cards unhealthy (the node's profile edited, as
an Xid or a lost card would): the device manager re-detects, and the InstanceType counts fewer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import harness
import httpx
import nodes
import pytest

from gateway.fleet import Fleet, item_name
from tests.e2e import fleetside
from tests.e2e.fleetside import (
    EAST,
    H100_TYPE,
    WEST,
    Fleetside,
    NodeSpec,
    h100_remaining,
    instance_types,
    registered,
)
from tests.gateway.serving import Watch

pytestmark = pytest.mark.e2e

H100_ITEM = "generic-nvidia-h100-80gb-hbm3-linux-amd64-12c-192g-100g"  # the H100 unit preset: 12/192Gi
SUFFIX = uuid.uuid4().hex[:5]
NODES = {  # node: its hardware profile in tests/cluster/profiles and its device manager's port slot
    EAST: {
        f"gw-h100-e-{SUFFIX}": NodeSpec("h100-8.yaml", 21),
        f"gw-t4-e-{SUFFIX}": NodeSpec("t4-4.yaml", 22),
    },
    WEST: {f"gw-h100-w-{SUFFIX}": NodeSpec("h100-8.yaml", 23)},
}


# Simulated nodes --------------------------------------------------------------------------------


def cards_turn_unhealthy(info: harness.ClusterInfo, name: str, unhealthy: int) -> None:
    """The simulated hardware of 8-H100 node ``name`` reports its first ``unhealthy`` cards bad."""
    node = nodes.node(info, name)
    assert node is not None, name
    node.profile.write_text(nodes.cards_profile("NVIDIA H100 80GB HBM3", 8, unhealthy=unhealthy))


# The two clusters and the gateway (tests/e2e/fleetside.py) ----------------------------------------


@pytest.fixture(scope="module")
def fleet(cluster: harness.ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleetside]:
    with fleetside.fleet(cluster, tmp_path_factory.mktemp("gateway"), NODES) as side:
        yield side


def aggregated(client: httpx.Client) -> dict[str, dict]:
    items = client.get("/apis/instancetypes", params={"aggregated": "true"}).json()["items"]
    return {item["name"]: item for item in items}


def expected_fleet(fleet: Fleetside, names: tuple[str, ...] = (EAST, WEST)) -> dict[str, dict]:
    """The fleet view folded from what each cluster's InstanceTypes say (kubectl)."""
    pairs = [
        (name, obj)
        for name in sorted(names)
        for obj in sorted(
            instance_types(fleet.members[name].info).values(), key=lambda o: o["metadata"]["name"]
        )
    ]
    return {item["name"]: item for item in Fleet().load(pairs).to_json()["items"]}


def candidates(item: dict) -> list[tuple[str, str, str]]:
    return sorted(
        (c["cluster"], c["name"], c["phase"]) for tier in item["status"]["tiers"] for c in tier["candidates"]
    )


# The tests (in order: they share the two clusters' state) -----------------------------------------


def test_both_clusters_subscribe_and_their_lists_match_kubectl(fleet: Fleetside) -> None:
    with fleet.client() as client:
        for name in (EAST, WEST):
            params = [("cluster", name), ("gvk", "worker.gpustack.ai/v1/InstanceType")]
            params.append(("gvk", "worker.gpustack.ai/v1/Instance"))
            assert client.post("/apis/workers", params=params).status_code == 200
        harness.wait_for(
            lambda: registered(client) == {EAST: "registered", WEST: "registered"},
            timeout=60,
            what="both registered",
        )

        def same() -> bool:
            items = client.get("/apis/instancetypes").json()["items"]
            served = {(i["cluster"], i["metadata"]["name"]): i["status"] for i in items}
            truth = {
                (name, type_name): obj["status"]
                for name, member in fleet.members.items()
                for type_name, obj in instance_types(member.info).items()
            }
            return served == truth and all("managedFields" not in i["metadata"] for i in items)

        harness.wait_for(same, timeout=60, what="the raw lists to match kubectl")


def test_the_fleet_view_has_one_item_per_shared_pool_with_summed_capacity(fleet: Fleetside) -> None:
    with fleet.client() as client:
        harness.wait_for(
            lambda: aggregated(client) == expected_fleet(fleet), timeout=60, what="fleet == kubectl"
        )
        items = aggregated(client)
        assert item_name(instance_types(fleet.members[WEST].info)[H100_TYPE]["spec"]) == H100_ITEM
        h100 = items[H100_ITEM]
        assert candidates(h100) == [(EAST, H100_TYPE, "Active"), (WEST, H100_TYPE, "Active")]
        assert h100["status"]["remaining"]["accelerator"] == "16"
        assert h100["status"]["onceMaxRequest"]["accelerator"] == "8"
        assert h100["status"]["detail"]["product"] == "NVIDIA H100 80GB HBM3"
        t4 = next(item for name, item in items.items() if "tesla-t4" in name)
        assert [c[0] for c in candidates(t4)] == [EAST]
        assert list(items)[-1].startswith("generic-linux")  # CPU pools after the accelerated ones


def test_the_flavor_view_lists_each_shape_once_with_its_clusters(fleet: Fleetside) -> None:
    # Each cluster's worker writes its InstanceTypeFlavor catalog from its pools; the gateway folds
    # the two catalogs by spec, naming the clusters that have each shape.
    def flavors() -> dict[str, list[str]]:
        with fleet.client() as client:
            response = client.get("/apis/instancetypeflavors", params={"aggregated": "true"})
        return {i["name"]: i["spec"]["clusters"] for i in response.json().get("items", [])}

    h100, t4 = "gpustack--nvidia-h100-80gb-hbm3", "gpustack--nvidia-tesla-t4"
    harness.wait_for(
        lambda: flavors().get(h100) == [EAST, WEST] and flavors().get(t4) == [EAST],
        timeout=90,
        what="the aggregated flavors of both catalogs",
    )
    assert flavors()["gpustack--generic"] == [EAST, WEST]


def test_an_aggregated_watch_moves_when_a_card_turns_unhealthy_in_one_cluster(fleet: Fleetside) -> None:
    east = fleet.members[EAST].info
    node = next(n for n in NODES[EAST] if "h100" in n)
    with fleet.client() as client:
        watch = Watch(fleet.client(), "/apis/instancetypes?watch=true&aggregated=true")
        try:
            assert watch.quiet(1.0)  # no snapshot
            cards_turn_unhealthy(east, node, 1)
            line = watch.until(
                lambda x: (
                    x["object"].get("name") == H100_ITEM
                    and x["object"]["status"]["remaining"]["accelerator"] == "15"
                ),
                timeout=60,
            )
            assert line["type"] == "MODIFIED" and line["cluster"] == EAST
            tiers = line["object"]["status"]["tiers"]
            assert [t["onceMaxRequest"]["accelerator"] for t in tiers] == ["7", "8"]
        finally:
            watch.close()
        assert h100_remaining(east) == 7
        harness.wait_for(
            lambda: aggregated(client) == expected_fleet(fleet), timeout=60, what="fleet == kubectl"
        )


def test_deactivating_one_clusters_type_drops_its_share_to_zero(fleet: Fleetside) -> None:
    west = fleet.members[WEST].info
    patch = lambda inactive: west.kubectl(  # noqa: E731
        "patch", "instancetype", H100_TYPE, "--type=merge", "-p", json.dumps({"spec": {"inactive": inactive}})
    )
    with fleet.client() as client:
        patch(True)
        try:
            harness.wait_for(
                lambda: (WEST, H100_TYPE, "Inactive") in candidates(aggregated(client)[H100_ITEM]),
                timeout=90,
                what="west's H100 candidate Inactive",
            )
            status = aggregated(client)[H100_ITEM]["status"]
            assert status["remaining"]["accelerator"] == "7"  # east's only
            assert aggregated(client) == expected_fleet(fleet)
        finally:
            patch(False)
        harness.wait_for(
            lambda: aggregated(client)[H100_ITEM]["status"]["remaining"]["accelerator"] == "15",
            timeout=90,
            what="west active again",
        )


def test_unsubscribing_a_cluster_removes_it_from_every_view(fleet: Fleetside) -> None:
    with fleet.client() as client:
        watch = Watch(fleet.client(), "/apis/instancetypes?watch=true")
        try:
            assert client.delete("/apis/workers", params={"cluster": WEST}).status_code == 200
            assert watch.until(lambda x: x["object"] is None, timeout=30) == {
                "type": "DELETED",
                "cluster": WEST,
                "object": None,
            }
        finally:
            watch.close()
        assert registered(client) == {EAST: "registered"}
        items = client.get("/apis/instancetypes").json()["items"]
        assert items and {i["cluster"] for i in items} == {EAST}
        fleet_view = aggregated(client)
        assert candidates(fleet_view[H100_ITEM]) == [(EAST, H100_TYPE, "Active")]
        assert fleet_view == expected_fleet(fleet, (EAST,))
        # and back, for the outage that follows
        assert client.post("/apis/workers", params={"cluster": WEST}).status_code == 200
        harness.wait_for(lambda: registered(client).get(WEST) == "registered", timeout=60, what="west back")
        harness.wait_for(
            lambda: aggregated(client) == expected_fleet(fleet), timeout=60, what="fleet == kubectl"
        )


def test_an_apiserver_outage_leaves_the_other_cluster_served(fleet: Fleetside) -> None:
    west = fleet.members[WEST].info
    east = fleet.members[EAST].info
    node = next(n for n in NODES[EAST] if "h100" in n)
    fleetside.stop_apiserver(west)  # an outage: the apiserver is gone at once
    with fleet.client() as client:
        watch = Watch(fleet.client(), "/apis/instancetypes?watch=true&aggregated=true&cluster=east")
        try:
            cards_turn_unhealthy(east, node, 2)
            line = watch.until(lambda x: x["object"].get("name") == H100_ITEM, timeout=60)
            assert candidates(line["object"]) == [(EAST, H100_TYPE, "Active")]
            assert line["object"]["status"]["remaining"]["accelerator"] == "6"
        finally:
            watch.close()
        response = client.get("/apis/instancetypes", params=[("cluster", EAST), ("cluster", WEST)])
        assert response.status_code == 200  # answered from the caches: the dead cluster blocks nothing
        assert {i["cluster"] for i in response.json()["items"]} == {EAST, WEST}  # west: its last known state
        # Subscribed again now, west cannot pass its readiness check: it stays pending, east is served.
        assert client.post("/apis/workers", params={"cluster": WEST, "force": "true"}).status_code == 200
        harness.wait_for(
            lambda: next(w for w in client.get("/apis/workers").json()["items"] if w["cluster"] == WEST)[
                "reason"
            ].startswith("unreachable"),
            timeout=60,
            what="west's readiness check to fail",
        )
        assert registered(client) == {EAST: "registered", WEST: "pending"}
        response = client.get("/apis/instancetypes", params={"aggregated": "true"})
        assert "'west' is not ready" in response.headers["warning"]
        h100 = {i["name"]: i for i in response.json()["items"]}[H100_ITEM]
        assert candidates(h100) == [(EAST, H100_TYPE, "Active")]
        assert h100["status"]["remaining"]["accelerator"] == "6"
