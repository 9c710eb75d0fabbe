"""The gateway over HTTPS on its unix socket, against a fake upstream of two clusters: subscribe,
the collections, the fleet views, watches, health, and every refusal."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.gateway.fake_apiserver import FakeCluster, FakeUpstream
from tests.gateway.serving import Running, Watch, serve_unix
from tests.unit.gateway_objects import flavor, instance_type

H100 = "generic-nvidia-h100-80gb-hbm3-linux-amd64-12c-128g-100g"


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    server.cluster("a", token="ta")
    server.cluster("b", token="tb")
    yield server
    server.stop()


@pytest.fixture
def gateway(upstream: FakeUpstream, tmp_path) -> Iterator[Running]:
    running = serve_unix(
        tmp_path / "gw" / "gateway.sock", "--worker-conn-gpustack-api-port", str(upstream.port)
    )
    yield running
    running.stop()


def registered(client: httpx.Client, *names: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {w["cluster"]: w["state"] for w in client.get("/apis/workers").json()["items"]}
        if all(states.get(n) == "registered" for n in names):
            return
        time.sleep(0.05)
    raise AssertionError(f"clusters {names} did not register: {states}")


def subscribe(client: httpx.Client, *names: str, gvks: tuple[str, ...] = ("InstanceType",)) -> None:
    for name in names:
        params: list[tuple[str, Any]] = [("cluster", name), ("token", f"t{name}")]
        params += [("gvk", f"worker.gpustack.ai/v1/{g}") for g in gvks]
        assert client.post("/apis/workers", params=params).status_code == 200
    registered(client, *names)


def put_both(upstream: FakeUpstream, obj: dict) -> None:
    for cluster in ("a", "b"):
        upstream.clusters[cluster].put(obj)


# Lists ------------------------------------------------------------------------------------------


def test_raw_lists_carry_the_cluster_and_no_managed_fields(upstream, gateway):
    put_both(upstream, instance_type("t"))
    client = gateway.client()
    subscribe(client, "a", "b")
    response = client.get("/apis/instancetypes")
    assert response.status_code == 200
    items = response.json()["items"]
    assert [(i["cluster"], i["metadata"]["name"]) for i in items] == [("a", "t"), ("b", "t")]
    assert all("managedFields" not in i["metadata"] for i in items)
    assert items[0]["status"]["accelerator"] == {"onceMaxRequest": "1", "remaining": "2", "capacity": "8"}
    only_b = client.get("/apis/instancetypes", params={"cluster": "b"}).json()["items"]
    assert [i["cluster"] for i in only_b] == ["b"]


def test_a_cluster_not_subscribed_is_left_out_with_a_warning_not_an_error(upstream, gateway):
    put_both(upstream, instance_type("t"))
    client = gateway.client()
    subscribe(client, "a")
    response = client.get("/apis/instancetypes", params=[("cluster", "a"), ("cluster", "nope")])
    assert response.status_code == 200
    assert [i["cluster"] for i in response.json()["items"]] == ["a"]
    assert response.headers.get_list("warning") == ["299 - \"cluster 'nope' is not subscribed\""]


def test_the_aggregated_list_has_one_item_per_pool_with_summed_capacity(upstream, gateway):
    upstream.clusters["a"].put(instance_type("h100-a", ex=(2, 5, 8)))
    upstream.clusters["b"].put(instance_type("pool-h100", ex=(2, 3, 8), displayName="H100 (b)"))
    upstream.clusters["b"].put(instance_type("cpu", {**instance_type("x")["spec"], "acceleratable": False}))
    client = gateway.client()
    subscribe(client, "a", "b")
    items = client.get("/apis/instancetypes", params={"aggregated": "true"}).json()["items"]
    assert items[0]["name"] == H100
    (tier,) = items[0]["status"]["tiers"]
    assert [(c["cluster"], c["name"]) for c in tier["candidates"]] == [("a", "h100-a"), ("b", "pool-h100")]
    assert items[0]["status"]["remaining"]["accelerator"] == "8"
    assert len(items) == 2


def test_flavors_raw_and_aggregated(upstream, gateway):
    put_both(upstream, flavor("f"))
    client = gateway.client()
    subscribe(client, "a", "b", gvks=("InstanceTypeFlavor",))
    raw = client.get("/apis/instancetypeflavors").json()["items"]
    assert [f["cluster"] for f in raw] == ["a", "b"]
    (item,) = client.get("/apis/instancetypeflavors", params={"aggregated": "1"}).json()["items"]
    assert item["spec"]["clusters"] == ["a", "b"]


def test_namespaced_collections_filter_by_namespace(upstream, gateway):
    for ns, name in (("team-a", "i1"), ("team-b", "i2")):
        upstream.clusters["a"].put(
            {
                "apiVersion": "worker.gpustack.ai/v1",
                "kind": "Instance",
                "metadata": {"name": name, "namespace": ns},
            }
        )
    client = gateway.client()
    subscribe(client, "a", gvks=("Instance",))
    every = client.get("/apis/instances").json()["items"]
    assert [i["metadata"]["name"] for i in every] == ["i1", "i2"]
    team_b = client.get("/apis/instances", params={"namespace": "team-b"}).json()["items"]
    assert [i["metadata"]["name"] for i in team_b] == ["i2"]


def test_a_kind_no_cluster_serves_is_an_empty_list_with_warnings(upstream, gateway):
    client = gateway.client()
    subscribe(client, "a")
    response = client.get("/apis/instancepersistentvolumes")
    assert response.status_code == 200
    assert response.json() == {"items": []}
    assert "does not serve instancepersistentvolumes" in response.headers["warning"]


# Subscriptions ----------------------------------------------------------------------------------


def test_a_json_body_subscribes_and_delete_unsubscribes_from_every_view(upstream, gateway):
    put_both(upstream, instance_type("t"))
    client = gateway.client()
    body = {"clusters": "a", "token": "ta", "gvks": ["worker.gpustack.ai/v1/InstanceType"], "force": False}
    assert client.post("/apis/workers", json=body).status_code == 200
    subscribe(client, "b")
    registered(client, "a", "b")
    assert client.delete("/apis/workers", params={"cluster": "a"}).status_code == 200
    assert [w["cluster"] for w in client.get("/apis/workers").json()["items"]] == ["b"]
    items = client.get("/apis/instancetypes", params={"aggregated": "true"}).json()["items"]
    assert [c["cluster"] for c in items[0]["status"]["tiers"][0]["candidates"]] == ["b"]
    assert client.delete("/apis/workers", params={"cluster": "a"}).status_code == 200  # idempotent


def test_a_refused_token_keeps_the_cluster_pending_and_says_why(upstream, gateway):
    client = gateway.client()
    assert client.post("/apis/workers", params={"cluster": "a", "token": "wrong"}).status_code == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        (worker,) = client.get("/apis/workers").json()["items"]
        if "refused the credentials" in worker["reason"]:
            break
        time.sleep(0.05)
    assert worker["state"] == "pending"
    response = client.get("/apis/instancetypes")
    assert response.json() == {"items": []}
    assert "'a' is not ready" in response.headers["warning"]


@pytest.mark.parametrize(
    ("method", "url", "kwargs", "status", "says"),
    [
        ("POST", "/apis/workers", {}, 400, "cluster is required"),
        ("DELETE", "/apis/workers", {}, 400, "cluster is required"),
        ("POST", "/apis/workers", {"params": {"cluster": "a", "gvk": "apps/v1/Deployment"}}, 400, "mirrors"),
        (
            "POST",
            "/apis/workers",
            {"params": {"cluster": "a", "gvk": "InstanceType"}},
            400,
            "group/version/Kind",
        ),
        ("POST", "/apis/workers", {"params": {"cluster": "a", "force": "maybe"}}, 400, "force=true"),
        ("POST", "/apis/workers", {"params": {"cluster": "../x"}}, 400, "not a cluster name"),
        ("POST", "/apis/workers", {"content": b"{not json"}, 400, "not JSON"),
        ("POST", "/apis/workers", {"content": b"[1]"}, 400, "JSON object"),
        ("POST", "/apis/workers", {"json": {"clusters": 7}}, 400, "body.clusters must be a string"),
        ("POST", "/apis/workers", {"json": {"clusters": "a", "gvks": "x"}}, 400, "body.gvks"),
        ("GET", "/apis/nodes", {}, 404, "/apis/instancetypes"),
        ("GET", "/apis/instances", {"params": {"aggregated": "true"}}, 400, "aggregated=true is offered"),
        ("GET", "/apis/instancetypes", {"params": {"namespace": "x"}}, 400, "cluster-scoped"),
        ("GET", "/apis/instancetypes", {"params": {"watch": "sometimes"}}, 400, "watch=true"),
        ("GET", "/apis/instancetypes", {"params": {"cluster": "a b"}}, 400, "not a cluster name"),
    ],
)
def test_bad_input_gets_a_clear_4xx(gateway, method, url, kwargs, status, says):
    response = gateway.client().request(method, url, **kwargs)
    assert response.status_code == status
    assert response.json()["kind"] == "Status"
    assert says in response.json()["message"]


# Watches ----------------------------------------------------------------------------------------


def test_a_raw_watch_sends_changes_from_now_on_with_their_cluster(upstream, gateway):
    upstream.clusters["a"].put(instance_type("old"))
    client = gateway.client()
    subscribe(client, "a", "b")
    watch = Watch(gateway.client(), "/apis/instancetypes?watch=true&cluster=b")
    assert watch.status == 200 and watch.headers is not None
    assert watch.headers["content-type"].startswith("application/json")
    assert watch.quiet()  # no snapshot: "old" is not sent
    upstream.clusters["a"].put(instance_type("skipped"))  # another cluster: filtered out
    upstream.clusters["b"].put(instance_type("t", ex=(1, 1, 8)))
    line = watch.next()
    assert line is not None and (line["type"], line["cluster"]) == ("ADDED", "b")
    assert line["object"]["cluster"] == "b" and "managedFields" not in line["object"]["metadata"]
    upstream.clusters["b"].delete("InstanceType", "t")
    assert watch.until(lambda x: True)["type"] == "DELETED"
    client.delete("/apis/workers", params={"cluster": "b"})
    assert watch.until(lambda x: True) == {"type": "DELETED", "cluster": "b", "object": None}
    watch.close()


def test_a_watch_of_a_kind_no_subscription_named_starts_its_watch_without_a_replay(upstream, gateway):
    upstream.clusters["a"].put(instance_type("existing"))
    client = gateway.client()
    subscribe(client, "a", gvks=())
    watch = Watch(gateway.client(), "/apis/instancetypes?watch=true")
    assert watch.quiet(0.5)  # "existing" is not replayed as ADDED
    upstream.clusters["a"].put(instance_type("new"))
    line = watch.next()
    assert line is not None and (line["type"], line["object"]["metadata"]["name"]) == ("ADDED", "new")
    watch.close()


def test_an_aggregated_watch_moves_with_capacity_and_drops_a_cluster(upstream, gateway):
    put_both(upstream, instance_type("t", ex=(2, 2, 8)))
    client = gateway.client()
    subscribe(client, "a", "b")
    watch = Watch(gateway.client(), "/apis/instancetypes?watch=true&aggregated=true")
    assert watch.quiet()
    upstream.clusters["a"].put(instance_type("t", ex=(1, 1, 8)))  # a card taken in a
    moved = watch.next()
    assert moved is not None and moved["type"] == "MODIFIED" and moved["cluster"] == "a"
    status = moved["object"]["status"]
    assert status["remaining"]["accelerator"] == "3"
    assert [t["onceMaxRequest"]["accelerator"] for t in status["tiers"]] == ["1", "2"]
    upstream.clusters["b"].put(instance_type("t", ex=(2, 2, 8), phase="Inactive", inactive=True))
    deactivated = watch.next()
    assert deactivated is not None and deactivated["object"]["status"]["remaining"]["accelerator"] == "1"
    client.delete("/apis/workers", params={"cluster": "a"})
    dropped = watch.next()
    assert dropped is not None and dropped["type"] == "MODIFIED"
    assert [c["cluster"] for t in dropped["object"]["status"]["tiers"] for c in t["candidates"]] == ["b"]
    client.delete("/apis/workers", params={"cluster": "b"})
    assert watch.next() == {"type": "DELETED", "cluster": "b", "object": {"name": H100}}
    watch.close()


def test_an_aggregated_flavor_watch(upstream, gateway):
    client = gateway.client()
    subscribe(client, "a", "b", gvks=("InstanceTypeFlavor",))
    watch = Watch(gateway.client(), "/apis/instancetypeflavors?watch=true&aggregated=true")
    upstream.clusters["a"].put(flavor("f"))
    added = watch.next()
    assert added is not None and added["type"] == "ADDED" and added["object"]["spec"]["clusters"] == ["a"]
    upstream.clusters["b"].put(flavor("f"))
    modified = watch.next()
    assert modified is not None and modified["object"]["spec"]["clusters"] == ["a", "b"]
    watch.close()


def test_a_client_leaving_mid_watch_frees_its_subscription(upstream, gateway):
    client = gateway.client()
    subscribe(client, "a")
    bus = gateway.served.gateway.bus
    watch = Watch(gateway.client(), "/apis/instancetypes?watch=true")
    assert bus.watchers("InstanceType") == 1
    watch.close()
    deadline = time.monotonic() + 10
    while bus.watchers("InstanceType") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bus.watchers("InstanceType") == 0
    upstream.clusters["a"].put(instance_type("after"))  # nobody to send to: nothing breaks
    assert client.get("/livez").status_code == 200


# Health ------------------------------------------------------------------------------------------


def test_health_and_metrics(upstream, gateway):
    client = gateway.client()
    subscribe(client, "a")
    assert client.get("/readyz").text == "ok\n"
    assert client.get("/livez").text == "ok\n"
    text = client.get("/metrics").text
    assert 'gpustack_gateway_clusters{state="registered"} 1.0' in text
    assert "gpustack_gateway_readiness_checks_total" in text


def _cluster(upstream: FakeUpstream, name: str) -> FakeCluster:
    return upstream.clusters[name]
