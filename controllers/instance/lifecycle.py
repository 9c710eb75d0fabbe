"""The Instance lifecycle's decisions, purely (instances spec A.6 steps 3-5, A.9).

- :func:`stop_reason` — the StopPolicy rule: an InstanceType that is missing, being deleted or
  ``Inactive`` (its ClusterQueue holds, e.g. ``stopPolicy: HoldAndDrain``) stops its Instances by
  writing ``spec.stop: true``, before any Pod is created, so a drained Pod is not recreated into a
  held queue.  Users start again by clearing ``stop`` (after repointing ``type`` if they like).
- :func:`stopping_status` / :data:`STOPPED` — while the Pod goes the phase is ``Stopping``; once it
  is gone the whole status is replaced by ``{phase: Stopped}``.
- :func:`restart_status` — an Instance without a Pod whose phase says it had (or was giving up)
  one is ``Starting`` again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api import constants
from api.objects import Obj
from controllers.instance.status import READY, STARTING, STOPPED, STOPPING

STOPPED_STATUS: Obj = {"phase": STOPPED}


def deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def stop_reason(instance_type: Mapping[str, Any] | None, name: str) -> str:
    """Why the Instance of type ``name`` must stop (``""``: it may run)."""
    if instance_type is None:
        return f"InstanceType {name} does not exist"
    if deleting(instance_type):
        return f"InstanceType {name} is being deleted"
    status = instance_type.get("status") or {}
    if status.get("phase") == constants.PHASE_INACTIVE:
        why = status.get("phaseMessage") or "its queue admits nothing"
        return f"InstanceType {name} is Inactive ({why})"
    return ""


def owns(instance: Mapping[str, Any], obj: Mapping[str, Any] | None) -> bool:
    """``obj`` (a Pod or Service) is this Instance's: its controller reference names the UID."""
    uid = (instance.get("metadata") or {}).get("uid")
    return any(
        ref.get("kind") == "Instance" and ref.get("uid") == uid and ref.get("controller")
        for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    )


def owner_key(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(namespace, name)`` of the Instance controlling ``obj``."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Instance" and ref.get("controller"):
            return (meta.get("namespace") or "", ref.get("name") or "")
    return None


def stopping_status(live: Mapping[str, Any] | None) -> Obj:
    """The last run's status with phase ``Stopping``."""
    return {**(live or {}), "phase": STOPPING, "phaseMessage": "deleting the Pod; spec.stop is set"}


def restart_status(live: Mapping[str, Any] | None) -> Obj | None:
    """``{phase: Starting}`` when the phase says a Pod was (or was being) there; else ``None``."""
    if (live or {}).get("phase") in (STOPPING, STOPPED, READY):
        return {"phase": STARTING}
    return None
