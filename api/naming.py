"""Names the operator derives: FNV-1a hashes, LocalQueue names, pool and flavor names.

``local_queue_name("gpustack--nvidia-a10g-linux-amd64") == "gpustack-fnv64-c4680bb149644f1c"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from api import constants
from api.constants import GENERIC_GROUP, LOCAL_QUEUE_PREFIX, NAME_PREFIX

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def is_dns_subdomain(name: str) -> bool:
    """A DNS-1123 subdomain: what most object names and label-key prefixes must be."""
    return 0 < len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def is_qualified_name(key: str) -> bool:
    """A label or annotation key: an optional DNS-subdomain prefix and ``/``, then a name of at
    most 63 characters (alphanumerics, ``-``, ``_``, ``.``, alphanumeric at both ends)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (prefix.count("/") or not is_dns_subdomain(prefix)):
        return False
    return len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF


def fnv1a64(data: bytes | str) -> str:
    """FNV-1a 64 of ``data`` as 16 lowercase hex digits."""
    raw = data.encode() if isinstance(data, str) else data
    value = _FNV64_OFFSET
    for byte in raw:
        value = ((value ^ byte) * _FNV64_PRIME) & _MASK64
    return f"{value:016x}"


def local_queue_name(cluster_queue: str) -> str:
    """The LocalQueue fronting a ClusterQueue (= InstanceType) in every tenant namespace; 31 chars."""
    return LOCAL_QUEUE_PREFIX + fnv1a64(cluster_queue)


def topology_profile(level_keys: Iterable[str]) -> str:
    """``fnv64-<hex>`` over the ordered level keys joined by NUL bytes (hostname included)."""
    return "fnv64-" + fnv1a64(b"\x00".join(key.encode() for key in level_keys))


def instance_type_name(
    os: str, arch: str, accelerator_group: str = "", general_group: str = "", aware_cpu: bool = False
) -> str:
    """The pool's ClusterQueue / InstanceType name (§8 of the devices spec)."""
    if aware_cpu and general_group and general_group != GENERIC_GROUP:
        head = f"{NAME_PREFIX}{general_group}"
        return f"{head}--{accelerator_group}-{os}-{arch}" if accelerator_group else f"{head}-{os}-{arch}"
    if accelerator_group:
        return f"{NAME_PREFIX}{accelerator_group}-{os}-{arch}"
    return f"{NAME_PREFIX}{GENERIC_GROUP}-{os}-{arch}"


def schedule_labels(spec: Mapping[str, Any], aware_cpu: bool) -> dict[str, str]:
    """The labels a pool's ClusterQueue and InstanceType carry: the node labels that select it."""
    labels = {
        constants.LABEL_ACCELERATABLE: "true" if spec.get("acceleratable") else "false",
        constants.LABEL_OS: spec.get("os") or "",
        constants.LABEL_ARCH: spec.get("arch") or "",
    }
    group = spec.get("acceleratorGroup") or ""
    if spec.get("acceleratable") and group:
        labels[constants.label_accelerator_group(group)] = "true"
    general = spec.get("generalGroup") or constants.GENERIC_GROUP
    if aware_cpu and general != constants.GENERIC_GROUP:
        labels[constants.label_general_group(general)] = "true"
    return {key: value for key, value in labels.items() if value}
