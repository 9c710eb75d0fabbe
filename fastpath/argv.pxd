# fastpath/argv.py's compiled interface, for fastpath.degrees: the trie, the token walk and the
# integer reader, and the token classes (a C enum; argv.py spells them in Python for the
# interpreted module, and tests/unit/test_codes.py ties the two spellings together).

cdef class Trie:
    cdef int[:] child
    cdef int[:] exact
    cdef int[:] unique
    cdef int[:] symbol_of
    cdef int width
    cdef tuple names

# Token classes returned by walk (low two bits of the packed result).
cdef enum:
    POSITIONAL = 0  # argparse 'A': a value / positional
    RESOLVED = 1  # a spelling of the table (entry and explicit value follow)
    AMBIGUOUS = 2  # an abbreviation of several spellings: passes through
    UNKNOWN = 3  # flag-looking, not in the table

cdef long long walk(str t, Py_ssize_t n, Trie tr, bint rewrite, bint classify) except? -1
cdef int value_class(object tok, Trie tr, bint rewrite) except? -1
cdef str spelled(str t, Py_ssize_t xpos)
cdef object int_value(object value)
