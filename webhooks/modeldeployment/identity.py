"""What makes a ModelDeployment the deployment it is: frozen fields on UPDATE (§2.3, §5 #38–#40).

Roles are matched by name, never by index.  Values are compared as stored and defaulted: an absent
``kind`` is ``Server``, ``size`` 1, ``connector`` ``Mooncake``; quantities compare by value (``"1"`` is
``1``); an empty list, map or string is the same as an absent one.  A merge patch that restates a
role without ``command`` sends ``command: null``, which IS an edit of ``command``, and is refused
naming that field: the rule reads what was sent.
"""

from __future__ import annotations

from typing import Any

from api.fielderrors import FieldError, forbidden, invalid
from readmodels.modeldeployment import DEFAULT_CONNECTOR, Deployment, Role, exact

_IDENTITY = (
    "is part of what makes this deployment; a different value is a different deployment, which is "
    "created, not edited: create another deployment instead"
)
_QUANTITIES = ("accelerator", "interface")
_ZERO_IS_UNSET = ("acceleratorSlicedMemoryPercentage", "acceleratorSlicedCoresPercentage")


def canonical(value: Any) -> Any:
    """``value`` with empty maps, lists and strings (and nulls) dropped, for deep comparison."""
    if isinstance(value, dict):
        out = {key: found for key, item in value.items() if (found := canonical(item)) is not None}
        return out or None
    if isinstance(value, list):
        return [canonical(item) for item in value] or None
    if value == "" or value is None:
        return None
    return value


def _resources(raw: Any) -> Any:
    if not isinstance(raw, dict):
        return canonical(raw)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _QUANTITIES:
            value = exact(value) or value
        elif key in _ZERO_IS_UNSET and value == 0:
            value = None
        found = canonical(value)
        if found is not None:
            out[key] = found
    return out or None


def _kv_cache(raw: Any) -> Any:
    if isinstance(raw, dict):
        raw = {**raw, "connector": raw.get("connector") or DEFAULT_CONNECTOR}
    return canonical(raw)


def _changed(path: str, field: str, value: Any, hint: str = "") -> FieldError:
    return invalid(path, value, f"{field} {_IDENTITY}{hint}")


def _role(role: Role, stored: Role) -> list[FieldError]:
    errors: list[FieldError] = []
    if role.kind != stored.kind:
        errors.append(_changed(f"{role.path}.kind", "kind", role.raw.get("kind")))
    if role.size != stored.size:
        errors.append(
            invalid(
                f"{role.path}.size",
                role.raw.get("size"),
                f"size is fixed at creation (it was {stored.size}): the Pods a running instance is made "
                "of are not the Pods another size asks for; scale with replicas, or create a new "
                "deployment for another size",
            )
        )
    if role.instance_type != stored.instance_type:
        errors.append(_changed(f"{role.path}.instanceType", "instanceType", role.raw.get("instanceType")))
    if _resources(role.raw.get("resources")) != _resources(stored.raw.get("resources")):
        errors.append(_changed(f"{role.path}.resources", "resources", role.raw.get("resources")))
    if canonical(role.raw.get("command")) != canonical(stored.raw.get("command")):
        hint = (
            " (a merge patch that restates the role without command sets it to null: change one "
            "field with a JSON patch, or send the whole object)"
            if not role.command
            else ""
        )
        errors.append(_changed(f"{role.path}.command", "command", role.raw.get("command"), hint))
    return errors


def identity(md: Deployment, old: Deployment) -> list[FieldError]:
    """#38 identity edits, #39 ``size``, #40 ``router.name`` in place."""
    errors: list[FieldError] = []
    if canonical(md.spec.get("model")) != canonical(old.spec.get("model")):
        errors.append(_changed("spec.model", "spec.model", md.spec.get("model")))
    if md.engine != old.engine:
        errors.append(_changed("spec.engine.name", "spec.engine.name", md.engine_block.get("name")))
    if _kv_cache(md.spec.get("kvCache")) != _kv_cache(old.spec.get("kvCache")):
        errors.append(_changed("spec.kvCache", "spec.kvCache", md.spec.get("kvCache")))
    if md.router is not None and old.router is not None and md.router_name != old.router_name:
        errors.append(
            invalid(
                "spec.router.name",
                md.router_name,
                f"the router name is immutable in place (it is {old.router_name!r}); remove "
                "spec.router, then add it back naming the other router",
            )
        )
    for role in md.roles:
        stored = old.by_name.get(role.name)
        if stored is None:
            errors.append(
                forbidden(
                    f"{role.path}.name",
                    f"role {role.name!r} is not in the stored deployment: the set of roles {_IDENTITY}",
                )
            )
        elif md.by_name.get(role.name) is role:
            errors += _role(role, stored)
    for stored in old.roles:
        if stored.name not in md.by_name:
            errors.append(
                forbidden(
                    "spec.roles",
                    f"role {stored.name!r} was removed: the set of roles {_IDENTITY}",
                )
            )
    return errors


def transport_changed(md: Deployment, old: Deployment) -> bool:
    """``kvTransfer`` or ``router`` differ (#36 re-reads the legs on such an update)."""
    return canonical(md.spec.get("kvTransfer")) != canonical(old.spec.get("kvTransfer")) or canonical(
        md.spec.get("router")
    ) != canonical(old.spec.get("router"))
