"""Conditions as the controllers' statuses write them (the three KV-cache kinds, and the ``Ready``
condition of controllers/ready.py): ``lastTransitionTime`` moves only when the status does, so a
status rewritten every poll does not look like a flapping one."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from api.objects import Obj

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Verdict:
    type: str
    status: str
    reason: str
    message: str = ""


def render(verdicts: list[Verdict], previous: Any, generation: int | None, stamp: str) -> list[Obj]:
    """Condition objects for ``verdicts``, keeping each one's transition time while its status holds."""
    before = {c.get("type"): c for c in previous or [] if isinstance(c, dict)}
    out = []
    for verdict in verdicts:
        old = before.get(verdict.type) or {}
        condition: Obj = {
            "type": verdict.type,
            "status": verdict.status,
            "reason": verdict.reason,
            "message": verdict.message,
            "lastTransitionTime": old.get("lastTransitionTime")
            if old.get("status") == verdict.status
            else stamp,
        }
        if not condition["lastTransitionTime"]:
            condition["lastTransitionTime"] = stamp
        if generation is not None:
            condition["observedGeneration"] = generation
        out.append(condition)
    return out


def find(conditions: Any, kind: str) -> Obj | None:
    for condition in conditions or []:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None
