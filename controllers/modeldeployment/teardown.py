"""The finalizer's life (model-deployment.md §9.6): added on a deployment's first pass, held while
its Pods, Workloads, Services and router are deleted (phase ``Deleting``), removed once no Pod
lists.  Both patches are JSON patches guarded by a ``test`` op, so another writer's edit of the
list is never undone."""

from __future__ import annotations

from api import constants
from api import model_deployment_status as s
from api.objects import Obj
from kube.client import JSON_PATCH, Client

FINALIZER = constants.FINALIZER_MODEL_DEPLOYMENT
DELETION_POLL_SECONDS = 2.0


def ensure_finalizer(client: Client, obj: Obj) -> Obj:
    meta = obj["metadata"]
    finalizers = list(meta.get("finalizers") or ())
    if FINALIZER in finalizers:
        return obj
    ops: list[Obj] = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}]
    if finalizers:
        ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER})
    else:
        ops.append({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
    return client.patch(
        "ModelDeployment", meta["name"], ops, namespace=meta["namespace"], content_type=JSON_PATCH
    )


def deleting_status(obj: Obj) -> Obj | None:
    """The status that says the deployment is being torn down; None when it says so already."""
    status = dict(obj.get("status") or {})
    if status.get("phase") == s.PHASE_DELETING:
        return None
    status.update(phase=s.PHASE_DELETING, phaseMessage="deleting the replicas, their Workloads and Services")
    return status


def remove_finalizer(client: Client, name: str, namespace: str) -> None:
    """Remove the finalizer from the deployment as the API holds it now (gone: nothing to do)."""
    fresh = client.get("ModelDeployment", name, namespace)
    if fresh is None:
        return
    finalizers = list(fresh["metadata"].get("finalizers") or ())
    if FINALIZER in finalizers:
        index = finalizers.index(FINALIZER)
        client.patch(
            "ModelDeployment",
            name,
            [
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": FINALIZER},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ],
            namespace=namespace,
            content_type=JSON_PATCH,
        )
