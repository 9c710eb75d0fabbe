"""The plugin's gRPC faces: csi-sanity (the upstream suite, built by tests/cluster) against the
Identity and Node services, kubelet plugin registration, and the CSI status codes of a publish."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from api import delivery as d
from nodeplugins.modelmanager.cache import NodeCache
from nodeplugins.modelmanager.download import Limits
from nodeplugins.modelmanager.grpc_server import Servers, csi, csi_grpc, reg, reg_grpc
from nodeplugins.modelmanager.layout import Layout
from nodeplugins.modelmanager.materialize import Materializer
from nodeplugins.modelmanager.publish import NodeService
from nodeplugins.modelmanager.throttle import ByteRate, RequestLimit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
import harness  # tests/cluster/harness.py: where the upstream binaries are cached


class NoArtifacts:
    def synced(self) -> bool:
        return True

    def get(self, name: str, namespace: str = "") -> None:
        return None


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    short = Path(tempfile.mkdtemp(prefix="mm-", dir="/tmp"))  # unix socket paths: 107 bytes at most
    kubelet = short / "kubelet"
    (kubelet / "pods").mkdir(parents=True)
    cache = NodeCache(Layout(tmp_path / "cache"))
    materializer = Materializer(cache, Limits(RequestLimit(1), ByteRate(0)), lambda: None, None)  # type: ignore[arg-type]
    running = Servers(
        NodeService(cache, materializer, NoArtifacts(), kubelet), "node-1", kubelet, lambda: True
    )
    running.start(register=True)
    yield running
    running.stop()
    shutil.rmtree(short, ignore_errors=True)


def test_csi_sanity_identity_and_node(servers: Servers) -> None:
    sanity = harness.bin_dir() / "csi-sanity"
    if not sanity.exists():
        harness.ensure_built()
    mounts = servers.kubelet_dir / "pods"
    run = subprocess.run(
        [
            str(sanity),
            f"--csi.endpoint=unix://{servers.csi_path}",
            f"--csi.mountdir={mounts}/sanity-target",
            f"--csi.stagingdir={mounts}/sanity-staging",
            "--ginkgo.focus=Node Service|Identity Service",
            # The one Node spec that first creates a volume through the Controller service: an
            # ephemeral-only plugin serves none (attachRequired: false), so it cannot apply.
            "--ginkgo.skip=should remove target path",
            "--ginkgo.no-color",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 Failed" in run.stdout and " Passed" in run.stdout


def test_registration_answers_kubelet(servers: Servers) -> None:
    with grpc.insecure_channel(f"unix://{servers.reg_path}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        info = stub.GetInfo(reg.InfoRequest(), timeout=5)
        assert (info.type, info.name, info.endpoint) == (
            "CSIPlugin",
            "model.csi.gpustack.ai",
            str(servers.csi_path),
        )
        assert list(info.supported_versions) == ["1.0.0"]
        stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=5)
    assert servers.registration.registered.is_set()


def test_a_removed_registration_socket_is_served_again(servers: Servers) -> None:
    servers.reg_path.unlink()
    harness.wait_for(servers.reg_path.exists, timeout=10, what="the registration socket again")
    with grpc.insecure_channel(f"unix://{servers.reg_path}") as channel:
        assert (
            reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest(), timeout=5).name
            == "model.csi.gpustack.ai"
        )


def test_publish_status_codes_over_grpc(servers: Servers) -> None:
    target = servers.kubelet_dir / "pods" / "p" / "volumes" / "kubernetes.io~csi" / "gpustack-model" / "mount"
    capability = csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume())
    context = {
        d.CSI_EPHEMERAL: "true",
        d.CSI_POD_NAMESPACE: "team-a",
        d.ATTR_ARTIFACT: "qwen",
        d.ATTR_ARTIFACT_UID: "u",
        d.ATTR_MANIFEST_DIGEST: "sha256:" + "a" * 64,
    }
    with grpc.insecure_channel(f"unix://{servers.csi_path}") as channel:
        node = csi_grpc.NodeStub(channel)
        with pytest.raises(grpc.RpcError) as denied:
            node.NodePublishVolume(
                csi.NodePublishVolumeRequest(
                    volume_id="v",
                    target_path=str(target),
                    volume_capability=capability,
                    volume_context=context,
                    secrets={"token": "hf_secret_value"},
                ),
                timeout=5,
            )
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "hf_secret_value" not in denied.value.details()
        with pytest.raises(grpc.RpcError) as invalid:
            node.NodePublishVolume(
                csi.NodePublishVolumeRequest(volume_id="v", target_path="/etc", volume_capability=capability),
                timeout=5,
            )
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        node.NodeUnpublishVolume(
            csi.NodeUnpublishVolumeRequest(volume_id="v", target_path=str(target)), timeout=5
        )
        assert node.NodeGetInfo(csi.NodeGetInfoRequest(), timeout=5).node_id == "node-1"
