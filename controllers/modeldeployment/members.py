"""A deployment's Pods and their Workloads on the API: listed, written as the plan says, deleted on
teardown.

The Pods come from the Pod cache (by ``INDEX_INSTANCE``) once it has seen this controller's own
last writes for the deployment. After a pass creates or deletes Pods, the next pass waits
(:meth:`Members.waiting`: the reconciler requeues it) until the cache shows every Pod created and
every deletion, as the expectations of Kubernetes' own ReplicaSet controller do; the Pod events
that bring them requeue the deployment. Only when the cache is not synced, or has not caught up
within ``EXPECTATION_SECONDS``, does a pass list them **from the API server** (a failed list raises,
so a pass that cannot see them writes nothing); a cache that shows them is read however late the
pass comes. A deployment's passes thus list nothing on the API server. (At 5,000 deployments a
deployment's next pass came more than a minute after its first, behind the others in the queue,
and the expired expectation made 4,983 passes list although the cache showed their Pods.) The
Workloads come from the cache, by group name or by the Pod that owns them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from api import constants
from api.objects import Obj
from controllers.modeldeployment import names
from controllers.modeldeployment import plan as planner
from controllers.modeldeployment import replicas as rp
from kube.client import Client
from kube.informer import Informer
from readmodels.modeldeployment import Deployment

POD_SELECTOR = f"{constants.LABEL_APP_NAME}={constants.APP_NAME_MODEL_DEPLOYMENT}"
INDEX_OWNER = "owner-pod"
INDEX_INSTANCE = "app-instance"
"""Pods and Services by ``<namespace>/<deployment>`` (their app-instance label): a pass reads its
own objects without walking every deployment's, so its cost does not grow with the fleet."""


def instance_index(obj: Obj) -> list[str]:
    meta = obj.get("metadata") or {}
    md = (meta.get("labels") or {}).get(constants.LABEL_APP_INSTANCE)
    return [f"{meta.get('namespace', '')}/{md}"] if md else []


def owner_index(workload: Obj) -> list[str]:
    return [
        o["uid"]
        for o in (workload.get("metadata") or {}).get("ownerReferences") or ()
        if o.get("kind") == "Pod" and o.get("uid")
    ]


EXPECTATION_SECONDS = 60.0
"""How long a pass waits for the cache to show its writes before trusting it again (a watch that
lost an event re-lists well within it)."""


@dataclass
class Expectation:
    created: set[str] = field(default_factory=set)  # Pod names the cache must show
    deleted: set[str] = field(default_factory=set)  # Pod names the cache must show gone or leaving
    until: float = 0.0


class Members:
    """The Pod and Workload writes of the reconciler (``workloads`` indexed by ``INDEX_OWNER``,
    ``pods`` by ``INDEX_INSTANCE``; without ``pods`` every pass lists on the API server)."""

    def __init__(self, client: Client, workloads: Informer, pods: Informer | None = None) -> None:
        self.client = client
        self.workloads = workloads
        self.pods = pods
        self._expected: dict[tuple[str, str], Expectation] = {}
        self._lock = threading.Lock()
        self.api_lists = 0  # passes that listed on the API server (tests, benchmarks)

    def waiting(self, key: tuple[str, str]) -> bool:
        """Whether a pass for ``key`` should wait for the Pod cache: it has yet to show this
        controller's last writes, which are still expected. The Pod events that bring them requeue
        the deployment; until then a pass would have to list the Pods on the API server."""
        if self.pods is None or not self.pods.synced():
            return False
        with self._lock:
            expected = self._expected.get(key)
        if expected is None or time.monotonic() > expected.until:
            return False
        if not self._shown(key, expected):
            return True
        self._met(key, expected)  # the pass's list_pods reads the cache without asking again
        return False

    def _cache_current(self, key: tuple[str, str]) -> bool:
        """Whether the Pod cache has seen this controller's last writes for ``key``."""
        if self.pods is None or not self.pods.synced():
            return False
        with self._lock:
            expected = self._expected.get(key)
        if expected is None:
            return True
        # Shown, the cache is current however late this pass comes (behind thousands of others in
        # the queue, a pass can come after the deadline); not shown by the deadline, the API is
        # asked once and the cache trusted again after.
        shown = self._shown(key, expected)
        if shown or time.monotonic() > expected.until:
            self._met(key, expected)
        return shown

    def _met(self, key: tuple[str, str], expected: Expectation) -> None:
        """Drop ``expected``, unless a write since has replaced it."""
        with self._lock:
            if self._expected.get(key) is expected:
                del self._expected[key]

    def _shown(self, key: tuple[str, str], expected: Expectation) -> bool:
        assert self.pods is not None
        namespace = key[0]
        for name in expected.created:
            if self.pods.get(name, namespace) is None:
                return False
        for name in expected.deleted:
            found = self.pods.get(name, namespace)
            if found is not None and not rp.leaving(found):
                return False
        return True

    def _expect(self, key: tuple[str, str], created: list[str], deleted: list[str]) -> None:
        if not created and not deleted:
            return
        with self._lock:
            expected = self._expected.setdefault(key, Expectation())
            expected.created |= set(created)
            expected.deleted |= set(deleted)
            expected.until = time.monotonic() + EXPECTATION_SECONDS

    def list_pods(self, md: Deployment, uid: str) -> list[Obj]:
        """The deployment's Pods: from the cache when it is current for the deployment, else listed
        on the API server (raises when the list fails)."""
        if self._cache_current((md.namespace, md.name)):
            assert self.pods is not None
            pods = self.pods.by_index(INDEX_INSTANCE, f"{md.namespace}/{md.name}")
        else:
            self.api_lists += 1
            pods, _ = self.client.list(
                "Pod", md.namespace, label_selector=f"{POD_SELECTOR},{constants.LABEL_APP_INSTANCE}={md.name}"
            )
        return [
            p
            for p in pods
            if any(
                o.get("uid") == uid and o.get("controller") for o in rp.meta(p).get("ownerReferences") or ()
            )
        ]

    def workloads_of(self, md: Deployment, pods: list[Obj]) -> list[Obj]:
        """The Workloads of the deployment's groups: by group name, or owned by one of its Pods."""
        found: dict[str, Obj] = {}
        wanted = {
            names.pod_group_name(md.namespace, md.name, role.name, k)
            for role in md.roles
            for k in range(max(role.replicas, 0))
        }
        wanted |= {rp.pod_labels(p).get(constants.KUEUE_POD_GROUP_NAME, "") for p in pods}
        for group in wanted:
            wl = self.workloads.get(group, md.namespace) if group else None
            if wl is not None:
                found[group] = wl
        for pod in pods:
            for wl in self.workloads.by_index(INDEX_OWNER, rp.meta(pod).get("uid", "")):
                found.setdefault(rp.meta(wl).get("name", ""), wl)
        return list(found.values())

    def execute(self, md: Deployment, result: planner.Plan) -> None:
        deleted, created = [], []
        try:
            for pod in result.pod_deletes:
                meta = rp.meta(pod)
                deleted.append(meta["name"])
                self.client.delete("Pod", meta["name"], meta["namespace"])
            for wl in result.workload_deletes:
                meta = rp.meta(wl)
                self.client.delete("Workload", meta["name"], meta["namespace"])
            for pod in result.creates:
                created.append(rp.meta(self.client.create(pod)).get("name", ""))
        finally:  # a write that failed half-way still leaves what it did to be seen
            self._expect((md.namespace, md.name), [n for n in created if n], deleted)

    def delete_all(self, md: Deployment, pods: list[Obj]) -> None:
        """Teardown: every Pod, then every Workload (that releases Kueue's finalizers), not already
        leaving; deletes use the default grace."""
        deleted = []
        for pod in pods:
            if not rp.leaving(pod):
                deleted.append(rp.meta(pod)["name"])
                self.client.delete("Pod", rp.meta(pod)["name"], md.namespace)
        self._expect((md.namespace, md.name), [], deleted)
        for wl in self.workloads_of(md, pods):
            if not rp.leaving(wl):
                self.client.delete("Workload", rp.meta(wl)["name"], md.namespace)
