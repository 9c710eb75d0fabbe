"""The Kueue AdmissionChecks the operator's controllers answer (gate 3's ``gpustack-node-devices``,
the ModelDeployment joint check): each controller applies its own — the spec under its field manager,
then the ``Active`` condition through the status subresource unless it already reads so — and writes
its entry on each Workload it judges.  The chart cannot ship a Kueue object, so a caller retries
while Kueue's CRD is not served."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from api import constants
from api.objects import Obj
from kube.client import ApiError

CONDITION_ACTIVE = "Active"


def admission_check(name: str, controller_name: str) -> Obj:
    """The AdmissionCheck ``name`` answered by ``controller_name`` (spec only)."""
    return {
        "apiVersion": constants.KUEUE_API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": {"name": name, "labels": {constants.LABEL_PART_OF: "gpustack-operator"}},
        "spec": {"controllerName": controller_name},
    }


def active(check: Obj) -> bool:
    return any(
        cond.get("type") == CONDITION_ACTIVE and cond.get("status") == "True"
        for cond in (check.get("status") or {}).get("conditions") or ()
    )


def apply_active(
    client: Any, name: str, controller_name: str, *, field_manager: str, reason: str, log: logging.Logger
) -> bool:
    """Apply the AdmissionCheck and mark it ``Active`` (with ``reason``) unless it is; False while
    Kueue's CRD is not served (the caller retries)."""
    try:
        check = client.apply(admission_check(name, controller_name), field_manager=field_manager)
    except ApiError as error:
        if error.status in (0, 404, 503):
            return False
        raise
    if active(check):
        return True
    client.apply(
        {
            "apiVersion": constants.KUEUE_API_VERSION,
            "kind": "AdmissionCheck",
            "metadata": {"name": name},
            "status": {
                "conditions": [
                    {
                        "type": CONDITION_ACTIVE,
                        "status": "True",
                        "reason": reason,
                        "message": f"{controller_name} is answering the check",
                        "lastTransitionTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "observedGeneration": (check.get("metadata") or {}).get("generation", 1),
                    }
                ]
            },
        },
        field_manager=field_manager,
        subresource="status",
    )
    log.info("AdmissionCheck applied and Active", extra={"check": name})
    return True


def entry_apply(workload: Mapping[str, Any], entry: Obj) -> Obj:
    """The status apply body that writes one AdmissionCheck ``entry`` on ``workload``, conditional on
    the Workload the verdict was reached for (its uid and resourceVersion)."""
    meta = workload.get("metadata") or {}
    return {
        "apiVersion": constants.KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "status": {"admissionChecks": [entry]},
    }
