"""The allocation record ``device.gpustack.ai/accelerator.allocated``: its one encoder and decoder.

The device manager (gate 5) writes the record on a Pod when ``Allocate`` settles a container;
gate 3 and the Instance status read it.  All of them use this codec, and ``fastpath.ledger``'s
aggregation of it, so they never disagree on what a Pod holds.

Shape — a JSON object in the annotation value, keyed by **container name** (a reservation is
keyed by Pod UID and container, so two containers of one Pod are both recorded and both charged);
each container holds the ledger's own ``DevicesAllocationGroup`` shape, one per model it took
cards of, and each card entry is the ledger's ``AcceleratorAllocation`` shape describing what
*this container* took from that card::

    {
      "main": [
        {
          "id": "nvidia-h100-80gb-hbm3",        # DevicesGroup id (spec.groups[].id)
          "manufacturer": "nvidia",
          "accelerators": [
            {"id": "<card id>", "index": 0, "mode": 3,          # 1 Exclusive … 5 Visibility
             "allocated": 800000,                               # units out of M = 1,600,000
             "allocatedSlices": 1},                             # sliced: slices taken (1)
            {"id": "<card id>", "index": 1, "mode": 4, "allocated": 785000,
             "allocatedPhysicalProfile": "3g.40gb",             # partition: vendor profile name
             "allocatedPhysicalPlacements": [{"start": 0, "length": 4}]}   # memory slices held
          ]
        }
      ]
    }

Per entry: ``mode`` is required; ``allocated`` defaults to M for Exclusive, M/10 for Shared and 0
otherwise; ``allocatedSlices`` defaults to 1 for Sliced.  ``remaining`` may carry the card's
remaining units right after the grant (informational; aggregation ignores it).  Visibility
entries (the SSH sidecar reusing its owner's cards) are recorded but never charge.  Unknown fields
are kept by the decoder and ignored by the aggregator.

The ledger rebuilt from the records (which entries charge, how much, and when a finished Pod stops
charging) is ``fastpath.ledger``'s, next to every other reader of the Devices ledger;
``GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS=false`` keeps a finished Pod's cards charged there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from api import constants
from api.booleans import env_bool

ANNOTATION = constants.ANNOTATION_ACCELERATOR_ALLOCATED
ENV_RELEASE_TERMINATED = "GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS"

Record = dict[str, list[dict[str, Any]]]


class RecordError(ValueError):
    """The annotation value is not an allocation record."""


def release_terminated_from_env(env: Mapping[str, str] | None = None) -> bool:
    """``GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS`` (default true); set it alike on worker and DMs."""
    return env_bool(ENV_RELEASE_TERMINATED, True, env)


# --- Codec -----------------------------------------------------------------------------------------------


def accelerator_entry(
    card_id: str,
    index: int,
    mode: int,
    allocated: int | None = None,
    *,
    slices: int | None = None,
    profile: str | None = None,
    placements: Iterable[tuple[int, int]] | None = None,
    remaining: int | None = None,
) -> dict[str, Any]:
    """One card entry of a record (what one container took from one card)."""
    entry: dict[str, Any] = {"id": card_id, "index": int(index), "mode": int(mode)}
    if allocated is not None:
        entry["allocated"] = int(allocated)
    if remaining is not None:
        entry["remaining"] = int(remaining)
    if slices is not None:
        entry["allocatedSlices"] = int(slices)
    if profile:
        entry["allocatedPhysicalProfile"] = profile
    if placements is not None:
        entry["allocatedPhysicalPlacements"] = [
            {"start": int(start), "length": int(length)} for start, length in placements
        ]
    return entry


def _canonical(record: Mapping[str, Iterable[Mapping[str, Any]]]) -> Record:
    out: Record = {}
    for container in sorted(record):
        groups = []
        for group in record[container]:
            cards = sorted(
                (dict(a) for a in group.get("accelerators") or ()), key=lambda a: a.get("index", 0)
            )
            groups.append({**dict(group), "accelerators": cards})
        groups.sort(
            key=lambda g: (
                g.get("manufacturer", ""),
                g["accelerators"][0].get("index", 0) if g["accelerators"] else 0,
            )
        )
        out[container] = groups
    return out


def encode(record: Mapping[str, Iterable[Mapping[str, Any]]]) -> str:
    """The annotation value: compact JSON, containers sorted, groups by manufacturer then first
    card, cards by index — equal records encode to equal strings (no spurious patches)."""
    return orjson.dumps(_canonical(record)).decode()


def decode(value: str | bytes | None) -> Record:
    """The record in an annotation value (``{}`` for none); :class:`RecordError` when malformed."""
    if value is None or value == "":
        return {}
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as error:
        raise RecordError(f"{ANNOTATION}: not JSON: {error}") from None
    if not isinstance(data, dict):
        raise RecordError(f"{ANNOTATION}: want an object keyed by container name")
    for container, groups in data.items():
        if not isinstance(groups, list):
            raise RecordError(f"{ANNOTATION}[{container!r}]: want a list of groups")
        for i, group in enumerate(groups):
            where = f"{ANNOTATION}[{container!r}][{i}]"
            if not isinstance(group, dict) or not isinstance(group.get("id"), str):
                raise RecordError(f"{where}: want a group with an id")
            if not isinstance(group.get("manufacturer"), str):
                raise RecordError(f"{where}: want a manufacturer")
            cards = group.get("accelerators") or []
            if not isinstance(cards, list):
                raise RecordError(f"{where}.accelerators: want a list")
            for j, card in enumerate(cards):
                if not isinstance(card, dict) or not isinstance(card.get("id"), str):
                    raise RecordError(f"{where}.accelerators[{j}]: want an entry with an id")
                mode = card.get("mode")
                if (
                    not isinstance(mode, int)
                    or isinstance(mode, bool)
                    or not constants.DEVICE_MODE_NONE <= mode <= constants.DEVICE_MODE_VISIBILITY
                ):
                    raise RecordError(f"{where}.accelerators[{j}].mode: want 0..5")
    return data


def record_of(pod: Mapping[str, Any]) -> Record:
    """The Pod's record; ``{}`` when it has none or it cannot be read (a record the device manager
    did not write in this shape names no card this reader can charge)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        return decode(annotations.get(ANNOTATION))
    except RecordError:
        return {}
