"""The MutatingWebhookConfiguration and ValidatingWebhookConfiguration objects, generated from the
registry, for the chart, ``make dev`` and the e2e tests alike.

``gpustack-worker-mutation`` sorts before ``kueue-mutating-webhook-configuration``: the apiserver
runs mutating configurations in name order, and the fold must land before Kueue hashes the Pod's
resources.  Only the core Pod entries exclude namespaces — the operator's own and kube-system — so
a down worker can always restart itself; the entries for our own kinds see every namespace, so an
object in a reserved namespace still meets its rules.
"""

from __future__ import annotations

import base64
from typing import Any

from api import constants
from api.objects import Obj
from webhooks import registry


def _client_config(
    webhook: registry.Webhook, *, url: str | None, service: dict[str, Any] | None, ca_bundle: bytes | None
) -> Obj:
    config: Obj = {}
    if url is not None:
        config["url"] = url.rstrip("/") + webhook.path
    elif service is not None:
        config["service"] = {**service, "path": webhook.path}
    else:
        raise ValueError("a webhook configuration needs a url base or a service reference")
    if ca_bundle:
        config["caBundle"] = base64.b64encode(ca_bundle).decode()
    return config


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _entry(webhook: registry.Webhook, client_config: Obj, excluded: list[str], worker_identity: str) -> Obj:
    selector: Obj = {}
    if webhook.exempts_system_namespaces:
        selector = {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded}
            ]
        }
    entry: Obj = {
        "name": webhook.name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": [webhook.group],
                "apiVersions": [webhook.version],
                "operations": list(webhook.operations),
                "resources": [webhook.rule_resource],
                "scope": webhook.scope,
            }
        ],
        "failurePolicy": webhook.failure_policy,
        "matchPolicy": webhook.match_policy,
        "sideEffects": "None",
        "timeoutSeconds": webhook.timeout_seconds,
        "namespaceSelector": selector,
        "objectSelector": webhook.object_selector or {},
    }
    conditions = [dict(condition) for condition in webhook.match_conditions]
    if webhook.exempts_worker and worker_identity:
        conditions.append(
            {
                "name": "not-the-worker",
                "expression": f"request.userInfo.username != {_cel_string(worker_identity)}",
            }
        )
    if conditions:
        entry["matchConditions"] = conditions
    if webhook.mutating:
        entry["reinvocationPolicy"] = webhook.reinvocation
    return entry


def render(
    *,
    url: str | None = None,
    service: dict[str, Any] | None = None,
    ca_bundle: bytes | None = None,
    system_namespace: str = constants.SYSTEM_NAMESPACE,
    webhooks: tuple[registry.Webhook, ...] = registry.WEBHOOKS,
    worker_identity: str = "",
) -> list[Obj]:
    """Both configuration objects.  Give ``url`` (``https://127.0.0.1:31443``) for a worker outside
    the cluster, or ``service`` (``{"name", "namespace", "port"}``) for the chart's Service;
    ``worker_identity`` (the worker's username) exempts its own writes where a webhook says so."""
    excluded = sorted({system_namespace, "kube-system"})
    objects = []
    for mutating, kind, name in (
        (True, "MutatingWebhookConfiguration", registry.MUTATING_CONFIGURATION),
        (False, "ValidatingWebhookConfiguration", registry.VALIDATING_CONFIGURATION),
    ):
        entries = [
            _entry(
                w, _client_config(w, url=url, service=service, ca_bundle=ca_bundle), excluded, worker_identity
            )
            for w in webhooks
            if w.mutating == mutating
        ]
        objects.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "gpustack-operator"}},
                "webhooks": entries,
            }
        )
    return objects
