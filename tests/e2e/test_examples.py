"""The CRDs install and are Established, and every example manifest applies through the real
apiserver and our webhooks, as a newcomer would apply them (``kubectl apply -f examples/``).

The InstanceTypes the examples name are the controllers': two kwok nodes (4 × A10G, 8 × H100)
whose publish-only device managers write their ``Devices``, and the worker's pool controllers turn
them into ``gpustack--nvidia-a10g-linux-amd64`` and ``gpustack--nvidia-h100-80gb-hbm3-linux-amd64``
with their entrances. Then the worker runs its webhooks only, so the examples are judged and
stored with nothing reconciling them; at the end the controllers run again to take their pools
down with the nodes.
"""

from __future__ import annotations

import json
from pathlib import Path

import harness
import nodes
import pytest
import yaml

from .conftest import ensure_namespace, gpustack

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

NODES = {"ex-a10g": ("a10g-4.yaml", 26), "ex-h100": ("h100-8.yaml", 27)}  # name: (profile, slot)
TYPES = ("gpustack--nvidia-a10g-linux-amd64", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64")
WAIT = 180


def test_every_crd_is_established(cluster, example_cluster):
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


def _types_active(cluster) -> bool:
    found = {t["metadata"]["name"]: t for t in cluster.kubectl_json("get", "instancetypes")["items"]}
    return all(
        ((found.get(name) or {}).get("status") or {}).get("phase") == "Active"
        and (found[name]["status"] or {}).get("entrance")
        for name in TYPES
    )


@pytest.fixture(scope="module")
def example_cluster(cluster):
    foreign = cluster.kubectl_json("get", "nodes", "-l", "gpustack.ai/managed=true")["items"]
    if foreign:
        pytest.fail(f"e2e examples: managed nodes {[n['metadata']['name'] for n in foreign]} are left over")
    op = gpustack.install(cluster)
    try:
        for name, (profile, slot) in NODES.items():
            nodes.start_node(cluster, name, profile, slot=slot, real=False)
        gpustack.start_worker(cluster, op, "--no-leader-election")
        harness.wait_for(lambda: _types_active(cluster), timeout=WAIT, what=f"{', '.join(TYPES)} Active")
        gpustack.stop_worker(op)
        gpustack.start_worker(cluster, op, "--webhooks-only")
        ensure_namespace(cluster, "team-a")
        yield op
    finally:
        cluster.kubectl("delete", "-f", str(EXAMPLES), "--ignore-not-found", "--timeout=60s", check=False)
        gpustack.stop_worker(op)
        gpustack.start_worker(cluster, op, "--no-leader-election")  # the controllers take their pools down
        nodes.take_down(cluster, op, NODES, WAIT, "e2e examples teardown")


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
