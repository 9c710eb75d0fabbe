"""Setting admission (operations spec D.8): the rules of ``gpustack.ai/v1`` ``Setting``.

``Setting`` is a CRD here (the README says why); this webhook gives it the verbs the reference's
aggregated resource has: every registered setting exists in the system namespace (the worker seeds
it), an update is judged by the setting's own validator (``api.settings``), creating a Setting
whose name is not registered is refused, and so is deleting one.  The value is ``spec.value``;
``status`` is an echo the worker writes.

- CREATE: the name must be a registered setting and the namespace the system namespace; the value,
  when given, must pass the setting's validator (a known setting created by hand is a seed).
- UPDATE: a changed ``spec.value`` must pass the validator and, for the model-store watermarks,
  stay consistent with the other one (high above low); ``Node`` delivery needs the CSIDriver.
- DELETE: refused, naming how to change the value instead.  The namespace controller (deleting
  the whole system namespace) is the one caller let through, so an uninstall can always finish.
"""

from __future__ import annotations

from typing import Any

from api import constants
from api import settings as registry
from webhooks.decision import Decision, allow, forbidden, invalid, not_found, reject
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

KIND = "Setting"
CSI_DRIVER = "model.csi.gpustack.ai"
# Who deletes every object of a namespace being deleted (with and without per-controller credentials).
NAMESPACE_DELETERS = frozenset(
    {"system:serviceaccount:kube-system:namespace-controller", "system:kube-controller-manager"}
)


def _value(obj: dict[str, Any] | None) -> str | None:
    value = ((obj or {}).get("spec") or {}).get("value")
    return value if isinstance(value, str) else None


def _patch_hint(name: str) -> str:
    return (
        f"kubectl -n {constants.SYSTEM_NAMESPACE} patch setting {name} --type merge "
        '-p \'{"spec":{"value":"..."}}\''
    )


async def _current_values(lookups: Lookups) -> dict[str, str]:
    values: dict[str, str] = {}
    for item in await lookups.list(KIND, constants.SYSTEM_NAMESPACE):
        name = (item.get("metadata") or {}).get("name")
        value = _value(item)
        if isinstance(name, str) and value is not None:
            values[name] = value
    return values


async def _judge_value(name: str, value: str, lookups: Lookups) -> str | None:
    csi_present: bool | None = None
    if name == registry.DELIVERY_MODE and value == "Node":
        csi_present = await lookups.get("CSIDriver", CSI_DRIVER) is not None
    current = await _current_values(lookups)
    return registry.validate_update(name, value, current, csi_driver_present=csi_present)


def _unknown(name: str) -> Decision:
    known = ", ".join(sorted(registry.SETTINGS))
    return reject(
        KIND,
        name,
        [
            not_found(
                "metadata.name",
                name,
                f"no such setting; the settings are fixed and always exist (kubectl -n "
                f"{constants.SYSTEM_NAMESPACE} get settings): {known}",
            )
        ],
    )


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    name = request.name or ((request.object or request.old_object or {}).get("metadata") or {}).get(
        "name", ""
    )
    if request.operation == "DELETE":
        if (request.user or {}).get("username") in NAMESPACE_DELETERS:
            return allow()
        return reject(
            KIND,
            name,
            [
                forbidden(
                    "metadata.name",
                    f"a Setting cannot be deleted: every setting always exists; change its value "
                    f"instead ({_patch_hint(name)})",
                )
            ],
        )
    if name not in registry.SETTINGS:
        return _unknown(name)
    if request.operation == "CREATE" and request.namespace != constants.SYSTEM_NAMESPACE:
        return reject(
            KIND,
            name,
            [
                invalid(
                    "metadata.namespace",
                    request.namespace,
                    f"settings live in {constants.SYSTEM_NAMESPACE}; edit the one there "
                    f"({_patch_hint(name)})",
                )
            ],
        )
    definition = registry.SETTINGS[name]
    value = _value(request.object)
    if value is None:
        return allow()  # no value: the setting reads as its default
    if request.operation == "UPDATE" and value == _value(request.old_object):
        return allow()  # labels, annotations or status-only changes are not the value's business
    if request.operation == "UPDATE" and not definition.editable:
        return reject(KIND, name, [forbidden("spec.value", f"setting {name} is not editable")])
    problem = await _judge_value(name, value, lookups)
    if problem:
        return reject(
            KIND,
            name,
            [invalid("spec.value", value, f"setting {name} {problem}")],
        )
    return allow()
