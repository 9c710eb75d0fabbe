# The compiled view of fastpath/ledger.py's imports: the ledger's classes and the family codes.
from fastpath.cards cimport Card, Ledger, NodeLedger, Profile
from fastpath.codes cimport (
    DEVICE_MODE_EXCLUSIVE,
    DEVICE_MODE_NONE,
    DEVICE_MODE_PARTITIONED,
    DEVICE_MODE_SHARED,
    DEVICE_MODE_SLICED,
)
