"""``InstanceReconciler`` (instances spec A.6): each Instance's Pod, NodePort Service and status.

Keyed by ``(namespace, name)``.  One pass, on the leader only:

1. deletion — phase ``Deleting``, the Pod and Service deleted, every 2 s until the Pod is gone,
   then the finalizer ``worker.gpustack.ai/instance-protection`` dropped;
2. the finalizer ensured;
3. ``spec.stop`` — a Pod present: phase ``Stopping``, the Pod deleted, again in 2 s; none: the
   status replaced by ``{phase: Stopped}``;
4. the StopPolicy rule — a missing, deleting or ``Inactive`` InstanceType writes ``spec.stop: true``
   and nothing else happens (the webhook refuses that write while the phase is ``Starting``: retried);
5. no Pod — phase ``Starting`` again if it had run; what the Pod needs read (:mod:`.facts`), and
   either the Pod created or a ``Pending`` status naming what is missing; a terminating Pod: 2 s;
6. the NodePort Service (:mod:`.service`) created, or realigned when its ports drifted;
7. the status from the Pod (:mod:`.status`), written only when it changed; 2 s until every port
   has its node port.

It watches Instances (generation, deletion and status: a write skipped against a cache that did
not show the previous one yet is made once it does), its own Pods and Services (by the owner label),
InstanceTypes (phase and deletion, for the Instances of that type), the companion kinds (for the
Instances naming them), and Devices and Nodes (for the Instances running there).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Hashable
from typing import cast

from api import constants, setting_names
from api.objects import Obj
from controllers.instance import lifecycle
from controllers.instance import status as st
from controllers.instance.facts import Blocked, FactsReader
from controllers.instance.pod import PART_OF_VALUE, render_pod
from controllers.instance.service import drifted, render_service
from controllers.settings import SettingsReader
from kube import changes
from kube.client import ApiError
from kube.events import NORMAL, WARNING
from kube.manager import Controller, Manager, Watch
from kube.status import replacing

log = logging.getLogger("controllers.instance")

Key = tuple[str, str]
POLL_SECONDS = 2.0
BLOCKED_RETRY_SECONDS = 5.0
OWNED = f"{constants.LABEL_OWNED_BY_INSTANCES}={PART_OF_VALUE}"
COMPANIONS = ("InstanceSSHPublicKey", "InstanceImagePullSecret", "InstancePersistentVolume")


def _refs(instance: Obj) -> list[str]:
    """Index values: ``<Kind>/<namespace>/<name>`` of every companion object the Instance names."""
    spec = instance.get("spec") or {}
    ns = changes.namespace_of(instance)
    out = []
    if (spec.get("sshPublicKey") or {}).get("name"):
        out.append(f"InstanceSSHPublicKey/{ns}/{spec['sshPublicKey']['name']}")
    if (spec.get("imagePullSecret") or {}).get("name"):
        out.append(f"InstanceImagePullSecret/{ns}/{spec['imagePullSecret']['name']}")
    claims = [((spec.get("volume") or {}).get("persistent") or {}).get("name")]
    claims += [(v.get("persistent") or {}).get("name") for v in spec.get("additionalVolumes") or []]
    out += [f"InstancePersistentVolume/{ns}/{name}" for name in claims if name]
    return out


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(obj: Obj) -> Key:
    return (changes.namespace_of(obj), changes.name_of(obj))


class InstanceReconciler(Controller):
    name = "instances"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.instances = manager.informer(
            "Instance",
            indexes={
                "type": lambda o: [(o.get("spec") or {}).get("type") or ""],
                "refs": _refs,
            },
        )
        self.pods = manager.informer(
            "Pod",
            label_selector=OWNED,
            indexes={"node": lambda o: [(o.get("spec") or {}).get("nodeName") or ""]},
        )
        self.services = manager.informer("Service", label_selector=OWNED)
        self.types = self.informer("InstanceType")
        self.nodes = self.informer("Node")
        self.devices = self.informer("Devices")
        self.companions = {kind: self.informer(kind) for kind in COMPANIONS}
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))
        self.facts = FactsReader(
            self.client,
            self.settings,
            self.nodes,
            self.companions["InstanceSSHPublicKey"],
            self.companions["InstanceImagePullSecret"],
        )

    # --- watches ----------------------------------------------------------------------------------------

    def watches(self) -> list[Watch]:
        def instance(event: str, obj: Obj, old: Obj | None) -> list[Key]:
            # The status too: "written only on change" is judged against the cache, and a pass
            # that runs before the cache shows the previous write compares with a stale status
            # and may skip a write it needed; seeing the write land judges the status again.
            paths = (("metadata", "generation"), ("metadata", "deletionTimestamp"), ("status",))
            return [_key(obj)] if changes.moved(event, obj, old, *paths) else []

        def owned(event: str, obj: Obj, old: Obj | None) -> list[Key]:
            key = lifecycle.owner_key(obj)
            return [key] if key else []

        def of_type(event: str, obj: Obj, old: Obj | None) -> list[Key]:
            if not changes.moved(event, obj, old, ("status", "phase"), ("metadata", "deletionTimestamp")):
                return []
            return [_key(i) for i in self.instances.by_index("type", changes.name_of(obj))]

        def running_on(*paths: tuple[str, ...]) -> Callable[[str, Obj, Obj | None], list[Key]]:
            """The Instances whose Pods run on the changed Node / Devices, when ``paths`` moved."""

            def mapper(event: str, obj: Obj, old: Obj | None) -> list[Key]:
                if not changes.moved(event, obj, old, *paths):
                    return []
                pods = self.pods.by_index("node", changes.name_of(obj))
                return [k for p in pods if (k := lifecycle.owner_key(p))]

            return mapper

        def companion(kind: str) -> Callable[[str, Obj, Obj | None], list[Key]]:
            def mapper(event: str, obj: Obj, old: Obj | None) -> list[Key]:
                ref = f"{kind}/{changes.namespace_of(obj)}/{changes.name_of(obj)}"
                return [_key(i) for i in self.instances.by_index("refs", ref)]

            return mapper

        return [
            Watch("Instance", instance),
            Watch("Pod", owned, label_selector=OWNED),
            Watch("Service", owned, label_selector=OWNED),
            Watch("InstanceType", of_type),
            Watch("Devices", running_on(("status",))),  # the ledger confirms allocations
            Watch("Node", running_on(("status", "addresses"))),  # not every heartbeat
            *(Watch(kind, companion(kind)) for kind in COMPANIONS),
        ]

    # --- one pass ---------------------------------------------------------------------------------------

    def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(Key, key)
        instance = self.instances.get(name, namespace)
        if instance is None:
            return None
        if lifecycle.deleting(instance):
            return self._delete(instance)
        instance = self._ensure_finalizer(instance)
        spec = instance.get("spec") or {}
        pod = self._pod(instance)
        if spec.get("stop"):
            return self._stop(instance, pod)
        type_name = spec.get("type") or ""
        instance_type = self.types.get(type_name)
        reason = lifecycle.stop_reason(instance_type, type_name)
        if reason:
            # Stopping is a write the user must undo: confirm it against an uncached read.
            instance_type = self.client.get("InstanceType", type_name) if type_name else None
            reason = lifecycle.stop_reason(instance_type, type_name)
        if reason:
            return self._stop_for_type(instance, pod, reason)
        if pod is None:
            return self._start(instance, instance_type or {})
        if lifecycle.deleting(pod):
            return POLL_SECONDS
        self._ensure_service(instance, pod)
        return self._status_from_pod(instance, pod)

    def _pod(self, instance: Obj) -> Obj | None:
        """The Instance's Pod from the cache (a same-named Pod of another owner is not it)."""
        pod = self.pods.get(changes.name_of(instance), changes.namespace_of(instance))
        return pod if pod is not None and lifecycle.owns(instance, pod) else None

    # --- finalizer and deletion -------------------------------------------------------------------------

    def _ensure_finalizer(self, instance: Obj) -> Obj:
        meta = instance.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if constants.FINALIZER_INSTANCE in finalizers:
            return instance
        return self.client.patch(
            "Instance",
            meta["name"],
            {
                "metadata": {
                    "finalizers": [*finalizers, constants.FINALIZER_INSTANCE],
                    "resourceVersion": meta.get("resourceVersion"),
                }
            },
            namespace=meta.get("namespace", ""),
        )

    def _delete(self, instance: Obj) -> float | None:
        meta = instance.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if constants.FINALIZER_INSTANCE not in finalizers:
            return None
        name, namespace = meta["name"], meta.get("namespace", "")
        self._write_status(instance, {**(instance.get("status") or {}), "phase": st.DELETING})
        pod = self.client.get("Pod", name, namespace)  # uncached: the finalizer waits for the truth
        if pod is not None and lifecycle.owns(instance, pod):
            if not lifecycle.deleting(pod):
                self.client.delete("Pod", name, namespace)
                self.recorder.event(instance, NORMAL, "Deleting", f"deleting Pod {name}")
            return POLL_SECONDS
        service = self.client.get("Service", name, namespace)
        if service is not None and lifecycle.owns(instance, service):
            self.client.delete("Service", name, namespace)
        try:
            self.client.patch(
                "Instance",
                name,
                {
                    "metadata": {
                        "finalizers": [f for f in finalizers if f != constants.FINALIZER_INSTANCE],
                        "resourceVersion": meta.get("resourceVersion"),
                    }
                },
                namespace=namespace,
            )
        except ApiError as error:
            if not error.not_found:
                raise
        return None

    # --- stop -------------------------------------------------------------------------------------------

    def _stop(self, instance: Obj, pod: Obj | None) -> float | None:
        live = instance.get("status") or {}
        if pod is not None:
            self._write_status(instance, lifecycle.stopping_status(live))
            if not lifecycle.deleting(pod):
                self.client.delete("Pod", changes.name_of(pod), changes.namespace_of(pod))
                self.recorder.event(
                    instance, NORMAL, "Stopping", f"spec.stop is set: deleting Pod {changes.name_of(pod)}"
                )
            return POLL_SECONDS
        if self._write_status(instance, lifecycle.STOPPED_STATUS):
            self.recorder.event(
                instance, NORMAL, "Stopped", "the Pod is gone; clear spec.stop to start again"
            )
        return None

    def _stop_for_type(self, instance: Obj, pod: Obj | None, reason: str) -> float | None:
        if pod is not None and (instance.get("status") or {}).get("phase") == st.STARTING:
            # The webhook refuses a stop while Starting: show the Pod's own phase first.
            self._status_from_pod(instance, pod)
        try:
            self.client.patch(
                "Instance",
                changes.name_of(instance),
                {"spec": {"stop": True}},
                namespace=changes.namespace_of(instance),
            )
        except ApiError as error:
            if error.status in (400, 403, 409, 422):
                log.info("stop refused; retrying", extra={"instance": _key(instance), "error": str(error)})
                return POLL_SECONDS
            raise
        self.recorder.event(
            instance, NORMAL, "StoppedByInstanceType", f"{reason}: set spec.stop; clear it to start again"
        )
        return None

    # --- start ------------------------------------------------------------------------------------------

    def _start(self, instance: Obj, instance_type: Obj) -> float | None:
        restart = lifecycle.restart_status(instance.get("status"))
        if restart is not None:
            restart = self._with_ready(instance, restart)
            self._write_status(instance, restart)
            instance = {**instance, "status": restart}
        facts = self.facts.read(instance, instance_type)
        if isinstance(facts, Blocked):
            return self._blocked(instance, facts.message)
        pod = render_pod(instance, facts)
        try:
            self.client.create(pod)
        except ApiError as error:
            if not error.conflict:
                raise
            live = self.client.get("Pod", changes.name_of(pod), changes.namespace_of(pod))
            if live is not None and not lifecycle.owns(instance, live):
                if lifecycle.deleting(live):
                    return POLL_SECONDS  # the Pod of an earlier Instance of this name, going
                return self._blocked(
                    instance,
                    f"a Pod named {changes.name_of(pod)} exists that is not this Instance's; delete it",
                )
            return POLL_SECONDS
        self.recorder.event(
            instance, NORMAL, "Created", f"created Pod {changes.name_of(pod)} in queue {facts.queue_name}"
        )
        return None

    def _blocked(self, instance: Obj, message: str) -> float:
        if self._write_status(instance, {"phase": "Pending", "phaseMessage": message}):
            self.recorder.event(instance, WARNING, "Blocked", message)
        return BLOCKED_RETRY_SECONDS

    # --- Service ----------------------------------------------------------------------------------------

    def _ensure_service(self, instance: Obj, pod: Obj) -> None:
        desired = render_service(instance, pod)
        name, namespace = changes.name_of(instance), changes.namespace_of(instance)
        live = self.services.get(name, namespace)
        if live is not None and not lifecycle.owns(instance, live):
            return  # someone else's Service of that name: never touched
        if desired is None:
            if live is not None:
                self.client.delete("Service", name, namespace)
            return
        if live is None:
            try:
                self.client.create(desired)
            except ApiError as error:
                if not error.conflict:
                    raise
                return
            self.recorder.event(instance, NORMAL, "Created", f"created NodePort Service {name}")
            return
        if drifted(desired, live):
            node_ports = {
                p.get("name"): p.get("nodePort") for p in (live.get("spec") or {}).get("ports") or []
            }
            ports = [
                {**p, "nodePort": node_ports[p["name"]]} if node_ports.get(p["name"]) else p
                for p in desired["spec"]["ports"]
            ]
            body = {**live, "spec": {**(live.get("spec") or {}), **desired["spec"], "ports": ports}}
            self.client.update(body)

    # --- status -----------------------------------------------------------------------------------------

    def _status_from_pod(self, instance: Obj, pod: Obj) -> float | None:
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        access = st.Access(
            static_address=self.settings.value(setting_names.INSTANCE_ACCESS_STATIC_ADDRESS),
            wildcard_dns=self.settings.value(setting_names.INSTANCE_ACCESS_WILDCARD_DNS),
        )
        status, waiting = st.from_pod(
            instance,
            pod,
            self.services.get(changes.name_of(instance), changes.namespace_of(instance)),
            self.nodes.get(node_name) if node_name else None,
            self.devices.get(node_name) if node_name else None,
            access,
        )
        self._write_status(instance, status)
        return POLL_SECONDS if waiting else None

    def _with_ready(self, instance: Obj, status: Obj) -> Obj:
        generation = (instance.get("metadata") or {}).get("generation")
        return st.with_ready(status, instance.get("status"), generation, _now())

    def _write_status(self, instance: Obj, status: Obj) -> bool:
        """Replace the status with ``status`` and its ``Ready`` condition when it differs (a merge
        patch nulling every field ``status`` lacks, so nothing stale survives); True when written."""
        live = instance.get("status") or {}
        status = self._with_ready(instance, status)
        if not st.changed(live, status):
            return False
        body = replacing(live, st.normal(status))
        try:
            self.client.patch(
                "Instance",
                changes.name_of(instance),
                {"status": body},
                namespace=changes.namespace_of(instance),
                subresource="status",
            )
        except ApiError as error:
            if not error.not_found:
                raise
            return False
        return True
