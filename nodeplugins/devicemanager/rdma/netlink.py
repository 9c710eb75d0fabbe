"""Link facts through ``pyroute2``: one netlink dump of the links per pass (I/O edge).

The device manager runs in the host's network namespace; ``--netns NAME`` reads a named one
(``ip netns``) instead, never creating it.  A dump that fails is a failed pass, not "no links":
the caller keeps the recorded inventory.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def link_facts(netns: str = "") -> dict[str, LinkFacts]:
    """``{interface name: facts}`` of every link in the namespace."""
    from pyroute2 import IPRoute, NetNS

    try:
        socket = NetNS(netns, flags=0) if netns else IPRoute()
    except OSError as error:
        where = f"network namespace {netns!r}" if netns else "this network namespace"
        raise NetlinkError(f"cannot open netlink in {where}: {error}") from error
    try:
        links = socket.get_links()
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
    except Exception as error:  # pyroute2 raises its own NetlinkError, OSError and protocol errors
        raise NetlinkError(f"dumping the links failed: {error}") from error
    finally:
        socket.close()
