"""Labels, annotations and the Pod-spec hash of a replica's Pods (model-deployment.md §7.2, §7.3).

Render order: the **template** (everything a role's spec states, identical across its replicas,
connector annotations included) → the **stamp** (names, rank env above size 1, the Kueue group
labels and annotations, ordinal and member labels) → the **hash**, SHA-256 hex of the canonical form
of {labels, annotations without the hash key, PodSpec}, written last.

The group is always the replica: ``pod-group-total-count`` is the role's ``size``, ``role-hash`` the
role name (status joins Workload PodSets to roles by it), ``pod-group-serving: "true"``.  The
fast-admission annotation is never set, and no ``nodeSelector`` is added.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from api import constants

ROLE_KINDS = {"Server": "server", "Prefill": "prefill", "Decode": "decode"}
"""The API kind in the routers' spelling, on ``modeldeployment.gpustack.ai/role-kind``."""

KVCACHE_INJECT_SKIP = "false"
"""The value of ``kvcache.gpustack.ai/inject`` that keeps the Pod KV-cache injector off these Pods:
the operator renders their connector itself."""


def selector(md: str, role: str | None = None) -> dict[str, str]:
    """The selector set: ``app.kubernetes.io/name|instance`` (+ ``component`` for one role)."""
    out = {constants.LABEL_APP_NAME: constants.APP_NAME_MODEL_DEPLOYMENT, constants.LABEL_APP_INSTANCE: md}
    if role is not None:
        out[constants.LABEL_APP_COMPONENT] = role
    return out


def common(md: str) -> dict[str, str]:
    """What every object the deployment owns carries (Pods, Services, router objects)."""
    return {**selector(md), constants.LABEL_PART_OF: constants.PART_OF_WORKER}


def template_labels(md: str, role: str, kind: str, queue: str) -> dict[str, str]:
    """A role's Pod labels before the stamp: selector set, part-of, role kind, queue."""
    return {
        **common(md),
        constants.LABEL_APP_COMPONENT: role,
        constants.LABEL_ROLE_KIND: ROLE_KINDS.get(kind, kind.lower()),
        constants.KUEUE_QUEUE_NAME: queue,
        constants.LABEL_KVCACHE_INJECT: KVCACHE_INJECT_SKIP,
    }


def stamp_labels(group: str, ordinal: int, member: int, size: int) -> dict[str, str]:
    """The replica's identity: its Kueue group, its ordinal and (above size 1) its member index."""
    out = {constants.KUEUE_POD_GROUP_NAME: group, constants.LABEL_POD_ORDINAL: str(ordinal)}
    if size > 1:
        out[constants.LABEL_MEMBER_INDEX] = str(member)
    return out


def stamp_annotations(role: str, size: int) -> dict[str, str]:
    """The group's Kueue annotations: one PodSet named after the role, ``size`` Pods, serving."""
    return {
        constants.KUEUE_POD_GROUP_TOTAL_COUNT: str(size),
        constants.KUEUE_ROLE_HASH: role,
        constants.KUEUE_POD_GROUP_SERVING: "true",
    }


def canonical(labels: Mapping[str, str], annotations: Mapping[str, str], spec: Mapping[str, Any]) -> bytes:
    """The bytes the hash covers: sorted keys, no whitespace, the hash annotation left out."""
    body = {
        "labels": dict(labels),
        "annotations": {k: v for k, v in annotations.items() if k != constants.ANNOTATION_POD_SPEC_HASH},
        "spec": spec,
    }
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def pod_spec_hash(labels: Mapping[str, str], annotations: Mapping[str, str], spec: Mapping[str, Any]) -> str:
    """SHA-256 hex of :func:`canonical`."""
    return hashlib.sha256(canonical(labels, annotations, spec)).hexdigest()


def live_hash(pod: Mapping[str, Any]) -> str:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(constants.ANNOTATION_POD_SPEC_HASH, "")
