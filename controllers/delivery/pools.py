"""ModelStore and ModelStoreBinding status (model-delivery spec §2.3, §4.9), pure.

- A store's ``nodes`` are the nodes it governs (its selector matches them and no alphabetically
  earlier store's does), ``capacity`` sums those nodes' NodeModelStore capacity; ``Ready`` says it
  governs some node, ``SelectorOverlap`` names the stores it shares nodes with and who wins them.
- A binding's ``usedBytes`` is its measured footprint: each distinct digest its prefetches reference
  at full size, times every node of its grant whose NodeModelStore lists it in any state (a tree two
  namespaces share counts fully against each). It is absent while a referenced artifact is missing
  or unresolved (an absent figure was not measured; zero is a measurement), and ``OverQuota`` is
  then ``Unknown``. A store the binding names that does not exist is ``phase: Error``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from api import delivery as d
from api import prefetch as pf
from api.objects import Obj
from api.selectors import problems
from controllers.delivery.artifact_status import set_condition

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


def _generation(obj: Mapping[str, Any]) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)


def _base(obj: Mapping[str, Any]) -> Obj:
    return {"conditions": list((obj.get("status") or {}).get("conditions") or [])}


def _listing(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def store_status(
    store: Mapping[str, Any],
    stores: Sequence[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    node_stores: Mapping[str, Mapping[str, Any]],
    now: dt.datetime,
) -> Obj:
    name = pf.name_of(store)
    generation = _generation(store)
    status = _base(store)
    governed: list[str] = []
    shared: dict[str, int] = {}
    lost: dict[str, int] = {}
    for node in nodes:
        layer = pf.pool_layer(node, stores)
        if name not in layer.matched:
            continue
        if layer.winner == name:
            governed.append(pf.name_of(node))
        else:
            lost[str(layer.winner)] = lost.get(str(layer.winner), 0) + 1
        for other in layer.matched:
            if other != name:
                shared[other] = shared.get(other, 0) + 1
    total = stored = 0
    plugins = 0
    for node_name in governed:
        capacity = ((node_stores.get(node_name) or {}).get("status") or {}).get("capacity") or {}
        if node_name in node_stores:
            plugins += 1
        total += int(capacity.get("totalBytes") or 0)
        stored += int(capacity.get("storedBytes") or 0)
    status["nodes"] = len(governed)
    status["capacity"] = {"totalBytes": total, "storedBytes": stored}
    selector = (store.get("spec") or {}).get("nodeSelector")
    if not isinstance(selector, Mapping) or problems(selector):
        set_condition(
            status,
            d.STORE_READY,
            FALSE,
            d.REASON_INVALID_SELECTOR,
            "spec.nodeSelector does not parse; it selects no node until fixed",
            generation,
            now,
        )
    elif governed:
        set_condition(
            status,
            d.STORE_READY,
            TRUE,
            d.REASON_GOVERNS_NODES,
            f"governs {len(governed)} node(s), {plugins} running the model-manager plugin",
            generation,
            now,
        )
    else:
        why = (
            "every node it selects is governed by "
            + ", ".join(f"ModelStore {w} ({n})" for w, n in sorted(lost.items()))
            + ", alphabetically first"
            if lost
            else "spec.nodeSelector selects no node"
        )
        set_condition(status, d.STORE_READY, FALSE, d.REASON_NO_NODES, why, generation, now)
    if shared:
        message = "; ".join(
            f"shares {count} node(s) with ModelStore {other}, which "
            + ("this store governs" if name < other else f"{other} governs")
            for other, count in sorted(shared.items())
        )
        set_condition(
            status,
            d.STORE_SELECTOR_OVERLAP,
            TRUE,
            d.REASON_OVERLAP,
            message
            + " (the alphabetically first name wins: a tie-break, not a policy; narrow the selectors)",
            generation,
            now,
        )
    else:
        set_condition(status, d.STORE_SELECTOR_OVERLAP, FALSE, d.REASON_NO_OVERLAP, "", generation, now)
    return status


def quantity_text(n: int) -> str:
    """Bytes as a Kubernetes quantity, in the largest binary unit that divides them exactly."""
    for suffix, scale in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


def binding_status(
    binding: Mapping[str, Any],
    prefetches: Sequence[Mapping[str, Any]],
    artifacts: Mapping[str, Mapping[str, Any]],
    stores: Mapping[str, Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    node_stores: Iterable[Mapping[str, Any]],
    quota: int | None,
    now: dt.datetime,
) -> Obj:
    """``prefetches``: those of the binding's namespace that name it; ``artifacts``: that
    namespace's, by name; ``quota``: ``spec.quota.bytes`` in bytes (None when it does not parse)."""
    generation = _generation(binding)
    status = _base(binding)
    missing = [n for n in pf.store_names(binding) if n not in stores]
    unresolved = []
    digests: dict[str, int] = {}
    for prefetch in prefetches:
        ref = str(((prefetch.get("spec") or {}).get("artifactRef") or {}).get("name") or "")
        found = pf.resolved_digest(artifacts.get(ref))
        if found is None:
            unresolved.append(ref)
        else:
            digests[found[0]] = found[1]
    if unresolved:  # no usedBytes: not measured (the writer drops a figure it wrote before)
        set_condition(
            status,
            d.BINDING_OVER_QUOTA,
            UNKNOWN,
            d.REASON_NOT_COUNTED,
            f"not counted while ModelArtifact {_listing(sorted(set(unresolved)))} is missing or not Resolved",
            generation,
            now,
        )
        phase, message = d.PHASE_READY, "usage not counted: an artifact is not resolved yet"
    else:
        granted = pf.granted_nodes(binding, stores, nodes)
        used = pf.footprint(digests, node_stores, granted)
        status["usedBytes"] = quantity_text(used)
        over = quota is not None and used > quota
        limit = quantity_text(quota) if quota is not None else "an unreadable quota"
        set_condition(
            status,
            d.BINDING_OVER_QUOTA,
            TRUE if over else FALSE,
            d.REASON_QUOTA_EXCEEDED if over else d.REASON_WITHIN_QUOTA,
            f"{quantity_text(used)} of {limit} held by {len(digests)} digest(s) on the grant's nodes",
            generation,
            now,
        )
        phase = d.PHASE_OVER_QUOTA if over else d.PHASE_READY
        message = (
            f"the prefetched content holds {quantity_text(used)}, past the quota of {limit}: new prefetches are "
            "refused until content is collected or the quota grows"
            if over
            else ""
        )
    if missing:
        phase = d.PHASE_ERROR
        message = f"ModelStore {_listing(missing)} does not exist: it grants no node until it is created"
    status["phase"] = phase
    status["phaseMessage"] = message
    return status
