"""What several e2e modules read and write the same way: an object by kind and name, a condition of
it, a Setting, a pool that is ready for a namespace (an InstanceType's entrance and LocalQueues),
the container a test Pod requests devices in, and what a module leaves behind (deleted, and waited
out, while the worker still runs).  Not a test module."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from typing import Any

import gpustack
import harness

from api import constants


def get(cluster: harness.ClusterInfo, kind: str, name: str, namespace: str = "") -> dict | None:
    args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
    proc = cluster.kubectl(*args, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def queue_flavors(cluster: harness.ClusterInfo, name: str) -> list[str]:
    """The flavors a ClusterQueue lists now, in order (none while it does not exist)."""
    spec = (get(cluster, "clusterqueues.kueue.x-k8s.io", name) or {}).get("spec") or {}
    return [f["name"] for g in spec.get("resourceGroups") or [] for f in g.get("flavors") or []]


def node_profiles(cluster: harness.ClusterInfo, names: Iterable[str]) -> dict[str, str | None]:
    """The topology profile label of each named node (``None`` where it has none or is absent)."""
    labelled = {
        n["metadata"]["name"]: n["metadata"].get("labels") or {}
        for n in cluster.kubectl_json("get", "nodes")["items"]
    }
    return {name: labelled.get(name, {}).get(constants.LABEL_TOPOLOGY_PROFILE) for name in names}


def condition(obj: dict | None, kind: str) -> tuple[str, str, str]:
    """``(status, reason, message)`` of the condition ``kind``; empty strings when it is absent."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond["type"] == kind:
            return cond["status"], cond.get("reason", ""), cond.get("message", "")
    return "", "", ""


def setting(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": gpustack.SYSTEM_NAMESPACE},
        "spec": {"value": value},
    }


def pool_ready(cluster: harness.ClusterInfo, instance_type: str, namespace: str) -> bool:
    """The InstanceType has an entrance and the namespace has its LocalQueues."""
    it = get(cluster, "instancetype", instance_type) or {}
    lqs = cluster.kubectl_json("get", "localqueues.kueue.x-k8s.io", "-n", namespace)["items"]
    return bool((it.get("status") or {}).get("entrance")) and bool(lqs)


def entrance(cluster: harness.ClusterInfo, instance_type: str) -> str | None:
    """The InstanceType's entrance (the queue a Pod names); None while it has none or is absent."""
    if cluster.kubectl("get", "instancetype", instance_type, check=False).returncode != 0:
        return None
    return cluster.kubectl_json("get", "instancetype", instance_type).get("status", {}).get("entrance")


def wait_for_entrance(
    cluster: harness.ClusterInfo, instance_type: str, namespace: str, *, timeout: float, what: str
) -> str:
    """Wait for the InstanceType's entrance (``what``), then for its LocalQueue in ``namespace``."""
    found = harness.wait_for(lambda: entrance(cluster, instance_type), timeout=timeout, what=what)
    harness.wait_for(
        lambda: cluster.kubectl("get", "localqueue", found, "-n", namespace, check=False).returncode == 0,
        timeout=60,
        what="the LocalQueue in the tenant namespace",
    )
    return found


def delete_all(
    cluster: harness.ClusterInfo, resource: str, namespace: str, timeout: float, what: str
) -> None:
    """Delete every ``resource`` of ``namespace`` and wait (bounded, quietly) until none lists."""
    cluster.kubectl("delete", resource, "--all", "-n", namespace, "--wait=false", check=False)
    with contextlib.suppress(TimeoutError):
        harness.wait_for(
            lambda: not cluster.kubectl_json("get", resource, "-n", namespace)["items"],
            timeout=timeout,
            what=what,
        )


def queued_pod(name: str, namespace: str, queue: str, container: dict[str, Any]) -> dict[str, Any]:
    """A Pod sent to Kueue's ``queue`` (an entrance) with one container, ended at once when deleted."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {constants.KUEUE_QUEUE_NAME: queue}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }


def requesting(limits: dict[str, str]) -> dict[str, Any]:
    """The ``main`` container of a test Pod: a small cpu and memory request plus ``limits``
    (device keys), on an image nothing pulls."""
    return {
        "name": "main",
        "image": "registry.invalid/none:0",
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi", **limits},
            "limits": {"memory": "16Mi", **limits},
        },
    }


def delete_artifacts(cluster: harness.ClusterInfo, namespace: str, timeout: float) -> None:
    """Artifacts lose their finalizer only while the worker runs: let them go before the worker does."""
    delete_all(cluster, "modelartifacts", namespace, timeout, "artifacts gone")
