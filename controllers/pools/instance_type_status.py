"""An InstanceType's status, purely: phase, entrance, hardware detail and the four views (§2.2, §7).

The views are ``fastpath.views``' projection of the pool's ledger (the same fit gates 1, 3 and 5
use), scoped to the type's accelerator group; the detail comes from one ``Devices`` read (the
first pool node, by name, that reports the group), so ``manufacturer`` and ``slicedDetail`` are
written together.  ``unitSummary``, ``acceleratorSummary`` and ``cpuSummary`` are the printer
columns' strings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from api import constants
from api.naming import local_queue_name
from api.objects import Obj
from api.versions import ordered
from controllers.pools import render
from controllers.pools.queue_plan import STOP_DRAIN, STOP_HOLD
from fastpath import views
from fastpath.cards import Ledger, NodeLedger
from fastpath.ledger import accelerator_key, node_ledger


def phase_of(instance_type: Mapping[str, Any], queue: Mapping[str, Any] | None) -> tuple[str, str]:
    """``(phase, phaseMessage)``: Active, Inactive (admin Hold, empty pool, drained) or Draining
    (a drain, or a profile change's Hold, while it lasts).  A queue held or drained for a live
    profile change (marked ``topology.gpustack.ai/profile-change``) says so, with the profiles:
    its nodes are all there, so it never reads "no node serves this pool"."""
    if render.deleting(instance_type):
        return constants.PHASE_INACTIVE, "being deleted: its queue is torn down"
    if queue is None:
        return constants.PHASE_INACTIVE, "waiting for its ClusterQueue"
    spec = queue.get("spec") or {}
    status = queue.get("status") or {}
    policy = spec.get("stopPolicy") or "None"
    annotations = (queue.get("metadata") or {}).get("annotations") or {}
    saved = annotations.get(constants.ANNOTATION_DRAIN_PLAN_HOLD)
    moves = annotations.get(constants.ANNOTATION_PROFILE_CHANGE)
    change = "profile change in progress" + (f" ({moves})" if moves else "")
    if policy == STOP_DRAIN:
        # Admitted workloads are among the reserving ones: count each once.
        busy = max(int(status.get("reservingWorkloads") or 0), int(status.get("admittedWorkloads") or 0))
        if busy:
            what = f"{change}: draining" if moves else "draining"
            return constants.PHASE_DRAINING, f"{what}: {busy} workload(s) still hold quota"
        if moves:
            return constants.PHASE_INACTIVE, f"{change}: drained, the pool's plan swaps next"
        if spec.get("resourceGroups"):
            # A flavor left the pool some other way (its nodes are elsewhere): the swap follows.
            return constants.PHASE_INACTIVE, "drained: the pool's plan swaps next"
        return constants.PHASE_INACTIVE, "drained: no node serves this pool"
    if policy == STOP_HOLD:
        if saved is not None and saved != STOP_HOLD:
            # A profile change's Hold (only a profile change holds with a saved policy): the
            # admitted workloads run to their end, then the plan swaps; not Inactive, which would
            # stop the type's Instances.
            busy = int(status.get("reservingWorkloads") or 0)
            return (
                constants.PHASE_DRAINING,
                f"{change}: held, {busy} workload(s) run until they end",
            )
        if constants.ANNOTATION_EMPTY_PLAN_HOLD in annotations:
            return constants.PHASE_INACTIVE, "held: no node serves this pool yet"
        return constants.PHASE_INACTIVE, "held: the type is inactive"
    return constants.PHASE_ACTIVE, ""


def _memory(mib: Any) -> str:
    value = render._int(mib)
    if value <= 0:
        return ""
    return f"{value // 1024}Gi" if value % 1024 == 0 else f"{value}Mi"


def _group_of(devices: Mapping[str, Any], accelerator_group: str) -> Obj | None:
    labels = [
        k[len(constants.PREFIX_ACCELERATABLE) :]
        for k, v in ((devices.get("metadata") or {}).get("labels") or {}).items()
        if k.startswith(constants.PREFIX_ACCELERATABLE) and v == "true"
    ]
    for group in (devices.get("spec") or {}).get("groups") or []:
        if accelerator_key(group, labels) == accelerator_group:
            return group
    return None


def accelerator_detail(devices: Mapping[str, Any] | None, accelerator_group: str) -> Obj:
    """The accelerator half of ``status.detail``, from one ``Devices`` object."""
    group = _group_of(devices, accelerator_group) if devices else None
    if group is None:
        return {}
    detail: Obj = {"manufacturer": group.get("manufacturer") or "", "product": group.get("name") or ""}
    if group.get("family"):
        detail["family"] = group["family"]
    if _memory(group.get("memory")):
        detail["memory"] = _memory(group.get("memory"))
    if group.get("cores"):
        detail["cores"] = str(group["cores"])
    if group.get("computeCapability"):
        detail["computeCapability"] = group["computeCapability"]
    sliced = group.get("acceleratorSlicedDetail")
    if sliced:
        detail["slicedDetail"] = sliced
    return detail


def runtime_versions(ledgers: Iterable[Mapping[str, Any] | None], accelerator_group: str) -> list[str]:
    """Every runtime version the pool's nodes report for the group, lowest first (the runner image
    takes the lowest: only it runs on every node)."""
    found = []
    for ledger in ledgers:
        group = _group_of(ledger, accelerator_group) if ledger else None
        if group is not None and isinstance(group.get("runtimeVersion"), str):
            found.append(group["runtimeVersion"])
    return ordered(found)


def cpu_detail(node_facts: render.NodeFacts | None, general_group: str) -> Obj:
    """The CPU descriptor from the ``feature.gpustack.ai/cpu-*`` node annotations."""
    if node_facts is None:
        return {}
    raw = dict(node_facts.cpu_detail)
    out: Obj = {}
    manufacturer = (
        general_group.split("-", 1)[0] if general_group and general_group != constants.GENERIC_GROUP else ""
    )
    if manufacturer:
        out["manufacturer"] = manufacturer
    if raw.get("name"):
        out["product"] = raw["name"]
    if raw.get("family"):
        out["family"] = raw["family"]
    for key, field in (
        ("physical-cores", "physicalCores"),
        ("threads-per-core", "threadsPerPhysicalCore"),
        ("logical-cores", "logicalCores"),
        ("stepping", "stepping"),
        ("hz", "clockSpeed"),
        ("boost-freq", "maxClockSpeed"),
        ("cache-line", "cacheLine"),
    ):
        if raw.get(key):
            out[field] = raw[key]
    cache = {k[len("cache-") :]: v for k, v in raw.items() if k.startswith("cache-l")}
    if cache:
        out["cache"] = cache
    return out


def pool_nodes(
    instance_type: Mapping[str, Any],
    groups: Mapping[str, render.FlavorGroup],
    flavors: Iterable[Mapping[str, Any]],
    *,
    aware_cpu: bool,
    mixed_on_node: bool = True,
) -> list[str]:
    """The nodes serving an InstanceType: contributors of its live matching flavors, and of those
    the flavors controller is about to create for it.  A node whose topology profile just changed
    contributes to a flavor that does not exist yet, while it still serves the pool under its old
    one (retiring, drained only once the new one is there): its cards count all along, so the pool
    never reads empty in between and admission does not refuse what fits."""
    flavors = list(flavors)
    live = {render.name_of(f) for f in flavors}
    upcoming = [
        render.render_flavor(group, aware_cpu=aware_cpu, mixed_on_node=mixed_on_node)
        for name, group in groups.items()
        if name not in live
    ]
    names: set[str] = set()
    for flavor in render.pool_flavors(instance_type, [*flavors, *upcoming], aware_cpu=aware_cpu):
        if render.deleting(flavor):
            continue
        group = groups.get(render.name_of(flavor))
        if group is not None:
            names.update(group.nodes)
    return sorted(names)


class NodeLedgerMemo:
    """Each pool node's ledger of one accelerator group kept between reconciles, by its ``Devices``
    resourceVersion and the node's cores: a pool is rebuilt only where a ``Devices`` moved (all of
    them: about 104 ms of CPU at 10,000 nodes × 8 cards).  The kept ledgers are shared, so nothing
    may change them (the views only read them).  One reconciler's, one worker (not thread-safe)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], tuple[str, int, NodeLedger]] = {}

    def ledger(self, name: str, devices: Mapping[str, Any], group: str, cores: int) -> NodeLedger:
        """:func:`fastpath.ledger.build_ledger`'s ledger of one node."""
        version = (devices.get("metadata") or {}).get("resourceVersion")
        kept = self._kept.get((name, group))
        if kept is not None and version and kept[0] == version and kept[1] == cores:
            return kept[2]
        built = node_ledger(dict(devices), group)
        built.cores = cores
        if isinstance(version, str) and version:
            self._kept[(name, group)] = (version, cores, built)
        return built

    def __len__(self) -> int:
        return len(self._kept)

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the nodes not named (gone from every pool this memo serves)."""
        present = set(names)
        for key in [k for k in self._kept if k[0] not in present]:
            del self._kept[key]


def render_status(
    instance_type: Mapping[str, Any],
    queue: Mapping[str, Any] | None,
    nodes: Iterable[render.NodeFacts],
    devices: Mapping[str, Mapping[str, Any]],
    node_ledgers: NodeLedgerMemo | None = None,
) -> Obj:
    """The whole ``status`` of an InstanceType from its pool's nodes (facts) and their Devices;
    ``node_ledgers``: the node ledgers earlier reconciles built (the status is the same without)."""
    spec = instance_type.get("spec") or {}
    name = render.name_of(instance_type)
    accelerated = bool(spec.get("acceleratable"))
    group = (spec.get("acceleratorGroup") or "") if accelerated else ""
    facts = sorted(nodes, key=lambda f: f.name)
    if accelerated:
        memo = node_ledgers if node_ledgers is not None else NodeLedgerMemo()
        ledger = Ledger(
            [memo.ledger(f.name, devices[f.name], group, f.cores) for f in facts if f.name in devices]
        )
    else:
        ledger = Ledger([NodeLedger(f.name, [], f.cores) for f in facts])
    pool_views = views.views(ledger)
    phase, message = phase_of(instance_type, queue)
    status: Obj = {"phase": phase}
    if message:
        status["phaseMessage"] = message
    status["entrance"] = local_queue_name(name)
    detail: Obj = {}
    first = facts[0] if facts else None
    if accelerated:
        for f in facts:
            detail = accelerator_detail(devices.get(f.name), group)
            if detail:
                break
        versions = runtime_versions((devices.get(f.name) for f in facts), group)
        if detail and versions:
            detail["runtimeVersion"] = versions[0]
            detail["runtimeVersions"] = versions
        host = cpu_detail(first, spec.get("generalGroup") or "")
        if detail and host:
            detail["cpu"] = host
    elif first is not None:
        detail = cpu_detail(first, spec.get("generalGroup") or "") or {}
        detail.setdefault("manufacturer", spec.get("generalGroup") or constants.GENERIC_GROUP)
    if detail:
        status["detail"] = detail
    status.update(pool_views.to_status())
    unit = spec.get("unitResources") or {}
    status["unitSummary"] = f"{unit.get('cpu', '')}/{unit.get('ram', '')}/{spec.get('localStorage', '')}"
    status["acceleratorSummary"] = pool_views.summary()
    status["cpuSummary"] = pool_views.cpu_summary()
    return status


def status_changed(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """Compare as the apiserver stores it (JSON), so an unchanged status is never rewritten."""
    return json.dumps(current or {}, sort_keys=True) != json.dumps(desired, sort_keys=True)
