"""What a TopologySource's pass will evict or stop through a live profile change, purely (B.4 step 7,
instances spec A.9 item 4).

A source that becomes Ready, or publishes other labels, changes the topology profile of the nodes
it selects; each flavor of those nodes is then replaced by one pinned to the new profile, and a
ClusterQueue that still reserves a dropped flavor is held before it swaps: ``HoldAndDrain`` (the
spec's; the Setting ``topology-profile-change-stop-policy``) evicts every Workload the queue has
admitted, so their Pods go, and once drained the InstanceType is ``Inactive``, so the Instance
StopPolicy stops its Instances; ``Hold`` admits nothing new and lets them run to their end.

:func:`plan_change` says so before it happens, from the pass's outcome (the source's status and
the labels it will publish) and the cluster as it is: the profile each selected node will get
(:func:`controllers.topology.profiles.node_profile` over the predicted labels), the flavors that
predicts (``controllers.pools.render``), and every queue listing a flavor of the same hardware in
another profile.  The report stands while the change is under way (the queue still lists the
dropped flavor, retiring) and is empty once every queue has swapped.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api import constants
from api.objects import Obj
from controllers.pools import render
from controllers.pools.queue_plan import STOP_DRAIN, STOP_HOLD, flavor_reserved
from controllers.topology.profiles import labels_of, node_profile, selects
from controllers.topology.source_plan import NODE_NAME_LABEL, source_condition

NAMES_SHOWN = 5  # per kind, in messages and status

REASON_PLANNED = "ProfileChangePlanned"
REASON_NONE = "NoProfileChange"
REASON_COMPLETE = "ProfileChangeComplete"
CONDITION_PROFILE_CHANGE = "ProfileChange"


Told = frozenset[str]  # what an Event said: the moves, policy, queues and names in it


@dataclass(frozen=True, slots=True)
class ChangeReport:
    """A profile change and what it costs; empty when none is pending or under way."""

    moves: tuple[str, ...] = ()  # "<old profile> -> <new profile>"
    nodes: tuple[str, ...] = ()  # selected nodes whose profile label will change
    policy: str = STOP_DRAIN  # how the queues below are held before their swap
    queues: tuple[str, ...] = ()  # ClusterQueues held before the swap (they reserve a dropped flavor)
    in_place: tuple[str, ...] = ()  # ClusterQueues that swap in place (nothing reserved)
    workloads: tuple[str, ...] = ()  # namespace/name, admitted in the held queues
    pods: tuple[str, ...] = ()  # namespace/name, those Workloads' Pods
    instances: tuple[str, ...] = ()  # namespace/name, stopped by the StopPolicy (HoldAndDrain only)

    @property
    def empty(self) -> bool:
        return not (self.moves or self.queues or self.in_place)

    @property
    def evicts(self) -> bool:
        """Something is evicted or stopped (a Warning rather than a Normal event)."""
        return self.policy == STOP_DRAIN and bool(self.workloads or self.instances)

    def told(self) -> Told:
        """What an Event about this report tells: the profile moves, the policy, the held queues
        and the names of what it costs.  Nodes still to move and queues that swap in place are
        left out: they only shrink as the change goes."""
        return frozenset(
            [
                *(f"move {m}" for m in self.moves),
                f"policy {self.policy}",
                *(f"ClusterQueue {q}" for q in self.queues),
                *(f"Workload {n}" for n in self.workloads),
                *(f"Pod {n}" for n in self.pods),
                *(f"Instance {n}" for n in self.instances),
            ]
        )

    def told_by(self, told: Told) -> bool:
        """An Event that told ``told`` already said all this (what ended since is no news)."""
        return self.told() <= told

    def message(self) -> str:
        if self.empty:
            return "no profile change is pending"
        parts = [f"profile {', '.join(self.moves) or 'change'}"]
        if self.nodes:
            parts[0] += f" on {_listed(self.nodes, 'node')}"
        if not self.queues:
            parts.append(
                "the swap applies in place: nothing is evicted or stopped"
                if self.in_place
                else "no ClusterQueue lists the flavors it replaces"
            )
            return "; ".join(parts)
        queues = _listed(self.queues, "ClusterQueue", bare=True)
        if self.policy == STOP_HOLD:
            parts.append(
                f"{queues} hold (Hold) until their admitted work ends, then swap: "
                f"{_listed(self.workloads, 'Workload')} and {_listed(self.pods, 'Pod')} run on, "
                "nothing new is admitted, no Instance is stopped"
            )
        else:
            parts.append(
                f"{queues} drain (HoldAndDrain) before the swap: evicts {_listed(self.workloads, 'Workload')} "
                f"and {_listed(self.pods, 'Pod')}; the Instance StopPolicy stops "
                f"{_listed(self.instances, 'Instance')} (restart by clearing spec.stop)"
            )
        return "; ".join(parts)

    def status(self) -> Obj | None:
        """``status.profileChange``: None when empty."""
        if self.empty:
            return None
        out: Obj = {
            "profiles": list(self.moves),
            "nodes": len(self.nodes),
            "stopPolicy": self.policy,
            "clusterQueues": list(self.queues),
            "workloads": len(self.workloads),
            "pods": len(self.pods),
            "instances": len(self.instances),
        }
        names = [
            *(f"Workload {n}" for n in self.workloads[:NAMES_SHOWN]),
            *(f"Pod {n}" for n in self.pods[:NAMES_SHOWN]),
            *(f"Instance {n}" for n in self.instances[:NAMES_SHOWN]),
        ]
        if names:
            out["names"] = names
        return out


def _listed(items: tuple[str, ...], kind: str, *, bare: bool = False) -> str:
    """``"2 Workload(s) (a/x, a/y)"`` with the first few names, ``"no Workload"`` when none;
    ``bare``: the names alone (``"ClusterQueue(s) q1, q2"``)."""
    if not items:
        return f"no {kind}"
    shown = ", ".join(items[:NAMES_SHOWN]) + (
        f", … ({len(items) - NAMES_SHOWN} more)" if len(items) > NAMES_SHOWN else ""
    )
    if bare:
        return f"{kind}(s) {shown}"
    return f"{len(items)} {kind}(s) ({shown})"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return _meta(obj).get("name") or ""


def _key(obj: Mapping[str, Any]) -> str:
    return f"{_meta(obj).get('namespace') or ''}/{_name(obj)}"


# --- The labels and profiles the pass leads to ----------------------------------------------------


def published(features: Iterable[Mapping[str, Any]], uid: str) -> dict[str, dict[str, str]]:
    """The labels the source's NodeFeatures publish now, by node."""
    out: dict[str, dict[str, str]] = {}
    for feature in features:
        labels = labels_of(feature)
        if labels.get(constants.LABEL_TOPOLOGY_SOURCE_UID) != uid:
            continue
        node = labels.get(NODE_NAME_LABEL) or ""
        out.setdefault(node, {}).update((feature.get("spec") or {}).get("labels") or {})
    return out


def published_after(
    features: Iterable[Mapping[str, Any]],
    uid: str,
    writes: Sequence[Mapping[str, Any]],
    deletes: Iterable[str],
) -> dict[str, dict[str, str]]:
    """The labels the source's NodeFeatures publish once the pass's writes (whole objects, an
    existing one under its own name) and deletes are done."""
    gone = {*deletes, *(_name(w) for w in writes)}
    out = published([f for f in features if _name(f) not in gone], uid)
    for body in writes:
        node = labels_of(body).get(NODE_NAME_LABEL) or ""
        out[node] = dict((body.get("spec") or {}).get("labels") or {})
    return out


def predicted_nodes(
    source: Mapping[str, Any],
    status_after: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    sources: Iterable[Mapping[str, Any]],
    before: Mapping[str, Mapping[str, str]],
    after: Mapping[str, Mapping[str, str]],
) -> tuple[list[Obj], dict[str, tuple[str, str]]]:
    """Every node as it will be once the pass is done and the profiles follow: the source's
    published labels swapped (``before`` → ``after``) and, on the nodes it selects, the profile
    :func:`node_profile` gives with the source's new status.  Also, per selected node whose profile
    label changes, ``(old, new)``."""
    uid = _meta(source).get("uid")
    ours = {**copy.deepcopy(dict(source)), "status": dict(status_after)}
    others = [s for s in sources if _meta(s).get("uid") != uid]
    world = [ours, *others]
    out: list[Obj] = []
    moved: dict[str, tuple[str, str]] = {}
    for node in nodes:
        name = _name(node)
        labels = labels_of(node)
        if _meta(node).get("deletionTimestamp") or not selects(source, labels):
            out.append(dict(node))
            continue
        for key in before.get(name, {}):
            labels.pop(key, None)
        labels.update(after.get(name, {}))
        old = labels.get(constants.LABEL_TOPOLOGY_PROFILE, "")
        new = node_profile({"metadata": {"name": name, "labels": labels}}, world).profile
        labels[constants.LABEL_TOPOLOGY_PROFILE] = new
        if old and old != new:
            moved[name] = (old, new)
        out.append({**node, "metadata": {**_meta(node), "labels": labels}})
    return out, moved


# --- The plan -------------------------------------------------------------------------------------


def _listed_flavors(queue: Mapping[str, Any]) -> list[str]:
    return [
        f.get("name") or ""
        for g in (queue.get("spec") or {}).get("resourceGroups") or []
        for f in g.get("flavors") or []
    ]


def _profile(flavor: Mapping[str, Any]) -> str:
    return labels_of(flavor).get(constants.LABEL_TOPOLOGY_PROFILE, "")


def _holds_quota(workload: Mapping[str, Any]) -> bool:
    """Reserves quota (Kueue's ``QuotaReserved``) and has not finished: it counts in the queue's
    ``reservingWorkloads`` and is what a drain evicts (an eviction under way included)."""
    status = workload.get("status") or {}
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    return bool(status.get("admission")) and "QuotaReserved" in true and "Finished" not in true


def _pods_of(workload: Mapping[str, Any]) -> list[str]:
    namespace = _meta(workload).get("namespace") or ""
    return [
        f"{namespace}/{ref.get('name')}"
        for ref in _meta(workload).get("ownerReferences") or []
        if ref.get("kind") == "Pod" and ref.get("name")
    ]


def _policy_of(queue: Mapping[str, Any], setting: str) -> str:
    """The queue's own hold when it is already held for a profile change, else the Setting's."""
    annotations = _meta(queue).get("annotations") or {}
    policy = (queue.get("spec") or {}).get("stopPolicy")
    if constants.ANNOTATION_PROFILE_CHANGE in annotations and policy in (STOP_HOLD, STOP_DRAIN):
        return str(policy)
    return STOP_HOLD if setting == STOP_HOLD else STOP_DRAIN


def plan_change(
    source: Mapping[str, Any],
    status_after: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    sources: Iterable[Mapping[str, Any]],
    before: Mapping[str, Mapping[str, str]],
    after: Mapping[str, Mapping[str, str]],
    *,
    flavors: Iterable[Mapping[str, Any]],
    queues: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    instances: Iterable[Mapping[str, Any]],
    policy: str = STOP_DRAIN,
    mixed_on_node: bool = True,
) -> ChangeReport:
    """What the profile change the source leads to (pending, or under way) evicts or stops."""
    nodes = list(nodes)
    predicted, moved = predicted_nodes(source, status_after, nodes, sources, before, after)
    selected = {
        _name(n) for n in nodes if selects(source, labels_of(n)) and not _meta(n).get("deletionTimestamp")
    }
    # The flavors the predicted labels call for that hold a selected node, by hardware identity.
    replacements: dict[tuple[str, ...], set[str]] = {}
    wanted: set[str] = set()
    for name, group in render.flavor_groups(predicted, mixed_on_node=mixed_on_node).items():
        wanted.add(name)
        if selected.intersection(group.nodes):
            identity = render.hardware_identity(render.render_flavor(group, mixed_on_node=mixed_on_node))
            if identity is not None:
                replacements.setdefault(identity, set()).add(group.key.profile)
    live = {_name(f): f for f in flavors if render.owned_flavor(f) and not render.deleting(f)}
    moves = {f"{old} -> {new}" for old, new in moved.values()}
    held: dict[str, str] = {}  # queue -> its policy
    in_place: list[str] = []
    for queue in queues:
        if not render.owned_cluster_queue(queue) or render.deleting(queue):
            continue
        dropped = []
        for name in _listed_flavors(queue):
            flavor = live.get(name)
            if flavor is None or name in wanted:
                continue
            identity = render.hardware_identity(flavor)
            if identity in replacements:
                dropped.append(name)
                moves.update(
                    f"{_profile(flavor)} -> {new}"
                    for new in replacements[identity]
                    if new != _profile(flavor)
                )
        if not dropped:
            continue
        if any(flavor_reserved(queue, name) for name in dropped):
            held[_name(queue)] = _policy_of(queue, policy)
        else:
            in_place.append(_name(queue))
    policies = set(held.values())
    if not policies:
        effective = STOP_HOLD if policy == STOP_HOLD else STOP_DRAIN
    else:
        effective = STOP_DRAIN if STOP_DRAIN in policies else STOP_HOLD
    admitted = sorted(
        (
            w
            for w in workloads
            if _holds_quota(w)
            and ((w.get("status") or {}).get("admission") or {}).get("clusterQueue") in held
        ),
        key=_key,
    )
    draining = {q for q, p in held.items() if p == STOP_DRAIN}
    stopped = sorted(
        _key(i)
        for i in instances
        if (i.get("spec") or {}).get("type") in draining
        and not (i.get("spec") or {}).get("stop")
        and not _meta(i).get("deletionTimestamp")
    )
    return ChangeReport(
        moves=tuple(sorted(moves)),
        nodes=tuple(sorted(moved)),
        policy=effective,
        queues=tuple(sorted(held)),
        in_place=tuple(sorted(in_place)),
        workloads=tuple(_key(w) for w in admitted),
        pods=tuple(sorted(p for w in admitted for p in _pods_of(w))),
        instances=tuple(stopped),
    )


def with_report(
    source: Mapping[str, Any], status: Mapping[str, Any], report: ChangeReport, now: float
) -> Obj:
    """The pass's status with the report: ``status.profileChange`` (absent when empty) and the
    ``ProfileChange`` condition (True while a change is pending or under way)."""
    out: Obj = {k: v for k, v in status.items() if k != "profileChange"}
    field = report.status()
    if field is not None:
        out["profileChange"] = field
    condition = source_condition(
        source,
        CONDITION_PROFILE_CHANGE,
        "False" if report.empty else "True",
        REASON_NONE if report.empty else REASON_PLANNED,
        report.message(),
        now,
    )
    conditions = [c for c in out.get("conditions") or [] if c.get("type") != CONDITION_PROFILE_CHANGE]
    out["conditions"] = [*conditions, condition]
    return out
