# The compiled view of fastpath/views.py's imports: the ledger's classes and the family codes.
from fastpath.cards cimport Card, Ledger, NodeLedger, Profile
from fastpath.codes cimport DEVICE_MODE_NONE
