"""The node's recorded interface list, and how a discovery pass changes it (C.1, C.10 (1), (4)).

- A pass that fails (``class/net`` unreadable, netlink unanswered) keeps the recorded list and
  logs at error; a pass that enumerated and found nothing records the empty list.
- Before comparing, every ``failed`` link takes its ``firstSeenTime`` from the recorded one
  (interfaces by name, VFs by their PF's name and their own), so an ongoing failure compares equal.
- :attr:`Interfaces.recorded` is ``None`` until something is known: neither a pass nor the live
  ``Devices`` object has answered (then nothing may be withheld or overwritten).

``seed`` takes the list already in the live ``Devices.spec.interfaces`` (a restarted agent), after
checking it against the API model; a malformed one is logged and ignored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter
from pydantic import ValidationError

from api.models.devices import DeviceInterface
from nodeplugins.devicemanager.rdma import link as verdicts
from nodeplugins.devicemanager.rdma.discovery import EnumerationError, discover
from nodeplugins.devicemanager.rdma.netlink import LinkFacts, LinkReader, NetlinkError
from nodeplugins.devicemanager.rdma.sysfs import Sysfs

log = logging.getLogger("devicemanager.rdma")
PASSES = Counter("gpustack_device_manager_interface_passes", "Network-interface discovery passes", ["result"])


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_first_seen(
    records: list[dict[str, Any]], previous: list[dict[str, Any]] | None, now: str
) -> list[dict[str, Any]]:
    """``records`` with every failed link's first-seen time carried over from ``previous``."""
    before: dict[tuple[str, str], Any] = {}
    for record in previous or ():
        before[(record.get("name", ""), "")] = record.get("link")
        for vf in record.get("virtualFunctions") or ():
            before[(record.get("name", ""), vf.get("name", ""))] = vf.get("link")

    def merged(entry: dict[str, Any], key: tuple[str, str]) -> dict[str, Any]:
        if "link" not in entry:
            return entry
        return {**entry, "link": verdicts.with_first_seen(entry["link"], before.get(key), now)}

    out = []
    for record in records:
        copy = merged(record, (record["name"], ""))
        if record.get("virtualFunctions"):
            copy["virtualFunctions"] = [
                merged(vf, (record["name"], vf["name"])) for vf in record["virtualFunctions"]
            ]
        out.append(copy)
    return out


def checked(value: Any) -> list[dict[str, Any]] | None:
    """A live ``spec.interfaces`` value as records, or ``None`` when it is not a valid list."""
    if not isinstance(value, list):
        return None
    try:
        for item in value:
            DeviceInterface.model_validate(item)
    except ValidationError as error:
        log.error("Devices.spec.interfaces is malformed; not reusing it", extra={"error": str(error)})
        return None
    return [dict(item) for item in value]


class Interfaces:
    def __init__(
        self,
        sysfs: Sysfs,
        netns: str = "",
        *,
        facts: Callable[[], Mapping[str, LinkFacts]] | None = None,
        clock: Callable[[], str] = now_rfc3339,
    ) -> None:
        """``facts`` reads the link facts (default: netlink in ``netns``, the agent's own when "")."""
        self.sysfs = sysfs
        self.netns = netns
        self._facts = facts if facts is not None else LinkReader(netns)
        self._clock = clock
        self._lock = threading.Lock()
        self.recorded: list[dict[str, Any]] | None = None
        self.failures = 0  # consecutive failed passes

    def seed(self, live: Any) -> None:
        """Adopt the live object's list when nothing is recorded yet."""
        found = checked(live)
        with self._lock:
            if self.recorded is None and found is not None:
                self.recorded = found

    def current(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.recorded or ())

    def refresh(self) -> bool:
        """One pass; True when the recorded list changed."""
        try:
            found = discover(self.sysfs, self._facts())
        except (EnumerationError, NetlinkError) as error:
            PASSES.labels("failed").inc()
            self.failures += 1
            log.error(
                "enumerating the network interfaces failed; keeping the recorded list",
                extra={
                    "error": str(error),
                    "recorded": None if self.recorded is None else len(self.recorded),
                },
            )
            return False
        self.failures = 0
        PASSES.labels("ok").inc()
        with self._lock:
            merged = merge_first_seen(found, self.recorded, self._clock())
            if merged == self.recorded:
                return False
            self.recorded = merged
        log.info(
            "network interfaces changed",
            extra={
                "interfaces": [r["name"] for r in merged],
                "rdma": [r["name"] for r in merged if r.get("rdma")],
            },
        )
        return True
