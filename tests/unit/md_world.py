"""The in-memory API the ModelDeployment controller's unit tests reconcile over: a recording client
(objects by kind, namespace and name; every write recorded), the controller on it, and what Kueue
writes for an admitted group."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from api import constants
from api.objects import Obj
from controllers.modeldeployment.controller import FINALIZER, ModelDeploymentReconciler
from controllers.registry import ModelDeployments
from kube.client import ApiError
from kube.informer import Informer
from kube.manager import Manager
from tests.unit.md_fixtures import NS

_ids = itertools.count()


class RecordingClient:
    """The API as far as one reconcile reaches: objects by (kind, namespace, name), every write
    recorded.  Listing Pods can be made to fail."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.writes: list[tuple[str, str, str]] = []
        self.fail_pod_list = False

    def version(self) -> Obj:
        return {"major": "1", "minor": "33"}

    def get(self, kind: str, name: str, namespace: str = "", **_: Any) -> Obj | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def list(self, kind: str, namespace: str = "", *, label_selector: str = "", **_: Any):
        if kind == "Pod" and self.fail_pod_list:
            raise ApiError(503, "ServiceUnavailable", "etcd is gone")
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        items = [
            copy.deepcopy(obj)
            for (k, ns, _), obj in self.objects.items()
            if k == kind
            and (not namespace or ns == namespace)
            and all((obj["metadata"].get("labels") or {}).get(key) == value for key, value in wanted.items())
        ]
        return items, "1"

    def create(self, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        n = next(_ids)
        meta.setdefault("name", meta.pop("generateName", "x-") + f"{n:05d}")
        meta.update(uid=f"uid-{n}", resourceVersion=str(n))
        self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
        self.writes.append(("create", obj["kind"], meta["name"]))
        return obj

    def update(self, obj: Obj, *, subresource: str = "") -> Obj:
        self.writes.append(
            ("update" + (f"/{subresource}" if subresource else ""), obj["kind"], obj["metadata"]["name"])
        )
        return obj

    def apply(self, obj: Obj, **_: Any) -> Obj:
        self.writes.append(("apply", obj["kind"], obj["metadata"]["name"]))
        return obj

    def patch(self, kind: str, name: str, body: Any, *, namespace: str = "", **_: Any) -> Obj:
        self.writes.append(("patch", kind, name))
        current = self.objects[(kind, namespace, name)]
        if kind == "ModelDeployment":
            current["metadata"]["finalizers"] = [FINALIZER]
        return copy.deepcopy(current)

    def delete(self, kind: str, name: str, namespace: str = "", **_: Any) -> None:
        self.writes.append(("delete", kind, name))
        self.objects.pop((kind, namespace, name), None)


def controller_on(client: RecordingClient) -> ModelDeploymentReconciler:
    """The reconciler on ``client``, with the features it installs by default."""
    manager = Manager(client, leader_election=False)  # type: ignore[arg-type]
    controller = manager.add(ModelDeployments)
    assert isinstance(controller, ModelDeploymentReconciler)
    return controller


def informer_of(controller: ModelDeploymentReconciler, kind: str) -> Informer:
    """The controller's cache of ``kind`` (a feature's, for the kinds the features read)."""
    return {
        "ModelDeployment": controller.deployments,
        "InstanceType": controller.instance_types,
        "Workload": controller.workloads,
        "Service": controller.services,
        "Pod": controller.pods,
    }.get(kind) or controller.feature_informers[kind]


def admitted_workload(pod: Obj, **status: Any) -> Obj:
    """The Workload Kueue admitted for ``pod``'s group, owned by the Pod (``status`` adds fields)."""
    return {
        "kind": "Workload",
        "metadata": {
            "name": pod["metadata"]["labels"][constants.KUEUE_POD_GROUP_NAME],
            "namespace": NS,
            "ownerReferences": [{"kind": "Pod", "uid": pod["metadata"]["uid"]}],
        },
        "spec": {"active": True},
        "status": {
            **status,
            "conditions": [{"type": t, "status": "True"} for t in ("QuotaReserved", "Admitted")],
        },
    }
