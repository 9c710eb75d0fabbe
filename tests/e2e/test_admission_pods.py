"""Gate 1 through the real kube-apiserver: kubectl → apiserver → our webhooks → etcd.

The same cases as tests/webhooks/test_pod_cases.py (the offline chain ``admit`` runs): what the
apiserver stores must carry the folded keys, and a refusal's message must reach kubectl.

The InstanceTypes are admin-authored (spec only). Their status is the controllers': one kwok node per
pool (``pods.HARDWARE``: ten products of ten manufacturers) whose publish-only device manager writes
its ``Devices``, and the whole worker turning them into each type's detail and views. No node carries
the T4 type's cards, so it is never observed.
"""

from __future__ import annotations

import asyncio
import json

import gpustack
import harness
import nodes
import pytest

from fastpath import quantity
from nodeplugins.devicemanager.simulation import profile
from tests.cases import pods
from webhooks import chain
from webhooks.lookups import FileLookups

from .conftest import ensure_namespace

pytestmark = pytest.mark.e2e

# One kwok node per pool; its device manager's port slot (tests/cluster/nodes.py). Slots 0-8 are
# free among the kwok nodes of the other modules (their real kubelet nodes use another range).
NODES = {f"gate1-{name.removeprefix('e2e-')}": name for name in pods.HARDWARE}
SLOTS = dict(zip(NODES, [0, 1, 2, 3, 4, 5, 6, 7, 8, 31], strict=True))
OBSERVED = set(pods.HARDWARE)
WAIT = 180


def _profile(directory, type_name: str):
    product, cards, partitioned = pods.HARDWARE[type_name]
    manufacturer = profile.catalog()[product].manufacturer
    entry = {"product": product, "count": cards, **({"partitioned": True} if partitioned else {})}
    path = directory / f"{type_name}.yaml"
    path.write_text(json.dumps({"manufacturer": manufacturer, "cards": [entry]}))
    return path, manufacturer


def live_types(cluster) -> dict[str, dict]:
    return {t["metadata"]["name"]: t for t in cluster.kubectl_json("get", "instancetypes")["items"]}


def _observed(cluster) -> bool:
    found = live_types(cluster)
    return all(
        ((found.get(name) or {}).get("status") or {}).get("phase") == "Active"
        and ((found[name]["status"].get("detail") or {}).get("memory"))
        for name in OBSERVED
    )


@pytest.fixture(scope="module")
def pools(cluster, tmp_path_factory):
    op = gpustack.install(cluster)
    directory = tmp_path_factory.mktemp("gate1-profiles")
    specs = []
    for node, type_name in NODES.items():
        path, manufacturer = _profile(directory, type_name)
        specs.append(
            {"name": node, "profile": path, "slot": SLOTS[node], "real": False, "manufacturer": manufacturer}
        )
    try:
        nodes.start_nodes(cluster, specs)
        ensure_namespace(cluster, pods.NAMESPACE)
        for instance_type in pods.INSTANCE_TYPES:
            cluster.apply({k: v for k, v in instance_type.items() if k != "status"})
        gpustack.start_worker(cluster, op, "--no-leader-election")
        harness.wait_for(lambda: _observed(cluster), timeout=WAIT, what="every pool's InstanceType observed")
        yield live_types(cluster)
    finally:
        harness.delete_namespace(cluster, pods.NAMESPACE, timeout=90)
        nodes.take_down(cluster, op, NODES, WAIT, "e2e gate 1 teardown")


def test_the_offline_types_describe_what_the_controllers_published(pools):
    """The offline cases judge against hand-written statuses; these are the facts gate 1 reads from
    a type (its group, card manufacturer and VRAM, partition profiles), and each must be what the
    controllers derived from the simulated hardware."""

    def facts(obj: dict) -> dict:
        detail = (obj.get("status") or {}).get("detail") or {}
        physical = (detail.get("slicedDetail") or {}).get("physical") or {}
        return {
            "group": obj["spec"].get("acceleratorGroup"),
            "manufacturer": detail.get("manufacturer"),
            "memory MiB": quantity.floor_div(detail["memory"], 1 << 20) if detail.get("memory") else None,
            "profiles": sorted((p["name"], p["memoryMib"]) for p in physical.get("profiles") or []),
        }

    for offline in pods.INSTANCE_TYPES:
        name = offline["metadata"]["name"]
        assert facts(pools[name]) == facts(offline), name
    assert not (pools["e2e-nvidia-t4"].get("status") or {}).get("detail", {}).get("manufacturer")


@pytest.mark.parametrize("case", pods.CASES, ids=lambda c: c.id)
def test_pod_case_through_the_apiserver(cluster, pools, case):
    manifest = json.dumps(pods.case_pod(case))
    name = case.pod["metadata"]["name"]
    cluster.kubectl("delete", "pod", name, "-n", pods.NAMESPACE, "--ignore-not-found", "--wait=true")
    created = cluster.kubectl("create", "-f", "-", input=manifest, check=False)
    if not case.allowed:
        assert created.returncode != 0, f"{case.id} was admitted"
        if case.code:  # a retryable denial carries no field causes: kubectl shows the webhook's words
            assert "denied the request" in created.stderr and "retry" in created.stderr
        else:  # kubectl lists the causes of an Invalid status under the object's name
            assert f'The Pod "{name}" is invalid' in created.stderr, created.stderr
        assert case.path in created.stderr, created.stderr
        return
    assert created.returncode == 0, created.stderr
    stored = cluster.kubectl_json("get", "pod", name, "-n", pods.NAMESPACE)
    assert pods.stored_limit_problems(case, stored) == []
    # What the apiserver stored carries exactly what admit computes offline on the live types.
    offline = asyncio.run(chain.run(pods.case_pod(case), FileLookups(list(pools.values())))).object
    for live, expected in zip(stored["spec"]["containers"], offline["spec"]["containers"], strict=True):
        assert live.get("resources", {}).get("limits") == expected.get("resources", {}).get("limits")


def test_pod_without_queue_label_is_untouched(cluster, pools):
    pod = pods.case_pod(pods.CASES[0])
    pod["metadata"]["name"] = "no-queue-label"
    pod["metadata"]["labels"] = {}
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu.sliced": "3"}}
    cluster.kubectl("delete", "pod", "no-queue-label", "-n", pods.NAMESPACE, "--ignore-not-found")
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
    stored = cluster.kubectl_json("get", "pod", "no-queue-label", "-n", pods.NAMESPACE)
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu.sliced": "3"}


def test_server_side_dry_run_runs_the_webhooks_and_stores_nothing(cluster, pools):
    case = next(c for c in pods.CASES if c.id == "nvidia-slice-40-percent")
    pod = pods.case_pod(case)
    pod["metadata"]["name"] = "dry-run"
    result = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod))
    assert (
        json.loads(result.stdout)["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpu.sliced.units"
        ]
        == "640k"  # the apiserver's canonical 640,000
    )
    assert cluster.kubectl("get", "pod", "dry-run", "-n", pods.NAMESPACE, check=False).returncode != 0
    bad = next(c for c in pods.CASES if c.id == "ascend-slice-three")
    refused = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(pods.case_pod(bad)), check=False
    )
    assert refused.returncode != 0 and bad.path in refused.stderr


def test_apiserver_metrics_show_the_calls_went_through_it(cluster, pools):
    metrics = cluster.kubectl("get", "--raw", "/metrics").stdout
    wanted = [
        line
        for line in metrics.splitlines()
        if line.startswith("apiserver_admission_webhook_admission_duration_seconds_count")
        and 'name="mutate.gpustack-worker.core.v1.pod"' in line
    ]
    assert wanted and any(float(line.rsplit(" ", 1)[1]) > 0 for line in wanted)
    rejections = [
        line
        for line in metrics.splitlines()
        if line.startswith("apiserver_admission_webhook_rejection_count")
        and 'name="validate.gpustack-worker.core.v1.pod"' in line
    ]
    assert rejections and any(float(line.rsplit(" ", 1)[1]) > 0 for line in rejections)
