"""The scheduling chain's controllers (gates 2 and 4) on the real control plane with Kueue.

Simulated nodes (two with 8 × NVIDIA H100 80GB HBM3, one with 4 × NVIDIA A10G: kwok nodes, each with
a publish-only device manager that writes its Devices ledger and NodeFeature, nfd-master labelling
the node from them and from what nfd-worker would publish) become ResourceFlavors, a hostname
Topology, one ClusterQueue per pool, LocalQueues in every tenant namespace, derived InstanceTypes
with the four views in their columns, and node counting keys; a card turning unhealthy (the
simulated hardware's profile edited) moves the InstanceType; a whole-card Pod on the A10G entrance
is admitted by Kueue and bound to the A10G node; a restarted set of controllers converges to the
same objects.  No label or ledger here is written by the test.  Every registered controller (the pool
controllers and gate 3, which answers ``gpustack-node-devices`` once the accelerated queues
reference it) runs in the test process, without leader election, until the worker fixture runs
them; the Pod webhook is not needed (``nvidia.com/gpu: 1`` folds to nothing).

The module expects to own the simulated H100/A10G/generic pools of the cluster it runs on.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import uuid
from collections.abc import Iterator

import gpustack
import harness
import nodes
import pytest

from api import constants
from api.naming import local_queue_name
from controllers.registry import CONTROLLERS
from kube.client import Client, load_api_client
from kube.manager import Manager
from nodeplugins.devicemanager import simulated

pytestmark = pytest.mark.e2e

M = 1_600_000
A10G = simulated.PRODUCTS["NVIDIA A10G"]
H100 = simulated.PRODUCTS["NVIDIA H100 80GB HBM3"]
A10G_POOL = "gpustack--nvidia-a10g-linux-amd64"
H100_POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
CPU_POOL = "gpustack--generic-linux-amd64"
A10G_ENTRANCE = "gpustack-fnv64-c4680bb149644f1c"
# The general key nfd-worker's CPU identity gives these nodes (AMD, family 25, model 1; NFD copies
# a rule's annotations verbatim, so no CPU brand name reaches the node and the key falls back).
GKEY = "amd-25-1"
A10G_FLAVOR = f"gpustack--{GKEY}--nvidia-a10g-linux-amd64-4d"
H100_FLAVOR = f"gpustack--{GKEY}--nvidia-h100-80gb-hbm3-linux-amd64-8d"
CPU_FLAVOR = f"gpustack--{GKEY}-linux-amd64-64c"
TOPOLOGY = f"gpustack-{simulated.HOSTNAME_PROFILE}"
SUFFIX = uuid.uuid4().hex[:5]
NODES = {
    f"pools-h100-a-{SUFFIX}": (H100, 8),
    f"pools-h100-b-{SUFFIX}": (H100, 8),
    f"pools-a10g-{SUFFIX}": (A10G, 4),
}
H100_A, H100_B, A10G_NODE = list(NODES)
PROFILES = {H100.product: "h100-8.yaml", A10G.product: "a10g-4.yaml"}  # tests/cluster/profiles
SLOTS = {name: 18 + i for i, name in enumerate(NODES)}  # this module's device-manager ports
# The H100 type's ACCELERATOR(EX/SH/SL/PT) views once card 0 of one node is unhealthy: 15 whole
# cards (8 at once on the healthy node), 150 shares, 1,500 % of slices remaining (the capacity still
# counts the card: it is installed, just not usable); then with that node alone.
UNHEALTHY_SUMMARY = "8/15 8/150 100/1500 0/0"
UNHEALTHY_SLICED = {"onceMaxRequest": "100", "remaining": "1500", "capacity": "1600"}
ONE_NODE_VIEWS = ["7/7", "7/70", "100/700", "0/0"]
TENANTS = [f"pools-team-a-{SUFFIX}", f"pools-team-b-{SUFFIX}"]


def start_controllers(info: harness.ClusterInfo) -> Manager:
    manager = Manager(Client(load_api_client(str(info.kubeconfig))), leader_election=False)
    for controller in CONTROLLERS:
        manager.add(controller)
    manager.start(sync_timeout=60)
    return manager


def start_node(info: harness.ClusterInfo, name: str) -> nodes.Node:
    """The kwok node and its publish-only device manager (the labels come through nfd-master)."""
    product, _count = NODES[name]
    return nodes.start_node(info, name, PROFILES[product.product], slot=SLOTS[name], real=False)


def get(info: harness.ClusterInfo, *args: str) -> dict | None:
    proc = info.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def names(info: harness.ClusterInfo, kind: str, *args: str) -> list[str]:
    return sorted(i["metadata"]["name"] for i in info.kubectl_json("get", kind, *args)["items"])


@pytest.fixture(scope="module")
def pools(cluster: harness.ClusterInfo) -> Iterator[dict]:
    gpustack.install_crds(cluster)
    gpustack.ensure_namespace(cluster, gpustack.SYSTEM_NAMESPACE)
    foreign = [
        n["metadata"]["name"]
        for n in cluster.kubectl_json("get", "nodes", "-l", "gpustack.ai/managed=true")["items"]
        if n["metadata"]["name"] not in NODES
    ]
    if foreign:
        raise AssertionError(
            f"e2e pools: the cluster already has managed nodes {foreign}; these tests own the pools"
            + " (an earlier module left them behind)"
        )
    for ns in TENANTS:
        gpustack.ensure_namespace(cluster, ns)
    state: dict = {}
    try:
        for name in NODES:
            start_node(cluster, name)
        state["manager"] = start_controllers(cluster)
        harness.wait_for(state["manager"].settled, timeout=90, what="the controllers' first full pass")
        yield state
    finally:
        # While the controllers still run: nodes first (their flavors go, so nothing is derived
        # again), then the types (the finalizer tears their queues and LocalQueues down).
        for ns in TENANTS:
            cluster.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)
        nodes.remove_nodes(cluster, NODES)
        _wait_quietly(lambda: not _ours(cluster, "resourceflavors.kueue.x-k8s.io"), "flavors gone")
        cluster.kubectl("delete", "instancetypes", "--all", "--wait=false", check=False)
        _wait_quietly(lambda: not cluster.kubectl_json("get", "instancetypes")["items"], "types gone")
        _wait_quietly(lambda: not _ours(cluster, "clusterqueues.kueue.x-k8s.io"), "queues gone")
        if "manager" in state:
            state["manager"].stop()
        for name in NODES:
            cluster.kubectl("delete", "devices", name, "--ignore-not-found", check=False)


def _ours(cluster: harness.ClusterInfo, kind: str) -> list[str]:
    return names(cluster, kind, "-l", "resource.gpustack.ai/type")


def _wait_quietly(predicate, what: str) -> None:
    try:
        harness.wait_for(predicate, timeout=90, what=what)
    except TimeoutError as error:  # teardown: report, keep cleaning
        print(f"e2e pools teardown: {error}")


def test_flavors_and_topology(cluster: harness.ClusterInfo, pools: dict) -> None:
    harness.wait_for(
        lambda: (
            {A10G_FLAVOR, H100_FLAVOR, CPU_FLAVOR} <= set(names(cluster, "resourceflavors.kueue.x-k8s.io"))
        ),
        timeout=60,
        what="the three flavors",
    )
    key = "acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3"

    def both_h100_nodes_counted() -> dict | None:
        # The flavor exists once the first node is counted; its labels sum the nodes as they come.
        found = cluster.kubectl_json("get", "resourceflavors.kueue.x-k8s.io", H100_FLAVOR)
        return found if found["metadata"]["labels"].get(f"{key}.capacity") == "16" else None

    h100 = harness.wait_for(both_h100_nodes_counted, timeout=60, what="the H100 flavor counting both nodes")
    labels = h100["metadata"]["labels"]
    assert labels[f"{key}.count"] == "8" and labels[f"{key}.capacity"] == "16"
    assert (
        labels["resource.gpustack.ai/type"] == "nodes"
        and labels["feature.gpustack.ai/acceleratable"] == "true"
    )
    assert h100["spec"]["nodeLabels"][constants.LABEL_MANAGED] == "true"
    assert h100["spec"]["nodeLabels"][constants.LABEL_TOPOLOGY_PROFILE] == simulated.HOSTNAME_PROFILE
    assert h100["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert h100["spec"]["topologyName"] == TOPOLOGY
    assert h100["metadata"]["annotations"]["note.gpustack.ai/memory"] == "80Gi"
    cpu = cluster.kubectl_json("get", "resourceflavors.kueue.x-k8s.io", CPU_FLAVOR)
    assert cpu["metadata"]["labels"][f"general.feature.gpustack.ai/{GKEY}.capacity"] == str(3 * 64)
    topology = cluster.kubectl_json("get", "topologies.kueue.x-k8s.io", TOPOLOGY)
    assert topology["spec"]["levels"] == [{"nodeLabel": "kubernetes.io/hostname"}]


def test_instance_type_flavor_catalog(cluster: harness.ClusterInfo, pools: dict) -> None:
    wanted = {"gpustack--generic", "gpustack--nvidia-a10g", "gpustack--nvidia-h100-80gb-hbm3"}
    harness.wait_for(
        lambda: wanted <= set(names(cluster, "instancetypeflavors")), timeout=60, what="the catalog"
    )
    h100 = cluster.kubectl_json("get", "instypeflavor", "gpustack--nvidia-h100-80gb-hbm3")["spec"]
    assert h100["acceleratable"] is True and h100["acceleratorGroup"] == "nvidia-h100-80gb-hbm3"
    assert h100["manufacturer"] == "nvidia" and h100["memory"] == "80Gi" and h100["sliceable"] is True
    table = cluster.kubectl("get", "instancetypeflavors").stdout
    assert "ACCELERATOR-GROUP" in table and "nvidia-a10g" in table


def _queue_ready(cluster: harness.ClusterInfo, name: str) -> dict | None:
    queue = get(cluster, "clusterqueues.kueue.x-k8s.io", name)
    if not queue or not queue["spec"].get("resourceGroups"):
        return None
    conditions = {x["type"]: x for x in queue.get("status", {}).get("conditions", [])}
    ready = conditions.get("TopologyReady", {})
    active = conditions.get("Active", {})
    if ready.get("status") == "True" and active.get("status") == "True":
        return queue
    return None


def test_one_cluster_queue_per_pool(cluster: harness.ClusterInfo, pools: dict) -> None:
    # Kueue v0.19 ignores what a queue does not declare (IgnoreUndeclared): an accelerated queue
    # declares its credits only (on v0.17 it would also declare cpu, unbounded: api.kueue).
    expected = {
        A10G_POOL: (["credits.gpustack.ai/nvidia"], [(A10G_FLAVOR, 4 * M)]),
        H100_POOL: (["credits.gpustack.ai/nvidia"], [(H100_FLAVOR, 16 * M)]),
        CPU_POOL: (["cpu"], [(CPU_FLAVOR, 3 * 64)]),
    }
    nominal: dict = {}
    queues: dict = {}

    def converged() -> bool:
        # A queue is ready before every node is counted in it: wait for the sums, not the first write.
        for name in expected:
            queue = _queue_ready(cluster, name)
            if not queue:
                return False
            (group,) = queue["spec"]["resourceGroups"]
            queues[name] = queue
            nominal[name] = (
                group["coveredResources"],
                [
                    (f["name"], harness.parse_quantity(f["resources"][0]["nominalQuota"]))
                    for f in group["flavors"]
                ],
            )
        return nominal == expected

    with contextlib.suppress(TimeoutError):
        harness.wait_for(converged, timeout=90, what="every queue's nominal quota")
    assert nominal == expected
    for queue in queues.values():
        assert queue["spec"]["stopPolicy"] == "None" and not queue["spec"].get("cohortName")
        assert queue["metadata"]["labels"]["resource.gpustack.ai/type"] == "instancetypes"
    # Gate 3 is referenced on accelerated queues once its AdmissionCheck is Active, never on CPU ones;
    # the ModelDeployment joint check on every queue once Active (devices-and-admission §9).
    wanted = {
        A10G_POOL: [constants.ADMISSION_CHECK_NODE_DEVICES, constants.ADMISSION_CHECK_JOINT],
        H100_POOL: [constants.ADMISSION_CHECK_NODE_DEVICES, constants.ADMISSION_CHECK_JOINT],
        CPU_POOL: [constants.ADMISSION_CHECK_JOINT],
    }
    for name, checks in wanted.items():
        harness.wait_for(
            lambda n=name, c=checks: queue_checks(cluster, n) == c,
            timeout=90,
            what=f"{name} referencing {checks}",
        )


def queue_checks(cluster: harness.ClusterInfo, name: str) -> list[str]:
    queue = get(cluster, "clusterqueues.kueue.x-k8s.io", name) or {}
    strategy = queue.get("spec", {}).get("admissionChecksStrategy", {})
    return [x["name"] for x in strategy.get("admissionChecks", [])]


def test_local_queues_in_every_tenant_namespace(cluster: harness.ClusterInfo, pools: dict) -> None:
    wanted = sorted(local_queue_name(q) for q in (A10G_POOL, H100_POOL, CPU_POOL))
    assert A10G_ENTRANCE in wanted
    for ns in [*TENANTS, "default"]:
        harness.wait_for(
            lambda n=ns: set(wanted) <= set(names(cluster, "localqueues.kueue.x-k8s.io", "-n", n)),
            timeout=60,
            what=f"LocalQueues in {ns}",
        )
    entrance = cluster.kubectl_json("get", "localqueues.kueue.x-k8s.io", A10G_ENTRANCE, "-n", TENANTS[0])
    assert entrance["spec"]["clusterQueue"] == A10G_POOL
    assert entrance["metadata"]["annotations"]["schedule.gpustack.ai/queue"] == A10G_POOL
    for system in ("kube-system", "kube-public", "kube-node-lease", "gpustack-system"):
        assert A10G_ENTRANCE not in names(cluster, "localqueues.kueue.x-k8s.io", "-n", system)


def _table(cluster: harness.ClusterInfo) -> dict[str, list[str]]:
    """``kubectl get instancetypes`` by name, the AGE column left out (it moves with the clock). AGE
    is the last column; it is dropped from the end of each row, as the ACCELERATOR column's value
    splits into four words and the header's positions do not line up with a row's words."""
    out = cluster.kubectl("get", "instancetypes").stdout.splitlines()
    assert not out or out[0].split()[-1] == "AGE", out[0]
    return {line.split()[0]: line.split()[:-1] for line in out}


def test_instance_types_show_the_four_views(cluster: harness.ClusterInfo, pools: dict) -> None:
    expected = {
        A10G_POOL: [
            A10G_POOL,
            A10G_ENTRANCE,
            "8/64Gi/100Gi",
            "4/4",
            "4/40",
            "100/400",
            "0/0",
            "64/64",
            "Active",
        ],
        H100_POOL: [
            H100_POOL,
            local_queue_name(H100_POOL),
            "12/192Gi/100Gi",
            "8/16",
            "8/160",
            "100/1600",
            "0/0",
            "64/128",
            "Active",
        ],
        CPU_POOL: [
            CPU_POOL,
            local_queue_name(CPU_POOL),
            "1/2Gi/100Gi",
            "0/0",
            "0/0",
            "0/0",
            "0/0",
            "64/192",
            "Active",
        ],
    }
    table = harness.wait_for(
        lambda: (t := _table(cluster)) and all(t.get(k) == v for k, v in expected.items()) and t,
        timeout=90,
        what="InstanceType columns",
    )
    assert table["NAME"] == [
        "NAME",
        "ENTRANCE",
        "UNIT(CPU/RAM)/STORAGE",
        "ACCELERATOR(EX/SH/SL/PT)",
        "CPU",
        "PHASE",
    ]
    a10g = cluster.kubectl_json("get", "instancetype", A10G_POOL)
    assert a10g["metadata"]["labels"][constants.LABEL_DERIVED_FROM_NODE] == "true"
    assert constants.FINALIZER_CONTROLLED in a10g["metadata"]["finalizers"]
    status = a10g["status"]
    assert status["detail"]["manufacturer"] == "nvidia" and status["detail"]["product"] == "NVIDIA A10G"
    assert status["accelerator"] == {"onceMaxRequest": "4", "remaining": "4", "capacity": "4"}
    assert status["acceleratorPartitioned"]["remainingProfiles"] == []


def test_node_counting_keys(cluster: harness.ClusterInfo, pools: dict) -> None:
    def keys() -> dict | None:
        capacity = cluster.kubectl_json("get", "node", A10G_NODE)["status"]["capacity"]
        return capacity if "nvidia.com/gpu.sliced.units" in capacity else None

    capacity = harness.wait_for(keys, timeout=60, what="A10G node counting keys")
    assert harness.parse_quantity(capacity["nvidia.com/gpu.sliced.units"]) == 4 * M
    assert harness.parse_quantity(capacity["nvidia.com/gpu.sliced.memory-percentage"]) == 400
    assert harness.parse_quantity(capacity["nvidia.com/gpu.sliced.memory-mib"]) == 4 * 24576
    assert harness.parse_quantity(capacity["nvidia.com/gpu.sliced.cores-percentage"]) == 4 * 128 * 100
    assert not any(".partitioned." in k for k in capacity)


def test_a_card_turning_unhealthy_moves_the_instance_type(cluster: harness.ClusterInfo, pools: dict) -> None:
    """The simulated hardware reports card 0 of one H100 node unhealthy (its profile edited, as a
    lost card or an Xid would): its device manager re-detects, the Devices ledger shows it, and the
    InstanceType stops counting the card — seen on a ``kubectl get -w``."""
    watch = subprocess.Popen(
        [str(cluster.kubectl_path), "--kubeconfig", str(cluster.kubeconfig), "get", "instancetypes", "-w"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cluster.env(),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(watch.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        # The watch prints the current list (its header first) once it is established.
        harness.wait_for(lambda: any(ln.startswith("NAME") for ln in lines), timeout=30, what="the watch")
        node = nodes.node(cluster, H100_A)
        assert node is not None
        node.profile.write_text(nodes.cards_profile(H100.product, 8, unhealthy=1))
        harness.wait_for(
            lambda: any(H100_POOL in ln and UNHEALTHY_SUMMARY in ln for ln in lines),
            timeout=60,
            what=f"the watch to show {UNHEALTHY_SUMMARY}",
        )
    finally:
        watch.terminate()
        watch.wait(timeout=10)
    status = cluster.kubectl_json("get", "instancetype", H100_POOL)["status"]
    assert status["acceleratorSummary"] == UNHEALTHY_SUMMARY
    assert status["acceleratorSliced"] == UNHEALTHY_SLICED
    (group,) = cluster.kubectl_json("get", "devices", H100_A)["spec"]["groups"]
    assert [row["status"]["unhealthy"] for row in group["accelerators"]] == [True] + [False] * 7


def test_a_whole_card_pod_on_the_a10g_entrance_is_admitted(cluster: harness.ClusterInfo, pools: dict) -> None:
    ns = TENANTS[0]
    harness.wait_for_default_service_account(cluster, ns)
    harness.wait_for(lambda: _queue_ready(cluster, A10G_POOL), timeout=60, what="A10G queue")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "whole-card",
            "namespace": ns,
            "labels": {constants.KUEUE_QUEUE_NAME: A10G_ENTRANCE},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    created = json.loads(cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(pod)).stdout)
    assert "kueue.x-k8s.io/admission" in [g["name"] for g in created["spec"].get("schedulingGates", [])]
    bound = harness.wait_for(
        lambda: (p := get(cluster, "pod", "whole-card", "-n", ns)) and p["spec"].get("nodeName") and p,
        timeout=90,
        what="the Pod admitted and bound",
    )
    assert not bound["spec"].get("schedulingGates")
    assert bound["spec"]["nodeName"] == A10G_NODE
    (workload,) = cluster.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", ns)["items"]
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == A10G_POOL
    (assignment,) = admission["podSetAssignments"]
    assert assignment["flavors"] == {"credits.gpustack.ai/nvidia": A10G_FLAVOR}
    assert harness.parse_quantity(assignment["resourceUsage"]["credits.gpustack.ai/nvidia"]) == M
    slices = assignment["topologyAssignment"]["slices"]
    assert json.dumps(slices).count(A10G_NODE) == 1


def _snapshot(cluster: harness.ClusterInfo) -> dict:
    out = {}
    for kind in (
        "resourceflavors.kueue.x-k8s.io",
        "topologies.kueue.x-k8s.io",
        "clusterqueues.kueue.x-k8s.io",
    ):
        items = cluster.kubectl_json("get", kind, "-l", "resource.gpustack.ai/type")["items"]
        out[kind] = {
            i["metadata"]["name"]: (i["metadata"]["uid"], json.dumps(i["spec"], sort_keys=True))
            for i in items
        }
    lqs = cluster.kubectl_json("get", "localqueues.kueue.x-k8s.io", "-A", "-l", "resource.gpustack.ai/type")[
        "items"
    ]
    out["localqueues"] = {
        f"{i['metadata']['namespace']}/{i['metadata']['name']}": (
            i["metadata"]["uid"],
            i["metadata"]["resourceVersion"],
        )
        for i in lqs
        if i["metadata"]["namespace"] in (*TENANTS, "default")  # other modules' namespaces come and go
    }
    types = cluster.kubectl_json("get", "instancetypes")["items"]
    out["instancetypes"] = {
        i["metadata"]["name"]: (i["metadata"]["uid"], i["status"]["acceleratorSummary"]) for i in types
    }
    return out


def test_restarted_controllers_converge_without_duplicates(cluster: harness.ClusterInfo, pools: dict) -> None:
    before = harness.wait_for(
        lambda: (s := _snapshot(cluster)) and len(s["instancetypes"]) == 3 and s,
        timeout=30,
        what="a settled snapshot",
    )
    pools["manager"].stop()
    pools["manager"] = restarted = start_controllers(cluster)
    harness.wait_for(restarted.settled, timeout=60, what="a full reconcile pass of the restarted controllers")
    after = _snapshot(cluster)
    assert after == before
    assert len(after["localqueues"]) == 3 * len([*TENANTS, "default"])


def test_admin_instance_type_gets_a_queue_and_tears_down(cluster: harness.ClusterInfo, pools: dict) -> None:
    admin = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceType",
        "metadata": {"name": f"a10g-12c128g-{SUFFIX}"},
        "spec": {
            "acceleratable": True,
            "acceleratorGroup": "nvidia-a10g",
            "generalGroup": "generic",
            "os": "linux",
            "arch": "amd64",
            "unitResources": {"cpu": "12", "ram": "128Gi"},
            "localStorage": "200Gi",
        },
    }
    empty = json.loads(json.dumps(admin))
    empty["metadata"]["name"] = f"l4-{SUFFIX}"
    empty["spec"]["acceleratorGroup"] = "nvidia-l4"
    cluster.apply([admin, empty])
    name, lonely = admin["metadata"]["name"], empty["metadata"]["name"]
    queue = harness.wait_for(lambda: _queue_ready(cluster, name), timeout=60, what="the admin type's queue")
    assert [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"]] == [A10G_FLAVOR]
    row = harness.wait_for(lambda: _table(cluster).get(name), timeout=60, what="the admin type's row")
    assert row[1:] == [
        local_queue_name(name),
        "12/128Gi/200Gi",
        "4/4",
        "4/40",
        "100/400",
        "0/0",
        "64/64",
        "Active",
    ]
    harness.wait_for(
        lambda: local_queue_name(name) in names(cluster, "localqueues.kueue.x-k8s.io", "-n", TENANTS[1]),
        timeout=60,
        what="its LocalQueue",
    )
    # A type no node serves: its queue is held without groups, marked, and the type is Inactive.
    held = harness.wait_for(
        lambda: get(cluster, "clusterqueues.kueue.x-k8s.io", lonely), timeout=60, what="held queue"
    )
    assert held["spec"]["stopPolicy"] == "Hold" and not held["spec"].get("resourceGroups")
    assert held["metadata"]["annotations"][constants.ANNOTATION_EMPTY_PLAN_HOLD] == "true"
    harness.wait_for(
        lambda: (_table(cluster).get(lonely) or [""])[-1] == "Inactive", timeout=60, what="Inactive"
    )
    # Teardown: the finalizer holds the type until its queue and LocalQueues are gone.
    cluster.kubectl("delete", "instancetype", name, lonely, "--wait=false")
    for it in (name, lonely):
        harness.wait_for(lambda i=it: get(cluster, "instancetype", i) is None, timeout=90, what=f"{it} gone")
        assert get(cluster, "clusterqueues.kueue.x-k8s.io", it) is None
    harness.wait_for(
        lambda: local_queue_name(name) not in names(cluster, "localqueues.kueue.x-k8s.io", "-n", TENANTS[1]),
        timeout=60,
        what="its LocalQueue gone",
    )


def test_the_last_node_leaving_drains_before_emptying_the_queue(
    cluster: harness.ClusterInfo, pools: dict
) -> None:
    # The whole-card Pod holds quota on the A10G queue; its only node leaves.
    assert (get(cluster, "pod", "whole-card", "-n", TENANTS[0]) or {}).get("spec", {}).get(
        "nodeName"
    ) == A10G_NODE
    nodes.remove_node(cluster, A10G_NODE)
    seen: list[tuple[str, bool]] = []

    def emptied() -> dict | None:
        queue = get(cluster, "clusterqueues.kueue.x-k8s.io", A10G_POOL)
        if queue is None:
            return None
        policy, groups = queue["spec"].get("stopPolicy", "None"), bool(queue["spec"].get("resourceGroups"))
        seen.append((policy, groups))
        return queue if not groups else None

    queue = harness.wait_for(emptied, timeout=120, interval=0.2, what="the A10G queue drained and emptied")
    # Never a queue without resource groups that admits (it would admit everything).
    assert all(policy != "None" for policy, groups in seen if not groups), seen
    assert queue["spec"]["stopPolicy"] == "HoldAndDrain"
    assert "topology.gpustack.ai/drain-plan-hold" in queue["metadata"]["annotations"]
    # The Pod of the gone node goes as an administrator removes it (kube-controller-manager's pod GC
    # would, after its fixed 40 s quarantine on a 20 s period: its timing, not the operator's).
    cluster.kubectl("delete", "pod", "whole-card", "-n", TENANTS[0], "--force", "--grace-period=0")
    assert harness.wait_for(
        lambda: get(cluster, "pod", "whole-card", "-n", TENANTS[0]) is None,
        timeout=60,
        what="the Pod of the gone node deleted",
    )
    harness.wait_for(
        lambda: (_table(cluster).get(A10G_POOL) or [""])[-1] == "Inactive", timeout=60, what="Inactive"
    )
    # The node comes back: the plan is restored and the queue admits again.
    start_node(cluster, A10G_NODE)
    restored = harness.wait_for(
        lambda: _queue_ready(cluster, A10G_POOL), timeout=90, what="the A10G queue restored"
    )
    assert restored["spec"]["stopPolicy"] == "None"
    assert "topology.gpustack.ai/drain-plan-hold" not in restored["metadata"].get("annotations", {})
    harness.wait_for(
        lambda: (_table(cluster).get(A10G_POOL) or [""])[-1] == "Active", timeout=60, what="Active"
    )


def test_a_node_leaving_shrinks_the_pool_and_its_ledger_goes(
    cluster: harness.ClusterInfo, pools: dict
) -> None:
    nodes.remove_node(cluster, H100_B)
    harness.wait_for(
        lambda: get(cluster, "devices", H100_B) is None, timeout=60, what="the ledger of the gone node"
    )
    flavor = harness.wait_for(
        lambda: (
            (f := get(cluster, "resourceflavors.kueue.x-k8s.io", H100_FLAVOR))
            and f["metadata"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.capacity"]
            == "8"
            and f
        ),
        timeout=60,
        what="the H100 flavor at one node",
    )
    assert flavor["spec"]["topologyName"] == TOPOLOGY
    queue = harness.wait_for(
        lambda: (
            (q := get(cluster, "clusterqueues.kueue.x-k8s.io", H100_POOL))
            and harness.parse_quantity(
                q["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
            )
            == 8 * M
            and q
        ),
        timeout=60,
        what="the H100 queue at 8 cards",
    )
    assert queue["spec"]["stopPolicy"] == "None"
    harness.wait_for(
        lambda: _table(cluster)[H100_POOL][3:7] == ONE_NODE_VIEWS,
        timeout=60,
        what="the H100 type at one node",
    )


def test_a_pool_of_two_cpu_models_gets_one_active_queue(cluster: harness.ClusterInfo, pools: dict) -> None:
    """A CPU-only node with its own CPU model (intel-6-143) joins the CPU pool whose nodes count
    their cores under amd-25-1: two flavors, one per general group, that no node shares — the
    queue plans both, stays Active and TopologyReady is not False (it was, before commit 956b1c9:
    the two selectors were read as overlapping and the last plan kept)."""
    name, model, cores = f"pools-cpu-intel-{SUFFIX}", "intel-6-143", 16
    model_flavor = f"gpustack--{model}-linux-amd64-{cores}c"
    # What the kubelet and nfd-worker would report: the cores, and a CPU (cpuid's vendor, family and
    # model, no brand string) with no PCI accelerator. The worker's NodeFeature, the gpustack-cpu-info
    # rule and nfd-master turn them into the node's labels.
    harness.create_fake_node(cluster, name, capacity={"cpu": str(cores)})
    cluster.apply(
        nodes.nfd_worker_features(name, "", cpu_vendor="Intel", cpu_family="6", cpu_id="143", cpu_name="")
    )
    try:
        harness.wait_for(
            lambda: get(cluster, "resourceflavors.kueue.x-k8s.io", model_flavor),
            timeout=60,
            what=f"the {model} flavor",
        )

        def planned() -> dict | None:
            queue = get(cluster, "clusterqueues.kueue.x-k8s.io", CPU_POOL)
            if not queue:
                return None
            flavors = [f["name"] for g in queue["spec"].get("resourceGroups") or [] for f in g["flavors"]]
            conditions = {x["type"]: x for x in queue.get("status", {}).get("conditions", [])}
            current = (
                conditions.get("Active", {}).get("observedGeneration") == queue["metadata"]["generation"]
            )
            return queue if {CPU_FLAVOR, model_flavor} <= set(flavors) and current else None

        try:
            queue = harness.wait_for(planned, timeout=90, what="the CPU queue planning both flavors")
        except TimeoutError as error:
            queue = get(cluster, "clusterqueues.kueue.x-k8s.io", CPU_POOL) or {}
            raise TimeoutError(f"{error}: {json.dumps(queue.get('status', {}).get('conditions'))}") from None
        (group,) = queue["spec"]["resourceGroups"]
        assert group["coveredResources"] == ["cpu"]
        quota = {
            f["name"]: harness.parse_quantity(f["resources"][0]["nominalQuota"]) for f in group["flavors"]
        }
        assert quota[model_flavor] == cores and quota[CPU_FLAVOR] > 0
        conditions = {x["type"]: x for x in queue["status"]["conditions"]}
        assert conditions["Active"]["status"] == "True", conditions
        assert queue["spec"]["stopPolicy"] == "None"

        def topology_ready() -> dict | None:
            q = get(cluster, "clusterqueues.kueue.x-k8s.io", CPU_POOL) or {}
            generation = (q.get("metadata") or {}).get("generation")
            for x in (q.get("status") or {}).get("conditions") or []:
                if x["type"] == "TopologyReady" and x.get("observedGeneration") == generation:
                    return x
            return None

        ready = harness.wait_for(topology_ready, timeout=60, what="TopologyReady for the queue's generation")
        assert ready["status"] != "False", ready
        harness.wait_for(
            lambda: (_table(cluster).get(CPU_POOL) or [""])[-1] == "Active", timeout=60, what="Active"
        )
    finally:
        harness.delete_fake_node(cluster, name)
        cluster.kubectl(
            "delete", "nodefeature", name, "-n", nodes.NFD_NAMESPACE, "--ignore-not-found", check=False
        )
        _wait_quietly(
            lambda: get(cluster, "resourceflavors.kueue.x-k8s.io", model_flavor) is None,
            f"the {model} flavor gone",
        )
