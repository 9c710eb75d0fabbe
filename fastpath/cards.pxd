# The typed classes of the Devices ledger, shared by every compiled module that reads or charges a
# card (fastpath.ledger builds them, fastpath.fit places on them, fastpath.views and
# fastpath.fit_labels project them).  Cython shares a cdef class across modules only through a
# .pxd: the attributes live here, the code in cards.py.

cimport cython

from fastpath.codes cimport (
    DEVICE_MODE_NONE,
    DEVICE_MODE_PARTITIONED,
    DEVICE_MODE_SHARED,
    DEVICE_MODE_SLICED,
)


@cython.final
cdef class Demand:
    cdef readonly str family
    cdef readonly str manufacturer
    cdef readonly str base
    cdef readonly long long count
    cdef readonly long long units
    cdef readonly str profile
    cdef int code  # the family as a C code (fastpath/codes.pxd)


cdef Demand new_demand(
    str family, int code, str manufacturer, str base, long long count, long long units, str profile
)


@cython.final
cdef class Profile:
    cdef readonly str name
    cdef readonly str vendor
    cdef readonly long long memory_mib
    cdef readonly int count
    cdef readonly list masks
    cdef readonly list starts

    cdef long long free_count(self, unsigned long long occupied) noexcept


@cython.final
cdef class Card:
    cdef readonly str node
    cdef readonly str group
    cdef readonly str manufacturer
    cdef readonly str id
    cdef readonly int index
    cdef readonly long long memory_mib
    cdef readonly bint healthy
    cdef readonly bint partitioned
    cdef readonly int slice_count
    cdef readonly int mode
    cdef readonly long long remaining
    cdef readonly int allocated_slices
    cdef readonly list profiles  # Profile
    cdef readonly unsigned long long occupied  # memory-slice bitmask
    cdef readonly list allocated_profiles  # int per profile
    cdef list caps  # ledger-reported remaining per profile, or UNCAPPED

    cpdef Card copy(self)
    cdef void set_profiles(self, list profiles)
    cdef void assign(self, Card state) noexcept
    cdef bint eligible(self, str manufacturer) noexcept
    cdef bint exclusive_free(self) noexcept
    cdef bint can_share(self) noexcept
    cdef bint can_slice(self, long long units) noexcept
    cdef int used_slices(self) noexcept
    cdef long long free_instances(self, Py_ssize_t i)
    cdef void charge_slice(self, long long units) noexcept
    cdef tuple occupy(self, Py_ssize_t p, Py_ssize_t placement)


@cython.final
cdef class NodeLedger:
    cdef readonly str name
    cdef readonly list cards
    cdef public long long cores
    cdef public long long cores_free  # -1: unknown (all free)

    cpdef NodeLedger copy(self)


@cython.final
cdef class Ledger:
    cdef readonly list nodes

    cpdef Ledger copy(self)
