"""Gate 3's decision, pure: does a Workload that holds a quota reservation fit per card?

Kueue reserves scalar credits, which cannot see single cards: eight cards each holding a 50 %
slice leave 6,400,000 free credits, so four whole cards pass Kueue although no card is whole.
:func:`decide` judges the Workload against the cards themselves (devices spec §6.3):

1. Each PodSet's demand comes from the parser the Workload fit pin uses
   (``fastpath.requests.scan_pod(template).demand()``): family, count, units per card, profile.
2. Only cards of the model (``<aKey>``) the PodSet's assigned ResourceFlavor covers are eligible;
   a flavor that names no model, or several, holds the Workload.
3. The nodes are the PodSet's hostname-level topology assignment, each hosting its own share; a
   PodSet without one is judged across the flavor's whole node pool.  An assigned Node that is gone
   holds the Workload.
4. Each node's ledger is rebuilt from the bound Pods' allocation records with the device manager's
   own aggregation (``fastpath.ledger``), charged at least as much as the published ``Devices``
   status (per card the fuller of the two: the status lags the Pod list when a Pod is allocated,
   the Pod list lags nothing it holds).
5. Every other Workload that holds a reservation and is admitted or ``Ready`` here, and has a
   hostname-level assignment, is charged first: its assigned Pods minus those the rebuilt ledger
   already holds (a Pod is held once its record names every accelerator container; Pods tie to
   Workloads by the ``kueue.x-k8s.io/workload`` annotation and ``kueue.x-k8s.io/podset`` label).
   Pods of the judged Workload that are already held are not charged twice either.
6. Then the PodSets are placed card by card with ``fastpath.fit`` — the one fit implementation
   gates 1, 3 and 5 share — on one ledger per node, so the per-card budget is global to the
   Workload.

The verdict is ``Ready`` or ``Retry``, never ``Rejected``; its message names the starved PodSet
(and role) and the cause.  Nothing here does I/O: the controller gathers the objects.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from api import constants
from api.manufacturers import BY_BASE, BY_NAME, MANUFACTURERS, UNITS_PER_CARD, UNITS_PER_PERCENT
from fastpath import fit, fit_labels, requests
from fastpath.ledger import Book, LedgerCache, accelerator_key, bound_pods, is_held, node_ledger
from kube import changes

CHECK = constants.ADMISSION_CHECK_NODE_DEVICES
READY = "Ready"
RETRY = "Retry"
PENDING = "Pending"
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"

_MANUFACTURER_NAMES = frozenset(m.name for m in MANUFACTURERS)


@dataclass(frozen=True, slots=True)
class Verdict:
    state: str  # READY | RETRY
    message: str
    nodes: tuple[str, ...] = ()  # READY: the nodes the judged Workload's unheld Pods were placed on

    @property
    def ready(self) -> bool:
        return self.state == READY


class PodSource(Protocol):
    """The bound Pods a decision may read from a cache instead of one uncached list (the
    controller's Pod informer): a node's Pods, and a Workload's."""

    def node_pods(self, node: str) -> Iterable[Mapping[str, Any]]: ...

    def workload_pods(self, namespace: str, name: str) -> Iterable[Mapping[str, Any]]: ...


# --- Reading a Workload --------------------------------------------------------------------------------


def _status(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    status = workload.get("status")
    return status if isinstance(status, Mapping) else {}


def condition_true(workload: Mapping[str, Any], kind: str) -> bool:
    return any(
        isinstance(cond, Mapping) and cond.get("type") == kind and cond.get("status") == "True"
        for cond in _status(workload).get("conditions") or ()
    )


def check_state(workload: Mapping[str, Any], name: str = CHECK) -> Mapping[str, Any] | None:
    """This check's entry in ``status.admissionChecks`` (Kueue adds it when the queue lists it)."""
    for state in _status(workload).get("admissionChecks") or ():
        if isinstance(state, Mapping) and state.get("name") == name:
            return state
    return None


def holds_reservation(workload: Mapping[str, Any]) -> bool:
    """``QuotaReserved`` is true and ``status.admission`` carries the assignments."""
    return bool(_status(workload).get("admission")) and condition_true(workload, QUOTA_RESERVED)


def live(workload: Mapping[str, Any]) -> bool:
    """Holds a reservation and is neither evicted nor finished."""
    return (
        holds_reservation(workload)
        and not condition_true(workload, EVICTED)
        and not condition_true(workload, FINISHED)
    )


def needs_verdict(workload: Mapping[str, Any], name: str = CHECK) -> bool:
    """Judge only a Workload that lists this check, holds a reservation, is neither evicted nor
    finished (Kueue resets the checks and drops the reservation in two writes; a verdict between
    them would overwrite the reset) and is not already ``Ready`` here (an admitted Workload's Pods
    are in the ledger: re-judging would count them against themselves)."""
    state = check_state(workload, name)
    return state is not None and state.get("state") != READY and live(workload)


def is_inflight(workload: Mapping[str, Any], name: str = CHECK) -> bool:
    """A Workload whose cards are promised before its Pods hold them: reserved, live, and
    admitted or ``Ready`` for this check."""
    if not live(workload):
        return False
    state = check_state(workload, name)
    return condition_true(workload, ADMITTED) or (state is not None and state.get("state") == READY)


def hostname_counts(assignment: Mapping[str, Any] | None) -> dict[str, int] | None:
    """Pods per node of a PodSet's topology assignment (v1beta2's compressed slices, or the older
    ``domains`` list); ``None`` when it has no ``kubernetes.io/hostname`` level."""
    if not isinstance(assignment, Mapping):
        return None
    levels = assignment.get("levels") or []
    if constants.LABEL_HOSTNAME not in levels:
        return None
    at = levels.index(constants.LABEL_HOSTNAME)
    counts: dict[str, int] = {}
    for domain in assignment.get("domains") or ():
        values = domain.get("values") or []
        if at < len(values):
            counts[values[at]] = counts.get(values[at], 0) + int(domain.get("count") or 0)
    for piece in assignment.get("slices") or ():
        n = int(piece.get("domainCount") or 0)
        per_level = piece.get("valuesPerLevel") or []
        if n <= 0 or at >= len(per_level):
            continue
        values = per_level[at] or {}
        if values.get("universal") is not None:
            names = [values["universal"]] * n
        else:
            individual = values.get("individual") or {}
            prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
            names = [f"{prefix}{root}{suffix}" for root in individual.get("roots") or ()]
        pod_counts = piece.get("podCounts") or {}
        if pod_counts.get("universal") is not None:
            per_domain = [int(pod_counts["universal"])] * n
        else:
            per_domain = [int(k) for k in pod_counts.get("individual") or ()]
        for name, k in zip(names, per_domain, strict=False):
            counts[name] = counts.get(name, 0) + k
    return counts


# --- Flavors -------------------------------------------------------------------------------------------------


def accelerator_groups(flavor: Mapping[str, Any]) -> list[str]:
    """The ``<aKey>``s a ResourceFlavor's ``spec.nodeLabels`` select (``acceleratable.feature.
    gpustack.ai/<aKey>: "true"``; manufacturer markers and ``.count``-style keys are not models)."""
    labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    groups = []
    for key, value in labels.items():
        if not key.startswith(constants.PREFIX_ACCELERATABLE) or str(value) != "true":
            continue
        name = key[len(constants.PREFIX_ACCELERATABLE) :]
        if name and "." not in name and name not in _MANUFACTURER_NAMES:
            groups.append(name)
    return sorted(groups)


def pool_nodes(flavor: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Names of the observed Nodes whose labels carry every ``spec.nodeLabels`` pair, sorted."""
    wanted = ((flavor.get("spec") or {}).get("nodeLabels") or {}).items()
    out = []
    for name, node in nodes.items():
        if _in_pool(node, wanted):
            out.append(name)
    return sorted(out)


def _in_pool(node: Mapping[str, Any], wanted: Iterable[tuple[str, Any]]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted)


def _version(obj: Mapping[str, Any]) -> str:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return version if isinstance(version, str) else ""


class DecisionCache:
    """What gate 3 keeps from one decision to the next, each entry keyed by the resourceVersions
    it was computed from, so that an unchanged node costs a comparison instead of a rebuild: the
    node ledgers (:class:`fastpath.ledger.LedgerCache`) and which Nodes each flavor's pool holds.
    Objects without a resourceVersion are never cached.  One decision at a time (the controller
    has one worker)."""

    __slots__ = ("_pools", "_workloads", "ledgers")

    def __init__(self) -> None:
        self.ledgers = LedgerCache()
        # nodeLabels pairs -> (Node name -> (resourceVersion, in the pool), the sorted pool or None)
        self._pools: dict[tuple, tuple[dict[str, tuple[str, bool]], list[list[str] | None]]] = {}
        # (namespace, name, uid) -> (resourceVersion, is_inflight, podset_demands, assigned nodes)
        self._workloads: dict[tuple[str, str, str], tuple[str, bool, list[PodSetDemand], frozenset[str]]] = {}

    def clear(self) -> None:
        self.ledgers.clear()
        self._pools.clear()
        self._workloads.clear()

    def other(
        self, workload: Mapping[str, Any], near: Container[str] | None = None
    ) -> tuple[bool, list[PodSetDemand] | None]:
        """:func:`is_inflight` of another Workload and, when it is, its :func:`podset_demands` as
        fresh objects (``_resolve`` fills them in); both read again only when its resourceVersion
        moved.  ``near``: the nodes the decision reads, when it reads only those — a Workload
        assigned none of them charges nothing there and is answered ``(False, None)`` without a
        copy.  Parsed each time, the inflight PodSets cost a fleet of 300 deployments more than the
        rest of the decision."""
        meta = workload.get("metadata") or {}
        version = meta.get("resourceVersion")
        if not isinstance(version, str) or not version:
            return _other(workload, near)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""))
        known = self._workloads.get(key)
        if known is None or known[0] != version:
            if len(self._workloads) >= 50_000:  # Workloads come and go: forget them all, rarely
                self._workloads.clear()
            inflight = is_inflight(workload)
            demands = podset_demands(workload) if inflight else []
            known = self._workloads[key] = (version, inflight, demands, _assigned(demands))
        if not known[1] or not _touches(known[3], near):
            return False, None
        return True, [replace(ps) for ps in known[2]]

    def pool(self, flavor: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """:func:`pool_nodes`, each Node matched again only when its resourceVersion moved."""
        wanted_map = (flavor.get("spec") or {}).get("nodeLabels") or {}
        try:
            wanted = tuple(sorted(wanted_map.items()))
            hash(wanted)
        except TypeError:
            return pool_nodes(flavor, nodes)
        state = self._pools.get(wanted)
        if state is None:
            if len(self._pools) >= 256:  # flavors come and go: forget them all, rarely
                self._pools.clear()
            state = self._pools[wanted] = ({}, [None])
        seen, members = state
        moved = False
        versioned = 0
        for name, node in nodes.items():
            version = (node.get("metadata") or {}).get("resourceVersion")
            if not version or type(version) is not str:
                continue
            versioned += 1
            known = seen.get(name)
            if known is not None and known[0] == version:
                continue
            inside = _in_pool(node, wanted)
            if known is None or known[1] != inside:
                moved = True
            seen[name] = (version, inside)
        if len(seen) > versioned:  # a Node is gone (or lost its resourceVersion)
            for name in [name for name in seen if name not in nodes or not _version(nodes[name])]:
                del seen[name]
            moved = True
        if versioned != len(nodes):
            members[0] = None
            return pool_nodes(flavor, nodes)
        pool = members[0]
        if moved or pool is None:
            pool = members[0] = sorted(name for name, (_rv, inside) in seen.items() if inside)
        return pool


def _assigned(demands: Iterable[PodSetDemand]) -> frozenset[str]:
    """The nodes a Workload's PodSets are assigned to (the only ones its promise charges)."""
    return frozenset(node for ps in demands for node in ps.nodes or ())


def _touches(assigned: Iterable[str], near: Container[str] | None) -> bool:
    """Whether a promise on ``assigned`` nodes reaches a decision that reads only ``near`` (None:
    every node)."""
    return near is None or any(node in near for node in assigned)


def _other(
    workload: Mapping[str, Any], near: Container[str] | None
) -> tuple[bool, list[PodSetDemand] | None]:
    """:meth:`DecisionCache.other` without a cache."""
    if not is_inflight(workload):
        return False, None
    demands = podset_demands(workload)
    if not _touches(_assigned(demands), near):
        return False, None
    return True, demands


# --- PodSets ------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class PodSetDemand:
    name: str
    label: str  # how messages name it: role and PodSet
    spec: Mapping[str, Any]  # the template's Pod spec
    count: int  # Pods admitted
    flavor: str
    group: str = ""
    demand: Any = None  # fastpath.cards.Demand, or None when the PodSet asks for no accelerator
    nodes: dict[str, int] | None = None  # hostname-level assignment


def _label_of(name: str, template: Mapping[str, Any]) -> str:
    labels = (template.get("metadata") or {}).get("labels") or {}
    role = labels.get(constants.LABEL_ROLE_KIND) or labels.get(constants.LABEL_APP_COMPONENT)
    return f'role "{role}" (PodSet "{name}")' if role else f'PodSet "{name}"'


def _flavor_of(flavors: Mapping[str, Any], manufacturer: str) -> str:
    maker = BY_NAME.get(manufacturer)
    if maker is not None:
        for key in (maker.credits_key, maker.base):
            if flavors.get(key):
                return str(flavors[key])
    for key, flavor in flavors.items():
        if (
            key in BY_BASE
            or key.startswith(constants.PREFIX_ACCELERATABLE)
            or key.startswith("credits.gpustack.ai/")
        ):
            return str(flavor)
    distinct = {str(f) for f in flavors.values() if f}
    return distinct.pop() if len(distinct) == 1 else ""


def podset_demands(workload: Mapping[str, Any]) -> list[PodSetDemand]:
    """The Workload's PodSets that ask for an accelerator, with their assignment (spec order)."""
    assignments = {
        a.get("name"): a
        for a in (_status(workload).get("admission") or {}).get("podSetAssignments") or ()
        if isinstance(a, Mapping)
    }
    out = []
    for pod_set in (workload.get("spec") or {}).get("podSets") or ():
        if not isinstance(pod_set, Mapping):
            continue
        name = pod_set.get("name") or "main"
        template = pod_set.get("template") or {}
        spec = template.get("spec") or {}
        facts = requests.scan_pod(spec)
        if not facts.any_accelerator:
            continue
        manufacturer = facts.demand(0).manufacturer
        assignment = assignments.get(name) or {}
        count = assignment.get("count")
        out.append(
            PodSetDemand(
                name=name,
                label=_label_of(name, template),
                spec=spec,
                count=int(count if count is not None else pod_set.get("count", 1)),
                flavor=_flavor_of(assignment.get("flavors") or {}, manufacturer),
                nodes=hostname_counts(assignment.get("topologyAssignment")),
            )
        )
    return out


def _model_keys(devices: Mapping[str, Any]) -> list[str]:
    labels = (devices.get("metadata") or {}).get("labels") or {}
    prefix = constants.PREFIX_ACCELERATABLE
    return [k[len(prefix) :] for k, v in labels.items() if k.startswith(prefix) and str(v) == "true"]


def _vram_of(devices: Iterable[Mapping[str, Any]], group: str) -> int:
    """Per-card VRAM (MiB) of ``group``, for a template whose slice is still a MiB budget."""
    for obj in devices:
        labels = _model_keys(obj)
        for spec_group in (obj.get("spec") or {}).get("groups") or ():
            if accelerator_key(spec_group, labels) == group:
                return int(spec_group.get("memory") or 0)
    return 0


def _resolve(
    pod_sets: list[PodSetDemand],
    flavors: Mapping[str, Mapping[str, Any]],
    devices: Mapping[str, Mapping[str, Any]],
    vram: dict[str, int],
) -> str:
    """Fill in each PodSet's group and demand; the first reason one cannot be judged, else ""."""
    for ps in pod_sets:
        if not ps.flavor:
            return f"{ps.label}: no ResourceFlavor is assigned to its accelerator credits"
        flavor = flavors.get(ps.flavor)
        if flavor is None:
            return f'{ps.label}: ResourceFlavor "{ps.flavor}" is not observed yet'
        groups = accelerator_groups(flavor)
        if len(groups) != 1:
            return (
                f'{ps.label}: ResourceFlavor "{ps.flavor}" is not resolvable to one accelerator flavor '
                f"(models: {', '.join(groups) or 'none'})"
            )
        ps.group = groups[0]
        if ps.group not in vram:
            vram[ps.group] = _vram_of(devices.values(), ps.group)
        ps.demand = requests.scan_pod(ps.spec).demand(vram[ps.group])
    return ""


# --- Pods ------------------------------------------------------------------------------------------------------


def pod_workload(pod: Mapping[str, Any]) -> list[str]:
    """``<namespace>/<Workload name>`` of a bound Pod Kueue tied to a Workload, else nothing (an
    informer index function too)."""
    meta = pod.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(constants.KUEUE_WORKLOAD)
    if not name or not (pod.get("spec") or {}).get("nodeName"):
        return []
    return [f"{meta.get('namespace') or ''}/{name}"]


def held_pods(
    pods: Iterable[Mapping[str, Any]], workloads: Container[tuple[str, str]] | None = None
) -> dict[tuple[str, str, str, str], int]:
    """Held Pods per (namespace, Workload name, PodSet, node); ``workloads``: only the Pods of
    these (namespace, Workload name) pairs."""
    held: dict[tuple[str, str, str, str], int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        workload = (meta.get("annotations") or {}).get(constants.KUEUE_WORKLOAD)
        node = (pod.get("spec") or {}).get("nodeName")
        if not workload or not node:
            continue
        namespace = meta.get("namespace") or ""
        if workloads is not None and (namespace, workload) not in workloads:
            continue
        if not is_held(pod):
            continue
        key = (namespace, workload, (meta.get("labels") or {}).get(constants.KUEUE_PODSET) or "", node)
        held[key] = held.get(key, 0) + 1
    return held


# --- Messages ----------------------------------------------------------------------------------------------------


def _wants(demand: Any, group: str) -> str:
    family = demand.family
    if family == "exclusive":
        return f"{demand.count} whole {group} card{'s' if demand.count != 1 else ''}"
    if family == "shared":
        return f"a share on {demand.count} distinct {group} card{'s' if demand.count != 1 else ''}"
    if family == "sliced":
        return f"a {group} slice of {demand.units} units ({demand.units / UNITS_PER_PERCENT:g} % of a card)"
    return f"a {group} partition {demand.profile or '(no profile)'}"


def _room(ledger: Any, demand: Any, group: str) -> str:
    cards = [card for card in ledger.cards if card.healthy]
    family = demand.family
    if family == "partitioned":
        hosts = [card for card in cards if card.partitioned]
        if not hosts:
            return "no partitioned card"
        free = sum(card.profile_remaining().get(demand.profile, 0) for card in hosts)
        return f"{free} free placement(s) of {demand.profile or '(no profile)'} on {len(hosts)} partitioned cards"
    cards = [card for card in cards if not card.partitioned]
    if not cards:
        return "no unpartitioned card (partitioned cards serve partitions only)"
    if family == "exclusive":
        free = sum(1 for card in cards if card.mode == 0 and card.remaining == UNITS_PER_CARD)
        return f"{free} of {len(cards)} cards whole and free"
    if family == "shared":
        free = fit_labels.shared_free_cards(ledger, group) or 0
        return f"{free} of {len(cards)} cards can grant a share"
    best = fit_labels.sliced_max_free_units(ledger, group) or 0
    return f"largest free slice {best} units on {len(cards)} cards"


def _retry(message: str) -> Verdict:
    return Verdict(RETRY, message)


# --- The decision --------------------------------------------------------------------------------------------------


def decide(
    workload: Mapping[str, Any],
    *,
    flavors: Mapping[str, Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    devices: Mapping[str, Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    others: Iterable[Mapping[str, Any]] = (),
    release_terminated: bool = True,
    cache: DecisionCache | None = None,
    source: PodSource | None = None,
    changed: Iterable[str] = (),
    near_only: bool = True,
    promises: Callable[[Collection[str] | None], Iterable[Mapping[str, Any]]] | None = None,
) -> Verdict:
    """Judge ``workload`` (which :func:`needs_verdict`) per card.

    ``flavors``: ResourceFlavors by name; ``nodes``: the observed Nodes by name; ``devices``:
    ``Devices`` by node name; ``pods``: the Pods bound to nodes, read uncached (every Pod of each
    node whose ledger is read); ``others``: other Workloads — those :func:`is_inflight` are charged
    first; ``cache``: what the previous decisions built (the verdict is the same without it).

    With ``source`` instead of ``pods``, a node's and a Workload's Pods are asked of it, and only a
    node that is new to ``cache`` or named in ``changed`` (its Pods moved since the last decision)
    is read: a decision then costs what changed, not the fleet (:func:`decide_confirmed` reads the
    nodes such a verdict places Pods on afresh).

    A Workload whose accelerator PodSets are all assigned nodes reads only those nodes' ledgers, so
    only the inflight Workloads assigned one of them are charged (``near_only``; False charges
    every one, which changes no verdict: the tests compare both).  ``promises``, given instead of
    ``others``, is asked for the other Workloads that may charge the nodes the decision reads (None:
    any node) — an index of Workloads by assigned node, so that a decision on a few nodes reads
    their promises, not the whole fleet's.
    """
    pod_sets = podset_demands(workload)
    if not pod_sets:
        return Verdict(READY, "no PodSet asks for an accelerator")
    vram: dict[str, int] = {}
    reason = _resolve(pod_sets, flavors, devices, vram)
    if reason:
        return _retry(reason)
    meta = workload.get("metadata") or {}
    namespace, name, uid = meta.get("namespace") or "", meta.get("name") or "", meta.get("uid")
    claimed: Iterable[Mapping[str, Any]]
    if source is not None:
        if cache is None:
            cache = DecisionCache()
        cache.ledgers.use(source.node_pods, changed, release_terminated)
        book = Book(devices, {}, release_terminated=release_terminated, cache=cache.ledgers)
        claimed = ()  # the Workloads' own Pods, asked of the source below
    elif cache is None:
        by_node, claimed = bound_pods(pods)
        book = Book(devices, by_node, release_terminated=release_terminated)
    else:  # the cache reads the Pods, and keeps the ledgers of the nodes whose Pods did not change
        claimed = cache.ledgers.index(pods, devices, release_terminated)
        book = Book(devices, {}, release_terminated=release_terminated, cache=cache.ledgers)

    near: set[str] | None = None  # the only nodes whose ledgers this decision reads, when known
    accelerated = [ps for ps in pod_sets if ps.demand is not None]
    if near_only and accelerated and all(ps.nodes is not None for ps in accelerated):
        near = {node for ps in accelerated for node in ps.nodes or ()}
    inflight: list[tuple[Mapping[str, Any], list[PodSetDemand] | None]] = []
    for other in others if promises is None else promises(near):
        other_meta = other.get("metadata") or {}
        if (other_meta.get("namespace") or "", other_meta.get("name")) == (namespace, name):
            continue
        if uid and other_meta.get("uid") == uid:
            continue
        promised, demands = cache.other(other, near) if cache is not None else _other(other, near)
        if promised:
            inflight.append((other, demands))
    # Charged in one order whatever order they came in (an index's sets have none): promises that
    # overbook a node leave different room when charged in another order.
    inflight.sort(key=lambda pair: (changes.namespace_of(pair[0]), changes.name_of(pair[0])))
    # Only the judged Workload's and the inflight ones' Pods are ever looked up as held.
    wanted = {(namespace, name)}
    wanted.update(
        ((o.get("metadata") or {}).get("namespace") or "", (o.get("metadata") or {}).get("name") or "")
        for o, _ in inflight
    )
    if source is not None:
        claimed = [pod for ns, wl in sorted(wanted) for pod in source.workload_pods(ns, wl)]
    held = held_pods(claimed, wanted)
    for other, demands in inflight:
        charge_inflight(other, book, held, flavors, devices, vram, demands)

    chosen: set[str] = set()
    for ps in pod_sets:
        if ps.demand is None:
            continue
        if ps.nodes is not None:
            reason = _place_assigned(ps, namespace, name, nodes, book, held, chosen)
        else:
            reason = _place_pool(ps, namespace, name, flavors, nodes, book, held, cache, chosen)
        if reason:
            return _retry(reason)
    where = sorted({node for ps in pod_sets if ps.nodes for node in ps.nodes})
    if where:
        named = ", ".join(where) if len(where) <= 5 else f"{len(where)} nodes"
        return Verdict(READY, f"the accelerators fit per card on {named}", tuple(sorted(chosen)))
    return Verdict(READY, "the accelerators fit per card in the flavor's node pool", tuple(sorted(chosen)))


class _Overlay:
    """A :class:`PodSource` whose named nodes answer from uncached lists instead."""

    __slots__ = ("fresh", "source")

    def __init__(self, source: PodSource, fresh: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self.source = source
        self.fresh = fresh

    def node_pods(self, node: str) -> Iterable[Mapping[str, Any]]:
        listed = self.fresh.get(node)
        return self.source.node_pods(node) if listed is None else listed

    def workload_pods(self, namespace: str, name: str) -> Iterable[Mapping[str, Any]]:
        # Held Pods are counted per node: on a node read afresh, from that read alone.
        fresh = self.fresh
        out = [
            pod
            for pod in self.source.workload_pods(namespace, name)
            if (pod.get("spec") or {}).get("nodeName") not in fresh
        ]
        key = [f"{namespace}/{name}"]
        out.extend(pod for listed in fresh.values() for pod in listed if pod_workload(pod) == key)
        return out


# Up to this many nodes are read afresh one by one to confirm a verdict; past it, one list of every
# bound Pod is cheaper than the round trips.
NODE_READS = 4
CONFIRM_ROUNDS = 3


def decide_confirmed(
    workload: Mapping[str, Any],
    *,
    source: PodSource,
    changed: Iterable[str],
    read_node: Callable[[str], Sequence[Mapping[str, Any]]],
    read_all: Callable[[], Sequence[Mapping[str, Any]]],
    cache: DecisionCache,
    fresh: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    **kwargs: Any,
) -> tuple[Verdict, list[str]]:
    """:func:`decide` on the cached Pods of ``source``, a ``Ready`` confirmed on uncached reads.

    A cache can lag the API server.  A lagging cache may make a verdict ``Retry`` (a freed card not
    seen yet: the controller is woken again when the Pod event lands), but a ``Ready`` places Pods
    on cards, so every node it places on is read afresh (``read_node``, up to :data:`NODE_READS`
    nodes; ``fresh``: nodes the caller read already) and the decision is made again with those
    reads; when it then places on other nodes, those are read too, for up to
    :data:`CONFIRM_ROUNDS` rounds, and past that the decision falls back to one uncached list of
    every bound Pod (``read_all``).  Returns the verdict and the nodes whose ledgers were built from
    uncached reads (the caller marks them changed for the next decision, which goes back to the
    cache)."""
    reads: dict[str, Sequence[Mapping[str, Any]]] = dict(fresh or {})
    pending = set(changed) | reads.keys()
    for _ in range(CONFIRM_ROUNDS):
        verdict = decide(workload, source=_Overlay(source, reads), changed=pending, cache=cache, **kwargs)
        if not verdict.ready:
            return verdict, sorted(reads)
        unread = [node for node in verdict.nodes if node not in reads]
        if not unread:
            return verdict, sorted(reads)
        if len(reads) + len(unread) > NODE_READS:
            break
        for node in unread:
            reads[node] = read_node(node)
        pending = set(unread)
    return decide(workload, pods=read_all(), cache=cache, **kwargs), sorted(reads)


def charge_inflight(
    other: Mapping[str, Any],
    book: Book,
    held: Mapping[tuple[str, str, str, str], int],
    flavors: Mapping[str, Mapping[str, Any]],
    devices: Mapping[str, Mapping[str, Any]],
    vram: dict[str, int],
    demands: list[PodSetDemand] | None = None,
) -> None:
    """Charge ``other``'s topology-assigned Pods that the ledger does not hold yet to ``book``
    (gate 3's inflight accounting; the fit labels use it too); ``demands``: its
    :func:`podset_demands` when the caller has them (fresh objects: they are filled in here)."""
    meta = other.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    pod_sets = [ps for ps in (podset_demands(other) if demands is None else demands) if ps.nodes]
    for ps in pod_sets:
        # Resolve each PodSet on its own: one that cannot be judged charges nothing.
        if _resolve([ps], flavors, devices, vram) or ps.demand is None:
            continue
        for node, count in (ps.nodes or {}).items():
            pending = count - held.get((namespace, name, ps.name, node), 0)
            if pending > 0:
                book.charge_later(node, ps.group, ps.demand, pending)


def _place_assigned(
    ps: PodSetDemand,
    namespace: str,
    name: str,
    nodes: Mapping[str, Mapping[str, Any]],
    book: Book,
    held: Mapping[tuple[str, str, str, str], int],
    chosen: set[str] | None = None,
) -> str:
    assigned = ps.nodes or {}
    for node in sorted(assigned):
        if node not in nodes:
            return f"{ps.label}: node {node} that Kueue assigned is gone"
        ledger = book.ledger(node, ps.group)
        if ledger is None or not ledger.cards:
            return f"{ps.label}: node {node} has no {ps.group} cards in its Devices ledger"
        pending = assigned[node] - held.get((namespace, name, ps.name, node), 0)
        if pending > 0 and chosen is not None:
            chosen.add(node)
        for i in range(pending):
            if fit.place(ledger, ps.demand) is None:
                placed = f" ({i} of {pending} Pods placed)" if pending > 1 else ""
                return (
                    f"{ps.label}: node {node} cannot host {_wants(ps.demand, ps.group)} per Pod{placed}: "
                    f"{_room(ledger, ps.demand, ps.group)}"
                )
    return ""


def _place_pool(
    ps: PodSetDemand,
    namespace: str,
    name: str,
    flavors: Mapping[str, Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    book: Book,
    held: Mapping[tuple[str, str, str, str], int],
    cache: DecisionCache | None = None,
    chosen: set[str] | None = None,
) -> str:
    flavor = flavors[ps.flavor]
    pool = cache.pool(flavor, nodes) if cache is not None else pool_nodes(flavor, nodes)
    if not pool:
        return f'{ps.label}: ResourceFlavor "{ps.flavor}" matches no observed node'
    already = sum(
        k for (ns, wl, podset, _node), k in held.items() if (ns, wl, podset) == (namespace, name, ps.name)
    )
    pending = ps.count - already
    start = 0
    for i in range(pending):
        # Asked first (an unchanged node answers from the cache), charged only where it fits.
        j = book.first_fit(pool, start, ps.group, ps.demand)
        if j >= 0:
            ledger = book.ledger(pool[j], ps.group)
            assert ledger is not None  # it fits: it has cards
            fit.place(ledger, ps.demand)
            if chosen is not None:
                chosen.add(pool[j])
            start = j  # earlier nodes did not fit this demand; they will not fit the next copy
        else:
            placed = f" ({i} of {pending} Pods placed)" if pending > 1 else ""
            return (
                f'{ps.label}: none of the {len(pool)} nodes of ResourceFlavor "{ps.flavor}" can host '
                f"{_wants(ps.demand, ps.group)} per Pod{placed}"
            )
    return ""


# --- A demand no node of the pool can ever host ----------------------------------------------------------------


def _phrase(n: int, demand: Any) -> str:
    family = demand.family
    if family == "exclusive":
        return f"{n} whole card{'s' if n != 1 else ''}"
    if family == "shared":
        return f"{n} card{'s' if n != 1 else ''} with a free share"
    if family == "sliced":
        return f"a slice of {n / UNITS_PER_PERCENT:g} %"
    return f"{n} {demand.profile or '(no profile)'} partition{'s' if n != 1 else ''}"


def _capacity(ledger: Any, demand: Any, group: str) -> int:
    """How much of ``demand``'s family a ledger offers (the unit its fit label counts)."""
    family = demand.family
    if family == "exclusive":
        return fit_labels.exclusive_free_cards(ledger, group) or 0
    if family == "shared":
        return fit_labels.shared_free_cards(ledger, group) or 0
    if family == "sliced":
        return fit_labels.sliced_max_free_units(ledger, group) or 0
    return int(fit_labels.partitioned_free_instances(ledger, group).get(demand.profile, 0))


def _free_now(node: Mapping[str, Any], demand: Any, group: str) -> int:
    """What the node's fit label says is free for ``demand``'s family now (the ledger less live
    reservations, as ``controllers.nodedevices.fit_labels`` keeps it); 0 without the label."""
    family = demand.family
    if family == "exclusive":
        key = constants.label_fit_exclusive_free_cards(group)
    elif family == "shared":
        key = constants.label_fit_shared_free_cards(group)
    elif family == "sliced":
        key = constants.label_fit_sliced_max_free_units(group)
    else:
        key = constants.label_fit_partitioned_free_instances(group, demand.profile)
    try:
        return int(((node.get("metadata") or {}).get("labels") or {}).get(key) or 0)
    except ValueError:
        return 0


def never_fits(
    workload: Mapping[str, Any],
    *,
    pool: str,
    flavors: Iterable[Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    devices: Mapping[str, Mapping[str, Any]],
    cache: DecisionCache | None = None,
) -> str:
    """Why ``workload`` (waiting for a reservation in the queue of InstanceType ``pool``, whose
    ResourceFlavors are ``flavors``) can never be admitted: the first PodSet whose per-Pod demand no
    node of the pool could host even with every card free, with the largest shape a node has and
    the largest that is free now (from the nodes' fit labels); "" when each PodSet fits some node.  Capacity, not room: a
    demand that merely waits for cards is no news.  ``cache``: the pools of earlier calls, each Node
    matched again only when its resourceVersion moved (:meth:`DecisionCache.pool`)."""
    flavors = list(flavors)
    groups = sorted({g for f in flavors for g in accelerator_groups(f)})
    if len(groups) != 1:
        return ""  # not an accelerated pool: nothing to say
    pools = [cache.pool(f, nodes) if cache is not None else pool_nodes(f, nodes) for f in flavors]
    members = pools[0] if len(pools) == 1 else sorted({n for pool in pools for n in pool})  # each sorted
    if not members:
        return ""  # no node of the pool observed yet: nothing to say
    group = groups[0]
    vram: dict[str, int] = {group: _vram_of(devices.values(), group)}
    for pod_set in (workload.get("spec") or {}).get("podSets") or ():
        if not isinstance(pod_set, Mapping):
            continue
        template = pod_set.get("template") or {}
        demand = requests.scan_pod(template.get("spec") or {}).demand(vram[group])
        if demand is None:
            continue
        best_capacity: tuple[int, str, str] = (-1, "no card of the model", "")
        best_free: tuple[int, str, str] = (-1, "", "")
        for name in members:
            obj = devices.get(name)
            if obj is None:
                continue
            empty = node_ledger(dict(obj), group, [])  # every card free: what the node could ever give
            if empty is None or not empty.cards:
                continue
            if fit.place(empty.copy(), demand) is not None:
                break
            capacity = _capacity(empty, demand, group)
            if capacity > best_capacity[0]:
                best_capacity = (capacity, _phrase(capacity, demand), name)
            free = _free_now(nodes[name], demand, group)
            if free > best_free[0]:
                best_free = (free, _phrase(free, demand), name)
        else:
            largest = best_capacity[1] + (f" ({best_capacity[2]})" if best_capacity[2] else "")
            now = f"; largest free now: {best_free[1]} ({best_free[2]})" if best_free[2] else ""
            return (
                f"{_label_of(pod_set.get('name') or 'main', template)} asks {_wants(demand, group)} per Pod, "
                f"which no node of pool {pool} can host even with every card free: the most a node "
                f"offers is {largest}{now}. Lower the request or add larger nodes to the pool; "
                "until then the Workload stays pending"
            )
    return ""
