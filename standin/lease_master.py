"""A stand-in for the Mooncake master's Kubernetes Lease backend, which the PyPI wheel the store
image is built from does not compile in (started with ``-ha_backend_type=k8s`` it exits with
``UNAVAILABLE_IN_CURRENT_MODE``).

The store image's ``mooncake_master`` runs this first::

    python3 -m standin.lease_master <real mooncake_master> <the rendered argv>

Without ``-enable_ha=true -ha_backend_type=k8s`` it replaces itself with the real master, argv
unchanged. With them it campaigns for the Lease ``-ha_backend_connstring=<namespace>/<name>`` as the
store would: the identity is ``<-rpc_address>:<-rpc_port>`` (what members dial), the Lease lasts
``LEASE_SECONDS`` and is renewed every ``RENEW_SECONDS``; a holder that stopped renewing is replaced
and ``leaseTransitions`` counts it. While standing by it answers the admin port as a standby master
does (``/health`` 200, everything else 503), so liveness holds and readiness does not. Once elected it
starts the real master without the election flags (a single master needs none) and keeps renewing;
a lost Lease stops the master and exits 1, so the kubelet restarts the container into a new campaign.
SIGTERM stops the master and gives the Lease up. The standard library only (the store image has
Python, not the project's dependencies).
"""

from __future__ import annotations

import datetime as dt
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from standin.kube import APIError, KubeAPI

LEASE_SECONDS = 15
RENEW_SECONDS = 5
RETRY_SECONDS = 2
ELECTION_FLAGS = ("-enable_ha", "-ha_backend_type", "-ha_backend_connstring", "-pod_name", "-pod_namespace")


def flags(argv: list[str]) -> dict[str, str]:
    """``-name=value`` / ``--name=value`` flags (gflags' spelling the renderer uses), last one wins."""
    out: dict[str, str] = {}
    for arg in argv:
        if arg.startswith("-") and "=" in arg:
            name, value = arg.lstrip("-").split("=", 1)
            out[name] = value
    return out


def campaigns(argv: list[str]) -> bool:
    given = flags(argv)
    return given.get("enable_ha", "").lower() in ("true", "1") and given.get("ha_backend_type") == "k8s"


def without_election(argv: list[str]) -> list[str]:
    return [a for a in argv if not any(a.lstrip("-").startswith(f.lstrip("-") + "=") for f in ELECTION_FLAGS)]


def identity(argv: list[str]) -> str:
    given = flags(argv)
    return f"{given.get('rpc_address') or os.environ.get('POD_IP', '')}:{given.get('rpc_port', '50051')}"


def micro_time(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def expired(spec: dict[str, Any], now: float) -> bool:
    renewed = _epoch(spec.get("renewTime")) or _epoch(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    return renewed is None or not isinstance(duration, int) or renewed + duration < now


class Elector:
    """Acquire and renew one Lease; the decisions are ``try_acquire`` and ``renew``."""

    def __init__(self, api: KubeAPI, namespace: str, name: str, me: str) -> None:
        self.api, self.namespace, self.name, self.me = api, namespace, name, me
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def _get(self) -> dict[str, Any] | None:
        try:
            return self.api.call("GET", f"{self.path}/{self.name}")
        except APIError as error:
            if error.status == 404:
                return None
            raise

    def try_acquire(self, now: float) -> bool:
        lease = self._get()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.me, "leaseDurationSeconds": LEASE_SECONDS,
                         "acquireTime": micro_time(now), "renewTime": micro_time(now), "leaseTransitions": 0},
            }  # fmt: skip
            try:
                self.api.call("POST", self.path, body)
            except APIError as error:
                if error.status == 409:  # another replica created it first
                    return False
                raise
            return True
        spec = lease.setdefault("spec", {})
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.me and not expired(spec, now):
            return False
        if holder != self.me:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if holder else 0)
            spec["acquireTime"] = micro_time(now)
        spec.update(holderIdentity=self.me, leaseDurationSeconds=LEASE_SECONDS, renewTime=micro_time(now))
        return self._put(lease)

    def renew(self, now: float) -> bool:
        lease = self._get()
        spec = (lease or {}).get("spec") or {}
        if lease is None or spec.get("holderIdentity") != self.me:
            return False
        spec["renewTime"] = micro_time(now)
        return self._put(lease)

    def _put(self, lease: dict[str, Any]) -> bool:
        """Write the Lease as read; False when someone wrote it since (the resourceVersion read
        makes a concurrent writer's PUT fail with 409)."""
        try:
            self.api.call("PUT", f"{self.path}/{self.name}", lease)
        except APIError as error:
            if error.status == 409:
                return False
            raise
        return True

    def release(self) -> None:
        lease = self._get()
        if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.me:
            lease["spec"]["holderIdentity"] = ""
            self.api.call("PUT", f"{self.path}/{self.name}", lease)


class _Standby(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path.split("?")[0] == "/health"
        body = b"OK" if ok else b"standby: this master does not hold the election Lease"
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _log(message: str) -> None:
    print(f"lease-master: {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) < 1:
        _log("usage: python3 -m standin.lease_master <mooncake_master> [flags]")
        return 2
    master, args = argv[0], argv[1:]
    if not campaigns(args):
        os.execv(master, [master, *args])
    namespace, _, name = flags(args).get("ha_backend_connstring", "").partition("/")
    if not namespace or not name:
        _log("-ha_backend_connstring must be <namespace>/<lease> with -ha_backend_type=k8s")
        return 2
    me = identity(args)
    elector = Elector(KubeAPI(), namespace, name, me)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    standby = http.server.ThreadingHTTPServer(
        ("0.0.0.0", int(flags(args).get("metrics_port", "9003"))), _Standby
    )
    threading.Thread(target=standby.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    _log(f"campaigning for Lease {namespace}/{name} as {me}")
    while not stop.is_set():
        try:
            if elector.try_acquire(time.time()):
                break
        except (APIError, OSError) as error:
            _log(f"campaign: {error}")
        stop.wait(RETRY_SECONDS)
    standby.shutdown()
    standby.server_close()
    if stop.is_set():
        return 0
    _log(f"elected: {me} holds Lease {namespace}/{name}; starting the master")
    child = subprocess.Popen([master, *without_election(args)])
    last_renewed = time.time()
    code = 0
    while child.poll() is None:
        if stop.wait(RENEW_SECONDS):
            break
        try:
            if elector.renew(time.time()):
                last_renewed = time.time()
                continue
            _log("the Lease has another holder: stopping the master")
        except (APIError, OSError) as error:
            if time.time() - last_renewed < LEASE_SECONDS:
                _log(f"renew: {error} (retrying)")
                continue
            _log(f"renew failed past the Lease's {LEASE_SECONDS}s: stopping the master")
        code = 1
        break
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
    if stop.is_set():
        try:
            elector.release()
        except (APIError, OSError) as error:
            _log(f"release: {error}")
        return 0
    return code or (1 if child.returncode else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
