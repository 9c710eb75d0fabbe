# The compiled view of fastpath/requests.py's imports: the family codes, the key classifier, the
# whole-number reader it shares with fastpath.quantity, and the Demand it builds in C.
from fastpath.cards cimport new_demand
from fastpath.codes cimport (
    DEVICE_MODE_EXCLUSIVE,
    DEVICE_MODE_PARTITIONED,
    DEVICE_MODE_SHARED,
    DEVICE_MODE_SLICED,
    DEVICE_MODE_VISIBILITY,
)
from fastpath.keys cimport (
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
from fastpath.quantity cimport small_whole, whole
