"""Canonical quantity strings for the sizes the operator computes (CPU, memory, storage).

Kubernetes prints a CPU as whole cores when it is whole and in millicores otherwise, and a byte
size with the largest binary suffix that divides it exactly; these helpers do the same so the
values the webhooks write read as a person would write them (``1600m``, ``64Gi``, ``15Gi``).
"""

from __future__ import annotations

_DECIMAL = ("", "k", "M", "G", "T", "P", "E")
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
GIBIBYTE = 2**30


def cores(millicores: int) -> str:
    """``1600`` → ``1600m``; ``8000`` → ``8``."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def size(byte_count: int) -> str:
    """``68719476736`` → ``64Gi``; a size no binary unit divides is printed in bytes."""
    if byte_count == 0:
        return "0"
    for suffix, unit in _BINARY:
        if byte_count % unit == 0:
            return f"{byte_count // unit}{suffix}"
    return str(byte_count)


def decimal(value: int) -> str:
    """An integer in the apiserver's canonical decimal form: ``640000`` → ``640k``, ``1500`` →
    ``1500``.  Writing it this way makes what ``admit`` prints equal what the apiserver stores."""
    if value == 0:
        return "0"
    exponent = 0
    while value % 1000 == 0 and exponent < len(_DECIMAL) - 1:
        value //= 1000
        exponent += 1
    return f"{value}{_DECIMAL[exponent]}"
