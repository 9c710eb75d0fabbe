"""The shape every Kubernetes object takes in this code: decoded JSON, a ``dict`` keyed by field name."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


# Reading a field of an object that admission has not validated yet: a wrong type reads as absent,
# never as an exception (the mutating webhooks run before the apiserver's schema validation).


def as_dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""
