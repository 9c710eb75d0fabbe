"""Gate 5 on real kubelet nodes: the device manager discovers simulated cards, publishes the
``Devices`` ledger and node features (nfd-master turns them into labels), and the kubelet calls its
device plugins — whole, shared, sliced and partitioned Pods through the queue entrance pass all five
gates and the fake runtime records the env the plugin handed each container; refusals surface as
``UnexpectedAdmissionError``; a kubelet restart re-registers without double allocation; a deleted
Pod frees its card in the ledger and in the InstanceType status.  A partitioned Pod is handed its
own MIG device, created at the reserved placement and destroyed when the Pod goes; an agent killed
in the middle of allocations loses no ledger entry and grants no card twice once restarted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import nodes
import pytest
import yaml

from api import allocation, constants
from nodeplugins.devicemanager import tokens
from nodeplugins.devicemanager.backends import instances_file
from tests.e2e.objects import requesting, wait_for_entrance

from .conftest import ensure_namespace, gpustack, harness

pytestmark = pytest.mark.e2e

H100 = "gpu-sim-h100-0"
A10G = "gpu-sim-a10g-0"
POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
GROUP = "nvidia-h100-80gb-hbm3"
NS = "gate5"
BASE = "nvidia.com/gpu"
# The resources the node's plugins register, each published by the kubelet when it registers.
PLUGIN_RESOURCES = (
    BASE,
    f"{BASE}.shared",
    f"{BASE}.sliced",
    f"{BASE}.partitioned",
    "device.gpustack.ai/nvidia.visibility",
)
FABRIC_UUID = "5b0e112233445566778899aabbccddef"


@pytest.fixture(scope="module")
def gate5(cluster):
    op = gpustack.install(cluster)
    gpustack.start_worker(cluster, op)
    started = []
    try:
        h100 = nodes.start_node(cluster, H100, "h100-8-mig2.yaml", slot=0)
        started.append(h100)
        a10g = nodes.start_node(cluster, A10G, "a10g-4.yaml", slot=1)
        started.append(a10g)
        ensure_namespace(cluster, NS)
        entrance = wait_for_entrance(cluster, POOL, NS, timeout=120, what="the H100 InstanceType's entrance")
        yield {"op": op, "entrance": entrance, "h100": h100, "a10g": a10g}
    finally:
        harness.delete_namespace(cluster, NS, timeout=180)
        for node in started:
            nodes.stop_node(node)
            cluster.kubectl("delete", "node", node.name, "--ignore-not-found", check=False)
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)


def pod(
    name: str,
    limits: dict[str, str],
    *,
    queue: str | None = None,
    node: str | None = None,
    exit_code: int | None = None,
) -> dict:
    container = requesting(limits)
    if exit_code is not None:
        container["env"] = [{"name": "CRI_FAKE_EXIT_CODE", "value": str(exit_code)}]
    body: dict = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {constants.KUEUE_QUEUE_NAME: queue} if queue else {},
        },
        "spec": {"restartPolicy": "Never", "containers": [container], "terminationGracePeriodSeconds": 0},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def create(cluster, body: dict) -> None:
    cluster.kubectl("create", "-f", "-", input=json.dumps(body))


@pytest.fixture
def cleanup(cluster):
    """Pods a test created, deleted after it (the node's cards are few: each test starts on a free node)."""
    names: list[str] = []
    yield names
    for name in names:
        cluster.kubectl(
            "delete", "pod", name, "-n", NS, "--ignore-not-found", "--wait=true", timeout=120, check=False
        )


def get(cluster, name: str) -> dict:
    return cluster.kubectl_json("get", "pod", name, "-n", NS)


def running(cluster, name: str) -> dict | None:
    obj = get(cluster, name)
    return obj if (obj.get("status") or {}).get("phase") == "Running" else None


def record_of(cluster, name: str) -> dict:
    return allocation.record_of(get(cluster, name))


def container_env(node: nodes.Node, pod_name: str) -> dict[str, str]:
    entries = [r for r in node.containers() if r["podName"] == pod_name and r["podNamespace"] == NS]
    assert entries, f"the fake runtime recorded no container of {pod_name}"
    return {kv["key"]: kv["value"] for kv in entries[-1]["env"]}


def ledger(cluster, node: str) -> dict[str, dict]:
    devices = cluster.kubectl_json("get", "devices", node)
    return {row["id"]: row for g in devices.get("status", {}).get("groups", []) for row in g["accelerators"]}


def cards_of(record: dict, container: str = "main") -> list[str]:
    return [a["id"] for g in record.get(container, []) for a in g["accelerators"]]


def gpu_instances(node: nodes.Node, card: str) -> list[dict]:
    """The simulated card's live GPU instances (the hardware's state, which the test only reads)."""
    path = instances_file(node.profile)
    state = json.loads(path.read_text()) if path.exists() else {}
    return (state.get("cards") or {}).get(card, [])


def marker_of(node: nodes.Node, pod_obj: dict, container: str = "main") -> Path:
    return node.directory / "dm-state" / "partitions" / f"{pod_obj['metadata']['uid']}.{container}.json"


def test_discovery_reaches_the_node_through_nfd_and_the_ledger(cluster, gate5):
    # Two NodeFeatures reach the node through nfd-master, each in its own pass: the device
    # manager's (the accelerator labels) and the worker's (managed); the kubelet publishes the
    # plugins' resources on its own schedule, so the wait covers what the test reads of each.
    node = harness.wait_for(
        lambda: (
            (labels := (n := cluster.kubectl_json("get", "node", H100))["metadata"]["labels"]).get(
                f"{constants.PREFIX_ACCELERATABLE}{GROUP}.count"
            )
            and constants.LABEL_MANAGED in labels
            and all(k in (n.get("status") or {}).get("capacity", {}) for k in PLUGIN_RESOURCES)
            and n
        ),
        timeout=90,
        what="the device manager's and the worker's labels, and the plugins' resources, on the node",
    )
    labels = node["metadata"]["labels"]
    assert labels[f"{constants.PREFIX_ACCELERATABLE}{GROUP}.count"] == "8"
    assert labels[f"{constants.PREFIX_ACCELERATABLE}{GROUP}.memory"] == "80Gi"
    assert labels[constants.LABEL_ACCELERATABLE] == "true"
    assert labels[constants.LABEL_MANAGED] == "true"  # the worker's NodeFeature
    # upstream NFD leaves the rule's @cpu.model.name annotation unresolved: gKey falls back to family-id
    assert labels["general.feature.gpustack.ai/amd-25-1"] == "true"
    devices = cluster.kubectl_json("get", "devices", H100)
    cards = devices["spec"]["groups"][0]["accelerators"]
    assert len(cards) == 8 and sum(1 for a in cards if a["status"].get("physicalSliced")) == 2
    assert all(a["id"].startswith("GPU-") for a in cards)
    assert devices["metadata"]["ownerReferences"][0]["kind"] == "Node"
    capacity = node["status"]["capacity"]
    assert (
        capacity[BASE] == "6" and capacity[f"{BASE}.shared"] == "60" and capacity[f"{BASE}.sliced"] == "768"
    )
    assert (
        capacity[f"{BASE}.partitioned"] == "14" and capacity["device.gpustack.ai/nvidia.visibility"] == "4096"
    )


def test_a_registered_nvlink_domain_labels_the_node_until_a_card_leaves_it(cluster, gate5):
    # The hardware (the simulated NVML's fabric registration) changes; the device manager records
    # each card's domain in Devices and nfd-master projects the node's one label.
    node = gate5["h100"]
    original = node.profile.read_text()
    profile = yaml.safe_load(original)
    for entry in profile["cards"]:
        entry["fabric"] = {"id": FABRIC_UUID, "clique": 2}

    def domain() -> str | None:
        return cluster.kubectl_json("get", "node", H100)["metadata"]["labels"].get(
            constants.LABEL_FABRIC_DOMAIN
        )

    try:
        node.profile.write_text(yaml.safe_dump(profile))
        harness.wait_for(lambda: domain() == f"nvlink-{FABRIC_UUID}-2", timeout=90, what="fabric.domain")
        cards = cluster.kubectl_json("get", "devices", H100)["spec"]["groups"][0]["accelerators"]
        assert {json.dumps(a["topology"].get("fabric"), sort_keys=True) for a in cards} == {
            json.dumps({"cliqueId": "2", "id": FABRIC_UUID, "kind": "nvlink"}, sort_keys=True)
        }
        labels = cluster.kubectl_json("get", "node", H100)["metadata"]["labels"]
        assert constants.LABEL_FABRIC_MEMBERS not in labels  # NVML reports no domain size
        # One card back to negotiating: the node has no single domain, and the label goes.
        profile["cards"][-1]["fabric"]["state"] = "in-progress"
        node.profile.write_text(yaml.safe_dump(profile))
        harness.wait_for(lambda: domain() is None, timeout=90, what="fabric.domain removed")
        cards = cluster.kubectl_json("get", "devices", H100)["spec"]["groups"][0]["accelerators"]
        assert sum(1 for a in cards if "fabric" in a["topology"]) == 6
    finally:
        node.profile.write_text(original)
    harness.wait_for(
        lambda: all(
            "fabric" not in a["topology"]
            for a in cluster.kubectl_json("get", "devices", H100)["spec"]["groups"][0]["accelerators"]
        ),
        timeout=90,
        what="the original hardware back in Devices",
    )


@pytest.mark.parametrize(
    ("name", "limits", "mode"),
    [
        ("whole", {BASE: "1"}, constants.DEVICE_MODE_EXCLUSIVE),
        ("shared", {f"{BASE}.shared": "2"}, constants.DEVICE_MODE_SHARED),
        (
            "slice",
            {f"{BASE}.sliced": "1", f"{BASE}.sliced.memory-percentage": "40"},
            constants.DEVICE_MODE_SLICED,
        ),
        (
            "partition",
            {f"{BASE}.partitioned": "1", f"{BASE}.partitioned.mig-3g.40gb": "1"},
            constants.DEVICE_MODE_PARTITIONED,
        ),
    ],
)
def test_a_pod_of_each_family_passes_the_five_gates(cluster, gate5, cleanup, name, limits, mode):
    cleanup.append(name)
    create(cluster, pod(name, limits, queue=gate5["entrance"]))
    placed = harness.wait_for(lambda: running(cluster, name), timeout=180, what=f"{name} Running")
    assert placed["spec"]["nodeName"] == H100
    record = harness.wait_for(lambda: record_of(cluster, name), timeout=30, what="the allocation record")
    entries = [a for g in record["main"] for a in g["accelerators"]]
    assert {a["mode"] for a in entries} == {mode}
    rows = harness.wait_for(
        lambda: (r := ledger(cluster, H100)) and all(r[a["id"]]["mode"] == mode for a in entries) and r,
        timeout=30,
        what="the Devices status charging the cards",
    )
    env = container_env(gate5["h100"], name)
    if mode == constants.DEVICE_MODE_PARTITIONED:
        assert entries[0]["allocatedPhysicalProfile"] == "3g.40gb"
        assert rows[entries[0]["id"]]["allocatedProfiles"] == [{"name": "3g.40gb", "count": 1}]
        # The MIG device of an instance made at the recorded placement — never the parent card.
        [placement] = entries[0]["allocatedPhysicalPlacements"]
        [instance] = [
            gi
            for gi in gpu_instances(gate5["h100"], entries[0]["id"])
            if (gi["start"], gi["size"]) == (placement["start"], placement["length"])
        ]
        [compute] = instance["computes"]
        assert compute["slices"] == instance["slices"] == 3
        assert env["NVIDIA_VISIBLE_DEVICES"] == compute["uuid"] and env["CUDA_VISIBLE_DEVICES"] == "0"
        marker = json.loads(marker_of(gate5["h100"], placed).read_text())
        assert marker["device"] == compute["uuid"] and marker["owner"]["pod"] == name
        return
    assert sorted(env["NVIDIA_VISIBLE_DEVICES"].split(",")) == sorted(a["id"] for a in entries)
    if mode == constants.DEVICE_MODE_SHARED:
        assert len(set(cards_of(record))) == 2  # two distinct cards, one share each
    if mode == constants.DEVICE_MODE_SLICED:
        assert entries[0]["allocated"] == 640_000
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{81920 * 40 // 100}m"
        assert env["CUDA_DEVICE_SM_LIMIT"] == "100"


def test_refusals_surface_as_unexpected_admission_error(cluster, gate5, cleanup):
    """On the A10G node (Pods bound directly, past gates 1–4): four 60 % slices take one card each;
    a fifth finds no card with room (our FailedPrecondition), and a whole card finds every card held
    in another mode (tokens Unhealthy, so the kubelet has none to offer)."""
    slice60 = {f"{BASE}.sliced": "1", f"{BASE}.sliced.units": "960000"}
    harness.wait_for(
        lambda: cluster.kubectl_json("get", "node", A10G)["status"]["capacity"].get(f"{BASE}.sliced.units"),
        timeout=90,
        what="the worker's slice capacity keys on the A10G node",
    )
    cleanup.extend([*(f"s60-{i}" for i in range(4)), "s60-extra", "whole-on-sliced"])
    for i in range(4):
        create(cluster, pod(f"s60-{i}", slice60, node=A10G))
    for i in range(4):
        harness.wait_for(lambda i=i: running(cluster, f"s60-{i}"), timeout=120, what=f"s60-{i} Running")
    held = {card for i in range(4) for card in cards_of(record_of(cluster, f"s60-{i}"))}
    assert len(held) == 4
    create(cluster, pod("s60-extra", slice60, node=A10G))
    refused = harness.wait_for(
        lambda: (p := get(cluster, "s60-extra"))["status"].get("phase") == "Failed" and p,
        timeout=90,
        what="refusal",
    )
    assert refused["status"]["reason"] == "UnexpectedAdmissionError"
    assert "units left" in refused["status"]["message"]
    create(cluster, pod("whole-on-sliced", {BASE: "1"}, node=A10G))
    refused = harness.wait_for(
        lambda: (p := get(cluster, "whole-on-sliced"))["status"].get("phase") == "Failed" and p,
        timeout=90,
        what="refusal",
    )
    assert refused["status"]["reason"] == "UnexpectedAdmissionError"


def test_a_kubelet_restart_re_registers_and_keeps_allocations(cluster, gate5, cleanup):
    node = gate5["h100"]
    cleanup.extend(["before-restart", "after-restart"])
    create(cluster, pod("before-restart", {BASE: "1"}, queue=gate5["entrance"]))
    harness.wait_for(lambda: running(cluster, "before-restart"), timeout=180, what="before-restart Running")
    first = cards_of(record_of(cluster, "before-restart"))
    log = node.log_file("device-manager")
    registered = log.read_text().count("registered with the kubelet")
    nodes.restart_kubelet(cluster, node)
    harness.wait_for(
        lambda: (
            log.read_text().count("registered with the kubelet")
            >= registered + len(tokens.resources("nvidia"))
        ),
        timeout=90,
        what="the device manager registering every plugin with the restarted kubelet",
    )
    harness.wait_for(lambda: harness.node_is_ready(cluster, H100), timeout=90, what="the node Ready again")
    assert running(cluster, "before-restart") and cards_of(record_of(cluster, "before-restart")) == first, (
        restart_story(node, ("before-restart", get(cluster, "before-restart")["metadata"]["uid"]))
    )
    create(cluster, pod("after-restart", {BASE: "1"}, queue=gate5["entrance"]))
    harness.wait_for(lambda: running(cluster, "after-restart"), timeout=180, what="after-restart Running")
    before = get(cluster, "before-restart")
    uids = tuple(get(cluster, name)["metadata"]["uid"] for name in ("before-restart", "after-restart"))
    story = restart_story(node, ("before-restart", "after-restart", *uids))
    assert before["status"].get("phase") == "Running", f"before-restart stopped: {before['status']}\n{story}"
    after = cards_of(record_of(cluster, "after-restart"))
    assert not set(after) & set(first), f"after-restart got {after}, before-restart holds {first}\n{story}"


def pods_story(cluster, node: nodes.Node, names: list[str]) -> str:
    """Each Pod's phase, reason and conditions, then what the device manager and the kubelet logged
    of them and of the plugins' registrations."""
    lines = []
    for name in names:
        status = get(cluster, name).get("status") or {}
        conditions = [
            (c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []
        ]
        lines.append(
            f"{name}: {status.get('phase')} {status.get('reason')} {status.get('message')} {conditions}"
        )
    return "\n".join(lines) + "\n" + restart_story(node, (*names, "registered with the kubelet", "refused"))


def restart_story(node: nodes.Node, pods: tuple[str, ...]) -> str:
    """What the device manager and the kubelet logged of these Pods, by name or UID (volume chatter
    left out): a failure of the restart test says which side let a card go."""
    lines = []
    for component in ("device-manager", "kubelet"):
        for line in node.log_file(component).read_text(errors="replace").splitlines():
            if (any(p in line for p in pods) and "Volume" not in line) or "re-created" in line:
                lines.append(f"{component}: {line[:400]}")
    return "\n".join(lines[-60:])


def test_a_deleted_pod_frees_its_card_in_the_ledger_and_the_instance_type(cluster, gate5):
    create(cluster, pod("to-delete", {BASE: "1"}, queue=gate5["entrance"]))
    harness.wait_for(lambda: running(cluster, "to-delete"), timeout=180, what="to-delete Running")
    card = cards_of(record_of(cluster, "to-delete"))[0]
    harness.wait_for(
        lambda: ledger(cluster, H100)[card]["mode"] == constants.DEVICE_MODE_EXCLUSIVE,
        timeout=30,
        what="charged",
    )

    def whole_remaining() -> int:
        status = cluster.kubectl_json("get", "instancetype", POOL).get("status") or {}
        return int(harness.parse_quantity((status.get("accelerator") or {}).get("remaining", "0")))

    before = whole_remaining()
    cluster.kubectl("delete", "pod", "to-delete", "-n", NS, "--wait=true")
    harness.wait_for(
        lambda: ledger(cluster, H100)[card]["mode"] == 0, timeout=60, what="the card freed in Devices"
    )
    harness.wait_for(
        lambda: whole_remaining() == before + 1, timeout=60, what="the InstanceType's EX view back up"
    )


def test_a_finished_pod_releases_its_card(cluster, gate5, cleanup):
    cleanup.append("job")
    create(cluster, pod("job", {BASE: "1"}, queue=gate5["entrance"], exit_code=0))
    done = harness.wait_for(
        lambda: (p := get(cluster, "job"))["status"].get("phase") == "Succeeded" and p,
        timeout=180,
        what="Succeeded",
    )
    card = cards_of(allocation.record_of(done))[0]
    harness.wait_for(lambda: ledger(cluster, H100)[card]["mode"] == 0, timeout=60, what="the card released")
    # The record stays on the Pod: only the charge ends.
    assert cards_of(record_of(cluster, "job")) == [card]


def test_a_deleted_partitioned_pod_has_its_instance_destroyed(cluster, gate5):
    node = gate5["h100"]
    limits = {f"{BASE}.partitioned": "1", f"{BASE}.partitioned.mig-7g.80gb": "1"}
    create(cluster, pod("whole-partition", limits, queue=gate5["entrance"]))
    placed = harness.wait_for(lambda: running(cluster, "whole-partition"), timeout=180, what="Running")
    [entry] = [a for g in record_of(cluster, "whole-partition")["main"] for a in g["accelerators"]]
    device = container_env(node, "whole-partition")["NVIDIA_VISIBLE_DEVICES"]
    assert [c["uuid"] for gi in gpu_instances(node, entry["id"]) for c in gi["computes"]] == [device]
    marker = marker_of(node, placed)
    assert marker.exists()
    cluster.kubectl("delete", "pod", "whole-partition", "-n", NS, "--wait=true", timeout=120)
    harness.wait_for(
        lambda: not gpu_instances(node, entry["id"]) and not marker.exists(),
        timeout=60,
        what="the GPU instance destroyed and its ownership marker gone",
    )


def test_an_agent_killed_in_the_middle_of_allocations_loses_no_entry_and_grants_nothing_twice(
    cluster, gate5, cleanup
):
    """Six Pods bound to the H100 node at once (four whole cards and two partitions); the device
    manager is killed as the first allocations land and started again.  Every Pod that runs
    has its record, its cards charged in the Devices status and in the recorded container env; no
    card (nor MIG device) is handed to two Pods; later Pods are allocated past the held cards."""
    node = gate5["h100"]
    names = [f"burst-{i}" for i in range(4)] + ["burst-mig-0", "burst-mig-1"]
    cleanup.extend([*names, "after-agent-restart"])
    mig = {f"{BASE}.partitioned": "1", f"{BASE}.partitioned.mig-3g.40gb": "1"}
    for name in names:
        create(cluster, pod(name, mig if "mig" in name else {BASE: "1"}, node=H100))
    try:
        harness.wait_for(
            lambda: any(record_of(cluster, n) for n in names),
            timeout=120,
            what="the first allocation recorded",
        )
    except TimeoutError as timeout:  # say which side held the Pods back (it once failed, unexplained)
        raise AssertionError(f"{timeout}\n{pods_story(cluster, node, names)}") from None
    pid = int(node.pid_file("device-manager").read_text())
    os.killpg(pid, signal.SIGKILL)  # a crash: no graceful shutdown
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)  # this test run started it: reap it
    nodes.start_device_manager(cluster, node)

    def settled() -> dict[str, dict] | None:
        pods = {n: get(cluster, n) for n in names}
        phases = {(p.get("status") or {}).get("phase") for p in pods.values()}
        return pods if phases <= {"Running", "Failed"} else None

    pods = harness.wait_for(settled, timeout=240, what="every burst Pod Running or Failed")
    live = {n: p for n, p in pods.items() if p["status"]["phase"] == "Running"}
    assert live, "no Pod ran after the agent restarted"
    seen_cards: dict[str, str] = {}
    seen_devices: dict[str, str] = {}
    for name, obj in live.items():
        record = allocation.record_of(obj)
        cards = cards_of(record)
        assert cards, f"{name} runs without an allocation record"
        env = container_env(node, name)
        if "mig" in name:
            device = env["NVIDIA_VISIBLE_DEVICES"]
            assert device.startswith("MIG-") and device not in seen_devices, (name, seen_devices)
            seen_devices[device] = name
            assert marker_of(node, obj).exists()
        else:
            assert env["NVIDIA_VISIBLE_DEVICES"].split(",") == cards
            for card in cards:
                assert card not in seen_cards, f"card {card} granted to {seen_cards.get(card)} and {name}"
                seen_cards[card] = name

    def charged() -> bool:
        rows = ledger(cluster, H100)
        return all(rows[c]["mode"] == constants.DEVICE_MODE_EXCLUSIVE for c in seen_cards) and all(
            rows[a["id"]].get("allocatedProfiles")
            for n in live
            if "mig" in n
            for a in allocation.record_of(live[n])["main"][0]["accelerators"]
        )

    harness.wait_for(charged, timeout=60, what="the Devices status charging every running Pod")
    create(cluster, pod("after-agent-restart", {BASE: "1"}, node=H100))  # two whole cards stay free
    after = harness.wait_for(lambda: running(cluster, "after-agent-restart"), timeout=120, what="Running")
    assert not set(cards_of(allocation.record_of(after))) & set(seen_cards)
