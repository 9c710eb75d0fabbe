"""``cleanAfterDelete`` (kv-cache spec §5.1 step 9): empty a deleted backend's tier directory on the
nodes its group selects *now*.  Pure: one pass's decisions from what the cluster shows, with the
time handed in.

Per node, once the workloads are gone: a cleanup Pod (``tier_render.cleanup_pod``) with the group's
image (group > ``spec.image`` > Setting) runs there; its outcome is recorded in the ConfigMap
``<backend>-tier-cleanup`` so a node is settled once.  What does not happen is reported on the
**Node** (the backend is about to be gone; the leftover data is not):

- no image to run → given up at once (``KVCacheTierNotCleaned``, naming the image as the reason);
- another backend's tier overlaps the path on that node (equal, or one inside the other) → skipped
  (``KVCacheTierSharedPath``); a removal already running when the sharing appears is stopped
  (both that event and ``KVCacheTierPartlyEmptied``).  Re-judged every pass: a check, not a lock;
- not finished five minutes after that node's own cleanup Pod was created → stopped, never left to
  run on (``KVCacheTierNotCleaned``, plus ``KVCacheTierPartlyEmptied`` if it had started);
- the Pod failed → ``KVCacheTierNotCleaned`` with its reason.

A node the group no longer selects is neither cleaned nor reported: the spec is the only record of
which nodes a group covered.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from api import kvcache as kv
from api.objects import Obj
from controllers.kvcache import backend_render as br
from controllers.kvcache import tier_render as tr
from controllers.kvcache.node_ledger import LEDGER_KEY as LEDGER_KEY
from controllers.kvcache.node_ledger import dump as dump
from controllers.kvcache.node_ledger import load as load

EMPTIED, FAILED, EXPIRED, SHARED, STOPPED_SHARED, NO_IMAGE = (
    "emptied",
    "failed",
    "expired",
    "shared",
    "stopped-shared",
    "no-image",
)


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass
class Plan:
    ledger: dict[str, dict[str, Any]]
    create: list[Obj] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # cleanup Pod names to stop
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (node, reason, message)
    running: list[str] = field(default_factory=list)  # nodes whose cleanup is under way

    @property
    def done(self) -> bool:
        return not self.create and not self.running


def wanted(backend: Obj) -> bool:
    """Whether the backend's tier asks to be emptied on deletion."""
    found = tr.tier_group(backend)
    return found is not None and found[2].get("cleanAfterDelete") is True


def selects(selector: Any, node: Obj) -> bool:
    node_labels = _dict(_dict(node.get("metadata")).get("labels"))
    return all(node_labels.get(k) == v for k, v in _dict(selector).items())


def overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def sharing(backend: Obj, others: list[Obj], node: Obj, path: str) -> list[str]:
    """Other backends whose tier on ``node`` overlaps ``path``."""
    me = br.name_of(backend)
    out = []
    for other in others:
        if br.name_of(other) == me:
            continue
        for group in _list((br.managed(other) or {}).get("members")):
            tier = tr.tier_of(_dict(group))
            if (
                tier
                and selects(_dict(group).get("nodeSelector"), node)
                and overlaps(path, str(tier.get("path")))
            ):
                out.append(f"{br.name_of(other)} ({tier.get('path')})")
                break
    return out


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _started(pod: Obj) -> bool:
    status = _dict(pod.get("status"))
    if status.get("phase") == "Running":
        return True
    return any(
        _dict(_dict(c).get("state")).get("running") or _dict(_dict(c).get("state")).get("terminated")
        for c in _list(status.get("containerStatuses"))
    )


def _failure(pod: Obj) -> str:
    for container in _list(_dict(pod.get("status")).get("containerStatuses")):
        terminated = _dict(_dict(_dict(container).get("state")).get("terminated"))
        if terminated:
            return f"exit code {terminated.get('exitCode')}: {terminated.get('reason') or ''} {terminated.get('message') or ''}".strip()
    return str(_dict(pod.get("status")).get("message") or "the Pod failed")


def plan(
    backend: Obj,
    namespace: str,
    setting_image: str,
    nodes: list[Obj],
    others: list[Obj],
    pods: list[Obj],
    ledger: dict[str, dict[str, Any]],
    now: float,
) -> Plan:
    """One pass: which cleanup Pods to create or stop, which nodes settle, what to report."""
    out = Plan(ledger={node: dict(entry) for node, entry in ledger.items()})
    found = tr.tier_group(backend)
    if found is None or found[2].get("cleanAfterDelete") is not True:
        return out
    index, group, tier = found
    path = str(tier.get("path") or "")
    name = br.name_of(backend)
    image = br.image_of(backend, setting_image, group)
    by_node = {str(_dict(p.get("spec")).get("nodeName") or ""): p for p in pods}
    what = f"the tier {path} of KVCacheBackend {name}"

    def settle(node: str, outcome: str, pod: Obj | None = None) -> None:
        out.ledger[node] = {"outcome": outcome}
        if pod is not None and not _dict(pod.get("metadata")).get("deletionTimestamp"):
            out.delete.append(str(_dict(pod.get("metadata")).get("name")))

    for node_obj in sorted(nodes, key=br.name_of):
        node = br.name_of(node_obj)
        if not selects(group.get("nodeSelector"), node_obj) or node in out.ledger:
            continue
        pod = by_node.get(node)
        if not image:
            settle(node, NO_IMAGE)
            out.events.append(
                (
                    node,
                    kv.EVENT_TIER_NOT_CLEANED,
                    f"{what} was not emptied: no image to run the cleanup (members[{index}].image, spec.image "
                    f"and the Setting {kv.SETTING_BACKEND_IMAGE} name none); its content stays",
                )
            )
            continue
        shared = sharing(backend, others, node_obj, path)
        phase = str(_dict(_dict(pod).get("status")).get("phase") or "") if pod else ""
        if phase == "Succeeded":
            settle(node, EMPTIED)
            continue
        if phase == "Failed":
            settle(node, FAILED)
            out.events.append(
                (
                    node,
                    kv.EVENT_TIER_NOT_CLEANED,
                    f"{what} was not emptied: the cleanup failed ({_failure(pod or {})})",
                )
            )
            continue
        if shared:
            with_whom = ", ".join(shared)
            out.events.append(
                (
                    node,
                    kv.EVENT_TIER_SHARED_PATH,
                    f"{what} was not emptied here: the tier of KVCacheBackend {with_whom} overlaps it on this node",
                )
            )
            if pod is not None:
                settle(node, STOPPED_SHARED, pod)
                out.events.append(
                    (
                        node,
                        kv.EVENT_TIER_PARTLY_EMPTIED,
                        f"{what}: the removal under way was stopped when the path became shared with {with_whom}; "
                        "content removed until then, the other backend's included, is gone",
                    )
                )
            else:
                settle(node, SHARED)
            continue
        if pod is None:
            out.create.append(tr.cleanup_pod(backend, namespace, node, tier, image))
            out.running.append(node)
            continue
        created = _epoch(_dict(pod.get("metadata")).get("creationTimestamp"))
        if created is not None and now >= created + kv.TIER_CLEAN_DEADLINE_S:
            started = _started(pod)
            settle(node, EXPIRED, pod)
            minutes = kv.TIER_CLEAN_DEADLINE_S // 60
            out.events.append(
                (
                    node,
                    kv.EVENT_TIER_NOT_CLEANED,
                    f"{what} was not emptied: its cleanup did not finish within {minutes} minutes of its Pod and "
                    + ("was stopped" if started else "never started; the content stays"),
                )
            )
            if started:
                out.events.append(
                    (
                        node,
                        kv.EVENT_TIER_PARTLY_EMPTIED,
                        f"{what} is partly emptied: the cleanup was stopped at its {minutes}-minute deadline",
                    )
                )
            continue
        out.running.append(node)
    return out
