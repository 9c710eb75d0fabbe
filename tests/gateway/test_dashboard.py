"""The dashboard over HTTPS beside a real gateway (a thread) and the fake upstream: its documents,
its event stream, its headers, and a cluster going away."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from api import constants
from gateway.dashboard.app import CSP, asset
from tests.gateway import dashboard_objects as objs
from tests.gateway.fake_apiserver import FakeCluster, FakeUpstream
from tests.gateway.serving import Running, serve_unix
from tests.net import free_port

SVG_NAMESPACE = "http://www.w3.org/2000/svg"


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream().start()
    for name in ("east", "west"):
        cluster = up.cluster(name)
        cluster.served |= {"devices", "modeldeployments"}
    yield up
    up.stop()


@pytest.fixture
def gateway(upstream: FakeUpstream, tmp_path) -> Iterator[Running]:
    port = free_port()
    running = serve_unix(
        tmp_path / "gw.sock",
        "--worker-conn-gpustack-api-port",
        str(upstream.port),
        "--dashboard-address",
        f"127.0.0.1:{port}",
    )
    yield running
    running.stop()


def page(running: Running, timeout: float = 10) -> httpx.Client:
    client = httpx.Client(base_url=running.served.dashboard_url, verify=False, timeout=timeout)
    running.clients.append(client)
    return client


def fill(cluster: FakeCluster, nodes: int, used: int = 0, pending: int = 0) -> None:
    for obj in objs.cluster_objects(cluster.name, nodes, used=used, pending=pending):
        cluster.put(obj)


def subscribe(running: Running, *names: str) -> None:
    api = running.client()
    for name in names:
        assert api.post("/apis/workers", params={"cluster": name}).status_code == 200


def wait(predicate, timeout: float = 20, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def tiles(client: httpx.Client) -> dict[str, dict]:
    return {t["name"]: t for t in client.get("/api/fleet").json()["clusters"]}


def loaded(client: httpx.Client, nodes: dict[str, int]) -> bool:
    found = tiles(client)
    return all(
        name in found
        and found[name]["nodes"]["total"] == count
        and found[name]["pools"]
        and found[name]["lastSeen"]
        for name, count in nodes.items()
    )


def test_the_fleet_document_has_a_tile_per_cluster_with_its_pools_cards_and_workloads(upstream, gateway):
    fill(upstream.clusters["east"], 3, used=5, pending=2)
    fill(upstream.clusters["west"], 2, used=0)
    subscribe(gateway, "east", "west")
    client = page(gateway)
    wait(lambda: loaded(client, {"east": 3, "west": 2}), what="both clusters' tiles")
    doc = client.get("/api/fleet").json()
    east = {t["name"]: t for t in doc["clusters"]}["east"]
    assert east["state"] == "reachable" and east["lastSeen"]
    assert east["nodes"] == {"total": 3, "ready": 3}
    assert east["accelerators"] == [
        {"model": "NVIDIA H100 80GB HBM3", "manufacturer": "nvidia", "cards": 24, "unhealthy": 0}
    ]
    h100 = east["pools"][0]
    assert h100["name"] == objs.H100_TYPE and h100["phase"] == "Active"
    assert h100["views"]["accelerator"] == {"used": 5, "free": 19, "capacity": 24}
    assert h100["views"]["acceleratorShared"] == {"used": 50, "free": 190, "capacity": 240}
    assert h100["pending"] == 2 and east["pendingWorkloads"] == 2
    assert east["deployments"] == {"Ready": 1} and east["instances"] == {"Ready": 1}
    fleet_pool = doc["pools"][0]
    assert fleet_pool["clusters"] == ["east", "west"]
    assert (fleet_pool["used"], fleet_pool["capacity"], fleet_pool["pending"]) == (5, 40, 2)
    assert doc["pools"][-1]["acceleratable"] is False  # CPU pools after the accelerated ones


def test_the_pool_document_maps_every_card_with_its_mode_fill_and_pods(upstream, gateway):
    east = upstream.clusters["east"]
    fill(east, 2, used=3)
    inventory = objs.devices("east-gpu-0001")
    shared = objs.allocate(inventory, 2, constants.DEVICE_MODE_SHARED, 400_000)
    east.put(shared)
    east.put(
        objs.pod(
            "chat", "tenant", "east-gpu-0001", [(objs.card_id(shared, 2), 2, constants.DEVICE_MODE_SHARED)]
        )
    )
    subscribe(gateway, "east")
    client = page(gateway)
    pool = objs_pool_name()

    def with_pods() -> dict | None:
        # Devices and Pods reach the gateway on watches of their own: wait for both nodes' Pods.
        doc = _pool_with(client, pool, "east-gpu-0001", 2, "shared")
        if doc is None:
            return None
        cards = {n["name"]: n["cards"] for n in doc["nodes"]}
        first, second = cards.get("east-gpu-0000") or [{}], cards.get("east-gpu-0001") or [{}] * 3
        return doc if first[0].get("pods") and second[2].get("pods") else None

    doc = wait(with_pods, what="the shared card and both nodes' Pods")
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert set(nodes) == {"east-gpu-0000", "east-gpu-0001"}
    first = nodes["east-gpu-0000"]
    assert first["cardsUsed"] == 3 and first["cardsTotal"] == 8 and first["ready"] is True
    assert [c["mode"] for c in first["cards"]] == ["whole"] * 3 + ["free"] * 5
    assert first["cards"][0]["pods"] == ["tenant/job-0000"] and first["cards"][0]["fill"] == 1.0
    card = nodes["east-gpu-0001"]["cards"][2]
    assert card["pods"] == ["tenant/chat"] and card["fill"] == 0.25 and card["allocated"] == 400_000
    assert [c["cluster"] for c in doc["candidates"]] == ["east"]
    assert client.get("/api/pools/no-such-pool").status_code == 404


def objs_pool_name() -> str:
    from gateway.fleet import item_name
    from tests.unit.gateway_objects import H100_SPEC

    return item_name(H100_SPEC)


def _pool_with(client: httpx.Client, pool: str, node: str, index: int, mode: str) -> dict | None:
    response = client.get(f"/api/pools/{pool}")
    if response.status_code != 200:
        return None
    doc = response.json()
    for entry in doc["nodes"]:
        if entry["name"] == node and entry["cards"] and entry["cards"][index]["mode"] == mode:
            return doc
    return None


def test_deployments_and_instances_across_clusters(upstream, gateway):
    fill(upstream.clusters["east"], 1)
    fill(upstream.clusters["west"], 1)
    subscribe(gateway, "east", "west")
    client = page(gateway)
    # Each kind of each cluster is listed on its own: wait for everything the test reads.
    doc = wait(
        lambda: (
            (d := client.get("/api/workloads").json())
            and len(d["deployments"]) == 2
            and len(d["instances"]) == 2
            and d
        ),
        what="both clusters' deployments and instances",
    )
    assert [(d["cluster"], d["name"], d["phase"]) for d in doc["deployments"]] == [
        ("east", "qwen", "Ready"),
        ("west", "qwen", "Ready"),
    ]
    assert doc["deployments"][0]["endpoint"] == "http://qwen.east:8000"
    assert doc["deployments"][0]["conditions"][0]["type"] == "Ready"
    assert doc["instances"][1]["endpoints"] == ["10.0.0.1", "ssh 22 → node port 30022"]


def test_every_response_carries_the_strict_csp_and_the_page_has_no_inline_code(upstream, gateway):
    client = page(gateway)
    for path in ("/", "/static/app.js", "/static/app.css", "/static/icon.svg", "/api/fleet", "/nope"):
        response = client.get(path)
        assert response.headers["content-security-policy"] == CSP, path
        assert response.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in CSP and "'unsafe-inline'" not in CSP and "'unsafe-eval'" not in CSP
    html = client.get("/").text
    assert '<script src="/static/app.js"' in html and "<script>" not in html
    assert "style=" not in html and "<style" not in html and not re.search(r"\son[a-z]+=", html)
    for name in ("app.js", "app.css", "index.html", "icon.svg"):
        text = asset(name).decode().replace(SVG_NAMESPACE, "")  # a name, never fetched
        assert "http://" not in text and "https://" not in text, f"{name} names an outside address"
        assert "@import" not in text and "url(" not in text, name
    assert "eval(" not in asset("app.js").decode() and "innerHTML" not in asset("app.js").decode()
    assert client.post("/api/fleet").status_code == 405
    assert client.get("/static/../app.py").status_code == 404


def test_the_api_socket_does_not_serve_the_page_and_the_page_port_not_the_api(upstream, gateway):
    api = gateway.client()
    assert api.get("/api/fleet").status_code == 404
    assert api.get("/apis/workers").status_code == 200
    assert page(gateway).get("/apis/workers").status_code == 404


def test_the_event_stream_announces_a_new_revision_within_two_seconds_of_a_change(upstream, gateway):
    east = upstream.clusters["east"]
    fill(east, 1)
    subscribe(gateway, "east")
    client = page(gateway)
    wait(lambda: loaded(client, {"east": 1}), what="east's tile")
    time.sleep(1.0)  # let the first listing's revisions settle
    revisions: list[tuple[float, int]] = []
    opened = threading.Event()

    def read() -> None:
        with client.stream("GET", "/api/events", timeout=httpx.Timeout(10, read=30)) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["content-security-policy"] == CSP
            opened.set()
            for text in response.iter_lines():
                if text.startswith("data: "):
                    revisions.append((time.monotonic(), orjson.loads(text[6:])["revision"]))
                    if len(revisions) >= 2:
                        return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert opened.wait(10)
    wait(lambda: revisions, what="the current revision")
    changed = time.monotonic()
    east.put(objs.node("east-gpu-9999"))
    reader.join(15)
    assert len(revisions) == 2, revisions
    (_, first), (at, second) = revisions
    assert second > first and at - changed < 2.0
    doc = client.get("/api/fleet").json()
    assert doc["revision"] == second and tiles(client)["east"]["nodes"]["total"] == 2


def test_a_cluster_that_stops_answering_is_shown_unreachable_with_its_last_seen_time(upstream, gateway):
    west = upstream.clusters["west"]
    fill(upstream.clusters["east"], 1)
    fill(west, 2)
    subscribe(gateway, "east", "west")
    client = page(gateway)
    wait(lambda: loaded(client, {"east": 1, "west": 2}), what="both tiles")
    seen = tiles(client)["west"]["lastSeen"]
    west.discovery_status = 503
    tile = wait(
        lambda: (t := tiles(client)["west"])["state"] == "unreachable" and t,
        timeout=15,
        what="west unreachable",
    )
    assert tile["lastSeen"] is not None and tile["lastSeen"] >= seen
    assert tile["reason"].startswith("discovery of worker.gpustack.ai/v1 failed")
    assert tile["nodes"]["total"] == 2  # its last known state stays, marked
    assert tiles(client)["east"]["state"] == "reachable"
    west.discovery_status = 200
    wait(lambda: tiles(client)["west"]["state"] == "reachable", timeout=15, what="west back")


def test_history_is_sampled_per_pool(upstream, tmp_path):
    fill(upstream.clusters["east"], 1, used=3, pending=1)
    port = free_port()
    running = serve_unix(
        tmp_path / "gw.sock",
        "--worker-conn-gpustack-api-port",
        str(upstream.port),
        "--dashboard-address",
        f"127.0.0.1:{port}",
        "--dashboard-sample-interval",
        "1s",
    )
    try:
        subscribe(running, "east")
        client = page(running)
        wait(lambda: loaded(client, {"east": 1}), what="east's tile")
        pool = objs_pool_name()
        history = wait(
            lambda: (h := client.get(f"/api/history/{pool}").json())["samples"] and h, what="a sample"
        )
        assert history["interval"] == 1.0 and history["window"] == 3600.0
        assert history["samples"][-1]["used"] == 3 and history["samples"][-1]["pending"] == 1
        assert client.get("/api/history/unknown").json()["samples"] == []
    finally:
        running.stop()
