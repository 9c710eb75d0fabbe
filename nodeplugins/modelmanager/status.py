"""The NodeModelStore status the plugin writes (model-delivery spec §2.2, §4.7), pure.

:func:`render` builds the status from what the node holds — published trees, running attempts,
failure records, capacity — never from the previous status. :class:`Throttle` decides when to
write: at once on any change of state, ``referenced``, the hour of ``lastUsedTime``, the
``usedPercent`` step, a condition or ``observedGeneration`` (with the current progress); progress
alone (``downloadedBytes``, a running ``storedBytes``) only once 30 seconds passed since the last
write **and** some download moved by 5% of its size. Nothing here names a tenant.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import delivery as d
from api.objects import Obj
from nodeplugins.modelmanager.capacity import Usage
from nodeplugins.modelmanager.ledger import Failure

PROGRESS_EVERY = 30.0
PROGRESS_STEP = 0.05


def stamp(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hour(epoch: float) -> str:
    moment = dt.datetime.fromtimestamp(epoch, dt.UTC).replace(minute=0, second=0, microsecond=0)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Tree:
    size: int
    last_used: float
    referenced: bool
    source: str | None = None  # Hub or Peer; None on trees published before it was recorded


@dataclass(frozen=True)
class Download:
    size: int | None
    downloaded: int
    source: str = d.SOURCE_HUB


@dataclass
class NodeFacts:
    generation: int | None
    usage: Usage
    stored: int
    trees: Mapping[str, Tree]
    downloads: Mapping[str, Download]
    failures: Mapping[str, Failure]
    config_problem: str | None = None
    notes: Sequence[str] = field(default_factory=tuple)  # a cap, "collection skipped: …"
    nothing_to_remove: bool = False
    peer_address: str | None = None  # where this node serves its trees to peers


def _models(facts: NodeFacts) -> list[Obj]:
    models: list[Obj] = []
    for digest, tree in facts.trees.items():
        ready: Obj = {
            "digest": digest,
            "state": d.STATE_READY,
            "sizeBytes": tree.size,
            "referenced": tree.referenced,
            "lastUsedTime": _hour(tree.last_used),
        }
        if tree.source:
            ready["source"] = tree.source
        models.append(ready)
    for digest, download in facts.downloads.items():
        if digest in facts.trees:
            continue
        entry: Obj = {
            "digest": digest,
            "state": d.STATE_DOWNLOADING,
            "downloadedBytes": download.downloaded,
            "source": download.source,
        }
        if download.size is not None:
            entry["sizeBytes"] = download.size
        models.append(entry)
    for digest, failure in facts.failures.items():
        if digest in facts.trees or digest in facts.downloads:
            continue
        entry = {
            "digest": digest,
            "state": d.STATE_FAILED,
            "reason": failure.reason,
            "message": failure.message,
        }
        if failure.retry_at is not None:
            entry["retryTime"] = stamp(failure.retry_at)
        models.append(entry)
    return models


def _keep(models: list[Obj], facts: NodeFacts) -> tuple[list[Obj], int]:
    """At most 256 entries: the referenced ones, then the most recently used."""
    if len(models) <= d.MAX_STATUS_MODELS:
        return sorted(models, key=lambda m: m["digest"]), 0

    def rank(m: Obj) -> tuple[int, float]:
        tree = facts.trees.get(m["digest"])
        used = (
            tree.last_used
            if tree
            else (facts.failures[m["digest"]].last if m["digest"] in facts.failures else 0)
        )
        if m["state"] == d.STATE_DOWNLOADING:
            used = float("inf")
        return (0 if m.get("referenced") else 1, -used)

    kept = sorted(models, key=rank)[: d.MAX_STATUS_MODELS]
    return sorted(kept, key=lambda m: m["digest"]), len(models) - len(kept)


def _condition(kind: str, status: str, reason: str, message: str, generation: int | None) -> Obj:
    out: Obj = {"type": kind, "status": status, "reason": reason, "message": message}
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def render(facts: NodeFacts) -> Obj:
    models, omitted = _keep(_models(facts), facts)
    notes = list(facts.notes)
    if omitted:
        notes.append(f"{omitted} models not listed (at most {d.MAX_STATUS_MODELS})")
    if facts.config_problem:
        ready = _condition(
            d.NMS_READY, "False", d.REASON_INVALID_CONFIGURATION, facts.config_problem, facts.generation
        )
    else:
        ready = _condition(d.NMS_READY, "True", d.REASON_SERVING, "; ".join(notes), facts.generation)
    if facts.nothing_to_remove:
        low = _condition(
            d.NMS_CAPACITY_LOW,
            "True",
            d.REASON_NOTHING_TO_REMOVE,
            "usage is above the high watermark and every tree on the filesystem is in use",
            facts.generation,
        )
    else:
        low = _condition(d.NMS_CAPACITY_LOW, "False", d.REASON_WITHIN_WATERMARKS, "", facts.generation)
    status: Obj = {
        "capacity": {
            "totalBytes": facts.usage.total,
            "storedBytes": facts.stored,
            "usedPercent": facts.usage.percent_step,
        },
        "models": models,
        "conditions": [ready, low],
    }
    if facts.generation is not None:
        status["observedGeneration"] = facts.generation
    if facts.peer_address:
        status["peerAddress"] = facts.peer_address
    status["summary"] = _summary(facts)
    return status


def _summary(facts: NodeFacts) -> Obj:
    """``Models`` and ``Downloading`` columns: ready count; running downloads and their mean
    progress rounded down to a multiple of 5 (a progress field: written on the progress rule)."""
    summary: Obj = {"models": len(facts.trees)}
    running = [dl for digest, dl in facts.downloads.items() if digest not in facts.trees]
    if running:
        sized = [min(100.0, 100.0 * dl.downloaded / dl.size) for dl in running if dl.size]
        mean = f" ({int(sum(sized) / len(sized) // 5 * 5)}%)" if sized else ""
        summary["downloading"] = f"{len(running)}{mean}"
    return summary


def _significant(status: Mapping[str, Any], downloading: bool) -> Obj:
    out = copy.deepcopy(dict(status))
    for model in out.get("models") or []:
        model.pop("downloadedBytes", None)
    if downloading:
        (out.get("capacity") or {}).pop("storedBytes", None)
        (out.get("summary") or {}).pop("downloading", None)
    for cond in out.get("conditions") or []:
        cond.pop("lastTransitionTime", None)
    return out


class Throttle:
    """Remembers the last written status and when; says whether a new one is worth a write."""

    def __init__(self) -> None:
        self.last: Obj | None = None
        self.when = 0.0

    def due(self, status: Obj, now: float) -> bool:
        if self.last is None:
            return True
        downloading = any(m.get("state") == d.STATE_DOWNLOADING for m in status.get("models") or [])
        if _significant(status, downloading) != _significant(self.last, downloading):
            return True
        if status == self.last or now - self.when < PROGRESS_EVERY:
            return False
        before = {m["digest"]: m.get("downloadedBytes") or 0 for m in self.last.get("models") or []}
        for model in status.get("models") or []:
            size = model.get("sizeBytes") or 0
            moved = (model.get("downloadedBytes") or 0) - before.get(model["digest"], 0)
            if model.get("state") == d.STATE_DOWNLOADING and size and moved >= PROGRESS_STEP * size:
                return True
        return False

    def written(self, status: Obj, now: float) -> None:
        self.last = copy.deepcopy(status)
        self.when = now


def with_transition_times(status: Obj, previous: Sequence[Mapping[str, Any]] | None, now: float) -> Obj:
    """Give each condition a ``lastTransitionTime``: kept from ``previous`` while its status holds."""
    out = copy.deepcopy(status)
    before = {c.get("type"): c for c in previous or []}
    for cond in out.get("conditions") or []:
        old = before.get(cond["type"])
        if old is not None and old.get("status") == cond["status"] and old.get("lastTransitionTime"):
            cond["lastTransitionTime"] = old["lastTransitionTime"]
        else:
            cond["lastTransitionTime"] = stamp(now)
    return out
