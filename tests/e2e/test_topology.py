"""Topology on the local control plane (issue 18 part B): sources, profiles, Kueue objects, the
required level and a live profile change, with the real NFD and Kueue.

Three kwok nodes with 8 × H100 each run a publish-only device manager (its ``Devices`` ledger and
node features) and get their NFD labels the way every node does; the test labels them only as a
cloud provider or an administrator would: ``topology.kubernetes.io/zone`` (two in zone ``za``, one
in ``zb``) and a rack key.  The whole worker runs as a process and everything is driven with
kubectl:

- a ``nodeLabels`` source over the nodes yields their profile (in the worker's NodeFeature, on the
  Node through NFD, mirrored onto ``Devices``), one Kueue Topology per key list, a profile-pinned
  topology-aware flavor and the queue's ``TopologyReady``;
- a deployment whose role requires the zone is admitted by Kueue into one zone, and a group no
  single zone can hold stays pending although the pool has the capacity;
- dropping the rack label changes the profile live: the source says first (a
  ``ProfileChangePlanned`` Event and ``status.profileChange``) that the pool's queue will drain and
  which Workload and Pods it evicts; the replacement flavor is created, the queue holds and drains
  while the running group reserves the old flavor (the InstanceType says "profile change in
  progress", never that no node serves it), swaps on the same ClusterQueue (name and UID kept),
  restores its stop policy, and the group is admitted again on the new flavor; the old flavor and
  Topology retire;
- with the Setting ``topology-profile-change-stop-policy=Hold``, putting the rack label back holds
  the queue instead: the source reports the group running on, the running group stays admitted on
  the old flavor (its Pods the same), the InstanceType reads "profile change in progress (…): held",
  and the swap on the same ClusterQueue follows once the group ends;
- a ConfigMap snapshot is published through NodeFeatures that NFD projects, a bad revision changes
  nothing and says which node, and deleting the source takes its labels away;
- a webhook source (a simulated HTTPS inventory with a bearer token) publishes the same way.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
import uuid
from pathlib import Path

import gpustack
import harness
import nodes
import pytest

from api import constants
from api.naming import topology_profile
from tests.e2e.objects import node_profiles, queue_flavors, setting
from tests.topology_inventory import Answer, Inventory, make_pki

pytestmark = pytest.mark.e2e

SUFFIX = uuid.uuid4().hex[:5]
NS = f"topo-{SUFFIX}"
SYSTEM = constants.SYSTEM_NAMESPACE
ZONE, RACK = "topology.kubernetes.io/zone", "topology.example.com/rack"
G_RACK = "topology.gpustack.ai/rack"
HOST = constants.LABEL_HOSTNAME
MARK = "topology-e2e"  # the label this module's source selects its nodes by
NODES = {
    f"topo-a1-{SUFFIX}": ("za", "r1"),
    f"topo-a2-{SUFFIX}": ("za", "r2"),
    f"topo-b1-{SUFFIX}": ("zb", "r3"),
}
A1, A2, B1 = NODES
SLOTS = {name: 10 + i for i, name in enumerate(NODES)}  # this module's device-manager ports
POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
GROUP = "nvidia-h100-80gb-hbm3"
RACKED = topology_profile([ZONE, RACK, HOST])
ZONED = topology_profile([ZONE, HOST])
HOSTNAME = topology_profile([HOST])
SOURCE = f"racks-{SUFFIX}"
STOP_SETTING = "topology-profile-change-stop-policy"
WAIT = 240


def kubectl_json(cluster, *args: str) -> dict:
    return cluster.kubectl_json(*args)


def apply(cluster, obj: dict) -> None:
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
    assert result.returncode == 0, result.stderr


def label(cluster, node: str, *pairs: str) -> None:
    cluster.kubectl("label", "node", node, "--overwrite", *pairs)


def labels_of(cluster, node: str) -> dict[str, str]:
    return kubectl_json(cluster, "get", "node", node)["metadata"].get("labels") or {}


def condition(obj: dict, kind: str) -> dict:
    return next((x for x in (obj.get("status") or {}).get("conditions") or [] if x["type"] == kind), {})


def node_labels_source(name: str = SOURCE, levels: list[str] | None = None) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "TopologySource",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {MARK: SUFFIX}},
            "levels": levels or [ZONE, RACK],
            "nodeLabels": {},
        },
    }


def profiles(cluster) -> dict[str, str | None]:
    return node_profiles(cluster, NODES)


def wait_profiles(cluster, want: str) -> None:
    try:
        harness.wait_for(
            lambda: all(p == want for p in profiles(cluster).values()),
            timeout=WAIT,
            what=f"every node on {want}",
        )
    except TimeoutError as error:
        raise TimeoutError(f"{error}: {profiles(cluster)}") from None


def h100_flavors(cluster) -> dict[str, dict]:
    items = kubectl_json(cluster, "get", "resourceflavors.kueue.x-k8s.io")["items"]
    return {
        f["metadata"]["name"]: f
        for f in items
        if f["metadata"].get("labels", {}).get(constants.label_accelerator_group(GROUP)) == "true"
    }


def flavor_of(cluster, profile: str) -> dict | None:
    for flavor in h100_flavors(cluster).values():
        if flavor["spec"]["nodeLabels"].get(constants.LABEL_TOPOLOGY_PROFILE) == profile:
            return flavor
    return None


def queue(cluster) -> dict:
    return kubectl_json(cluster, "get", "clusterqueues.kueue.x-k8s.io", POOL)


def events_of(cluster, kind: str, name: str, namespace: str = "default") -> list[dict]:
    return kubectl_json(
        cluster,
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.name={name},involvedObject.kind={kind}",
    )["items"]


@pytest.fixture(scope="module")
def topo(cluster: harness.ClusterInfo):
    op = gpustack.install(cluster)
    gpustack.start_worker(cluster, op)  # webhooks and every registered controller
    started: list[nodes.Node] = []
    try:
        gpustack.ensure_namespace(cluster, NS)
        harness.wait_for_default_service_account(cluster, NS)
        for name, (zone, rack) in NODES.items():
            started.append(nodes.start_node(cluster, name, "h100-8.yaml", slot=SLOTS[name], real=False))
            # What the cloud provider (the zone) and the administrator (the rack, the mark) put on it.
            label(cluster, name, f"{ZONE}={zone}", f"{RACK}={rack}", f"{MARK}={SUFFIX}")
        yield cluster, op
    finally:
        cluster.kubectl("delete", "modeldeployments", "--all", "-n", NS, "--wait=false", check=False)
        with contextlib.suppress(TimeoutError):
            harness.wait_for(
                lambda: not kubectl_json(cluster, "get", "modeldeployments", "-n", NS)["items"],
                timeout=WAIT,
                what="deployments gone",
            )
        cluster.kubectl(
            "delete", "topologysources", "-l", f"{MARK}={SUFFIX}", "--ignore-not-found", check=False
        )
        for name in (SOURCE, f"inv-{SUFFIX}", f"svc-{SUFFIX}"):
            cluster.kubectl("delete", "topologysource", name, "--ignore-not-found", check=False)
        for kind, name in (
            ("configmap", f"inv-{SUFFIX}"),
            ("configmap", f"ca-{SUFFIX}"),
            ("secret", f"token-{SUFFIX}"),
        ):
            cluster.kubectl("delete", kind, name, "-n", SYSTEM, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        nodes.remove_nodes(cluster, started)
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)


# --- sources, profiles and Kueue objects ----------------------------------------------------------


def test_a_node_labels_source_yields_profiles_topologies_and_pinned_flavors(topo) -> None:
    cluster, _ = topo
    apply(cluster, node_labels_source())
    wait_profiles(cluster, RACKED)
    source = kubectl_json(cluster, "get", "topologysource", SOURCE)
    assert condition(source, "Ready")["status"] == "True" and condition(source, "Valid")["status"] == "True"
    assert condition(source, "OwnershipConflict")["status"] == "False"
    assert source["status"]["sourceKind"] == "NodeLabels" and source["status"]["selectedNodes"] == 3
    columns = cluster.kubectl("get", "toposrc", SOURCE).stdout.splitlines()
    assert columns[0].split() == ["NAME", "KIND", "REVISION", "READY", "AGE"]
    assert columns[1].split()[1:4] == ["NodeLabels", source["status"]["lastSuccessfulRevision"], "True"]

    # The profile is the worker NodeFeature's, projected by NFD, and mirrored onto Devices.
    feature = kubectl_json(cluster, "get", "nodefeature", f"{A1}-gpustack-worker", "-n", SYSTEM)
    assert feature["spec"]["labels"][constants.LABEL_TOPOLOGY_PROFILE] == RACKED
    harness.wait_for(
        lambda: all(
            kubectl_json(cluster, "get", "devices", n)["metadata"]["labels"].get(
                constants.LABEL_TOPOLOGY_PROFILE
            )
            == RACKED
            for n in NODES
        ),
        timeout=WAIT,
        what="the profile on the Devices ledgers",
    )
    # The source never wrote a label: the rack key stays what the administrator set.
    assert labels_of(cluster, A2)[RACK] == "r2"

    topology = harness.wait_for(
        lambda: kubectl_json(cluster, "get", "topologies.kueue.x-k8s.io", f"gpustack-{RACKED}"),
        timeout=WAIT,
        what="the Topology of the profile",
    )
    assert topology["spec"]["levels"] == [{"nodeLabel": ZONE}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]
    # The flavor appears with the first node of the profile; its capacity then counts all three.
    capacity = f"{constants.label_accelerator_group(GROUP)}.capacity"
    flavor = harness.wait_for(
        lambda: (f := flavor_of(cluster, RACKED)) and f["metadata"]["labels"].get(capacity) == "24" and f,
        timeout=WAIT,
        what="the racked H100 flavor counting the 24 cards of its three nodes",
    )
    assert flavor["spec"]["topologyName"] == f"gpustack-{RACKED}"
    assert flavor["metadata"]["name"].endswith(f"-8d-{RACKED}")

    # The profile change drains the queue, swaps its plan, then restores its policy: the racked
    # flavor can be listed (and TopologyReady) a moment before the policy is None again.
    def planned():
        q = queue(cluster)
        names = [f["name"] for g in q["spec"].get("resourceGroups") or [] for f in g["flavors"]]
        return (
            q
            if flavor["metadata"]["name"] in names
            and condition(q, "TopologyReady").get("status") == "True"
            and q["spec"].get("stopPolicy") == "None"
            else None
        )

    harness.wait_for(
        planned,
        timeout=WAIT,
        what="the H100 queue on the racked flavor, TopologyReady, its policy None again",
    )


def deployment(name: str, size: int, level: str | None = ZONE) -> dict:
    role = {
        "name": "server",
        "replicas": 1,
        "size": size,
        "instanceType": POOL,
        "resources": {"accelerator": 8},
    }
    if level:
        role["topology"] = {"requiredLevel": level}
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
            "engine": {"name": "vLLM", "version": "0.29.0"},
            "roles": [role],
        },
    }


def workloads_of(cluster, name: str) -> list[dict]:
    pods = kubectl_json(cluster, "get", "pods", "-n", NS, "-l", f"{constants.LABEL_APP_INSTANCE}={name}")[
        "items"
    ]
    groups = {p["metadata"]["labels"][constants.KUEUE_POD_GROUP_NAME] for p in pods}
    return [
        w
        for w in kubectl_json(cluster, "get", "workloads.kueue.x-k8s.io", "-n", NS)["items"]
        if w["metadata"]["name"] in groups
    ]


def admitted(cluster, name: str) -> dict | None:
    for workload in workloads_of(cluster, name):
        if condition(workload, "Admitted").get("status") == "True":
            return workload
    return None


def placed(cluster, name: str, count: int) -> list[dict] | None:
    pods = kubectl_json(cluster, "get", "pods", "-n", NS, "-l", f"{constants.LABEL_APP_INSTANCE}={name}")[
        "items"
    ]
    bound = [p for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]
    return bound if len(bound) == count else None


def start_group(cluster, name: str, members: int) -> list[dict]:
    """Apply a zone-requiring deployment and wait for its members to run (the Workloads' status
    in the failure when they do not)."""
    apply(cluster, deployment(name, members))
    try:
        return harness.wait_for(
            lambda: placed(cluster, name, members), timeout=WAIT, what="every member running"
        )
    except TimeoutError as error:
        statuses = [w.get("status") for w in workloads_of(cluster, name)]
        raise TimeoutError(f"{error}: {json.dumps(statuses)[:3000]}") from None


def wait_swapped(cluster, flavor: str) -> dict:
    """The pool's queue once it lists only ``flavor`` and its stop policy is back to None."""

    def swapped():
        q = queue(cluster)
        return (
            q if queue_flavors(cluster, POOL) == [flavor] and q["spec"].get("stopPolicy") == "None" else None
        )

    try:
        return harness.wait_for(
            swapped, timeout=WAIT, what="the queue swapped to the replacement and restored"
        )
    except TimeoutError as error:
        raise TimeoutError(f"{error}: {json.dumps(swap_state(cluster))[:6000]}") from None


def swap_state(cluster) -> dict:
    """What a stalled swap waits on: the queue's stop policy, annotations and Kueue's counts, and
    every Workload of the cluster with its queue, conditions and flavors."""
    q = queue(cluster)
    status = q.get("status") or {}
    workloads = []
    for w in kubectl_json(cluster, "get", "workloads.kueue.x-k8s.io", "-A")["items"]:
        admission = (w.get("status") or {}).get("admission") or {}
        workloads.append(
            {
                "name": f"{w['metadata']['namespace']}/{w['metadata']['name']}",
                "queue": w["spec"].get("queueName"),
                "conditions": {
                    c["type"]: f"{c['status']}/{c.get('reason')}"
                    for c in (w.get("status") or {}).get("conditions") or []
                },
                "flavors": [ps.get("flavors") for ps in admission.get("podSetAssignments") or []],
            }
        )
    return {
        "stopPolicy": q["spec"].get("stopPolicy"),
        "flavors": queue_flavors(cluster, POOL),
        "annotations": q["metadata"].get("annotations"),
        "generation": q["metadata"].get("generation"),
        "counts": {k: status.get(k) for k in ("reservingWorkloads", "admittedWorkloads", "pendingWorkloads")},
        "conditions": status.get("conditions"),
        "flavorsReservation": status.get("flavorsReservation"),
        "workloads": workloads,
    }


class Watch:
    """Polls, until stopped, what a profile change shows: the source's ``status.profileChange``,
    the pool queue's flavors and stop policy, and the InstanceType's phase and message, keeping
    every distinct snapshot in order (a drain on kwok nodes can be over within a second)."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.seen: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _snapshot(self) -> dict:
        source = kubectl_json(self.cluster, "get", "topologysource", SOURCE)
        q = queue(self.cluster)
        it = kubectl_json(self.cluster, "get", "instancetype", POOL).get("status") or {}
        return {
            "report": (source.get("status") or {}).get("profileChange"),
            "flavors": [f["name"] for g in q["spec"].get("resourceGroups") or [] for f in g["flavors"]],
            "stopPolicy": q["spec"].get("stopPolicy"),
            "phase": it.get("phase"),
            "message": it.get("phaseMessage", ""),
        }

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                snap = self._snapshot()
                if not self.seen or self.seen[-1] != snap:
                    self.seen.append(snap)
            time.sleep(0.05)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def first(self, what) -> int:
        """The index of the first snapshot ``what`` holds for (len(seen) when none)."""
        return next((i for i, snap in enumerate(self.seen) if what(snap)), len(self.seen))


def names_workload(report: dict | None, workload: dict) -> bool:
    name = f"Workload {NS}/{workload['metadata']['name']}"
    return bool(report) and name in (report.get("names") or [])


def test_a_required_zone_admits_each_group_into_one_zone(topo) -> None:
    cluster, _ = topo
    # Three members of 8 cards need three nodes of one zone: none has them, although the pool's
    # quota (24 cards) and its three nodes would hold the group anywhere else.
    apply(cluster, deployment("too-wide", 3))

    def refused():
        for workload in workloads_of(cluster, "too-wide"):
            reserved = condition(workload, "QuotaReserved")
            if reserved.get("status") == "False" and "topolog" in reserved.get("message", "").lower():
                return reserved
        return None

    try:
        reserved = harness.wait_for(refused, timeout=WAIT, what="the three-member group pending on topology")
    except TimeoutError as error:
        statuses = [w.get("status") for w in workloads_of(cluster, "too-wide")]
        raise TimeoutError(f"{error}: {json.dumps(statuses)[:3000]}") from None
    assert admitted(cluster, "too-wide") is None, reserved
    cluster.kubectl("delete", "modeldeployment", "too-wide", "-n", NS, "--wait=true", timeout=WAIT)

    pods = start_group(cluster, "zoned", 2)
    for pod in pods:
        assert pod["metadata"]["annotations"][constants.KUEUE_PODSET_REQUIRED_TOPOLOGY] == ZONE
    # Each member takes all 8 cards of a node: two nodes, and the only zone with two is za.
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted([A1, A2])
    (workload,) = workloads_of(cluster, "zoned")
    assert workload["spec"]["podSets"][0]["topologyRequest"]["required"] == ZONE
    flavors = workload["status"]["admission"]["podSetAssignments"][0]["flavors"]
    assert set(flavors.values()) == {flavor_of(cluster, RACKED)["metadata"]["name"]}


def test_a_live_profile_change_drains_and_swaps_on_the_same_queue(topo) -> None:
    cluster, _ = topo
    old = flavor_of(cluster, RACKED)["metadata"]["name"]
    before = queue(cluster)
    assert old in queue_flavors(cluster, POOL)
    assert admitted(cluster, "zoned") is not None  # a running group reserves the old flavor
    assert int(before["status"].get("reservingWorkloads") or 0) >= 1

    group = admitted(cluster, "zoned")
    pods = sorted(p["metadata"]["name"] for p in placed(cluster, "zoned", 2) or [])

    # The administrator retires the rack level: every node's key list, so its profile, changes.
    with Watch(cluster) as watch:
        for name in NODES:
            cluster.kubectl("label", "node", name, f"{RACK}-")
        wait_profiles(cluster, ZONED)
        new = harness.wait_for(lambda: flavor_of(cluster, ZONED), timeout=WAIT, what="the replacement flavor")
        assert new["spec"]["topologyName"] == f"gpustack-{ZONED}"
        after = wait_swapped(cluster, new["metadata"]["name"])
        harness.wait_for(
            lambda: watch.seen and watch.seen[-1]["report"] is None, timeout=WAIT, what="the report cleared"
        )
    seen = watch.seen
    # The source named the group, its Pods and the drain before the queue held or swapped.
    told = watch.first(lambda snap: names_workload(snap["report"], group))
    held = watch.first(lambda snap: snap["stopPolicy"] != "None" or old not in snap["flavors"])
    assert told < len(seen) and told <= held, json.dumps(seen)[:6000]
    report = seen[told]["report"]
    # (The CPU pool's queue may be listed too: until Kueue reports a generation, a queue may hold.)
    assert report["stopPolicy"] == "HoldAndDrain" and POOL in report["clusterQueues"], report
    assert report["profiles"] == [f"{RACKED} -> {ZONED}"] and report["workloads"] >= 1, report
    assert all(f"Pod {NS}/{p}" in report["names"] for p in pods), (report, pods)
    # (One Event, or another as the report grew: the other nodes moved, another queue joined.)
    planned = [
        e
        for e in events_of(cluster, "TopologySource", SOURCE)
        if e["reason"] == "ProfileChangePlanned" and f"{NS}/{group['metadata']['name']}" in e["message"]
    ]
    assert planned, events_of(cluster, "TopologySource", SOURCE)
    for event in planned:
        assert event["type"] == "Warning", event
        assert "drain (HoldAndDrain) before the swap" in event["message"], event
    assert "ProfileChangeComplete" in [e["reason"] for e in events_of(cluster, "TopologySource", SOURCE)]
    # While it drained the InstanceType said why; never that no node serves the pool.
    during = [snap["message"] for snap in seen if snap["phase"] != "Active"]
    assert during, seen  # the drain lasts while Kueue evicts the group's Pods
    assert all(m.startswith(f"profile change in progress ({RACKED} -> {ZONED})") for m in during), during
    assert not any("no node serves" in snap["message"] for snap in seen), seen
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # the same ClusterQueue
    assert constants.ANNOTATION_DRAIN_PLAN_HOLD not in after["metadata"].get("annotations", {})
    reasons = [e["reason"] for e in events_of(cluster, "ClusterQueue", POOL)]
    assert "Draining" in reasons and "Restored" in reasons, reasons
    assert "Retiring" in [e["reason"] for e in events_of(cluster, "ResourceFlavor", old)]

    # Kueue evicted the group; it is admitted again, now on the replacement flavor.
    def readmitted():
        workload = admitted(cluster, "zoned")
        if workload is None:
            return None
        flavors = set(workload["status"]["admission"]["podSetAssignments"][0]["flavors"].values())
        return workload if flavors == {new["metadata"]["name"]} else None

    harness.wait_for(readmitted, timeout=WAIT, what="the group admitted again on the replacement flavor")
    pods = harness.wait_for(
        lambda: placed(cluster, "zoned", 2), timeout=WAIT, what="both members running again"
    )
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted([A1, A2])
    # The old flavor and its Topology retire once nothing lists them.
    harness.wait_for(lambda: old not in h100_flavors(cluster), timeout=WAIT, what="the old flavor retired")
    harness.wait_for(
        lambda: (
            cluster.kubectl("get", "topologies.kueue.x-k8s.io", f"gpustack-{RACKED}", check=False).returncode
            != 0
        ),
        timeout=WAIT,
        what="the old Topology retired",
    )
    cluster.kubectl("delete", "modeldeployment", "zoned", "-n", NS, "--wait=true", timeout=WAIT)


def test_with_the_hold_setting_a_profile_change_keeps_the_running_group_until_it_ends(topo) -> None:
    cluster, _ = topo
    old = flavor_of(cluster, ZONED)["metadata"]["name"]
    before = queue(cluster)
    assert queue_flavors(cluster, POOL) == [old] and before["spec"].get("stopPolicy") == "None"
    apply(cluster, setting(STOP_SETTING, "Hold"))
    try:
        pods = start_group(cluster, "held", 2)
        uids = sorted(p["metadata"]["uid"] for p in pods)
        workload = admitted(cluster, "held")
        assert workload is not None
        assert set(workload["status"]["admission"]["podSetAssignments"][0]["flavors"].values()) == {old}

        # The administrator brings the rack level back: the profile changes live again; the source
        # says first that the queue holds and the group runs on (nothing evicted or stopped).
        for name, (_, rack) in NODES.items():
            label(cluster, name, f"{RACK}={rack}")
        report = harness.wait_for(
            lambda: (
                (
                    r := (kubectl_json(cluster, "get", "topologysource", SOURCE).get("status") or {}).get(
                        "profileChange"
                    )
                )
                and names_workload(r, workload)
                and r
            ),
            timeout=WAIT,
            what="the source's report naming the running group",
        )
        assert report["stopPolicy"] == "Hold" and report["instances"] == 0, report
        # One event per new thing the report names: as the nodes are relabelled one by one, one
        # change can be told in more than one event; under Hold none evicts or stops anything.
        planned = [
            e
            for e in events_of(cluster, "TopologySource", SOURCE)
            if e["reason"] == "ProfileChangePlanned" and "(Hold)" in e["message"]
        ]
        assert planned, events_of(cluster, "TopologySource", SOURCE)
        for event in planned:
            assert event["type"] == "Normal" and "evicts" not in event["message"], event
        wait_profiles(cluster, RACKED)
        new = harness.wait_for(lambda: flavor_of(cluster, RACKED), timeout=WAIT, what="the replacement")
        assert new["metadata"]["name"] != old

        def held():
            q = queue(cluster)
            generation = q["metadata"].get("generation")
            active = condition(q, "Active")
            return (
                q
                if q["spec"].get("stopPolicy") == "Hold"
                and constants.ANNOTATION_DRAIN_PLAN_HOLD in q["metadata"].get("annotations", {})
                and active.get("observedGeneration") == generation  # Kueue has acted on the hold
                else None
            )

        q = harness.wait_for(held, timeout=WAIT, what="the queue held (Hold) and Kueue reporting it")
        assert q["metadata"]["uid"] == before["metadata"]["uid"]
        assert q["metadata"]["annotations"][constants.ANNOTATION_DRAIN_PLAN_HOLD] == "None"
        assert condition(q, "Active")["status"] == "False"  # nothing new is admitted
        # The old flavor stays listed while the group runs (the replacement may already be listed
        # beside it: it was added in place before the old one was marked retiring).
        assert old in queue_flavors(cluster, POOL)
        assert int(q["status"].get("reservingWorkloads") or 0) >= 1

        def not_evicted() -> None:
            """The same workload stays admitted on the old flavor, the same Pods run."""
            (workload,) = workloads_of(cluster, "held")
            assert condition(workload, "Admitted").get("status") == "True", workload.get("status")
            assert condition(workload, "Evicted").get("status") != "True", workload.get("status")
            assigned = workload["status"]["admission"]["podSetAssignments"][0]["flavors"]
            assert set(assigned.values()) == {old}
            running = placed(cluster, "held", 2)
            assert running is not None and sorted(p["metadata"]["uid"] for p in running) == uids

        not_evicted()
        drain = [e for e in events_of(cluster, "ClusterQueue", POOL) if e["reason"] == "Draining"]
        assert any("Hold" in e["message"] and "HoldAndDrain" not in e["message"] for e in drain), drain
        # The InstanceType reads Draining, not Inactive (which would stop its Instances), and why.
        status = harness.wait_for(
            lambda: (
                (st := kubectl_json(cluster, "get", "instancetype", POOL).get("status") or {}).get("phase")
                == constants.PHASE_DRAINING
                and st
            ),
            timeout=WAIT,
            what="the InstanceType Draining",
        )
        assert status["phaseMessage"].startswith(f"profile change in progress ({ZONED} -> {RACKED}): held"), (
            status
        )
        not_evicted()
        assert old in queue_flavors(cluster, POOL)

        # The group ends: the plan swaps to the replacement on the same queue and the policy returns.
        cluster.kubectl("delete", "modeldeployment", "held", "-n", NS, "--wait=true", timeout=WAIT)

        after = wait_swapped(cluster, new["metadata"]["name"])
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert constants.ANNOTATION_DRAIN_PLAN_HOLD not in after["metadata"].get("annotations", {})
        harness.wait_for(
            lambda: old not in h100_flavors(cluster), timeout=WAIT, what="the old flavor retired"
        )
    finally:
        apply(cluster, setting(STOP_SETTING, "HoldAndDrain"))
        cluster.kubectl(
            "delete", "modeldeployment", "held", "-n", NS, "--ignore-not-found", "--wait=true", check=False
        )


# --- snapshot arms --------------------------------------------------------------------------------


def snapshot(nodes_: dict, revision: str) -> str:
    return json.dumps({"apiVersion": "topology.gpustack.ai/v1alpha1", "revision": revision, "nodes": nodes_})


def published(cluster, uid: str) -> dict[str, dict]:
    items = kubectl_json(
        cluster, "get", "nodefeatures", "-n", SYSTEM, "-l", f"{constants.LABEL_TOPOLOGY_SOURCE_UID}={uid}"
    )["items"]
    return {f["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"]: f["spec"]["labels"] for f in items}


def test_a_config_map_snapshot_is_published_through_node_features(topo) -> None:
    cluster, _ = topo
    cluster.kubectl("delete", "topologysource", SOURCE, "--wait=true")
    name = f"inv-{SUFFIX}"
    inventory = {A1: {ZONE: "za", G_RACK: "ra"}, A2: {G_RACK: "ra"}, B1: {G_RACK: "rb"}}
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": SYSTEM},
            "data": {"snapshot.yaml": snapshot(inventory, "inv-1")},
        },
    )
    apply(
        cluster,
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "TopologySource",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"matchLabels": {MARK: SUFFIX}},
                "levels": [ZONE, G_RACK],
                "configMap": {
                    "configMapRef": {"namespace": SYSTEM, "name": name},
                    "key": "snapshot.yaml",
                    "maxStaleness": "10m",
                },
            },
        },
    )
    uid = kubectl_json(cluster, "get", "topologysource", name)["metadata"]["uid"]
    harness.wait_for(
        lambda: published(cluster, uid) == {n: {G_RACK: v[G_RACK]} for n, v in inventory.items()},
        timeout=WAIT,
        what="one NodeFeature per node",
    )
    harness.wait_for(
        lambda: labels_of(cluster, B1).get(G_RACK) == "rb", timeout=WAIT, what="NFD projecting the rack"
    )
    wait_profiles(cluster, topology_profile([ZONE, G_RACK, HOST]))
    assert ZONE not in published(cluster, uid)[A1]  # the standard zone is a read-only parent
    status = kubectl_json(cluster, "get", "topologysource", name)["status"]
    assert status["sourceKind"] == "ConfigMap" and status["lastSuccessfulRevision"] == "inv-1"

    # A revision naming an unknown node changes nothing and says which node.
    bad = {**inventory, "no-such-node": {G_RACK: "rz"}, A1: {G_RACK: "moved"}}
    cluster.kubectl(
        "patch",
        "configmap",
        name,
        "-n",
        SYSTEM,
        "--type=merge",
        "-p",
        json.dumps({"data": {"snapshot.yaml": snapshot(bad, "inv-2")}}),
    )

    def rejected():
        source = kubectl_json(cluster, "get", "topologysource", name)
        valid = condition(source, "Valid")
        return (
            source if valid.get("status") == "False" and "no-such-node" in valid.get("message", "") else None
        )

    source = harness.wait_for(rejected, timeout=WAIT, what="the bad revision rejected")
    assert (
        condition(source, "Ready")["status"] == "True"
        and source["status"]["lastSuccessfulRevision"] == "inv-1"
    )
    assert published(cluster, uid)[A1] == {G_RACK: "ra"} and labels_of(cluster, A1)[G_RACK] == "ra"

    # Deleting the source removes its NodeFeatures, so NFD removes the labels.
    cluster.kubectl("delete", "topologysource", name, "--wait=true")
    harness.wait_for(lambda: not published(cluster, uid), timeout=WAIT, what="the NodeFeatures gone")
    harness.wait_for(lambda: G_RACK not in labels_of(cluster, A1), timeout=WAIT, what="the rack label gone")
    wait_profiles(cluster, HOSTNAME)


def test_a_webhook_snapshot_with_a_bearer_token(topo, tmp_path: Path) -> None:
    cluster, _ = topo
    pki = make_pki()
    name = f"svc-{SUFFIX}"
    with Inventory(pki, tmp_path, token="s3cret") as server:
        server.answer = Answer(body=snapshot({A1: {G_RACK: "w1"}, A2: {G_RACK: "w1"}}, "svc-1").encode())
        apply(
            cluster,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"ca-{SUFFIX}", "namespace": SYSTEM},
                "data": {"ca.crt": pki.ca.decode()},
            },
        )
        apply(
            cluster,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"token-{SUFFIX}", "namespace": SYSTEM},
                "data": {"token": base64.b64encode(b"s3cret").decode()},
            },
        )
        apply(
            cluster,
            {
                "apiVersion": "worker.gpustack.ai/v1",
                "kind": "TopologySource",
                "metadata": {"name": name},
                "spec": {
                    "nodeSelector": {"matchLabels": {MARK: SUFFIX}},
                    "levels": [G_RACK],
                    "webhook": {
                        "url": server.url,
                        "pollInterval": "2s",
                        "timeout": "2s",
                        "maxStaleness": "1h",
                        "caBundleConfigMapRef": {"namespace": SYSTEM, "name": f"ca-{SUFFIX}"},
                        "bearerTokenSecretRef": {"namespace": SYSTEM, "name": f"token-{SUFFIX}"},
                    },
                },
            },
        )
        uid = kubectl_json(cluster, "get", "topologysource", name)["metadata"]["uid"]
        harness.wait_for(
            lambda: published(cluster, uid) == {A1: {G_RACK: "w1"}, A2: {G_RACK: "w1"}},
            timeout=WAIT,
            what="the webhook's snapshot published",
        )
        assert server.requests[0]["Authorization"] == "Bearer s3cret"
        # A redirect is a failed read: the last valid set stays (maxStaleness is an hour).
        server.answer = Answer(status=302, headers={"Location": "https://elsewhere.invalid/"})

        def failing():
            source = kubectl_json(cluster, "get", "topologysource", name)
            return source if "redirect" in condition(source, "Valid").get("message", "") else None

        source = harness.wait_for(failing, timeout=WAIT, what="the redirect reported")
        assert condition(source, "Ready")["reason"] == "ServingLastValid"
        assert published(cluster, uid) == {A1: {G_RACK: "w1"}, A2: {G_RACK: "w1"}}
        cluster.kubectl("delete", "topologysource", name, "--wait=true")
        harness.wait_for(lambda: not published(cluster, uid), timeout=WAIT, what="the NodeFeatures gone")
