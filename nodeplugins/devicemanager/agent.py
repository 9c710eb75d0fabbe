"""``gpustack-operator device-manager serve``: the per-manufacturer node agent, wired together.

Threads: detection (every ``--monitor-period``, and at once when a simulated profile changes), the
node's Pods (list + watch by ``spec.nodeName``), the status publisher (coalesces ledger changes),
the kubelet link (plugin sockets, registration, re-registration) and the HTTPS endpoint
(``/metrics``, ``/readyz``, ``/livez``).  SIGTERM stops them in order.

Detection rules (§2.0): nothing is published before the first answer (unless ``--no-fast-failed``);
a failed pass keeps the last detected state; a successful empty pass undetects.  With
``--publish-only`` (kwok nodes, which have no kubelet) the agent publishes and keeps the ledger but
serves no device plugin.

Every pass also re-reads the network interfaces (:mod:`nodeplugins.devicemanager.rdma`, spec part C):
``Devices.spec.interfaces[]`` and the ``feature.gpustack.ai/rdma.*`` labels are published with the
accelerator spec, and the three RDMA keys are served beside the manufacturer's families.  The
``feature.gpustack.ai/fabric.*`` labels reduce the cards' fabric domains (:mod:`.fabric`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest

from api import allocation
from api.booleans import EnvironmentValueError
from kube import metrics as _build_info  # noqa: F401  (gpustack_build_info on /metrics)
from kube.client import ApiError, Client, load_api_client
from nodeplugins import privileges
from nodeplugins.devicemanager import devices, tokens
from nodeplugins.devicemanager.allocator import Allocator, Held
from nodeplugins.devicemanager.backends import Backend, DiscoveryError, backend_for
from nodeplugins.devicemanager.inventory import Inventory
from nodeplugins.devicemanager.publisher import Publisher
from nodeplugins.devicemanager.rdma.service import RdmaService

EXIT_USAGE = 2  # a usage error, as the command line spells it
log = logging.getLogger("devicemanager")

DETECTIONS = Counter("gpustack_device_manager_detections", "Detection passes", ["result"])
CARDS = Gauge("gpustack_device_manager_cards", "Cards detected in the last successful pass", ["manufacturer"])
STATUS_WRITES = Counter("gpustack_device_manager_status_writes", "Devices status writes")
# Set after every pass that detected the cards and published the node's Devices spec: an alert
# fires when it stops moving (the agent runs but no longer reports).
LAST_PASS = Gauge(
    "gpustack_device_manager_last_pass_timestamp_seconds",
    "Unix time of the last detection pass that detected the cards and published the Devices spec.",
)


class DeviceManager:
    def __init__(self, args: argparse.Namespace, client: Client, backend: Backend) -> None:
        self.args = args
        self.node_name: str = args.node_name
        self.client = client
        self.backend = backend
        self.publisher = Publisher(client, args.namespace)
        self.pod_resources: Any = None
        if not args.publish_only:
            from nodeplugins.devicemanager.kubelet import PodResources

            socket = args.pod_resources_socket or str(
                Path(args.kube_socket).parent.parent / "pod-resources" / "kubelet.sock"
            )
            self.pod_resources = PodResources(socket)
        self.allocator = Allocator(
            self.node_name,
            args.manufacturer,
            pod_resources=self.pod_resources.waiting if self.pod_resources else None,
            refresh_pods=lambda: self.client.list("Pod", field_selector=f"spec.nodeName={self.node_name}")[0],
        )
        self.rdma = RdmaService(
            args.sysfs_root,
            args.dev_root,
            args.netns,
            shared=not args.no_shared,
            partitioned=not args.no_partitioned,
        )
        self._rdma_seeded = False
        self.inventory: Inventory | None = None
        self.node: dict[str, Any] | None = None
        self.stopping = threading.Event()
        self.changed = threading.Event()
        self.detect_now = threading.Event()
        self.allocator.listeners.append(self.changed.set)
        # Partitions are materialised, reused and reclaimed where the device plugins are served.
        self.partitions = None if args.publish_only else backend.partitions(args.state_dir)
        self.allocator.attach(self.partitions)
        self.link: Any = None
        self.watchers: Any = None
        self.ready = False
        self.blocked: str | None = None  # a privilege it lacks, said by /readyz instead of crash-looping

    # --- detection --------------------------------------------------------------------------------------
    def detect_once(self) -> bool:
        """One pass: the network interfaces, then the accelerators; publishes what is known."""
        if self._seed_rdma() and self.rdma.refresh() and self.watchers is not None:
            self.watchers.bump()
        detected = self._detect_accelerators()
        self.publish_spec()
        return detected

    def _seed_rdma(self) -> bool:
        """Adopt the interfaces the live ``Devices`` records, once, before the first RDMA pass (so a
        restart keeps first-seen times, and a failing first pass keeps the list)."""
        if self._rdma_seeded:
            return True
        try:
            self.rdma.seed(self.client.get("Devices", self.node_name))
        except ApiError as error:
            log.warning("reading the live Devices failed; RDMA pass postponed", extra={"error": str(error)})
            return False
        self._rdma_seeded = True
        return True

    def _detect_accelerators(self) -> bool:
        try:
            inventory = self.backend.discover()
        except DiscoveryError as error:
            DETECTIONS.labels("failed").inc()
            log.warning("detection pass failed; keeping the last detected state", extra={"error": str(error)})
            return False
        DETECTIONS.labels("ok").inc()
        CARDS.labels(inventory.manufacturer).set(len(inventory.cards))
        if self.inventory is None and not inventory.cards and not self.args.no_fast_failed:
            log.warning("no accelerator answered yet; nothing is published until one does")
            return False
        if inventory != self.inventory:
            places = self.rdma.pci_places(devices.pci_addresses(inventory))
            groups = devices.canonical_groups(devices.spec_groups(inventory, places=places))
            log.info("detected", extra={"cards": len(inventory.cards), "groups": [g["id"] for g in groups]})
            self.inventory = inventory
            self.allocator.set_inventory(inventory, groups)
            if self.watchers is not None:
                self.watchers.bump()
        return True

    def publish_spec(self) -> None:
        if self.inventory is None:
            return
        node = self.client.get("Node", self.node_name)
        if node is None:
            log.warning("Node not found; not publishing", extra={"node": self.node_name})
            return
        self.node = node
        labels = (node.get("metadata") or {}).get("labels") or {}
        published: dict[str, str] = {}
        if self.rdma.spec_interfaces() is None:  # nothing known: keep the rdma. labels as they are
            published = self._published_features()
        self.publisher.spec(
            node,
            self.allocator.groups,
            devices.devices_labels(self.allocator.groups, labels),
            {
                **devices.node_labels(self.inventory, self.allocator.groups),
                **self.rdma.labels(self.allocator.groups, published),
            },
            interfaces=self.rdma.spec_interfaces(),
        )
        self.changed.set()

    def _published_features(self) -> dict[str, str]:
        from nodeplugins.devicemanager.publisher import node_feature_name

        live = self.client.get(
            "NodeFeature", node_feature_name(self.node_name), namespace=self.args.namespace
        )
        found = ((live or {}).get("spec") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    def _profile_mtime(self) -> float:
        try:
            return Path(self.args.simulate).stat().st_mtime if self.args.simulate else 0.0
        except OSError:
            return 0.0

    def detection_loop(self) -> None:
        last_mtime = self._profile_mtime()
        next_pass = 0.0
        while not self.stopping.is_set():
            now = time.monotonic()
            mtime = self._profile_mtime()
            if now >= next_pass or mtime != last_mtime or self.detect_now.is_set():
                self.detect_now.clear()
                last_mtime = mtime
                try:
                    if self.detect_once():
                        LAST_PASS.set_to_current_time()
                except ApiError as error:
                    log.warning("publishing failed; retrying", extra={"error": str(error)})
                    next_pass = now + 2.0
                    continue
                next_pass = now + self.args.monitor_period
            self.stopping.wait(0.5)

    # --- Pods -------------------------------------------------------------------------------------------
    def pods_loop(self) -> None:
        selector = f"spec.nodeName={self.node_name}"
        while not self.stopping.is_set():
            try:
                items, version = self.client.list("Pod", field_selector=selector)
                self.allocator.replace_pods(items)
                for pod in items:
                    self._restore(pod)
                for event in self.client.watch(
                    "Pod", resource_version=version, timeout_seconds=120, field_selector=selector
                ):
                    if self.stopping.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        break
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.allocator.pod_event(kind, obj)
                        if kind != "DELETED":
                            self._restore(obj)
            except ApiError as error:
                log.warning("watching the node's Pods failed; retrying", extra={"error": str(error)})
                self.stopping.wait(2.0)

    def _restore(self, pod: dict[str, Any]) -> None:
        """Write back a record an edit removed or garbled (the hold stands; the annotation follows),
        and remove one this agent never granted (an edit on a Pod that holds nothing)."""
        want = self.allocator.drifted(pod)
        if want is None:
            return
        meta = pod.get("metadata") or {}
        if want:
            message = "allocation record differs from what is held; restoring it"
        else:
            message = "allocation record names cards this device manager never granted; removing it"
        log.warning(message, extra={"pod": f"{meta.get('namespace')}/{meta.get('name')}"})
        self._patch_record(meta.get("namespace", ""), meta.get("name", ""), want)

    def _patch_record(self, namespace: str, name: str, record: allocation.Record) -> None:
        """Write the Pod's record; an empty one removes the annotation."""
        value = allocation.encode(record) if record else None
        body = {"metadata": {"annotations": {allocation.ANNOTATION: value}}}
        try:
            self.client.patch("Pod", name, body, namespace=namespace)
        except ApiError as error:
            if not error.not_found:
                raise

    def record(self, held: Held) -> None:
        """Write the container's entry onto its Pod (outside the mutex)."""
        self._patch_record(held.namespace, held.pod, self.allocator.record_for(held.uid))

    # --- status -----------------------------------------------------------------------------------------
    def status_loop(self) -> None:
        while not self.stopping.is_set():
            if not self.changed.wait(1.0):
                continue
            self.stopping.wait(0.05)  # coalesce a burst of allocations into one write
            self.changed.clear()
            if self.inventory is None or self.node is None:
                continue
            try:
                if self.publisher.status(self.node_name, self.allocator.rows()):
                    STATUS_WRITES.inc()
            except ApiError as error:
                log.warning("writing the Devices status failed; retrying", extra={"error": str(error)})
                self.changed.set()
                self.detect_now.set()
                self.stopping.wait(1.0)

    # --- lifecycle --------------------------------------------------------------------------------------
    def start_device_plugins(self) -> None:
        from nodeplugins.devicemanager.kubelet import KubeletLink, work_beside
        from nodeplugins.devicemanager.plugin import DevicePlugin, Watchers

        self.watchers = Watchers()
        self.watchers.follow(self.allocator)  # health pushed at the reserve/release instant
        args = self.args
        plugins = [
            DevicePlugin(resource, self.allocator, self.backend, self.record, self.watchers)
            for resource in tokens.resources(
                args.manufacturer,
                shared=not args.no_shared,
                sliced=not args.no_sliced,
                partitioned=not args.no_partitioned,
            )
        ]
        served: list[Any] = [*plugins, *self.rdma.plugins(self.watchers)]
        work_beside(args.kube_socket)
        self.link = KubeletLink(served, args.kube_socket)
        self.link.start()

    def run(self) -> int:
        threads = [
            threading.Thread(target=self.pods_loop, name="pods", daemon=True),
            threading.Thread(target=self.status_loop, name="status", daemon=True),
        ]
        for thread in threads:
            thread.start()
        server = serve_http(self)
        detection = threading.Thread(target=self.detection_loop, name="detection", daemon=True)
        detection.start()
        # No plugin is served before the node's Pods are listed: the ledger would miss their records.
        while not self.stopping.is_set() and (self.inventory is None or not self.allocator.synced):
            self.stopping.wait(0.2)
        if not self.args.publish_only:
            # Until the plugin sockets can be created beside the kubelet's: why not, on /readyz.
            privileges.wait_until_able(
                lambda: privileges.socket_dir_problem(self.args.kube_socket, "device-plugin sockets"),
                self.stopping,
                lambda reason: setattr(self, "blocked", reason),
            )
        if not self.args.publish_only and not self.stopping.is_set():
            self.start_device_plugins()
        if self.partitions is not None:
            self.partitions.start()
        self.ready = True
        self.stopping.wait()
        log.info("shutting down")
        if self.link is not None:
            self.link.stop()
        if self.watchers is not None:
            self.watchers.close()
        if self.partitions is not None:
            self.partitions.stop()
        server.shutdown()
        return 0


class _Handler(BaseHTTPRequestHandler):
    manager: DeviceManager

    def _debug(self) -> None:
        """``/debug/flags/v`` and ``/debug/threads`` (loopback only; operations spec D.2)."""
        from kube import debug

        length = int(self.headers.get("Content-Length") or 0)
        status, text = debug.answer(self.command, self.path, self.client_address[0], self.rfile.read(length))
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self) -> None:
        self._debug()

    def do_GET(self) -> None:
        if self.path.startswith("/debug/"):
            return self._debug()
        if self.path == "/metrics":
            body, status, kind = generate_latest(), 200, CONTENT_TYPE_LATEST
        elif self.path == "/livez":
            body, status, kind = b"ok", 200, "text/plain"
        elif self.path == "/readyz":
            ok = self.manager.ready and (self.manager.link is None or self.manager.link.listed())
            body, status, kind = (b"ok", 200, "text/plain") if ok else (b"not ready", 503, "text/plain")
            if self.manager.blocked:
                body = f"not ready: {self.manager.blocked}".encode()
        else:
            body, status, kind = b"not found", 404, "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: metrics scrapes every few seconds
        return


def serve_http(manager: DeviceManager) -> ThreadingHTTPServer:
    from certs import issue

    cert_dir = manager.args.cert_dir or tempfile.mkdtemp(prefix="gpustack-dm-certs-")
    if not (Path(cert_dir) / "tls.crt").is_file():
        issue.ensure(cert_dir, ["localhost"], ["127.0.0.1"])
    handler = type("Handler", (_Handler,), {"manager": manager})
    server = ThreadingHTTPServer((manager.args.bind_address, manager.args.secure_port), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(Path(cert_dir) / "tls.crt"), str(Path(cert_dir) / "tls.key"))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="https", daemon=True).start()
    return server


def run(args: argparse.Namespace) -> int:
    if not args.node_name:
        log.error("--node-name (or NODE_NAME) is required")
        return EXIT_USAGE
    try:
        backend = backend_for(args.manufacturer, simulate=args.simulate, node=args.node_name)
    except (ValueError, DiscoveryError) as error:
        log.error(str(error))
        return EXIT_USAGE
    client = Client(load_api_client(args.kubeconfig, component="device-manager"))
    try:
        devices.group_id_with_memory()
        manager = DeviceManager(args, client, backend)
    except EnvironmentValueError as error:
        log.error(str(error))
        return EXIT_USAGE
    except OSError as error:  # the partition markers' directory cannot be made
        log.error(f"--state-dir {args.state_dir}: {error}")
        return EXIT_USAGE

    def stop(signum: int, _frame: Any) -> None:
        manager.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return manager.run()
