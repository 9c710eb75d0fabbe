"""The worker-gateway's fleet dashboard in a real browser, over two real control planes.

The gateway runs over ``east`` (the e2e cluster, with one real kubelet node of 8 simulated H100s)
and ``west`` (a second control plane with a kwok node of the same hardware), as in
tests/e2e/test_gateway.py (tests/e2e/fleetside.py), with ``--dashboard-address``.  Headless
Chromium (Debian's, scripts/ensure-chromium.sh) drives the page over the DevTools protocol
(tests/gateway/browser.py) and the DOM is compared with the dashboard's API at the same revision
and with what kubectl says: the tiles and their pools' views, the pool page's card map as a Pod is
allocated a card on the real node (no reload: the event stream moves the page), and the west tile
turning unreachable with its last-seen time when west's apiserver is killed.  Screenshots of each
page go to ``.dev/test/dashboard`` (``GPUSTACK_DASHBOARD_SCREENSHOTS`` moves them).
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
import pytest

from api import allocation, constants
from gateway.fleet import item_name
from tests.e2e import fleetside
from tests.e2e.fleetside import EAST, H100_TYPE, WEST, Fleetside, NodeSpec, instance_types, registered
from tests.e2e.objects import requesting, wait_for_entrance
from tests.gateway.browser import Chromium, binary
from tests.net import free_port

from .conftest import ensure_namespace

pytestmark = pytest.mark.e2e

SUFFIX = uuid.uuid4().hex[:5]
EAST_NODE, WEST_NODE = f"dash-h100-e-{SUFFIX}", f"dash-h100-w-{SUFFIX}"
NODES = {
    EAST: {EAST_NODE: NodeSpec("h100-8.yaml", 0, real=True)},  # Pods run here
    WEST: {WEST_NODE: NodeSpec("h100-8.yaml", 23)},
}
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


# The fleet, the gateway and the browser -------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(cluster: harness.ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleetside]:
    if binary() is None:  # make test installs it first: its absence is a missing step, not a skip
        pytest.fail("no chromium: run scripts/ensure-chromium.sh (make chromium)")
    port = free_port()
    args = ("--dashboard-address", f"127.0.0.1:{port}", "--dashboard-sample-interval", "2s")
    with fleetside.fleet(cluster, tmp_path_factory.mktemp("dashboard"), NODES, args) as side:
        side.dashboard = f"https://127.0.0.1:{port}/"
        with side.client() as client:
            for name in (EAST, WEST):
                params = [("cluster", name), ("gvk", "worker.gpustack.ai/v1/InstanceType")]
                assert client.post("/apis/workers", params=params).status_code == 200
            harness.wait_for(
                lambda: registered(client) == {EAST: "registered", WEST: "registered"},
                timeout=60,
                what="both registered",
            )
        yield side


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


def test_the_fleet_page_shows_each_cluster_as_the_api_and_kubectl_do(fleet, page, browser):
    def complete() -> dict | None:
        doc = page.get("/api/fleet").json()
        tiles = {t["name"]: t for t in doc["clusters"]}
        ok = set(tiles) == {EAST, WEST} and all(
            t["nodes"]["total"] == 1 and t["accelerators"] and t["pools"] and t["lastSeen"]
            for t in tiles.values()
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
        assert tile["accelerators"] == [{"model": "NVIDIA H100 80GB HBM3", "cards": 8, "unhealthy": 0}]
        managed = member.info.kubectl_json("get", "nodes", "-l", f"{constants.LABEL_MANAGED}=true")["items"]
        assert tile["nodes"]["total"] == len(managed) == 1
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


def test_a_cluster_whose_apiserver_stops_is_shown_unreachable_with_its_last_seen_time(fleet, page, browser):
    browser.evaluate("location.hash = '#/'")
    browser.wait("document.querySelector('main').dataset.page === 'fleet'", what="the fleet page")
    west = fleet.members[WEST].info
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
