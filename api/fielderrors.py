"""Field errors worded the way the kube-apiserver words them.

Both judges of a manifest — the pydantic models (``api.models.registry.parse``) and the structural-schema
validator (``api.schema.validate``) — report through this one vocabulary, so a refusal reads the same
whichever of them found it, and the same as the apiserver's own ``422 Invalid`` causes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# Reasons, as metav1.CauseType spells them.
FORBIDDEN = "FieldValueForbidden"
NOT_FOUND = "FieldValueNotFound"
REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
NOT_SUPPORTED = "FieldValueNotSupported"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
DUPLICATE = "FieldValueDuplicate"
TYPE_INVALID = "FieldValueTypeInvalid"
UNKNOWN_FIELD = "FieldValueUnknown"


@dataclass(frozen=True, slots=True)
class FieldError:
    """One refusal: the Kubernetes-style field path, the cause type and the message."""

    path: str
    reason: str
    message: str

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        """``spec.roles[0].size: Invalid value: 3: ...``, as the apiserver lists its causes."""
        return f"{self.path}: {self.message}" if self.path else self.message

    def cause(self) -> dict[str, str]:
        """The metav1.StatusCause of this error."""
        return {"reason": self.reason, "message": self.message, "field": self.path}


def format_path(parts: Iterable[str | int]) -> str:
    """``("spec", "roles", 0, "name")`` -> ``spec.roles[0].name``; map keys pass as ``("[key]",)``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("["):
            out += part
        else:
            out += f".{part}" if out else part
    return out


SHOW_LIMIT = 256  # characters of a value a message quotes; longer ones are cut with "..."


def show(value: Any) -> str:
    """A value as the apiserver prints it inside a message: JSON, compact, at most
    :data:`SHOW_LIMIT` characters (a hostile value never makes a huge or unprintable message)."""
    if isinstance(value, list | dict) and _deeper_than(value, 16):
        text = f"<{'array' if isinstance(value, list) else 'object'} nested more than 16 deep>"
    else:
        try:
            text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
        except (TypeError, ValueError, RecursionError):
            text = repr(value)
    return text if len(text) <= SHOW_LIMIT else text[: SHOW_LIMIT - 3] + "..."


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether ``value`` nests lists/objects more than ``depth`` levels (stops as soon as it knows)."""
    level = [value]
    for _ in range(depth):
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item if isinstance(item, list) else ())
            if isinstance(child, list | dict)
        ][:64]
        if not level:
            return False
    return True


def _with(words: str, detail: str) -> str:
    return f"{words}: {detail}" if detail else words


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, REQUIRED, _with("Required value", detail))


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, FORBIDDEN, _with("Forbidden", detail))


def not_found(path: str, value: Any, detail: str = "") -> FieldError:
    return FieldError(path, NOT_FOUND, _with(f"Not found: {show(value)}", detail))


def unknown(path: str) -> FieldError:
    return FieldError(path, UNKNOWN_FIELD, "field not declared in schema; remove it or correct its spelling")


def wrong_type(path: str, value: Any, expected: str) -> FieldError:
    return FieldError(path, TYPE_INVALID, f"Invalid value: {show(value)}: must be of type {expected}")


def not_supported(path: str, value: Any, allowed: Sequence[Any]) -> FieldError:
    supported = ", ".join(show(a) for a in allowed)
    return FieldError(path, NOT_SUPPORTED, f"Unsupported value: {show(value)}: supported values: {supported}")


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, INVALID, f"Invalid value: {show(value)}: {detail}")


def too_long(path: str, limit: int) -> FieldError:
    return FieldError(path, TOO_LONG, f"Too long: may not be more than {limit} bytes")


def too_many(path: str, count: int, limit: int) -> FieldError:
    return FieldError(path, TOO_MANY, f"Too many: {count}: must have at most {limit} items")


def duplicate(path: str, value: Any, detail: str = "") -> FieldError:
    return FieldError(path, DUPLICATE, _with(f"Duplicate value: {show(value)}", detail))


def below_minimum(path: str, value: Any, minimum: Any, exclusive: bool = False) -> FieldError:
    relation = "greater than" if exclusive else "greater than or equal to"
    return invalid(path, value, f"should be {relation} {minimum}")


def above_maximum(path: str, value: Any, maximum: Any, exclusive: bool = False) -> FieldError:
    relation = "less than" if exclusive else "less than or equal to"
    return invalid(path, value, f"should be {relation} {maximum}")


def too_short(path: str, value: Any, limit: int) -> FieldError:
    return invalid(path, value, f"should be at least {limit} chars long")


def too_few(path: str, count: int, limit: int) -> FieldError:
    return invalid(path, count, f"should have at least {limit} items")


def mismatch(path: str, value: Any, pattern: str) -> FieldError:
    return invalid(path, value, f"should match '{pattern}'")
