"""The ``KVCacheBackend`` reconciler (kv-cache spec §5.1): thin I/O over the pure renderers
(``leader_render``, ``members_render``, ``election_render``, ``tier_render``) and judges
(``backend_status``, ``rollout``, ``tier_status``, ``tier_cleanup``).

Managed: finalizer, leader Deployment and Service, the election's ServiceAccounts, Roles and
RoleBindings (pruned when the election is turned off), member DaemonSets (``OnDelete``; Pods whose
fingerprint moved are deleted for their DaemonSet to recreate), the tier survey's ledger, and the
status poll every 15 s (the timer starts after a pass).  External: nothing rendered; the Admin
address is only read.  Deletion is held while a consumer claims the backend; then every object
carrying this backend's ownership annotation is deleted and waited for, each wait bounded by its Pod
grace + 2 minutes; then, with ``cleanAfterDelete``, the tier is emptied node by node; the finalizer
goes last.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Hashable
from dataclasses import dataclass

from api import constants
from api import kvcache as kv
from api.objects import Obj
from controllers.conditions import FALSE, Verdict, find, now
from controllers.kvcache import (
    admin,
    backend_render,
    backend_status,
    leader_render,
    members_render,
    rollout,
    tier_cleanup,
    tier_status,
    writes,
)
from controllers.kvcache import election_render as er
from controllers.kvcache import tier_render as tr
from controllers.settings import SettingsReader
from kube import changes
from kube.client import ApiError
from kube.events import WARNING
from kube.manager import Controller, Manager, Watch

POLL_S = 15.0
DELETE_POLL_S = 5.0
GRACE_SLACK_S = 120
OWNED_KINDS = ("Deployment", "Service", "DaemonSet", "ConfigMap", "ServiceAccount", "Role", "RoleBinding")
PRUNED_KINDS = ("DaemonSet", "ServiceAccount", "Role", "RoleBinding")  # rendered or deleted as the spec moves
LEADER_SUFFIX = "-leader"


def _backend_label(obj: Obj) -> list[str]:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(kv.LABEL_BACKEND)
    return [value] if value else []


def _role(obj: Obj) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(kv.LABEL_ROLE) or "")


def _epoch(stamp: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return time.time()


@dataclass
class Rendered:
    """What one managed pass rendered, for the status that follows it."""

    deployment: Obj
    daemonsets: list[Obj]
    hold: str | None
    tier: Verdict | None


class KVCacheBackendReconciler(Controller):
    name = "kv-cache-backends"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        ns = constants.SYSTEM_NAMESPACE
        self.namespace = ns
        self.backends = self.informer(kv.KIND_BACKEND)
        self.settings = self.informer("Setting", ns)
        self.leases = self.informer("Lease", ns)
        self.nodes = self.informer("Node")
        self.owned = {
            kind: manager.informer(kind, ns, kv.LABEL_BACKEND, indexes={"backend": _backend_label})
            for kind in (*OWNED_KINDS, "Pod")
        }

    def watches(self) -> list[Watch]:
        def backend(event: str, obj: Obj, old: Obj | None) -> list[str]:
            return [changes.name_of(obj)]

        def owned(event: str, obj: Obj, old: Obj | None) -> list[str]:
            return _backend_label(obj) or _backend_label(old or {})

        def lease(event: str, obj: Obj, old: Obj | None) -> list[str]:
            """A leader's Lease wakes its backend when it appears, goes or changes hands (never on a
            renewal, which the 15 s poll reads anyway)."""
            name = changes.name_of(obj)
            if not name.endswith(LEADER_SUFFIX):
                return []

            def holder(o: Obj | None) -> object:
                return ((o or {}).get("spec") or {}).get("holderIdentity")

            if event == "MODIFIED" and holder(obj) == holder(old):
                return []
            return [name[: -len(LEADER_SUFFIX)]]

        ns = self.namespace
        return [
            Watch(kv.KIND_BACKEND, backend),
            Watch("Lease", lease, ns),
            *(Watch(kind, owned, ns, kv.LABEL_BACKEND) for kind in (*OWNED_KINDS, "Pod")),
        ]

    # -- helpers ----------------------------------------------------------------------------------
    def _setting_image(self) -> str:
        """The kv-cache-backend-image Setting, under the container-* Settings (blank stays blank)."""
        return SettingsReader(self.settings).image(kv.SETTING_BACKEND_IMAGE)

    def _owned(self, kind: str, name: str) -> list[Obj]:
        return [
            o
            for o in self.owned[kind].by_index("backend", name)
            if backend_render.owned_by(o, name) or kind == "Pod"
        ]

    def _owned_one(self, kind: str, backend: str, name: str) -> Obj | None:
        return next((o for o in self._owned(kind, backend) if changes.name_of(o) == name), None)

    def _pods(self, backend: str, role: str) -> list[Obj]:
        return [p for p in self._owned("Pod", backend) if _role(p) == role]

    def _endpoints(self, backend: Obj) -> list[Obj]:
        name = changes.name_of(backend)
        if backend_render.managed(backend) is not None:
            return [
                {"name": "Client", "address": backend_render.client_address(name, self.namespace)},
                {"name": "Admin", "address": backend_render.admin_address(name, self.namespace)},
            ]
        external = ((backend.get("spec") or {}).get("connection") or {}).get("external") or {}
        return [dict(e) for e in external.get("endpoints") or [] if isinstance(e, dict)]

    def _apply_ledger(self, backend: Obj, name: str, key: str, text: str) -> None:
        self.client.apply(
            tr.ledger_config_map(backend, self.namespace, name, key, text),
            field_manager=kv.FIELD_MANAGER_BACKEND,
        )

    # -- the pass ---------------------------------------------------------------------------------
    def reconcile(self, key: Hashable) -> float | None:
        backend = self.backends.get(str(key))
        if backend is None:
            return None
        if (backend.get("metadata") or {}).get("deletionTimestamp"):
            return self._delete(backend)
        writes.add_finalizer(self.client, kv.KIND_BACKEND, backend, kv.FINALIZER_BACKEND)
        rendered = self._converge(backend) if backend_render.managed(backend) is not None else None
        self._poll(backend, rendered)
        return POLL_S

    def _converge(self, backend: Obj) -> Rendered:
        name = changes.name_of(backend)
        image = self._setting_image()
        live = self._owned_one("Deployment", name, kv.leader_name(name))
        replicas, hold = er.leader_replicas(backend, live)
        deployment = leader_render.leader_deployment(backend, self.namespace, image, replicas)
        daemonsets = members_render.member_daemonsets(backend, self.namespace, image)
        accounts = er.accounts(backend, self.namespace)
        wanted = [backend_render.leader_service(backend, self.namespace), *accounts, deployment, *daemonsets]
        for obj in wanted:
            self.client.apply(obj, field_manager=kv.FIELD_MANAGER_BACKEND)
        keep = {(obj["kind"], changes.name_of(obj)) for obj in wanted}
        for kind in PRUNED_KINDS:
            for obj in self._owned(kind, name):
                if (kind, changes.name_of(obj)) not in keep and not (obj.get("metadata") or {}).get(
                    "deletionTimestamp"
                ):
                    self.client.delete(kind, changes.name_of(obj), self.namespace)
        members = self._pods(name, kv.ROLE_MEMBER)
        for pod in members_render.stale_members(daemonsets, members):
            self.client.delete("Pod", changes.name_of(pod), self.namespace)
        return Rendered(deployment, daemonsets, hold, self._survey(backend, members))

    def _survey(self, backend: Obj, members: list[Obj]) -> Verdict | None:
        """Track the tier group's first survey per node; the verdict while none is written."""
        found = tr.tier_group(backend)
        if found is None or find((backend.get("status") or {}).get("conditions"), kv.COND_TIER_WAS_EMPTY):
            return None
        name = changes.name_of(backend)
        index = str(found[0])
        pods = [
            p for p in members if ((p.get("metadata") or {}).get("labels") or {}).get(kv.LABEL_GROUP) == index
        ]
        ledger_name = kv.tier_survey_name(name)
        stored = self.client.get("ConfigMap", ledger_name, self.namespace)  # past the cache: first Pods only
        before = tier_status.load(stored if backend_render.owned_by(stored, name) else None)
        ledger = tier_status.track(before, pods)
        if ledger != before:
            self._apply_ledger(backend, ledger_name, tier_status.LEDGER_KEY, tier_status.dump(ledger))
        daemonset = self._owned_one("DaemonSet", name, kv.member_name(name, found[0]))
        return tier_status.verdict(ledger, pods, daemonset)

    def _poll(self, backend: Obj, rendered: Rendered | None = None, deleting: str | None = None) -> None:
        name = changes.name_of(backend)
        endpoints = self._endpoints(backend)
        address = next((e["address"] for e in endpoints if e.get("name") == "Admin"), "")
        seen = backend_status.observe(admin.AdminClient(address))
        pods = self._pods(name, kv.ROLE_MEMBER)
        extra: list[Verdict] = []
        spec_managed = backend_render.managed(backend)
        if rendered is not None:
            extra.append(
                rollout.rollout_complete(
                    rendered.deployment,
                    self._owned_one("Deployment", name, kv.leader_name(name)),
                    rendered.daemonsets,
                    self._owned("DaemonSet", name),
                    pods,
                    rendered.hold,
                )
            )
        if spec_managed is not None and er.elected(spec_managed):
            lease = self.leases.get(kv.leader_name(name), self.namespace)
            extra.append(er.election_observed(lease, self._pods(name, kv.ROLE_LEADER), time.time()))
        tier = rendered.tier if rendered is not None else None
        status = backend_status.derive(
            backend,
            seen,
            endpoints=endpoints,
            pods=pods,
            stamp=now(),
            extra=tuple(extra),
            tier=tier,
            deleting=deleting,
        )
        written = writes.apply_status(
            self.client, kv.KIND_BACKEND, backend, status, kv.FIELD_MANAGER_BACKEND, ("capacity",)
        )
        before = find((backend.get("status") or {}).get("conditions"), kv.COND_TIER_WAS_EMPTY)
        if written and tier is not None and tier.status == FALSE and before is None:
            self.recorder.event(backend, WARNING, kv.EVENT_TIER_NOT_EMPTY, tier.message)

    # -- deletion ---------------------------------------------------------------------------------
    def _delete(self, backend: Obj) -> float | None:
        name = changes.name_of(backend)
        # Read past the cache: a pass queued before the finalizer came off must not run the
        # teardown again for a backend that is gone (it would re-create cleanup Pods and ledgers).
        current = self.client.get(kv.KIND_BACKEND, name)
        if current is None:
            return None
        backend = current
        meta = backend.get("metadata") or {}
        if kv.FINALIZER_BACKEND not in (meta.get("finalizers") or []):
            return None
        claimed = (backend.get("status") or {}).get("usedBy") or []
        if claimed:
            self._poll(backend)  # phase Deleting, naming the claimant
            return POLL_S
        ledgers = {kv.tier_survey_name(name), kv.tier_cleanup_name(name)}
        remaining = []
        for kind in OWNED_KINDS:
            for obj in self._owned(kind, name):
                if kind == "ConfigMap" and changes.name_of(obj) in ledgers:
                    continue  # kept to the end: the cleanup's ledger lives there
                obj_meta = obj.get("metadata") or {}
                if not obj_meta.get("deletionTimestamp"):
                    self.client.delete(kind, changes.name_of(obj), self.namespace, propagation="Foreground")
                    remaining.append(obj)
                elif not self._overdue(backend, kind, obj):
                    remaining.append(obj)
        if remaining:
            self._poll(backend)
            return DELETE_POLL_S
        if tier_cleanup.wanted(backend):
            running = self._clean(backend)
            if running:
                self._poll(backend, deleting=f"emptying the tier on {', '.join(running)}")
                return DELETE_POLL_S
        for pod in self._pods(name, kv.ROLE_TIER_CLEAN):
            if not (pod.get("metadata") or {}).get("deletionTimestamp"):
                self._delete_quietly("Pod", changes.name_of(pod))
        for ledger in sorted(ledgers):
            if self._owned_one("ConfigMap", name, ledger) is not None:
                self._delete_quietly("ConfigMap", ledger)
        writes.remove_finalizer(self.client, kv.KIND_BACKEND, backend, kv.FINALIZER_BACKEND)
        return None

    def _delete_quietly(self, kind: str, name: str) -> None:
        try:
            self.client.delete(kind, name, self.namespace)
        except ApiError as error:
            if not error.not_found:
                raise

    def _clean(self, backend: Obj) -> list[str]:
        """One pass of ``cleanAfterDelete``; the nodes whose cleanup is still under way."""
        name = changes.name_of(backend)
        ledger_name = kv.tier_cleanup_name(name)
        stored = self.client.get(
            "ConfigMap", ledger_name, self.namespace
        )  # past the cache: a node settles once
        before = tier_cleanup.load(stored if backend_render.owned_by(stored, name) else None)
        plan = tier_cleanup.plan(
            backend,
            self.namespace,
            self._setting_image(),
            self.nodes.list(),
            self.backends.list(),
            self._pods(name, kv.ROLE_TIER_CLEAN),
            before,
            time.time(),
        )
        if plan.ledger != before:  # settled first: a node is decided once, even if what follows fails
            self._apply_ledger(backend, ledger_name, tier_cleanup.LEDGER_KEY, tier_cleanup.dump(plan.ledger))
        for pod in plan.create:
            try:
                self.client.create(pod)
            except ApiError as error:
                if not error.conflict:
                    raise
        for pod_name in plan.delete:
            self._delete_quietly("Pod", pod_name)
        for node, reason, message in plan.events:
            self.recorder.event(
                self.nodes.get(node) or {"kind": "Node", "metadata": {"name": node}}, WARNING, reason, message
            )
        return plan.running

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
