"""Byte figures between Kubernetes quantities and the store's integers."""

from __future__ import annotations

from typing import Any, cast

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
    """A quantity in whole bytes (rounded up); ``None`` when it is not one."""
    return cast(int | None, quantity.bytes_up(value))


def to_quantity(count: int | float) -> str:
    """Bytes as the shortest exact quantity: ``67108864`` → ``64Mi``, ``1000`` → ``1000``."""
    count = int(count)
    for suffix, unit in _BINARY:
        if count and count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)
