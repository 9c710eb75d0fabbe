"""A deployment's Pods and their Workloads on the API: listed, written as the plan says, deleted on
teardown.

The Pods are listed **from the API server** (a failed list raises, so a pass that cannot see them
writes nothing); the Workloads come from the cache, by group name or by the Pod that owns them.
"""

from __future__ import annotations

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


class Members:
    """The Pod and Workload writes of the reconciler (``workloads`` indexed by ``INDEX_OWNER``)."""

    def __init__(self, client: Client, workloads: Informer) -> None:
        self.client = client
        self.workloads = workloads

    def list_pods(self, md: Deployment, uid: str) -> list[Obj]:
        """The deployment's Pods, listed on the API server (raises when the list fails)."""
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

    def execute(self, result: planner.Plan) -> None:
        for pod in result.pod_deletes:
            meta = rp.meta(pod)
            self.client.delete("Pod", meta["name"], meta["namespace"])
        for wl in result.workload_deletes:
            meta = rp.meta(wl)
            self.client.delete("Workload", meta["name"], meta["namespace"])
        for pod in result.creates:
            self.client.create(pod)

    def delete_all(self, md: Deployment, pods: list[Obj]) -> None:
        """Teardown: every Pod, then every Workload (that releases Kueue's finalizers), not already
        leaving; deletes use the default grace."""
        for pod in pods:
            if not rp.leaving(pod):
                self.client.delete("Pod", rp.meta(pod)["name"], md.namespace)
        for wl in self.workloads_of(md, pods):
            if not rp.leaving(wl):
                self.client.delete("Workload", rp.meta(wl)["name"], md.namespace)
