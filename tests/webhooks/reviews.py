"""Builders of AdmissionReview requests for the webhook tests."""

from __future__ import annotations

import uuid
from typing import Any

import orjson


def review(
    obj: dict[str, Any] | None,
    *,
    kind: str = "Pod",
    group: str = "",
    version: str = "v1",
    resource: str = "pods",
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    namespace: str = "team-a",
    uid: str | None = None,
) -> dict[str, Any]:
    meta = (obj or old or {}).get("metadata") or {}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()) if uid is None else uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "operation": operation,
        "namespace": meta.get("namespace", namespace),
        "name": meta.get("name", ""),
        "object": obj,
        "oldObject": old,
        "userInfo": {"username": "tester"},
        "dryRun": False,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def body(obj: dict[str, Any] | None, **kwargs: Any) -> bytes:
    return orjson.dumps(review(obj, **kwargs))


def pod(
    name: str = "p",
    *,
    labels: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    namespace: str = "team-a",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "ubuntu", "resources": {"limits": limits or {}}}]},
    }
