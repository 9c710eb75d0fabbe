"""``ModelPrefetch`` admission (model-delivery spec §3.5 rule 2): refuse the shapes that cannot work.

On CREATE and every UPDATE (the spec is mutable):

- ``spec.artifactRef.name`` and ``spec.bindingRef.name`` must name a ModelArtifact and a
  ModelStoreBinding of this namespace;
- ``spec.placement`` states ``instanceTypes`` or ``nodeSelector``, never both (the schema cannot see
  it: neither field is required); a selector must parse;
- the target set — :func:`api.prefetch.target_nodes`, the very expansion delivery uses — must lie
  inside the stores the binding grants (a node no granted store selects is named);
- ``spec.retention.pinned`` needs the binding's ``allowPinned``; ``ttlAfterLastUse`` must be a
  positive duration;
- the binding's projection (per distinct digest, resolved size × the widest node count any of its
  prefetches asks, this one included; an unresolved artifact counts zero) must fit its quota.

InstanceType names that do not exist warm nothing and are admitted with a warning.
"""

from __future__ import annotations

from typing import Any

from api import delivery as d
from api import prefetch as pf
from api.objects import as_dict, as_str
from api.selectors import problems
from api.settings import parse_duration
from webhooks.decision import (
    Decision,
    FieldError,
    allow,
    forbidden,
    invalid,
    not_found,
    reject,
    required,
    retry_later,
)
from webhooks.kvcache.values import dig, quantity_bytes
from webhooks.lookups import LookupFailed, Lookups
from webhooks.review import AdmissionRequest

SHOWN_NODES = 3


def _size(n: int) -> str:
    for unit, scale in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def shape_errors(spec: Any) -> list[FieldError]:
    """The rules that need no other object."""
    found: list[FieldError] = []
    spec = as_dict(spec)
    for ref in ("artifactRef", "bindingRef"):
        if not as_str(dig(spec, ref, "name")):
            kind = "ModelArtifact" if ref == "artifactRef" else "ModelStoreBinding"
            found.append(required(f"spec.{ref}.name", f"name the {kind} in this namespace"))
    placement = spec.get("placement")
    if placement is not None:
        placement = as_dict(placement)
        if placement.get("instanceTypes") is not None and placement.get("nodeSelector") is not None:
            found.append(
                forbidden(
                    "spec.placement",
                    "instanceTypes and nodeSelector are both set: give one (or neither, to warm the nodes of "
                    "this namespace's deployments that reference the artifact)",
                )
            )
        names = placement.get("instanceTypes")
        if names is not None and (
            not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names)
        ):
            found.append(
                invalid("spec.placement.instanceTypes", names, "must list 1 to 8 InstanceType names")
            )
        selector = placement.get("nodeSelector")
        if selector is not None:
            for where, why in problems(selector):
                path = f"spec.placement.nodeSelector{'.' + where if where else ''}"
                found.append(invalid(path, selector, why))
    ttl = dig(spec, "retention", "ttlAfterLastUse")
    if ttl is not None:
        try:
            seconds = parse_duration(ttl) if isinstance(ttl, str) else -1.0
        except ValueError:
            seconds = -1.0
        if seconds <= 0:
            found.append(
                invalid(
                    "spec.retention.ttlAfterLastUse",
                    ttl,
                    'must be a positive duration such as "72h"; it is enforced at the hour granularity of a '
                    "node's lastUsedTime",
                )
            )
    return found


async def _targets(prefetch: dict[str, Any], namespace: str, lookups: Lookups) -> pf.Targets:
    instance_types = {pf.name_of(it): it for it in await lookups.list("InstanceType")}
    return pf.target_nodes(
        prefetch,
        instance_types=instance_types,
        flavors=await lookups.list("ResourceFlavor"),
        nodes=await lookups.list("Node"),
        deployments=await lookups.list("ModelDeployment", namespace),
        aware_cpu=await lookups.setting_enabled(pf.AWARE_CPU_SETTING),
    )


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object
    if not isinstance(obj, dict):
        return allow()
    name = request.display_name
    errors = shape_errors(obj.get("spec"))
    if errors:
        return reject(d.KIND_PREFETCH, name, errors)
    try:
        return await _judge(
            obj, request.namespace or as_str(dig(obj, "metadata", "namespace")), name, lookups
        )
    except LookupFailed as error:
        return retry_later(f"the prefetch's artifact, grant and target nodes could not be read: {error}")


async def _judge(obj: dict[str, Any], namespace: str, name: str, lookups: Lookups) -> Decision:
    spec = as_dict(obj.get("spec"))
    artifact_name = as_str(dig(spec, "artifactRef", "name"))
    binding_name = as_str(dig(spec, "bindingRef", "name"))
    artifact = await lookups.get(d.KIND_ARTIFACT, artifact_name, namespace)
    binding = await lookups.get(d.KIND_BINDING, binding_name, namespace)
    errors: list[FieldError] = []
    if artifact is None:
        errors.append(
            not_found(
                "spec.artifactRef.name",
                artifact_name,
                "no ModelArtifact of that name in this namespace; create it first or fix the name",
            )
        )
    if binding is None:
        errors.append(
            not_found(
                "spec.bindingRef.name",
                binding_name,
                "no ModelStoreBinding of that name in this namespace: an administrator grants the namespace a "
                "budget on ModelStores with one",
            )
        )
    if errors:
        return reject(d.KIND_PREFETCH, name, errors)
    assert binding is not None
    binding_spec = as_dict(binding.get("spec"))
    if dig(spec, "retention", "pinned") is True and binding_spec.get("allowPinned") is not True:
        errors.append(
            forbidden(
                "spec.retention.pinned",
                f"ModelStoreBinding {binding_name} does not allow pinning (spec.allowPinned is false): remove "
                "the pin, or ask an administrator to allow it on the binding",
            )
        )
    targets = await _targets(obj, namespace, lookups)
    stores = {pf.name_of(s): s for s in await lookups.list(d.KIND_STORE)}
    granted = pf.granted_nodes(binding, stores, await lookups.list("Node"))
    outside = [n for n in targets.nodes if n not in granted]
    if outside:
        shown = ", ".join(outside[:SHOWN_NODES]) + (
            f" and {len(outside) - SHOWN_NODES} more" if len(outside) > SHOWN_NODES else ""
        )
        granted_names = ", ".join(pf.store_names(binding)) or "none"
        errors.append(
            forbidden(
                "spec.placement",
                f"the target set holds node(s) outside every ModelStore that ModelStoreBinding {binding_name} "
                f"grants ({granted_names}): {shown}; narrow the placement to the granted stores' nodes",
            )
        )
    quota = quantity_bytes(dig(binding_spec, "quota", "bytes"))
    if quota is not None and not errors:
        asks: list[tuple[Any, int]] = [(artifact, len(targets.nodes))]
        for other in await lookups.list(d.KIND_PREFETCH, namespace):
            if pf.name_of(other) == name or as_str(dig(other, "spec", "bindingRef", "name")) != binding_name:
                continue
            other_artifact = await lookups.get(
                d.KIND_ARTIFACT, as_str(dig(other, "spec", "artifactRef", "name")), namespace
            )
            asks.append((other_artifact, len((await _targets(other, namespace, lookups)).nodes)))
        projected = pf.projection(asks)
        if projected > quota:
            errors.append(
                forbidden(
                    "spec.bindingRef.name",
                    f"the prefetches of ModelStoreBinding {binding_name} would hold {_size(projected)} "
                    f"(each distinct digest's size times the widest node count asked of it), past its quota of "
                    f"{_size(quota)}: narrow spec.placement or ask an administrator to raise spec.quota.bytes",
                )
            )
    if errors:
        return reject(d.KIND_PREFETCH, name, errors)
    warnings = [
        f"InstanceType {unknown} does not exist: it warms no node until it does"
        for unknown in targets.unknown_instance_types
    ]
    return allow(warnings=warnings)
