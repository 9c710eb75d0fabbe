"""The ModelArtifact controller over the in-memory apiserver and the local hub: resolution once,
the token check, the revalidation staircase, the claim source, node counts and the finalizer."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api import constants
from api import delivery as d
from controllers.delivery import artifact_status as st
from controllers.delivery.artifacts import ModelArtifactReconciler
from controllers.delivery.node_stores import NodeModelStoreWriter, checked_values, render_spec
from controllers.ready import READY
from kube.client import Client
from kube.manager import Manager
from tests.hub.server import Fault, HubServer
from tests.kube_fake import FakeApiServer
from tests.unit.delivery.conftest import TOKEN

NS = "team-a"
GROUP = "worker.gpustack.ai/v1"


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def setting(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": constants.SYSTEM_NAMESPACE},
        "spec": {"value": value},
    }


def artifact(name: str, repo: str, secret: str | None = None, **spec: Any) -> dict[str, Any]:
    hub: dict[str, Any] = {"repository": repo, "revision": "main"}
    if secret:
        hub["secretRef"] = {"name": secret}
    return {
        "apiVersion": GROUP,
        "kind": "ModelArtifact",
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "spec": {"source": {"huggingFace": hub}, **spec},
    }


def secret(name: str, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }


class World:
    def __init__(self, hub: HubServer) -> None:
        self.server = FakeApiServer()
        self.client = Client(self.server)  # type: ignore[arg-type]
        self.clock = Clock()
        self.server.put(setting("model-artifact-huggingface-endpoint", hub.endpoint))
        self.manager = Manager(self.client, leader_election=False)
        self.reconciler = self.manager.add(lambda m: ModelArtifactReconciler(m, clock=self.clock))

    def start(self) -> None:
        self.manager.start(sync_timeout=10)

    def stop(self) -> None:
        self.manager.stop()
        self.server.close_watches()

    def get(self, name: str) -> dict[str, Any]:
        return self.client.get("ModelArtifact", name, NS) or {}

    def condition(self, name: str, kind: str) -> dict[str, Any]:
        return dict(st.find((self.get(name).get("status") or {}).get("conditions"), kind) or {})

    def settle(self, name: str) -> dict[str, Any]:
        """Run one reconcile of ``name`` now (the test drives time) and return the object once that
        reconcile has finished: the queue is idle only after the pass this add asked for (a key
        being processed when it is added runs again), whatever the machine's load."""
        assert wait(lambda: self.reconciler.artifacts.get(name, NS) is not None)
        self.reconciler.queue.add((NS, name))  # through the queue: never beside a running reconcile
        assert wait(self.reconciler.queue.idle, timeout=60), f"the reconcile of {name} did not finish"
        return self.get(name)


def wait(check: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def world(hub: HubServer) -> Iterator[World]:
    w = World(hub)
    w.start()
    yield w
    w.stop()


def test_resolution_pins_commit_and_digest_once(world: World, hub: HubServer) -> None:
    world.server.put(artifact("qwen", "org/public"))
    assert wait(lambda: world.condition("qwen", d.RESOLVED).get("status") == "True")
    obj = world.get("qwen")
    resolved = obj["status"]["resolved"]
    commit = hub.repos.load("org/public").refs["main"]
    assert resolved["revision"] == commit and resolved["digestSource"] == "Hub"
    assert resolved["fileCount"] == 5 and resolved["manifestDigest"].startswith("sha256:")
    assert constants.FINALIZER_MODEL_ARTIFACT in obj["metadata"]["finalizers"]
    # The branch moves; the artifact does not.
    hub.repos.commit("org/public", {"new.txt": b"n"}, keep=True)
    world.clock.now += dt.timedelta(days=2)
    again = world.settle("qwen")
    assert again["status"]["resolved"]["revision"] == commit
    assert again["status"]["resolved"]["manifestDigest"] == resolved["manifestDigest"]


def test_private_repository_without_a_token_is_access_denied(world: World) -> None:
    world.server.put(artifact("private", "org/private"))
    assert wait(lambda: world.condition("private", d.RESOLVED).get("reason") == d.ACCESS_DENIED)
    assert "does not exist or is not accessible" in world.condition("private", d.RESOLVED)["message"]


def test_missing_secret_then_created(world: World) -> None:
    world.server.put(artifact("private", "org/private", secret="hf"))
    assert wait(lambda: world.condition("private", d.RESOLVED).get("reason") == d.SECRET_NOT_FOUND)
    world.server.put(secret("hf", TOKEN))
    assert wait(lambda: world.condition("private", d.RESOLVED).get("status") == "True")


def test_a_rejected_token_is_a_warning_event_and_resolution_goes_on(world: World, hub: HubServer) -> None:
    world.server.put(secret("bad", "hf_rejected_token"))
    world.server.put(artifact("public", "org/public", secret="bad"))
    assert wait(lambda: world.condition("public", d.RESOLVED).get("status") == "True")
    events, _ = world.client.list("Event", NS)
    invalid = [e for e in events if e.get("reason") == d.EVENT_INVALID_TOKEN]
    assert invalid and "hf_rejected_token" not in invalid[0]["message"]
    assert len(hub.log("whoami")) == 1


def test_revalidation_staircase(world: World, hub: HubServer) -> None:
    world.server.put(secret("hf", TOKEN))
    world.server.put(artifact("gated", "org/gated", secret="hf"))
    assert wait(lambda: world.condition("gated", d.RESOLVED).get("status") == "True")
    digest = world.get("gated")["status"]["resolved"]["manifestDigest"]
    # An outage during revalidation: Degraded, never revoked.
    world.clock.now += dt.timedelta(days=1, minutes=1)
    hub.set_faults(Fault("status", status=503))
    world.settle("gated")
    assert world.condition("gated", d.RESOLVED)["status"] == "True", world.get("gated")["status"]
    assert world.condition("gated", d.DEGRADED)["reason"] == d.SOURCE_UNAVAILABLE
    world.clock.now += dt.timedelta(minutes=1)
    world.settle("gated")
    assert world.condition("gated", d.RESOLVED)["status"] == "True"
    # The hub recovers.
    hub.set_faults()
    world.clock.now += dt.timedelta(minutes=1)
    world.settle("gated")
    assert world.condition("gated", d.DEGRADED)["status"] == "False"
    # Access is withdrawn: first Degraded, a minute later Resolved=False; digest unchanged throughout.
    world.server.put(secret("hf", "hf_no_longer_granted"))
    assert wait(lambda: world.condition("gated", d.DEGRADED).get("reason") == d.ACCESS_DENIED)
    assert world.condition("gated", d.RESOLVED)["status"] == "True"
    world.clock.now += dt.timedelta(minutes=1, seconds=1)
    world.settle("gated")  # its wait for the write is short: on a busy machine the write comes later
    assert wait(lambda: world.condition("gated", d.RESOLVED).get("reason") == d.ACCESS_DENIED)
    assert world.get("gated")["status"]["resolved"]["manifestDigest"] == digest
    # The right token again: resolved, same identity.
    world.server.put(secret("hf", TOKEN))
    assert wait(lambda: world.condition("gated", d.RESOLVED).get("status") == "True")
    assert world.get("gated")["status"]["resolved"]["manifestDigest"] == digest


def test_deleting_the_secret_revokes_at_once(world: World) -> None:
    world.server.put(secret("hf", TOKEN))
    world.server.put(artifact("private", "org/private", secret="hf"))
    assert wait(lambda: world.condition("private", d.RESOLVED).get("status") == "True")
    world.client.delete("Secret", "hf", NS)
    assert wait(lambda: world.condition("private", d.RESOLVED).get("reason") == d.SECRET_NOT_FOUND)


def test_revalidation_is_one_head_of_a_file_without_redirects(world: World, hub: HubServer) -> None:
    world.server.put(artifact("qwen", "org/public"))
    assert wait(lambda: world.condition("qwen", d.RESOLVED).get("status") == "True")
    hub.clear_log()
    world.clock.now += dt.timedelta(hours=25)
    world.settle("qwen")
    assert [(e["method"], e["kind"]) for e in hub.log()] == [("HEAD", "resolve")]
    assert world.get("qwen")["status"]["resolved"]["lastValidatedTime"] == st.stamp(world.clock.now)


def test_claim_source_is_resolved_iff_the_claim_exists(world: World) -> None:
    obj = {
        "apiVersion": GROUP,
        "kind": "ModelArtifact",
        "metadata": {"name": "disk", "namespace": NS},
        "spec": {"source": {"persistentVolumeClaim": {"claimName": "weights"}}},
    }
    world.server.put(obj)
    assert wait(lambda: world.condition("disk", d.RESOLVED).get("reason") == d.CLAIM_NOT_FOUND)
    world.server.put(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "weights", "namespace": NS},
            "spec": {},
        }
    )
    assert wait(lambda: world.condition("disk", d.RESOLVED).get("status") == "True")
    assert "revision" not in world.get("disk")["status"]["resolved"]


def test_patterns_and_anchor_mismatch(world: World) -> None:
    world.server.put(artifact("some", "org/public", allowPatterns=["*.json"]))
    world.server.put(artifact("anchored", "org/public", expectedDigest="sha256:" + "0" * 64))
    assert wait(lambda: world.condition("some", d.RESOLVED).get("status") == "True")
    assert world.get("some")["status"]["resolved"]["fileCount"] == 1
    assert wait(lambda: world.condition("anchored", d.RESOLVED).get("reason") == d.DIGEST_MISMATCH)


def test_node_counts_follow_the_node_stores(world: World) -> None:
    world.server.put(artifact("qwen", "org/public"))
    assert wait(lambda: world.condition("qwen", d.RESOLVED).get("status") == "True")
    digest = world.get("qwen")["status"]["resolved"]["manifestDigest"]
    for node, model in (
        ("n1", {"state": "Ready"}),
        ("n2", {"state": "Downloading", "sizeBytes": 100, "downloadedBytes": 37}),
    ):
        world.server.put(
            {
                "apiVersion": GROUP,
                "kind": "NodeModelStore",
                "metadata": {"name": node},
                "spec": {},
                "status": {"models": [{"digest": digest, **model}]},
            }
        )
    assert wait(lambda: (world.get("qwen")["status"].get("nodes") or {}).get("downloading") == 1)
    assert world.get("qwen")["status"]["nodes"] == {
        "ready": 1,
        "downloading": 1,
        "failed": 0,
        "downloadingPercent": 35,
    }
    # A store that drops the digest leaves the count (the stores are read by the digests they
    # list), and one that lists only other models never enters it.
    world.server.put(
        {
            "apiVersion": GROUP,
            "kind": "NodeModelStore",
            "metadata": {"name": "n2"},
            "spec": {},
            "status": {"models": [{"digest": "sha256:" + "1" * 64, "state": "Ready"}]},
        }
    )
    assert wait(lambda: (world.get("qwen")["status"].get("nodes") or {}).get("downloading") == 0)
    assert world.get("qwen")["status"]["nodes"] == {"ready": 1, "downloading": 0, "failed": 0}


def test_held_digests_index_each_listed_model_once_and_ignore_malformed_entries() -> None:
    store = {
        "status": {"models": [{"digest": "b"}, {"digest": "a"}, {"digest": "b"}, {"state": "Ready"}, "x"]}
    }
    assert st.held_digests(store) == ["a", "b"]
    assert st.held_digests({"status": {"models": "nope"}}) == [] == st.held_digests({})


def test_finalizer_holds_deletion_while_a_deployment_references_it(world: World) -> None:
    world.server.put(artifact("qwen", "org/public"))
    assert wait(
        lambda: constants.FINALIZER_MODEL_ARTIFACT in world.get("qwen")["metadata"].get("finalizers", [])
    )
    world.server.put(
        {
            "apiVersion": GROUP,
            "kind": "ModelDeployment",
            "metadata": {"name": "chat", "namespace": NS},
            "spec": {"model": {"name": "qwen", "artifactRef": {"name": "qwen"}}},
        }
    )
    obj = world.get("qwen")
    obj["metadata"]["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    world.server.put(obj)
    time.sleep(0.3)
    world.settle("qwen")
    assert constants.FINALIZER_MODEL_ARTIFACT in world.get("qwen")["metadata"]["finalizers"]
    world.client.delete("ModelDeployment", "chat", NS)
    assert wait(
        lambda: constants.FINALIZER_MODEL_ARTIFACT not in world.get("qwen")["metadata"].get("finalizers", [])
    )


def test_a_consumer_event_wakes_only_its_namespace_s_deleting_artifacts_without_a_scan(
    world: World,
) -> None:
    for name, namespace in (("gone", NS), ("kept", NS), ("elsewhere", "team-b")):
        obj = artifact(name, "org/public")
        obj["metadata"].update(namespace=namespace, finalizers=["example.com/hold"])
        world.server.put(obj)
    for name, namespace in (("gone", NS), ("elsewhere", "team-b")):
        obj = world.client.get("ModelArtifact", name, namespace) or {}
        obj["metadata"]["deletionTimestamp"] = "2026-03-01T12:00:00Z"
        world.server.put(obj)
    cache = world.reconciler.artifacts
    assert wait(lambda: len(cache.by_index("deleting", NS)) == 1 == len(cache.by_index("deleting", "team-b")))
    (watch,) = [w for w in world.reconciler.watches() if w.kind == "Instance"]

    def scan() -> list[dict[str, Any]]:
        raise AssertionError("a consumer's event listed every artifact of the cluster")

    cache.list = scan  # type: ignore[method-assign]
    consumer = {"apiVersion": GROUP, "kind": "Instance", "metadata": {"name": "nb", "namespace": NS}}
    assert list(watch.mapper("MODIFIED", consumer, consumer)) == [(NS, "gone")]
    other = {**consumer, "metadata": {"name": "nb", "namespace": "team-c"}}
    assert list(watch.mapper("DELETED", other, None)) == []


# --- the NodeModelStore writer ------------------------------------------------------------------------


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": hashlib.sha1(name.encode()).hexdigest()},
    }


def csinode(name: str, *drivers: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": n, "nodeID": name} for n in drivers]},
    }


def test_node_store_spec_from_settings() -> None:
    values, problems = checked_values(
        {
            "model-store-download-bandwidth": "200Mi",
            "model-store-high-watermark": "60",
            "model-store-low-watermark": "65",
        }
    )
    assert problems  # low above high: both fall back to their defaults
    spec = render_spec(values)
    assert spec["watermarks"] == {"highPercent": 80, "lowPercent": 70}
    assert spec["download"] == {"concurrency": 8, "bytesPerSecond": 200 << 20}
    assert spec["hub"]["huggingFaceEndpoint"] == "https://huggingface.co"


def test_node_stores_follow_csinode_and_the_driver(hub: HubServer) -> None:
    server = FakeApiServer()
    client = Client(server)  # type: ignore[arg-type]
    manager = Manager(client, leader_election=False)
    manager.add(NodeModelStoreWriter)
    server.put(setting("model-artifact-huggingface-endpoint", hub.endpoint))
    server.put(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": constants.CSI_DRIVER_MODEL},
            "spec": {},
        }
    )
    for name in ("n1", "n2"):
        server.put(node(name))
    server.put(csinode("n1", constants.CSI_DRIVER_MODEL))
    server.put(csinode("n2", "other.csi"))
    manager.start(sync_timeout=10)
    try:
        assert wait(lambda: client.get("NodeModelStore", "n1") is not None)
        store = client.get("NodeModelStore", "n1")
        assert store["spec"]["hub"]["huggingFaceEndpoint"] == hub.endpoint
        assert store["metadata"]["ownerReferences"][0]["kind"] == "Node"
        assert client.get("NodeModelStore", "n2") is None
        # The driver leaves CSINode for a moment (a plugin restart): the object stays.
        server.put(csinode("n1"))
        time.sleep(0.3)
        assert client.get("NodeModelStore", "n1") is not None
        # A Setting change rewrites the spec.
        server.put(setting("model-store-download-concurrency", "3"))
        assert wait(lambda: client.get("NodeModelStore", "n1")["spec"]["download"]["concurrency"] == 3)
        # A deleted object is recreated while the node runs the plugin.
        server.put(csinode("n1", constants.CSI_DRIVER_MODEL))
        client.delete("NodeModelStore", "n1")
        assert wait(lambda: client.get("NodeModelStore", "n1") is not None)
        # The CSIDriver goes: every object goes.
        client.delete("CSIDriver", constants.CSI_DRIVER_MODEL)
        assert wait(lambda: client.get("NodeModelStore", "n1") is None)
    finally:
        manager.stop()
        server.close_watches()


def test_a_modelscope_source_says_it_is_not_resolved_by_this_build(world: World) -> None:
    obj = {
        "apiVersion": GROUP,
        "kind": "ModelArtifact",
        "metadata": {"name": "ms", "namespace": NS},
        "spec": {"source": {"modelScope": {"repository": "qwen/Qwen2.5-7B", "revision": "master"}}},
    }
    world.server.put(obj)
    assert wait(lambda: world.condition("ms", d.RESOLVED).get("reason") == d.SOURCE_UNAVAILABLE)
    assert "ModelScope" in world.condition("ms", d.RESOLVED)["message"]


def test_a_probe_of_our_own_counts_even_before_the_cache_shows_its_write() -> None:
    """Two passes over one stale cached status make one probe: the second sees the first's time."""
    t0 = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
    stale = {
        "resolved": {"lastValidatedTime": st.stamp(t0)},
        "conditions": [{"type": d.RESOLVED, "status": "True"}],
    }
    later = t0 + dt.timedelta(hours=25)
    assert st.revalidation_due(stale, later, 86400.0, secret_changed=False) == 0.0
    assert st.revalidation_due(stale, later, 86400.0, secret_changed=False, last_attempt=later) == 86400.0
    assert st.revalidation_due({}, later, 86400.0, secret_changed=False) == 0.0


def test_ready_repeats_resolved_and_a_converged_resync_writes_nothing(world: World) -> None:
    world.server.put(
        {
            "apiVersion": GROUP,
            "kind": "ModelArtifact",
            "metadata": {"name": "disk", "namespace": NS, "generation": 1},
            "spec": {"source": {"persistentVolumeClaim": {"claimName": "weights"}}},
        }
    )
    assert wait(lambda: world.condition("disk", READY).get("reason") == d.CLAIM_NOT_FOUND)
    ready = world.condition("disk", READY)
    assert ready["status"] == "False"
    assert ready["message"] == world.condition("disk", d.RESOLVED)["message"]
    assert [c["type"] for c in world.get("disk")["status"]["conditions"]] == [READY, d.RESOLVED]
    world.clock.now += dt.timedelta(minutes=5)
    world.server.put(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "weights", "namespace": NS},
            "spec": {},
        }
    )
    assert wait(lambda: world.condition("disk", READY).get("status") == "True")
    ready = world.condition("disk", READY)
    assert ready["reason"] == d.REASON_RESOLVED and ready["lastTransitionTime"] == st.stamp(world.clock.now)
    # Converged: later passes, at later times, leave the object as it is.
    version = world.get("disk")["metadata"]["resourceVersion"]
    for _ in range(2):
        world.clock.now += dt.timedelta(hours=1)
        assert world.settle("disk")["metadata"]["resourceVersion"] == version


def test_ready_follows_resolved_and_keeps_its_time_while_its_status_holds() -> None:
    t0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    fresh = st.with_ready({}, 1, t0)
    assert fresh["conditions"] == [
        {
            "type": READY,
            "status": "False",
            "reason": st.RESOLVING,
            "message": "the source has not been resolved yet",
            "lastTransitionTime": st.stamp(t0),
            "observedGeneration": 1,
        }
    ]
    t1 = t0 + dt.timedelta(minutes=1)
    failed = st.with_ready(st.resolution_failed(fresh, d.ACCESS_DENIED, "no", 1, t1).status, 1, t1)
    ready = st.find(failed["conditions"], READY) or {}
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", d.ACCESS_DENIED, "no")
    assert ready["lastTransitionTime"] == st.stamp(t0)  # False all along
    t2 = t1 + dt.timedelta(minutes=1)
    done = st.simple_resolution(failed, True, 1, t2, claim=None).status
    ready = st.find(st.with_ready(done, 1, t2)["conditions"], READY) or {}
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", st.stamp(t2))
    # Degraded keeps it Ready: the pinned weights still serve.
    t3 = t2 + dt.timedelta(minutes=1)
    step = st.revalidation_failed(st.with_ready(done, 1, t2), d.SOURCE_UNAVAILABLE, "down", 1, t3)
    ready = st.find(st.with_ready(step.status, 1, t3)["conditions"], READY) or {}
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", st.stamp(t2))
