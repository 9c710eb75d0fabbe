"""The allocation record ``device.gpustack.ai/accelerator.allocated``, and the ledger rebuilt from it.

The device manager (gate 5) writes the record on a Pod when ``Allocate`` settles a container;
gate 3 and the Instance status read it.  This module is the one encoder, decoder and aggregator
all of them use, so the three never disagree on what a Pod holds.

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

Aggregation (:func:`ledger_rows`) is the device manager's: per card, Σ ``allocated`` over the
charging entries of the node's Pods, ``remaining = max(0, M − Σ)`` (0 once Exclusive), Σ slices,
and for a partitioned card the allocated profile counts plus the placement-aware remaining count of
every profile, computed from the recorded placements.  A Pod charges until it is gone, except that
a finished Pod (``Succeeded``/``Failed``) stops charging its exclusive and shared cards and its
logical slices — not its partitions, nor MetaX/Cambricon slices, which the reclaimer destroys only
with the Pod — unless ``GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS=false``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from api import constants as c
from api.booleans import env_bool
from api.manufacturers import UNITS_PER_CARD, UNITS_PER_SHARE
from fastpath import requests as rq

ANNOTATION = c.ANNOTATION_ACCELERATOR_ALLOCATED
ENV_RELEASE_TERMINATED = "GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS"
TERMINAL_PHASES = ("Succeeded", "Failed")
# Slices the reclaimer destroys only with the Pod: they stay charged after it finishes.
SLICES_HELD_UNTIL_GONE = frozenset({"metax", "cambricon"})

MODE_NONE = c.DEVICE_MODE_NONE
MODE_EXCLUSIVE = c.DEVICE_MODE_EXCLUSIVE
MODE_SHARED = c.DEVICE_MODE_SHARED
MODE_SLICED = c.DEVICE_MODE_SLICED
MODE_PARTITIONED = c.DEVICE_MODE_PARTITIONED
MODE_VISIBILITY = c.DEVICE_MODE_VISIBILITY
# Which mode a card reports when (against the allocator's invariant) entries of several meet.
_PRECEDENCE = {MODE_EXCLUSIVE: 4, MODE_PARTITIONED: 3, MODE_SLICED: 2, MODE_SHARED: 1}

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
                if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 5:
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


# --- Pods ---------------------------------------------------------------------------------------------------


def accelerator_containers(pod: Mapping[str, Any]) -> list[str]:
    """Names of the Pod's containers (init, sidecar and app) that ask for an accelerator family."""
    facts = rq.scan_pod((pod.get("spec") or {}) if isinstance(pod, Mapping) else None)
    return [cf.name for cf in facts.containers if cf.claims()]


def is_held(pod: Mapping[str, Any], record: Record | None = None) -> bool:
    """True once the record names every container of the Pod that asks for an accelerator (a Pod
    asking for none is never held: it has nothing to hold)."""
    record = record_of(pod) if record is None else record
    wanted = accelerator_containers(pod)
    return bool(wanted) and all(record.get(name) for name in wanted)


def _charges(mode: int, manufacturer: str, finished: bool, release_terminated: bool) -> bool:
    if mode not in _PRECEDENCE:
        return False  # None, Visibility, garbage
    if not finished or not release_terminated:
        return True
    if mode == MODE_PARTITIONED:
        return True
    return mode == MODE_SLICED and manufacturer in SLICES_HELD_UNTIL_GONE


def _allocated_of(entry: Mapping[str, Any], mode: int) -> int:
    value = entry.get("allocated")
    if isinstance(value, int) and not isinstance(value, bool):
        return max(0, value)
    if mode == MODE_EXCLUSIVE:
        return UNITS_PER_CARD
    if mode == MODE_SHARED:
        return UNITS_PER_SHARE
    return 0


# --- Aggregation --------------------------------------------------------------------------------------------


class _Tally:
    __slots__ = ("allocated", "complete", "mode", "occupied", "profiles", "slices")

    def __init__(self) -> None:
        self.mode = MODE_NONE
        self.allocated = 0
        self.slices = 0
        self.profiles: dict[str, int] = {}
        self.occupied = 0  # memory-slice bitmask of the recorded partition placements
        self.complete = True  # every partition entry carried its placements

    def add(self, entry: Mapping[str, Any], mode: int) -> None:
        if _PRECEDENCE[mode] > _PRECEDENCE.get(self.mode, 0):
            self.mode = mode
        self.allocated += _allocated_of(entry, mode)
        if mode == MODE_SLICED:
            slices = entry.get("allocatedSlices")
            self.slices += slices if isinstance(slices, int) and slices > 0 else 1
        elif mode == MODE_PARTITIONED:
            profile = entry.get("allocatedPhysicalProfile")
            if isinstance(profile, str) and profile:
                self.profiles[profile] = self.profiles.get(profile, 0) + 1
            placements = entry.get("allocatedPhysicalPlacements")
            if isinstance(placements, list) and placements:
                for placement in placements:
                    start = placement.get("start") if isinstance(placement, dict) else None
                    length = placement.get("length") if isinstance(placement, dict) else None
                    if (
                        isinstance(start, int)
                        and isinstance(length, int)
                        and 0 <= start < start + length <= 64
                    ):
                        self.occupied |= ((1 << length) - 1) << start
            else:
                self.complete = False


def _free_placements(profile: Mapping[str, Any], occupied: int) -> int:
    """Most disjoint free legal placements of ``profile`` (greedy by end, then start — optimal for
    intervals, and the order ``fastpath.fit`` counts in)."""
    slots = []
    for placement in profile.get("placements") or ():
        if isinstance(placement, dict):
            start, length = placement.get("start"), placement.get("length")
            if isinstance(start, int) and isinstance(length, int) and 0 <= start < start + length <= 64:
                slots.append((start + length, start, ((1 << length) - 1) << start))
    slots.sort()
    count, taken = 0, occupied
    for _end, _start, mask in slots:
        if not mask & taken:
            taken |= mask
            count += 1
    return count


def tally_pods(pods: Iterable[Mapping[str, Any]], *, release_terminated: bool = True) -> dict[tuple, _Tally]:
    """Per ``(node, group id, manufacturer, card id)`` the charges the Pods' records make (a record
    charges only the node its Pod is bound to)."""
    tallies: dict[tuple, _Tally] = {}
    for pod in pods:
        record = record_of(pod)
        if not record:
            continue
        node = (pod.get("spec") or {}).get("nodeName") or ""
        finished = (pod.get("status") or {}).get("phase") in TERMINAL_PHASES
        for groups in record.values():
            for group in groups:
                gid, manufacturer = group.get("id"), group.get("manufacturer")
                for entry in group.get("accelerators") or ():
                    mode = entry.get("mode")
                    if not _charges(mode, manufacturer, finished, release_terminated):
                        continue
                    key = (node, gid, manufacturer, entry.get("id"))
                    tally = tallies.get(key)
                    if tally is None:
                        tally = tallies[key] = _Tally()
                    tally.add(entry, mode)
    return tallies


def ledger_rows(
    devices: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    *,
    release_terminated: bool = True,
    tallies: Mapping[tuple, _Tally] | None = None,
) -> list[dict[str, Any]]:
    """The ``status.groups`` the device manager would publish for ``devices`` given the Pods bound
    to its node (``tallies``: :func:`tally_pods` of them, when already counted): one row for every
    card of ``spec.groups``, free cards included (seeded at M)."""
    if tallies is None:
        tallies = tally_pods(pods, release_terminated=release_terminated)
    node = (devices.get("metadata") or {}).get("name") or ""
    out = []
    for group in (devices.get("spec") or {}).get("groups") or ():
        gid, manufacturer = group.get("id"), group.get("manufacturer")
        rows = []
        for card in group.get("accelerators") or ():
            card_id = card.get("id")
            status = card.get("status") or {}
            profiles = [
                p for p in ((status.get("physicalSliced") or {}).get("profiles") or ()) if isinstance(p, dict)
            ]
            tally = tallies.get((node, gid, manufacturer, card_id))
            row: dict[str, Any] = {"id": card_id, "index": card.get("index", 0), "mode": MODE_NONE}
            if tally is None:
                row.update(allocated=0, remaining=UNITS_PER_CARD)
            else:
                allocated = UNITS_PER_CARD if tally.mode == MODE_EXCLUSIVE else tally.allocated
                row.update(
                    mode=tally.mode,
                    allocated=min(allocated, UNITS_PER_CARD),
                    remaining=max(0, UNITS_PER_CARD - allocated),
                )
            if profiles:
                allocated_profiles = dict(tally.profiles) if tally is not None else {}
                row["allocatedProfiles"] = [
                    {"name": n, "count": k} for n, k in sorted(allocated_profiles.items())
                ]
                if tally is None or tally.complete:
                    occupied = tally.occupied if tally is not None else 0
                    row["remainingProfiles"] = [
                        {"name": p.get("name"), "count": _free_placements(p, occupied)} for p in profiles
                    ]
            else:
                row["allocatedSlices"] = tally.slices if tally is not None else 0
            rows.append(row)
        out.append({"id": gid, "manufacturer": manufacturer, "accelerators": rows})
    return out
