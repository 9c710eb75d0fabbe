# fastpath/keys.py's compiled interface: the packed classifier for compiled callers, and the role
# codes (a C enum; keys.py spells them in Python for the interpreted module, and
# tests/unit/test_codes.py ties the two spellings together).

cimport cython

from fastpath.codes cimport (
    DEVICE_MODE_EXCLUSIVE,
    DEVICE_MODE_PARTITIONED,
    DEVICE_MODE_SHARED,
    DEVICE_MODE_SLICED,
    DEVICE_MODE_VISIBILITY,
)

# What a key does inside its family.
cdef enum:
    ROLE_NONE = 0
    ROLE_TOKEN = 1  # <base>, .shared, .sliced, .partitioned: the device-plugin token
    ROLE_UNITS = 2  # .sliced.units, .partitioned.units: written by the fold
    ROLE_CORES = 3  # .sliced.cores-percentage
    ROLE_MEMORY_PERCENT = 4  # .sliced.memory-percentage
    ROLE_MEMORY_MIB = 5  # .sliced.memory-mib
    ROLE_PROFILE = 6  # .partitioned.<kind>-<profile>
    ROLE_VISIBILITY = 7

@cython.final
cdef class KeyFact:
    cdef readonly str key
    cdef readonly str family  # api.constants.FAMILY_NAMES
    cdef readonly str role  # ROLE_NAMES
    cdef readonly str manufacturer
    cdef readonly str profile  # of a .partitioned.<kind>-<profile> key, else ""
    cdef readonly object value  # as the author wrote it
    cdef readonly long long count  # the whole value, or INVALID
    cdef readonly str source  # "limits" | "requests"

cdef KeyFact key_fact(
    str key, str family, str role, str manufacturer, str profile, object value, long long count, str source
)
cdef int classify_code(str key)
cdef str profile_of(str key, int m)
cdef str manufacturer_name(int m)
cdef str manufacturer_base(int m)
