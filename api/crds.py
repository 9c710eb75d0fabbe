"""``apiextensions.k8s.io/v1`` CustomResourceDefinitions generated from ``api.models``.

The generator walks the pydantic fields itself (no JSON-schema ``$ref`` output) and emits structural
schemas: every node typed, ``x-kubernetes-int-or-string`` for quantities, list semantics
(``x-kubernetes-list-type`` and ``-list-map-keys``), ``nullable`` only where a field says so, schema
``default``s, ``enum``s and bounds, and the CEL ``x-kubernetes-validations`` the models declare.
``metadata`` is left to the apiserver. The output is deterministic.

    python -m api.crds                      print every CRD as multi-document YAML
    python -m api.crds DIRECTORY            write <plural>.<group>.yaml files into DIRECTORY
    python -m api.crds --check DIRECTORY    exit 1 when DIRECTORY differs from a fresh generation
"""

from __future__ import annotations

import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from api.models.base import (
    Fmt,
    IntOrString,
    K8s,
    PreserveUnknown,
    Resource,
    alias_of,
    is_model,
    k8s_meta,
    unwrap,
)
from api.models.registry import RESOURCES

CRD_API_VERSION = "apiextensions.k8s.io/v1"
PART_OF_LABEL = {"app.kubernetes.io/part-of": "gpustack-operator"}
REGENERATE = "gpustack-operator crds --write charts/gpustack-operator/crds (until the CLI exists: python -m api.crds charts/gpustack-operator/crds)"


def _describe(text: str | None) -> str | None:
    """The first paragraph of a docstring, on one line."""
    if not text:
        return None
    paragraph = text.strip().split("\n\n", 1)[0].replace("``", "`")
    return re.sub(r"\s+", " ", paragraph).strip() or None


def _flatten(metadata: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in metadata:
        if isinstance(item, FieldInfo):
            out.extend(_flatten(list(item.metadata)))
        else:
            out.append(item)
    return out


def _apply_constraints(node: dict[str, Any], constraints: list[Any]) -> None:
    is_array = node.get("type") == "array"
    for item in constraints:
        if isinstance(item, annotated_types.Ge):
            node["minimum"] = item.ge
        elif isinstance(item, annotated_types.Gt):
            node["minimum"] = item.gt
            node["exclusiveMinimum"] = True
        elif isinstance(item, annotated_types.Le):
            node["maximum"] = item.le
        elif isinstance(item, annotated_types.Lt):
            node["maximum"] = item.lt
            node["exclusiveMaximum"] = True
        elif isinstance(item, annotated_types.MinLen):
            node["minItems" if is_array else "minLength"] = item.min_length
        elif isinstance(item, annotated_types.MaxLen):
            node["maxItems" if is_array else "maxLength"] = item.max_length
        elif getattr(item, "pattern", None) and not isinstance(item, IntOrString):
            node["pattern"] = item.pattern


def _scalar(core: Any) -> dict[str, Any]:
    if core is bool:
        return {"type": "boolean"}
    if core is int:
        return {"type": "integer"}
    if core is float:
        return {"type": "number"}
    return {"type": "string"}


def _node(annotation: Any, field_metadata: list[Any]) -> dict[str, Any]:
    """The schema of one value: a scalar, a quantity, a list, a map or an object."""
    core, inner, _ = unwrap(annotation)
    metadata = _flatten(inner) + _flatten(field_metadata)
    origin = typing.get_origin(core)
    int_or_string = next((m for m in metadata if isinstance(m, IntOrString)), None)
    node: dict[str, Any]
    if int_or_string is not None:
        node = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
        if int_or_string.pattern:
            node["pattern"] = int_or_string.pattern
        if int_or_string.max_length:
            node["maxLength"] = int_or_string.max_length
    elif any(isinstance(m, PreserveUnknown) for m in metadata):
        node = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    elif is_model(core):
        node = object_schema(core)
    elif origin is list:
        node = {"type": "array", "items": _node(typing.get_args(core)[0], [])}
    elif origin is dict:
        node = {"type": "object", "additionalProperties": _node(typing.get_args(core)[1], [])}
    elif origin is Literal:
        values = list(typing.get_args(core))
        node = _scalar(type(values[0]))
        node["enum"] = values
        if node["type"] == "string":
            node["maxLength"] = max(len(v) for v in values)
    else:
        node = _scalar(core)
    for item in metadata:
        if isinstance(item, Fmt):
            node["format"] = item.name
    _apply_constraints(node, metadata)
    return node


def _field_node(info: FieldInfo, meta: K8s) -> dict[str, Any]:
    node = _node(info.annotation, list(info.metadata))
    if meta.doc:
        node["description"] = re.sub(r"\s+", " ", meta.doc.replace("``", "`")).strip()
    if meta.has_default:
        node["default"] = meta.crd_default
    if meta.nullable:
        node["nullable"] = True
    if meta.list_type:
        node["x-kubernetes-list-type"] = meta.list_type
    if meta.map_keys:
        node["x-kubernetes-list-map-keys"] = list(meta.map_keys)
    if meta.map_type:
        node["x-kubernetes-map-type"] = meta.map_type
    if meta.rules:
        node.setdefault("x-kubernetes-validations", []).extend(r.render() for r in meta.rules)
    return node


def object_schema(cls: type[BaseModel]) -> dict[str, Any]:
    """The schema of an object node: its properties, what is required, its CEL rules."""
    node: dict[str, Any] = {"type": "object"}
    description = _describe(cls.__doc__)
    if description:
        node["description"] = description
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, info in cls.model_fields.items():
        meta = k8s_meta(info)
        key = alias_of(name, info)
        properties[key] = _field_node(info, meta)
        if meta.required:
            required.append(key)
    if properties:
        node["properties"] = properties
    if required:
        node["required"] = required
    rules = getattr(cls, "__k8s_rules__", ())
    if rules:
        node["x-kubernetes-validations"] = [r.render() for r in rules]
    map_type = getattr(cls, "__k8s_map_type__", None)
    if map_type:
        node["x-kubernetes-map-type"] = map_type
    return node


def root_schema(cls: type[Resource]) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of a kind: apiVersion, kind, metadata (the apiserver's), spec, status."""
    node = object_schema(cls)
    properties = node["properties"]
    properties["apiVersion"] = {"type": "string", "description": "The versioned schema of this object."}
    properties["kind"] = {"type": "string", "description": "The REST resource this object represents."}
    properties["metadata"] = {"type": "object"}
    node["required"] = [r for r in node.get("required", []) if r not in ("apiVersion", "kind", "metadata")]
    if not node["required"]:
        del node["required"]
    return node


def render(cls: type[Resource]) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind."""
    crd = cls.__crd__
    names: dict[str, Any] = {
        "kind": crd.kind,
        "listKind": crd.list_kind,
        "plural": crd.plural,
        "singular": crd.singular_name,
    }
    if crd.short_names:
        names["shortNames"] = list(crd.short_names)
    if crd.categories:
        names["categories"] = list(crd.categories)
    version: dict[str, Any] = {
        "name": crd.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root_schema(cls)},
    }
    if crd.status:
        version["subresources"] = {"status": {}}
    if crd.columns:
        version["additionalPrinterColumns"] = [c.render() for c in crd.columns]
    return {
        "apiVersion": CRD_API_VERSION,
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd.name, "labels": dict(PART_OF_LABEL)},
        "spec": {"group": crd.group, "names": names, "scope": crd.scope, "versions": [version]},
    }


def render_all() -> list[dict[str, Any]]:
    """Every CRD, sorted by name."""
    return sorted((render(cls) for cls in RESOURCES), key=lambda c: c["metadata"]["name"])


def _yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=True, default_flow_style=False, width=120, allow_unicode=True)


def render_yaml() -> str:
    """Every CRD as one multi-document YAML stream."""
    return "".join(f"---\n{_yaml(crd)}" for crd in render_all())


def files() -> dict[str, str]:
    """``<plural>.<group>.yaml`` -> content, for every CRD."""
    return {f"{crd['metadata']['name']}.yaml": _yaml(crd) for crd in render_all()}


def write(directory: str | Path) -> list[Path]:
    """Write one file per CRD into ``directory``, removing generated files no kind produces any more."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    wanted = files()
    for stale in root.glob("*.gpustack.ai.yaml"):
        if stale.name not in wanted:
            stale.unlink()
    written = []
    for name, content in wanted.items():
        path = root / name
        path.write_text(content)
        written.append(path)
    return written


def differences(directory: str | Path) -> list[str]:
    """File names in ``directory`` that differ from, are missing from, or are extra to a fresh generation."""
    root = Path(directory)
    wanted = files()
    out = [
        name
        for name, content in wanted.items()
        if not (root / name).is_file() or (root / name).read_text() != content
    ]
    out += [p.name for p in root.glob("*.gpustack.ai.yaml") if p.name not in wanted]
    return sorted(out)


# --- Structural-schema check --------------------------------------------------------------------------

_FORBIDDEN = ("$ref", "definitions", "dependencies", "patternProperties", "additionalItems", "id", "$schema")


def _walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for key, child in (node.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[*]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{*}}")


def structural_problems(crd: dict[str, Any]) -> list[str]:
    """What keeps a CRD's schema from being structural, or its list-maps from being accepted."""
    problems: list[str] = []
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        for path, node in _walk(schema, ""):
            where = path or "<root>"
            for key in _FORBIDDEN:
                if key in node:
                    problems.append(f"{where}: {key} is not allowed in a structural schema")
            int_or_string = node.get("x-kubernetes-int-or-string") is True
            preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
            if "type" not in node and not (int_or_string or preserve):
                problems.append(f"{where}: no type")
            if "anyOf" in node and not int_or_string:
                problems.append(f"{where}: anyOf outside an int-or-string node")
            if node.get("type") == "object" and "properties" in node and "additionalProperties" in node:
                problems.append(f"{where}: both properties and additionalProperties")
            if path == ".metadata" and set(node) - {"type"}:
                problems.append(f"{where}: metadata may only be typed, the apiserver owns it")
            if node.get("x-kubernetes-list-type") == "map":
                problems.extend(_list_map_problems(where, node))
    return problems


def _list_map_problems(where: str, node: dict[str, Any]) -> list[str]:
    items = node.get("items") or {}
    keys = node.get("x-kubernetes-list-map-keys") or []
    if items.get("type") != "object":
        return [f"{where}: a list-map's items must be objects"]
    if not keys:
        return [f"{where}: a list-map needs x-kubernetes-list-map-keys"]
    problems = []
    properties = items.get("properties") or {}
    required = set(items.get("required") or [])
    for key in keys:
        if key not in properties:
            problems.append(f"{where}: list-map key {key} is not a property of its items")
        elif key not in required and "default" not in properties[key]:
            problems.append(f"{where}: list-map key {key} must be required or defaulted")
        elif properties[key].get("nullable"):
            problems.append(f"{where}: list-map key {key} may not be nullable")
    return problems


def main(argv: list[str]) -> int:
    if not argv:
        sys.stdout.write(render_yaml())
        return 0
    if argv[0] == "--check" and len(argv) == 2:
        stale = differences(argv[1])
        if stale:
            sys.stderr.write(f"{argv[1]} is stale ({', '.join(stale)}); run: {REGENERATE}\n")
            return 1
        return 0
    if len(argv) == 1 and not argv[0].startswith("-"):
        for path in write(argv[0]):
            sys.stdout.write(f"{path}\n")
        return 0
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
