"""The one shape check every webhook runs before its handler (:mod:`fastpath.shape`).

Our kinds are walked against the types of their CRD schema (with ``metadata`` typed as the
apiserver types it); Pods and Workloads against the fields our handlers read.  A wrong-typed value
is a field error naming its path and the type expected, so a handler only ever sees the shapes it
was written for: no handler guards itself with a try/except.
"""

from __future__ import annotations

from functools import cache

from api import schema
from api.fielderrors import FieldError, format_path, wrong_type
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
    """Every wrong-typed field of the object under review (and of the stored one on UPDATE)."""
    node = node_for(request)
    if node is None:
        return []
    found = [
        wrong_type(format_path(path), value, expected)
        for path, expected, value in shape.check(request.object, node)
    ]
    if request.old_object is not None and not found:
        found = [
            wrong_type(format_path(path), value, f"{expected} (in the stored object)")
            for path, expected, value in shape.check(request.old_object, node)
        ]
    return found
