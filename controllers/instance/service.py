"""The Instance's NodePort Service, purely (instances spec A.6 step 6).

Named after the Instance, selecting the labels the controller set on the Pod, one port per
distinct ``(port, protocol)`` among the Pod's containers (``main``'s declared ports and the
``sshd`` sidecar's 22), each named ``<protocol>-<port>`` in lower case.  A Pod without ports gets
no Service: a port-less Service is never created.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api import constants
from api.objects import Obj
from controllers.instance.pod import PART_OF_VALUE, owner_reference

SELECTOR_KEYS = (constants.KUEUE_QUEUE_NAME, constants.LABEL_PART_OF, constants.LABEL_OWNED_BY_INSTANCES)


def port_name(port: int, protocol: str) -> str:
    return f"{protocol.lower()}-{port}"


def container_ports(pod: Mapping[str, Any]) -> list[tuple[int, str]]:
    """Distinct ``(port, protocol)`` of the Pod's containers, in container order."""
    seen: list[tuple[int, str]] = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            key = (int(port.get("containerPort") or 0), port.get("protocol") or "TCP")
            if key[0] > 0 and key not in seen:
                seen.append(key)
    return seen


def render_service(instance: Mapping[str, Any], pod: Mapping[str, Any]) -> Obj | None:
    """The Service for ``pod``, or ``None`` when it exposes no port."""
    ports = container_ports(pod)
    if not ports:
        return None
    meta = instance.get("metadata") or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": {
                constants.LABEL_PART_OF: str(meta.get("uid") or ""),
                constants.LABEL_OWNED_BY_INSTANCES: PART_OF_VALUE,
            },
            "ownerReferences": [owner_reference(instance)],
        },
        "spec": {
            "type": "NodePort",
            "selector": {k: labels[k] for k in SELECTOR_KEYS if k in labels},
            "ports": [
                {"name": port_name(port, protocol), "port": port, "targetPort": port, "protocol": protocol}
                for port, protocol in ports
            ],
        },
    }


def drifted(desired: Mapping[str, Any], live: Mapping[str, Any]) -> bool:
    """The live Service no longer matches what :func:`render_service` wants (type, selector, ports
    by name/port/protocol/target; node ports the apiserver allocated are not drift)."""
    want, have = desired.get("spec") or {}, live.get("spec") or {}

    def ports(spec: Mapping[str, Any]) -> list[tuple]:
        return sorted(
            (p.get("name"), p.get("port"), p.get("protocol") or "TCP", p.get("targetPort"))
            for p in spec.get("ports") or []
        )

    return (
        have.get("type") != want.get("type")
        or (have.get("selector") or {}) != want.get("selector")
        or ports(have) != ports(want)
    )
