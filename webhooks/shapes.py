"""The one shape check every webhook runs before its handler (:mod:`fastpath.shape`).

Our kinds are walked against the types of their CRD schema (with ``metadata`` typed as the
apiserver types it); Pods and Workloads against the fields our handlers read.  A wrong-typed value
is a field error naming its path and the type expected, so a handler only ever sees the shapes it
was written for: no handler guards itself with a try/except.  Whatever the schema leaves open is
bounded too: an object or array nested more than ``fastpath.shape.MAX_DEPTH`` levels down, in the
object or the stored one, is refused at its path, so no handler's copy or comparison runs out of
stack, whatever the kind (the core kinds without a written shape included).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from api import schema
from api.fielderrors import FieldError, format_path, invalid, wrong_type
from fastpath import shape
from webhooks.review import AdmissionRequest

_CORE = {("", "Pod"): shape.POD, ("kueue.x-k8s.io", "Workload"): shape.WORKLOAD}


@cache
def _crd_node(api_version: str, kind: str) -> shape.Node | None:
    served = schema.schema_for(api_version, kind)
    if served is None:
        return None
    node = shape.from_schema(served)
    node.props["metadata"] = shape.METADATA
    return node


def node_for(request: AdmissionRequest) -> shape.Node | None:
    core = _CORE.get((request.group, request.kind))
    if core is not None:
        return core
    if not request.group:
        return None
    return _crd_node(f"{request.group}/{request.version}", request.kind)


def errors(request: AdmissionRequest) -> list[FieldError]:
    """Every wrong-typed field of the object under review (and of the stored one on UPDATE), or
    else the first place either nests deeper than any handler may follow."""
    node = node_for(request)
    found: list[FieldError] = []
    if node is not None:
        found = [
            wrong_type(format_path(path), value, expected)
            for path, expected, value in shape.check(request.object, node)
        ]
        if request.old_object is not None and not found:
            found = [
                wrong_type(format_path(path), value, f"{expected} (in the stored object)")
                for path, expected, value in shape.check(request.old_object, node)
            ]
    if not found:
        for obj, whose in ((request.object, ""), (request.old_object, " (in the stored object)")):
            route = shape.too_deep(obj)
            if route is not None:
                found = [_too_deep(obj, route, whose)]
                break
    return found


def _too_deep(obj: Any, route: tuple, whose: str) -> FieldError:
    value = obj
    for key in route:
        value = value[key]
    parts = [key if isinstance(key, int) else str(key) for key in route]
    return invalid(
        format_path(parts),
        value,
        f"objects and arrays nest more than {shape.MAX_DEPTH} levels below the object's root here"
        f"{whose}; no field of a Kubernetes object needs that depth: flatten this value or remove it",
    )
