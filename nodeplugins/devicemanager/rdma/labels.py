"""The RDMA node labels (C.3), pure functions of ``Devices.spec.interfaces[]`` and the cards.

- ``feature.gpustack.ai/rdma.capable: "true"`` iff at least one interface or VF is usable
  (:func:`~.link.usable`);
- ``feature.gpustack.ai/rdma.distance`` — the closest bus distance between any accelerator and
  any usable endpoint (:func:`bus_distance`); omitted on a node without accelerators;
- ``feature.gpustack.ai/rdma.numa`` — the usable endpoints' NUMA nodes joined by ``_`` (a comma
  would be dropped by label sanitising: ``{0,1}`` → ``01``); omitted when none reported one.

No usable endpoint → no ``rdma.`` key at all: withholding is the absence of the keys (the publisher
applies the NodeFeature's labels whole, so a key it stops sending is deleted).

Distance vocabulary, closest first: ``SELF LINK PIX PXB PHB NODE SYS UNK``.  From bus coordinates
only ``PIX`` (behind the same innermost bridge), ``PXB`` (sharing a bridge further up), ``NODE``
(no shared bridge, one NUMA node: ``PHB`` cannot be told from it, and the further is reported),
``SYS`` (different NUMA nodes) and ``UNK`` (a coordinate is missing) can come out; ``SELF``,
``LINK`` and ``PHB`` never do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from api import constants
from nodeplugins.devicemanager.rdma.link import usable

DISTANCES = ("SELF", "LINK", "PIX", "PXB", "PHB", "NODE", "SYS", "UNK")
RANK = {name: i for i, name in enumerate(DISTANCES)}
UNKNOWN = "UNK"


@dataclass(frozen=True, slots=True)
class Place:
    """Bus coordinates of one accelerator or endpoint ("" / () when unknown)."""

    bus_id: str = ""
    root_id: str = ""
    switches: tuple[str, ...] = ()
    numa: str = ""


def bus_distance(a: Place, b: Place) -> str:
    if not (a.bus_id and a.root_id and b.bus_id and b.root_id):
        return UNKNOWN
    if a.switches and b.switches and a.switches[0] == b.switches[0]:
        return "PIX"
    if set(a.switches) & set(b.switches):
        return "PXB"
    if not (a.numa and b.numa):
        return UNKNOWN
    return "NODE" if a.numa == b.numa else "SYS"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _switches(value: Any) -> tuple[str, ...]:
    return tuple(s for s in value if isinstance(s, str)) if isinstance(value, list) else ()


def endpoints(interfaces: Iterable[Mapping[str, Any]]) -> Iterator[tuple[Mapping[str, Any], Place]]:
    """Every interface and nested VF with its place: a VF has its own address and NUMA node (its
    PF's when blank) and its PF's ``pciRootId``/``pciSwitches``."""
    for record in interfaces:
        if not isinstance(record, Mapping):
            continue
        own = Place(
            _text(record.get("pciBusId")),
            _text(record.get("pciRootId")),
            _switches(record.get("pciSwitches")),
            _text(record.get("numaAffinity")),
        )
        yield record, own
        for vf in record.get("virtualFunctions") or ():
            if isinstance(vf, Mapping):
                yield (
                    vf,
                    Place(
                        _text(vf.get("pciBusId")),
                        own.root_id if _text(vf.get("pciBusId")) else "",
                        own.switches,
                        _text(vf.get("numaAffinity")) or own.numa,
                    ),
                )


def accelerator_places(groups: Iterable[Mapping[str, Any]]) -> list[Place]:
    """The cards' places, from ``Devices.spec.groups[].accelerators[].topology``."""
    out = []
    for group in groups:
        for card in group.get("accelerators") or ():
            topology = card.get("topology") or {}
            out.append(
                Place(
                    _text(topology.get("pciBusId")),
                    _text(topology.get("pciRootId")),
                    _switches(topology.get("pciSwitches")),
                    _text(topology.get("numaAffinity")),
                )
            )
    return out


def rdma_labels(interfaces: Iterable[Mapping[str, Any]], accelerators: Iterable[Place]) -> dict[str, str]:
    capable = [place for record, place in endpoints(interfaces) if usable(record)]
    if not capable:
        return {}
    labels = {constants.LABEL_RDMA_CAPABLE: "true"}
    cards = list(accelerators)
    if cards:
        labels[constants.LABEL_RDMA_DISTANCE] = min(
            (bus_distance(card, place) for card in cards for place in capable), key=RANK.__getitem__
        )
    numas = sorted({p.numa for p in capable if p.numa.isdigit()}, key=int)
    if numas:
        labels[constants.LABEL_RDMA_NUMA] = "_".join(numas)
    return labels


PREFIX = "feature.gpustack.ai/rdma."


def is_rdma_label(key: str) -> bool:
    return key.startswith(PREFIX)
