"""The RDMA link verdict (C.2): whether a bound RDMA device's link can carry traffic.

Every port's ``state`` and ``phys_state`` are read (``"4: ACTIVE"``, ``"5: LinkUp"``) and judged:

==============  ===========================================================  =======
verdict         rule                                                         usable
==============  ===========================================================  =======
``ok``          some port is exactly ``ACTIVE`` with its physical link up    yes
``unverified``  no answer could be established (any unreadable port, an       yes
                unlistable or empty port directory, an unreadable tree)
``failed``      every port was read and none carries the link                no
==============  ===========================================================  =======

The whole enum name is compared (``ACTIVE_DEFER`` is not ``ACTIVE``); ``failed`` never comes from an
unreadable file.  A ``failed`` record carries the raw port values and the time the failure was
first seen, merged from the previous record by :func:`with_first_seen` (a fresh clock every pass
would make every pass differ and rewrite the object forever).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OK, UNVERIFIED, FAILED = "ok", "unverified", "failed"
PORT_ACTIVE = "ACTIVE"
PHYS_LINK_UP = "LinkUp"


@dataclass(frozen=True, slots=True)
class Port:
    """One port's two attributes as read: the raw text, or ``None`` with ``problem`` saying why."""

    name: str
    state: str | None
    phys_state: str | None
    problem: str = ""

    @property
    def readable(self) -> bool:
        return self.state is not None and self.phys_state is not None


def enum_name(raw: str) -> str:
    """``"4: ACTIVE"`` → ``"ACTIVE"``; a value without the number is taken whole."""
    _number, sep, name = raw.partition(":")
    return (name if sep else raw).strip()


def carries_link(port: Port) -> bool:
    return (
        port.state is not None
        and port.phys_state is not None
        and enum_name(port.state) == PORT_ACTIVE
        and enum_name(port.phys_state) == PHYS_LINK_UP
    )


RAW_SHOWN = 64  # characters of a port value a reason repeats


def _raw(port: Port) -> str:
    def shown(value: str | None) -> str:
        return repr(value if value is None or len(value) <= RAW_SHOWN else value[:RAW_SHOWN] + "...")

    return f"port {port.name}: state {shown(port.state)}, phys_state {shown(port.phys_state)}"


def verdict(device: str, ports: Sequence[Port] | None, listing_problem: str = "") -> dict[str, Any]:
    """The ``link`` record of RDMA device ``device`` (no first-seen time yet).  ``ports`` is
    ``None`` when the port directory could not be listed (``listing_problem`` says why)."""
    if ports is None:
        return {"state": UNVERIFIED, "reason": f"{device}: the ports could not be listed: {listing_problem}"}
    if not ports:
        return {"state": UNVERIFIED, "reason": f"{device}: no ports are listed"}
    if any(carries_link(p) for p in ports):
        return {"state": OK}
    unreadable = [p for p in ports if not p.readable]
    if unreadable:
        why = "; ".join(f"port {p.name}: {p.problem or 'unreadable'}" for p in unreadable)
        read = "; ".join(_raw(p) for p in ports if p.readable)
        return {
            "state": UNVERIFIED,
            "reason": f"{device}: {why}" + (f"; read: {read}" if read else ""),
        }
    return {
        "state": FAILED,
        "reason": f"{device}: no port is {PORT_ACTIVE} with {PHYS_LINK_UP}: "
        + "; ".join(_raw(p) for p in ports),
    }


def unreadable_tree(problem: str) -> dict[str, Any]:
    """The verdict of an interface whose RDMA tree exists but could not be read: the check could
    not ask, which is not an answer of no."""
    return {"state": UNVERIFIED, "reason": f"the RDMA device could not be read: {problem}"}


def with_first_seen(link: dict[str, Any], previous: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """``link`` with ``firstSeenTime`` when failed: the previous record's while it was failed
    too, else ``now``; never on another state."""
    out = {k: v for k, v in link.items() if k != "firstSeenTime"}
    if out.get("state") != FAILED:
        return out
    earlier = (previous or {}).get("firstSeenTime") if (previous or {}).get("state") == FAILED else None
    out["firstSeenTime"] = earlier if isinstance(earlier, str) and earlier else now
    return out


def usable(record: Mapping[str, Any]) -> bool:
    """An explicit verdict beats the ``rdma`` flag both ways; without one, usable = bound."""
    link = record.get("link")
    if isinstance(link, Mapping) and link.get("state"):
        return link.get("state") != FAILED
    return bool(record.get("rdma"))
