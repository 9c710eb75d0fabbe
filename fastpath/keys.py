"""Accelerator resource keys: the §3.2 classifier every reader of a Pod's resources shares::

    <base>                                exclusive
    <base>.shared                         shared
    <base>.sliced[.units|.cores-percentage|.memory-percentage|.memory-mib]    sliced
    <base>.partitioned[.units|.<kind>-<profile>]                              partitioned
    device.gpustack.ai/<manufacturer>.visibility                              visibility
    anything else (credits.*, cpu, RDMA keys, unknown bases or sub-keys)      none

A key's class is packed into one C integer, ``family | role << 4 | manufacturer index << 8``
(:func:`classify_code`, for compiled callers such as ``fastpath.requests``); :func:`classify` and
:func:`family_of` spell it out.  The family codes are ``fastpath/codes.pxd``'s, the role codes
``keys.pxd``'s (their Python spelling below, for the interpreted module).

Compiled by Cython in pure-Python mode: keys are matched with C-level character comparisons.
"""

from __future__ import annotations

import cython

from api.constants import FAMILY_NAMES
from api.manufacturers import MANUFACTURERS

if not cython.compiled:  # compiled, the codes are codes.pxd's and keys.pxd's C enums
    from api.constants import (
        DEVICE_MODE_EXCLUSIVE,
        DEVICE_MODE_PARTITIONED,
        DEVICE_MODE_SHARED,
        DEVICE_MODE_SLICED,
        DEVICE_MODE_VISIBILITY,
    )

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

_VISIBILITY_PREFIX = "device.gpustack.ai/"
_VISIBILITY_SUFFIX = ".visibility"

# The manufacturer table, flattened for the key matcher.
_COUNT = cython.declare(cython.int, len(MANUFACTURERS))
_NAMES = cython.declare(list, [m.name for m in MANUFACTURERS])
_BASES = cython.declare(list, [m.base for m in MANUFACTURERS])
_KINDS = cython.declare(list, [m.partition_kind for m in MANUFACTURERS])
_FAMILY_NAMES = cython.declare(tuple, FAMILY_NAMES)
_ROLE_NAMES = cython.declare(tuple, ROLE_NAMES)


# --- Key matching -------------------------------------------------------------------------------------


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.inline
@cython.locals(i=cython.Py_ssize_t, ch=cython.Py_UCS4)
def _starts_at(key: str, pos: cython.Py_ssize_t, lit: str) -> cython.bint:
    """``key[pos:].startswith(lit)``, compared character by character (compiled, iterating ``lit``
    reads its characters inline from its buffer)."""
    if pos + len(lit) > len(key):
        return False
    for i, ch in enumerate(lit):  # noqa: SIM110 - a C loop, where all() would build a generator
        if key[pos + i] != ch:
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
        return DEVICE_MODE_EXCLUSIVE | (ROLE_TOKEN << 4)
    if _equals_at(key, at, ".shared"):
        return DEVICE_MODE_SHARED | (ROLE_TOKEN << 4)
    if _starts_at(key, at, ".sliced"):
        p = at + 7
        if p == n:
            return DEVICE_MODE_SLICED | (ROLE_TOKEN << 4)
        if _equals_at(key, p, ".units"):
            return DEVICE_MODE_SLICED | (ROLE_UNITS << 4)
        if _equals_at(key, p, ".memory-percentage"):
            return DEVICE_MODE_SLICED | (ROLE_MEMORY_PERCENT << 4)
        if _equals_at(key, p, ".memory-mib"):
            return DEVICE_MODE_SLICED | (ROLE_MEMORY_MIB << 4)
        if _equals_at(key, p, ".cores-percentage"):
            return DEVICE_MODE_SLICED | (ROLE_CORES << 4)
        return 0
    k = len(kind)
    if k and _starts_at(key, at, ".partitioned"):
        p = at + 12
        if p == n:
            return DEVICE_MODE_PARTITIONED | (ROLE_TOKEN << 4)
        if _equals_at(key, p, ".units"):
            return DEVICE_MODE_PARTITIONED | (ROLE_UNITS << 4)
        # .<kind>-<non-empty profile>
        if key[p] == "." and _starts_at(key, p + 1, kind) and p + k + 2 < n and key[p + k + 1] == "-":
            return DEVICE_MODE_PARTITIONED | (ROLE_PROFILE << 4)
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
def classify_code(key: str) -> cython.int:
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
                return DEVICE_MODE_VISIBILITY | (ROLE_VISIBILITY << 4) | (m << 8)
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
def profile_of(key: str, m: cython.int) -> str:
    base: str = _BASES[m]
    kind: str = _KINDS[m]
    return key[len(base) + 12 + len(kind) + 2 :]


def classify(key: str) -> tuple[str, str, str, str]:
    """``(family, role, manufacturer, profile)`` of a resource key; family ``"none"`` with empty
    fields for a key of no family.  ``role`` is one of ``ROLE_NAMES``."""
    if not isinstance(key, str):
        return ("none", "", "", "")
    code: cython.int = classify_code(key)
    if code == 0:
        return ("none", "", "", "")
    family: cython.int = code & 15
    role: cython.int = (code >> 4) & 15
    m: cython.int = code >> 8
    profile = profile_of(key, m) if role == ROLE_PROFILE else ""
    return (_FAMILY_NAMES[family], _ROLE_NAMES[role], _NAMES[m], profile)


def family_of(key: str) -> tuple[str, str, str]:
    """``(family, manufacturer, profile)`` per the §3.2 classifier: family is one of exclusive,
    shared, sliced, partitioned, visibility, none."""
    family, _role, manufacturer, profile = classify(key)
    return (family, manufacturer, profile)


# --- A key as a container names it ---------------------------------------------------------------------


@cython.final
@cython.cclass
class KeyFact:
    """One accelerator or visibility key a container names, classified and read (fields in
    ``keys.pxd``): its family, role, manufacturer and profile, the value as written, its count
    (the whole value, or ``fastpath.requests.INVALID``) and its source (``"limits"`` or
    ``"requests"``)."""

    def __init__(
        self,
        key: str,
        family: str,
        role: str,
        manufacturer: str,
        profile: str,
        value: object,
        count: cython.longlong,
        source: str,
    ) -> None:
        self.key = key
        self.family = family
        self.role = role
        self.manufacturer = manufacturer
        self.profile = profile
        self.value = value
        self.count = count
        self.source = source

    def as_tuple(self) -> tuple:
        return (
            self.key,
            self.family,
            self.role,
            self.manufacturer,
            self.profile,
            self.value,
            self.count,
            self.source,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyFact):
            return NotImplemented
        return self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        return f"KeyFact{self.as_tuple()!r}"


@cython.cfunc
def key_fact(
    key: str,
    family: str,
    role: str,
    manufacturer: str,
    profile: str,
    value: object,
    count: cython.longlong,
    source: str,
) -> KeyFact:
    fact: KeyFact = KeyFact.__new__(KeyFact)
    fact.key = key
    fact.family = family
    fact.role = role
    fact.manufacturer = manufacturer
    fact.profile = profile
    fact.value = value
    fact.count = count
    fact.source = source
    return fact


@cython.cfunc
def manufacturer_name(m: cython.int) -> str:
    """The name of manufacturer ``m`` of a packed code (``code >> 8``)."""
    return _NAMES[m]


@cython.cfunc
def manufacturer_base(m: cython.int) -> str:
    """The base resource of manufacturer ``m`` of a packed code (``code >> 8``)."""
    return _BASES[m]


def base_of(manufacturer: str) -> str:
    """The base resource of a manufacturer (``nvidia`` → ``nvidia.com/gpu``), or ``""``."""
    for i in range(len(_NAMES)):
        if _NAMES[i] == manufacturer:
            return _BASES[i]
    return ""
