"""Defensive reads of admitted objects: a field of the wrong type reads as absent, so the rules
that need it refuse it with its path instead of raising."""

from __future__ import annotations

import re
from typing import Any, cast

from fastpath import quantity

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def dig(obj: Any, *keys: str) -> Any:
    """``obj[k0][k1]...`` through dicts only; ``None`` when any step is missing or not a dict."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def positive_quantity(value: Any) -> bool:
    """True for a quantity strictly above zero (``"900Gi"``, ``5``); False for zero, negative or garbage."""
    if value is None or isinstance(value, bool):
        return False
    try:
        num, _ = quantity.parse(value)
    except ValueError:
        return False
    return num > 0


def quantity_bytes(value: Any) -> int | None:
    """A quantity in whole bytes (rounded up); ``None`` when it is not one."""
    return cast(int | None, quantity.bytes_up(value))


def is_dns_label(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(DNS_LABEL.match(value))


def host_port(address: Any) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` too) with a non-blank host and a port in 1..65535, else ``None``."""
    if not isinstance(address, str) or address != address.strip():
        return None
    if address.startswith("["):
        host, sep, port = address[1:].partition("]:")
    else:
        host, sep, port = address.rpartition(":")
    if not sep or not host.strip() or not port.isascii() or not port.isdigit():
        return None
    number = int(port)
    return (host, number) if 0 < number < 65536 else None
