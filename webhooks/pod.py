"""Gate 1: the Pod webhooks (CREATE of Pods labelled ``kueue.x-k8s.io/queue-name``).

``mutate`` folds each memory budget into credit units (§5) and pins multi-card shared requests to
nodes with enough cards (§6.1); ``validate`` enforces the seven request rules (§4).  Everything else
passes untouched.  Both read the Pod through one pass of :func:`fastpath.requests.scan_pod`; Pods
stay plain dicts.

The fold's divisor is the per-card VRAM of the InstanceType found by
``schedule.gpustack.ai/queue-entrance=<queue>``, never the tenant-writable LocalQueue.  The fold is
recomputed on every call, overwriting client values, and the patch only names what changes, so a
reinvocation on the webhook's own output yields no patch.
"""

from __future__ import annotations

from typing import Any

from api import constants, units
from api.fielderrors import FieldError, forbidden, invalid, not_found, not_supported, required
from api.manufacturers import BY_NAME, UNITS_PER_CARD, UNITS_PER_PERCENT, publish_profile
from fastpath import quantity, requests
from webhooks import patch as jsonpatch
from webhooks.decision import Decision, allow, reject, retry_later
from webhooks.lookups import LookupFailed, Lookups
from webhooks.review import AdmissionRequest

KIND = "Pod"
QUEUE_LABEL_PATH = f"metadata.labels[{constants.KUEUE_QUEUE_NAME}]"
_MIB = 1 << 20
_SLICED_BIT = 1 << constants.DEVICE_MODE_SLICED
_PARTITIONED_BIT = 1 << constants.DEVICE_MODE_PARTITIONED


def _queued_pod(request: AdmissionRequest) -> tuple[dict[str, Any], str] | None:
    """The Pod and its queue name when this gate applies: a Pod CREATE carrying the queue label."""
    if request.operation != "CREATE" or request.kind != KIND or request.group:
        return None
    pod = request.object
    if not isinstance(pod, dict):
        return None
    labels = (pod.get("metadata") or {}).get("labels")
    queue = labels.get(constants.KUEUE_QUEUE_NAME) if isinstance(labels, dict) else None
    if not isinstance(queue, str) or not queue:
        return None
    return pod, queue


# --- The InstanceType behind the queue -----------------------------------------------------------------


class _Pool:
    """What gate 1 reads from the InstanceType fronting the Pod's queue."""

    __slots__ = ("group", "manufacturer", "name", "profiles", "vram_mib")

    def __init__(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        detail = (obj.get("status") or {}).get("detail") or {}
        self.name: str = meta.get("name") or ""
        self.group: str = spec.get("acceleratorGroup") or ""
        self.manufacturer: str = detail.get("manufacturer") or ""
        self.vram_mib = 0
        memory = detail.get("memory")
        if memory not in (None, ""):
            try:
                self.vram_mib = quantity.floor_div(memory, _MIB)
            except ValueError:
                self.vram_mib = 0
        physical = ((detail.get("slicedDetail") or {}).get("physical") or {}).get("profiles") or []
        # Published name (the key spelling) → memoryMib; T-Head's 4g48gb publishes as 4g.48gb.
        self.profiles: dict[str, int] = {}
        for entry in physical:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                mib = entry.get("memoryMib")
                self.profiles[publish_profile(self.manufacturer, entry["name"])] = (
                    mib if isinstance(mib, int) else 0
                )

    @property
    def observed(self) -> bool:
        """``status.detail`` is written (non-empty manufacturer) and names a card VRAM."""
        return bool(self.manufacturer) and self.vram_mib > 0


async def _pool(lookups: Lookups, queue: str) -> _Pool | None:
    obj = await lookups.instance_type_by_entrance(queue)
    return _Pool(obj) if obj is not None else None


def _no_pool(queue: str, why: str) -> FieldError:
    return not_found(
        QUEUE_LABEL_PATH,
        queue,
        f"no InstanceType carries {constants.LABEL_QUEUE_ENTRANCE}={queue}, yet {why}; set the label to the "
        "ENTRANCE of a pool (kubectl get instancetypes)",
    )


def _unobserved(pool: _Pool, queue: str, what: str) -> Decision:
    return retry_later(
        f"InstanceType {pool.name} (queue {queue}) has not been observed yet: its status.detail does "
        f"not name the card's manufacturer and VRAM, which {what} needs"
    )


# --- mutate ----------------------------------------------------------------------------------------------


async def mutate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    """Fold memory budgets into ``.sliced.units``/``.partitioned.units``, default
    ``.sliced.cores-percentage`` to 100, and pin ``.shared: N ≥ 2`` to nodes with N cards."""
    selected = _queued_pod(request)
    if selected is None:
        return allow()
    pod, queue = selected
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return allow()  # no containers, nothing to fold (the shape check refused a non-object)
    facts = requests.scan_pod(spec)
    if not facts.any_accelerator:
        return allow()
    name = request.display_name
    pin = facts.shared_max if facts.shared_max >= 2 else 0
    pool: _Pool | None = None
    if facts.needs_vram or pin:
        try:
            pool = await _pool(lookups, queue)
        except LookupFailed as error:
            return retry_later(f"cannot read the InstanceType behind queue {queue}: {error}")
        if pool is None:
            why = (
                f"a .shared request of {pin} cards needs its accelerator group"
                if pin and not facts.needs_vram
                else "a memory budget in MiB or a partition profile needs its card VRAM to be folded"
            )
            return reject(KIND, name, [_no_pool(queue, why)])
    if facts.needs_vram:
        assert pool is not None
        if not pool.observed:
            return _unobserved(pool, queue, "folding a MiB budget or a partition profile into units")
        if facts.profiles and (not pool.profiles or any(pool.profiles.get(p) == 0 for p in facts.profiles)):
            return retry_later(
                f"InstanceType {pool.name} (queue {queue}) lists no partition profiles with their memory "
                "yet (status.detail.slicedDetail.physical.profiles), which folding a partition needs"
            )

    ops: list[dict[str, Any]] = []
    errors: list[FieldError] = []
    for cf in facts.containers:
        writes = _fold(cf, pool, errors)
        if writes:
            ops.extend(_write_ops(spec, cf, writes))
    if errors:
        return reject(KIND, name, errors)
    if pin:
        assert pool is not None
        if not pool.group:
            return reject(
                KIND,
                name,
                [
                    invalid(
                        QUEUE_LABEL_PATH,
                        queue,
                        f"InstanceType {pool.name} fronting this queue names no spec.acceleratorGroup, so a "
                        f".shared request of {pin} cards cannot be pinned to nodes with that many; use the "
                        "ENTRANCE of an accelerated pool",
                    )
                ],
            )
        expression = {
            "key": constants.label_accelerator_count(pool.group),
            "operator": "Gt",
            "values": [str(pin - 1)],
        }
        ops.extend(required_affinity_ops(spec, "/spec", [expression]))
    return allow(ops)


def _fold(cf: Any, pool: _Pool | None, errors: list[FieldError]) -> dict[str, int]:
    """The keys this container must carry after the fold: ``{key: value}``."""
    writes: dict[str, int] = {}
    base = cf.base
    if cf.families & _SLICED_BIT:
        units = -1
        if 0 < cf.memory_percentage <= 100:  # the percentage is preferred when both are set
            units = cf.memory_percentage * UNITS_PER_PERCENT
        elif (
            cf.memory_percentage == requests.ABSENT
            and cf.memory_mib > 0
            and pool is not None
            and cf.memory_mib <= pool.vram_mib
        ):
            units = cf.memory_mib * UNITS_PER_CARD // pool.vram_mib
        if units >= 0:
            writes[base + ".sliced.units"] = units
        if cf.cores_percentage == requests.ABSENT:
            writes[base + ".sliced.cores-percentage"] = 100
    if cf.families & _PARTITIONED_BIT and cf.profiles and pool is not None:
        profile = cf.profiles[0]
        mib = pool.profiles.get(profile)
        if mib is None:
            key = BY_NAME[cf.manufacturer].profile_key(profile)
            path = f"{cf.resources_path}.{cf.source_of(key)}[{key}]"
            errors.append(not_supported(path, profile, sorted(pool.profiles)))
        else:
            writes[base + ".partitioned.units"] = mib * UNITS_PER_CARD // pool.vram_mib
    return writes


def _write_ops(spec: dict[str, Any], cf: Any, writes: dict[str, int]) -> list[dict[str, Any]]:
    """Minimal operations writing ``writes`` into the container's limits, mirrored into its
    requests when it has requests; a key already holding the value is left alone."""
    container = spec[cf.field][cf.index]
    resources = container["resources"]
    prefix = jsonpatch.pointer("spec", cf.field, cf.index, "resources")
    ops: list[dict[str, Any]] = []
    sections = ["limits"] + (["requests"] if cf.has_requests else [])
    for section in sections:
        current = resources.get(section)
        if not isinstance(current, dict):
            ops.append(
                jsonpatch.add(
                    f"{prefix}/{section}", {key: units.decimal(value) for key, value in writes.items()}
                )
            )
            continue
        for key, value in writes.items():
            if key in current and _same(current[key], value):
                continue
            ops.append(jsonpatch.add(f"{prefix}/{section}/{jsonpatch.escape(key)}", units.decimal(value)))
    return ops


def _same(existing: object, value: int) -> bool:
    try:
        return quantity.whole(existing) == value
    except ValueError:
        return False


def required_affinity_ops(
    spec: dict[str, Any], prefix: str, expressions: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """AND ``expressions`` into every required node-affinity term of the Pod spec at JSON pointer
    ``prefix``, adding a term when there is none.  A term that already carries an expression gets
    no operation for it, so applying the result and calling again yields nothing."""
    term = {"matchExpressions": list(expressions)}
    affinity = spec.get("affinity") if isinstance(spec, dict) else None
    if not isinstance(affinity, dict):
        return [
            jsonpatch.add(
                f"{prefix}/affinity",
                {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                    }
                },
            )
        ]
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, dict):
        return [
            jsonpatch.add(
                f"{prefix}/affinity/nodeAffinity",
                {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}},
            )
        ]
    path = f"{prefix}/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    selector = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(selector, dict):
        return [jsonpatch.add(path, {"nodeSelectorTerms": [term]})]
    terms = selector.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return [jsonpatch.add(f"{path}/nodeSelectorTerms", [term])]
    ops = []
    for i, existing in enumerate(terms):
        if not isinstance(existing, dict):
            ops.append(jsonpatch.replace(f"{path}/nodeSelectorTerms/{i}", term))
            continue
        if not existing.get("matchExpressions") and not existing.get("matchFields"):
            continue  # an empty term matches no node; ANDing into it would make it match some
        current = existing.get("matchExpressions")
        if not isinstance(current, list):
            ops.append(jsonpatch.add(f"{path}/nodeSelectorTerms/{i}/matchExpressions", list(expressions)))
            continue
        missing = [expression for expression in expressions if expression not in current]
        for j, expression in enumerate(missing):
            ops.append(
                jsonpatch.add(f"{path}/nodeSelectorTerms/{i}/matchExpressions/{len(current) + j}", expression)
            )
    return ops


# --- validate --------------------------------------------------------------------------------------------


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    """The seven request rules (§4), every violation reported at once."""
    selected = _queued_pod(request)
    if selected is None:
        return allow()
    pod, queue = selected
    facts = requests.scan_pod(pod.get("spec"))
    if not facts.any_accelerator:
        return allow()
    vram = 0
    if any(cf.memory_mib > 0 for cf in facts.containers):
        # The MiB bound uses the pool's card VRAM when the InstanceType is known; mutate has already
        # refused a Pod whose queue fronts none, so an unanswerable read only skips the bound.
        try:
            pool = await _pool(lookups, queue)
        except LookupFailed:
            pool = None
        if pool is not None and pool.observed:
            vram = pool.vram_mib
    errors = rules(facts, vram)
    if errors:
        return reject(KIND, request.display_name, errors)
    return allow()


def rules(facts: Any, vram_mib: int = 0) -> list[FieldError]:
    """The field errors of the seven request rules for a Pod's facts (``vram_mib`` 0: unknown)."""
    errors: list[FieldError] = []
    # Rule 1 — one family, one container group.
    families = facts.family_names()
    if len(families) > 1:
        errors.append(
            forbidden(
                "spec",
                f"a Pod may request only one accelerator family, found [{' '.join(families)}]; request every "
                "accelerator of the Pod as whole cards, shared cards, one logical slice or one partition",
            )
        )
    if facts.init_families and facts.app_families:
        errors.append(
            forbidden(
                "spec.initContainers",
                "a Pod's accelerator requests must all sit in one container group; spec.initContainers must "
                "give up its request, because its devices are held for the Pod's whole life while the "
                "scheduler charges the Pod only once (demand = max(Σinit, Σapp)); keep the claim on the app "
                "container, whose device is the same hardware",
            )
        )
    for cf in facts.containers:
        # Rule 7 — a native sidecar may not request an accelerator.
        if cf.group == requests.GROUP_SIDECAR and cf.claims():
            errors.append(
                forbidden(
                    f"{cf.resources_path}.{_claim_source(cf)}",
                    "a restartable init container (a native sidecar) may not request an accelerator; move "
                    "the request to an app container",
                )
            )
        if cf.families & _SLICED_BIT:
            _slice_rules(cf, vram_mib, errors)
        if cf.families & _PARTITIONED_BIT:
            _partition_rules(cf, errors)
    _card_count_bound(facts, errors)
    # Rule 4 — one profile shape per Pod.
    if len(facts.profiles) > 1:
        errors.append(
            forbidden(
                "spec",
                f"a Pod may request only one partition profile, found [{' '.join(sorted(facts.profiles))}]; "
                "request one profile, and one Pod per further instance",
            )
        )
    # Rule 6 — at most one container claims a slicing family.
    if facts.claimants > 1:
        errors.append(
            forbidden(
                "spec",
                f"at most one container may request a slicing family (sliced or partitioned), found "
                f"{facts.claimants}; keep the slice or partition on one container (an SSH sidecar asks for "
                "the visibility resource instead)",
            )
        )
    return errors


def _card_count_bound(facts: Any, errors: list[FieldError]) -> None:
    """Whole cards stay countable: the init group's sum, and the app containers' with their
    sidecars' (the two sums of ``demand = max(Σinit, Σapp)``), must stay below
    ``requests.COUNT_CAP`` (2**62), where the scheduler's counts saturate; the refusal names the key
    that brings its group's sum there."""
    sums = [0, 0]  # init group, the rest
    for cf in facts.containers:
        if cf.exclusive <= 0:
            continue
        group = 0 if cf.group == requests.GROUP_INIT else 1
        if sums[group] >= requests.COUNT_CAP:
            continue  # this group was refused at an earlier container
        sums[group] += cf.exclusive
        if sums[group] < requests.COUNT_CAP:
            continue
        for entry in cf.keys:
            if entry.family == "exclusive" and entry.manufacturer == cf.manufacturer:
                what = "init containers" if group == 0 else "app containers and sidecars"
                errors.append(
                    invalid(
                        f"{cf.resources_path}.{entry.source}[{entry.key}]",
                        entry.value,
                        f"with it the whole cards the Pod's {what} ask for add up to 2^62 "
                        f"({requests.COUNT_CAP}) or more, which the scheduler cannot count; a Pod runs "
                        "on one node: ask for at most the cards one node carries",
                    )
                )
                break


def _claim_source(cf: Any) -> str:
    """``limits`` when any accelerator claim of the container sits there, else ``requests``."""
    for entry in cf.keys:
        if entry.family != "visibility" and entry.source == "limits":
            return "limits"
    return "requests"


def _path(cf: Any, key: str) -> str:
    return f"{cf.resources_path}.{cf.source_of(key)}[{key}]"


def _slice_rules(cf: Any, vram_mib: int, errors: list[FieldError]) -> None:
    """Rule 2: ``<base>.sliced`` is exactly 1, with exactly one valid memory budget."""
    base = cf.base
    token = base + ".sliced"
    percent_key = token + ".memory-percentage"
    mib_key = token + ".memory-mib"
    if cf.sliced == requests.ABSENT:
        errors.append(
            required(
                f"{cf.resources_path}.limits[{token}]",
                f'a logical slice request must set {token}: "1" beside its memory budget',
            )
        )
    elif cf.sliced != 1:
        errors.append(
            invalid(
                _path(cf, token),
                cf.value_of(token),
                "a logical slice request is always a single accelerator; multi-accelerator logical slicing is "
                f"not supported yet: request several Pods, or whole accelerators with {base}",
            )
        )
    has_percent = cf.memory_percentage != requests.ABSENT
    has_mib = cf.memory_mib != requests.ABSENT
    if not has_percent and not has_mib:
        errors.append(
            required(
                f"{cf.resources_path}.limits",
                f"a {token} request must set {percent_key} or {mib_key}",
            )
        )
    elif has_percent and has_mib:
        errors.append(
            forbidden(
                _path(cf, mib_key),
                f"cannot set both {percent_key} and {mib_key}; keep one memory budget",
            )
        )
    if has_percent and not 0 < cf.memory_percentage <= 100:
        errors.append(
            invalid(
                _path(cf, percent_key),
                cf.value_of(percent_key),
                "must be a whole percentage of one accelerator's memory in (0, 100]",
            )
        )
    if has_mib:
        if cf.memory_mib <= 0:
            errors.append(
                invalid(_path(cf, mib_key), cf.value_of(mib_key), "must be a positive whole number of MiB")
            )
        elif vram_mib and cf.memory_mib > vram_mib:
            errors.append(
                invalid(
                    _path(cf, mib_key),
                    cf.value_of(mib_key),
                    f"exceeds the pool's per-accelerator VRAM of {vram_mib} MiB; ask for at most {vram_mib} "
                    "MiB, or for whole accelerators",
                )
            )
    cores_key = token + ".cores-percentage"
    if cf.cores_percentage != requests.ABSENT and not 0 < cf.cores_percentage <= 100:
        errors.append(
            invalid(
                _path(cf, cores_key),
                cf.value_of(cores_key),
                "must be a whole percentage of one accelerator's compute in (0, 100] (omitted: 100)",
            )
        )


def _partition_rules(cf: Any, errors: list[FieldError]) -> None:
    """Rules 3 and 5: ``<base>.partitioned`` is exactly 1 and names a profile; each profile key is 1."""
    base = cf.base
    token = base + ".partitioned"
    kind = BY_NAME[cf.manufacturer].partition_kind if cf.manufacturer in BY_NAME else "mig"
    if cf.partitioned == requests.ABSENT:
        errors.append(
            required(
                f"{cf.resources_path}.limits[{token}]",
                f'a partition request must set {token}: "1" beside its profile',
            )
        )
    elif cf.partitioned != 1:
        errors.append(
            invalid(
                _path(cf, token),
                cf.value_of(token),
                "a partition request is always a single accelerator; request one Pod per instance",
            )
        )
    if not cf.profiles:
        errors.append(
            required(
                f"{cf.resources_path}.limits",
                f"a {token} request must name a profile, e.g. {token}.{kind}-<profile>",
            )
        )
    for entry in cf.keys:
        if entry.role == "profile" and entry.count != 1:
            errors.append(
                invalid(
                    f"{cf.resources_path}.{entry.source}[{entry.key}]",
                    entry.value,
                    "a partition profile request must be exactly 1 instance",
                )
            )
