"""The ``kube`` runtime without a cluster: the real client, informer, leader election, manager and
event recorder over an in-memory apiserver behind the official client's transport seam."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

import pytest
from prometheus_client import REGISTRY

from kube import changes
from kube.client import ApiError, Client
from kube.events import NORMAL, Recorder
from kube.informer import Informer
from kube.leader import LeaderElector
from kube.manager import Controller, Manager, Watch
from tests.kube_fake import FakeApiServer


def _wait(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def _config_map(name: str, namespace: str = "team-a", **data: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "x"}},
        "data": data,
    }


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def client(server: FakeApiServer) -> Client:
    return Client(server)  # type: ignore[arg-type]  # the transport seam is duck-typed


# The client --------------------------------------------------------------------------------------


def test_client_round_trip_and_status_errors(client: Client, server: FakeApiServer) -> None:
    created = client.create(_config_map("a", k="1"))
    assert created["metadata"]["resourceVersion"]
    assert client.get("ConfigMap", "a", "team-a")["data"] == {"k": "1"}
    assert client.get("ConfigMap", "missing", "team-a") is None
    with pytest.raises(ApiError) as conflict:
        client.create(_config_map("a"))
    assert conflict.value.conflict
    stale = dict(created, metadata=dict(created["metadata"], resourceVersion="0"))
    with pytest.raises(ApiError) as stale_write:
        client.update(stale)
    assert stale_write.value.status == 409
    client.patch("ConfigMap", "a", {"data": {"k": "2"}}, namespace="team-a")
    items, version = client.list("ConfigMap", "team-a", label_selector="app=x")
    assert [i["data"]["k"] for i in items] == ["2"] and items[0]["kind"] == "ConfigMap" and version
    server.fail("GET", "/api/v1/namespaces/team-a/configmaps/a", 500)
    with pytest.raises(ApiError) as broken:
        client.get("ConfigMap", "a", "team-a")
    assert broken.value.status == 500 and broken.value.reason == "Injected"
    client.delete("ConfigMap", "a", "team-a")
    client.delete("ConfigMap", "a", "team-a")  # a second delete of a gone object is not an error
    assert client.get("ConfigMap", "a", "team-a") is None


# The informer ------------------------------------------------------------------------------------


class _Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, bool]] = []
        self.lock = threading.Lock()

    def __call__(self, event: str, obj: dict, old: dict | None) -> None:
        with self.lock:
            self.events.append((event, obj["metadata"]["name"], old is obj))

    def names(self, event: str) -> list[str]:
        with self.lock:
            return [name for e, name, _ in self.events if e == event]


def test_informer_lists_then_watches(client: Client, server: FakeApiServer) -> None:
    server.put(_config_map("a"))
    informer = Informer(client, "ConfigMap", namespace="team-a")
    seen = _Recorded()
    informer.add_handler(seen)
    informer.start()
    try:
        assert informer.wait_synced(5)
        assert seen.names("ADDED") == ["a"]
        server.put(_config_map("b"))
        server.put(_config_map("a", k="changed"))
        assert _wait(lambda: "b" in seen.names("ADDED") and "a" in seen.names("MODIFIED"))
        assert informer.get("a", "team-a")["data"] == {"k": "changed"}
        client.delete("ConfigMap", "b", "team-a")
        assert _wait(lambda: seen.names("DELETED") == ["b"])
        assert informer.get("b", "team-a") is None
    finally:
        informer.stop()
        server.close_watches()


def test_informer_relists_on_410_and_reports_what_it_missed(client: Client, server: FakeApiServer) -> None:
    server.put(_config_map("kept"))
    server.put(_config_map("dropped"))
    informer = Informer(client, "ConfigMap", namespace="team-a")
    seen = _Recorded()
    informer.add_handler(seen)
    informer.start()
    try:
        assert informer.wait_synced(5)
        lists_before = sum(1 for m, p in server.requests if m == "GET" and p.endswith("/configmaps"))
        # The watch breaks (an apiserver restart), and while it is down history is compacted:
        # the informer's resume version is too old, it gets 410 Gone and must re-list.
        server.fail("GET", "/api/v1/namespaces/team-a/configmaps", 503, times=1)
        server.close_watches()
        server.objects.pop(("", "configmaps", "team-a", "dropped"))
        server.put(_config_map("new"))
        server.compact()
        assert _wait(lambda: "new" in seen.names("ADDED") and "dropped" in seen.names("DELETED"))
        lists_after = sum(1 for m, p in server.requests if m == "GET" and p.endswith("/configmaps"))
        assert lists_after > lists_before
        assert sorted(o["metadata"]["name"] for o in informer.list()) == ["kept", "new"]
    finally:
        informer.stop()
        server.close_watches()


def test_informer_resync_hands_every_object_again(client: Client, server: FakeApiServer) -> None:
    server.put(_config_map("a"))
    informer = Informer(client, "ConfigMap", namespace="team-a", resync=0.05)
    seen = _Recorded()
    informer.add_handler(seen)
    informer.start()
    try:
        assert informer.wait_synced(5)
        # A resync runs when a watch round ends; end them until one has happened.
        assert _wait(lambda: server.close_watches() or any(same for _, _, same in seen.events))
        resynced = [(e, name) for e, name, same in seen.events if same]
        assert ("MODIFIED", "a") in resynced  # the resync passes the object as its own old
    finally:
        informer.stop()
        server.close_watches()


def test_informer_indexes_follow_changes(client: Client, server: FakeApiServer) -> None:
    informer = Informer(
        client,
        "ConfigMap",
        namespace="team-a",
        indexes={"k": lambda o: [(o.get("data") or {}).get("k", "")]},
    )
    informer.start()
    try:
        assert informer.wait_synced(5)
        server.put(_config_map("a", k="one"))
        assert _wait(lambda: [o["metadata"]["name"] for o in informer.by_index("k", "one")] == ["a"])
        server.put(_config_map("a", k="two"))
        assert _wait(lambda: informer.by_index("k", "one") == [] and len(informer.by_index("k", "two")) == 1)
    finally:
        informer.stop()
        server.close_watches()


def test_informer_by_name_follows_a_cluster_scoped_kind(client: Client, server: FakeApiServer) -> None:
    """``by_name``: adds, updates and deletes from the watch, and what a re-list dropped."""

    def node(name: str, zone: str) -> dict:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": zone}}}

    server.put(node("n1", "a"))
    server.put(node("gone-while-down", "a"))
    informer = Informer(client, "Node")
    informer.start()
    try:
        assert informer.wait_synced(5)
        assert sorted(informer.by_name()) == ["gone-while-down", "n1"]
        snapshot = informer.by_name()
        server.put(node("n2", "b"))
        server.put(node("n1", "c"))
        assert _wait(lambda: sorted(informer.by_name()) == ["gone-while-down", "n1", "n2"])
        assert _wait(lambda: informer.by_name()["n1"]["metadata"]["labels"] == {"zone": "c"})
        assert sorted(snapshot) == ["gone-while-down", "n1"]  # a copy: later events leave it alone
        client.delete("Node", "n2")
        assert _wait(lambda: "n2" not in informer.by_name())
        # Dropped while the watch was down and history compacted: the re-list removes it.
        server.close_watches()
        server.objects.pop(("", "nodes", "", "gone-while-down"))
        server.put(node("n3", "a"))
        server.compact()
        assert _wait(lambda: sorted(informer.by_name()) == ["n1", "n3"])
        assert informer.by_name() == {changes.name_of(o): o for o in informer.list()}
    finally:
        informer.stop()
        server.close_watches()


# Leader election ---------------------------------------------------------------------------------


def _elector(client: Client, identity: str) -> LeaderElector:
    return LeaderElector(
        client,
        "worker.gpustack.ai",
        "gpustack-system",
        identity=identity,
        duration=1.0,
        renew_deadline=0.6,
        retry=0.05,
    )


def _campaign(elector: LeaderElector) -> tuple[threading.Thread, list[str]]:
    calls: list[str] = []
    thread = threading.Thread(
        target=elector.run,
        args=(lambda: calls.append("started"), lambda: calls.append("stopped")),
        daemon=True,
    )
    thread.start()
    return thread, calls


def _lease(client: Client) -> dict:
    lease = client.get("Lease", "worker.gpustack.ai", "gpustack-system")
    assert lease is not None
    return lease["spec"]


def test_leader_acquires_renews_and_releases(client: Client) -> None:
    first, second = _elector(client, "one"), _elector(client, "two")
    thread_one, calls_one = _campaign(first)
    assert _wait(lambda: first.leading)
    renewed = _lease(client)["renewTime"]
    assert _wait(lambda: _lease(client)["renewTime"] != renewed)  # the holder renews
    thread_two, calls_two = _campaign(second)
    time.sleep(0.3)
    assert not second.leading and _lease(client)["holderIdentity"] == "one"
    first.stop()
    thread_one.join(5)
    assert calls_one == ["started", "stopped"]
    # Released on a clean stop: the peer takes over without waiting out the lease duration.
    assert _wait(lambda: second.leading, timeout=0.9)
    assert _lease(client)["holderIdentity"] == "two" and _lease(client)["leaseTransitions"] == 1
    second.stop()
    thread_two.join(5)
    assert calls_two == ["started", "stopped"]


def test_leader_steps_down_when_it_cannot_renew(client: Client, server: FakeApiServer) -> None:
    elector = _elector(client, "one")
    thread, calls = _campaign(elector)
    assert _wait(lambda: elector.leading)
    server.fail("PUT", "/apis/coordination.k8s.io/v1/namespaces/gpustack-system/leases", 500, times=1000)
    assert _wait(lambda: calls == ["started", "stopped"])
    assert not elector.leading
    elector.stop()
    thread.join(5)


def test_leader_loses_to_a_peer_that_took_the_lease(client: Client) -> None:
    elector = _elector(client, "one")
    thread, calls = _campaign(elector)
    assert _wait(lambda: elector.leading)
    # A peer took the Lease (as after a pause longer than the lease duration) and holds it long.
    lease = client.get("Lease", "worker.gpustack.ai", "gpustack-system")
    lease["spec"].update(holderIdentity="two", leaseDurationSeconds=60)
    while True:
        try:
            client.update(lease)
            break
        except ApiError:  # the holder renewed in between; take the fresh version
            lease = client.get("Lease", "worker.gpustack.ai", "gpustack-system")
            lease["spec"].update(holderIdentity="two", leaseDurationSeconds=60)
    assert _wait(lambda: calls == ["started", "stopped"])
    assert not elector.leading and _lease(client)["holderIdentity"] == "two"
    elector.stop()
    thread.join(5)
    assert _lease(client)["holderIdentity"] == "two"  # stopping a non-leader releases nothing


# The manager -------------------------------------------------------------------------------------


class _Echo(Controller):
    """Copies every ConfigMap's data into a ``<name>-echo`` ConfigMap."""

    name = "echo"

    def watches(self) -> list[Watch]:
        return [Watch("ConfigMap", lambda e, o, old: [o["metadata"]["name"]], namespace="team-a")]

    def reconcile(self, key: Hashable) -> float | None:
        name = str(key)
        if name.endswith("-echo"):
            return None
        source = self.informer("ConfigMap", "team-a").get(name, "team-a")
        if source is not None:
            self.client.apply(_config_map(f"{name}-echo", **source.get("data", {})), field_manager="echo")
        return None


def test_manager_reconciles_only_while_leading_and_hands_over(client: Client, server: FakeApiServer) -> None:
    server.put(_config_map("a", k="1"))
    managers = []
    for identity in ("one", "two"):
        manager = Manager(client, identity=identity)
        # A Lease held for 30 s: the follower takes over at once only because the leader gives it up.
        manager.elector.duration, manager.elector.renew_deadline, manager.elector.retry = 30.0, 0.6, 0.05
        manager.add(_Echo)
        manager.start(sync_timeout=5)
        managers.append(manager)
    try:
        assert _wait(lambda: client.get("ConfigMap", "a-echo", "team-a") is not None)
        assert _wait(lambda: any(m.leading() for m in managers))
        leader = next(m for m in managers if m.leading())
        follower = next(m for m in managers if m is not leader)
        assert not follower.leading()
        leader.stop()
        # stop() returns once the Lease is given up (the worker process exits right after it).
        assert _lease(client)["holderIdentity"] != leader.elector.identity
        assert _wait(lambda: follower.leading(), timeout=2)
        server.put(_config_map("b", k="2"))
        assert _wait(lambda: (client.get("ConfigMap", "b-echo", "team-a") or {}).get("data") == {"k": "2"})
    finally:
        for manager in managers:
            manager.stop()
        server.close_watches()


def test_a_failing_reconcile_is_retried_with_back_off(client: Client, server: FakeApiServer) -> None:
    server.fail("PATCH", "/api/v1/namespaces/team-a/configmaps/a-echo", 500, times=2)
    manager = Manager(client, leader_election=False)
    controller = manager.add(_Echo)
    manager.start(sync_timeout=5)
    # Created after the start, so its watch event is the one enqueue. Present before, the
    # manager's first pass and the informer's listing both enqueue it, and on a loaded machine the
    # second can land while the first try is failing: one more reconcile, a fourth PATCH.
    server.put(_config_map("a", k="1"))
    try:
        assert _wait(lambda: client.get("ConfigMap", "a-echo", "team-a") is not None)
        assert controller.queue.failures("a") == 0  # forgotten after the success
        patches = [p for m, p in server.requests if m == "PATCH" and p.endswith("/a-echo")]
        assert len(patches) == 3
    finally:
        manager.stop()
        server.close_watches()


def test_settled_means_a_full_pass_ran_and_nothing_is_pending(client: Client, server: FakeApiServer) -> None:
    """What the e2e restart tests wait on instead of sleeping (``gpustack_controllers_settled``)."""
    for name in "abc":
        server.put(_config_map(name, k=name))
    gate = threading.Event()

    class Slow(_Echo):
        def reconcile(self, key: Hashable) -> float | None:
            gate.wait(5)
            return super().reconcile(key)

    manager = Manager(client, leader_election=False)
    manager.add(Slow)
    assert not manager.settled()  # not started: no pass yet
    manager.start(sync_timeout=5)
    try:
        time.sleep(0.2)
        assert not manager.settled()  # the take-over pass is blocked in reconcile
        gate.set()
        assert _wait(manager.settled)
        # Every object was reconciled before it said so.
        for name in "abc":
            assert client.get("ConfigMap", f"{name}-echo", "team-a") is not None
        assert REGISTRY.get_sample_value("gpustack_controllers_settled") == 1.0
    finally:
        manager.stop()
        server.close_watches()
    assert not manager.settled()


# Events ------------------------------------------------------------------------------------------


def test_a_repeated_event_is_counted_on_one_object(client: Client, server: FakeApiServer) -> None:
    recorder = Recorder(client, "gpustack-worker/test")
    subject = server.put(_config_map("a"))
    recorder.event(subject, NORMAL, "Synced", "all good")
    recorder.event(subject, NORMAL, "Synced", "all good")
    recorder.event(subject, NORMAL, "Other", "something else")
    events, _ = client.list("Event", "team-a")
    by_reason = {e["reason"]: e for e in events}
    assert by_reason["Synced"]["count"] == 2 and by_reason["Other"]["count"] == 1
    assert by_reason["Synced"]["involvedObject"]["uid"] == subject["metadata"]["uid"]
    server.fail("POST", "/api/v1/namespaces/team-a/events", 500)
    recorder.event(subject, NORMAL, "Lost", "not recorded, and no exception")
    assert "Lost" not in {e["reason"] for e in client.list("Event", "team-a")[0]}


def test_requests_name_the_operator_part_that_sent_them(tmp_path):
    """The apiserver's audit log tells our parts apart by User-Agent (the Python client's default
    names only itself)."""
    from api import OPERATOR_VERSION
    from kube.client import load_api_client

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    api = load_api_client(str(kubeconfig), component="device-manager")
    assert api.user_agent == f"gpustack-operator/{OPERATOR_VERSION} (device-manager)"
    assert api.default_headers["User-Agent"] == api.user_agent
    assert load_api_client(str(kubeconfig)).user_agent.endswith("(cli)")
