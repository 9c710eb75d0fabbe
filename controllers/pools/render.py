"""Pools, purely: from labelled Nodes to ResourceFlavors, Topologies, derived InstanceTypes and
LocalQueues (devices spec §8, topology spec B.4).

A managed Node contributes to one **flavor group** per pool it serves: the CPU group
(``<gKey>``, its cores) and one accelerated group per accelerator key (``<gKey>--<aKey>``, its card
count), each further split by os, arch and topology profile.  A flavor is rendered from its
group; its identity comes from the first contributor (by name), and it is deleted when no node
contributes.  Queues and InstanceTypes are the aggregation layer above flavors: a pool is the set
of flavors whose labels carry an InstanceType's schedule labels.

Everything here is a pure function of its arguments; the reconcilers read caches and apply.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api import API_VERSION, constants, unit_presets
from api.manufacturers import UNITS_PER_CARD, manufacturer_of_group
from api.naming import instance_type_name, local_queue_name, schedule_labels, topology_profile
from api.objects import Obj
from api.topology import normalized_levels

# Our additions to the vocabulary (candidates for api.constants once the chain settles).
HOSTNAME_PROFILE = topology_profile([constants.LABEL_HOSTNAME])
TOPOLOGY_PREFIX = "gpustack-"
NOTE_GROUP = constants.PREFIX_NOTE + "group"
NOTE_MANUFACTURER = constants.PREFIX_NOTE + "manufacturer"
NOTE_PRODUCT = constants.PREFIX_NOTE + "product"
NOTE_FAMILY = constants.PREFIX_NOTE + "family"
NOTE_MEMORY = constants.PREFIX_NOTE + "memory"
NOTE_CORES = constants.PREFIX_NOTE + "cores"
NOTE_COMPUTE_CAPABILITY = constants.PREFIX_NOTE + "computeCapability"
SYSTEM_NAMESPACES = frozenset((*constants.KUBE_SYSTEM_NAMESPACES, constants.SYSTEM_NAMESPACE, "kueue-system"))
TOLERATE_ALL = [{"operator": "Exists"}]
_CPU_DETAIL_ANNOTATIONS = (
    "name",
    "family",
    "physical-cores",
    "threads-per-core",
    "logical-cores",
    "stepping",
    "cache-line",
    "hz",
    "boost-freq",
    "cache-l1i",
    "cache-l1d",
    "cache-l2",
    "cache-l3",
)


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def name_of(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


def deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(obj and (obj.get("metadata") or {}).get("deletionTimestamp"))


def _int(value: Any) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return 0


def cpu_cores(quantity: Any) -> int:
    """Whole cores of a CPU quantity, rounded up (``"63500m"`` → 64)."""
    text = str(quantity or "").strip()
    try:
        if text.endswith("m"):
            return math.ceil(int(text[:-1]) / 1000)
        return math.ceil(float(text))
    except ValueError:
        return 0


# --- Node facts --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What a Node's labels say about the pools it serves."""

    name: str
    os: str
    arch: str
    managed: bool
    general_group: str  # <gKey>; "" without a general feature label
    cores: int
    accelerators: tuple[tuple[str, int], ...]  # (<aKey>, cards), by key
    profile: str  # topology.gpustack.ai/profile; "" while unlabelled
    cpu_only: bool
    cpu_detail: tuple[tuple[str, str], ...] = ()
    notes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # per <aKey>: its descriptors


def _groups_with_count(labels: Mapping[str, str], prefix: str) -> list[tuple[str, int]]:
    """``<prefix><key>: "true"`` keys that also carry ``<prefix><key>.count`` (a manufacturer
    label such as ``acceleratable.feature.gpustack.ai/nvidia`` has no count and is no group)."""
    out = []
    for key, value in labels.items():
        if not key.startswith(prefix) or value != "true":
            continue
        group = key[len(prefix) :]
        count = labels.get(f"{prefix}{group}.count")
        if count is not None and "/" not in group:
            out.append((group, _int(count)))
    return sorted(out)


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    labels = _labels(node)
    annotations = _annotations(node)
    general = _groups_with_count(labels, constants.PREFIX_GENERAL)
    gkey, cores = general[0] if general else ("", 0)
    if cores <= 0:
        cores = cpu_cores(((node.get("status") or {}).get("capacity") or {}).get("cpu"))
    accelerators = tuple(
        (a, n) for a, n in _groups_with_count(labels, constants.PREFIX_ACCELERATABLE) if n > 0
    )
    notes = []
    for akey, _count in accelerators:
        prefix = f"{constants.PREFIX_ACCELERATABLE}{akey}."
        described = tuple(
            sorted((k[len(prefix) :], v) for k, v in labels.items() if k.startswith(prefix) and v)
        )
        notes.append((akey, described))
    detail = []
    for item in _CPU_DETAIL_ANNOTATIONS:
        value = annotations.get(constants.PREFIX_CPU_ANNOTATION + item)
        if value and not value.startswith("@"):
            detail.append((item, value))
    return NodeFacts(
        name=name_of(node),
        os=labels.get(constants.LABEL_OS, ""),
        arch=labels.get(constants.LABEL_ARCH, ""),
        managed=labels.get(constants.LABEL_MANAGED) == "true",
        general_group=gkey,
        cores=cores,
        accelerators=accelerators,
        profile=labels.get(constants.LABEL_TOPOLOGY_PROFILE, ""),
        cpu_only=labels.get(constants.LABEL_CPU_ONLY) == "true",
        cpu_detail=tuple(detail),
        notes=tuple(notes),
    )


# --- Flavor groups -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class FlavorKey:
    """Flavor identity: hardware key × os × arch × per-node count × topology profile."""

    general_group: str
    accelerator_group: str  # "" on a CPU flavor
    os: str
    arch: str
    count: int  # cards per node (accelerated) or cores per node (CPU)
    profile: str

    @property
    def acceleratable(self) -> bool:
        return bool(self.accelerator_group)

    @property
    def name(self) -> str:
        """``gpustack--<gKey>-<os>-<arch>-<cores>c`` / ``gpustack--<gKey>--<aKey>-<os>-<arch>-<n>d``;
        a profile other than hostname-only is appended, since it is part of flavor identity and a
        live profile change must yield a replacement flavor rather than edit an immutable one."""
        if self.acceleratable:
            head = f"{constants.NAME_PREFIX}{self.general_group}--{self.accelerator_group}"
            tail = f"{self.count}d"
        else:
            head, tail = f"{constants.NAME_PREFIX}{self.general_group}", f"{self.count}c"
        name = f"{head}-{self.os}-{self.arch}-{tail}"
        return name if self.profile == HOSTNAME_PROFILE else f"{name}-{self.profile}"

    @property
    def feature_label(self) -> str:
        """The key whose ``.count``/``.capacity`` the flavor carries."""
        if self.acceleratable:
            return constants.label_accelerator_group(self.accelerator_group)
        return constants.label_general_group(self.general_group)


@dataclass(slots=True)
class FlavorGroup:
    key: FlavorKey
    nodes: list[str] = field(default_factory=list)
    first: NodeFacts | None = None  # the identity source: the first contributor by name

    @property
    def capacity(self) -> int:
        return len(self.nodes) * self.key.count


def flavor_groups(
    nodes: Iterable[Mapping[str, Any]], *, mixed_on_node: bool = True
) -> dict[str, FlavorGroup]:
    """Managed, profiled nodes grouped by flavor, by flavor name.  With ``mixed_on_node`` false an
    accelerated node serves only its accelerator pools and CPU flavors take ``cpu-only`` nodes."""
    return _groups_of((node_facts(n) for n in nodes), mixed_on_node=mixed_on_node)


class NodeFactsMemo:
    """:func:`node_facts` and :func:`flavor_groups` kept between one reconcile and the next: a
    Node's facts are read again only when its ``resourceVersion`` moved (and kept as the same object
    when they read the same), and the groups are rebuilt only when some Node's facts changed, came
    or went.  At 10,000 nodes the two cost about 330 ms of CPU per InstanceType reconcile when
    recomputed; kept, a few milliseconds.  One reconciler's, one worker (not thread-safe)."""

    __slots__ = ("_facts", "_groups", "_last")

    def __init__(self) -> None:
        self._facts: dict[str, tuple[str, NodeFacts]] = {}  # name -> (resourceVersion, facts)
        self._last: tuple[bool, list[NodeFacts]] | None = None  # what the groups were built from
        self._groups: dict[str, FlavorGroup] = {}

    def facts(self, node: Mapping[str, Any]) -> NodeFacts:
        name = name_of(node)
        version = (node.get("metadata") or {}).get("resourceVersion")
        known = self._facts.get(name)
        if known is not None and version and known[0] == version:
            return known[1]
        facts = node_facts(node)
        if known is not None and known[1] == facts:
            facts = known[1]
        if isinstance(version, str) and version:
            self._facts[name] = (version, facts)
        return facts

    def groups(
        self, nodes: Iterable[Mapping[str, Any]], *, mixed_on_node: bool = True
    ) -> dict[str, FlavorGroup]:
        """:func:`flavor_groups` of ``nodes``; the caller must not change what it returns."""
        facts = [self.facts(n) for n in nodes]
        if len(self._facts) > len(facts):  # Nodes gone: forget them
            present = {f.name for f in facts}
            for name in [n for n in self._facts if n not in present]:
                del self._facts[name]
        last = self._last
        if (
            last is not None
            and last[0] == mixed_on_node
            and len(last[1]) == len(facts)
            and all(a is b for a, b in zip(last[1], facts, strict=True))
        ):
            return self._groups
        self._groups = _groups_of(facts, mixed_on_node=mixed_on_node)
        self._last = (mixed_on_node, facts)
        return self._groups


def _groups_of(facts: Iterable[NodeFacts], *, mixed_on_node: bool) -> dict[str, FlavorGroup]:
    groups: dict[str, FlavorGroup] = {}
    for one in sorted(facts, key=lambda f: f.name):
        for key in node_flavor_keys(one, mixed_on_node=mixed_on_node):
            group = groups.get(key.name)
            if group is None:
                group = groups[key.name] = FlavorGroup(key, first=one)
            group.nodes.append(one.name)
    return groups


def node_flavor_keys(facts: NodeFacts, *, mixed_on_node: bool = True) -> list[FlavorKey]:
    """The flavors a node contributes to; none while it is unmanaged, unnamed by os/arch, without a
    general key, or not yet given a topology profile (its flavor would pin a label it lacks)."""
    if not (facts.managed and facts.os and facts.arch and facts.general_group and facts.profile):
        return []
    keys = []
    if facts.cores > 0 and (mixed_on_node or (facts.cpu_only and not facts.accelerators)):
        keys.append(FlavorKey(facts.general_group, "", facts.os, facts.arch, facts.cores, facts.profile))
    for akey, count in facts.accelerators:
        keys.append(FlavorKey(facts.general_group, akey, facts.os, facts.arch, count, facts.profile))
    return keys


def render_flavor(group: FlavorGroup, *, aware_cpu: bool = False, mixed_on_node: bool = True) -> Obj:
    """The ResourceFlavor of a group (a server-side apply body)."""
    key, first = group.key, group.first
    general = constants.label_general_group(key.general_group)
    labels = {
        constants.LABEL_OS: key.os,
        constants.LABEL_ARCH: key.arch,
        constants.LABEL_ACCELERATABLE: "true" if key.acceleratable else "false",
        general: "true",
        f"{key.feature_label}.count": str(key.count),
        f"{key.feature_label}.capacity": str(group.capacity),
        constants.LABEL_RESOURCE_TYPE: constants.RESOURCE_TYPE_NODES,
        constants.LABEL_TOPOLOGY_PROFILE: key.profile,
    }
    node_labels = {
        constants.LABEL_OS: key.os,
        constants.LABEL_ARCH: key.arch,
        constants.LABEL_MANAGED: "true",
        general: "true",
        f"{key.feature_label}.count": str(key.count),
        constants.LABEL_TOPOLOGY_PROFILE: key.profile,
    }
    notes = {NOTE_GROUP: key.accelerator_group or key.general_group}
    if key.acceleratable:
        labels[key.feature_label] = "true"
        node_labels[key.feature_label] = "true"
        notes.update(_accelerator_notes(key.accelerator_group, first))
    elif not mixed_on_node:
        node_labels[constants.LABEL_CPU_ONLY] = "true"
    if first is not None and first.cpu_detail and (not key.acceleratable or aware_cpu):
        notes[constants.ANNOTATION_CPU_DETAIL] = json.dumps(dict(first.cpu_detail), sort_keys=True)
    if not key.acceleratable:
        notes[NOTE_CORES] = str(key.count)
    return {
        "apiVersion": constants.KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": key.name, "labels": labels, "annotations": notes},
        "spec": {
            "nodeLabels": node_labels,
            "tolerations": [dict(t) for t in TOLERATE_ALL],
            "topologyName": topology_name(key.profile),
        },
    }


def _accelerator_notes(akey: str, first: NodeFacts | None) -> dict[str, str]:
    described = dict(dict(first.notes).get(akey, ())) if first is not None else {}
    maker = manufacturer_of_group(akey)
    notes = {NOTE_MANUFACTURER: maker.name if maker else akey.split("-", 1)[0]}
    for note, label in (
        (NOTE_PRODUCT, "product"),
        (NOTE_FAMILY, "family"),
        (NOTE_MEMORY, "memory"),
        (NOTE_CORES, "cores"),
        (NOTE_COMPUTE_CAPABILITY, "comcap"),
    ):
        if described.get(label):
            notes[note] = described[label]
    return notes


def flavor_spec_drift(desired: Obj, current: Obj) -> list[str]:
    """The immutable flavor fields (Kueue freezes nodeLabels, tolerations and topologyName once a
    topology is set) on which ``current`` differs from ``desired``: reported, never edited."""
    want, have = desired.get("spec") or {}, current.get("spec") or {}
    if not have.get("topologyName"):
        return []
    return [
        f
        for f in ("nodeLabels", "tolerations", "topologyName")
        if (want.get(f) or None) != (have.get(f) or None)
    ]


KUEUE_NUDGE_SECONDS = 20.0


def held_by_kueue(topology: Mapping[str, Any], referenced: set[str]) -> bool:
    """A deleted Topology no flavor names any more, still carrying Kueue's in-use finalizer.

    Kueue looks at a deleted Topology on its own events and on a flavor's deletion, and leaves the
    finalizer when its cache still listed the flavor at that moment; nothing brings it back (seen on
    a live profile change, and it hangs ``helm uninstall`` on the Topology CRD). An update of the
    Topology is such an event: :func:`nudge_patch`."""
    meta = topology.get("metadata") or {}
    return (
        bool(meta.get("deletionTimestamp"))
        and constants.KUEUE_RESOURCE_IN_USE in (meta.get("finalizers") or [])
        and name_of(topology) not in referenced
    )


def nudge_due(topology: Mapping[str, Any], now: float) -> bool:
    """No nudge yet, or the last one is ``KUEUE_NUDGE_SECONDS`` old (its value: epoch seconds)."""
    last = ((topology.get("metadata") or {}).get("annotations") or {}).get(
        constants.ANNOTATION_KUEUE_NUDGED_AT
    )
    try:
        return last is None or now - float(last) >= KUEUE_NUDGE_SECONDS
    except ValueError:
        return True


def nudge_patch(now: float) -> Obj:
    return {"metadata": {"annotations": {constants.ANNOTATION_KUEUE_NUDGED_AT: f"{now:.0f}"}}}


def owned_flavor(obj: Mapping[str, Any]) -> bool:
    return _labels(obj).get(constants.LABEL_RESOURCE_TYPE) == constants.RESOURCE_TYPE_NODES


def retiring(flavor: Mapping[str, Any]) -> bool:
    """A generated flavor whose nodes moved to another topology profile, kept only while a queue
    still lists it (B.4 step 7): never part of a new plan, but a reason to drain before a swap."""
    return _labels(flavor).get(constants.LABEL_FLAVOR_RETIRING) == "true"


def group_keys(labels: Mapping[str, str], prefix: str) -> list[str]:
    """The ``<prefix><group>: "true"`` keys of a flavor or selector, sorted (a group's facts, such
    as ``<group>.count``, are not keys of their own)."""
    return sorted(
        k for k, v in labels.items() if k.startswith(prefix) and "." not in k[len(prefix) :] and v == "true"
    )


def hardware_identity(flavor: Mapping[str, Any]) -> tuple[str, ...] | None:
    """A generated flavor's identity without its topology profile (general key, accelerator key,
    os, arch, per-node count), from its labels; two flavors that differ only in profile share it."""
    labels = _labels(flavor)
    general = group_keys(labels, constants.PREFIX_GENERAL)
    accelerated = group_keys(labels, constants.PREFIX_ACCELERATABLE)
    os, arch = labels.get(constants.LABEL_OS, ""), labels.get(constants.LABEL_ARCH, "")
    if not general or not os or not arch:
        return None
    return (*general, *accelerated, os, arch, str(flavor_count(flavor)))


# --- Topologies ---------------------------------------------------------------------------------------


def topology_name(profile: str) -> str:
    return TOPOLOGY_PREFIX + profile


def topology_levels(profile: str, sources: Iterable[Mapping[str, Any]] = ()) -> list[str] | None:
    """The ordered level keys behind a profile hash: hostname-only, or a prefix of some
    TopologySource's normalised levels followed by the hostname (B.4); None when no source
    explains it."""
    if profile == HOSTNAME_PROFILE:
        return [constants.LABEL_HOSTNAME]
    for source in sources:
        levels = normalized_levels([str(level) for level in ((source.get("spec") or {}).get("levels") or [])])
        for size in range(len(levels), 0, -1):
            keys = [*levels[:size], constants.LABEL_HOSTNAME]
            if topology_profile(keys) == profile:
                return keys
    return None


def render_topology(profile: str, levels: list[str]) -> Obj:
    return {
        "apiVersion": constants.KUEUE_API_VERSION,
        "kind": "Topology",
        "metadata": {
            "name": topology_name(profile),
            "labels": {
                constants.LABEL_RESOURCE_TYPE: constants.RESOURCE_TYPE_NODES,
                constants.LABEL_TOPOLOGY_PROFILE: profile,
            },
        },
        "spec": {"levels": [{"nodeLabel": key} for key in levels]},
    }


def topology_drift(desired: Obj, current: Obj) -> bool:
    return (desired.get("spec") or {}).get("levels") != (current.get("spec") or {}).get("levels")


# --- Pools: flavors ⇄ InstanceTypes --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Pool:
    """An InstanceType's identity (its spec's immutable half)."""

    acceleratable: bool
    accelerator_group: str
    general_group: str
    os: str
    arch: str

    def name(self, aware_cpu: bool) -> str:
        return instance_type_name(self.os, self.arch, self.accelerator_group, self.general_group, aware_cpu)

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "acceleratable": self.acceleratable,
            "generalGroup": self.general_group,
            "os": self.os,
            "arch": self.arch,
        }
        if self.acceleratable:
            spec["acceleratorGroup"] = self.accelerator_group
        return spec


def pool_of_flavor(flavor: Mapping[str, Any], *, aware_cpu: bool) -> Pool | None:
    """The pool a generated flavor belongs to under the current grouping setting."""
    labels = _labels(flavor)
    general = [
        k[len(constants.PREFIX_GENERAL) :]
        for k, v in labels.items()
        if k.startswith(constants.PREFIX_GENERAL) and v == "true"
    ]
    accel = [
        k[len(constants.PREFIX_ACCELERATABLE) :]
        for k, v in labels.items()
        if k.startswith(constants.PREFIX_ACCELERATABLE) and v == "true"
    ]
    os, arch = labels.get(constants.LABEL_OS, ""), labels.get(constants.LABEL_ARCH, "")
    if not os or not arch or len(general) != 1 or len(accel) > 1:
        return None
    gkey = general[0] if aware_cpu else constants.GENERIC_GROUP
    return Pool(bool(accel), accel[0] if accel else "", gkey, os, arch)


def pool_of_instance_type(instance_type: Mapping[str, Any]) -> Pool:
    spec = instance_type.get("spec") or {}
    acceleratable = bool(spec.get("acceleratable"))
    return Pool(
        acceleratable,
        (spec.get("acceleratorGroup") or "") if acceleratable else "",
        spec.get("generalGroup") or constants.GENERIC_GROUP,
        spec.get("os") or "",
        spec.get("arch") or "",
    )


def instance_type_schedule_labels(instance_type: Mapping[str, Any], aware_cpu: bool) -> dict[str, str]:
    return schedule_labels(instance_type.get("spec") or {}, aware_cpu)


def matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pool_flavors(
    instance_type: Mapping[str, Any], flavors: Iterable[Mapping[str, Any]], *, aware_cpu: bool
) -> list[Mapping[str, Any]]:
    """Our flavors (live or finalizing) whose labels carry the InstanceType's schedule labels;
    admin-authored types are matched the same way as derived ones."""
    selector = instance_type_schedule_labels(instance_type, aware_cpu)
    return [f for f in flavors if owned_flavor(f) and matches(selector, _labels(f))]


def derived_instance_type(pool: Pool, *, aware_cpu: bool) -> Obj:
    """The operator-authored InstanceType of a pool: schedule labels, entrance and the derived
    mark, and the unit preset of its product tier (created once, never rewritten)."""
    name = pool.name(aware_cpu)
    spec = pool.spec()
    if pool.acceleratable:
        preset = unit_presets.for_accelerator(pool.accelerator_group)
    else:
        preset = unit_presets.cpu_only()
    spec["unitResources"] = {"cpu": preset.cpu, "ram": preset.ram}
    spec["localStorage"] = preset.local_storage
    labels = {
        **schedule_labels(spec, aware_cpu),
        constants.LABEL_QUEUE_ENTRANCE: local_queue_name(name),
        constants.LABEL_DERIVED_FROM_NODE: "true",
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "InstanceType",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def derived_pools(flavors: Iterable[Mapping[str, Any]], *, aware_cpu: bool) -> dict[str, Pool]:
    """The pools live generated flavors call for, by InstanceType name."""
    out: dict[str, Pool] = {}
    for flavor in flavors:
        if not owned_flavor(flavor) or deleting(flavor):
            continue
        pool = pool_of_flavor(flavor, aware_cpu=aware_cpu)
        if pool is not None:
            out.setdefault(pool.name(aware_cpu), pool)
    return out


def flavor_count(flavor: Mapping[str, Any]) -> int:
    """A generated flavor's per-node count (cards or cores), from its ``.count`` label."""
    return _feature_number(flavor, ".count")


def _feature_number(flavor: Mapping[str, Any], suffix: str) -> int:
    labels = _labels(flavor)
    prefix = (
        constants.PREFIX_ACCELERATABLE
        if labels.get(constants.LABEL_ACCELERATABLE) == "true"
        else constants.PREFIX_GENERAL
    )
    for key, value in labels.items():
        if key.startswith(prefix) and key.endswith(suffix):
            return _int(value)
    return 0


def flavor_capacity(flavor: Mapping[str, Any]) -> int:
    """Nodes × per-node count, from the flavor's ``.capacity`` label."""
    return _feature_number(flavor, ".capacity")


def credits_resource(pool: Pool) -> str | None:
    """What the pool's queue covers: ``credits.gpustack.ai/<manufacturer>`` or ``cpu``."""
    if not pool.acceleratable:
        return "cpu"
    maker = manufacturer_of_group(pool.accelerator_group)
    return maker.credits_key if maker else None


def nominal_quota(pool: Pool, capacity: int) -> int:
    """Queue nominal per flavor: nodes × per-node count × M (CPU queues: cores)."""
    return capacity * UNITS_PER_CARD if pool.acceleratable else capacity


# --- LocalQueues ---------------------------------------------------------------------------------------


def tenant_namespace(namespace: Mapping[str, Any]) -> bool:
    """A namespace that gets our LocalQueues: not a system one, not terminating."""
    name = name_of(namespace)
    phase = (namespace.get("status") or {}).get("phase")
    return bool(name) and name not in SYSTEM_NAMESPACES and phase != "Terminating" and not deleting(namespace)


def render_local_queue(cluster_queue: str, namespace: str) -> Obj:
    return {
        "apiVersion": constants.KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {
            "name": local_queue_name(cluster_queue),
            "namespace": namespace,
            "labels": {constants.LABEL_RESOURCE_TYPE: constants.RESOURCE_TYPE_INSTANCE_TYPES},
            "annotations": {constants.ANNOTATION_QUEUE: cluster_queue},
        },
        "spec": {"clusterQueue": cluster_queue},
    }


def owned_local_queue(obj: Mapping[str, Any]) -> bool:
    name = name_of(obj)
    return name.startswith(constants.LOCAL_QUEUE_PREFIX) and constants.ANNOTATION_QUEUE in _annotations(obj)


def owned_cluster_queue(obj: Mapping[str, Any]) -> bool:
    return _labels(obj).get(constants.LABEL_RESOURCE_TYPE) == constants.RESOURCE_TYPE_INSTANCE_TYPES


def local_queue_plan(
    cluster_queues: Iterable[str], namespace: Mapping[str, Any], existing: Iterable[Mapping[str, Any]]
) -> tuple[list[Obj], list[str]]:
    """The LocalQueues a namespace needs (apply bodies) and the names of ours to delete."""
    wanted = sorted(set(cluster_queues)) if tenant_namespace(namespace) else []
    ns = name_of(namespace)
    desired = {local_queue_name(cq): render_local_queue(cq, ns) for cq in wanted}
    apply, delete = [], []
    have = {name_of(lq): lq for lq in existing if owned_local_queue(lq)}
    for name, body in desired.items():
        current = have.get(name)
        if current is None or (
            (current.get("spec") or {}).get("clusterQueue") != body["spec"]["clusterQueue"]
            or _annotations(current).get(constants.ANNOTATION_QUEUE)
            != body["metadata"]["annotations"][constants.ANNOTATION_QUEUE]
            or _labels(current).get(constants.LABEL_RESOURCE_TYPE) != constants.RESOURCE_TYPE_INSTANCE_TYPES
        ):
            apply.append(body)
    for name in have:
        if name not in desired:
            delete.append(name)
    return apply, sorted(delete)
