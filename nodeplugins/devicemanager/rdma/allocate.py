"""What ``Allocate`` hands a container for the RDMA endpoints it was granted (C.6).

- per endpoint, its verbs character device ``/dev/infiniband/uverbs<N>``, found first through
  ``class/infiniband_verbs/uverbs*/ibdev == <rdma device>``, then through the ``infiniband_verbs``
  directory under the RDMA device's hardware parent (``class/infiniband/<dev>/..``); a device found
  in neither fails the allocation naming both layouts;
- once per response, ``/dev/infiniband/rdma_cm`` when the host has it;
- ``NCCL_IB_HCA`` = the granted RDMA device names, comma-joined.

Device nodes are handed one by one, never the ``/dev/infiniband`` directory.  The container path is
always ``/dev/infiniband/...``; the host path is the same file under ``--dev-root`` (``/dev`` on a
node; a simulated tree in tests).  Nothing is recorded: the response is recomputed each time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodeplugins.devicemanager.rdma.endpoints import Endpoint, Refusal
from nodeplugins.devicemanager.rdma.sysfs import Sysfs

CONTAINER_DIR = "/dev/infiniband"
RDMA_CM = "rdma_cm"
ENV_HCA = "NCCL_IB_HCA"


@dataclass
class Handover:
    envs: dict[str, str] = field(default_factory=dict)
    devices: list[tuple[str, str, str]] = field(default_factory=list)  # container path, host path, perms


def _entries(sysfs: Sysfs, rel: str | Path) -> list[str]:
    found = sysfs.listdir(rel)
    return found if isinstance(found, list) else []


def _by_class(sysfs: Sysfs, device: str) -> str | None:
    for name in _entries(sysfs, "class/infiniband_verbs"):
        if sysfs.read(f"class/infiniband_verbs/{name}/ibdev") == device:
            return name
    return None


def _by_parent(sysfs: Sysfs, device: str) -> str | None:
    rdma_dir = sysfs.resolve(f"class/infiniband/{device}")
    if not isinstance(rdma_dir, Path):
        return None
    verbs = (
        rdma_dir.parent.parent / "infiniband_verbs"
    )  # <parent>/infiniband/<dev> → <parent>/infiniband_verbs
    names = [n for n in _entries(sysfs, verbs) if n.startswith("uverbs")]
    matching = [n for n in names if sysfs.read(verbs / n / "ibdev") == device]
    if matching:
        return matching[0]
    return names[0] if len(names) == 1 else None


def verbs_device(sysfs: Sysfs, device: str) -> str:
    """``uverbs<N>`` of RDMA device ``device``."""
    found = _by_class(sysfs, device) or _by_parent(sysfs, device)
    if found is None:
        raise Refusal(
            f"RDMA device {device!r} has no verbs character device: neither "
            f"{sysfs.root}/class/infiniband_verbs/uverbs*/ibdev names it, nor is there one under "
            f"{sysfs.root}/class/infiniband/{device}/../../infiniband_verbs; is the ib_uverbs module loaded?"
        )
    return found


def handover(sysfs: Sysfs, dev_root: str | Path, endpoints: Sequence[Endpoint]) -> Handover:
    out = Handover()
    host_dir = Path(dev_root) / "infiniband"
    for endpoint in endpoints:
        name = verbs_device(sysfs, endpoint.device)
        out.devices.append((f"{CONTAINER_DIR}/{name}", str(host_dir / name), "rw"))
    if endpoints and os.path.exists(host_dir / RDMA_CM):
        out.devices.append((f"{CONTAINER_DIR}/{RDMA_CM}", str(host_dir / RDMA_CM), "rw"))
    if endpoints:
        out.envs[ENV_HCA] = ",".join(e.device for e in endpoints)
    return out
