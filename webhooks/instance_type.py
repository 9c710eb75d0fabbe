"""InstanceType admission: defaulting (generic group, pool schedule labels, queue entrance) and
validation (create needs the complete input; update freezes everything but displayName,
description and inactive — documentation and the service switch, not the pool's shape).

Both handlers run for objects being deleted too: the defaulter is idempotent and the validator
compares old and new only, so a finalizer-only update can never be refused.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from api import constants, setting_names
from api.naming import local_queue_name, schedule_labels
from webhooks import patch as jsonpatch
from webhooks.decision import Decision, FieldError, allow, forbidden, invalid, reject, required
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

KIND = "InstanceType"
MUTABLE = ("displayName", "description", "inactive")
_POSITIVE_INTEGER = re.compile(r"^[1-9][0-9]*$")
_GIBIBYTES = re.compile(r"^[1-9][0-9]*Gi$")
# RAM is sized in binary units: a positive number with Ki, Mi, Gi, Ti, Pi or Ei (case-sensitive).
_BINARY_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)[KMGTPE]i$")
SETTING_AWARE_CPU = setting_names.INSTANCE_TYPE_AWARE_CPU_MANUFACTURER


async def default(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object or {}
    after = copy.deepcopy(obj)
    # A null spec, metadata or labels reads as absent, as the apiserver decodes it.
    spec = _object_at(after, "spec")
    if not spec.get("generalGroup"):
        spec["generalGroup"] = constants.GENERIC_GROUP
    meta = _object_at(after, "metadata")
    labels = _object_at(meta, "labels")
    aware = await lookups.setting_enabled(SETTING_AWARE_CPU)
    # Awareness regroups pools by CPU key: drop a stale general label before stamping.
    for key in [k for k in labels if k.startswith(constants.PREFIX_GENERAL)]:
        del labels[key]
    labels.update(schedule_labels(spec, aware))
    name = meta.get("name") or request.name
    if name:
        labels[constants.LABEL_QUEUE_ENTRANCE] = local_queue_name(name)
    return allow(jsonpatch.diff(obj, after))


def _object_at(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]``, made an empty object when absent or null (the shape check refuses any
    other type before this handler runs)."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


def _create_errors(spec: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    acceleratable = spec.get("acceleratable")
    group = spec.get("acceleratorGroup") or ""
    if acceleratable and not group:
        errors.append(
            required(
                "spec.acceleratorGroup",
                "an acceleratable InstanceType names its accelerator group, e.g. nvidia-a10g",
            )
        )
    if not acceleratable and group:
        errors.append(
            forbidden(
                "spec.acceleratorGroup",
                "only an acceleratable InstanceType has an accelerator group; "
                "set spec.acceleratable: true or drop the group",
            )
        )
    for field in ("os", "arch"):
        if not spec.get(field):
            errors.append(required(f"spec.{field}", f"the pool's {field} (e.g. linux, amd64) is required"))
    unit = spec.get("unitResources") or {}
    cpu, ram = unit.get("cpu"), unit.get("ram")
    if not cpu:
        errors.append(required("spec.unitResources.cpu", "the CPU per unit is required"))
    elif acceleratable and not _POSITIVE_INTEGER.match(str(cpu)):
        errors.append(
            invalid(
                "spec.unitResources.cpu",
                cpu,
                "an accelerated unit's CPU is a unitless positive integer of cores, e.g. 8",
            )
        )
    elif not acceleratable and str(cpu) != "1":
        errors.append(
            invalid(
                "spec.unitResources.cpu",
                cpu,
                "a CPU-only unit is exactly 1 core; size requests by unit count instead",
            )
        )
    if not ram:
        errors.append(required("spec.unitResources.ram", "the memory per unit is required, e.g. 64Gi"))
    elif not _BINARY_QUANTITY.match(str(ram)) or str(ram).lstrip("+")[:-2].strip("0.") == "":
        errors.append(
            invalid(
                "spec.unitResources.ram",
                ram,
                "must be a positive quantity with a binary suffix (Ki, Mi, Gi, Ti, Pi or Ei; "
                "case-sensitive), e.g. 64Gi",
            )
        )
    storage = spec.get("localStorage")
    if not storage:
        errors.append(required("spec.localStorage", "the local storage per instance is required, e.g. 100Gi"))
    elif not _GIBIBYTES.match(str(storage)):
        errors.append(
            invalid(
                "spec.localStorage",
                storage,
                "must be a whole number of gibibytes with the case-sensitive Gi suffix, e.g. 100Gi",
            )
        )
    return errors


def _update_errors(spec: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    for field in sorted(set(spec) | set(old)):
        if field in MUTABLE:
            continue
        before, after = old.get(field), spec.get(field)
        if field == "generalGroup":  # defaulted: empty and "generic" are the same group
            before, after = before or constants.GENERIC_GROUP, after or constants.GENERIC_GROUP
        if before != after:
            errors.append(
                forbidden(
                    f"spec.{field}",
                    "is fixed once the InstanceType exists (only displayName, description and inactive may "
                    "change); "
                    "create another InstanceType for a different pool shape",
                )
            )
    return errors


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    spec = (request.object or {}).get("spec") or {}
    if request.operation == "CREATE":
        errors = _create_errors(spec)
    else:
        errors = _update_errors(spec, (request.old_object or {}).get("spec") or {})
    return reject(KIND, request.display_name, errors) if errors else allow()
