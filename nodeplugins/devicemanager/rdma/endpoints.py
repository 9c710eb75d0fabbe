"""Which RDMA endpoints each key serves, and their tokens (C.4, C.5) — pure, over the records of
``Devices.spec.interfaces[]``.

=====================================  ============  =====================================  ======
key                                    family        endpoint                               tokens
=====================================  ============  =====================================  ======
``device.gpustack.ai/rdma``            exclusive     an interface (one whole interface)     1
``device.gpustack.ai/rdma.shared``     shared        an interface (one concurrent use)      64
``device.gpustack.ai/rdma.partitioned``  partitioned   one SR-IOV VF                          1
=====================================  ============  =====================================  ======

The mode is read off the node: a physical function (``sriov``) with VFs configured
(``virtualFunctions``) serves only ``partitioned``, its endpoints being those VFs; every other
interface serves exclusive and shared, the endpoint being itself.  An endpoint without a bound
RDMA device name is advertised in no mode.  Two records naming one RDMA device are one endpoint.

Token ids: ``<rdma device>`` (exclusive, partitioned) and ``<rdma device>:<n>`` (shared, n < 64).
Health: a ``failed`` link → Unhealthy (the tokens stay advertised: withdrawing an id strands the
kubelet's checkpoint); ``ok``, ``unverified`` or no link record → Healthy.  NUMA hint: the
endpoint's node, a VF's PF's when its own is blank, none when neither is known (never node 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.manufacturers import RDMA_KEYS
from nodeplugins.devicemanager.rdma.link import FAILED

EXCLUSIVE, SHARED, PARTITIONED = "exclusive", "shared", "partitioned"
FAMILIES = (EXCLUSIVE, SHARED, PARTITIONED)
KEY = dict(zip(FAMILIES, RDMA_KEYS, strict=True))
SHARED_TOKENS = 64


class Refusal(Exception):
    """An ``Allocate`` that cannot be served: the message says which token and why."""


@dataclass(frozen=True, slots=True)
class Key:
    """One RDMA device-plugin resource."""

    name: str  # the kubelet resource name
    family: str

    @property
    def socket(self) -> str:
        return f"gpustack-rdma-{self.family}.sock"


def keys(*, shared: bool = True, partitioned: bool = True) -> list[Key]:
    """The keys served: exclusive always; ``--no-shared`` / ``--no-partitioned`` drop the others."""
    wanted = [EXCLUSIVE] + ([SHARED] if shared else []) + ([PARTITIONED] if partitioned else [])
    return [Key(KEY[f], f) for f in wanted]


@dataclass(frozen=True, slots=True)
class Endpoint:
    device: str  # the bound RDMA device (what NCCL_IB_HCA names)
    interface: str  # the record's name: the interface, or the VF
    numa: str  # "" when unknown
    healthy: bool


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _healthy(record: Mapping[str, Any]) -> bool:
    link = record.get("link")
    return not (isinstance(link, Mapping) and link.get("state") == FAILED)


def _numa(text: str) -> str:
    return text if text.isdigit() else ""


def partitioned(record: Mapping[str, Any]) -> bool:
    """A PF with VFs configured: both facts are read, neither alone decides."""
    return bool(record.get("sriov")) and bool(record.get("virtualFunctions"))


def endpoints(interfaces: Iterable[Mapping[str, Any]], family: str) -> list[Endpoint]:
    out: list[Endpoint] = []
    seen: set[str] = set()

    def add(record: Mapping[str, Any], numa: str) -> None:
        device = _text(record.get("rdmaDevice"))
        if device and device not in seen:
            seen.add(device)
            out.append(Endpoint(device, _text(record.get("name")), numa, _healthy(record)))

    for record in interfaces:
        if not isinstance(record, Mapping):
            continue
        own_numa = _numa(_text(record.get("numaAffinity")))
        if partitioned(record):
            if family == PARTITIONED:
                for vf in record.get("virtualFunctions") or ():
                    if isinstance(vf, Mapping):
                        add(vf, _numa(_text(vf.get("numaAffinity"))) or own_numa)
        elif family in (EXCLUSIVE, SHARED):
            add(record, own_numa)
    return out


def token_ids(endpoint: Endpoint, family: str) -> list[str]:
    if family == SHARED:
        return [f"{endpoint.device}:{n}" for n in range(SHARED_TOKENS)]
    return [endpoint.device]


def tokens(interfaces: Iterable[Mapping[str, Any]], family: str) -> list[tuple[str, bool, str]]:
    """``(token id, healthy, numa)`` of every token the family advertises."""
    return [
        (token, endpoint.healthy, endpoint.numa)
        for endpoint in endpoints(interfaces, family)
        for token in token_ids(endpoint, family)
    ]


def granted(interfaces: Iterable[Mapping[str, Any]], family: str, ids: Sequence[str]) -> list[Endpoint]:
    """The endpoints behind the tokens kubelet granted, each once (several shared tokens of one
    interface are one endpoint); a token naming no endpoint of the family is refused."""
    by_token = {t: e for e in endpoints(interfaces, family) for t in token_ids(e, family)}
    out: list[Endpoint] = []
    unknown = [t for t in ids if t not in by_token]
    if unknown:
        raise Refusal(
            f"{KEY[family]}: token(s) {', '.join(map(repr, unknown))} name no {family} RDMA endpoint on "
            "this node (Devices.spec.interfaces[] changed since kubelet was told?); recreate the Pod"
        )
    for token in ids:
        endpoint = by_token[token]
        if endpoint not in out:
            out.append(endpoint)
    return out
