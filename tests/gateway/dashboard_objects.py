"""Objects the dashboard reads, as the operator, the device manager, Kueue and the kubelet write
them: managed Nodes, their Devices inventories and ledgers, Pods with allocation records, Kueue
Workloads, ModelDeployments and Instances; and a simulated fleet of them (the dashboard's HTTP tests
and its benchmark)."""

from __future__ import annotations

import copy
from typing import Any

from api import allocation, constants
from api.manufacturers import UNITS_PER_CARD
from api.objects import Obj
from nodeplugins.devicemanager import simulated
from tests.unit.gateway_objects import CPU_SPEC, H100_DETAIL, H100_SPEC, instance_type

H100 = simulated.PRODUCTS["NVIDIA H100 80GB HBM3"]
CARDS = 8


def node(name: str, product: simulated.Product = H100, cards: int = CARDS, *, ready: bool = True) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": simulated.node_labels(name, product, cards)},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def devices(name: str, product: simulated.Product = H100, cards: int = CARDS, *, unhealthy: int = 0) -> Obj:
    obj = simulated.devices(name, product, cards)
    for card in obj["spec"]["groups"][0]["accelerators"][:unhealthy]:
        card["status"]["unhealthy"] = True
    return obj


def allocate(devices_obj: Obj, index: int, mode: int, allocated: int | None = None, **extra: Any) -> Obj:
    """A copy of ``devices_obj`` whose card ``index`` is charged in its ledger."""
    out = copy.deepcopy(devices_obj)
    entry = out["status"]["groups"][0]["accelerators"][index]
    units = allocated if allocated is not None else UNITS_PER_CARD
    entry.update({"mode": mode, "allocated": units, "remaining": UNITS_PER_CARD - units, **extra})
    return out


def card_id(devices_obj: Obj, index: int) -> str:
    return str(devices_obj["spec"]["groups"][0]["accelerators"][index]["id"])


def pod(
    name: str, namespace: str, node_name: str, cards: list[tuple[str, int, int]], *, phase: str = "Running"
) -> Obj:
    """A Pod on ``node_name`` whose record charges ``(card id, index, mode)`` entries."""
    record = {
        "main": [
            {
                "id": H100.group,
                "manufacturer": H100.manufacturer,
                "accelerators": [
                    allocation.accelerator_entry(cid, index, mode) for cid, index, mode in cards
                ],
            }
        ]
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {constants.KUEUE_QUEUE_NAME: "queue"},
            "annotations": {constants.ANNOTATION_ACCELERATOR_ALLOCATED: allocation.encode(record)},
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": phase},
    }


def workload(name: str, namespace: str, queue: str, *, admitted: bool = False) -> Obj:
    conditions = [{"type": "QuotaReserved", "status": "True" if admitted else "False", "reason": "Pending"}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queueName": queue},
        "status": {"conditions": conditions},
    }


def deployment(name: str, namespace: str, phase: str, *, endpoint: str = "") -> Obj:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {},
        "status": {
            "phase": phase,
            "endpoint": endpoint,
            "roleSummary": "1R",
            "conditions": [
                {"type": "Ready", "status": "True" if phase == "Ready" else "False", "reason": phase}
            ],
        },
    }


def instance(name: str, namespace: str, phase: str, *, node_name: str = "", address: str = "") -> Obj:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {},
        "status": {
            "phase": phase,
            "nodeName": node_name,
            "accessAddresses": [address] if address else [],
            "ports": [{"name": "ssh", "port": 22, "nodePort": 30022}],
            "conditions": [{"type": "Ready", "status": "True" if phase == "Ready" else "False"}],
        },
    }


H100_TYPE = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
CPU_TYPE = "gpustack--generic-linux-amd64"


def pool_types(nodes: int, used: int = 0) -> list[Obj]:
    """An H100 InstanceType over ``nodes`` nodes of 8 cards with ``used`` cards taken, and a CPU one."""
    total = nodes * CARDS
    free = total - used
    h100 = instance_type(
        H100_TYPE,
        H100_SPEC,
        ex=(min(CARDS, free), free, total),
        sh=(min(CARDS, free) * 10, free * 10, total * 10),
        sl=(100 if free else 0, free * 100, total * 100),
        pt=(1 if free else 0, free * 7, total * 7),
        detail=H100_DETAIL,
    )
    cpu = instance_type(CPU_TYPE, CPU_SPEC, ex=(0, 0, 0), sh=(0, 0, 0), sl=(0, 0, 0), pt=(0, 0, 0))
    return [h100, cpu]


def cluster_objects(cluster: str, nodes: int, *, used: int = 0, pending: int = 0) -> list[Obj]:
    """One simulated cluster: ``nodes`` H100 nodes (their first ``used`` cards whole-allocated, one
    Pod each), its pools, ``pending`` queued Workloads, a ModelDeployment and an Instance."""
    out: list[Obj] = []
    out += pool_types(nodes, used)
    left = used
    for i in range(nodes):
        name = f"{cluster}-gpu-{i:04d}"
        out.append(node(name))
        inventory = devices(name)
        holders = []
        for index in range(CARDS):
            if left <= 0:
                break
            inventory = allocate(inventory, index, constants.DEVICE_MODE_EXCLUSIVE)
            holders.append((card_id(inventory, index), index, constants.DEVICE_MODE_EXCLUSIVE))
            left -= 1
        out.append(inventory)
        if holders:
            out.append(pod(f"job-{i:04d}", "tenant", name, holders))
    queue = out[0]["status"]["entrance"]
    out += [workload(f"wl-{i}", "tenant", queue) for i in range(pending)]
    out.append(deployment("qwen", "tenant", "Ready", endpoint=f"http://qwen.{cluster}:8000"))
    out.append(instance("box", "tenant", "Ready", node_name=f"{cluster}-gpu-0000", address="10.0.0.1"))
    return out
