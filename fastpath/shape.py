"""Does an object have the shape its handlers read?  Types only, fast, with field paths.

The kube-apiserver never sends a wrong-typed object (it decodes into Go structs or checks the CRD's
structural schema first), but anything that reaches the webhook port directly can: ``spec: "x"``,
``metadata.labels: 5``, a quantity nested a thousand arrays deep.  Before a handler runs, the
object is walked against a :class:`Node` tree — compiled from the CRD's ``openAPIV3Schema`` for our
kinds, or written for the Pod and Workload fields the handlers read — and every value of the wrong
JSON type is reported with its path and the type expected, so the answer is a field error, never an
internal one.  Only types are checked (enums, bounds and patterns stay the handlers' and the
apiserver's); ``null`` passes (optional fields); a part the schema leaves open is not walked, so
the walk is bounded by the schema's depth, never by the input's.  What the schema leaves open can
still nest without end, and the handlers copy and compare objects recursively: :func:`too_deep`
finds an object or array nested more than :data:`MAX_DEPTH` levels down, anywhere in the object.

Compiled by Cython (pure-Python mode); ``fastpath.pure.load("shape")`` is the interpreted twin.
"""

from __future__ import annotations

from typing import Any

import cython

ANY = 0
OBJECT = 1
ARRAY = 2
STRING = 3
INTEGER = 4
NUMBER = 5
BOOLEAN = 6
INT_OR_STRING = 7
NAMES = ("any value", "object", "array", "string", "integer", "number", "boolean", "integer or string")

_OBJECT = cython.declare(cython.int, 1)
_ARRAY = cython.declare(cython.int, 2)
_STRING = cython.declare(cython.int, 3)
_INTEGER = cython.declare(cython.int, 4)
_NUMBER = cython.declare(cython.int, 5)
_BOOLEAN = cython.declare(cython.int, 6)
_INT_OR_STRING = cython.declare(cython.int, 7)
MAX_ERRORS = 20  # a denial lists at most this many wrong-typed fields
# Objects and arrays nested deeper than this below an object's root are refused (:func:`too_deep`):
# no Kubernetes object needs it, and the handlers' copies and comparisons recurse per level.
MAX_DEPTH = 64


@cython.cclass
class Node:
    """One level of a shape: a JSON type and, for objects and arrays, what they hold."""

    code = cython.declare(cython.int, visibility="readonly")
    props = cython.declare(dict, visibility="public")
    item = cython.declare(object, visibility="readonly")  # Node | None: array items
    extra = cython.declare(object, visibility="readonly")  # Node | None: map values

    def __init__(
        self, code: int, props: dict | None = None, item: object = None, extra: object = None
    ) -> None:
        self.code = code
        self.props = props if props is not None else {}
        self.item = item
        self.extra = extra


def from_schema(schema: dict) -> Node:
    """The type tree of an OpenAPI v3 structural schema (``openAPIV3Schema``)."""
    if schema.get("x-kubernetes-int-or-string"):
        return Node(INT_OR_STRING)
    kind = schema.get("type")
    if kind == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            return Node(OBJECT)
        properties = {name: from_schema(child) for name, child in (schema.get("properties") or {}).items()}
        additional = schema.get("additionalProperties")
        extra = from_schema(additional) if isinstance(additional, dict) else None
        return Node(OBJECT, properties, None, extra)
    if kind == "array":
        items = schema.get("items")
        return Node(ARRAY, None, from_schema(items) if isinstance(items, dict) else None)
    codes = {"string": STRING, "integer": INTEGER, "number": NUMBER, "boolean": BOOLEAN}
    return Node(codes.get(str(kind), ANY))


@cython.cfunc
def _kind_ok(value: object, code: cython.int) -> cython.bint:
    if code == _OBJECT:
        return type(value) is dict
    if code == _ARRAY:
        return type(value) is list
    if code == _STRING:
        return type(value) is str
    if code == _BOOLEAN:
        return type(value) is bool
    if code == _INTEGER:
        return (type(value) is int) or (type(value) is float and value.is_integer())
    if code == _NUMBER:
        return type(value) is int or type(value) is float
    if code == _INT_OR_STRING:
        return type(value) is str or type(value) is int or type(value) is float
    return True


@cython.cfunc
def _walk(value: object, node: Node, errors: list) -> cython.Py_ssize_t:
    """Append ``[expected, value, key…]`` records (keys innermost first) for every wrong type under
    ``value``; returns how many it appended.  Callers add their own key to each new record (a map
    key as ``[key]``, as field paths spell it)."""
    if value is None:
        return 0
    if not _kind_ok(value, node.code):
        errors.append([NAMES[node.code], value])
        return 1
    found: cython.Py_ssize_t = 0
    added: cython.Py_ssize_t
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    child: Node
    if node.code == _OBJECT:
        props: dict = node.props
        extra = node.extra
        if not props and extra is None:
            return 0
        for key, item in (value).items():  # type: ignore[attr-defined]
            if item is None:
                continue
            found_child = props.get(key)
            if found_child is None:
                if extra is None:
                    continue
                child = extra
            else:
                child = found_child
            start = len(errors)
            added = _walk(item, child, errors)
            for j in range(start, start + added):
                errors[j].append(key if found_child is not None else "[" + str(key) + "]")
            found += added
            if len(errors) >= MAX_ERRORS:
                return found
    elif node.code == _ARRAY and node.item is not None:
        child = node.item
        items: list = value  # type: ignore[assignment]
        for i in range(len(items)):
            start = len(errors)
            added = _walk(items[i], child, errors)
            for j in range(start, start + added):
                errors[j].append(i)
            found += added
            if len(errors) >= MAX_ERRORS:
                return found
    return found


@cython.cfunc
def _deeper(value: object, room: cython.int, keys: list) -> cython.bint:
    """Whether ``value`` (an object or an array) holds objects or arrays more than ``room`` levels
    below itself; when it does, ``keys`` ends up holding the route to the first one past the limit,
    innermost key first.  Recursion is bounded by ``room``, never by the input."""
    i: cython.Py_ssize_t
    mapping: dict
    items: list
    if room == 0:
        return True
    if type(value) is dict:
        mapping = value
        for key, item in mapping.items():
            if (type(item) is dict or type(item) is list) and _deeper(item, room - 1, keys):
                keys.append(key)
                return True
    else:
        items = value  # type: ignore[assignment]
        for i in range(len(items)):
            item = items[i]
            if (type(item) is dict or type(item) is list) and _deeper(item, room - 1, keys):
                keys.append(i)
                return True
    return False


def too_deep(value: Any, limit: int = MAX_DEPTH) -> tuple | None:
    """The route (outermost key first) to the first object or array nested more than ``limit``
    levels below ``value``, or None when nothing is that deep.  A handler copies and compares
    objects recursively, so a value deeper than the interpreter can follow must be refused before
    any handler sees it; every container is visited at most once."""
    if type(value) is not dict and type(value) is not list:
        return None
    keys: list = []
    if not _deeper(value, limit + 1, keys):
        return None
    keys.reverse()
    return tuple(keys)


def check(value: Any, node: Node, prefix: tuple = ()) -> list[tuple[tuple, str, Any]]:
    """Every wrong-typed value under ``value``: ``(path parts, expected type, value)``, outermost
    key first, ``prefix`` prepended; empty when the shape holds."""
    records: list = []
    _walk(value, node, records)
    out = []
    for record in records:
        keys = record[2:]
        keys.reverse()
        out.append((prefix + tuple(keys), record[0], record[1]))
    return out


# Shapes written for the core kinds our webhooks read (fields beyond these are not read) ----------


def obj(**properties: Node) -> Node:
    return Node(OBJECT, dict(properties))


def array(item: Node) -> Node:
    return Node(ARRAY, None, item)


def map_of(value: Node) -> Node:
    return Node(OBJECT, None, None, value)


STRING_NODE = Node(STRING)
QUANTITY = Node(INT_OR_STRING)
METADATA = obj(
    name=STRING_NODE,
    generateName=STRING_NODE,
    namespace=STRING_NODE,
    uid=STRING_NODE,
    resourceVersion=STRING_NODE,
    deletionTimestamp=STRING_NODE,
    labels=map_of(STRING_NODE),
    annotations=map_of(STRING_NODE),
    finalizers=array(STRING_NODE),
    ownerReferences=array(obj(apiVersion=STRING_NODE, kind=STRING_NODE, name=STRING_NODE, uid=STRING_NODE)),
)
_RESOURCES = obj(limits=map_of(QUANTITY), requests=map_of(QUANTITY))
_CONTAINER = obj(name=STRING_NODE, image=STRING_NODE, restartPolicy=STRING_NODE, resources=_RESOURCES)
_REQUIREMENT = obj(key=STRING_NODE, operator=STRING_NODE, values=array(STRING_NODE))
_TERM = obj(matchExpressions=array(_REQUIREMENT), matchFields=array(_REQUIREMENT))
_AFFINITY = obj(
    nodeAffinity=obj(requiredDuringSchedulingIgnoredDuringExecution=obj(nodeSelectorTerms=array(_TERM)))
)
POD_SPEC = obj(
    containers=array(_CONTAINER),
    initContainers=array(_CONTAINER),
    affinity=_AFFINITY,
    nodeSelector=map_of(STRING_NODE),
    nodeName=STRING_NODE,
)
POD = obj(apiVersion=STRING_NODE, kind=STRING_NODE, metadata=METADATA, spec=POD_SPEC)
WORKLOAD = obj(
    apiVersion=STRING_NODE,
    kind=STRING_NODE,
    metadata=METADATA,
    spec=obj(
        queueName=STRING_NODE,
        podSets=array(
            obj(name=STRING_NODE, count=Node(INTEGER), template=obj(metadata=METADATA, spec=POD_SPEC))
        ),
    ),
    status=obj(conditions=array(obj(type=STRING_NODE, status=STRING_NODE)), admission=Node(OBJECT)),
)
