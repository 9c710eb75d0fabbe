"""Whether an Instance's claims let its Pod be created, and where they pin it (instances spec A.8).

Under ``instance-persistent-volume-placement`` (default on) a bound claim adds its
PersistentVolume's required node affinity to the Pod, and an unbound claim creates no Pod: the
Instance's ``phaseMessage`` says which claim it waits for.  A claim whose StorageClass binds on
first use (``WaitForFirstConsumer``) binds only once a Pod uses it, so that Pod is created and the
scheduler places it.  With the Setting off the Pod is built from the claim names alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    blocked: str = ""  # why no Pod may be created yet ("" when it may)
    node_selector: Mapping[str, Any] | None = None  # the bound volume's required NodeSelector


def verdict(
    name: str,
    claim: Mapping[str, Any] | None,
    volume: Mapping[str, Any] | None,
    storage_class: Mapping[str, Any] | None,
    *,
    placement: bool,
) -> ClaimVerdict:
    """The verdict for claim ``name``; ``volume`` is its bound PersistentVolume, ``storage_class``
    its StorageClass (either ``None`` when absent or not read)."""
    if claim is None:
        return ClaimVerdict(
            f"PersistentVolumeClaim {name} does not exist; create the InstancePersistentVolume {name}"
        )
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        return ClaimVerdict(f"PersistentVolumeClaim {name} is being deleted")
    if not placement:
        return ClaimVerdict()
    phase = (claim.get("status") or {}).get("phase") or "Pending"
    if phase == "Bound":
        bound_to = (claim.get("spec") or {}).get("volumeName") or ""
        if volume is None:
            return ClaimVerdict(
                f"PersistentVolumeClaim {name} is bound to {bound_to or 'a volume'} not yet readable"
            )
        required = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required")
        return ClaimVerdict(node_selector=required or None)
    if phase == "Pending" and (storage_class or {}).get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER:
        return ClaimVerdict()
    return ClaimVerdict(
        f"PersistentVolumeClaim {name} is {phase}, not bound: the Pod is created once the claim binds"
    )
