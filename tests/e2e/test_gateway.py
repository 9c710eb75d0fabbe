"""The worker-gateway over two real control planes: its API, and its fleet dashboard in a real
browser.

Cluster ``east`` is the e2e cluster; ``west`` is a second control plane on its own state dir and
ports (``GPUSTACK_SECOND_CLUSTER_DIR``, ``GPUSTACK_SECOND_<NAME>_PORT``; by default the lane's
``second-cluster`` block).  Each runs the operator's worker (webhooks and controllers) and nodes of
the same hardware: 8 × NVIDIA H100 80GB HBM3 each (in east a real kubelet node, where Pods run; in
west a kwok node), and a 4 × Tesla T4 kwok node in east only.  The gateway runs as
``gpustack-operator wg`` in kubeconfig-directory mode on a unix socket, read over HTTPS as the
GPUStack server reads it, with ``--dashboard-address`` (tests/e2e/fleetside.py).  One fleet serves
both halves of this module, in order, since starting a second control plane is the slowest thing
either does:

- the API: what the gateway serves is compared with what each cluster's InstanceTypes say (kubectl),
  through capacity changes, deactivation, an unsubscribe and an apiserver outage;
- the dashboard: headless Chromium (Debian's, scripts/ensure-chromium.sh) drives the page over the
  DevTools protocol (tests/gateway/browser.py) and the DOM is compared with the dashboard's API at
  the same revision and with kubectl: the tiles and their pools' views, the pool page's card map as
  a Pod is allocated a card on the real node (no reload: the event stream moves the page), and the
  west tile turning unreachable with its last-seen time when west's apiserver is killed.
  Screenshots of each page go to ``.dev/test/dashboard`` (``GPUSTACK_DASHBOARD_SCREENSHOTS`` moves
  them).

Simulated hardware: each node's device manager reads a hardware profile (tests/cluster/profiles)
and writes its ``Devices`` ledger and NodeFeature, and each cluster's nfd-master labels the node
from them; nothing here writes a label or a ledger.  A capacity change is the simulated hardware
reporting cards unhealthy (the node's profile edited, as an Xid or a lost card would): the device
manager re-detects, and the InstanceType counts fewer.  (No controller writes InstanceTypeFlavors
from outside a worker, so the flavor view is each worker's catalog.)
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import harness
import httpx
import nodes
import pytest

from api import allocation, constants
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
from tests.e2e.objects import requesting, wait_for_entrance
from tests.gateway.browser import Chromium, binary
from tests.gateway.serving import Watch
from tests.net import free_port

from .conftest import ensure_namespace

pytestmark = pytest.mark.e2e

H100_ITEM = "generic-nvidia-h100-80gb-hbm3-linux-amd64-12c-192g-100g"  # the H100 unit preset: 12/192Gi
SUFFIX = uuid.uuid4().hex[:5]
EAST_NODE, WEST_NODE = f"gw-h100-e-{SUFFIX}", f"gw-h100-w-{SUFFIX}"
NODES = {  # node: its hardware profile in tests/cluster/profiles and its ports' slot
    EAST: {
        EAST_NODE: NodeSpec("h100-8.yaml", 0, real=True),  # Pods run here
        f"gw-t4-e-{SUFFIX}": NodeSpec("t4-4.yaml", 22),
    },
    WEST: {WEST_NODE: NodeSpec("h100-8.yaml", 23)},
}
H100 = {"model": "NVIDIA H100 80GB HBM3", "cards": 8, "unhealthy": 0}
ACCELERATORS = {EAST: [H100, {"model": "Tesla T4", "cards": 4, "unhealthy": 0}], WEST: [H100]}
NS = "dashboard"
SHOTS = Path(
    os.environ.get("GPUSTACK_DASHBOARD_SCREENSHOTS") or harness.REPO_ROOT / ".dev" / "test" / "dashboard"
)

# What the page shows, read from its DOM (every number is a data attribute the page wrote from the
# document it rendered; the document's revision is main[data-revision]).
READ_FLEET = """(() => {
  const main = document.querySelector('main');
  if (main.dataset.page !== 'fleet' || !main.dataset.revision) return null;
  const tiles = {};
  for (const t of document.querySelectorAll('.tile')) {
    const nodes = t.querySelector('[data-field=nodes]');
    const pools = {};
    for (const p of t.querySelectorAll('.pool')) {
      const views = {};
      for (const v of p.querySelectorAll('[data-view]')) {
        views[v.dataset.view] = {used: +v.dataset.used, free: +v.dataset.free, capacity: +v.dataset.capacity};
      }
      pools[p.dataset.instanceType] = {phase: p.dataset.phase, pending: +p.dataset.pending, views};
    }
    tiles[t.dataset.cluster] = {
      state: t.dataset.state, lastSeen: t.dataset.lastSeen || null,
      nodes: {total: +nodes.dataset.total, ready: +nodes.dataset.ready},
      accelerators: [...t.querySelectorAll('[data-model]')].map(a => ({model: a.dataset.model, cards: +a.dataset.cards, unhealthy: +a.dataset.unhealthy})),
      pending: +t.querySelector('[data-field=pending]').dataset.value,
      pools,
    };
  }
  const fleetPools = {};
  for (const r of document.querySelectorAll('.fleet-pools tbody tr')) {
    fleetPools[r.dataset.pool] = {used: +r.dataset.used, capacity: +r.dataset.capacity, pending: +r.dataset.pending};
  }
  return {revision: +main.dataset.revision, tiles, pools: fleetPools};
})()"""

READ_POOL = """(() => {
  const main = document.querySelector('main');
  if (main.dataset.page !== 'pool' || !main.dataset.revision) return null;
  const nodes = {};
  for (const n of document.querySelectorAll('.node')) {
    nodes[n.dataset.cluster + '/' + n.dataset.node] = [...n.querySelectorAll('.card')].map(c => ({
      id: c.dataset.card, mode: c.dataset.mode, allocated: +c.dataset.allocated, fill: +c.dataset.fill,
      pods: c.dataset.pods ? c.dataset.pods.split(' ') : []}));
  }
  const candidates = [...document.querySelectorAll('.candidates tbody tr')].map(r => ({
    cluster: r.dataset.cluster, name: r.dataset.instanceType,
    views: Object.fromEntries([...r.querySelectorAll('[data-view]')].map(v => [v.dataset.view, {used: +v.dataset.used, capacity: +v.dataset.capacity}]))}));
  return {revision: +main.dataset.revision, nodes, candidates};
})()"""


# The gateway's API, folded as the gateway folds it ----------------------------------------------


def api_fleet(doc: dict) -> dict:
    """The fleet document in the shape READ_FLEET reads the page."""
    tiles = {}
    for tile in doc["clusters"]:
        tiles[tile["name"]] = {
            "state": tile["state"],
            "lastSeen": tile["lastSeen"],
            "nodes": tile["nodes"],
            "accelerators": [
                {"model": a["model"], "cards": a["cards"], "unhealthy": a["unhealthy"]}
                for a in tile["accelerators"]
            ],
            "pending": tile["pendingWorkloads"],
            "pools": {
                p["name"]: {
                    "phase": p["phase"],
                    "pending": p["pending"],
                    "views": p["views"] if p["acceleratable"] else {},
                }
                for p in tile["pools"]
            },
        }
    pools = {
        p["name"]: {"used": p["used"], "capacity": p["capacity"], "pending": p["pending"]}
        for p in doc["pools"]
    }
    return {"revision": doc["revision"], "tiles": tiles, "pools": pools}


def api_pool(doc: dict) -> dict:
    nodes = {
        f"{n['cluster']}/{n['name']}": [
            {
                "id": c["id"],
                "mode": c["mode"],
                "allocated": c["allocated"],
                "fill": c["fill"],
                "pods": c["pods"],
            }
            for c in n["cards"]
        ]
        for n in doc["nodes"]
    }
    candidates = [
        {
            "cluster": c["cluster"],
            "name": c["name"],
            "views": {k: {"used": v["used"], "capacity": v["capacity"]} for k, v in c["views"].items()},
        }
        for c in doc["candidates"]
    ]
    return {"revision": doc["revision"], "nodes": nodes, "candidates": candidates}


def same_instant(browser: Chromium, read: str, fetch, timeout: float = 20) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    """The page and the API at one revision (the page follows the API's revisions by itself)."""
    deadline = time.monotonic() + timeout
    while True:
        shown = browser.evaluate(read)
        doc = fetch()
        if shown is not None and shown["revision"] == doc["revision"]:
            return shown, doc
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the page stayed at {shown and shown['revision']}, the API at {doc['revision']}"
            )
        browser.pump(0.2)


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


# Simulated nodes --------------------------------------------------------------------------------


def cards_turn_unhealthy(info: harness.ClusterInfo, name: str, unhealthy: int) -> None:
    """The simulated hardware of 8-H100 node ``name`` reports its first ``unhealthy`` cards bad."""
    node = nodes.node(info, name)
    assert node is not None, name
    node.profile.write_text(nodes.cards_profile("NVIDIA H100 80GB HBM3", 8, unhealthy=unhealthy))


# The fleet, the gateway and the browser -------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(cluster: harness.ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleetside]:
    if binary() is None:  # make test installs it first: its absence is a missing step, not a skip
        pytest.fail("no chromium: run scripts/ensure-chromium.sh (make chromium)")
    port = free_port()
    args = ("--dashboard-address", f"127.0.0.1:{port}", "--dashboard-sample-interval", "2s")
    with fleetside.fleet(cluster, tmp_path_factory.mktemp("gateway"), NODES, args) as side:
        side.dashboard = f"https://127.0.0.1:{port}/"
        yield side  # the first test subscribes both clusters


@pytest.fixture(scope="module")
def page(fleet: Fleetside) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fleet.dashboard, verify=False, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def browser(fleet: Fleetside) -> Iterator[Chromium]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with Chromium(width=1440, height=900) as chromium:
        yield chromium
        assert chromium.errors == [], chromium.errors  # no exception, refused resource or CSP violation


def pool_name(fleet: Fleetside) -> str:
    return item_name(instance_types(fleet.members[EAST].info)[H100_TYPE]["spec"])


# The tests (in order: they share the clusters and the open page) --------------------------------------


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


def test_the_fleet_page_shows_each_cluster_as_the_api_and_kubectl_do(fleet, page, browser):
    def complete() -> dict | None:
        doc = page.get("/api/fleet").json()
        tiles = {t["name"]: t for t in doc["clusters"]}
        ok = set(tiles) == {EAST, WEST} and all(
            t["nodes"]["total"] == len(NODES[name]) and t["accelerators"] and t["pools"] and t["lastSeen"]
            for name, t in tiles.items()
        )
        return doc if ok else None

    harness.wait_for(complete, timeout=90, what="both clusters' tiles complete in /api/fleet")
    browser.open(fleet.dashboard)
    browser.evaluate("window.loadedOnce = true")
    shown, doc = same_instant(browser, READ_FLEET, lambda: page.get("/api/fleet").json())
    assert shown == api_fleet(doc)
    for name, member in fleet.members.items():  # and the API is what each cluster says
        tile = shown["tiles"][name]
        assert tile["state"] == "reachable"
        assert sorted(tile["accelerators"], key=lambda a: a["model"]) == ACCELERATORS[name]
        managed = member.info.kubectl_json("get", "nodes", "-l", f"{constants.LABEL_MANAGED}=true")["items"]
        assert tile["nodes"]["total"] == len(managed) == len(NODES[name])
        for type_name, obj in instance_types(member.info).items():
            if obj["spec"].get("acceleratable"):
                views = tile["pools"][type_name]["views"]
                for view in (
                    "accelerator",
                    "acceleratorShared",
                    "acceleratorSliced",
                    "acceleratorPartitioned",
                ):
                    status = obj["status"][view]
                    assert views[view]["capacity"] == int(status["capacity"]), (name, type_name, view)
                    assert views[view]["free"] == int(status["remaining"]), (name, type_name, view)
    assert shown["pools"][pool_name(fleet)]["capacity"] == 16
    browser.screenshot(SHOTS / "fleet.png")
    browser.dark()
    background = browser.evaluate("getComputedStyle(document.body).backgroundColor")
    browser.screenshot(SHOTS / "fleet-dark.png")
    browser.dark(False)
    assert background != browser.evaluate("getComputedStyle(document.body).backgroundColor")


def test_the_page_is_keyboard_navigable(fleet, browser):
    browser.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
    reached = []
    for _ in range(12):
        browser.press("Tab")
        reached.append(
            browser.evaluate("document.activeElement.getAttribute('href') || document.activeElement.tagName")
        )
    # (Tab starts from the last focused element, the page's main region after a render.)
    assert browser.evaluate("document.querySelector('a.skip').getAttribute('href')") == "#main"
    target = f"#/pool/{pool_name(fleet)}"
    assert target in reached, reached
    while browser.evaluate("document.activeElement.getAttribute('href')") != target:
        browser.press("Tab")
    browser.press("Enter")
    browser.wait("document.querySelector('main').dataset.page === 'pool'", what="the pool page by keyboard")
    assert browser.evaluate("window.loadedOnce") is True  # a route, not a reload


def test_the_card_map_follows_a_pod_allocated_on_the_real_node(fleet, page, browser):
    east = fleet.members[EAST].info
    pool = pool_name(fleet)
    fetch = lambda: page.get(f"/api/pools/{pool}").json()  # noqa: E731
    browser.wait("document.querySelectorAll('.card').length === 16", timeout=20, what="two nodes' 16 cards")
    shown, doc = same_instant(browser, READ_POOL, fetch)
    assert shown == api_pool(doc)
    assert set(shown["nodes"]) == {f"{EAST}/{EAST_NODE}", f"{WEST}/{WEST_NODE}"}
    assert {c["mode"] for cards in shown["nodes"].values() for c in cards} == {"free"}
    browser.screenshot(SHOTS / "pool-before.png")

    ensure_namespace(east, NS)
    entrance = wait_for_entrance(east, H100_TYPE, NS, timeout=120, what="the H100 entrance")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "holder", "namespace": NS, "labels": {constants.KUEUE_QUEUE_NAME: entrance}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [requesting({"nvidia.com/gpu": "1"})],
        },
    }
    east.kubectl("create", "-f", "-", input=json.dumps(body))
    try:
        record = harness.wait_for(
            lambda: allocation.record_of(east.kubectl_json("get", "pod", "holder", "-n", NS)),
            timeout=180,
            what="the Pod's allocation record",
        )
        card = next(a["id"] for g in record["main"] for a in g["accelerators"])

        def charged() -> bool:
            devices = east.kubectl_json("get", "devices", EAST_NODE)
            rows = {
                a["id"]: a for g in devices.get("status", {}).get("groups", []) for a in g["accelerators"]
            }
            return rows.get(card, {}).get("mode") == constants.DEVICE_MODE_EXCLUSIVE

        harness.wait_for(charged, timeout=60, what="the ledger charging the card")
        seen = time.monotonic()
        selector = f".card[data-card='{card}'][data-mode='whole'][data-pods~='{NS}/holder']"
        browser.wait(f'!!document.querySelector("{selector}")', timeout=30, what="the card map moving")
        latency = time.monotonic() - seen
        (SHOTS / "latency.txt").write_text(f"ledger seen by kubectl -> card map moved: {latency:.2f} s\n")
        assert browser.evaluate("window.loadedOnce") is True  # moved by the event stream, not a reload
        shown, doc = same_instant(browser, READ_POOL, fetch)
        assert shown == api_pool(doc)
        cards = {c["id"]: c for c in shown["nodes"][f"{EAST}/{EAST_NODE}"]}
        assert cards[card]["fill"] == 1.0 and cards[card]["pods"] == [f"{NS}/holder"]
        assert sum(1 for c in cards.values() if c["mode"] != "free") == 1
        east_type = next(c for c in shown["candidates"] if c["cluster"] == EAST)
        harness.wait_for(
            lambda: int(instance_types(east)[H100_TYPE]["status"]["accelerator"]["remaining"]) == 7,
            timeout=60,
            what="the InstanceType counting the card",
        )
        shown, doc = same_instant(browser, READ_POOL, fetch)
        east_type = next(c for c in shown["candidates"] if c["cluster"] == EAST)
        assert east_type["views"]["accelerator"] == {"used": 1, "capacity": 8}
        browser.evaluate(f'document.querySelector("{selector}").focus()')
        assert f"held by {NS}/holder" in browser.evaluate(
            "document.getElementById('card-detail').textContent"
        )
        browser.screenshot(SHOTS / "pool-allocated.png")
        history = page.get(f"/api/history/{pool_name(fleet)}").json()
        assert history["samples"] and history["interval"] == 2.0
    finally:
        east.kubectl(
            "delete", "pod", "holder", "-n", NS, "--ignore-not-found", "--wait=true", timeout=120, check=False
        )
    browser.wait(
        f"document.querySelector(\".card[data-card='{card}']\").dataset.mode === 'free'",
        timeout=60,
        what="the card free again",
    )


def test_the_workloads_page_lists_what_the_api_lists(fleet, page, browser):
    browser.evaluate("location.hash = '#/workloads'")
    browser.wait("document.querySelector('main').dataset.page === 'workloads'", what="the workloads page")
    doc = page.get("/api/workloads").json()
    rows = browser.evaluate("document.querySelectorAll('.deployments tbody tr, .instances tbody tr').length")
    assert rows == len(doc["deployments"]) + len(doc["instances"])
    browser.screenshot(SHOTS / "workloads.png")


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


def test_a_cluster_whose_apiserver_stops_is_shown_unreachable_with_its_last_seen_time(fleet, page, browser):
    browser.evaluate("location.hash = '#/'")
    browser.wait("document.querySelector('main').dataset.page === 'fleet'", what="the fleet page")
    west = fleet.members[WEST].info

    def west_seen() -> bool:  # since the unsubscribe test subscribed it again: its last-seen is new
        tile = next(t for t in page.get("/api/fleet").json()["clusters"] if t["name"] == WEST)
        return bool(tile["state"] == "reachable" and tile["lastSeen"] and tile["nodes"]["total"] == 1)

    harness.wait_for(west_seen, timeout=60, what="west's tile seen again, with its node")
    stopped = time.monotonic()
    fleetside.stop_apiserver(west)
    browser.wait(
        "document.querySelector(\".tile[data-cluster='west']\").dataset.state === 'unreachable'",
        timeout=30,
        what="west shown unreachable",
    )
    (SHOTS / "unreachable.txt").write_text(
        f"apiserver killed -> tile unreachable: {time.monotonic() - stopped:.2f} s\n"
    )
    shown, doc = same_instant(browser, READ_FLEET, lambda: page.get("/api/fleet").json())
    assert shown == api_fleet(doc)
    tile = shown["tiles"][WEST]
    assert tile["lastSeen"] and tile["nodes"]["total"] == 1  # its last known state, marked
    assert shown["tiles"][EAST]["state"] == "reachable"
    text = browser.evaluate(
        "document.querySelector(\".tile[data-cluster='west'] [data-field=away]\").textContent"
    )
    assert text.startswith("Unreachable — last seen ")
    assert browser.evaluate("window.loadedOnce") is True
    browser.screenshot(SHOTS / "unreachable.png")


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
