"""The image builder's pure parts (images/build.py) and the container node's addressing and
configuration (tests/cluster/container_node.py): what the e2e module cannot show on its own."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from images import build

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
import container_node  # noqa: E402
import ports  # noqa: E402

VALUES = yaml.safe_load((REPO / "charts" / "gpustack-operator" / "values.yaml").read_text())


def node_ports() -> list[int]:
    out = []
    for name in ports.node_ranges():
        span = ports.RANGES[name]
        out += list(range(span.first, span.last + 1, ports.NODE_PORTS))
    return out


def test_every_node_slot_of_every_cluster_gets_its_own_subnets() -> None:
    ids = [container_node.network_id(port) for port in node_ports()]
    assert len(set(ids)) == len(ids)
    assert all(1 <= i <= 254 for i in ids)
    nets = [container_node.addresses(i) for i in ids]
    assert len({n["pods"] for n in nets}) == len(nets) and len({n["veth"] for n in nets}) == len(nets)
    assert all(len(n["veth"]) <= 15 for n in nets)  # IFNAMSIZ


def test_a_port_outside_the_node_ranges_is_refused() -> None:
    with pytest.raises(ValueError, match="no node range"):
        container_node.network_id(ports.RANGES["dev-hub"].first)


def test_containerd_knows_every_runtime_handler_the_chart_names(tmp_path: Path) -> None:
    config = tomllib.loads(container_node.containerd_config(tmp_path, 10))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    runtimes = cri["containerd"]["runtimes"]
    named = {
        row["runtimeName"]
        for row in VALUES["global"]["manufacturers"].values()
        if row and row.get("runtimeName")
    }
    assert named <= set(runtimes)
    assert all(r["options"]["SystemdCgroup"] is False for r in runtimes.values())
    assert cri["sandbox_image"] == build.IMAGES["pause"].ref
    assert cri["cni"]["conf_dir"].startswith(str(tmp_path))


def test_the_chart_defaults_name_the_image_built_here() -> None:
    repository, tag = build.IMAGES["operator"].ref.removeprefix("docker.io/").rsplit(":", 1)
    assert VALUES["image"]["repository"] == repository
    chart = yaml.safe_load((REPO / "charts" / "gpustack-operator" / "Chart.yaml").read_text())
    assert tag == f"v{chart['appVersion']}"


def test_a_package_debian_does_not_have_is_named() -> None:
    assert build.unknown_packages(("python3", "no-such-package-gpustack")) == ["no-such-package-gpustack"]


def test_the_operator_image_runs_as_the_chart_worker_user_and_keeps_its_entrypoint() -> None:
    image = build.IMAGES["operator"]
    assert image.config["user"] == "65532"
    assert image.config["entrypoint"] == ["/usr/local/bin/gpustack-operator"]
    assert "PYTHONDONTWRITEBYTECODE=1" in image.config["env"]  # the worker's root is read-only
