"""Link facts through ``pyroute2``: one netlink dump of the links per pass (I/O edge).

The device manager runs in the host's network namespace; ``--netns NAME`` reads a named one
(``ip netns``) instead, never creating it.  A dump that fails is a failed pass, not "no links":
the caller keeps the recorded inventory.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

IFF_UP = 0x1
IFF_RUNNING = 0x40


class NetlinkError(RuntimeError):
    """The links could not be dumped."""


@dataclass(frozen=True, slots=True)
class LinkFacts:
    mtu: int
    up: bool


def _up(operstate: str, flags: int) -> bool:
    """Operationally up: ``UP``, or ``UNKNOWN`` (loopback, some drivers) while administratively up
    and running."""
    if operstate == "UP":
        return True
    return operstate == "UNKNOWN" and bool(flags & IFF_UP) and bool(flags & IFF_RUNNING)


def _facts(links: Any) -> dict[str, LinkFacts]:
    out = {}
    for link in links:
        name = link.get_attr("IFLA_IFNAME")
        if not name:
            continue
        out[str(name)] = LinkFacts(
            int(link.get_attr("IFLA_MTU") or 0),
            _up(str(link.get_attr("IFLA_OPERSTATE") or ""), int(link.get("flags") or 0)),
        )
    return out


def _open(netns: str) -> Any:
    from pyroute2 import IPRoute

    try:
        # groups=0: a dump socket, subscribed to no notifications (nothing piles up between passes);
        # flags=0: a missing namespace is an error, never created.
        return IPRoute(netns=netns, flags=0, groups=0) if netns else IPRoute(groups=0)
    except OSError as error:
        where = f"network namespace {netns!r}" if netns else "this network namespace"
        raise NetlinkError(f"cannot open netlink in {where}: {error}") from error


def link_facts(netns: str = "") -> dict[str, LinkFacts]:
    """``{interface name: facts}`` of every link in the namespace, over a socket of its own."""
    socket = _open(netns)
    try:
        return _facts(socket.get_links())
    except Exception as error:  # pyroute2 raises its own NetlinkError, OSError and protocol errors
        raise NetlinkError(f"dumping the links failed: {error}") from error
    finally:
        socket.close()


class LinkReader:
    """:func:`link_facts` over one socket kept between passes (entering a named namespace forks a
    helper, which a process serving gRPC should not do every few seconds); reopened after a failure."""

    def __init__(self, netns: str = "") -> None:
        self.netns = netns
        self._socket: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> dict[str, LinkFacts]:
        with self._lock:
            if self._socket is None:
                self._socket = _open(self.netns)
            try:
                return _facts(self._socket.get_links())
            except Exception as error:
                self._close()
                raise NetlinkError(f"dumping the links failed: {error}") from error

    def _close(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(Exception):
                self._socket.close()
            self._socket = None

    def close(self) -> None:
        with self._lock:
            self._close()
