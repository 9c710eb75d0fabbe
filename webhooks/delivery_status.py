"""The two status guards of model delivery (spec §3.2), ``failurePolicy: Fail``.

- ``modelartifacts/status``: only the worker's own identity writes it. Mount authorization trusts
  that status, so this is what keeps a tenant from making an artifact look resolved. The worker
  learns its identity at startup (``SelfSubjectReview``) and hands it to every webhook process in
  ``GPUSTACK_WORKER_IDENTITY``; without it, every write is refused (closed, never open).
- ``nodemodelstores/status``: (a) the requester is the model-manager plugin's ServiceAccount
  (``--model-manager-service-account``, ``GPUSTACK_WORKER_MODEL_MANAGER_SA`` as ``namespace/name``);
  (b) its token is bound to a Pod (``authentication.kubernetes.io/pod-name`` and ``…/pod-uid`` in the
  request's extra); (c) that Pod runs on the object's node: the token's
  ``authentication.kubernetes.io/node-name`` (Kubernetes 1.30+), else a fresh read of the Pod in the
  operator namespace with that UID. Each refusal names the rule that failed.
"""

from __future__ import annotations

import os
from typing import Any

from api import constants
from webhooks.decision import Decision, allow, refuse
from webhooks.lookups import LookupFailed, Lookups
from webhooks.review import AdmissionRequest

ENV_WORKER_IDENTITY = "GPUSTACK_WORKER_IDENTITY"
ENV_MODEL_MANAGER_SA = "GPUSTACK_WORKER_MODEL_MANAGER_SA"
DEFAULT_MODEL_MANAGER_SA = f"{constants.SYSTEM_NAMESPACE}/gpustack-model-manager"
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"


def _forbidden(message: str) -> Decision:
    return refuse(403, "Forbidden", message)


def _extra(request: AdmissionRequest, key: str) -> str:
    values = (request.user.get("extra") or {}).get(key)
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return ""


def model_manager_username() -> str:
    namespace, _, name = os.environ.get(ENV_MODEL_MANAGER_SA, DEFAULT_MODEL_MANAGER_SA).partition("/")
    return f"system:serviceaccount:{namespace}:{name}"


async def guard_artifact_status(request: AdmissionRequest, lookups: Lookups) -> Decision:
    worker = os.environ.get(ENV_WORKER_IDENTITY, "")
    if worker and request.user.get("username") == worker:
        return allow()
    return _forbidden(
        "only the worker writes a ModelArtifact's status: mounts are authorized by it; "
        "change the artifact's spec source instead (by creating another artifact)"
    )


async def guard_store_status(request: AdmissionRequest, lookups: Lookups) -> Decision:
    if request.user.get("username") != model_manager_username():
        return _forbidden(
            "only the model-manager plugin writes a NodeModelStore's status; the worker writes its spec"
        )
    pod_name, pod_uid = _extra(request, EXTRA_POD_NAME), _extra(request, EXTRA_POD_UID)
    if not pod_name or not pod_uid:
        return _forbidden(
            "the plugin's token must be bound to its Pod (a projected service account token), "
            "not a long-lived Secret token"
        )
    node = request.name or ((request.object or {}).get("metadata") or {}).get("name", "")
    token_node = _extra(request, EXTRA_NODE_NAME)
    if token_node:
        if token_node != node:
            return _node_refusal(node)
        return allow()
    try:
        pod: dict[str, Any] | None = await lookups.get(
            "Pod", pod_name, constants.SYSTEM_NAMESPACE, fresh=True
        )
    except LookupFailed as error:
        return refuse(500, "InternalError", f"the plugin's Pod could not be read ({error}); retry shortly")
    if (
        pod is None
        or (pod.get("metadata") or {}).get("uid") != pod_uid
        or (pod.get("spec") or {}).get("nodeName") != node
    ):
        return _node_refusal(node)
    return allow()


def _node_refusal(node: str) -> Decision:
    return _forbidden(
        f"the plugin writes only the status of the node its Pod runs on, and its Pod does not run on {node}"
    )
