"""``kubectl get ... -o json`` and plain ``kubectl delete`` answered in-process, for the tests.

A forked ``kubectl get`` costs about 140 ms of CPU on this machine (a Go binary starting, reading
its kubeconfig and discovery cache); the e2e suite's waits poll hundreds of times a minute, so
forking was a good part of what the e2e lane spent its cores on. This reader answers the same
question over one kept-alive HTTPS connection per thread (a few milliseconds) and prints what
kubectl prints: the object, or a ``List`` whose items carry their ``kind`` and ``apiVersion``.

It understands ``get RESOURCE [NAME] [-n NS | -A] [-l SEL] [--field-selector SEL]
[--ignore-not-found] -o json`` and resource names the way kubectl resolves them from discovery
(plural, singular, short names, ``plural.group``). Anything else returns ``None`` and the caller
forks kubectl as before, so an unusual command line is never answered differently.

Deletes are the commonest forked verb of the e2e modules (process accounting of a whole `make test`:
1,298 forked kubectl, about 113 ms of CPU each). ``delete RESOURCE NAME... [-n NS]
[--ignore-not-found] [--wait[=true|false]] [--timeout=DURATION]`` is answered the way kubectl does
it: one DELETE per name with background propagation, then (unless ``--wait=false``) a poll until
the object with that uid is gone, ``--timeout`` giving up with kubectl's message and the caller's
own timeout raising ``subprocess.TimeoutExpired`` as a forked kubectl would. Selectors, ``--all``,
files, ``--grace-period``, ``--force``, impersonation and every other flag still fork kubectl.

Writes of one new object come next (``apply -f -`` and ``create -f -`` were 527 of the 862 forks
left in a run, by ``GPUSTACK_TEST_KUBECTL_TRACE``): ``create -f - [-n NS] [--dry-run=server]`` and
``apply -f - [-n NS]`` with one JSON object on standard input are one POST, as kubectl makes it
(field manager ``kubectl-create`` or ``kubectl-client-side-apply``, strict field validation, the
apply's ``last-applied-configuration`` annotation as kubectl writes it), answered with kubectl's
``kind.group/name created`` line. Only success is answered here: an object that exists already
(kubectl apply patches it then), a refusal of any kind, YAML, a ``List`` or any other flag forks
kubectl, which meets the same world (a refused write changed nothing) and words the error itself.

Stdlib only, like ``harness``.
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Resource:
    group_version: str  # "v1" or "group/version"
    plural: str
    namespaced: bool
    kind: str

    @property
    def shown(self) -> str:
        """How kubectl names the kind in its messages: ``configmap``, ``modeldeployment.<group>``."""
        group = self.group_version.rpartition("/")[0]
        return f"{self.kind.lower()}.{group}" if group else self.kind.lower()

    def path(self, namespace: str | None, name: str | None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{urllib.parse.quote(namespace)}"
        base += f"/{self.plural}"
        return base + (f"/{urllib.parse.quote(name)}" if name else "")


@dataclass
class Query:
    resource: str
    name: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    selector: str | None = None
    field_selector: str | None = None
    ignore_not_found: bool = False


_VALUE_FLAGS = {
    "-n": "namespace",
    "--namespace": "namespace",
    "-l": "selector",
    "--selector": "selector",
    "--field-selector": "field_selector",
}


@dataclass
class Deletion:
    resource: str
    names: tuple[str, ...]
    namespace: str | None = None
    ignore_not_found: bool = False
    wait: bool = True
    timeout: float | None = None  # --timeout; None: as long as the caller waits


_DURATION = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(text: str) -> float | None:
    """``90s``, ``2m``, ``1m30s``, ``0`` → seconds (0 and None: no limit of its own)."""
    if text in ("0", ""):
        return None
    total, number = 0.0, ""
    rest = text
    while rest:
        if rest[0].isdigit() or rest[0] == ".":
            number, rest = number + rest[0], rest[1:]
            continue
        unit = "ms" if rest.startswith("ms") else rest[0]
        if unit not in _DURATION or not number:
            raise ValueError(text)
        total, number, rest = total + float(number) * _DURATION[unit], "", rest[len(unit) :]
    if number:
        raise ValueError(text)
    return total or None


def parse_delete(args: tuple[str, ...]) -> Deletion | None:
    """The deletion of a plain ``delete`` command line, or None for one this reader does not answer."""
    if not args or args[0] != "delete":
        return None
    positional: list[str] = []
    values: dict[str, Any] = {}
    rest = list(args[1:])
    while rest:
        arg = rest.pop(0)
        flag, eq, inline = arg.partition("=")
        if flag in ("-n", "--namespace"):
            if not eq:
                if not rest:
                    return None
                inline = rest.pop(0)
            values["namespace"] = inline
        elif flag == "--ignore-not-found" and inline in ("", "true"):
            values["ignore_not_found"] = True
        elif flag == "--wait" and inline in ("", "true", "false"):
            values["wait"] = inline != "false"
        elif flag == "--timeout" and eq:
            try:
                values["timeout"] = _duration(inline)
            except ValueError:
                return None
        elif arg.startswith("-"):
            return None
        else:
            positional.append(arg)
    if len(positional) < 2 or any("," in p or "/" in p for p in positional):
        return None
    return Deletion(positional[0], tuple(positional[1:]), **values)


@dataclass(frozen=True)
class Write:
    verb: str  # "create" or "apply"
    namespace: str | None = None
    dry_run: bool = False  # create --dry-run=server


def parse_write(args: tuple[str, ...]) -> Write | None:
    """The write of a ``create -f -`` / ``apply -f -`` command line this reader answers, or None."""
    if not args or args[0] not in ("create", "apply"):
        return None
    verb, rest = args[0], list(args[1:])
    values: dict[str, Any] = {}
    stdin = False
    while rest:
        arg = rest.pop(0)
        flag, eq, inline = arg.partition("=")
        if flag in ("-n", "--namespace", "-f", "--filename"):
            if not eq:
                if not rest:
                    return None
                inline = rest.pop(0)
            if flag in ("-f", "--filename"):
                if inline != "-" or stdin:
                    return None
                stdin = True
            else:
                values["namespace"] = inline
        elif verb == "create" and arg == "--dry-run=server":
            values["dry_run"] = True
        else:
            return None
    return Write(verb, **values) if stdin else None


_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def last_applied(obj: dict[str, Any]) -> str:
    """The annotation ``kubectl apply`` records when it creates ``obj``: the object as given (its
    namespace filled in, this annotation left out), compact JSON with sorted keys as Go's encoder
    writes it (``<``, ``>``, ``&`` escaped), and a newline."""
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k != _LAST_APPLIED}
    text = json.dumps({**obj, "metadata": meta}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in _GO_ESCAPES.items():
        text = text.replace(char, escaped)
    return text + "\n"


def parse(args: tuple[str, ...]) -> Query | None:
    """The query of a ``get`` command line, or None for one this reader does not answer."""
    if not args or args[0] != "get":
        return None
    positional: list[str] = []
    values: dict[str, Any] = {}
    output = None
    rest = list(args[1:])
    while rest:
        arg = rest.pop(0)
        flag, eq, inline = arg.partition("=")
        if flag in _VALUE_FLAGS:
            if not eq:
                if not rest:
                    return None
                inline = rest.pop(0)
            values[_VALUE_FLAGS[flag]] = inline
        elif flag in ("-o", "--output"):
            if not eq:
                if not rest:
                    return None
                inline = rest.pop(0)
            output = inline
        elif arg == "-ojson":
            output = "json"
        elif arg in ("-A", "--all-namespaces"):
            values["all_namespaces"] = True
        elif arg == "--ignore-not-found":
            values["ignore_not_found"] = True
        elif arg.startswith("-"):
            return None
        else:
            positional.append(arg)
    if output != "json" or not 1 <= len(positional) <= 2 or "," in positional[0] or "/" in positional[0]:
        return None
    return Query(positional[0], positional[1] if len(positional) == 2 else None, **values)


class Reader:
    """One cluster's in-process ``get``; safe to share between threads."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path, namespace: str = "default") -> None:
        parsed = urllib.parse.urlsplit(server)
        self._host, self._port = parsed.hostname or "127.0.0.1", parsed.port or 443
        self._context = ssl.create_default_context(cafile=str(ca))
        self._context.load_cert_chain(str(cert), str(key))
        self._namespace = namespace
        self._local = threading.local()
        self._lock = threading.Lock()
        self._names: dict[str, Resource] = {}
        self._kinds: dict[tuple[str, str], Resource] = {}  # (apiVersion, kind) -> where to POST

    # --- HTTP -------------------------------------------------------------------------------------
    def _request(
        self, path: str, timeout: float, method: str = "GET", body: bytes | None = None
    ) -> tuple[int, bytes]:
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, context=self._context, timeout=timeout
                )
                self._local.conn = conn
            conn.timeout = timeout
            try:
                headers = {"Accept": "application/json"}
                if body is not None:
                    headers["Content-Type"] = "application/json"
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _json(self, path: str, timeout: float) -> Any:
        status, body = self._request(path, timeout)
        if status != 200:
            raise LookupError(f"GET {path}: {status}")
        return json.loads(body)

    # --- discovery --------------------------------------------------------------------------------
    def _discover(self, timeout: float) -> None:
        names: dict[str, Resource] = {}

        kinds: dict[tuple[str, str], Resource] = {}

        def add(group_version: str, group: str, resources: list[dict[str, Any]]) -> None:
            for r in resources:
                if "/" in r["name"] or "get" not in r.get("verbs", []):
                    continue
                res = Resource(group_version, r["name"], bool(r.get("namespaced")), r["kind"])
                if "create" in r.get("verbs", []):
                    kinds.setdefault((group_version, r["kind"]), res)
                aliases = [r["name"], r.get("singularName") or r["kind"].lower(), *r.get("shortNames", [])]
                for alias in aliases:
                    names.setdefault(alias, res)  # the first group wins, as kubectl's order does
                    if group:
                        names.setdefault(f"{alias}.{group}", res)

        add("v1", "", self._json("/api/v1", timeout)["resources"])
        for group in self._json("/apis", timeout)["groups"]:
            preferred = group["preferredVersion"]["groupVersion"]
            try:
                add(preferred, group["name"], self._json(f"/apis/{preferred}", timeout)["resources"])
            except LookupError:
                continue  # a group going away (a CRD being deleted) while we read
        with self._lock:
            self._names = names
            self._kinds = kinds

    def resource(self, name: str, timeout: float) -> Resource | None:
        found = self._names.get(name) or self._names.get(name.lower())
        if found is None:
            self._discover(timeout)  # a CRD installed since the last look
            found = self._names.get(name) or self._names.get(name.lower())
        return found

    def answer(
        self, args: tuple[str, ...], timeout: float = 60, input: str | None = None
    ) -> subprocess.CompletedProcess | None:
        """kubectl's answer to ``args`` (a ``get -o json``, a plain ``delete``, or the write of one
        new object from ``input``), or None."""
        if input is not None:
            return self.write(args, input, timeout)
        if args and args[0] == "delete":
            return self.delete(args, timeout)
        return self.get(args, timeout)

    # --- create / apply of one new object ---------------------------------------------------------
    def write(
        self, args: tuple[str, ...], text: str, timeout: float = 60
    ) -> subprocess.CompletedProcess | None:
        """kubectl's answer to creating the one object in ``text``, or None (fork kubectl): for
        anything but a write that succeeds here."""
        write = parse_write(args)
        if write is None:
            return None
        try:
            obj = json.loads(text)
        except ValueError:
            return None  # YAML: kubectl reads it
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or obj.get("kind") == "List" or "items" in obj:
            return None
        name, api_version, kind = meta.get("name"), obj.get("apiVersion"), obj.get("kind")
        if not all(isinstance(v, str) and v for v in (name, api_version, kind)):
            return None
        try:
            resource = self._kinds.get((api_version, kind))
            if resource is None:
                self._discover(timeout)  # a CRD installed since the last look
                resource = self._kinds.get((api_version, kind))
                if resource is None:
                    return None
            namespace = None
            if resource.namespaced:
                given = meta.get("namespace")
                if given is not None and (
                    not isinstance(given, str) or (write.namespace and given != write.namespace)
                ):
                    return None  # kubectl refuses a namespace that differs from -n
                namespace = given or write.namespace or self._namespace
            params = {"fieldValidation": "Strict"}
            if write.verb == "apply":
                status, _ = self._request(resource.path(namespace, name), timeout)
                if status != 404:
                    return None  # it exists (kubectl computes a patch), or the read failed
                obj = {**obj, "metadata": {**meta, **({"namespace": namespace} if namespace else {})}}
                annotations = {**(meta.get("annotations") or {}), _LAST_APPLIED: last_applied(obj)}
                obj["metadata"]["annotations"] = annotations
                params["fieldManager"] = "kubectl-client-side-apply"
            else:
                params["fieldManager"] = "kubectl-create"
                if write.dry_run:
                    params["dryRun"] = "All"
            path = resource.path(namespace, None) + "?" + urllib.parse.urlencode(params)
            status, _ = self._request(path, timeout, "POST", json.dumps(obj).encode())
        except (OSError, http.client.HTTPException, LookupError, AttributeError, TypeError, ValueError):
            return None
        if status not in (200, 201, 202):
            return None  # refused: kubectl words it
        done = " (server dry run)" if write.dry_run else ""
        return subprocess.CompletedProcess(
            ["kubectl", *args], 0, f"{resource.shown}/{name} created{done}\n", ""
        )

    # --- delete -----------------------------------------------------------------------------------
    def delete(self, args: tuple[str, ...], timeout: float = 60) -> subprocess.CompletedProcess | None:
        """kubectl's answer to a plain ``delete``, or None when this reader does not take it."""
        deletion = parse_delete(args)
        if deletion is None:
            return None
        argv = ["kubectl", *args]
        deadline = time.monotonic() + timeout
        out: list[str] = []
        err: list[str] = []
        pending: list[tuple[str, str]] = []  # (path, uid) of objects still finalizing
        try:
            resource = self.resource(deletion.resource, timeout)
            if resource is None:
                return None
            namespace = (deletion.namespace or self._namespace) if resource.namespaced else None
            shown = resource.shown
            body = json.dumps(
                {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
            ).encode()
            for name in deletion.names:
                path = resource.path(namespace, name)
                status, answer = self._request(path, timeout, "DELETE", body)
                if status in (200, 202):
                    out.append(f'{shown} "{name}" deleted')
                    obj = json.loads(answer)
                    uid = (obj.get("metadata") or {}).get("uid") if obj.get("kind") != "Status" else None
                    if uid:
                        pending.append((path, uid))
                elif status == 404 and deletion.ignore_not_found:
                    continue
                else:
                    err.append(_error(status, answer))
            if deletion.wait:
                limit, own = deadline, False  # own: --timeout ends the wait before the caller's limit
                if deletion.timeout is not None and time.monotonic() + deletion.timeout < deadline:
                    limit, own = time.monotonic() + deletion.timeout, True
                while pending:
                    path, uid = pending[0]
                    status, answer = self._request(path, timeout)
                    if status == 404 or (
                        status == 200 and (json.loads(answer).get("metadata") or {}).get("uid") != uid
                    ):
                        pending.pop(0)
                        continue
                    if time.monotonic() >= limit:
                        if not own:  # the caller's own limit: as a forked kubectl's would
                            raise subprocess.TimeoutExpired(argv, timeout)
                        err.append(
                            f"error: timed out waiting for the condition on {resource.plural}/{path.rsplit('/', 1)[1]}"
                        )
                        break
                    time.sleep(0.1)
        except (OSError, http.client.HTTPException, LookupError, ValueError) as exc:
            return subprocess.CompletedProcess(argv, 1, "", f"Unable to connect to the server: {exc}")
        stdout = "".join(line + "\n" for line in out)
        stderr = "".join(line + "\n" for line in err)
        return subprocess.CompletedProcess(argv, 1 if err else 0, stdout, stderr)

    # --- get --------------------------------------------------------------------------------------
    def get(self, args: tuple[str, ...], timeout: float = 60) -> subprocess.CompletedProcess | None:
        """kubectl's answer to ``args``, or None when this reader does not take the command."""
        query = parse(args)
        if query is None:
            return None
        try:
            resource = self.resource(query.resource, timeout)
            if resource is None:
                return None
            for attempt in (0, 1):
                status, body = self._request(self._path(query, resource), timeout)
                if status == 404 and query.name is None and not attempt:
                    # The collection itself is gone (CRD deleted and recreated): look again once.
                    self._discover(timeout)
                    fresh = self.resource(query.resource, timeout)
                    if fresh is None:
                        return None
                    resource = fresh
                    continue
                break
        except (OSError, http.client.HTTPException, LookupError, ValueError) as exc:
            return subprocess.CompletedProcess(
                ["kubectl", *args], 1, "", f"Unable to connect to the server: {exc}"
            )
        if status == 200:
            obj = json.loads(body)
            if query.name is None:
                obj = _as_list(obj, resource)
            return subprocess.CompletedProcess(["kubectl", *args], 0, json.dumps(obj), "")
        if status == 404 and query.ignore_not_found:
            return subprocess.CompletedProcess(["kubectl", *args], 0, "", "")
        return subprocess.CompletedProcess(["kubectl", *args], 1, "", _error(status, body))

    def _path(self, query: Query, resource: Resource) -> str:
        namespace = None
        if resource.namespaced and not query.all_namespaces:
            namespace = query.namespace or self._namespace
        path = resource.path(namespace, query.name)
        params = {}
        if query.name is None:
            if query.selector:
                params["labelSelector"] = query.selector
            if query.field_selector:
                params["fieldSelector"] = query.field_selector
        return path + ("?" + urllib.parse.urlencode(params) if params else "")


def _as_list(obj: dict[str, Any], resource: Resource) -> dict[str, Any]:
    api_version = obj.get("apiVersion", resource.group_version)
    items = [{"apiVersion": api_version, "kind": resource.kind, **item} for item in obj.get("items") or []]
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def _error(status: int, body: bytes) -> str:
    try:
        answer = json.loads(body)
        return f"Error from server ({answer.get('reason') or status}): {answer.get('message', '')}"
    except ValueError:
        return f"Error from server ({status}): {body[:200].decode(errors='replace')}"
