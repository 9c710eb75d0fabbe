"""Reaching what runs in the local cluster's containers from the host, as a user would: JSON over
HTTP, a Service's ready endpoint (what kube-proxy would forward to; the local nodes run none), and
``ssh`` with a key made by ``ssh-keygen``. Used by the container e2e and ``make examples-check``."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import harness

# No user config, no known_hosts, never a prompt: a refused key fails at once (exit 255).
SSH_OPTIONS = ("-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10")  # fmt: skip
# What ssh prints while sshd is not listening yet (the sidecar makes its host keys first).
_STARTING = ("Connection refused", "Connection reset", "Connection closed", "kex_exchange_identification")


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 15) -> dict[str, Any]:
    """GET ``url`` (POST ``body`` as JSON when given) and decode the JSON answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return dict(json.loads(answer.read()))


def service_endpoint(
    info: harness.ClusterInfo, namespace: str, service: str, port_name: str | None = None
) -> str:
    """``ip:port`` of a ready endpoint of the Service for ``port_name`` (default: the Service's first
    port), read from its EndpointSlices; ValueError when it has none."""
    if port_name is None:
        port_name = info.kubectl_json("get", "service", service, "-n", namespace)["spec"]["ports"][0].get(
            "name"
        )
    slices = info.kubectl_json(
        "get", "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={service}"
    )["items"]
    for found in slices:
        port = next((p["port"] for p in found.get("ports") or [] if p.get("name") == port_name), None)
        for endpoint in found.get("endpoints") or []:
            if port and (endpoint.get("conditions") or {}).get("ready"):
                return f"{endpoint['addresses'][0]}:{port}"
    raise ValueError(f"Service {namespace}/{service} has no ready endpoint for port {port_name!r}")


def keygen(directory: Path, name: str) -> tuple[Path, str]:
    """A fresh ed25519 key pair, as a user makes one: the private key's path and the public line."""
    path = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@e2e", "-f", str(path)],
                   check=True, capture_output=True, timeout=30)  # fmt: skip
    return path, path.with_suffix(".pub").read_text().strip()


def ssh(
    key: Path, address: str, command: str, *, port: int = 22, terminal: str = ""
) -> subprocess.CompletedProcess:
    """``ssh root@address command``; with ``terminal``, a login with a terminal (``-tt``, no command)
    that is typed ``terminal``."""
    argv = ["ssh", *SSH_OPTIONS, "-i", str(key), "-p", str(port), *(["-tt"] if terminal else []),
            f"root@{address}", *([command] if command else [])]  # fmt: skip
    return subprocess.run(argv, input=terminal, capture_output=True, text=True, timeout=60)


def ssh_answering(
    key: Path, address: str, command: str, *, port: int = 22, timeout: float = 60
) -> subprocess.CompletedProcess:
    """``ssh`` once sshd listens: a Pod is Ready as soon as its containers run, and sshd makes its host
    keys before it listens. Only a refused or reset connection is tried again."""

    def attempt() -> subprocess.CompletedProcess | None:
        done = ssh(key, address, command, port=port)
        return None if done.returncode == 255 and any(s in done.stderr for s in _STARTING) else done

    return harness.wait_for(attempt, timeout=timeout, interval=1, what=f"sshd answering at {address}:{port}")
