"""The departure events of a deployment's replicas, derived from observed Pods every pass
(model-deployment.md §9.5): ``ReplicaEvicted`` (``status.reason == "Evicted"``), ``ReplicaLeaving``
(``deletionTimestamp`` set) and ``ReplicaRestarted`` (the containers' restarts add up above zero).

Each names the Pod and the ``kv_lease_duration`` window within which its siblings lose the cache
blocks it held.  An event is identified by the Pod's uid, the reason and (for restarts) the count, so
the controller records each once however many passes observe it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api import constants
from api import model_deployment_status as s
from controllers.modeldeployment import replicas as rp


@dataclass(frozen=True)
class Departure:
    identity: str
    reason: str
    message: str


def _role(pod: Mapping[str, Any]) -> str:
    labels = rp.pod_labels(pod)
    ordinal = labels.get(constants.LABEL_POD_ORDINAL, "?")
    return f"{labels.get(constants.LABEL_APP_COMPONENT, '?')} replica {ordinal}"


def departures(pods: Iterable[Mapping[str, Any]]) -> list[Departure]:
    out: list[Departure] = []
    window = f"the {s.KV_LEASE_WINDOW} kv_lease_duration window"
    for pod in pods:
        meta = rp.meta(pod)
        name, uid = meta.get("name", ""), meta.get("uid", "")
        where = f"Pod {name} ({_role(pod)})"
        if rp.evicted(pod):
            out.append(
                Departure(
                    f"{uid}/evicted",
                    s.EVENT_REPLICA_EVICTED,
                    f"{where} was evicted: its siblings lose the cache blocks it held within {window}",
                )
            )
        if rp.leaving(pod):
            out.append(
                Departure(
                    f"{uid}/leaving",
                    s.EVENT_REPLICA_LEAVING,
                    f"{where} is leaving: its siblings lose the cache blocks it held within {window}",
                )
            )
        count = rp.restarts(pod)
        if count > 0:
            out.append(
                Departure(
                    f"{uid}/restarted/{count}",
                    s.EVENT_REPLICA_RESTARTED,
                    f"{where} restarted ({count} in all): its siblings lose the cache blocks it held "
                    f"within {window}",
                )
            )
    return out
