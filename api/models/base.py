"""The machinery every custom-resource model is built from.

A model field carries two sets of facts: what pydantic validates, and what the Go type says about
serialisation and the CRD schema. The second set rides in ``json_schema_extra["k8s"]`` as a
:class:`K8s` record, written through :func:`field`:

- ``required``  — ``+required`` in the Go type; the CRD lists it, pydantic demands it.
- ``pointer``   — a Go pointer (``*int32``, ``*resource.Quantity``): absent and zero differ, so an
  explicit zero is kept on dump.
- ``always``    — a Go value without ``omitempty``: dumped even when unset, with its zero value.
- otherwise     — a Go value with ``omitempty``: dumped only when set and not the zero value
  (a struct is never "empty" to Go, so an explicitly written object is always kept).

``crd_default`` is the schema default the apiserver applies; it doubles as the python default so a
reader of an un-defaulted manifest sees the effective value. List semantics (``list_type``,
``map_keys``), ``nullable`` and CEL ``rules`` travel to the CRD generator (``api.crds``).
"""

from __future__ import annotations

import copy
import re
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, TypeGuard, Union

import annotated_types
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from api import CATEGORY, GROUP, VERSION

_UNSET: Any = type("_Unset", (), {"__repr__": lambda self: "<unset>"})()

# --- Schema markers (read by api.crds) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fmt:
    """An OpenAPI ``format`` for the node (``int32``, ``int64``, ``date-time``)."""

    name: str


@dataclass(frozen=True, slots=True)
class IntOrString:
    """``x-kubernetes-int-or-string: true``, with an optional pattern for the string arm."""

    pattern: str | None = None
    max_length: int | None = None


@dataclass(frozen=True, slots=True)
class PreserveUnknown:
    """``x-kubernetes-preserve-unknown-fields: true`` — the Go type holds arbitrary JSON."""


# --- Scalar types ----------------------------------------------------------------------------------

QUANTITY_PATTERN = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)
_DURATION_RE = re.compile(r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$")
_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def _check_quantity(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PydanticCustomError(
            "quantity_type",
            'must be a quantity: an integer, or a string such as "1", "500m" or "8Gi"',
        )
    if isinstance(value, str) and not _QUANTITY_RE.fullmatch(value):
        raise PydanticCustomError(
            "quantity_syntax",
            "quantities must match the regular expression '{pattern}'",
            {"pattern": QUANTITY_PATTERN},
        )
    return value


def _check_duration(value: str) -> str:
    if not _DURATION_RE.fullmatch(value):
        raise PydanticCustomError("duration_syntax", 'must be a duration such as "30s", "5m" or "1h30m"')
    return value


def _coerce_time(value: Any) -> Any:
    if isinstance(value, datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
        return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def _check_time(value: str) -> str:
    if not _TIME_RE.fullmatch(value):
        raise PydanticCustomError("time_syntax", 'must be an RFC 3339 time such as "2026-01-02T15:04:05Z"')
    return value


def _int_range(low: int, high: int) -> Callable[[int], int]:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise PydanticCustomError(
                "int_range", "must be between {low} and {high}", {"low": low, "high": high}
            )
        return value

    return check


Quantity = Annotated[int | str, PlainValidator(_check_quantity), IntOrString(QUANTITY_PATTERN)]
"""A Kubernetes resource quantity: ``1``, ``"500m"``, ``"8Gi"`` (int-or-string, as the apiserver takes)."""

Duration = Annotated[str, AfterValidator(_check_duration)]
"""A Go ``metav1.Duration``: ``"30s"``, ``"1h30m"``."""

Time = Annotated[str, BeforeValidator(_coerce_time), AfterValidator(_check_time), Fmt("date-time")]
"""A ``metav1.Time``, kept as its RFC 3339 text so it round-trips byte for byte."""

Int32 = Annotated[int, AfterValidator(_int_range(-(2**31), 2**31 - 1)), Fmt("int32")]
Int64 = Annotated[int, AfterValidator(_int_range(-(2**63), 2**63 - 1)), Fmt("int64")]
UInt32 = Annotated[int, AfterValidator(_int_range(0, 2**32 - 1)), Fmt("int64")]
UInt64 = Annotated[int, AfterValidator(_int_range(0, 2**64 - 1))]

RawJSON = Annotated[dict[str, Any], PreserveUnknown()]
"""Arbitrary JSON the Go type holds as ``runtime.RawExtension`` / ``apiextensions.JSON``."""


def bounded(max_length: int, *, min_length: int | None = None, pattern: str | None = None) -> Any:
    """A string type with length bounds (and a pattern), for list items and map values."""
    constraints: list[Any] = [annotated_types.MaxLen(max_length)]
    if min_length is not None:
        constraints.append(annotated_types.MinLen(min_length))
    if pattern is not None:
        constraints.append(Field(pattern=pattern))
    return Annotated[str, *constraints]


# Bounded strings for list items, spelled as type aliases so a type checker reads them as str.
LabelValue = Annotated[str, annotated_types.MaxLen(63)]
ObjectName = Annotated[str, annotated_types.MaxLen(253)]
Pattern = Annotated[str, annotated_types.MinLen(1), annotated_types.MaxLen(256)]
QualifiedKey = Annotated[str, annotated_types.MaxLen(317)]
Argument = Annotated[str, annotated_types.MaxLen(8192)]


# --- CEL rules, printer columns, CRD identity -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``x-kubernetes-validations`` entry."""

    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


def frozen(name: str, message: str, *, optional: bool) -> Rule:
    """A transition rule on the parent object that refuses any change to ``name``, removal included."""
    if optional:
        rule = (
            f"has(self.{name}) == has(oldSelf.{name}) && (!has(self.{name}) || self.{name} == oldSelf.{name})"
        )
    else:
        rule = f"self.{name} == oldSelf.{name}"
    return Rule(rule=rule, message=message, field_path=f".{name}")


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    priority: int = 0
    description: str | None = None

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.priority:
            out["priority"] = self.priority
        if self.description:
            out["description"] = self.description
        return out


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True, slots=True)
class CRD:
    """Where a kind is served and how kubectl shows it: one registry entry per kind."""

    kind: str
    plural: str
    scope: Literal["Namespaced", "Cluster"]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = (CATEGORY,)
    columns: tuple[PrinterColumn, ...] = ()
    status: bool = True
    group: str = GROUP
    version: str = VERSION
    singular: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"


# --- Fields ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class K8s:
    """What the Go type and the CRD say about one field (see the module docstring)."""

    required: bool = False
    pointer: bool = False
    always: bool = False
    crd_default: Any = _UNSET
    list_type: Literal["atomic", "set", "map"] | None = None
    map_keys: tuple[str, ...] = ()
    map_type: Literal["atomic", "granular"] | None = None
    nullable: bool = False
    rules: tuple[Rule, ...] = ()
    doc: str | None = None

    @property
    def has_default(self) -> bool:
        return self.crd_default is not _UNSET


_PLAIN_META = K8s()


def field(
    default: Any = None,
    *,
    alias: str | None = None,
    required: bool = False,
    pointer: bool = False,
    always: bool = False,
    crd_default: Any = _UNSET,
    list_type: Literal["atomic", "set", "map"] | None = None,
    map_keys: tuple[str, ...] = (),
    map_type: Literal["atomic", "granular"] | None = None,
    nullable: bool = False,
    rules: tuple[Rule, ...] = (),
    doc: str | None = None,
    ge: int | None = None,
    le: int | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    pattern: str | None = None,
    default_factory: Callable[[], Any] | None = None,
) -> Any:
    """Declare a field: pydantic constraints plus the Go/CRD facts (:class:`K8s`)."""
    meta = K8s(
        required=required,
        pointer=pointer,
        always=always,
        crd_default=crd_default,
        list_type=list_type,
        map_keys=map_keys,
        map_type=map_type,
        nullable=nullable,
        rules=rules,
        doc=doc,
    )
    kwargs: dict[str, Any] = {"alias": alias, "json_schema_extra": {"k8s": meta}, "description": doc}
    for key, value in (("ge", ge), ("le", le), ("min_length", min_length), ("max_length", max_length)):
        if value is not None:
            kwargs[key] = value
    if pattern is not None:
        kwargs["pattern"] = pattern
    if required:
        return Field(..., **kwargs)
    if default_factory is not None:
        return Field(default_factory=default_factory, **kwargs)
    if default is None and crd_default is not _UNSET:
        if isinstance(crd_default, dict | list):
            return Field(default_factory=lambda: copy.deepcopy(crd_default), **kwargs)
        return Field(crd_default, **kwargs)
    return Field(default, **kwargs)


def k8s_meta(info: Any) -> K8s:
    """The :class:`K8s` record of a pydantic FieldInfo (a plain one when the field has none)."""
    extra = info.json_schema_extra
    if isinstance(extra, dict):
        meta = extra.get("k8s")
        if isinstance(meta, K8s):
            return meta
    return _PLAIN_META


# --- Base classes ----------------------------------------------------------------------------------


class Schema(BaseModel):
    """Base of every object node: strict types, camelCase aliases, unknown fields refused."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        populate_by_name=True,
        validate_default=False,
        frozen=False,
    )

    __k8s_rules__: ClassVar[tuple[Rule, ...]] = ()
    """CEL rules placed on this object's node in the CRD schema."""

    __k8s_map_type__: ClassVar[str | None] = None
    """``x-kubernetes-map-type`` of this object's node (``atomic`` for references and selectors)."""


class ObjectMeta(Schema):
    """Kubernetes object metadata, read leniently: every key the apiserver knows is accepted."""

    model_config = ConfigDict(extra="allow", strict=False, populate_by_name=True)

    name: str | None = None
    generate_name: str | None = field(alias="generateName")
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class Resource(Schema):
    """A top-level object of a custom resource kind. Subclasses set ``__crd__``."""

    __crd__: ClassVar[CRD]

    api_version: str = field(alias="apiVersion", always=True)
    kind: str = field(always=True)
    metadata: ObjectMeta = field(default_factory=ObjectMeta)

    @model_validator(mode="before")
    @classmethod
    def _fill_identity(cls, data: Any) -> Any:
        """``apiVersion`` and ``kind`` default to this class's registry entry when absent."""
        if isinstance(data, dict) and hasattr(cls, "__crd__"):
            crd = cls.__crd__
            if "apiVersion" not in data and "api_version" not in data:
                data = {"apiVersion": crd.api_version, **data}
            if "kind" not in data:
                data = {**data, "kind": crd.kind}
        return data

    @field_validator("api_version")
    @classmethod
    def _check_api_version(cls, value: str) -> str:
        expected = cls.__crd__.api_version
        if value != expected:
            raise PydanticCustomError("api_version", "must be {expected}", {"expected": expected})
        return value

    @field_validator("kind")
    @classmethod
    def _check_kind(cls, value: str) -> str:
        expected = cls.__crd__.kind
        if value != expected:
            raise PydanticCustomError("kind", "must be {expected}", {"expected": expected})
        return value


# --- Annotation introspection (shared by dump, error paths and api.crds) ---------------------------


def unwrap(annotation: Any) -> tuple[Any, list[Any], bool]:
    """Strip ``Optional`` and ``Annotated``: (core type, collected metadata, was optional)."""
    metadata: list[Any] = []
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            args = typing.get_args(annotation)
            annotation = args[0]
            metadata.extend(args[1:])
            continue
        if origin in (Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != len(typing.get_args(annotation)):
                optional = True
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation, metadata, optional


def is_model(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def alias_of(name: str, info: Any) -> str:
    return info.alias or name


# --- Dump --------------------------------------------------------------------------------------------


def _go_empty(value: Any) -> bool:
    """Go's ``omitempty`` notion of empty; a struct value is never empty."""
    if isinstance(value, bool):
        return value is False
    if isinstance(value, int | float):
        return value == 0
    if isinstance(value, str | list | dict):
        return len(value) == 0
    return False


def dump_model(model: BaseModel) -> dict[str, Any]:
    """Serialise as the Go type would: omitempty fields dropped when zero, pointers kept."""
    out: dict[str, Any] = {}
    fields_set = model.model_fields_set
    for name, info in type(model).model_fields.items():
        meta = k8s_meta(info)
        value = getattr(model, name)
        key = alias_of(name, info)
        if name in fields_set:
            if value is None:
                if meta.nullable:
                    out[key] = None
                continue
            if not (meta.pointer or meta.always or meta.required or meta.nullable) and _go_empty(value):
                continue
        elif not (meta.always or meta.required) or value is None:
            continue
        out[key] = _dump_value(value)
    if model.model_extra:
        for key, value in model.model_extra.items():
            out[key] = _dump_value(value)
    return out


def _dump_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return dump_model(value)
    if isinstance(value, list):
        return [_dump_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump_value(v) for k, v in value.items()}
    return copy.deepcopy(value)


# --- Walking a validated model (list-map keys) ----------------------------------------------------


def iter_list_maps(model: BaseModel, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple, list, K8s]]:
    """Yield every list-map (``x-kubernetes-list-type: map``) value with its path and metadata."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if value is None:
            continue
        key = alias_of(name, info)
        meta = k8s_meta(info)
        here = (*path, key)
        if isinstance(value, list) and meta.list_type == "map":
            yield here, value, meta
        yield from _iter_children(value, here)


def _iter_children(value: Any, path: tuple) -> Iterator[tuple[tuple, list, K8s]]:
    if isinstance(value, BaseModel):
        yield from iter_list_maps(value, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _iter_children(item, (*path, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _iter_children(item, (*path, f"[{key}]"))


def list_map_key(item: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The key tuple of one list-map item, by JSON name, with schema defaults filled in."""
    out: dict[str, Any] = {}
    fields = type(item).model_fields
    by_alias = {alias_of(n, i): (n, i) for n, i in fields.items()}
    for key in keys:
        name, _ = by_alias[key]
        out[key] = getattr(item, name)
    return out
