"""``ModelStoreBinding`` admission (model-delivery spec §2.3, §3.5 rule 1): a namespace's byte budget
and its right to pin, over named ModelStores.

- ``spec.storeRefs``: 1 to 8 distinct names, immutable (re-pointing a grant strands the accounting
  of everything admitted under it); the stores need not exist yet (the status reports them);
- ``spec.quota.bytes``: a quantity of bytes, which may only grow (a grant that shrank under
  consumption would make admitted prefetches over budget retroactively);
- ``spec.allowPinned`` may only change from false to true.
"""

from __future__ import annotations

from typing import Any

from api import delivery as d
from api.objects import as_dict, as_list
from webhooks.decision import Decision, FieldError, allow, duplicate, forbidden, invalid, reject, required
from webhooks.kvcache.values import dig, quantity_bytes
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

MAX_STORES = 8


def _refs(spec: Any) -> list[Any]:
    return [dig(ref, "name") for ref in as_list(dig(spec, "storeRefs"))]


def spec_errors(spec: Any, old_spec: Any | None) -> list[FieldError]:
    found: list[FieldError] = []
    spec = as_dict(spec)
    refs = spec.get("storeRefs")
    if not isinstance(refs, list) or not refs:
        found.append(required("spec.storeRefs", "name at least one ModelStore this namespace may use"))
    else:
        if len(refs) > MAX_STORES:
            found.append(invalid("spec.storeRefs", len(refs), f"names at most {MAX_STORES} ModelStores"))
        seen: set[str] = set()
        for index, name in enumerate(_refs(spec)):
            if not isinstance(name, str) or not name:
                found.append(required(f"spec.storeRefs[{index}].name", "name a ModelStore"))
            elif name in seen:
                found.append(duplicate(f"spec.storeRefs[{index}].name", name, "name each ModelStore once"))
            else:
                seen.add(name)
    quota = dig(spec, "quota", "bytes")
    size = quantity_bytes(quota)
    if quota is None:
        found.append(required("spec.quota.bytes", "state the namespace's budget, e.g. 200Gi"))
    elif size is None or size < 0:
        found.append(invalid("spec.quota.bytes", quota, "must be a quantity of bytes, e.g. 200Gi"))
    pinned = spec.get("allowPinned")
    if pinned is not None and not isinstance(pinned, bool):
        found.append(invalid("spec.allowPinned", pinned, "must be true or false"))
    if old_spec is None:
        return found
    old_spec = as_dict(old_spec)
    if _refs(spec) != _refs(old_spec):
        found.append(
            forbidden(
                "spec.storeRefs",
                "is immutable: re-pointing a grant strands the accounting of everything admitted under it; "
                "create another ModelStoreBinding for other stores",
            )
        )
    before = quantity_bytes(dig(old_spec, "quota", "bytes"))
    if size is not None and before is not None and size < before:
        found.append(
            forbidden(
                "spec.quota.bytes",
                f"may only grow ({dig(old_spec, 'quota', 'bytes')} -> {quota}): a smaller budget would make "
                "prefetches admitted under it over budget; delete prefetches, then create another "
                "ModelStoreBinding with the smaller budget",
            )
        )
    if old_spec.get("allowPinned") is True and pinned is not True:
        found.append(
            forbidden(
                "spec.allowPinned",
                "may only change from false to true: pins already admitted rely on it; create another "
                "ModelStoreBinding without pinning instead",
            )
        )
    return found


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object
    if not isinstance(obj, dict):
        return allow()
    old = (
        request.old_object if request.operation == "UPDATE" and isinstance(request.old_object, dict) else None
    )
    errors = spec_errors(obj.get("spec"), old.get("spec") if old is not None else None)
    return reject(d.KIND_BINDING, request.display_name, errors) if errors else allow()
