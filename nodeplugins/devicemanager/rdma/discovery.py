"""One pass over the node's network interfaces: ``Devices.spec.interfaces[]`` records (C.1).

Enumeration starts at ``class/net`` (the authoritative list); each interface's device is resolved as
an attribute of it:

- ``device`` → its bus (``device/subsystem``), and for PCI its address, ``pciRootId`` and
  ``pciSwitches`` (:mod:`.pci`), ``vendor``/``device`` ids, ``numa_node`` (``-1`` = unknown = ""),
  ``local_cpulist``; an interface with no device is ``virtual`` (under ``devices/virtual``) or, on
  another bus, reports that bus and no PCI field;
- ``device/infiniband/<dev>`` → the RDMA binding (``rdma``, ``rdmaDevice``) and the link verdict
  over ``<dev>/ports/*/{state,phys_state}`` (:mod:`.link`); a tree that exists and cannot be read
  records ``rdma: false`` with an ``unverified`` verdict;
- ``device/sriov_totalvfs`` (or ``sriov_numvfs``) → a physical function (``sriov``), its
  ``virtfn*`` links → its VFs, **nested** under it with their own address, NUMA node, CPU list, RDMA
  device and verdict; a VF's own ``class/net`` entry is not listed again at the top;
- MTU and operational state come from netlink (:mod:`.netlink`), by interface name.

Records omit empty values (as the API's ``omitempty`` does) and are sorted (top level by name, VFs
by address), so two passes over unchanged hardware compare equal.  Only an unlistable ``class/net``
fails the pass (:class:`EnumerationError`); what cannot be read of one interface is left unknown.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodeplugins.devicemanager.rdma import link as verdicts
from nodeplugins.devicemanager.rdma import pci
from nodeplugins.devicemanager.rdma.netlink import LinkFacts
from nodeplugins.devicemanager.rdma.sysfs import Sysfs, Unreadable

log = logging.getLogger("devicemanager.rdma")
_VIRTFN = re.compile(r"^virtfn(\d+)$")
_HEX_ID = re.compile(r"^(0x)?([0-9a-fA-F]{1,8})$")
_CPU_LIST = re.compile(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")
_RDMA_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # it becomes token ids and NCCL_IB_HCA


class EnumerationError(RuntimeError):
    """The interface list itself could not be read: keep what was recorded."""


def _text(value: str | Unreadable | None) -> str:
    return value if isinstance(value, str) else ""


def _numa(sysfs: Sysfs, device: Path) -> str:
    value = _text(sysfs.read(device / "numa_node"))
    return value if value.isdigit() else ""  # -1: the kernel gave none; never read as node 0


def _cpu_list(sysfs: Sysfs, device: Path) -> str:
    value = _text(sysfs.read(device / "local_cpulist"))
    return value if len(value) <= 1024 and _CPU_LIST.match(value) else ""


def _hex_id(sysfs: Sysfs, path: Path) -> str:
    found = _HEX_ID.match(_text(sysfs.read(path)))
    return found.group(2).lower() if found else ""


def _ports(sysfs: Sysfs, rdma_dir: Path, device: str) -> dict[str, Any]:
    names = sysfs.listdir(rdma_dir / "ports")
    if isinstance(names, Unreadable):
        return verdicts.verdict(device, None, names.why)
    ports = []
    for name in names or ():
        values: list[str | None] = []
        problems: list[str] = []
        for attribute in ("state", "phys_state"):
            value = sysfs.read(rdma_dir / "ports" / name / attribute)
            if isinstance(value, str):
                values.append(value)
                continue
            values.append(None)
            problems.append(f"{attribute} {value.why if value else 'missing'}")
        ports.append(verdicts.Port(name, values[0], values[1], "; ".join(problems)))
    return verdicts.verdict(device, ports)


def _rdma(sysfs: Sysfs, device: Path) -> dict[str, Any]:
    """``rdma``, ``rdmaDevice`` and ``link`` of the function at ``device`` (empty: none bound)."""
    found = sysfs.listdir(device / "infiniband")
    if found is None:
        return {}
    if isinstance(found, Unreadable):
        return {"link": verdicts.unreadable_tree(str(found))}
    if not found:
        return {}
    name = found[0]
    if not _RDMA_NAME.match(name):
        return {"link": verdicts.unreadable_tree(f"{name[:64]!r} is no RDMA device name")}
    rdma_dir = sysfs.resolve(device / "infiniband" / name)
    if not isinstance(rdma_dir, Path):
        return {"link": verdicts.unreadable_tree(str(rdma_dir or f"{name} vanished"))}
    return {"rdma": True, "rdmaDevice": name, "link": _ports(sysfs, rdma_dir, name)}


def _facts(record: dict[str, Any], facts: Mapping[str, LinkFacts]) -> None:
    known = facts.get(record["name"])
    if known is not None:
        if known.mtu > 0:
            record["mtu"] = known.mtu
        record["up"] = known.up


def _compact(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if v not in ("", None, False, 0, [], ())}


def _function(sysfs: Sysfs, device: Path) -> dict[str, Any]:
    """NUMA, CPU list and RDMA facts every PCI function carries (PF and VF alike)."""
    return {
        "numaAffinity": _numa(sysfs, device),
        "cpuAffinity": _cpu_list(sysfs, device),
        **_rdma(sysfs, device),
    }


def _virtual_functions(
    sysfs: Sysfs, device: Path, facts: Mapping[str, LinkFacts]
) -> tuple[list[dict[str, Any]], set[Path]]:
    entries = sysfs.listdir(device)
    links = sorted(
        (int(m.group(1)), e)
        for e in (entries if isinstance(entries, list) else ())
        if (m := _VIRTFN.match(e))
    )
    out: list[dict[str, Any]] = []
    paths: set[Path] = set()
    for _n, entry in links:
        vf = sysfs.resolve(device / entry)
        if not isinstance(vf, Path):
            continue
        paths.add(vf)
        nets = sysfs.listdir(vf / "net")
        address = vf.name.lower() if pci.is_address(vf.name.lower()) else ""
        name = nets[0] if isinstance(nets, list) and nets else address or entry
        record: dict[str, Any] = {"name": name, "pciBusId": address, **_function(sysfs, vf)}
        _facts(record, facts)
        out.append(_compact(record))
    out.sort(key=lambda r: (r.get("pciBusId", ""), r["name"]))
    return out, paths


def _interface(
    sysfs: Sysfs, name: str, facts: Mapping[str, LinkFacts]
) -> tuple[dict[str, Any], Path | None, set[Path]]:
    """One top-level record, the real path of its device, and the devices of its VFs."""
    record: dict[str, Any] = {"name": name}
    found = sysfs.resolve(f"class/net/{name}")
    if not isinstance(found, Path):
        log.warning("interface directory unreadable", extra={"interface": name, "reason": str(found)})
        return record, None, set()
    parts = found.relative_to(sysfs.root).parts
    device = sysfs.resolve(found / "device")
    _facts(record, facts)
    if not isinstance(device, Path):
        record["virtual"] = parts[:2] == ("devices", "virtual")
        return _compact(record), None, set()
    subsystem = sysfs.resolve(device / "subsystem")
    record["bus"] = subsystem.name if isinstance(subsystem, Path) else ""
    vfs: list[dict[str, Any]] = []
    vf_paths: set[Path] = set()
    if record["bus"] == "pci":
        place = pci.coordinates(device.relative_to(sysfs.root).parts)
        if place is not None:
            record.update(pciBusId=place.bus_id, pciRootId=place.root_id, pciSwitches=list(place.switches))
        record["pciVendor"] = _hex_id(sysfs, device / "vendor")
        record["pciDevice"] = _hex_id(sysfs, device / "device")
        if sysfs.exists(device / "sriov_totalvfs") or sysfs.exists(device / "sriov_numvfs"):
            record["sriov"] = True
            vfs, vf_paths = _virtual_functions(sysfs, device, facts)
    record.update(_function(sysfs, device))
    record["virtualFunctions"] = vfs
    return _compact(record), device, vf_paths


def discover(sysfs: Sysfs, facts: Mapping[str, LinkFacts]) -> list[dict[str, Any]]:
    """Every interface of ``class/net``, VFs nested under their PF, sorted by name."""
    names = sysfs.listdir("class/net")
    if names is None:
        raise EnumerationError(f"{sysfs.root}/class/net does not exist")
    if isinstance(names, Unreadable):
        raise EnumerationError(f"{sysfs.root}/class/net cannot be listed: {names.why}")
    found = [_interface(sysfs, name, facts) for name in names]
    nested = set().union(*(paths for _r, _d, paths in found)) if found else set()
    records = [record for record, device, _p in found if device is None or device not in nested]
    return sorted(records, key=lambda r: r["name"])


def pci_place(sysfs: Sysfs, address: str) -> pci.Coordinates | None:
    """Where the PCI function ``address`` sits, by the same walk (``bus/pci/devices/<address>``);
    ``None`` when this sysfs tree does not hold it."""
    if not pci.is_address(address.lower()):
        return None
    found = sysfs.resolve(f"bus/pci/devices/{address.lower()}")
    if not isinstance(found, Path):
        return None
    return pci.coordinates(found.relative_to(sysfs.root).parts)
