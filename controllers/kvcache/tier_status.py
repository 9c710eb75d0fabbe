"""``TierWasEmpty`` (kv-cache spec §5.1 step 7, §6.1): was the tier directory empty when this
backend first used it on each node?  Pure.

Each member Pod of the tier group surveys the directory in an init container and leaves
``entries=<n>`` in its termination message (``tier_render.SURVEY_SCRIPT``).  Only a backend's
**first** Pod on each node is believed: a replacement re-surveys a tier this backend has since
filled.  The ledger (:func:`track`, kept in the ConfigMap ``<backend>-tier-survey``) records, per
node, the first Pod the operator saw there and that Pod's reading once it has one; a node whose
first Pod went away unread never answers.

The verdict is written once and then left alone (:func:`verdict` is not asked again): ``False`` as
soon as one node's first Pod found entries, whatever the others say; ``True`` only once every node
the member DaemonSet wants a Pod on has a clean first reading.  Absent means the question is open.
It never moves the phase.
"""

from __future__ import annotations

from typing import Any

from api import kvcache as kv
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, Verdict
from controllers.kvcache.node_ledger import LEDGER_KEY as LEDGER_KEY
from controllers.kvcache.node_ledger import dump as dump
from controllers.kvcache.node_ledger import load as load


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def reading(pod: Obj) -> int | None:
    """The survey's entry count from the Pod's init container status, or ``None`` (not yet run, or
    the directory could not be listed)."""
    for status in _list(_dict(pod.get("status")).get("initContainerStatuses")):
        if _dict(status).get("name") != kv.TIER_SURVEY_CONTAINER:
            continue
        for state in (_dict(status.get("state")), _dict(status.get("lastState"))):
            terminated = _dict(state.get("terminated"))
            message = str(terminated.get("message") or "").strip()
            words = message.removeprefix("entries=").split() if message.startswith("entries=") else []
            if terminated.get("exitCode") == 0 and words and words[0].isdigit():
                return int(words[0])
    return None


def track(ledger: dict[str, dict[str, Any]], pods: list[Obj]) -> dict[str, dict[str, Any]]:
    """The ledger after seeing the tier group's member ``pods``: a node's first Pod is recorded the
    first time the operator sees one there, and only that Pod's reading is ever taken."""
    out = {node: dict(entry) for node, entry in ledger.items()}

    def created(pod: Obj) -> str:
        return str(_dict(pod.get("metadata")).get("creationTimestamp") or "")

    for pod in sorted(pods, key=created):
        node = str(_dict(pod.get("spec")).get("nodeName") or "")
        uid = str(_dict(pod.get("metadata")).get("uid") or "")
        if not node or not uid:
            continue
        entry = out.get(node)
        if entry is None:
            out[node] = {"pod": uid, "entries": reading(pod)}
        elif entry.get("pod") == uid and entry.get("entries") is None:
            entry["entries"] = reading(pod)
    return out


def verdict(ledger: dict[str, dict[str, Any]], pods: list[Obj], daemonset: Obj | None) -> Verdict | None:
    """``TierWasEmpty`` from the ledger, the tier group's current Pods and its DaemonSet, or ``None``
    while the question is open."""
    c = kv.COND_TIER_WAS_EMPTY
    found = {
        node: entry["entries"]
        for node, entry in ledger.items()
        if isinstance(entry.get("entries"), int) and entry["entries"] > 0
    }
    if found:
        listed = ", ".join(f"{node} ({count} entries)" for node, count in sorted(found.items()))
        return Verdict(
            c,
            FALSE,
            kv.REASON_TIER_NOT_EMPTY,
            f"the tier directory held content before this backend first used it on {listed}: a key this "
            "backend writes may read back a predecessor's bytes; empty the directory or set "
            "cleanAfterDelete on the backend that used it",
        )
    ds = _dict(daemonset)
    status = _dict(ds.get("status"))
    generation = _dict(ds.get("metadata")).get("generation")
    observed = status.get("observedGeneration")
    desired = status.get("desiredNumberScheduled")
    if not isinstance(observed, int) or (isinstance(generation, int) and observed < generation):
        return None
    if not isinstance(desired, int) or desired < 1:
        return None  # no node yet: a True written now would also stand for every node added later
    nodes = set()
    for pod in pods:
        node = str(_dict(pod.get("spec")).get("nodeName") or "")
        if not node:
            return None  # a member still scheduling holds the verdict open
        nodes.add(node)
    if len(nodes) < desired:
        return None
    if all(_dict(ledger.get(node)).get("entries") == 0 for node in nodes):
        return Verdict(
            c,
            TRUE,
            kv.REASON_TIER_EMPTY,
            f"the tier directory was empty on all {len(nodes)} node(s) when this backend's first member surveyed it",
        )
    return None
