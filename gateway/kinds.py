"""The kinds the gateway mirrors, how a subscriber names them, and the collections it serves."""

from __future__ import annotations

from dataclasses import dataclass

from api import GROUP, VERSION


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind the gateway can watch.  ``group`` other than the operator's (the dashboard's Nodes,
    Pods and Workloads) is taken as served without a discovery check (an informer of a kind a
    cluster does not serve just never lists); ``selector`` narrows the watch by label."""

    kind: str
    plural: str
    namespaced: bool
    group: str = GROUP
    selector: str = ""

    @property
    def operator(self) -> bool:
        """One of the operator's own kinds (served when its discovery document lists it)."""
        return self.group == GROUP


KINDS: dict[str, Kind] = {
    k.kind: k
    for k in (
        Kind("Devices", "devices", False),
        Kind("InstanceTypeFlavor", "instancetypeflavors", False),
        Kind("InstanceType", "instancetypes", False),
        Kind("Instance", "instances", True),
        Kind("InstancePersistentVolumeType", "instancepersistentvolumetypes", False),
        Kind("InstancePersistentVolume", "instancepersistentvolumes", True),
        Kind("InstanceImagePullSecret", "instanceimagepullsecrets", True),
        Kind("InstanceSSHPublicKey", "instancesshpublickeys", True),
    )
}
"""Every ``worker.gpustack.ai/v1`` kind a subscription may ask the gateway to watch."""

COLLECTIONS: dict[str, Kind] = {k.plural: k for k in KINDS.values() if k.kind != "Devices"}
"""``GET /apis/<plural>``: the seven collections (Devices is watched on request but not served)."""

AGGREGATED = frozenset({"InstanceType", "InstanceTypeFlavor"})
"""The kinds with a fleet view (``aggregated=true``)."""

REQUIRED = KINDS["InstanceType"]
"""The kind whose presence says the operator's API is served in a cluster."""


class GVKError(ValueError):
    pass


def parse_gvk(text: str) -> Kind:
    """``worker.gpustack.ai/v1/InstanceType`` (or ``v1/<Kind>`` for the core group) to its kind."""
    parts = text.split("/")
    if len(parts) == 2:
        group, version, kind = "", parts[0], parts[1]
    elif len(parts) == 3:
        group, version, kind = parts
    else:
        raise GVKError(f"gvk {text!r} is not group/version/Kind: write e.g. {GROUP}/{VERSION}/InstanceType")
    known = KINDS.get(kind)
    if group != GROUP or version != VERSION or known is None:
        names = ", ".join(f"{GROUP}/{VERSION}/{k}" for k in KINDS)
        raise GVKError(f"gvk {text!r} is not one the gateway mirrors; it mirrors {names}")
    return known
