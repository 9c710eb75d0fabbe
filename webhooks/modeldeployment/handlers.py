"""ModelDeployment admission: the mutating half (§6) and the validating half (§5).

``default`` sets the one value a schema cannot reach, a role's accelerator count, which depends on
the InstanceType it names (plus ``kvCache.connector``, which the CRD schema defaults too).

``validate`` runs every refusal of §5 in the table's order and answers ONE ``422 Invalid`` carrying
every field error: object rules (names, kinds, owned keys, degrees and width, volumes, topology,
resources, router), host access, ports, served names and weights, then on UPDATE the identity rules,
then the barrier (#34) and the InstanceType rules (#30–#33, #35).  Only when nothing was refused so
far does it read the KV cache chain for interfaces (#36), and only when still nothing, the
transports of a new binding (#37).

Deletion (§9.6): both halves see the updates of a deployment being deleted.  The mutating half
returns it unchanged; the validating half keeps the object rules but every rule that reads an
InstanceType, the barrier, #37 and the dtype refusal decline, so the update that clears the
finalizer is never refused because a type is gone or a stored flag is grandfathered.
"""

from __future__ import annotations

from api import engines
from api.fielderrors import FieldError
from readmodels.modeldeployment import DEFAULT_CONNECTOR, KIND, Deployment, Role, as_dict, as_list, as_str
from webhooks import patch as jsonpatch
from webhooks.decision import Decision, allow, reject, retry_later
from webhooks.lookups import Lookups
from webhooks.modeldeployment.identity import identity, transport_changed
from webhooks.modeldeployment.lookups import (
    KVChain,
    Types,
    barrier,
    binding_rules,
    interface_rules,
    type_not_found,
    type_rules,
)
from webhooks.modeldeployment.owned import owned_key_errors
from webhooks.modeldeployment.rules import (
    degrees,
    duplicate_names,
    engine_version,
    host_access,
    kinds,
    member_names,
    pool_ref,
    resources,
    role_count,
    router,
    service_names,
    topology,
    volumes,
)
from webhooks.modeldeployment.serving import ports, served_names, weight_mounts
from webhooks.review import AdmissionRequest

__all__ = ["default", "validate"]

DEFAULT_ACCELERATOR = "1"


# --- Mutating ------------------------------------------------------------------------------------------


async def default(request: AdmissionRequest, lookups: Lookups) -> Decision:
    """§6: per role, ``resources.accelerator`` is 1 on an acceleratable InstanceType unless set (an
    explicit 0 is kept); ``kvCache.connector`` is Mooncake.  A minimal, idempotent JSON patch."""
    obj = as_dict(request.object)
    meta = as_dict(obj.get("metadata"))
    if meta.get("deletionTimestamp"):
        return allow()
    spec = as_dict(obj.get("spec"))
    ops: list[dict] = []
    kv_cache = spec.get("kvCache")
    if isinstance(kv_cache, dict) and not kv_cache.get("connector"):
        pointer = jsonpatch.pointer("spec", "kvCache", "connector")
        op = jsonpatch.replace if "connector" in kv_cache else jsonpatch.add
        ops.append(op(pointer, DEFAULT_CONNECTOR))
    types = Types(lookups)
    missing: list[FieldError] = []
    for index, raw in enumerate(as_list(spec.get("roles"))):
        if not isinstance(raw, dict):
            continue
        res = raw.get("resources")
        if isinstance(res, dict) and res.get("accelerator") is not None:
            continue
        name = raw.get("instanceType")
        if not isinstance(name, str) or not name:
            continue
        facts = await types.get(name)
        if facts is None:
            missing.append(type_not_found(Role(index, raw, "")))
            continue
        if not facts.acceleratable:
            continue
        if not isinstance(res, dict):
            op = jsonpatch.replace if "resources" in raw else jsonpatch.add
            ops.append(
                op(
                    jsonpatch.pointer("spec", "roles", index, "resources"),
                    {"accelerator": DEFAULT_ACCELERATOR},
                )
            )
        else:
            op = jsonpatch.replace if "accelerator" in res else jsonpatch.add
            ops.append(
                op(jsonpatch.pointer("spec", "roles", index, "resources", "accelerator"), DEFAULT_ACCELERATOR)
            )
    if missing:
        return reject(KIND, request.display_name, missing)
    return allow(ops)


# --- Validating ----------------------------------------------------------------------------------------


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    md = Deployment(request.object, request.namespace)
    old = (
        Deployment(request.old_object, request.namespace)
        if request.operation == "UPDATE" and isinstance(request.old_object, dict)
        else None
    )
    deleting = md.deleting
    chain = KVChain(md, lookups)
    types = None if deleting else Types(lookups)

    errors: list[FieldError] = []
    # Object rules, in the table's order.
    errors += role_count(md)
    errors += duplicate_names(md)
    errors += member_names(md)
    errors += service_names(md, old)
    errors += kinds(md)
    errors += engine_version(md)
    errors += pool_ref(md)
    dtype_owned = (
        not deleting
        and md.kv_cache is not None
        and any(role.managed and role.extra_args for role in md.roles)
        and await lookups.setting_enabled(engines.SETTING_KV_CACHE_DTYPE_OWNED)
    )
    errors += await owned_key_errors(md, dtype_owned=dtype_owned, read_dtype=chain.dtype)
    errors += degrees(md)
    errors += volumes(md)
    errors += topology(md)
    errors += resources(md)
    errors += router(md)
    # Host access, ports, served names and weights.
    errors += await host_access(md, old, lookups)
    errors += ports(md, old)
    errors += served_names(md, old)
    errors += weight_mounts(md)
    # Identity (UPDATE).
    if old is not None:
        errors += identity(md, old)
    # The barrier and the InstanceType rules decline while the deployment is being deleted.
    retry: str | None = None
    if types is not None:
        errors += await barrier(md, lookups)
        found, retry = await type_rules(md, types)
        errors += found
    if errors:
        return reject(KIND, request.display_name, errors)
    if retry:
        return retry_later(f"{retry}: not ready yet")  # "...; retry shortly"
    # Only with nothing refused: the interfaces (#36), then a new binding's transports (#37).
    if old is None or transport_changed(md, old):
        errors += await interface_rules(md, chain, types)
    if not errors and not deleting and _new_binding(md, old):
        errors += await binding_rules(md, chain)
    if errors:
        return reject(KIND, request.display_name, errors)
    return allow()


def _new_binding(md: Deployment, old: Deployment | None) -> bool:
    """A create with a cache, or an update that changes ``kvCache`` (#37 judges new bindings only)."""
    if md.kv_cache is None:
        return False
    if old is None:
        return True
    return as_str(md.binding_name) != as_str(old.binding_name) or old.kv_cache is None
