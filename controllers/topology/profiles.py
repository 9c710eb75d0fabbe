"""A node's topology profile, purely (topology spec B.4 steps 1-3).

1. Exactly one **Ready** TopologySource whose ``nodeSelector`` matches the node describes it; zero
   or several fall back to the hostname-only hierarchy (never a merge of two sources).
2. Its ordered keys: the longest prefix of the source's (normalised) levels that the node
   populates, then ``kubernetes.io/hostname``; a child without its parent falls back too.
3. The profile is ``fnv64-<16 hex>`` over the keys joined by NUL bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api import selectors
from api import topology as topo
from controllers.topology import hierarchy


@dataclass(frozen=True, slots=True)
class NodeProfile:
    keys: tuple[str, ...]
    profile: str
    source: str = ""  # the TopologySource that described the node; "" for hostname-only
    reason: str = ""  # why the node is hostname-only although sources select it


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(_meta(obj).get("labels") or {})


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return {}


def ready(source: Mapping[str, Any]) -> bool:
    """The source's ``Ready`` condition is True (and it is not being deleted)."""
    if _meta(source).get("deletionTimestamp"):
        return False
    return condition(source, topo.CONDITION_READY).get("status") == "True"


def selects(source: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return selectors.matches((source.get("spec") or {}).get("nodeSelector") or {}, labels)


def levels_of(source: Mapping[str, Any]) -> list[str]:
    return [str(level) for level in ((source.get("spec") or {}).get("levels") or [])]


def node_profile(node: Mapping[str, Any], sources: Iterable[Mapping[str, Any]]) -> NodeProfile:
    labels = labels_of(node)
    matching = sorted(
        (s for s in sources if ready(s) and selects(s, labels)), key=lambda s: _meta(s).get("name") or ""
    )
    hostname = NodeProfile(hierarchy.HOSTNAME_KEYS, hierarchy.HOSTNAME_PROFILE)
    if not matching:
        return hostname
    if len(matching) > 1:
        names = ", ".join(_meta(s).get("name") or "" for s in matching)
        return NodeProfile(
            hostname.keys, hostname.profile, reason=f"several Ready TopologySources select it ({names})"
        )
    source = matching[0]
    name = _meta(source).get("name") or ""
    keys, fault = hierarchy.ordered_keys(levels_of(source), labels)
    if fault is not None:
        return NodeProfile(hostname.keys, hostname.profile, reason=f"{name}: {fault.key} {fault.message}")
    return NodeProfile(tuple(keys), hierarchy.profile_of(keys), source=name)
