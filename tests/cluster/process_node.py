"""A node whose Pods run as processes on this host: where the chart's operator Pods run on the local
control plane, which has no container runtime.

    .venv/bin/python tests/cluster/process_node.py --state DIR --kubeconfig K --name gpustack-host \\
        --service-port 28360 --service-selector app.kubernetes.io/component=worker --port-base 28361

It does for the Pods bound to Node ``--name`` what a kubelet and kube-proxy do, no more:

- registers the Node (label and NoSchedule taint ``gpustack.ai/process-node=true``, so only Pods that
  ask for it land here) and keeps it Ready: status heartbeat and its Lease in ``kube-node-lease``;
- runs each Pod's container as a process: the operator image's entrypoint ``gpustack-operator`` is
  this checkout's, the env is the container's (values and ``fieldRef``s, ``$(VAR)`` expanded in the
  arguments), the credentials are a token bound to the Pod for its ServiceAccount (TokenRequest) in a
  kubeconfig named by ``KUBECONFIG``, and ``TMPDIR`` is the Pod's own directory (its emptyDir);
- instead of a network namespace per Pod, a container that declares a port gets its own loopback
  port: ``--bind-address=127.0.0.1 --secure-port=<port>`` are appended to its arguments;
- probes the readiness probe over HTTPS and writes the Pod's status (Running, Ready, restarts);
  ``restartPolicy: Always`` restarts an exited process after a back-off, ``Never`` ends the Pod
  ``Succeeded`` or ``Failed``; a Pod being deleted gets SIGTERM, then SIGKILL after its grace period,
  then is removed;
- stands in for one Service: 127.0.0.1:``--service-port`` forwards each TCP connection (TLS passes
  through) to a Ready Pod matching ``--service-selector``, trying the next one when a connect fails,
  as a Service backed by endpoints of Ready Pods does.

``<state>/pods.json`` says which Pod runs as which process on which port (tests read it to kill one).
Only Pods whose container command is ``gpustack-operator`` run here; any other Pod is failed with a
message saying so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from kube.client import MERGE, ApiError, Client, load_api_client  # noqa: E402

log = logging.getLogger("process-node")
LABEL = "gpustack.ai/process-node"
PYTHON = (
    str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable
)
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Running:
    """One Pod's process and what its status says."""

    uid: str
    namespace: str
    name: str
    labels: dict[str, str]
    spec: dict[str, Any]
    directory: Path
    port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    ready: bool = False
    phase: str = "Pending"
    exit_code: int | None = None
    next_start: float = 0.0
    backoff: float = 1.0
    deleting: bool = False
    kill_at: float = 0.0
    reported: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    terminated: bool = False  # SIGTERM sent
    probed_at: float = 0.0

    @property
    def container(self) -> dict[str, Any]:
        return (self.spec.get("containers") or [{}])[0]

    @property
    def restart_policy(self) -> str:
        return self.spec.get("restartPolicy") or "Always"


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ProcessNode:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.client = Client(load_api_client(args.kubeconfig), timeout=15)
        self.state = Path(args.state)
        self.state.mkdir(parents=True, exist_ok=True)
        self.pods: dict[str, Running] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.next_port = args.port_base
        self.free_ports: list[int] = []  # handed back by Pods gone, reused first
        config = yaml.safe_load(Path(args.kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        self.server, self.ca_data = cluster["server"], cluster.get("certificate-authority-data", "")
        self.service_selector = dict(
            term.split("=", 1) for term in args.service_selector.split(",") if "=" in term
        )

    # --- the Node -------------------------------------------------------------------------------

    def register(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.args.name,
                "labels": {
                    LABEL: "true",
                    "kubernetes.io/hostname": self.args.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
            "spec": {"taints": [{"key": LABEL, "value": "true", "effect": "NoSchedule"}]},
        }
        with contextlib.suppress(ApiError):
            self.client.create(node)
        self.heartbeat()

    def heartbeat(self) -> None:
        now = _now()
        status = {
            "status": {
                "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": self.args.name},
                ],
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "ProcessNodeReady",
                        "message": "this host runs the node's Pods as processes",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "nodeInfo": {
                    "kubeletVersion": "v1.36.3",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
            }
        }
        self.client.patch("Node", self.args.name, status, subresource="status")
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.args.name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": self.args.name, "leaseDurationSeconds": 40, "renewTime": _micro()},
        }
        self.client.apply(lease, field_manager="process-node")

    def heartbeats(self) -> None:
        while not self.stop.wait(10):
            try:
                self.heartbeat()
            except ApiError as error:
                log.warning("heartbeat failed: %s", error)

    # --- Pods -----------------------------------------------------------------------------------

    def watch_pods(self) -> None:
        selector = f"spec.nodeName={self.args.name}"
        while not self.stop.is_set():
            try:
                items, version = self.client.list("Pod", field_selector=selector)
                seen = {(i.get("metadata") or {}).get("uid") for i in items}
                for item in items:
                    self.observe(item)
                with self.lock:
                    for uid in [u for u in self.pods if u not in seen]:
                        self.pods[uid].deleting = True
                for event in self.client.watch("Pod", resource_version=version, field_selector=selector):
                    if self.stop.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        break
                    if kind == "DELETED":
                        with self.lock:
                            running = self.pods.get((obj.get("metadata") or {}).get("uid", ""))
                            if running is not None:
                                running.deleting = True
                    elif kind in ("ADDED", "MODIFIED"):
                        self.observe(obj)
            except ApiError as error:
                log.warning("pod watch failed: %s", error)
                self.stop.wait(1)
            except Exception as error:
                log.warning("pod watch broke: %s", error)
                self.stop.wait(1)

    def observe(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        with self.lock:
            running = self.pods.get(uid)
            if running is None:
                phase = (pod.get("status") or {}).get("phase")
                if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
                    if meta.get("deletionTimestamp"):
                        self._remove(meta)
                    return
                running = Running(
                    uid=uid,
                    namespace=meta.get("namespace", ""),
                    name=meta.get("name", ""),
                    labels=dict(meta.get("labels") or {}),
                    spec=pod.get("spec") or {},
                    directory=self.state / f"{meta.get('namespace')}_{meta.get('name')}",
                )
                if running.container.get("ports"):
                    running.port = self._take_port()
                self.pods[uid] = running
            if meta.get("deletionTimestamp") and not running.deleting:
                running.deleting = True
                grace = meta.get("deletionGracePeriodSeconds")
                running.kill_at = time.monotonic() + float(30 if grace is None else grace)

    def _take_port(self) -> int:
        """A loopback port for a new Pod: one a gone Pod handed back, else the next above
        ``--port-base``; never one something listens on (the control plane's own ports follow the
        block, and handing a worker etcd's port made every later rollout crash-loop)."""
        while True:
            if self.free_ports:
                port = self.free_ports.pop(0)
            else:
                port, self.next_port = self.next_port, self.next_port + 1
            if _bindable(port):
                return port

    def _remove(self, meta: dict[str, Any]) -> None:
        with contextlib.suppress(ApiError):
            self.client._call(
                "DELETE",
                f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}",
                body={
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": meta.get("uid")},
                },
            )

    def _token(self, running: Running) -> str:
        account = running.spec.get("serviceAccountName") or "default"
        answer = self.client._call(
            "POST",
            f"/api/v1/namespaces/{running.namespace}/serviceaccounts/{account}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": 86400,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": running.name,
                        "uid": running.uid,
                    },
                },
            },
        )
        return answer["status"]["token"]

    def _env(self, running: Running) -> dict[str, str]:
        values = {
            "metadata.name": running.name,
            "metadata.namespace": running.namespace,
            "metadata.uid": running.uid,
            "spec.nodeName": self.args.name,
            "spec.serviceAccountName": running.spec.get("serviceAccountName") or "default",
            "status.podIP": "127.0.0.1",
            "status.hostIP": "127.0.0.1",
        }
        env: dict[str, str] = {}
        for item in running.container.get("env") or []:
            if "value" in item:
                env[item["name"]] = _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), str(item["value"]))
            else:
                path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
                env[item["name"]] = values.get(path, "")
        return env

    def _argv(self, running: Running, env: dict[str, str]) -> list[str] | None:
        command = list(running.container.get("command") or [])
        if command[:1] != ["gpustack-operator"]:
            return None
        args = [
            _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), a)
            for a in running.container.get("args") or []
        ]
        argv = [PYTHON, "-m", "gpustack_operator", *command[1:], *args]
        if running.port is not None:
            argv += ["--bind-address=127.0.0.1", f"--secure-port={running.port}"]
        return argv

    def start(self, running: Running) -> None:
        running.directory.mkdir(parents=True, exist_ok=True)
        (running.directory / "tmp").mkdir(exist_ok=True)
        base = self._env(running)
        argv = self._argv(running, base)
        if argv is None:
            running.phase, running.message = (
                "Failed",
                "the process node runs only gpustack-operator containers",
            )
            return
        kubeconfig = running.directory / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {"server": self.server, "certificate-authority-data": self.ca_data},
                        }
                    ],
                    "users": [{"name": running.name, "user": {"token": self._token(running)}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": running.name}}],
                    "current-context": "c",
                }
            )
        )
        os.chmod(kubeconfig, 0o600)
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        env.pop("KUBECONFIG", None)
        env.update(base)
        env.update({"KUBECONFIG": str(kubeconfig), "TMPDIR": str(running.directory / "tmp")})
        log_file = (running.directory / "log").open("ab")
        log_file.write(f"=== {_now()} {' '.join(argv)}\n".encode())
        log_file.flush()
        running.process = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        running.phase, running.ready, running.exit_code = "Running", False, None

    def probe(self, running: Running) -> bool:
        probe = running.container.get("readinessProbe") or {}
        get = probe.get("httpGet")
        if not get or running.port is None:
            return True
        scheme = (get.get("scheme") or "HTTP").lower()
        context = ssl._create_unverified_context()  # as the kubelet, which does not verify probes
        try:
            with urllib.request.urlopen(
                f"{scheme}://127.0.0.1:{running.port}{get.get('path', '/')}", context=context, timeout=2
            ) as answer:
                return 200 <= answer.status < 400
        except OSError:
            return False

    def supervise(self) -> None:
        while not self.stop.wait(0.3):
            with self.lock:
                pods = list(self.pods.values())
            for running in pods:
                try:
                    self._step(running)
                except ApiError as error:
                    log.warning("pod %s/%s: %s", running.namespace, running.name, error)
                except Exception:
                    log.exception("pod %s/%s", running.namespace, running.name)
            self._write_state()

    def _step(self, running: Running) -> None:
        process = running.process
        if running.deleting:
            if process is not None and process.poll() is None:
                if running.kill_at == 0.0:
                    running.kill_at = time.monotonic() + 30
                if not running.terminated:
                    with contextlib.suppress(OSError):
                        os.killpg(process.pid, signal.SIGTERM)
                    running.terminated = True
                if time.monotonic() >= running.kill_at:
                    with contextlib.suppress(OSError):
                        os.killpg(process.pid, signal.SIGKILL)
                return
            self._remove({"namespace": running.namespace, "name": running.name, "uid": running.uid})
            with self.lock:
                self.pods.pop(running.uid, None)
                if running.port is not None:
                    self.free_ports.append(running.port)
            return
        if process is None:
            if running.phase == "Pending" or (
                running.phase == "Running" and time.monotonic() >= running.next_start
            ):
                self.start(running)
        elif process.poll() is not None:
            running.exit_code = process.returncode
            running.process = None
            running.ready = False
            policy = running.restart_policy
            if policy == "Always" or (policy == "OnFailure" and process.returncode != 0):
                running.restarts += 1
                running.next_start = time.monotonic() + running.backoff
                running.backoff = min(running.backoff * 2, 10.0)
            else:
                running.phase = "Succeeded" if process.returncode == 0 else "Failed"
        elif time.monotonic() - running.probed_at >= 1.0:
            running.probed_at = time.monotonic()
            running.ready = self.probe(running)
            if running.ready:
                running.backoff = 1.0
        self._report(running)

    def _report(self, running: Running) -> None:
        container = running.container.get("name", "main")
        state: dict[str, Any]
        if running.process is not None:
            state = {"running": {"startedAt": _now()}}
        elif running.exit_code is not None:
            state = {
                "terminated": {
                    "exitCode": running.exit_code,
                    "reason": "Completed" if running.exit_code == 0 else "Error",
                }
            }
        else:
            state = {"waiting": {"reason": running.message or "ContainerCreating"}}
        ready = running.ready and running.phase == "Running"
        wanted = {
            "phase": running.phase,
            "ready": ready,
            "restarts": running.restarts,
            "state": next(iter(state)),
            "exit": running.exit_code,
        }
        if wanted == running.reported:
            return
        condition = "True" if ready else "False"
        status = {
            "status": {
                "phase": running.phase,
                "hostIP": "127.0.0.1",
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": running.reported.get("startTime") or _now(),
                "message": running.message or None,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": _now()},
                    {"type": "ContainersReady", "status": condition, "lastTransitionTime": _now()},
                    {"type": "Ready", "status": condition, "lastTransitionTime": _now()},
                ],
                "containerStatuses": [
                    {
                        "name": container,
                        "image": running.container.get("image", ""),
                        "imageID": "",
                        "ready": ready,
                        "started": running.process is not None,
                        "restartCount": running.restarts,
                        "state": state,
                    }
                ],
            }
        }
        self.client._call(
            "PATCH",
            f"/api/v1/namespaces/{running.namespace}/pods/{running.name}/status",
            body=status,
            content_type=MERGE,
        )
        running.reported = {**wanted, "startTime": status["status"]["startTime"]}

    def _write_state(self) -> None:
        with self.lock:
            pods = [
                {
                    "namespace": r.namespace,
                    "name": r.name,
                    "uid": r.uid,
                    "labels": r.labels,
                    "pid": r.process.pid if r.process is not None else None,
                    "port": r.port,
                    "ready": r.ready,
                    "phase": r.phase,
                    "restarts": r.restarts,
                    "log": str(r.directory / "log"),
                }
                for r in self.pods.values()
            ]
        target = self.state / "pods.json"
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(pods, indent=1))
        os.replace(tmp, target)

    # --- the Service stand-in -------------------------------------------------------------------

    def backends(self) -> list[int]:
        with self.lock:
            return [
                r.port
                for r in self.pods.values()
                if r.ready
                and r.port is not None
                and not r.deleting
                and all(r.labels.get(k) == v for k, v in self.service_selector.items())
            ]

    async def _forward(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        ports = self.backends()
        self._turn = getattr(self, "_turn", 0) + 1
        ports = ports[self._turn % len(ports) :] + ports[: self._turn % len(ports)] if ports else []
        for port in ports:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
            except (OSError, TimeoutError):
                continue
            await self._splice(client_reader, client_writer, reader, writer)
            return
        client_writer.close()

    async def _splice(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Both directions until either side closes.  A backend that goes away while a request is
        unanswered (its process was killed) resets the client's connection, so the apiserver's
        webhook client retries on another Pod rather than failing on an early EOF."""
        unanswered = 0

        async def upstream() -> None:
            nonlocal unanswered
            with contextlib.suppress(ConnectionError, OSError):
                while data := await client_reader.read(65536):
                    unanswered += len(data)
                    writer.write(data)
                    await writer.drain()
            with contextlib.suppress(Exception):
                writer.close()

        async def downstream() -> None:
            nonlocal unanswered
            with contextlib.suppress(ConnectionError, OSError):
                while data := await reader.read(65536):
                    unanswered = 0
                    client_writer.write(data)
                    await client_writer.drain()
            sock = client_writer.get_extra_info("socket")
            if unanswered and sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(Exception):
                client_writer.close()

        await asyncio.gather(upstream(), downstream())

    def serve(self) -> None:
        async def main() -> None:
            server = await asyncio.start_server(self._forward, "127.0.0.1", self.args.service_port)
            async with server:
                while not self.stop.is_set():
                    await asyncio.sleep(0.5)

        asyncio.run(main())

    # --- running --------------------------------------------------------------------------------

    def run(self) -> int:
        self.register()
        for target in (self.heartbeats, self.watch_pods, self.supervise):
            threading.Thread(target=target, daemon=True, name=target.__name__).start()
        if self.args.service_port:
            threading.Thread(target=self.serve, daemon=True, name="service").start()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stop.set())
        self.stop.wait()
        with self.lock:
            processes = [r.process for r in self.pods.values() if r.process is not None]
        for process in processes:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--state", required=True, help="directory for the Pods' files and pods.json")
    parser.add_argument(
        "--kubeconfig", required=True, help="an admin kubeconfig (the node's own credentials)"
    )
    parser.add_argument("--name", default="gpustack-host", help="the Node's name")
    parser.add_argument("--service-port", type=int, default=0, help="the Service stand-in's port (0: none)")
    parser.add_argument("--service-selector", default="app.kubernetes.io/component=worker")
    parser.add_argument("--port-base", type=int, required=True, help="first loopback port handed to a Pod")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return ProcessNode(args).run()


if __name__ == "__main__":
    sys.exit(main())
