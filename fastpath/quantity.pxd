# fastpath/quantity.py's compiled interface, for fastpath.requests' counts.
cdef long long small_whole(str s) noexcept
cpdef object whole(object value)
