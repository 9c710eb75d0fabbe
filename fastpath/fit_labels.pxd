# The compiled view of fastpath/fit_labels.py's imports: the ledger's classes.
from fastpath.cards cimport Card, NodeLedger, Profile
