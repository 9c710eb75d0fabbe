"""Node profile files: the hardware a simulated node carries, read by ``--simulate PROFILE.yaml``.

The NVIDIA backend serves a profile through :mod:`.fakenvml` (pynvml's real wrappers run on it); the
other manufacturers' backends read it directly.  A profile::

    manufacturer: nvidia              # required: one of api.manufacturers
    driverVersion: "570.124.06"       # optional (default per manufacturer below)
    runtimeVersion: "12.8"            # optional: CUDA / CANN / ... version the driver reports
    products:                         # optional: products beyond products.yaml, same shape
      My Card: {manufacturer: nvidia, memoryMiB: 16384, cores: 4096, computeCapability: "8.9"}
    cards:                            # required: expanded in order; a card's index is its position
      - product: NVIDIA H100 80GB HBM3
        count: 6                      # optional, default 1
      - product: NVIDIA H100 80GB HBM3
        count: 2
        partitioned: true             # in MIG mode: offers the product's partition profiles
      - product: NVIDIA A10G
        unhealthy: true               # reported unhealthy (an Xid, a lost card)
        failing: nvmlDeviceGetUUID    # NVML answers an error for this call on this card
      - product: NVIDIA H100 80GB HBM3
        fabric:                       # optional: the card's NVLink domain (NVIDIA, Ascend only)
          id: 5b0e112233445566778899aabbccddef  # NVIDIA: the cluster UUID, 32 hex digits
          clique: 1                   # optional: the partition inside it
          members: 16                 # optional: the domain's size (NVML reports none)
          state: completed            # NVIDIA: not-supported, not-started, in-progress, completed
          status: success             # NVIDIA: success or error (a registration that failed)

Every card's UUID is derived from the node name and its index, so two nodes never share one.
Refusals name the field path (``cards[2].count: ...``) and say what to write instead.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from api.manufacturers import BY_NAME
from nodeplugins.devicemanager.fabric import KINDS

PRODUCTS_FILE = Path(__file__).with_name("products.yaml")
DEFAULT_VERSIONS = {"nvidia": ("570.124.06", "12.8"), "ascend": ("24.1.rc3", "8.0")}
_UUID_NAMESPACE = uuid.UUID("6c1f6c0e-4b59-4a4e-9b1a-2f5d0c8e7a31")
MAX_CARDS = 1024


class ProfileError(ValueError):
    """The profile file cannot describe a node; the message names the field and the fix."""


@dataclass(frozen=True, slots=True)
class SimProfile:
    name: str
    nvml_id: int
    memory_mib: int
    compute_slices: int
    count: int
    placements: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class SimProduct:
    name: str
    manufacturer: str
    memory_mib: int
    cores: int
    compute_capability: str
    architecture: int
    family: str
    pci_device_id: int
    profiles: tuple[SimProfile, ...]


FABRIC_STATES = {"not-supported": 0, "not-started": 1, "in-progress": 2, "completed": 3}
HEX_UUID = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class SimFabric:
    """A card's fabric as the hardware reports it, established or not."""

    id: str
    clique: int | None = None
    members: int = 0
    state: str = "completed"
    failed: bool = False  # the registration completed with an error

    @property
    def established(self) -> bool:
        return self.state == "completed" and not self.failed


@dataclass(frozen=True, slots=True)
class SimCard:
    index: int
    uuid: str
    product: SimProduct
    partitioned: bool
    unhealthy: bool
    failing: frozenset[str]  # NVML functions that answer an error for this card
    pci_bus_id: str
    numa: int
    fabric: SimFabric | None = None


@dataclass(frozen=True, slots=True)
class NodeProfile:
    manufacturer: str
    driver_version: str
    runtime_version: str
    cards: tuple[SimCard, ...]


def _fail(path: str, message: str) -> ProfileError:
    return ProfileError(f"{path}: {message}")


def _int(value: Any, path: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(path, f"want an integer >= {minimum}, got {value!r}")
    return value


def _str(value: Any, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or str(value) == "":
        raise _fail(path, f"want a non-empty string, got {value!r}")
    return str(value)


def _map(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, f"want a mapping, got {type(value).__name__}")
    return value


def _profile(raw: Any, path: str) -> SimProfile:
    raw = _map(raw, path)
    placements = []
    for i, slot in enumerate(raw.get("placements") or ()):
        if not (isinstance(slot, list) and len(slot) == 2):
            raise _fail(f"{path}.placements[{i}]", "want [start, length]")
        start = _int(slot[0], f"{path}.placements[{i}][0]")
        length = _int(slot[1], f"{path}.placements[{i}][1]", minimum=1)
        if start + length > 64:
            raise _fail(f"{path}.placements[{i}]", "a placement must end within 64 memory slices")
        placements.append((start, length))
    if not placements:
        raise _fail(f"{path}.placements", "want at least one [start, length]")
    return SimProfile(
        name=_str(raw.get("name"), f"{path}.name"),
        nvml_id=_int(raw.get("id", 0), f"{path}.id"),
        memory_mib=_int(raw.get("memoryMiB"), f"{path}.memoryMiB", minimum=1),
        compute_slices=_int(raw.get("computeSlices", 1), f"{path}.computeSlices", minimum=1),
        count=_int(raw.get("count", len(placements)), f"{path}.count", minimum=1),
        placements=tuple(placements),
    )


def _product(name: str, raw: Any, path: str) -> SimProduct:
    raw = _map(raw, path)
    manufacturer = _str(raw.get("manufacturer"), f"{path}.manufacturer")
    if manufacturer not in BY_NAME:
        raise _fail(
            f"{path}.manufacturer", f"unknown manufacturer {manufacturer!r}; one of {sorted(BY_NAME)}"
        )
    profiles = tuple(_profile(p, f"{path}.profiles[{i}]") for i, p in enumerate(raw.get("profiles") or ()))
    return SimProduct(
        name=name,
        manufacturer=manufacturer,
        memory_mib=_int(raw.get("memoryMiB"), f"{path}.memoryMiB", minimum=1),
        cores=_int(raw.get("cores", 0), f"{path}.cores"),
        compute_capability=str(raw.get("computeCapability") or ""),
        architecture=_int(raw.get("architecture", 0xFFFFFFFF), f"{path}.architecture"),
        family=str(raw.get("family") or ""),
        pci_device_id=_int(raw.get("pciDeviceId", 0), f"{path}.pciDeviceId"),
        profiles=profiles,
    )


@cache
def catalog() -> dict[str, SimProduct]:
    """The built-in products (``products.yaml``)."""
    raw = yaml.safe_load(PRODUCTS_FILE.read_text())
    return {name: _product(name, spec, f"products.yaml[{name}]") for name, spec in raw.items()}


def card_uuid(node: str, index: int, manufacturer: str) -> str:
    """A stable, node-unique card identity in the vendor's usual shape (``GPU-…`` for NVIDIA)."""
    value = uuid.uuid5(_UUID_NAMESPACE, f"{node}/{manufacturer}/{index}")
    return f"GPU-{value}" if manufacturer == "nvidia" else str(value)


def parse(raw: Any, *, node: str, source: str = "profile") -> NodeProfile:
    """A :class:`NodeProfile` from decoded YAML; :class:`ProfileError` names what is wrong."""
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{source}: want a mapping with manufacturer and cards, got {type(raw).__name__}")
    manufacturer = _str(raw.get("manufacturer"), "manufacturer")
    if manufacturer not in BY_NAME:
        raise _fail("manufacturer", f"unknown manufacturer {manufacturer!r}; one of {sorted(BY_NAME)}")
    products = dict(catalog())
    for name, spec in _map(raw.get("products") or {}, "products").items():
        products[str(name)] = _product(str(name), spec, f"products[{name}]")
    driver, runtime = DEFAULT_VERSIONS.get(manufacturer, ("1.0.0", "1.0"))
    entries = raw.get("cards")
    if not isinstance(entries, list) or not entries:
        raise _fail("cards", "want a non-empty list of {product, count}")
    cards: list[SimCard] = []
    total = max(1, _total(entries))  # cards split over two NUMA nodes, first half on 0
    for i, entry in enumerate(entries):
        path = f"cards[{i}]"
        entry = _map(entry, path)
        unknown = set(entry) - {"product", "count", "partitioned", "unhealthy", "failing", "fabric"}
        if unknown:
            raise _fail(
                f"{path}.{sorted(unknown)[0]}",
                "unknown field; want product, count, partitioned, unhealthy, failing or fabric",
            )
        name = _str(entry.get("product"), f"{path}.product")
        product = products.get(name)
        if product is None:
            raise _fail(
                f"{path}.product",
                f"unknown product {name!r}; add it under products: or use one of "
                f"{sorted(p for p, s in products.items() if s.manufacturer == manufacturer)}",
            )
        if product.manufacturer != manufacturer:
            raise _fail(
                f"{path}.product", f"{name!r} is a {product.manufacturer} product on a {manufacturer} profile"
            )
        partitioned = bool(entry.get("partitioned", False))
        if partitioned and not product.profiles:
            raise _fail(f"{path}.partitioned", f"{name!r} has no partition profiles")
        failing = entry.get("failing") or []
        failing = [failing] if isinstance(failing, str) else failing
        if not isinstance(failing, list) or not all(isinstance(f, str) for f in failing):
            raise _fail(f"{path}.failing", "want an NVML function name or a list of them")
        fabric = _fabric(entry["fabric"], f"{path}.fabric", manufacturer) if "fabric" in entry else None
        for _ in range(_int(entry.get("count", 1), f"{path}.count", minimum=1)):
            index = len(cards)
            if index >= MAX_CARDS:
                raise _fail(f"{path}.count", f"a node holds at most {MAX_CARDS} cards")
            cards.append(
                SimCard(
                    index=index,
                    uuid=card_uuid(node, index, manufacturer),
                    product=product,
                    partitioned=partitioned,
                    unhealthy=bool(entry.get("unhealthy", False)),
                    failing=frozenset(failing),
                    pci_bus_id=f"00000000:{(0x18 + index) % 256:02X}:00.0",
                    numa=index * 2 // total,
                    fabric=fabric,
                )
            )
    return NodeProfile(
        manufacturer=manufacturer,
        driver_version=str(raw.get("driverVersion") or driver),
        runtime_version=str(raw.get("runtimeVersion") or runtime),
        cards=tuple(cards),
    )


def _fabric(raw: Any, path: str, manufacturer: str) -> SimFabric:
    if manufacturer not in KINDS:
        raise _fail(path, f"{manufacturer} cards report no fabric domain here; one of {sorted(KINDS)} do")
    raw = _map(raw, path)
    unknown = set(raw) - {"id", "clique", "members", "state", "status"}
    if unknown:
        raise _fail(
            f"{path}.{sorted(unknown)[0]}", "unknown field; want id, clique, members, state or status"
        )
    ident = _str(raw.get("id"), f"{path}.id").lower()
    if manufacturer == "nvidia" and not HEX_UUID.match(ident):
        raise _fail(f"{path}.id", f"want the cluster UUID as 32 hex digits, got {raw.get('id')!r}")
    state = raw.get("state", "completed")
    if state not in FABRIC_STATES:
        raise _fail(f"{path}.state", f"want one of {list(FABRIC_STATES)}, got {state!r}")
    status = raw.get("status", "success")
    if status not in ("success", "error"):
        raise _fail(f"{path}.status", f"want success or error, got {status!r}")
    clique = raw.get("clique")
    return SimFabric(
        id=ident,
        clique=None if clique is None else _int(clique, f"{path}.clique"),
        members=_int(raw.get("members", 0), f"{path}.members"),
        state=state,
        failed=status == "error",
    )


def _total(entries: list) -> int:
    total = 0
    for entry in entries:
        count = entry.get("count", 1) if isinstance(entry, Mapping) else 1
        total += count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1
    return total


def load(path: str | Path, *, node: str) -> NodeProfile:
    """Read and parse a profile file; unreadable or malformed YAML is a :class:`ProfileError`."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ProfileError(f"{path}: cannot read the profile: {error.strerror or error}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ProfileError(f"{path}: not YAML: {error}") from None
    return parse(raw, node=node, source=str(path))
