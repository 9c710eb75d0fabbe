"""RFC 6902 JSON patches: build them, compute a minimal one between two documents, apply one.

Handlers on the hot path (the Pod gate) build their operations directly; handlers of custom
resources mutate a copy and let :func:`diff` find the minimal patch.  :func:`apply` is used by
``admit`` (which must print the object after mutation) and by tests.
"""

from __future__ import annotations

import copy
from typing import Any

Patch = list[dict[str, Any]]


def escape(token: str) -> str:
    """One JSON-pointer reference token (``nvidia.com/gpu`` → ``nvidia.com~1gpu``)."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    return "".join("/" + escape(str(token)) for token in tokens)


def add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


def replace(path: str, value: Any) -> dict[str, Any]:
    return {"op": "replace", "path": path, "value": value}


def remove(path: str) -> dict[str, Any]:
    return {"op": "remove", "path": path}


def diff(before: Any, after: Any, path: str = "") -> Patch:
    """A minimal patch turning ``before`` into ``after``: objects recurse, lists of equal length
    recurse element-wise, anything else is replaced whole."""
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        ops: Patch = []
        for key in before:
            if key not in after:
                ops.append(remove(path + "/" + escape(key)))
        for key, value in after.items():
            child = path + "/" + escape(key)
            if key not in before:
                ops.append(add(child, value))
            else:
                ops.extend(diff(before[key], value, child))
        return ops
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        ops = []
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            ops.extend(diff(old, new, f"{path}/{index}"))
        return ops
    if path == "":
        return [replace("", after)]
    return [replace(path, after)]


class PatchError(ValueError):
    """A patch that does not apply to the document."""


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer {path!r} must start with '/'")
    return [_unescape(token) for token in path[1:].split("/")]


def _container(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path {path!r}: {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            try:
                node = node[int(token)]
            except (ValueError, IndexError):
                raise PatchError(f"path {path!r}: index {token!r} is out of range") from None
        else:
            raise PatchError(f"path {path!r}: cannot descend into a scalar")
    return node


def apply(document: Any, ops: Patch) -> Any:
    """Apply ``ops`` to a deep copy of ``document`` and return it (add/remove/replace/test)."""
    doc = copy.deepcopy(document)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        tokens = _split(path)
        if not tokens:
            if kind in ("add", "replace"):
                doc = copy.deepcopy(op["value"])
                continue
            raise PatchError(f"operation {kind!r} on the whole document is not supported")
        parent = _container(doc, tokens[:-1], path)
        last = tokens[-1]
        if kind == "test":
            current = _container(doc, tokens, path)
            if current != op.get("value"):
                raise PatchError(f"test failed at {path!r}")
            continue
        if isinstance(parent, dict):
            if kind == "add":
                parent[last] = copy.deepcopy(op["value"])
            elif kind == "replace":
                if last not in parent:
                    raise PatchError(f"replace at {path!r}: no such member")
                parent[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                if last not in parent:
                    raise PatchError(f"remove at {path!r}: no such member")
                del parent[last]
            else:
                raise PatchError(f"unsupported operation {kind!r}")
        elif isinstance(parent, list):
            if kind == "add" and last == "-":
                parent.append(copy.deepcopy(op["value"]))
                continue
            try:
                index = int(last)
            except ValueError:
                raise PatchError(f"path {path!r}: {last!r} is not a list index") from None
            if kind == "add":
                if not 0 <= index <= len(parent):
                    raise PatchError(f"add at {path!r}: index out of range")
                parent.insert(index, copy.deepcopy(op["value"]))
            elif kind in ("replace", "remove"):
                if not 0 <= index < len(parent):
                    raise PatchError(f"{kind} at {path!r}: index out of range")
                if kind == "replace":
                    parent[index] = copy.deepcopy(op["value"])
                else:
                    del parent[index]
            else:
                raise PatchError(f"unsupported operation {kind!r}")
        else:
            raise PatchError(f"path {path!r}: parent is a scalar")
    return doc
