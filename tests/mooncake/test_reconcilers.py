"""One pass of each KV-cache reconciler against the real master, over the in-memory apiserver
(tests/kube_fake.py): what they write on the objects and into the master's own ledger."""

from __future__ import annotations

import time

import pytest

from api import kvcache as kv
from controllers.kvcache.backend import KVCacheBackendReconciler
from controllers.kvcache.binding import KVCachePoolBindingReconciler
from controllers.kvcache.pool import KVCachePoolReconciler
from kube.client import Client
from kube.manager import Manager
from kube.resources import resource
from tests.kube_fake import FakeApiServer
from tests.webhooks.kvcache_objects import backend, binding, external, pool

MiB = 1 << 20


@pytest.fixture
def world(store):
    master, _ = store
    server = FakeApiServer()
    manager = Manager(Client(server), leader_election=False)  # type: ignore[arg-type]
    controllers = {
        c.name: manager.add(c)
        for c in (KVCacheBackendReconciler, KVCachePoolReconciler, KVCachePoolBindingReconciler)
    }
    for informer in manager._informers.values():
        informer.start()
    yield master, server, manager, controllers
    for informer in manager._informers.values():
        informer.stop()


def stored(server: FakeApiServer, kind: str, name: str, namespace: str = "") -> dict:
    res = resource(kind)
    return server.objects[(res.group, res.plural, namespace, name)]


def settle(manager: Manager) -> None:
    """Let the informers catch up with what the last pass wrote."""
    deadline = time.monotonic() + 5
    while not manager.synced() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)


def test_one_pass_each(world) -> None:
    master, server, manager, controllers = world
    ext = external("ext", client=master.client_address, admin=master.admin_address)
    for obj in (
        ext,
        pool("p", backends=("ext",), total="64Mi"),
        binding("b", "team-a", "p", "24Mi", domain_name="rec-a"),
        backend(),
    ):
        server.put(obj)
    settle(manager)
    assert controllers["kv-cache-backends"].reconcile("ext") == 15.0
    assert controllers["kv-cache-backends"].reconcile("mooncake-dram") == 15.0
    assert controllers["kv-cache-pool-bindings"].reconcile(("team-a", "b")) is None
    settle(manager)
    status = stored(server, "KVCacheBackend", "ext")["status"]
    assert status["phase"] == "Ready" and status["capacity"]["total"] == "64Mi"
    managed = stored(server, "KVCacheBackend", "mooncake-dram")
    assert managed["metadata"]["finalizers"] == [kv.FINALIZER_BACKEND]
    kinds = {obj["kind"] for (g, plural, ns, name), obj in server.objects.items() if ns == "gpustack-system"}
    assert {"Deployment", "Service", "DaemonSet"} <= kinds
    assert controllers["kv-cache-pools"].reconcile("p") == 15.0
    settle(manager)
    assert master.tenant_quotas()["rec-a"]["requested_quota_bytes"] == 24 * MiB
    bound = stored(server, "KVCachePoolBinding", "b", "team-a")
    assert bound["status"]["effectiveQuota"] == "24Mi" and bound["status"]["phase"] == "Ready"
    assert bound["metadata"]["finalizers"] == [kv.FINALIZER_BINDING]
    the_pool = stored(server, "KVCachePool", "p")
    assert (
        the_pool["status"]["phase"] == "Ready"
        and the_pool["status"]["clientEndpoint"] == master.client_address
    )
    assert stored(server, "KVCacheBackend", "ext")["status"]["usedBy"] == [
        {"kind": "KVCachePool", "namespace": "", "name": "p"}
    ]
