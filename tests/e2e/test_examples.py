"""The CRDs install and are Established, and every example manifest applies through the real
apiserver and our webhooks, as a newcomer would apply them (``kubectl apply -f examples/``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cases.pods import _type as instance_type

from .conftest import ensure_namespace, gpustack

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# The InstanceTypes the examples name (the documents tell readers to substitute their own).
TYPES = [
    instance_type("gpustack--nvidia-a10g-linux-amd64", "nvidia-a10g", "nvidia", "24Gi", logical=512),
    instance_type("gpustack-nvidia-a10g-linux-amd64", "nvidia-a10g", "nvidia", "24Gi", logical=512),
    instance_type(
        "gpustack--nvidia-h100-80gb-hbm3-linux-amd64", "nvidia-h100-80gb-hbm3", "nvidia", "80Gi", logical=512
    ),
]


def test_every_crd_is_established(cluster, webhooks):
    crds = cluster.kubectl_json("get", "crd")["items"]
    ours = {
        c["metadata"]["name"]: c for c in crds if c["spec"]["group"] in ("worker.gpustack.ai", "gpustack.ai")
    }
    files = {p.name.removesuffix(".yaml") for p in gpustack.CRDS.glob("*.yaml")}
    assert files <= set(ours)
    for name in files:
        conditions = {c["type"]: c["status"] for c in ours[name]["status"]["conditions"]}
        assert conditions.get("Established") == "True", name
        assert conditions.get("NamesAccepted") == "True", name


def test_instancetype_columns(cluster, example_cluster):
    header = cluster.kubectl("get", "instancetypes", "--no-headers=false").stdout.splitlines()[0].split()
    assert header[:2] == ["NAME", "ENTRANCE"]
    assert "UNIT(CPU/RAM)/STORAGE" in header and "ACCELERATOR(EX/SH/SL/PT)" in header
    assert header[-2:] == ["CPU", "PHASE"] or "PHASE" in header


@pytest.fixture(scope="module")
def example_cluster(cluster, webhooks):
    ensure_namespace(cluster, "team-a")
    for obj in TYPES:
        cluster.apply({k: v for k, v in obj.items() if k != "status"})
        cluster.kubectl(
            "patch",
            "instancetype",
            obj["metadata"]["name"],
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": obj["status"]}),
        )
    yield
    cluster.kubectl("delete", "-f", str(EXAMPLES), "--ignore-not-found", "--wait=false", check=False)
    for obj in TYPES:
        cluster.kubectl(
            "delete", "instancetype", obj["metadata"]["name"], "--ignore-not-found", "--wait=false"
        )


def test_every_example_applies(cluster, example_cluster):
    """Every example applies unchanged, the SSH key's placeholder included: kubectl shows the
    warning that names spec.data, and no Instance can use the key until it parses."""
    result = cluster.kubectl("apply", "-f", str(EXAMPLES), check=False)
    assert "spec.data" in result.stderr and "Warning" in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    instance = cluster.kubectl_json("get", "instance", "sliced-demo", "-n", "team-a")
    resources = instance["spec"]["resources"]
    # The Instance webhook sized the seed's 20 % slice from the InstanceType's unit spec: 20 % of
    # the 8-core unit in whole cores, rounded down, at least one.
    assert resources["acceleratorSlicedMemoryPercentage"] == 20 and resources["cpu"] == "1"


def test_alternative_examples_create_with_server_dry_run(cluster, example_cluster):
    """The alternatives reuse names of the main set, so they are created (dry run) in a namespace
    of their own."""
    ensure_namespace(cluster, "team-a-alt")
    for path in sorted((EXAMPLES / "alternatives").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            doc["metadata"]["namespace"] = "team-a-alt"
            result = cluster.kubectl(
                "create", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False
            )
            assert result.returncode == 0, f"{path.name}: {result.stderr}"
