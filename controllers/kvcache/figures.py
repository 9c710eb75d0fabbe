"""Byte figures between Kubernetes quantities and the store's integers."""

from __future__ import annotations

from typing import Any

from fastpath import quantity

_BINARY = (
    ("Ei", 1 << 60),
    ("Pi", 1 << 50),
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
    ("Ki", 1 << 10),
)


def to_bytes(value: Any) -> int | None:
    """A quantity as whole bytes (rounded up); ``None`` when it is not a quantity."""
    if value is None or isinstance(value, bool):
        return None
    try:
        num, den = quantity.parse(value)
    except ValueError:
        return None
    return -((-num) // den)


def to_quantity(count: int | float) -> str:
    """Bytes as the shortest exact quantity: ``67108864`` → ``64Mi``, ``1000`` → ``1000``."""
    count = int(count)
    for suffix, unit in _BINARY:
        if count and count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)
