"""The pool and warming kinds' shared decisions (model-delivery spec §2.3, §3.5, §4.9), pure.

Admission (``webhooks.modelprefetch``) and delivery (``controllers.delivery.prefetch``) must never
disagree about what a prefetch warms or what a grant covers, so both call these:

- :func:`store_selects` / :func:`pool_layer`: which ``ModelStore`` selectors match a node, and the
  one whose policy applies (the alphabetically first; two matching stores both report
  ``SelectorOverlap``);
- :func:`target_nodes`: a prefetch's target set — ``placement.instanceTypes``: every node carrying
  one of those InstanceTypes' flavors; ``placement.nodeSelector``: every node it matches; neither:
  the InstanceTypes of this namespace's ModelDeployments that reference the artifact;
- :func:`granted_nodes`: the nodes a ``ModelStoreBinding``'s stores select;
- :func:`projection`: a binding's projected footprint at admission (per distinct digest, the
  resolved size times the widest node count any of its prefetches asks; unresolved artifacts count
  zero), and :func:`footprint`: its measured one (per distinct digest, the size times every node
  holding it in any state).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api import constants, setting_names
from api.naming import schedule_labels
from api.selectors import matches, problems

Obj = Mapping[str, Any]
# The Setting the flavor grouping reads (an InstanceType's schedule labels depend on it).
AWARE_CPU_SETTING = setting_names.INSTANCE_TYPE_AWARE_CPU_MANUFACTURER


def name_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def labels_of(obj: Obj) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _spec(obj: Obj | None) -> Obj:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


# --- the pool layer -----------------------------------------------------------------------------------


def store_selects(store: Obj, node: Obj) -> bool:
    """Whether a ModelStore's ``nodeSelector`` matches the node (a selector that does not parse
    matches nothing: admission refuses it, and a hand-stored one must not govern every node)."""
    selector = _spec(store).get("nodeSelector")
    if not isinstance(selector, Mapping) or problems(selector):
        return False
    return matches(selector, labels_of(node))


@dataclass(frozen=True, slots=True)
class PoolLayer:
    """The stores matching one node: ``winner`` is the one whose policy applies."""

    winner: str | None
    matched: tuple[str, ...]

    @property
    def overlap(self) -> bool:
        return len(self.matched) > 1


def pool_layer(node: Obj, stores: Iterable[Obj]) -> PoolLayer:
    matched = tuple(sorted(name_of(s) for s in stores if store_selects(s, node)))
    return PoolLayer(matched[0] if matched else None, matched)


# --- target sets ------------------------------------------------------------------------------------


def _owned_flavor(flavor: Obj) -> bool:
    return labels_of(flavor).get(constants.LABEL_RESOURCE_TYPE) == constants.RESOURCE_TYPE_NODES


def instance_type_nodes(
    instance_type: Obj, flavors: Iterable[Obj], nodes: Iterable[Obj], *, aware_cpu: bool
) -> set[str]:
    """Nodes carrying one of the InstanceType's flavors: the generated ResourceFlavors whose labels
    carry its schedule labels, and the nodes whose labels carry such a flavor's ``nodeLabels``."""
    selector = schedule_labels(_spec(instance_type), aware_cpu)
    node_labels = [
        _spec(f).get("nodeLabels") or {}
        for f in flavors
        if _owned_flavor(f) and all(labels_of(f).get(k) == v for k, v in selector.items())
    ]
    out = set()
    for node in nodes:
        labels = labels_of(node)
        if any(all(labels.get(k) == v for k, v in wanted.items()) for wanted in node_labels if wanted):
            out.add(name_of(node))
    return out


def derived_instance_types(artifact: str, deployments: Iterable[Obj]) -> list[str]:
    """The InstanceTypes of the deployments (of one namespace) whose ``spec.model.artifactRef``
    names the artifact."""
    out: set[str] = set()
    for md in deployments:
        spec = _spec(md)
        ref = ((spec.get("model") or {}).get("artifactRef") or {}).get("name")
        if ref != artifact:
            continue
        for role in spec.get("roles") or []:
            if isinstance(role, Mapping) and isinstance(role.get("instanceType"), str):
                out.add(role["instanceType"])
    return sorted(out)


@dataclass(frozen=True, slots=True)
class Targets:
    """A prefetch's target set, and the InstanceType names it was expanded from that do not exist."""

    nodes: tuple[str, ...]
    unknown_instance_types: tuple[str, ...] = ()


def target_nodes(
    prefetch: Obj,
    *,
    instance_types: Mapping[str, Obj],
    flavors: Iterable[Obj],
    nodes: Iterable[Obj],
    deployments: Iterable[Obj],
    aware_cpu: bool,
) -> Targets:
    """The one expansion admission and delivery share. ``deployments``: the prefetch's namespace's."""
    spec = _spec(prefetch)
    placement = spec.get("placement") or {}
    nodes = list(nodes)
    selector = placement.get("nodeSelector")
    if selector is not None:
        if not isinstance(selector, Mapping) or problems(selector):
            return Targets(())
        return Targets(tuple(sorted(name_of(n) for n in nodes if matches(selector, labels_of(n)))))
    names = placement.get("instanceTypes")
    if names is None:
        artifact = str((spec.get("artifactRef") or {}).get("name") or "")
        names = derived_instance_types(artifact, deployments)
    flavors = list(flavors)
    found: set[str] = set()
    unknown = []
    for name in names:
        instance_type = instance_types.get(name)
        if instance_type is None:
            unknown.append(name)
            continue
        found |= instance_type_nodes(instance_type, flavors, nodes, aware_cpu=aware_cpu)
    return Targets(tuple(sorted(found)), tuple(unknown))


def granted_nodes(binding: Obj, stores: Mapping[str, Obj], nodes: Iterable[Obj]) -> set[str]:
    """The nodes some store the binding names selects (a store that does not exist grants none)."""
    granted = [stores[n] for n in store_names(binding) if n in stores]
    return {name_of(node) for node in nodes if any(store_selects(s, node) for s in granted)}


def store_names(binding: Obj) -> list[str]:
    return [
        str(ref.get("name"))
        for ref in _spec(binding).get("storeRefs") or []
        if isinstance(ref, Mapping) and ref.get("name")
    ]


# --- budgets ----------------------------------------------------------------------------------------


def resolved_digest(artifact: Obj | None) -> tuple[str, int] | None:
    """``(manifestDigest, sizeBytes)`` of a resolved hub artifact, else None (it counts zero)."""
    status = (artifact or {}).get("status") or {}
    resolved = status.get("resolved") or {}
    digest = resolved.get("manifestDigest")
    ok = any(
        c.get("type") == "Resolved" and c.get("status") == "True"
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    )
    if not ok or not isinstance(digest, str) or not digest:
        return None
    size = resolved.get("sizeBytes")
    return digest, int(size) if isinstance(size, int) and not isinstance(size, bool) else 0


def projection(asks: Iterable[tuple[Obj | None, int]]) -> int:
    """Per distinct digest, its size times the widest node count asked of it: ``asks`` is each
    prefetch's artifact and its target count."""
    widest: dict[str, tuple[int, int]] = {}
    for artifact, count in asks:
        found = resolved_digest(artifact)
        if found is None:
            continue
        digest, size = found
        _, before = widest.get(digest, (size, 0))
        widest[digest] = (size, max(before, count))
    return sum(size * count for size, count in widest.values())


def footprint(digests: Mapping[str, int], stores: Iterable[Obj], nodes: set[str] | None = None) -> int:
    """Per distinct digest (``{digest: size}``), the size times every node whose NodeModelStore lists
    it in any state; ``nodes`` limits the count to the grant's nodes."""
    total = 0
    for store in stores:
        if nodes is not None and name_of(store) not in nodes:
            continue
        held = {
            m.get("digest")
            for m in ((store.get("status") or {}).get("models") or [])
            if isinstance(m, Mapping)
        }
        total += sum(size for digest, size in digests.items() if digest in held)
    return total
