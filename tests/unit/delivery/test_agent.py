"""The node agent over the in-memory apiserver and the local hub: configuration from its own
NodeModelStore (re-checked), status written from disk and mounts, restart recovery, collection
skipped without a valid configuration."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api import delivery as d
from kube.client import Client
from modelhub import huggingface as hf
from modelhub.connection import HubConnection
from nodeplugins.modelmanager import mounts
from nodeplugins.modelmanager.agent import Agent, AgentOptions
from nodeplugins.modelmanager.publish import CsiError, PublishRequest
from tests.hub.server import HubServer
from tests.kube_fake import FakeApiServer
from tests.unit.delivery.conftest import SimulatedDisk
from tests.unit.delivery.test_materialize import TUNING
from tests.unit.delivery.test_publish import Kernel

NODE = "gpu-node-01"
GROUP = "worker.gpustack.ai/v1"


def store(hub: HubServer, **spec: Any) -> dict[str, Any]:
    body = {
        "watermarks": {"highPercent": 95, "lowPercent": 90},
        "download": {"concurrency": 4, "bytesPerSecond": 0},
        "hub": {
            "huggingFaceEndpoint": hub.endpoint,
            "httpsProxy": "",
            "noProxy": "",
            "caBundleConfigMap": "",
        },
    }
    body.update(spec)
    return {
        "apiVersion": GROUP,
        "kind": "NodeModelStore",
        "metadata": {"name": NODE, "generation": 2},
        "spec": body,
    }


def wait(check, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


class Setup:
    def __init__(self, hub: HubServer, tmp: Path) -> None:
        self.server = FakeApiServer()
        self.client = Client(self.server)  # type: ignore[arg-type]
        self.tmp = tmp
        self.kubelet = tmp / "kubelet"
        (self.kubelet / "pods").mkdir(parents=True)
        self.kernel: Kernel | None = None
        self.agent: Agent | None = None
        self.hub = hub

    def start(self) -> Agent:
        root = self.tmp / "cache"
        root.mkdir(exist_ok=True)
        if self.kernel is None:
            self.kernel = Kernel(mounts.device_of(root))
        self.agent = Agent(
            AgentOptions(NODE, root, self.kubelet, tuning=TUNING, tick=0.05, disk=SimulatedDisk()),
            self.client,
            ops=self.kernel.ops(),
        )
        self.agent.start(sync_timeout=10)
        return self.agent

    def status(self) -> dict[str, Any]:
        return (self.client.get("NodeModelStore", NODE) or {}).get("status") or {}

    def condition(self, kind: str) -> dict[str, Any]:
        return next((c for c in self.status().get("conditions") or [] if c["type"] == kind), {})

    def artifact(self, name: str, repo: str) -> dict[str, Any]:
        res = hf.resolve(HubConnection(self.hub.endpoint), repo, "main", None)
        obj = {
            "apiVersion": GROUP,
            "kind": "ModelArtifact",
            "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
            "spec": {"source": {"huggingFace": {"repository": repo, "revision": "main"}}},
            "status": {
                "resolved": {"revision": res.commit, "manifestDigest": res.manifest.digest},
                "conditions": [{"type": "Resolved", "status": "True"}],
            },
        }
        created = self.client.create(obj)
        if self.agent is not None:
            assert wait(lambda: self.agent.artifacts.get(name, "team-a") is not None)
        return created

    def request(self, artifact: dict[str, Any], pod: str) -> PublishRequest:
        target = self.kubelet / "pods" / pod / "volumes" / "kubernetes.io~csi" / "gpustack-model" / "mount"
        return PublishRequest(
            f"csi-{pod}",
            str(target),
            {
                d.CSI_EPHEMERAL: "true",
                d.CSI_POD_NAMESPACE: "team-a",
                d.ATTR_ARTIFACT: artifact["metadata"]["name"],
                d.ATTR_ARTIFACT_UID: artifact["metadata"]["uid"],
                d.ATTR_MANIFEST_DIGEST: artifact["status"]["resolved"]["manifestDigest"],
            },
        )

    def mount(self, request: PublishRequest) -> None:
        assert self.agent is not None
        deadline = time.monotonic() + 60
        while True:
            try:
                self.agent.service.publish(request)
                return
            except CsiError as error:
                if error.code not in ("ABORTED", "UNAVAILABLE") or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
        self.server.close_watches()


@pytest.fixture
def setup(hub: HubServer, tmp_path: Path) -> Iterator[Setup]:
    s = Setup(hub, tmp_path)
    yield s
    s.stop()


def test_configuration_applies_and_status_is_written(setup: Setup, hub: HubServer) -> None:
    setup.server.put(store(hub, download={"concurrency": 3, "bytesPerSecond": 1 << 30}))
    agent = setup.start()
    assert wait(lambda: setup.condition("Ready").get("status") == "True")
    assert agent.limits.requests.limit == 3 and agent.limits.rate.rate == 1 << 30
    status = setup.status()
    assert status["observedGeneration"] == 2 and status["capacity"]["totalBytes"] > 0
    assert setup.condition("CapacityLow")["reason"] == d.REASON_WITHIN_WATERMARKS


def test_an_invalid_spec_is_invalid_configuration_and_nothing_downloads(setup: Setup, hub: HubServer) -> None:
    setup.server.put(store(hub, watermarks={"highPercent": 70, "lowPercent": 80}))
    agent = setup.start()
    assert wait(lambda: setup.condition("Ready").get("reason") == d.REASON_INVALID_CONFIGURATION)
    assert "lowPercent" in setup.condition("Ready")["message"]
    assert agent.collect() is None
    artifact = setup.artifact("qwen", "org/public")
    hub.clear_log()
    with pytest.raises(CsiError):
        agent.service.publish(setup.request(artifact, "p1"))
    digest = artifact["status"]["resolved"]["manifestDigest"]
    assert wait(lambda: digest in agent.cache.ledger.failures)
    assert agent.cache.ledger.failures[digest].reason == d.INVALID_REQUEST
    assert hub.log("cdn") == [] and hub.log("tree") == []


def test_a_download_shows_in_status_then_ready_and_referenced(setup: Setup, hub: HubServer) -> None:
    setup.server.put(store(hub))
    setup.start()
    artifact = setup.artifact("qwen", "org/public")
    setup.mount(setup.request(artifact, "p1"))
    digest = artifact["status"]["resolved"]["manifestDigest"]
    assert wait(
        lambda: any(
            m["digest"] == digest and m["state"] == "Ready" and m["referenced"]
            for m in setup.status().get("models") or []
        )
    )
    text = str(setup.status())
    assert "team-a" not in text and "org/public" not in text and "qwen" not in text


def test_restart_rebuilds_references_from_mounts_and_keeps_partials_of_asked_digests(
    setup: Setup, hub: HubServer
) -> None:
    setup.server.put(store(hub))
    agent = setup.start()
    artifact = setup.artifact("qwen", "org/public")
    request = setup.request(artifact, "p1")
    setup.mount(request)
    digest = artifact["status"]["resolved"]["manifestDigest"]
    orphan = "sha256:" + "e" * 64
    agent.layout.partial_model(orphan).mkdir(parents=True)
    (agent.layout.partials / "not-a-digest").mkdir()
    agent.cache.ledger.references["/var/lib/kubelet/pods/gone/mount"] = (
        digest  # a mount the node no longer has
    )
    agent.cache._save()
    setup.stop()
    setup.server = setup.server  # same apiserver
    setup.server.close_watches()
    again = setup.start()
    assert again.cache.ledger.references == {request.target_path: digest}
    assert not again.layout.partial(orphan).exists()
    assert not (again.layout.partials / "not-a-digest").exists()
    assert again.layout.published(digest)
    assert wait(
        lambda: any(m["digest"] == digest and m["referenced"] for m in setup.status().get("models") or [])
    )


def test_downloads_endpoint_payload_names_digests_only(setup: Setup, hub: HubServer) -> None:
    setup.server.put(store(hub))
    agent = setup.start()
    assert agent.downloads() == []
