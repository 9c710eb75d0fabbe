"""Node-to-node sync (model-delivery spec §4.10): two node agents over the in-memory apiserver, the
first materializing from the local hub and serving its trees on a peer port, the second pulling
from it — the hub's request log shows the second node asked the hub nothing — with the token check,
the binding of a peer's listing to the digest, the hub fallback that resumes from the checkpoint,
the Setting that turns pulling off, and an anchored digest that only peers can deliver."""

from __future__ import annotations

import base64
import json
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
from nodeplugins.modelmanager.fetch import FetchError
from nodeplugins.modelmanager.peers import PeerAuth, PeerConnection, Peers, PeerServer
from nodeplugins.modelmanager.publish import CsiError, PublishRequest
from tests.hub.server import HubServer
from tests.kube_fake import FakeApiServer
from tests.net import free_port
from tests.unit.delivery.conftest import LARGE_SIZE, SimulatedDisk
from tests.unit.delivery.test_materialize import TUNING
from tests.unit.delivery.test_publish import Kernel

GROUP = "worker.gpustack.ai/v1"
PEER_TOKEN = "plugin-sa-token"
TENANT_TOKEN = "someone-elses-token"


def review(token: str) -> tuple[bool, str, list[str]]:
    """The apiserver's TokenReview, as the serving plugin sees it: the plugins' SA token passes."""
    if token == PEER_TOKEN:
        return True, d.PEER_DEFAULT_USER, [d.PEER_AUDIENCE]
    if token == TENANT_TOKEN:
        return True, "system:serviceaccount:team-a:default", [d.PEER_AUDIENCE]
    return False, "", []


def store(name: str, hub: HubServer, **spec: Any) -> dict[str, Any]:
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
        "metadata": {"name": name, "generation": 1},
        "spec": body,
    }


def wait(check, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


class NodeAgent:
    def __init__(self, cluster: Cluster, name: str, *, serve: bool, token: str = PEER_TOKEN) -> None:
        self.name = name
        base = cluster.tmp / name
        self.kubelet = base / "kubelet"
        (self.kubelet / "pods").mkdir(parents=True)
        root = base / "cache"
        root.mkdir()
        token_file = base / "peer-token"
        token_file.write_text(token)
        self.kernel = Kernel(mounts.device_of(root))
        self.port = free_port()
        self.agent = Agent(
            AgentOptions(
                name,
                root,
                self.kubelet,
                tuning=TUNING,
                tick=0.05,
                peer_address=f"127.0.0.1:{self.port}" if serve else "",
                peer_token_file=token_file,
                peer_tls=False,
                disk=SimulatedDisk(),
            ),
            cluster.client,
            ops=self.kernel.ops(),
        )
        self.server: PeerServer | None = None
        if serve:
            self.server = PeerServer(
                ("127.0.0.1", self.port), self.agent.layout, PeerAuth(review, d.PEER_DEFAULT_USER)
            )
            self.server.start()
        self.agent.start(sync_timeout=10)
        self.cluster = cluster

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

    def publish_once(self, artifact: dict[str, Any], pod: str) -> str:
        """One NodePublishVolume, as kubelet's first call; the code it answered."""
        assert wait(lambda: self.agent.artifacts.get(artifact["metadata"]["name"], "team-a") is not None)
        try:
            self.agent.service.publish(self.request(artifact, pod))
        except CsiError as error:
            return error.code
        return "OK"

    def mount(self, artifact: dict[str, Any], pod: str) -> None:
        request = self.request(artifact, pod)
        assert wait(lambda: self.agent.artifacts.get(artifact["metadata"]["name"], "team-a") is not None)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.agent.service.publish(request)
                return
            except CsiError as error:
                if error.code not in ("ABORTED", "UNAVAILABLE") or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def entry(self, digest: str) -> dict[str, Any]:
        status = (self.cluster.client.get("NodeModelStore", self.name) or {}).get("status") or {}
        return next((m for m in status.get("models") or [] if m["digest"] == digest), {})

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.agent.stop()


class Cluster:
    def __init__(self, hub: HubServer, tmp: Path) -> None:
        self.server = FakeApiServer()
        self.client = Client(self.server)  # type: ignore[arg-type]
        self.hub = hub
        self.tmp = tmp
        self.nodes: list[NodeAgent] = []

    def node(self, name: str, *, serve: bool = True, token: str = PEER_TOKEN, **spec: Any) -> NodeAgent:
        self.server.put(store(name, self.hub, **spec))
        agent = NodeAgent(self, name, serve=serve, token=token)
        self.nodes.append(agent)
        return agent

    def artifact(
        self, name: str = "qwen", repo: str = "org/public", *, anchored: bool = False
    ) -> dict[str, Any]:
        res = hf.resolve(HubConnection(self.hub.endpoint), repo, "main", None)
        resolved: dict[str, Any] = {"revision": res.commit, "manifestDigest": res.manifest.digest}
        if anchored:
            resolved = {"manifestDigest": res.manifest.digest, "digestSource": d.DIGEST_SOURCE_EXPECTED}
        return self.client.create(
            {
                "apiVersion": GROUP,
                "kind": "ModelArtifact",
                "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
                "spec": {"source": {"huggingFace": {"repository": repo, "revision": "main"}}},
                "status": {"resolved": resolved, "conditions": [{"type": "Resolved", "status": "True"}]},
            }
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.server.close_watches()


@pytest.fixture
def cluster(hub: HubServer, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(hub, tmp_path)
    yield c
    c.stop()


def seeded(cluster: Cluster, hub: HubServer) -> tuple[NodeAgent, dict[str, Any], str]:
    """Node ``seed`` holds org/public, published from the hub and advertised to peers."""
    seed = cluster.node("seed")
    artifact = cluster.artifact()
    digest = artifact["status"]["resolved"]["manifestDigest"]
    seed.mount(artifact, "first")
    assert wait(lambda: seed.entry(digest).get("state") == d.STATE_READY)
    status = cluster.client.get("NodeModelStore", "seed")["status"]  # type: ignore[index]
    assert status["peerAddress"] == f"127.0.0.1:{seed.port}"
    assert seed.entry(digest)["source"] == d.SOURCE_HUB
    hub.clear_log()
    return seed, artifact, digest


def hub_requests(hub: HubServer) -> list[dict[str, Any]]:
    return [e for e in hub.log() if e["kind"] in ("revision", "tree", "resolve", "cdn")]


def test_a_cold_node_pulls_from_the_peer_and_not_from_the_hub(cluster: Cluster, hub: HubServer) -> None:
    _, artifact, digest = seeded(cluster, hub)
    cold = cluster.node("cold")
    cold.mount(artifact, "second")
    assert wait(lambda: cold.entry(digest).get("state") == d.STATE_READY)
    assert hub_requests(hub) == []  # neither the listing nor a byte came from the hub
    assert cold.entry(digest)["source"] == d.SOURCE_PEER
    model = cold.agent.layout.tree_model(digest)
    seed_model = cluster.nodes[0].agent.layout.tree_model(digest)
    assert (model / "model.safetensors").read_bytes() == (seed_model / "model.safetensors").read_bytes()
    assert (model / "model.safetensors").stat().st_size == LARGE_SIZE


def test_peer_sync_off_pulls_from_the_hub(cluster: Cluster, hub: HubServer) -> None:
    _, artifact, digest = seeded(cluster, hub)
    cold = cluster.node("cold", peerSync=False)
    cold.mount(artifact, "second")
    assert wait(lambda: cold.entry(digest).get("state") == d.STATE_READY)
    assert any(e["kind"] == "tree" for e in hub_requests(hub))
    assert cold.entry(digest)["source"] == d.SOURCE_HUB


def test_a_refused_token_falls_back_to_the_hub(cluster: Cluster, hub: HubServer) -> None:
    _, artifact, digest = seeded(cluster, hub)
    cold = cluster.node("cold", token=TENANT_TOKEN)  # authenticates, but not as the plugins' SA
    cold.mount(artifact, "second")
    assert wait(lambda: cold.entry(digest).get("state") == d.STATE_READY)
    assert cold.entry(digest)["source"] == d.SOURCE_HUB


def test_a_tampered_peer_file_is_refused_and_only_that_file_comes_from_the_hub(
    cluster: Cluster, hub: HubServer
) -> None:
    seed, artifact, digest = seeded(cluster, hub)
    bad = seed.agent.layout.tree_model(digest) / "config.json"
    bad.chmod(0o644)
    bad.write_bytes(b'{"hidden_size": 65}\n')  # same length, other bytes
    cold = cluster.node("cold")
    cold.mount(artifact, "second")
    assert wait(lambda: cold.entry(digest).get("state") == d.STATE_READY)
    fetched = {e["path"].rsplit("/", 1)[-1] for e in hub_requests(hub) if e["kind"] == "resolve"}
    assert fetched == {"config.json"}
    assert (cold.agent.layout.tree_model(digest) / "config.json").read_bytes() == b'{"hidden_size": 64}\n'
    assert cold.entry(digest)["source"] == d.SOURCE_PEER  # the large file came from the peer


def test_a_peer_that_dies_mid_file_leaves_the_hub_only_the_bytes_after_the_checkpoint(
    cluster: Cluster, hub: HubServer
) -> None:
    seed, artifact, digest = seeded(cluster, hub)
    cold = cluster.node("cold", download={"concurrency": 1, "bytesPerSecond": 1 << 20})

    def partway() -> bool:
        running = cold.agent.materializer.running().get(digest)
        return running is not None and running.received > 3 << 20

    assert cold.publish_once(artifact, "second") == "ABORTED"
    assert wait(partway, timeout=30), "the cold node never got going"
    assert seed.server is not None
    seed.server.shutdown()  # the peer dies mid-file
    seed.server.server_close()
    cold.mount(artifact, "second")
    assert wait(lambda: cold.entry(digest).get("state") == d.STATE_READY, timeout=60)
    ranges = [e["range"] for e in hub_requests(hub) if e["kind"] in ("resolve", "cdn") and e.get("range")]
    starts = sorted(int(r.split("=")[1].split("-")[0]) for r in ranges)
    assert starts and starts[0] >= 1 << 20, f"the hub was asked for bytes before the checkpoint: {ranges}"
    data = (cold.agent.layout.tree_model(digest) / "model.safetensors").read_bytes()
    assert len(data) == LARGE_SIZE


def test_an_anchored_digest_comes_from_peers_only(cluster: Cluster, hub: HubServer) -> None:
    _, _, digest = seeded(cluster, hub)
    anchored = cluster.artifact("anchored", anchored=True)
    assert anchored["status"]["resolved"]["manifestDigest"] == digest
    hub.clear_log()  # the test's own resolution of the digest
    cold = cluster.node("cold")
    cold.mount(anchored, "second")
    assert wait(lambda: cold.entry(digest).get("state") == d.STATE_READY)
    assert hub_requests(hub) == []


def test_an_anchored_digest_no_peer_holds_is_source_unavailable(cluster: Cluster, hub: HubServer) -> None:
    anchored = cluster.artifact("anchored", anchored=True)
    hub.clear_log()
    lone = cluster.node("lone")
    digest = anchored["status"]["resolved"]["manifestDigest"]
    # The first call starts the materialization; no call is answered OK, and the failure is recorded
    # (asked once, not retried until mount()'s 60 s deadline as a kubelet would).
    assert lone.publish_once(anchored, "p") != "OK"
    assert wait(lambda: lone.entry(digest).get("reason") == d.SOURCE_UNAVAILABLE)
    assert lone.publish_once(anchored, "p") != "OK"
    assert "anchored" in lone.entry(digest)["message"]
    assert hub_requests(hub) == []


def test_a_forged_listing_is_refused_before_any_byte(cluster: Cluster, hub: HubServer) -> None:
    seed, _, digest = seeded(cluster, hub)
    manifest = seed.agent.layout.tree(digest) / "manifest"
    manifest.write_bytes(manifest.read_bytes().replace(b"config.json", b"config.jsom"))
    peers = Peers(cluster.nodes[0].agent.stores, "someone", None, tls=False)
    assert wait(lambda: len(peers.candidates(digest)) == 1)  # the informer may lag the status write
    (peer,) = peers.candidates(digest)
    with pytest.raises(FetchError) as error:
        peers.manifest(peer, digest, PEER_TOKEN)
    assert error.value.reason == d.INTEGRITY_MISMATCH


# --- who may ask ------------------------------------------------------------------------------------


def jwt(exp: float) -> str:
    payload = base64.urlsafe_b64encode(json.dumps({"exp": exp}).encode()).decode().rstrip("=")
    return f"e30.{payload}.sig"


def test_positive_reviews_are_cached_until_the_token_expires_and_refusals_never() -> None:
    calls: list[str] = []
    now = [1000.0]
    good = jwt(1100.0)

    def counted(token: str) -> tuple[bool, str, list[str]]:
        calls.append(token)
        return (True, d.PEER_DEFAULT_USER, [d.PEER_AUDIENCE]) if token == good else (False, "", [])

    auth = PeerAuth(counted, d.PEER_DEFAULT_USER, clock=lambda: now[0])
    assert auth.admits(f"Bearer {good}") == (True, "")
    assert auth.admits(f"Bearer {good}") == (True, "") and calls == [good]
    now[0] = 1101.0  # past the token's own expiry (sooner than five minutes)
    assert auth.admits(f"Bearer {good}")[0] and calls == [good, good]
    assert not auth.admits("Bearer nope")[0] and not auth.admits("Bearer nope")[0]
    assert calls.count("nope") == 2
    assert auth.admits(None) == (False, "a peer request needs the pulling plugin's ServiceAccount token")


def test_only_the_plugins_account_and_audience_are_admitted() -> None:
    auth = PeerAuth(review, d.PEER_DEFAULT_USER)
    assert not auth.admits(f"Bearer {TENANT_TOKEN}")[0]
    other_audience = PeerAuth(
        lambda t: (True, d.PEER_DEFAULT_USER, ["https://kubernetes.default.svc"]), d.PEER_DEFAULT_USER
    )
    assert "audience" in other_audience.admits("Bearer x")[1]


def test_a_request_without_a_token_is_refused_by_the_server(cluster: Cluster, hub: HubServer) -> None:
    _, _, digest = seeded(cluster, hub)
    seed = cluster.nodes[0]
    peers = Peers(seed.agent.stores, "someone", None, tls=False)
    assert wait(lambda: len(peers.candidates(digest)) == 1)  # the informer may lag the status write
    (peer,) = peers.candidates(digest)
    with pytest.raises(FetchError) as error:
        peers.manifest(peer, digest, None)
    assert error.value.reason == d.ACCESS_DENIED
    assert peer.connection == PeerConnection(f"127.0.0.1:{seed.port}", tls=False)
