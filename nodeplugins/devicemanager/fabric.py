"""The scale-up fabric: which interconnect each manufacturer's domain is on, and the two node labels
(spec C.3 [R]) reduced over every card the node's ``Devices`` lists.

- ``feature.gpustack.ai/fabric.domain: <kind>-<id>[-<clique>]`` (``nvlink-<32 hex>-1``, ``ub-7``) —
  only when **every** card reports the same domain: a node whose cards sit in different domains
  (or where one card is in none yet) has no single answer, and naming one would promise
  co-location the hardware does not offer.  The kind is in the value because a bare ``7`` could
  name an Ascend super pod and an AMD hive alike; the clique because two cards in one NVLink
  cluster but different cliques cannot address each other.
- ``feature.gpustack.ai/fabric.members: <count>`` — only beside a domain, and only when every
  card reports the same nonzero size (NVML reports none: an NVIDIA node publishes the domain alone).

A key that stops being reported is removed: the device manager applies its NodeFeature's labels
whole, so a node taken out of its domain loses the label rather than keeping one it has left.  A
failed detection pass keeps the last inventory, so it withholds nothing.  A value that is not a
valid label value is withheld too (a sanitised id could collide with another domain's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from api import constants
from api.selectors import is_label_value

KINDS = {"nvidia": "nvlink", "ascend": "ub"}  # the manufacturers whose detector records a domain


def domain_of(fabric: Mapping[str, Any]) -> str:
    """``<kind>-<id>[-<clique>]`` of one card's ``topology.fabric`` ("" when it names none)."""
    kind, ident, clique = fabric.get("kind"), fabric.get("id"), fabric.get("cliqueId")
    if not (isinstance(kind, str) and kind and isinstance(ident, str) and ident):
        return ""
    return f"{kind}-{ident}-{clique}" if isinstance(clique, str) and clique else f"{kind}-{ident}"


def fabric_labels(groups: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    fabrics = [
        (card.get("topology") or {}).get("fabric") or {}
        for group in groups
        for card in group.get("accelerators") or ()
    ]
    domains = {domain_of(f) for f in fabrics}
    if len(domains) != 1 or "" in domains:
        return {}
    (domain,) = domains
    if not is_label_value(domain):
        return {}
    labels = {constants.LABEL_FABRIC_DOMAIN: domain}
    sizes = {f.get("memberCount") for f in fabrics}
    if len(sizes) == 1:
        (size,) = sizes
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            labels[constants.LABEL_FABRIC_MEMBERS] = str(size)
    return labels
