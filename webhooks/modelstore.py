"""``ModelStore`` admission (model-delivery spec §2.3): one node pool's cache policy.

- ``spec.nodeSelector`` is required and must parse as a label selector (``{}`` selects every node);
- ``spec.watermarks`` states both percentages, ``lowPercent`` below ``highPercent``;
- ``spec.download.concurrency`` 1..64 and ``spec.download.bytesPerSecond`` ≥ 0 when stated (an
  explicit ``0`` is "unlimited on this pool", not an omission);
- a store whose selector shares nodes with another store is admitted with a warning: both report
  ``SelectorOverlap`` and the alphabetically first wins the shared nodes, a tie-break, not a policy.
"""

from __future__ import annotations

from typing import Any

from api import delivery as d
from api import prefetch as pf
from api.objects import as_dict
from api.selectors import problems
from webhooks.decision import Decision, FieldError, allow, invalid, reject, required
from webhooks.kvcache.values import dig
from webhooks.lookups import LookupFailed, Lookups
from webhooks.review import AdmissionRequest


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def spec_errors(spec: Any) -> list[FieldError]:
    found: list[FieldError] = []
    spec = as_dict(spec)
    selector = spec.get("nodeSelector")
    if selector is None:
        found.append(
            required(
                "spec.nodeSelector",
                "select the store's nodes, e.g. matchLabels: {pool: a100}; {} selects every node",
            )
        )
    else:
        for where, why in problems(selector):
            found.append(
                invalid(f"spec.nodeSelector{'.' + where if where else ''}", dig(spec, "nodeSelector"), why)
            )
    marks = spec.get("watermarks")
    if marks is not None:
        high, low = dig(marks, "highPercent"), dig(marks, "lowPercent")
        if not _integer(high) or not 2 <= high <= 95:
            found.append(invalid("spec.watermarks.highPercent", high, "must be an integer from 2 to 95"))
        if not _integer(low) or not 1 <= low <= 94:
            found.append(invalid("spec.watermarks.lowPercent", low, "must be an integer from 1 to 94"))
        elif _integer(high) and low >= high:
            found.append(
                invalid(
                    "spec.watermarks.lowPercent",
                    low,
                    f"must be below highPercent ({high}): collection removes down to the low watermark; "
                    "lower it or raise highPercent",
                )
            )
    download = spec.get("download")
    if download is not None:
        concurrency = dig(download, "concurrency")
        if concurrency is not None and (not _integer(concurrency) or not 1 <= concurrency <= 64):
            found.append(invalid("spec.download.concurrency", concurrency, "must be an integer from 1 to 64"))
        rate = dig(download, "bytesPerSecond")
        if rate is not None and (not _integer(rate) or rate < 0):
            found.append(
                invalid(
                    "spec.download.bytesPerSecond",
                    rate,
                    "must be a whole number of bytes per second, 0 for unlimited on this pool; "
                    "leave it out to keep the cluster's model-store-download-bandwidth",
                )
            )
    return found


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object
    if not isinstance(obj, dict):
        return allow()
    errors = spec_errors(obj.get("spec"))
    if errors:
        return reject(d.KIND_STORE, request.display_name, errors)
    try:
        return allow(warnings=await _overlaps(obj, request.display_name, lookups))
    except LookupFailed:
        return allow()  # the overlap is a warning only; the store's status reports it anyway


async def _overlaps(obj: dict[str, Any], name: str, lookups: Lookups) -> list[str]:
    others = [s for s in await lookups.list(d.KIND_STORE) if pf.name_of(s) != name]
    if not others:
        return []
    shared: dict[str, int] = {}
    for node in await lookups.list("Node"):
        if not pf.store_selects(obj, node):
            continue
        for other in others:
            if pf.store_selects(other, node):
                shared[pf.name_of(other)] = shared.get(pf.name_of(other), 0) + 1
    return [
        f"spec.nodeSelector shares {count} node(s) with ModelStore {other}: both report SelectorOverlap and "
        f"{min(name, other)} (alphabetically first) governs them; narrow one of the selectors"
        for other, count in sorted(shared.items())
    ]
