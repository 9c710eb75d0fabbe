"""Events about objects, as ``kubectl describe`` shows them; repeats of one event are counted
on the same Event object instead of piling up new ones."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from typing import Any

from kube.client import JSON_PATCH, ApiError, Client

log = logging.getLogger("controllers.events")
NORMAL, WARNING = "Normal", "Warning"


class Recorder:
    def __init__(self, client: Client, component: str) -> None:
        self.client = client
        self.component = component

    def event(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        digest = hashlib.sha256(f"{reason}\0{message}".encode()).hexdigest()[:10]
        name = f"{meta.get('name', 'object')}.{digest}"[:253]
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.client.create(body)
        except ApiError as error:
            if not error.conflict:
                log.warning("event not recorded", extra={"reason": reason, "error": str(error)})
                return
            try:
                current = self.client.get("Event", name, namespace) or {}
                count = int(current.get("count") or 1) + 1
                self.client.patch(
                    "Event",
                    name,
                    [
                        {"op": "replace", "path": "/count", "value": count},
                        {"op": "replace", "path": "/lastTimestamp", "value": now},
                    ],
                    namespace=namespace,
                    content_type=JSON_PATCH,
                )
            except ApiError as again:
                log.warning("event not recorded", extra={"reason": reason, "error": str(again)})
