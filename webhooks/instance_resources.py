"""What an Instance may ask of its InstanceType (instances spec, validation on CREATE rules 4-8):
the facts of the type the rules read (:class:`Offer`), and the rules on ``spec.resources`` —
partitions, slices, whole cards, general types and the unit-spec caps."""

from __future__ import annotations

import re
from typing import Any

from api import units
from api.manufacturers import BY_NAME, manufacturer_of_group
from fastpath import quantity
from webhooks.decision import FieldError, forbidden, invalid

RES = "spec.resources"
_PROFILE_SEGMENT = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class InvalidQuantity(Exception):
    """A quantity of ``spec.resources`` that does not parse: the refusal it becomes."""

    def __init__(self, error: FieldError) -> None:
        self.error = error


def _exact(value: Any, path: str) -> tuple[int, int]:
    try:
        return quantity.parse(value)
    except ValueError as error:
        raise InvalidQuantity(invalid(path, value, str(error))) from None


def _bytes(value: Any) -> int:
    num, den = quantity.parse(value)
    return num // den


# --- What the InstanceType offers ----------------------------------------------------------------


class Offer:
    """The facts of an InstanceType the Instance rules read."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.name = (obj.get("metadata") or {}).get("name", "")
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        self.acceleratable = bool(spec.get("acceleratable"))
        self.group = spec.get("acceleratorGroup") or ""
        unit = spec.get("unitResources") or {}
        self.unit_cpu_milli = quantity.milli(unit.get("cpu") or 0)
        self.unit_ram = _bytes(unit.get("ram") or 0)
        self.local_storage = _bytes(spec.get("localStorage") or 0)
        detail = status.get("detail") or {}
        self.observed = bool(detail.get("manufacturer"))
        self.manufacturer = detail.get("manufacturer") or ""
        memory = detail.get("memory") or ""
        self.card_mib = quantity.floor_div(memory, 2**20) if memory else 0
        sliced = detail.get("slicedDetail") or {}
        self.logical_count = int((sliced.get("logical") or {}).get("count") or 0)
        physical = sliced.get("physical") or {}
        self.physical_count = int(physical.get("count") or 0)
        self.profiles = {p.get("name"): int(p.get("memoryMib") or 0) for p in physical.get("profiles") or []}
        self.accelerator_capacity = status.get("accelerator", {}).get("capacity")
        cpu = status.get("cpu") or {}
        self.cpu_view = cpu

    @property
    def can_partition(self) -> bool:
        maker = BY_NAME.get(self.manufacturer) or manufacturer_of_group(self.group)
        return bool(maker and maker.can_partition)


def share_request(resources: dict[str, Any]) -> bool:
    """A slice or a partition: sized from the accelerator detail the InstanceType observes."""
    return bool(
        resources.get("acceleratorSlicedMemoryPercentage")
        or resources.get("acceleratorSlicedCoresPercentage")
        or resources.get("acceleratorPartitionedProfile")
    )


# --- Rules on spec.resources ------------------------------------------------------------------------


def resource_errors(resources: dict[str, Any], offer: Offer) -> list[FieldError]:
    """CREATE rules 4-8: partitions, slices, whole cards, general types, unit-spec caps.  Raises
    :class:`InvalidQuantity` for a quantity that does not parse."""
    errors: list[FieldError] = []
    accelerator = resources.get("accelerator")
    profile = resources.get("acceleratorPartitionedProfile") or ""
    memory_pct = resources.get("acceleratorSlicedMemoryPercentage") or 0
    cores_pct = resources.get("acceleratorSlicedCoresPercentage") or 0
    count = None
    if accelerator not in (None, ""):
        num, den = _exact(accelerator, f"{RES}.accelerator")
        if num < 0 or den != 1:
            errors.append(
                invalid(
                    f"{RES}.accelerator", accelerator, "must be a non-negative whole number of accelerators"
                )
            )
        else:
            count = num
    for field, pct in (
        ("acceleratorSlicedMemoryPercentage", memory_pct),
        ("acceleratorSlicedCoresPercentage", cores_pct),
    ):
        if not isinstance(pct, int) or not 0 <= pct <= 100:
            errors.append(invalid(f"{RES}.{field}", pct, "must be a percentage from 0 to 100"))
    slicing = bool(memory_pct or cores_pct)
    if not offer.acceleratable:
        errors += _general_type_errors(offer, accelerator, count, profile, slicing)
    elif profile:
        errors += _partition_errors(offer, accelerator, count, profile, slicing)
    elif slicing:
        errors += _slice_errors(offer, accelerator, count)
    elif count is not None and offer.accelerator_capacity not in (None, ""):
        capacity = quantity.whole(offer.accelerator_capacity) or 0
        if count > capacity:
            errors.append(
                invalid(
                    f"{RES}.accelerator",
                    accelerator,
                    f"the pool of InstanceType {offer.name!r} has {capacity} accelerators in all",
                )
            )
    errors += _cap_errors(resources, offer, count, profile, memory_pct)
    return errors


def _general_type_errors(
    offer: Offer, accelerator: Any, count: int | None, profile: str, slicing: bool
) -> list[FieldError]:
    """Rule 7: a general InstanceType has no accelerator to request, slice or partition."""
    errors: list[FieldError] = []
    if count:
        errors.append(
            invalid(
                f"{RES}.accelerator",
                accelerator,
                f"InstanceType {offer.name!r} has no accelerators; drop the request or "
                "choose an acceleratable InstanceType",
            )
        )
    if profile or slicing:
        field = "acceleratorPartitionedProfile" if profile else "acceleratorSlicedMemoryPercentage"
        errors.append(
            forbidden(
                f"{RES}.{field}", f"InstanceType {offer.name!r} has no accelerators to slice or partition"
            )
        )
    return errors


def _partition_errors(
    offer: Offer, accelerator: Any, count: int | None, profile: str, slicing: bool
) -> list[FieldError]:
    """Rule 4: one instance of a profile the type offers, on a manufacturer that partitions."""
    errors: list[FieldError] = []
    path = f"{RES}.acceleratorPartitionedProfile"
    if slicing:
        errors.append(
            forbidden(
                path,
                "a hardware partition and a logical slice cannot both apply to one "
                "accelerator; drop acceleratorSlicedMemoryPercentage/CoresPercentage",
            )
        )
    elif not offer.can_partition:
        errors.append(
            invalid(
                path,
                profile,
                f"manufacturer {offer.manufacturer or offer.group!r} cannot "
                "partition its accelerators; request whole cards or a slice",
            )
        )
    elif offer.physical_count == 0:
        errors.append(
            forbidden(
                path,
                f"InstanceType {offer.name!r} has no accelerator in a partitioning "
                "mode; an administrator enables partitions (e.g. MIG) first",
            )
        )
    elif not _PROFILE_SEGMENT.match(profile):
        errors.append(invalid(path, profile, "must be a resource-name segment such as 3g.40gb"))
    elif profile not in offer.profiles:
        offered = ", ".join(sorted(offer.profiles)) or "none"
        errors.append(invalid(path, profile, f"InstanceType {offer.name!r} offers the profiles: {offered}"))
    if count is not None and count != 1:
        errors.append(
            invalid(f"{RES}.accelerator", accelerator, "a partition is one instance: set accelerator to 1")
        )
    return errors


def _slice_errors(offer: Offer, accelerator: Any, count: int | None) -> list[FieldError]:
    """Rule 5: a slice is part of one accelerator of a type that slices."""
    errors: list[FieldError] = []
    if offer.logical_count == 0:
        hint = (
            " (its accelerators are partitioned: request spec.resources.acceleratorPartitionedProfile)"
            if offer.physical_count
            else ""
        )
        errors.append(
            forbidden(
                f"{RES}.acceleratorSlicedMemoryPercentage",
                f"InstanceType {offer.name!r} cannot slice its accelerators{hint}",
            )
        )
    if count is not None and count != 1:
        errors.append(
            invalid(
                f"{RES}.accelerator", accelerator, "a slice is part of one accelerator: set accelerator to 1"
            )
        )
    return errors


def _cap_errors(
    resources: dict[str, Any], offer: Offer, count: int | None, profile: str, memory_pct: int
) -> list[FieldError]:
    errors: list[FieldError] = []
    values: dict[str, tuple[int, int]] = {}
    for field in ("cpu", "ram", "localStorage"):
        value = resources.get(field)
        if value in (None, ""):
            continue
        num, den = _exact(value, f"{RES}.{field}")
        if num < 0:
            errors.append(invalid(f"{RES}.{field}", value, "must not be negative"))
        values[field] = (num, den)
    if "localStorage" in values and offer.local_storage:
        num, den = values["localStorage"]
        if num > offer.local_storage * den:
            errors.append(
                invalid(
                    f"{RES}.localStorage",
                    resources["localStorage"],
                    f"InstanceType {offer.name!r} offers at most {units.size(offer.local_storage)}",
                )
            )
    if offer.acceleratable:
        if (profile and offer.profiles.get(profile) and offer.card_mib) or (
            memory_pct and isinstance(memory_pct, int)
        ):
            # A share of one card (a partition or a slice) is one unit (rule 8: units = the
            # accelerator count, at least one); its sized share, whole cores at least one, fits.
            factor = (1, 1)
        else:
            factor = (max(count or 0, 1), 1)
        caps = {
            "cpu": (offer.unit_cpu_milli * factor[0], 1000 * factor[1]),
            "ram": (offer.unit_ram * factor[0], factor[1]),
        }
        for field, (cap_num, cap_den) in caps.items():
            if field in values:
                num, den = values[field]
                if num * cap_den > cap_num * den:
                    shown = (
                        units.cores(cap_num * 1000 // cap_den)
                        if field == "cpu"
                        else units.size(cap_num // cap_den)
                    )
                    errors.append(
                        invalid(
                            f"{RES}.{field}",
                            resources[field],
                            f"exceeds the {shown} that {factor[0]}/{factor[1]} of the unit of "
                            f"InstanceType {offer.name!r} provides",
                        )
                    )
    else:
        errors += _general_cap_errors(resources, offer, values)
    return errors


def _general_cap_errors(
    resources: dict[str, Any], offer: Offer, values: dict[str, tuple[int, int]]
) -> list[FieldError]:
    """A CPU-only type: CPU within the largest node, RAM within unit RAM × the requested cores."""
    errors: list[FieldError] = []
    cores_num, cores_den = values.get("cpu", (1, 1))
    if cores_num < cores_den:  # fewer than one core still counts as one unit
        cores_num, cores_den = 1, 1
    if "ram" in values and offer.unit_ram:
        num, den = values["ram"]
        if num * cores_den > offer.unit_ram * cores_num * den:
            cap = offer.unit_ram * cores_num // cores_den
            errors.append(
                invalid(
                    f"{RES}.ram",
                    resources["ram"],
                    f"exceeds the {units.size(cap)} that InstanceType {offer.name!r} gives "
                    f"{units.cores(cores_num * 1000 // cores_den)} CPU ({units.size(offer.unit_ram)} per core)",
                )
            )
    if "cpu" in values:
        num, den = values["cpu"]
        once = offer.cpu_view.get("onceMaxRequest")
        cores = quantity.whole(once) if once not in (None, "") else None
        if cores is not None and num > cores * den:
            capacity = quantity.whole(offer.cpu_view.get("capacity") or 0) or 0
            remaining = quantity.whole(offer.cpu_view.get("remaining") or 0) or 0
            if capacity == 0:
                why = "no managed node serves this pool yet"
            elif remaining == 0:
                why = "the pool's CPU is fully requested"
            else:
                why = f"no node of the pool has more than {cores} cores"
            errors.append(invalid(f"{RES}.cpu", resources["cpu"], why))
    return errors
