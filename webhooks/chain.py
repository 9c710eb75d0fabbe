"""The apiserver's admission chain for one object, run offline: schema defaulting and validation
for our kinds, then the mutating webhooks in order, then the validating webhooks.

``gpustack-operator admit`` prints what :func:`run` returns; tests compare it with what a real
kube-apiserver stores.  Object selectors are honoured (a Pod without the queue label passes
untouched, as the apiserver would never call the Pod webhooks for it); match conditions are not
evaluated (they are CEL and only narrow the Workload webhook, whose handler checks the same thing).
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass, field
from typing import Any

from api import schema, selectors
from webhooks import patch as jsonpatch
from webhooks import registry
from webhooks.decision import Decision, FieldError, reject
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest


@dataclass(slots=True)
class Outcome:
    allowed: bool
    code: int
    message: str
    warnings: list[str] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    object: dict[str, Any] | None = None
    causes: list[FieldError] = field(default_factory=list)


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _schema_check(obj: dict[str, Any]) -> tuple[dict[str, Any], Decision | None]:
    """Apply CRD defaults and validate, as the apiserver does for a custom resource."""
    judgement = schema.judge(obj)
    if not judgement.served or judgement.allowed:
        return judgement.document, None
    name = (obj.get("metadata") or {}).get("name", "")
    group, _ = _split_api_version(obj.get("apiVersion", ""))
    return judgement.document, reject(f"{obj.get('kind')}.{group}", name, judgement.errors)


def _request(
    obj: dict[str, Any], old: dict[str, Any] | None, operation: str, dry_run: bool
) -> AdmissionRequest:
    group, version = _split_api_version(obj.get("apiVersion", ""))
    meta = obj.get("metadata") or {}
    return AdmissionRequest(
        uid=str(uuid.uuid4()),
        operation=operation,
        group=group,
        version=version,
        kind=obj.get("kind", ""),
        resource="",
        sub_resource="",
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        object=obj,
        old_object=old,
        dry_run=dry_run,
    )


def _outcome(
    decision: Decision, obj: dict[str, Any] | None, original: dict[str, Any], warnings: list[str]
) -> Outcome:
    return Outcome(
        allowed=decision.allowed,
        code=decision.code,
        message=decision.message,
        warnings=warnings + decision.warnings,
        patch=jsonpatch.diff(original, obj) if obj is not None else [],
        object=obj,
        causes=list(decision.causes),
    )


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


async def run(
    obj: dict[str, Any],
    lookups: Lookups,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    dry_run: bool = False,
) -> Outcome:
    """Admit ``obj`` (a CREATE, or an UPDATE of ``old``) through the whole chain."""
    original = copy.deepcopy(obj)
    current = copy.deepcopy(obj)
    warnings: list[str] = []
    current, refused = _schema_check(current)
    if refused is not None:
        return _outcome(refused, None, original, warnings)
    for mutating in (True, False):
        request = _request(current, old, operation, dry_run)
        for webhook in registry.for_request(request, mutating=mutating):
            # The apiserver calls a webhook whose objectSelector matches the new object or the
            # old one (an UPDATE that drops an opt-in label still reaches the webhook guarding it).
            if not any(
                selectors.matches(webhook.object_selector, _labels(candidate))
                for candidate in (current, old)
                if candidate is not None
            ):
                continue
            decision = await webhook(request, lookups)
            warnings.extend(decision.warnings)
            if not decision.allowed:
                decision.warnings = []
                return _outcome(decision, None, original, warnings)
            if mutating and decision.patch:  # the next webhook sees the mutated object
                current = jsonpatch.apply(current, decision.patch)
                request = _request(current, old, operation, dry_run)
        if mutating:
            current, refused = _schema_check(current)
            if refused is not None:
                return _outcome(refused, None, original, warnings)
    return Outcome(True, 200, "", warnings, jsonpatch.diff(original, current), current)
