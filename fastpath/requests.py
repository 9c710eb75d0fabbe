"""Accelerator resource keys of a Pod: classify each key, and collect in one pass every fact the
seven request rules, the credits fold, the card-count pin, gate 3 and the Workload pin read.

``family_of(key)`` is the §3.2 classifier::

    <base>                                exclusive
    <base>.shared                         shared
    <base>.sliced[.units|.cores-percentage|.memory-percentage|.memory-mib]    sliced
    <base>.partitioned[.units|.<kind>-<profile>]                              partitioned
    device.gpustack.ai/<manufacturer>.visibility                              visibility
    anything else (credits.*, cpu, RDMA keys, unknown bases or sub-keys)      none

``scan_pod(spec)`` walks ``spec.containers`` and ``spec.initContainers`` once.  Values come from
``limits``, else ``requests``.  Containers fall in three groups: the **init** group (init containers
without ``restartPolicy: Always``), the **app** group (``spec.containers``) and **native sidecars**
(init containers with ``restartPolicy: Always``), which belong to neither.

Pod objects stay plain dicts here.  Compiled by Cython in pure-Python mode: keys are matched with
C-level character comparisons, counts are C integers.
"""

from __future__ import annotations

import cython

from api.manufacturers import (
    MANUFACTURERS,
    UNITS_PER_CARD,
    UNITS_PER_PERCENT,
    UNITS_PER_SHARE,
)
from fastpath import quantity
from fastpath.fit import Demand

# --- Codes ------------------------------------------------------------------------------------------

NONE = 0
EXCLUSIVE = 1
SHARED = 2
SLICED = 3
PARTITIONED = 4
VISIBILITY = 5
FAMILY_NAMES = ("none", "exclusive", "shared", "sliced", "partitioned", "visibility")

# What a key does inside its family.
ROLE_NONE = 0
ROLE_TOKEN = 1  # <base>, .shared, .sliced, .partitioned: the device-plugin token
ROLE_UNITS = 2  # .sliced.units, .partitioned.units: written by the fold
ROLE_CORES = 3  # .sliced.cores-percentage
ROLE_MEMORY_PERCENT = 4  # .sliced.memory-percentage
ROLE_MEMORY_MIB = 5  # .sliced.memory-mib
ROLE_PROFILE = 6  # .partitioned.<kind>-<profile>
ROLE_VISIBILITY = 7
ROLE_NAMES = (
    "",
    "token",
    "units",
    "cores-percentage",
    "memory-percentage",
    "memory-mib",
    "profile",
    "visibility",
)

GROUP_INIT = 0
GROUP_APP = 1
GROUP_SIDECAR = 2
GROUP_NAMES = ("init", "app", "sidecar")

# A count that is absent, or not a non-negative whole number.
ABSENT = -1
INVALID = -2
_HUGE = cython.declare(
    cython.longlong, 1 << 62
)  # larger whole values are clamped: no rule distinguishes them

_SLICING_MASK = cython.declare(cython.int, (1 << SLICED) | (1 << PARTITIONED))
_ACCELERATOR_MASK = cython.declare(
    cython.int, (1 << EXCLUSIVE) | (1 << SHARED) | (1 << SLICED) | (1 << PARTITIONED)
)

_VISIBILITY_PREFIX = "device.gpustack.ai/"
_VISIBILITY_SUFFIX = ".visibility"

# The manufacturer table, flattened for the key matcher.
_COUNT = cython.declare(cython.int, len(MANUFACTURERS))
_NAMES = cython.declare(list, [m.name for m in MANUFACTURERS])
_BASES = cython.declare(list, [m.base for m in MANUFACTURERS])
_KINDS = cython.declare(list, [m.partition_kind for m in MANUFACTURERS])


# C-level twins of the codes above, for the compiled loops (a module global is a dict lookup).
_NONE = cython.declare(cython.int, 0)
_EXCLUSIVE = cython.declare(cython.int, 1)
_SHARED = cython.declare(cython.int, 2)
_SLICED = cython.declare(cython.int, 3)
_PARTITIONED = cython.declare(cython.int, 4)
_VISIBILITY = cython.declare(cython.int, 5)
_ROLE_TOKEN = cython.declare(cython.int, 1)
_ROLE_UNITS = cython.declare(cython.int, 2)
_ROLE_CORES = cython.declare(cython.int, 3)
_ROLE_MEMORY_PERCENT = cython.declare(cython.int, 4)
_ROLE_MEMORY_MIB = cython.declare(cython.int, 5)
_ROLE_PROFILE = cython.declare(cython.int, 6)
_ROLE_VISIBILITY = cython.declare(cython.int, 7)
_GROUP_INIT = cython.declare(cython.int, 0)
_GROUP_APP = cython.declare(cython.int, 1)
_GROUP_SIDECAR = cython.declare(cython.int, 2)
_ABSENT = cython.declare(cython.longlong, -1)
_INVALID = cython.declare(cython.longlong, -2)
_M = cython.declare(cython.longlong, UNITS_PER_CARD)
_FAMILY_NAMES = cython.declare(tuple, FAMILY_NAMES)
_ROLE_NAMES = cython.declare(tuple, ROLE_NAMES)
_SHARE = cython.declare(cython.longlong, UNITS_PER_SHARE)
_PERCENT = cython.declare(cython.longlong, UNITS_PER_PERCENT)

# --- Key matching -------------------------------------------------------------------------------------


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.inline
@cython.locals(i=cython.Py_ssize_t, m=cython.Py_ssize_t)
def _starts_at(key: str, pos: cython.Py_ssize_t, lit: str) -> cython.bint:
    """``key[pos:].startswith(lit)``, compared character by character."""
    m = len(lit)
    if pos + m > len(key):
        return False
    for i in range(m):  # noqa: SIM110 - a C loop, where all() would build a generator
        if key[pos + i] != lit[i]:
            return False
    return True


@cython.cfunc
@cython.inline
def _equals_at(key: str, pos: cython.Py_ssize_t, lit: str) -> cython.bint:
    """``key[pos:] == lit``."""
    if len(key) - pos != len(lit):
        return False
    return _starts_at(key, pos, lit)


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.locals(n=cython.Py_ssize_t, p=cython.Py_ssize_t, k=cython.Py_ssize_t)
def _suffix_code(key: str, at: cython.Py_ssize_t, kind: str) -> cython.int:
    """Family and role of the part of ``key`` after its base, packed as ``family | role << 4``."""
    n = len(key)
    if at == n:
        return _EXCLUSIVE | (_ROLE_TOKEN << 4)
    if _equals_at(key, at, ".shared"):
        return _SHARED | (_ROLE_TOKEN << 4)
    if _starts_at(key, at, ".sliced"):
        p = at + 7
        if p == n:
            return _SLICED | (_ROLE_TOKEN << 4)
        if _equals_at(key, p, ".units"):
            return _SLICED | (_ROLE_UNITS << 4)
        if _equals_at(key, p, ".memory-percentage"):
            return _SLICED | (_ROLE_MEMORY_PERCENT << 4)
        if _equals_at(key, p, ".memory-mib"):
            return _SLICED | (_ROLE_MEMORY_MIB << 4)
        if _equals_at(key, p, ".cores-percentage"):
            return _SLICED | (_ROLE_CORES << 4)
        return 0
    k = len(kind)
    if k and _starts_at(key, at, ".partitioned"):
        p = at + 12
        if p == n:
            return _PARTITIONED | (_ROLE_TOKEN << 4)
        if _equals_at(key, p, ".units"):
            return _PARTITIONED | (_ROLE_UNITS << 4)
        # .<kind>-<non-empty profile>
        if key[p] == "." and _starts_at(key, p + 1, kind) and p + k + 2 < n and key[p + k + 1] == "-":
            return _PARTITIONED | (_ROLE_PROFILE << 4)
        return 0
    return 0


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.locals(
    n=cython.Py_ssize_t,
    m=cython.int,
    length=cython.Py_ssize_t,
    code=cython.int,
    first=cython.Py_UCS4,
    base=str,
)
def _classify(key: str) -> cython.int:
    """``family | role << 4 | manufacturer index << 8``; 0 for a key of no family."""
    n = len(key)
    if n < 4:
        return 0
    first = key[0]
    if (
        first == "d"
        and n > 30
        and _starts_at(key, 0, _VISIBILITY_PREFIX)
        and _equals_at(key, n - 11, _VISIBILITY_SUFFIX)
    ):
        for m in range(_COUNT):
            base = _NAMES[m]
            length = len(base)
            if length == n - 30 and _starts_at(key, 19, base):
                return _VISIBILITY | (_ROLE_VISIBILITY << 4) | (m << 8)
        # Fall through: a base may itself live under the device domain.
    for m in range(_COUNT):
        base = _BASES[m]
        length = len(base)
        if length > n or (length < n and key[length] != "."):
            continue
        if not _starts_at(key, 0, base):
            continue
        code = _suffix_code(key, length, _KINDS[m])
        if code:
            return code | (m << 8)
        return 0
    return 0


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
def _profile_of(key: str, m: cython.int) -> str:
    base: str = _BASES[m]
    kind: str = _KINDS[m]
    return key[len(base) + 12 + len(kind) + 2 :]


def classify(key: str) -> tuple[str, str, str, str]:
    """``(family, role, manufacturer, profile)`` of a resource key; family ``"none"`` with empty
    fields for a key of no family.  ``role`` is one of ``ROLE_NAMES``."""
    if not isinstance(key, str):
        return ("none", "", "", "")
    code: cython.int = _classify(key)
    if code == 0:
        return ("none", "", "", "")
    family: cython.int = code & 15
    role: cython.int = (code >> 4) & 15
    m: cython.int = code >> 8
    profile = _profile_of(key, m) if role == _ROLE_PROFILE else ""
    return (_FAMILY_NAMES[family], _ROLE_NAMES[role], _NAMES[m], profile)


def family_of(key: str) -> tuple[str, str, str]:
    """``(family, manufacturer, profile)`` per the §3.2 classifier: family is one of exclusive,
    shared, sliced, partitioned, visibility, none."""
    family, _role, manufacturer, profile = classify(key)
    return (family, manufacturer, profile)


# --- Values -------------------------------------------------------------------------------------------


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, ch=cython.Py_UCS4, mant=cython.longlong)
def _count(value: object) -> cython.longlong:
    """A non-negative whole value as a C integer (clamped at 2**62), or ``INVALID``."""
    if type(value) is str:
        s: str = value
        n = len(s)
        if 0 < n <= 18:
            mant = 0
            i = 0
            while i < n:
                ch = s[i]
                if ch < "0" or ch > "9":
                    break
                mant = mant * 10 + (ord(ch) - 48)
                i += 1
            if i == n:
                return mant
    elif type(value) is int:
        if value < 0:
            return _INVALID
        if value > _HUGE:
            return _HUGE
        return value
    try:
        whole = quantity.whole(value)
    except ValueError:
        return _INVALID
    if whole is None or whole < 0:
        return _INVALID
    if whole > _HUGE:
        return _HUGE
    return whole


# --- Facts --------------------------------------------------------------------------------------------


@cython.final
@cython.cclass
class ContainerFacts:
    """One container that names at least one accelerator or visibility key.

    ``keys`` lists ``(key, family, role, manufacturer, profile, value, count, source)`` for each such
    key (``source`` is ``"limits"`` or ``"requests"``, ``count`` the whole value or ``INVALID``).
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
        self.name = name
        self.field = field
        self.index = index
        self.group = group
        self.families = 0
        self.manufacturer = ""
        self.mfr = -1
        self.keys = []
        self.has_limits = False
        self.has_requests = False
        self.exclusive = _ABSENT
        self.shared = _ABSENT
        self.sliced = _ABSENT
        self.sliced_units = _ABSENT
        self.cores_percentage = _ABSENT
        self.memory_percentage = _ABSENT
        self.memory_mib = _ABSENT
        self.partitioned = _ABSENT
        self.partitioned_units = _ABSENT
        self.profiles = []
        self.visibility = _ABSENT

    @property
    def base(self) -> str:
        return _BASES[self.mfr] if self.mfr >= 0 else ""

    @property
    def resources_path(self) -> str:
        """``spec.containers[0].resources``: the field path prefix of this container's resources."""
        return f"spec.{self.field}[{self.index}].resources"

    def source_of(self, key: str) -> str:
        """``"limits"`` or ``"requests"``: where this container's value for ``key`` was read."""
        for entry in self.keys:
            if entry[0] == key:
                return entry[7]
        return "limits"

    def value_of(self, key: str) -> object:
        """The raw value of ``key`` as the author wrote it (``None`` when absent)."""
        for entry in self.keys:
            if entry[0] == key:
                return entry[5]
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
            tuple(self.keys),
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
@cython.locals(code=cython.int, family=cython.int, role=cython.int, m=cython.int, count=cython.longlong)
def _record(cf: ContainerFacts, key: str, code: cython.int, value: object, source: str) -> cython.void:
    family = code & 15
    role = (code >> 4) & 15
    m = code >> 8
    count = _count(value)
    profile = ""
    if role == _ROLE_PROFILE:
        profile = _profile_of(key, m)
    cf.keys.append((key, _FAMILY_NAMES[family], _ROLE_NAMES[role], _NAMES[m], profile, value, count, source))
    cf.families |= 1 << family
    if family == _VISIBILITY:
        if cf.visibility < 0 or count > cf.visibility:
            cf.visibility = count
        return
    if cf.mfr < 0:
        cf.mfr = m
        cf.manufacturer = _NAMES[m]
    elif cf.mfr != m:
        return  # a second manufacturer in one container: its keys are listed, not summarised
    if family == _EXCLUSIVE:
        cf.exclusive = count
    elif family == _SHARED:
        cf.shared = count
    elif family == _SLICED:
        if role == _ROLE_TOKEN:
            cf.sliced = count
        elif role == _ROLE_UNITS:
            cf.sliced_units = count
        elif role == _ROLE_MEMORY_PERCENT:
            cf.memory_percentage = count
        elif role == _ROLE_MEMORY_MIB:
            cf.memory_mib = count
        else:
            cf.cores_percentage = count
    else:
        if role == _ROLE_TOKEN:
            cf.partitioned = count
        elif role == _ROLE_UNITS:
            cf.partitioned_units = count
        else:
            cf.profiles.append(profile)


@cython.cfunc
@cython.locals(code=cython.int)
def _scan_container(container: object, field: str, index: cython.int, group: cython.int) -> object:
    """The facts of one container, or ``None`` when it names no accelerator or visibility key."""
    if type(container) is not dict:
        return None
    resources = container.get("resources")
    if type(resources) is not dict:
        return None
    limits = resources.get("limits")
    requests = resources.get("requests")
    cf: ContainerFacts = None
    if type(limits) is dict:
        for key in limits:
            if type(key) is not str:
                continue
            code = _classify(key)
            if code == 0:
                continue
            if cf is None:
                cf = ContainerFacts(_name_of(container), field, index, group)
            _record(cf, key, code, limits[key], "limits")
    else:
        limits = None
    if type(requests) is dict:
        for key in requests:
            if type(key) is not str or (limits is not None and key in limits):
                continue
            code = _classify(key)
            if code == 0:
                continue
            if cf is None:
                cf = ContainerFacts(_name_of(container), field, index, group)
            _record(cf, key, code, requests[key], "requests")
    else:
        requests = None
    if cf is not None:
        cf.has_limits = limits is not None
        cf.has_requests = requests is not None
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
        self.containers = []
        self.families = 0
        self.init_families = 0
        self.app_families = 0
        self.sidecar_families = 0
        self.claimants = 0
        self.profiles = []
        self.shared_max = _ABSENT
        self.sliced_units_max = _ABSENT
        self.needs_vram = False

    @property
    def any_accelerator(self) -> bool:
        """True when some container requests an accelerator family (visibility alone does not)."""
        return (self.families & _ACCELERATOR_MASK) != 0

    def family_names(self, mask: int = -1) -> list[str]:
        """The accelerator families in ``mask`` (default: all groups), in canonical order."""
        if mask == -1:
            mask = self.families
        return [FAMILY_NAMES[f] for f in (_EXCLUSIVE, _SHARED, _SLICED, _PARTITIONED) if mask & (1 << f)]

    @cython.ccall
    def demand(self, card_vram_mib: cython.longlong = 0) -> object:
        """The Pod's accelerator demand, or ``None`` when it asks for none.

        With several families (a Pod rule 1 refuses) the first in canonical order is summarised.
        Exclusive counts ``max(Σ init, Σ app + sidecars)`` cards; shared counts the largest
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
            if family == _EXCLUSIVE:
                if cf.exclusive > 0:
                    if cf.group == _GROUP_INIT:
                        init_sum += cf.exclusive
                    else:
                        app_sum += cf.exclusive
            elif family == _SHARED:
                if cf.shared > count:
                    count = cf.shared
            elif family == _SLICED:
                u = _slice_units(cf, card_vram_mib)
                if u > units:
                    units = u
            else:
                if cf.partitioned_units > units:
                    units = cf.partitioned_units
                if not profile and cf.profiles:
                    profile = cf.profiles[0]
        if family == _EXCLUSIVE:
            count = init_sum if init_sum > app_sum else app_sum
            units = _M
        elif family == _SHARED:
            units = _SHARE
        else:
            count = 1
        if m >= 0:
            manufacturer = _NAMES[m]
            base = _BASES[m]
        else:
            base = ""
        return Demand(_FAMILY_NAMES[family], manufacturer, base, count, units, profile)

    @cython.ccall
    def slice_units(self, card_vram_mib: cython.longlong = 0) -> cython.longlong:
        """The largest per-card slice units any container asks for (0 when none is known): the
        folded ``.units``, else what the fold would write (a MiB budget needs ``card_vram_mib``)."""
        cf: ContainerFacts
        best: cython.longlong = 0
        u: cython.longlong
        for cf in self.containers:
            if cf.families & (1 << _SLICED):
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
def _slice_units(cf: ContainerFacts, card_vram_mib: cython.longlong) -> cython.longlong:
    """A container's slice units: the folded ``.units``, else what the fold would write."""
    if cf.sliced_units >= 0:
        return cf.sliced_units
    if 0 < cf.memory_percentage <= 100:
        return cf.memory_percentage * _PERCENT
    if card_vram_mib > 0 and 0 < cf.memory_mib <= card_vram_mib:
        return (cf.memory_mib * _M) // card_vram_mib
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
    if fam & (1 << _SLICED) and cf.memory_percentage == _ABSENT and cf.memory_mib != _ABSENT:
        facts.needs_vram = True
    if cf.profiles:
        facts.needs_vram = True


@cython.ccall
@cython.locals(i=cython.int, group=cython.int)
def scan_pod(spec: object) -> PodFacts:
    """Collect the accelerator facts of a Pod spec (or a PodSet template's spec) in one pass."""
    facts: PodFacts = PodFacts()
    if type(spec) is not dict:
        return facts
    init = spec.get("initContainers")
    if type(init) is list:
        for i, container in enumerate(init):
            group = _GROUP_INIT
            if type(container) is dict and container.get("restartPolicy") == "Always":
                group = _GROUP_SIDECAR
            cf = _scan_container(container, "initContainers", i, group)
            if cf is not None:
                _add(facts, cf)
    app = spec.get("containers")
    if type(app) is list:
        for i, container in enumerate(app):
            cf = _scan_container(container, "containers", i, _GROUP_APP)
            if cf is not None:
                _add(facts, cf)
    return facts


def slice_units_for_percentage(percentage: int) -> int:
    """The fold of ``.sliced.memory-percentage``: ``pct × 16,000``."""
    return percentage * _PERCENT


def slice_units_for_mib(mib: int, card_vram_mib: int) -> int:
    """The fold of a MiB budget (a slice's or a profile's): ``⌊mib × M / cardVRAMMiB⌋``."""
    return (mib * _M) // card_vram_mib


def base_of(manufacturer: str) -> str:
    """The base resource of a manufacturer (``nvidia`` → ``nvidia.com/gpu``), or ``""``."""
    for i in range(len(_NAMES)):
        if _NAMES[i] == manufacturer:
            return _BASES[i]
    return ""
