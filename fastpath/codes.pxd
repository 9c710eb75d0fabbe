# The request-family and device-mode codes, compiled spelling: a C enum, so compiled loops compare
# against constants.  The Python spelling is api.constants (DEVICE_MODE_*, FAMILY_NAMES), which the
# interpreted modules import instead (``if not cython.compiled``); tests/unit/test_codes.py ties the
# two together.  A family's code is the mode its grant puts a card in.  No .py: nothing to compile.

cdef enum:
    DEVICE_MODE_NONE = 0
    DEVICE_MODE_EXCLUSIVE = 1
    DEVICE_MODE_SHARED = 2
    DEVICE_MODE_SLICED = 3
    DEVICE_MODE_PARTITIONED = 4
    DEVICE_MODE_VISIBILITY = 5
