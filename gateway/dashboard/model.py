"""What the dashboard shows, folded purely from each cluster's cached objects.

Three documents, each carrying the ``revision`` it was built at (the page records it, so a reader
can compare the page with the API at one instant):

- **fleet** — one tile per subscribed cluster: its state (``reachable``, ``unreachable`` with the
  time it was last seen, or ``pending`` with the gateway's reason), its managed nodes, its cards by
  model (from the ``Devices`` inventories), each pool (InstanceType) with its four accelerator views
  as used/free/capacity, its pending Workloads, and its ModelDeployments and Instances by phase;
  then the fleet's pools (InstanceTypes of one spec across clusters, named as the gateway's fleet
  view names them) with their used and total cards and pending Workloads.
- **pool** — one fleet pool: its InstanceTypes per cluster and the nodes serving each (a node
  serves an InstanceType when it carries the type's schedule labels), and per node a card map:
  each card's mode (free, whole, shared, sliced, partitioned), how full it is (allocated units out
  of 1,600,000) and the Pods whose allocation record names it.
- **workloads** — ModelDeployments and Instances across clusters, with their phase, conditions
  and endpoints.

Numbers: a view's ``capacity`` and ``remaining`` are the quantities the cluster wrote (read
exactly, written as a JSON number: an int, or a float for a fractional quantity); ``used`` is
``capacity - remaining`` (never below zero).  A pending Workload is one in a pool's LocalQueue
(``spec.queueName`` equal to the type's ``status.entrance``) holding no quota and not finished.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from api import allocation, constants
from api.manufacturers import UNITS_PER_CARD
from api.naming import schedule_labels
from api.objects import Obj
from gateway import amounts
from gateway.fleet import item_name

REACHABLE, UNREACHABLE, PENDING = "reachable", "unreachable", "pending"

VIEWS = {
    "accelerator": "whole cards (EX)",
    "acceleratorShared": "shares (SH)",
    "acceleratorSliced": "VRAM % (SL)",
    "acceleratorPartitioned": "partitions (PT)",
}
"""The four accelerator views of an InstanceType, in the order the page draws them."""

MODES = {
    constants.DEVICE_MODE_NONE: "free",
    constants.DEVICE_MODE_EXCLUSIVE: "whole",
    constants.DEVICE_MODE_SHARED: "shared",
    constants.DEVICE_MODE_SLICED: "sliced",
    constants.DEVICE_MODE_PARTITIONED: "partitioned",
}

KIND_NAMES = ("InstanceType", "Devices", "Node", "Pod", "Workload", "ModelDeployment", "Instance")
"""The kinds a cluster's state carries (what :mod:`gateway.dashboard.service` watches)."""

_FINISHED_PODS = ("Succeeded", "Failed")


@dataclass
class ClusterState:
    """One subscribed cluster at one instant: how the gateway reaches it, and its cached objects
    by kind (empty for a pending cluster)."""

    name: str
    state: str
    reason: str = ""
    last_seen: float | None = None
    objects: dict[str, list[Obj]] = field(default_factory=dict)

    def of(self, kind: str) -> list[Obj]:
        return self.objects.get(kind) or []


def iso(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name") or "")


def _json_number(value: amounts.Num) -> int | float:
    if isinstance(value, int):
        return value
    if value.denominator == 1:
        return int(value.numerator)
    return round(float(value), 3)


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def _condition(obj: Mapping[str, Any], kind: str) -> str:
    for cond in _list(_dict(obj.get("status")).get("conditions")):
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return str(cond.get("status") or "")
    return ""


# Pieces ------------------------------------------------------------------------------------------


def view(status: Mapping[str, Any], name: str) -> Obj:
    """One accelerator view as used/free/capacity numbers."""
    raw = _dict(status.get(name))
    capacity = amounts.number(raw.get("capacity"))
    remaining = amounts.number(raw.get("remaining"))
    used = capacity - remaining
    if used < 0:
        used = 0
    return {
        "used": _json_number(used),
        "free": _json_number(remaining),
        "capacity": _json_number(capacity),
    }


def node_ready(node: Mapping[str, Any]) -> bool:
    return _condition(node, "Ready") == "True"


def workload_pending(workload: Mapping[str, Any]) -> bool:
    """In its queue, waiting: holding no quota, not finished, not deactivated, not being deleted."""
    if _deleting(workload) or _dict(workload.get("spec")).get("active") is False:
        return False
    if _condition(workload, "Finished") == "True":
        return False
    return _condition(workload, "QuotaReserved") != "True" and _condition(workload, "Admitted") != "True"


def pending_by_queue(workloads: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Pending Workloads by the LocalQueue they name."""
    out: dict[str, int] = {}
    for workload in workloads:
        if workload_pending(workload):
            queue = str(_dict(workload.get("spec")).get("queueName") or "")
            out[queue] = out.get(queue, 0) + 1
    return out


def by_phase(objects: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Objects counted by ``status.phase`` (``Unknown`` where none is written yet)."""
    out: dict[str, int] = {}
    for obj in objects:
        phase = str(_dict(obj.get("status")).get("phase") or "Unknown")
        out[phase] = out.get(phase, 0) + 1
    return dict(sorted(out.items()))


def accelerators(devices: Iterable[Mapping[str, Any]]) -> list[Obj]:
    """Cards by model over a cluster's ``Devices`` inventories: model, manufacturer, cards, unhealthy."""
    models: dict[tuple[str, str], list[int]] = {}
    for obj in devices:
        for group in _list(_dict(obj.get("spec")).get("groups")):
            if not isinstance(group, Mapping):
                continue
            key = (str(group.get("name") or group.get("id") or ""), str(group.get("manufacturer") or ""))
            entry = models.setdefault(key, [0, 0])
            for card in _list(group.get("accelerators")):
                entry[0] += 1
                if _dict(_dict(card).get("status")).get("unhealthy") is True:
                    entry[1] += 1
    return [
        {"model": model, "manufacturer": maker, "cards": cards, "unhealthy": bad}
        for (model, maker), (cards, bad) in sorted(models.items())
    ]


def _type_order(obj: Mapping[str, Any]) -> tuple[bool, str]:
    return (not _dict(obj.get("spec")).get("acceleratable"), _name(obj))


def pool_of(instance_type: Mapping[str, Any], pending: Mapping[str, int]) -> Obj:
    """One InstanceType on a cluster tile (and on its pool's page)."""
    spec, status = _dict(instance_type.get("spec")), _dict(instance_type.get("status"))
    entrance = str(status.get("entrance") or "")
    return {
        "name": _name(instance_type),
        "pool": item_name(spec),
        "acceleratable": bool(spec.get("acceleratable")),
        "phase": str(status.get("phase") or "Unknown"),
        "product": str(_dict(status.get("detail")).get("product") or ""),
        "views": {name: view(status, name) for name in VIEWS},
        "pending": pending.get(entrance, 0) if entrance else 0,
    }


# The fleet ---------------------------------------------------------------------------------------


def cluster_tile(cluster: ClusterState) -> Obj:
    nodes = cluster.of("Node")
    pending = pending_by_queue(cluster.of("Workload"))
    types = sorted((t for t in cluster.of("InstanceType") if not _deleting(t)), key=_type_order)
    pools = [pool_of(t, pending) for t in types]
    return {
        "name": cluster.name,
        "state": cluster.state,
        "reason": cluster.reason,
        "lastSeen": iso(cluster.last_seen),
        "nodes": {"total": len(nodes), "ready": sum(1 for n in nodes if node_ready(n))},
        "accelerators": accelerators(cluster.of("Devices")),
        "pools": pools,
        "pendingWorkloads": sum(pending.values()),
        "deployments": by_phase(cluster.of("ModelDeployment")),
        "instances": by_phase(cluster.of("Instance")),
    }


def fleet_pools(tiles: Sequence[Mapping[str, Any]]) -> list[Obj]:
    """The fleet's pools: each pool name's InstanceTypes across clusters, summed."""
    pools: dict[str, Obj] = {}
    for tile in tiles:
        for pool in tile["pools"]:
            entry = pools.setdefault(
                pool["pool"],
                {
                    "name": pool["pool"],
                    "acceleratable": pool["acceleratable"],
                    "product": pool["product"],
                    "clusters": [],
                    "used": 0,
                    "capacity": 0,
                    "pending": 0,
                },
            )
            entry["clusters"].append(tile["name"])
            entry["product"] = entry["product"] or pool["product"]
            cards = pool["views"]["accelerator"]
            entry["used"] += cards["used"]
            entry["capacity"] += cards["capacity"]
            entry["pending"] += pool["pending"]
    return sorted(pools.values(), key=lambda p: (not p["acceleratable"], p["name"]))


def fleet(clusters: Sequence[ClusterState], revision: int, now: float) -> Obj:
    tiles = [cluster_tile(c) for c in sorted(clusters, key=lambda c: c.name)]
    return {"revision": revision, "generatedAt": iso(now), "clusters": tiles, "pools": fleet_pools(tiles)}


# A pool ------------------------------------------------------------------------------------------

_SCHEDULE_KEYS = (constants.LABEL_ACCELERATABLE, constants.LABEL_OS, constants.LABEL_ARCH)
_SCHEDULE_PREFIXES = (constants.PREFIX_ACCELERATABLE, constants.PREFIX_GENERAL)


def selector(instance_type: Mapping[str, Any]) -> dict[str, str]:
    """The node labels that select an InstanceType's nodes: the schedule labels it carries (its
    admission stamps them), else the ones its spec implies."""
    labels = _dict(_meta(instance_type).get("labels"))
    chosen = {
        str(k): str(v)
        for k, v in labels.items()
        if k in _SCHEDULE_KEYS or any(str(k).startswith(p) for p in _SCHEDULE_PREFIXES)
    }
    return chosen or schedule_labels(_dict(instance_type.get("spec")), False)


def _pods_by_card(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """``(node, card id)`` → the Pods (``namespace/name``) whose allocation record charges it."""
    out: dict[tuple[str, str], list[str]] = {}
    for pod in pods:
        meta = _meta(pod)
        if constants.ANNOTATION_ACCELERATOR_ALLOCATED not in _dict(meta.get("annotations")):
            continue
        if str(_dict(pod.get("status")).get("phase") or "") in _FINISHED_PODS:
            continue
        node = str(_dict(pod.get("spec")).get("nodeName") or "")
        who = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        seen: set[str] = set()
        for groups in allocation.record_of(pod).values():
            for group in groups:
                for card in _list(group.get("accelerators")):
                    card_id = str(_dict(card).get("id") or "")
                    if card.get("mode") == constants.DEVICE_MODE_VISIBILITY or card_id in seen:
                        continue
                    seen.add(card_id)
                    out.setdefault((node, card_id), []).append(who)
    return out


def cards(devices: Mapping[str, Any] | None, holders: Mapping[tuple[str, str], list[str]]) -> list[Obj]:
    """A node's card map: every card of its inventory with its ledger entry and holders."""
    if devices is None:
        return []
    node = _name(devices)
    ledger: dict[str, Mapping[str, Any]] = {}
    for group in _list(_dict(devices.get("status")).get("groups")):
        for entry in _list(_dict(group).get("accelerators")):
            if isinstance(entry, Mapping):
                ledger[str(entry.get("id") or "")] = entry
    out: list[Obj] = []
    for group in _list(_dict(devices.get("spec")).get("groups")):
        group = _dict(group)
        model = str(group.get("name") or group.get("id") or "")
        for card in _list(group.get("accelerators")):
            card = _dict(card)
            card_id = str(card.get("id") or "")
            entry = ledger.get(card_id, {})
            mode = entry.get("mode")
            allocated = entry.get("allocated")
            units = allocated if isinstance(allocated, int) and allocated > 0 else 0
            item: Obj = {
                "id": card_id,
                "index": card.get("index") if isinstance(card.get("index"), int) else 0,
                "model": model,
                "mode": MODES.get(mode, "free") if isinstance(mode, int) else "free",
                "allocated": units,
                "fill": round(min(units / UNITS_PER_CARD, 1.0), 4),
                "unhealthy": _dict(card.get("status")).get("unhealthy") is True,
                "pods": holders.get((node, card_id), []),
            }
            slices = entry.get("allocatedSlices")
            if isinstance(slices, int) and slices:
                item["slices"] = slices
            profiles = [
                f"{p.get('name')}×{p.get('count') or 0}"
                for p in _list(entry.get("allocatedProfiles"))
                if isinstance(p, Mapping) and p.get("count")
            ]
            if profiles:
                item["profiles"] = profiles
            out.append(item)
    out.sort(key=lambda c: (c["model"], c["index"], c["id"]))
    return out


def _matches(labels: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


def pool(clusters: Sequence[ClusterState], name: str, revision: int, now: float) -> Obj | None:
    """The page of fleet pool ``name``; None when no cluster has an InstanceType of that pool."""
    candidates: list[Obj] = []
    nodes: list[Obj] = []
    acceleratable = False
    product = ""
    for cluster in sorted(clusters, key=lambda c: c.name):
        types = [
            t
            for t in cluster.of("InstanceType")
            if not _deleting(t) and item_name(_dict(t.get("spec"))) == name
        ]
        if not types:
            continue
        pending = pending_by_queue(cluster.of("Workload"))
        devices = {_name(d): d for d in cluster.of("Devices")}
        holders = _pods_by_card(cluster.of("Pod"))
        serving: dict[str, list[str]] = {}
        for instance_type in sorted(types, key=_name):
            entry = pool_of(instance_type, pending)
            entry["cluster"] = cluster.name
            entry["state"] = cluster.state
            candidates.append(entry)
            acceleratable = acceleratable or entry["acceleratable"]
            product = product or entry["product"]
            wanted = selector(instance_type)
            for node in cluster.of("Node"):
                if _matches(_dict(_meta(node).get("labels")), wanted):
                    serving.setdefault(_name(node), []).append(entry["name"])
        by_name = {_name(n): n for n in cluster.of("Node")}
        for node_name in sorted(serving):
            card_map = cards(devices.get(node_name), holders)
            nodes.append(
                {
                    "cluster": cluster.name,
                    "name": node_name,
                    "ready": node_ready(by_name[node_name]),
                    "instanceTypes": serving[node_name],
                    "cardsUsed": sum(1 for c in card_map if c["mode"] != "free"),
                    "cardsTotal": len(card_map),
                    "cards": card_map,
                }
            )
    if not candidates:
        return None
    return {
        "revision": revision,
        "generatedAt": iso(now),
        "name": name,
        "acceleratable": acceleratable,
        "product": product,
        "candidates": candidates,
        "nodes": nodes,
    }


# ModelDeployments and Instances ----------------------------------------------------------------


def conditions(obj: Mapping[str, Any]) -> list[Obj]:
    return [
        {
            "type": str(c.get("type") or ""),
            "status": str(c.get("status") or ""),
            "reason": str(c.get("reason") or ""),
            "message": str(c.get("message") or ""),
        }
        for c in _list(_dict(obj.get("status")).get("conditions"))
        if isinstance(c, Mapping)
    ]


def _endpoints(status: Mapping[str, Any]) -> list[str]:
    out = [str(a) for a in _list(status.get("accessAddresses")) if a]
    for port in _list(status.get("ports")):
        port = _dict(port)
        text = f"{port.get('name') or port.get('protocol') or 'port'} {port.get('port')}"
        if port.get("nodePort"):
            text += f" → node port {port.get('nodePort')}"
        out.append(text)
    return out


def _row(cluster: str, obj: Mapping[str, Any]) -> Obj:
    meta, status = _meta(obj), _dict(obj.get("status"))
    return {
        "cluster": cluster,
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name") or ""),
        "phase": str(status.get("phase") or "Unknown"),
        "message": str(status.get("phaseMessage") or ""),
        "conditions": conditions(obj),
    }


def workloads(clusters: Sequence[ClusterState], revision: int, now: float) -> Obj:
    deployments: list[Obj] = []
    instances: list[Obj] = []
    for cluster in sorted(clusters, key=lambda c: c.name):
        for obj in sorted(
            cluster.of("ModelDeployment"), key=lambda o: (_meta(o).get("namespace") or "", _name(o))
        ):
            row = _row(cluster.name, obj)
            status = _dict(obj.get("status"))
            row["endpoint"] = str(status.get("endpoint") or "")
            row["roles"] = str(status.get("roleSummary") or "")
            deployments.append(row)
        for obj in sorted(cluster.of("Instance"), key=lambda o: (_meta(o).get("namespace") or "", _name(o))):
            row = _row(cluster.name, obj)
            status = _dict(obj.get("status"))
            row["node"] = str(status.get("nodeName") or "")
            row["endpoints"] = _endpoints(status)
            instances.append(row)
    return {"revision": revision, "generatedAt": iso(now), "deployments": deployments, "instances": instances}
