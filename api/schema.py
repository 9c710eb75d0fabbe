"""Judge a document against our CRD schemas offline, as the kube-apiserver would.

- :func:`apply_defaults` is structural defaulting: a property's ``default`` fills it when absent (or a
  non-nullable ``null``) in an object that exists, then defaulting descends into every value —
  including the ones it just filled, so ``transport: {}`` becomes ``{protocol: Auto}`` — and into
  list items and map values. Non-nullable ``null``s without a default are pruned, as the apiserver
  prunes them. ``metadata`` is the apiserver's own and is not touched.
- :func:`validate` reports what the schema refuses with apiserver-like field errors: type, enum,
  bounds, lengths, patterns, required fields, item counts, list-map key and set uniqueness, and
  fields the schema does not declare (what ``kubectl apply`` reports under strict field validation).
  CEL rules are not evaluated here; the transition rules among them need the stored object anyway.
- :func:`judge` does both for a document of any served kind, as ``gpustack-operator admit`` needs.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from api import fielderrors
from api.fielderrors import FieldError

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


@cache
def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    from api.crds import render_all

    out: dict[tuple[str, str], dict[str, Any]] = {}
    for crd in render_all():
        spec = crd["spec"]
        for version in spec["versions"]:
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            out[key] = version["schema"]["openAPIV3Schema"]
    return out


def schema_for(api_version: str, kind: str) -> dict[str, Any] | None:
    """The ``openAPIV3Schema`` serving ``kind`` at ``api_version``, or None when we serve no such kind."""
    return _schemas().get((api_version, kind))


# --- Defaulting ----------------------------------------------------------------------------------------


def apply_defaults(document: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A copy of ``document`` with the schema's defaults applied (the document is not modified)."""
    out = copy.deepcopy(dict(document))
    node = schema if schema is not None else schema_for(str(out.get("apiVersion")), str(out.get("kind")))
    if node is None:
        return out
    _default(out, node, root=True)
    return out


def _default(value: Any, node: Mapping[str, Any], root: bool = False) -> None:
    if isinstance(value, dict):
        properties = node.get("properties") or {}
        for key, prop in properties.items():
            if root and key == "metadata":
                continue
            current = value.get(key, _MISSING)
            if current is _MISSING or (current is None and not prop.get("nullable")):
                if "default" in prop:
                    value[key] = copy.deepcopy(prop["default"])
                elif current is None:
                    del value[key]
        for key, child in value.items():
            if root and key == "metadata":
                continue
            if key in properties:
                _default(child, properties[key])
            elif isinstance(node.get("additionalProperties"), Mapping):
                _default(child, node["additionalProperties"])
    elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
        for item in value:
            _default(item, node["items"])


_MISSING = object()


# --- Validation ----------------------------------------------------------------------------------------


def validate(document: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> list[FieldError]:
    """Every field error the schema finds in ``document`` (validate the defaulted document)."""
    node = (
        schema
        if schema is not None
        else schema_for(str(document.get("apiVersion")), str(document.get("kind")))
    )
    if node is None:
        return [
            fielderrors.invalid(
                "kind", document.get("kind"), f"no such kind served at {document.get('apiVersion')}"
            )
        ]
    return list(_check(document, node, (), root=True))


def _check(value: Any, node: Mapping[str, Any], path: tuple, root: bool = False) -> Iterator[FieldError]:
    where = fielderrors.format_path(path)
    if value is None:
        if not node.get("nullable"):
            yield fielderrors.wrong_type(where, value, _type_label(node))
        return
    if node.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            yield fielderrors.wrong_type(where, value, "integer or string")
            return
        if isinstance(value, str):
            yield from _check_string(value, node, where)
        return
    kind = node.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            yield fielderrors.wrong_type(where, value, "object")
            return
        yield from _check_object(value, node, path, root)
    elif kind == "array":
        if not isinstance(value, list):
            yield fielderrors.wrong_type(where, value, "array")
            return
        yield from _check_array(value, node, path)
    elif kind == "string":
        if not isinstance(value, str):
            yield fielderrors.wrong_type(where, value, "string")
            return
        yield from _check_enum(value, node, where)
        yield from _check_string(value, node, where)
    elif kind == "integer":
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        ):
            yield fielderrors.wrong_type(where, value, "integer")
            return
        yield from _check_enum(value, node, where)
        yield from _check_number(value, node, where)
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            yield fielderrors.wrong_type(where, value, "number")
            return
        yield from _check_number(value, node, where)
    elif kind == "boolean" and not isinstance(value, bool):
        yield fielderrors.wrong_type(where, value, "boolean")


def _type_label(node: Mapping[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    return str(node.get("type", "object"))


def _check_object(
    value: dict[str, Any], node: Mapping[str, Any], path: tuple, root: bool
) -> Iterator[FieldError]:
    properties = node.get("properties") or {}
    additional = node.get("additionalProperties")
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    for key in node.get("required") or ():
        if value.get(key) is None and not (key in value and (properties.get(key) or {}).get("nullable")):
            yield fielderrors.required(fielderrors.format_path((*path, key)))
    for key, child in value.items():
        if root and key == "metadata":
            if not isinstance(child, dict):
                yield fielderrors.wrong_type("metadata", child, "object")
            continue
        if key in properties:
            if child is None and not properties[key].get("nullable"):
                continue  # pruned by the apiserver; a required one is reported above
            yield from _check(child, properties[key], (*path, key))
        elif isinstance(additional, Mapping):
            yield from _check(child, additional, (*path, f"[{key}]"))
        elif not preserve and additional is not True:
            yield fielderrors.unknown(fielderrors.format_path((*path, key)))


def _check_array(value: list[Any], node: Mapping[str, Any], path: tuple) -> Iterator[FieldError]:
    where = fielderrors.format_path(path)
    if "maxItems" in node and len(value) > node["maxItems"]:
        yield fielderrors.too_many(where, len(value), node["maxItems"])
    if "minItems" in node and len(value) < node["minItems"]:
        yield fielderrors.too_few(where, len(value), node["minItems"])
    items = node.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            yield from _check(item, items, (*path, index))
    list_type = node.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = node.get("x-kubernetes-list-map-keys") or []
        seen: set[str] = set()
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            identity = {k: item.get(k) for k in keys}
            marker = fielderrors.show(identity)
            if marker in seen:
                yield fielderrors.duplicate(fielderrors.format_path((*path, index)), identity)
            seen.add(marker)
    elif list_type == "set":
        seen_values: set[str] = set()
        for index, item in enumerate(value):
            marker = fielderrors.show(item)
            if marker in seen_values:
                yield fielderrors.duplicate(fielderrors.format_path((*path, index)), item)
            seen_values.add(marker)


def _check_enum(value: Any, node: Mapping[str, Any], where: str) -> Iterator[FieldError]:
    allowed = node.get("enum")
    if allowed is not None and value not in allowed:
        yield fielderrors.not_supported(where, value, allowed)


def _check_string(value: str, node: Mapping[str, Any], where: str) -> Iterator[FieldError]:
    if "maxLength" in node and len(value) > node["maxLength"]:
        yield fielderrors.too_long(where, node["maxLength"])
    if "minLength" in node and len(value) < node["minLength"]:
        yield fielderrors.too_short(where, value, node["minLength"])
    pattern = node.get("pattern")
    if pattern and re.search(pattern, value) is None:
        yield fielderrors.mismatch(where, value, pattern)
    if node.get("format") == "date-time" and not _DATE_TIME.fullmatch(value):
        yield fielderrors.invalid(where, value, "must be an RFC 3339 date-time")


def _check_number(value: float, node: Mapping[str, Any], where: str) -> Iterator[FieldError]:
    if "minimum" in node:
        exclusive = bool(node.get("exclusiveMinimum"))
        if value < node["minimum"] or (exclusive and value == node["minimum"]):
            yield fielderrors.below_minimum(where, value, node["minimum"], exclusive)
    if "maximum" in node:
        exclusive = bool(node.get("exclusiveMaximum"))
        if value > node["maximum"] or (exclusive and value == node["maximum"]):
            yield fielderrors.above_maximum(where, value, node["maximum"], exclusive)


# --- Both ------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Judgement:
    """The document as the apiserver would store it, and what it would refuse."""

    document: dict[str, Any]
    errors: list[FieldError] = field(default_factory=list)
    served: bool = True

    @property
    def allowed(self) -> bool:
        return self.served and not self.errors


def judge(document: Mapping[str, Any]) -> Judgement:
    """Default, then validate, a document of any kind we serve (``served`` is False for other kinds)."""
    node = schema_for(str(document.get("apiVersion")), str(document.get("kind")))
    if node is None:
        return Judgement(dict(document), [], served=False)
    defaulted = apply_defaults(document, node)
    return Judgement(defaulted, validate(defaulted, node))
