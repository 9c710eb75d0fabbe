"""What one pass of a TopologySource does, purely (topology spec B.1, B.3).

- **nodeLabels**: the selected Nodes' labels at the levels must form a hierarchy
  (:func:`controllers.topology.hierarchy.faults`); nothing is written, and any NodeFeature an
  earlier arm of the source left is removed.  The revision is a hash of those labels.
- **configMap / webhook**: the last read (:class:`Read`) is judged whole
  (:func:`controllers.topology.snapshot.judge`).  A valid snapshot becomes exactly one NodeFeature
  per described Node whose ``spec.labels`` are its writable labels (foreign edits are put back,
  omitted nodes lose theirs); a failed read or an invalid snapshot changes nothing while the last
  valid set is younger than ``maxStaleness``, and deletes it once it is older.
- A node another writer already publishes one of our keys on (an older source, or a NodeFeature
  that is no source's) is a conflict: this source leaves it alone and is not Ready.

Times are epoch seconds handed in (``now``), so every decision is testable without a clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from api import constants
from api import topology as topo
from api.naming import fnv1a64
from api.objects import Obj
from api.settings import parse_duration
from controllers.topology import hierarchy, snapshot
from controllers.topology.profiles import condition, labels_of, levels_of, selects
from kube.resources import NFD, NFD_VERSION

NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
NAMESPACE = constants.SYSTEM_NAMESPACE
MIN_REQUEUE = 1.0
CONFIG_MAP_REFRESH_CAP = 600.0


@dataclass(frozen=True, slots=True)
class Read:
    """One read of a snapshot arm's inventory: the document, or why it could not be read."""

    at: float
    raw: bytes | None = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class Memory:
    """The last valid set of a source, kept between passes (lost on restart, rebuilt by a read)."""

    revision: str
    labels: dict[str, dict[str, str]]
    valid_at: float  # the last moment the set was known to be the inventory's
    last_ok: bool = True  # the latest pass read a valid snapshot


@dataclass(slots=True)
class SourcePlan:
    writes: list[Obj] = field(default_factory=list)  # NodeFeatures to create or replace whole
    deletes: list[str] = field(default_factory=list)  # names of our NodeFeatures to delete
    status: Obj = field(default_factory=dict)
    memory: Memory | None = None
    requeue: float | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


# --- Small readers --------------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def name_of(obj: Mapping[str, Any]) -> str:
    return _meta(obj).get("name") or ""


def uid_of(obj: Mapping[str, Any]) -> str:
    return _meta(obj).get("uid") or ""


def stamp(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def seconds(value: Any) -> float:
    try:
        return max(parse_duration(str(value or "")), 0.0)
    except ValueError:
        return 0.0


def arm_of(source: Mapping[str, Any]) -> dict[str, Any]:
    spec = source.get("spec") or {}
    for arm in ("configMap", "webhook"):
        if isinstance(spec.get(arm), dict):
            return spec[arm]
    return {}


def max_staleness(source: Mapping[str, Any]) -> float:
    return seconds(arm_of(source).get("maxStaleness"))


def poll_interval(source: Mapping[str, Any]) -> float:
    return seconds(arm_of(source).get("pollInterval"))


def selected_nodes(
    source: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]
) -> dict[str, dict[str, str]]:
    return {
        name_of(n): labels_of(n)
        for n in nodes
        if name_of(n) and not _meta(n).get("deletionTimestamp") and selects(source, labels_of(n))
    }


def owned(feature: Mapping[str, Any], uid: str) -> bool:
    return labels_of(feature).get(constants.LABEL_TOPOLOGY_SOURCE_UID) == uid


def feature_name(node: str, uid: str) -> str:
    name = f"{node}-topology-{fnv1a64(uid)[:10]}"
    return name if len(name) <= 253 else f"topology-{fnv1a64(uid + '/' + node)}"


def render_feature(source: Mapping[str, Any], node: str, labels: Mapping[str, str]) -> Obj:
    """One NFD NodeFeature: this source's writable labels for one node, owned by the source."""
    uid = uid_of(source)
    return {
        "apiVersion": f"{NFD}/{NFD_VERSION}",
        "kind": "NodeFeature",
        "metadata": {
            "name": feature_name(node, uid),
            "namespace": NAMESPACE,
            "labels": {
                NODE_NAME_LABEL: node,
                constants.LABEL_TOPOLOGY_SOURCE_UID: uid,
                constants.LABEL_PART_OF: "gpustack-operator",
            },
            "ownerReferences": [
                {
                    "apiVersion": source.get("apiVersion") or "worker.gpustack.ai/v1",
                    "kind": "TopologySource",
                    "name": name_of(source),
                    "uid": uid,
                }
            ],
        },
        "spec": {"labels": dict(labels)},
    }


def feature_differs(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether ``current`` is not exactly what we publish (a foreign edit is put back whole)."""
    spec = current.get("spec") or {}
    if spec.get("labels") != desired["spec"]["labels"] or spec.get("features"):
        return True
    want, have = desired["metadata"], _meta(current)
    have_labels = have.get("labels") or {}
    if any(have_labels.get(k) != v for k, v in want["labels"].items()):
        return True
    owners = [r.get("uid") for r in have.get("ownerReferences") or []]
    return owners != [r["uid"] for r in want["ownerReferences"]]


def _older(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether source ``a`` precedes ``b`` (created first; the name breaks a tie)."""
    return (_meta(a).get("creationTimestamp") or "", name_of(a)) < (
        _meta(b).get("creationTimestamp") or "",
        name_of(b),
    )


def conflicts(
    source: Mapping[str, Any],
    desired: Mapping[str, Mapping[str, str]],
    features: Iterable[Mapping[str, Any]],
    sources: Iterable[Mapping[str, Any]],
) -> dict[str, str]:
    """Nodes (→ the other writer) on which another NodeFeature of the worker namespace already
    publishes one of our keys: an older source's, or one that is no source's.  Younger sources
    yield to this one, so they are not counted here."""
    uid = uid_of(source)
    by_uid = {uid_of(s): s for s in sources}
    out: dict[str, str] = {}
    for feature in features:
        other_uid = labels_of(feature).get(constants.LABEL_TOPOLOGY_SOURCE_UID)
        if other_uid == uid or _meta(feature).get("namespace") != NAMESPACE:
            continue
        node = labels_of(feature).get(NODE_NAME_LABEL) or ""
        keys = set(((feature.get("spec") or {}).get("labels") or {}).keys())
        if node not in desired or not keys & set(desired[node]):
            continue
        other = by_uid.get(other_uid or "")
        if other is not None and not _older(other, source):
            continue
        who = f"TopologySource {name_of(other)}" if other is not None else f"NodeFeature {name_of(feature)}"
        out.setdefault(node, who)
    return out


# --- Status ---------------------------------------------------------------------------------------


def source_condition(
    source: Mapping[str, Any], kind: str, status: str, reason: str, message: str, now: float
) -> Obj:
    previous = condition(source, kind)
    since = previous.get("lastTransitionTime") if previous.get("status") == status else None
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": since or stamp(now),
        "observedGeneration": int(_meta(source).get("generation") or 0),
    }


def _status(
    source: Mapping[str, Any],
    now: float,
    *,
    ready: tuple[str, str, str],
    valid: tuple[str, str, str],
    conflict: tuple[str, str, str],
    revision: str | None,
    refreshed: float | None,
    selected: int,
    mutated: int,
    conflicted: int,
) -> Obj:
    current = source.get("status") or {}
    status: Obj = {
        "observedGeneration": int(_meta(source).get("generation") or 0),
        "sourceKind": topo.source_kind(source.get("spec") or {}),
        "selectedNodes": selected,
        "mutatedNodes": mutated,
        "conflictedNodes": conflicted,
        "conditions": [
            source_condition(source, topo.CONDITION_READY, *ready, now),
            source_condition(source, topo.CONDITION_VALID, *valid, now),
            source_condition(source, topo.CONDITION_OWNERSHIP_CONFLICT, *conflict, now),
        ],
    }
    revision = revision if revision is not None else current.get("lastSuccessfulRevision")
    if revision:
        status["lastSuccessfulRevision"] = revision
    when = stamp(refreshed) if refreshed is not None else current.get("lastSuccessfulRefreshTime")
    if when:
        status["lastSuccessfulRefreshTime"] = when
    return status


def status_differs(source: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    return (source.get("status") or {}) != status


# --- The nodeLabels arm ---------------------------------------------------------------------------


def labels_revision(levels: list[str], nodes: Mapping[str, Mapping[str, str]]) -> str:
    """An opaque revision of the hierarchy the Nodes' labels describe."""
    view = {n: {k: nodes[n][k] for k in levels if k in nodes[n]} for n in sorted(nodes)}
    return "fnv64-" + fnv1a64(orjson.dumps(view, option=orjson.OPT_SORT_KEYS))


def plan_node_labels(
    source: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    features: Iterable[Mapping[str, Any]],
    now: float,
) -> SourcePlan:
    plan = SourcePlan()
    uid = uid_of(source)
    plan.deletes = sorted(name_of(f) for f in features if owned(f, uid))
    levels = levels_of(source)
    selected = selected_nodes(source, nodes)
    found = hierarchy.faults(levels, selected)
    conflict = ("False", topo.REASON_READ_ONLY, "the nodeLabels arm reads the Nodes' labels and writes none")
    previous = (source.get("status") or {}).get("lastSuccessfulRevision")
    if found:
        message = "the selected Nodes' labels are not a hierarchy: " + snapshot.describe(found)
        plan.status = _status(
            source,
            now,
            ready=("False", topo.REASON_INVALID, message),
            valid=("False", topo.REASON_INVALID, message),
            conflict=conflict,
            revision=None,
            refreshed=None,
            selected=len(selected),
            mutated=len(plan.deletes),
            conflicted=0,
        )
        return plan
    revision = labels_revision(levels, selected)
    described = sum(1 for labels in selected.values() if any(k in labels for k in levels))
    plan.status = _status(
        source,
        now,
        ready=(
            "True",
            topo.REASON_APPLIED,
            f"{described} of {len(selected)} selected Node(s) populate the levels",
        ),
        valid=("True", topo.REASON_VALID, "the selected Nodes' labels form a hierarchy"),
        conflict=conflict,
        revision=revision,
        refreshed=now if revision != previous else None,
        selected=len(selected),
        mutated=len(plan.deletes),
        conflicted=0,
    )
    return plan


# --- The snapshot arms ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Judged:
    """The read judged: a valid snapshot (``problem`` empty), or why there is none this pass."""

    parsed: snapshot.Snapshot | None = None
    verdict: snapshot.Verdict | None = None
    problem: str = ""
    invalid: bool = False  # a document was read and rejected (not a failed read)


@dataclass(slots=True)
class _Target:
    """The labels to publish this pass (None: leave ours as they are) and what backs them."""

    desired: dict[str, dict[str, str]] | None
    memory: Memory | None
    revision: str | None = None
    refreshed: float | None = None
    kept_until: float | None = None  # while nothing valid was read: until when the last set stands


def _ours(features: Iterable[Mapping[str, Any]], uid: str) -> tuple[dict[str, Mapping[str, Any]], list[str]]:
    """Our NodeFeatures by node, and any second one for a node (never written so: removed)."""
    mine: dict[str, Mapping[str, Any]] = {}
    extra: list[str] = []
    for feature in sorted((f for f in features if owned(f, uid)), key=name_of):
        target = labels_of(feature).get(NODE_NAME_LABEL) or ""
        if target in mine:
            extra.append(name_of(feature))
        else:
            mine[target] = feature
    return mine, extra


def _judge(
    source: Mapping[str, Any], read: Read, selected: Mapping[str, Mapping[str, str]], known: set[str]
) -> _Judged:
    if read.error:
        return _Judged(problem=read.error)
    if read.raw is None:
        return _Judged(problem="nothing was read", invalid=True)
    try:
        parsed = snapshot.parse(read.raw)
    except snapshot.SnapshotError as error:
        return _Judged(problem=f"invalid snapshot: {error}", invalid=True)
    prefix = (source.get("spec") or {}).get("additionalWritePrefix") or ""
    verdict = snapshot.judge(parsed, levels_of(source), prefix, selected, known)
    if not verdict.valid:
        problem = f"snapshot {parsed.revision!r} rejected whole, nothing changed: " + snapshot.describe(
            verdict.faults
        )
        return _Judged(parsed, verdict, problem, invalid=True)
    return _Judged(parsed, verdict)


def _fresh_target(
    source: Mapping[str, Any], parsed: snapshot.Snapshot, verdict: snapshot.Verdict, read: Read, webhook: bool
) -> _Target:
    """A valid snapshot: its labels, remembered; a ConfigMap re-read of the same revision well
    within ``maxStaleness`` does not move the refresh time."""
    desired = {n: labels for n, labels in verdict.labels.items() if labels}
    current = source.get("status") or {}
    previous = parse_stamp(current.get("lastSuccessfulRefreshTime"))
    fresh_enough = (
        not webhook
        and previous is not None
        and parsed.revision == current.get("lastSuccessfulRevision")
        and read.at - previous < min(max_staleness(source) / 2, CONFIG_MAP_REFRESH_CAP)
    )
    return _Target(
        desired,
        Memory(parsed.revision, desired, read.at),
        revision=parsed.revision,
        refreshed=None if fresh_enough else read.at,
    )


def _last_valid_target(
    source: Mapping[str, Any], memory: Memory | None, now: float, webhook: bool
) -> _Target:
    """Nothing valid this pass: the last valid set stands until it is older than maxStaleness."""
    status_time = parse_stamp((source.get("status") or {}).get("lastSuccessfulRefreshTime"))
    valid_at = None
    kept: Memory | None = None
    if memory is not None:
        # A watched ConfigMap was valid up to the change this pass sees.
        valid_at = now if (memory.last_ok and not webhook) else memory.valid_at
        kept = Memory(memory.revision, memory.labels, valid_at, last_ok=False)
    elif status_time is not None:
        valid_at = status_time
    kept_until = valid_at + max_staleness(source) if valid_at is not None else None
    if kept_until is not None and now < kept_until:
        desired = dict(memory.labels) if memory is not None else None  # None: leave ours as they are
        return _Target(desired, kept, kept_until=kept_until)
    return _Target({}, None, kept_until=kept_until)


def _write_features(
    plan: SourcePlan,
    source: Mapping[str, Any],
    desired: dict[str, dict[str, str]],
    mine: Mapping[str, Mapping[str, Any]],
    extra: list[str],
    clashes: Mapping[str, str],
) -> None:
    """One NodeFeature per desired node not in conflict (ours replaced whole when it drifted); ours
    on any other node, and any extra, deleted."""
    for node in clashes:
        desired.pop(node, None)
    for node, labels in sorted(desired.items()):
        body = render_feature(source, node, labels)
        current = mine.get(node)
        if current is None or feature_differs(body, current):
            if current is not None:
                body["metadata"]["name"] = name_of(current)
                body["metadata"]["resourceVersion"] = _meta(current).get("resourceVersion")
            plan.writes.append(body)
    plan.deletes = sorted([*extra, *(name_of(f) for node, f in mine.items() if node not in desired)])


def _conflict_condition(clashes: Mapping[str, str]) -> tuple[str, str, str]:
    if not clashes:
        return ("False", topo.REASON_NO_CONFLICT, "no other writer publishes these keys")
    return (
        "True",
        topo.REASON_CONFLICT,
        "; ".join(f"node {n}: already published by {w}" for n, w in sorted(clashes.items())),
    )


def _valid_ready(
    parsed: snapshot.Snapshot, target: _Target, clashes: Mapping[str, str]
) -> tuple[str, str, str]:
    if clashes:
        return ("False", topo.REASON_CONFLICT, f"{len(clashes)} node(s) are published by another writer")
    return (
        "True",
        topo.REASON_APPLIED,
        f"snapshot {parsed.revision!r} describes {len(target.desired or {})} Node(s)",
    )


def _failed_ready(problem: str, kept_until: float | None, now: float) -> tuple[str, str, str]:
    if kept_until is not None and now < kept_until:
        return (
            "True",
            topo.REASON_SERVING_LAST_VALID,
            f"{problem}; the last valid set stays until {stamp(kept_until)} (maxStaleness)",
        )
    if kept_until is not None:
        return ("False", topo.REASON_EXPIRED, f"{problem}; the last valid set expired at {stamp(kept_until)}")
    return ("False", topo.REASON_NO_VALID_SNAPSHOT, f"{problem}; no valid snapshot was read yet")


def _snapshot_status(
    plan: SourcePlan,
    source: Mapping[str, Any],
    judged: _Judged,
    target: _Target,
    clashes: Mapping[str, str],
    selected: int,
    now: float,
) -> None:
    """The status of the pass; while the last valid set is served, a requeue for when it expires."""
    conflict = _conflict_condition(clashes)
    counts = {
        "selected": selected,
        "mutated": len(plan.writes) + len(plan.deletes),
        "conflicted": len(clashes),
    }
    if not judged.problem:
        assert judged.parsed is not None
        plan.status = _status(
            source,
            now,
            ready=_valid_ready(judged.parsed, target, clashes),
            valid=("True", topo.REASON_VALID, f"snapshot {judged.parsed.revision!r} is a complete hierarchy"),
            conflict=conflict,
            revision=target.revision,
            refreshed=target.refreshed,
            **counts,
        )
        return
    problem, kept_until = judged.problem, target.kept_until
    valid = (
        ("False", topo.REASON_INVALID, problem)
        if judged.invalid
        else ("Unknown", topo.REASON_READ_FAILED, problem)
    )
    ready = _failed_ready(problem, kept_until, now)
    if kept_until is not None and now < kept_until:
        plan.requeue = max(kept_until - now, MIN_REQUEUE)
    if clashes:
        ready = ("False", topo.REASON_CONFLICT, ready[2])
    plan.status = _status(
        source, now, ready=ready, valid=valid, conflict=conflict, revision=None, refreshed=None, **counts
    )


def _poll_requeue(plan: SourcePlan, source: Mapping[str, Any], read: Read, ok: bool, now: float) -> None:
    """A webhook is polled every ``pollInterval``; a valid ConfigMap is re-read well within
    ``maxStaleness``."""
    stale_after = max_staleness(source)
    if isinstance((source.get("spec") or {}).get("webhook"), dict):
        poll = poll_interval(source)
        if poll > 0:
            due = max(read.at + poll - now, MIN_REQUEUE)
            plan.requeue = min(plan.requeue, due) if plan.requeue is not None else due
    elif ok and stale_after > 0:
        refresh = max(min(stale_after / 2, CONFIG_MAP_REFRESH_CAP), MIN_REQUEUE)
        plan.requeue = min(plan.requeue, refresh) if plan.requeue is not None else refresh


def plan_snapshot(
    source: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    features: Iterable[Mapping[str, Any]],
    sources: Iterable[Mapping[str, Any]],
    read: Read,
    memory: Memory | None,
    now: float,
) -> SourcePlan:
    """Judge the read, choose the labels to publish (the snapshot's, or the last valid set while it
    is young enough), write them as NodeFeatures outside conflicts, report, and requeue."""
    plan = SourcePlan()
    nodes = list(nodes)
    features = list(features)
    selected = selected_nodes(source, nodes)
    mine, extra = _ours(features, uid_of(source))
    webhook = isinstance((source.get("spec") or {}).get("webhook"), dict)
    judged = _judge(source, read, selected, {name_of(n) for n in nodes})
    if judged.problem:
        target = _last_valid_target(source, memory, now, webhook)
    else:
        assert judged.parsed is not None and judged.verdict is not None
        target = _fresh_target(source, judged.parsed, judged.verdict, read, webhook)
    plan.memory = target.memory
    desired = target.desired
    clashes = conflicts(source, desired or {}, features, sources) if desired else {}
    if desired is not None:
        _write_features(plan, source, desired, mine, extra, clashes)
    _snapshot_status(plan, source, judged, target, clashes, len(selected), now)
    _poll_requeue(plan, source, read, not judged.problem, now)
    return plan
