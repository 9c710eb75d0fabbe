"""Every route of the registry, thrown the hostile shapes a real apiserver never sends but the port
can receive: nulls where objects belong, lists where objects belong, a thousand levels of nesting.
Each answer is a field error or a 4xx saying what was wrong, never an internal error.

The samples are the well-typed objects of ``test_shapes``; each hostile shape is put on the object
under review and, for UPDATE and DELETE, on the stored object too."""

from __future__ import annotations

import copy
import logging
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from fastpath import pure, shape
from tests.webhooks import objects
from tests.webhooks.reviews import review
from tests.webhooks.test_shapes import SAMPLES
from webhooks import registry, server
from webhooks.lookups import FileLookups

JSON = {"content-type": "application/json"}
DEPTH = 1000
_MARK = "__DEEP__"


class _Deep:
    """``DEPTH`` nested objects (or arrays) spliced into the JSON text: encoders refuse the depth."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def text(self) -> bytes:
        if self.kind == "array":
            return b"[" * DEPTH + b'"x"' + b"]" * DEPTH
        return b'{"a":' * DEPTH + b'"x"' + b"}" * DEPTH


def _set(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    target = out
    for part in path[:-1]:
        if not isinstance(target.get(part), dict):
            target[part] = {}
        target = target[part]
    target[path[-1]] = value
    return out


# (name, path to set, value)
HOSTILE: list[tuple[str, tuple[str, ...], Any]] = [
    ("labels-null", ("metadata", "labels"), None),
    ("annotations-null", ("metadata", "annotations"), None),
    ("labels-list", ("metadata", "labels"), ["a"]),
    ("annotations-list", ("metadata", "annotations"), [{"a": "b"}]),
    ("spec-null", ("spec",), None),
    ("spec-list", ("spec",), [{"a": 1}]),
    ("status-null", ("status",), None),
    ("status-list", ("status",), []),
    ("metadata-list", ("metadata",), []),
    ("spec-deep-object", ("spec", "nested"), _Deep("object")),
    ("spec-deep-array", ("spec", "nested"), _Deep("array")),
    ("spec-deep", ("spec",), _Deep("object")),
    ("status-deep", ("status",), _Deep("object")),
    ("label-value-deep", ("metadata", "labels", "team"), _Deep("object")),
    ("annotation-value-deep", ("metadata", "annotations", "note"), _Deep("array")),
    ("metadata-deep", ("metadata", "extra"), _Deep("object")),
]


def _encode(body: dict[str, Any]) -> bytes:
    found: list[_Deep] = []

    def swap(value: Any) -> Any:
        if isinstance(value, _Deep):
            found.append(value)
            return _MARK
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return value

    text = orjson.dumps(swap(body))
    for deep in found:
        text = text.replace(b'"' + _MARK.encode() + b'"', deep.text(), 1)
    return text


def _reviews(hook: registry.Webhook):
    """(label, body) for every hostile shape on every operation the webhook admits."""
    sample, group, version, resource = SAMPLES[hook.kind]
    kwargs = {"kind": hook.kind, "group": group, "version": version, "resource": resource}
    for name, path, value in HOSTILE:
        hostile = _set(sample, path, value)
        for operation in hook.operations:
            if operation == "CREATE":
                placements = [("object", hostile, None)]
            elif operation == "UPDATE":
                placements = [
                    ("object", hostile, sample),
                    ("oldObject", sample, hostile),
                    ("both", hostile, copy.deepcopy(hostile)),
                ]
            elif operation == "DELETE":
                placements = [("oldObject", None, hostile)]
            else:
                continue
            for where, obj, old in placements:
                body = review(obj, old=old, operation=operation, **kwargs)
                if hook.subresource:
                    body["request"]["subResource"] = hook.subresource
                body["request"]["name"] = body["request"]["name"] or "n"
                yield f"{name} {operation} {where}", body


@pytest.fixture(scope="module")
def client():
    with TestClient(server.create_app(FileLookups(objects.cluster()))) as test_client:
        yield test_client


def _internal(response) -> str | None:
    """Why this answer is an internal error, or None when it is not."""
    if response.status_code >= 500:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    if response.status_code != 200:
        assert response.text.strip(), "a 4xx says what was wrong"
        return None
    answer = response.json()["response"]
    if answer["allowed"]:
        return None
    status = answer["status"]
    if status["message"].startswith("internal error"):
        return status["message"]
    assert status["message"], status
    return None


@pytest.mark.parametrize("hook", registry.WEBHOOKS, ids=lambda hook: hook.name)
def test_no_hostile_review_is_an_internal_error(client, caplog, hook) -> None:
    caplog.set_level(logging.INFO)
    failures = []
    sent = 0
    for label, body in _reviews(hook):
        response = client.post(hook.path, content=_encode(body), headers=JSON)
        sent += 1
        why = _internal(response)
        if why:
            failures.append(f"{label}: {why}")
    assert sent >= len(HOSTILE)
    assert not failures, "\n".join(failures)
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"


def test_a_deep_object_is_refused_naming_where_it_nests() -> None:
    hook = next(h for h in registry.WEBHOOKS if h.kind == "InstanceType" and h.mutating)
    sample, group, version, resource = SAMPLES["InstanceType"]
    body = review(
        _set(sample, ("spec", "nested"), _Deep("object")),
        kind="InstanceType",
        group=group,
        version=version,
        resource=resource,
    )
    with TestClient(server.create_app(FileLookups(objects.cluster()))) as test_client:
        answer = test_client.post(hook.path, content=_encode(body), headers=JSON).json()["response"]
    assert answer["allowed"] is False
    status = answer["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid"
    [cause] = status["details"]["causes"]
    assert cause["field"].startswith("spec.nested.a.a")
    assert "levels" in cause["message"] and "flatten" in cause["message"]


def _nest(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize(
    "value",
    [
        {},
        "scalar",
        _nest(shape.MAX_DEPTH),
        _nest(shape.MAX_DEPTH + 1),
        _nest(900),
        {"spec": {"a": [1, 2, {"b": _nest(70)}], "c": {}}},
        [{"x": 1}, _nest(shape.MAX_DEPTH + 5)],
    ],
)
def test_compiled_and_interpreted_depth_checks_agree(value) -> None:
    twin = pure.load("shape")
    assert shape.__file__.endswith(".so")
    assert shape.too_deep(value) == twin.too_deep(value)


def test_the_depth_limit_counts_levels_below_the_root() -> None:
    # _nest(n) is n containers: the root and n - 1 levels below it.
    assert shape.too_deep(_nest(shape.MAX_DEPTH + 1)) is None
    route = shape.too_deep(_nest(shape.MAX_DEPTH + 2))
    assert route is not None and len(route) == shape.MAX_DEPTH + 1
    assert shape.too_deep({"spec": {"a": [1, _nest(70)]}})[:3] == ("spec", "a", 1)
