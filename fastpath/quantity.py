"""Kubernetes ``resource.Quantity`` parsing, exact: no floats anywhere.

Grammar (as the apiserver's ``ParseQuantity`` reads it)::

    <quantity>  ::= <sign>? <number> <suffix>
    <number>    ::= <digits> | <digits> "." <digits>? | "." <digits>
    <suffix>    ::= "" | n | u | m | k | M | G | T | P | E        (decimal SI)
                  | Ki | Mi | Gi | Ti | Pi | Ei                    (binary SI)
                  | ("e" | "E") <sign>? <digits>                   (decimal exponent)

A value is returned as a reduced fraction ``(numerator, denominator)`` with ``denominator > 0``.
YAML/JSON numbers are accepted too: an ``int`` as is, a ``float`` through its shortest repr (the
digits the author wrote, never its binary expansion).  Anything else raises ``ValueError`` saying
what was wrong.

Compiled by Cython (pure-Python mode): the character loop runs on C ``Py_UCS4`` values, and a
mantissa of up to 18 digits is accumulated, scaled and reduced in a C ``long long`` while the result
fits (``_exact_small``; Python integers beyond).
"""

from __future__ import annotations

from math import gcd

import cython

# Bounds that keep a hostile value from costing more than a well-formed one.
# C constants when compiled, so the character loops compare C integers.
_MAX_DIGITS = cython.declare(cython.Py_ssize_t, 1000)
_MAX_EXPONENT = cython.declare(cython.long, 1000)
_FAST_DIGITS = cython.declare(cython.Py_ssize_t, 18)  # a C long long holds any 18-digit decimal
# 10**0 .. 10**18, and the largest magnitude the C arithmetic of _exact_small keeps (2**62 - 1).
_POW10 = cython.declare(tuple, tuple(10**k for k in range(19)))
_SMALL_LIMIT = cython.declare(cython.longlong, (1 << 62) - 1)


def _garbage(value: object, why: str) -> ValueError:
    return ValueError(f"quantity {value!r} is not a Kubernetes quantity: {why}")


def _pow10(k):
    # Untyped on purpose: a C integer power would be computed in floating point.
    return 10**k


@cython.cfunc
@cython.inline
def _decimal_si(ch: cython.Py_UCS4) -> cython.int:
    """The power of ten of a one-letter decimal SI suffix, or 99 when ``ch`` is none."""
    if ch == "m":
        return -3
    if ch == "k":
        return 3
    if ch == "M":
        return 6
    if ch == "G":
        return 9
    if ch == "T":
        return 12
    if ch == "P":
        return 15
    if ch == "E":
        return 18
    if ch == "u":
        return -6
    if ch == "n":
        return -9
    return 99


@cython.cfunc
@cython.inline
def _binary_si(ch: cython.Py_UCS4) -> cython.int:
    """The power of two of a binary SI suffix ``<ch>i``, or 0 when ``ch`` starts none."""
    if ch == "K":
        return 10
    if ch == "M":
        return 20
    if ch == "G":
        return 30
    if ch == "T":
        return 40
    if ch == "P":
        return 50
    if ch == "E":
        return 60
    return 0


@cython.boundscheck(False)  # every index is checked against n just before it is read
@cython.wraparound(False)
@cython.cfunc
@cython.locals(
    n=cython.Py_ssize_t,
    i=cython.Py_ssize_t,
    int_start=cython.Py_ssize_t,
    int_end=cython.Py_ssize_t,
    frac_start=cython.Py_ssize_t,
    frac_end=cython.Py_ssize_t,
    ndigits=cython.Py_ssize_t,
    ch=cython.Py_UCS4,
    negative=cython.bint,
    mant=cython.longlong,
    exp10=cython.long,
    exp2=cython.int,
    num=object,
)
def _parse_text(s: str) -> tuple:
    n = len(s)
    if n == 0:
        raise _garbage(s, "it is empty")
    i = 0
    negative = False
    ch = s[0]
    if ch == "+" or ch == "-":
        negative = ch == "-"
        i = 1
    int_start = i
    mant = 0
    ndigits = 0
    while i < n:
        ch = s[i]
        if ch < "0" or ch > "9":
            break
        if ndigits < _FAST_DIGITS:
            mant = mant * 10 + (ord(ch) - 48)
        ndigits += 1
        i += 1
    int_end = i
    frac_start = i
    frac_end = i
    if i < n and s[i] == ".":
        i += 1
        frac_start = i
        while i < n:
            ch = s[i]
            if ch < "0" or ch > "9":
                break
            if ndigits < _FAST_DIGITS:
                mant = mant * 10 + (ord(ch) - 48)
            ndigits += 1
            i += 1
        frac_end = i
    if ndigits == 0:
        raise _garbage(s, "a number must have at least one digit (e.g. 1, 0.5, 100m, 16Gi)")
    if ndigits > _MAX_DIGITS:
        raise _garbage(s, f"more than {_MAX_DIGITS} digits")
    exp10 = 0
    exp2 = 0
    if i < n:
        if i + 2 == n and s[i + 1] == "i":
            exp2 = _binary_si(s[i])
            if exp2 == 0:
                raise _garbage(s, f"unknown suffix {s[i:]!r} (binary suffixes are Ki, Mi, Gi, Ti, Pi, Ei)")
        else:
            exp10 = _decimal_suffix(s, i, n)
    if ndigits > _FAST_DIGITS:
        num = int(s[int_start:int_end] + s[frac_start:frac_end])
    elif cython.compiled:  # C integers (interpreted, Python's own: _exact)
        return _exact_small(mant, frac_end - frac_start, exp10, exp2, negative)
    else:
        num = mant
    return _exact(num, frac_end - frac_start, exp10, exp2, negative)


@cython.boundscheck(False)  # the caller has i < n; every later index is checked against n
@cython.wraparound(False)
@cython.cfunc
@cython.exceptval(check=True)
@cython.locals(
    ch=cython.Py_UCS4, e=cython.long, e_negative=cython.bint, e_digits=cython.Py_ssize_t, power=cython.int
)
def _decimal_suffix(s: str, i: cython.Py_ssize_t, n: cython.Py_ssize_t) -> cython.long:
    """The power of ten of the suffix ``s[i:]``: a decimal exponent (``e3``, ``E-2``, ``e+5``) or a
    one-letter decimal SI suffix (a lone trailing ``E`` is exa)."""
    ch = s[i]
    if (ch == "e" or ch == "E") and i + 1 < n:
        i += 1
        e_negative = False
        ch = s[i]
        if ch == "+" or ch == "-":
            e_negative = ch == "-"
            i += 1
        e = 0
        e_digits = 0
        while i < n:
            ch = s[i]
            if ch < "0" or ch > "9":
                raise _garbage(s, "a decimal exponent takes only digits after e/E (e.g. 1e3)")
            if e <= _MAX_EXPONENT:
                e = e * 10 + (ord(ch) - 48)
            e_digits += 1
            i += 1
        if e_digits == 0:
            raise _garbage(s, "a decimal exponent needs digits after e/E (e.g. 1e3)")
        if e > _MAX_EXPONENT:
            raise _garbage(s, f"the exponent is out of range (at most {_MAX_EXPONENT})")
        return -e if e_negative else e
    if i + 1 == n:
        power = _decimal_si(ch)
        if power == 99:
            raise _garbage(s, f"unknown suffix {s[i:]!r} (use n, u, m, k, M, G, T, P, E or Ki..Ei)")
        return power
    raise _garbage(s, f"unknown suffix {s[i:]!r} (use n, u, m, k, M, G, T, P, E or Ki..Ei)")


@cython.cfunc
@cython.locals(
    e=cython.long,
    p=cython.longlong,
    num=cython.longlong,
    den=cython.longlong,
    a=cython.longlong,
    b=cython.longlong,
)
def _exact_small(
    mant: cython.longlong,
    frac: cython.Py_ssize_t,
    exp10: cython.long,
    exp2: cython.int,
    negative: cython.bint,
) -> tuple:
    """``_exact`` for a mantissa of at most 18 digits: the same reduced fraction, computed in C
    ``long long`` while every intermediate stays below 2**62, else handed to ``_exact``.  Compiled
    only: the interpreted twin takes ``_exact``, and the differential tests compare the two."""
    if mant == 0:
        return (0, 1)
    e = exp10 - frac  # num × 10^e × 2^exp2: the same value as num × 10^exp10 / 10^frac
    if e > 18 or e < -18 or exp2 >= 62:
        return _exact(mant, frac, exp10, exp2, negative)
    num = mant
    den = 1
    if e > 0:
        p = _POW10[e]
        if num > _SMALL_LIMIT // p:
            return _exact(mant, frac, exp10, exp2, negative)
        num = num * p
    elif e < 0:
        den = _POW10[-e]
    if exp2:
        if num > (_SMALL_LIMIT >> exp2):
            return _exact(mant, frac, exp10, exp2, negative)
        num = num << exp2
    if den != 1:  # den is 10^-e: divide both by their greatest common divisor (Euclid)
        a = num
        b = den
        while b:
            a, b = b, a % b
        if a != 1:
            num = num // a
            den = den // a
    if negative:
        num = -num
    return (num, den)


@cython.cfunc
@cython.locals(den=object, g=object)
def _exact(
    num: int, frac: cython.Py_ssize_t, exp10: cython.long, exp2: cython.int, negative: cython.bint
) -> tuple:
    """``num × 10^(exp10 − frac) × 2^exp2`` (negated when ``negative``) as a reduced fraction."""
    if num == 0:
        return (0, 1)
    den = 1
    if frac:
        den = _pow10(frac)
    if exp10 > 0:
        num = num * _pow10(exp10)
    elif exp10 < 0:
        den = den * _pow10(-exp10)
    if exp2:
        num = num << exp2
    if den != 1:
        g = gcd(num, den)
        if g != 1:
            num = num // g
            den = den // g
    if negative:
        num = -num
    return (num, den)


@cython.ccall  # compiled, whole() calls it in C
def parse(value: object) -> tuple[int, int]:
    """The exact value of a quantity as a reduced fraction ``(numerator, denominator)``.

    >>> parse("1.5Gi")
    (1610612736, 1)
    >>> parse("100m")
    (1, 10)
    """
    if type(value) is int:
        return (value, 1)
    if type(value) is str:
        return _parse_text(value)
    if isinstance(value, bool) or value is None:
        raise _garbage(value, "expected a string or a number")
    if isinstance(value, int):
        return (int(value), 1)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise _garbage(value, "it is not a finite number")
        return _parse_text(repr(value))
    if isinstance(value, str):
        return _parse_text(str(value))
    raise _garbage(value, f"expected a string or a number, got {type(value).__name__}")


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, ch=cython.Py_UCS4, mant=cython.longlong)
def small_whole(s: str) -> cython.longlong:
    """The value of ``s`` when it is 1 to 18 ASCII digits, else -1: the common case on the hot
    path ("1", "50", "16384"), read without parsing a quantity."""
    n = len(s)
    if n == 0 or n > _FAST_DIGITS:
        return -1
    mant = 0
    for i in range(n):
        ch = s[i]
        if ch < "0" or ch > "9":
            return -1
        mant = mant * 10 + (ord(ch) - 48)
    return mant


@cython.ccall
@cython.locals(fast=cython.longlong)
def whole(value: object) -> object:
    """The value as an ``int`` when it is a whole number, else ``None`` (``"1m"``, ``"0.5"``).

    Raises ``ValueError`` for a value that is not a quantity at all.
    """
    if type(value) is int:
        return value
    if type(value) is str:
        fast = small_whole(value)
        if fast >= 0:
            return fast
    num, den = parse(value)
    if den == 1:
        return num
    return None


def milli(value: object) -> int:
    """The value in thousandths, rounded up (as Kubernetes' ``MilliValue``): ``"1.5"`` → 1500."""
    num, den = parse(value)
    return -((-num * 1000) // den)


def bytes_up(value: object) -> object:
    """The value in whole bytes, rounded up (``"1.5"`` → 2); ``None`` for what is not a quantity
    (a bool, None, garbage), so a status figure can be left out instead of failing a pass."""
    if value is None or isinstance(value, bool):
        return None
    try:
        num, den = parse(value)
    except ValueError:
        return None
    return -((-num) // den)


def floor_div(value: object, unit: int) -> int:
    """``⌊value / unit⌋`` exactly: ``floor_div("24Gi", 2**20)`` → 24576 (MiB)."""
    num, den = parse(value)
    return num // (den * unit)


def compare(a: object, b: object) -> int:
    """-1, 0 or 1 as quantity ``a`` is less than, equal to or greater than ``b`` (``"1Ki"`` == 1024)."""
    an, ad = parse(a)
    bn, bd = parse(b)
    left = an * bd
    right = bn * ad
    return (left > right) - (left < right)
