"""Instance admission: defaulting (sizing from the InstanceType) and validation (unit-spec bounds and
partition/slice rules from ``webhooks.instance_resources``; volumes, grants, stop/start transitions).

Sizing runs only when an Instance is created or started (``spec.stop`` true → false): sizing on
every update would recompute CPU/RAM from the *current* InstanceType and trip the freeze.  A share
request (slice or partition) on an InstanceType whose accelerator detail has not been observed yet
is answered with a retryable internal error, never sized as a whole card.
"""

from __future__ import annotations

import contextlib
import copy
import re
from typing import Any

from api import constants, setting_names, units
from api.engines import SETTING_OVERCOMMIT
from api.naming import is_dns_subdomain
from fastpath import quantity
from webhooks import patch as jsonpatch
from webhooks.decision import (
    Decision,
    FieldError,
    allow,
    duplicate,
    forbidden,
    invalid,
    not_found,
    reject,
    required,
    retry_later,
)
from webhooks.instance_resources import InvalidQuantity, Offer, resource_errors, share_request
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

KIND = "Instance"
SETTING_PRIVILEGED = setting_names.INSTANCE_PRIVILEGED_ALLOWED
SETTING_HOST_PATH = setting_names.INSTANCE_HOST_PATH_VOLUME_ALLOWED
DEFAULT_LOCAL_STORAGE = 15 * units.GIBIBYTE
DEFAULT_VOLUME_MOUNT = "/workspace"
# Fields frozen while the Instance runs; editable while it is stopped.
FROZEN_UNLESS_STOPPED = (
    "type",
    "image",
    "imagePullPolicy",
    "command",
    "privileged",
    "ports",
    "env",
    "volumeMount",
    "imagePullSecret",
    "resources",
    "sshPublicKey",
    "nodeName",
    "additionalVolumes",
)
_MOUNT_PATH = re.compile(r"^(/[^/]+)+$")


def _is_zero(value: Any) -> bool:
    if value in (None, "", 0):
        return True
    try:
        return quantity.parse(value)[0] == 0
    except ValueError:
        return False


# --- Defaulting ----------------------------------------------------------------------------------


def _cpu_milli(unit_milli: int, num: int, den: int) -> int:
    """The CPU of ``num/den`` units, in millicores.  Whole cards scale the unit exactly; a share of
    one card (a slice or a partition, ``den`` 100) is whole cores of the unit rounded down, at
    least one: the unit counts as whole cores (a fraction rounds up, as a quantity's value does),
    so a 20 % slice of an 8-core unit is 1 core, never 1600m."""
    if den == 1:
        return unit_milli * num
    if unit_milli <= 0:
        return 0
    cores = -(-unit_milli // 1000)
    return max(cores * num // den, 1) * 1000


def _ram_bytes(unit_ram: int, num: int, den: int) -> int:
    """The RAM of ``num/den`` units; a share of one card rounds down to the byte, at least one."""
    if den == 1 or unit_ram <= 0:
        return unit_ram * num
    return max(unit_ram * num // den, 1)


def size(resources: dict[str, Any], offer: Offer, overcommit: bool) -> None:
    """Fill ``resources`` (in place) from the InstanceType's unit spec."""
    if offer.acceleratable:
        if resources.get("accelerator") in (None, ""):
            resources["accelerator"] = "1"
        profile = resources.get("acceleratorPartitionedProfile") or ""
        memory_pct = int(resources.get("acceleratorSlicedMemoryPercentage") or 0)
        cores_pct = int(resources.get("acceleratorSlicedCoresPercentage") or 0)
        if profile:
            if _is_zero(resources["accelerator"]):
                resources["accelerator"] = "1"
            mib = offer.profiles.get(profile, 0)
            if not mib or not offer.card_mib:
                factor = (0, 1)  # an offered but unsizeable profile: the validator retries
            else:
                factor = (min(max(mib * 100 // offer.card_mib, 1), 100), 100)
        elif offer.logical_count > 0 and (memory_pct or cores_pct):
            if _is_zero(resources["accelerator"]):
                resources["accelerator"] = "1"
            if not memory_pct:
                memory_pct = cores_pct
                resources["acceleratorSlicedMemoryPercentage"] = memory_pct
            if not cores_pct:
                resources["acceleratorSlicedCoresPercentage"] = memory_pct
            factor = (memory_pct, 100)
        else:
            count = quantity.whole(resources["accelerator"]) or 0
            factor = (max(count, 1), 1)
        if factor[0]:
            if overcommit or _is_zero(resources.get("cpu")):
                resources["cpu"] = units.cores(_cpu_milli(offer.unit_cpu_milli, *factor))
            if overcommit or _is_zero(resources.get("ram")):
                resources["ram"] = units.size(_ram_bytes(offer.unit_ram, *factor))
    else:
        if _is_zero(resources.get("cpu")):
            resources["cpu"] = "1"
        if overcommit or _is_zero(resources.get("ram")):
            num, den = quantity.parse(resources["cpu"])
            resources["ram"] = units.size(offer.unit_ram * num // den)
    if _is_zero(resources.get("localStorage")):
        limit = offer.local_storage or DEFAULT_LOCAL_STORAGE
        resources["localStorage"] = units.size(min(DEFAULT_LOCAL_STORAGE, limit))


def _sizing(request: AdmissionRequest) -> bool:
    spec = (request.object or {}).get("spec") or {}
    if request.operation == "CREATE":
        return True
    old = (request.old_object or {}).get("spec") or {}
    return bool(old.get("stop")) and not spec.get("stop")


async def default(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object or {}
    after = copy.deepcopy(obj)
    if not isinstance(after.get("spec"), dict):  # a null spec reads as absent
        after["spec"] = {}
    spec = after["spec"]
    spec.setdefault("imagePullPolicy", "IfNotPresent")
    spec.setdefault("volumeMount", DEFAULT_VOLUME_MOUNT)
    if spec.get("resources") is None:
        spec["resources"] = {}
    if spec.get("type") and not spec.get("stop") and _sizing(request):
        found = await lookups.instance_type(spec["type"])
        if found is None:
            return reject(KIND, request.display_name, [_type_not_found(spec["type"])])
        try:
            offer = Offer(found)
        except ValueError as error:
            return retry_later(f"InstanceType {spec['type']!r} has an unreadable unit spec ({error})")
        if share_request(spec["resources"]) and not offer.observed:
            return retry_later(f"InstanceType {offer.name!r} has not observed its accelerators yet")
        overcommit = await lookups.setting_enabled(SETTING_OVERCOMMIT)
        with contextlib.suppress(ValueError):  # a malformed quantity: the validator names the field
            size(spec["resources"], offer, overcommit)
    return allow(jsonpatch.diff(obj, after))


# --- Validation ----------------------------------------------------------------------------------


def _type_not_found(name: str) -> FieldError:
    return not_found(
        "spec.type",
        name,
        "no InstanceType has this name; `kubectl get instancetypes` lists them, or create the "
        "Instance with stop: true until it exists",
    )


def _volume_errors(spec: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    volume = spec.get("volume") or {}
    ephemeral, persistent = volume.get("ephemeral"), volume.get("persistent")
    if ephemeral is not None and persistent is not None:
        errors.append(forbidden("spec.volume", "choose one of ephemeral and persistent, not both"))
    elif ephemeral is None and persistent is None:
        errors.append(
            required(
                "spec.volume",
                "a workspace is required: set volume.ephemeral.capacity or volume.persistent.name",
            )
        )
    elif ephemeral is not None:
        capacity = ephemeral.get("capacity")
        try:
            positive = capacity not in (None, "") and quantity.parse(capacity)[0] > 0
        except ValueError:
            positive = False
        if not positive:
            errors.append(
                invalid("spec.volume.ephemeral.capacity", capacity, "must be a positive size, e.g. 10Gi")
            )
    elif not (persistent or {}).get("name"):
        errors.append(required("spec.volume.persistent.name", "name the InstancePersistentVolume to mount"))
    return errors + _additional_volume_errors(spec)


def _additional_volume_errors(spec: dict[str, Any]) -> list[FieldError]:
    """Rule 12: each additional volume can be built into the Pod."""
    errors: list[FieldError] = []
    mounts: dict[str, int] = {}
    workspace = spec.get("volumeMount") or DEFAULT_VOLUME_MOUNT
    for index, entry in enumerate(spec.get("additionalVolumes") or []):
        path = f"spec.additionalVolumes[{index}]"
        mount = entry.get("mountPath") or ""
        if not _MOUNT_PATH.match(mount) or any(part in (".", "..") for part in mount.split("/")):
            errors.append(
                invalid(f"{path}.mountPath", mount, "must be an absolute, canonical path such as /data")
            )
        elif mount == workspace:
            errors.append(
                invalid(f"{path}.mountPath", mount, "is the workspace's volumeMount; mount elsewhere")
            )
        elif mount in mounts:
            errors.append(
                duplicate(
                    f"{path}.mountPath", mount, f"already mounted by spec.additionalVolumes[{mounts[mount]}]"
                )
            )
        else:
            mounts[mount] = index
        sources = [k for k in ("persistent", "configMap", "secret", "hostPath", "model") if entry.get(k)]
        if len(sources) != 1:
            errors.append(
                invalid(path, sources, "exactly one source: persistent, configMap, secret, hostPath or model")
            )
        sub = entry.get("subPath") or ""
        if sub and entry.get("model"):
            errors.append(
                forbidden(
                    f"{path}.subPath",
                    "a model volume mounts its whole artifact read-only and takes no subPath; remove "
                    "it (for a claim artifact, the ModelArtifact's spec.source.persistentVolumeClaim.path "
                    "is the directory mounted), or mount a part elsewhere with a persistent volume",
                )
            )
        elif sub and (sub.startswith("/") or ".." in sub.split("/")):
            errors.append(invalid(f"{path}.subPath", sub, "must be relative and contain no '..' element"))
        errors += _source_errors(entry, path)
    return errors


def _source_errors(entry: dict[str, Any], path: str) -> list[FieldError]:
    """A named reference names a valid object; a host path is absolute, non-empty, without ``..``."""
    errors: list[FieldError] = []
    for source in ("persistent", "configMap", "secret"):
        ref = entry.get(source)
        if not isinstance(ref, dict):
            continue
        name = ref.get("name")
        if not isinstance(name, str) or not name:
            errors.append(required(f"{path}.{source}.name", f"name the {source} to mount"))
        elif not is_dns_subdomain(name):
            errors.append(
                invalid(
                    f"{path}.{source}.name",
                    name,
                    "must be a valid object name: lower-case letters, digits, '-' and '.', at most 253",
                )
            )
    host = entry.get("hostPath")
    if isinstance(host, dict):
        where = host.get("path")
        if not isinstance(where, str) or not where:
            errors.append(required(f"{path}.hostPath.path", "name the absolute path on the node"))
        elif not where.startswith("/") or ".." in where.split("/"):
            errors.append(
                invalid(f"{path}.hostPath.path", where, "must be an absolute path with no '..' segment")
            )
    return errors


def _host_grant(entry: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...], bool]:
    """What a hostPath entry reaches on the node: its source (an empty ``type`` and an absent one
    the same), the sub path within it (as segments) and whether it may write.  Where the container
    mounts it changes nothing of that."""
    source = {k: v for k, v in (entry.get("hostPath") or {}).items() if v not in (None, "")}
    sub = entry.get("subPath")
    segments = tuple(
        part for part in (sub if isinstance(sub, str) else "").split("/") if part not in ("", ".")
    )
    return source, segments, not entry.get("readOnly")


def _covers(held: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether holding ``held`` already grants all ``wanted`` reaches: the same node path and
    type, a sub path at or beneath the held one, and no write access the held one lacks.  Narrowing
    (a deeper sub path, read-only) takes nothing new; widening or repointing does."""
    source, under, writes = _host_grant(held)
    want_source, want_under, want_writes = _host_grant(wanted)
    return source == want_source and want_under[: len(under)] == under and (writes or not want_writes)


def _host_paths(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in spec.get("additionalVolumes") or [] if isinstance(e, dict) and e.get("hostPath")]


async def _grant_errors(
    spec: dict[str, Any], old: dict[str, Any] | None, lookups: Lookups
) -> list[FieldError]:
    errors: list[FieldError] = []
    takes_privilege = spec.get("privileged") and not (old or {}).get("privileged")
    if takes_privilege and not await lookups.setting_enabled(SETTING_PRIVILEGED):
        errors.append(
            forbidden(
                "spec.privileged",
                f"privileged Instances are off in this cluster; an "
                f"administrator enables Setting {SETTING_PRIVILEGED}",
            )
        )
    held = _host_paths(old or {})
    for index, entry in enumerate(spec.get("additionalVolumes") or []):
        host = entry.get("hostPath") if isinstance(entry, dict) else None
        taken = host and not any(_covers(h, entry) for h in held)
        if taken and not await lookups.setting_enabled(SETTING_HOST_PATH):
            errors.append(
                forbidden(
                    f"spec.additionalVolumes[{index}].hostPath",
                    f"host paths are off in this cluster; an administrator enables Setting "
                    f"{SETTING_HOST_PATH}"
                    + (
                        "; a host path the Instance already holds is kept as it was, or narrowed "
                        "(a sub path of it, read-only), never repointed or widened"
                        if held
                        else ""
                    ),
                )
            )
    return errors


async def _offer(name: str, lookups: Lookups) -> Offer | None:
    found = await lookups.instance_type(name)
    return Offer(found) if found is not None else None


async def _create_errors(
    request: AdmissionRequest, spec: dict[str, Any], lookups: Lookups
) -> list[FieldError] | Decision:
    errors: list[FieldError] = []
    namespace = request.namespace or ((request.object or {}).get("metadata") or {}).get("namespace", "")
    if namespace in (constants.SYSTEM_NAMESPACE, *constants.KUBE_SYSTEM_NAMESPACES):
        errors.append(
            invalid(
                "metadata.namespace",
                namespace,
                "Instances run in tenant namespaces, not in a system namespace",
            )
        )
    errors += _volume_errors(spec)
    errors += await _grant_errors(spec, None, lookups)
    if spec.get("nodeName"):
        node = await lookups.get("Node", spec["nodeName"], fresh=True)
        if node is None:
            errors.append(
                not_found("spec.nodeName", spec["nodeName"], "no such Node; `kubectl get nodes` lists them")
            )
    name = spec.get("type") or ""
    if not name:
        errors.append(required("spec.type", "name the InstanceType that sizes this Instance"))
        return errors
    resolved = await _resources_or_retry(name, spec, lookups, required_to_exist=not spec.get("stop"))
    if isinstance(resolved, Decision):
        return resolved
    return errors + resolved


async def _resources_or_retry(
    name: str, spec: dict[str, Any], lookups: Lookups, required_to_exist: bool
) -> list[FieldError] | Decision:
    offer = await _offer(name, lookups)
    if offer is None:
        return [_type_not_found(name)] if required_to_exist else []
    resources = spec.get("resources") or {}
    if share_request(resources) and offer.acceleratable and not offer.observed:
        return retry_later(f"InstanceType {name!r} has not observed its accelerators yet")
    profile = resources.get("acceleratorPartitionedProfile") or ""
    if (
        required_to_exist
        and offer.acceleratable
        and profile in offer.profiles
        and not (offer.profiles[profile] and offer.card_mib)
    ):
        # Offered, but its memory or the card's VRAM is not observed yet: sizing would leave the
        # Instance without CPU and RAM, so the apiserver is asked to retry instead.
        return retry_later(
            f"InstanceType {name!r} offers profile {profile} but has not observed "
            f"{'its memory' if not offer.profiles[profile] else 'the card VRAM'} yet, which sizes the Instance"
        )
    try:
        return resource_errors(resources, offer)
    except InvalidQuantity as bad:
        return [bad.error]


async def _update_errors(
    request: AdmissionRequest, spec: dict[str, Any], lookups: Lookups
) -> list[FieldError] | Decision:
    old_obj = request.old_object or {}
    old = old_obj.get("spec") or {}
    stopped = bool(old.get("stop"))
    errors: list[FieldError] = []
    if not stopped:
        for field in FROZEN_UNLESS_STOPPED:
            if spec.get(field) != old.get(field) and not (
                field == "resources" and not spec.get(field) and not old.get(field)
            ):
                errors.append(
                    forbidden(
                        f"spec.{field}",
                        "cannot change while the Instance runs; set spec.stop: "
                        "true, wait for phase Stopped, edit, then clear stop",
                    )
                )
    if spec.get("volume") != old.get("volume"):
        errors.append(
            forbidden("spec.volume", "the workspace volume is fixed at creation, even while stopped")
        )
    phase = (old_obj.get("status") or {}).get("phase", "")
    starting = stopped and not spec.get("stop")
    if not stopped and spec.get("stop") and phase == "Starting":
        errors.append(forbidden("spec.stop", "the Instance is still starting; stop it once it is Ready"))
    if starting or spec.get("additionalVolumes") != old.get("additionalVolumes"):
        # Starting re-checks the list too: one left unbuildable while stopped would otherwise give
        # a Pod the apiserver refuses on every reconcile.  The workspace volume is frozen at
        # creation, so it was judged then.
        errors += _additional_volume_errors(spec)
    errors += await _grant_errors(spec, old, lookups)
    if starting:
        if phase != "Stopped":
            errors.append(
                forbidden(
                    "spec.stop",
                    f"an Instance starts only from phase Stopped (it is {phase or 'not yet reconciled'}); "
                    "wait for the controller to report Stopped",
                )
            )
        if not spec.get("type"):
            errors.append(required("spec.type", "name the InstanceType that sizes this Instance"))
        else:
            resolved = await _resources_or_retry(spec["type"], spec, lookups, required_to_exist=True)
            if isinstance(resolved, Decision):
                return resolved
            errors += resolved
    return errors


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    spec = (request.object or {}).get("spec") or {}
    if request.operation == "CREATE":
        result = await _create_errors(request, spec, lookups)
    else:
        result = await _update_errors(request, spec, lookups)
    if isinstance(result, Decision):
        return result
    return reject(KIND, request.display_name, result) if result else allow()
