"""What a Pod asks of its accelerators: in one pass over ``spec.containers`` and
``spec.initContainers``, every fact the seven request rules, the credits fold, the card-count pin,
gate 3 and the Workload pin read, each key classified by ``fastpath.keys`` (§3.2).

Values come from ``limits``, else ``requests``.  Containers fall in three groups: the **init** group
(init containers without ``restartPolicy: Always``), the **app** group (``spec.containers``) and
**native sidecars** (init containers with ``restartPolicy: Always``), which belong to neither.

Pod objects stay plain dicts here.  Compiled by Cython in pure-Python mode: counts are C integers.
"""

from __future__ import annotations

import cython

from api.constants import FAMILY_NAMES
from api.manufacturers import UNITS_PER_CARD, UNITS_PER_PERCENT, UNITS_PER_SHARE
from fastpath.cards import Demand
from fastpath.keys import ROLE_NAMES

if not cython.compiled:  # compiled, these come from the .pxd files requests.pxd cimports
    from api.constants import (
        DEVICE_MODE_EXCLUSIVE,
        DEVICE_MODE_PARTITIONED,
        DEVICE_MODE_SHARED,
        DEVICE_MODE_SLICED,
        DEVICE_MODE_VISIBILITY,
    )
    from fastpath.cards import new_demand
    from fastpath.keys import (
        ROLE_MEMORY_MIB,
        ROLE_MEMORY_PERCENT,
        ROLE_PROFILE,
        ROLE_TOKEN,
        ROLE_UNITS,
        classify_code,
        key_fact,
        manufacturer_base,
        manufacturer_name,
        profile_of,
    )
    from fastpath.quantity import small_whole, whole

GROUP_INIT = 0
GROUP_APP = 1
GROUP_SIDECAR = 2
GROUP_NAMES = ("init", "app", "sidecar")

# A count that is absent, or not a non-negative whole number.
ABSENT = -1
INVALID = -2
# Larger whole values are clamped here, and so are the sums of counts (``PodFacts.demand``): no rule
# tells them apart, and compiled, a sum of two clamped counts would wrap a C ``long long``.
COUNT_CAP = 1 << 62
_HUGE = cython.declare(cython.longlong, COUNT_CAP)

_SLICING_MASK = cython.declare(cython.int, (1 << DEVICE_MODE_SLICED) | (1 << DEVICE_MODE_PARTITIONED))
_ACCELERATOR_MASK = cython.declare(
    cython.int,
    (1 << DEVICE_MODE_EXCLUSIVE)
    | (1 << DEVICE_MODE_SHARED)
    | (1 << DEVICE_MODE_SLICED)
    | (1 << DEVICE_MODE_PARTITIONED),
)

_ACCELERATOR_FAMILIES = (
    DEVICE_MODE_EXCLUSIVE,
    DEVICE_MODE_SHARED,
    DEVICE_MODE_SLICED,
    DEVICE_MODE_PARTITIONED,
)

# C-level twins of the Python names above, for the compiled loops (a module global is a dict lookup).
_GROUP_INIT = cython.declare(cython.int, GROUP_INIT)
_GROUP_APP = cython.declare(cython.int, GROUP_APP)
_GROUP_SIDECAR = cython.declare(cython.int, GROUP_SIDECAR)
_ABSENT = cython.declare(cython.longlong, ABSENT)
_INVALID = cython.declare(cython.longlong, INVALID)
_M = cython.declare(cython.longlong, UNITS_PER_CARD)
_MIB_EXACT = cython.declare(cython.longlong, ((1 << 63) - 1) // UNITS_PER_CARD)  # mib × M fits a long long
_FAMILY_NAMES = cython.declare(tuple, FAMILY_NAMES)
_ROLE_NAMES = cython.declare(tuple, ROLE_NAMES)
_SHARE = cython.declare(cython.longlong, UNITS_PER_SHARE)
_PERCENT = cython.declare(cython.longlong, UNITS_PER_PERCENT)
_NO_KEYS = cython.declare(dict, {})  # stands in for an absent limits or requests map: never written


# --- Values -------------------------------------------------------------------------------------------


@cython.cfunc
@cython.locals(fast=cython.longlong)
def _count(value: object) -> cython.longlong:
    """A non-negative whole value as a C integer (clamped at ``COUNT_CAP``), or ``INVALID``."""
    if type(value) is str:
        fast = small_whole(value)
        if fast >= 0:
            return fast
    elif type(value) is int:
        if value < 0:
            return _INVALID
        if value > _HUGE:
            return _HUGE
        return value
    try:
        count = whole(value)
    except ValueError:
        return _INVALID
    if count is None or count < 0:
        return _INVALID
    if count > _HUGE:
        return _HUGE
    return count


# --- Facts --------------------------------------------------------------------------------------------


@cython.final
@cython.cclass
class ContainerFacts:
    """One container that names at least one accelerator or visibility key.

    ``keys`` lists a ``fastpath.keys.KeyFact`` for each such key, in the order read (limits, then requests).
    The scalar fields summarise the container's first manufacturer; ``ABSENT`` (-1) when the key is
    not there, ``INVALID`` (-2) when it is not a non-negative whole number.
    """

    name = cython.declare(str, visibility="readonly")
    field = cython.declare(str, visibility="readonly")  # "containers" | "initContainers"
    index = cython.declare(cython.int, visibility="readonly")
    group = cython.declare(cython.int, visibility="readonly")
    families = cython.declare(cython.int, visibility="readonly")  # bitmask of 1 << family
    manufacturer = cython.declare(str, visibility="readonly")
    keys = cython.declare(list, visibility="readonly")
    has_limits = cython.declare(cython.bint, visibility="readonly")
    has_requests = cython.declare(cython.bint, visibility="readonly")
    exclusive = cython.declare(cython.longlong, visibility="readonly")
    shared = cython.declare(cython.longlong, visibility="readonly")
    sliced = cython.declare(cython.longlong, visibility="readonly")
    sliced_units = cython.declare(cython.longlong, visibility="readonly")
    cores_percentage = cython.declare(cython.longlong, visibility="readonly")
    memory_percentage = cython.declare(cython.longlong, visibility="readonly")
    memory_mib = cython.declare(cython.longlong, visibility="readonly")
    partitioned = cython.declare(cython.longlong, visibility="readonly")
    partitioned_units = cython.declare(cython.longlong, visibility="readonly")
    profiles = cython.declare(list, visibility="readonly")  # published profiles, key order
    visibility = cython.declare(cython.longlong, visibility="readonly")
    mfr = cython.declare(cython.int, visibility="readonly")  # index of the first manufacturer

    def __init__(self, name: str, field: str, index: cython.int, group: cython.int) -> None:
        _init_container(self, name, field, index, group)

    @property
    def base(self) -> str:
        return manufacturer_base(self.mfr) if self.mfr >= 0 else ""

    @property
    def resources_path(self) -> str:
        """``spec.containers[0].resources``: the field path prefix of this container's resources."""
        return f"spec.{self.field}[{self.index}].resources"

    def source_of(self, key: str) -> str:
        """``"limits"`` or ``"requests"``: where this container's value for ``key`` was read."""
        for entry in self.keys:
            if entry.key == key:
                return entry.source
        return "limits"

    def value_of(self, key: str) -> object:
        """The raw value of ``key`` as the author wrote it (``None`` when absent)."""
        for entry in self.keys:
            if entry.key == key:
                return entry.value
        return None

    def claims(self) -> cython.bint:
        """True when the container requests an accelerator family (visibility does not count)."""
        return (self.families & _ACCELERATOR_MASK) != 0

    def as_tuple(self) -> tuple:
        return (
            self.name,
            self.field,
            self.index,
            self.group,
            self.families,
            self.manufacturer,
            tuple(fact.as_tuple() for fact in self.keys),
            self.has_limits,
            self.has_requests,
            self.exclusive,
            self.shared,
            self.sliced,
            self.sliced_units,
            self.cores_percentage,
            self.memory_percentage,
            self.memory_mib,
            self.partitioned,
            self.partitioned_units,
            tuple(self.profiles),
            self.visibility,
        )

    def __repr__(self) -> str:
        return f"ContainerFacts({self.field}[{self.index}] {self.name!r}, families={self.families:#x})"


@cython.cfunc
def _init_container(
    cf: ContainerFacts, name: str, field: str, index: cython.int, group: cython.int
) -> cython.void:
    cf.name = name
    cf.field = field
    cf.index = index
    cf.group = group
    cf.families = 0
    cf.manufacturer = ""
    cf.mfr = -1
    cf.keys = []
    cf.has_limits = False
    cf.has_requests = False
    cf.exclusive = _ABSENT
    cf.shared = _ABSENT
    cf.sliced = _ABSENT
    cf.sliced_units = _ABSENT
    cf.cores_percentage = _ABSENT
    cf.memory_percentage = _ABSENT
    cf.memory_mib = _ABSENT
    cf.partitioned = _ABSENT
    cf.partitioned_units = _ABSENT
    cf.profiles = []
    cf.visibility = _ABSENT


@cython.cfunc
def _new_container(container: dict, field: str, index: cython.int, group: cython.int) -> ContainerFacts:
    """``ContainerFacts(name, field, index, group)`` built without a Python call."""
    cf: ContainerFacts = ContainerFacts.__new__(ContainerFacts)
    _init_container(cf, _name_of(container), field, index, group)
    return cf


@cython.cfunc
@cython.locals(code=cython.int, family=cython.int, role=cython.int, m=cython.int, count=cython.longlong)
def _record(cf: ContainerFacts, key: str, code: cython.int, value: object, source: str) -> cython.void:
    family = code & 15
    role = (code >> 4) & 15
    m = code >> 8
    count = _count(value)
    profile = ""
    if role == ROLE_PROFILE:
        profile = profile_of(key, m)
    cf.keys.append(
        key_fact(
            key, _FAMILY_NAMES[family], _ROLE_NAMES[role], manufacturer_name(m), profile, value, count, source
        )
    )
    cf.families |= 1 << family
    if family == DEVICE_MODE_VISIBILITY:
        if cf.visibility < 0 or count > cf.visibility:
            cf.visibility = count
        return
    if cf.mfr < 0:
        cf.mfr = m
        cf.manufacturer = manufacturer_name(m)
    elif cf.mfr != m:
        return  # a second manufacturer in one container: its keys are listed, not summarised
    if family == DEVICE_MODE_EXCLUSIVE:
        cf.exclusive = count
    elif family == DEVICE_MODE_SHARED:
        cf.shared = count
    elif family == DEVICE_MODE_SLICED:
        if role == ROLE_TOKEN:
            cf.sliced = count
        elif role == ROLE_UNITS:
            cf.sliced_units = count
        elif role == ROLE_MEMORY_PERCENT:
            cf.memory_percentage = count
        elif role == ROLE_MEMORY_MIB:
            cf.memory_mib = count
        else:
            cf.cores_percentage = count
    else:
        if role == ROLE_TOKEN:
            cf.partitioned = count
        elif role == ROLE_UNITS:
            cf.partitioned_units = count
        else:
            cf.profiles.append(profile)


@cython.cfunc
@cython.locals(code=cython.int, has_limits=cython.bint, has_requests=cython.bint)
def _scan_container(container: dict, field: str, index: cython.int, group: cython.int) -> object:
    """The facts of one container (a dict), or ``None`` when it names no accelerator or visibility key.

    The maps are typed ``dict`` once their type is checked, so that compiled, each lookup and walk
    is a C dict operation rather than a method call; an absent map reads as the empty ``_NO_KEYS``.
    """
    resources = container.get("resources")
    if type(resources) is not dict:
        return None
    res: dict = resources
    limits = res.get("limits")
    requests = res.get("requests")
    lim: dict = limits if type(limits) is dict else _NO_KEYS
    req: dict = requests if type(requests) is dict else _NO_KEYS
    has_limits = lim is not _NO_KEYS
    has_requests = req is not _NO_KEYS
    cf: ContainerFacts | None = None
    for key in lim:
        if type(key) is not str:
            continue
        code = classify_code(key)
        if code == 0:
            continue
        if cf is None:
            cf = _new_container(container, field, index, group)
        _record(cf, key, code, lim[key], "limits")
    for key in req:
        if type(key) is not str or key in lim:
            continue
        code = classify_code(key)
        if code == 0:
            continue
        if cf is None:
            cf = _new_container(container, field, index, group)
        _record(cf, key, code, req[key], "requests")
    if cf is not None:
        cf.has_limits = has_limits
        cf.has_requests = has_requests
    return cf


@cython.cfunc
def _name_of(container: dict) -> str:
    name = container.get("name")
    return name if type(name) is str else ""


@cython.final
@cython.cclass
class PodFacts:
    """Everything gate 1, gate 3 and the Workload pin read from one Pod spec, from one pass."""

    containers = cython.declare(list, visibility="readonly")  # ContainerFacts, spec order
    families = cython.declare(cython.int, visibility="readonly")  # all groups
    init_families = cython.declare(cython.int, visibility="readonly")
    app_families = cython.declare(cython.int, visibility="readonly")
    sidecar_families = cython.declare(cython.int, visibility="readonly")
    claimants = cython.declare(cython.int, visibility="readonly")  # containers claiming sliced/partitioned
    profiles = cython.declare(list, visibility="readonly")  # distinct published profiles, first-seen order
    shared_max = cython.declare(cython.longlong, visibility="readonly")  # largest container's N
    sliced_units_max = cython.declare(cython.longlong, visibility="readonly")
    needs_vram = cython.declare(cython.bint, visibility="readonly")  # a fold needs the card VRAM

    def __init__(self) -> None:
        _init_pod(self)

    @property
    def any_accelerator(self) -> bool:
        """True when some container requests an accelerator family (visibility alone does not)."""
        return (self.families & _ACCELERATOR_MASK) != 0

    def family_names(self, mask: int = -1) -> list[str]:
        """The accelerator families in ``mask`` (default: all groups), in canonical order."""
        if mask == -1:
            mask = self.families
        return [_FAMILY_NAMES[f] for f in _ACCELERATOR_FAMILIES if mask & (1 << f)]

    @cython.ccall
    def demand(self, card_vram_mib: cython.longlong = 0) -> Demand | None:
        """The Pod's accelerator demand, or ``None`` when it asks for none.

        With several families (a Pod rule 1 refuses) the first in canonical order is summarised.
        Exclusive counts ``max(Σ init, Σ app + sidecars)`` cards, each sum saturating at
        ``COUNT_CAP`` as a single count does; shared counts the largest
        container's N; a slice or partition is one instance whose units are the largest any
        container carries (``.units`` when folded, else derived from the memory budget).
        """
        family: cython.int
        mask: cython.int = self.families
        cf: ContainerFacts
        count: cython.longlong
        units: cython.longlong
        init_sum: cython.longlong = 0
        app_sum: cython.longlong = 0
        u: cython.longlong
        for family in range(1, 5):
            if mask & (1 << family):
                break
        else:
            return None
        manufacturer = ""
        m: cython.int = -1
        count = 0
        units = 0
        profile = ""
        for cf in self.containers:
            if not (cf.families & (1 << family)):
                continue
            if m < 0:
                m = cf.mfr
            if family == DEVICE_MODE_EXCLUSIVE:
                if cf.exclusive > 0:
                    if cf.group == _GROUP_INIT:
                        init_sum = _capped_sum(init_sum, cf.exclusive)
                    else:
                        app_sum = _capped_sum(app_sum, cf.exclusive)
            elif family == DEVICE_MODE_SHARED:
                if cf.shared > count:
                    count = cf.shared
            elif family == DEVICE_MODE_SLICED:
                u = _slice_units(cf, card_vram_mib)
                if u > units:
                    units = u
            else:
                if cf.partitioned_units > units:
                    units = cf.partitioned_units
                if not profile and cf.profiles:
                    profile = cf.profiles[0]
        if family == DEVICE_MODE_EXCLUSIVE:
            count = init_sum if init_sum > app_sum else app_sum
            units = _M
        elif family == DEVICE_MODE_SHARED:
            units = _SHARE
        else:
            count = 1
        if m >= 0:
            manufacturer = manufacturer_name(m)
            base = manufacturer_base(m)
        else:
            base = ""
        return new_demand(_FAMILY_NAMES[family], family, manufacturer, base, count, units, profile)

    @cython.ccall
    def slice_units(self, card_vram_mib: cython.longlong = 0) -> cython.longlong:
        """The largest per-card slice units any container asks for (0 when none is known): the
        folded ``.units``, else what the fold would write (a MiB budget needs ``card_vram_mib``)."""
        cf: ContainerFacts
        best: cython.longlong = 0
        u: cython.longlong
        for cf in self.containers:
            if cf.families & (1 << DEVICE_MODE_SLICED):
                u = _slice_units(cf, card_vram_mib)
                if u > best:
                    best = u
        return best

    def as_tuple(self) -> tuple:
        return (
            tuple(cf.as_tuple() for cf in self.containers),
            self.families,
            self.init_families,
            self.app_families,
            self.sidecar_families,
            self.claimants,
            tuple(self.profiles),
            self.shared_max,
            self.sliced_units_max,
            self.needs_vram,
        )


@cython.cfunc
def _init_pod(facts: PodFacts) -> cython.void:
    facts.containers = []
    facts.families = 0
    facts.init_families = 0
    facts.app_families = 0
    facts.sidecar_families = 0
    facts.claimants = 0
    facts.profiles = []
    facts.shared_max = _ABSENT
    facts.sliced_units_max = _ABSENT
    facts.needs_vram = False


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _capped_sum(total: cython.longlong, count: cython.longlong) -> cython.longlong:
    """``min(total + count, COUNT_CAP)`` for ``0 <= total, count <= COUNT_CAP``, without forming a
    sum past the cap (two clamped counts add up to 2**63, one past a C ``long long``)."""
    if count >= _HUGE - total:
        return _HUGE
    return total + count


@cython.cfunc
def _slice_units(cf: ContainerFacts, card_vram_mib: cython.longlong) -> cython.longlong:
    """A container's slice units: the folded ``.units``, else what the fold would write."""
    if cf.sliced_units >= 0:
        return cf.sliced_units
    if 0 < cf.memory_percentage <= 100:
        return cf.memory_percentage * _PERCENT
    if card_vram_mib > 0 and 0 < cf.memory_mib <= card_vram_mib:
        if cf.memory_mib <= _MIB_EXACT:
            return (cf.memory_mib * _M) // card_vram_mib
        # The product would pass a C long long: fold it with Python integers (the quotient is <= M).
        return (cython.cast(object, cf.memory_mib) * _M) // card_vram_mib
    return 0


@cython.cfunc
def _add(facts: PodFacts, cf: ContainerFacts) -> cython.void:
    fam: cython.int = cf.families & _ACCELERATOR_MASK
    facts.containers.append(cf)
    facts.families |= cf.families
    if cf.group == _GROUP_INIT:
        facts.init_families |= fam
    elif cf.group == _GROUP_APP:
        facts.app_families |= fam
    else:
        facts.sidecar_families |= fam
    if fam & _SLICING_MASK:
        facts.claimants += 1
    for profile in cf.profiles:
        if profile not in facts.profiles:
            facts.profiles.append(profile)
    if cf.shared > facts.shared_max:
        facts.shared_max = cf.shared
    if cf.sliced_units > facts.sliced_units_max:
        facts.sliced_units_max = cf.sliced_units
    if fam & (1 << DEVICE_MODE_SLICED) and cf.memory_percentage == _ABSENT and cf.memory_mib != _ABSENT:
        facts.needs_vram = True
    if cf.profiles:
        facts.needs_vram = True


@cython.ccall
@cython.locals(i=cython.int, group=cython.int)
def scan_pod(spec: object) -> PodFacts:
    """Collect the accelerator facts of a Pod spec (or a PodSet template's spec) in one pass."""
    facts: PodFacts = PodFacts.__new__(PodFacts)
    _init_pod(facts)
    if type(spec) is not dict:
        return facts
    pod: dict = spec
    init = pod.get("initContainers")
    if type(init) is list:
        for i, container in enumerate(init):
            if type(container) is not dict:
                continue
            c: dict = container
            group = _GROUP_SIDECAR if c.get("restartPolicy") == "Always" else _GROUP_INIT
            cf = _scan_container(c, "initContainers", i, group)
            if cf is not None:
                _add(facts, cf)
    app = pod.get("containers")
    if type(app) is list:
        for i, container in enumerate(app):
            if type(container) is not dict:
                continue
            c = container
            cf = _scan_container(c, "containers", i, _GROUP_APP)
            if cf is not None:
                _add(facts, cf)
    return facts


def slice_units_for_percentage(percentage: int) -> int:
    """The fold of ``.sliced.memory-percentage``: ``pct × 16,000``."""
    return percentage * _PERCENT


def slice_units_for_mib(mib: int, card_vram_mib: int) -> int:
    """The fold of a MiB budget (a slice's or a profile's): ``⌊mib × M / cardVRAMMiB⌋``."""
    return (mib * _M) // card_vram_mib
