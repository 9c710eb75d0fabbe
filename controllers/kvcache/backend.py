"""The ``KVCacheBackend`` reconciler (kv-cache spec §5.1): thin I/O over ``backend_render``,
``members_render`` and ``backend_status``.

Managed: finalizer, leader Deployment and Service, member DaemonSets (``OnDelete``; Pods whose
fingerprint moved are deleted for their DaemonSet to recreate), and the status poll every 15 s
(the timer starts after a pass).  External: nothing rendered; the Admin address is only read.
Deletion is held while a consumer claims the backend; then every object carrying this backend's
ownership annotation is deleted and waited for, each wait bounded by its Pod grace + 2 minutes.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Hashable

from api import constants
from api import kvcache as kv
from api.objects import Obj
from controllers.kvcache import admin, backend_render, backend_status, members_render, writes
from controllers.kvcache.conditions import now
from kube import changes
from kube.events import WARNING
from kube.manager import Controller, Manager, Watch

POLL_S = 15.0
DELETE_POLL_S = 5.0
GRACE_SLACK_S = 120
OWNED_KINDS = ("Deployment", "Service", "DaemonSet", "ConfigMap")


def _backend_label(obj: Obj) -> list[str]:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(kv.LABEL_BACKEND)
    return [value] if value else []


def _epoch(stamp: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return time.time()


class KVCacheBackendReconciler(Controller):
    name = "kv-cache-backends"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        ns = constants.SYSTEM_NAMESPACE
        self.namespace = ns
        self.backends = self.informer(kv.KIND_BACKEND)
        self.settings = self.informer("Setting", ns)
        self.owned = {
            kind: manager.informer(kind, ns, kv.LABEL_BACKEND, indexes={"backend": _backend_label})
            for kind in (*OWNED_KINDS, "Pod")
        }

    def watches(self) -> list[Watch]:
        def backend(event: str, obj: Obj, old: Obj | None) -> list[str]:
            return [changes.name_of(obj)]

        def owned(event: str, obj: Obj, old: Obj | None) -> list[str]:
            return _backend_label(obj) or _backend_label(old or {})

        ns = self.namespace
        return [Watch(kv.KIND_BACKEND, backend)] + [
            Watch(kind, owned, ns, kv.LABEL_BACKEND) for kind in (*OWNED_KINDS, "Pod")
        ]

    # -- helpers ----------------------------------------------------------------------------------
    def _setting_image(self) -> str:
        setting = self.settings.get(kv.SETTING_BACKEND_IMAGE, self.namespace)
        value = ((setting or {}).get("spec") or {}).get("value")
        if isinstance(value, str):
            return value
        from api.settings import definition

        return definition(kv.SETTING_BACKEND_IMAGE).default

    def _owned(self, kind: str, name: str) -> list[Obj]:
        return [
            o
            for o in self.owned[kind].by_index("backend", name)
            if backend_render.owned_by(o, name) or kind == "Pod"
        ]

    def _endpoints(self, backend: Obj) -> list[Obj]:
        name = changes.name_of(backend)
        if backend_render.managed(backend) is not None:
            return [
                {"name": "Client", "address": backend_render.client_address(name, self.namespace)},
                {"name": "Admin", "address": backend_render.admin_address(name, self.namespace)},
            ]
        external = ((backend.get("spec") or {}).get("connection") or {}).get("external") or {}
        return [dict(e) for e in external.get("endpoints") or [] if isinstance(e, dict)]

    # -- the pass ---------------------------------------------------------------------------------
    def reconcile(self, key: Hashable) -> float | None:
        backend = self.backends.get(str(key))
        if backend is None:
            return None
        if (backend.get("metadata") or {}).get("deletionTimestamp"):
            return self._delete(backend)
        writes.add_finalizer(self.client, kv.KIND_BACKEND, backend, kv.FINALIZER_BACKEND)
        if backend_render.managed(backend) is not None:
            self._converge(backend)
        self._poll(backend)
        return POLL_S

    def _converge(self, backend: Obj) -> None:
        name = changes.name_of(backend)
        image = self._setting_image()
        daemonsets = members_render.member_daemonsets(backend, self.namespace, image)
        wanted = [
            backend_render.leader_service(backend, self.namespace),
            backend_render.leader_deployment(backend, self.namespace, image),
            *daemonsets,
        ]
        for obj in wanted:
            self.client.apply(obj, field_manager=kv.FIELD_MANAGER_BACKEND)
        keep = {changes.name_of(d) for d in daemonsets}
        for ds in self._owned("DaemonSet", name):
            if changes.name_of(ds) not in keep and not (ds.get("metadata") or {}).get("deletionTimestamp"):
                self.client.delete("DaemonSet", changes.name_of(ds), self.namespace)
        members = [
            p
            for p in self._owned("Pod", name)
            if (p.get("metadata") or {}).get("labels", {}).get(kv.LABEL_ROLE) == kv.ROLE_MEMBER
        ]
        for pod in members_render.stale_members(daemonsets, members):
            self.client.delete("Pod", changes.name_of(pod), self.namespace)

    def _poll(self, backend: Obj) -> None:
        name = changes.name_of(backend)
        endpoints = self._endpoints(backend)
        address = next((e["address"] for e in endpoints if e.get("name") == "Admin"), "")
        seen = backend_status.observe(admin.AdminClient(address))
        pods = [
            p
            for p in self._owned("Pod", name)
            if ((p.get("metadata") or {}).get("labels") or {}).get(kv.LABEL_ROLE) == kv.ROLE_MEMBER
        ]
        status = backend_status.derive(backend, seen, endpoints=endpoints, pods=pods, stamp=now())
        writes.apply_status(
            self.client, kv.KIND_BACKEND, backend, status, kv.FIELD_MANAGER_BACKEND, ("capacity",)
        )

    # -- deletion ---------------------------------------------------------------------------------
    def _delete(self, backend: Obj) -> float | None:
        name = changes.name_of(backend)
        meta = backend.get("metadata") or {}
        if kv.FINALIZER_BACKEND not in (meta.get("finalizers") or []):
            return None
        claimed = (backend.get("status") or {}).get("usedBy") or []
        if claimed:
            self._poll(backend)  # phase Deleting, naming the claimant
            return POLL_S
        remaining = []
        for kind in OWNED_KINDS:
            for obj in self._owned(kind, name):
                obj_meta = obj.get("metadata") or {}
                if not obj_meta.get("deletionTimestamp"):
                    self.client.delete(kind, changes.name_of(obj), self.namespace, propagation="Foreground")
                    remaining.append(obj)
                elif not self._overdue(backend, kind, obj):
                    remaining.append(obj)
        if remaining:
            self._poll(backend)
            return DELETE_POLL_S
        writes.remove_finalizer(self.client, kv.KIND_BACKEND, backend, kv.FINALIZER_BACKEND)
        return None

    def _overdue(self, backend: Obj, kind: str, obj: Obj) -> bool:
        """Past its Pod grace + 2 minutes since its deletionTimestamp: warn, naming the nodes."""
        template = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        grace = template.get("terminationGracePeriodSeconds", 30) if isinstance(template, dict) else 30
        started = _epoch(str((obj.get("metadata") or {}).get("deletionTimestamp") or ""))
        if time.time() < started + float(grace or 0) + GRACE_SLACK_S:
            return False
        nodes = sorted(
            {
                str((p.get("spec") or {}).get("nodeName") or "?")
                for p in self._owned("Pod", changes.name_of(backend))
                if (p.get("metadata") or {}).get("deletionTimestamp")
            }
        )
        self.recorder.event(
            backend,
            WARNING,
            "TerminationOverdue",
            f"{kind} {changes.name_of(obj)} is still terminating past its grace + {GRACE_SLACK_S}s"
            + (f"; Pods still terminating on nodes {', '.join(nodes)}" if nodes else ""),
        )
        return True
