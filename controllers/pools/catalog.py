"""The ``InstanceTypeFlavor`` catalog (§2.3, §8): one read-only entry per pool shape, os/arch-agnostic,
for authoring InstanceTypes against.  Pure.

Every live ResourceFlavor of ours contributes the entry of its group: ``gpustack--generic`` for a
CPU flavor and ``gpustack--<aKey>`` for an accelerated one, or, with
``instance-type-aware-cpu-manufacturer``, ``gpustack--<gKey>`` and ``gpustack--<gKey>--<aKey>``.
The spec comes from the flavor's labels and ``note.gpustack.ai/*`` annotations (manufacturer,
product, family, memory, cores of the card) and the manufacturer table (``sliceable``); a CPU entry
carries no core count, since flavors of every node size collapse into it.  Flavors are read in name
order, so the first contributor of a name decides its spec whatever order the cache lists them in.
An entry no flavor contributes to is removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from api import API_VERSION, constants
from api.manufacturers import manufacturer_of_group
from api.objects import Obj
from controllers.pools import render

GENERIC_MANUFACTURER = "generic"


def entry_name(general_group: str, accelerator_group: str, *, aware_cpu: bool) -> str:
    """``gpustack--generic`` | ``gpustack--<aKey>`` (aware: ``gpustack--<gKey>[--<aKey>]``)."""
    if aware_cpu and general_group and general_group != constants.GENERIC_GROUP:
        head = f"{constants.NAME_PREFIX}{general_group}"
        return f"{head}--{accelerator_group}" if accelerator_group else head
    return f"{constants.NAME_PREFIX}{accelerator_group or constants.GENERIC_GROUP}"


def _groups(labels: Mapping[str, str], prefix: str) -> list[str]:
    return [k[len(prefix) :] for k, v in labels.items() if k.startswith(prefix) and v == "true"]


def entry_of_flavor(flavor: Mapping[str, Any], *, aware_cpu: bool) -> Obj | None:
    """The catalog entry a generated flavor contributes to, or None for one that is not a pool's."""
    if not render.owned_flavor(flavor) or render.deleting(flavor):
        return None
    labels = (flavor.get("metadata") or {}).get("labels") or {}
    notes = (flavor.get("metadata") or {}).get("annotations") or {}
    general = _groups(labels, constants.PREFIX_GENERAL)
    accelerators = _groups(labels, constants.PREFIX_ACCELERATABLE)
    if len(general) != 1 or len(accelerators) > 1:
        return None
    gkey = general[0] if aware_cpu else constants.GENERIC_GROUP
    akey = accelerators[0] if accelerators else ""
    spec: dict[str, Any] = {"acceleratable": bool(akey)}
    if not akey or aware_cpu:
        spec["generalGroup"] = gkey
    if akey:
        maker = manufacturer_of_group(akey)
        spec["acceleratorGroup"] = akey
        spec["manufacturer"] = notes.get(render.NOTE_MANUFACTURER) or (maker.name if maker else "")
        for field, note in (
            ("product", render.NOTE_PRODUCT),
            ("family", render.NOTE_FAMILY),
            ("memory", render.NOTE_MEMORY),
            ("cores", render.NOTE_CORES),
        ):
            if notes.get(note):
                spec[field] = notes[note]
        spec["sliceable"] = bool(maker and maker.slices_per_card)
    else:
        spec["manufacturer"] = (
            gkey.split("-", 1)[0] if aware_cpu and gkey != constants.GENERIC_GROUP else (GENERIC_MANUFACTURER)
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "InstanceTypeFlavor",
        "metadata": {"name": entry_name(gkey, akey, aware_cpu=aware_cpu)},
        "spec": {k: v for k, v in spec.items() if v not in ("", None)},
    }


def catalog(flavors: Iterable[Mapping[str, Any]], *, aware_cpu: bool) -> dict[str, Obj]:
    """Every entry the flavors call for, by name."""
    out: dict[str, Obj] = {}
    for flavor in sorted(flavors, key=render.name_of):
        entry = entry_of_flavor(flavor, aware_cpu=aware_cpu)
        if entry is not None:
            out.setdefault(entry["metadata"]["name"], entry)
    return out


def plan(wanted: Mapping[str, Obj], existing: Iterable[Mapping[str, Any]]) -> tuple[list[Obj], list[str]]:
    """What to apply (entries missing or whose spec differs) and what to delete (entries nothing
    calls for any more)."""
    have = {render.name_of(e): e for e in existing}
    apply = [
        entry for name, entry in sorted(wanted.items()) if (have.get(name) or {}).get("spec") != entry["spec"]
    ]
    delete = sorted(name for name, e in have.items() if name not in wanted and not render.deleting(e))
    return apply, delete
