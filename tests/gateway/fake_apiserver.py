"""A small stand-in for what sits upstream of the gateway: the GPUStack server's per-cluster proxy
in front of each cluster's apiserver, serving the operator's discovery document and its kinds with
list and watch.  (Neither is one of our components; the e2e tests run the gateway against real
control planes.)

    upstream = FakeUpstream().start()
    a = upstream.cluster("a", token="secret")            # /v2/clusters/a/proxy/...
    a.put(instance_type("t"))                            # watchers see ADDED, then MODIFIED
    a.discovery_status = 404                             # the operator API is absent
    a.hold_discovery.clear()                             # discovery GETs hang until set()

Beside the operator's group it serves what the dashboard reads, Nodes and Pods (``/api/v1``) and
Kueue's Workloads, with ``labelSelector`` terms ``key=value`` and ``key``.
"""

from __future__ import annotations

import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from api import GROUP
from api.objects import Obj
from kube.resources import by_plural, resource
from tests.net import serving_thread

GROUP_PATH = "/apis/worker.gpustack.ai/v1"
OTHER_PATHS = {  # what the dashboard reads outside the operator's group, always served
    "/api/v1/nodes": "nodes",
    "/api/v1/pods": "pods",
    "/apis/kueue.x-k8s.io/v1beta2/workloads": "workloads",
}


def plural_of(kind: str) -> str:
    return resource(kind).plural


def selected(obj: Obj, selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


class FakeCluster:
    def __init__(self, name: str, token: str = "") -> None:
        self.name = name
        self.token = token
        self.served = {"instancetypes", "instancetypeflavors", "instances"}
        self.discovery_status = 200
        self.discovery_calls = 0
        self.hold_discovery = threading.Event()
        self.hold_discovery.set()
        self.objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self.version = 1
        self.watchers: dict[str, list[queue.Queue[Obj | None]]] = {}
        self.log: list[
            tuple[int, str, Obj]
        ] = []  # (version, plural, event): a watch replays from its version
        self.lock = threading.Lock()

    def put(self, obj: Obj) -> None:
        plural = plural_of(obj["kind"])
        meta = obj["metadata"]
        with self.lock:
            self.version += 1
            store = self.objects.setdefault(plural, {})
            key = (meta.get("namespace", ""), meta["name"])
            event = "MODIFIED" if key in store else "ADDED"
            stored = {**obj, "metadata": {**meta, "resourceVersion": str(self.version)}}
            store[key] = stored
            self._notify(plural, {"type": event, "object": stored})

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        plural = plural_of(kind)
        with self.lock:
            self.version += 1
            gone = self.objects.get(plural, {}).pop((namespace, name), None)
            if gone is not None:
                gone = {**gone, "metadata": {**gone["metadata"], "resourceVersion": str(self.version)}}
                self._notify(plural, {"type": "DELETED", "object": gone})

    def _notify(self, plural: str, event: Obj) -> None:
        self.log.append((self.version, plural, event))
        for watcher in self.watchers.get(plural, []):
            watcher.put(event)

    def close_watches(self) -> None:
        with self.lock:
            for watchers in self.watchers.values():
                for watcher in watchers:
                    watcher.put(None)


class FakeUpstream:
    def __init__(self) -> None:
        self.clusters: dict[str, FakeCluster] = {}
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                upstream._get(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]

    def start(self) -> FakeUpstream:
        serving_thread(self.server).start()
        return self

    def stop(self) -> None:
        for cluster in self.clusters.values():
            cluster.close_watches()
        self.server.shutdown()
        self.server.server_close()

    def cluster(self, name: str, token: str = "") -> FakeCluster:
        self.clusters[name] = FakeCluster(name, token)
        return self.clusters[name]

    # Serving ------------------------------------------------------------------------------------

    def _reply(self, handler: BaseHTTPRequestHandler, status: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        parts = url.path.split("/", 5)  # '', 'v2', 'clusters', <name>, 'proxy', rest
        cluster = self.clusters.get(parts[3]) if len(parts) > 4 and parts[1:3] == ["v2", "clusters"] else None
        if cluster is None:
            self._reply(handler, 404, {"kind": "Status", "code": 404, "message": "no such cluster"})
            return
        if cluster.token and handler.headers.get("Authorization") != f"Bearer {cluster.token}":
            self._reply(
                handler,
                401,
                {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "bad token"},
            )
            return
        path = "/" + (parts[5] if len(parts) > 5 else "")
        if path == GROUP_PATH:
            cluster.discovery_calls += 1
            cluster.hold_discovery.wait()
            if cluster.discovery_status != 200:
                self._reply(
                    handler, cluster.discovery_status, {"kind": "Status", "code": cluster.discovery_status}
                )
                return
            resources = [
                {"name": p, "kind": by_plural(GROUP, p).kind, "namespaced": by_plural(GROUP, p).namespaced}
                for p in cluster.served
            ]
            self._reply(
                handler,
                200,
                {"kind": "APIResourceList", "groupVersion": "worker.gpustack.ai/v1", "resources": resources},
            )
            return
        plural = path.rsplit("/", 1)[-1]
        if path in OTHER_PATHS:
            plural = OTHER_PATHS[path]
        elif not path.startswith(GROUP_PATH) or plural not in cluster.served:
            self._reply(handler, 404, {"kind": "Status", "code": 404, "message": f"{path} not found"})
            return
        query = parse_qs(url.query)
        labels = (query.get("labelSelector") or [""])[0]
        if query.get("watch") == ["true"]:
            since = int((query.get("resourceVersion") or ["0"])[0] or 0)
            self._watch(handler, cluster, plural, since, labels)
            return
        with cluster.lock:
            items = [o for o in cluster.objects.get(plural, {}).values() if selected(o, labels)]
            version = str(cluster.version)
        self._reply(handler, 200, {"kind": "List", "metadata": {"resourceVersion": version}, "items": items})

    def _watch(
        self, handler: BaseHTTPRequestHandler, cluster: FakeCluster, plural: str, since: int, labels: str = ""
    ) -> None:
        events: queue.Queue[Obj | None] = queue.Queue()
        with cluster.lock:
            for version, kind, event in cluster.log:
                if version > since and kind == plural:
                    events.put(event)
            cluster.watchers.setdefault(plural, []).append(events)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        try:
            while True:
                try:
                    event = events.get(timeout=30)
                except queue.Empty:
                    break
                if event is None:
                    break
                if not selected(event["object"], labels):
                    continue
                data = json.dumps(event).encode() + b"\n"
                handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        finally:
            with cluster.lock:
                cluster.watchers[plural].remove(events)
            handler.close_connection = True
