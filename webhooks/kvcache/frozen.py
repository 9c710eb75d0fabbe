"""The frozen-keys guard of Pod injection (kv-cache spec §3.4): validating, UPDATE, ``Ignore``.

Injection decides once, at CREATE.  On an existing Pod the opt-in label and the two annotations the
webhook wrote keep saying what was decided: changing or removing any of them is refused, on a
terminating Pod too (the kubelet keeps re-projecting the client file through the grace period).
Every other edit, finalizers above all, passes; ``failurePolicy: Ignore`` keeps an unreachable
webhook from ever blocking one.
"""

from __future__ import annotations

from typing import Any

from api import constants
from api.objects import as_dict
from webhooks.decision import Decision, FieldError, allow, forbidden, reject
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

_MISSING = object()
_WHY = {
    constants.LABEL_KVCACHE_INJECT: (
        "the opt-in label is fixed once the Pod exists: injection runs at CREATE only, so adding it would claim a "
        "cache the Pod was never configured for and dropping it would hide the configuration it still carries; "
        "change it where the Pod is defined and let the Pod be replaced"
    ),
    constants.ANNOTATION_KVCACHE_INJECTED: (
        "is the injection webhook's record of what it decided; an edited record describes a decision nobody "
        "made; change the kvcache annotations where the Pod is defined and let the Pod be replaced"
    ),
    constants.ANNOTATION_KVCACHE_CLIENT_CONFIG: (
        "is projected into the running container as its store client file, so an edit would swap the master "
        "address, transport and sizes underneath it; change the Binding or pool and let the Pod be replaced"
    ),
}


def _value(obj: dict[str, Any] | None, section: str, key: str) -> Any:
    return as_dict(as_dict(as_dict(obj).get("metadata")).get(section)).get(key, _MISSING)


def errors(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[FieldError]:
    found: list[FieldError] = []
    checks = (
        ("labels", constants.LABEL_KVCACHE_INJECT),
        ("annotations", constants.ANNOTATION_KVCACHE_INJECTED),
        ("annotations", constants.ANNOTATION_KVCACHE_CLIENT_CONFIG),
    )
    for section, key in checks:
        if _value(old, section, key) != _value(new, section, key):
            found.append(forbidden(f"metadata.{section}[{key}]", _WHY[key]))
    return found


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    if request.operation != "UPDATE":
        return allow()
    found = errors(request.old_object, request.object)
    return reject("Pod", request.display_name, found) if found else allow()
