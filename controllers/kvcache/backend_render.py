"""What every part of a managed ``KVCacheBackend``'s rendering shares (kv-cache spec §5.1): its
names, labels and ownership annotation, image and pull policy, the leader Service and the
addresses it publishes, and each group's effective transport.  The leader Deployment is
``leader_render``, the member DaemonSets ``members_render``, the election ``election_render`` and
the disk tier ``tier_render``.  Pure: the backend object, the operator namespace and the Setting's
image in; Kubernetes objects out.

Every object carries the ownership annotation ``kvcache.gpustack.ai/backend: <name>``, the key
deletion finds and judges by.
"""

from __future__ import annotations

from typing import Any

from api import kvcache as kv
from api import manufacturers
from api.objects import Obj

# §5.1 step 6: the host fabrics, and the device each grants (the RDMA names derived from the device
# manager's own keys, never spelled here).
FABRIC = ("RDMA", "EFA")
RDMA_EXCLUSIVE = f"{manufacturers.DEVICE_DOMAIN}/rdma"
RDMA_SHARED = RDMA_EXCLUSIVE + manufacturers.SUFFIX_SHARED
EFA = manufacturers.EFA_KEY
MEMBER_COMMAND = "mc_store_rest_server"
LEADER_COMMAND = "mooncake_master"


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def managed(backend: Obj) -> Obj | None:
    found = _dict(_dict(backend.get("spec")).get("connection")).get("managed")
    return found if isinstance(found, dict) else None


def name_of(obj: Obj) -> str:
    return str(_dict(obj.get("metadata")).get("name") or "")


def image_of(backend: Obj, setting_image: str, group: Obj | None = None) -> str:
    """Group image > ``spec.image`` > the Setting."""
    for candidate in (_dict(group).get("image"), _dict(backend.get("spec")).get("image"), setting_image):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return ""


def pull_policy(backend: Obj, image: str) -> str:
    """``spec.imagePullPolicy``, else the tag rule: ``Always`` for ``:latest`` or no tag."""
    declared = _dict(backend.get("spec")).get("imagePullPolicy")
    if declared in ("Always", "IfNotPresent", "Never"):
        return declared
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    if "@" in image:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def labels(backend: str, role: str, group: int | None = None) -> dict[str, str]:
    out = {kv.LABEL_BACKEND: backend, kv.LABEL_ROLE: role, "app.kubernetes.io/part-of": "gpustack-operator"}
    if group is not None:
        out[kv.LABEL_GROUP] = str(group)
    return out


def meta(name: str, namespace: str, backend: str, object_labels: dict[str, str]) -> Obj:
    return {
        "name": name,
        "namespace": namespace,
        "labels": dict(object_labels),
        "annotations": {kv.ANNOTATION_OWNED_BY_BACKEND: backend},
    }


def owned_by(obj: Obj | None, backend: str) -> bool:
    """Deletion and updates touch only objects carrying this backend's ownership annotation."""
    return (
        _dict(_dict(_dict(obj).get("metadata")).get("annotations")).get(kv.ANNOTATION_OWNED_BY_BACKEND)
        == backend
    )


def client_address(backend: str, namespace: str) -> str:
    return f"{kv.leader_name(backend)}.{namespace}.svc:{kv.CLIENT_PORT}"


def admin_address(backend: str, namespace: str) -> str:
    return f"{kv.leader_name(backend)}.{namespace}.svc:{kv.ADMIN_PORT}"


def has_tier(spec_managed: Obj) -> bool:
    return any(_list(_dict(g).get("localDisks")) for g in _list(spec_managed.get("members")))


def leader_service(backend: Obj, namespace: str) -> Obj:
    name = name_of(backend)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(kv.leader_name(name), namespace, name, labels(name, kv.ROLE_LEADER)),
        "spec": {
            "type": "ClusterIP",
            "selector": labels(name, kv.ROLE_LEADER),
            "ports": [
                {"name": "client", "port": kv.CLIENT_PORT, "targetPort": kv.CLIENT_PORT, "protocol": "TCP"},
                {"name": "admin", "port": kv.ADMIN_PORT, "targetPort": kv.ADMIN_PORT, "protocol": "TCP"},
            ],
        },
    }


def pull_secrets(backend: Obj) -> list[Obj]:
    found = _dict(backend.get("spec")).get("imagePullSecrets")
    return [dict(s) for s in _list(found) if isinstance(s, dict) and s.get("name")]


def effective_protocol(backend: Obj, group: Obj) -> str:
    """The group's transport (API spelling): its own, else the backend's, else Auto."""
    own = _dict(group.get("transport")).get("protocol")
    default = _dict(_dict(backend.get("spec")).get("transport")).get("protocol")
    return str(own or default or "Auto")
