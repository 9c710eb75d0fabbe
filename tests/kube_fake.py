"""An in-memory apiserver behind the official client's transport seam, for runtime tests without a
cluster.

:class:`kube.client.Client` talks to ``kubernetes.client.ApiClient`` through two methods only,
``param_serialize`` and ``call_api``; :class:`FakeApiServer` implements both, so the real client
code (paths, query strings, status errors, the watch stream decoder) runs unchanged over a store
kept here.  It serves what the runtime uses: /version, get, list (equality label selectors), watch with
resource versions, bookmarks-free event streams and ``410 Gone`` for a compacted version, create,
update with optimistic concurrency, merge/JSON/apply patches, delete — and lets a test inject
failures (:meth:`FakeApiServer.fail`) and compact history (:meth:`FakeApiServer.compact`).
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson

from api.objects import Obj
from kube.resources import by_plural, resource

StoreKey = tuple[str, str, str, str]  # (group, plural, namespace, name)
VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.0-fake"}  # what /version answers


@dataclass
class _Route:
    group: str
    version: str
    plural: str
    namespace: str
    name: str
    subresource: str

    @property
    def kind(self) -> str:
        return by_plural(self.group, self.plural).kind


def _route(path: str) -> _Route:
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    else:
        group, version, rest = parts[1], parts[2], parts[3:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    return _Route(group, version, plural, namespace, name, subresource)


class _Response:
    """What ``call_api(...).response`` is: a urllib3-like response."""

    def __init__(self, status: int, data: bytes = b"", chunks: Iterator[bytes] | None = None) -> None:
        self.status = status
        self.reason = {200: "OK", 201: "Created", 404: "Not Found", 409: "Conflict", 410: "Gone"}.get(
            status, "Error"
        )
        self.data = data
        self._chunks = chunks
        self.released = False

    def stream(self, amount: int) -> Iterator[bytes]:
        yield from self._chunks or iter(())

    def release_conn(self) -> None:
        self.released = True


@dataclass
class _Call:
    response: _Response


@dataclass
class _Fault:
    method: str
    path_prefix: str
    status: int
    times: int


@dataclass
class FakeApiServer:
    """The store, its event history and the transport methods ``kube.client.Client`` calls."""

    objects: dict[StoreKey, Obj] = field(default_factory=dict)
    history: list[tuple[int, str, StoreKey, Obj]] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    compacted: int = 0
    _versions: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _version: int = 0
    _faults: list[_Fault] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _closing: int = 0

    # The transport seam -------------------------------------------------------------------------

    def param_serialize(
        self, method: str, resource_path: str, query_params: Any = None, header_params: Any = None, **_: Any
    ) -> tuple[str, str, dict[str, str], None, list[Any]]:
        query = urlencode([(k, str(v)) for k, v in query_params or []])
        return method, resource_path + (f"?{query}" if query else ""), dict(header_params or {}), None, []

    def call_api(self, method: str, url: str, header_params: Any = None, body: Any = None, **_: Any) -> _Call:
        split = urlsplit(url)
        query = dict(parse_qsl(split.query))
        self.requests.append((method, split.path))
        for fault in self._faults:
            if fault.times and fault.method == method and split.path.startswith(fault.path_prefix):
                fault.times -= 1
                return _Call(
                    _Response(fault.status, orjson.dumps({"reason": "Injected", "message": "fault"}))
                )
        if split.path == "/version":
            return _Call(_Response(200, orjson.dumps(VERSION)))
        if isinstance(body, bytes | str):
            body = orjson.loads(body)
        content_type = (header_params or {}).get("Content-Type", "")
        try:
            status, answer = self._serve(method, _route(split.path), query, body, content_type)
        except _Status as status_error:
            status, answer = status_error.code, {"kind": "Status", "reason": status_error.reason}
        if isinstance(answer, _Response):
            return _Call(answer)
        return _Call(_Response(status, orjson.dumps(answer)))

    # Test controls ------------------------------------------------------------------------------

    def fail(self, method: str, path_prefix: str, status: int, times: int = 1) -> None:
        """Answer the next ``times`` ``method`` requests under ``path_prefix`` with ``status``."""
        self._faults.append(_Fault(method, path_prefix, status, times))

    def compact(self) -> None:
        """Forget history up to now: a watch from an older version gets ``410 Gone``."""
        with self._changed:
            self.compacted = self._version
            self.history.clear()

    def close_watches(self) -> None:
        """End every open watch stream, as an apiserver restart would."""
        with self._changed:
            self._closing += 1
            self._changed.notify_all()

    def put(self, obj: Obj) -> Obj:
        """Store ``obj`` as a client's create or update would (a test's own writes)."""
        res = resource(obj["kind"])
        meta = obj["metadata"]
        key = (res.group, res.plural, meta.get("namespace", ""), meta["name"])
        return self._write(key, copy.deepcopy(obj), "MODIFIED" if key in self.objects else "ADDED")

    # Serving ------------------------------------------------------------------------------------

    def _key(self, route: _Route, name: str | None = None) -> StoreKey:
        return (route.group, route.plural, route.namespace, name if name is not None else route.name)

    def _write(self, key: StoreKey, obj: Obj, event: str) -> Obj:
        with self._changed:
            self._version = next(self._versions)
            meta = obj.setdefault("metadata", {})
            meta["resourceVersion"] = str(self._version)
            meta.setdefault("uid", f"uid-{self._version}")
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            if event == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            self.history.append((self._version, event, key, copy.deepcopy(obj)))
            self._changed.notify_all()
        return copy.deepcopy(obj)

    def _serve(self, method: str, route: _Route, query: dict[str, str], body: Any, content_type: str) -> Any:
        if method == "GET" and not route.name:
            if query.get("watch") == "true":
                return 200, self._watch(route, query)
            return 200, self._list(route, query)
        key = self._key(route)
        current = self.objects.get(key)
        if method == "PATCH" and current is None and content_type == "application/apply-patch+yaml":
            body.setdefault("metadata", {})["namespace"] = route.namespace
            return 201, self._write(key, body, "ADDED")  # server-side apply creates what is absent
        if method == "GET":
            if current is None:
                raise _Status(404, "NotFound")
            return 200, copy.deepcopy(current)
        if method == "POST":
            name = (body.get("metadata") or {}).get("name")
            if self._key(route, name) in self.objects:
                raise _Status(409, "AlreadyExists")
            body.setdefault("metadata", {})["namespace"] = route.namespace or body["metadata"].get(
                "namespace", ""
            )
            return 201, self._write(self._key(route, name), body, "ADDED")
        if current is None:
            raise _Status(404, "NotFound")
        if method == "DELETE":
            self._write(key, copy.deepcopy(current), "DELETED")
            return 200, {"kind": "Status", "status": "Success"}
        if method == "PUT":
            if (body.get("metadata") or {}).get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise _Status(409, "Conflict")
            return 200, self._write(key, body, "MODIFIED")
        if method == "PATCH":
            return 200, self._write(key, _patched(current, body, content_type), "MODIFIED")
        raise _Status(405, "MethodNotAllowed")

    def _matches(self, key: StoreKey, route: _Route, selector: str) -> bool:
        if key[:2] != (route.group, route.plural) or (route.namespace and key[2] != route.namespace):
            return False
        labels = (self.objects.get(key) or {}).get("metadata", {}).get("labels") or {}
        return _selects(selector, labels)

    def _list(self, route: _Route, query: dict[str, str]) -> Obj:
        selector = query.get("labelSelector", "")
        with self._changed:
            items = [copy.deepcopy(o) for k, o in self.objects.items() if self._matches(k, route, selector)]
            version = str(self._version)
        for item in items:  # the apiserver leaves these out of list items
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {"kind": "List", "metadata": {"resourceVersion": version}, "items": items}

    def _watch(self, route: _Route, query: dict[str, str]) -> _Response:
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 300)
        selector = query.get("labelSelector", "")
        if since and since < self.compacted:
            gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
            return _Response(200, chunks=iter([orjson.dumps(gone) + b"\n"]))
        return _Response(200, chunks=self._events(route, since, selector, time.monotonic() + timeout))

    def _events(self, route: _Route, since: int, selector: str, deadline: float) -> Iterator[bytes]:
        closing = self._closing
        while time.monotonic() < deadline:
            with self._changed:
                fresh = [
                    (version, event, obj)
                    for version, event, key, obj in self.history
                    if version > since
                    and key[:2] == (route.group, route.plural)
                    and (not route.namespace or key[2] == route.namespace)
                    and _selects(selector, obj.get("metadata", {}).get("labels") or {})
                ]
                if not fresh:
                    if self._closing != closing:
                        return
                    self._changed.wait(0.05)
                    continue
            for version, event, obj in fresh:
                since = version
                yield orjson.dumps({"type": event, "object": obj}) + b"\n"


class _Status(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _selects(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        name, _, value = term.partition("=")
        if (name not in labels) if not value else (labels.get(name) != value):
            return False
    return True


def _merge(target: Obj, patch: Obj) -> Obj:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def _patched(current: Obj, body: Any, content_type: str) -> Obj:
    result = copy.deepcopy(current)
    if content_type == "application/json-patch+json":
        for op in body:
            *parents, last = [p for p in op["path"].split("/") if p]
            target = result
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
            if op["op"] in ("add", "replace"):
                target[last] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                target.pop(last, None)
        return result
    return _merge(result, body)  # merge patch; an apply patch is merged the same way here
