"""A thin REST client over the official ``kubernetes`` package: dicts in, dicts out.

The official client does authentication, TLS and connection pooling; this wrapper speaks plain
JSON (decoded with orjson) for any kind in ``resources``, so readers never juggle generated model
classes and custom resources alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from api import OPERATOR_VERSION
from api.objects import Obj
from kube.resources import resource

JSON = "application/json"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiError(Exception):
    """A non-2xx answer.  ``status`` is the HTTP status (0 when no answer came)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


def user_agent(component: str) -> str:
    """What our requests call themselves in the apiserver's audit log and its request logs, as
    kubectl and the controllers do (``kubectl/v1.36.3 (linux/amd64) ...``): the Python client's
    default, ``OpenAPI-Generator/<version>/python``, says nothing of which of our parts asked."""
    return f"gpustack-operator/{OPERATOR_VERSION} ({component})"


def load_api_client(kubeconfig: str | None = None, *, component: str = "cli") -> k8s.ApiClient:
    """In-cluster configuration when running in a Pod, else the kubeconfig (``$KUBECONFIG``);
    ``component`` names the part of the operator in the requests' User-Agent."""
    configuration = k8s.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = 32
    api = k8s.ApiClient(configuration)
    api.user_agent = user_agent(component)
    return api


class Client:
    def __init__(self, api_client: k8s.ApiClient, *, timeout: float = 10.0) -> None:
        self.api = api_client
        self.timeout = timeout

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
        stream: bool = False,
    ) -> Any:
        headers = {"Accept": JSON, "Content-Type": content_type}
        try:
            method, url, headers, _, _ = self.api.param_serialize(
                method, path, query_params=query or [], header_params=headers, auth_settings=["BearerToken"]
            )
            raw = self.api.call_api(
                method,
                url,
                header_params=headers,
                # The REST layer JSON-encodes bodies of JSON content types itself; an apply
                # patch (YAML content type, JSON is valid YAML) must arrive already encoded.
                body=orjson.dumps(body) if body is not None and content_type == APPLY else body,
                _request_timeout=timeout if timeout is not None else self.timeout,
            ).response
        except k8s.ApiException as error:
            raise _api_error(error) from None
        except Exception as error:  # connection refused, timeout, TLS
            raise ApiError(0, "Unreachable", f"{type(error).__name__}: {error}") from None
        if raw.status >= 300:
            try:
                data = raw.data
            finally:
                raw.release_conn()
            raise _status_error(raw.status, raw.reason or "", data)
        if stream:
            return raw
        try:
            data = raw.data
        finally:
            raw.release_conn()
        return orjson.loads(data) if data else None

    def version(self) -> Obj:
        """The apiserver's ``/version`` (``major``, ``minor``, ``gitVersion``)."""
        return self._call("GET", "/version") or {}

    def get(self, kind: str, name: str, namespace: str = "", *, timeout: float | None = None) -> Obj | None:
        try:
            return self._call("GET", resource(kind).path(namespace, name), timeout=timeout)
        except ApiError as error:
            if error.not_found:
                return None
            raise

    def list(
        self,
        kind: str,
        namespace: str = "",
        *,
        label_selector: str = "",
        field_selector: str = "",
        timeout: float | None = None,
    ) -> tuple[list[Obj], str]:
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        body = self._call("GET", resource(kind).path(namespace), query=query, timeout=timeout)
        items = body.get("items") or []
        res = resource(kind)
        for item in items:  # list items omit apiVersion/kind
            item.setdefault("apiVersion", res.api_version)
            item.setdefault("kind", kind)
        return items, (body.get("metadata") or {}).get("resourceVersion", "")

    def watch(
        self,
        kind: str,
        namespace: str = "",
        *,
        resource_version: str = "",
        timeout_seconds: int = 300,
        label_selector: str = "",
        field_selector: str = "",
    ) -> Iterator[Obj]:
        """Watch events (``{"type", "object"}``) until the server closes the stream."""
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        raw = self._call(
            "GET", resource(kind).path(namespace), query=query, timeout=timeout_seconds + 15, stream=True
        )
        buffer = b""
        try:
            for chunk in raw.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield orjson.loads(line)
        finally:
            raw.release_conn()

    def create(self, obj: Obj, *, dry_run: bool = False) -> Obj:
        meta = obj.get("metadata") or {}
        query = [("dryRun", "All")] if dry_run else []
        return self._call(
            "POST", resource(obj["kind"]).path(meta.get("namespace", "")), query=query, body=obj
        )

    def update(self, obj: Obj, *, subresource: str = "") -> Obj:
        """PUT ``obj`` whole (its resourceVersion makes the write conditional)."""
        meta = obj["metadata"]
        path = resource(obj["kind"]).path(meta.get("namespace", ""), meta["name"], subresource)
        return self._call("PUT", path, body=obj)

    def apply(self, obj: Obj, *, field_manager: str, force: bool = True, subresource: str = "") -> Obj:
        """Server-side apply of ``obj`` (a partial object with apiVersion, kind and name)."""
        meta = obj["metadata"]
        path = resource(obj["kind"]).path(meta.get("namespace", ""), meta["name"], subresource)
        query = [("fieldManager", field_manager), ("force", "true" if force else "false")]
        return self._call("PATCH", path, query=query, body=obj, content_type=APPLY)

    def patch(
        self,
        kind: str,
        name: str,
        body: Any,
        *,
        namespace: str = "",
        content_type: str = MERGE,
        subresource: str = "",
        field_manager: str = "",
    ) -> Obj:
        query = [("fieldManager", field_manager)] if field_manager else []
        path = resource(kind).path(namespace, name, subresource)
        return self._call("PATCH", path, query=query, body=body, content_type=content_type)

    def delete(self, kind: str, name: str, namespace: str = "", *, propagation: str = "Background") -> bool:
        """Delete one object; False when it was already gone."""
        try:
            self._call(
                "DELETE",
                resource(kind).path(namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation},
            )
        except ApiError as error:
            if not error.not_found:
                raise
            return False
        return True


def _status_error(status: int, reason: str, body: bytes | str | None) -> ApiError:
    message = ""
    try:
        decoded = orjson.loads(body or b"{}")
        reason = decoded.get("reason") or reason
        message = decoded.get("message") or ""
    except (orjson.JSONDecodeError, AttributeError):
        message = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    return ApiError(status, reason, message)


def _api_error(error: k8s.ApiException) -> ApiError:
    return _status_error(int(error.status or 0), error.reason or "", error.body)
