"""An Instance's status, purely, from its Pod, Service, Node and the node's ``Devices`` ledger
(instances spec A.3, A.6 step 7).

- ``phase``: the controller's own ``Starting``/``Stopping``/``Stopped``/``Deleting``, else a summary
  of the Pod: ``Ready`` (running, every container ready), ``Queued`` (gated by Kueue),
  ``Unschedulable``, a container's waiting or terminated reason (``ContainerCreating``,
  ``ImagePullBackOff``, ``CrashLoopBackOff``…), ``Running`` (running, not ready), ``Pending``,
  ``Completed``, ``Failed``; ``phaseMessage`` says why.
- Once the Pod runs: ``nodeName``; ``hostIPs`` (the Node's ``ExternalIP``\\ s, then its
  ``InternalIP``\\ s); ``podIPs`` (``status.podIPs``, else ``status.podIP``); ``ports`` (the spec's
  ports — and the sidecar's SSH port — with their node ports, filled only once every port has
  one); ``allocations`` (the record ``device.gpustack.ai/accelerator.allocated`` holds for
  ``main``, each card kept only when the node's ledger shows it held in that mode);
  ``accessAddresses``.
- ``Stopped`` is the whole status: nothing of the last run survives it.
- ``conditions``: one, ``Ready`` (:func:`with_ready`), True exactly in phase ``Ready``, the phase its
  reason, so ``kubectl wait --for=condition=Ready inst/<name>`` works; every status the reconciler
  writes carries it, its time kept while its status holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api import allocation, constants
from api.objects import Obj
from controllers import ready
from controllers.instance.service import port_name

STARTING, READY, STOPPING, STOPPED, DELETING = constants.INSTANCE_PHASES
QUEUED = "Queued"
_ALLOCATION_KEYS = (
    "id",
    "index",
    "mode",
    "allocated",
    "allocatedSlices",
    "allocatedPhysicalProfile",
    "allocatedPhysicalPlacements",
    "allocatedPhysicalID",
    "allocatedLogicalPlacements",
)
_CHARGING = (
    constants.DEVICE_MODE_EXCLUSIVE,
    constants.DEVICE_MODE_SHARED,
    constants.DEVICE_MODE_SLICED,
    constants.DEVICE_MODE_PARTITIONED,
)


@dataclass(frozen=True, slots=True)
class Access:
    """The two Settings ``accessAddresses`` reads."""

    static_address: str = ""  # instance-access-static-address
    wildcard_dns: str = ""  # instance-access-wildcard-dns


# --- Phase -----------------------------------------------------------------------------------------


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return {}


def _container_trouble(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first container's waiting reason, or a terminated one (``main`` before ``sshd``)."""
    status = pod.get("status") or {}
    for entry in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = entry.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason"):
            return waiting[
                "reason"
            ], f"container {entry.get('name')}: {waiting.get('message') or waiting['reason']}"
        terminated = state.get("terminated") or {}
        if terminated and terminated.get("reason") not in (None, "Completed"):
            detail = terminated.get("message") or f"exit code {terminated.get('exitCode')}"
            return terminated["reason"], f"container {entry.get('name')}: {detail}"
    return None


def pod_phase(pod: Mapping[str, Any]) -> tuple[str, str]:
    """``(phase, phaseMessage)`` summarising ``pod``."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase == "Running":
        if _condition(pod, "Ready").get("status") == "True":
            return READY, ""
        trouble = _container_trouble(pod)
        return trouble if trouble else ("Running", "waiting for every container to be ready")
    if phase == "Succeeded":
        return "Completed", "the Pod's containers exited; clear and set spec.stop to run it again"
    if phase == "Failed":
        return status.get("reason") or "Failed", status.get("message") or "the Pod failed"
    if phase == "Unknown":
        return "Unknown", status.get("message") or "the Pod's node stopped reporting"
    scheduled = _condition(pod, "PodScheduled")
    if (pod.get("spec") or {}).get("schedulingGates") or scheduled.get("reason") == "SchedulingGated":
        queue = ((pod.get("metadata") or {}).get("labels") or {}).get(constants.KUEUE_QUEUE_NAME, "")
        return QUEUED, f"waiting for Kueue to admit it from queue {queue}"
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return "Unschedulable", scheduled.get("message") or "no node can take the Pod"
    trouble = _container_trouble(pod)
    if trouble:
        return trouble
    return "Pending", scheduled.get("message") or "the Pod is pending"


# --- Addresses ---------------------------------------------------------------------------------------


def host_ips(node: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> list[Obj]:
    """The node's ``ExternalIP``s then its ``InternalIP``s; the Pod's ``hostIPs`` when the Node is
    unknown."""
    addresses = ((node or {}).get("status") or {}).get("addresses") or []
    ips = [a["address"] for kind in ("ExternalIP", "InternalIP") for a in addresses if a.get("type") == kind]
    if not ips:
        status = pod.get("status") or {}
        ips = [h.get("ip") for h in status.get("hostIPs") or [] if h.get("ip")] or (
            [status["hostIP"]] if status.get("hostIP") else []
        )
    return [{"ip": ip} for ip in dict.fromkeys(ips)]


def pod_ips(pod: Mapping[str, Any]) -> list[Obj]:
    status = pod.get("status") or {}
    ips = [p.get("ip") for p in status.get("podIPs") or [] if p.get("ip")]
    if not ips and status.get("podIP"):
        ips = [status["podIP"]]
    return [{"ip": ip} for ip in ips]


def access_addresses(ips: Sequence[Mapping[str, Any]], access: Access) -> list[str]:
    if access.static_address.strip():
        return [access.static_address.strip()]
    if access.wildcard_dns.strip():
        return [f"{ip['ip']}.{access.wildcard_dns.strip().strip('.')}" for ip in ips]
    return [ip["ip"] for ip in ips]


# --- Ports -----------------------------------------------------------------------------------------------


def status_ports(instance: Mapping[str, Any], service: Mapping[str, Any] | None) -> tuple[list[Obj], bool]:
    """The spec's ports (plus ``ssh`` when the sidecar runs) and whether every one has a node port;
    node ports are filled only then."""
    spec = instance.get("spec") or {}
    wanted: list[Obj] = []
    for port in spec.get("ports") or []:
        entry: Obj = {"port": port.get("port"), "protocol": port.get("protocol") or "TCP"}
        if port.get("name"):
            entry["name"] = port["name"]
        wanted.append(entry)
    if (spec.get("sshPublicKey") or {}).get("name") and not any(
        p["port"] == constants.SSH_PORT and p["protocol"] == "TCP" for p in wanted
    ):
        wanted.append({"name": "ssh", "port": constants.SSH_PORT, "protocol": "TCP"})
    node_ports = {
        p.get("name"): p.get("nodePort")
        for p in ((service or {}).get("spec") or {}).get("ports") or []
        if p.get("nodePort")
    }
    found = [node_ports.get(port_name(p["port"], p["protocol"])) for p in wanted]
    complete = bool(wanted) and all(found)
    if complete:
        wanted = [{**p, "nodePort": node_port} for p, node_port in zip(wanted, found, strict=True)]
    return wanted, complete or not wanted


# --- Allocations ---------------------------------------------------------------------------------------


def _ledger_rows(devices: Mapping[str, Any] | None) -> dict[tuple[Any, Any, Any], Mapping[str, Any]]:
    rows: dict[tuple[Any, Any, Any], Mapping[str, Any]] = {}
    for group in ((devices or {}).get("status") or {}).get("groups") or []:
        for row in group.get("accelerators") or []:
            rows[(group.get("id"), group.get("manufacturer"), row.get("id"))] = row
    return rows


def _shown(entry: Mapping[str, Any], row: Mapping[str, Any] | None) -> bool:
    """The ledger row holds the card in the entry's mode, with at least what the entry claims."""
    if row is None or row.get("mode") != entry.get("mode"):
        return False
    claimed = entry.get("allocated")
    held = row.get("allocated")
    if isinstance(claimed, int) and isinstance(held, int) and claimed > held:
        return False
    profile = entry.get("allocatedPhysicalProfile")
    if profile:
        return any(
            p.get("name") == profile and (p.get("count") or 0) > 0 for p in row.get("allocatedProfiles") or []
        )
    return True


def allocations(pod: Mapping[str, Any], devices: Mapping[str, Any] | None) -> list[Obj]:
    """``main``'s cards from the Pod's allocation record, each one the node's ledger confirms."""
    record = allocation.record_of(pod)
    rows = _ledger_rows(devices)
    groups: list[Obj] = []
    for group in record.get(constants.INSTANCE_CONTAINER_MAIN) or []:
        gid, manufacturer = group.get("id"), group.get("manufacturer")
        cards = [
            {k: entry[k] for k in _ALLOCATION_KEYS if k in entry}
            for entry in group.get("accelerators") or []
            if entry.get("mode") in _CHARGING
            and isinstance(entry.get("index"), int)
            and _shown(entry, rows.get((gid, manufacturer, entry.get("id"))))
        ]
        if cards:
            groups.append({"id": gid, "manufacturer": manufacturer, "accelerators": cards})
    return groups


# --- The whole status ---------------------------------------------------------------------------------


def from_pod(
    instance: Mapping[str, Any],
    pod: Mapping[str, Any],
    service: Mapping[str, Any] | None,
    node: Mapping[str, Any] | None,
    devices: Mapping[str, Any] | None,
    access: Access,
) -> tuple[Obj, bool]:
    """``(status, waiting for node ports)`` for an Instance whose Pod is ``pod``."""
    phase, message = pod_phase(pod)
    status: Obj = {"phase": phase}
    if message:
        status["phaseMessage"] = message
    if (pod.get("status") or {}).get("phase") != "Running":
        return status, False
    status["nodeName"] = (pod.get("spec") or {}).get("nodeName") or ""
    hosts = host_ips(node, pod)
    optional = {
        "hostIPs": hosts,
        "podIPs": pod_ips(pod),
        "allocations": allocations(pod, devices),
        "accessAddresses": access_addresses(hosts, access),
    }
    ports, complete = status_ports(instance, service)
    optional["ports"] = ports
    status.update({k: v for k, v in optional.items() if v})
    return status, not complete


def with_ready(
    status: Mapping[str, Any], live: Mapping[str, Any] | None, generation: int | None, now: str
) -> Obj:
    """``status`` with its ``Ready`` condition, stamped against the ``live`` status's."""
    phase = status.get("phase") or ""
    message = status.get("phaseMessage") or (
        "the Pod is running and every container is ready" if phase == READY else phase
    )
    verdict = ready.verdict(phase == READY, phase, message)
    return {**status, "conditions": ready.put((live or {}).get("conditions"), verdict, generation, now)}


def normal(status: Mapping[str, Any] | None) -> Obj:
    """``status`` without empty fields, for comparing a live status with a rendered one."""
    return {k: v for k, v in (status or {}).items() if v not in (None, "", [], {})}


def changed(live: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    return normal(live) != normal(desired)
