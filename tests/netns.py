"""Real links for the RDMA tests: a network namespace of the test's own with veth pairs in it.

``ip netns add`` and ``ip -n NS link add A type veth peer name B`` (iproute2, as root): both ends stay
inside the namespace, so nothing is added to the host's.  :func:`namespace` deletes it afterwards,
links included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator


def available() -> str:
    """Why real namespaces cannot be made here ("" when they can)."""
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    return ""


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Namespace:
    def __init__(self, name: str) -> None:
        self.name = name

    def veth(self, name: str, peer: str, *, mtu: int = 1500, up: bool = True) -> None:
        ip("-n", self.name, "link", "add", name, "mtu", str(mtu), "type", "veth", "peer", "name", peer)
        if up:
            ip("-n", self.name, "link", "set", name, "up")
            ip("-n", self.name, "link", "set", peer, "up")

    def set(self, name: str, *args: str) -> None:
        ip("-n", self.name, "link", "set", name, *args)


@contextlib.contextmanager
def namespace(name: str) -> Iterator[Namespace]:
    with contextlib.suppress(subprocess.CalledProcessError):
        ip("netns", "delete", name)  # a previous run that was killed
    ip("netns", "add", name)
    try:
        yield Namespace(name)
    finally:
        ip("netns", "delete", name)
